/* raft/raft: Raft consensus (election, log replication, voter changes,
 * snapshots) as pure logic, in the style of membership/mbr.h.
 *
 * Follows the Raft paper (Ongaro & Ousterhout, "In Search of an
 * Understandable Consensus Algorithm") and Ongaro's thesis (pre-vote,
 * single-server membership changes, check-quorum), with hashicorp/raft's
 * timing model and defaults (heartbeat timeout 1 s, election timeout 1 s,
 * leader lease 500 ms, leader stickiness) and its bootstrap (a fixed voter
 * set written as entry 1 of term 1 on every bootstrapping voter).  See
 * raft/raft.c for the design notes and where we differ.
 *
 * The logic never reads a clock, touches a socket or calls rand():
 *   inputs   raft_tick(now), raft_recv(now, bytes), raft_propose, raft_voter_*,
 *            raft_snapshot_take
 *   outputs  raft_pop_out() (a message for one voter, by name),
 *            raft_pop_apply() (committed entries and snapshot restores, in
 *            order, for the state machine), raft_pop_event()
 * Persistence goes through raft_storage (a table of functions the caller
 * provides).  A synchronous storage is durable when a call returns; an
 * asynchronous one (raft_async below: a storage thread, etcd's way) queues
 * the call, and the caller reports what became durable with
 * raft_storage_done.  Either way nothing leaves before what it promises is
 * durable: a vote, and an acknowledgement of entries or a snapshot, wait in
 * raft until their write is (raft_pop_out never returns them before); a
 * candidate counts its own vote, and a leader itself towards a commit, only
 * once durable; entries are applied only when committed and durable here.
 * A leader sends AppendEntries while its own write is still in flight.  A
 * storage failure stops the node (raft_failed()); the agent then exits and
 * a restart recovers from what was stored.
 *
 * Time is in milliseconds on a monotonic clock that keeps counting while
 * the host is suspended (the agent feeds it sk_boot_ms, CLOCK_BOOTTIME: on
 * CLOCK_MONOTONIC a head suspended past its lease would wake believing it
 * still held); randomness comes from the seed in raft_self.  The agent feeds it from libev (agent_head.c) exactly like
 * membership; the unit tests from a fake clock and a fake network. */
#ifndef RAFT_H
#define RAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/wire_frame.h"

enum {
	RAFT_NAME_MAX = 128,        /* bytes of a voter name (= MBR_NAME_MAX) */
	RAFT_VOTERS_MAX = 16,       /* Consul advises 3 or 5; 16 leaves room */
	RAFT_ENTRY_MAX = 1 << 20,   /* bytes of one entry's payload */
	RAFT_SNAPSHOT_MAX = 256 << 20, /* bytes of one snapshot (sent in chunks) */
	RAFT_ERR_MAX = 200,
	/* A leader refuses proposals while this many storage calls are not
	 * yet durable (a disk far slower than the writes: the queue to the
	 * storage thread must not grow without bound). */
	RAFT_BEHIND_MAX = 4096,
};

/* Entry types: the type byte every log entry carries.  Raft's own types are
 * below RAFT_ENTRY_USER; the state machine owns the rest (raft_kv uses
 * 16..31; jobs, placement and weight versions will take the next ranges). */
enum {
	RAFT_ENTRY_NOOP = 0,        /* a new leader's first entry (commit rule) */
	RAFT_ENTRY_VOTERS = 1,      /* the voter set, from here on */
	RAFT_ENTRY_USER = 16,
};

typedef enum { RAFT_FOLLOWER = 0, RAFT_PRECANDIDATE, RAFT_CANDIDATE, RAFT_LEADER } raft_role;
const char *raft_role_str(raft_role r);

typedef struct raft raft_t;

