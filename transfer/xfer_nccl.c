/* transfer/xfer_nccl.c: the broadcast and broadcast_packed data paths (NCCL,
 * loaded with dlopen).
 *
 * Miles's default mode: one NCCL group of the trainer's source rank (the
 * root, our sender) and every engine GPU (receivers).  The caller carries the
 * 128-byte unique id (xfer_nccl_unique_id on the root) to the other ranks out
 * of band.  Per version the root broadcasts a header (manifest digest,
 * version, every tensor's xxh3-128) so that all ranks agree before any weight
 * moves, then per bucket:
 *   broadcast         one ncclBroadcast per tensor, straight into the
 *                     receivers' tensors, in one ncclGroupStart/End;
 *   broadcast_packed  the root packs the bucket into one device buffer (each
 *                     tensor at an offset aligned to its element size), one
 *                     broadcast, the receivers unpack with device copies.
 * The communicator is non-blocking (config.blocking = 0): after every call we
 * poll cudaStreamQuery and ncclCommGetAsyncError, and on an error or after
 * timeout_ms without completion call ncclCommAbort and fail with a message:
 * never a hang (docs/reference.md, Weight transfer: after an error nothing enqueued can be
 * trusted, so the communicator is gone and the endpoint must be reopened).
 *
 * Verification (cfg.verify_device) copies each received tensor to a pinned
 * host buffer and hashes it on the CPU: correct but far slower than the
 * broadcast itself (no GPU hash kernel here).  Receivers overwrite their
 * tensors in place: a failure leaves them partly updated (reported). */
#include "transfer/xfer_int.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transfer/xfer_hash.h"

enum {
	NCCL_INT8 = 0,
	NCCL_SUCCESS = 0,
	NCCL_IN_PROGRESS = 7,
	CUDA_NOT_READY = 600,
	POLL_US = 100,          /* watchdog poll period */
	STAGE_BYTES = 64 << 20, /* pinned host buffer for verification */
};

/* ncclConfig_t as of NCCL 2.17: NCCL reads `size` bytes of it and fills the
 * rest with defaults, so this prefix works with every later version. */
typedef struct {
	size_t size;
	unsigned int magic, version;
	int blocking, cgaClusterSize, minCTAs, maxCTAs;
	const char *netName;
	int splitShare;
} nccl_config;

struct nccl_id { char b[XFER_NCCL_ID_BYTES]; }; /* ncclUniqueId, passed by value */

typedef struct {
	int ok;
	char why[256];
	void *h;
	int (*GetVersion)(int *);
	int (*GetUniqueId)(void *id128);
	int (*CommInitRankConfig)(void **comm, int nranks, struct nccl_id id, int rank, nccl_config *cfg);
	int (*CommGetAsyncError)(void *comm, int *res);
	int (*CommAbort)(void *comm);
	int (*CommDestroy)(void *comm);
	int (*Broadcast)(const void *s, void *r, size_t count, int dtype, int root, void *comm, void *stream);
	int (*GroupStart)(void);
	int (*GroupEnd)(void);
	const char *(*GetErrorString)(int);
} nccl_api;

static nccl_api g_nc;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#define NLOAD(field, sym)                                                          \
	do {                                                                       \
		*(void **)&g_nc.field = dlsym(g_nc.h, sym);                        \
		if (!g_nc.field) {                                                 \
			snprintf(g_nc.why, sizeof g_nc.why, "libnccl lacks %s", sym);  \
			return;                                                    \
		}                                                                  \
	} while (0)

static void nload(void)
{
	const char *env = getenv("SKEIN_NCCL_LIB");
	if (env && *env) g_nc.h = dlopen(env, RTLD_NOW | RTLD_GLOBAL);
	if (!g_nc.h) g_nc.h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!g_nc.h) g_nc.h = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
	if (!g_nc.h) {
		snprintf(g_nc.why, sizeof g_nc.why, "NCCL (libnccl.so.2) was not found; set SKEIN_NCCL_LIB to its path");
		return;
	}
	NLOAD(GetVersion, "ncclGetVersion");
	NLOAD(GetUniqueId, "ncclGetUniqueId");
	NLOAD(CommInitRankConfig, "ncclCommInitRankConfig");
	NLOAD(CommGetAsyncError, "ncclCommGetAsyncError");
	NLOAD(CommAbort, "ncclCommAbort");
	NLOAD(CommDestroy, "ncclCommDestroy");
	NLOAD(Broadcast, "ncclBroadcast");
	NLOAD(GroupStart, "ncclGroupStart");
	NLOAD(GroupEnd, "ncclGroupEnd");
	NLOAD(GetErrorString, "ncclGetErrorString");
	int v = 0;
	g_nc.GetVersion(&v);
	if (v < 21700) {
		snprintf(g_nc.why, sizeof g_nc.why, "NCCL %d is older than 2.17 (non-blocking communicators)", v);
		return;
	}
	g_nc.ok = 1;
}

