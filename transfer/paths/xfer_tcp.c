/* transfer/paths/xfer_tcp.c: the p2p-tcp data path.
 *
 * Like Mooncake's p2p in Miles, the receiver registers its buffers once and
 * the sender writes into them; over TCP "writes into them" means one control
 * stream plus S data streams, each carrying a contiguous stripe of every
 * chunk with one header and one large sendmsg straight from the sender's
 * tensors (no per-tensor round trip, no copy on the sender for host memory).
 *
 *   control  sender: hello ("SKXFER4": wire 4, its ticket: xfer_gate.c)
 *            + manifest text; receiver:
 *            status (manifest check)
 *            per version: sender: header; per chunk k, once it has hashed
 *            it: the tree chunk hashes chunk k holds and the tree sums of
 *            the tensors that end in it (xfer_tcp_hrec); receiver, at the
 *            end: status (OK, or its error message)
 *   data i   per chunk: a stripe header, then the stripe's bytes
 *
 * Checksums are tree checksums (docs/tree-checksum.md: XXH3-64 per 256 KiB
 * of a tensor, XXH3-128 over those).  Chunks are cut at tree-chunk
 * boundaries inside tensors (xfer_chunks_cut with tree cuts), rather than
 * carrying a hash state across chunks: every tree chunk then lies in one
 * p2p chunk, so either side hashes a chunk from one buffer with many CPU
 * threads or GPU blocks at once and compares it the moment the chunk is
 * committed, with no state to hand from chunk to chunk or from thread to
 * thread (a wire 3 receiver plans the same cuts; older receivers do not
 * speak wire 3 anyway).  The cost: chunks up to 256 KiB shorter than half
 * a bucket, and at least 512 KiB (the staging slots grow to that for tiny
 * buckets).
 *
 * Sender: the streams send chunk k while the calling thread hashes chunk
 * k+1 (host tensors: CPU threads over the tensors; CUDA tensors: the GPU
 * kernels over the device bytes when they load, xfer_gpu_new, else CPU
 * threads over the pinned slot the chunk was staged into) and sends its
 * record.  Receiver: when every stream has landed chunk k, the calling
 * thread hashes what arrived, reads the sender's record for chunk k and
 * compares: a corrupt byte fails the version at its chunk, and what was
 * placed so far is undone.
 *
 * Buckets follow the manifest (xfer_buckets) and travel in chunks of about
 * half a bucket (a tensor larger than a bucket is cut the same way), so the
 * two staging slots together hold one bucket.  The receiver has two modes:
 *   keep_previous (default): stripes land in one of the two staging slots
 *     (chunk k+1 arrives while chunk k is hashed); each stream copies its
 *     stripe of host tensors into place, journaling the bytes it
 *     overwrites (once the receiver holds a version), so a failure puts the
 *     previous version back; the journals' memory is held to half a bucket
 *     in all (xfer_journal.c; beyond it they spill to a temporary file).
 *   direct (keep_previous = 0): stripes are received straight into the
 *     registered buffers with recvmsg over the tensors' iovecs; zero copies,
 *     zero extra memory, but a failure leaves the buffers partly updated.
 * CUDA memory on either side is staged through pinned host buffers.  A CUDA
 * receiver with the GPU kernels has each stream copy its stripe from the
 * slot to a device staging buffer (one per slot) as it lands; the calling
 * thread then places the chunk into the tensors through the device journal
 * and hashes it on the GPU (commit_device; xfer_djournal_copy: old
 * words kept on the device up to cfg.device_journal_bytes, then in pinned
 * host memory), so undo and xfer_rollback run on the device; the first
 * version (nothing to keep) is placed by the streams and hashed on the GPU
 * in place.  Without the kernels the streams place CUDA stripes through the
 * host journal (xfer_journal_copy_device reads the old bytes back) and the
 * chunk is hashed on CPU threads from the pinned slot.
 *
 * Stats: data_seconds the slowest stream's time on its socket (and, into a
 * device-journaling receiver, its copies to the device staging),
 * hash_seconds the calling thread's hashing, journal_seconds the journaling
 * (the slowest stream's host journal, plus the device journal copy; the
 * whole one-pass kernel where xfer_hooks.gpu_fused picks it). */
#include "transfer/core/xfer_sock.h"
#include "transfer/gpu/xfer_gpu.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
	MAX_STREAMS = XFER_TCP_MAX_STREAMS,
	KIND_CONTROL = XFER_TCP_CONTROL,
	KIND_DATA = XFER_TCP_DATA,
	TREE = XFER_TREE_CHUNK,
};

/* 4: the hello's ticket; 3: tree checksums per chunk; 2: one xxh3-128 per tensor */
static const char HELLO_MAGIC[8] = "SKXFER4";
static const char HELLO_MAGIC_V2[8] = "SKXFER2";
static const char HELLO_MAGIC_V3[8] = "SKXFER3";
static const char OLD_RECEIVER_HINT[] = "no answer to the hello: a receiver of an older libskein "
					"(p2p-tcp wire 2 or 3) drops a wire 4 sender so; upgrade it";

/* The wire structs (xfer_int.h), in host order: both ends are one build. */
typedef xfer_tcp_hello hello;
typedef xfer_tcp_hrec hrec;
typedef xfer_tcp_shead shead;

_Static_assert(sizeof(hello) == XFER_TCP_HELLO_BYTES, "hello is 88 bytes on the wire");
_Static_assert(sizeof(shead) == 40, "shead is 40 bytes on the wire");
_Static_assert(sizeof(hrec) == 24, "a hash record header is 24 bytes on the wire");

/* A tensor's bytes [a, b) of the byte space inside one chunk. */
typedef struct {
	size_t t;
	uint64_t a, b;
} piece;

typedef struct {
	int lfd, lfd_shared, ctl, nstreams, connected;
	int data[MAX_STREAMS];
	uint64_t session, bucket_bytes;
	xfer_span *chunks;
	size_t nchunks;
	unsigned char *slot[2];
	uint64_t slot_bytes;
	int slot_pinned, any_cuda, direct;
	xfer_journal *j[MAX_STREAMS]; /* receiver: one per stream (stripes are disjoint) */
	/* the session's tree plan (plan_tree) */
	uint64_t *tfirst;      /* per tensor: its first tree chunk among all (n+1) */
	uint64_t *hfirst;      /* per chunk: its first tree chunk (nchunks+1) */
	size_t *tend;          /* per chunk: tensors whose sums went with chunks before it (nchunks+1) */
	uint64_t *hash;        /* this side's tree chunk hashes (tfirst[n]) */
	uint64_t *peer;        /* receiver: the sender's */
	xfer_sum *sums;        /* sender: its tree sums; receiver: the sender's */
	piece *pc;             /* scratch: the pieces of one chunk */
	size_t max_pieces;
	const void **gsrc;     /* scratch: one chunk's pieces for the GPU */
	void **gdst;
	uint64_t *gn, *gout, **gto;
	uint64_t max_hashes;   /* tree chunks in one chunk, at most */
	/* CUDA tensors with the GPU kernels */
	xfer_gpu *gpu;
	void *stream;
	xfer_djournal *dj;     /* receiver, keep_previous */
	unsigned char *dstage[2]; /* receiver, keep_previous: chunk k on the device, one per slot */
	void *wstream[MAX_STREAMS]; /* the data streams' copies to dstage, one CUDA stream each,
				       non-blocking: apart from the legacy default stream */
	uint64_t dstage_bytes;    /* each */
	/* per version */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t slot_gen[2];  /* the chunk that may use slot k%2 now */
	int *done;             /* per chunk: streams finished with it */
	int failed, dev_journaled;
	xfer_err ferr;
	uint64_t version;
	double hashing, journaling, stream_s[MAX_STREAMS];
	xfer_endpoint *ep;
} tcp_state;

