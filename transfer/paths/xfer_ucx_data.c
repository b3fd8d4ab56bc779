/* transfer/paths/xfer_ucx_data.c: p2p-ucx's data path, per version and chunk.
 *
 * The session (xfer_ucx.c) has connected the lanes and exchanged the
 * landing regions; this file moves a version: the sender's lanes put and
 * hash their stripes and the control thread sends "ready" per chunk; the
 * receiver's lanes check and place them and its control thread sends a
 * credit per chunk, then the verdict.
 *
 * Lanes: each stripe of a chunk has its lane on both ends, a thread with
 * its own UCX worker and connection (p2p-tcp's streams, in UCX): a sender
 * lane puts its stripe block by block and hashes each block just after its
 * put, while it is in cache; a receiver lane hashes each block of its
 * stripe and copies it into the tensors through the stripe's journal in
 * the same pass, then compares (as p2p-tcp's streams place before the
 * check; a mismatch puts the previous version back), and between blocks
 * and jobs it keeps its worker progressing.  One thread alone could not
 * keep up: over shared memory the puts are memcpy, over TCP each lane is a
 * connection.  Lanes do not wait for each other: each end posts chunk k to
 * its lanes and then waits for chunk k - 1 (pool_post, pool_wait), so a
 * lane goes on with the next chunk while the ready and credit messages
 * cross and a late lane catches up.
 *
 * Chunks and slots (slot_plan): an eighth of a bucket (512 KiB, two tree
 * chunks, to 8 MiB; cut on tree-chunk boundaries, as are the stripes), in a
 * ring of at most 8 slots (64 MiB): small enough that the receiver reads
 * what the sender just wrote from the last-level cache, not from memory
 * (on the H200 host, with the mapped slots, the receiver's hashing of
 * 2 GiB fell from 0.29 to 0.20 core seconds), while up to 8 chunks are in
 * flight.
 *   keep_previous (default): chunk k lands in slot k % nslots; the sender
 *     waits for the credit of chunk k - nslots before reusing it.  Peak
 *     extra memory: the ring of slots plus journals held to half a bucket,
 *     under p2p-tcp's two buckets.  CUDA tensors: each stripe is checked first, then
 *     copied to the device through its journal (xfer_journal_copy_device).
 *   direct (keep_previous = 0, host tensors): the landing regions are the
 *     tensors themselves, mapped once; no credits, zero copies, zero extra
 *     memory; a failure leaves them partly updated.
 *
 */
#include "transfer/core/xfer_sock.h"
#include "transfer/paths/xfer_ucx.h"

#if XFER_HAVE_UCX

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const ph_name[PH_N] = { "put", "hash", "flush", "place", "lane", "credit", "ready", "run", "answer" };

/* Profile: now, or 0 when off; ph_add adds the time since t0 to phase i. */
static inline double ph_now(const ucx_state *s) { return s->prof ? xfer_now() : 0; }
static inline void ph_add(const ucx_state *s, double *ph, int i, double t0)
{
	if (s->prof) ph[i] += xfer_now() - t0;
}

static void ph_report(ucx_state *s, const char *who, double wall)
{
	if (!s->prof) return;
	double sum[PH_N] = { 0 };
	for (int i = 0; i < s->nstripes; i++)
		for (int p = 0; p < PH_N; p++) sum[p] += s->lane[i].ph[p];
	char line[512];
	int n = snprintf(line, sizeof line, "skein: p2p-ucx %s profile v%llu: wall %.3f s, %zu chunks, %d lanes; lanes (sum):",
			 who, (unsigned long long)s->version, wall, s->nchunks, s->nstripes);
	for (int p = 0; p < PH_N && n < (int)sizeof line; p++)
		if (sum[p] > 0) n += snprintf(line + n, sizeof line - (size_t)n, " %s %.3f", ph_name[p], sum[p]);
	if (n < (int)sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, "; control:");
	for (int p = 0; p < PH_N && n < (int)sizeof line; p++)
		if (s->ph[p] > 0) n += snprintf(line + n, sizeof line - (size_t)n, " %s %.3f", ph_name[p], s->ph[p]);
	fprintf(stderr, "%s\n", line);
	memset(s->ph, 0, sizeof s->ph);
	for (int i = 0; i < MAX_STRIPES; i++) memset(s->lane[i].ph, 0, sizeof s->lane[i].ph);
}

