/* transfer/paths/xfer_disk.c: the disk-delta data path.
 *
 * Follows Miles/slime's disk-delta: the sender keeps the last published bytes
 * (its "shadow") and writes only what changed to a shared folder; each
 * receiver applies the chain of deltas to its own copy.  The folder:
 *
 *   DIR/weight_v000007/index    text, described below; its last line is
 *                               "end <xxh3-64 of every byte before it>"
 *   DIR/weight_v000007/data     the tensors' stored bytes, back to back
 *   DIR/receivers/<id>          "version 7\nchain <hex>\n": what <id> applied
 *
 * A version is written under DIR/.tmp.weight_vNNNNNN.<pid>/, both files are
 * fsync'd, the folder is fsync'd and renamed into place, and DIR is fsync'd:
 * a reader sees a whole version or none.  Version 1 of a sender, and every
 * full_every-th after it, is full (raw bytes); the others are deltas on the
 * version before.  Every version carries a chain id (random per sender run):
 * a delta is applied only on a base of its own chain.  A receiver walks back
 * from the newest version until it reaches the version it holds or a full
 * version, then applies forward, checking each stored blob (xxh3-64) before
 * use and each changed tensor (xxh3-128) after; any failure replays the undo
 * journal, so the receiver keeps the version it had.
 *
 * The folder may be writable by other users (and we may be root): it is
 * opened once and kept as a descriptor, and every name under it goes
 * through xfer_io.c's dirfd helpers (no link followed, no FIFO read, no
 * tree removed across a link or a mount).
 *
 * Where we differ from slime: XOR deltas are sparse too (see xfer_delta.c),
 * the index has a checksum line (a torn or truncated index is an error, not
 * garbage), and the chain id makes a delta from another run an error. */
#include "transfer/core/xfer_int.h"

#include <dirent.h>
#include <stdbool.h>
#include <unistd.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "transfer/core/xfer_hash.h"

enum {
	WBUF_BYTES = 4 << 20,   /* sender's write buffer for small stored blobs */
	POLL_MS = 10,           /* receiver: how often it looks for a new version */
	INDEX_BYTES_MAX = 1 << 30, /* far above any real index; a bigger file is not ours */
	RECEIVER_BYTES_MAX = 4096, /* "version N\nchain X\n" */
	MAX_THREADS = 16,       /* encode / apply threads: memory bandwidth is shared beyond this */
	LOOKAHEAD = 2,          /* sender: tensors encoded ahead of the writer, per thread */
	INDEX_FORMAT_XXH3 = 1,  /* every checksum is xxh3-128 (no checksum line) */
	INDEX_FORMAT_MAX = 2,   /* 2: a "checksum" line names the kind */
};

/* The checksum kinds as the index names them. */
#define SUM_XXH3_NAME "xxh3-128"
#define SUM_TREE_NAME "tree-xxh3-256k"

typedef xfer_disk_tensor disk_tensor;
typedef xfer_disk_index disk_index;

typedef struct {
	int dfd; /* the folder, opened once: every name below is relative to it */
	/* sender */
	unsigned char *shadow;
	int have_shadow, since_full;
	uint64_t chain;
	unsigned char *wbuf;
	size_t wlen;
	/* receiver */
	uint64_t have, have_chain;
	uint64_t prev_have, prev_chain; /* before the last receive: what xfer_rollback puts back */
	xfer_journal *j[MAX_THREADS]; /* tensor i is always journaled in j[i % threads] */
	int threads;
} disk_state;

void xfer_disk_index_free(disk_index *x)
{
	free(x->t);
	memset(x, 0, sizeof *x);
}

static int disk_probe(char *why, size_t n)
{
	(void)why;
	(void)n;
	return 0;
}

/* The version's name inside the folder. */
static void vname(char *out, size_t n, uint64_t v)
{
	snprintf(out, n, "weight_v%06llu", (unsigned long long)v);
}

