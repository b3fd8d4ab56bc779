/* transfer/xfer_hash.h: xxHash, with the vector width picked at run time.
 *
 * Debian's libxxhash carries xxHash's x86 dispatcher (XXH3_*_dispatch: SSE2,
 * AVX2 or AVX-512, whichever the CPU has); its header maps the XXH3 calls
 * onto it, so one build runs at the full width of any x86-64 machine.  The
 * plain calls (SSE2 on x86-64) where it is absent. */
#ifndef SKEIN_XFER_HASH_H
#define SKEIN_XFER_HASH_H

#include <xxhash.h>
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#endif
