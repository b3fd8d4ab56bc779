/* transfer/xfer_ucx.c: the p2p-ucx data path, one-sided puts through UCX.
 *
 * Mooncake's p2p in Miles, over UCX's UCP as NIXL uses it: the receiver
 * maps its landing memory once with ucp_mem_map and hands the sender its
 * worker address and the packed rkeys; the sender writes each chunk with
 * ucp_put_nbx, waits for remote completion with ucp_ep_flush_nbx, then tells
 * the receiver on the TCP control stream, with the chunk's checksums.  The
 * same code runs over RDMA (rc, dc, ud: the NIC writes the receiver's
 * memory), shared memory (the receiver's slots are allocated by UCX in
 * sysv/posix shared memory, which the sender attaches and writes with
 * memcpy: UCX 1.13 puts need a transport with short and bcopy puts, so cma
 * is not used) or UCX's TCP (puts emulated over active messages: the
 * receiver makes progress while it checks), whichever UCX picks under
 * UCX_TLS and UCX_NET_DEVICES (docs/transfer.md).
 *
 *   control  sender: hello (stripes, bucket size, its UCX kinds, boot id)
 *            + manifest text; receiver: status, then a reply (UCX, or "use
 *            p2p-tcp" under the p2p chooser), its worker address and one
 *            (address, length, rkey) per landing region.
 *            Per version: sender: header; per chunk, once its puts are
 *            flushed: "ready" with the xxh3-128 of each stripe; receiver:
 *            a credit per chunk it has placed (staged mode), and at the
 *            end, or at the first error, its status.
 *
 * Chunks, stripes and journals are p2p-tcp's (xfer_chunk.c): half a bucket
 * per chunk, page-aligned stripes, one undo journal per stripe.
 *   keep_previous (default): the landing regions are two staging slots of
 *     half a bucket; chunk k goes to slot k%2, so the sender writes chunk
 *     k+1 while the receiver checks chunk k; the sender waits for the credit
 *     of chunk k-2 before reusing its slot.  The receiver checks every
 *     stripe against its checksum BEFORE it copies it into the tensors
 *     through the stripe's journal; a failure puts the previous version
 *     back.  Peak extra memory: one bucket of slots plus journals held to
 *     half a bucket, as p2p-tcp.
 *   direct (keep_previous = 0, host tensors): the landing regions are the
 *     tensors themselves, mapped once; no credits, zero copies, zero extra
 *     memory; a failure leaves them partly updated.
 * Stripes are hashed (sender, while the puts run) and checked and placed
 * (receiver) by a small pool of threads, one per stripe.
 *
 * The TCP control stream is also the watchdog: a peer that dies closes it,
 * one that stops stops answering; every wait makes UCX progress and gives
 * up after timeout_ms without any (UCX's own failure reports end it too).
 * CUDA tensors are staged through pinned host buffers on both sides (the
 * sender copies a chunk to the host, hashes and puts it; the receiver places
 * it with xfer_journal_copy_device).  Differs from NIXL: no GPU-direct, no
 * UCX tag/AM messages (the control stream is plain TCP, as in p2p-tcp). */
#include "transfer/xfer_sock.h"
#include "transfer/xfer_ucp.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "transfer/xfer_hash.h"

static const char HELLO_MAGIC[8] = "SKUCX1";

_Static_assert(sizeof(xfer_ucx_hello) == XFER_UCX_HELLO_BYTES, "hello is 144 bytes on the wire");

void xfer_ucx_hello_pack(const xfer_ucx_hello *h, unsigned char out[XFER_UCX_HELLO_BYTES])
{
	xfer_ucx_hello t = *h;
	memcpy(t.magic, HELLO_MAGIC, sizeof t.magic);
	memcpy(out, &t, sizeof t);
}

int xfer_ucx_hello_parse(const void *buf, size_t n, xfer_ucx_hello *h, xfer_err *err)
{
	if (n != sizeof *h) return xfer_fail(err, XFER_EFORMAT, "a hello of %zu bytes", n);
	memcpy(h, buf, sizeof *h);
	if (memcmp(h->magic, HELLO_MAGIC, sizeof h->magic) != 0)
		return xfer_fail(err, XFER_EFORMAT, "not a skein p2p-ucx sender's hello");
	if (h->nstripes < 1 || h->nstripes > XFER_UCX_MAX_STRIPES || h->manifest_len > XFER_P2P_MANIFEST_MAX ||
	    h->bucket_bytes == 0)
		return xfer_fail(err, XFER_EFORMAT, "a p2p-ucx hello with %u stripes, %llu manifest bytes, buckets of %llu",
				 h->nstripes, (unsigned long long)h->manifest_len, (unsigned long long)h->bucket_bytes);
	h->boot_id[sizeof h->boot_id - 1] = 0;
	h->host[sizeof h->host - 1] = 0;
	return 0;
}

#if XFER_HAVE_UCX

enum {
	MAX_STRIPES = XFER_UCX_MAX_STRIPES,
	MAX_BLOB = 64 << 10, /* a worker address or packed rkey larger than this is refused */
	IDLE_SPINS = 32,     /* progress calls that did nothing before sleeping on the event fd */
	POLL_SLICE_MS = 50,  /* the longest sleep: abort and deadlines are checked this often */
	CLOSE_MS = 1000,     /* the most an endpoint's close may take */
	F_AUTO = XFER_UCX_F_AUTO, /* hello: the sender runs under the p2p chooser */
	MODE_UCX = 0,
	MODE_TCP = 1,
	CREDIT = 0x31435253, /* "SRC1": a receiver-to-sender header that is a credit, not a status */
};

typedef xfer_ucx_hello uhello;

typedef struct {
	char magic[4];
	uint32_t mode, direct, nregions, addr_len, why_len, same_host, pad;
	uint64_t slot_bytes;
} ureply;

typedef struct {
	uint64_t addr, len;
	uint32_t rkey_len, pad;
} uregion;

typedef struct {
	char magic[4];
	uint32_t nstripes;
	uint64_t version, chunk;
} uready; /* followed by nstripes xfer_sums */

_Static_assert(sizeof(ureply) == 40, "reply is 40 bytes on the wire");
_Static_assert(sizeof(uregion) == 24, "region is 24 bytes on the wire");
_Static_assert(sizeof(uready) == 24, "ready is 24 bytes on the wire");