/* Whether name exists under dfd (a link counts: it is not followed). */
static bool exists_at(int dfd, const char *name)
{
	struct stat st;
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* ---- index text ---- */

static const char *enc_name(int full, int enc)
{
	if (full) return "raw";
	return enc == XFER_ENC_XOR ? "xor" : "overwrite";
}

char *xfer_disk_index_format(const disk_index *x, size_t *len)
{
	size_t cap = 512 + x->n * (XFER_NAME_MAX + 300), k = 0;
	char *s = malloc(cap), hex[33];
	if (!s) return NULL;
	/* An xxh3-128 index stays format 1, byte for byte what older readers
	 * know; a tree index is format 2, which they refuse by its number. */
	if (x->sum_kind == XFER_SUM_TREE)
		k += (size_t)snprintf(s, cap, "skein-weights %d\nchecksum %s\n", INDEX_FORMAT_MAX, SUM_TREE_NAME);
	else
		k += (size_t)snprintf(s, cap, "skein-weights %d\n", INDEX_FORMAT_XXH3);
	k += (size_t)snprintf(s + k, cap - k,
			      "chain %016llx\nversion %llu\nbase %llu\nkind %s\nencoding %s\n"
			      "compression %s\ntensors %zu\ndata_bytes %llu\n",
			      (unsigned long long)x->chain, (unsigned long long)x->version,
			      (unsigned long long)x->base, x->full ? "full" : "delta", enc_name(x->full, x->enc),
			      x->zstd ? "zstd" : "none", x->n, (unsigned long long)x->data_bytes);
	for (size_t i = 0; i < x->n; i++) {
		const disk_tensor *t = &x->t[i];
		xfer_sum_hex(t->sum, hex);
		k += (size_t)snprintf(s + k, cap - k, "tensor %s %s %s %llu %llu %llu %llu %s %016llx\n", t->name,
				      t->dtype, t->shape, (unsigned long long)t->nbytes,
				      (unsigned long long)t->offset, (unsigned long long)t->stored,
				      (unsigned long long)t->changed, hex, (unsigned long long)t->stored_sum);
	}
	k += (size_t)snprintf(s + k, cap - k, "end %016llx\n", (unsigned long long)XXH3_64bits(s, k));
	*len = k;
	return s;
}

int xfer_disk_index_parse(const char *text, size_t len, uint64_t v, const char *path, disk_index *x,
			  xfer_err *err)
{
	char *txt = malloc(len + 1), *save = NULL;
	memset(x, 0, sizeof *x);
	if (!txt) return xfer_fail(err, XFER_ENOMEM, "index: out of memory");
	memcpy(txt, text, len);
	txt[len] = 0;
	/* The last line must be "end <hash of the bytes before it>". */
	char *end = len >= 21 ? txt + len - 21 : NULL;
	if (!end || strncmp(end, "end ", 4) != 0 || txt[len - 1] != '\n' || (end > txt && end[-1] != '\n')) {
		xfer_fail(err, XFER_EFORMAT, "%s: truncated (no end line)", path);
		goto err;
	}
	unsigned long long want = strtoull(end + 4, NULL, 16);
	if (XXH3_64bits(txt, (size_t)(end - txt)) != want) {
		xfer_fail(err, XFER_EFORMAT, "%s: checksum of the index does not match its end line", path);
		goto err;
	}
	*end = 0;
	int magic = 0;
	char kind[16] = "", enc[16] = "", comp[16] = "", sumk[32] = "";
	unsigned long long chain = 0, ver = 0, base = 0, data = 0;
	size_t n = 0, got = 0;
	for (char *line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "tensor ", 7) == 0) {
			if (got >= n) { xfer_fail(err, XFER_EFORMAT, "%s: more tensor lines than announced", path); goto err; }
			disk_tensor *t = &x->t[got];
			char hex[40];
			unsigned long long nb, off, st, ch, ss;
			if (sscanf(line + 7, "%255s %15s %159s %llu %llu %llu %llu %39s %llx", t->name, t->dtype,
				   t->shape, &nb, &off, &st, &ch, hex, &ss) != 9 ||
			    xfer_sum_parse(hex, &t->sum) != 0) {
				xfer_fail(err, XFER_EFORMAT, "%s: malformed line \"%.80s\"", path, line);
				goto err;
			}
			t->nbytes = nb;
			t->offset = off;
			t->stored = st;
			t->changed = ch;
			t->stored_sum = ss;
			got++;
			continue;
		}
		char key[32], val[64];
		if (sscanf(line, "%31s %63s", key, val) != 2) {
			xfer_fail(err, XFER_EFORMAT, "%s: malformed line \"%.80s\"", path, line);
			goto err;
		}
		if (!strcmp(key, "skein-weights")) magic = atoi(val);
		else if (!strcmp(key, "chain")) chain = strtoull(val, NULL, 16);
		else if (!strcmp(key, "version")) ver = strtoull(val, NULL, 10);
		else if (!strcmp(key, "base")) base = strtoull(val, NULL, 10);
		else if (!strcmp(key, "kind")) snprintf(kind, sizeof kind, "%.15s", val);
		else if (!strcmp(key, "encoding")) snprintf(enc, sizeof enc, "%.15s", val);
		else if (!strcmp(key, "compression")) snprintf(comp, sizeof comp, "%.15s", val);
		else if (!strcmp(key, "checksum")) snprintf(sumk, sizeof sumk, "%.31s", val);
		else if (!strcmp(key, "data_bytes")) data = strtoull(val, NULL, 10);
		else if (!strcmp(key, "tensors")) {
			n = strtoull(val, NULL, 10);
			/* every tensor line holds a 32-digit checksum: a count the
			 * text cannot hold is refused before it is allocated */
			if (n > (1u << 24) || n > len / 32 || x->t) {
				xfer_fail(err, XFER_EFORMAT, "%s: bad tensor count", path);
				goto err;
			}
			x->t = calloc(n + 1, sizeof *x->t);
			if (!x->t) { xfer_fail(err, XFER_ENOMEM, "index: out of memory"); goto err; }
		}
	}
	/* checked once every line is read: a later data_bytes line counts */
	for (size_t i = 0; i < got; i++) {
		const disk_tensor *t = &x->t[i];
		if (t->offset + t->stored < t->offset || t->offset + t->stored > data) {
			xfer_fail(err, XFER_EFORMAT, "%s: tensor %s lies outside the data", path, t->name);
			goto err;
		}
	}
	if (magic > INDEX_FORMAT_MAX) {
		xfer_fail(err, XFER_EFORMAT, "%s: index format %d is newer than this reader (formats 1..%d): "
			  "upgrade the receiver", path, magic, INDEX_FORMAT_MAX);
		goto err;
	}
	if (magic < INDEX_FORMAT_XXH3 || got != n || ver != v ||
	    (strcmp(kind, "full") && strcmp(kind, "delta"))) {
		xfer_fail(err, XFER_EFORMAT, "%s: not a skein-weights index (formats 1..%d) of version %llu", path,
			  INDEX_FORMAT_MAX, (unsigned long long)v);
		goto err;
	}
	if (magic == INDEX_FORMAT_XXH3 && *sumk) {
		xfer_fail(err, XFER_EFORMAT, "%s: a checksum line in a format 1 index", path);
		goto err;
	}
	if (magic > INDEX_FORMAT_XXH3 && strcmp(sumk, SUM_TREE_NAME) && strcmp(sumk, SUM_XXH3_NAME)) {
		xfer_fail(err, XFER_EFORMAT, "%s: checksum \"%s\" is unknown to this reader (it knows %s and %s)", path,
			  sumk, SUM_XXH3_NAME, SUM_TREE_NAME);
		goto err;
	}
	x->sum_kind = !strcmp(sumk, SUM_TREE_NAME) ? XFER_SUM_TREE : XFER_SUM_XXH3_128;
	x->chain = chain;
	x->version = ver;
	x->base = base;
	x->data_bytes = data;
	x->n = n;
	x->full = !strcmp(kind, "full");
	x->enc = !strcmp(enc, "xor") ? XFER_ENC_XOR : XFER_ENC_OVERWRITE;
	x->zstd = !strcmp(comp, "zstd");
	if (!x->full && (base == 0 || base >= ver)) {
		xfer_fail(err, XFER_EFORMAT, "%s: a delta on base %llu", path, base);
		goto err;
	}
	free(txt);
	return 0;
err:
	free(txt);
	free(x->t);
	x->t = NULL;
	return -1;
}

