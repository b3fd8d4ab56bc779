/* tests/unit/xfer_tree_test.c: the tree checksum (transfer/core/xfer_tree.c) and
 * the portable XXH3-64 the GPU kernels share (transfer/core/xfer_xxh3.h).
 *
 * The portable code is checked against libxxhash at every length class
 * (0..3, 4..8, 9..16, 17..128, 129..240, and long inputs around the block
 * and stripe edges, unaligned too): the GPU lanes run these very functions.
 * The tree is checked against its definition, across thread counts, for
 * tensors of every dtype and odd sizes, smaller than a chunk and not; a
 * pinned value guards the format (a change must bump the index version). */
#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_int.h"
#include "transfer/core/xfer_xxh3.h"
#include "transfer/core/xfer_hash.h"

T_TEST(xfer_xxh3_portable_matches_libxxhash)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	enum { MAX = (3 << 20) + 64 };
	unsigned char *buf = malloc(MAX + 8);
	tm_fill(&r, buf, MAX + 8);
	for (uint64_t n = 0; n <= 2100; n++) {
		if (xxh3p_64(buf, n) != XXH3_64bits(buf, n)) T_FAIL("length %llu differs (seed %llu)", (unsigned long long)n,
								      (unsigned long long)t_seed());
		if (xxh3p_64(buf + 3, n) != XXH3_64bits(buf + 3, n)) T_FAIL("length %llu at +3 differs", (unsigned long long)n);
	}
	static const uint64_t big[] = { 1023, 1024, 1025, 1088, 1089, 4095, 65536 + 7, XFER_TREE_CHUNK - 1,
					XFER_TREE_CHUNK, XFER_TREE_CHUNK + 1, 1 << 20, MAX };
	for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
		T_EQ(xxh3p_64(buf, big[i]), XXH3_64bits(buf, big[i]));
		T_EQ(xxh3p_64(buf + 5, big[i]), XXH3_64bits(buf + 5, big[i]));
	}
	free(buf);
}

/* The definition, written out plainly. */
static xfer_sum tree_by_hand(const unsigned char *p, uint64_t n)
{
	uint64_t nc = (n + XFER_TREE_CHUNK - 1) / XFER_TREE_CHUNK, *h = malloc((nc + 1) * 8);
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t k = n - c * XFER_TREE_CHUNK < XFER_TREE_CHUNK ? n - c * XFER_TREE_CHUNK : XFER_TREE_CHUNK;
		h[c] = XXH3_64bits(p + c * XFER_TREE_CHUNK, k);
	}
	XXH128_hash_t r = XXH3_128bits_withSeed(h, nc * 8, n);
	free(h);
	return (xfer_sum){ r.low64, r.high64 };
}

T_TEST(xfer_tree_matches_its_definition)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	enum { MAX = 3 * XFER_TREE_CHUNK + 77 };
	unsigned char *buf = malloc(MAX + 1);
	tm_fill(&r, buf, MAX);
	static const uint64_t sizes[] = { 0, 1, 7, 240, 241, 4097, XFER_TREE_CHUNK - 1, XFER_TREE_CHUNK,
					  XFER_TREE_CHUNK + 1, 2 * XFER_TREE_CHUNK + 13, MAX };
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		xfer_sum want = tree_by_hand(buf, sizes[i]);
		for (int th = 1; th <= 9; th += 4)
			if (!xfer_sum_equal(xfer_tree_checksum(buf, sizes[i], th), want))
				T_FAIL("size %llu, %d threads (seed %llu)", (unsigned long long)sizes[i], th,
				       (unsigned long long)t_seed());
		T_CHECK(xfer_sum_equal(xfer_tree_checksum(buf + 1, sizes[i], 3), tree_by_hand(buf + 1, sizes[i])));
	}
	/* one byte anywhere, in the last chunk too, changes it; so does the length */
	xfer_sum a = xfer_tree_checksum(buf, MAX, 4);
	for (uint64_t at = 0; at < MAX; at += XFER_TREE_CHUNK / 3) {
		buf[at] ^= 0x10;
		T_CHECK(!xfer_sum_equal(xfer_tree_checksum(buf, MAX, 4), a));
		buf[at] ^= 0x10;
	}
	buf[MAX - 1] ^= 1;
	T_CHECK(!xfer_sum_equal(xfer_tree_checksum(buf, MAX, 4), a));
	buf[MAX - 1] ^= 1;
	T_CHECK(xfer_sum_equal(xfer_tree_checksum(buf, MAX, 4), a));
	/* a chunk of zeros and two chunks of zeros: the seed (the length) separates them */
	unsigned char *z = calloc(2, XFER_TREE_CHUNK);
	T_CHECK(!xfer_sum_equal(xfer_tree_checksum(z, XFER_TREE_CHUNK, 1), xfer_tree_checksum(z, 2 * XFER_TREE_CHUNK, 1)));
	free(z);
	free(buf);
}

T_TEST(xfer_tree_every_dtype_and_batch)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	tmodel t;
	tm_make(&t, &r, 3 * XFER_TREE_CHUNK + 2, 1); /* every dtype, odd sizes, one of 3+ chunks */
	xfer_sum *many = calloc(t.n, sizeof *many);
	T_XOK(xfer_tree_sums((const void *const *)t.p, t.bytes, t.n, many, 5, err_));
	for (size_t i = 0; i < t.n; i++) {
		const xfer_tensor *x = xfer_manifest_tensor(t.m, i);
		xfer_sum one;
		T_XOK(xfer_tensor_tree_sum(x, NULL, 0, 2, &one, err_));
		T_CHECK(xfer_sum_equal(one, many[i]));
		T_CHECK(xfer_sum_equal(one, tree_by_hand(t.p[i], t.bytes[i])));
	}
	free(many);
	tm_free(&t);
}

T_TEST(xfer_tree_pinned_value)
{
	/* 1 MiB + 3 bytes of a fixed pattern: 5 chunks, the last of 3 bytes.  A
	 * change of this value is a change of format (docs/tree-checksum.md). */
	uint64_t n = (1 << 20) + 3;
	unsigned char *p = malloc(n);
	for (uint64_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131 % 251);
	char hex[33];
	xfer_sum_hex(xfer_tree_checksum(p, n, 3), hex);
	T_STREQ(hex, "11dc2c2adb189c665d01e45c6ad8dd5f");
	free(p);
}
