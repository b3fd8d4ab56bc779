/* transfer/xfer_ucx.c: the p2p-ucx data path, one-sided puts through UCX.
 *
 * Mooncake's p2p in Miles, over UCX's UCP as NIXL uses it: the receiver
 * maps its landing memory once with ucp_mem_map and hands the sender its
 * workers' addresses and the packed rkeys; the sender writes each chunk
 * with ucp_put_nbx, waits for remote completion with ucp_ep_flush_nbx,
 * then tells the receiver on the TCP control stream, with the chunk's
 * checksums.  The same code runs over RDMA (rc, dc, ud: the NIC writes the
 * receiver's memory), shared memory (the receiver's slots are allocated by
 * UCX in sysv/posix shared memory, which each sender lane maps with
 * ucp_rkey_ptr and writes with memcpy, no put or flush: UCX 1.16 would
 * route large puts through cma, a system call per put, and hash before the
 * copy) or UCX's TCP (puts emulated over active messages:
 * the receiver's workers must progress for them to land), whichever UCX
 * picks under UCX_TLS and UCX_NET_DEVICES (docs/transfer.md).
 *
 *   control  sender: hello (stripes, bucket size, its UCX kinds, boot id)
 *            + manifest text; receiver: status, then a reply (UCX, or "use
 *            p2p-tcp" under the p2p chooser), one worker address per lane
 *            and one (address, length, rkey) per landing region.
 *            Per version: sender: header; per chunk, once its puts are
 *            flushed: "ready" with the xxh3-128 of each stripe; receiver:
 *            a credit per chunk it has placed (staged mode), and at the
 *            end, or at the first error, its status.
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
 * Chunks and slots (slot_plan): an eighth of a bucket (at most 8 MiB), in a
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
 * The TCP control stream is also the watchdog: a peer that dies closes it,
 * one that stops stops answering; every wait gives up after timeout_ms
 * without progress on any lane (UCX's own failure reports end it too).
 * CUDA tensors are staged through pinned host buffers on both sides.
 * Differs from NIXL: no GPU-direct, no UCX tag/AM messages (the control
 * stream is plain TCP, as in p2p-tcp). */
#include "transfer/xfer_sock.h"
#include "transfer/xfer_ucp.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "transfer/xfer_hash.h"

static const char HELLO_MAGIC[8] = XFER_UCX_MAGIC;

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
	MAX_SLOTS = 8,        /* staging slots in the receiver's ring */
	SLOT_MAX = 8 << 20,   /* a slot (a chunk) holds at most this: the ring (64 MiB) stays in the
				 last-level cache, so a receiver reads what the sender just wrote there */
	PAGE = 4096,
	BLOCK = 256 << 10,    /* a sender's puts and hashes, in blocks that stay in cache */
	RBLOCK = 64 << 10,    /* a receiver's hashes and copies: smaller, as its worker progresses
				 between them (UCX's TCP lands puts only then) */
	MAX_BLOB = 64 << 10,  /* a worker address or packed rkey larger than this is refused */
	IDLE_SPINS = 32,         /* progress calls that did nothing before sleeping on the event fd */
	POLL_SLICE_MS = 50,   /* the longest sleep: abort and deadlines are checked this often */
	UCX_NAP_MS = 1,       /* the longest sleep on a worker's event fd: it may not fire for every
				 arrival (puts UCX emulates over shared memory: 50 ms naps cost 3x) */
	CLOSE_MS = 1000,      /* the most an endpoint's close may take */
	F_AUTO = XFER_UCX_F_AUTO, /* hello: the sender runs under the p2p chooser */
	MODE_UCX = 0,
	MODE_TCP = 1,
	CREDIT = 0x31435253, /* "SRC1": a receiver-to-sender header that is a credit, not a status */
};

typedef xfer_ucx_hello uhello;

/* SKEIN_UCX_PROFILE=1: seconds per phase, summed over a version's chunks
 * (lanes: the sum over lanes), printed on stderr at its end, one line per
 * end; the timers cost two clock reads per block when on, none when off. */
enum {
	PH_PUT,    /* sender lanes: ucp_put_nbx (over shared memory: the memcpy) */
	PH_HASH,   /* both: xxh3 of the blocks */
	PH_FLUSH,  /* sender lanes: waiting for remote completion */
	PH_PLACE,  /* receiver lanes: journaled copy into the tensors */
	PH_LANE,   /* both: a lane's whole stripe job */
	PH_CREDIT, /* sender: waiting for a slot's credit */
	PH_READY,  /* sender: sending "ready"; receiver: waiting for it */
	PH_RUN,    /* both: the lanes' jobs of a chunk, until the last is done */
	PH_ANSWER, /* sender: the credits due and the verdict at the end; receiver: sending credits */
	PH_N,
};
static const char *const ph_name[PH_N] = { "put", "hash", "flush", "place", "lane", "credit", "ready", "run", "answer" };

