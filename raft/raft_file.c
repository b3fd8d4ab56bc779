/* raft/raft_file: raft_storage in a directory.
 *
 * Three files, all integers little-endian, all hashes XXH3-64 (xxhash):
 *   raft.log    "SKRLOG01", then records appended one batch per write():
 *                 u32 len        payload bytes (>= 17)
 *                 u32 hcheck     low 32 bits of XXH3(len) ^ 0x52465431
 *                 u64 phash      XXH3(payload)
 *                 payload        u64 index, u64 term, u8 type, data
 *               Indexes are contiguous.  Appends are written at once
 *               and made durable by sync (one fdatasync for a batch of
 *               them); a truncation, a hard state or a snapshot first
 *               syncs what was appended before it, so what a crash keeps
 *               is always a prefix of the calls made.
 *   raft.hard   "SKRHRD01", u64 term, u8 vote length, vote, u64 XXH3 of
 *               all before; written as raft.hard.tmp, fsync, rename, fsync
 *               of the directory, so a crash leaves the old or the new.
 *   raft.snap   "SKRSNP01", u64 index, u64 term, u32 voters length, the
 *               voters (raft_int.h encoding), u64 data length, data, u64
 *               XXH3 of all before; written like raft.hard.
 * Compacting the log after a snapshot rewrites the kept suffix into
 * raft.log.tmp and renames it over raft.log (the snapshot is already
 * durable, so a crash in between loses nothing: raft ignores entries the
 * snapshot covers).
 *
 * Loading makes what it loads durable: the log is fdatasync'd and the
 * directory fsync'd before raft sees an entry.  A crash between an
 * append's write() and its fdatasync leaves records in the page cache; a
 * restart that trusted them would acknowledge them as durable, and a power
 * loss after that would lose acknowledged entries.  The storage remembers
 * the last offset known synced: after a failed fdatasync (the kernel may
 * have dropped the dirty pages and marked them clean, so a retry would
 * "succeed" on data never written) it cuts the log back to that offset
 * before it reports the failure, so nothing after it is ever loaded as
 * durable.  Every sync of the log and the directory goes through
 * raft_file_io (raft.h), which a test replaces to fail a sync or to
 * remember synced offsets and drop the rest (a simulated power loss).
 *
 * A torn last write (a crash mid-append) is dropped at load: a record is
 * "torn" when it is the file's tail: its header is cut short, it runs past
 * the end, or it is bad and only zero bytes follow it.  Any other damage is
 * reported as an error naming the file and offset: a record we cannot read
 * in the middle of the log may have been acknowledged, so silently
 * dropping it could lose a committed write.  Like etcd's WAL, unlike
 * hashicorp's raft-boltdb (a B-tree file). */
#include "raft/raft_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/sk_file.h"

enum {
	REC_HDR = 16,
	REC_FIXED = 17,           /* index, term, type */
	HCHECK_XOR = 0x52465431,
	MAGIC_LEN = 8,
};

static const char LOG_MAGIC[] = "SKRLOG01", HARD_MAGIC[] = "SKRHRD01", SNAP_MAGIC[] = "SKRSNP01";

typedef struct {
	uint64_t index;
	uint64_t off;             /* of the record header */
} rec_pos;

typedef struct {
	raft_storage st;
	char dir[4096];
	bool fsync_on;
	int fd;                   /* raft.log */
	uint64_t end;             /* bytes of valid log */
	uint64_t synced;          /* bytes of log known durable */
	bool dirty;               /* appended since the last fdatasync */
	rec_pos *recs;
	size_t n, cap;
} file_store;

static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
	return v;
}
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static uint32_t hcheck(uint32_t len)
{
	uint8_t b[4];
	put32(b, len);
	return (uint32_t)XXH3_64bits(b, 4) ^ HCHECK_XOR;
}

static int sys_err(char *err, size_t errlen, const char *what, const char *path)
{
	snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
	return -1;
}

/* ---------------------------------------------------------------- the sync seam */

static int real_sync(void *ctx, int fd, const char *path, bool data_only)
{
	return data_only ? fdatasync(fd) : fsync(fd);
}

static raft_file_io g_io = { real_sync, NULL };