/* One UCX progress call on a lane; counted for the control waits. */
static unsigned lane_progress(ucx_state *s, lane *l)
{
	unsigned n = s->u->ucp_worker_progress(l->w);
	if (n) atomic_fetch_add_explicit(&s->progressed, 1, memory_order_relaxed);
	return n;
}

/* Makes UCX progress on lane l until req completes (l and req set), or,
 * without them, waits until fd is readable.  Sleeps on the worker's event
 * fd when idle; gives up after timeout_ms without progress (any lane's), on
 * xfer_abort, when UCX reports the peer failed or, with req, when the peer
 * closes fd. */
static int wait_for(ucx_state *s, lane *l, void *req, int fd, const char *what, const char *peer, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	xfer_endpoint *ep = s->ep;
	int to = ep->cfg.timeout_ms, idle = 0, watch = fd, rc = 0;
	double deadline = xfer_now() + to / 1e3;
	unsigned seen = atomic_load(&s->progressed);
	for (;;) {
		if (req) {
			ucs_status_t st = u->ucp_request_check_status(req);
			if (st != UCS_INPROGRESS) {
				u->ucp_request_free(req);
				if (st == UCS_OK) return 0;
				return xfer_fail(err, XFER_EPEER, "%s: UCX: %s (the %s failed or went away)", what,
						 u->ucs_status_string(st), peer);
			}
			/* UCX's verdict on the peer counts while puts are in
			 * flight; when only the control stream is awaited, that
			 * stream decides */
			ucs_status_t pf = (ucs_status_t)atomic_load(&l->peer_failed);
			if (pf != UCS_OK) {
				rc = xfer_fail(err, XFER_EPEER, "%s: UCX reports the %s failed: %s", what, peer,
					       u->ucs_status_string(pf));
				break;
			}
		}
		if (xfer_check_aborted(ep, err) != 0) {
			rc = -1;
			break;
		}
		if (req && lane_progress(s, l)) {
			idle = 0;
			deadline = xfer_now() + to / 1e3;
			continue;
		}
		struct pollfd p[2] = { { .fd = watch, .events = POLLIN }, { .fd = req ? l->efd : -1, .events = POLLIN } };
		if (!req && poll(p, 1, 0) > 0) return 0;
		if (req && ++idle < IDLE_SPINS) continue;
		idle = 0;
		if (req && u->ucp_worker_arm(l->w) == UCS_ERR_BUSY) continue;
		unsigned now = atomic_load(&s->progressed);
		if (now != seen) { /* the lanes are moving data: not stuck */
			seen = now;
			deadline = xfer_now() + to / 1e3;
		}
		double left = deadline - xfer_now();
		if (left <= 0) {
			rc = xfer_fail(err, XFER_ETIMEOUT, "%s: the %s made no progress for %d ms (watchdog)", what, peer, to);
			break;
		}
		int ms = left * 1e3 + 1 < POLL_SLICE_MS ? (int)(left * 1e3) + 1 : POLL_SLICE_MS;
		int r = poll(p, 2, req ? UCX_NAP_MS : ms);
		if (r < 0 && errno != EINTR) {
			rc = xfer_fail_errno(err, XFER_EIO, "poll");
			break;
		}
		if (r > 0 && watch >= 0 && p[0].revents) {
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

/* ---- the lanes' threads ---- */

static int stripe_job(ucx_state *s, lane *l, size_t k, xfer_err *err);

/* A receiver lane between jobs of a version keeps its worker moving (puts
 * that UCX emulates over active messages, as over TCP, land only while the
 * receiver's worker progresses), sleeping on its event fd and its wake fd. */
static void idle_progress(ucx_state *s, lane *l)
{
	for (int i = 0; i < IDLE_SPINS; i++)
		if (lane_progress(s, l)) return;
	if (s->u->ucp_worker_arm(l->w) != UCS_OK) return;
	struct pollfd q[2] = { { .fd = l->efd, .events = POLLIN }, { .fd = l->wake, .events = POLLIN } };
	if (poll(q, 2, UCX_NAP_MS) > 0 && q[1].revents) {
		uint64_t x;
		if (read(l->wake, &x, sizeof x) < 0) { /* drained either way */ }
	}
}

static void *lane_main(void *arg)
{
	lane *l = arg;
	ucx_state *s = l->s;
	pool *p = &s->pool;
	int receiver = s->ep->cfg.role == XFER_RECEIVER;
	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		if (l->next < p->posted && l->idx < s->nstripes) {
			size_t k = l->next;
			int rc = 0;
			xfer_err e = { 0 };
			if (!p->failed) { /* after a failure the lanes only count the chunks posted */
				pthread_mutex_unlock(&p->mu);
				double t0 = ph_now(s);
				rc = stripe_job(s, l, k, &e);
				ph_add(s, l->ph, PH_LANE, t0);
				pthread_mutex_lock(&p->mu);
			}
			l->next++;
			if (rc != 0 && !p->failed) {
				p->failed = 1;
				p->err = e;
			}
			p->done[k % RING]++;
			pthread_cond_broadcast(&p->done_cv);
		} else if (receiver && p->active) {
			p->busy++;
			pthread_mutex_unlock(&p->mu);
			idle_progress(s, l);
			pthread_mutex_lock(&p->mu);
			if (--p->busy == 0) pthread_cond_broadcast(&p->done_cv);
		} else {
			pthread_cond_wait(&p->go, &p->mu);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void wake_lanes(ucx_state *s)
{
	uint64_t one = 1;
	for (int i = 0; i < s->pool.nth; i++)
		if (write(s->lane[i].wake, &one, sizeof one) < 0) { /* a full counter wakes it as well */ }
}

void xfer_ucx_pool_stop(ucx_state *s)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	p->active = 0;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	wake_lanes(s);
	for (int i = 0; i < p->nth; i++) pthread_join(s->lane[i].th, NULL);
	p->nth = 0;
	p->stop = 0;
}

/* Receiver: lanes make UCX progress between jobs (on) or sleep (off; then
 * they leave their workers alone, for the caller to use). */
static void pool_active(ucx_state *s, int on)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	p->active = on;
	pthread_cond_broadcast(&p->go);
	if (!on) {
		pthread_mutex_unlock(&p->mu);
		wake_lanes(s);
		pthread_mutex_lock(&p->mu);
		while (p->busy) pthread_cond_wait(&p->done_cv, &p->mu);
	}
	pthread_mutex_unlock(&p->mu);
}

/* One thread per lane in use. */
static int pool_size(ucx_state *s, xfer_err *err)
{
	if (s->pool.nth == s->nstripes) return 0;
	xfer_ucx_pool_stop(s);
	for (int i = 0; i < s->nstripes; i++) {
		s->lane[i].next = s->pool.posted;
		if (pthread_create(&s->lane[i].th, NULL, lane_main, &s->lane[i]) != 0)
			return xfer_fail(err, XFER_EIO, "cannot start lane thread %d", i);
		s->pool.nth++;
	}
	return 0;
}

/* A version's first chunk is 0 (the lanes are idle). */
static void pool_begin(ucx_state *s)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	p->posted = 0;
	p->failed = 0;
	memset(p->done, 0, sizeof p->done);
	for (int i = 0; i < MAX_STRIPES; i++) s->lane[i].next = 0;
	pthread_mutex_unlock(&p->mu);
}

/* Chunk k goes to the lanes; the caller waits for chunk k - 1 before it
 * posts chunk k + 1. */
static void pool_post(ucx_state *s, size_t k)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	p->posted = k + 1;
	p->done[k % RING] = 0;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	if (p->active) wake_lanes(s);
}

/* Waits until every lane finished chunk k; after a failure (any chunk's),
 * until the lanes are done with every chunk posted, and returns its error. */
static int pool_wait(ucx_state *s, size_t k, xfer_err *err)
{
	pool *p = &s->pool;
	pthread_mutex_lock(&p->mu);
	while (p->done[k % RING] < s->nstripes) pthread_cond_wait(&p->done_cv, &p->mu);
	int failed = p->failed;
	if (failed) {
		for (int i = 0; i < s->nstripes; i++)
			while (s->lane[i].next < p->posted) pthread_cond_wait(&p->done_cv, &p->mu);
		*err = p->err;
	}
	pthread_mutex_unlock(&p->mu);
	return failed ? -1 : 0;
}

/* After an error of the caller's own: the lanes finish what was posted. */
static void pool_drain(ucx_state *s)
{
	pool *p = &s->pool;
	xfer_err e;
	if (p->posted) pool_wait(s, p->posted - 1, &e);
}

/* ---- a stripe's work ---- */

/* The landing address and key of byte a of chunk k (tensor t holds it). */
static uint64_t remote_at(const ucx_state *s, const lane *l, size_t k, size_t t, uint64_t a, ucp_rkey_h *key)
{
	const xfer_endpoint *ep = s->ep;
	if (s->remote_direct) {
		*key = l->rkey[t];
		return s->raddr[t] + (a - ep->offsets[t]);
	}
	*key = l->rkey[0];
	return s->raddr[0] + (k % (size_t)s->nslots) * s->slot_bytes + (a - s->chunks[k].off);
}

static const unsigned char *tensor_at(const xfer_endpoint *ep, size_t t, uint64_t a)
{
	return (const unsigned char *)ep->m->t[t].ptr + (a - ep->offsets[t]);
}

/* ---- the tree plan: chunks are cut on tree-chunk boundaries (slot_plan),
 * stripes too (tree_stripe_of), so each lane hashes whole tree chunks and
 * both ends compare them one by one, then each tensor's tree sum (as
 * p2p-tcp; the sums are the version's root, xfer_root.c) ---- */

void xfer_ucx_tree_free(ucx_state *s)
{
	free(s->tfirst);
	free(s->hfirst);
	free(s->tend);
	free(s->hash);
	free(s->peer);
	free(s->tsums);
	s->tfirst = s->hfirst = s->hash = s->peer = NULL;
	s->tend = NULL;
	s->tsums = NULL;
}

int xfer_ucx_tree_plan(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	size_t n = m->n, nc = s->nchunks;
	xfer_ucx_tree_free(s);
	s->tfirst = calloc(n + 1, sizeof *s->tfirst);
	s->hfirst = calloc(nc + 1, sizeof *s->hfirst);
	s->tend = calloc(nc + 1, sizeof *s->tend);
	s->tsums = calloc(n + 1, sizeof *s->tsums);
	if (!s->tfirst || !s->hfirst || !s->tend || !s->tsums) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	for (size_t t = 0; t < n; t++) s->tfirst[t + 1] = s->tfirst[t] + xfer_tree_nchunks(m->t[t].nbytes);
	uint64_t total = s->tfirst[n];
	size_t t = 0;
	for (size_t k = 0; k < nc; k++) {
		uint64_t a = s->chunks[k].off, b = a + s->chunks[k].len;
		size_t h = xfer_tensor_at(ep, a);
		s->hfirst[k] = h < n ? s->tfirst[h] + (a - ep->offsets[h] + TREE - 1) / TREE : total;
		while (t < n && ep->offsets[t + 1] <= b) t++;
		s->tend[k + 1] = k + 1 == nc ? n : t;
	}
	s->hfirst[nc] = total;
	s->hash = calloc(total + 1, sizeof *s->hash);
	s->peer = calloc(total + 1, sizeof *s->peer);
	if (!s->hash || !s->peer) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	return 0;
}

/* x rounded down to a tree-chunk boundary of the tensor that holds it, not
 * below lo (a chunk's start, itself a boundary). */
static uint64_t tree_floor(const xfer_endpoint *ep, uint64_t x, uint64_t lo, uint64_t end)
{
	if (x >= end || x <= lo) return x;
	size_t t = xfer_tensor_at(ep, x);
	uint64_t y = ep->offsets[t] + (x - ep->offsets[t]) / TREE * TREE;
	return y > lo ? y : lo;
}

/* Stripe i of chunk c: xfer_stripe_of's, its ends moved down to tree-chunk
 * boundaries (the same on both ends; a stripe may be empty). */
static void tree_stripe_of(const xfer_endpoint *ep, xfer_span c, int nstripes, int i, uint64_t *a, uint64_t *b)
{
	xfer_stripe_of(c, nstripes, i, a, b);
	uint64_t end = c.off + c.len;
	*a = tree_floor(ep, *a, c.off, end);
	*b = tree_floor(ep, *b, c.off, end);
	if (*b < *a) *b = *a;
}

/* The index among all of the tree chunk that starts at x (a boundary). */
static uint64_t tree_index(const xfer_endpoint *ep, const ucx_state *s, size_t t, uint64_t x)
{
	return s->tfirst[t] + (x - ep->offsets[t]) / TREE;
}

/* Receiver: the tree chunk g, just hashed, against the sender's. */
static int tree_check(const ucx_state *s, size_t t, uint64_t g, xfer_err *err)
{
	if (s->hash[g] == s->peer[g]) return 0;
	const xfer_endpoint *ep = s->ep;
	uint64_t at = (g - s->tfirst[t]) * TREE, end = at + TREE < ep->m->t[t].nbytes ? at + TREE : ep->m->t[t].nbytes;
	return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch in its bytes %llu..%llu",
			 (unsigned long long)s->version, ep->m->t[t].name, (unsigned long long)at,
			 (unsigned long long)end);
}