/* ---- configuration ---- */
typedef struct {
	/* A follower that hears nothing from a leader for a random time in
	 * [heartbeat_timeout, 2 x heartbeat_timeout) starts a pre-vote; a voter
	 * refuses (pre-)votes while it heard from a leader less than
	 * heartbeat_timeout ago (leader stickiness). */
	uint32_t heartbeat_timeout_ms;
	/* A (pre-)candidate that has not won after a random time in
	 * [election_timeout, 2 x election_timeout) starts over. */
	uint32_t election_timeout_ms;
	/* A leader stops acting as one (raft_leader_ok false, proposals
	 * refused) when it has had no proof of contact from a majority of
	 * voters for this long; it steps down after heartbeat_timeout without.
	 * Must be < heartbeat_timeout. */
	uint32_t leader_lease_ms;
	/* The leader sends an AppendEntries to every follower at least this
	 * often (hashicorp: heartbeat_timeout / 10). */
	uint32_t heartbeat_interval_ms;
	uint32_t max_append_entries;  /* entries per AppendEntries */
	uint32_t max_append_bytes;    /* payload bytes per AppendEntries */
	/* raft_snapshot_wanted() says yes once this many entries follow the
	 * last snapshot; the log keeps `snapshot_trailing` entries behind a
	 * snapshot so a briefly slow follower catches up from the log. */
	uint32_t snapshot_threshold;
	uint32_t snapshot_trailing;
	/* A snapshot travels in chunks of at most this many bytes, each
	 * acknowledged before the next (the control channel carries 64 MiB
	 * at most in one message). */
	uint32_t snapshot_chunk_bytes;
} raft_config;

/* "default" (hashicorp/raft's numbers) or "fast" (4x faster, one fabric). */
int raft_config_profile(raft_config *c, const char *profile);
/* Checks the values make sense together (lease < heartbeat timeout, ...). */
int raft_config_check(const raft_config *c, char *err, size_t errlen);

/* ---- storage seam ---- */
typedef struct {
	uint64_t index;
	uint64_t term;
	uint8_t type;
	const uint8_t *data;
	size_t len;
} raft_entry;

/* A voter set: names, sorted, no duplicates. */
typedef struct {
	size_t n;
	char names[RAFT_VOTERS_MAX][RAFT_NAME_MAX + 1];
} raft_voters;

typedef struct {
	uint64_t index;           /* last entry the snapshot includes; 0 = none */
	uint64_t term;            /* its term */
	raft_voters voters;       /* the voter set as of that entry */
} raft_snap_meta;

/* What raft_storage.load returns.  Every pointer is malloc'd and owned by
 * raft after a successful load (it frees them with free()). */
typedef struct {
	uint64_t term;
	char vote[RAFT_NAME_MAX + 1];   /* "" = no vote in this term */
	raft_snap_meta snap;
	uint8_t *snap_data;
	size_t snap_len;
	raft_entry *entries;            /* contiguous; each data malloc'd */
	size_t nentries;
} raft_loaded;

/* Every function returns 0, or -1 with a message in err.
 *
 * Synchronous (async false): what a call stores is durable when it returns,
 * except that append and truncate may leave it to `sync` when the table has
 * one (raft calls sync after them: one fsync for a batch of records).
 *
 * Asynchronous (async true): the calls only queue the work; it must be done
 * in call order.  raft numbers its calls 1, 2, 3, ... from raft_new on (load
 * and sync not counted), and the caller reports with raft_storage_done(n)
 * that calls 1..n are durable (or raft_storage_failed).  Work not yet
 * reported may be lost in a crash, in part or whole, but only from the end:
 * call k on disk implies every call before k on disk. */
typedef struct {
	void *ctx;
	bool async;
	int (*load)(void *ctx, raft_loaded *out, char *err, size_t errlen);
	int (*save_hard)(void *ctx, uint64_t term, const char *vote, char *err, size_t errlen);
	/* Appends entries (contiguous, following the last stored one). */
	int (*append)(void *ctx, const raft_entry *e, size_t n, char *err, size_t errlen);
	/* Drops every entry with index >= from. */
	int (*truncate)(void *ctx, uint64_t from, char *err, size_t errlen);
	/* Stores the snapshot (atomically replacing the old one), then drops
	 * entries with index <= compact_upto. */
	int (*save_snapshot)(void *ctx, const raft_snap_meta *meta, const uint8_t *data,
			     size_t len, uint64_t compact_upto, char *err, size_t errlen);
	/* Optional: makes the appends and truncations before it durable. */
	int (*sync)(void *ctx, char *err, size_t errlen);
} raft_storage;

/* An asynchronous storage's report: its calls 1..seq are durable.  Messages
 * that waited for them become poppable, a vote or a commit may follow. */
