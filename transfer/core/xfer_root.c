/* transfer/core/xfer_root.c: the root of a version's checksums (issue 23).
 *
 * A data path checks each tensor against a sum that came with the data (the
 * disk folder's index, the p2p stream's records), so a forged version that
 * is consistent with itself passes.  The root binds those sums to what the
 * sender declared over its authenticated channel to the head: XXH3-128 over
 *   "skein-root-1\0" | the manifest digest (16) | the sum kind (1 byte) |
 *   each tensor's sum in manifest order (lo, hi: 8 bytes little-endian each)
 * The sender computes it from the sums it computed; a receiver from the sums
 * it verified against; the head commits only when they agree.  Not a
 * signature: it needs the channel to the head to be authentic. */
#include "transfer/core/xfer_int.h"

#include <stdlib.h>
#include <string.h>
#include "transfer/core/xfer_hash.h"

static const char ROOT_TAG[] = "skein-root-1";

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int xfer_root_of(const unsigned char digest[16], xfer_sum_kind kind, const xfer_sum *sums, size_t n,
		 unsigned char out[16], xfer_err *err)
{
	size_t head = sizeof ROOT_TAG + 16 + 1, len = head + n * 16;
	unsigned char *b = malloc(len);
	if (!b) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	memcpy(b, ROOT_TAG, sizeof ROOT_TAG);
	memcpy(b + sizeof ROOT_TAG, digest, 16);
	b[sizeof ROOT_TAG + 16] = (unsigned char)kind;
	for (size_t i = 0; i < n; i++) {
		put64(b + head + 16 * i, sums[i].lo);
		put64(b + head + 16 * i + 8, sums[i].hi);
	}
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(b, len));
	memcpy(out, c.digest, 16);
	free(b);
	return 0;
}

int xfer_root_keep(xfer_endpoint *ep, uint64_t v, xfer_sum_kind kind, const xfer_sum *sums, xfer_err *err)
{
	ep->root_version = 0;
	if (!ep->have_mdigest) {
		if (xfer_manifest_digest(ep->m, ep->mdigest, err) != 0) return -1;
		ep->have_mdigest = 1;
	}
	if (xfer_root_of(ep->mdigest, kind, sums, ep->m->n, ep->root, err) != 0) return -1;
	ep->root_version = v;
	return 0;
}

void xfer_root_hex(const unsigned char root[16], char out[33])
{
	static const char hx[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		out[2 * i] = hx[root[i] >> 4];
		out[2 * i + 1] = hx[root[i] & 15];
	}
	out[32] = 0;
}

int xfer_manifest_digest(const xfer_manifest *m, unsigned char out[16], xfer_err *err)
{
	size_t len;
	char *d = xfer_manifest_describe(m, &len);
	if (!d) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(d, len));
	memcpy(out, c.digest, 16);
	free(d);
	return 0;
}
