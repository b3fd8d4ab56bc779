/* jobs/wv_coord: the rules of one open weight update, as pure logic
 * (docs/updates.md, "The transaction").
 *
 * The head's coordinator (agent/agent_wv.c) keeps the wiring: the clients
 * waiting, the engines' table, membership, Raft.  What it decides about an
 * open update it asks this module, the way membership/mbr.c and
 * raft/raft.c work:
 *   inputs   the time (`now`, seconds on any monotonic clock; `wall_ms`
 *            where a record needs the wall clock) and the events: begun,
 *            a participant's staged/failed word, a participant lost (its
 *            process or node), the sender's heartbeat, done, loss or a
 *            newer begin, the tick (the watchdog);
 *   outputs  every event returns true when the update has just become
 *            final: the caller proposes wv_coord_final() (once); after it
 *            applied, wv_coord_measured() is the amendment.
 * No clock, no I/O, no randomness, no protobuf: tests drive it on a fake
 * clock (tests/unit/wv_coord_test.c). */
#ifndef WV_COORD_H
#define WV_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/wv_state.h"

enum { WVC_REASON_MAX = 400 };

/* A participant's verdict, beside its entry in rec.engines (same index). */
typedef struct {
	uint8_t root[WV_DIGEST_LEN];   /* the root it verified against (EngineStatus.root) */
	bool has_root;
} wv_coord_part;

typedef struct {
	wv_update rec;                 /* the begin record, its participants' states kept up to date */
	wv_coord_part *part;           /* rec.nengines of them (malloc'd by wv_coord_start) */
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
	wv_timings sender_t;
	/* the verdict once final */
	char final_state[WV_STATE_NAME_MAX + 1], final_cause[WV_CAUSE_MAX + 1], final_reason[WVC_REASON_MAX];
} wv_coord;

/* c takes rec (moved: the caller no longer frees it) and starts its
 * clocks at now: -1 when memory runs out (rec freed then). */
int wv_coord_start(wv_coord *c, wv_update *rec, double now, int timeout_ms, bool drop, bool adopted);
void wv_coord_free(wv_coord *c);   /* safe twice */

/* The index of member among the participants, or -1. */
long wv_coord_find(const wv_coord *c, const char *member);
/* Participants still pending (counted as their states change here: the
 * caller changes no state itself). */
size_t wv_coord_pending(const wv_coord *c);

/* The begin record applied (the sender is answered now: prepare_seconds). */
void wv_coord_begun(wv_coord *c, double now);
/* The sender's begin said again, or its heartbeat while it moves bytes:
 * progress for the watchdog (an engine's own heartbeat is not). */
void wv_coord_progress(wv_coord *c, double now);

/* Participant i staged (verified) the version; root NULL when it said none. */
bool wv_coord_staged(wv_coord *c, size_t i, double now, double seconds, wv_timings t, const uint8_t *root);
/* Participant i failed to receive or verify it: the update aborts. */
bool wv_coord_failed(wv_coord *c, size_t i, double now, double seconds, wv_timings t, const char *why);
/* Participant i is gone (fault false: its process or node; dropped in
 * drop mode) or at fault.  by_sender: the sender's done lists it, which
 * holds even over an earlier "verified". */
bool wv_coord_lose(wv_coord *c, size_t i, double now, const char *why, bool fault, bool by_sender);

/* The sender's done (ok, or its failure's reason; root NULL when none).
 * The caller then reports the participants the done lists (wv_coord_lose,
 * by_sender) and calls wv_coord_settle. */
bool wv_coord_done(wv_coord *c, double now, bool ok, const char *reason, const uint8_t *root, double impl_s,
		   uint64_t wire_bytes, double density, wv_timings sender_t);
/* Committed when it can be: begun, the sender done, nobody pending, every
 * verified root the sender's. */
bool wv_coord_settle(wv_coord *c, double now);
/* The sender died or lost its node; the sender began a newer version. */
bool wv_coord_sender_lost(wv_coord *c, double now, const char *why);
bool wv_coord_superseded(wv_coord *c, double now, const char *why);
/* The watchdog: no progress for timeout_ms aborts, naming who it waits for. */
bool wv_coord_tick(wv_coord *c, double now);

/* Seconds from the begin to now (adopted: from the record's wall-clock
 * start, the only clock two heads share). */
double wv_coord_since_begin(const wv_coord *c, double now, uint64_t wall_ms);
/* The final record (out: wv_update_free it): 0, -1 when memory runs out. */
int wv_coord_final(const wv_coord *c, double now, uint64_t wall_ms, wv_update *out);
/* The measured amendment of the applied final record rec: 0 with *out
 * filled, 1 when none is due (rec measured already, or not this head's),
 * -1 when memory runs out. */
int wv_coord_measured(const wv_coord *c, const wv_update *rec, double now, uint64_t wall_ms, wv_update *out);

#endif
