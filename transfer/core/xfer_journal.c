/* transfer/core/xfer_journal.c: the receiver's undo journal.
 *
 * Before a receiver overwrites its buffers it records what was there, so that
 * a failure later in the same update (a checksum, a vanished peer) puts the
 * previous version back exactly.  Five kinds of record:
 *   RUN     address, length, the old bytes (xfer_journal_save)
 *   SPARSE  a base address, then for each run of changed 8-byte words: the
 *           gap since the previous run and the run's length (LEB128), and the
 *           old bytes; an update that changes 1% of bf16 elements costs about
 *           11 bytes per changed word instead of a 28-byte header each
 *   BLOCKS  host copies (xfer_journal_copy): a base address, then for each
 *           64-byte block that changes: the blocks skipped since the last
 *           one (LEB128), a byte whose bit w says word w changed, and the old
 *           bytes of those words; made without a branch per word, so a 1%
 *           update of bf16 (a changed word in about every fourth block) costs
 *           little more than reading both buffers, and only the blocks that
 *           change are written
 *   SPARSE_CUDA  the same as SPARSE for CUDA device memory (xfer_journal_copy_device):
 *           the old bytes are read back from the device in 4 MiB pieces into
 *           a pinned buffer of the journal's and compared there with the new
 *           bytes, so only what changes is kept (not the whole stripe: a 1%
 *           update journals about 1% however large the model); a piece that
 *           does not change is not written to the device either.  Undo reads
 *           each record's span back in windows of 4 MiB, puts the old runs in
 *           and writes the window to the device again.
 *   BLOB    a delta payload whose application undoes a delta (XOR undoes
 *           itself; an overwrite is undone by the same positions, old values)
 * Records go to a 1 MiB buffer; full buffers are kept as chunks in memory
 * up to 32 MiB (a 1% update of 2 GiB of bf16 needs about 100 MiB, 10 bytes
 * a changed word, in all of a receiver's stripe journals; a caller may
 * lower the limit: xfer_journal_limit), and beyond that written to an
 * unlinked temporary file (O_TMPFILE), so memory stays under 34 MiB whatever
 * the update size (38 MiB with the pinned piece of a device journal).
 * Undo walks chunks and records newest first (each record
 * ends with its own size), so the oldest saved bytes win when a place changed
 * twice (a catch-up through several versions), host and device records alike.
 * Device copies go through the CUDA runtime, looked up (dlopen) only when a
 * device record is made or undone, so host-only users never load it; tests
 * can route them through xfer_hooks.device_copy instead, with host memory
 * standing in for the device. */
#include "transfer/core/xfer_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	JOURNAL_CHUNK = 1 << 20,     /* buffer size: a chunk of the journal */
	MEM_CHUNKS = 32,             /* chunks kept in memory before the file is used */
	JOURNAL_MAX_RUN = 256 << 10, /* longer runs are split so a record fits a chunk */
	REC_RUN = 1,
	REC_BLOB = 2,
	REC_SPARSE = 3,
	REC_SPARSE_CUDA = 4,
	REC_BLOCKS = 5,
	SPARSE_MAX = JOURNAL_CHUNK - 4096, /* payload of one SPARSE record */
	DEV_PIECE = 4 << 20,         /* device bytes read back (and undone) at a time */
};

#ifndef DIFF_PREFETCH
#define DIFF_PREFETCH 1024 /* bytes ahead that diff() asks for the old buffer */
#endif

typedef struct {
	uint8_t type, enc, esz, pad;
	uint32_t plen;   /* bytes of data after the header */
	uint64_t addr;   /* where it goes */
	uint64_t n;      /* BLOB: bytes of the destination tensor */
} rec_head;          /* followed by plen bytes, then a uint32 total record size */

typedef struct {
	off_t off;          /* in the file, when mem is NULL */
	size_t len;
	unsigned char *mem; /* or in memory */
} chunk;