void raft_file_set_io(const raft_file_io *io)
{
	g_io = io && io->sync ? *io : (raft_file_io){ real_sync, NULL };
}

/* fdatasync (data_only) or fsync of the log; errno set on failure. */
static int log_sync(file_store *f, bool data_only)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/raft.log", f->dir);
	return g_io.sync(g_io.ctx, f->fd, path, data_only);
}

static int dir_sync(file_store *f)
{
	int dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) return -1;
	int rc = g_io.sync(g_io.ctx, dfd, f->dir, false);
	int e = errno;
	close(dfd);
	errno = e;
	return rc;
}

static void path_of(const file_store *f, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", f->dir, name);
}

static int write_all(int fd, const uint8_t *p, size_t len, off_t off)
{
	while (len) {
		ssize_t w = pwrite(fd, p, len, off);
		if (w < 0) {
			if (errno == EINTR) continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
		off += w;
	}
	return 0;
}

/* Writes name atomically: name.tmp, fsync, rename, fsync of the directory. */
static int write_atomic(file_store *f, const char *name, const uint8_t *buf, size_t len, char *err,
			size_t errlen)
{
	return sk_file_write_atomic(f->dir, name, buf, len, 0600, f->fsync_on, err, errlen);
}

/* Reads a whole file; 1 when it does not exist. */
static int read_whole(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
	*buf = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) return 1;
		return sys_err(err, errlen, "open", path);
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		close(fd);
		return sys_err(err, errlen, "stat", path);
	}
	size_t n = (size_t)sb.st_size, got = 0;
	uint8_t *p = malloc(n ? n : 1);
	if (!p) {
		close(fd);
		snprintf(err, errlen, "out of memory reading %s", path);
		return -1;
	}
	while (got < n) {
		ssize_t r = pread(fd, p + got, n - got, (off_t)got);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) {
			free(p);
			close(fd);
			return sys_err(err, errlen, "read", path);
		}
		got += (size_t)r;
	}
	close(fd);
	*buf = p;
	*len = n;
	return 0;
}

/* ---------------------------------------------------------------- hard state, snapshot */

static int read_named(file_store *f, const char *name, char *path, size_t cap, uint8_t **b, size_t *n,
		      char *err, size_t errlen)
{
	path_of(f, name, path, cap);
	return read_whole(path, b, n, err, errlen);
}

static int load_hard(file_store *f, raft_loaded *out, char *err, size_t errlen)
{
	char path[4200];
	uint8_t *b;
	size_t n;
	int rc = read_named(f, "raft.hard", path, sizeof path, &b, &n, err, errlen);
	if (rc) return rc > 0 ? 0 : -1;
	size_t vl = n > 16 ? b[16] : 0;
	if (n < 25 || memcmp(b, HARD_MAGIC, MAGIC_LEN) != 0 || n != 17 + vl + 8 || vl > RAFT_NAME_MAX ||
	    XXH3_64bits(b, n - 8) != get64(b + n - 8)) {
		snprintf(err, errlen, "%s: corrupt (bad magic, size or checksum)", path);
		free(b);
		return -1;
	}
	out->term = get64(b + 8);
	memcpy(out->vote, b + 17, vl);
	out->vote[vl] = 0;
	free(b);
	return 0;
}

/* Forgets the records at or after offset off (a record boundary). */
static void drop_recs_from(file_store *f, uint64_t off)
{
	while (f->n && f->recs[f->n - 1].off >= off) f->n--;
}

/* Makes the appends so far durable. */
static int file_sync(void *ctx, char *err, size_t errlen)
{
	file_store *f = ctx;
	if (!f->dirty) return 0;
	if (f->fsync_on && log_sync(f, true) != 0) {
		sys_err(err, errlen, "fdatasync", "raft.log");
		/* What follows the last synced offset may never reach the disk
		 * (and a retry would not tell): cut it, so no restart loads it
		 * as durable.  Best effort: the node stops on this error. */
		if (ftruncate(f->fd, (off_t)f->synced) == 0) (void)log_sync(f, false);
		drop_recs_from(f, f->synced);
		f->end = f->synced;
		f->dirty = false;
		return -1;
	}
	f->synced = f->end;
	f->dirty = false;
	return 0;
}

