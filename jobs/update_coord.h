/* jobs/update_coord: the rules of one open weight update, as pure logic
 * (docs/updates.md, "The transaction").
 *
 * The head's coordinator (agent/agent_update.c) keeps the wiring: the clients
 * waiting, the engines' table, membership, Raft.  What it decides about an
 * open update it asks this module, the way membership/mbr.c and
 * raft/raft.c work:
 *   inputs   the time (`now`, seconds on any monotonic clock; `wall_ms`
 *            where a record needs the wall clock) and the events: begun,
 *            a participant's staged/failed word, a participant lost (its
 *            process or node), the sender's heartbeat, done, loss or a
 *            newer begin, the tick (the watchdog);
 *   outputs  every event returns true when the update has just become
 *            final: the caller proposes update_coord_final() (once); after it
 *            applied, update_coord_measured() is the amendment.
 * No clock, no I/O, no randomness, no protobuf: tests drive it on a fake
 * clock (tests/unit/update_coord_test.c). */
#ifndef UPDATE_COORD_H
#define UPDATE_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/update_state.h"

enum { WVC_REASON_MAX = 400 };

/* A participant's verdict, beside its entry in rec.engines (same index). */
typedef struct {
	uint8_t root[UPDATE_DIGEST_LEN];   /* the root it verified against (EngineStatus.root) */
	bool has_root;
} update_coord_part;

typedef struct {
	update_rec rec;                 /* the begin record, its participants' states kept up to date */
	update_coord_part *part;           /* rec.nengines of them (malloc'd by update_coord_start) */
	bool drop;                     /* --update-on-engine-loss drop (else abort) */
	bool adopted;                  /* from a previous head's record: the clocks start at the takeover */
	int timeout_ms;                /* --update-weight-timeout; 0: no watchdog */
	bool begun;                    /* the begin record applied */
	bool done, done_ok;            /* the sender's done came */
	bool final;                    /* the final record decided (proposed by the caller) */
	size_t npending;               /* participants pending: a commit is not a pass over them all */
	double t_begin, t_answer, t_progress, t_last_word;
	/* from the sender's done, into the final record */
	double impl_s, density;
	uint64_t wire_bytes;
	update_timings sender_t;
	/* the verdict once final */
	char final_state[UPDATE_STATE_NAME_MAX + 1], final_cause[UPDATE_CAUSE_MAX + 1], final_reason[WVC_REASON_MAX];
} update_coord;

/* c takes rec (moved: the caller no longer frees it) and starts its
 * clocks at now: -1 when memory runs out (rec freed then). */
int update_coord_start(update_coord *c, update_rec *rec, double now, int timeout_ms, bool drop, bool adopted);
void update_coord_free(update_coord *c);   /* safe twice */

/* The index of member among the participants, or -1. */
long update_coord_find(const update_coord *c, const char *member);
/* Participants still pending (counted as their states change here: the
 * caller changes no state itself). */
size_t update_coord_pending(const update_coord *c);

/* The begin record applied (the sender is answered now: prepare_seconds). */
void update_coord_begun(update_coord *c, double now);
/* The sender's begin said again, or its heartbeat while it moves bytes:
 * progress for the watchdog (an engine's own heartbeat is not). */
void update_coord_progress(update_coord *c, double now);

/* Participant i staged (verified) the version; root NULL when it said none. */
bool update_coord_staged(update_coord *c, size_t i, double now, double seconds, update_timings t, const uint8_t *root);
/* Participant i failed to receive or verify it: the update aborts. */
bool update_coord_failed(update_coord *c, size_t i, double now, double seconds, update_timings t, const char *why);
/* Participant i is gone (fault false: its process or node; dropped in
 * drop mode) or at fault.  by_sender: the sender's done lists it, which
 * holds even over an earlier "verified". */
bool update_coord_lose(update_coord *c, size_t i, double now, const char *why, bool fault, bool by_sender);

/* The sender's done (ok, or its failure's reason; root NULL when none).
 * The caller then reports the participants the done lists (update_coord_lose,
 * by_sender) and calls update_coord_settle. */
bool update_coord_done(update_coord *c, double now, bool ok, const char *reason, const uint8_t *root, double impl_s,
		   uint64_t wire_bytes, double density, update_timings sender_t);
/* Committed when it can be: begun, the sender done, nobody pending, every
 * verified root the sender's. */
bool update_coord_settle(update_coord *c, double now);
/* The sender died or lost its node; the sender began a newer version. */
bool update_coord_sender_lost(update_coord *c, double now, const char *why);
bool update_coord_superseded(update_coord *c, double now, const char *why);
/* The watchdog: no progress for timeout_ms aborts, naming who it waits for. */
bool update_coord_tick(update_coord *c, double now);

/* Seconds from the begin to now (adopted: from the record's wall-clock
 * start, the only clock two heads share). */
double update_coord_since_begin(const update_coord *c, double now, uint64_t wall_ms);
/* The final record (out: update_rec_free it): 0, -1 when memory runs out. */
int update_coord_final(const update_coord *c, double now, uint64_t wall_ms, update_rec *out);
/* The measured amendment of the applied final record rec: 0 with *out
 * filled, 1 when none is due (rec measured already, or not this head's),
 * -1 when memory runs out. */
int update_coord_measured(const update_coord *c, const update_rec *rec, double now, uint64_t wall_ms, update_rec *out);

#endif
