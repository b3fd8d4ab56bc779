/* raft/raft_int.h: helpers shared inside the raft module (not public). */
#ifndef RAFT_INT_H
#define RAFT_INT_H

#include "common/sk_rng.h"
#include "raft/raft.h"
#include "raft/raft_codec.h"

/* A voter set as bytes (the payload of a RAFT_ENTRY_VOTERS entry, and the
 * voters of a snapshot file): u8 count, then per name u8 length + bytes.
 * raft__voters_encode needs RAFT__VOTERS_BYTES bytes at most. */
enum { RAFT__VOTERS_BYTES = 1 + RAFT_VOTERS_MAX * (1 + RAFT_NAME_MAX) };
size_t raft__voters_encode(const raft_voters *v, uint8_t *buf);
/* -1 on a malformed payload or a bad set. */
int raft__voters_decode(raft_voters *v, const uint8_t *buf, size_t len);

/* Storage helper: 0 when `first` follows `last`, else -1 with a message. */
int raft__append_follows(uint64_t last, uint64_t first, char *err, size_t errlen);

/* Frees what a raft_loaded holds and zeroes it. */
void raft__loaded_free(raft_loaded *l);

/* ---- the node's state (raft.c; raft_change.c works on it too) ---- */

enum {
	/* Outputs or events the caller has not drained after this many are
	 * dropped and counted, so a stuck caller cannot grow us forever. */
	RAFT_QUEUE_CAP = 1 << 16,
};

typedef struct {
	uint64_t index, term;
	uint8_t type;
	uint8_t *data;
	size_t len;
	uint64_t seq;             /* the storage call that wrote it (0: loaded) */
} lentry;

/* A message waiting until storage call `seq` is durable. */
typedef struct {
	raft_out out;
	uint64_t seq;
	bool reply;               /* an AppendEntries or InstallSnapshot answer */
} held_out;

typedef struct {
	char name[RAFT_NAME_MAX + 1];
	uint64_t next, match;
	uint64_t contact;         /* largest echo returned in this term */
	uint64_t sent_at, snap_sent_at;
	uint64_t snap_off;        /* the snapshot chunk in flight starts here */
	bool inflight, snap_inflight;
	bool learner;             /* a voter-to-be catching up: not counted */
} peer;

struct raft {
	raft_config cfg;
	sk_rng rng;
	char name[RAFT_NAME_MAX + 1];
	raft_storage *st;
	bool failed;
	/* storage calls made, and reported durable; the calls that last wrote
	 * the hard state and the snapshot (raft.h: the storage seam) */
	uint64_t st_issued, st_durable, hard_seq, snap_seq;
	held_out *held;           /* messages waiting for the disk, in order */
	size_t nheld, capheld;
	uint64_t reply_at;        /* an answer to the leader last left then */

	/* persistent */
	uint64_t term;
	char vote[RAFT_NAME_MAX + 1];
	lentry *log;              /* indexes log_start .. log_start + nlog - 1 */
	size_t nlog, caplog;
	uint64_t log_start;
	raft_snap_meta snap;
	uint8_t *snap_data;
	size_t snap_len;

	/* follower: a snapshot being received in chunks */
	raft_snap_meta rs;
	uint8_t *rs_buf;
	uint64_t rs_total, rs_have;

	/* derived */
	raft_voters voters;       /* latest in the log */
	uint64_t voters_index;    /* the entry that set it (snapshot's index if from there) */

	/* volatile */
	raft_role role;
	char leader[RAFT_NAME_MAX + 1];
	uint64_t commit, applied;
	bool restore_pending;
	uint64_t election_at, sticky_until, elect_start, last_now;
	bool granted[RAFT_VOTERS_MAX];
	peer peers[RAFT_VOTERS_MAX];   /* leader: one per voter but us */
	size_t npeers;
	char staging[RAFT_NAME_MAX + 1]; /* leader: a voter-to-be catching up ("" = none) */
	uint64_t staging_until;
	char xfer_to[RAFT_NAME_MAX + 1]; /* leader: handing over to it ("" = not) */
	bool handed_over;          /* the step-down under way completes a handover */
	uint64_t xfer_start, xfer_until; /* ... since, until */
	bool campaign_transfer;          /* the election being started answers a TimeoutNow */
	bool no_campaign;                /* raft_stop_campaigning: never stand again */

	raft_out *outs;
	size_t out_head, out_len, out_cap;
	raft_event *evs;
	size_t ev_head, ev_len, ev_cap;
	raft_stats stats;
};

/* raft.c's helpers that raft_change.c uses (see raft.c for each) */
void raft__push_event(raft_t *r, raft_event_type t, const char *reason);
void raft__send_msg(raft_t *r, const char *to, raft_msg *m);
uint64_t raft__last_index(const raft_t *r);
bool raft__term_at(const raft_t *r, uint64_t i, uint64_t *term);
bool raft__self_voter(const raft_t *r);
peer *raft__find_peer(raft_t *r, const char *name);
void raft__rebuild_peers(raft_t *r, uint64_t now);
int raft__become_follower(raft_t *r, uint64_t now, uint64_t term, const char *leader, const char *why);
void raft__start_election(raft_t *r, uint64_t now);
void raft__send_append(raft_t *r, peer *p, uint64_t now);
int raft__leading(raft_t *r, uint64_t *now, char *err, size_t errlen);
int raft__leader_append(raft_t *r, uint64_t now, uint8_t type, const uint8_t *data, size_t len, char *err,
			size_t errlen);

/* raft_change.c's, called from raft.c: a handover's and a newcomer's
 * progress, checked on every answer and tick; a TimeoutNow received */
void raft__transfer_check(raft_t *r, uint64_t now);
void raft__staging_check(raft_t *r, uint64_t now);
void raft__on_timeout_now(raft_t *r, uint64_t now, const raft_msg *m);

#endif