static int file_save_hard(void *ctx, uint64_t term, const char *vote, char *err, size_t errlen)
{
	uint8_t b[17 + RAFT_NAME_MAX + 8];
	size_t vl = strnlen(vote, RAFT_NAME_MAX);
	memcpy(b, HARD_MAGIC, MAGIC_LEN);
	put64(b + 8, term);
	b[16] = (uint8_t)vl;
	memcpy(b + 17, vote, vl);
	put64(b + 17 + vl, XXH3_64bits(b, 17 + vl));
	if (file_sync(ctx, err, errlen) != 0) return -1;
	return write_atomic(ctx, "raft.hard", b, 17 + vl + 8, err, errlen);
}

static int load_snap(file_store *f, raft_loaded *out, char *err, size_t errlen)
{
	char path[4200];
	uint8_t *b;
	size_t n;
	int rc = read_named(f, "raft.snap", path, sizeof path, &b, &n, err, errlen);
	if (rc) return rc > 0 ? 0 : -1;
	const char *why = NULL;
	uint64_t vl = 0, dl = 0;
	if (n < 28 + 8 + 8 || memcmp(b, SNAP_MAGIC, MAGIC_LEN) != 0) why = "bad magic or size";
	else if (XXH3_64bits(b, n - 8) != get64(b + n - 8)) why = "bad checksum";
	else if ((vl = get32(b + 24)) > n - 28 - 16) why = "bad voters length";
	else if ((dl = get64(b + 28 + vl)) != n - 28 - vl - 16) why = "bad data length";
	else if (raft__voters_decode(&out->snap.voters, b + 28, vl) != 0) why = "bad voters";
	else if (!get64(b + 8) || !get64(b + 16)) why = "zero index or term";
	if (why) {
		snprintf(err, errlen, "%s: corrupt (%s)", path, why);
		free(b);
		return -1;
	}
	out->snap.index = get64(b + 8);
	out->snap.term = get64(b + 16);
	out->snap_data = malloc(dl ? dl : 1);
	if (!out->snap_data) {
		free(b);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(out->snap_data, b + 28 + vl + 8, dl);
	out->snap_len = dl;
	free(b);
	return 0;
}

/* ---------------------------------------------------------------- log */

static int push_rec(file_store *f, uint64_t index, uint64_t off)
{
	if (f->n == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 256;
		rec_pos *p = realloc(f->recs, nc * sizeof *p);
		if (!p) return -1;
		f->recs = p;
		f->cap = nc;
	}
	f->recs[f->n++] = (rec_pos){ index, off };
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i]) return false;
	return true;
}