static const nccl_api *nccl(char *why, size_t n)
{
	pthread_once(&g_once, nload);
	if (g_nc.ok) return &g_nc;
	if (why && n) snprintf(why, n, "%s", g_nc.why);
	return NULL;
}

static int nccl_probe(char *why, size_t n)
{
	if (!xfer_cuda(why, n)) return -1;
	return nccl(why, n) ? 0 : -1;
}

int xfer_nccl_unique_id(unsigned char id[XFER_NCCL_ID_BYTES], xfer_err *err)
{
	char why[256];
	const nccl_api *nc = nccl(why, sizeof why);
	if (!nc) return xfer_fail(err, XFER_EUNAVAIL, "%s", why);
	int rc = nc->GetUniqueId(id);
	if (rc) return xfer_fail(err, XFER_EIO, "ncclGetUniqueId: %s", nc->GetErrorString(rc));
	return 0;
}

typedef struct {
	const xfer_cuda_api *cu;
	const nccl_api *nc;
	void *comm, *stream;
	int packed, root;
	unsigned char *dhead, *hstage;  /* device header buffer, pinned host buffer */
	size_t head_bytes;
	unsigned char *dpack;           /* packed bucket (broadcast_packed) */
	uint64_t pack_bytes;
	uint64_t digest;
} nccl_state;

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000L };
	nanosleep(&ts, NULL);
}

static int nfail(nccl_state *s, xfer_err *err, xfer_code code, const char *what, int rc)
{
	if (s->comm) {
		s->nc->CommAbort(s->comm);
		s->comm = NULL;
	}
	return xfer_fail(err, code, "%s: %s; the communicator was aborted", what,
			 rc >= 0 ? s->nc->GetErrorString(rc) : "no completion within the watchdog time");
}

/* Waits for the communicator (init) or the stream (collectives) to finish,
 * polling the communicator's asynchronous error; aborts on error/timeout. */
static int watch(xfer_endpoint *ep, nccl_state *s, int stream, const char *what, xfer_err *err)
{
	double deadline = xfer_now() + ep->cfg.timeout_ms / 1e3;
	for (;;) {
		int as = NCCL_SUCCESS;
		int rc = s->nc->CommGetAsyncError(s->comm, &as);
		if (rc != NCCL_SUCCESS) return nfail(s, err, XFER_EPEER, what, rc);
		if (as != NCCL_SUCCESS && as != NCCL_IN_PROGRESS) return nfail(s, err, XFER_EPEER, what, as);
		if (as == NCCL_SUCCESS) {
			if (!stream) return 0;
			int q = s->cu->StreamQuery(s->stream);
			if (q == 0) return 0;
			if (q != CUDA_NOT_READY) {
				xfer_cuda_check(s->cu, q, what, err);
				return nfail(s, err, XFER_EIO, err->msg, -1);
			}
		}
		if (atomic_load(&ep->aborted)) {
			nfail(s, err, XFER_EABORTED, what, -1);
			return xfer_fail(err, XFER_EABORTED, "%s: aborted by the caller", what);
		}
		if (xfer_now() > deadline) {
			nfail(s, err, XFER_ETIMEOUT, what, -1);
			return xfer_fail(err, XFER_ETIMEOUT, "%s: no completion within %d ms (a rank missing or dead?); "
					 "ncclCommAbort called", what, ep->cfg.timeout_ms);
		}
		sleep_us(POLL_US);
	}
}

