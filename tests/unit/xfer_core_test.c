/* tests/unit/xfer_core_test.c: libskein's manifest, buckets, checksum, delta
 * codec, undo journal and path table, without any I/O between processes.
 * The journal's device records are checked with host memory standing in for
 * the device (xfer_hooks.device_copy), which also checks that every device
 * byte is reached through that copy and nothing else. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_int.h"

T_TEST(xfer_manifest_rejects_bad_input)
{
	xfer_manifest *m = xfer_manifest_new();
	xfer_err e;
	int64_t shape[2] = { 4, 4 };
	char buf[64];
	T_EQ(xfer_manifest_add(m, "a b", XFER_F32, 2, shape, buf, XFER_MEM_HOST, &e), -1);
	T_EQ(e.code, XFER_EINVAL);
	T_CHECK(strstr(e.msg, "no spaces"));
	T_EQ(xfer_manifest_add(m, "x", (xfer_dtype)99, 2, shape, buf, XFER_MEM_HOST, &e), -1);
	T_CHECK(strstr(e.msg, "unknown dtype"));
	T_EQ(xfer_manifest_add(m, "x", XFER_F32, 2, shape, NULL, XFER_MEM_HOST, &e), -1);
	T_EQ(xfer_manifest_add(m, "x", XFER_F32, 9, shape, buf, XFER_MEM_HOST, &e), -1);
	T_EQ(xfer_manifest_add(m, "x", XFER_U8, 2, shape, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "x", XFER_U8, 2, shape, buf, XFER_MEM_HOST, &e), -1);
	T_CHECK(strstr(e.msg, "twice"));
	T_EQ(xfer_manifest_bytes(m), 16);
	xfer_manifest *o = xfer_manifest_new();
	T_EQ(xfer_manifest_add(o, "x", XFER_I8, 2, shape, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_compare(m, o, &e), -1);
	T_EQ(e.code, XFER_EMISMATCH);
	T_CHECK(strstr(e.msg, "dtype u8") && strstr(e.msg, "i8"));
	xfer_manifest_free(&m);
	xfer_manifest_free(&m);
	xfer_manifest_free(&o);
	xfer_dtype d;
	T_EQ(xfer_dtype_parse("bf16", &d), 0);
	T_EQ(d, XFER_BF16);
	T_EQ(xfer_dtype_size(XFER_F64), 8);
	T_EQ(xfer_dtype_parse("float128", &d), -1);
}

T_TEST(xfer_buckets_follow_manifest_order)
{
	xfer_manifest *m = xfer_manifest_new();
	static char buf[4096];
	xfer_err e;
	/* 100, 100, 300 (alone: > 256), 50, 3 x f32 (12 bytes) -> buckets of 256 */
	int64_t s1[1] = { 100 }, s2[1] = { 300 }, s3[1] = { 50 }, s4[1] = { 3 };
	T_EQ(xfer_manifest_add(m, "a", XFER_U8, 1, s1, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "b", XFER_U8, 1, s1, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "c", XFER_U8, 1, s2, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "d", XFER_U8, 1, s3, buf, XFER_MEM_HOST, &e), 0);
	T_EQ(xfer_manifest_add(m, "e", XFER_F32, 1, s4, buf, XFER_MEM_HOST, &e), 0);
	xfer_bucket *b;
	size_t n;
	T_EQ(xfer_buckets(m, 256, &b, &n, &e), 0);
	T_EQ(n, 3);
	T_EQ(b[0].first, 0);
	T_EQ(b[0].count, 2);
	T_EQ(b[0].bytes, 200);
	T_EQ(b[1].first, 2);
	T_EQ(b[1].alone, 1);
	T_EQ(b[1].bytes, 300);
	T_EQ(b[2].first, 3);
	T_EQ(b[2].count, 2);
	T_EQ(b[2].bytes, 62);
	T_EQ(b[2].packed_bytes, 64); /* f32 aligned to 4: 50 -> 52 */
	free(b);
	T_EQ(xfer_buckets(m, 0, &b, &n, &e), 0); /* default 512 MiB: one bucket */
	T_EQ(n, 1);
	free(b);
	xfer_manifest_free(&m);
}

