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
 * Checksums are tree checksums (docs/tree-checksum.md): the GPU kernels
 * where they load, else CPU threads through a pinned buffer (same bits).
 * The header's manifest digest is seeded (HEAD_TREE_SEED) so that a rank
 * of an older libskein (xxh3-128 sums, unseeded digest) is named, not
 * mistaken for a different manifest.
 *
 * Undo (cfg.keep_previous, a receiver that holds a version): each bucket is
 * broadcast into a device staging bucket (broadcast_packed: its packed
 * buffer) and then copied into the tensors through an undo journal, with
 * the tree sums of what was copied: with the kernels the device journal
 * (xfer_cuda_journal.c, skein_copy_tree: copy, journal, hash in one pass),
 * else the host journal reading pieces back (xfer_journal_copy_device).  A
 * checksum mismatch, a rank gone, the watchdog or xfer_abort replay the
 * journal, so the tensors hold the previous version bit for bit; after a
 * verified version xfer_rollback does the same.  Cost: one staging bucket
 * of device memory and the journal's budget.  The first version lands in
 * place (nothing to keep). */
#include "transfer/xfer_gpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "transfer/xfer_hash.h"

enum {
	NCCL_INT8 = 0,
	NCCL_SUCCESS = 0,
	NCCL_REMOTE_ERROR = 6,
	NCCL_IN_PROGRESS = 7,
	CUDA_NOT_READY = 600,
	POLL_US = 100,          /* watchdog poll period */
	STAGE_BYTES = 64 << 20, /* pinned host buffer for verification */
	STAGE_ALIGN = 256,      /* broadcast: each tensor's place in a staging bucket */
	HEAD_TREE_SEED = 2,     /* the header's manifest digest when its sums are tree sums */
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
	unsigned char *dpack;           /* packed bucket (broadcast_packed; a journaling receiver's staging) */
	uint64_t pack_bytes;
	unsigned char *dstage;          /* broadcast: a journaling receiver's staging bucket */
	uint64_t stage_bytes;
	uint64_t digest, digest_v1;     /* of the manifest, tree-sum header; the SKV1 one */
	xfer_gpu *gpu;                  /* the GPU kernels, or NULL: CPU threads */
	xfer_djournal *dj;              /* receiver, keep_previous, kernels */
	xfer_journal *hj;               /* receiver, keep_previous, no kernels */
	const void **bsrc;              /* per tensor of a bucket (n entries) */
	void **bdst;
	uint64_t *bn, *chash;           /* sizes; chunk hashes of the CPU path */
	xfer_sum *got;
	double hashing;                 /* this version's hash seconds */
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

/* Where tensor i of bucket bk lands in a receiver's staging bucket: the
 * root's packed layout (broadcast_packed), else each tensor 256-aligned. */
static uint64_t stage_layout(const xfer_manifest *m, const xfer_bucket *bk, int packed, uint64_t *at)
{
	uint64_t o = 0;
	for (size_t i = bk->first; i < bk->first + bk->count; i++) {
		size_t a = packed ? xfer_dtype_size(m->t[i].dtype) : STAGE_ALIGN;
		o = (o + a - 1) / a * a;
		if (at) at[i - bk->first] = o;
		o += m->t[i].nbytes;
	}
	return o;
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
	const xfer_manifest *m = ep->m;
	s->root = c->nccl.root;
	if (c->nccl.nranks < 1 || c->nccl.rank < 0 || c->nccl.rank >= c->nccl.nranks || s->root < 0 ||
	    s->root >= c->nccl.nranks)
		return xfer_fail(err, XFER_EINVAL, "NCCL: rank %d, root %d of %d ranks", c->nccl.rank, s->root,
				 c->nccl.nranks);
	if ((c->role == XFER_SENDER) != (c->nccl.rank == s->root))
		return xfer_fail(err, XFER_EINVAL, "NCCL: the sender must be the root rank and only it");
	for (size_t i = 0; i < m->n; i++)
		if (m->t[i].mem != XFER_MEM_CUDA)
			return xfer_fail(err, XFER_EINVAL, "NCCL: tensor %s is not in CUDA memory", m->t[i].name);
	if (xfer_cuda_check(s->cu, s->cu->SetDevice(c->nccl.device), "cudaSetDevice", err) != 0) return -1;
	if (xfer_cuda_check(s->cu, s->cu->StreamCreate(&s->stream), "cudaStreamCreate", err) != 0) return -1;
	size_t dlen;
	char *desc = xfer_manifest_describe(m, &dlen);
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	s->digest = XXH3_64bits_withSeed(desc, dlen, HEAD_TREE_SEED);
	s->digest_v1 = XXH3_64bits(desc, dlen);
	free(desc);
	s->head_bytes = 16 + m->n * sizeof(xfer_sum);
	s->bsrc = calloc(m->n + 1, sizeof *s->bsrc);
	s->bdst = calloc(m->n + 1, sizeof *s->bdst);
	s->bn = calloc(m->n + 1, sizeof *s->bn);
	s->got = calloc(m->n + 1, sizeof *s->got);
	uint64_t maxchunks = 1;
	for (size_t i = 0; i < m->n; i++)
		if (xfer_tree_nchunks(m->t[i].nbytes) > maxchunks) maxchunks = xfer_tree_nchunks(m->t[i].nbytes);
	s->chash = calloc(maxchunks, sizeof *s->chash);
	if (!s->bsrc || !s->bdst || !s->bn || !s->got || !s->chash) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	if (xfer_cuda_check(s->cu, s->cu->Malloc((void **)&s->dhead, s->head_bytes), "cudaMalloc", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->MallocHost((void **)&s->hstage, STAGE_BYTES > s->head_bytes ? STAGE_BYTES : s->head_bytes),
			    "cudaMallocHost", err) != 0)
		return -1;
	xfer_err ge = { 0 };
	if (!(s->gpu = xfer_gpu_new(c->nccl.device, &ge))) snprintf(ep->note, sizeof ep->note, "%s", ge.msg);
	int journal = c->role == XFER_RECEIVER && c->keep_previous;
	if (journal && s->gpu && !(s->dj = xfer_djournal_new(s->gpu, c->device_journal_bytes, err))) return -1;
	if (journal && !s->gpu && !(s->hj = xfer_journal_new(c->journal_dir, err))) return -1;
	for (size_t b = 0; b < ep->nbuckets; b++) {
		if (ep->buckets[b].packed_bytes > s->pack_bytes) s->pack_bytes = ep->buckets[b].packed_bytes;
		uint64_t sb = stage_layout(m, &ep->buckets[b], 0, NULL);
		if (sb > s->stage_bytes) s->stage_bytes = sb;
	}
	if (s->packed && s->pack_bytes &&
	    xfer_cuda_check(s->cu, s->cu->Malloc((void **)&s->dpack, s->pack_bytes), "cudaMalloc (packed bucket)", err) != 0)
		return -1;
	if (!s->packed && journal && s->stage_bytes &&
	    xfer_cuda_check(s->cu, s->cu->Malloc((void **)&s->dstage, s->stage_bytes), "cudaMalloc (staging bucket)",
			    err) != 0)
		return -1;
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
	xfer_djournal_free(&s->dj);
	xfer_journal_free(&s->hj);
	xfer_gpu_free(&s->gpu);
	if (s->stream) s->cu->StreamDestroy(s->stream);
	if (s->dhead) s->cu->Free(s->dhead);
	if (s->dpack) s->cu->Free(s->dpack);
	if (s->dstage) s->cu->Free(s->dstage);
	if (s->hstage) s->cu->FreeHost(s->hstage);
	free(s->bsrc);
	free(s->bdst);
	free(s->bn);
	free(s->got);
	free(s->chash);
	free(s);
	ep->impl = NULL;
}

static void nccl_abort(xfer_endpoint *ep) { (void)ep; /* the watchdog loop sees ep->aborted */ }

static int bcast(xfer_endpoint *ep, nccl_state *s, const void *src, void *dst, size_t n, xfer_err *err)
{
	(void)ep;
	int rc = s->nc->Broadcast(src, dst, n, NCCL_INT8, s->root, s->comm, s->stream);
	if (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS)
		return nfail(s, err, rc == NCCL_REMOTE_ERROR ? XFER_EPEER : XFER_EIO, "ncclBroadcast", rc);
	return 0;
}

/* Tree checksums of tensors [a, b) in place: GPU kernels, else CPU threads
 * through the pinned buffer.  Into s->got[a..b). */
static int sums_in_place(xfer_endpoint *ep, nccl_state *s, size_t a, size_t b, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	double t0 = xfer_now();
	int rc = 0;
	if (s->gpu) {
		for (size_t i = a; i < b; i++) {
			s->bsrc[i - a] = m->t[i].ptr;
			s->bn[i - a] = m->t[i].nbytes;
		}
		rc = xfer_gpu_tree_sums(s->gpu, s->stream, s->bsrc, s->bn, b - a, s->got + a, err);
	} else {
		for (size_t i = a; rc == 0 && i < b; i++)
			rc = xfer_tensor_tree_sum(&m->t[i], s->hstage, STAGE_BYTES, ep->cfg.threads, &s->got[i], err);
	}
	s->hashing += xfer_now() - t0;
	return rc;
}

/* A journaling receiver: the bucket that landed in staging (its tensors at
 * at[]) goes into the tensors through the undo journal, with the tree sums
 * of what was copied into s->got.  GPU: one pass (skein_copy_tree), or copy
 * then hash; CPU: each stage-sized piece is read back once, hashed, and
 * written through the host journal (only the pieces that change). */
static int place_journaled(xfer_endpoint *ep, nccl_state *s, const xfer_bucket *bk, const unsigned char *stage,
			   const uint64_t *at, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	size_t a = bk->first, cnt = bk->count;
	if (s->dj) {
		for (size_t k = 0; k < cnt; k++) {
			s->bdst[k] = m->t[a + k].ptr;
			s->bsrc[k] = stage + at[k];
			s->bn[k] = m->t[a + k].nbytes;
		}
		double t0 = xfer_now();
		int rc = xfer_djournal_copy_tree(s->dj, s->stream, s->bdst, s->bsrc, s->bn, cnt, s->got + a, err);
		if (rc == 1) {
			rc = xfer_djournal_copy(s->dj, s->stream, s->bdst, s->bsrc, s->bn, cnt, err);
			double t1 = xfer_now();
			ep->stats.journal_seconds += t1 - t0;
			if (rc == 0) rc = xfer_gpu_tree_sums(s->gpu, s->stream, s->bsrc, s->bn, cnt, s->got + a, err);
			s->hashing += xfer_now() - t1;
		} else {
			ep->stats.journal_seconds += xfer_now() - t0; /* copy, journal and hash in one pass */
		}
		return rc;
	}
	uint64_t piece = STAGE_BYTES - STAGE_BYTES % XFER_TREE_CHUNK;
	for (size_t k = 0; k < cnt; k++) {
		const xfer_tensor *t = &m->t[a + k];
		for (uint64_t o = 0; o < t->nbytes; o += piece) {
			size_t len = t->nbytes - o < piece ? (size_t)(t->nbytes - o) : (size_t)piece;
			double t0 = xfer_now();
			if (xfer_cuda_copy(s->cu, s->hstage, XFER_MEM_HOST, stage + at[k] + o, XFER_MEM_CUDA, len, err) != 0)
				return -1;
			double t1 = xfer_now();
			xfer_tree_chunk_hashes(s->hstage, len, s->chash + o / XFER_TREE_CHUNK, xfer_tree_threads(ep->cfg.threads));
			double t2 = xfer_now();
			s->hashing += t2 - t1;
			if (xfer_journal_copy_device(s->hj, (char *)t->ptr + o, s->hstage, len, err) != 0) return -1;
			ep->stats.journal_seconds += xfer_now() - t2 + (t1 - t0);
		}
		s->got[a + k] = xfer_tree_top(s->chash, xfer_tree_nchunks(t->nbytes), t->nbytes);
	}
	return 0;
}

/* One version: header, then every bucket; the same code on every rank. */
static int run_version(xfer_endpoint *ep, uint64_t *version, int journaled, xfer_err *err)
{
	nccl_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	const xfer_cuda_api *cu = s->cu;
	int root = ep->cfg.role == XFER_SENDER;
	int verify = ep->cfg.verify_device;
	if (!s->comm) return xfer_fail(err, XFER_EPEER, "the NCCL communicator was aborted earlier; reopen the endpoint");
	xfer_sum *sums = (xfer_sum *)(s->hstage + 16);
	long long flip = -1; /* tests: the byte of the last tensor the root sends wrong */
	if (root) {
		if (xfer_cuda_check(cu, cu->DeviceSynchronize(), "cudaDeviceSynchronize", err) != 0) return -1;
		memset(s->got, 0, m->n * sizeof *s->got);
		if (verify && sums_in_place(ep, s, 0, m->n, err) != 0) return -1;
		memcpy(s->hstage, &s->digest, 8);
		memcpy(s->hstage + 8, version, 8);
		memcpy(sums, s->got, m->n * sizeof *sums);
		if (xfer_cuda_copy(cu, s->dhead, XFER_MEM_CUDA, s->hstage, XFER_MEM_HOST, s->head_bytes, err) != 0) return -1;
		if (xfer_hooks.corrupt_version == *version && m->n && m->t[m->n - 1].nbytes)
			flip = (long long)m->t[m->n - 1].nbytes - 1;
	}
	double t0 = xfer_now();
	if (bcast(ep, s, s->dhead, s->dhead, s->head_bytes, err) != 0 || watch(ep, s, 1, "header broadcast", err) != 0)
		return -1;
	if (xfer_cuda_copy(cu, s->hstage, XFER_MEM_HOST, s->dhead, XFER_MEM_CUDA, s->head_bytes, err) != 0) return -1;
	uint64_t digest, v;
	memcpy(&digest, s->hstage, 8);
	memcpy(&v, s->hstage + 8, 8);
	if (digest == s->digest_v1)
		return nfail(s, err, XFER_EFORMAT, "the root runs an older libskein (xxh3-128 sums in its NCCL header, "
			     "this rank checks tree sums): upgrade every rank", -1);
	if (digest != s->digest)
		return nfail(s, err, XFER_EMISMATCH, "the root's manifest differs from this rank's (names, dtypes or shapes)", -1);
	xfer_sum *want = malloc(m->n * sizeof *want + 1);
	uint64_t *at = malloc((m->n + 1) * sizeof *at);
	if (!want || !at) {
		free(want);
		free(at);
		return xfer_fail(err, XFER_ENOMEM, "out of memory");
	}
	memcpy(want, sums, m->n * sizeof *want);
	int rc = -1;
	double moving = xfer_now() - t0;
	unsigned char *stage = s->packed ? s->dpack : s->dstage;
	for (size_t b = 0; b < ep->nbuckets; b++) {
		const xfer_bucket *bk = &ep->buckets[b];
		double tb = xfer_now();
		int last = b + 1 == ep->nbuckets;
		unsigned char fb = 0;
		if (flip >= 0 && last) {
			unsigned char *p = (unsigned char *)m->t[m->n - 1].ptr + flip;
			if (xfer_cuda_copy(cu, &fb, XFER_MEM_HOST, p, XFER_MEM_CUDA, 1, err) != 0) goto out;
			fb ^= 0x40;
			if (xfer_cuda_copy(cu, p, XFER_MEM_CUDA, &fb, XFER_MEM_HOST, 1, err) != 0) goto out;
		}
		stage_layout(m, bk, s->packed, at);
		if (s->packed) {
			for (size_t i = bk->first; root && i < bk->first + bk->count; i++) {
				const xfer_tensor *t = &m->t[i];
				if (t->nbytes && xfer_cuda_check(cu, cu->MemcpyAsync(s->dpack + at[i - bk->first], t->ptr, t->nbytes,
										  XFER_CUDA_D2D, s->stream), "pack", err) != 0) goto out;
			}
			if (bcast(ep, s, s->dpack, s->dpack, bk->packed_bytes, err) != 0) goto out;
			for (size_t i = bk->first; !root && !journaled && i < bk->first + bk->count; i++) {
				const xfer_tensor *t = &m->t[i];
				if (t->nbytes && xfer_cuda_check(cu, cu->MemcpyAsync(t->ptr, s->dpack + at[i - bk->first], t->nbytes,
										  XFER_CUDA_D2D, s->stream), "unpack", err) != 0) goto out;
			}
		} else {
			int g = s->nc->GroupStart();
			if (g != NCCL_SUCCESS) { nfail(s, err, XFER_EIO, "ncclGroupStart", g); goto out; }
			for (size_t i = bk->first; i < bk->first + bk->count; i++) {
				const xfer_tensor *t = &m->t[i];
				void *dst = journaled ? (void *)(s->dstage + at[i - bk->first]) : t->ptr;
				if (t->nbytes && bcast(ep, s, t->ptr, dst, t->nbytes, err) != 0) goto out;
			}
			g = s->nc->GroupEnd();
			if (g != NCCL_SUCCESS && g != NCCL_IN_PROGRESS) { nfail(s, err, XFER_EIO, "ncclGroupEnd", g); goto out; }
		}
		if (watch(ep, s, 1, "bucket broadcast", err) != 0) {
			xfer_err_prefix(err, "bucket %zu", b);
			goto out;
		}
		moving += xfer_now() - tb;
		if (flip >= 0 && last) {
			unsigned char *p = (unsigned char *)m->t[m->n - 1].ptr + flip;
			fb ^= 0x40;
			if (xfer_cuda_copy(cu, p, XFER_MEM_CUDA, &fb, XFER_MEM_HOST, 1, err) != 0) goto out;
		}
		if (xfer_hooks.die_after_bucket && root && b + 1 == (size_t)xfer_hooks.die_after_bucket) _exit(3);
		if (journaled) {
			if (place_journaled(ep, s, bk, stage, at, err) != 0) goto out;
		} else if (verify && !root && sums_in_place(ep, s, bk->first, bk->first + bk->count, err) != 0) {
			goto out;
		}
		for (size_t i = bk->first; verify && !root && i < bk->first + bk->count; i++) {
			if (!xfer_sum_equal(s->got[i], want[i])) {
				xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch after the broadcast",
					  (unsigned long long)v, m->t[i].name);
				goto out;
			}
		}
	}
	*version = v;
	ep->stats.bytes_moved = m->bytes;
	ep->stats.data_seconds = moving;
	ep->stats.staging_peak = s->packed ? s->pack_bytes : journaled ? s->stage_bytes : 0;
	rc = 0;
out:
	free(want);
	free(at);
	return rc;
}

