/* tests/fakecuda/fake_nccl.c: a stand-in libnccl for machines without a GPU,
 * so that the broadcast paths (transfer/paths/xfer_nccl.c) run between processes
 * in `make test` (tests/unit/xfer_nccl_test.c).  libskein dlopens it through
 * SKEIN_NCCL_LIB, beside fake_cudart.c through SKEIN_CUDART_LIB (whose
 * "device memory" is plain host memory, so a broadcast is a memcpy).
 *
 * The unique id names a shared-memory file (/dev/shm/skein-fakenccl-<hex>)
 * that every rank of the communicator maps: a header (the root's piece
 * counter, each rank's acknowledgement) and a 1 MiB window.  A broadcast
 * moves through the window piece by piece: the root waits until every rank
 * acknowledged the last piece, writes the next and bumps the counter; a
 * rank waits for the counter, copies, acknowledges.
 *
 * As with a non-blocking communicator, a broadcast returns at once: a
 * worker thread per communicator runs the queued broadcasts in order, and
 * ncclCommGetAsyncError says ncclInProgress until the queue is empty (the
 * stream itself is never used), so the caller can hash while bytes move.
 *
 * A rank that died is seen without timeouts: each rank holds a POSIX record
 * lock on its own byte of the file, which the kernel drops when the process
 * exits; a waiting rank that finds a peer's byte unlocked fails the broadcast
 * with ncclRemoteError, kept as the communicator's asynchronous error (later
 * calls return it), as NCCL does.  Bytes move with the loaded CUDA runtime's cudaMemcpy
 * (cudaMemcpyDefault), so the same stand-in serves fake_cudart's host memory
 * and a real GPU's memory (two processes on one GPU, which NCCL refuses).
 * Only the calls libskein makes are here; one communicator per process at a
 * time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
	OK = 0,
	SYSTEM_ERROR = 2,
	INVALID_ARGUMENT = 4,
	REMOTE_ERROR = 6,
	IN_PROGRESS = 7,
	MAX_RANKS = 8,
	WINDOW = 1 << 20,
	LOCK_BASE = 4096, /* rank r locks byte LOCK_BASE + r (past the header) */
	JOIN_MS = 20000,  /* how long ranks wait for each other at init */
};

struct fk_id { char b[128]; };

typedef struct {
	atomic_ullong posted;          /* pieces the root has written */
	atomic_ullong acked[MAX_RANKS]; /* pieces each rank has copied */
	atomic_int joined[MAX_RANKS];
	atomic_ullong len;             /* bytes of the posted piece */
} fk_head;

typedef struct {
	const void *send;
	void *recv;
	size_t count;
	int root;
} fk_op;

typedef struct {
	int fd, nranks, rank, device;
	atomic_int async;          /* the first error, kept */
	fk_head *h;
	unsigned char *win;
	unsigned long long pieces; /* this rank's count of pieces seen (worker) */
	char name[64];
	pthread_t worker;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	fk_op *q;                  /* queued broadcasts [head, tail) */
	size_t head, tail, cap;
	int running, stop;
} fk_comm;

int ncclGetVersion(int *v) { *v = 21900; return OK; }

const char *ncclGetErrorString(int rc)
{
	switch (rc) {
	case OK: return "no error";
	case REMOTE_ERROR: return "remote process exited or there was a network error (fake NCCL)";
	case INVALID_ARGUMENT: return "invalid argument (fake NCCL)";
	default: return "system error (fake NCCL)";
	}
}

int ncclGetUniqueId(struct fk_id *id)
{
	memset(id, 0, sizeof *id);
	unsigned char r[12];
	int fd = open("/dev/urandom", O_RDONLY);
	if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
		if (fd >= 0) close(fd);
		return SYSTEM_ERROR;
	}
	close(fd);
	int n = snprintf(id->b, sizeof id->b, "/skein-fakenccl-");
	for (size_t i = 0; i < sizeof r; i++) n += snprintf(id->b + n, sizeof id->b - (size_t)n, "%02x", r[i]);
	return OK;
}