typedef struct {
	char magic[4];
	uint32_t mode, direct, nregions, nlanes, why_len, same_host, nslots;
	uint64_t slot_bytes;
} ureply; /* followed by why, then per lane a uint32 length and a worker address */

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

typedef struct ucx_state ucx_state;

/* One lane per stripe, on both ends: a UCX worker driven by one thread
 * only (UCX's single-thread mode), its own connection to the peer's lane of
 * the same index (one TCP connection or shared-memory FIFO or RDMA queue
 * pair each, so puts, TCP receives and checks run in parallel) and its own
 * hash state. */
typedef struct {
	ucx_state *s;
	int idx, wake;          /* wake: eventfd that rouses an idle receiver lane */
	size_t next;            /* the next chunk this lane works on */
	ucp_worker_h w;
	int efd;
	ucp_address_t *addr;    /* receiver: this lane's worker address */
	size_t addr_len;
	ucp_ep_h uep;           /* sender: to the receiver's lane idx */
	ucp_rkey_h *rkey;       /* sender: the landing regions' keys, unpacked for uep */
	unsigned char *rptr;    /* sender: the receiver's slots mapped here (ucp_rkey_ptr), or NULL */
	atomic_int peer_failed;
	XXH3_state_t *hs;
	pthread_t th;
	double ph[PH_N]; /* profile: seconds per phase this version */
} lane;

/* The lanes' jobs: stripe i of each posted chunk to lane i, in order.  A
 * lane goes on to the next chunk without waiting for the others (the
 * control thread waits for chunk k - 1 once it posted chunk k: no barrier
 * per chunk, and a lane that is late catches up); done[k % RING] counts
 * the lanes that finished chunk k. */
enum { RING = 4 };
typedef struct {
	int nth, stop, failed, active, busy;
	size_t posted;   /* chunks 0..posted-1 are the lanes' */
	int done[RING];
	xfer_err err;
	pthread_mutex_t mu;
	pthread_cond_t go, done_cv;
} pool;

struct ucx_state {
	xfer_endpoint *ep;
	const xfer_ucp_api *u;
	ucp_context_h ctx;
	int kinds;
	char tls[512], boot_here[40];
	pid_t pid; /* the process that started UCX */
	lane lane[MAX_STRIPES];
	int nlanes; /* lanes with a worker */
	int lfd, lfd_own, ctl, connected, nstripes, any_cuda, direct;
	uint64_t bucket_bytes, version;
	uint64_t slot_bytes; /* one chunk's slot; nslots of them in the ring */
	int nslots;
	xfer_span *chunks;
	size_t nchunks;
	atomic_uint progressed; /* bumped by lanes that made UCX progress: the control waits' watchdog */
	int fallback;
	char fallback_why[256];
	/* receiver: landing memory, mapped once */
	unsigned char *slots;
	uint64_t slots_len;
	int slot_pinned;
	ucp_mem_h slot_mh;
	ucp_mem_h *tensor_mh;
	xfer_journal *j[MAX_STRIPES];
	/* sender */
	uint64_t *raddr; /* the landing regions' addresses (their lengths checked on arrival) */
	size_t nrg;
	int remote_direct;
	unsigned char *lslot; /* CUDA tensors: a chunk on the host */
	uint64_t lslot_bytes;
	xfer_sum sums[2][MAX_STRIPES]; /* chunk k's per stripe in [k % 2]: two chunks are in the lanes' hands */
	pool pool;
	int prof;        /* SKEIN_UCX_PROFILE */
	double ph[PH_N]; /* the control thread's phases */
};

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

/* Chunks and slots for buckets of b bytes, the same on both ends: chunks
 * of an eighth of a bucket (a page to SLOT_MAX), so that several are in
 * flight, in as many slots as one bucket holds (2 to MAX_SLOTS); *wire is
 * the bucket size that cuts the weights into such chunks (xfer_chunks).
 * Buckets under 8 pages: p2p-tcp's chunks of half a bucket, two slots. */