static int index_read(int dfd, const char *dir, uint64_t v, disk_index *x, xfer_err *err)
{
	char path[4200], rel[64], *txt = NULL;
	size_t len;
	memset(x, 0, sizeof *x);
	snprintf(rel, sizeof rel, "weight_v%06llu/index", (unsigned long long)v);
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	if (xfer_read_file_at(dfd, rel, INDEX_BYTES_MAX, &txt, &len, err) != 0) {
		if (err) {
			err->code = XFER_ECHAIN;
			xfer_err_prefix(err, "%s", dir);
		}
		return -1;
	}
	int rc = xfer_disk_index_parse(txt, len, v, path, x, err);
	free(txt);
	return rc;
}

/* The receiver's manifest must match the index: names, dtypes, shapes. */
static int index_match(const disk_index *x, const xfer_manifest *m, xfer_err *err)
{
	char shape[160];
	if (x->n != m->n)
		return xfer_fail(err, XFER_EMISMATCH, "version %llu has %zu tensors, the receiver registered %zu",
				 (unsigned long long)x->version, x->n, m->n);
	for (size_t i = 0; i < x->n; i++) {
		const xfer_tensor *t = &m->t[i];
		xfer_shape_format(t, shape, sizeof shape);
		if (strcmp(x->t[i].name, t->name) != 0)
			return xfer_fail(err, XFER_EMISMATCH, "version %llu tensor %zu is %s, the receiver registered %s",
					 (unsigned long long)x->version, i, x->t[i].name, t->name);
		if (strcmp(x->t[i].dtype, xfer_dtype_name(t->dtype)) != 0)
			return xfer_fail(err, XFER_EMISMATCH, "tensor %s: version %llu has dtype %s, the receiver registered %s",
					 t->name, (unsigned long long)x->version, x->t[i].dtype, xfer_dtype_name(t->dtype));
		if (strcmp(x->t[i].shape, shape) != 0 || x->t[i].nbytes != t->nbytes)
			return xfer_fail(err, XFER_EMISMATCH, "tensor %s: version %llu has shape %s, the receiver registered %s",
					 t->name, (unsigned long long)x->version, x->t[i].shape, shape);
	}
	return 0;
}

/* ---- listing and gc ---- */

static int parse_vname(const char *s, uint64_t *v)
{
	if (strncmp(s, "weight_v", 8) != 0) return -1;
	s += 8;
	if (strlen(s) < 6) return -1;
	for (const char *c = s; *c; c++)
		if (*c < '0' || *c > '9') return -1;
	*v = strtoull(s, NULL, 10);
	return *v ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sorted list of published versions. */
static int list_versions(int dfd, const char *dir, uint64_t **out, size_t *n, xfer_err *err)
{
	/* a fresh open of the kept folder: its own read position */
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0) close(fd);
		return xfer_fail_errno(err, XFER_EIO, "open folder %s", dir);
	}
	uint64_t *v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		uint64_t x;
		if (parse_vname(e->d_name, &x) != 0) continue;
		if (k == cap) {
			cap = cap ? cap * 2 : 32;
			uint64_t *nv = realloc(v, cap * sizeof *nv);
			if (!nv) { free(v); closedir(d); return xfer_fail(err, XFER_ENOMEM, "out of memory"); }
			v = nv;
		}
		v[k++] = x;
	}
	closedir(d);
	if (k) qsort(v, k, sizeof *v, cmp_u64);
	*out = v;
	*n = k;
	return 0;
}

static int latest_at(int dfd, const char *dir, uint64_t *version, xfer_err *err)
{
	uint64_t *v;
	size_t n;
	if (list_versions(dfd, dir, &v, &n, err) != 0) return -1;
	*version = n ? v[n - 1] : 0;
	free(v);
	return 0;
}

int xfer_disk_latest(const char *dir, uint64_t *version, xfer_err *err)
{
	int dfd = xfer_dir_open(dir, 0, err);
	if (dfd < 0) return -1;
	int rc = latest_at(dfd, dir, version, err);
	close(dfd);
	return rc;
}

static int gc_at(int dfd, const char *dir, int keep_newest, int *deleted, xfer_err *err)
{
	uint64_t *v = NULL, min_applied = UINT64_MAX, newest_full = 0;
	size_t n = 0;
	int del = 0;
	if (deleted) *deleted = 0;
	if (list_versions(dfd, dir, &v, &n, err) != 0) return -1;
	int rfd = xfer_open_beneath(dfd, "receivers", O_RDONLY | O_DIRECTORY, 0);
	DIR *d = rfd >= 0 ? fdopendir(rfd) : NULL;
	if (!d && rfd >= 0) close(rfd);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.') continue;
			char *txt;
			size_t len;
			unsigned long long a;
			if (xfer_read_file_at(rfd, e->d_name, RECEIVER_BYTES_MAX, &txt, &len, NULL) != 0) continue;
			if (sscanf(txt, "version %llu", &a) == 1 && a < min_applied) min_applied = a;
			free(txt);
		}
		closedir(d);
	}
	/* The newest full version: late receivers start there, so nothing before
	 * it is needed by anyone who has passed it. */
	for (size_t i = n; i-- > 0;) {
		disk_index x;
		if (index_read(dfd, dir, v[i], &x, NULL) != 0) continue;
		int full = x.full;
		xfer_disk_index_free(&x);
		if (full) { newest_full = v[i]; break; }
	}
	if (keep_newest < 1) keep_newest = 1;
	for (size_t i = 0; i + (size_t)keep_newest < n; i++) {
		if (v[i] >= newest_full || v[i] > min_applied) continue;
		char vn[32];
		vname(vn, sizeof vn, v[i]);
		if (xfer_rmtree_at(dfd, vn) == 0) del++;
	}
	free(v);
	if (deleted) *deleted = del;
	return 0;
}

int xfer_disk_gc(const char *dir, int keep_newest, int *deleted, xfer_err *err)
{
	int dfd = xfer_dir_open(dir, 0, err);
	if (dfd < 0) return -1;
	int rc = gc_at(dfd, dir, keep_newest, deleted, err);
	close(dfd);
	return rc;
}

/* ---- setup / teardown ---- */