static int flush_lane(ucx_state *s, lane *l, const char *what, xfer_err *err)
{
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	void *q = s->u->ucp_ep_flush_nbx(l->uep, &prm);
	if (UCS_PTR_IS_ERR(q)) return ucx_fail(s, err, XFER_EPEER, UCS_PTR_STATUS(q), what);
	return q ? wait_for(s, l, q, s->ctl, what, "receiver", err) : 0;
}

/* Sender: puts the stripe [a, b) of chunk k block by block, hashing each
 * block just after its put (while it is in cache), then flushes the lane
 * (remote completion). */
static int send_stripe(ucx_state *s, lane *l, size_t k, uint64_t a, uint64_t b, xfer_err *err)
{
	xfer_endpoint *ep = s->ep;
	const xfer_ucp_api *u = s->u;
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && a < b; t++) {
		uint64_t hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		for (; a < hi;) {
			uint64_t n = hi - a < BLOCK ? hi - a : BLOCK;
			const void *src = s->lslot ? (const void *)(s->lslot + (a - s->chunks[k].off)) : tensor_at(ep, t, a);
			ucp_rkey_h key;
			uint64_t raddr = remote_at(s, l, k, t, a, &key);
			double t0 = ph_now(s);
			if (l->rptr) {
				memcpy(l->rptr + (raddr - s->raddr[0]), src, n);
			} else {
				void *q = u->ucp_put_nbx(l->uep, src, n, raddr, key, &prm);
				if (UCS_PTR_IS_ERR(q)) return ucx_fail(s, err, XFER_EPEER, UCS_PTR_STATUS(q), "put to the receiver");
				if (q) u->ucp_request_free(q); /* completion is the flush's */
			}
			ph_add(s, l->ph, PH_PUT, t0);
			t0 = ph_now(s);
			/* a block is one tree chunk: stripes start on their boundaries */
			s->hash[tree_index(ep, s, t, a)] = XXH3_64bits(src, n);
			ph_add(s, l->ph, PH_HASH, t0);
			lane_progress(s, l);
			a += n;
		}
	}
	if (l->rptr) return 0; /* stores, done (the ready message that follows is a system call) */
	double t0 = ph_now(s);
	int rc = flush_lane(s, l, "flush to the receiver", err);
	ph_add(s, l->ph, PH_FLUSH, t0);
	return rc;
}