static void clear_stats(xfer_endpoint *ep, nccl_state *s)
{
	s->hashing = 0;
	ep->stats.journal_seconds = 0;
	ep->stats.journal_bytes = 0;
	ep->stats.device_journal_peak = ep->stats.device_journal_spilled = 0;
}

static int nccl_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	nccl_state *s = ep->impl;
	clear_stats(ep, s);
	int rc = run_version(ep, &v, 0, err);
	ep->stats.hash_seconds = s->hashing;
	return rc;
}

static void journal_stats(xfer_endpoint *ep, nccl_state *s)
{
	if (s->dj) {
		xfer_djournal_stats js = xfer_djournal_get_stats(s->dj);
		ep->stats.journal_bytes = js.bytes;
		ep->stats.device_journal_peak = js.device_peak;
		ep->stats.device_journal_spilled = js.spilled;
	} else if (s->hj) {
		ep->stats.journal_bytes = xfer_journal_bytes(s->hj);
	}
}

static int undo(xfer_endpoint *ep, nccl_state *s, xfer_err *err)
{
	double t0 = xfer_now();
	int rc = s->dj ? xfer_djournal_undo(s->dj, s->stream, err) : xfer_journal_undo(s->hj, err);
	ep->stats.undo_seconds = xfer_now() - t0;
	return rc;
}