static int disk_setup_state(xfer_endpoint *ep, xfer_err *err)
{
	const char *dir = ep->cfg.disk.dir;
	if (!dir || !*dir) return xfer_fail(err, XFER_EINVAL, "disk-delta needs cfg.disk.dir");
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem != XFER_MEM_HOST)
			return xfer_fail(err, XFER_EINVAL, "disk-delta: tensor %s is in CUDA memory; stage it in host memory",
					 ep->m->t[i].name);
	if (ep->cfg.disk.full_every < 1) ep->cfg.disk.full_every = 1;
	if (ep->cfg.disk.zstd_level < 0 || ep->cfg.disk.zstd_level > 19)
		return xfer_fail(err, XFER_EINVAL, "disk-delta: zstd level %d (0..19)", ep->cfg.disk.zstd_level);
	disk_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->dfd = -1;
	const char *rid = ep->cfg.disk.receiver_id;
	if (rid && *rid && !xfer_name_ok(rid))
		return xfer_fail(err, XFER_EINVAL, "disk-delta: receiver id \"%.80s\" is not one plain file name", rid);
	s->threads = ep->cfg.threads > 0 ? ep->cfg.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (s->threads < 1) s->threads = 1;
	if (s->threads > MAX_THREADS) s->threads = MAX_THREADS;
	if (ep->cfg.role == XFER_SENDER) {
		if ((s->dfd = xfer_dir_open(dir, 1, err)) < 0) return -1;
		if (getrandom(&s->chain, sizeof s->chain, 0) != sizeof s->chain)
			s->chain = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
		s->wbuf = malloc(WBUF_BYTES);
		if (!s->wbuf) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		s->shadow = malloc(ep->m->bytes ? ep->m->bytes : 1);
		if (!s->shadow)
			return xfer_fail(err, XFER_ENOMEM, "disk-delta: no memory for the %llu-byte copy of the last version",
					 (unsigned long long)ep->m->bytes);
	} else {
		if ((s->dfd = xfer_dir_open(dir, 0, err)) < 0) return -1;
		for (int i = 0; ep->cfg.keep_previous && i < s->threads; i++)
			if (!(s->j[i] = xfer_journal_new(ep->cfg.journal_dir, err))) return -1;
	}
	return 0;
}

static void disk_teardown(xfer_endpoint *ep)
{
	disk_state *s = ep->impl;
	if (!s) return;
	if (s->dfd >= 0) close(s->dfd);
	free(s->shadow);
	free(s->wbuf);
	for (int i = 0; i < MAX_THREADS; i++) xfer_journal_free(&s->j[i]);
	free(s);
	ep->impl = NULL;
}

/* xfer_open does not tear down an endpoint whose setup failed: we do. */
static int disk_setup(xfer_endpoint *ep, xfer_err *err)
{
	if (disk_setup_state(ep, err) == 0) return 0;
	disk_teardown(ep);
	return -1;
}

static void disk_abort(xfer_endpoint *ep) { (void)ep; }

/* ---- sender ---- */

static int wflush(disk_state *s, int fd, xfer_err *err)
{
	if (!s->wlen) return 0;
	int rc = xfer_write_all(fd, s->wbuf, s->wlen, err);
	s->wlen = 0;
	return rc;
}

static int wput(disk_state *s, int fd, const void *p, size_t n, xfer_err *err)
{
	if (n >= WBUF_BYTES / 2) return wflush(s, fd, err) == 0 ? xfer_write_all(fd, p, n, err) : -1;
	if (s->wlen + n > WBUF_BYTES && wflush(s, fd, err) != 0) return -1;
	memcpy(s->wbuf + s->wlen, p, n);
	s->wlen += n;
	return 0;
}

/* ---- sender: encoding in parallel, writing in order ---- */

typedef struct {
	xfer_buf raw, z;
	const void *stored;
	int ready;
} enc_slot;

typedef struct {
	xfer_endpoint *ep;
	disk_index *x;
	enc_slot *slot;
	atomic_int corrupted; /* test hook: the one wrong byte went into a tensor */
	atomic_size_t next;
	size_t written, lookahead;
	int failed;
	xfer_err err;
	pthread_mutex_t mu;
	pthread_cond_t cv;
} enc_job;

/* Encodes (or, for a full version, checks and copies) tensor i. */
static int encode_one(enc_job *J, size_t i, xfer_err *err)
{
	xfer_endpoint *ep = J->ep;
	disk_state *s = ep->impl;
	const xfer_tensor *t = &ep->m->t[i];
	disk_tensor *d = &J->x->t[i];
	enc_slot *sl = &J->slot[i];
	int zl = ep->cfg.disk.zstd_level;
	size_t esz = xfer_dtype_size(t->dtype);
	unsigned char *shadow = s->shadow + ep->offsets[i];
	snprintf(d->name, sizeof d->name, "%s", t->name);
	snprintf(d->dtype, sizeof d->dtype, "%s", xfer_dtype_name(t->dtype));
	xfer_shape_format(t, d->shape, sizeof d->shape);
	d->nbytes = t->nbytes;
	const void *src;
	size_t len;
	int tree = J->x->sum_kind == XFER_SUM_TREE;
	if (J->x->full) {
		d->sum = tree ? xfer_tree_checksum(t->ptr, t->nbytes, 1) : xfer_checksum(t->ptr, t->nbytes);
		memcpy(shadow, t->ptr, t->nbytes);
		d->changed = t->nbytes / esz;
		src = t->ptr;
		len = t->nbytes;
	} else {
		if (xfer_delta_encode((xfer_encoding)J->x->enc, esz, shadow, t->ptr, t->nbytes, 1, &sl->raw, &d->changed,
				      tree ? NULL : &d->sum, err) != 0)
			return -1;
		if (tree) d->sum = xfer_tree_checksum(t->ptr, t->nbytes, 1); /* tensors are on threads already */
		src = sl->raw.p;
		len = sl->raw.len;
	}
	if (xfer_hooks.corrupt_version == J->x->version && len > 0 && (J->x->full || d->changed > 0) &&
	    !atomic_exchange(&J->corrupted, 1)) {
		/* test hook: after checksumming, one wrong byte goes out (the last
		 * byte of a payload is a value's: the format stays whole); the
		 * shadow keeps the right bytes for the next version */
		if (src != sl->raw.p) {
			sl->raw.len = 0;
			if (xfer_buf_append(&sl->raw, src, len) != 0) return xfer_fail(err, XFER_ENOMEM, "out of memory");
			src = sl->raw.p;
		}
		sl->raw.p[len - 1] ^= 0x40;
	}
	if (zl > 0) {
		if (xfer_zstd_compress(zl, src, len, &sl->z, err) != 0) return -1;
		xfer_buf_free(&sl->raw);
		src = sl->z.p;
		len = sl->z.len;
	}
	sl->stored = src;
	d->stored = len;
	d->stored_sum = XXH3_64bits(src, len);
	return 0;
}