/* Parses raft.log into out->entries; drops a torn tail. */
static int load_log(file_store *f, raft_loaded *out, char *err, size_t errlen)
{
	char path[4200];
	uint8_t *b;
	size_t n;
	int rc = read_named(f, "raft.log", path, sizeof path, &b, &n, err, errlen);
	if (rc < 0) return -1;
	if (rc > 0 || n < MAGIC_LEN) {
		/* absent, or created and cut before its magic was written */
		free(b);
		uint8_t m[MAGIC_LEN];
		memcpy(m, LOG_MAGIC, MAGIC_LEN);
		if (write_all(f->fd, m, MAGIC_LEN, 0) != 0 || ftruncate(f->fd, MAGIC_LEN) != 0 ||
		    (f->fsync_on && log_sync(f, false) != 0))
			return sys_err(err, errlen, "write", path);
		f->end = f->synced = MAGIC_LEN;
		return 0;
	}
	if (memcmp(b, LOG_MAGIC, MAGIC_LEN) != 0) {
		snprintf(err, errlen, "%s: not a raft log (bad magic)", path);
		free(b);
		return -1;
	}
	size_t off = MAGIC_LEN, cap = 0;
	const char *bad = NULL;
	while (off < n) {
		size_t left = n - off;
		if (left < REC_HDR) { bad = "torn"; break; }
		uint32_t len = get32(b + off);
		if (hcheck(len) != get32(b + off + 4) || len < REC_FIXED || len > REC_FIXED + RAFT_ENTRY_MAX) {
			bad = all_zero(b + off, left) ? "torn" : "bad record header";
			break;
		}
		if (REC_HDR + (size_t)len > left) { bad = "torn"; break; }
		const uint8_t *p = b + off + REC_HDR;
		if (XXH3_64bits(p, len) != get64(b + off + 8)) {
			bad = all_zero(p + len, left - REC_HDR - len) ? "torn" : "bad record checksum";
			break;
		}
		raft_entry e = { get64(p), get64(p + 8), p[16], NULL, len - REC_FIXED };
		if (out->nentries && e.index != out->entries[out->nentries - 1].index + 1) {
			bad = "indexes not contiguous";
			break;
		}
		if (out->nentries == cap) {
			cap = cap ? cap * 2 : 256;
			raft_entry *ne = realloc(out->entries, cap * sizeof *ne);
			if (!ne) { bad = "out of memory"; break; }
			out->entries = ne;
		}
		uint8_t *d = malloc(e.len ? e.len : 1);
		if (!d || push_rec(f, e.index, off) != 0) { free(d); bad = "out of memory"; break; }
		memcpy(d, p + REC_FIXED, e.len);
		e.data = d;
		out->entries[out->nentries++] = e;
		off += REC_HDR + len;
	}
	free(b);
	if (bad && strcmp(bad, "torn") != 0) {
		snprintf(err, errlen, "%s: corrupt at offset %zu (%s)", path, off, bad);
		return -1;
	}
	if (bad) {
		/* a torn tail: cut it so the next append starts clean */
		if (ftruncate(f->fd, (off_t)off) != 0 || (f->fsync_on && log_sync(f, false) != 0))
			return sys_err(err, errlen, "truncate", path);
	}
	f->end = off;
	/* What we load may be only in the page cache (a crash between an
	 * append's write and its fdatasync): raft will treat it as durable,
	 * so it must be before raft sees it.  If this fails nothing here is
	 * known durable: refuse to start. */
	if (f->fsync_on && log_sync(f, true) != 0) return sys_err(err, errlen, "fdatasync at load of", path);
	f->synced = off;
	return 0;
}

static int file_load(void *ctx, raft_loaded *out, char *err, size_t errlen)
{
	file_store *f = ctx;
	memset(out, 0, sizeof *out);
	f->n = 0;
	if (load_hard(f, out, err, errlen) != 0 || load_snap(f, out, err, errlen) != 0 ||
	    load_log(f, out, err, errlen) != 0) {
		raft__loaded_free(out);
		return -1;
	}
	/* the directory entries too (a rename of a compaction, the log's
	 * creation) whose fsync a crash may have cut off */
	if (f->fsync_on && dir_sync(f) != 0) {
		sys_err(err, errlen, "fsync of the directory", f->dir);
		raft__loaded_free(out);
		return -1;
	}
	return 0;
}

static int file_append(void *ctx, const raft_entry *e, size_t n, char *err, size_t errlen)
{
	file_store *f = ctx;
	if (n && f->n && raft__append_follows(f->recs[f->n - 1].index, e[0].index, err, errlen) != 0)
		return -1;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) total += REC_HDR + REC_FIXED + e[i].len;
	uint8_t *buf = malloc(total ? total : 1);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	size_t o = 0, n0 = f->n;
	for (size_t i = 0; i < n; i++) {
		uint32_t len = (uint32_t)(REC_FIXED + e[i].len);
		uint8_t *p = buf + o + REC_HDR;
		put64(p, e[i].index);
		put64(p + 8, e[i].term);
		p[16] = e[i].type;
		if (e[i].len) memcpy(p + REC_FIXED, e[i].data, e[i].len);
		put32(buf + o, len);
		put32(buf + o + 4, hcheck(len));
		put64(buf + o + 8, XXH3_64bits(p, len));
		if (push_rec(f, e[i].index, f->end + o) != 0) {
			f->n = n0;
			free(buf);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		o += REC_HDR + len;
	}
	int rc = write_all(f->fd, buf, total, (off_t)f->end);
	free(buf);
	if (rc != 0) {
		f->n = n0;
		return sys_err(err, errlen, "append to", "raft.log");
	}
	f->end += total;
	f->dirty = true;
	return 0;
}