static int nccl_setup(xfer_endpoint *ep, xfer_err *err)
{
	nccl_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->cu = xfer_cuda(NULL, 0);
	s->nc = nccl(NULL, 0);
	s->packed = ep->ops == &xfer_bcast_packed_ops;
	const xfer_config *c = &ep->cfg;
	s->root = c->nccl.root;
	if (c->nccl.nranks < 1 || c->nccl.rank < 0 || c->nccl.rank >= c->nccl.nranks || s->root < 0 ||
	    s->root >= c->nccl.nranks)
		return xfer_fail(err, XFER_EINVAL, "NCCL: rank %d, root %d of %d ranks", c->nccl.rank, s->root,
				 c->nccl.nranks);
	if ((c->role == XFER_SENDER) != (c->nccl.rank == s->root))
		return xfer_fail(err, XFER_EINVAL, "NCCL: the sender must be the root rank and only it");
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem != XFER_MEM_CUDA)
			return xfer_fail(err, XFER_EINVAL, "NCCL: tensor %s is not in CUDA memory", ep->m->t[i].name);
	if (xfer_cuda_check(s->cu, s->cu->SetDevice(c->nccl.device), "cudaSetDevice", err) != 0) return -1;
	if (xfer_cuda_check(s->cu, s->cu->StreamCreate(&s->stream), "cudaStreamCreate", err) != 0) return -1;
	size_t dlen;
	char *desc = xfer_manifest_describe(ep->m, &dlen);
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	s->digest = XXH3_64bits(desc, dlen);
	free(desc);
	s->head_bytes = 16 + ep->m->n * sizeof(xfer_sum);
	if (xfer_cuda_check(s->cu, s->cu->Malloc((void **)&s->dhead, s->head_bytes), "cudaMalloc", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->MallocHost((void **)&s->hstage, STAGE_BYTES > s->head_bytes ? STAGE_BYTES : s->head_bytes),
			    "cudaMallocHost", err) != 0)
		return -1;
	if (s->packed) {
		for (size_t b = 0; b < ep->nbuckets; b++)
			if (ep->buckets[b].packed_bytes > s->pack_bytes) s->pack_bytes = ep->buckets[b].packed_bytes;
		if (s->pack_bytes &&
		    xfer_cuda_check(s->cu, s->cu->Malloc((void **)&s->dpack, s->pack_bytes), "cudaMalloc (packed bucket)", err) != 0)
			return -1;
	}
	nccl_config cfg = { .size = sizeof cfg, .magic = 0xcafebeef, .version = 21700, .blocking = 0,
			    .cgaClusterSize = INT_MIN, .minCTAs = INT_MIN, .maxCTAs = INT_MIN, .netName = NULL,
			    .splitShare = INT_MIN };
	struct nccl_id id;
	memcpy(id.b, c->nccl.id, sizeof id.b);
	int rc = s->nc->CommInitRankConfig(&s->comm, c->nccl.nranks, id, c->nccl.rank, &cfg);
	if (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS) {
		s->comm = NULL;
		return xfer_fail(err, XFER_EIO, "ncclCommInitRankConfig: %s", s->nc->GetErrorString(rc));
	}
	return watch(ep, s, 0, "ncclCommInitRankConfig", err);
}

static void nccl_teardown(xfer_endpoint *ep)
{
	nccl_state *s = ep->impl;
	if (!s) return;
	if (s->comm) s->nc->CommDestroy(s->comm);
	if (s->stream) s->cu->StreamDestroy(s->stream);
	if (s->dhead) s->cu->Free(s->dhead);
	if (s->dpack) s->cu->Free(s->dpack);
	if (s->hstage) s->cu->FreeHost(s->hstage);
	free(s);
	ep->impl = NULL;
}

static void nccl_abort(xfer_endpoint *ep) { (void)ep; /* the watchdog loop sees ep->aborted */ }

static int bcast(xfer_endpoint *ep, nccl_state *s, const void *src, void *dst, size_t n, xfer_err *err)
{
	int rc = s->nc->Broadcast(src, dst, n, NCCL_INT8, s->root, s->comm, s->stream);
	if (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS) return nfail(s, err, XFER_EIO, "ncclBroadcast", rc);
	return 0;
}