static void nap(void)
{
	struct timespec ts = { 0, 50 * 1000L };
	nanosleep(&ts, NULL);
}

/* 1 while rank r's process holds its lock byte. */
static int alive(const fk_comm *c, int r)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_BASE + r, .l_len = 1 };
	if (fcntl(c->fd, F_GETLK, &fl) != 0) return 0;
	return fl.l_type != F_UNLCK;
}

static void *worker(void *arg);

/* A function of the loaded CUDA runtime (RTLD_GLOBAL), or NULL. */
static void *cuda_fn(const char *name) { return dlsym(RTLD_DEFAULT, name); }

int ncclCommInitRankConfig(fk_comm **out, int nranks, struct fk_id id, int rank, void *config)
{
	(void)config;
	if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || strncmp(id.b, "/skein-fakenccl-", 16))
		return INVALID_ARGUMENT;
	fk_comm *c = calloc(1, sizeof *c);
	if (!c) return SYSTEM_ERROR;
	snprintf(c->name, sizeof c->name, "%.63s", id.b);
	c->nranks = nranks;
	c->rank = rank;
	int (*get_device)(int *);
	*(void **)&get_device = cuda_fn("cudaGetDevice");
	if (!get_device || get_device(&c->device) != 0) c->device = -1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->fd = shm_open(c->name, O_RDWR | O_CREAT, 0600);
	size_t sz = (size_t)LOCK_BASE + MAX_RANKS + WINDOW;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_BASE + rank, .l_len = 1 };
	if (c->fd < 0 || ftruncate(c->fd, (off_t)sz) != 0 || fcntl(c->fd, F_SETLK, &fl) != 0) goto fail;
	void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
	if (p == MAP_FAILED) goto fail;
	c->h = p;
	c->win = (unsigned char *)p + LOCK_BASE + MAX_RANKS;
	atomic_store(&c->h->joined[rank], 1);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int r = 0; r < nranks; r++)
		while (!atomic_load(&c->h->joined[r])) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > JOIN_MS) goto fail;
			nap();
		}
	if (pthread_create(&c->worker, NULL, worker, c) != 0) goto fail;
	c->started = 1;
	*out = c;
	return OK;
fail:
	if (c->h) munmap(c->h, sz);
	if (c->fd >= 0) close(c->fd);
	free(c);
	return SYSTEM_ERROR;
}

int ncclCommGetAsyncError(fk_comm *c, int *res)
{
	pthread_mutex_lock(&c->mu);
	int busy = c->running || c->head != c->tail;
	pthread_mutex_unlock(&c->mu);
	int a = atomic_load(&c->async);
	*res = a ? a : busy ? IN_PROGRESS : OK;
	return OK;
}

/* Stops the worker (a broadcast in flight fails), then unmaps. */
static void drop(fk_comm *c)
{
	if (c->started) {
		pthread_mutex_lock(&c->mu);
		c->stop = 1;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->worker, NULL);
	}
	shm_unlink(c->name); /* the mapping stays for whoever still has it */
	munmap(c->h, (size_t)LOCK_BASE + MAX_RANKS + WINDOW);
	close(c->fd);
	free(c->q);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

int ncclCommAbort(fk_comm *c) { if (c) drop(c); return OK; }
int ncclCommDestroy(fk_comm *c) { if (c) drop(c); return OK; }
int ncclGroupStart(void) { return OK; }
int ncclGroupEnd(void) { return OK; }

static int stopping(fk_comm *c)
{
	pthread_mutex_lock(&c->mu);
	int s = c->stop;
	pthread_mutex_unlock(&c->mu);
	return s;
}

/* Waits until ready() or a rank it needs is gone (root: every other rank;
 * others: the root) or the communicator is being torn down. */