static void *enc_worker(void *arg)
{
	enc_job *J = arg;
	for (;;) {
		size_t i = atomic_fetch_add(&J->next, 1);
		if (i >= J->x->n) break;
		pthread_mutex_lock(&J->mu);
		while (!J->failed && i >= J->written + J->lookahead) pthread_cond_wait(&J->cv, &J->mu);
		int failed = J->failed;
		pthread_mutex_unlock(&J->mu);
		if (failed) break;
		xfer_err e;
		int rc = encode_one(J, i, &e);
		pthread_mutex_lock(&J->mu);
		if (rc != 0 && !J->failed) {
			J->failed = 1;
			J->err = e;
		}
		if (rc == 0) J->slot[i].ready = 1;
		pthread_cond_broadcast(&J->cv);
		pthread_mutex_unlock(&J->mu);
		if (rc != 0) break;
	}
	return NULL;
}

/* Workers encode tensors (a few ahead of the writer); this thread writes
 * them to fd in manifest order.  *off gets the bytes written. */
static int encode_all(xfer_endpoint *ep, disk_index *x, int fd, uint64_t *off, xfer_err *err)
{
	disk_state *s = ep->impl;
	size_t n = x->n;
	int started = 0, rc = 0;
	pthread_t th[MAX_THREADS];
	enc_job J = { .ep = ep, .x = x, .lookahead = (size_t)(LOOKAHEAD * s->threads) };
	J.slot = calloc(n + 1, sizeof *J.slot);
	if (!J.slot) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	atomic_init(&J.next, 0);
	pthread_mutex_init(&J.mu, NULL);
	pthread_cond_init(&J.cv, NULL);
	for (int i = 0; i < s->threads; i++) {
		if (pthread_create(&th[i], NULL, enc_worker, &J) != 0) break;
		started++;
	}
	if (!started) {
		rc = xfer_fail(err, XFER_EIO, "cannot start an encoding thread");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		pthread_mutex_lock(&J.mu);
		while (!J.failed && !J.slot[i].ready) pthread_cond_wait(&J.cv, &J.mu);
		int failed = J.failed;
		pthread_mutex_unlock(&J.mu);
		if (failed) break;
		x->t[i].offset = *off;
		xfer_err e;
		if (wput(s, fd, J.slot[i].stored, x->t[i].stored, &e) != 0) {
			pthread_mutex_lock(&J.mu);
			J.failed = 1;
			J.err = e;
			pthread_mutex_unlock(&J.mu);
			break;
		}
		*off += x->t[i].stored;
		xfer_buf_free(&J.slot[i].raw);
		xfer_buf_free(&J.slot[i].z);
		pthread_mutex_lock(&J.mu);
		J.written = i + 1;
		pthread_cond_broadcast(&J.cv);
		pthread_mutex_unlock(&J.mu);
	}
	pthread_mutex_lock(&J.mu);
	if (J.written < n && !J.failed) {
		J.failed = 1;
		xfer_fail(&J.err, XFER_EIO, "encoding stopped early");
	}
	pthread_cond_broadcast(&J.cv);
	pthread_mutex_unlock(&J.mu);
out:
	for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
	if (J.failed) {
		*err = J.err;
		rc = -1;
	}
	for (size_t i = 0; i < n; i++) {
		xfer_buf_free(&J.slot[i].raw);
		xfer_buf_free(&J.slot[i].z);
	}
	free(J.slot);
	pthread_mutex_destroy(&J.mu);
	pthread_cond_destroy(&J.cv);
	return rc;
}

/* ep->root for version x->version from x's sums (xfer_root.c). */
static int keep_root(xfer_endpoint *ep, const disk_index *x, xfer_err *err)
{
	xfer_sum *sums = calloc(x->n + 1, sizeof *sums);
	if (!sums) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	for (size_t i = 0; i < x->n; i++) sums[i] = x->t[i].sum;
	int rc = xfer_root_keep(ep, x->version, x->sum_kind, sums, err);
	free(sums);
	return rc;
}