/* One version: header, then every bucket; the same code on every rank. */
static int run_version(xfer_endpoint *ep, uint64_t *version, xfer_err *err)
{
	nccl_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	const xfer_cuda_api *cu = s->cu;
	int root = ep->cfg.role == XFER_SENDER;
	if (!s->comm) return xfer_fail(err, XFER_EPEER, "the NCCL communicator was aborted earlier; reopen the endpoint");
	xfer_sum *sums = (xfer_sum *)(s->hstage + 16);
	if (root) {
		if (xfer_cuda_check(cu, cu->DeviceSynchronize(), "cudaDeviceSynchronize", err) != 0) return -1;
		xfer_sum *tmp = malloc(m->n * sizeof *tmp + 1);
		if (!tmp) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		for (size_t i = 0; i < m->n; i++) {
			if (!ep->cfg.verify_device) { tmp[i] = (xfer_sum){ 0, 0 }; continue; }
			if (xfer_tensor_checksum(&m->t[i], s->hstage, STAGE_BYTES, &tmp[i], err) != 0) { free(tmp); return -1; }
		}
		memcpy(s->hstage, &s->digest, 8);
		memcpy(s->hstage + 8, version, 8);
		memcpy(sums, tmp, m->n * sizeof *tmp);
		free(tmp);
		if (xfer_cuda_copy(cu, s->dhead, XFER_MEM_CUDA, s->hstage, XFER_MEM_HOST, s->head_bytes, err) != 0) return -1;
	}
	double t0 = xfer_now();
	if (bcast(ep, s, s->dhead, s->dhead, s->head_bytes, err) != 0 || watch(ep, s, 1, "header broadcast", err) != 0)
		return -1;
	if (xfer_cuda_copy(cu, s->hstage, XFER_MEM_HOST, s->dhead, XFER_MEM_CUDA, s->head_bytes, err) != 0) return -1;
	uint64_t digest, v;
	memcpy(&digest, s->hstage, 8);
	memcpy(&v, s->hstage + 8, 8);
	if (digest != s->digest)
		return nfail(s, err, XFER_EMISMATCH, "the root's manifest differs from this rank's (names, dtypes or shapes)", -1);
	xfer_sum *want = malloc(m->n * sizeof *want + 1);
	if (!want) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	memcpy(want, sums, m->n * sizeof *want);
	int rc = -1;
	double moving = xfer_now() - t0;
	for (size_t b = 0; b < ep->nbuckets; b++) {
		const xfer_bucket *bk = &ep->buckets[b];
		double tb = xfer_now();
		if (s->packed) {
			uint64_t at = 0;
			for (size_t i = bk->first; root && i < bk->first + bk->count; i++) {
				const xfer_tensor *t = &m->t[i];
				size_t es = xfer_dtype_size(t->dtype);
				at = (at + es - 1) / es * es;
				if (t->nbytes && xfer_cuda_check(cu, cu->MemcpyAsync(s->dpack + at, t->ptr, t->nbytes, XFER_CUDA_D2D, s->stream),
								 "pack", err) != 0) goto out;
				at += t->nbytes;
			}
			if (bcast(ep, s, s->dpack, s->dpack, bk->packed_bytes, err) != 0) goto out;
			at = 0;
			for (size_t i = bk->first; !root && i < bk->first + bk->count; i++) {
				const xfer_tensor *t = &m->t[i];
				size_t es = xfer_dtype_size(t->dtype);
				at = (at + es - 1) / es * es;
				if (t->nbytes && xfer_cuda_check(cu, cu->MemcpyAsync(t->ptr, s->dpack + at, t->nbytes, XFER_CUDA_D2D, s->stream),
								 "unpack", err) != 0) goto out;
				at += t->nbytes;
			}
		} else {
			int g = s->nc->GroupStart();
			if (g != NCCL_SUCCESS) { nfail(s, err, XFER_EIO, "ncclGroupStart", g); goto out; }
			for (size_t i = bk->first; i < bk->first + bk->count; i++) {
				const xfer_tensor *t = &m->t[i];
				if (t->nbytes && bcast(ep, s, t->ptr, t->ptr, t->nbytes, err) != 0) goto out;
			}
			g = s->nc->GroupEnd();
			if (g != NCCL_SUCCESS && g != NCCL_IN_PROGRESS) { nfail(s, err, XFER_EIO, "ncclGroupEnd", g); goto out; }
		}
		if (watch(ep, s, 1, "bucket broadcast", err) != 0) {
			xfer_err_prefix(err, "bucket %zu", b);
			goto out;
		}
		moving += xfer_now() - tb;
		for (size_t i = bk->first; ep->cfg.verify_device && i < bk->first + bk->count; i++) {
			xfer_sum got;
			if (xfer_tensor_checksum(&m->t[i], s->hstage, STAGE_BYTES, &got, err) != 0) goto out;
			if (!xfer_sum_equal(got, want[i])) {
				xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch after the broadcast%s",
					  (unsigned long long)v, m->t[i].name, root ? " (on the root)" : "");
				goto out;
			}
		}
	}
	*version = v;
	ep->stats.bytes_moved = m->bytes;
	ep->stats.data_seconds = moving;
	ep->stats.staging_peak = s->pack_bytes;
	rc = 0;
out:
	free(want);
	return rc;
}

static int nccl_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	return run_version(ep, &v, err);
}

static int nccl_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	(void)wait_ms; /* the header broadcast waits, under the watchdog */
	return run_version(ep, version, err);
}

#define NCCL_OPS(pathname)                                                        \
	{ .name = pathname, .probe = nccl_probe, .setup = nccl_setup, .send = nccl_send, \
	  .receive = nccl_receive, .abort = nccl_abort, .teardown = nccl_teardown }

const xfer_path_ops xfer_bcast_ops = NCCL_OPS("broadcast");
const xfer_path_ops xfer_bcast_packed_ops = NCCL_OPS("broadcast_packed");