static void slot_plan(uint64_t b, uint64_t *wire, uint64_t *piece, int *nslots)
{
	uint64_t p = b / 8 / PAGE * PAGE;
	if (p > SLOT_MAX) p = SLOT_MAX;
	if (p < PAGE) {
		*wire = b;
		p = xfer_chunk_piece(b);
	} else {
		*wire = 2 * p;
	}
	*piece = p;
	uint64_t n = b / p;
	*nslots = n < 2 ? 2 : n > MAX_SLOTS ? MAX_SLOTS : (int)n;
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

static void pool_stop(ucx_state *s)
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
	pool_stop(s);
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

static xfer_sum digest(XXH3_state_t *st)
{
	XXH128_hash_t h = XXH3_128bits_digest(st);
	return (xfer_sum){ h.low64, h.high64 };
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
static int send_stripe(ucx_state *s, lane *l, size_t k, uint64_t a, uint64_t b, xfer_sum *sum, xfer_err *err)
{
	xfer_endpoint *ep = s->ep;
	const xfer_ucp_api *u = s->u;
	ucp_request_param_t prm = { .op_attr_mask = 0 };
	XXH3_128bits_reset(l->hs);
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
			XXH3_128bits_update(l->hs, src, n);
			ph_add(s, l->ph, PH_HASH, t0);
			lane_progress(s, l);
			a += n;
		}
	}
	*sum = digest(l->hs);
	if (l->rptr) return 0; /* stores, done (the ready message that follows is a system call) */
	double t0 = ph_now(s);
	int rc = flush_lane(s, l, "flush to the receiver", err);
	ph_add(s, l->ph, PH_FLUSH, t0);
	return rc;
}

/* Receiver: hashes [a, b) of the tensors (direct: where the puts landed) or
 * of the slot, block by block, keeping the lane's worker moving. */
static xfer_sum hash_landed(ucx_state *s, lane *l, const unsigned char *slot, uint64_t off, uint64_t a, uint64_t b)
{
	xfer_endpoint *ep = s->ep;
	XXH3_128bits_reset(l->hs);
	for (size_t t = slot ? 0 : xfer_tensor_at(ep, a); a < b; t++) {
		uint64_t hi = slot || ep->offsets[t + 1] > b ? b : ep->offsets[t + 1];
		for (; a < hi;) {
			uint64_t n = hi - a < RBLOCK ? hi - a : RBLOCK;
			double t0 = ph_now(s);
			XXH3_128bits_update(l->hs, slot ? slot + (a - off) : tensor_at(ep, t, a), n);
			ph_add(s, l->ph, PH_HASH, t0);
			lane_progress(s, l);
			a += n;
		}
	}
	return digest(l->hs);
}

/* Receiver, host tensors with staging: hashes a block of the slot and
 * copies it into the tensors through the stripe's journal while it is in
 * cache, one pass; the checksum decides at the end of the stripe, and a
 * mismatch makes the caller put the previous version back (the journal
 * holds every byte this wrote, as p2p-tcp's streams do). */
static int check_place(ucx_state *s, lane *l, const unsigned char *slot, uint64_t off, uint64_t a, uint64_t b,
		       xfer_journal *j, xfer_sum *got, xfer_err *err)
{
	XXH3_128bits_reset(l->hs);
	for (; a < b;) {
		uint64_t n = b - a < RBLOCK ? b - a : RBLOCK;
		double t0 = ph_now(s);
		XXH3_128bits_update(l->hs, slot + (a - off), n);
		ph_add(s, l->ph, PH_HASH, t0);
		t0 = ph_now(s);
		if (xfer_place_stripe(s->ep, slot, off, a, a + n, j, err) != 0) return -1;
		ph_add(s, l->ph, PH_PLACE, t0);
		lane_progress(s, l);
		a += n;
	}
	*got = digest(l->hs);
	return 0;
}

/* Sender: puts and hashes stripe i of chunk k.  Receiver: checks it and
 * (staged) places it in the tensors. */