struct xfer_journal {
	int fd;
	char dir[1024];
	unsigned char *buf;
	size_t len;
	chunk *chunks;
	size_t nchunks, capchunks;
	off_t fend;
	uint64_t total;
	unsigned char *pool[MEM_CHUNKS]; /* in-memory chunks, kept across versions */
	size_t nmem, maxmem;             /* in use; the most allowed (xfer_journal_limit) */
	/* the SPARSE record being built */
	unsigned char *sp;
	size_t splen;
	uint64_t spbase, spend; /* its base; the end of its last run (addresses) */
	uint8_t sptype;         /* REC_SPARSE, REC_SPARSE_CUDA or REC_BLOCKS */
	/* device journals: a piece of device memory on the host (pinned when
	 * CUDA gives it), and the seconds spent journaling */
	unsigned char *scr;
	int scr_pinned;
	double seconds;
};

xfer_journal *xfer_journal_new(const char *dir, xfer_err *err)
{
	xfer_journal *j = calloc(1, sizeof *j);
	if (!j) { xfer_fail(err, XFER_ENOMEM, "journal: out of memory"); return NULL; }
	j->fd = -1;
	j->maxmem = MEM_CHUNKS;
	if (!dir || !*dir) dir = getenv("TMPDIR");
	if (!dir || !*dir) dir = "/tmp";
	snprintf(j->dir, sizeof j->dir, "%s", dir);
	j->buf = malloc(JOURNAL_CHUNK);
	j->sp = malloc(SPARSE_MAX);
	if (!j->buf || !j->sp) { xfer_fail(err, XFER_ENOMEM, "journal: out of memory"); xfer_journal_free(&j); }
	return j;
}

void xfer_journal_free(xfer_journal **jp)
{
	if (!jp || !*jp) return;
	xfer_journal *j = *jp;
	if (j->fd >= 0) close(j->fd);
	free(j->buf);
	free(j->sp);
	if (j->scr_pinned) {
		const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
		if (cu) cu->FreeHost(j->scr);
	} else {
		free(j->scr);
	}
	free(j->chunks);
	for (int i = 0; i < MEM_CHUNKS; i++) free(j->pool[i]);
	free(j);
	*jp = NULL;
}

void xfer_journal_reset(xfer_journal *j)
{
	j->splen = 0;
	j->spbase = j->spend = 0;
	j->len = 0;
	j->seconds = 0;
	j->nchunks = 0;
	j->nmem = 0;
	j->fend = 0;
	j->total = 0;
	if (j->fd >= 0 && ftruncate(j->fd, 0) != 0) { /* the next write extends it again */ }
}

/* Memory beyond the fixed buffers (the record buffer, the SPARSE record and
 * a device journal's pinned piece) that the journal may keep before it spills
 * to its file; pooled chunks above a lowered limit are freed. */
void xfer_journal_limit(xfer_journal *j, uint64_t bytes)
{
	uint64_t n = bytes / JOURNAL_CHUNK;
	j->maxmem = n < MEM_CHUNKS ? (size_t)n : MEM_CHUNKS;
	for (size_t i = j->maxmem > j->nmem ? j->maxmem : j->nmem; i < MEM_CHUNKS; i++) {
		free(j->pool[i]);
		j->pool[i] = NULL;
	}
}

uint64_t xfer_journal_bytes(const xfer_journal *j) { return j ? j->total : 0; }
uint64_t xfer_journal_mem_bytes(const xfer_journal *j) { return j ? (uint64_t)j->nmem * JOURNAL_CHUNK : 0; }
double xfer_journal_seconds(const xfer_journal *j) { return j ? j->seconds : 0; }

