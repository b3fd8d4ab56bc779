/* transfer/paths/xfer_ucx.h: p2p-ucx's internals, shared by its two files:
 * xfer_ucx.c (the session: set-up, the handshake, the landing regions,
 * teardown) and xfer_ucx_data.c (a version's data path: lanes, chunks,
 * ready and credit messages).  Not part of libskein's interface. */
#ifndef XFER_UCX_H
#define XFER_UCX_H

#include "transfer/paths/xfer_ucp.h"

/* The path's two entry points per version (xfer_ucx_data.c; built without
 * UCX, xfer_ucx.c's versions say p2p-ucx is not built). */
int xfer_ucx_send(xfer_endpoint *ep, uint64_t v, xfer_err *err);
int xfer_ucx_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err);

#if XFER_HAVE_UCX

#include <pthread.h>
#include "transfer/core/xfer_hash.h"

enum {
	MAX_STRIPES = XFER_UCX_MAX_STRIPES,
	MAX_SLOTS = 8,        /* staging slots in the receiver's ring */
	SLOT_MAX = 8 << 20,   /* a slot (a chunk) holds at most this: the ring (64 MiB) stays in the
				 last-level cache, so a receiver reads what the sender just wrote there */
	PAGE = 4096,
	BLOCK = 256 << 10,    /* a sender's puts and hashes, in blocks that stay in cache: one tree
				 chunk each (XFER_TREE_CHUNK) */
	TREE = XFER_TREE_CHUNK,
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

typedef struct {
	char magic[4];
	uint32_t mode, direct, nregions, nlanes, why_len, same_host, nslots;
	uint64_t slot_bytes;
} ureply; /* followed by why, then per lane a uint32 length and a worker address */

typedef struct {
	uint64_t addr, len;
	uint32_t rkey_len, pad;
} uregion;

/* Wire 4, as p2p-tcp's wire 3: the tree chunk hashes (XXH3-64 of 256 KiB
 * of a tensor) that chunk k holds, then the tree sums of the tensors that
 * end in it. */
typedef struct {
	char magic[4];
	uint32_t ntops;
	uint64_t version, chunk, nhash;
} uready; /* followed by nhash uint64_t and ntops xfer_sums */

_Static_assert(sizeof(ureply) == 40, "reply is 40 bytes on the wire");
_Static_assert(sizeof(uregion) == 24, "region is 24 bytes on the wire");
_Static_assert(sizeof(uready) == 32, "ready is 32 bytes on the wire");
_Static_assert(BLOCK == XFER_TREE_CHUNK, "a sender's block is one tree chunk");

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
	/* the tree plan (xfer_ucx_tree_plan), the same on both ends */
	uint64_t *tfirst; /* per tensor: its first tree chunk among all (n+1) */
	uint64_t *hfirst; /* per chunk: its first tree chunk (nchunks+1) */
	size_t *tend;     /* per chunk: the tensors that end in chunk k are tend[k]..tend[k+1]-1 */
	uint64_t *hash;   /* this end's tree chunk hashes, written by the lanes */
	uint64_t *peer;   /* receiver: the sender's */
	xfer_sum *tsums;  /* sender: its tree sums; receiver: the sender's, once checked */
	pool pool;
	int prof;        /* SKEIN_UCX_PROFILE */
	double ph[PH_N]; /* the control thread's phases */
};

static inline int ucx_fail(const ucx_state *s, xfer_err *err, xfer_code c, ucs_status_t st, const char *what)
{
	return xfer_fail(err, c, "%s: UCX: %s", what, s->u->ucs_status_string(st));
}

/* xfer_ucx.c: the session */
/* Starts UCX in this process at the first transfer (not across fork). */
int xfer_ucx_start(ucx_state *s, xfer_err *err);
/* Sender: the hello, the receiver's reply, lanes' endpoints and keys. */
int xfer_ucx_connect(xfer_endpoint *ep, ucx_state *s, xfer_err *err);
/* Receiver: accepts a sender, checks its hello and manifest, replies. */
int xfer_ucx_accept(xfer_endpoint *ep, ucx_state *s, int wait_ms, xfer_err *err);
/* Ends the session with the peer; failed: after an error. */
void xfer_ucx_close(ucx_state *s, int failed);

/* xfer_ucx_data.c: the lanes' threads, stopped (teardown, a new lane count) */
void xfer_ucx_pool_stop(ucx_state *s);
/* Where each chunk's tree chunks and tensor sums lie, from s->chunks (cut
 * with tree cuts); frees the previous plan.  xfer_ucx_tree_free: at teardown. */
int xfer_ucx_tree_plan(xfer_endpoint *ep, ucx_state *s, xfer_err *err);
void xfer_ucx_tree_free(ucx_state *s);

#endif /* XFER_HAVE_UCX */
#endif