static int stripe_job(ucx_state *s, lane *l, size_t k, xfer_err *err)
{
	xfer_endpoint *ep = s->ep;
	xfer_span c = s->chunks[k];
	uint64_t a, b;
	xfer_stripe_of(c, s->nstripes, l->idx, &a, &b);
	if (ep->cfg.role == XFER_SENDER) return send_stripe(s, l, k, a, b, &s->sums[k % 2][l->idx], err);
	const unsigned char *slot = s->direct ? NULL : s->slots + (k % (size_t)s->nslots) * s->slot_bytes;
	xfer_journal *j = ep->stats.version ? s->j[l->idx] : NULL;
	xfer_sum got;
	int placed = slot && !s->any_cuda; /* CUDA tensors: checked first, then copied to the device */
	if (placed) {
		if (check_place(s, l, slot, c.off, a, b, j, &got, err) != 0) return -1;
	} else {
		got = hash_landed(s, l, slot, c.off, a, b);
	}
	if (!xfer_sum_equal(got, s->sums[k % 2][l->idx]))
		return xfer_fail(err, XFER_ECHECKSUM, "version %llu, bytes %llu..%llu (tensor %s): checksum mismatch on arrival",
				 (unsigned long long)s->version, (unsigned long long)a, (unsigned long long)b,
				 ep->m->t[xfer_tensor_at(ep, a)].name);
	if (!slot || placed) return 0;
	double t0 = ph_now(s);
	int rc = xfer_place_stripe(ep, slot, c.off, a, b, j, err);
	ph_add(s, l->ph, PH_PLACE, t0);
	return rc;
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

/* The sender's endpoints and keys; the lanes are idle.  After a failure
 * (force) the endpoints are closed at once: the peer may be dead or stopped,
 * and a graceful close would wait on it.  Otherwise all lanes close
 * together, within CLOSE_MS. */
static void close_eps(ucx_state *s, int force)
{
	const xfer_ucp_api *u = s->u;
	void *req[MAX_STRIPES] = { 0 };
	xfer_ucp_quiet(1); /* UCX's warnings about puts a failed peer never took: the error said so */
	for (int i = 0; i < s->nlanes; i++) {
		lane *l = &s->lane[i];
		l->rptr = NULL; /* unmapped with its key */
		for (size_t r = 0; l->rkey && r < s->nrg; r++)
			if (l->rkey[r]) u->ucp_rkey_destroy(l->rkey[r]);
		free(l->rkey);
		l->rkey = NULL;
		if (!l->uep) continue;
		int flags = force || atomic_load(&l->peer_failed) != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0;
		ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = (uint32_t)flags };
		void *r = u->ucp_ep_close_nbx(l->uep, &p);
		l->uep = NULL;
		if (UCS_PTR_IS_PTR(r)) req[i] = r;
	}
	double end = xfer_now() + CLOSE_MS / 1e3;
	for (int busy = 1; busy && xfer_now() < end;) {
		busy = 0;
		for (int i = 0; i < s->nlanes; i++) {
			if (!req[i]) continue;
			u->ucp_worker_progress(s->lane[i].w);
			if (u->ucp_request_check_status(req[i]) == UCS_INPROGRESS) busy = 1;
		}
	}
	for (int i = 0; i < s->nlanes; i++) {
		if (req[i]) u->ucp_request_free(req[i]);
		atomic_store(&s->lane[i].peer_failed, UCS_OK);
	}
	xfer_ucp_quiet(0);
	free(s->raddr);
	s->raddr = NULL;
	s->nrg = 0;
}

/* Ends the session with the peer; failed: after an error. */
static void close_session(ucx_state *s, int failed)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	s->connected = 0;
	close_eps(s, failed);
}

static void unmap_all(ucx_state *s)
{
	const xfer_ucp_api *u = s->u;
	if (s->slot_mh) u->ucp_mem_unmap(s->ctx, s->slot_mh); /* frees what UCX allocated */
	s->slot_mh = NULL;
	if (s->slot_pinned && s->slots) xfer_cuda(NULL, 0)->FreeHost(s->slots);
	s->slots = NULL;
	s->slots_len = 0;
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
	int mine = !s->ctx || s->pid == getpid(); /* a forked copy has no lane threads and leaves UCX to its parent */
	if (mine) pool_stop(s);
	if (s->ctx && mine) {
		close_session(s, 0);
		unmap_all(s);
		xfer_ucp_quiet(1); /* puts a failed peer never took: the error said so */
		for (int i = 0; i < s->nlanes; i++) {
			if (s->lane[i].addr) s->u->ucp_worker_release_address(s->lane[i].w, s->lane[i].addr);
			s->u->ucp_worker_destroy(s->lane[i].w);
		}
		s->u->ucp_cleanup(s->ctx); /* (UCX 1.16 lists registrations it still caches) */
		xfer_ucp_quiet(0);
	} else if (s->ctl >= 0) {
		close(s->ctl);
	}
	for (int i = 0; i < MAX_STRIPES; i++) {
		if (s->lane[i].hs) XXH3_freeState(s->lane[i].hs);
		if (s->lane[i].wake >= 0) close(s->lane[i].wake);
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
	pthread_cond_destroy(&s->pool.done_cv);
	free(s);
	ep->impl = NULL;
}

/* UCX starts at the first transfer, not at xfer_open: UCX does not survive
 * fork, and an endpoint may be opened before one (as a receiver that hands
 * its listening socket to a child).  One forked after that cannot go on. */
static int ucx_start(ucx_state *s, xfer_err *err)
{
	if (s->ctx) {
		if (s->pid == getpid()) return 0;
		return xfer_fail(err, XFER_EINVAL, "p2p-ucx: this endpoint started UCX in process %d and cannot be used in "
				 "a process forked from it", (int)s->pid);
	}
	if (xfer_ucp_context(s->u, &s->ctx, err) != 0) return -1;
	s->pid = getpid();
	s->kinds = xfer_ucp_context_tls(s->u, s->ctx, s->tls, sizeof s->tls);
	return 0;
}

/* Workers for lanes 0..n-1 (kept for the endpoint's life). */
static int lanes_make(xfer_endpoint *ep, ucx_state *s, int n, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	for (; s->nlanes < n; s->nlanes++) {
		lane *l = &s->lane[s->nlanes];
		ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
					   .thread_mode = UCS_THREAD_MODE_SINGLE };
		ucs_status_t st = u->ucp_worker_create(s->ctx, &wp, &l->w);
		if (st != UCS_OK) return ucx_fail(s, err, XFER_EUNAVAIL, st, "worker");
		if ((st = u->ucp_worker_get_efd(l->w, &l->efd)) != UCS_OK ||
		    (ep->cfg.role == XFER_RECEIVER && (st = u->ucp_worker_get_address(l->w, &l->addr, &l->addr_len)) != UCS_OK)) {
			l->addr = NULL;
			u->ucp_worker_destroy(l->w);
			l->w = NULL;
			return ucx_fail(s, err, XFER_EUNAVAIL, st, "worker");
		}
	}
	return 0;
}