T_TEST(xfer_checksum_is_xxh3_128)
{
	xfer_sum a = xfer_checksum("skein", 5), b = xfer_checksum("skeim", 5);
	T_CHECK(!xfer_sum_equal(a, b));
	char hex[33];
	xfer_sum_hex(a, hex);
	xfer_sum c;
	T_EQ(xfer_sum_parse(hex, &c), 0);
	T_CHECK(xfer_sum_equal(a, c));
	T_EQ(xfer_sum_parse("xyz", &c), -1);
	/* xxh3-128 of the empty input, a published constant */
	xfer_sum_hex(xfer_checksum("", 0), hex);
	T_STREQ(hex, "99aa06d3014798d86001c324468d497f");
}

/* Every element size, both encodings, none / some / all changed, with zstd. */
T_TEST(xfer_delta_roundtrip)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	size_t sizes[] = { 1, 2, 4, 8 };
	double fracs[] = { 0.0, 0.01, 0.3, 1.0 };
	for (int enc = 0; enc < 2; enc++)
		for (size_t si = 0; si < 4; si++)
			for (size_t fi = 0; fi < 4; fi++)
				for (int z = 0; z < 2; z++) {
					size_t esz = sizes[si], n = esz * (1 + sk_rng_below(&r, 5000));
					unsigned char *old = malloc(n), *nw = malloc(n), *shadow = malloc(n), *dst = malloc(n);
					tm_fill(&r, old, n);
					memcpy(nw, old, n);
					for (size_t i = 0; i < n; i++)
						if (sk_rng_unit(&r) < fracs[fi]) nw[i] ^= (unsigned char)(1 + sk_rng_below(&r, 255));
					memcpy(shadow, old, n);
					memcpy(dst, old, n);
					xfer_buf out = { 0 }, zb = { 0 }, back = { 0 };
					uint64_t changed;
					xfer_sum sum;
					T_XOK(xfer_delta_encode((xfer_encoding)enc, esz, shadow, nw, n, 1, &out, &changed, &sum, err_));
					T_CHECK(memcmp(shadow, nw, n) == 0);
					T_CHECK(xfer_sum_equal(sum, xfer_checksum(nw, n)));
					if (fi == 0) T_EQ(changed, 0);
					const unsigned char *p = out.p;
					size_t plen = out.len;
					if (z) {
						T_XOK(xfer_zstd_compress(1, out.p, out.len, &zb, err_));
						T_XOK(xfer_zstd_decompress(zb.p, zb.len, &back, out.len, err_));
						T_EQ(back.len, out.len);
						p = back.p;
						plen = back.len;
					}
					xfer_sum asum;
					T_XOK(xfer_delta_apply((xfer_encoding)enc, esz, dst, n, p, plen, NULL, &asum, err_));
					T_CHECK(memcmp(dst, nw, n) == 0);
					T_CHECK(xfer_sum_equal(asum, sum));
					xfer_buf_free(&out);
					xfer_buf_free(&zb);
					xfer_buf_free(&back);
					free(old);
					free(nw);
					free(shadow);
					free(dst);
				}
}

