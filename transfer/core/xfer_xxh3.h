/* transfer/xfer_xxh3.h: XXH3-64 (seed 0, default secret) written once for
 * both the C compiler and nvcc, so the GPU kernels (xfer_gpu.cu) compute the
 * very bits libxxhash computes on the CPU.
 *
 * The long path (more than 240 bytes) is written per lane: XXH3 keeps 8
 * 64-bit accumulators, and lane i only ever reads word i and word i^1 of each
 * 64-byte stripe (the swap of adjacent lanes), so 8 GPU threads can run one
 * input, one lane each, exchanging the partner word with a shuffle.  The
 * scalar reference below (xxh3p_64) runs the same lane functions in a loop;
 * the unit tests check it against libxxhash for every length class, which is
 * what makes the GPU lanes trustworthy.  Only what the tree checksum needs is
 * here: seed 0 and the 192-byte default secret.  Loads go through
 * XXH3P_LOAD64/XXH3P_LOAD32/XXH3P_LOAD8, which the includer may define (the
 * GPU reads unaligned words with two aligned loads). */
#ifndef XFER_XXH3_H
#define XFER_XXH3_H

#ifdef __CUDACC__
#define XXH3P_FN static __device__ __forceinline__
#define XXH3P_CONST __device__ __constant__
#define XXH3P_MULHI(a, b) __umul64hi((a), (b))
#else
#include <stdint.h>
#include <string.h>
#define XXH3P_FN static inline
#define XXH3P_CONST static const
#define XXH3P_MULHI(a, b) ((uint64_t)(((unsigned __int128)(a) * (b)) >> 64))
#endif

#ifndef XXH3P_LOAD64
XXH3P_FN uint64_t xxh3p_load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}
XXH3P_FN uint32_t xxh3p_load32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
#define XXH3P_LOAD64(p) xxh3p_load64(p)
#define XXH3P_LOAD32(p) xxh3p_load32(p)
#define XXH3P_LOAD8(p) (*(p))
#endif

enum { XXH3P_STRIPE = 64, XXH3P_BLOCK = 1024, XXH3P_STRIPES_PER_BLOCK = 16, XXH3P_MIDSIZE_MAX = 240 };

#define XXH3P_P32_1 0x9E3779B1ull
#define XXH3P_P32_2 0x85EBCA77ull
#define XXH3P_P32_3 0xC2B2AE3Dull
#define XXH3P_P64_1 0x9E3779B185EBCA87ull
#define XXH3P_P64_2 0xC2B2AE3D27D4EB4Full
#define XXH3P_P64_3 0x165667B19E3779F9ull
#define XXH3P_P64_4 0x85EBCA77C2B2AE63ull
#define XXH3P_P64_5 0x27D4EB2F165667C5ull

/* The default secret (xxHash's XXH3_kSecret, 192 bytes). */
XXH3P_CONST unsigned char xxh3p_secret[192] = {
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

/* The secret read as little-endian words at any byte offset (a constant
 * array: no alignment concern on either side). */
XXH3P_FN uint64_t xxh3p_s64(unsigned off)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) v = (v << 8) | xxh3p_secret[off + (unsigned)i];
	return v;
}

XXH3P_FN uint32_t xxh3p_s32(unsigned off) { return (uint32_t)xxh3p_s64(off); }

XXH3P_FN uint64_t xxh3p_fold(uint64_t a, uint64_t b) { return (a * b) ^ XXH3P_MULHI(a, b); }
XXH3P_FN uint64_t xxh3p_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
XXH3P_FN uint64_t xxh3p_swap64(uint64_t x)
{
	x = ((x & 0x00ff00ff00ff00ffull) << 8) | ((x >> 8) & 0x00ff00ff00ff00ffull);
	x = ((x & 0x0000ffff0000ffffull) << 16) | ((x >> 16) & 0x0000ffff0000ffffull);
	return (x << 32) | (x >> 32);
}

XXH3P_FN uint64_t xxh3p_avalanche(uint64_t h)
{
	h ^= h >> 37;
	h *= 0x165667919E3779F9ull;
	return h ^ (h >> 32);
}

