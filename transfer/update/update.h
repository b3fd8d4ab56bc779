/* transfer/update/update.h: libskein's side of the coordinated update
 * (docs/updates.md), shared by its files and the unit tests, nobody else.
 *
 *   update_agent.c   the blocking client of the agent's Unix socket
 *   update_msg.c     proto/weights.proto <-> the plain structs below (the
 *                    only files that see protobuf-c are these two)
 *   update_client.c  the sender: xfer_publish, and what the engine shares
 *   update_engine.c  the receiver: the engine loop behind xfer_receive
 * The state hangs off the endpoint as an opaque ep->upd (struct
 * xfer_upd_client below); core/ and paths/ neither read it nor include this
 * header: what they share with the update lives in core/xfer_int.h. */
#ifndef SKEIN_UPDATE_H
#define SKEIN_UPDATE_H

#include "transfer/core/xfer_int.h"

#include <pthread.h>

enum {
	XFER_AGENT_NONCE = 16,
	XFER_AGENT_REQUEST_MAX = 1 << 20,   /* what we send: a Done with many failed peers at most */
	XFER_AGENT_ANSWER_MAX = 4 << 20,    /* an Outcome's record of thousands of engines fits */
	XFER_UPD_PEERS_MAX = 65536,          /* peers in a BeginReply */
};

/* ---- the client (update_agent.c) ---- */
typedef struct xfer_agent xfer_agent;
xfer_agent *xfer_agent_new(const char *rpc, xfer_err *err);
void xfer_agent_free(xfer_agent **a);
/* One request {cmd "wv", args [verb], payload} and its answer's payload
 * (*out malloc'd, maybe 0 bytes), within timeout_ms.  -1 with err:
 * XFER_EPEER   ask again: the agent is unreachable, the connection broke, or
 *              its answer says to retry (no head, a handover);
 * XFER_ETIMEOUT no answer in time: the connection is dropped, but for
 *              `wait`, whose request stays pending (xfer_agent_pending)
 *              and whose answer the next `wait` call reads;
 * XFER_EFORMAT a malformed answer: oversize, not a Response, another nonce;
 * XFER_EINVAL  refused (the answer's code != 0; its error line in msg). */
int xfer_agent_call(xfer_agent *a, const char *verb, const void *payload, size_t len, int timeout_ms,
		    uint8_t **out, size_t *olen, xfer_err *err);
/* 1 while a `wait` was sent and its answer not read yet. */
int xfer_agent_pending(const xfer_agent *a);

/* ---- the messages (update_msg.c) ---- */
typedef struct {
	char member[XFER_UPD_STR], node[XFER_UPD_STR], endpoint[XFER_UPD_STR];
	int rank;
} xfer_upd_peer;

typedef struct {
	uint64_t version, base_version;
	xfer_upd_peer *peers; /* malloc'd: xfer_upd_begin_reply_free */
	size_t npeers;
	int timeout_ms;
	int has_nonce;       /* the p2p hello's ticket (an older head sends none) */
	unsigned char nonce[XFER_NONCE_BYTES];
} xfer_upd_begin_reply;

/* An update's state as the head reports it: an enum inside libskein, its
 * name only in the codec (update_msg.c) and in output (xfer_update_stats). */
typedef enum { XFER_UPD_UNKNOWN, XFER_UPD_PREPARING, XFER_UPD_MOVING, XFER_UPD_COMMITTED, XFER_UPD_ABORTED } xfer_upd_state;
/* "", "preparing", "moving", "committed", "aborted" */
const char *xfer_upd_state_name(xfer_upd_state s);

typedef struct {
	uint64_t version;
	xfer_upd_state state;
	char reason[512];
	int has_record;      /* the fields below come from the record */
	uint64_t wire_bytes;
	double density, update_seconds, implementation_seconds;
	double engine_seconds;   /* the slowest verified participant's receive */
	uint32_t participants, dropped;
	xfer_timings engines;    /* each figure's largest over the participants (0 when absent) */
} xfer_upd_outcome;