/* Before the first version there is nothing to keep: the broadcast lands in
 * place.  After it, with keep_previous, the buckets land in staging and go
 * into the tensors through the journal; a failed version is undone here. */
static int nccl_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	(void)wait_ms; /* the header broadcast waits, under the watchdog */
	nccl_state *s = ep->impl;
	int journaled = (s->dj || s->hj) && ep->stats.version > 0;
	clear_stats(ep, s);
	if (s->dj) xfer_djournal_reset(s->dj);
	if (s->hj) xfer_journal_reset(s->hj);
	int rc = run_version(ep, version, journaled, err);
	ep->stats.hash_seconds = s->hashing;
	if (journaled) journal_stats(ep, s);
	if (rc == 0) {
		ep->undo_ready = journaled;
		return 0;
	}
	if (!journaled) {
		xfer_err_prefix(err, "(no undo: %s)", s->dj || s->hj ? "the first version lands in place" : "keep_previous off");
		return -1;
	}
	xfer_err ue = { 0 };
	if (undo(ep, s, &ue) != 0) xfer_err_prefix(err, "(and the undo failed: %s)", ue.msg);
	else xfer_err_prefix(err, "(the previous version was put back)");
	return -1;
}

static int nccl_rollback(xfer_endpoint *ep, xfer_err *err)
{
	nccl_state *s = ep->impl;
	if (undo(ep, s, err) != 0) {
		xfer_err_prefix(err, "%s rollback", ep->ops->name);
		return -1;
	}
	return 0;
}

#define NCCL_OPS(pathname)                                                        \
	{ .name = pathname, .probe = nccl_probe, .setup = nccl_setup, .send = nccl_send, \
	  .receive = nccl_receive, .abort = nccl_abort, .teardown = nccl_teardown, .rollback = nccl_rollback }

const xfer_path_ops xfer_bcast_ops = NCCL_OPS("broadcast");
const xfer_path_ops xfer_bcast_packed_ops = NCCL_OPS("broadcast_packed");