T_TEST(xfer_delta_rejects_corrupt_payload)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	size_t n = 2 * 1000;
	unsigned char *old = malloc(n), *nw = malloc(n), *dst = malloc(n);
	tm_fill(&r, old, n);
	memcpy(nw, old, n);
	for (int i = 0; i < 20; i++) nw[sk_rng_below(&r, n)] ^= 1;
	memcpy(dst, old, n);
	xfer_buf out = { 0 };
	uint64_t changed;
	unsigned char *shadow = malloc(n);
	memcpy(shadow, old, n);
	T_XOK(xfer_delta_encode(XFER_ENC_OVERWRITE, 2, shadow, nw, n, 0, &out, &changed, NULL, err_));
	xfer_err e;
	/* wrong element size (a dtype mismatch) */
	T_EQ(xfer_delta_apply(XFER_ENC_OVERWRITE, 4, dst, n, out.p, out.len, NULL, NULL, &e), -1);
	T_EQ(e.code, XFER_EMISMATCH);
	/* truncated */
	T_EQ(xfer_delta_apply(XFER_ENC_OVERWRITE, 2, dst, n, out.p, out.len - 1, NULL, NULL, &e), -1);
	T_EQ(e.code, XFER_EFORMAT);
	/* an index past the end: set the first gap varint to a huge value */
	out.p[32] = 0xff;
	out.p[33] = 0x7f;
	T_EQ(xfer_delta_apply(XFER_ENC_OVERWRITE, 2, dst, n, out.p, out.len, NULL, NULL, &e), -1);
	T_CHECK(memcmp(dst, old, n) == 0); /* nothing touched */
	xfer_buf_free(&out);
	free(old);
	free(nw);
	free(dst);
	free(shadow);
}

/* The checksum hashed behind the apply equals the checksum of the result
 * on tensors of many 256 KiB pieces: changes on piece boundaries, none in
 * whole pieces, none at all, every element. */
T_TEST(xfer_delta_apply_sum_matches)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	const size_t piece = 256 << 10;
	for (int c = 0; c < 24; c++) {
		size_t esz = (size_t)1 << sk_rng_below(&r, 4);
		size_t n = esz * ((piece * 3 + sk_rng_below(&r, piece * 2)) / esz);
		unsigned char *old = malloc(n), *nw = malloc(n), *shadow = malloc(n), *dst = malloc(n);
		tm_fill(&r, old, n);
		memcpy(nw, old, n);
		int kind = c % 4;
		if (kind == 0) /* on the boundaries and just before them */
			for (size_t at = piece; at < n; at += piece) {
				nw[at] ^= 1;
				nw[at - esz] ^= 2;
			}
		if (kind == 1) /* sparse, with whole pieces untouched */
			for (size_t i = 0; i < n / 1000; i++) {
				size_t at = sk_rng_below(&r, n);
				if ((at / piece) % 2 == 0) nw[at] ^= 0x40;
			}
		if (kind == 3) for (size_t i = 0; i < n; i++) nw[i] = (unsigned char)~nw[i];
		memcpy(shadow, old, n);
		memcpy(dst, old, n);
		xfer_buf out = { 0 };
		xfer_sum want, got;
		xfer_encoding enc = (xfer_encoding)(c / 4 % 2);
		T_XOK(xfer_delta_encode(enc, esz, shadow, nw, n, 1, &out, NULL, &want, err_));
		T_XOK(xfer_delta_apply(enc, esz, dst, n, out.p, out.len, NULL, &got, err_));
		T_CHECK(memcmp(dst, nw, n) == 0);
		T_CHECK(xfer_sum_equal(got, want));
		T_CHECK(xfer_sum_equal(got, xfer_checksum(nw, n)));
		xfer_buf_free(&out);
		free(old);
		free(nw);
		free(shadow);
		free(dst);
	}
}

/* The journal puts back exactly what was there, through several layers:
 * held in memory, spilled to its file, or (a lowered limit) both. */