typedef struct {
	char kind[16];       /* idle, receive, commit, abort, catchup, serve */
	uint64_t version, base_version;
	char mode[XFER_UPD_STR], peer[XFER_UPD_STR];
	unsigned char *setup; /* malloc'd (xfer_upd_instr_free): NCCL's unique id, or colocated's handoff */
	size_t setup_len;    /* NCCL: 0 or XFER_NCCL_ID_BYTES; colocated: 0..XFER_UPD_SETUP_MAX */
	int rank, nranks;
	char reason[512];
	int timeout_ms;
	unsigned char root[16]; /* the sender's root of version (xfer_root.c) ... */
	int has_root;           /* ... when the head has it */
	int has_nonce;       /* receive, catchup, serve: the p2p hello's ticket */
	unsigned char nonce[XFER_NONCE_BYTES];
} xfer_upd_instr;

typedef struct {
	const char *job, *member, *mode;
	uint64_t version, bytes;
	uint32_t tensors;
	unsigned char digest[16];
	const unsigned char *setup; /* NULL, NCCL's unique id or colocated's handoff */
	size_t setup_len;
	const unsigned char *root;  /* 16 bytes: the root of v's sums when known before the bytes move
				       (colocated: the handoff's; xfer_root.c); NULL: none */
} xfer_upd_begin;

typedef struct {
	const char *job, *member;
	uint64_t version;
	int ok;
	const char *reason;
	double implementation_seconds, density;
	uint64_t wire_bytes;
	const char *const *failed_member, *const *failed_reason;
	const int *failed_verdict;  /* the receiver judged the bytes (ECHECKSUM, EMISMATCH) */
	size_t nfailed;
	xfer_timings timings;       /* the sender's data path split */
	const unsigned char *setup; /* colocated: the handoff again, for a head that took over */
	size_t setup_len;
	const unsigned char *root;  /* 16 bytes: the root of the sums it sent (xfer_root.c); NULL: none */
} xfer_upd_done;

typedef struct {
	const char *job, *member, *endpoint, *reason;
	uint64_t held, staged, failed, generation;
	double seconds;
	xfer_timings timings;       /* of its last receive */
	const unsigned char *root;  /* 16 bytes: the root `staged` was verified against; NULL: none */
	uint64_t journal_bytes, journal_spilled; /* its last receive's undo journal ... */
	const char *journal_where;  /* ... and where it lived (xfer_upd_journal_where) */
} xfer_upd_status;

/* Packed messages, malloc'd (NULL: out of memory). */
uint8_t *xfer_upd_begin_pack(const xfer_upd_begin *b, size_t *len);
uint8_t *xfer_upd_done_pack(const xfer_upd_done *d, size_t *len);
uint8_t *xfer_upd_query_pack(const char *job, uint64_t version, const char *member, size_t *len);
uint8_t *xfer_upd_status_pack(const xfer_upd_status *s, size_t *len);
/* Each answer checked whole before it is used: every string bounded, the
 * state or kind one of those named, a setup of 0 or 128 bytes (colocated:
 * at most XFER_UPD_SETUP_MAX, checked whole by xfer_ipc.c); -1 with
 * XFER_EFORMAT naming the message and the field. */
int xfer_upd_begin_reply_parse(const uint8_t *p, size_t n, xfer_upd_begin_reply *out, xfer_err *err);
void xfer_upd_begin_reply_free(xfer_upd_begin_reply *r);
int xfer_upd_outcome_parse(const uint8_t *p, size_t n, xfer_upd_outcome *out, xfer_err *err);
int xfer_upd_instr_parse(const uint8_t *p, size_t n, xfer_upd_instr *out, xfer_err *err);
void xfer_upd_instr_free(xfer_upd_instr *in);

/* ---- shared by the sender and the engine (update_client.c) ---- */
typedef struct xfer_upd_client xfer_upd_client;
typedef struct {
	char member[XFER_UPD_STR], endpoint[XFER_UPD_STR];
	xfer_endpoint *sub;
	int in_reply;   /* a participant of the version being published */
	int failed;
	xfer_err err;   /* its failure this version */
	uint64_t wire;
} upd_peer;

