/* transfer/core/xfer_delta.c: the delta codec of disk-delta, pure (no I/O).
 *
 * A payload describes the changed elements of one tensor (little-endian):
 *
 *   header  32 bytes: "SKD1", enc (0 overwrite, 1 xor), esz, 2 zero bytes,
 *           u64 elements in the tensor, u64 changed elements, u64 gap bytes
 *   gaps    one LEB128 varint per changed element: its index minus the
 *           previous changed index minus one (the first: its index)
 *   values  changed x esz bytes, split in byte planes (byte 0 of every value,
 *           then byte 1, ...): the new element (overwrite) or new ^ old (xor)
 *
 * Miles/slime store XOR (smallest, applied exactly once) or overwrite
 * (positions + new bytes, idempotent); we keep both but store XOR sparsely
 * too, because an RL step changes 1-3% of the elements: a dense XOR is mostly
 * zeros.  Byte planes put the sign/exponent bytes together, which zstd
 * compresses well.  The scan compares 64 bytes at a time and looks closer
 * only where they differ, so it runs near memory speed. */
#include "transfer/core/xfer_int.h"

#include <stdlib.h>
#include <string.h>
#include "transfer/core/xfer_hash.h"
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum {
	HEAD_BYTES = 32,
	SCAN_CHUNK = 256 << 10, /* hash in pieces that are still in cache after the scan */
};