/* Receiver: hashes the tree chunks of [a, b) (direct: where the puts
 * landed; else in the slot), RBLOCK by RBLOCK, keeping the lane's worker
 * moving, and checks each against the sender's as it ends.  place (host
 * tensors with staging): each block is also copied into the tensors
 * through the stripe's journal while it is in cache, one pass; a mismatch
 * makes the caller put the previous version back (the journal holds every
 * byte this wrote, as p2p-tcp's streams do). */
static int check_landed(ucx_state *s, lane *l, const unsigned char *slot, uint64_t off, uint64_t a, uint64_t b,
			int place, xfer_journal *j, xfer_err *err)
{
	xfer_endpoint *ep = s->ep;
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && a < b; t++) {
		uint64_t hi = ep->offsets[t + 1] > b ? b : ep->offsets[t + 1];
		while (a < hi) {
			uint64_t g = tree_index(ep, s, t, a), te = a + TREE < hi ? a + TREE : hi;
			XXH3_64bits_reset(l->hs);
			for (; a < te;) {
				uint64_t n = te - a < RBLOCK ? te - a : RBLOCK;
				const unsigned char *p = slot ? slot + (a - off) : tensor_at(ep, t, a);
				double t0 = ph_now(s);
				XXH3_64bits_update(l->hs, p, n);
				ph_add(s, l->ph, PH_HASH, t0);
				if (place) {
					t0 = ph_now(s);
					if (xfer_place_stripe(ep, slot, off, a, a + n, j, err) != 0) return -1;
					ph_add(s, l->ph, PH_PLACE, t0);
				}
				lane_progress(s, l);
				a += n;
			}
			s->hash[g] = XXH3_64bits_digest(l->hs);
			if (tree_check(s, t, g, err) != 0) return -1;
		}
	}
	return 0;
}