static void journal_round_trip(int lim_mib)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	size_t n = (3 << 20) + 13; /* more than one 1 MiB chunk of records */
	unsigned char *a = malloc(n), *orig = malloc(n), *src = malloc(n);
	tm_fill(&r, a, n);
	memcpy(orig, a, n);
	xfer_journal *j;
	xfer_err e;
	T_CHECK((j = xfer_journal_new(NULL, &e)) != NULL);
	if (lim_mib >= 0) xfer_journal_limit(j, (uint64_t)lim_mib << 20);
	for (int round = 0; round < 3; round++) {
		memcpy(src, a, n);
		for (size_t i = 0; i < n / 50; i++) src[sk_rng_below(&r, n)] ^= 0x11;
		if (round == 2) tm_fill(&r, src, n); /* all different */
		T_XOK(xfer_journal_copy(j, a, src, n, err_));
		T_CHECK(memcmp(a, src, n) == 0);
	}
	/* and a delta blob on top */
	xfer_buf out = { 0 };
	unsigned char *shadow = malloc(n);
	memcpy(shadow, a, n);
	memcpy(src, a, n);
	src[5] ^= 1;
	src[n - 1] ^= 2;
	T_XOK(xfer_delta_encode(XFER_ENC_OVERWRITE, 1, shadow, src, n, 0, &out, NULL, NULL, err_));
	T_XOK(xfer_delta_apply(XFER_ENC_OVERWRITE, 1, a, n, out.p, out.len, j, NULL, err_));
	T_CHECK(memcmp(a, src, n) == 0);
	T_CHECK(xfer_journal_bytes(j) > n);
	uint64_t held = xfer_journal_mem_bytes(j);
	if (lim_mib >= 0) T_EQ(held, (uint64_t)lim_mib << 20); /* full to the limit, no more */
	else T_CHECK(held > 0);
	T_XOK(xfer_journal_undo(j, err_));
	T_CHECK(memcmp(a, orig, n) == 0);
	xfer_journal_free(&j);
	xfer_buf_free(&out);
	free(a);
	free(orig);
	free(src);
	free(shadow);
}

/* Host copies at every alignment and size around a 64-byte block: what
 * changed (first, last and scattered bytes) lands and is undone; an equal
 * copy journals nothing. */
T_TEST(xfer_journal_block_edges)
{
	/* each case twice, with the vector compare (where the CPU has it) and
	 * the scalar one: the same bytes copied, the same journal, the same undo */
	static const size_t sizes[] = { 1, 7, 63, 64, 65, 127, 200, 4096 + 7 };
	enum { NCASES = sizeof sizes / sizeof sizes[0] * 2 };
	uint64_t jbytes[2][NCASES];
	unsigned char orig[4200], a[4200], src[4200];
	xfer_journal *j;
	xfer_err e;
	T_CHECK((j = xfer_journal_new(NULL, &e)) != NULL);
	for (int scalar = 0; scalar < 2; scalar++) {
		sk_rng r;
		sk_rng_seed(&r, t_seed());
		xfer_hooks.journal_scalar = scalar;
		size_t c = 0;
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
			for (size_t off = 0; off < 4; off += 3, c++) {
				size_t n = sizes[si];
				tm_fill(&r, orig, n + off);
				memcpy(a, orig, n + off);
				memcpy(src, orig, n + off);
				T_XOK(xfer_journal_copy(j, a + off, src + off, n, err_));
				T_EQ(xfer_journal_bytes(j), 0);
				src[off] ^= 1;
				src[off + n - 1] ^= 0x80;
				for (size_t i = 0; i < n / 16; i++) src[off + sk_rng_below(&r, n)] ^= 0x5a;
				T_XOK(xfer_journal_copy(j, a + off, src + off, n, err_));
				T_CHECK(memcmp(a, src, n + off) == 0);
				jbytes[scalar][c] = xfer_journal_bytes(j);
				T_XOK(xfer_journal_undo(j, err_));
				T_CHECK(memcmp(a, orig, n + off) == 0);
				xfer_journal_reset(j);
			}
	}
	xfer_hooks.journal_scalar = 0;
	for (size_t c = 0; c < NCASES; c++) T_EQ(jbytes[0][c], jbytes[1][c]);
	xfer_journal_free(&j);
}

T_TEST(xfer_journal_undo_restores)
{
	journal_round_trip(-1); /* the default: 32 MiB in memory */
	journal_round_trip(2);  /* two chunks in memory, the rest in the file */
	journal_round_trip(0);  /* all in the file */
}

/* A fake device: host memory that the journal may only reach through
 * xfer_hooks.device_copy; counts the copies and can fail the n-th write. */
static struct {
	unsigned char *lo, *hi;
	int d2h, h2d, fail_at_h2d;
	uint64_t d2h_bytes, h2d_bytes;
} g_dev;

