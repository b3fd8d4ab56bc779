/* tests/fuzz/fuzz_p2p: what a p2p receiver (p2p-tcp, transfer/paths/xfer_tcp.c,
 * or p2p-ucx, transfer/paths/xfer_ucx.c) reads from a sender before any byte
 * lands in its buffers.
 *
 * Input: a hello, then the manifest text.  As the p2p chooser does, the
 * first 8 bytes pick the hello: p2p-ucx's (144 bytes) when they are its
 * magic, else p2p-tcp's (48 bytes).  The hello is checked as the receiver
 * checks it; the text is planned (xfer_chunk_plan, shared by both paths)
 * against a fixed receiver manifest, and against the manifest it describes
 * itself (so the bucket size of the hello cuts every shape the fuzzer
 * finds), with p2p-ucx's cuts and p2p-tcp's tree cuts.  A plan must cover
 * the byte space with contiguous chunks, and each stream's stripes must lie
 * inside their chunk and cover it; a tree cut inside a tensor must fall on
 * one of its tree-chunk boundaries.  The version header, the stripe header
 * and the chunk hash record header are checked from the first bytes too. */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "transfer/core/xfer_int.h"

static void plan(const xfer_manifest *m, uint64_t bucket_bytes, uint32_t nstreams, const char *desc, size_t len,
		 int tree)
{
	xfer_span *c = NULL;
	size_t nc = 0;
	xfer_err err;
	uint64_t *off = xfer_manifest_offsets(m);
	if (!off) abort();
	if (xfer_chunk_plan_cut(m, off, bucket_bytes, tree, desc, len, &c, &nc, &err) != 0) {
		FUZZ_CHECK(!c && !nc);
		free(off);
		return;
	}
	uint64_t at = 0;
	for (size_t k = 0; k < nc; k++) {
		uint64_t most = tree && bucket_bytes < 4 * (uint64_t)XFER_TREE_CHUNK ? 2 * (uint64_t)XFER_TREE_CHUNK
										     : bucket_bytes;
		FUZZ_CHECK(c[k].off == at && c[k].len <= most);
		uint64_t end = c[k].off + c[k].len;
		for (size_t t = 0; tree && t < m->n; t++) /* a cut inside a tensor is on its tree boundary */
			if (off[t] < end && end < off[t + 1]) FUZZ_CHECK((end - off[t]) % XFER_TREE_CHUNK == 0);
		uint64_t covered = c[k].off;
		for (uint32_t i = 0; i < nstreams; i++) {
			uint64_t a, b;
			xfer_stripe_of(c[k], (int)nstreams, (int)i, &a, &b);
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

/* The hello's stream count, bucket size and length, or 0 when the
 * receiver would refuse it. */
static size_t hello(const uint8_t *data, size_t size, uint32_t *nstreams, uint64_t *bucket_bytes)
{
	xfer_err err;
	if (size >= 8 && !memcmp(data, XFER_UCX_MAGIC "\0", 8)) {
		xfer_ucx_hello u;
		if (size < XFER_UCX_HELLO_BYTES || xfer_ucx_hello_parse(data, XFER_UCX_HELLO_BYTES, &u, &err) != 0)
			return 0;
		FUZZ_CHECK(u.nstripes >= 1 && u.nstripes <= XFER_UCX_MAX_STRIPES && u.bucket_bytes > 0 &&
			   u.manifest_len <= XFER_P2P_MANIFEST_MAX);
		FUZZ_CHECK(strlen(u.boot_id) < sizeof u.boot_id && strlen(u.host) < sizeof u.host);
		*nstreams = u.nstripes;
		*bucket_bytes = u.bucket_bytes;
		return XFER_UCX_HELLO_BYTES;
	}
	xfer_tcp_hello h;
	if (size < XFER_TCP_HELLO_BYTES || xfer_tcp_hello_parse(data, XFER_TCP_HELLO_BYTES, &h, &err) != 0 ||
	    h.kind != XFER_TCP_CONTROL)
		return 0;
	FUZZ_CHECK(h.nstreams >= 1 && h.nstreams <= XFER_TCP_MAX_STREAMS && h.bucket_bytes > 0 &&
		   h.manifest_len <= XFER_P2P_MANIFEST_MAX);
	*nstreams = h.nstreams;
	*bucket_bytes = h.bucket_bytes;
	return XFER_TCP_HELLO_BYTES;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	xfer_err err;
	uint64_t v, bucket_bytes;
	uint32_t nstreams;
	const xfer_manifest *mine = receiver();
	if (size >= sizeof(xfer_vhead)) xfer_vhead_parse(data, sizeof(xfer_vhead), mine, 1, &v, &err);
	if (size >= sizeof(xfer_tcp_hrec)) {
		xfer_tcp_hrec want = { .ntops = 1, .chunk = 2, .nhash = 3 };
		xfer_tcp_hrec_parse(data, sizeof(xfer_tcp_hrec), &want, &err);
	}
	if (size >= sizeof(xfer_tcp_shead)) {
		xfer_tcp_shead want = { .version = 2, .chunk = 1, .off = 4096, .len = 4096 };
		xfer_tcp_shead_parse(data, sizeof(xfer_tcp_shead), &want, &err);
	}
	size_t hl = hello(data, size, &nstreams, &bucket_bytes);
	if (!hl) return 0;
	const char *desc = (const char *)data + hl;
	size_t len = size - hl;
	xfer_manifest *theirs = xfer_manifest_parse(desc, len, 1000, &err);
	for (int tree = 0; tree < 2; tree++) {
		plan(mine, bucket_bytes, nstreams, desc, len, tree);
		if (theirs) plan(theirs, bucket_bytes, nstreams, desc, len, tree);
	}
	xfer_manifest_free(&theirs);
	return 0;
}
