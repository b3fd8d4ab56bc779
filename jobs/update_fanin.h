/* jobs/update_fanin: an agent's fan-in of its own engines' waits (issue 25,
 * item 2), as pure logic.
 *
 * Engines keep long-polling their own agent (libskein unchanged); the agent
 * holds those waits and speaks for all of them to the head: one report per
 * node and job carrying every one of its engines' states, answered by the
 * head once per node (the instructions of the engines that have one).  So
 * what the head sees grows with nodes, not engines:
 *   - an engine's new word (staged, failed, a new process, a new version
 *     held) makes the report dirty; a failure goes at once (it aborts the
 *     update), a "staged" waits until every engine the node was told to
 *     receive has its word, at most FLUSH_S after the first unsent word (the
 *     slowest participant decides the update: the others' delay costs
 *     nothing);
 *   - idle, the report is the node's long poll at the head: one in flight,
 *     held there until an instruction or IDLE_S, then sent again, so an idle
 *     node costs the head at most one report per IDLE_S;
 *   - a report unanswered after IDLE_S + FLUSH_S (a head lost) goes again.
 * An engine's wait on its agent is answered by the instruction the head
 * sent for it, or "idle" after HOLD_S (the engine asks again, locally).
 * A node holds at most UPDATE_FANIN_MAX engines: a linear search is cheaper
 * than a hash at that size.  No clock, no I/O: tests drive it on a fake
 * clock (tests/unit/update_fanin_test.c). */
#ifndef UPDATE_FANIN_H
#define UPDATE_FANIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/update_state.h"

enum { UPDATE_FANIN_MAX = 64 }; /* engines of one job on one node */

typedef struct {
	char member[UPDATE_MEMBER_MAX + 1];
	uint64_t gen, held, staged, failed;
	uint64_t expect;               /* told to receive this version: its word is awaited */
	bool waiting;                  /* its wait is held here */
	bool gone;                     /* its process exited: said once in the next report, then forgotten */
	bool dirty;                    /* its word changed since the last report */
	double wait_since, last_seen;
} update_fanin_eng;

typedef struct {
	update_fanin_eng e[UPDATE_FANIN_MAX];
	size_t n;
	bool in_flight;                /* a report at the head, not yet answered */
	bool urgent;                   /* a failure or a new process: report at once */
	double sent_at, first_dirty;
	uint64_t reports;              /* reports sent (the head's messages from this node) */
} update_fanin;

extern const double UPDATE_FANIN_FLUSH_S, UPDATE_FANIN_IDLE_S, UPDATE_FANIN_HOLD_S, UPDATE_FANIN_FORGET_S;

void update_fanin_init(update_fanin *f);

/* An engine's wait on its agent: its state now.  Returns its index, or -1
 * (too many engines: the caller answers it with an error). */
long update_fanin_wait(update_fanin *f, const char *member, uint64_t gen, uint64_t held, uint64_t staged,
		       uint64_t failed, double now);
long update_fanin_find(const update_fanin *f, const char *member);
/* Its process exited (the agent saw it): said in the next report. */
void update_fanin_gone(update_fanin *f, size_t i, double now);

/* When the next report is due: <= now to send it now; a negative value
 * when none is due at all (nothing known). */
double update_fanin_due(const update_fanin *f, double now);
/* The report goes now: every engine's state (the caller packs f->e[0..n)
 * and reads each `gone`); the gone are forgotten after this call's caller
 * packed them, by update_fanin_sent. */
void update_fanin_sent(update_fanin *f, double now);

/* The head's answer to the report came (or said nothing for this node).
 * Then, for each engine with an instruction: update_fanin_told (version
 * the instruction asks it to receive, 0 for any other), after which the
 * caller answers its held wait. */
void update_fanin_answered(update_fanin *f);
void update_fanin_told(update_fanin *f, size_t i, uint64_t receive);

/* Waits held longer than HOLD_S, answered "idle" by the caller: their
 * indices into out (at most cap), count returned; engines not heard from
 * for FORGET_S are forgotten (indices shift: call this before others). */
size_t update_fanin_expire(update_fanin *f, double now, size_t *out, size_t cap);

#endif
