/* transfer/paths/xfer_nccl.c: the broadcast and broadcast_packed data paths (NCCL,
 * loaded with dlopen).
 *
 * Miles's default mode: one NCCL group of the trainer's source rank (the
 * root, our sender) and every engine GPU (receivers).  The caller carries the
 * 128-byte unique id (xfer_nccl_unique_id on the root) to the other ranks out
 * of band.  Per version the root broadcasts a header (manifest digest,
 * version, format, bucket plan) so that all ranks agree before any weight
 * moves, then per bucket, in one ncclGroupStart/End:
 *   broadcast         one ncclBroadcast per tensor, straight into the
 *                     receivers' tensors;
 *   broadcast_packed  the root packs the bucket into one device buffer (each
 *                     tensor at an offset aligned to its element size), one
 *                     broadcast, the receivers unpack with device copies;
 * and beside the bytes a small broadcast of the bucket's sums record
 * (version, bucket index, each tensor's tree sum).
 *
 * Verification on the stream: the root hashes bucket b+1 while bucket b
 * moves (GPU kernels on a second, non-blocking stream, or CPU threads), so
 * only the first bucket's hash is not hidden behind a broadcast; each
 * receiver checks a bucket against the sums that came with it as soon as
 * it landed, before the next one is asked for.  Everything after a
 * broadcast waits for it (watch) rather than for stream order, so the
 * stand-in NCCL of the tests, whose copies run on a thread of its own,
 * behaves as NCCL does.
 * The communicator is non-blocking (config.blocking = 0): after every call we
 * poll cudaStreamQuery and ncclCommGetAsyncError, and on an error or after
 * timeout_ms without completion call ncclCommAbort and fail with a message:
 * never a hang (docs/reference.md, Weight transfer: after an error nothing enqueued can be
 * trusted, so the communicator is gone and the endpoint must be reopened).
 *
 * Checksums are tree checksums (docs/tree-checksum.md): the GPU kernels
 * where they load, else CPU threads through a pinned buffer (same bits).
 * Header formats: 1 (xxh3-128 sums in the header, unseeded digest), 2
 * (tree sums in the header, digest seeded 2), 3 (this one: sums with each
 * bucket, digest seeded 3).  The header keeps format 2's length (16 + 16
 * per tensor) so that a rank of an older libskein takes the same count and
 * is named from its digest, not left in a broadcast of another size.
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
#include "transfer/gpu/xfer_gpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "transfer/core/xfer_hash.h"

enum {
	NCCL_INT8 = 0,
	NCCL_SUCCESS = 0,
	NCCL_REMOTE_ERROR = 6,
	NCCL_IN_PROGRESS = 7,
	CUDA_NOT_READY = 600,
	POLL_US = 100,          /* watchdog poll period */
	STAGE_BYTES = 64 << 20, /* pinned host buffer for verification */
	STAGE_ALIGN = 256,      /* broadcast: each tensor's place in a staging bucket */
	HEAD_V2_SEED = 2,       /* format 2's manifest digest (tree sums in the header) */
	HEAD_SEED = 3,          /* this format's */
	HEAD_FORMAT = 3,
	HEAD_SUMS = 1,          /* header flag: the root hashed (buckets carry real sums) */
	SUMS_TAG = 16,          /* a sums record: version, bucket index, then 16 per tensor */
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
	void *hstream;                  /* root with kernels: hashing beside the broadcast */
	int packed, root;               /* root: the root's rank */
	int sender;                     /* this rank is the root */
	unsigned char *dhead, *hstage;  /* device header buffer, pinned host buffer */
	size_t head_bytes;
	unsigned char *dpack;           /* packed bucket (broadcast_packed; a journaling receiver's staging) */
	uint64_t pack_bytes;
	unsigned char *dstage;          /* broadcast: a journaling receiver's staging bucket */
	uint64_t stage_bytes;
	uint64_t digest, digest_v2, digest_v1; /* of the manifest: this format's, 2's, 1's */
	uint64_t plan;                  /* digest of the bucket plan */
	unsigned char *dsums, *hsums;   /* a bucket's sums record, device and host */
	size_t sums_cap;
	xfer_gpu *gpu;                  /* the GPU kernels, or NULL: CPU threads */
	xfer_djournal *dj;              /* receiver, keep_previous, kernels */
	xfer_journal *hj;               /* receiver, keep_previous, no kernels */
	const void **bsrc;              /* per tensor of a bucket (n entries) */
	void **bdst;
	uint64_t *bn, *chash;           /* sizes; chunk hashes of the CPU path */
	xfer_sum *got;
	double hashing;                 /* this version's hash seconds */
	int touched;                    /* receiver: a bucket was asked for this version */
} nccl_state;

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000L };
	nanosleep(&ts, NULL);
}