static int in_dev(const void *p, size_t n)
{
	return (const unsigned char *)p >= g_dev.lo && (const unsigned char *)p + n <= g_dev.hi;
}

static int fake_device_copy(void *dst, const void *src, size_t n, int kind, xfer_err *err)
{
	if (kind == XFER_CUDA_D2H && in_dev(src, n) && !in_dev(dst, 1)) {
		g_dev.d2h++;
		g_dev.d2h_bytes += n;
	} else if (kind == XFER_CUDA_H2D && in_dev(dst, n) && !in_dev(src, 1)) {
		if (g_dev.fail_at_h2d && ++g_dev.h2d == g_dev.fail_at_h2d)
			return xfer_fail(err, XFER_EIO, "fake device: write %d fails", g_dev.h2d);
		if (!g_dev.fail_at_h2d) g_dev.h2d++;
		g_dev.h2d_bytes += n;
	} else {
		return xfer_fail(err, XFER_EINVAL, "fake device: kind %d from %p to %p outside the device", kind, src,
				 dst);
	}
	memcpy(dst, src, n);
	return 0;
}

/* Device records mixed with host records: undo puts both back, newest
 * first (a place changed twice gets its oldest bytes), through a journal
 * that spills to its file; unchanged pieces are neither journaled nor
 * written; a failed device write is undone too. */
T_TEST(xfer_journal_device_records_undo)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	size_t n = (40 << 20) + 4099, hn = (1 << 20) + 5; /* 40 MiB of records: past the 32 in memory */
	unsigned char *dev = malloc(n), *orig = malloc(n), *src = malloc(n);
	unsigned char *h = malloc(hn), *horig = malloc(hn), *hsrc = malloc(hn);
	tm_fill(&r, dev, n);
	tm_fill(&r, h, hn);
	memcpy(orig, dev, n);
	memcpy(horig, h, hn);
	memset(&g_dev, 0, sizeof g_dev);
	g_dev.lo = dev;
	g_dev.hi = dev + n;
	xfer_hooks.device_copy = fake_device_copy;
	xfer_journal *j;
	xfer_err e;
	T_CHECK((j = xfer_journal_new(NULL, &e)) != NULL);

	/* without a journal: a plain write */
	memcpy(src, dev, 4096);
	src[7] ^= 1;
	T_XOK(xfer_journal_copy_device(NULL, dev, src, 4096, err_));
	T_EQ(g_dev.d2h, 0);
	T_EQ(g_dev.h2d, 1);
	T_CHECK(dev[7] == src[7]);
	dev[7] = orig[7];

	/* 1: scattered changes, in two stripes, with a host copy between them */
	memcpy(src, dev, n);
	for (size_t i = 0; i < n / 100; i++) src[sk_rng_below(&r, n)] ^= (unsigned char)(1 + sk_rng_below(&r, 255));
	T_XOK(xfer_journal_copy_device(j, dev, src, n / 2, err_));
	memcpy(hsrc, h, hn);
	for (size_t i = 0; i < hn / 50; i++) hsrc[sk_rng_below(&r, hn)] ^= 0x21;
	T_XOK(xfer_journal_copy(j, h, hsrc, hn, err_));
	T_XOK(xfer_journal_copy_device(j, dev + n / 2, src + n / 2, n - n / 2, err_));
	T_CHECK(memcmp(dev, src, n) == 0);
	T_CHECK(memcmp(h, hsrc, hn) == 0);
	T_EQ(g_dev.d2h_bytes, n);
	uint64_t small = xfer_journal_bytes(j);
	T_CHECK(small > 0 && small < n / 4); /* about 8 bytes a changed byte, not the whole */

	/* 2: the same places again, and nothing else: the oldest bytes must win */
	for (size_t i = 0; i < n; i++)
		if (src[i] != orig[i]) src[i] ^= 0x80;
	T_XOK(xfer_journal_copy_device(j, dev, src, n, err_));
	T_CHECK(memcmp(dev, src, n) == 0);

	/* 3: nothing changes in the first 8 MiB: no journal, no write there */
	int h2d = g_dev.h2d;
	uint64_t before = xfer_journal_bytes(j);
	T_XOK(xfer_journal_copy_device(j, dev, src, 8 << 20, err_));
	T_EQ(g_dev.h2d, h2d);
	T_EQ(xfer_journal_bytes(j), before);

	/* 4: everything changes: the journal spills to its file */
	tm_fill(&r, src, n);
	T_XOK(xfer_journal_copy_device(j, dev, src, n, err_));
	T_CHECK(memcmp(dev, src, n) == 0);
	T_CHECK(xfer_journal_bytes(j) > n);
	T_CHECK(xfer_journal_seconds(j) > 0);

	T_XOK(xfer_journal_undo(j, err_));
	T_CHECK(memcmp(dev, orig, n) == 0);
	T_CHECK(memcmp(h, horig, hn) == 0);
	T_EQ(xfer_journal_bytes(j), 0);

	/* 5: a device write fails mid-stripe; undo puts back what was written */
	tm_fill(&r, src, n);
	g_dev.h2d = 0;
	g_dev.fail_at_h2d = 3;
	T_EQ(xfer_journal_copy_device(j, dev, src, n, &e), -1);
	T_CHECK(strstr(e.msg, "write 3 fails"));
	T_CHECK(memcmp(dev, orig, n) != 0);
	g_dev.fail_at_h2d = 0;
	T_XOK(xfer_journal_undo(j, err_));
	T_CHECK(memcmp(dev, orig, n) == 0);

	xfer_hooks.device_copy = NULL;
	xfer_journal_free(&j);
	free(dev);
	free(orig);
	free(src);
	free(h);
	free(horig);
	free(hsrc);
}