typedef struct {
	tcp_state *s;
	int idx;
} worker;

static int tcp_probe(char *why, size_t n)
{
	(void)why;
	(void)n;
	return 0;
}

/* ---- chunks and the tree plan ---- */

static void stripe_of(const tcp_state *s, size_t k, int i, uint64_t *a, uint64_t *b)
{
	xfer_stripe_of(s->chunks[k], s->nstreams, i, a, b);
}

/* The non-empty tensor pieces of chunk k, in order, into s->pc. */
static size_t pieces_of(const xfer_endpoint *ep, const tcp_state *s, size_t k)
{
	uint64_t a = s->chunks[k].off, b = a + s->chunks[k].len;
	size_t np = 0;
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && ep->offsets[t] < b; t++) {
		uint64_t lo = ep->offsets[t] > a ? ep->offsets[t] : a, hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		if (hi > lo) s->pc[np++] = (piece){ t, lo, hi };
	}
	return np;
}

static void free_plan(tcp_state *s)
{
	free(s->tfirst);
	free(s->hfirst);
	free(s->tend);
	free(s->hash);
	free(s->peer);
	free(s->pc);
	free(s->gsrc);
	free(s->gdst);
	free(s->gn);
	free(s->gout);
	free(s->gto);
}

/* Where chunk k's tree chunks and tensor sums lie among all, and the
 * buffers that follow from the chunks (both ends compute the same). */
static int plan_tree(xfer_endpoint *ep, tcp_state *s, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	size_t n = m->n, nc = s->nchunks;
	free_plan(s);
	s->tfirst = calloc(n + 1, sizeof *s->tfirst);
	s->hfirst = calloc(nc + 1, sizeof *s->hfirst);
	s->tend = calloc(nc + 1, sizeof *s->tend);
	if (!s->tfirst || !s->hfirst || !s->tend) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	for (size_t t = 0; t < n; t++) s->tfirst[t + 1] = s->tfirst[t] + xfer_tree_nchunks(m->t[t].nbytes);
	uint64_t total = s->tfirst[n];
	s->max_pieces = 1;
	s->max_hashes = 1;
	size_t t = 0;
	for (size_t k = 0; k < nc; k++) {
		uint64_t a = s->chunks[k].off, b = a + s->chunks[k].len;
		size_t h = xfer_tensor_at(ep, a);
		/* chunks start on a tree boundary of their first tensor */
		s->hfirst[k] = h < n ? s->tfirst[h] + (a - ep->offsets[h] + TREE - 1) / TREE : total;
		while (t < n && ep->offsets[t + 1] <= b) t++;
		s->tend[k + 1] = k + 1 == nc ? n : t;
		size_t np = 0;
		for (size_t u = h; u < n && ep->offsets[u] < b; u++) np++;
		if (np > s->max_pieces) s->max_pieces = np;
	}
	s->hfirst[nc] = total;
	for (size_t k = 0; k < nc; k++)
		if (s->hfirst[k + 1] - s->hfirst[k] > s->max_hashes) s->max_hashes = s->hfirst[k + 1] - s->hfirst[k];
	s->hash = calloc(total + 1, sizeof *s->hash);
	s->peer = calloc(total + 1, sizeof *s->peer);
	s->pc = calloc(s->max_pieces, sizeof *s->pc);
	s->gsrc = calloc(s->max_pieces, sizeof *s->gsrc);
	s->gdst = calloc(s->max_pieces, sizeof *s->gdst);
	s->gn = calloc(s->max_pieces, sizeof *s->gn);
	s->gto = calloc(s->max_pieces, sizeof *s->gto);
	s->gout = calloc(s->max_hashes, sizeof *s->gout);
	if (!s->hash || !s->peer || !s->pc || !s->gsrc || !s->gdst || !s->gn || !s->gto || !s->gout)
		return xfer_fail(err, XFER_ENOMEM, "out of memory");
	return 0;
}

static int make_chunks(xfer_endpoint *ep, tcp_state *s, uint64_t bucket_bytes, xfer_err *err)
{
	free(s->chunks);
	if (xfer_chunks_cut(ep->m, ep->offsets, bucket_bytes, 1, &s->chunks, &s->nchunks, err) != 0) return -1;
	s->bucket_bytes = bucket_bytes;
	return plan_tree(ep, s, err);
}

/* The GPU's share of a chunk: the pieces gathered in s->gsrc/gn (and
 * gdst), their hashes in s->gout, scattered to s->gto[i] afterwards. */
static void gpu_scatter(tcp_state *s, size_t ng)
{
	const uint64_t *h = s->gout;
	for (size_t i = 0; i < ng; i++) {
		uint64_t c = xfer_tree_nchunks(s->gn[i]);
		memcpy(s->gto[i], h, c * sizeof *h);
		h += c;
	}
}

/* The tree hashes of a piece's bytes at p (host memory) into s->hash. */
static void cpu_hash(const xfer_endpoint *ep, tcp_state *s, const piece *p, const void *src)
{
	uint64_t *out = s->hash + s->tfirst[p->t] + (p->a - ep->offsets[p->t]) / TREE;
	xfer_tree_chunk_hashes(src, p->b - p->a, out, xfer_tree_threads(ep->cfg.threads));
}

static uint64_t *hash_of(const xfer_endpoint *ep, const tcp_state *s, const piece *p)
{
	return s->hash + s->tfirst[p->t] + (p->a - ep->offsets[p->t]) / TREE;
}

/* ---- what a receiver checks, pure (tests/fuzz/fuzz_p2p.c feeds them) ---- */

int xfer_tcp_hello_is_v2(const void *buf, size_t n)
{
	return n >= 8 && memcmp(buf, HELLO_MAGIC_V2, 8) == 0;
}

int xfer_tcp_hello_parse(const void *buf, size_t n, xfer_tcp_hello *h, xfer_err *err)
{
	if (n != sizeof *h) return xfer_fail(err, XFER_EFORMAT, "a hello of %zu bytes", n);
	memcpy(h, buf, sizeof *h);
	if (xfer_tcp_hello_is_v2(buf, n))
		return xfer_fail(err, XFER_EFORMAT, "the sender speaks p2p-tcp wire 2 (an older libskein: one "
				 "xxh3-128 per tensor after the data); this receiver speaks wire 4 (tree checksums "
				 "checked chunk by chunk, a ticket in the hello): upgrade the sender's libskein");
	if (memcmp(buf, HELLO_MAGIC_V3, 8) == 0)
		return xfer_fail(err, XFER_EFORMAT, "the sender speaks p2p-tcp wire 3 (an older libskein: no ticket in "
				 "its hello); this receiver speaks wire 4: upgrade the sender's libskein");
	if (memcmp(h->magic, HELLO_MAGIC, 8) != 0 || (h->kind != KIND_CONTROL && h->kind != KIND_DATA))
		return xfer_fail(err, XFER_EFORMAT, "not a skein p2p sender's hello");
	if (h->kind == KIND_CONTROL && (h->nstreams < 1 || h->nstreams > MAX_STREAMS ||
					 h->manifest_len > XFER_P2P_MANIFEST_MAX || h->bucket_bytes == 0))
		return xfer_fail(err, XFER_EFORMAT, "a control hello with %u streams, %llu manifest bytes, buckets of %llu",
				 h->nstreams, (unsigned long long)h->manifest_len, (unsigned long long)h->bucket_bytes);
	return 0;
}

