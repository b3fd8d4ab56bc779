/* transfer/core/xfer_hash.h: xxHash, with the vector width picked at run time.
 *
 * Debian's libxxhash carries xxHash's x86 dispatcher (XXH3_*_dispatch: SSE2,
 * AVX2 or AVX-512, whichever the CPU has); its header maps the XXH3 calls
 * onto it, so one build runs at the full width of any x86-64 machine.  The
 * dispatcher is in the shared library only (not in Debian's libxxhash.a):
 * static builds define SKEIN_XXH_NO_DISPATCH and get the plain calls (SSE2
 * on x86-64), as do machines without the header. */
#ifndef SKEIN_XFER_HASH_H
#define SKEIN_XFER_HASH_H

#include <xxhash.h>
#if defined(__x86_64__) && defined(__has_include) && !defined(SKEIN_XXH_NO_DISPATCH)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#endif