static int disk_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	disk_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	const char *dir = ep->cfg.disk.dir;
	int zl = ep->cfg.disk.zstd_level, fd = -1, tfd = -1;
	char tmp[64], dst[32], path[4200];
	disk_index x = { .chain = s->chain, .version = v, .enc = (int)ep->cfg.disk.encoding, .zstd = zl > 0,
			 .sum_kind = ep->cfg.checksum };
	x.full = !s->have_shadow || s->since_full + 1 >= ep->cfg.disk.full_every;
	x.base = x.full ? 0 : ep->stats.version;
	x.n = m->n;
	x.t = calloc(m->n + 1, sizeof *x.t);
	char *itxt = NULL;
	vname(dst, sizeof dst, v);
	snprintf(tmp, sizeof tmp, ".tmp.weight_v%06llu.%d", (unsigned long long)v, (int)getpid());
	snprintf(path, sizeof path, "%s/%s/data", dir, tmp);
	if (!x.t) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (exists_at(s->dfd, dst)) {
		xfer_fail(err, XFER_EINVAL, "%s/%s already exists", dir, dst);
		goto err;
	}
	xfer_rmtree_at(s->dfd, tmp); /* a leftover of ours, or anything planted there: unlinked, not followed */
	if (mkdirat(s->dfd, tmp, 0755) != 0) { xfer_fail_errno(err, XFER_EIO, "create %s/%s", dir, tmp); goto err; }
	tfd = xfer_open_beneath(s->dfd, tmp, O_RDONLY | O_DIRECTORY, 0);
	struct stat tst;
	if (tfd < 0 || fstat(tfd, &tst) != 0 || tst.st_uid != geteuid()) {
		/* swapped for someone else's folder between our mkdir and open */
		xfer_fail(err, XFER_EIO, "create %s/%s: the new folder was replaced", dir, tmp);
		goto err;
	}
	fd = openat(tfd, "data", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) { xfer_fail_errno(err, XFER_EIO, "create %s", path); goto err; }
	s->have_shadow = 0; /* the shadow is only trusted again once v is out */
	uint64_t off = 0;
	if (encode_all(ep, &x, fd, &off, err) != 0) goto err;
	if (wflush(s, fd, err) != 0) goto err;
	if (fsync(fd) != 0) { xfer_fail_errno(err, XFER_EIO, "fsync %s", path); goto err; }
	close(fd);
	fd = -1;
	x.data_bytes = off;
	if (keep_root(ep, &x, err) != 0) goto err;
	size_t ilen;
	itxt = xfer_disk_index_format(&x, &ilen);
	if (!itxt) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_write_file_atomic_at(tfd, "index", itxt, ilen, err) != 0) {
		xfer_err_prefix(err, "%s/%s", dir, tmp);
		goto err;
	}
	close(tfd);
	tfd = -1;
	if (renameat(s->dfd, tmp, s->dfd, dst) != 0) {
		xfer_fail_errno(err, XFER_EIO, "rename %s/%s to %s", dir, tmp, dst);
		goto err;
	}
	if (fsync(s->dfd) != 0) { xfer_fail_errno(err, XFER_EIO, "fsync folder %s", dir); goto err; }
	s->have_shadow = 1;
	s->since_full = x.full ? 0 : s->since_full + 1;
	ep->stats.bytes_moved = off + ilen;
	if (ep->cfg.disk.gc) gc_at(s->dfd, dir, 1, NULL, NULL);
	free(itxt);
	xfer_disk_index_free(&x);
	return 0;
err:
	if (fd >= 0) close(fd);
	if (tfd >= 0) close(tfd);
	xfer_rmtree_at(s->dfd, tmp);
	free(itxt);
	xfer_disk_index_free(&x);
	return -1;
}

/* ---- receiver ---- */

/* Applies tensor i of version x; j may be NULL. */
static int apply_one(xfer_endpoint *ep, const disk_index *x, int fd, size_t i, xfer_buf *a, xfer_buf *b,
		     xfer_journal *j, xfer_err *err)
{
	const xfer_tensor *t = &ep->m->t[i];
	const disk_tensor *d = &x->t[i];
	size_t esz = xfer_dtype_size(t->dtype);
	if (!x->full && d->changed == 0) return 0;
	a->len = b->len = 0;
	if (xfer_buf_reserve(a, d->stored + 1) != 0) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ssize_t r = pread(fd, a->p, d->stored, (off_t)d->offset);
	if (r != (ssize_t)d->stored)
		return xfer_fail(err, XFER_EFORMAT, "version %llu: short read of tensor %s", (unsigned long long)x->version,
				 t->name);
	a->len = d->stored;
	if (XXH3_64bits(a->p, a->len) != d->stored_sum)
		return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: stored bytes are corrupt (xxh3-64 differs)",
				 (unsigned long long)x->version, t->name);
	const unsigned char *p = a->p;
	size_t plen = a->len;
	if (x->zstd) {
		size_t max = x->full ? t->nbytes : 64 + (t->nbytes / esz) * (esz + 10);
		if (xfer_zstd_decompress(a->p, a->len, b, max, err) != 0) return -1;
		p = b->p;
		plen = b->len;
	}
	xfer_sum got;
	if (x->full) {
		if (plen != t->nbytes)
			return xfer_fail(err, XFER_EFORMAT, "version %llu tensor %s: %zu bytes stored, %llu expected",
					 (unsigned long long)x->version, t->name, plen, (unsigned long long)t->nbytes);
		if (xfer_journal_copy(j, t->ptr, p, plen, err) != 0) return -1;
		got = x->sum_kind == XFER_SUM_TREE ? xfer_tree_checksum(t->ptr, t->nbytes, 1) : xfer_checksum(t->ptr, t->nbytes);
	} else if (xfer_delta_apply((xfer_encoding)x->enc, esz, t->ptr, t->nbytes, p, plen, j,
				    x->sum_kind == XFER_SUM_TREE ? NULL : &got, err) != 0) {
		xfer_err_prefix(err, "version %llu tensor %s", (unsigned long long)x->version, t->name);
		return -1;
	} else if (x->sum_kind == XFER_SUM_TREE) {
		got = xfer_tree_checksum(t->ptr, t->nbytes, 1); /* tensors are on threads already */
	}
	if (!xfer_sum_equal(got, d->sum))
		return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum of the result differs",
				 (unsigned long long)x->version, t->name);
	return 0;
}

typedef struct {
	xfer_endpoint *ep;
	const disk_index *x;
	int fd, threads, use_journal;
	atomic_int failed;
	xfer_err err;
	pthread_mutex_t mu;
} apply_job;

typedef struct {
	apply_job *J;
	int tid;
} apply_arg;

static void *apply_worker(void *arg)
{
	apply_arg *A = arg;
	apply_job *J = A->J;
	disk_state *s = J->ep->impl;
	xfer_buf a = { 0 }, b = { 0 };
	xfer_journal *j = J->use_journal ? s->j[A->tid] : NULL;
	for (size_t i = (size_t)A->tid; i < J->x->n && !atomic_load(&J->failed); i += (size_t)J->threads) {
		xfer_err e;
		if (apply_one(J->ep, J->x, J->fd, i, &a, &b, j, &e) != 0) {
			pthread_mutex_lock(&J->mu);
			if (!atomic_load(&J->failed)) J->err = e;
			atomic_store(&J->failed, 1);
			pthread_mutex_unlock(&J->mu);
			break;
		}
	}
	xfer_buf_free(&a);
	xfer_buf_free(&b);
	return NULL;
}

/* Applies one version, tensor i on thread i % threads (so each tensor's
 * undo records stay in one journal, in order). */