xfer_gate_verdict xfer_tcp_judge(const xfer_endpoint *ep, int want_data, uint64_t session, uint32_t nstreams,
				 const unsigned char *buf, size_t n, size_t *need, char *why, size_t whyn)
{
	hello h;
	xfer_err e;
	if (n < 8) {
		*need = 8;
		return XFER_GATE_MORE;
	}
	if (memcmp(buf, HELLO_MAGIC_V2, 8) != 0 && memcmp(buf, HELLO_MAGIC_V3, 8) != 0 && memcmp(buf, HELLO_MAGIC, 8) != 0) {
		snprintf(why, whyn, "not a skein p2p sender's hello");
		return XFER_GATE_REFUSE;
	}
	if (n < sizeof h && memcmp(buf, HELLO_MAGIC, 8) == 0) {
		*need = sizeof h;
		return XFER_GATE_MORE;
	}
	unsigned char full[sizeof h] = { 0 }; /* older wires: named by the magic alone */
	memcpy(full, buf, n < sizeof full ? n : sizeof full);
	if (xfer_tcp_hello_parse(full, sizeof full, &h, &e) != 0) {
		snprintf(why, whyn, "%s", e.msg);
		return XFER_GATE_REFUSE;
	}
	if (xfer_ticket_check(ep, &h.ticket, why, whyn) != 0) return XFER_GATE_REFUSE;
	if (h.kind == KIND_CONTROL) return want_data ? XFER_GATE_KEEP : XFER_GATE_TAKE;
	if (!want_data) return XFER_GATE_KEEP; /* the chooser's: for the session about to start */
	if (h.session != session || h.stream >= nstreams) {
		snprintf(why, whyn, "a data stream of another session");
		return XFER_GATE_REFUSE;
	}
	return XFER_GATE_TAKE;
}

typedef struct {
	const xfer_endpoint *ep;
	int want_data;
	uint64_t session;
	uint32_t nstreams;
} tcp_judge_ctx;

static xfer_gate_verdict tcp_judge(void *ctx, const unsigned char *buf, size_t n, size_t *need, char *why, size_t whyn)
{
	const tcp_judge_ctx *j = ctx;
	return xfer_tcp_judge(j->ep, j->want_data, j->session, j->nstreams, buf, n, need, why, whyn);
}

void xfer_tcp_hello_pack(const xfer_tcp_hello *h, unsigned char out[XFER_TCP_HELLO_BYTES])
{
	hello t = *h;
	memcpy(t.magic, HELLO_MAGIC, 8);
	memcpy(out, &t, sizeof t);
}

int xfer_tcp_shead_parse(const void *buf, size_t n, const xfer_tcp_shead *want, xfer_err *err)
{
	shead h;
	if (n != sizeof h) return xfer_fail(err, XFER_EFORMAT, "a stripe header of %zu bytes", n);
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, "SKS1", 4) != 0 || h.version != want->version || h.chunk != want->chunk ||
	    h.off != want->off || h.len != want->len || h.stream != want->stream)
		return xfer_fail(err, XFER_EFORMAT, "unexpected stripe header (version %llu bucket %llu offset %llu)",
				 (unsigned long long)h.version, (unsigned long long)h.chunk, (unsigned long long)h.off);
	return 0;
}

int xfer_tcp_hrec_parse(const void *buf, size_t n, const xfer_tcp_hrec *want, xfer_err *err)
{
	hrec h;
	if (n != sizeof h) return xfer_fail(err, XFER_EFORMAT, "a hash record header of %zu bytes", n);
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, "SKH1", 4) != 0 || h.chunk != want->chunk || h.nhash != want->nhash ||
	    h.ntops != want->ntops)
		return xfer_fail(err, XFER_EFORMAT, "unexpected hash record (chunk %llu: %llu hashes, %u sums; "
				 "chunk %llu has %llu and %u)", (unsigned long long)h.chunk,
				 (unsigned long long)h.nhash, h.ntops, (unsigned long long)want->chunk,
				 (unsigned long long)want->nhash, want->ntops);
	return 0;
}

/* ---- session ---- */

static void close_session(tcp_state *s)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	for (int i = 0; i < MAX_STREAMS; i++) {
		if (s->data[i] >= 0) close(s->data[i]);
		s->data[i] = -1;
	}
	s->connected = 0;
}

static void shutdown_all(tcp_state *s)
{
	if (s->ctl >= 0) shutdown(s->ctl, SHUT_RDWR);
	for (int i = 0; i < MAX_STREAMS; i++)
		if (s->data[i] >= 0) shutdown(s->data[i], SHUT_RDWR);
}

/* Between versions nothing may arrive on the control stream: readable
 * means the sender closed it (or broke the protocol): its session is over. */
static int sender_gone(const tcp_state *s)
{
	struct pollfd q = { .fd = s->ctl, .events = POLLIN };
	unsigned char b;
	return poll(&q, 1, 0) == 1 && recv(s->ctl, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void fail_version(tcp_state *s, const xfer_err *e)
{
	pthread_mutex_lock(&s->mu);
	if (!s->failed) {
		s->failed = 1;
		s->ferr = *e;
		for (int i = 0; i < MAX_STREAMS; i++)
			if (s->data[i] >= 0) shutdown(s->data[i], SHUT_RDWR);
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* The two staging slots (the longest chunk each; pinned for CUDA) and,
 * for a CUDA receiver that journals on the device, the device staging. */
static int alloc_slots(tcp_state *s, int dstage, xfer_err *err)
{
	uint64_t want = 0;
	for (size_t k = 0; k < s->nchunks; k++)
		if (s->chunks[k].len > want) want = s->chunks[k].len;
	const xfer_cuda_api *cu = s->any_cuda ? xfer_cuda(NULL, 0) : NULL;
	if (dstage && s->dstage_bytes < want + 8) {
		for (int i = 0; i < 2; i++) {
			if (s->dstage[i]) cu->Free(s->dstage[i]);
			s->dstage[i] = NULL;
		}
		s->dstage_bytes = 0;
		for (int i = 0; i < 2; i++)
			if (xfer_cuda_check(cu, cu->Malloc((void **)&s->dstage[i], want + 8), "cudaMalloc (device staging)",
					    err) != 0)
				return -1;
		s->dstage_bytes = want + 8; /* + the shift that aligns it with the tensors (dev_span) */
	}
	for (int i = 0; dstage && i < s->nstreams; i++)
		if (!s->wstream[i] && xfer_cuda_stream_nonblocking(cu, &s->wstream[i], "cudaStreamCreate (staging)", err) != 0)
			return -1;
	if (s->slot[0] && s->slot_bytes >= want) return 0;
	for (int i = 0; i < 2; i++) {
		if (s->slot[i]) {
			if (s->slot_pinned) cu->FreeHost(s->slot[i]);
			else free(s->slot[i]);
			s->slot[i] = NULL;
		}
	}
	s->slot_pinned = 0;
	if (s->any_cuda) {
		for (int i = 0; i < 2; i++)
			if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->slot[i], want ? want : 1), "cudaMallocHost", err) != 0)
				return -1;
		s->slot_pinned = 1;
	} else {
		for (int i = 0; i < 2; i++)
			if (!(s->slot[i] = malloc(want ? want : 1)))
				return xfer_fail(err, XFER_ENOMEM, "no memory for a %llu-byte staging bucket",
						 (unsigned long long)want);
	}
	s->slot_bytes = want;
	return 0;
}

/* The GPU kernels on the device of the CUDA tensors (one device), or a
 * note saying why the CPU hashes them. */
static void setup_gpu(xfer_endpoint *ep, tcp_state *s)
{
	const xfer_manifest *m = ep->m;
	int dev = -1;
	for (size_t i = 0; i < m->n; i++) {
		if (m->t[i].mem != XFER_MEM_CUDA) continue;
		if (dev >= 0 && m->t[i].device != dev) {
			snprintf(ep->note, sizeof ep->note, "p2p-tcp: CUDA tensors on several devices: hashed on CPU threads");
			return;
		}
		dev = m->t[i].device;
	}
	xfer_err ge = { 0 };
	if (!(s->gpu = xfer_gpu_new(dev, &ge))) {
		snprintf(ep->note, sizeof ep->note, "p2p-tcp: %s; CPU threads hash", ge.msg);
		return;
	}
	const xfer_cuda_api *cu = s->gpu->cu;
	if (cu->StreamCreate(&s->stream) != 0) {
		snprintf(ep->note, sizeof ep->note, "p2p-tcp: cudaStreamCreate failed; CPU threads hash");
		xfer_gpu_free(&s->gpu);
		s->stream = NULL;
	}
}

static int tcp_setup(xfer_endpoint *ep, xfer_err *err)
{
	tcp_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->ep = ep;
	s->lfd = s->ctl = -1;
	for (int i = 0; i < MAX_STREAMS; i++) s->data[i] = -1;
	s->nstreams = ep->cfg.p2p.streams;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem == XFER_MEM_CUDA) s->any_cuda = 1;
	if (s->any_cuda) {
		char why[256];
		if (!xfer_cuda(why, sizeof why))
			return xfer_fail(err, XFER_EUNAVAIL, "the manifest has CUDA tensors but %s", why);
		setup_gpu(ep, s);
	}
	s->sums = calloc(ep->m->n + 1, sizeof *s->sums);
	if (!s->sums) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	if (ep->cfg.role == XFER_RECEIVER) {
		s->direct = !ep->cfg.keep_previous && !s->any_cuda;
		if (s->gpu && ep->cfg.keep_previous && !(s->dj = xfer_djournal_new(s->gpu, ep->cfg.device_journal_bytes, ep->m->bytes, err)))
			return -1;
		if (ep->shared_lfd >= 0) {
			s->lfd = ep->shared_lfd; /* the p2p chooser's */
			s->lfd_shared = 1;
		} else if ((s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err)) < 0) {
			return -1;
		}
	} else {
		if (make_chunks(ep, s, ep->cfg.bucket_bytes, err) != 0) return -1;
		if (ep->cfg.p2p.port <= 0 || ep->cfg.p2p.port > 65535)
			return xfer_fail(err, XFER_EINVAL, "p2p sender needs the receiver's port (cfg.p2p.port)");
	}
	return 0;
}

