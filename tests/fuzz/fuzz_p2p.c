/* tests/fuzz/fuzz_p2p: what a p2p-tcp receiver reads from a sender before
 * any byte lands in its buffers (transfer/xfer_tcp.c).
 *
 * Input: a 48-byte hello, then the manifest text.  The hello is checked as
 * the receiver checks it; the text is planned against a fixed receiver
 * manifest, and against the manifest it describes itself (so the bucket
 * size of the hello cuts every shape the fuzzer finds).  A plan must cover
 * the byte space with contiguous chunks, and each stream's stripes must lie
 * inside their chunk and cover it.  The version header, the stripe header
 * and the checksum trailer are checked from the first bytes too. */
#include "tests/fuzz/fuzz.h"

#include "transfer/xfer_int.h"

static void plan(const xfer_manifest *m, const xfer_tcp_hello *h, const char *desc, size_t len)
{
	xfer_tcp_chunk *c = NULL;
	size_t nc = 0;
	xfer_err err;
	uint64_t *off = xfer_manifest_offsets(m);
	if (!off) abort();
	if (xfer_tcp_session_plan(m, off, h, desc, len, &c, &nc, &err) != 0) {
		FUZZ_CHECK(!c && !nc);
		free(off);
		return;
	}
	uint64_t at = 0;
	for (size_t k = 0; k < nc; k++) {
		FUZZ_CHECK(c[k].off == at && c[k].len <= h->bucket_bytes);
		uint64_t covered = c[k].off;
		for (uint32_t i = 0; i < h->nstreams; i++) {
			uint64_t a, b;
			xfer_tcp_stripe(&c[k], (int)h->nstreams, (int)i, &a, &b);
			FUZZ_CHECK(a == covered && a <= b && b <= c[k].off + c[k].len);
			covered = b;
		}
		FUZZ_CHECK(covered == c[k].off + c[k].len);
		at += c[k].len;
	}
	FUZZ_CHECK(at == xfer_manifest_bytes(m));
	free(c);
	free(off);
}

static const xfer_manifest *receiver(void)
{
	static xfer_manifest *m;
	static char bytes[4096];
	if (m) return m;
	xfer_err err;
	int64_t a[2] = { 16, 32 }, b[1] = { 100 };
	m = xfer_manifest_new();
	if (!m || xfer_manifest_add(m, "layer.0.w", XFER_BF16, 2, a, bytes, XFER_MEM_HOST, &err) != 0 ||
	    xfer_manifest_add(m, "layer.0.b", XFER_F32, 1, b, bytes, XFER_MEM_HOST, &err) != 0 ||
	    xfer_manifest_add(m, "step", XFER_I64, 0, NULL, bytes, XFER_MEM_HOST, &err) != 0)
		abort();
	return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	xfer_err err;
	xfer_tcp_hello h;
	uint64_t v;
	const xfer_manifest *mine = receiver();
	if (size >= sizeof(xfer_tcp_vhead)) xfer_tcp_vhead_parse(data, sizeof(xfer_tcp_vhead), mine, 1, &v, &err);
	if (size >= sizeof(xfer_tcp_vtrail)) xfer_tcp_vtrail_parse(data, sizeof(xfer_tcp_vtrail), 3, &err);
	if (size >= sizeof(xfer_tcp_shead)) {
		xfer_tcp_shead want = { .version = 2, .chunk = 1, .off = 4096, .len = 4096 };
		xfer_tcp_shead_parse(data, sizeof(xfer_tcp_shead), &want, &err);
	}
	if (size < XFER_TCP_HELLO_BYTES || xfer_tcp_hello_parse(data, XFER_TCP_HELLO_BYTES, &h, &err) != 0) return 0;
	if (h.kind != XFER_TCP_CONTROL) return 0;
	FUZZ_CHECK(h.nstreams >= 1 && h.nstreams <= XFER_TCP_MAX_STREAMS && h.bucket_bytes > 0);
	const char *desc = (const char *)data + XFER_TCP_HELLO_BYTES;
	size_t len = size - XFER_TCP_HELLO_BYTES;
	plan(mine, &h, desc, len);
	xfer_manifest *theirs = xfer_manifest_parse(desc, len, 1000, &err);
	if (theirs) {
		plan(theirs, &h, desc, len);
		xfer_manifest_free(&theirs);
	}
	return 0;
}