void raft_storage_done(raft_t *r, uint64_t now_ms, uint64_t seq);
/* An asynchronous storage's report: a call failed; the node stops
 * (RAFT_EV_FAILED), as with a synchronous failure. */
void raft_storage_failed(raft_t *r, const char *err);
/* Storage calls made, and reported durable (equal with a synchronous one). */
uint64_t raft_storage_issued(const raft_t *r);
uint64_t raft_storage_durable(const raft_t *r);
/* The last index of our log that is durable here. */
uint64_t raft_durable_index(const raft_t *r);

/* In-memory storage for tests: survives raft_destroy (a "crash-restart"
 * keeps it), freed by raft_mem_storage_free. */
raft_storage *raft_mem_storage_new(void);
void raft_mem_storage_free(raft_storage **s);
/* What it holds: the hard state; whether entry index of that term (0: of
 * any term) is there, or covered by its snapshot.  The tests check
 * durability with them. */
void raft_mem_storage_hard(const raft_storage *s, uint64_t *term, const char **vote);
bool raft_mem_storage_has(const raft_storage *s, uint64_t index, uint64_t term);

/* File storage in a directory (raft/raft_file.c): log, hard state and
 * snapshot files; appends are durable at sync (one fdatasync for a batch).
 * fsync off is for tests only.  Synchronous; raft_async.h runs it on a
 * storage thread. */
raft_storage *raft_file_storage_new(const char *dir, bool fsync_on, char *err, size_t errlen);
void raft_file_storage_free(raft_storage **s);
/* The file storage's sync seam, for tests: every fdatasync (data_only) or
 * fsync of the log, and fsync of its directory, goes through sync (0, or
 * -1 with errno).  A test fails a sync, or remembers the last synced offset
 * of each log and drops the rest to simulate a power loss.  Process-wide;
 * NULL restores the real calls.  Writes of the hard state and the snapshot
 * (and a compaction's new log) are fsync'd whole and not routed here. */
typedef struct {
	int (*sync)(void *ctx, int fd, const char *path, bool data_only);
	void *ctx;
} raft_file_io;
void raft_file_set_io(const raft_file_io *io);

/* A storage thread (raft/raft_async.c): wraps a synchronous storage (the
 * file storage) into an asynchronous one whose calls only queue; the
 * thread does them in order, one sync per batch.  notify(ctx) runs on the
 * thread after each batch, or a failure: wake the loop (ev_async_send),
 * which calls raft_async_deliver. */
typedef struct raft_async raft_async;
typedef struct {
	uint64_t queued, done;      /* calls numbered; durable */
	uint64_t batches, calls;    /* batches written (one sync each); calls in them */
	uint64_t max_batch, max_batch_ms; /* the largest batch; the slowest, in ms */
} raft_async_stats;
raft_async *raft_async_new(raft_storage *inner, void (*notify)(void *ctx), void *ctx, char *err, size_t errlen);
/* The table to give raft_new. */
raft_storage *raft_async_storage(raft_async *a);
/* On the loop: tells raft what is durable now, or that a call failed. */
void raft_async_deliver(raft_async *a, raft_t *r, uint64_t now_ms);
void raft_async_get_stats(raft_async *a, raft_async_stats *st);
/* Finishes what is queued, stops the thread, frees (not the inner
 * storage); *a = NULL, safe twice. */
void raft_async_free(raft_async **a);

/* ---- lifecycle ---- */
typedef struct {
	const char *name;         /* this voter's name (its gossip name) */
	uint64_t seed;            /* every random choice this node makes */
} raft_self;

/* Loads the stored state.  A node with nothing stored waits for
 * raft_bootstrap or for a leader to replicate a voter set to it. */
raft_t *raft_new(const raft_config *cfg, const raft_self *self, raft_storage *st,
		 uint64_t now_ms, char *err, size_t errlen);
/* Frees everything (not the storage); *r = NULL. */
void raft_destroy(raft_t **r);

/* Writes the first voter set (entry 1, term 1), once, on a node with an
 * empty store.  Every bootstrapping voter must be given the same set; the
 * agent calls it when bootstrap-expect head-eligible agents are visible
 * (and again while it has no voter set: a crash may lose a bootstrap that
 * was not yet durable, even half of it).  -1 when the store is not empty
 * or the set is bad. */