typedef struct {
	uint64_t addr, len;
	ucp_rkey_h rkey;
} remote;

typedef struct ucx_state ucx_state;

/* Stripe jobs of one chunk, run by nstripes-1 threads and the caller. */
typedef struct {
	pthread_t th[MAX_STRIPES];
	int nth, stop, next, total, pending, failed;
	size_t k;
	xfer_err err;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
} pool;

struct ucx_state {
	xfer_endpoint *ep;
	const xfer_ucp_api *u;
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_address_t *addr;
	size_t addr_len;
	int efd, kinds;
	char tls[512], boot_here[40];
	pid_t pid; /* the process that started UCX */
	int lfd, lfd_own, ctl, connected, nstripes, any_cuda, direct;
	uint64_t bucket_bytes, version;
	xfer_span *chunks;
	size_t nchunks;
	atomic_int peer_failed;
	int fallback;
	char fallback_why[256];
	/* receiver: landing memory, mapped once */
	unsigned char *slot[2];
	uint64_t slot_bytes;
	int slot_pinned;
	ucp_mem_h slot_mh[2];
	ucp_mem_h *tensor_mh;
	xfer_journal *j[MAX_STRIPES];
	/* sender */
	ucp_ep_h uep;
	remote *rg;
	size_t nrg;
	int remote_direct;
	unsigned char *lslot; /* CUDA tensors: a chunk on the host */
	uint64_t lslot_bytes;
	xfer_sum sums[MAX_STRIPES];
	pool pool;
};

/* ---- small helpers ---- */

static void read_boot_id(char out[40])
{
	memset(out, 0, 40);
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(out, 40, f)) out[0] = 0;
		fclose(f);
	}
	out[strcspn(out, "\n")] = 0;
}

static int ucx_fail(const ucx_state *s, xfer_err *err, xfer_code c, ucs_status_t st, const char *what)
{
	return xfer_fail(err, c, "%s: UCX: %s", what, s->u->ucs_status_string(st));
}

/* Makes UCX progress until req completes (req != NULL) or, without req,
 * until fd is readable.  Sleeps on the worker's event fd when idle; gives up
 * after timeout_ms without progress, on xfer_abort, when UCX reports the
 * peer failed or, with req, when the peer closes fd. */
static int wait_for(ucx_state *s, void *req, int fd, const char *what, const char *peer, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	xfer_endpoint *ep = s->ep;
	int to = ep->cfg.timeout_ms, idle = 0, watch = fd, rc = 0;
	double deadline = xfer_now() + to / 1e3;
	for (;;) {
		if (req) {
			ucs_status_t st = u->ucp_request_check_status(req);
			if (st != UCS_INPROGRESS) {
				u->ucp_request_free(req);
				if (st == UCS_OK) return 0;
				return xfer_fail(err, XFER_EPEER, "%s: UCX: %s (the %s failed or went away)", what,
						 u->ucs_status_string(st), peer);
			}
		}
		/* UCX's verdict on the peer counts while puts are in flight; when
		 * only the control stream is awaited, that stream decides */
		ucs_status_t pf = req ? (ucs_status_t)atomic_load(&s->peer_failed) : UCS_OK;
		if (pf != UCS_OK) {
			rc = xfer_fail(err, XFER_EPEER, "%s: UCX reports the %s failed: %s", what, peer, u->ucs_status_string(pf));
			break;
		}
		if (xfer_check_aborted(ep, err) != 0) {
			rc = -1;
			break;
		}
		if (u->ucp_worker_progress(s->w)) {
			idle = 0;
			deadline = xfer_now() + to / 1e3;
			continue;
		}
		struct pollfd p[2] = { { .fd = s->efd, .events = POLLIN }, { .fd = watch, .events = POLLIN } };
		if (!req && poll(&p[1], 1, 0) > 0) return 0;
		if (++idle < IDLE_SPINS) continue;
		idle = 0;
		if (u->ucp_worker_arm(s->w) == UCS_ERR_BUSY) continue;
		double left = deadline - xfer_now();
		if (left <= 0) {
			rc = xfer_fail(err, XFER_ETIMEOUT, "%s: the %s made no progress for %d ms (watchdog)", what, peer, to);
			break;
		}
		int ms = left * 1e3 + 1 < POLL_SLICE_MS ? (int)(left * 1e3) + 1 : POLL_SLICE_MS;
		int r = poll(p, watch >= 0 ? 2 : 1, ms);
		if (r < 0 && errno != EINTR) {
			rc = xfer_fail_errno(err, XFER_EIO, "poll");
			break;
		}
		if (r > 0 && watch >= 0 && p[1].revents) {
			if (!req) return 0;
			/* during a put: the peer either said something (read it
			 * later) or closed the connection */
			char c;
			ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				rc = xfer_fail(err, XFER_EPEER, "%s: the %s closed the connection", what, peer);
				break;
			}
			watch = -1;
		}
	}
	if (req) u->ucp_request_free(req); /* released by UCX once it completes */
	return rc;
}

/* ---- the stripe pool ---- */

static int stripe_job(ucx_state *s, size_t k, int i, xfer_err *err);

static void run_one_locked(ucx_state *s)
{
	pool *p = &s->pool;
	int i = p->next++;
	size_t k = p->k;
	pthread_mutex_unlock(&p->mu);
	xfer_err e = { 0 };
	int rc = stripe_job(s, k, i, &e);
	pthread_mutex_lock(&p->mu);
	if (rc != 0 && !p->failed) {
		p->failed = 1;
		p->err = e;
	}
	if (--p->pending == 0) pthread_cond_broadcast(&p->done);
}

static void *pool_main(void *arg)
{
	ucx_state *s = arg;
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->next >= p->total) pthread_cond_wait(&p->go, &p->mu);
		if (p->stop) break;
		run_one_locked(s);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void pool_stop(ucx_state *s)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
	p->nth = 0;
	p->stop = 0;
}

/* nstripes - 1 threads on the sender (it takes the last stripe itself),
 * nstripes on the receiver (it makes UCX progress meanwhile). */
static int pool_size(ucx_state *s, xfer_err *err)
{
	int want = s->nstripes - (s->ep->cfg.role == XFER_SENDER);
	if (s->pool.nth == want) return 0;
	pool_stop(s);
	for (int i = 0; i < want; i++) {
		if (pthread_create(&s->pool.th[i], NULL, pool_main, s) != 0)
			return xfer_fail(err, XFER_EIO, "cannot start stripe thread %d", i);
		s->pool.nth++;
	}
	return 0;
}

