/* tests/unit/xfer_wire_test.c: libskein's decoders of bytes from a peer or
 * from the shared folder, as pure functions: the disk-delta index, the
 * delta payload's sizes, the p2p-tcp and p2p-ucx hellos and the receiver's
 * plan from them.
 * Each bound here was found missing by the fuzz targets (tests/fuzz/). */
#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_int.h"

#include "transfer/core/xfer_hash.h"

/* An element count whose product with the element size wraps around to the
 * tensor's size used to pass, and the indexes then ran past the tensor. */
T_TEST(xfer_delta_refuses_wrapping_element_count)
{
	uint64_t t[8] = { 0 }, nel = (1ull << 61) + 8, cnt = 1, glen = 2;
	unsigned char p[42];
	memcpy(p, "SKD1", 4);
	p[4] = XFER_ENC_OVERWRITE;
	p[5] = 8;
	p[6] = p[7] = 0;
	memcpy(p + 8, &nel, 8);
	memcpy(p + 16, &cnt, 8);
	memcpy(p + 24, &glen, 8);
	p[32] = 0xe8; /* gap 1000: element 1000 of a tensor of 8 */
	p[33] = 0x07;
	memset(p + 34, 0xaa, 8);
	xfer_err e;
	T_EQ(xfer_delta_apply(XFER_ENC_OVERWRITE, 8, t, sizeof t, p, sizeof p, NULL, NULL, &e), -1);
	T_EQ(e.code, XFER_EMISMATCH);
	for (int i = 0; i < 8; i++) T_EQ(t[i], 0);
}

static char *with_end(const char *body, size_t *len)
{
	size_t n = strlen(body);
	char *s = malloc(n + 32);
	T_CHECK(s);
	memcpy(s, body, n);
	n += (size_t)snprintf(s + n, 32, "end %016llx\n", (unsigned long long)XXH3_64bits(s, n));
	*len = n;
	return s;
}

T_TEST(xfer_disk_index_parse_roundtrip_and_bounds)
{
	xfer_disk_tensor ts[2] = {
		{ .name = "w", .dtype = "bf16", .shape = "10x30", .nbytes = 600, .offset = 0, .stored = 50, .changed = 3,
		  .stored_sum = 0x1234, .sum = { 1, 2 } },
		{ .name = "b", .dtype = "f32", .shape = "7", .nbytes = 28, .offset = 50, .stored = 28, .changed = 7,
		  .stored_sum = 0x5678, .sum = { 3, 4 } },
	};
	xfer_disk_index x = { .chain = 0xabc, .version = 5, .base = 4, .data_bytes = 78, .enc = XFER_ENC_XOR, .zstd = 1,
			      .n = 2, .t = ts }, y;
	size_t len;
	char *txt = xfer_disk_index_format(&x, &len);
	xfer_err e;
	T_EQ(xfer_disk_index_parse(txt, len, 5, "i", &y, &e), 0);
	T_EQ(y.chain, 0xabc);
	T_EQ(y.base, 4);
	T_EQ(y.enc, XFER_ENC_XOR);
	T_EQ(y.zstd, 1);
	T_EQ(y.n, 2);
	T_STREQ(y.t[1].name, "b");
	T_EQ(y.t[1].offset, 50);
	T_CHECK(xfer_sum_equal(y.t[1].sum, ts[1].sum));
	xfer_disk_index_free(&y);
	/* another version, a torn end line */
	T_EQ(xfer_disk_index_parse(txt, len, 6, "i", &y, &e), -1);
	T_EQ(xfer_disk_index_parse(txt, len - 1, 5, "i", &y, &e), -1);
	T_CHECK(strstr(e.msg, "no end line"));
	T_CHECK(y.t == NULL);
	free(txt);
	/* a count the text cannot hold is refused before it is allocated (it
	 * was calloc'd: 16M tensors, 8 GB) */
	txt = with_end("skein-weights 1\nversion 1\ntensors 16777216\n", &len);
	T_EQ(xfer_disk_index_parse(txt, len, 1, "i", &y, &e), -1);
	T_CHECK(strstr(e.msg, "bad tensor count"));
	free(txt);
	/* a tensor outside the data */
	txt = with_end("skein-weights 1\nversion 1\nkind full\ndata_bytes 10\ntensors 1\n"
		       "tensor w u8 4 4 8 4 4 0123456789abcdef0123456789abcdef 0\n", &len);
	T_EQ(xfer_disk_index_parse(txt, len, 1, "i", &y, &e), -1);
	T_CHECK(strstr(e.msg, "outside the data"));
	free(txt);
	/* inside the data as first announced, outside once it is announced
	 * again (fuzz_disk_index found the second data_bytes line) */
	txt = with_end("skein-weights 1\nversion 1\nkind full\ndata_bytes 10\ntensors 1\n"
		       "tensor w u8 4 4 0 4 4 0123456789abcdef0123456789abcdef 0\ndata_bytes 2\n", &len);
	T_EQ(xfer_disk_index_parse(txt, len, 1, "i", &y, &e), -1);
	T_CHECK(strstr(e.msg, "outside the data"));
	free(txt);
}