void xfer_buf_free(xfer_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

int xfer_buf_reserve(xfer_buf *b, size_t extra)
{
	if (b->len + extra <= b->cap) return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + extra) cap *= 2;
	unsigned char *p = realloc(b->p, cap);
	if (!p) return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

int xfer_buf_append(xfer_buf *b, const void *p, size_t n)
{
	if (xfer_buf_reserve(b, n) != 0) return -1;
	if (n) memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

static void put_head(unsigned char *h, xfer_encoding enc, size_t esz, uint64_t nel, uint64_t cnt,
		     uint64_t glen)
{
	memcpy(h, "SKD1", 4);
	h[4] = (unsigned char)enc;
	h[5] = (unsigned char)esz;
	h[6] = h[7] = 0;
	memcpy(h + 8, &nel, 8);
	memcpy(h + 16, &cnt, 8);
	memcpy(h + 24, &glen, 8);
}

/* Scan state: gaps and values grow as changed elements are found. */
typedef struct {
	xfer_buf gaps, vals;
	uint64_t last; /* index of the previous changed element + 1 */
	uint64_t count;
	size_t esz;
	xfer_encoding enc;
	int oom;
} scan;

#define XFER_INLINE static inline __attribute__((always_inline))

/* esz and xor are constants in each specialization below, so the divisions,
 * shifts and branches here fold away. */
XFER_INLINE void emit(scan *s, size_t esz, int xor, uint64_t idx, const unsigned char *oldp,
		      const unsigned char *newp)
{
	uint64_t g = idx - s->last;
	s->last = idx + 1;
	if ((s->gaps.len + 10 > s->gaps.cap && xfer_buf_reserve(&s->gaps, 10 + s->gaps.cap) != 0) ||
	    (s->vals.len + 8 > s->vals.cap && xfer_buf_reserve(&s->vals, 8 + s->vals.cap) != 0)) {
		s->oom = 1;
		return;
	}
	unsigned char *q = s->gaps.p + s->gaps.len;
	while (g >= 0x80) { *q++ = (unsigned char)(g | 0x80); g >>= 7; }
	*q++ = (unsigned char)g;
	s->gaps.len = (size_t)(q - s->gaps.p);
	unsigned char *v = s->vals.p + s->vals.len;
	if (xor)
		for (size_t b = 0; b < esz; b++) v[b] = (unsigned char)(oldp[b] ^ newp[b]);
	else
		memcpy(v, newp, esz);
	s->vals.len += esz;
	s->count++;
}

static inline uint64_t ld64(const unsigned char *p)
{
	uint64_t x;
	memcpy(&x, p, 8);
	return x;
}

/* Elements of one differing 8-byte word at byte offset w (x = old ^ new). */
XFER_INLINE void scan_word(scan *s, size_t esz, int xor, unsigned char *old, const unsigned char *nw, size_t w,
			   uint64_t x, int update)
{
	uint64_t mask = esz == 8 ? ~0ull : (1ull << (8 * esz)) - 1;
	for (size_t k = 0; k < 8; k += esz) {
		if (x & mask) {
			size_t e = w + k;
			emit(s, esz, xor, e / esz, old + e, nw + e);
			if (update) memcpy(old + e, nw + e, esz);
		}
		if (esz < 8) x >>= 8 * (esz < 8 ? esz : 1);
	}
}

/* Compares [off, off+n) of old and new 32 bytes at a time (four 8-byte
 * words OR-ed: equal blocks cost a few instructions), element by element
 * only inside words that differ. */
XFER_INLINE void scan_range_t(scan *s, size_t esz, int xor, unsigned char *old, const unsigned char *nw,
			      size_t off, size_t n, int update)
{
	size_t end = off + n, i = off;
#ifdef __SSE2__
	/* One bit per changed byte from two 16-byte compares (lanes of esz bytes
	 * compare as a whole), then a loop over the set bits: one unpredictable
	 * branch per block instead of one per word and per element. */
	unsigned lanes = esz == 1 ? 0xffffffffu : esz == 2 ? 0x55555555u : esz == 4 ? 0x11111111u : 0x01010101u;
	for (; i + 32 <= end; i += 32) {
		__m128i a0 = _mm_loadu_si128((const __m128i *)(old + i)), b0 = _mm_loadu_si128((const __m128i *)(nw + i));
		__m128i a1 = _mm_loadu_si128((const __m128i *)(old + i + 16)), b1 = _mm_loadu_si128((const __m128i *)(nw + i + 16));
		__m128i c0, c1;
		if (esz == 1) { c0 = _mm_cmpeq_epi8(a0, b0); c1 = _mm_cmpeq_epi8(a1, b1); }
		else if (esz == 2) { c0 = _mm_cmpeq_epi16(a0, b0); c1 = _mm_cmpeq_epi16(a1, b1); }
		else { c0 = _mm_cmpeq_epi32(a0, b0); c1 = _mm_cmpeq_epi32(a1, b1); }
		unsigned m = ~((unsigned)_mm_movemask_epi8(c0) | (unsigned)_mm_movemask_epi8(c1) << 16);
		if (!m) continue;
		if (esz == 8) m |= m >> 4; /* either half of a 64-bit lane */
		m &= lanes;
		do {
			size_t e = i + (size_t)__builtin_ctz(m);
			emit(s, esz, xor, e / esz, old + e, nw + e);
			if (update) memcpy(old + e, nw + e, esz);
			m &= m - 1;
		} while (m);
	}
#endif
	for (; i + 32 <= end; i += 32) {
		uint64_t x0 = ld64(old + i) ^ ld64(nw + i), x1 = ld64(old + i + 8) ^ ld64(nw + i + 8);
		uint64_t x2 = ld64(old + i + 16) ^ ld64(nw + i + 16), x3 = ld64(old + i + 24) ^ ld64(nw + i + 24);
		if (!(x0 | x1 | x2 | x3)) continue;
		if (x0) scan_word(s, esz, xor, old, nw, i, x0, update);
		if (x1) scan_word(s, esz, xor, old, nw, i + 8, x1, update);
		if (x2) scan_word(s, esz, xor, old, nw, i + 16, x2, update);
		if (x3) scan_word(s, esz, xor, old, nw, i + 24, x3, update);
	}
	for (; i < end; i += esz) {
		if (memcmp(old + i, nw + i, esz) == 0) continue;
		emit(s, esz, xor, i / esz, old + i, nw + i);
		if (update) memcpy(old + i, nw + i, esz);
	}
}

#define SCAN_FOR(E)                                                                    \
	static void scan_##E(scan *s, unsigned char *o, const unsigned char *nw, size_t off, size_t n, \
			     int update)                                                   \
	{                                                                              \
		if (s->enc == XFER_ENC_XOR) scan_range_t(s, E, 1, o, nw, off, n, update);  \
		else scan_range_t(s, E, 0, o, nw, off, n, update);                         \
	}
SCAN_FOR(1)
SCAN_FOR(2)
SCAN_FOR(4)
SCAN_FOR(8)

static void scan_range(scan *s, unsigned char *old, const unsigned char *nw, size_t off, size_t n, int update)
{
	switch (s->esz) {
	case 1: scan_1(s, old, nw, off, n, update); break;
	case 2: scan_2(s, old, nw, off, n, update); break;
	case 4: scan_4(s, old, nw, off, n, update); break;
	default: scan_8(s, old, nw, off, n, update); break;
	}
}

int xfer_delta_encode(xfer_encoding enc, size_t esz, void *old_, const void *new_, size_t n,
		      int update_old, xfer_buf *out, uint64_t *changed, xfer_sum *sum, xfer_err *err)
{
	if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
		return xfer_fail(err, XFER_EINVAL, "delta: element size %zu", esz);
	if (n % esz) return xfer_fail(err, XFER_EINVAL, "delta: %zu bytes is not whole elements", n);
	scan s = { .esz = esz, .enc = enc };
	XXH3_state_t *st = NULL;
	if (sum) {
		st = XXH3_createState();
		if (!st) return xfer_fail(err, XFER_ENOMEM, "delta: out of memory");
		XXH3_128bits_reset(st);
	}
	for (size_t off = 0; off < n; off += SCAN_CHUNK) {
		size_t k = n - off < SCAN_CHUNK ? n - off : SCAN_CHUNK;
		scan_range(&s, old_, new_, off, k, update_old);
		if (st) XXH3_128bits_update(st, (const char *)new_ + off, k);
	}
	if (st) {
		XXH128_hash_t h = XXH3_128bits_digest(st);
		*sum = (xfer_sum){ h.low64, h.high64 };
		XXH3_freeState(st);
	}
	int rc = -1;
	if (s.oom) { xfer_fail(err, XFER_ENOMEM, "delta: out of memory"); goto done; }
	if (xfer_buf_reserve(out, HEAD_BYTES + s.gaps.len + s.vals.len) != 0) {
		xfer_fail(err, XFER_ENOMEM, "delta: out of memory");
		goto done;
	}
	put_head(out->p + out->len, enc, esz, n / esz, s.count, s.gaps.len);
	out->len += HEAD_BYTES;
	xfer_buf_append(out, s.gaps.p, s.gaps.len);
	unsigned char *planes = out->p + out->len;
	for (uint64_t i = 0; i < s.count; i++)
		for (size_t b = 0; b < esz; b++) planes[b * s.count + i] = s.vals.p[i * esz + b];
	out->len += s.vals.len;
	if (changed) *changed = s.count;
	rc = 0;
done:
	xfer_buf_free(&s.gaps);
	xfer_buf_free(&s.vals);
	return rc;
}

/* Reads the varint at *p (< end) into *v; returns 0 or -1 when malformed. */
static inline int get_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
	uint64_t x = 0;
	for (int sh = 0; sh < 64; sh += 7) {
		if (*p >= end) return -1;
		unsigned char c = *(*p)++;
		x |= (uint64_t)(c & 0x7f) << sh;
		if (!(c & 0x80)) { *v = x; return 0; }
	}
	return -1;
}