static void pool_start(ucx_state *s, size_t k)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	p->k = k;
	p->next = 0;
	p->total = p->pending = s->nstripes;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
}

/* Waits for the stripes of the chunk: the sender takes its share of them;
 * the receiver makes UCX progress instead (puts that UCX emulates over
 * active messages, as over TCP, land only while the receiver's worker
 * progresses, and the next chunk is landing now). */
static int pool_wait(ucx_state *s, xfer_err *err)
{
	pool *p = &s->pool;
	int receiver = s->ep->cfg.role == XFER_RECEIVER;
	pthread_mutex_lock(&p->mu);
	while (!receiver && p->next < p->total) run_one_locked(s);
	while (p->pending) {
		if (!receiver) {
			pthread_cond_wait(&p->done, &p->mu);
			continue;
		}
		pthread_mutex_unlock(&p->mu);
		if (!s->u->ucp_worker_progress(s->w) && s->u->ucp_worker_arm(s->w) == UCS_OK) {
			struct pollfd q = { .fd = s->efd, .events = POLLIN };
			poll(&q, 1, 1);
		}
		pthread_mutex_lock(&p->mu);
	}
	int failed = p->failed;
	if (failed) *err = p->err;
	p->failed = 0;
	pthread_mutex_unlock(&p->mu);
	return failed ? -1 : 0;
}

/* xxh3-128 of the tensors' bytes [a, b) of the back-to-back space. */
static xfer_sum hash_tensors(const xfer_endpoint *ep, uint64_t a, uint64_t b, XXH3_state_t *st)
{
	XXH3_128bits_reset(st);
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && a < b; t++) {
		uint64_t hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		if (hi <= a) continue;
		XXH3_128bits_update(st, (const char *)ep->m->t[t].ptr + (a - ep->offsets[t]), hi - a);
		a = hi;
	}
	XXH128_hash_t h = XXH3_128bits_digest(st);
	return (xfer_sum){ h.low64, h.high64 };
}

/* Sender: hashes stripe i of chunk k.  Receiver: checks it, then (staged)
 * copies it into the tensors through its journal. */
static int stripe_job(ucx_state *s, size_t k, int i, xfer_err *err)
{
	xfer_endpoint *ep = s->ep;
	xfer_span c = s->chunks[k];
	uint64_t a, b;
	xfer_stripe_of(c, s->nstripes, i, &a, &b);
	const unsigned char *stage = ep->cfg.role == XFER_SENDER ? s->lslot : s->direct ? NULL : s->slot[k % 2];
	xfer_sum got;
	if (stage) {
		got = xfer_checksum(stage + (a - c.off), b - a);
	} else {
		XXH3_state_t *st = XXH3_createState();
		if (!st) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		got = hash_tensors(ep, a, b, st);
		XXH3_freeState(st);
	}
	if (ep->cfg.role == XFER_SENDER) {
		s->sums[i] = got;
		return 0;
	}
	if (!xfer_sum_equal(got, s->sums[i]))
		return xfer_fail(err, XFER_ECHECKSUM, "version %llu, bytes %llu..%llu (tensor %s): checksum mismatch on arrival",
				 (unsigned long long)s->version, (unsigned long long)a, (unsigned long long)b,
				 ep->m->t[xfer_tensor_at(ep, a)].name);
	if (s->direct) return 0;
	return xfer_place_stripe(ep, s->slot[k % 2], c.off, a, b, ep->stats.version ? s->j[i] : NULL, err);
}

/* ---- setup and teardown ---- */

static int ucx_probe(char *why, size_t n)
{
	int kinds = 0;
	char tls[512], w[256];
	if (xfer_ucx_offers(&kinds, tls, sizeof tls, w, sizeof w) != 0) {
		snprintf(why, n, "%s", w);
		return -1;
	}
	snprintf(why, n, "UCX %s offers %s (best: %s%s)", xfer_ucp(NULL, 0)->ucp_get_version_string(), tls,
		 xfer_ucx_kind_name(kinds), kinds & XFER_UCX_RDMA ? "" : "; no RDMA transport: no device, or UCX_TLS/UCX_NET_DEVICES leave none");
	return 0;
}

static void close_ep(ucx_state *s)
{
	const xfer_ucp_api *u = s->u;
	for (size_t i = 0; i < s->nrg; i++)
		if (s->rg[i].rkey) u->ucp_rkey_destroy(s->rg[i].rkey);
	free(s->rg);
	s->rg = NULL;
	s->nrg = 0;
	if (!s->uep) return;
	/* a failed peer gets a forced close (no flush that cannot finish) */
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = atomic_load(&s->peer_failed) != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0 };
	void *r = u->ucp_ep_close_nbx(s->uep, &p);
	s->uep = NULL;
	if (UCS_PTR_IS_PTR(r)) {
		double end = xfer_now() + CLOSE_MS / 1e3;
		while (u->ucp_request_check_status(r) == UCS_INPROGRESS && xfer_now() < end) u->ucp_worker_progress(s->w);
		u->ucp_request_free(r);
	}
}

static void close_session(ucx_state *s)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	s->connected = 0;
	close_ep(s);
	atomic_store(&s->peer_failed, UCS_OK);
}

static void unmap_all(ucx_state *s)
{
	const xfer_ucp_api *u = s->u;
	const xfer_cuda_api *cu = s->slot_pinned ? xfer_cuda(NULL, 0) : NULL;
	for (int i = 0; i < 2; i++) {
		if (s->slot_mh[i]) u->ucp_mem_unmap(s->ctx, s->slot_mh[i]); /* frees what UCX allocated */
		s->slot_mh[i] = NULL;
		if (cu && s->slot[i]) cu->FreeHost(s->slot[i]);
		s->slot[i] = NULL;
	}
	s->slot_bytes = 0;
	s->slot_pinned = 0;
	if (s->tensor_mh) {
		for (size_t t = 0; t < s->ep->m->n; t++)
			if (s->tensor_mh[t]) u->ucp_mem_unmap(s->ctx, s->tensor_mh[t]);
		free(s->tensor_mh);
		s->tensor_mh = NULL;
	}
}