static int ucx_setup(xfer_endpoint *ep, xfer_err *err)
{
	ucx_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->ep = ep;
	s->lfd = s->ctl = -1;
	pthread_mutex_init(&s->pool.mu, NULL);
	pthread_cond_init(&s->pool.go, NULL);
	pthread_cond_init(&s->pool.done_cv, NULL);
	for (int i = 0; i < MAX_STRIPES; i++) {
		lane *l = &s->lane[i];
		l->s = s;
		l->idx = i;
		l->efd = -1;
		if ((l->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) return xfer_fail_errno(err, XFER_EIO, "eventfd");
		if (!(l->hs = XXH3_createState())) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	}
	char why[256];
	if (!(s->u = xfer_ucp(why, sizeof why))) return xfer_fail(err, XFER_EUNAVAIL, "%s", why);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem == XFER_MEM_CUDA) s->any_cuda = 1;
	if (s->any_cuda && !xfer_cuda(why, sizeof why))
		return xfer_fail(err, XFER_EUNAVAIL, "the manifest has CUDA tensors but %s", why);
	read_boot_id(s->boot_here);
	const char *pv = getenv("SKEIN_UCX_PROFILE");
	s->prof = pv && *pv && strcmp(pv, "0") != 0;
	s->nstripes = ep->cfg.p2p.streams < MAX_STRIPES ? ep->cfg.p2p.streams : MAX_STRIPES;
	if (s->nstripes < 1) s->nstripes = 1;
	if (ep->cfg.role == XFER_RECEIVER) {
		s->direct = !ep->cfg.keep_previous && !s->any_cuda;
		if (ep->shared_lfd >= 0) {
			s->lfd = ep->shared_lfd;
		} else {
			s->lfd_own = 1;
			if ((s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err)) < 0) return -1;
		}
	} else {
		uint64_t wire;
		s->bucket_bytes = ep->cfg.bucket_bytes;
		slot_plan(s->bucket_bytes, &wire, &s->slot_bytes, &s->nslots);
		if (xfer_chunks_make(ep, wire, &s->chunks, &s->nchunks, err) != 0) return -1;
		if (ep->cfg.p2p.port <= 0 || ep->cfg.p2p.port > 65535)
			return xfer_fail(err, XFER_EINVAL, "p2p sender needs the receiver's port (cfg.p2p.port)");
		if (s->any_cuda) {
			const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
			s->lslot_bytes = s->slot_bytes;
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
	atomic_store(&((lane *)arg)->peer_failed, st == UCS_OK ? UCS_ERR_ENDPOINT_TIMEOUT : st);
}

/* The receiver's landing regions (its slots, or its tensors), each key
 * unpacked for every lane's endpoint. */
static int read_regions(xfer_endpoint *ep, ucx_state *s, const ureply *r, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	s->nrg = r->nregions;
	int ok = (s->raddr = calloc(r->nregions, sizeof *s->raddr)) != NULL;
	for (int i = 0; i < s->nstripes; i++)
		ok &= (s->lane[i].rkey = calloc(r->nregions, sizeof(ucp_rkey_h))) != NULL;
	unsigned char *blob = ok ? malloc(MAX_BLOB) : NULL;
	if (!blob) return xfer_fail(err, XFER_ENOMEM, "out of memory"); /* the caller frees the rest */
	s->remote_direct = (int)r->direct;
	for (uint32_t i = 0; i < r->nregions; i++) {
		uregion g;
		if (xfer_sock_recv(s->ctl, &g, sizeof g, "regions", "receiver", to, err) != 0) goto err;
		uint64_t want = r->direct ? m->t[i].nbytes : (uint64_t)s->nslots * s->slot_bytes;
		if (g.rkey_len > MAX_BLOB || (r->direct ? g.len != want : g.len < want) || (g.len && !g.rkey_len)) {
			xfer_fail(err, XFER_EFORMAT, "the receiver's landing region %u (%llu bytes, key %u bytes) does not fit "
				  "%llu bytes", i, (unsigned long long)g.len, g.rkey_len, (unsigned long long)want);
			goto err;
		}
		if (xfer_sock_recv(s->ctl, blob, g.rkey_len, "rkey", "receiver", to, err) != 0) goto err;
		s->raddr[i] = g.addr;
		for (int k = 0; g.len && k < s->nstripes; k++) {
			lane *l = &s->lane[k];
			ucs_status_t st = s->u->ucp_ep_rkey_unpack(l->uep, blob, &l->rkey[i]);
			if (st != UCS_OK) {
				ucx_fail(s, err, XFER_EFORMAT, st, "the receiver's rkey");
				goto err;
			}
			/* slots UCX allocated in shared memory: this process maps
			 * them too, and a memcpy is the put */
			void *p = NULL;
			if (!r->direct && s->u->ucp_rkey_ptr(l->rkey[i], g.addr, &p) == UCS_OK && p) l->rptr = p;
		}
	}
	free(blob);
	return 0;
err:
	free(blob);
	return -1;
}

/* One endpoint per lane, to the receiver's lane of the same index. */
static int connect_lanes(xfer_endpoint *ep, ucx_state *s, const ureply *r, xfer_err *err)
{
	int to = ep->cfg.timeout_ms;
	void *addr = malloc(MAX_BLOB);
	if (!addr) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	for (int i = 0; i < s->nstripes; i++) {
		uint32_t len;
		if (xfer_sock_recv(s->ctl, &len, sizeof len, "worker address", "receiver", to, err) != 0) goto err;
		if (len == 0 || len > MAX_BLOB) {
			xfer_fail(err, XFER_EFORMAT, "a worker address of %u bytes from the receiver", len);
			goto err;
		}
		if (xfer_sock_recv(s->ctl, addr, len, "worker address", "receiver", to, err) != 0) goto err;
		ucp_ep_params_t p = {
			.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
				      UCP_EP_PARAM_FIELD_ERR_HANDLER,
			.address = addr,
			.err_mode = r->same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
			.err_handler = { .cb = ep_failed, .arg = &s->lane[i] },
		};
		xfer_ucp_quiet(1); /* why UCX cannot reach it goes into the error */
		ucs_status_t st = s->u->ucp_ep_create(s->lane[i].w, &p, &s->lane[i].uep);
		xfer_ucp_quiet(0);
		if (st != UCS_OK) {
			s->lane[i].uep = NULL;
			const char *said = xfer_ucp_last();
			xfer_fail(err, XFER_EUNAVAIL, "no UCX endpoint to the receiver (UCX_TLS on both ends?): %s%s%s%s",
				  s->u->ucs_status_string(st), XFER_UCP_SAID(said));
			goto err;
		}
	}
	free(addr);
	return 0;
err:
	free(addr);
	return -1;
}

static int sender_connect(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	int to = ep->cfg.timeout_ms;
	size_t dlen;
	char *desc = xfer_manifest_describe(ep->m, &dlen), *why = NULL;
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
	if (memcmp(r.magic, "SKU2", 4) != 0 || r.mode > MODE_TCP || r.why_len > 1024 ||
	    (r.mode == MODE_UCX && (r.nlanes != (uint32_t)s->nstripes || r.nregions != (r.direct ? ep->m->n : 1) ||
				    (!r.direct && (r.nslots != (uint32_t)s->nslots || r.slot_bytes != s->slot_bytes))))) {
		xfer_fail(err, XFER_EFORMAT, "malformed reply from the receiver (not this build of p2p-ucx?)");
		goto err;
	}
	why = calloc(1, r.why_len + 1);
	if (!why) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, why, r.why_len, "reply", "receiver", to, err) != 0) goto err;
	if (r.mode == MODE_TCP) {
		s->fallback = 1;
		snprintf(s->fallback_why, sizeof s->fallback_why, "%s", why);
		xfer_fail(err, XFER_EUNAVAIL, "the receiver chose p2p-tcp: %s", why);
		goto err;
	}
	if (lanes_make(ep, s, s->nstripes, err) != 0 || connect_lanes(ep, s, &r, err) != 0 ||
	    read_regions(ep, s, &r, err) != 0)
		goto err;
	char lanes[256];
	xfer_ucp_ep_lanes(u, s->lane[0].uep, lanes, sizeof lanes);
	snprintf(ep->note, sizeof ep->note, "%s%s%s%s; %d lanes of ours, a UCX worker each (UCX %s)", why, *why ? "; " : "",
		 s->lane[0].rptr ? "puts by memcpy into the receiver's slots, mapped here (ucp_rkey_ptr); " : "", lanes,
		 s->nstripes, u->ucp_get_version_string());
	free(desc);
	free(why);
	s->connected = 1;
	return 0;
