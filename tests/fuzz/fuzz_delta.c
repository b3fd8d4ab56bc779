/* tests/fuzz/fuzz_delta: a disk-delta payload applied to a tensor
 * (transfer/core/xfer_delta.c), the bytes a receiver reads from the shared
 * folder.
 *
 * Input: 1 byte of options (bit 0 XOR, bits 1-2 the element size 1/2/4/8,
 * bit 3 zstd, bit 4 with an undo journal), 2 bytes of element count (low
 * 12 bits), then
 * the payload.  The tensor is a heap block of exactly its size, so ASan
 * catches any write outside it.  Properties: a refused payload changes
 * nothing; the checksum returned is the result's; the journal puts the old
 * bytes back; applying twice gives the old bytes back (XOR) or the same
 * result (overwrite). */
#include "tests/fuzz/fuzz.h"

#include "transfer/core/xfer_int.h"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static xfer_journal *jr;
	if (size < 3) return 0;
	xfer_encoding enc = data[0] & 1 ? XFER_ENC_XOR : XFER_ENC_OVERWRITE;
	size_t esz = (size_t)1 << ((data[0] >> 1) & 3);
	int zstd = data[0] & 8, journal = data[0] & 16;
	size_t nel = ((size_t)data[1] | (size_t)data[2] << 8) & 4095, n = nel * esz;
	const uint8_t *payload = data + 3;
	size_t plen = size - 3;
	xfer_err err;
	xfer_buf z = { 0 };
	if (zstd) {
		if (xfer_zstd_decompress(payload, plen, &z, 64 + nel * (esz + 10), &err) != 0) {
			xfer_buf_free(&z);
			return 0;
		}
		payload = z.p;
		plen = z.len;
	}
	uint8_t *t = malloc(n ? n : 1), *orig = malloc(n ? n : 1), *once = malloc(n ? n : 1);
	if (!t || !orig || !once) abort();
	fill(t, n, (uint32_t)size);
	memcpy(orig, t, n);
	if (journal && !jr && !(jr = xfer_journal_new("/tmp", &err))) abort();
	if (journal) xfer_journal_reset(jr);
	xfer_sum sum;
	if (xfer_delta_apply(enc, esz, t, n, payload, plen, journal ? jr : NULL, &sum, &err) != 0) {
		FUZZ_CHECK(!memcmp(t, orig, n));
		goto out;
	}
	FUZZ_CHECK(xfer_sum_equal(sum, xfer_checksum(t, n)));
	memcpy(once, t, n);
	if (journal) {
		FUZZ_CHECK(xfer_journal_undo(jr, &err) == 0);
		FUZZ_CHECK(!memcmp(t, orig, n));
		memcpy(t, once, n);
	}
	FUZZ_CHECK(xfer_delta_apply(enc, esz, t, n, payload, plen, NULL, NULL, &err) == 0);
	FUZZ_CHECK(!memcmp(t, enc == XFER_ENC_XOR ? orig : once, n));
out:
	free(t);
	free(orig);
	free(once);
	xfer_buf_free(&z);
	return 0;
}