static int open_file(xfer_journal *j, xfer_err *err)
{
	if (j->fd >= 0) return 0;
	j->fd = open(j->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (j->fd < 0) {
		char path[1100];
		snprintf(path, sizeof path, "%s/skein-journal-XXXXXX", j->dir);
		j->fd = mkostemp(path, O_CLOEXEC);
		if (j->fd < 0) return xfer_fail_errno(err, XFER_EIO, "journal: temporary file in %s", j->dir);
		unlink(path);
	}
	return 0;
}

static int new_chunk(xfer_journal *j, xfer_err *err)
{
	if (j->nchunks < j->capchunks) return 0;
	size_t cap = j->capchunks ? j->capchunks * 2 : 64;
	chunk *c = realloc(j->chunks, cap * sizeof *c);
	if (!c) return xfer_fail(err, XFER_ENOMEM, "journal: out of memory");
	j->chunks = c;
	j->capchunks = cap;
	return 0;
}

static int push_chunk(xfer_journal *j, const void *p, size_t n, xfer_err *err)
{
	if (new_chunk(j, err) != 0) return -1;
	if (n <= JOURNAL_CHUNK && j->nmem < j->maxmem) {
		if (!j->pool[j->nmem] && !(j->pool[j->nmem] = malloc(JOURNAL_CHUNK)))
			return xfer_fail(err, XFER_ENOMEM, "journal: out of memory");
		memcpy(j->pool[j->nmem], p, n);
		j->chunks[j->nchunks++] = (chunk){ 0, n, j->pool[j->nmem++] };
		return 0;
	}
	if (open_file(j, err) != 0) return -1;
	if (lseek(j->fd, j->fend, SEEK_SET) < 0) return xfer_fail_errno(err, XFER_EIO, "journal: seek");
	if (xfer_write_all(j->fd, p, n, err) != 0) { xfer_err_prefix(err, "journal"); return -1; }
	j->chunks[j->nchunks++] = (chunk){ j->fend, n, NULL };
	j->fend += (off_t)n;
	return 0;
}

static int flush(xfer_journal *j, xfer_err *err)
{
	if (!j->len) return 0;
	if (push_chunk(j, j->buf, j->len, err) != 0) return -1;
	j->len = 0;
	return 0;
}

/* Appends one record; a record larger than the buffer becomes its own chunk. */
static int add_rec(xfer_journal *j, const rec_head *h, const void *a, size_t alen, const void *b,
		   size_t blen, xfer_err *err)
{
	uint32_t total = (uint32_t)(sizeof *h + alen + blen + sizeof(uint32_t));
	j->total += total;
	if (total > JOURNAL_CHUNK) {
		unsigned char *tmp = malloc(total);
		if (!tmp) return xfer_fail(err, XFER_ENOMEM, "journal: out of memory");
		memcpy(tmp, h, sizeof *h);
		memcpy(tmp + sizeof *h, a, alen);
		if (blen) memcpy(tmp + sizeof *h + alen, b, blen);
		memcpy(tmp + total - sizeof(uint32_t), &total, sizeof total);
		int rc = flush(j, err) == 0 ? push_chunk(j, tmp, total, err) : -1;
		free(tmp);
		return rc;
	}
	if (j->len + total > JOURNAL_CHUNK && flush(j, err) != 0) return -1;
	unsigned char *p = j->buf + j->len;
	memcpy(p, h, sizeof *h);
	memcpy(p + sizeof *h, a, alen);
	if (blen) memcpy(p + sizeof *h + alen, b, blen);
	memcpy(p + total - sizeof(uint32_t), &total, sizeof total);
	j->len += total;
	return 0;
}

static int add_run(xfer_journal *j, const unsigned char *addr, size_t n, xfer_err *err)
{
	while (n) {
		size_t k = n > JOURNAL_MAX_RUN ? JOURNAL_MAX_RUN : n;
		rec_head h = { .type = REC_RUN, .plen = (uint32_t)k, .addr = (uint64_t)(uintptr_t)addr };
		if (add_rec(j, &h, addr, k, NULL, 0, err) != 0) return -1;
		addr += k;
		n -= k;
	}
	return 0;
}

static int sparse_flush(xfer_journal *j, xfer_err *err)
{
	if (!j->splen) return 0;
	rec_head h = { .type = j->sptype, .plen = (uint32_t)j->splen, .addr = j->spbase };
	j->splen = 0;
	j->spbase = j->spend = 0;
	return add_rec(j, &h, j->sp, h.plen, NULL, 0, err);
}

static inline unsigned char *put_varint(unsigned char *q, uint64_t v)
{
	while (v >= 0x80) { *q++ = (unsigned char)(v | 0x80); v >>= 7; }
	*q++ = (unsigned char)v;
	return q;
}

/* Adds the old bytes of [addr, addr+n), read from old, to the SPARSE record
 * of the given type being built (addr is where they go back: a host or a
 * device address). */
static int sparse_add(xfer_journal *j, uint8_t type, uint64_t addr, const unsigned char *old, size_t n,
		      xfer_err *err)
{
	while (n) {
		size_t k = n > SPARSE_MAX / 2 ? SPARSE_MAX / 2 : n;
		if (j->splen && (j->splen + k + 20 > SPARSE_MAX || addr < j->spend || type != j->sptype))
			if (sparse_flush(j, err) != 0) return -1;
		if (!j->splen) {
			j->spbase = j->spend = addr;
			j->sptype = type;
		}
		unsigned char *q = put_varint(j->sp + j->splen, addr - j->spend);
		q = put_varint(q, k);
		memcpy(q, old, k);
		j->splen = (size_t)(q + k - j->sp);
		j->spend = addr + k;
		addr += k;
		old += k;
		n -= k;
	}
	return 0;
}

/* One run of a SPARSE record at p: its gap and length; returns where its old
 * bytes are, or NULL when the record is damaged. */
static const unsigned char *sparse_run(const unsigned char *p, const unsigned char *end, uint64_t *gap,
				       uint64_t *n)
{
	uint64_t v[2] = { 0, 0 };
	for (int f = 0; f < 2; f++)
		for (int sh = 0;; sh += 7) {
			if (p >= end || sh > 63) return NULL;
			unsigned char c = *p++;
			v[f] |= (uint64_t)(c & 0x7f) << sh;
			if (!(c & 0x80)) break;
		}
	if (v[1] > (uint64_t)(end - p)) return NULL;
	*gap = v[0];
	*n = v[1];
	return p;
}

static int undo_sparse(const unsigned char *p, size_t len, unsigned char *base, xfer_err *err)
{
	const unsigned char *end = p + len;
	while (p < end) {
		uint64_t gap, n;
		if (!(p = sparse_run(p, end, &gap, &n)))
			return xfer_fail(err, XFER_EFORMAT, "journal: damaged sparse record");
		base += gap;
		memcpy(base, p, n);
		base += n;
		p += n;
	}
	return 0;
}

/* ---- device memory ---- */

/* A copy between the host and CUDA device memory (kind XFER_CUDA_D2H or
 * XFER_CUDA_H2D); tests may stand in for the device. */
static int dev_copy(void *dst, const void *src, size_t n, int kind, xfer_err *err)
{
	if (xfer_hooks.device_copy) return xfer_hooks.device_copy(dst, src, n, kind, err);
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) return xfer_fail(err, XFER_EUNAVAIL, "journal: device memory but %s", why);
	return xfer_cuda_check(cu, cu->Memcpy(dst, src, n, kind),
			       kind == XFER_CUDA_D2H ? "journal: copy from the device" : "journal: copy to the device",
			       err);
}