int raft_bootstrap(raft_t *r, uint64_t now_ms, const raft_voters *v, char *err, size_t errlen);
/* Sorts and checks a set of names into *v; -1 on a bad or repeated name. */
int raft_voters_make(raft_voters *v, const char *const *names, size_t n, char *err, size_t errlen);
bool raft_voters_has(const raft_voters *v, const char *name);

/* ---- inputs ---- */
void raft_tick(raft_t *r, uint64_t now_ms);
/* The next instant raft_tick has work. */
uint64_t raft_next_deadline(const raft_t *r);
/* One message from another voter; bad input is counted and dropped. */
void raft_recv(raft_t *r, uint64_t now_ms, const uint8_t *buf, size_t len);

/* Leader only: appends a state-machine entry (type >= RAFT_ENTRY_USER).
 * On success *index and *term identify it: the write is committed when
 * raft_pop_apply returns that index with that term; a different term at
 * that index (or losing leadership first) means it was lost: retry.
 * -1 when not leader, the payload is too big, or storage failed. */
int raft_propose(raft_t *r, uint64_t now_ms, uint8_t type, const uint8_t *data, size_t len,
		 uint64_t *index, uint64_t *term, char *err, size_t errlen);
/* Leader only: one voter change at a time, through the log.  -1 when a
 * change is in flight, the leader has not committed an entry of its term
 * yet, or the result would be empty or too large.  An added voter first
 * catches up as a non-voting peer; the set with it is appended once its log
 * is within one AppendEntries of the commit index (raft_staging names it
 * meanwhile; after 10 election timeouts it is dropped: RAFT_EV_VOTERS with
 * a reason). */
int raft_voter_add(raft_t *r, uint64_t now_ms, const char *name, char *err, size_t errlen);
/* Leader: the voter-to-be catching up, or NULL. */
const char *raft_staging(const raft_t *r);
int raft_voter_remove(raft_t *r, uint64_t now_ms, const char *name, char *err, size_t errlen);
/* Leader only: hands leadership to voter `name` (NULL or "": the voter with
 * the most of the log; its name in target).  Writes are refused until the
 * target has every entry; then the leader steps down (RAFT_EV_STEPDOWN,
 * "handing over to ...") and the target stands at once.  Abandoned after
 * election_timeout (RAFT_EV_TRANSFER).  -1 when not leader, a handover is
 * under way, or name is not another voter. */
int raft_transfer(raft_t *r, uint64_t now_ms, const char *name, char *target, size_t tlen, char *err,
		  size_t errlen);
/* The voter a handover under way goes to, or NULL. */
const char *raft_transfer_target(const raft_t *r);
/* This node never stands for election again (it still votes and follows):
 * for a voter on its way out, which must not take the head back. */
void raft_stop_campaigning(raft_t *r);

/* ---- outputs ---- */
typedef struct {
	char to[RAFT_NAME_MAX + 1];
	uint8_t *data;            /* an encoded message, malloc'd: the caller frees it */
	size_t len;
} raft_out;
int raft_pop_out(raft_t *r, raft_out *out);

typedef enum {
	RAFT_APPLY_ENTRY = 0,     /* a committed entry (all types; skip < USER) */
	RAFT_APPLY_SNAPSHOT,      /* replace the state with this snapshot */
} raft_apply_kind;
typedef struct {
	raft_apply_kind kind;
	uint64_t index, term;     /* of the entry, or the snapshot's last entry */
	uint8_t type;
	const uint8_t *data;      /* valid until the next call into raft */
	size_t len;
} raft_apply;
/* The next committed entry or snapshot to apply, in log order; 1 or 0. */
int raft_pop_apply(raft_t *r, raft_apply *a);

