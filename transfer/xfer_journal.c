/* transfer/xfer_journal.c: the receiver's undo journal.
 *
 * Before a receiver overwrites its buffers it records what was there, so that
 * a failure later in the same update (a checksum, a vanished peer) puts the
 * previous version back exactly.  Three kinds of record:
 *   RUN     address, length, the old bytes (xfer_journal_save)
 *   SPARSE  a base address, then for each run of changed 8-byte words: the
 *           gap since the previous run and the run's length (LEB128), and the
 *           old bytes; an update that changes 1% of bf16 elements costs about
 *           11 bytes per changed word instead of a 28-byte header each
 *   BLOB    a delta payload whose application undoes a delta (XOR undoes
 *           itself; an overwrite is undone by the same positions, old values)
 * Records go to a 1 MiB buffer; full buffers are kept as chunks in memory
 * up to 32 MiB (a 1% update of 2 GiB of bf16 needs about 14 MiB), and beyond
 * that written to an unlinked temporary file (O_TMPFILE), so memory stays
 * under 34 MiB whatever the update size.  Undo walks chunks and records newest first (each record ends
 * with its own size), so the oldest saved bytes win when a place changed
 * twice (a catch-up through several versions). */
#include "transfer/xfer_int.h"

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
	SPARSE_MAX = JOURNAL_CHUNK - 4096, /* payload of one SPARSE record */
};

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
	size_t nmem;
	/* the SPARSE record being built */
	unsigned char *sp;
	size_t splen;
	const unsigned char *spbase, *spend; /* its base; the end of its last run */
};

xfer_journal *xfer_journal_new(const char *dir, xfer_err *err)
{
	xfer_journal *j = calloc(1, sizeof *j);
	if (!j) { xfer_fail(err, XFER_ENOMEM, "journal: out of memory"); return NULL; }
	j->fd = -1;
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
	free(j->chunks);
	for (int i = 0; i < MEM_CHUNKS; i++) free(j->pool[i]);
	free(j);
	*jp = NULL;
}

void xfer_journal_reset(xfer_journal *j)
{
	j->splen = 0;
	j->spbase = j->spend = NULL;
	j->len = 0;
	j->nchunks = 0;
	j->nmem = 0;
	j->fend = 0;
	j->total = 0;
	if (j->fd >= 0 && ftruncate(j->fd, 0) != 0) { /* the next write extends it again */ }
}

uint64_t xfer_journal_bytes(const xfer_journal *j) { return j ? j->total : 0; }

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
	if (n <= JOURNAL_CHUNK && j->nmem < MEM_CHUNKS) {
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
	rec_head h = { .type = REC_SPARSE, .plen = (uint32_t)j->splen, .addr = (uint64_t)(uintptr_t)j->spbase };
	j->splen = 0;
	j->spbase = j->spend = NULL;
	return add_rec(j, &h, j->sp, h.plen, NULL, 0, err);
}

static inline unsigned char *put_varint(unsigned char *q, uint64_t v)
{
	while (v >= 0x80) { *q++ = (unsigned char)(v | 0x80); v >>= 7; }
	*q++ = (unsigned char)v;
	return q;
}

/* Adds the old bytes of [addr, addr+n) to the SPARSE record being built. */
static int sparse_add(xfer_journal *j, const unsigned char *addr, size_t n, xfer_err *err)
{
	while (n) {
		size_t k = n > SPARSE_MAX / 2 ? SPARSE_MAX / 2 : n;
		if (j->splen + k + 20 > SPARSE_MAX || (j->spend && addr < j->spend))
			if (sparse_flush(j, err) != 0) return -1;
		if (!j->spbase) j->spbase = j->spend = addr;
		unsigned char *q = put_varint(j->sp + j->splen, (uint64_t)(addr - j->spend));
		q = put_varint(q, k);
		memcpy(q, addr, k);
		j->splen = (size_t)(q + k - j->sp);
		j->spend = addr + k;
		addr += k;
		n -= k;
	}
	return 0;
}