struct xfer_upd_client {
	xfer_agent *agent;
	pthread_mutex_t mu;     /* the sub-endpoints, for xfer_upd_abort from another thread */
	/* sender */
	upd_peer *peers;
	size_t npeers;
	xfer_endpoint *nccl;    /* the communicator's endpoint (sender and NCCL receivers) */
	unsigned char nccl_id[XFER_NCCL_ID_BYTES];
	uint64_t nccl_set;      /* hash of the participants and ranks it was made for */
	int nccl_rank, nccl_nranks;
	/* engine: update_engine.c keeps its state here */
	uint64_t held, staged, failed, last_notice;
	char reason[512];
	double seconds;
	char endpoint[XFER_UPD_STR];
	xfer_timings timings;   /* the last receive's split, told with seconds */
	uint64_t journal_bytes, journal_spilled; /* the last receive's undo journal, told with it */
	char journal_where[16];
	unsigned char staged_root[16]; /* the root `staged` was verified against (xfer_root.c) ... */
	int has_staged_root;    /* ... when its path keeps one: told to the head in every wait */
	xfer_endpoint *side;    /* a catch-up's disk-delta receiver, or a serve's sender, while it runs */
};
/* broadcast or broadcast_packed */
int xfer_upd_nccl(const xfer_endpoint *ep);
/* The split of a data path's last version, from its stats. */
xfer_timings xfer_upd_timings(const xfer_stats *st);
/* Where the last version's undo journal lived, as the Python package's
 * skein/journal_where says it: none, host, device, pinned, device+pinned. */
const char *xfer_upd_journal_where(const xfer_stats *st);
void xfer_upd_sleep_ms(int ms);
enum {
	XFER_UPD_HEARTBEAT_MS = 500, /* outcome queries while the data path runs */
	XFER_UPD_POLL_MS = 50,       /* outcome polls after a lost answer */
	XFER_UPD_CALL_MS = 5000,     /* a call the head answers at once (wait: within 1 s) */
};
/* xfer_upd_open, _close, _publish, _receive, _stop: xfer_int.h (the API calls them). */
/* From any thread: stops the data path of a publish or receive under way
 * (every peer's sub-endpoint, the NCCL communicator). */
void xfer_upd_abort(xfer_endpoint *ep);
/* One call with its answer parsed by parse (NULL: none), asked again on
 * XFER_EPEER every XFER_UPD_POLL_MS until deadline (monotonic seconds). */
typedef int (*xfer_upd_parse_fn)(const uint8_t *p, size_t n, void *out, xfer_err *err);
int xfer_upd_call(xfer_agent *a, const char *verb, const uint8_t *req, size_t len, int call_ms, double deadline,
		    xfer_upd_parse_fn parse, void *out, xfer_err *err);
/* One `outcome` query (q: xfer_upd_query_pack's): 1 when the head says v was
 * aborted (its reason copied), 0 when not or when there was no answer. */
int xfer_upd_aborted(xfer_agent *a, const uint8_t *q, size_t qlen, uint64_t v, char *reason, size_t n);
/* A thread that asks `outcome` every XFER_UPD_HEARTBEAT_MS and calls
 * xfer_abort_data on the endpoints given when the answer says aborted. */
typedef struct xfer_heartbeat xfer_heartbeat;
xfer_heartbeat *xfer_heartbeat_start(const char *rpc, const char *job, const char *member, uint64_t v,
				     xfer_endpoint *const *eps, size_t neps);
/* Stops it; 1 when it saw the update aborted (reason copied), else 0. */
int xfer_heartbeat_stop(xfer_heartbeat **h, char *reason, size_t n);


/* What the update asks of the endpoint and its path lives in xfer_int.h:
 * xfer_ep_* and the coordinated half of xfer_path_ops (fan, begin_setup,
 * take_setup, commit, forget, drop); nothing here names a path. */

#endif