/* The journal's host piece of device memory, made on first use: pinned (the
 * copies run at full speed) unless tests stand in for the device. */
static int get_scratch(xfer_journal *j, xfer_err *err)
{
	if (j->scr) return 0;
	if (!xfer_hooks.device_copy) {
		char why[256];
		const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
		if (!cu) return xfer_fail(err, XFER_EUNAVAIL, "journal: device memory but %s", why);
		void *p = NULL;
		if (cu->MallocHost(&p, DEV_PIECE) == 0 && p) {
			j->scr = p;
			j->scr_pinned = 1;
			return 0;
		}
	}
	if (!(j->scr = malloc(DEV_PIECE))) return xfer_fail(err, XFER_ENOMEM, "journal: out of memory");
	return 0;
}

/* Puts a SPARSE_CUDA record back: the span of its runs is read from the
 * device a window at a time, the old runs copied in, the window written
 * back.  Runs ascend within a record, so each window is read and written
 * once.  The whole record is checked before the device is touched. */
static int undo_sparse_device(xfer_journal *j, const unsigned char *p, size_t len, uint64_t base, xfer_err *err)
{
	const unsigned char *end = p + len, *q = p;
	uint64_t a = base, gap, n;
	while (q < end) {
		if (!(q = sparse_run(q, end, &gap, &n)))
			return xfer_fail(err, XFER_EFORMAT, "journal: damaged sparse record");
		a += gap + n;
		q += n;
	}
	uint64_t span_end = a, wlo = 0, wlen = 0;
	if (get_scratch(j, err) != 0) return -1;
	for (a = base, q = p; q < end;) {
		q = sparse_run(q, end, &gap, &n);
		a += gap;
		while (n) {
			if (!wlen || a < wlo || a >= wlo + wlen) {
				if (wlen && dev_copy((void *)(uintptr_t)wlo, j->scr, wlen, XFER_CUDA_H2D, err) != 0) return -1;
				wlo = a;
				wlen = span_end - a < DEV_PIECE ? span_end - a : DEV_PIECE;
				if (dev_copy(j->scr, (const void *)(uintptr_t)wlo, wlen, XFER_CUDA_D2H, err) != 0) return -1;
			}
			uint64_t k = wlo + wlen - a < n ? wlo + wlen - a : n;
			memcpy(j->scr + (a - wlo), q, k);
			a += k;
			q += k;
			n -= k;
		}
	}
	if (wlen && dev_copy((void *)(uintptr_t)wlo, j->scr, wlen, XFER_CUDA_H2D, err) != 0) return -1;
	return 0;
}