static int file_truncate(void *ctx, uint64_t from, char *err, size_t errlen)
{
	file_store *f = ctx;
	size_t k = f->n;
	while (k > 0 && f->recs[k - 1].index >= from) k--;
	if (k == f->n) return 0;
	uint64_t off = f->recs[k].off;
	/* synced at once: appends after it must not land on an uncut tail */
	if (ftruncate(f->fd, (off_t)off) != 0 || (f->fsync_on && log_sync(f, false) != 0))
		return sys_err(err, errlen, "truncate", "raft.log");
	f->n = k;
	f->end = f->synced = off;
	f->dirty = false;
	return 0;
}

/* Rewrites raft.log with the records after `upto`. */
static int compact(file_store *f, uint64_t upto, char *err, size_t errlen)
{
	size_t k = 0;
	while (k < f->n && f->recs[k].index <= upto) k++;
	if (k == 0) return 0;
	uint64_t from = k < f->n ? f->recs[k].off : f->end, keep = f->end - from;
	uint8_t *buf = malloc(MAGIC_LEN + keep);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(buf, LOG_MAGIC, MAGIC_LEN);
	size_t got = 0;
	while (got < keep) {
		ssize_t r = pread(f->fd, buf + MAGIC_LEN + got, keep - got, (off_t)(from + got));
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) {
			free(buf);
			return sys_err(err, errlen, "read", "raft.log");
		}
		got += (size_t)r;
	}
	int rc = write_atomic(f, "raft.log", buf, MAGIC_LEN + keep, err, errlen);
	free(buf);
	if (rc != 0) return -1;
	char path[4200];
	path_of(f, "raft.log", path, sizeof path);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) return sys_err(err, errlen, "open", path);
	close(f->fd);
	f->fd = fd;
	for (size_t i = k; i < f->n; i++) f->recs[i - k] = (rec_pos){ f->recs[i].index, f->recs[i].off - from + MAGIC_LEN };
	f->n -= k;
	f->end = f->synced = MAGIC_LEN + keep;   /* written whole and fsync'd */
	f->dirty = false;
	return 0;
}

static int file_save_snapshot(void *ctx, const raft_snap_meta *meta, const uint8_t *data, size_t len,
			      uint64_t upto, char *err, size_t errlen)
{
	file_store *f = ctx;
	uint8_t vb[RAFT__VOTERS_BYTES];
	size_t vl = raft__voters_encode(&meta->voters, vb);
	size_t total = 28 + vl + 8 + len + 8;
	uint8_t *b = malloc(total);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(b, SNAP_MAGIC, MAGIC_LEN);
	put64(b + 8, meta->index);
	put64(b + 16, meta->term);
	put32(b + 24, (uint32_t)vl);
	memcpy(b + 28, vb, vl);
	put64(b + 28 + vl, len);
	if (len) memcpy(b + 28 + vl + 8, data, len);
	put64(b + total - 8, XXH3_64bits(b, total - 8));
	int rc = file_sync(f, err, errlen) == 0 ? write_atomic(f, "raft.snap", b, total, err, errlen) : -1;
	free(b);
	if (rc != 0) return -1;
	return compact(f, upto, err, errlen);
}

raft_storage *raft_file_storage_new(const char *dir, bool fsync_on, char *err, size_t errlen)
{
	file_store *f = calloc(1, sizeof *f);
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (strlen(dir) >= sizeof f->dir - 32) {
		snprintf(err, errlen, "directory name too long");
		free(f);
		return NULL;
	}
	snprintf(f->dir, sizeof f->dir, "%s", dir);
	f->fsync_on = fsync_on;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		sys_err(err, errlen, "mkdir", dir);
		free(f);
		return NULL;
	}
	char path[4200];
	path_of(f, "raft.log", path, sizeof path);
	f->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (f->fd < 0) {
		sys_err(err, errlen, "open", path);
		free(f);
		return NULL;
	}
	f->st = (raft_storage){ .ctx = f, .load = file_load, .save_hard = file_save_hard, .append = file_append,
				.truncate = file_truncate, .save_snapshot = file_save_snapshot, .sync = file_sync };
	return &f->st;
}

void raft_file_storage_free(raft_storage **s)
{
	if (!*s) return;
	file_store *f = (*s)->ctx;
	if (f->fd >= 0) close(f->fd);
	free(f->recs);
	free(f);
	*s = NULL;
}