static int undo_sparse(const unsigned char *p, size_t len, unsigned char *base, xfer_err *err)
{
	const unsigned char *end = p + len;
	while (p < end) {
		uint64_t v[2] = { 0, 0 };
		for (int f = 0; f < 2; f++)
			for (int sh = 0;; sh += 7) {
				if (p >= end || sh > 63) return xfer_fail(err, XFER_EFORMAT, "journal: damaged sparse record");
				unsigned char c = *p++;
				v[f] |= (uint64_t)(c & 0x7f) << sh;
				if (!(c & 0x80)) break;
			}
		if (v[1] > (uint64_t)(end - p)) return xfer_fail(err, XFER_EFORMAT, "journal: damaged sparse record");
		base += v[0];
		memcpy(base, p, v[1]);
		base += v[1];
		p += v[1];
	}
	return 0;
}

/* Finds runs of differing 8-byte words between dst and src; journals dst's
 * bytes there and, when copy, writes src over them.  Blocks of 64 equal bytes
 * are skipped with one comparison, so an update that changes 1% costs about
 * one read of both buffers. */
/* Closes the run [start, end): journal dst's bytes there, then copy src in. */
static inline int close_run(xfer_journal *j, unsigned char *dst, const unsigned char *src, size_t start,
			    size_t end, int copy, xfer_err *err)
{
	if (sparse_add(j, dst + start, end - start, err) != 0) return -1;
	if (copy) memcpy(dst + start, src + start, end - start);
	return 0;
}

static inline uint64_t ld8(const unsigned char *p)
{
	uint64_t x;
	memcpy(&x, p, 8);
	return x;
}

static int diff(xfer_journal *j, unsigned char *dst, const unsigned char *src, size_t n, int copy,
		xfer_err *err)
{
	size_t i = 0, run = 0; /* run: start of the current differing run + 1 */
	for (; i + 64 <= n; i += 64) {
		/* a mask of the 8-byte words that differ, without a branch per word */
		unsigned m = 0;
		for (unsigned w = 0; w < 8; w++) m |= (unsigned)(ld8(dst + i + 8 * w) != ld8(src + i + 8 * w)) << w;
		if (m == 0xff && run) continue;
		if (m == 0) {
			if (run && close_run(j, dst, src, run - 1, i, copy, err) != 0) return -1;
			run = 0;
			continue;
		}
		for (unsigned w = 0; w < 8; w++) {
			if (m >> w & 1) {
				if (!run) run = i + 8 * w + 1;
			} else if (run) {
				if (close_run(j, dst, src, run - 1, i + 8 * w, copy, err) != 0) return -1;
				run = 0;
			}
		}
	}
	if (i < n && memcmp(dst + i, src + i, n - i) != 0 && !run) run = i + 1;
	if (run && close_run(j, dst, src, run - 1, n, copy, err) != 0) return -1;
	return sparse_flush(j, err);
}

int xfer_journal_copy(xfer_journal *j, void *dst, const void *src, size_t n, xfer_err *err)
{
	if (!j) { memcpy(dst, src, n); return 0; }
	return diff(j, dst, src, n, 1, err);
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
static int undo_chunk(const unsigned char *p, size_t len, xfer_err *err)
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
		} else if (xfer_delta_apply((xfer_encoding)h.enc, h.esz, addr, h.n, r + sizeof h, h.plen,
					    NULL, err) != 0) {
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
	int rc = undo_chunk(j->buf, j->len, err);
	unsigned char *tmp = NULL;
	for (size_t c = j->nchunks; rc == 0 && c-- > 0;) {
		if (j->chunks[c].mem) {
			rc = undo_chunk(j->chunks[c].mem, j->chunks[c].len, err);
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
		rc = undo_chunk(tmp, j->chunks[c].len, err);
	}
	free(tmp);
	xfer_journal_reset(j);
	return rc;
}