typedef enum {
	RAFT_EV_LEADER = 0,       /* we became leader of `term` */
	RAFT_EV_FOLLOWER,         /* we follow `leader` in `term` ("" = unknown) */
	RAFT_EV_STEPDOWN,         /* we stopped leading (reason says why) */
	RAFT_EV_VOTERS,           /* the voter set changed (latest, maybe uncommitted); with a
				   * reason: a voter-to-be was dropped */
	RAFT_EV_FAILED,           /* storage failed: stop the node, restart it */
	RAFT_EV_CANDIDATE,        /* we stand for election in `term` (reason: how many pre-votes) */
	RAFT_EV_TRANSFER,         /* a handover we started was abandoned (reason says why) */
	RAFT_EV_WARNING,          /* something an operator should know (reason) */
} raft_event_type;
const char *raft_event_str(raft_event_type t);
typedef struct {
	raft_event_type type;
	uint64_t term;
	char leader[RAFT_NAME_MAX + 1];
	char reason[RAFT_ERR_MAX];
	uint64_t at_ms;
	bool planned;             /* RAFT_EV_STEPDOWN of a completed handover, not a lost lease */
} raft_event;
int raft_pop_event(raft_t *r, raft_event *ev);

/* ---- snapshots ---- */
/* True when enough entries follow the last snapshot. */
bool raft_snapshot_wanted(const raft_t *r);
/* The state machine's serialized state as of the entry `index`, which is
 * the last one the caller took from raft_pop_apply.  raft stores it and
 * compacts the log.  -1 on a bad index or a storage failure. */
int raft_snapshot_take(raft_t *r, uint64_t now_ms, uint64_t index, const uint8_t *data,
		       size_t len, char *err, size_t errlen);

/* ---- queries ---- */
raft_role raft_get_role(const raft_t *r);
uint64_t raft_term(const raft_t *r);
/* The leader we know in the current term, or NULL. */
const char *raft_leader(const raft_t *r);
bool raft_is_leader(const raft_t *r);
/* Leader and its lease still holds at now_ms: the agent checks this
 * before it sends an order or answers a read as the head. */
bool raft_leader_ok(const raft_t *r, uint64_t now_ms);
/* raft_leader_ok, and an entry of the current term has been handed out by
 * raft_pop_apply (the caller applies what it pops at once): the state
 * machine holds every write committed before this term, so a read of it
 * is linearizable.  A new leader is not ready until its no-op applies. */
bool raft_read_ok(const raft_t *r, uint64_t now_ms);
uint64_t raft_commit_index(const raft_t *r);
uint64_t raft_last_index(const raft_t *r);
uint64_t raft_snapshot_index(const raft_t *r);
/* The latest voter set in the log (committed or not). */
const raft_voters *raft_get_voters(const raft_t *r);
/* Leader only: ms since the last proof of contact with a voter; -1 when
 * unknown (not leader, or not a voter).  0 for ourselves. */
int64_t raft_last_contact_ms(const raft_t *r, const char *name, uint64_t now_ms);
bool raft_failed(const raft_t *r);
const char *raft_name(const raft_t *r);
const raft_config *raft_get_config(const raft_t *r);

typedef struct {
	uint64_t msgs_sent, msgs_recv;
	uint64_t drop[WIRE_ERR__COUNT]; /* by wire_err (raft_codec_decode) */
	uint64_t drop_stale_term;   /* a message of an older term */
	uint64_t drop_not_voter;    /* from a name outside the voter set, where it matters */
	uint64_t drop_bad_state;    /* valid bytes that make no sense here */
	uint64_t elections, prevotes, leaderships, stepdowns_lease; /* (no majority for a heartbeat timeout) */
	uint64_t votes_refused_sticky;
	uint64_t votes_outside_set; /* (pre-)vote requests heard from outside our voter set */
	uint64_t snapshots_taken, snapshots_sent, snapshots_installed, snapshot_chunks_sent;
	uint64_t truncations;
	uint64_t transfers, transfers_failed, transfers_received; /* handovers sent, abandoned, answered */
	uint64_t peer_log_lost;     /* a follower answered without entries it had acknowledged */
	uint64_t replies_held;      /* answers that waited for our disk before they left */
	uint64_t replies_syncing;   /* "still syncing" answers sent meanwhile (contact, no promise) */
	uint64_t proposals_behind;  /* proposals refused: too many writes not yet durable */
} raft_stats;
const raft_stats *raft_get_stats(const raft_t *r);

/* ---- fencing ---- */
/* An agent keeps the newest head term it has seen and refuses orders from
 * an older one.  raft_fence_check returns 0 and records `term` when it is
 * >= the newest seen, -1 (refuse the order) when it is older. */
typedef struct { uint64_t newest; } raft_fence;
int raft_fence_check(raft_fence *f, uint64_t term);

#endif