err:
	free(desc);
	free(why);
	close_session(s, 1);
	return -1;
}

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

/* Test hook: one byte of the landing place flipped after the chunk landed
 * (through lane 0, idle between chunks). */
static int corrupt_chunk(xfer_endpoint *ep, ucx_state *s, size_t k, xfer_err *err)
{
	long long at = xfer_hooks.corrupt_at - 1;
	xfer_span c = s->chunks[k];
	if (!xfer_hooks.corrupt_at || (uint64_t)at < c.off || (uint64_t)at >= c.off + c.len) return 0;
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
	uready r = { .nstripes = (uint32_t)s->nstripes, .version = s->version, .chunk = k };
	memcpy(r.magic, "SKR1", 4);
	struct iovec iv[2] = { { &r, sizeof r }, { s->sums[k % 2], (size_t)s->nstripes * sizeof s->sums[0][0] } };
	t0 = ph_now(s);
	if (xfer_sock_sendv(s->ctl, iv, 2, "ready", "receiver", ep->cfg.timeout_ms, err) != 0) return -1;
	ph_add(s, s->ph, PH_READY, t0);
	/* test hook: the process dies once chunk k is announced */
	if (xfer_hooks.die_after_bucket && k + 1 == (size_t)xfer_hooks.die_after_bucket) _exit(3);
	return 0;
}