static void ucx_teardown(xfer_endpoint *ep)
{
	ucx_state *s = ep->impl;
	if (!s) return;
	pool_stop(s);
	if (s->ctx && s->pid == getpid()) { /* a forked copy leaves UCX to its parent */
		close_session(s);
		unmap_all(s);
		if (s->addr) s->u->ucp_worker_release_address(s->w, s->addr);
		if (s->w) s->u->ucp_worker_destroy(s->w);
		s->u->ucp_cleanup(s->ctx);
	} else if (s->ctl >= 0) {
		close(s->ctl);
	}
	if (s->lfd_own && s->lfd >= 0) close(s->lfd);
	if (s->lslot) {
		const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
		if (cu) cu->FreeHost(s->lslot);
	}
	for (int i = 0; i < MAX_STRIPES; i++) xfer_journal_free(&s->j[i]);
	free(s->chunks);
	pthread_mutex_destroy(&s->pool.mu);
	pthread_cond_destroy(&s->pool.go);
	pthread_cond_destroy(&s->pool.done);
	free(s);
	ep->impl = NULL;
}

/* UCX starts at the first transfer, not at xfer_open: UCX does not survive
 * fork, and an endpoint may be opened before one (as a receiver that hands
 * its listening socket to a child).  One forked after that cannot go on. */
static int ucx_start(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	if (s->ctx) {
		if (s->pid == getpid()) return 0;
		return xfer_fail(err, XFER_EINVAL, "p2p-ucx: this endpoint started UCX in process %d and cannot be used in "
				 "a process forked from it", (int)s->pid);
	}
	if (xfer_ucp_context(u, &s->ctx, err) != 0) return -1;
	s->pid = getpid();
	s->kinds = xfer_ucp_context_tls(u, s->ctx, s->tls, sizeof s->tls);
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE };
	ucs_status_t st = u->ucp_worker_create(s->ctx, &wp, &s->w);
	if (st != UCS_OK) {
		s->w = NULL;
		return ucx_fail(s, err, XFER_EUNAVAIL, st, "worker");
	}
	if ((st = u->ucp_worker_get_efd(s->w, &s->efd)) != UCS_OK) return ucx_fail(s, err, XFER_EUNAVAIL, st, "event fd");
	if (ep->cfg.role == XFER_RECEIVER && (st = u->ucp_worker_get_address(s->w, &s->addr, &s->addr_len)) != UCS_OK) {
		s->addr = NULL;
		return ucx_fail(s, err, XFER_EUNAVAIL, st, "worker address");
	}
	return 0;
}

static int ucx_setup(xfer_endpoint *ep, xfer_err *err)
{
	ucx_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->ep = ep;
	s->lfd = s->ctl = s->efd = -1;
	pthread_mutex_init(&s->pool.mu, NULL);
	pthread_cond_init(&s->pool.go, NULL);
	pthread_cond_init(&s->pool.done, NULL);
	char why[256];
	if (!(s->u = xfer_ucp(why, sizeof why))) return xfer_fail(err, XFER_EUNAVAIL, "%s", why);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem == XFER_MEM_CUDA) s->any_cuda = 1;
	if (s->any_cuda && !xfer_cuda(why, sizeof why))
		return xfer_fail(err, XFER_EUNAVAIL, "the manifest has CUDA tensors but %s", why);
	read_boot_id(s->boot_here);
	s->nstripes = ep->cfg.p2p.streams < MAX_STRIPES ? ep->cfg.p2p.streams : MAX_STRIPES;
	if (ep->cfg.role == XFER_RECEIVER) {
		s->direct = !ep->cfg.keep_previous && !s->any_cuda;
		if (ep->shared_lfd >= 0) {
			s->lfd = ep->shared_lfd;
		} else {
			s->lfd_own = 1;
			if ((s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err)) < 0) return -1;
		}
	} else {
		if (xfer_chunks_make(ep, ep->cfg.bucket_bytes, &s->chunks, &s->nchunks, err) != 0) return -1;
		s->bucket_bytes = ep->cfg.bucket_bytes;
		if (ep->cfg.p2p.port <= 0 || ep->cfg.p2p.port > 65535)
			return xfer_fail(err, XFER_EINVAL, "p2p sender needs the receiver's port (cfg.p2p.port)");
		if (s->any_cuda) {
			const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
			s->lslot_bytes = xfer_chunk_piece(s->bucket_bytes);
			if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->lslot, s->lslot_bytes), "cudaMallocHost", err) != 0)
				return -1;
		}
	}
	return 0;
}

static void ucx_abort(xfer_endpoint *ep)
{
	ucx_state *s = ep->impl;
	if (!s) return;
	if (s->ctl >= 0) shutdown(s->ctl, SHUT_RDWR);
	if (s->lfd_own && s->lfd >= 0 && !ep->keep_listener) shutdown(s->lfd, SHUT_RDWR);
}

static int ucx_connected(const xfer_endpoint *ep)
{
	const ucx_state *s = ep->impl;
	return s && s->connected;
}

int xfer_ucx_fell_back(const xfer_endpoint *ep, char *why, size_t n)
{
	const ucx_state *s = ep && ep->ops == &xfer_ucx_ops ? ep->impl : NULL;
	if (!s || !s->fallback) return 0;
	snprintf(why, n, "%s", s->fallback_why);
	return 1;
}

/* ---- sender ---- */

static void ep_failed(void *arg, ucp_ep_h uep, ucs_status_t st)
{
	(void)uep;
	atomic_store(&((ucx_state *)arg)->peer_failed, st == UCS_OK ? UCS_ERR_ENDPOINT_TIMEOUT : st);
}