/* The place diff() works on: the old bytes dst (on the host), the address
 * they go back to (the device memory they were read from) and the record
 * type. */
typedef struct {
	const unsigned char *dst;
	uint64_t addr;
	uint8_t type;
} diff_to;

static inline uint64_t ld8(const unsigned char *p)
{
	uint64_t x;
	memcpy(&x, p, 8);
	return x;
}

/* Closes the run [start, end): journal dst's bytes there.  The common
 * case, a short run after the last one of the record being built (a changed
 * bf16 element or two: one 8-byte word), is written here; the rest goes
 * through sparse_add. */
static inline int close_run(xfer_journal *j, const diff_to *to, size_t start, size_t end, xfer_err *err)
{
	size_t len = end - start;
	uint64_t addr = to->addr + start;
	if (j->splen && j->sptype == to->type && addr >= j->spend && len < 128 && j->splen + len + 12 <= SPARSE_MAX) {
		unsigned char *q = put_varint(j->sp + j->splen, addr - j->spend);
		*q++ = (unsigned char)len;
		memcpy(q, to->dst + start, len);
		j->splen = (size_t)(q + len - j->sp);
		j->spend = addr + len;
		return 0;
	}
	return sparse_add(j, to->type, addr, to->dst + start, len, err);
}

/* Bit w set: 8-byte word w of the 64 bytes at a and b differs. */
static inline unsigned diff_mask(const unsigned char *a, const unsigned char *b)
{
	unsigned m = 0;
#pragma GCC unroll 8
	for (unsigned w = 0; w < 8; w++) m |= (unsigned)(ld8(a + 8 * w) != ld8(b + 8 * w)) << w;
	return m;
}

/* Device journals: finds runs of differing 8-byte words between to->dst
 * (the device's bytes, read back) and src and journals dst's bytes there.
 * Blocks of 64 bytes are compared without a branch per word and their runs
 * found with bit scans (runs carry across blocks). */