static void tcp_teardown(xfer_endpoint *ep)
{
	tcp_state *s = ep->impl;
	if (!s) return;
	close_session(s);
	if (s->lfd >= 0 && !s->lfd_shared) close(s->lfd);
	const xfer_cuda_api *cu = s->any_cuda ? xfer_cuda(NULL, 0) : NULL;
	for (int i = 0; i < 2; i++) {
		if (!s->slot[i]) continue;
		if (s->slot_pinned) cu->FreeHost(s->slot[i]);
		else free(s->slot[i]);
	}
	for (int i = 0; i < 2; i++)
		if (s->dstage[i]) cu->Free(s->dstage[i]);
	for (int i = 0; i < MAX_STREAMS; i++)
		if (s->wstream[i]) cu->StreamDestroy(s->wstream[i]);
	xfer_djournal_free(&s->dj);
	if (s->stream) cu->StreamDestroy(s->stream);
	xfer_gpu_free(&s->gpu);
	for (int i = 0; i < MAX_STREAMS; i++) xfer_journal_free(&s->j[i]);
	free(s->chunks);
	free_plan(s);
	free(s->sums);
	free(s->done);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	ep->impl = NULL;
}

static void tcp_abort(xfer_endpoint *ep)
{
	tcp_state *s = ep->impl;
	if (!s) return;
	shutdown_all(s);
	if (s->lfd >= 0 && !s->lfd_shared && !ep->keep_listener) shutdown(s->lfd, SHUT_RDWR);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* ---- sender ---- */

static int sender_connect(xfer_endpoint *ep, tcp_state *s, xfer_err *err)
{
	int to = ep->cfg.timeout_ms;
	char *desc = NULL;
	size_t dlen;
	if (getrandom(&s->session, sizeof s->session, 0) != sizeof s->session)
		s->session = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(xfer_now() * 1e9);
	desc = xfer_manifest_describe(ep->m, &dlen);
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	hello h = { .kind = KIND_CONTROL, .nstreams = (uint32_t)s->nstreams, .session = s->session,
		    .bucket_bytes = s->bucket_bytes, .manifest_len = dlen };
	if (ep->has_ticket) h.ticket = ep->ticket;
	xfer_tcp_hello_pack(&h, (unsigned char *)&h);
	s->ctl = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
	if (s->ctl < 0) goto err;
	struct iovec v[2] = { { &h, sizeof h }, { desc, dlen } };
	if (xfer_sock_sendv(s->ctl, v, 2, "hello", "receiver", to, err) != 0) goto old;
	for (int i = 0; i < s->nstreams; i++) {
		hello d = h;
		d.kind = KIND_DATA;
		d.stream = (uint32_t)i;
		d.manifest_len = 0;
		s->data[i] = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
		if (s->data[i] < 0) goto err;
		if (xfer_sock_send(s->data[i], &d, sizeof d, "hello", "receiver", to, err) != 0) goto old;
	}
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto old;
	free(desc);
	s->connected = 1;
	return 0;
old:
	/* a receiver that closed without a status may be of an older wire */
	if (!strstr(err->msg, "reported") && err->code != XFER_ETIMEOUT) {
		char m[sizeof err->msg];
		snprintf(m, sizeof m, "%s (%s)", err->msg, OLD_RECEIVER_HINT);
		memcpy(err->msg, m, sizeof m);
	}
err:
	free(desc);
	close_session(s);
	return -1;
}

static void *send_worker(void *arg)
{
	worker *w = arg;
	tcp_state *s = w->s;
	xfer_endpoint *ep = s->ep;
	struct iovec *iov = NULL, one;
	int cap = 0, n = 0, to = ep->cfg.timeout_ms, fd = s->data[w->idx];
	unsigned char *tmp = NULL;
	xfer_err e = { 0 };
	for (size_t k = 0; k < s->nchunks; k++) {
		uint64_t a, b;
		stripe_of(s, k, w->idx, &a, &b);
		shead h = { .stream = (uint32_t)w->idx, .version = s->version, .chunk = k, .off = a, .len = b - a };
		memcpy(h.magic, "SKS1", 4);
		if (s->any_cuda) {
			pthread_mutex_lock(&s->mu);
			while (s->slot_gen[k % 2] != k && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			if (s->failed) goto out;
			one = (struct iovec){ s->slot[k % 2] + (a - s->chunks[k].off), (size_t)(b - a) };
			iov = iov ? iov : malloc(sizeof *iov);
			if (!iov) { xfer_fail(&e, XFER_ENOMEM, "out of memory"); goto fail; }
			iov[0] = one;
			n = b > a;
			cap = cap ? cap : 1;
		} else if (xfer_tensor_iov(ep, a, b, &iov, &cap, &n, &e) != 0) {
			goto fail;
		}
		long long c = xfer_hooks.corrupt_at - 1;
		if (xfer_hooks.corrupt_version && xfer_hooks.corrupt_version == s->version)
			c = (long long)(ep->m->bytes / 2); /* test hook: the middle byte of this version */
		if ((xfer_hooks.corrupt_at || xfer_hooks.corrupt_version == s->version) && c >= 0 && (uint64_t)c >= a &&
		    (uint64_t)c < b) {
			/* test hook: send a copy of the stripe with one byte flipped */
			tmp = malloc(b - a);
			if (!tmp) { xfer_fail(&e, XFER_ENOMEM, "out of memory"); goto fail; }
			size_t at = 0;
			for (int i = 0; i < n; i++) {
				memcpy(tmp + at, iov[i].iov_base, iov[i].iov_len);
				at += iov[i].iov_len;
			}
			tmp[(uint64_t)c - a] ^= 0x40;
			iov[0] = (struct iovec){ tmp, (size_t)(b - a) };
			n = 1;
		}
		struct iovec hv = { &h, sizeof h };
		double t0 = xfer_now();
		if (xfer_sock_sendv(fd, &hv, 1, "stripe header", "receiver", to, &e) != 0 ||
		    xfer_sock_sendv(fd, iov, n, "stripe", "receiver", to, &e) != 0) {
			xfer_err_prefix(&e, "stream %d, chunk %zu", w->idx, k);
			goto fail;
		}
		s->stream_s[w->idx] += xfer_now() - t0;
		free(tmp);
		tmp = NULL;
		pthread_mutex_lock(&s->mu);
		s->done[k]++;
		/* test hook: the process dies once every stream has sent bucket k */
		if (xfer_hooks.die_after_bucket && k + 1 == (size_t)xfer_hooks.die_after_bucket &&
		    s->done[k] == s->nstreams)
			_exit(3);
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (s->failed) goto out;
	}
	goto out;
fail:
	fail_version(s, &e);
out:
	free(tmp);
	free(iov);
	return NULL;
}

static int run_workers(tcp_state *s, void *(*fn)(void *), pthread_t *th, worker *w, int *started,
		       xfer_err *err)
{
	*started = 0;
	for (int i = 0; i < s->nstreams; i++) {
		w[i] = (worker){ s, i };
		if (pthread_create(&th[i], NULL, fn, &w[i]) != 0) {
			xfer_fail(err, XFER_EIO, "cannot start stream thread %d", i);
			fail_version(s, err);
			return -1;
		}
		(*started)++;
	}
	return 0;
}

static int begin_version(tcp_state *s, uint64_t v, xfer_err *err)
{
	free(s->done);
	s->done = calloc(s->nchunks + 1, sizeof *s->done);
	if (!s->done) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	s->failed = 0;
	memset(&s->ferr, 0, sizeof s->ferr);
	s->version = v;
	s->slot_gen[0] = 0;
	s->slot_gen[1] = 1;
	s->hashing = s->journaling = 0;
	memset(s->stream_s, 0, sizeof s->stream_s);
	return 0;
}

/* The tensors' device current on the calling thread (which may not be the
 * one that opened the endpoint) before anything is allocated or run. */
static int on_device(const tcp_state *s, xfer_err *err)
{
	if (s->gpu && s->gpu->cu->SetDevice(s->gpu->device) != 0)
		return xfer_fail(err, XFER_EIO, "cudaSetDevice(%d) failed", s->gpu->device);
	return 0;
}

static double slowest_stream(const tcp_state *s)
{
	double m = 0;
	for (int i = 0; i < s->nstreams; i++)
		if (s->stream_s[i] > m) m = s->stream_s[i];
	return m;
}

/* Copies chunk k's bytes into slot k%2 (a sender with CUDA tensors). */
static int stage_chunk(xfer_endpoint *ep, tcp_state *s, size_t k, size_t np, xfer_err *err)
{
	const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
	for (size_t i = 0; i < np; i++) {
		const piece *p = &s->pc[i];
		const xfer_tensor *x = &ep->m->t[p->t];
		if (xfer_cuda_copy(cu, s->slot[k % 2] + (p->a - s->chunks[k].off), XFER_MEM_HOST,
				   (const char *)x->ptr + (p->a - ep->offsets[p->t]), x->mem, p->b - p->a, err) != 0)
			return -1;
	}
	return 0;
}

/* The sender's tree hashes of chunk k (its np pieces in s->pc), then the
 * sums of the tensors that end in it: host tensors on CPU threads, CUDA
 * tensors on the GPU, else on CPU threads from the staged slot. */
static int sender_hash(xfer_endpoint *ep, tcp_state *s, size_t k, size_t np, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	double t0 = xfer_now();
	size_t ng = 0;
	for (size_t i = 0; i < np; i++) {
		const piece *p = &s->pc[i];
		const xfer_tensor *x = &m->t[p->t];
		const char *src = (const char *)x->ptr + (p->a - ep->offsets[p->t]);
		if (x->mem == XFER_MEM_CUDA && s->gpu) {
			s->gsrc[ng] = src;
			s->gn[ng] = p->b - p->a;
			s->gto[ng++] = hash_of(ep, s, p);
		} else {
			cpu_hash(ep, s, p, x->mem == XFER_MEM_CUDA ? (const char *)s->slot[k % 2] + (p->a - s->chunks[k].off) : src);
		}
	}
	if (ng) {
		if (xfer_gpu_chunk_hashes(s->gpu, s->stream, s->gsrc, s->gn, ng, s->gout, err) != 0) return -1;
		gpu_scatter(s, ng);
	}
	for (size_t t = s->tend[k]; t < s->tend[k + 1]; t++)
		s->sums[t] = xfer_tree_top(s->hash + s->tfirst[t], s->tfirst[t + 1] - s->tfirst[t], m->t[t].nbytes);
	s->hashing += xfer_now() - t0;
	return 0;
}

static int send_record(xfer_endpoint *ep, tcp_state *s, size_t k, xfer_err *err)
{
	hrec r = { .ntops = (uint32_t)(s->tend[k + 1] - s->tend[k]), .chunk = k,
		   .nhash = s->hfirst[k + 1] - s->hfirst[k] };
	memcpy(r.magic, "SKH1", 4);
	struct iovec v[3] = { { &r, sizeof r },
			      { s->hash + s->hfirst[k], r.nhash * sizeof *s->hash },
			      { s->sums + s->tend[k], r.ntops * sizeof *s->sums } };
	return xfer_sock_sendv(s->ctl, v, 3, "chunk hashes", "receiver", ep->cfg.timeout_ms, err);
}

static int tcp_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	tcp_state *s = ep->impl;
	int to = ep->cfg.timeout_ms, started = 0;
	pthread_t th[MAX_STREAMS];
	worker w[MAX_STREAMS];
	if (on_device(s, err) != 0) return -1;
	if (!s->connected && sender_connect(ep, s, err) != 0) return -1;
	if (s->any_cuda && alloc_slots(s, 0, err) != 0) goto err;
	if (begin_version(s, v, err) != 0) goto err;
	if (s->any_cuda) s->slot_gen[0] = s->slot_gen[1] = UINT64_MAX; /* staged below */
	if (xfer_sock_send_vhead(s->ctl, ep, v, err) != 0) goto err;
	if (run_workers(s, send_worker, th, w, &started, err) != 0) goto join;
	/* The streams send chunk k while this thread stages (CUDA) and hashes
	 * chunk k+1 and sends its record. */
	for (size_t k = 0; k < s->nchunks && !s->failed; k++) {
		xfer_err e;
		size_t np = pieces_of(ep, s, k);
		if (s->any_cuda) {
			pthread_mutex_lock(&s->mu);
			while (k >= 2 && s->done[k - 2] < s->nstreams && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			if (s->failed) break;
			if (stage_chunk(ep, s, k, np, &e) != 0) {
				fail_version(s, &e);
				break;
			}
			pthread_mutex_lock(&s->mu);
			s->slot_gen[k % 2] = k;
			pthread_cond_broadcast(&s->cv);
			pthread_mutex_unlock(&s->mu);
		}
		if (sender_hash(ep, s, k, np, &e) != 0 || send_record(ep, s, k, &e) != 0) {
			fail_version(s, &e);
			break;
		}
	}
join:
	for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
	ep->stats.hash_seconds = s->hashing;
	ep->stats.data_seconds = slowest_stream(s);
	if (s->failed) {
		/* The receiver may have said why (a checksum, its own watchdog);
		 * one that stopped answering has nothing to say. */
		xfer_err peer = { 0 };
		int pto = to < 1000 ? to : 1000;
		if (s->ferr.code != XFER_ETIMEOUT && s->ctl >= 0 && xfer_sock_wait(s->ctl, pto, &peer) == 0 &&
		    xfer_sock_recv_status(s->ctl, "receiver", pto, &peer) != 0 && strstr(peer.msg, "reported"))
			*err = peer;
		else
			*err = s->ferr;
		goto err;
	}
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	if (xfer_root_keep(ep, v, XFER_SUM_TREE, s->sums, err) != 0) goto err; /* its sums: Done.root */
	ep->stats.bytes_moved = ep->m->bytes;
	ep->stats.staging_peak = s->any_cuda ? 2 * s->slot_bytes : 0;
	return 0;
err:
	close_session(s);
	return -1;
}

/* ---- receiver ---- */

/* The control connection, then the data streams, through the gate: every
 * connection's hello is read concurrently, within XFER_GATE_HELLO_MS, and
 * one without this receiver's ticket (or of another wire) is refused
 * before a byte of data is read; an older sender hears why. */
static int receiver_accept(xfer_endpoint *ep, tcp_state *s, int wait_ms, xfer_err *err)
{
	int to = ep->cfg.timeout_ms, fd = -1;
	char *desc = NULL;
	hello h;
	unsigned char raw[XFER_GATE_HELLO_MAX];
	size_t rn = 0;
	/* accepted, and its hello judged, by the p2p chooser; else through the gate */
	if ((s->ctl = xfer_gate_take_pending(ep, raw, &rn)) < 0) {
		tcp_judge_ctx j = { ep, 0, 0, 0 };
		if ((s->ctl = xfer_gate_next(ep->gate, s->lfd, wait_ms, to, tcp_judge, &j, raw, &rn, err)) < 0) return -1;
	}
	if (rn != sizeof h || xfer_tcp_hello_parse(raw, rn, &h, err) != 0 || h.kind != KIND_CONTROL) {
		xfer_fail(err, XFER_EFORMAT, "the first connection is not a skein p2p sender's control stream");
		goto err;
	}
	desc = malloc(h.manifest_len + 1);
	if (!desc) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, desc, h.manifest_len, "manifest", "sender", to, err) != 0) goto err;
	s->nstreams = (int)h.nstreams;
	s->session = h.session;
	int seen = 0;
	while (seen < s->nstreams) {
		hello d;
		tcp_judge_ctx j = { ep, 1, s->session, h.nstreams };
		fd = xfer_gate_next(ep->gate, s->lfd, to, to, tcp_judge, &j, raw, &rn, err);
		if (fd < 0) {
			if (err->code == XFER_ENOVERSION) {
				err->code = XFER_ETIMEOUT;
				xfer_err_prefix(err, "the sender's data streams");
			}
			goto err;
		}
		memcpy(&d, raw, sizeof d);
		if (s->data[d.stream] >= 0) {
			close(fd); /* a stream twice */
			fd = -1;
			continue;
		}
		s->data[d.stream] = fd;
		fd = -1;
		seen++;
	}
	xfer_err st = { 0 };
	free(s->chunks);
	s->chunks = NULL;
	if (xfer_chunk_plan_cut(ep->m, ep->offsets, h.bucket_bytes, 1, desc, h.manifest_len, &s->chunks, &s->nchunks,
				&st) == 0 &&
	    plan_tree(ep, s, &st) == 0) {
		s->bucket_bytes = h.bucket_bytes;
		if (s->direct || alloc_slots(s, s->dj != NULL, &st) == 0) st.code = XFER_OK;
	}
	if (st.code != XFER_OK) xfer_err_prefix(&st, "sender's manifest vs receiver's");
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	free(desc);
	s->connected = 1;
	return 0;
err:
	if (fd >= 0) close(fd);
	free(desc);
	close_session(s);
	return -1;
}