/* A header this rank cannot take: the communicator goes (the root's next
 * broadcast then fails too), and the reason. */
static int refuse(nccl_state *s, xfer_err *err, xfer_code code, const char *why)
{
	if (s->comm) {
		s->nc->CommAbort(s->comm);
		s->comm = NULL;
	}
	return xfer_fail(err, code, "%s; the communicator was aborted", why);
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

/* The root's hashing stream: non-blocking, so that neither it nor the
 * legacy default stream (cudaMemcpy) waits for the other. */
static int hash_stream(nccl_state *s, xfer_err *err)
{
	return xfer_cuda_stream_nonblocking(s->cu, &s->hstream, "cudaStreamCreate (hashing)", err);
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
	s->sender = c->role == XFER_SENDER;
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
	s->digest = XXH3_64bits_withSeed(desc, dlen, HEAD_SEED);
	s->digest_v2 = XXH3_64bits_withSeed(desc, dlen, HEAD_V2_SEED);
	s->digest_v1 = XXH3_64bits(desc, dlen);
	free(desc);
	size_t maxcount = 0;
	for (size_t b = 0; b < ep->nbuckets; b++) { /* the plan: each bucket chained into the digest */
		uint64_t fc[2] = { ep->buckets[b].first, ep->buckets[b].count };
		s->plan = XXH3_64bits_withSeed(fc, sizeof fc, s->plan);
		if (fc[1] > maxcount) maxcount = fc[1];
	}
	s->sums_cap = SUMS_TAG + maxcount * sizeof(xfer_sum);
	if (!(s->hsums = malloc(s->sums_cap))) return xfer_fail(err, XFER_ENOMEM, "out of memory");
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
	    xfer_cuda_check(s->cu, s->cu->Malloc((void **)&s->dsums, s->sums_cap), "cudaMalloc", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->MallocHost((void **)&s->hstage, STAGE_BYTES > s->head_bytes ? STAGE_BYTES : s->head_bytes),
			    "cudaMallocHost", err) != 0)
		return -1;
	xfer_err ge = { 0 };
	if (xfer_hooks.nccl_cpu_hash) snprintf(ep->note, sizeof ep->note, "GPU hashing off (test hook)");
	else if (!(s->gpu = xfer_gpu_new(c->nccl.device, &ge))) snprintf(ep->note, sizeof ep->note, "%s", ge.msg);
	if (s->gpu && c->role == XFER_SENDER && hash_stream(s, err) != 0) return -1;
	int journal = c->role == XFER_RECEIVER && c->keep_previous;
	if (journal && s->gpu && !(s->dj = xfer_djournal_new(s->gpu, c->device_journal_bytes, ep->m->bytes, err))) return -1;
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
	if (s->hstream) s->cu->StreamDestroy(s->hstream);
	if (s->dhead) s->cu->Free(s->dhead);
	if (s->dsums) s->cu->Free(s->dsums);
	free(s->hsums);
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

/* Tree checksums of tensors [a, b) in place: GPU kernels on the stream,
 * else CPU threads through the pinned buffer.  Into s->got[a..b). */
static int sums_in_place(xfer_endpoint *ep, nccl_state *s, void *stream, size_t a, size_t b, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	double t0 = xfer_now();
	int rc = 0;
	if (s->gpu) {
		for (size_t i = a; i < b; i++) {
			s->bsrc[i - a] = m->t[i].ptr;
			s->bn[i - a] = m->t[i].nbytes;
		}
		rc = xfer_gpu_tree_sums(s->gpu, stream, s->bsrc, s->bn, b - a, s->got + a, err);
	} else {
		for (size_t i = a; rc == 0 && i < b; i++)
			rc = xfer_tensor_tree_sum(&m->t[i], s->hstage, STAGE_BYTES, ep->cfg.threads, &s->got[i], err);
	}
	s->hashing += xfer_now() - t0;
	return rc;
}

/* The root's sums of bucket b (its hashing stream). */
static int hash_bucket(xfer_endpoint *ep, nccl_state *s, size_t b, xfer_err *err)
{
	const xfer_bucket *bk = &ep->buckets[b];
	return sums_in_place(ep, s, s->hstream ? s->hstream : s->stream, bk->first, bk->first + bk->count, err);
}

static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* The root's header in s->hstage: digest, version, then (a manifest of at
 * least one tensor leaves room) format, flags, bucket plan; zeros after. */