XXH3P_FN uint64_t xxh3p_avalanche64(uint64_t h)
{
	h ^= h >> 33;
	h *= XXH3P_P64_2;
	h ^= h >> 29;
	h *= XXH3P_P64_3;
	return h ^ (h >> 32);
}

XXH3P_FN uint64_t xxh3p_rrmxmx(uint64_t h, uint64_t len)
{
	h ^= xxh3p_rotl(h, 49) ^ xxh3p_rotl(h, 24);
	h *= 0x9FB21C651E98DF25ull;
	h ^= (h >> 35) + len;
	h *= 0x9FB21C651E98DF25ull;
	return h ^ (h >> 28);
}

XXH3P_FN uint64_t xxh3p_mix16(const unsigned char *p, unsigned soff)
{
	return xxh3p_fold(XXH3P_LOAD64(p) ^ xxh3p_s64(soff), XXH3P_LOAD64(p + 8) ^ xxh3p_s64(soff + 8));
}

/* Inputs of 0..240 bytes: the short paths of XXH3_64bits. */
XXH3P_FN uint64_t xxh3p_short(const unsigned char *p, uint64_t len)
{
	if (len == 0) return xxh3p_avalanche64(xxh3p_s64(56) ^ xxh3p_s64(64));
	if (len <= 3) {
		uint32_t c = ((uint32_t)XXH3P_LOAD8(p) << 16) | ((uint32_t)XXH3P_LOAD8(p + (len >> 1)) << 24) |
			     (uint32_t)XXH3P_LOAD8(p + len - 1) | ((uint32_t)len << 8);
		return xxh3p_avalanche64((uint64_t)c ^ (uint64_t)(xxh3p_s32(0) ^ xxh3p_s32(4)));
	}
	if (len <= 8) {
		uint64_t in = (uint64_t)XXH3P_LOAD32(p + len - 4) + ((uint64_t)XXH3P_LOAD32(p) << 32);
		return xxh3p_rrmxmx(in ^ (xxh3p_s64(8) ^ xxh3p_s64(16)), len);
	}
	if (len <= 16) {
		uint64_t lo = XXH3P_LOAD64(p) ^ (xxh3p_s64(24) ^ xxh3p_s64(32));
		uint64_t hi = XXH3P_LOAD64(p + len - 8) ^ (xxh3p_s64(40) ^ xxh3p_s64(48));
		return xxh3p_avalanche(len + xxh3p_swap64(lo) + hi + xxh3p_fold(lo, hi));
	}
	uint64_t acc = len * XXH3P_P64_1;
	if (len <= 128) {
		if (len > 32) {
			if (len > 64) {
				if (len > 96) {
					acc += xxh3p_mix16(p + 48, 96);
					acc += xxh3p_mix16(p + len - 64, 112);
				}
				acc += xxh3p_mix16(p + 32, 64);
				acc += xxh3p_mix16(p + len - 48, 80);
			}
			acc += xxh3p_mix16(p + 16, 32);
			acc += xxh3p_mix16(p + len - 32, 48);
		}
		acc += xxh3p_mix16(p, 0);
		acc += xxh3p_mix16(p + len - 16, 16);
		return xxh3p_avalanche(acc);
	}
	for (unsigned i = 0; i < 8; i++) acc += xxh3p_mix16(p + 16 * i, 16 * i);
	acc = xxh3p_avalanche(acc);
	for (unsigned i = 8; i < (unsigned)len / 16; i++) acc += xxh3p_mix16(p + 16 * i, 16 * (i - 8) + 3);
	acc += xxh3p_mix16(p + len - 16, 136 - 17);
	return xxh3p_avalanche(acc);
}

/* ---- the long path, one lane at a time ---- */

XXH3P_FN uint64_t xxh3p_lane_init(unsigned lane)
{
	const uint64_t init[8] = { XXH3P_P32_3, XXH3P_P64_1, XXH3P_P64_2, XXH3P_P64_3,
				   XXH3P_P64_4, XXH3P_P32_2, XXH3P_P64_5, XXH3P_P32_1 };
	return init[lane];
}

/* One stripe for lane i: mine is word i, partner word i^1; soff the stripe's
 * secret offset. */