static int apply_version(xfer_endpoint *ep, const disk_index *x, int use_journal, xfer_err *err)
{
	disk_state *s = ep->impl;
	char path[4200], rel[64];
	snprintf(rel, sizeof rel, "weight_v%06llu/data", (unsigned long long)x->version);
	snprintf(path, sizeof path, "%s/%s", ep->cfg.disk.dir, rel);
	/* O_NONBLOCK and a regular file only: a FIFO planted as data cannot hang us */
	int fd = xfer_open_beneath(s->dfd, rel, O_RDONLY | O_NONBLOCK, 0);
	if (fd < 0) return xfer_fail_errno(err, XFER_ECHAIN, "open %s", path);
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		xfer_fail(err, XFER_EFORMAT, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size != x->data_bytes) {
		xfer_fail(err, XFER_EFORMAT, "%s: %lld bytes, the index says %llu", path, (long long)st.st_size,
			  (unsigned long long)x->data_bytes);
		close(fd);
		return -1;
	}
	apply_job J = { .ep = ep, .x = x, .fd = fd, .threads = s->threads, .use_journal = use_journal };
	atomic_init(&J.failed, 0);
	pthread_mutex_init(&J.mu, NULL);
	pthread_t th[MAX_THREADS];
	apply_arg args[MAX_THREADS];
	int started = 0;
	for (int i = 1; i < s->threads; i++) {
		args[i] = (apply_arg){ &J, i };
		if (pthread_create(&th[i], NULL, apply_worker, &args[i]) != 0) {
			atomic_store(&J.failed, 1);
			xfer_fail(&J.err, XFER_EIO, "cannot start an apply thread");
			break;
		}
		started = i;
	}
	if (!atomic_load(&J.failed)) {
		args[0] = (apply_arg){ &J, 0 };
		apply_worker(&args[0]);
	}
	for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
	pthread_mutex_destroy(&J.mu);
	close(fd);
	ep->stats.bytes_moved += x->data_bytes;
	if (atomic_load(&J.failed)) {
		*err = J.err;
		return -1;
	}
	return 0;
}

static int record_receiver(xfer_endpoint *ep, xfer_err *err)
{
	disk_state *s = ep->impl;
	const char *rid = ep->cfg.disk.receiver_id;
	if (!rid || !*rid) return 0;
	char txt[128];
	const char *dir = ep->cfg.disk.dir;
	if (mkdirat(s->dfd, "receivers", 0755) != 0 && errno != EEXIST)
		return xfer_fail_errno(err, XFER_EIO, "create %s/receivers", dir);
	int rfd = xfer_open_beneath(s->dfd, "receivers", O_RDONLY | O_DIRECTORY, 0);
	if (rfd < 0) return xfer_fail_errno(err, XFER_EIO, "open %s/receivers", dir);
	int n = snprintf(txt, sizeof txt, "version %llu\nchain %016llx\n", (unsigned long long)s->have,
			 (unsigned long long)s->have_chain);
	int rc = xfer_write_file_atomic_at(rfd, rid, txt, (size_t)n, err);
	if (rc != 0) xfer_err_prefix(err, "%s/receivers", dir);
	close(rfd);
	return rc;
}

/* A chain (plan[0] the newest, np > 1): a tensor an earlier step changed
 * and the newest did not was checked against that step's sum only; the
 * root covers the newest index's sums, so every such tensor must match
 * those too (a forged intermediate version would pass otherwise). */
static int check_chain(xfer_endpoint *ep, const disk_index *plan, size_t np, xfer_err *err)
{
	for (size_t k = 0; np > 1 && !plan[0].full && k < plan[0].n; k++) {
		if (plan[0].t[k].changed) continue;
		bool touched = false;
		for (size_t i = 1; i < np && !touched; i++) touched = plan[i].full || plan[i].t[k].changed;
		if (!touched) continue;
		const xfer_tensor *t = &ep->m->t[k];
		xfer_sum got = plan[0].sum_kind == XFER_SUM_TREE ? xfer_tree_checksum(t->ptr, t->nbytes, 0)
								 : xfer_checksum(t->ptr, t->nbytes);
		if (!xfer_sum_equal(got, plan[0].t[k].sum))
			return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum differs from the chain's "
					 "newest index", (unsigned long long)plan[0].version, t->name);
	}
	return 0;
}

/* One attempt; *vanished says the failure came from the sender's gc
 * deleting the oldest version of our plan while we read it (a receiver
 * catching up races the publication of a newer full version). */