static int wait_for(fk_comm *c, int root, int (*ready)(const fk_comm *, int), int arg)
{
	while (!ready(c, arg)) {
		for (int r = 0; r < c->nranks; r++)
			if (r != c->rank && (c->rank == root || r == root) && !alive(c, r)) return REMOTE_ERROR;
		if (stopping(c)) return SYSTEM_ERROR;
		nap();
	}
	return OK;
}

static int all_acked(const fk_comm *c, int root)
{
	for (int r = 0; r < c->nranks; r++)
		if (r != root && atomic_load(&c->h->acked[r]) != c->pieces) return 0;
	return 1;
}

static int posted(const fk_comm *c, int root)
{
	(void)root;
	return atomic_load(&c->h->posted) > c->pieces;
}

/* cudaMemcpy of the runtime libskein loaded (RTLD_GLOBAL), else memcpy. */
static void copy(void *dst, const void *src, size_t n)
{
	static int (*cp)(void *, const void *, size_t, int);
	static atomic_int tried;
	if (!atomic_load(&tried)) {
		*(void **)&cp = cuda_fn("cudaMemcpy");
		atomic_store(&tried, 1);
	}
	if (!cp || cp(dst, src, n, 4 /* cudaMemcpyDefault */) != 0) memcpy(dst, src, n);
}

/* One broadcast, on the worker thread. */
static int run_op(fk_comm *c, const fk_op *o)
{
	for (size_t off = 0; off < o->count || (o->count == 0 && off == 0); off += WINDOW) {
		size_t k = o->count - off < WINDOW ? o->count - off : WINDOW;
		int rc;
		if (c->rank == o->root) {
			if ((rc = wait_for(c, o->root, all_acked, o->root)) != OK) return rc;
			copy(c->win, (const char *)o->send + off, k);
			if (o->recv != o->send) copy((char *)o->recv + off, (const char *)o->send + off, k);
			atomic_store(&c->h->len, k);
			atomic_store(&c->h->posted, c->pieces + 1);
		} else {
			if ((rc = wait_for(c, o->root, posted, o->root)) != OK) return rc;
			if (atomic_load(&c->h->len) != k) return INVALID_ARGUMENT; /* the ranks disagree on the count */
			copy((char *)o->recv + off, c->win, k);
			atomic_store(&c->h->acked[c->rank], c->pieces + 1);
		}
		c->pieces++;
		if (o->count == 0) break;
	}
	if (c->rank == o->root) return wait_for(c, o->root, all_acked, o->root);
	return OK;
}

static void *worker(void *arg)
{
	fk_comm *c = arg;
	int (*set_device)(int);
	*(void **)&set_device = cuda_fn("cudaSetDevice");
	if (set_device && c->device >= 0) set_device(c->device);
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->stop && c->head == c->tail) pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop) break;
		fk_op o = c->q[c->head++];
		c->running = 1;
		pthread_mutex_unlock(&c->mu);
		int rc = atomic_load(&c->async) ? OK : run_op(c, &o);
		if (rc != OK && !atomic_load(&c->async)) atomic_store(&c->async, rc); /* as NCCL keeps it */
		pthread_mutex_lock(&c->mu);
		c->running = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int ncclBroadcast(const void *send, void *recv, size_t count, int dtype, int root, fk_comm *c, void *stream)
{
	(void)stream;
	if (!c || dtype != 0 || root < 0 || root >= c->nranks) return INVALID_ARGUMENT;
	int a = atomic_load(&c->async);
	if (a) return a;
	pthread_mutex_lock(&c->mu);
	if (c->head == c->tail) c->head = c->tail = 0;
	if (c->tail == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		fk_op *q = realloc(c->q, cap * sizeof *q);
		if (!q) {
			pthread_mutex_unlock(&c->mu);
			return SYSTEM_ERROR;
		}
		c->q = q;
		c->cap = cap;
	}
	c->q[c->tail++] = (fk_op){ send, recv, count, root };
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return OK;
}