XXH3P_FN uint64_t xxh3p_lane_acc_k(uint64_t acc, uint64_t mine, uint64_t partner, uint64_t secret_word)
{
	uint64_t key = mine ^ secret_word;
	return acc + partner + (key & 0xffffffffull) * (key >> 32);
}

XXH3P_FN uint64_t xxh3p_lane_acc(uint64_t acc, unsigned lane, uint64_t mine, uint64_t partner, unsigned soff)
{
	return xxh3p_lane_acc_k(acc, mine, partner, xxh3p_s64(soff + 8 * lane));
}

/* The scramble after each full block; the GPU passes its lane's secret
 * word (xxh3p_s64(128 + 8 * lane)) from a register. */
XXH3P_FN uint64_t xxh3p_lane_scramble_k(uint64_t acc, uint64_t secret_word)
{
	acc ^= acc >> 47;
	acc ^= secret_word;
	return acc * XXH3P_P32_1;
}

XXH3P_FN uint64_t xxh3p_lane_scramble(uint64_t acc, unsigned lane)
{
	return xxh3p_lane_scramble_k(acc, xxh3p_s64(128 + 8 * lane));
}

/* The layout of a long input: full blocks scrambled after, then the stripes
 * of the last partial block, then the last 64 bytes (secret offset 121). */
XXH3P_FN uint64_t xxh3p_blocks(uint64_t len) { return (len - 1) / XXH3P_BLOCK; }
XXH3P_FN unsigned xxh3p_tail_stripes(uint64_t len)
{
	return (unsigned)(((len - 1) - XXH3P_BLOCK * xxh3p_blocks(len)) / XXH3P_STRIPE);
}
enum { XXH3P_LAST_SOFF = 192 - 64 - 7, XXH3P_MERGE_SOFF = 11 };

/* The merge: pair k of lanes (2k, 2k+1) contributes one folded product. */
XXH3P_FN uint64_t xxh3p_merge_pair(uint64_t a_even, uint64_t a_odd, unsigned k)
{
	return xxh3p_fold(a_even ^ xxh3p_s64(XXH3P_MERGE_SOFF + 16 * k),
			  a_odd ^ xxh3p_s64(XXH3P_MERGE_SOFF + 16 * k + 8));
}

#ifndef __CUDACC__
/* The scalar reference: the lane functions in a loop (tests check it against
 * libxxhash; the CPU tree itself calls libxxhash, which is faster). */
static inline uint64_t xxh3p_64(const void *in, uint64_t len)
{
	const unsigned char *p = (const unsigned char *)in;
	if (len <= XXH3P_MIDSIZE_MAX) return xxh3p_short(p, len);
	uint64_t acc[8], nb = xxh3p_blocks(len);
	for (unsigned i = 0; i < 8; i++) acc[i] = xxh3p_lane_init(i);
	for (uint64_t b = 0; b <= nb; b++) {
		unsigned ns = b < nb ? XXH3P_STRIPES_PER_BLOCK : xxh3p_tail_stripes(len);
		for (unsigned s = 0; s < ns; s++) {
			const unsigned char *st = p + b * XXH3P_BLOCK + (uint64_t)s * XXH3P_STRIPE;
			uint64_t w[8], nw[8];
			for (unsigned i = 0; i < 8; i++) w[i] = XXH3P_LOAD64(st + 8 * i);
			for (unsigned i = 0; i < 8; i++) nw[i] = xxh3p_lane_acc(acc[i], i, w[i], w[i ^ 1], 8 * s);
			memcpy(acc, nw, sizeof acc);
		}
		if (b < nb)
			for (unsigned i = 0; i < 8; i++) acc[i] = xxh3p_lane_scramble(acc[i], i);
	}
	uint64_t w[8], nw[8];
	for (unsigned i = 0; i < 8; i++) w[i] = XXH3P_LOAD64(p + len - 64 + 8 * i);
	for (unsigned i = 0; i < 8; i++) nw[i] = xxh3p_lane_acc(acc[i], i, w[i], w[i ^ 1], XXH3P_LAST_SOFF);
	uint64_t r = len * XXH3P_P64_1;
	for (unsigned k = 0; k < 4; k++) r += xxh3p_merge_pair(nw[2 * k], nw[2 * k + 1], k);
	return xxh3p_avalanche(r);
}
#endif

#endif