static int diff(xfer_journal *j, const diff_to *to, const unsigned char *src, size_t n, xfer_err *err)
{
	const unsigned char *dst = to->dst;
	size_t i = 0, run = 0; /* run: start of the differing run still open + 1 */
	for (; i + 64 <= n; i += 64) {
#if DIFF_PREFETCH
		/* the hardware's prefetchers stop at page boundaries */
		__builtin_prefetch(dst + i + DIFF_PREFETCH);
#endif
		unsigned m = diff_mask(dst + i, src + i), w = 0;
		if (m == 0) {
			if (run && close_run(j, to, run - 1, i, err) != 0) return -1;
			run = 0;
			continue;
		}
		if (run) { /* the open run goes on through the block's low differing words */
			if (m == 0xff) continue;
			w = (unsigned)__builtin_ctz(~m);
			if (close_run(j, to, run - 1, i + 8 * w, err) != 0) return -1;
			run = 0;
		}
		while (m >> w) {
			unsigned a = w + (unsigned)__builtin_ctz(m >> w);
			unsigned b = a + (unsigned)__builtin_ctz(~(m >> a)); /* m < 256: b <= 8 */
			if (b == 8) {
				run = i + 8 * a + 1;
				break;
			}
			if (close_run(j, to, i + 8 * a, i + 8 * b, err) != 0) return -1;
			w = b;
		}
	}
	if (i < n && memcmp(dst + i, src + i, n - i) != 0 && !run) run = i + 1;
	if (run && close_run(j, to, run - 1, n, err) != 0) return -1;
	return sparse_flush(j, err);
}

enum { BLOCK_ENTRY_MAX = 10 + 1 + 64 + 8 }; /* gap, mask, old words, and the slack of the last store */

/* Host copies: src over dst 64 bytes at a time, journaling a BLOCKS entry
 * for each block where an 8-byte word differs (the old words are stored
 * unconditionally and kept by advancing past them: no branch per word); a
 * block that differs is written whole, one that does not is not written.
 * The last bytes (under 64) go as a SPARSE run.  The loop is built twice,
 * with the scalar compare and with AVX2's (two 32-byte compares a block),
 * and the CPU picks one: the compare is most of the work where few words
 * change, and the vector one runs near memory speed (the always_inline body
 * takes its compare as a constant, so each copy inlines its own). */
typedef unsigned (*mask_fn)(const unsigned char *, const unsigned char *);

static inline __attribute__((always_inline)) int blocks_loop(xfer_journal *j, unsigned char *dst,
							     const unsigned char *src, size_t n, mask_fn mask,
							     xfer_err *err)
{
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
#if DIFF_PREFETCH
		__builtin_prefetch(dst + i + DIFF_PREFETCH); /* the hardware's prefetchers stop at page boundaries */
#endif
		unsigned m = mask(dst + i, src + i);
		if (!m) continue;
		uint64_t addr = (uint64_t)(uintptr_t)(dst + i);
		if (!j->splen || j->sptype != REC_BLOCKS || j->splen + BLOCK_ENTRY_MAX > SPARSE_MAX) {
			if (sparse_flush(j, err) != 0) return -1;
			j->spbase = j->spend = addr;
			j->sptype = REC_BLOCKS;
		}
		unsigned char *q = put_varint(j->sp + j->splen, (addr - j->spend) / 64);
		*q++ = (unsigned char)m;
		for (unsigned w = 0; w < 8; w++) {
			uint64_t old = ld8(dst + i + 8 * w);
			memcpy(q, &old, 8);
			q += 8 * (m >> w & 1);
		}
		memcpy(dst + i, src + i, 64);
		j->splen = (size_t)(q - j->sp);
		j->spend = addr + 64;
	}
	if (i < n && memcmp(dst + i, src + i, n - i) != 0) {
		if (sparse_add(j, REC_SPARSE, (uint64_t)(uintptr_t)(dst + i), dst + i, n - i, err) != 0) return -1;
		memcpy(dst + i, src + i, n - i);
	}
	return sparse_flush(j, err);
}

static int blocks_scalar(xfer_journal *j, unsigned char *dst, const unsigned char *src, size_t n, xfer_err *err)
{
	return blocks_loop(j, dst, src, n, diff_mask, err);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2"))) static inline unsigned diff_mask_avx2(const unsigned char *a, const unsigned char *b)
{
	__m256i a0 = _mm256_loadu_si256((const __m256i *)a), b0 = _mm256_loadu_si256((const __m256i *)b);
	__m256i a1 = _mm256_loadu_si256((const __m256i *)(a + 32)), b1 = _mm256_loadu_si256((const __m256i *)(b + 32));
	unsigned eq0 = (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(a0, b0)));
	unsigned eq1 = (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(a1, b1)));
	return ~(eq0 | eq1 << 4) & 0xffu;
}