/* Whether this version's CUDA pieces go in at commit, through the device
 * journal (else the streams place them). */
static int device_commit(const xfer_endpoint *ep, const tcp_state *s)
{
	return s->dj && (ep->stats.version || ep->journal_first) && !s->direct;
}

/* Where chunk k's bytes from its first CUDA tensor byte on (*first) lie
 * in the device staging: at dstage[k % 2] + *shift, the shift that lines
 * that byte up with its tensor mod 8 (tensors laid out alike then line up
 * all, so the journal copy takes its whole-word path, and the one-pass
 * kernel can run at all).  0: no CUDA bytes in chunk k. */
static int dev_span(const xfer_endpoint *ep, const tcp_state *s, size_t k, uint64_t *first, unsigned *shift)
{
	uint64_t a = s->chunks[k].off, b = a + s->chunks[k].len;
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && ep->offsets[t] < b; t++) {
		const xfer_tensor *x = &ep->m->t[t];
		if (x->mem != XFER_MEM_CUDA || ep->offsets[t + 1] <= a || ep->offsets[t + 1] == ep->offsets[t]) continue;
		*first = ep->offsets[t] > a ? ep->offsets[t] : a;
		*shift = (unsigned)((uintptr_t)((const char *)x->ptr + (*first - ep->offsets[t])) & 7);
		return 1;
	}
	return 0;
}