int xfer_delta_apply(xfer_encoding enc, size_t esz, void *dst_, size_t n, const void *payload,
		     size_t plen, xfer_journal *j, xfer_sum *sum, xfer_err *err)
{
	const unsigned char *p = payload;
	unsigned char *dst = dst_, *undo = NULL;
	uint64_t nel, cnt, glen;
	if (plen < HEAD_BYTES || memcmp(p, "SKD1", 4) != 0)
		return xfer_fail(err, XFER_EFORMAT, "delta payload: bad header");
	memcpy(&nel, p + 8, 8);
	memcpy(&cnt, p + 16, 8);
	memcpy(&glen, p + 24, 8);
	if (p[4] != (unsigned char)enc)
		return xfer_fail(err, XFER_EFORMAT, "delta payload: encoding %u, index says %u", p[4], (unsigned)enc);
	/* nel * esz could wrap around to n: divide instead */
	if (p[5] != esz || esz == 0 || n % esz || nel != n / esz)
		return xfer_fail(err, XFER_EMISMATCH,
				 "delta payload is for %llu elements of %u bytes; the tensor has %zu bytes of %zu-byte elements",
				 (unsigned long long)nel, p[5], n, esz);
	if (cnt > nel || glen > plen - HEAD_BYTES || cnt * esz != plen - HEAD_BYTES - glen)
		return xfer_fail(err, XFER_EFORMAT, "delta payload: sizes do not add up (%zu bytes)", plen);
	const unsigned char *gaps = p + HEAD_BYTES, *gend = gaps + glen, *vals = gend;
	/* Validate every index before touching the tensor. */
	const unsigned char *q = gaps;
	uint64_t idx = 0, g = 0;
	for (uint64_t i = 0; i < cnt; i++) {
		if (get_varint(&q, gend, &g) != 0 || g >= nel - idx)
			return xfer_fail(err, XFER_EFORMAT, "delta payload: index %llu out of range",
					 (unsigned long long)i);
		idx += g + 1;
	}
	if (q != gend) return xfer_fail(err, XFER_EFORMAT, "delta payload: trailing gap bytes");
	/* allocated before anything is journaled: failing after that would
	 * leave an undo record for a change never made (XOR would then undo
	 * it into the old version) */
	XXH3_state_t *st = NULL;
	if (sum) {
		st = XXH3_createState();
		if (!st) return xfer_fail(err, XFER_ENOMEM, "delta: out of memory");
		XXH3_128bits_reset(st);
	}
	if (j && enc == XFER_ENC_XOR &&
	    xfer_journal_blob(j, enc, esz, dst, n, p, plen, NULL, 0, err) != 0) {
		if (st) XXH3_freeState(st);
		return -1;
	}
	if (j && enc == XFER_ENC_OVERWRITE) {
		/* The undo is the same positions with the old values: save it first. */
		undo = calloc(cnt * esz + 1, 1);
		if (!undo) {
			if (st) XXH3_freeState(st);
			return xfer_fail(err, XFER_ENOMEM, "delta: out of memory");
		}
		q = gaps;
		idx = 0;
		for (uint64_t i = 0; i < cnt; i++) {
			get_varint(&q, gend, &g);
			idx += g;
			for (size_t b = 0; b < esz; b++) undo[b * cnt + i] = dst[idx * esz + b];
			idx++;
		}
		int rc = xfer_journal_blob(j, enc, esz, dst, n, p, HEAD_BYTES + glen, undo, cnt * esz, err);
		free(undo);
		if (rc != 0) {
			if (st) XXH3_freeState(st);
			return -1;
		}
	}
	size_t hashed = 0; /* bytes of dst below this are final and hashed */
	q = gaps;
	idx = 0;
	for (uint64_t i = 0; i < cnt; i++) {
		get_varint(&q, gend, &g);
		idx += g;
		size_t at = (size_t)idx * esz;
		if (st && at >= hashed + SCAN_CHUNK) { /* no change below at remains */
			size_t upto = at / SCAN_CHUNK * SCAN_CHUNK;
			XXH3_128bits_update(st, dst + hashed, upto - hashed);
			hashed = upto;
		}
		unsigned char *e = dst + at;
		for (size_t b = 0; b < esz; b++) {
			unsigned char v = vals[b * cnt + i];
			e[b] = enc == XFER_ENC_XOR ? (unsigned char)(e[b] ^ v) : v;
		}
		idx++;
	}
	if (st) {
		XXH3_128bits_update(st, dst + hashed, n - hashed);
		XXH128_hash_t h = XXH3_128bits_digest(st);
		*sum = (xfer_sum){ h.low64, h.high64 };
		XXH3_freeState(st);
	}
	return 0;
}