T_TEST(xfer_paths_say_why_unavailable)
{
	char why[256];
	T_EQ(xfer_probe("disk-delta", why, sizeof why), 0);
	T_EQ(xfer_probe("p2p-tcp", why, sizeof why), 0);
	T_EQ(xfer_probe("p2p", why, sizeof why), 0);
	T_EQ(xfer_probe("p2p-rdma", why, sizeof why), -1);
	T_CHECK(strstr(why, "not implemented"));
	T_EQ(xfer_probe("carrier-pigeon", why, sizeof why), -1);
	T_CHECK(strstr(why, "unknown"));
	/* NCCL / CUDA: whichever way, a reason when unavailable */
	const char *gpu[] = { "broadcast", "broadcast_packed", "colocated" };
	for (int i = 0; i < 3; i++)
		if (xfer_probe(gpu[i], why, sizeof why) != 0) T_CHECK(strlen(why) > 10);
	/* p2p: the chooser where UCX runs (UCX or p2p-tcp, agreed with each
	 * peer: xfer_ucx_test.c), else p2p-tcp; either way it says so */
	xfer_config c;
	xfer_config_init(&c);
	c.path = "p2p";
	c.role = XFER_RECEIVER;
	xfer_manifest *m = xfer_manifest_new();
	xfer_endpoint *ep;
	T_XOK(xfer_open(&ep, &c, m, err_));
	if (xfer_probe("p2p-ucx", why, sizeof why) == 0) {
		T_STREQ(xfer_endpoint_path(ep), "p2p");
		T_CHECK(strstr(xfer_endpoint_note(ep), "chosen with each peer"));
	} else {
		T_STREQ(xfer_endpoint_path(ep), "p2p-tcp");
		T_CHECK(strstr(xfer_endpoint_note(ep), "p2p-ucx unavailable"));
	}
	T_CHECK(xfer_endpoint_port(ep) > 0);
	xfer_close(&ep);
	xfer_close(&ep);
	c.path = "nope";
	xfer_err e;
	T_EQ(xfer_open(&ep, &c, m, &e), -1);
	T_EQ(e.code, XFER_EINVAL);
	xfer_manifest_free(&m);
}