/* Sender: puts and hashes stripe i of chunk k.  Receiver: checks it and
 * (staged) places it in the tensors. */
static int stripe_job(ucx_state *s, lane *l, size_t k, xfer_err *err)
{
	xfer_endpoint *ep = s->ep;
	xfer_span c = s->chunks[k];
	uint64_t a, b;
	tree_stripe_of(ep, c, s->nstripes, l->idx, &a, &b);
	if (ep->cfg.role == XFER_SENDER) return send_stripe(s, l, k, a, b, err);
	const unsigned char *slot = s->direct ? NULL : s->slots + (k % (size_t)s->nslots) * s->slot_bytes;
	xfer_journal *j = ep->stats.version ? s->j[l->idx] : NULL;
	int placed = slot && !s->any_cuda; /* CUDA tensors: checked first, then copied to the device */
	if (check_landed(s, l, slot, c.off, a, b, placed, j, err) != 0) return -1;
	if (!slot || placed) return 0;
	double t0 = ph_now(s);
	int rc = xfer_place_stripe(ep, slot, c.off, a, b, j, err);
	ph_add(s, l->ph, PH_PLACE, t0);
	return rc;
}

/* ---- sender: a version ---- */

/* Reads what the receiver sends during a version: a credit (returns 1 with
 * its chunk), its final OK (0), or its error (-1). */