/* A stream's stripe [a, b) of chunk k, landed in its slot, on to the
 * device staging from the chunk's first CUDA byte on: each stream copies
 * its own as it lands, on its own non-blocking CUDA stream, so these
 * copies overlap the other streams' receiving and the commit's kernels do
 * not queue behind them: the commit only runs the kernels. */
static int stage_stripe(const xfer_endpoint *ep, tcp_state *s, int idx, size_t k, uint64_t a, uint64_t b,
			xfer_err *err)
{
	uint64_t first;
	unsigned shift;
	if (!dev_span(ep, s, k, &first, &shift) || b <= first) return 0;
	uint64_t lo = a > first ? a : first;
	if (b == lo) return 0;
	const xfer_cuda_api *cu = s->gpu->cu;
	void *ws = s->wstream[idx];
	if (xfer_cuda_check(cu, cu->MemcpyAsync(s->dstage[k % 2] + shift + (lo - first),
						s->slot[k % 2] + (lo - s->chunks[k].off), b - lo, XFER_CUDA_H2D, ws),
			    "cudaMemcpyAsync (to the device staging)", err) != 0)
		return -1;
	return xfer_cuda_check(cu, cu->StreamSynchronize(ws), "cudaMemcpyAsync (to the device staging)", err);
}

/* A stream's stripe [a, b) from the slot into the host tensors only (the
 * CUDA ones go in at commit, device_commit). */
static int place_host(const xfer_endpoint *ep, const unsigned char *slot, uint64_t off, uint64_t a, uint64_t b,
		      xfer_journal *j, xfer_err *err)
{
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && ep->offsets[t] < b; t++) {
		uint64_t lo = ep->offsets[t] > a ? ep->offsets[t] : a, hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		if (hi > lo && ep->m->t[t].mem != XFER_MEM_CUDA && xfer_place_stripe(ep, slot, off, lo, hi, j, err) != 0)
			return -1;
	}
	return 0;
}