/* Format 1 (no checksum line: xxh3-128) still reads; format 2 names its
 * checksum; a newer format or an unknown checksum is refused by name. */
T_TEST(xfer_disk_index_formats)
{
	static const char *const tensor = "tensor w u8 4 4 0 4 4 0123456789abcdef0123456789abcdef 0\n";
	static const struct { const char *head; int ok; xfer_sum_kind kind; const char *msg; } cases[] = {
		{ "skein-weights 1\n", 1, XFER_SUM_XXH3_128, NULL },
		{ "skein-weights 2\nchecksum tree-xxh3-256k\n", 1, XFER_SUM_TREE, NULL },
		{ "skein-weights 2\nchecksum xxh3-128\n", 1, XFER_SUM_XXH3_128, NULL },
		{ "skein-weights 2\nchecksum blake9\n", 0, 0, "checksum \"blake9\" is unknown" },
		{ "skein-weights 1\nchecksum tree-xxh3-256k\n", 0, 0, "checksum line in a format 1" },
		{ "skein-weights 3\nchecksum tree-xxh3-256k\n", 0, 0, "format 3 is newer than this reader" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char body[512];
		snprintf(body, sizeof body, "%sversion 1\nkind full\ndata_bytes 10\ntensors 1\n%s", cases[i].head, tensor);
		size_t len;
		char *txt = with_end(body, &len);
		xfer_disk_index y;
		xfer_err e = { 0 };
		int rc = xfer_disk_index_parse(txt, len, 1, "i", &y, &e);
		T_EQ(rc, cases[i].ok ? 0 : -1);
		if (rc == 0) {
			T_EQ(y.sum_kind, cases[i].kind);
			/* and it writes back in the same format */
			size_t olen;
			char *out = xfer_disk_index_format(&y, &olen);
			const char *want = cases[i].kind == XFER_SUM_TREE ? cases[i].head : "skein-weights 1\nchain";
			T_CHECK(!strncmp(out, want, strlen(want)));
			free(out);
			xfer_disk_index_free(&y);
		} else {
			T_EQ(e.code, XFER_EFORMAT);
			if (!strstr(e.msg, cases[i].msg)) T_FAIL("case %zu: %s", i, e.msg);
		}
		free(txt);
	}
}

T_TEST(xfer_tcp_hello_and_plan)
{
	xfer_manifest *m = xfer_manifest_new();
	xfer_err e;
	int64_t big[1] = { 4 << 20 }, small[1] = { 10 };
	unsigned char *w = calloc(4 << 20, 1);
	T_CHECK(w);
	T_EQ(xfer_manifest_add(m, "w", XFER_U8, 1, big, w, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "b", XFER_F32, 1, small, w, XFER_MEM_HOST, &e), 0);
	uint64_t *off = xfer_manifest_offsets(m);
	size_t dl;
	char *desc = xfer_manifest_describe(m, &dl);

	xfer_tcp_hello h = { .kind = XFER_TCP_CONTROL, .nstreams = 4, .session = 9, .bucket_bytes = 1 << 20,
			     .manifest_len = dl }, g;
	unsigned char raw[XFER_TCP_HELLO_BYTES];
	xfer_tcp_hello_pack(&h, raw);
	T_EQ(xfer_tcp_hello_parse(raw, sizeof raw, &g, &e), 0);
	T_EQ(g.nstreams, 4);
	T_EQ(g.session, 9);
	T_EQ(xfer_tcp_hello_parse(raw, sizeof raw - 1, &g, &e), -1);
	raw[0] ^= 1;
	T_EQ(xfer_tcp_hello_parse(raw, sizeof raw, &g, &e), -1);
	h.nstreams = XFER_TCP_MAX_STREAMS + 1;
	xfer_tcp_hello_pack(&h, raw);
	T_EQ(xfer_tcp_hello_parse(raw, sizeof raw, &g, &e), -1);
	h.nstreams = 4;

	xfer_span *c;
	size_t nc;
	T_EQ(xfer_chunk_plan(m, off, h.bucket_bytes, desc, dl, &c, &nc, &e), 0);
	T_EQ(nc, 9); /* 4 MiB in half-buckets of 512 KiB, and the small bucket */
	T_EQ(c[8].off, 4 << 20);
	free(c);
	/* a bucket of one byte made a chunk per byte: 64 MiB of table for
	 * 4 MiB of weights, from a hello nobody authenticated */
	T_EQ(xfer_chunk_plan(m, off, 1, desc, dl, &c, &nc, &e), -1);
	T_CHECK(strstr(e.msg, "chunks"));
	T_CHECK(c == NULL);
	/* more tensors than the receiver's stops the parse early */
	const char *more = "w u8 4194304 4194304\nb f32 10 40\nc u8 1 1\nd u8 1 1\n";
	T_EQ(xfer_chunk_plan(m, off, h.bucket_bytes, more, strlen(more), &c, &nc, &e), -1);
	T_CHECK(strstr(e.msg, "more than 2 tensors"));
	free(desc);
	free(off);
	xfer_manifest_free(&m);
	free(w);
}

/* Wire 3: a wire 2 hello is named and refused; tree cuts fall on tree
 * boundaries of the tensor they cut, and a hash record must be the one
 * the receiver's plan expects. */
T_TEST(xfer_tcp_wire3_old_hello_tree_cuts_records)
{
	xfer_err e;
	xfer_tcp_hello h = { .kind = XFER_TCP_CONTROL, .nstreams = 2, .bucket_bytes = 1 << 20, .manifest_len = 10 }, g;
	unsigned char raw[XFER_TCP_HELLO_BYTES];
	xfer_tcp_hello_pack(&h, raw);
	T_CHECK(!xfer_tcp_hello_is_v2(raw, sizeof raw));
	memcpy(raw, "SKXFER2", 8);
	T_CHECK(xfer_tcp_hello_is_v2(raw, sizeof raw));
	T_EQ(xfer_tcp_hello_parse(raw, sizeof raw, &g, &e), -1);
	T_EQ(e.code, XFER_EFORMAT);
	T_CHECK(strstr(e.msg, "wire 2") && strstr(e.msg, "upgrade the sender"));

	/* tensors of 1 MiB + 4000, 3 bytes, 3 MiB + 1: offsets not on tree
	 * boundaries of the byte space, so cuts must follow each tensor */
	int64_t s1[1] = { (1 << 20) + 4000 }, s2[1] = { 3 }, s3[1] = { (3 << 20) + 1 };
	unsigned char *w = calloc((4 << 20) + 8192, 1);
	T_CHECK(w);
	xfer_manifest *m = xfer_manifest_new();
	T_XOK(xfer_manifest_add(m, "a", XFER_U8, 1, s1, w, XFER_MEM_HOST, err_));
	T_XOK(xfer_manifest_add(m, "b", XFER_U8, 1, s2, w, XFER_MEM_HOST, err_));
	T_XOK(xfer_manifest_add(m, "c", XFER_U8, 1, s3, w, XFER_MEM_HOST, err_));
	uint64_t *off = xfer_manifest_offsets(m);
	static const uint64_t buckets[] = { 1, 4096, 1 << 20, 3 << 20, 64 << 20 };
	for (size_t bi = 0; bi < sizeof buckets / sizeof *buckets; bi++) {
		xfer_span *c;
		size_t nc;
		T_XOK(xfer_chunks_cut(m, off, buckets[bi], 1, &c, &nc, err_));
		uint64_t at = 0;
		for (size_t k = 0; k < nc; k++) {
			T_EQ(c[k].off, at);
			uint64_t end = c[k].off + c[k].len;
			for (size_t t = 0; t < 3; t++)
				if (off[t] < end && end < off[t + 1]) T_EQ((end - off[t]) % XFER_TREE_CHUNK, 0);
			at = end;
		}
		T_EQ(at, xfer_manifest_bytes(m));
		free(c);
	}
	free(off);
	xfer_manifest_free(&m);
	free(w);

	xfer_tcp_hrec want = { .ntops = 2, .chunk = 5, .nhash = 7 }, r = want;
	memcpy(r.magic, "SKH1", 4);
	T_XOK(xfer_tcp_hrec_parse(&r, sizeof r, &want, err_));
	r.nhash = 1u << 30; /* more than the chunk holds: refused before any is read */
	T_EQ(xfer_tcp_hrec_parse(&r, sizeof r, &want, &e), -1);
	T_CHECK(strstr(e.msg, "hash record"));
	r = want;
	memcpy(r.magic, "SKT1", 4);
	T_EQ(xfer_tcp_hrec_parse(&r, sizeof r, &want, &e), -1);
	T_EQ(xfer_tcp_hrec_parse(&r, sizeof r - 1, &want, &e), -1);
}

/* p2p-ucx's hello (its transports and boot id) takes the same plan, so the
 * same bounds; its strings come back terminated whatever the sender sent. */
T_TEST(xfer_ucx_hello_parse_bounds)
{
	xfer_ucx_hello h = { .flags = XFER_UCX_F_AUTO, .kinds = 3, .nstripes = 4, .bucket_bytes = 1 << 20,
			     .manifest_len = 100 }, g;
	snprintf(h.boot_id, sizeof h.boot_id, "0b5d1c2e-3f4a-4b6c-8d9e-0f1a2b3c4d5e");
	snprintf(h.host, sizeof h.host, "node-1");
	unsigned char raw[XFER_UCX_HELLO_BYTES];
	xfer_err e;
	xfer_ucx_hello_pack(&h, raw);
	T_EQ(xfer_ucx_hello_parse(raw, sizeof raw, &g, &e), 0);
	T_EQ(g.kinds, 3);
	T_EQ(g.nstripes, 4);
	T_STREQ(g.boot_id, h.boot_id);
	T_STREQ(g.host, "node-1");
	T_EQ(xfer_ucx_hello_parse(raw, sizeof raw - 1, &g, &e), -1);
	/* a p2p-tcp hello is not one */
	xfer_tcp_hello t = { .kind = XFER_TCP_CONTROL, .nstreams = 4, .bucket_bytes = 1 << 20 };
	unsigned char traw[XFER_UCX_HELLO_BYTES] = { 0 };
	xfer_tcp_hello_pack(&t, traw);
	T_EQ(xfer_ucx_hello_parse(traw, sizeof traw, &g, &e), -1);
	/* strings without their NUL */
	memset(h.boot_id, 'b', sizeof h.boot_id);
	memset(h.host, 'h', sizeof h.host);
	xfer_ucx_hello_pack(&h, raw);
	T_EQ(xfer_ucx_hello_parse(raw, sizeof raw, &g, &e), 0);
	T_EQ(strlen(g.boot_id), sizeof g.boot_id - 1);
	T_EQ(strlen(g.host), sizeof g.host - 1);
	struct { uint32_t stripes; uint64_t bucket, mlen; } bad[] = {
		{ 0, 1 << 20, 100 }, { XFER_UCX_MAX_STRIPES + 1, 1 << 20, 100 }, { 4, 0, 100 },
		{ 4, 1 << 20, XFER_P2P_MANIFEST_MAX + 1ull } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		h.nstripes = bad[i].stripes;
		h.bucket_bytes = bad[i].bucket;
		h.manifest_len = bad[i].mlen;
		xfer_ucx_hello_pack(&h, raw);
		T_EQ(xfer_ucx_hello_parse(raw, sizeof raw, &g, &e), -1);
		T_CHECK(strstr(e.msg, "p2p-ucx hello"));
	}
}

T_TEST(xfer_manifest_refuses_size_overflow)
{
	xfer_manifest *m = xfer_manifest_new();
	xfer_err e;
	char buf[8];
	int64_t wraps[2] = { 1ll << 62, 2 }, half[1] = { 1ll << 62 };
	/* 2^63 elements of 8 bytes wrapped around to 0 bytes */
	T_EQ(xfer_manifest_add(m, "a", XFER_I64, 2, wraps, buf, XFER_MEM_HOST, &e), -1);
	T_CHECK(strstr(e.msg, "overflows"));
	T_EQ(xfer_manifest_add(m, "b", XFER_U8, 1, half, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "c", XFER_U8, 1, half, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "d", XFER_U8, 1, half, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "e", XFER_U8, 1, half, buf, XFER_MEM_HOST, &e), -1); /* the total */
	T_EQ(xfer_manifest_count(m), 3);
	xfer_manifest_free(&m);
}