/* The receiver's landing regions: its slots or its tensors, with their rkeys. */
static int read_regions(xfer_endpoint *ep, ucx_state *s, const ureply *r, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	unsigned char *blob = malloc(MAX_BLOB);
	if (!blob) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	s->rg = calloc(r->nregions, sizeof *s->rg);
	if (!s->rg) { free(blob); return xfer_fail(err, XFER_ENOMEM, "out of memory"); }
	s->nrg = r->nregions;
	s->remote_direct = (int)r->direct;
	uint64_t piece = xfer_chunk_piece(s->bucket_bytes);
	for (uint32_t i = 0; i < r->nregions; i++) {
		uregion g;
		if (xfer_sock_recv(s->ctl, &g, sizeof g, "regions", "receiver", to, err) != 0) goto err;
		uint64_t want = r->direct ? m->t[i].nbytes : piece;
		if (g.rkey_len > MAX_BLOB || (r->direct ? g.len != want : g.len < want) || (g.len && !g.rkey_len)) {
			xfer_fail(err, XFER_EFORMAT, "the receiver's landing region %u (%llu bytes, key %u bytes) does not fit "
				  "%llu bytes", i, (unsigned long long)g.len, g.rkey_len, (unsigned long long)want);
			goto err;
		}
		if (xfer_sock_recv(s->ctl, blob, g.rkey_len, "rkey", "receiver", to, err) != 0) goto err;
		s->rg[i].addr = g.addr;
		s->rg[i].len = g.len;
		if (!g.len) continue;
		ucs_status_t st = s->u->ucp_ep_rkey_unpack(s->uep, blob, &s->rg[i].rkey);
		if (st != UCS_OK) {
			ucx_fail(s, err, XFER_EFORMAT, st, "the receiver's rkey");
			goto err;
		}
	}
	free(blob);
	return 0;
err:
	free(blob);
	return -1;
}

static int sender_connect(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	int to = ep->cfg.timeout_ms;
	size_t dlen;
	char *desc = xfer_manifest_describe(ep->m, &dlen), *why = NULL;
	void *addr = NULL;
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	uhello h = { .flags = ep->p2p_auto ? F_AUTO : 0, .kinds = (uint32_t)s->kinds, .nstripes = (uint32_t)s->nstripes,
		     .bucket_bytes = s->bucket_bytes, .manifest_len = dlen };
	read_boot_id(h.boot_id);
	gethostname(h.host, sizeof h.host - 1);
	xfer_ucx_hello_pack(&h, (unsigned char *)&h);
	s->ctl = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
	if (s->ctl < 0) goto err;
	struct iovec v[2] = { { &h, sizeof h }, { desc, dlen } };
	if (xfer_sock_sendv(s->ctl, v, 2, "hello", "receiver", to, err) != 0) goto err;
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	ureply r;
	if (xfer_sock_recv(s->ctl, &r, sizeof r, "reply", "receiver", to, err) != 0) goto err;
	if (memcmp(r.magic, "SKU1", 4) != 0 || r.mode > MODE_TCP || r.why_len > 1024 || r.addr_len > MAX_BLOB ||
	    r.nregions != (r.direct ? ep->m->n : 2)) {
		xfer_fail(err, XFER_EFORMAT, "malformed reply from the receiver (not p2p-ucx?)");
		goto err;
	}
	why = calloc(1, r.why_len + 1);
	addr = malloc(r.addr_len ? r.addr_len : 1);
	if (!why || !addr) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, why, r.why_len, "reply", "receiver", to, err) != 0) goto err;
	if (r.mode == MODE_TCP) {
		s->fallback = 1;
		snprintf(s->fallback_why, sizeof s->fallback_why, "%s", why);
		xfer_fail(err, XFER_EUNAVAIL, "the receiver chose p2p-tcp: %s", why);
		goto err;
	}
	if (xfer_sock_recv(s->ctl, addr, r.addr_len, "worker address", "receiver", to, err) != 0) goto err;
	ucp_ep_params_t p = {
		.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.address = addr,
		.err_mode = r.same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = { .cb = ep_failed, .arg = s },
	};
	ucs_status_t st = u->ucp_ep_create(s->w, &p, &s->uep);
	if (st != UCS_OK) {
		ucx_fail(s, err, XFER_EUNAVAIL, st, "no UCX endpoint to the receiver (UCX_TLS on both ends?)");
		s->uep = NULL;
		goto err;
	}
	if (read_regions(ep, s, &r, err) != 0) goto err;
	char lanes[256];
	xfer_ucp_ep_lanes(u, s->uep, lanes, sizeof lanes);
	snprintf(ep->note, sizeof ep->note, "%s%s%s (UCX %s)", why, *why ? "; " : "", lanes, u->ucp_get_version_string());
	free(desc);
	free(why);
	free(addr);
	s->connected = 1;
	return 0;
err:
	free(desc);
	free(why);
	free(addr);
	close_session(s);
	return -1;
}

/* Reads what the receiver sends during a version: a credit (returns 1 with
 * its chunk), its final OK (0), or its error (-1). */
static int read_answer(ucx_state *s, uint64_t *credit, xfer_err *err)
{
	int to = s->ep->cfg.timeout_ms;
	uint32_t h[2];
	if (wait_for(s, NULL, s->ctl, "answer", "receiver", err) != 0) return -1;
	if (xfer_sock_recv(s->ctl, h, sizeof h, "answer", "receiver", to, err) != 0) return -1;
	if (h[0] == CREDIT) {
		*credit = h[1];
		return 1;
	}
	return xfer_sock_status_rest(s->ctl, h, "receiver", to, err);
}

/* Waits for the credit of chunk k (in order); next counts those seen. */
static int wait_credit(ucx_state *s, uint64_t k, uint64_t *next, xfer_err *err)
{
	while (*next <= k) {
		uint64_t c = 0;
		int r = read_answer(s, &c, err);
		if (r < 0) return -1;
		if (r == 0 || c != (*next & 0xffffffffu))
			return xfer_fail(err, XFER_EFORMAT, "the receiver answered out of turn (credit %llu, expected %llu)",
					 (unsigned long long)c, (unsigned long long)*next);
		(*next)++;
	}
	return 0;
}

/* Puts chunk k from its source (the tensors, or the CUDA staging slot)
 * into its landing place; flushed by the caller. */
static int put_chunk(xfer_endpoint *ep, ucx_state *s, size_t k, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	xfer_span c = s->chunks[k];
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	uint64_t a = c.off, b = c.off + c.len;
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && a < b; t++) {
		uint64_t lo = ep->offsets[t], hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		if (hi <= a) continue;
		const void *src = s->lslot ? (const void *)(s->lslot + (a - c.off))
					   : (const void *)((const char *)ep->m->t[t].ptr + (a - lo));
		const remote *r = s->remote_direct ? &s->rg[t] : &s->rg[k % 2];
		uint64_t raddr = s->remote_direct ? r->addr + (a - lo) : r->addr + (a - c.off);
		void *q = u->ucp_put_nbx(s->uep, src, hi - a, raddr, r->rkey, &prm);
		if (UCS_PTR_IS_ERR(q)) return ucx_fail(s, err, XFER_EPEER, UCS_PTR_STATUS(q), "put");
		if (q) u->ucp_request_free(q); /* completion is the flush's */
		a = hi;
	}
	return 0;
}