static void head_put(const xfer_endpoint *ep, nccl_state *s, uint64_t version, int hashed)
{
	memset(s->hstage, 0, s->head_bytes);
	put64(s->hstage, s->digest);
	put64(s->hstage + 8, version);
	if (!ep->m->n) return;
	uint32_t fmt = HEAD_FORMAT, flags = hashed ? HEAD_SUMS : 0;
	memcpy(s->hstage + 16, &fmt, 4);
	memcpy(s->hstage + 20, &flags, 4);
	put64(s->hstage + 24, s->plan);
}

/* A receiver's reading of the header in s->hstage: the version and whether
 * the buckets carry sums; an older or different root is named. */
static int head_check(xfer_endpoint *ep, nccl_state *s, uint64_t *v, int *sums, xfer_err *err)
{
	uint64_t digest = get64(s->hstage);
	*v = get64(s->hstage + 8);
	*sums = 0;
	if (digest == s->digest_v1)
		return refuse(s, err, XFER_EFORMAT, "the root runs an older libskein (NCCL header format 1: xxh3-128 sums "
			      "in its header; this rank speaks format 3, tree sums with each bucket): upgrade every rank");
	if (digest == s->digest_v2)
		return refuse(s, err, XFER_EFORMAT, "the root runs an older libskein (NCCL header format 2: every tree sum "
			      "in its header; this rank speaks format 3, tree sums with each bucket): upgrade every rank");
	if (digest != s->digest)
		return refuse(s, err, XFER_EMISMATCH, "the root's manifest differs from this rank's (names, dtypes or shapes)");
	char why[256];
	if (ep->target && *v != ep->target) { /* before a byte of it lands */
		snprintf(why, sizeof why, "the root sends version %llu, this rank was told to receive %llu",
			 (unsigned long long)*v, (unsigned long long)ep->target);
		return refuse(s, err, XFER_EINVAL, why);
	}
	if (!ep->m->n) return 0;
	uint32_t fmt, flags;
	memcpy(&fmt, s->hstage + 16, 4);
	memcpy(&flags, s->hstage + 20, 4);
	if (fmt != HEAD_FORMAT) {
		snprintf(why, sizeof why, "the root's NCCL header is format %u, this rank speaks %d: upgrade every rank", fmt,
			 HEAD_FORMAT);
		return refuse(s, err, XFER_EFORMAT, why);
	}
	if (get64(s->hstage + 24) != s->plan) {
		snprintf(why, sizeof why, "the root cuts the manifest into other buckets than this rank (bucket_bytes %llu "
			 "here): every rank needs the same bucket_bytes", (unsigned long long)ep->cfg.bucket_bytes);
		return refuse(s, err, XFER_EINVAL, why);
	}
	*sums = (flags & HEAD_SUMS) != 0;
	if (ep->cfg.verify_device && !*sums)
		return refuse(s, err, XFER_EINVAL, "the root sends no checksums (verify_device off there) and this rank "
			      "checks them (verify_device on): set the same on every rank");
	return 0;
}