static int disk_receive_once(xfer_endpoint *ep, int wait_ms, uint64_t *version, bool *vanished, xfer_err *err)
{
	disk_state *s = ep->impl;
	const char *dir = ep->cfg.disk.dir;
	uint64_t latest = 0;
	disk_index *plan = NULL;
	size_t np = 0;
	bool clean = true; /* the buffers hold what they held before (or nothing yet) */
	*vanished = false;
	double deadline = xfer_now() + (wait_ms < 0 ? 1e12 : wait_ms / 1e3);
	for (;;) {
		if (xfer_check_aborted(ep, err) != 0) return -1;
		if (latest_at(s->dfd, dir, &latest, err) != 0) return -1;
		if (ep->target) { /* exactly the version told: never past it */
			char vn[32];
			vname(vn, sizeof vn, ep->target);
			if (ep->target <= s->have)
				return xfer_fail(err, XFER_EINVAL, "told to receive version %llu, this receiver holds %llu",
						 (unsigned long long)ep->target, (unsigned long long)s->have);
			if (exists_at(s->dfd, vn)) {
				latest = ep->target;
				break;
			}
			if (latest > ep->target)
				return xfer_fail(err, XFER_ECHAIN, "version %llu is not in %s (removed: aborted, or collected)",
						 (unsigned long long)ep->target, dir);
		} else if (latest > s->have) {
			break;
		}
		if (xfer_now() >= deadline)
			return xfer_fail(err, XFER_ENOVERSION, "no version %s%llu in %s", ep->target ? "" : "newer than ",
					 (unsigned long long)(ep->target ? ep->target : s->have), dir);
		struct timespec ts = { 0, POLL_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	/* Walk back from the newest version to one we hold or a full one. */
	uint64_t v = latest;
	for (;;) {
		disk_index *np_ = realloc(plan, (np + 1) * sizeof *plan);
		if (!np_) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
		plan = np_;
		if (index_read(s->dfd, dir, v, &plan[np], err) != 0) {
			if (np) xfer_err_prefix(err, "version %llu needs version %llu", (unsigned long long)plan[np - 1].version,
						(unsigned long long)v);
			goto err;
		}
		disk_index *x = &plan[np++];
		if (index_match(x, ep->m, err) != 0) goto err;
		if (np > 1 && x->chain != plan[np - 2].chain) {
			xfer_fail(err, XFER_ECHAIN, "version %llu (chain %016llx) is a delta on version %llu of another chain (%016llx)",
				  (unsigned long long)plan[np - 2].version, (unsigned long long)plan[np - 2].chain,
				  (unsigned long long)v, (unsigned long long)x->chain);
			goto err;
		}
		if (x->full) break;
		if (x->base == s->have && x->chain == s->have_chain && s->have) break;
		v = x->base;
	}
	if (xfer_hooks.disk_after_plan) xfer_hooks.disk_after_plan(xfer_hooks.disk_after_plan_arg);
	/* Apply oldest first, with the journals when there is a version to keep. */
	int use_journal = (s->have || ep->journal_first) && ep->cfg.keep_previous;
	for (int i = 0; i < s->threads; i++)
		if (s->j[i]) xfer_journal_reset(s->j[i]);
	int rc = 0;
	for (size_t i = np; i-- > 0 && rc == 0;) {
		if (xfer_check_aborted(ep, err) != 0) rc = -1;
		else rc = apply_version(ep, &plan[i], use_journal, err);
		if (i == 0 && xfer_hooks.crash_receiving_version && xfer_hooks.crash_receiving_version == latest)
			_exit(3); /* test hook: dies with the version landed, not verified by anyone */
	}
	if (rc == 0) rc = check_chain(ep, plan, np, err);
	if (rc == 0) rc = keep_root(ep, &plan[0], err);
	ep->stats.journal_bytes = 0;
	for (int i = 0; i < s->threads; i++) ep->stats.journal_bytes += xfer_journal_bytes(s->j[i]);
	if (rc != 0) {
		int undone = 1;
		xfer_err tmp;
		for (int i = 0; use_journal && i < s->threads; i++)
			if (xfer_journal_undo(s->j[i], &tmp) != 0) undone = 0;
		clean = !(use_journal ? !undone : s->have != 0);
		if (use_journal && !undone)
			xfer_err_prefix(err, "AND THE UNDO FAILED (%s), the receiver's buffers are damaged", tmp.msg);
		else if (!use_journal && s->have)
			xfer_err_prefix(err, "keep_previous is off: the receiver's buffers are partly updated");
		goto err;
	}
	s->prev_have = s->have;
	s->prev_chain = s->have_chain;
	ep->undo_ready = use_journal;
	s->have = latest;
	s->have_chain = plan[0].chain;
	ep->stats.versions_applied = np;
	ep->stats.full_loaded = plan[np - 1].full;
	if (!ep->commit_later && record_receiver(ep, err) != 0) goto err;
	*version = latest;
	for (size_t i = 0; i < np; i++) xfer_disk_index_free(&plan[i]);
	free(plan);
	return 0;
err:
	if (np && clean) {
		char vn[32];
		vname(vn, sizeof vn, plan[np - 1].version);
		*vanished = !exists_at(s->dfd, vn);
	}
	for (size_t i = 0; i < np; i++) xfer_disk_index_free(&plan[i]);
	free(plan);
	return -1;
}

static int disk_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	for (int attempt = 0;; attempt++) {
		bool vanished;
		int rc = disk_receive_once(ep, wait_ms, version, &vanished, err);
		if (rc == 0 || !vanished || attempt >= 3) return rc;
		/* the buffers are as before (journal) or hold nothing yet: plan again
		 * from the newest full version */
	}
}

static int disk_rollback(xfer_endpoint *ep, xfer_err *err)
{
	disk_state *s = ep->impl;
	double t0 = xfer_now();
	int rc = 0;
	for (int i = 0; i < s->threads; i++)
		if (s->j[i] && xfer_journal_undo(s->j[i], err) != 0) rc = -1;
	ep->stats.undo_seconds = xfer_now() - t0;
	if (rc != 0) {
		xfer_err_prefix(err, "disk-delta rollback: the undo failed, the buffers are damaged");
		return -1;
	}
	s->have = s->prev_have;
	s->have_chain = s->prev_chain;
	return ep->commit_later ? 0 : record_receiver(ep, err);
}

/* The coordinated update's actions (xfer_path_ops): receivers/<id> at
 * commit, a receiver's bytes that are no version, an aborted version. */
static int disk_commit(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	disk_state *s = ep->impl;
	if (!s) return 0;
	if (s->have != v)
		return xfer_fail(err, XFER_EINVAL, "disk-delta: recording version %llu, the receiver holds %llu",
				 (unsigned long long)v, (unsigned long long)s->have);
	return record_receiver(ep, err);
}

static void disk_forget(xfer_endpoint *ep)
{
	disk_state *s = ep->impl;
	if (!s) return;
	s->have = 0;
	s->have_chain = 0;
}

static int disk_drop(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	disk_state *s = ep->impl;
	if (!s) return 0;
	char vn[32];
	vname(vn, sizeof vn, v);
	s->have_shadow = 0; /* the next version is full: no chain passes through v */
	if (xfer_rmtree_at(s->dfd, vn) != 0) return xfer_fail_errno(err, XFER_EIO, "remove %s/%s", ep->cfg.disk.dir, vn);
	if (fsync(s->dfd) != 0) return xfer_fail_errno(err, XFER_EIO, "fsync folder %s", ep->cfg.disk.dir);
	return 0;
}

const xfer_path_ops xfer_disk_ops = {
	.name = "disk-delta",
	.probe = disk_probe,
	.setup = disk_setup,
	.send = disk_send,
	.receive = disk_receive,
	.abort = disk_abort,
	.teardown = disk_teardown,
	.rollback = disk_rollback,
	.fan = XFER_FAN_SELF,
	.chain = 1,
	.commit = disk_commit,
	.forget = disk_forget,
	.drop = disk_drop,
};