static int flush_ep(ucx_state *s, const char *what, xfer_err *err)
{
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	void *q = s->u->ucp_ep_flush_nbx(s->uep, &prm);
	if (UCS_PTR_IS_ERR(q)) return ucx_fail(s, err, XFER_EPEER, UCS_PTR_STATUS(q), what);
	return q ? wait_for(s, q, s->ctl, what, "receiver", err) : 0;
}

/* Test hook: one byte of the landing place flipped after the chunk landed. */
static int corrupt_chunk(xfer_endpoint *ep, ucx_state *s, size_t k, xfer_err *err)
{
	long long at = xfer_hooks.corrupt_at - 1;
	xfer_span c = s->chunks[k];
	if (!xfer_hooks.corrupt_at || (uint64_t)at < c.off || (uint64_t)at >= c.off + c.len) return 0;
	size_t t = xfer_tensor_at(ep, (uint64_t)at);
	uint64_t in = (uint64_t)at - ep->offsets[t];
	static unsigned char flipped;
	flipped = s->lslot ? s->lslot[(uint64_t)at - c.off] : ((const unsigned char *)ep->m->t[t].ptr)[in];
	flipped ^= 0x40;
	const remote *r = s->remote_direct ? &s->rg[t] : &s->rg[k % 2];
	uint64_t raddr = s->remote_direct ? r->addr + in : r->addr + ((uint64_t)at - c.off);
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	void *q = s->u->ucp_put_nbx(s->uep, &flipped, 1, raddr, r->rkey, &prm);
	if (UCS_PTR_IS_ERR(q)) return ucx_fail(s, err, XFER_EPEER, UCS_PTR_STATUS(q), "put");
	if (q) s->u->ucp_request_free(q);
	return flush_ep(s, "flush", err);
}

/* CUDA tensors: chunk k copied into the pinned staging slot. */
static int stage_chunk(xfer_endpoint *ep, ucx_state *s, size_t k, xfer_err *err)
{
	const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
	xfer_span c = s->chunks[k];
	uint64_t a = c.off, b = c.off + c.len;
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && a < b; t++) {
		uint64_t lo = ep->offsets[t], hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		if (hi <= a) continue;
		if (xfer_cuda_copy(cu, s->lslot + (a - c.off), XFER_MEM_HOST, (const char *)ep->m->t[t].ptr + (a - lo),
				   ep->m->t[t].mem, hi - a, err) != 0)
			return -1;
		a = hi;
	}
	return 0;
}

static int ucx_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	ucx_state *s = ep->impl;
	int to = ep->cfg.timeout_ms;
	uint64_t credits = 0;
	s->fallback = 0;
	if (ucx_start(ep, s, err) != 0) return -1;
	if (!s->connected && sender_connect(ep, s, err) != 0) return -1;
	if (pool_size(s, err) != 0) goto err;
	s->version = v;
	if (xfer_sock_send_vhead(s->ctl, ep, v, err) != 0) goto err;
	for (size_t k = 0; k < s->nchunks; k++) {
		if (s->lslot && stage_chunk(ep, s, k, err) != 0) goto err;
		pool_start(s, k); /* hash while the chunk is put */
		xfer_err perr;
		int bad = 0;
		if (!s->remote_direct && k >= 2) bad = wait_credit(s, k - 2, &credits, err);
		if (!bad) bad = put_chunk(ep, s, k, err) || flush_ep(s, "flush", err) || corrupt_chunk(ep, s, k, err);
		if (pool_wait(s, &perr) != 0 && !bad) {
			*err = perr;
			bad = 1;
		}
		if (bad) goto err;
		uready r = { .nstripes = (uint32_t)s->nstripes, .version = v, .chunk = k };
		memcpy(r.magic, "SKR1", 4);
		struct iovec iv[2] = { { &r, sizeof r }, { s->sums, (size_t)s->nstripes * sizeof s->sums[0] } };
		if (xfer_sock_sendv(s->ctl, iv, 2, "ready", "receiver", to, err) != 0) goto err;
		/* test hook: the process dies once chunk k is announced */
		if (xfer_hooks.die_after_bucket && k + 1 == (size_t)xfer_hooks.die_after_bucket) _exit(3);
	}
	for (;;) { /* the credits still due, then the receiver's verdict */
		uint64_t c;
		int r = read_answer(s, &c, err);
		if (r < 0) goto err;
		if (r == 0) break;
		credits++;
	}
	ep->stats.bytes_moved = ep->m->bytes;
	ep->stats.staging_peak = s->lslot_bytes;
	return 0;
err:
	if (err->code != XFER_EPEER || !strstr(err->msg, "reported")) {
		/* the receiver may have said why (a checksum, its watchdog) */
		xfer_err peer = { 0 };
		int pto = to < 1000 ? to : 1000;
		uint32_t hh[2];
		while (s->ctl >= 0 && err->code != XFER_ETIMEOUT && xfer_sock_wait(s->ctl, pto, &peer) == 0 &&
		       xfer_sock_recv(s->ctl, hh, sizeof hh, "answer", "receiver", pto, &peer) == 0) {
			if (hh[0] == CREDIT) continue;
			if (xfer_sock_status_rest(s->ctl, hh, "receiver", pto, &peer) != 0 && strstr(peer.msg, "reported"))
				*err = peer;
			break;
		}
	}
	close_session(s);
	return -1;
}

/* ---- receiver ---- */