/* Enqueues bucket b: its bytes and its sums record, in one group.  The
 * root packs first (broadcast_packed) and fills the record from s->got. */
static int bucket_enqueue(xfer_endpoint *ep, nccl_state *s, size_t b, uint64_t v, int journaled, const uint64_t *at,
			  xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	const xfer_bucket *bk = &ep->buckets[b];
	const xfer_cuda_api *cu = s->cu;
	size_t rec = SUMS_TAG + bk->count * sizeof(xfer_sum);
	if (s->sender) {
		put64(s->hsums, v);
		put64(s->hsums + 8, b);
		memcpy(s->hsums + SUMS_TAG, s->got + bk->first, bk->count * sizeof(xfer_sum));
		if (xfer_cuda_copy(cu, s->dsums, XFER_MEM_CUDA, s->hsums, XFER_MEM_HOST, rec, err) != 0) return -1;
	}
	if (s->packed && s->sender) {
		for (size_t i = bk->first; i < bk->first + bk->count; i++) {
			const xfer_tensor *t = &m->t[i];
			if (t->nbytes && xfer_cuda_check(cu, cu->MemcpyAsync(s->dpack + at[i - bk->first], t->ptr, t->nbytes,
									  XFER_CUDA_D2D, s->stream), "pack", err) != 0)
				return -1;
		}
	}
	int g = s->nc->GroupStart();
	if (g != NCCL_SUCCESS) return nfail(s, err, XFER_EIO, "ncclGroupStart", g);
	if (s->packed) {
		if (bcast(ep, s, s->dpack, s->dpack, bk->packed_bytes, err) != 0) return -1;
	} else {
		for (size_t i = bk->first; i < bk->first + bk->count; i++) {
			const xfer_tensor *t = &m->t[i];
			void *dst = journaled ? (void *)(s->dstage + at[i - bk->first]) : t->ptr;
			if (t->nbytes && bcast(ep, s, t->ptr, dst, t->nbytes, err) != 0) return -1;
		}
	}
	if (bcast(ep, s, s->dsums, s->dsums, rec, err) != 0) return -1;
	g = s->nc->GroupEnd();
	if (g != NCCL_SUCCESS && g != NCCL_IN_PROGRESS) return nfail(s, err, XFER_EIO, "ncclGroupEnd", g);
	return 0;
}