static int ucx_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	ucx_state *s = ep->impl;
	int to = ep->cfg.timeout_ms;
	uint64_t credits = 0;
	s->fallback = 0;
	if (ucx_start(s, err) != 0) return -1;
	if (!s->connected && sender_connect(ep, s, err) != 0) return -1;
	if (pool_size(s, err) != 0) goto err;
	s->version = v;
	pool_begin(s);
	/* CUDA tensors go through one host slot, and the corrupting hook uses
	 * lane 0 between chunks: then each chunk is done before the next */
	int lockstep = s->lslot || xfer_hooks.corrupt_at;
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
	for (;;) { /* the credits still due, then the receiver's verdict */
		uint64_t c;
		int r = read_answer(s, &c, err);
		if (r < 0) goto err;
		if (r == 0) break;
		credits++;
	}
	ph_add(s, s->ph, PH_ANSWER, t0);
	ph_report(s, "sender", w0 ? xfer_now() - w0 : 0);
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
	close_session(s, 1);
	return -1;
}

/* ---- receiver ---- */

/* Maps the landing memory: the ring of slots (one region), or the tensors. */
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
	uint64_t want = (uint64_t)s->nslots * s->slot_bytes;
	if (s->slots && s->slots_len == want) return 0;
	unmap_all(s);
	const xfer_cuda_api *cu = s->any_cuda ? xfer_cuda(NULL, 0) : NULL;
	ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
				    .length = want };
	if (cu) {
		/* pinned, for the copies to the device */
		if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->slots, want), "cudaMallocHost", err) != 0) return -1;
		s->slot_pinned = 1;
		mp.address = s->slots;
	} else {
		/* UCX allocates: shared memory (sysv, posix) a sender on this
		 * host attaches and writes with memcpy; mapped memory of ours
		 * could only take emulated puts there (UCX 1.13 puts need a
		 * transport with short and bcopy puts, which cma lacks) */
		mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
		mp.flags = UCP_MEM_MAP_ALLOCATE;
	}
	ucs_status_t st = u->ucp_mem_map(s->ctx, &mp, &s->slot_mh);
	if (st != UCS_OK) {
		s->slot_mh = NULL;
		return ucx_fail(s, err, XFER_EIO, st, "mapping the staging slots");
	}
	if (!cu) {
		ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH };
		if ((st = u->ucp_mem_query(s->slot_mh, &ma)) != UCS_OK) return ucx_fail(s, err, XFER_EIO, st, "slots");
		if (ma.length < want) return xfer_fail(err, XFER_EIO, "UCX gave staging slots of %zu bytes", ma.length);
		s->slots = ma.address;
	}
	s->slots_len = want;
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
	uint64_t wire;
	slot_plan(h.bucket_bytes, &wire, &s->slot_bytes, &s->nslots);
	xfer_err st = { 0 };
	int mode = MODE_UCX;
	free(s->chunks);
	if (xfer_chunk_plan(ep->m, ep->offsets, wire, desc, h.manifest_len, &s->chunks, &s->nchunks, &st) == 0)
		st.code = XFER_OK;
	if (st.code != XFER_OK) xfer_err_prefix(&st, "sender's manifest vs receiver's");
	else if (ep->p2p_auto && (h.flags & F_AUTO)) mode = decide(s, &h, why, sizeof why);
	if (st.code == XFER_OK && mode == MODE_UCX &&
	    (map_landing(ep, s, &st) != 0 || lanes_make(ep, s, s->nstripes, &st) != 0))
		xfer_err_prefix(&st, "p2p-ucx receiver");
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	/* the reply: mode and why, the lanes' worker addresses, the landing
	 * regions and their keys */
	nkeys = s->direct ? ep->m->n : 1;
	ureply r = { .mode = (uint32_t)mode, .direct = (uint32_t)s->direct, .nregions = (uint32_t)nkeys,
		     .nlanes = (uint32_t)s->nstripes, .why_len = (uint32_t)strlen(why), .nslots = (uint32_t)s->nslots,
		     .slot_bytes = s->slot_bytes,
		     .same_host = h.boot_id[0] && !strncmp(h.boot_id, s->boot_here, sizeof h.boot_id) };
	memcpy(r.magic, "SKU2", 4);
	struct iovec v[2] = { { &r, sizeof r }, { why, r.why_len } };
	if (mode == MODE_TCP) {
		xfer_sock_sendv(s->ctl, v, 2, "reply", "sender", to, NULL);
		s->fallback = 1;
		snprintf(s->fallback_why, sizeof s->fallback_why, "%s", why);
		xfer_fail(err, XFER_EUNAVAIL, "%s", why);
		goto err;
	}
	if (xfer_sock_sendv(s->ctl, v, 2, "reply", "sender", to, err) != 0) goto err;
	for (int i = 0; i < s->nstripes; i++) {
		uint32_t len = (uint32_t)s->lane[i].addr_len;
		struct iovec av[2] = { { &len, sizeof len }, { s->lane[i].addr, len } };
		if (xfer_sock_sendv(s->ctl, av, 2, "worker address", "sender", to, err) != 0) goto err;
	}
	tkeys = calloc(nkeys, sizeof *tkeys);
	tklen = calloc(nkeys, sizeof *tklen);
	if (!tkeys || !tklen) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	for (size_t i = 0; i < nkeys; i++) {
		ucp_mem_h mh = s->direct ? s->tensor_mh[i] : s->slot_mh;
		uregion g = { .addr = (uint64_t)(uintptr_t)(s->direct ? ep->m->t[i].ptr : s->slots),
			      .len = s->direct ? ep->m->t[i].nbytes : s->slots_len };
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
	snprintf(ep->note, sizeof ep->note, "%s%sUCX %s offers %s; %d lanes of ours, a UCX worker each", why,
		 *why ? "; " : "", u->ucp_get_version_string(), s->tls, s->nstripes);
	s->connected = 1;
	goto out;
err:
	close_session(s, 1);
out:
	for (size_t i = 0; tkeys && i < nkeys; i++)
		if (tkeys[i]) u->ucp_rkey_buffer_release(tkeys[i]);
	free(tkeys);
	free(tklen);
	free(desc);
	return s->connected ? 0 : -1;
}