static void *recv_worker(void *arg)
{
	worker *w = arg;
	tcp_state *s = w->s;
	xfer_endpoint *ep = s->ep;
	struct iovec *iov = NULL;
	int cap = 0, n = 0, to = ep->cfg.timeout_ms, fd = s->data[w->idx];
	int dev = device_commit(ep, s);
	xfer_journal *j = ep->stats.version || ep->journal_first ? s->j[w->idx] : NULL;
	xfer_err e = { 0 };
	/* the CUDA current device is per thread */
	if (s->gpu && xfer_cuda_check(s->gpu->cu, s->gpu->cu->SetDevice(s->gpu->device), "cudaSetDevice", &e) != 0)
		goto fail;
	for (size_t k = 0; k < s->nchunks; k++) {
		uint64_t a, b;
		shead h;
		stripe_of(s, k, w->idx, &a, &b);
		if (!s->direct) {
			pthread_mutex_lock(&s->mu);
			while (s->slot_gen[k % 2] != k && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			if (s->failed) goto out;
		}
		shead want = { .stream = (uint32_t)w->idx, .version = s->version, .chunk = k, .off = a, .len = b - a };
		double t0 = xfer_now();
		if (xfer_sock_recv(fd, &h, sizeof h, "stripe header", "sender", to, &e) != 0 ||
		    xfer_tcp_shead_parse(&h, sizeof h, &want, &e) != 0)
			goto fail;
		unsigned char *slot = s->slot[k % 2];
		if (s->direct) {
			if (xfer_tensor_iov(ep, a, b, &iov, &cap, &n, &e) != 0) goto fail;
			if (xfer_sock_recvv(fd, iov, n, "stripe", "sender", to, &e) != 0) goto fail;
			s->stream_s[w->idx] += xfer_now() - t0;
		} else {
			if (xfer_sock_recv(fd, slot + (a - s->chunks[k].off), b - a, "stripe", "sender", to, &e) != 0)
				goto fail;
			s->stream_s[w->idx] += xfer_now() - t0;
			int rc = dev ? place_host(ep, slot, s->chunks[k].off, a, b, j, &e)
				     : xfer_place_stripe(ep, slot, s->chunks[k].off, a, b, j, &e);
			if (rc == 0 && dev) {
				double t1 = xfer_now();
				rc = stage_stripe(ep, s, w->idx, k, a, b, &e);
				s->stream_s[w->idx] += xfer_now() - t1;
			}
			if (rc != 0) goto fail;
		}
		pthread_mutex_lock(&s->mu);
		s->done[k]++;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	goto out;
fail:
	xfer_err_prefix(&e, "stream %d", w->idx);
	fail_version(s, &e);
out:
	free(iov);
	return NULL;
}

/* Chunk k's CUDA pieces, gathered in s->gdst/gsrc/gn/gto (ng of them, the
 * sources on the device staging, put there by the streams: stage_stripe), go
 * into the tensors through the device journal, then the GPU hashes them.
 * Two kernels, not the one-pass skein_copy_tree (xfer_hooks.gpu_fused):
 * a chunk holds only about a hundred tree chunks, and the one-pass kernel,
 * whose threads per tree chunk also compare and write, is bound by their
 * latency there (measured on the H200, 2 GiB in 32 MiB chunks: 3.2 ms a
 * chunk one-pass, under 1 ms as two kernels, docs/benchmarks.md). */
static int commit_device(tcp_state *s, size_t ng, xfer_err *err)
{
	double t0 = xfer_now();
	int rc = xfer_hooks.gpu_fused ? xfer_djournal_copy_chunks(s->dj, s->stream, s->gdst, s->gsrc, s->gn, ng, s->gout, err)
				      : 1;
	s->dev_journaled = 1;
	if (rc == 1) { /* not fused, or a piece unaligned with its staging: copy, then hash */
		rc = xfer_djournal_copy(s->dj, s->stream, s->gdst, s->gsrc, s->gn, ng, err);
		double t1 = xfer_now();
		s->journaling += t1 - t0;
		if (rc == 0) rc = xfer_gpu_chunk_hashes(s->gpu, s->stream, s->gsrc, s->gn, ng, s->gout, err);
		s->hashing += xfer_now() - t1;
	} else {
		s->journaling += xfer_now() - t0; /* copy, journal and hash in one pass */
	}
	if (rc != 0) return -1;
	gpu_scatter(s, ng);
	return 0;
}

/* Hashes chunk k once every stream has landed it: host pieces on CPU
 * threads from the slot (or the tensors when direct); CUDA pieces through
 * the device journal (commit_device) or, placed by the streams, on the GPU
 * in place; without the kernels on CPU threads from the pinned slot. */
static int commit_chunk(xfer_endpoint *ep, tcp_state *s, size_t k, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	size_t np = pieces_of(ep, s, k), ng = 0;
	uint64_t off = s->chunks[k].off, first = 0;
	unsigned shift = 0;
	int dev = device_commit(ep, s) && dev_span(ep, s, k, &first, &shift); /* else no CUDA piece here */
	double t0 = xfer_now();
	for (size_t i = 0; i < np; i++) {
		const piece *p = &s->pc[i];
		const xfer_tensor *x = &m->t[p->t];
		unsigned char *dst = (unsigned char *)x->ptr + (p->a - ep->offsets[p->t]);
		const unsigned char *landed = s->direct ? dst : s->slot[k % 2] + (p->a - off);
		if (x->mem != XFER_MEM_CUDA || !s->gpu) {
			cpu_hash(ep, s, p, landed);
			continue;
		}
		s->gdst[ng] = dst;
		s->gsrc[ng] = dev ? s->dstage[k % 2] + shift + (p->a - first) : dst; /* where stage_stripe put it */
		s->gn[ng] = p->b - p->a;
		s->gto[ng++] = hash_of(ep, s, p);
	}
	s->hashing += xfer_now() - t0;
	if (ng && dev) return commit_device(s, ng, err);
	if (ng) {
		t0 = xfer_now();
		int rc = xfer_gpu_chunk_hashes(s->gpu, s->stream, s->gsrc, s->gn, ng, s->gout, err);
		s->hashing += xfer_now() - t0;
		if (rc != 0) return -1;
		gpu_scatter(s, ng);
	}
	return 0;
}

/* The sender's record for chunk k against what landed: the first tree
 * chunk that differs names its tensor and bytes; then the tensor sums. */
static int check_chunk(xfer_endpoint *ep, tcp_state *s, size_t k, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	hrec want = { .ntops = (uint32_t)(s->tend[k + 1] - s->tend[k]), .chunk = k,
		      .nhash = s->hfirst[k + 1] - s->hfirst[k] }, r;
	if (xfer_sock_recv(s->ctl, &r, sizeof r, "chunk hashes", "sender", to, err) != 0 ||
	    xfer_tcp_hrec_parse(&r, sizeof r, &want, err) != 0)
		return -1;
	struct iovec v[2] = { { s->peer + s->hfirst[k], want.nhash * sizeof *s->peer },
			      { s->sums + s->tend[k], want.ntops * sizeof *s->sums } };
	if (xfer_sock_recvv(s->ctl, v, 2, "chunk hashes", "sender", to, err) != 0) return -1;
	for (uint64_t g = s->hfirst[k]; g < s->hfirst[k + 1]; g++) {
		if (s->hash[g] == s->peer[g]) continue;
		size_t lo = 0, hi = m->n; /* the tensor of tree chunk g */
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (s->tfirst[mid + 1] <= g) lo = mid + 1;
			else hi = mid;
		}
		uint64_t at = (g - s->tfirst[lo]) * TREE, end = at + TREE < m->t[lo].nbytes ? at + TREE : m->t[lo].nbytes;
		return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch in its bytes %llu..%llu "
				 "(chunk %zu of %zu)", (unsigned long long)s->version, m->t[lo].name,
				 (unsigned long long)at, (unsigned long long)end, k, s->nchunks);
	}
	for (size_t t = s->tend[k]; t < s->tend[k + 1]; t++) {
		xfer_sum mine = xfer_tree_top(s->hash + s->tfirst[t], s->tfirst[t + 1] - s->tfirst[t], m->t[t].nbytes);
		if (!xfer_sum_equal(mine, s->sums[t]))
			return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch on arrival "
					 "(its tree sum, chunk %zu of %zu)", (unsigned long long)s->version, m->t[t].name,
					 k, s->nchunks);
	}
	return 0;
}