int xfer_zstd_compress(int level, const void *src, size_t n, xfer_buf *out, xfer_err *err)
{
	if (level <= 0) {
		if (xfer_buf_append(out, src, n) != 0) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		return 0;
	}
	size_t bound = ZSTD_compressBound(n);
	if (xfer_buf_reserve(out, bound) != 0) return xfer_fail(err, XFER_ENOMEM, "zstd: out of memory");
	size_t r = ZSTD_compress(out->p + out->len, bound, src, n, level);
	if (ZSTD_isError(r)) return xfer_fail(err, XFER_EIO, "zstd: %s", ZSTD_getErrorName(r));
	out->len += r;
	return 0;
}

int xfer_zstd_decompress(const void *src, size_t n, xfer_buf *out, size_t max, xfer_err *err)
{
	unsigned long long sz = ZSTD_getFrameContentSize(src, n);
	if (sz == ZSTD_CONTENTSIZE_ERROR || sz == ZSTD_CONTENTSIZE_UNKNOWN)
		return xfer_fail(err, XFER_EFORMAT, "zstd: not a frame with a known size");
	if (sz > max) return xfer_fail(err, XFER_EFORMAT, "zstd: frame of %llu bytes, at most %zu expected", sz, max);
	if (xfer_buf_reserve(out, (size_t)sz + 1) != 0) return xfer_fail(err, XFER_ENOMEM, "zstd: out of memory");
	size_t r = ZSTD_decompress(out->p + out->len, (size_t)sz, src, n);
	if (ZSTD_isError(r)) return xfer_fail(err, XFER_EFORMAT, "zstd: %s", ZSTD_getErrorName(r));
	if (r != sz) return xfer_fail(err, XFER_EFORMAT, "zstd: %zu bytes, header says %llu", r, sz);
	out->len += r;
	return 0;
}