/* Maps the landing memory: two slots of half a bucket, or the tensors. */
static int map_landing(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	if (s->direct) {
		if (s->tensor_mh) return 0;
		if (!(s->tensor_mh = calloc(ep->m->n + 1, sizeof *s->tensor_mh)))
			return xfer_fail(err, XFER_ENOMEM, "out of memory");
		for (size_t t = 0; t < ep->m->n; t++) {
			if (!ep->m->t[t].nbytes) continue;
			ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
						    .address = ep->m->t[t].ptr, .length = ep->m->t[t].nbytes };
			ucs_status_t st = u->ucp_mem_map(s->ctx, &mp, &s->tensor_mh[t]);
			if (st != UCS_OK) return ucx_fail(s, err, XFER_EIO, st, "mapping a tensor");
		}
		return 0;
	}
	uint64_t want = xfer_chunk_piece(s->bucket_bytes);
	if (s->slot[0] && s->slot_bytes == want) return 0;
	unmap_all(s);
	const xfer_cuda_api *cu = s->any_cuda ? xfer_cuda(NULL, 0) : NULL;
	for (int i = 0; i < 2; i++) {
		ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
					    .length = want };
		if (cu) {
			/* pinned, for the copies to the device */
			if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->slot[i], want), "cudaMallocHost", err) != 0) return -1;
			s->slot_pinned = 1;
			mp.address = s->slot[i];
		} else {
			/* UCX allocates: shared memory (sysv, posix) a sender on
			 * this host attaches and writes with memcpy; mapped
			 * memory of ours could only take emulated puts there
			 * (UCX 1.13 puts need a transport with short and bcopy
			 * puts, which cma lacks) */
			mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
			mp.flags = UCP_MEM_MAP_ALLOCATE;
		}
		ucs_status_t st = u->ucp_mem_map(s->ctx, &mp, &s->slot_mh[i]);
		if (st != UCS_OK) return ucx_fail(s, err, XFER_EIO, st, "mapping a staging slot");
		if (!cu) {
			ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH };
			if ((st = u->ucp_mem_query(s->slot_mh[i], &ma)) != UCS_OK) return ucx_fail(s, err, XFER_EIO, st, "slot");
			if (ma.length < want) return xfer_fail(err, XFER_EIO, "UCX gave a staging slot of %zu bytes", ma.length);
			s->slot[i] = ma.address;
		}
	}
	s->slot_bytes = want;
	return 0;
}

/* p2p chooser on both ends: UCX when both offer RDMA, or both are on one
 * host and offer shared memory; else p2p-tcp. */
static int decide(const ucx_state *s, const uhello *h, char *why, size_t n)
{
	int theirs = (int)h->kinds, same = h->boot_id[0] && !strncmp(h->boot_id, s->boot_here, sizeof h->boot_id);
	if ((s->kinds & theirs) & XFER_UCX_RDMA) {
		snprintf(why, n, "p2p-ucx over RDMA (UCX offers it on both ends)");
		return MODE_UCX;
	}
	if (same && (s->kinds & theirs & XFER_UCX_SHM)) {
		snprintf(why, n, "p2p-ucx over shared memory (both ends on host %.63s)", h->host);
		return MODE_UCX;
	}
	snprintf(why, n, "p2p-tcp: no RDMA transport in UCX %s%s", !(s->kinds & XFER_UCX_RDMA) ? "here" : "on the sender",
		 same ? " and no shared memory transport on both ends (UCX_TLS?)" : ", and the ends are on different hosts");
	return MODE_TCP;
}

static int receiver_accept(xfer_endpoint *ep, ucx_state *s, int wait_ms, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	int to = ep->cfg.timeout_ms;
	char *desc = NULL, why[256] = "";
	void **tkeys = NULL;
	size_t *tklen = NULL, nkeys = 0;
	uhello h;
	if (ep->pending_ctl >= 0) {
		s->ctl = ep->pending_ctl;
		ep->pending_ctl = -1;
	} else if ((s->ctl = xfer_sock_accept(s->lfd, wait_ms, to, err)) < 0) {
		if (err->code == XFER_ETIMEOUT) err->code = XFER_ENOVERSION;
		return -1;
	}
	unsigned char raw[sizeof h];
	if (xfer_sock_recv(s->ctl, raw, sizeof raw, "hello", "sender", to, err) != 0) goto err;
	if (xfer_ucx_hello_parse(raw, sizeof raw, &h, err) != 0) {
		xfer_fail(err, XFER_EFORMAT, "the first connection is not a skein p2p-ucx sender's control stream");
		goto err;
	}
	if (!(desc = malloc(h.manifest_len + 1))) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, desc, h.manifest_len, "manifest", "sender", to, err) != 0) goto err;
	s->nstripes = (int)h.nstripes;
	s->bucket_bytes = h.bucket_bytes;
	xfer_err st = { 0 };
	int mode = MODE_UCX;
	free(s->chunks);
	if (xfer_chunk_plan(ep->m, ep->offsets, h.bucket_bytes, desc, h.manifest_len, &s->chunks, &s->nchunks, &st) ==
	    0)
		st.code = XFER_OK;
	if (st.code != XFER_OK) xfer_err_prefix(&st, "sender's manifest vs receiver's");
	else if (ep->p2p_auto && (h.flags & F_AUTO)) mode = decide(s, &h, why, sizeof why);
	if (st.code == XFER_OK && mode == MODE_UCX && map_landing(ep, s, &st) != 0)
		xfer_err_prefix(&st, "p2p-ucx receiver");
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	/* the reply: mode and why, worker address, landing regions and keys */
	nkeys = s->direct ? ep->m->n : 2;
	ureply r = { .mode = (uint32_t)mode, .direct = (uint32_t)s->direct, .nregions = (uint32_t)nkeys,
		     .addr_len = (uint32_t)s->addr_len, .why_len = (uint32_t)strlen(why), .slot_bytes = s->slot_bytes,
		     .same_host = h.boot_id[0] && !strncmp(h.boot_id, s->boot_here, sizeof h.boot_id) };
	memcpy(r.magic, "SKU1", 4);
	if (mode == MODE_TCP) {
		struct iovec v[2] = { { &r, sizeof r }, { why, r.why_len } };
		xfer_sock_sendv(s->ctl, v, 2, "reply", "sender", to, NULL);
		s->fallback = 1;
		snprintf(s->fallback_why, sizeof s->fallback_why, "%s", why);
		xfer_fail(err, XFER_EUNAVAIL, "%s", why);
		goto err;
	}
	struct iovec v[3] = { { &r, sizeof r }, { why, r.why_len }, { s->addr, s->addr_len } };
	if (xfer_sock_sendv(s->ctl, v, 3, "reply", "sender", to, err) != 0) goto err;
	tkeys = calloc(nkeys, sizeof *tkeys);
	tklen = calloc(nkeys, sizeof *tklen);
	if (!tkeys || !tklen) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	for (size_t i = 0; i < nkeys; i++) {
		ucp_mem_h mh = s->direct ? s->tensor_mh[i] : s->slot_mh[i];
		uregion g = { .addr = (uint64_t)(uintptr_t)(s->direct ? ep->m->t[i].ptr : s->slot[i]),
			      .len = s->direct ? ep->m->t[i].nbytes : s->slot_bytes };
		if (mh) {
			ucs_status_t ks = u->ucp_rkey_pack(s->ctx, mh, &tkeys[i], &tklen[i]);
			if (ks != UCS_OK) { ucx_fail(s, err, XFER_EIO, ks, "packing a key"); goto err; }
		} else {
			g.len = 0;
		}
		g.rkey_len = (uint32_t)tklen[i];
		struct iovec gv[2] = { { &g, sizeof g }, { tkeys[i], tklen[i] } };
		if (xfer_sock_sendv(s->ctl, gv, 2, "regions", "sender", to, err) != 0) goto err;
	}
	snprintf(ep->note, sizeof ep->note, "%s%sUCX %s offers %s", why, *why ? "; " : "", u->ucp_get_version_string(),
		 s->tls);
	s->connected = 1;
	goto out;