/* After a failed version: the host journals and the device journal put
 * the previous version back (or say there was none). */
static void undo_version(xfer_endpoint *ep, tcp_state *s, xfer_err *err)
{
	char before[sizeof err->msg];
	memcpy(before, err->msg, sizeof before);
	xfer_stripe_journals_undo(ep, s->j, MAX_STREAMS, err);
	if (s->dev_journaled) {
		double u0 = xfer_now();
		xfer_err u;
		if (xfer_djournal_undo(s->dj, s->stream, &u) != 0)
			xfer_err_prefix(err, "AND THE DEVICE UNDO FAILED (%s)", u.msg);
		ep->stats.undo_seconds += xfer_now() - u0;
	}
	/* nothing said: every journal replayed (a first version has none) */
	if ((ep->stats.version || ep->journal_first) && s->j[0] && !strcmp(before, err->msg))
		xfer_err_prefix(err, "(the previous version was put back)");
}

static void receiver_stats(xfer_endpoint *ep, tcp_state *s)
{
	xfer_stripe_journals_stats(ep, s->j, MAX_STREAMS);
	ep->stats.journal_seconds += s->journaling;
	ep->stats.hash_seconds = s->hashing;
	ep->stats.data_seconds = slowest_stream(s);
	ep->stats.device_journal_peak = ep->stats.device_journal_spilled = 0;
	if (s->dev_journaled) {
		xfer_djournal_stats js = xfer_djournal_get_stats(s->dj);
		ep->stats.journal_bytes += js.bytes;
		ep->stats.device_journal_peak = js.device_peak;
		ep->stats.device_journal_spilled = js.spilled;
	}
}

static int tcp_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	tcp_state *s = ep->impl;
	int to = ep->cfg.timeout_ms, started = 0;
	pthread_t th[MAX_STREAMS];
	worker w[MAX_STREAMS];
	double t0 = xfer_now();
	int journaled = (ep->stats.version || ep->journal_first) && !s->direct && ep->cfg.keep_previous; /* recv_worker's */
	if (on_device(s, err) != 0) return -1;
	if (s->connected && sender_gone(s)) close_session(s); /* not this version's failure: accept the next */
	if (!s->connected && receiver_accept(ep, s, wait_ms, err) != 0) return -1;
	if (!s->lfd_shared) { /* the connections that came with or after our sender's: judged meanwhile */
		tcp_judge_ctx j = { ep, 0, 0, 0 };
		xfer_gate_sweep(ep->gate, s->lfd, tcp_judge, &j);
	}
	uint64_t hv = 0;
	int got = xfer_sock_recv_vhead(s->ctl, ep, wait_ms, t0, &hv, err);
	if (got > 0) return -1; /* no version yet: the session stays */
	if (got < 0 && s->lfd_shared && sender_gone(s)) {
		/* the sender ended its session while we waited for its next
		 * version: the p2p chooser takes the next sender */
		close_session(s);
		return xfer_fail(err, XFER_ENOVERSION, "the sender ended its session");
	}
	if (got < 0) goto err;
	if (ep->target && hv < ep->target) {
		/* what is left of an update that was aborted before we took it
		 * (its sender closed this session then): wait for the next one */
		close_session(s);
		return xfer_fail(err, XFER_ENOVERSION, "a stale session (version %llu), waiting for version %llu",
				 (unsigned long long)hv, (unsigned long long)ep->target);
	}
	if (ep->target && hv != ep->target) {
		xfer_fail(err, XFER_EINVAL, "the sender sends version %llu, this receiver was told to receive %llu",
			  (unsigned long long)hv, (unsigned long long)ep->target);
		goto err;
	}
	if (begin_version(s, hv, err) != 0) goto err;
	s->dev_journaled = 0;
	if (s->dj) xfer_djournal_reset(s->dj);
	/* a journal per stream of this session (stripes are disjoint); CUDA
	 * stripes go through them only without the device journal */
	if (xfer_stripe_journals(ep, s->j, MAX_STREAMS, s->direct || !ep->cfg.keep_previous ? 0 : s->nstreams,
				 s->bucket_bytes, s->any_cuda && !s->dj, err) != 0)
		goto err;
	if (run_workers(s, recv_worker, th, w, &started, err) != 0) goto join;
	for (size_t k = 0; k < s->nchunks; k++) {
		pthread_mutex_lock(&s->mu);
		while (s->done[k] < s->nstreams && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
		if (s->failed) break;
		xfer_err e;
		if (commit_chunk(ep, s, k, &e) != 0) {
			fail_version(s, &e);
			break;
		}
		pthread_mutex_lock(&s->mu);
		s->slot_gen[k % 2] = k + 2;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (check_chunk(ep, s, k, &e) != 0) {
			fail_version(s, &e);
			break;
		}
		if (xfer_hooks.stop_after_bucket && k + 1 == (size_t)xfer_hooks.stop_after_bucket) raise(SIGSTOP);
		if (k == 0 && xfer_hooks.crash_receiving_version && xfer_hooks.crash_receiving_version == hv) _exit(3);
	}
join:
	for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
	receiver_stats(ep, s);
	if (s->failed) {
		*err = s->ferr;
		undo_version(ep, s, err);
		xfer_sock_send_status(s->ctl, err, to < 1000 ? to : 1000, NULL);
		goto err;
	}
	/* the sums every tensor matched: their root goes to the head, which
	 * commits only when it is the sender's (a forged sender's differs) */
	if (xfer_root_keep(ep, hv, XFER_SUM_TREE, s->sums, err) != 0) {
		undo_version(ep, s, err);
		xfer_sock_send_status(s->ctl, err, to < 1000 ? to : 1000, NULL);
		goto err;
	}
	if (xfer_sock_send_status(s->ctl, NULL, to, err) != 0) goto err;
	ep->stats.bytes_moved = ep->m->bytes;
	ep->stats.staging_peak = s->direct ? 0 : 2 * s->slot_bytes + (s->dstage[0] ? 2 * s->dstage_bytes : 0);
	ep->undo_ready = journaled && s->j[0];
	*version = hv;
	return 0;
err:
	close_session(s);
	return -1;
}

/* A session whose sender is still there.  The p2p chooser asks this before
 * it lets us receive: a session the sender ended (an engine that served a
 * catch-up closes it) must not make us accept the next connection ourselves,
 * which may be a p2p-ucx sender's: the chooser peeks at it first. */
static int tcp_connected(const xfer_endpoint *ep)
{
	const tcp_state *s = ep->impl;
	return s && s->connected && !sender_gone(s);
}

static int tcp_rollback(xfer_endpoint *ep, xfer_err *err)
{
	tcp_state *s = ep->impl;
	int rc = xfer_stripe_journals_rollback(ep, s->j, MAX_STREAMS, err);
	if (s->dev_journaled) {
		double u0 = xfer_now();
		if (xfer_djournal_undo(s->dj, s->stream, err) != 0) {
			xfer_err_prefix(err, "rollback: the device undo failed, the buffers are damaged");
			rc = -1;
		}
		s->dev_journaled = 0;
		ep->stats.undo_seconds += xfer_now() - u0;
	}
	return rc;
}

const xfer_path_ops xfer_tcp_ops = {
	.name = "p2p-tcp",
	.probe = tcp_probe,
	.setup = tcp_setup,
	.send = tcp_send,
	.receive = tcp_receive,
	.abort = tcp_abort,
	.teardown = tcp_teardown,
	.connected = tcp_connected,
	.rollback = tcp_rollback,
	.fan = XFER_FAN_PEERS,
};