__attribute__((target("avx2"))) static int blocks_avx2(xfer_journal *j, unsigned char *dst, const unsigned char *src,
						       size_t n, xfer_err *err)
{
	return blocks_loop(j, dst, src, n, diff_mask_avx2, err);
}

static int diff_blocks(xfer_journal *j, unsigned char *dst, const unsigned char *src, size_t n, xfer_err *err)
{
	/* SKEIN_JOURNAL_SCALAR=1: the scalar loop, to compare the two in one build */
	static atomic_int avx2 = -1; /* racing threads store the same answer */
	int use = atomic_load_explicit(&avx2, memory_order_relaxed);
	if (use < 0) {
		const char *e = getenv("SKEIN_JOURNAL_SCALAR");
		__builtin_cpu_init();
		use = __builtin_cpu_supports("avx2") && !(e && *e && strcmp(e, "0") != 0);
		atomic_store_explicit(&avx2, use, memory_order_relaxed);
	}
	return use && !xfer_hooks.journal_scalar ? blocks_avx2(j, dst, src, n, err) : blocks_scalar(j, dst, src, n, err);
}
#else
static int diff_blocks(xfer_journal *j, unsigned char *dst, const unsigned char *src, size_t n, xfer_err *err)
{
	return blocks_scalar(j, dst, src, n, err);
}
#endif

/* Puts a BLOCKS record back. */
static int undo_blocks(const unsigned char *p, size_t len, unsigned char *base, xfer_err *err)
{
	const unsigned char *end = p + len;
	while (p < end) {
		uint64_t gap = 0;
		for (int sh = 0;; sh += 7) {
			if (p >= end || sh > 63) return xfer_fail(err, XFER_EFORMAT, "journal: damaged block record");
			unsigned char c = *p++;
			gap |= (uint64_t)(c & 0x7f) << sh;
			if (!(c & 0x80)) break;
		}
		if (p >= end) return xfer_fail(err, XFER_EFORMAT, "journal: damaged block record");
		unsigned m = *p++;
		if ((size_t)(end - p) < 8u * (unsigned)__builtin_popcount(m))
			return xfer_fail(err, XFER_EFORMAT, "journal: damaged block record");
		base += 64 * gap;
		for (unsigned w = 0; w < 8; w++)
			if (m >> w & 1) {
				memcpy(base + 8 * w, p, 8);
				p += 8;
			}
		base += 64;
	}
	return 0;
}

int xfer_journal_copy(xfer_journal *j, void *dst, const void *src, size_t n, xfer_err *err)
{
	if (!j) { memcpy(dst, src, n); return 0; }
	double t0 = xfer_now();
	int rc = diff_blocks(j, dst, src, n, err);
	j->seconds += xfer_now() - t0;
	return rc;
}

int xfer_journal_copy_device(xfer_journal *j, void *dst, const void *src, size_t n, xfer_err *err)
{
	if (!j) return dev_copy(dst, src, n, XFER_CUDA_H2D, err);
	if (get_scratch(j, err) != 0) return -1;
	double t0 = xfer_now(), writing = 0;
	for (size_t o = 0; o < n; o += DEV_PIECE) {
		size_t k = n - o < DEV_PIECE ? n - o : DEV_PIECE;
		unsigned char *d = (unsigned char *)dst + o;
		const unsigned char *s = (const unsigned char *)src + o;
		if (dev_copy(j->scr, d, k, XFER_CUDA_D2H, err) != 0) return -1;
		uint64_t before = j->total;
		diff_to to = { j->scr, (uint64_t)(uintptr_t)d, REC_SPARSE_CUDA };
		if (diff(j, &to, s, k, err) != 0) return -1;
		if (j->total == before) continue; /* the same bytes: nothing to write */
		double t1 = xfer_now();
		if (dev_copy(d, s, k, XFER_CUDA_H2D, err) != 0) return -1;
		writing += xfer_now() - t1;
	}
	j->seconds += xfer_now() - t0 - writing;
	return 0;
}

int xfer_journal_save(xfer_journal *j, const void *dst, size_t n, xfer_err *err)
{
	return add_run(j, (const unsigned char *)dst, n, err);
}