err:
	close_session(s);
out:
	for (size_t i = 0; tkeys && i < nkeys; i++)
		if (tkeys[i]) u->ucp_rkey_buffer_release(tkeys[i]);
	free(tkeys);
	free(tklen);
	free(desc);
	return s->connected ? 0 : -1;
}

static int ucx_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	ucx_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms, failed = 0;
	double t0 = xfer_now();
	int journaled = ep->stats.version && !s->direct && ep->cfg.keep_previous; /* as place_chunk chooses */
	s->fallback = 0;
	if (ucx_start(ep, s, err) != 0) return -1;
	if (!s->connected && receiver_accept(ep, s, wait_ms, err) != 0) return -1;
	uint64_t hv = 0;
	int got = xfer_sock_recv_vhead(s->ctl, ep, wait_ms, t0, &hv, err);
	if (got > 0) return -1; /* no version yet: the session stays */
	if (got < 0) goto err;
	if (ep->target && hv != ep->target) {
		xfer_fail(err, XFER_EINVAL, "the sender sends version %llu, this receiver was told to receive %llu",
			  (unsigned long long)hv, (unsigned long long)ep->target);
		goto err;
	}
	s->version = hv;
	if (pool_size(s, err) != 0 ||
	    xfer_stripe_journals(ep, s->j, MAX_STRIPES, s->direct || !ep->cfg.keep_previous ? 0 : s->nstripes,
				 s->bucket_bytes, s->any_cuda, err) != 0)
		goto err;
	for (size_t k = 0; k < s->nchunks && !failed; k++) {
		uready r;
		if (wait_for(s, NULL, s->ctl, "chunk", "sender", err) != 0 ||
		    xfer_sock_recv(s->ctl, &r, sizeof r, "ready", "sender", to, err) != 0) {
			failed = 1;
			break;
		}
		if (memcmp(r.magic, "SKR1", 4) != 0 || r.nstripes != (uint32_t)s->nstripes || r.version != hv ||
		    r.chunk != k) {
			xfer_fail(err, XFER_EFORMAT, "unexpected message from the sender (chunk %llu of version %llu)",
				  (unsigned long long)r.chunk, (unsigned long long)r.version);
			failed = 1;
			break;
		}
		if (xfer_sock_recv(s->ctl, s->sums, (size_t)s->nstripes * sizeof s->sums[0], "ready", "sender", to, err) != 0) {
			failed = 1;
			break;
		}
		pool_start(s, k);
		if (pool_wait(s, err) != 0) {
			failed = 1;
			break;
		}
		if (!s->direct) {
			uint32_t c[2] = { CREDIT, (uint32_t)k };
			if (xfer_sock_send(s->ctl, c, sizeof c, "credit", "sender", to, err) != 0) failed = 1;
		}
		if (xfer_hooks.stop_after_bucket && k + 1 == (size_t)xfer_hooks.stop_after_bucket) raise(SIGSTOP);
	}
	xfer_stripe_journals_stats(ep, s->j, MAX_STRIPES);
	if (failed) {
		xfer_stripe_journals_undo(ep, s->j, MAX_STRIPES, err);
		xfer_sock_send_status(s->ctl, err, to < 1000 ? to : 1000, NULL);
		goto err;
	}
	if (xfer_sock_send_status(s->ctl, NULL, to, err) != 0) goto err;
	ep->stats.bytes_moved = m->bytes;
	ep->stats.staging_peak = s->direct ? 0 : 2 * s->slot_bytes;
	ep->undo_ready = journaled && s->j[0];
	*version = hv;
	return 0;
err:
	close_session(s);
	return -1;
}

static int ucx_rollback(xfer_endpoint *ep, xfer_err *err)
{
	ucx_state *s = ep->impl;
	return xfer_stripe_journals_rollback(ep, s->j, MAX_STRIPES, err);
}

#else /* built without UCX's headers: p2p-ucx says so */

static int ucx_probe(char *why, size_t n) { return xfer_ucx_offers(NULL, NULL, 0, why, n); }

static int ucx_setup(xfer_endpoint *ep, xfer_err *err)
{
	char why[256];
	(void)ep;
	ucx_probe(why, sizeof why);
	return xfer_fail(err, XFER_EUNAVAIL, "%s", why);
}

static int ucx_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	(void)ep;
	(void)v;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-ucx: not built");
}

static int ucx_receive(xfer_endpoint *ep, int wait_ms, uint64_t *v, xfer_err *err)
{
	(void)ep;
	(void)wait_ms;
	(void)v;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-ucx: not built");
}

static void ucx_abort(xfer_endpoint *ep) { (void)ep; }
static void ucx_teardown(xfer_endpoint *ep) { (void)ep; }
static int ucx_connected(const xfer_endpoint *ep) { (void)ep; return 0; }
static int ucx_rollback(xfer_endpoint *ep, xfer_err *err)
{
	(void)ep;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-ucx: not built");
}

int xfer_ucx_fell_back(const xfer_endpoint *ep, char *why, size_t n)
{
	(void)ep;
	(void)why;
	(void)n;
	return 0;
}

#endif

const xfer_path_ops xfer_ucx_ops = {
	.name = "p2p-ucx",
	.probe = ucx_probe,
	.setup = ucx_setup,
	.send = ucx_send,
	.receive = ucx_receive,
	.abort = ucx_abort,
	.teardown = ucx_teardown,
	.connected = ucx_connected,
	.rollback = ucx_rollback,
};