/* A journaling receiver: the bucket that landed in staging (its tensors at
 * at[]) goes into the tensors through the undo journal, with the tree sums
 * of what was copied into s->got.  GPU: the journal copy, then the hash of
 * the staging (two kernels: on the H200 the one-pass skein_copy_tree was
 * the slower for colocated 8 GiB and twice as slow for p2p-tcp's chunks;
 * xfer_hooks.gpu_fused picks it, to compare); CPU: each stage-sized piece
 * is read back once, hashed, and written through the host journal (only
 * the pieces that change). */
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
		int rc = xfer_hooks.gpu_fused ? xfer_djournal_copy_tree(s->dj, s->stream, s->bdst, s->bsrc, s->bn, cnt,
									 s->got + a, err)
					      : 1;
		if (rc == 1) { /* not fused, or a tensor unaligned with its staging */
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

/* A receiver, bucket b landed (in the tensors, the packed buffer or the
 * staging bucket): unpacks or places it through the journal, and checks
 * every tensor against the sums that came with it. */
static int bucket_land(xfer_endpoint *ep, nccl_state *s, size_t b, uint64_t v, int journaled, int check,
		       const uint64_t *at, double *moving, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	const xfer_bucket *bk = &ep->buckets[b];
	const xfer_cuda_api *cu = s->cu;
	size_t rec = SUMS_TAG + bk->count * sizeof(xfer_sum);
	double t0 = xfer_now();
	if (xfer_cuda_copy(cu, s->hsums, XFER_MEM_HOST, s->dsums, XFER_MEM_CUDA, rec, err) != 0) return -1;
	if (get64(s->hsums) != v || get64(s->hsums + 8) != b)
		return refuse(s, err, XFER_EPEER, "a bucket's checksums came out of step with the root (a rank of another build?)");
	if (s->packed && !journaled) {
		for (size_t i = bk->first; i < bk->first + bk->count; i++) {
			const xfer_tensor *t = &m->t[i];
			if (t->nbytes && xfer_cuda_check(cu, cu->MemcpyAsync(t->ptr, s->dpack + at[i - bk->first], t->nbytes,
									  XFER_CUDA_D2D, s->stream), "unpack", err) != 0)
				return -1;
		}
		if (xfer_cuda_check(cu, cu->StreamSynchronize(s->stream), "unpack", err) != 0) return -1;
	}
	*moving += xfer_now() - t0;
	if (journaled) {
		if (place_journaled(ep, s, bk, s->packed ? s->dpack : s->dstage, at, err) != 0) return -1;
	} else if (check && sums_in_place(ep, s, s->stream, bk->first, bk->first + bk->count, err) != 0) {
		return -1;
	}
	for (size_t i = bk->first; check && i < bk->first + bk->count; i++) {
		xfer_sum want;
		memcpy(&want, s->hsums + SUMS_TAG + (i - bk->first) * sizeof want, sizeof want);
		if (!xfer_sum_equal(s->got[i], want))
			return xfer_fail(err, XFER_ECHECKSUM, "version %llu bucket %zu of %zu, tensor %s: checksum mismatch "
					 "after the broadcast", (unsigned long long)v, b, ep->nbuckets, m->t[i].name);
	}
	return 0;
}

/* Flips one byte of the last tensor (tests: the root sends it wrong after
 * hashing it), and back. */
static int flip_last(const xfer_endpoint *ep, nccl_state *s, long long at, xfer_err *err)
{
	unsigned char *p = (unsigned char *)ep->m->t[ep->m->n - 1].ptr + at, x = 0;
	if (xfer_cuda_copy(s->cu, &x, XFER_MEM_HOST, p, XFER_MEM_CUDA, 1, err) != 0) return -1;
	x ^= 0x40;
	return xfer_cuda_copy(s->cu, p, XFER_MEM_CUDA, &x, XFER_MEM_HOST, 1, err);
}

/* One version: header, then every bucket; the same code on every rank.
 * The root hashes bucket 0 while the header moves and bucket b+1 while
 * bucket b moves (xfer_hooks.nccl_hash_first: everything before the
 * header, the old order).  Seconds: hashing counts as hash, the rest of a
 * broadcast's wall time (issuing it, waiting for it after the hash) as
 * data, so that data + hash + journal never count a second twice. */
static int run_version(xfer_endpoint *ep, uint64_t *version, int journaled, xfer_err *err)
{
	nccl_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	const xfer_cuda_api *cu = s->cu;
	int root = s->sender;
	int verify = ep->cfg.verify_device;
	int overlap = root && verify && !xfer_hooks.nccl_hash_first;
	if (!s->comm) return xfer_fail(err, XFER_EPEER, "the NCCL communicator was aborted earlier; reopen the endpoint");
	long long flip = -1; /* tests: the byte of the last tensor the root sends wrong */
	if (root) {
		if (xfer_cuda_check(cu, cu->DeviceSynchronize(), "cudaDeviceSynchronize", err) != 0) return -1;
		memset(s->got, 0, m->n * sizeof *s->got);
		if (verify && !overlap && sums_in_place(ep, s, s->stream, 0, m->n, err) != 0) return -1;
		head_put(ep, s, *version, verify);
		if (xfer_cuda_copy(cu, s->dhead, XFER_MEM_CUDA, s->hstage, XFER_MEM_HOST, s->head_bytes, err) != 0) return -1;
		if (xfer_hooks.corrupt_version == *version && m->n && m->t[m->n - 1].nbytes)
			flip = (long long)m->t[m->n - 1].nbytes - 1;
	}
	double t0 = xfer_now(), hb = s->hashing;
	if (bcast(ep, s, s->dhead, s->dhead, s->head_bytes, err) != 0) return -1;
	if (overlap && ep->nbuckets && hash_bucket(ep, s, 0, err) != 0) return -1;
	if (watch(ep, s, 1, "header broadcast", err) != 0) return -1;
	double moving = xfer_now() - t0 - (s->hashing - hb);
	uint64_t v = *version;
	int check = 0;
	if (!root) {
		if (xfer_cuda_copy(cu, s->hstage, XFER_MEM_HOST, s->dhead, XFER_MEM_CUDA, s->head_bytes, err) != 0) return -1;
		if (head_check(ep, s, &v, &check, err) != 0) return -1;
		check = check && verify;
	}
	uint64_t *at = malloc((m->n + 1) * sizeof *at);
	if (!at) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	int rc = -1;
	size_t b;
	for (b = 0; b < ep->nbuckets; b++) {
		int last = b + 1 == ep->nbuckets;
		stage_layout(m, &ep->buckets[b], s->packed, at);
		if (flip >= 0 && last && flip_last(ep, s, flip, err) != 0) goto out;
		double tb = xfer_now();
		hb = s->hashing;
		s->touched = 1;
		if (bucket_enqueue(ep, s, b, v, journaled, at, err) != 0 ||
		    (overlap && !last && hash_bucket(ep, s, b + 1, err) != 0))
			goto bucket_failed;
		size_t die = root ? (size_t)xfer_hooks.die_after_bucket : 0; /* tests */
		if (die && b == die) _exit(3); /* while bucket b moves */
		if (watch(ep, s, 1, "bucket broadcast", err) != 0) goto bucket_failed;
		if (die && last && b + 1 == die) _exit(3);
		moving += xfer_now() - tb - (s->hashing - hb);
		if (flip >= 0 && last && flip_last(ep, s, flip, err) != 0) goto out;
		if (!root && bucket_land(ep, s, b, v, journaled, check, at, &moving, err) != 0) goto out;
	}
	/* the root (xfer_root.c) of the sums hashed here (root) or checked
	 * against the buckets' records (a rank): the head holds them together */
	if ((root ? verify : check) && xfer_root_keep(ep, v, XFER_SUM_TREE, s->got, err) != 0) goto out;
	*version = v;
	ep->stats.bytes_moved = m->bytes;
	ep->stats.data_seconds = moving;
	ep->stats.staging_peak = s->packed ? s->pack_bytes : journaled ? s->stage_bytes : 0;
	rc = 0;
	goto out;
bucket_failed:
	xfer_err_prefix(err, "bucket %zu of %zu", b, ep->nbuckets);
out:
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
	s->touched = 0;
	if (s->dj) xfer_djournal_reset(s->dj);
	if (s->hj) xfer_journal_reset(s->hj);
	int rc = run_version(ep, version, journaled, err);
	ep->stats.hash_seconds = s->hashing;
	if (journaled) journal_stats(ep, s);
	if (rc == 0) {
		ep->undo_ready = journaled;
		return 0;
	}
	if (!s->touched) {
		xfer_err_prefix(err, "(the tensors were not touched)");
		return -1;
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

/* A coordinated sender's begin: a fresh unique id for a new communicator. */
static int nccl_begin_setup(xfer_endpoint *ep, uint64_t v, unsigned char **blob, size_t *len, xfer_err *err)
{
	if (!(*blob = malloc(XFER_NCCL_ID_BYTES))) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	if (xfer_nccl_unique_id(*blob, err) != 0) {
		free(*blob);
		*blob = NULL;
		return -1;
	}
	*len = XFER_NCCL_ID_BYTES;
	return 0;
}

#define NCCL_OPS(pathname)                                                                           \
	{ .name = pathname, .probe = nccl_probe, .setup = nccl_setup, .send = nccl_send,                    \
	  .receive = nccl_receive, .abort = nccl_abort, .teardown = nccl_teardown, .rollback = nccl_rollback, \
	  .fan = XFER_FAN_BCAST, .begin_setup = nccl_begin_setup }

const xfer_path_ops xfer_bcast_ops = NCCL_OPS("broadcast");
const xfer_path_ops xfer_bcast_packed_ops = NCCL_OPS("broadcast_packed");