int xfer_journal_blob(xfer_journal *j, xfer_encoding enc, size_t esz, void *dst, size_t n,
		      const void *head, size_t hlen, const void *payload, size_t plen, xfer_err *err)
{
	rec_head h = { .type = REC_BLOB, .enc = (uint8_t)enc, .esz = (uint8_t)esz,
		       .plen = (uint32_t)(hlen + plen), .addr = (uint64_t)(uintptr_t)dst, .n = n };
	if (hlen + plen > UINT32_MAX - 64)
		return xfer_fail(err, XFER_EINVAL, "journal: a delta of %zu bytes is too large", plen);
	return add_rec(j, &h, head, hlen, payload, plen, err);
}

/* Undoes the records of one chunk, newest first. */
static int undo_chunk(xfer_journal *j, const unsigned char *p, size_t len, xfer_err *err)
{
	size_t end = len;
	while (end) {
		uint32_t total;
		if (end < sizeof total + sizeof(rec_head))
			return xfer_fail(err, XFER_EFORMAT, "journal: damaged chunk");
		memcpy(&total, p + end - sizeof total, sizeof total);
		if (total > end || total < sizeof(rec_head) + sizeof total)
			return xfer_fail(err, XFER_EFORMAT, "journal: damaged record");
		const unsigned char *r = p + end - total;
		rec_head h;
		memcpy(&h, r, sizeof h);
		void *addr = (void *)(uintptr_t)h.addr;
		if (h.type == REC_RUN) {
			memcpy(addr, r + sizeof h, h.plen);
		} else if (h.type == REC_SPARSE) {
			if (undo_sparse(r + sizeof h, h.plen, addr, err) != 0) return -1;
		} else if (h.type == REC_BLOCKS) {
			if (undo_blocks(r + sizeof h, h.plen, addr, err) != 0) return -1;
		} else if (h.type == REC_SPARSE_CUDA) {
			if (undo_sparse_device(j, r + sizeof h, h.plen, h.addr, err) != 0) return -1;
		} else if (h.type != REC_BLOB) {
			return xfer_fail(err, XFER_EFORMAT, "journal: damaged record (type %u)", h.type);
		} else if (xfer_delta_apply((xfer_encoding)h.enc, h.esz, addr, h.n, r + sizeof h, h.plen,
					    NULL, NULL, err) != 0) {
			xfer_err_prefix(err, "journal undo");
			return -1;
		}
		end -= total;
	}
	return 0;
}

int xfer_journal_undo(xfer_journal *j, xfer_err *err)
{
	if (!j) return 0;
	int rc = 0;
	if (j->splen) /* a record left open by a failed copy: the newest of all */
		rc = j->sptype == REC_SPARSE_CUDA ? undo_sparse_device(j, j->sp, j->splen, j->spbase, err)
		     : j->sptype == REC_BLOCKS	 ? undo_blocks(j->sp, j->splen, (unsigned char *)(uintptr_t)j->spbase, err)
						 : undo_sparse(j->sp, j->splen, (unsigned char *)(uintptr_t)j->spbase, err);
	if (rc == 0) rc = undo_chunk(j, j->buf, j->len, err);
	unsigned char *tmp = NULL;
	for (size_t c = j->nchunks; rc == 0 && c-- > 0;) {
		if (j->chunks[c].mem) {
			rc = undo_chunk(j, j->chunks[c].mem, j->chunks[c].len, err);
			continue;
		}
		free(tmp);
		tmp = malloc(j->chunks[c].len);
		if (!tmp) { rc = xfer_fail(err, XFER_ENOMEM, "journal: out of memory"); break; }
		if (lseek(j->fd, j->chunks[c].off, SEEK_SET) < 0 ||
		    xfer_read_all(j->fd, tmp, j->chunks[c].len, err) != 0) {
			rc = xfer_fail_errno(err, XFER_EIO, "journal: read back");
			break;
		}
		rc = undo_chunk(j, tmp, j->chunks[c].len, err);
	}
	free(tmp);
	xfer_journal_reset(j);
	return rc;
}