/* Receiver: once every lane has checked and placed chunk k, its slot goes
 * back to the sender (a credit). */
static int placed(ucx_state *s, size_t k, xfer_err *err)
{
	double t0 = ph_now(s);
	if (pool_wait(s, k, err) != 0) return -1;
	ph_add(s, s->ph, PH_RUN, t0);
	t0 = ph_now(s);
	uint32_t c[2] = { CREDIT, (uint32_t)k };
	if (!s->direct && xfer_sock_send(s->ctl, c, sizeof c, "credit", "sender", s->ep->cfg.timeout_ms, err) != 0)
		return -1;
	ph_add(s, s->ph, PH_ANSWER, t0);
	if (xfer_hooks.stop_after_bucket && k + 1 == (size_t)xfer_hooks.stop_after_bucket) raise(SIGSTOP);
	return 0;
}

static int ucx_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	ucx_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms, failed = 0;
	double t0 = xfer_now();
	int journaled = ep->stats.version && !s->direct && ep->cfg.keep_previous; /* as place_chunk chooses */
	s->fallback = 0;
	if (ucx_start(s, err) != 0) return -1;
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
		if (memcmp(r.magic, "SKR1", 4) != 0 || r.nstripes != (uint32_t)s->nstripes || r.version != hv ||
		    r.chunk != k) {
			xfer_fail(err, XFER_EFORMAT, "unexpected message from the sender (chunk %llu of version %llu)",
				  (unsigned long long)r.chunk, (unsigned long long)r.version);
			failed = 1;
			break;
		}
		if (xfer_sock_recv(s->ctl, s->sums[k % 2], (size_t)s->nstripes * sizeof s->sums[0][0], "ready", "sender", to,
				   err) != 0) {
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
	ep->stats.bytes_moved = m->bytes;
	ep->stats.staging_peak = s->direct ? 0 : s->slots_len;
	ep->undo_ready = journaled && s->j[0];
	*version = hv;
	return 0;
err:
	pool_drain(s);
	pool_active(s, 0);
	close_session(s, 1);
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