static int read_answer(ucx_state *s, uint64_t *credit, xfer_err *err)
{
	int to = s->ep->cfg.timeout_ms;
	uint32_t h[2];
	if (wait_for(s, NULL, NULL, s->ctl, "answer", "receiver", err) != 0) return -1;
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

/* Test hooks, corrupt_at and corrupt_version (the middle byte of that
 * version, as p2p-tcp): one byte of the landing place flipped after the
 * chunk landed and its sums were taken (through lane 0, idle between
 * chunks); the sender's own copy stays right. */
static int corrupting(const xfer_endpoint *ep, const ucx_state *s)
{
	return xfer_hooks.corrupt_at || (xfer_hooks.corrupt_version && xfer_hooks.corrupt_version == s->version &&
					 ep->m->bytes > 0);
}

static int corrupt_chunk(xfer_endpoint *ep, ucx_state *s, size_t k, xfer_err *err)
{
	if (!corrupting(ep, s)) return 0;
	long long at = xfer_hooks.corrupt_at ? xfer_hooks.corrupt_at - 1 : (long long)(ep->m->bytes / 2);
	xfer_span c = s->chunks[k];
	if (at < 0 || (uint64_t)at < c.off || (uint64_t)at >= c.off + c.len) return 0;
	size_t t = xfer_tensor_at(ep, (uint64_t)at);
	lane *l = &s->lane[0];
	static unsigned char flipped;
	flipped = s->lslot ? s->lslot[(uint64_t)at - c.off] : *tensor_at(ep, t, (uint64_t)at);
	flipped ^= 0x40;
	ucp_rkey_h key;
	uint64_t raddr = remote_at(s, l, k, t, (uint64_t)at, &key);
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	void *q = s->u->ucp_put_nbx(l->uep, &flipped, 1, raddr, key, &prm);
	if (UCS_PTR_IS_ERR(q)) return ucx_fail(s, err, XFER_EPEER, UCS_PTR_STATUS(q), "put to the receiver");
	if (q) s->u->ucp_request_free(q);
	return flush_lane(s, l, "flush to the receiver", err);
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

/* Sender: once every lane has put and flushed chunk k, tells the receiver,
 * with the stripes' checksums. */
static int send_ready(xfer_endpoint *ep, ucx_state *s, size_t k, xfer_err *err)
{
	double t0 = ph_now(s);
	if (pool_wait(s, k, err) != 0 || corrupt_chunk(ep, s, k, err) != 0) return -1;
	ph_add(s, s->ph, PH_RUN, t0);
	const xfer_manifest *m = ep->m;
	for (size_t t = s->tend[k]; t < s->tend[k + 1]; t++)
		s->tsums[t] = xfer_tree_top(s->hash + s->tfirst[t], s->tfirst[t + 1] - s->tfirst[t], m->t[t].nbytes);
	uready r = { .ntops = (uint32_t)(s->tend[k + 1] - s->tend[k]), .version = s->version, .chunk = k,
		     .nhash = s->hfirst[k + 1] - s->hfirst[k] };
	memcpy(r.magic, "SKR2", 4);
	struct iovec iv[3] = { { &r, sizeof r },
			       { s->hash + s->hfirst[k], r.nhash * sizeof *s->hash },
			       { s->tsums + s->tend[k], r.ntops * sizeof *s->tsums } };
	t0 = ph_now(s);
	if (xfer_sock_sendv(s->ctl, iv, 3, "ready", "receiver", ep->cfg.timeout_ms, err) != 0) return -1;
	ph_add(s, s->ph, PH_READY, t0);
	/* test hook: the process dies once chunk k is announced */
	if (xfer_hooks.die_after_bucket && k + 1 == (size_t)xfer_hooks.die_after_bucket) _exit(3);
	return 0;
}

int xfer_ucx_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	ucx_state *s = ep->impl;
	int to = ep->cfg.timeout_ms;
	uint64_t credits = 0;
	s->fallback = 0;
	if (xfer_ucx_start(s, err) != 0) return -1;
	if (!s->connected && xfer_ucx_connect(ep, s, err) != 0) return -1;
	if (pool_size(s, err) != 0) goto err;
	s->version = v;
	pool_begin(s);
	/* CUDA tensors go through one host slot, and the corrupting hook uses
	 * lane 0 between chunks: then each chunk is done before the next */
	int lockstep = s->lslot || corrupting(ep, s);
	double w0 = ph_now(s), t0;
	if (xfer_sock_send_vhead(s->ctl, ep, v, err) != 0) goto err;
	size_t sent = 0; /* chunks announced */
	for (size_t k = 0; k < s->nchunks; k++) {
		/* slot k % nslots is free once the receiver placed chunk c =
		 * k - nslots, which it confirms once chunk c + 1 is announced */
		if (!s->remote_direct && k >= (size_t)s->nslots) {
			size_t c = k - (size_t)s->nslots;
			while (sent < c + 2)
				if (send_ready(ep, s, sent++, err) != 0) goto err;
			t0 = ph_now(s);
			if (wait_credit(s, c, &credits, err) != 0) goto err;
			ph_add(s, s->ph, PH_CREDIT, t0);
		}
		if (s->lslot && stage_chunk(ep, s, k, err) != 0) goto err;
		pool_post(s, k);
		/* chunk k - 1 is announced while the lanes put chunk k */
		while (sent + (lockstep ? 0 : 1) <= k)
			if (send_ready(ep, s, sent++, err) != 0) goto err;
	}
	while (sent < s->nchunks)
		if (send_ready(ep, s, sent++, err) != 0) goto err;
	t0 = ph_now(s);
	/* the credits still due (one per chunk, in order), then the
	 * receiver's verdict: nothing more */
	if (!s->remote_direct && s->nchunks && wait_credit(s, s->nchunks - 1, &credits, err) != 0) goto err;
	uint64_t extra;
	int ans = read_answer(s, &extra, err);
	if (ans < 0) goto err;
	if (ans > 0) {
		xfer_fail(err, XFER_EFORMAT, "the receiver sent a credit (%llu) after the last chunk's",
			  (unsigned long long)extra);
		goto err;
	}
	ph_add(s, s->ph, PH_ANSWER, t0);
	ph_report(s, "sender", w0 ? xfer_now() - w0 : 0);
	if (xfer_root_keep(ep, v, XFER_SUM_TREE, s->tsums, err) != 0) goto err; /* its sums: Done.root */
	ep->stats.bytes_moved = ep->m->bytes;
	ep->stats.staging_peak = s->lslot_bytes;
	return 0;
err:
	pool_drain(s);
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
	xfer_ucx_close(s, 1);
	return -1;
}

/* ---- receiver: a version ---- */

/* Receiver: once every lane has checked and placed chunk k, its slot goes
 * back to the sender (a credit). */
static int placed(ucx_state *s, size_t k, xfer_err *err)
{
	double t0 = ph_now(s);
	if (pool_wait(s, k, err) != 0) return -1;
	ph_add(s, s->ph, PH_RUN, t0);
	/* every tree chunk matched; the sums of the tensors that end here too */
	const xfer_manifest *m = s->ep->m;
	for (size_t t = s->tend[k]; t < s->tend[k + 1]; t++) {
		xfer_sum mine = xfer_tree_top(s->hash + s->tfirst[t], s->tfirst[t + 1] - s->tfirst[t], m->t[t].nbytes);
		if (!xfer_sum_equal(mine, s->tsums[t]))
			return xfer_fail(err, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch on arrival "
					 "(its tree sum, chunk %zu of %zu)", (unsigned long long)s->version, m->t[t].name,
					 k, s->nchunks);
	}
	t0 = ph_now(s);
	uint32_t c[2] = { CREDIT, (uint32_t)k };
	if (!s->direct && xfer_sock_send(s->ctl, c, sizeof c, "credit", "sender", s->ep->cfg.timeout_ms, err) != 0)
		return -1;
	ph_add(s, s->ph, PH_ANSWER, t0);
	if (xfer_hooks.stop_after_bucket && k + 1 == (size_t)xfer_hooks.stop_after_bucket) raise(SIGSTOP);
	return 0;
}

int xfer_ucx_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	ucx_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms, failed = 0;
	double t0 = xfer_now();
	int journaled = ep->stats.version && !s->direct && ep->cfg.keep_previous; /* as place_chunk chooses */
	s->fallback = 0;
	if (xfer_ucx_start(s, err) != 0) return -1;
	if (!s->connected && xfer_ucx_accept(ep, s, wait_ms, err) != 0) return -1;
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
	pool_begin(s);
	pool_active(s, 1); /* the lanes move UCX while the chunks land */
	double w0 = ph_now(s), t1;
	for (size_t k = 0; k < s->nchunks && !failed; k++) {
		uready r;
		t1 = ph_now(s);
		if (wait_for(s, NULL, NULL, s->ctl, "chunk", "sender", err) != 0 ||
		    xfer_sock_recv(s->ctl, &r, sizeof r, "ready", "sender", to, err) != 0) {
			failed = 1;
			break;
		}
		if (memcmp(r.magic, "SKR2", 4) != 0 || r.ntops != (uint32_t)(s->tend[k + 1] - s->tend[k]) ||
		    r.nhash != s->hfirst[k + 1] - s->hfirst[k] || r.version != hv || r.chunk != k) {
			xfer_fail(err, XFER_EFORMAT, "unexpected message from the sender (chunk %llu of version %llu)",
				  (unsigned long long)r.chunk, (unsigned long long)r.version);
			failed = 1;
			break;
		}
		struct iovec iv[2] = { { s->peer + s->hfirst[k], r.nhash * sizeof *s->peer },
				       { s->tsums + s->tend[k], r.ntops * sizeof *s->tsums } };
		if (xfer_sock_recvv(s->ctl, iv, 2, "ready", "sender", to, err) != 0) {
			failed = 1;
			break;
		}
		ph_add(s, s->ph, PH_READY, t1);
		pool_post(s, k);
		if (k > 0 && placed(s, k - 1, err) != 0) failed = 1;
	}
	if (!failed && s->nchunks && placed(s, s->nchunks - 1, err) != 0) failed = 1;
	if (failed) pool_drain(s);
	pool_active(s, 0);
	xfer_stripe_journals_stats(ep, s->j, MAX_STRIPES);
	if (failed) {
		xfer_stripe_journals_undo(ep, s->j, MAX_STRIPES, err);
		xfer_sock_send_status(s->ctl, err, to < 1000 ? to : 1000, NULL);
		goto err;
	}
	if (xfer_sock_send_status(s->ctl, NULL, to, err) != 0) goto err;
	ph_report(s, "receiver", w0 ? xfer_now() - w0 : 0);
	/* the sums every tensor matched: their root goes to the head */
	if (xfer_root_keep(ep, hv, XFER_SUM_TREE, s->tsums, err) != 0) goto err;
	ep->stats.bytes_moved = m->bytes;
	ep->stats.staging_peak = s->direct ? 0 : s->slots_len;
	ep->undo_ready = journaled && s->j[0];
	*version = hv;
	return 0;
err:
	pool_drain(s);
	pool_active(s, 0);
	xfer_ucx_close(s, 1);
	return -1;
}

#endif
