/* tests/fakecuda/fake_nccl.c: a stand-in libnccl for machines without a GPU,
 * so that the broadcast paths (transfer/xfer_nccl.c) run between processes
 * in `make test` (tests/unit/xfer_nccl_test.c).  libskein dlopens it through
 * SKEIN_NCCL_LIB, beside fake_cudart.c through SKEIN_CUDART_LIB (whose
 * "device memory" is plain host memory, so a broadcast is a memcpy).
 *
 * The unique id names a shared-memory file (/dev/shm/skein-fakenccl-<hex>)
 * that every rank of the communicator maps: a header (the root's piece
 * counter, each rank's acknowledgement) and a 1 MiB window.  A broadcast
 * moves through the window piece by piece: the root waits until every rank
 * acknowledged the last piece, writes the next and bumps the counter; a
 * rank waits for the counter, copies, acknowledges.  Each call finishes
 * before it returns (the stream is always idle).
 *
 * A rank that died is seen without timeouts: each rank holds a POSIX record
 * lock on its own byte of the file, which the kernel drops when the process
 * exits; a waiting rank that finds a peer's byte unlocked fails the call with
 * ncclRemoteError and keeps the error as the communicator's asynchronous
 * error, as NCCL does.  Bytes move with the loaded CUDA runtime's cudaMemcpy
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
	int fd, nranks, rank, async;
	fk_head *h;
	unsigned char *win;
	unsigned long long pieces; /* this rank's count of pieces seen */
	char name[64];
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
	*res = c->async;
	return OK;
}

static void drop(fk_comm *c)
{
	shm_unlink(c->name); /* the mapping stays for whoever still has it */
	munmap(c->h, (size_t)LOCK_BASE + MAX_RANKS + WINDOW);
	close(c->fd);
	free(c);
}

int ncclCommAbort(fk_comm *c) { if (c) drop(c); return OK; }
int ncclCommDestroy(fk_comm *c) { if (c) drop(c); return OK; }
int ncclGroupStart(void) { return OK; }
int ncclGroupEnd(void) { return OK; }

/* Waits until ready() or a rank it needs is gone (root: every other rank;
 * others: the root). */
static int wait_for(fk_comm *c, int root, int (*ready)(const fk_comm *, int), int arg)
{
	while (!ready(c, arg)) {
		for (int r = 0; r < c->nranks; r++)
			if (r != c->rank && (c->rank == root || r == root) && !alive(c, r)) {
				c->async = REMOTE_ERROR;
				return REMOTE_ERROR;
			}
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
	static int tried;
	if (!tried) {
		*(void **)&cp = dlsym(RTLD_DEFAULT, "cudaMemcpy");
		tried = 1;
	}
	if (!cp || cp(dst, src, n, 4 /* cudaMemcpyDefault */) != 0) memcpy(dst, src, n);
}

int ncclBroadcast(const void *send, void *recv, size_t count, int dtype, int root, fk_comm *c, void *stream)
{
	(void)stream;
	if (!c || dtype != 0 || root < 0 || root >= c->nranks) return INVALID_ARGUMENT;
	if (c->async) return c->async;
	for (size_t off = 0; off < count || (count == 0 && off == 0); off += WINDOW) {
		size_t k = count - off < WINDOW ? count - off : WINDOW;
		int rc;
		if (c->rank == root) {
			if ((rc = wait_for(c, root, all_acked, root)) != OK) return rc;
			copy(c->win, (const char *)send + off, k);
			if (recv != send) copy((char *)recv + off, (const char *)send + off, k);
			atomic_store(&c->h->len, k);
			atomic_store(&c->h->posted, c->pieces + 1);
		} else {
			if ((rc = wait_for(c, root, posted, root)) != OK) return rc;
			if (atomic_load(&c->h->len) != k) {
				c->async = INVALID_ARGUMENT; /* the ranks disagree on the count */
				return INVALID_ARGUMENT;
			}
			copy((char *)recv + off, c->win, k);
			atomic_store(&c->h->acked[c->rank], c->pieces + 1);
		}
		c->pieces++;
		if (count == 0) break;
	}
	if (c->rank == root) return wait_for(c, root, all_acked, root);
	return OK;
}
