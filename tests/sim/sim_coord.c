/* tests/sim/sim_coord: `skein-sim coord`, the head's update coordinator at
 * scale (issue 25, item 5).
 *
 * Drives the real coordinator (jobs/update_coord), the real records (their
 * codec and jobs/update_state, applied on each voter's replica), the real
 * Raft (raft/raft.c on raft_mem storage, three voters on agents 0..2, its
 * messages a latency apart on the event heap) and the real membership
 * (tests/sim: SWIM on every agent, the head learning of a node's failure
 * from its own view) on a fake clock: agents x engines-per-agent engines of
 * one job ("j/engine-<id>" on agent id / engines-per-agent), a trainer on
 * the last agent, the head wherever Raft elects its leader.  A stream of updates with faults drawn
 * from the seed: an engine's process exits mid-update (it comes back two
 * updates later), every 5th update a node fails (its engines are lost when
 * the head's membership view says so; it restarts three updates later),
 * and in the middle update the head fails (its raft with it): the voter
 * Raft elects next adopts the open record from its replica (at once, or
 * when it applies the begin in its own term; a begin that was lost with
 * the old head is asked again by the trainer), the agents (level-
 * triggered) and the sender say their words again, and the update
 * finishes; the old head's raft restarts on its storage three updates on.
 *
 * Raft bytes are the records' packed size (the log entries' payload);
 * raft's ticks and messages are not counted as the head's CPU (only the
 * proposals, the head's replica and coordinator).  Raft's clock is in
 * milliseconds: a commit takes 1-2 ms at 0.5 ms latency.  Messages at the head are those of
 * the fan-in by node (item 2): every agent runs the real jobs/update_fanin
 * over its engines' words (which reach only their own agent) and sends the
 * head one report per node when it is due, held there as the node's long
 * poll; the head answers each node once per instruction (receive, commit)
 * and a newer report replaces the held one on the node's connection
 * without an answer.  Counted at the head: the sender's begin and done and
 * their answers, every report that arrives, every answer to a node.  CPU
 * is measured on this machine (CLOCK_THREAD_CPUTIME_ID) around the head's
 * own calls: the coordinator, the reports, building, packing and applying
 * records, adopting; idle CPU is the head's handling of the idle nodes'
 * reports (one per node per UPDATE_FANIN_IDLE_S, each a lookup of its
 * engines in the last record) over a simulated idle minute.  All else is a
 * pure function of the seed. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sk_heap.h"
#include "common/sk_rng.h"
#include "jobs/update_coord.h"
#include "jobs/update_fanin.h"
#include "jobs/update_state.h"
#include "raft/raft.h"
#include "tests/sim/sim.h"

enum { EV_RTICK, EV_RPKT, EV_STAGED, EV_DONE, EV_EXIT, EV_FAILOVER, EV_POLL, EV_TICK, EV_FLUSH, EV_RESEND, EV_REPORT, EV_REBEGIN };
enum { VOTERS = 3 };  /* agents 0, 1, 2: the head, its standby, a third */

/* One engine's word in a node's report (EV_REPORT). */
enum { W_NONE, W_STAGED, W_FAILED, W_GONE };
typedef struct {
	uint32_t id;
	uint8_t word;
} said;

typedef struct {
	int kind;
	uint32_t a;                    /* engine id, or the entry's index */
	uint64_t v;                    /* the update */
	said *snap;                    /* EV_REPORT: the node's engines (malloc'd) */
	size_t nsnap;
	uint8_t *pkt;                  /* EV_RPKT: a raft message to voter a (malloc'd) */
	size_t plen;
} ev;

typedef struct {
	uint8_t *data;
	size_t len;
	uint64_t proposed_us;
	bool final;
	uint64_t index, term;          /* in the raft log */
} entry;

typedef struct {
	sim_t *mbr;
	sk_heap heap;
	sk_rng rng;
	uint32_t agents, epa, E, head, trainer;
	uint64_t lat_us;
	update_state *rep[VOTERS];     /* each voter's replica, applied from its raft */
	raft_t *raft[VOTERS];
	raft_storage *st[VOTERS];
	raft_config rcfg;
	bool rdown[VOTERS];            /* its process is gone (killed): no ticks, packets to it lost */
	uint64_t rtick_at[VOTERS];     /* its EV_RTICK scheduled (0: none) */
	update_coord co;
	bool open, head_up;
	uint64_t failed_at;            /* when the head failed */
	uint64_t v;
	uint32_t *dead_until;          /* per engine: its process is gone until update N (0: runs) */
	uint32_t *node_dead_until;     /* per agent: down until update N */
	uint32_t *gen;                 /* per engine: its process's generation */
	update_fanin *fan;             /* per agent: its engines' waits (jobs/update_fanin) */
	uint64_t *flush_at;            /* per agent: its EV_FLUSH scheduled (0: none) */
	bool *part_node;               /* per agent: it has participants in the open update */
	uint32_t watch[8];             /* failed nodes the head has not seen fail yet */
	size_t nwatch;
	size_t uncommitted;            /* entries proposed, not yet applied */
	uint64_t full_bytes;           /* every record packed as main does (all engines): the baseline */
	entry *log;
	size_t nlog, logcap;
	/* per update */
	uint64_t bytes, msgs, entries, t_verdict, t_committed;
	double cpu_ms;
	bool done_sent;
	/* totals */
	double *commit_ms;
	size_t *upd_bytes;
} cs;

static double cpu_now_ms(void);
static double cpu_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void at(cs *c, uint64_t t, int kind, uint32_t a, uint64_t v)
{
	ev *e = malloc(sizeof *e);
	if (!e || sk_heap_push(&c->heap, t, e) < 0) {
		fprintf(stderr, "skein-sim coord: out of memory\n");
		exit(2);
	}
	*e = (ev){ kind, a, v, NULL, 0, NULL, 0 };
}

static uint32_t node_of(const cs *c, uint32_t id) { return id / c->epa; }

static bool engine_runs(const cs *c, uint32_t id)
{
	uint32_t n = node_of(c, id);
	return c->dead_until[id] == 0 && c->node_dead_until[n] == 0 && sim_state(c->mbr, n) == SIM_N_UP;
}

static bool node_runs(const cs *c, uint32_t n)
{
	return c->node_dead_until[n] == 0 && sim_state(c->mbr, n) == SIM_N_UP;
}

/* Agent n sends the head its report: every engine's word on update v. */
static void node_send(cs *c, uint32_t n, uint64_t now)
{
	update_fanin *f = &c->fan[n];
	said *snap = malloc((f->n ? f->n : 1) * sizeof *snap);
	ev *e = malloc(sizeof *e);
	if (!snap || !e) exit(2);
	for (size_t i = 0; i < f->n; i++) {
		const update_fanin_eng *x = &f->e[i];
		update_engine_id("j", x->member, &snap[i].id);
		snap[i].word = x->gone ? W_GONE : x->staged == c->v ? W_STAGED : x->failed == c->v ? W_FAILED : W_NONE;
	}
	*e = (ev){ EV_REPORT, n, c->v, snap, f->n, NULL, 0 };
	update_fanin_sent(f, now / 1e6);
	if (sk_heap_push(&c->heap, now + c->lat_us, e) < 0) exit(2);
}

/* Agent n after its engines' words: its report now, or a flush when the
 * batch is due (an idle node's resend is the head's answer, not modeled
 * here: it costs the idle figure). */
static void node_check(cs *c, uint32_t n, uint64_t now)
{
	update_fanin *f = &c->fan[n];
	if (!node_runs(c, n)) return;
	double d = update_fanin_due(f, now / 1e6);
	if (d < 0) return;
	uint64_t t = (uint64_t)ceil(d * 1e6);
	if (t <= now) {
		node_send(c, n, now);
	} else if (!f->in_flight || d < f->sent_at + UPDATE_FANIN_IDLE_S) {
		if (c->flush_at[n] <= now || t < c->flush_at[n]) {
			c->flush_at[n] = t;
			at(c, t, EV_FLUSH, n, 0);
		}
	}
}

/* Engine id's wait on its agent, its state now (held, staged, failed). */
static void engine_says(cs *c, uint32_t id, uint64_t held, uint64_t staged, uint64_t failed, uint64_t now)
{
	char m[32];
	snprintf(m, sizeof m, "j/engine-%u", id);
	if (update_fanin_wait(&c->fan[node_of(c, id)], m, c->gen[id], held, staged, failed, now / 1e6) < 0) exit(2);
	node_check(c, node_of(c, id), now);
}

/* The head answers every node with participants (receive v, or commit:
 * held v then): the node's engines' waits answered, the engines wait again. */
static void answer_nodes(cs *c, bool commit, uint64_t now)
{
	for (uint32_t n = 0; n < c->agents; n++) {
		if (!c->part_node[n]) continue;
		c->msgs++;
		if (!node_runs(c, n)) continue;
		double t0 = cpu_now_ms(); /* from here its agent's work, not the head's */
		update_fanin *f = &c->fan[n];
		update_fanin_answered(f);
		for (size_t i = 0; i < f->n; i++) {
			uint32_t id;
			update_engine_id("j", f->e[i].member, &id);
			bool part = update_coord_find(&c->co, f->e[i].member) >= 0;
			update_fanin_told(f, i, !commit && part ? c->v : 0);
			if (commit && part && f->e[i].staged == c->v) f->e[i].held = c->v, f->e[i].staged = 0;
		}
		for (size_t i = 0; i < f->n; i++) f->e[i].waiting = true, f->e[i].dirty |= commit; /* they ask again */
		node_check(c, n, now);
		c->cpu_ms -= cpu_now_ms() - t0;
	}
}

static void rpump(cs *c, uint32_t i, uint64_t now);

/* The head proposes a record: packed (its bytes counted), appended to its
 * raft log; every voter applies it when raft commits it (rpump). */
static void propose(cs *c, const update_rec *u, uint64_t now)
{
	uint8_t *data;
	size_t len;
	if (update_rec_encode(u, &data, &len) < 0) exit(2);
	if (u->compact) { /* the baseline: the same record as main packs it (every engine) */
		update_rec full = *u;
		uint8_t *fd;
		size_t fl;
		double t0 = cpu_now_ms();
		full.compact = full.bare = false;
		if (update_rec_encode(&full, &fd, &fl) == 0) c->full_bytes += fl, free(fd);
		c->cpu_ms -= cpu_now_ms() - t0; /* not the head's work */
	}
	if (c->nlog == c->logcap) {
		c->logcap = c->logcap ? c->logcap * 2 : 64;
		c->log = realloc(c->log, c->logcap * sizeof *c->log);
		if (!c->log) exit(2);
	}
	c->log[c->nlog] = (entry){ data, len, now, !update_rec_open(u), 0, 0 };
	char err[256];
	if (raft_propose(c->raft[c->head], now / 1000, RAFT_ENTRY_USER, data, len, &c->log[c->nlog].index,
			 &c->log[c->nlog].term, err, sizeof err) < 0) {
		fprintf(stderr, "skein-sim coord: the head's raft refused an entry: %s\n", err);
		exit(2);
	}
	c->nlog++;
	c->uncommitted++;
	c->bytes += len;
	c->entries++;
	rpump(c, c->head, now);
}

static void settled(cs *c, bool fin, uint64_t now)
{
	if (!fin) return;
	update_rec f;
	if (update_coord_final(&c->co, now / 1e6, 1700000000000ull + now / 1000, &f) < 0) exit(2);
	propose(c, &f, now);
	update_rec_free(&f);
	c->t_verdict = now;
}

static void begin(cs *c, uint64_t now)
{
	c->v++;
	update_rec r;
	memset(&r, 0, sizeof r);
	snprintf(r.job, sizeof r.job, "j");
	r.version = c->v;
	r.base_version = update_state_committed(c->rep[c->head], "j");
	snprintf(r.mode, sizeof r.mode, "p2p-tcp");
	snprintf(r.sender, sizeof r.sender, "j/trainer-0");
	snprintf(r.sender_node, sizeof r.sender_node, "n%u", c->trainer);
	snprintf(r.state, sizeof r.state, "preparing");
	r.reason = strdup("");
	r.engines = calloc(c->E, sizeof *r.engines);
	r.started_ms = 1700000000000ull + now / 1000;
	r.compact = true;
	if (!r.reason || !r.engines) exit(2);
	memset(c->part_node, 0, c->agents * sizeof *c->part_node);
	for (uint32_t id = 0; id < c->E; id++) {
		uint32_t n = node_of(c, id);
		if (!engine_runs(c, id) || (n != c->head && sim_view(c->mbr, c->head, n) != SIM_V_ALIVE)) continue;
		c->part_node[n] = true;
		update_engine *e = &r.engines[r.nengines++];
		snprintf(e->member, sizeof e->member, "j/engine-%u", id);
		snprintf(e->node, sizeof e->node, "n%u", node_of(c, id));
		snprintf(e->state, sizeof e->state, "pending");
		if (!(e->reason = strdup(""))) exit(2);
	}
	if (update_coord_start(&c->co, &r, now / 1e6, 30000, true, false) < 0) exit(2);
	c->open = true;
	c->done_sent = false;
	propose(c, &c->co.rec, now);
	c->msgs += 2; /* the trainer's begin, its answer (at the begin's commit) */
}

/* The begin applied: every participant told (its receive), its verdict
 * after its data path; the sender done after the slowest. */
static void begun(cs *c, uint64_t now)
{
	update_coord_begun(&c->co, now / 1e6);
	uint64_t slowest = 0;
	for (size_t i = 0; i < c->co.rec.nengines; i++) {
		uint32_t id;
		update_engine_id("j", c->co.rec.engines[i].member, &id);
		uint64_t d = 50000 + sk_rng_below(&c->rng, 100000);
		if (d > slowest) slowest = d;
		at(c, now + c->lat_us + d, EV_STAGED, id, c->v); /* its word, to its own agent */
	}
	answer_nodes(c, false, now); /* every node told: its engines receive */
	at(c, now + c->lat_us + 150000 + c->lat_us, EV_DONE, 0, c->v);
	/* faults: an engine's process exits mid-update (half the updates) */
	if (c->co.rec.nengines && sk_rng_below(&c->rng, 2)) {
		uint32_t id;
		update_engine_id("j", c->co.rec.engines[sk_rng_below(&c->rng, c->co.rec.nengines)].member, &id);
		at(c, now + sk_rng_below(&c->rng, 40000), EV_EXIT, id, c->v);
	}
}

/* The standby takes over: adopts the open record from its replica; the
 * members say their words again (their next wait, the sender's done). */
static void adopt(cs *c, uint64_t now);
static void begin(cs *c, uint64_t now);
static void takeover(cs *c, uint32_t voter, uint64_t now)
{
	if (c->head < VOTERS)
		printf("head: n%u leads after n%u failed (raft term %" PRIu64 ", %.1f ms after the failure)\n", voter,
		       c->head, raft_term(c->raft[voter]), (now - c->failed_at) / 1e3);
	c->head = voter;
	c->head_up = true;
	c->uncommitted = 0; /* the old head's: committed in this term, or lost */
	if (c->open) update_coord_free(&c->co);
	c->open = false;
	adopt(c, now);
	/* a begin the old head never got committed is lost: its sender asks again */
	if (!c->open) at(c, now + 500000, EV_REBEGIN, 0, c->v);
}

/* The head adopts the open record of its replica, at its election or when
 * it applies the begin later (a new leader learns the commit of the old
 * one's entries with its own first entry). */
static void adopt(cs *c, uint64_t now)
{
	const update_rec *rec = update_state_open(c->rep[c->head], "j");
	if (!rec || c->open) return;
	update_rec r;
	if (update_rec_copy(&r, rec) < 0) exit(2);
	for (size_t i = 0; i < r.nengines; i++) { /* nodes from the job's layout */
		uint32_t id;
		update_engine_id("j", r.engines[i].member, &id);
		snprintf(r.engines[i].node, sizeof r.engines[i].node, "n%u", node_of(c, id));
	}
	if (update_coord_start(&c->co, &r, now / 1e6, 30000, true, true) < 0) exit(2);
	c->open = true;
	/* every node finds the new head and says all its engines' words again */
	for (uint32_t n = 0; n < c->agents; n++)
		if (node_runs(c, n) && c->fan[n].n) at(c, now + sk_rng_below(&c->rng, 100000), EV_RESEND, n, c->v);
	at(c, now + c->lat_us + 160000, EV_DONE, 0, c->v);
	at(c, now + 100000, EV_TICK, 0, c->v); /* its watchdog */
}

static void lose_node(cs *c, uint32_t n, uint64_t now)
{
	for (uint32_t id = n * c->epa; id < (n + 1) * c->epa && c->open; id++) {
		char m[32];
		snprintf(m, sizeof m, "j/engine-%u", id);
		long k = update_coord_find(&c->co, m);
		if (k >= 0) settled(c, update_coord_lose(&c->co, (size_t)k, now / 1e6, "its node failed", false, false), now);
	}
}

static void watch(cs *c, uint32_t n, uint64_t now)
{
	if (c->nwatch == 8) return;
	c->watch[c->nwatch++] = n;
	at(c, now + 10000, EV_POLL, 0, 0);
}

/* Voter i's raft committed an entry (index): its replica applies it;
 * the head acts on its own entries. */
static void applied(cs *c, uint32_t i, const uint8_t *data, size_t len, uint64_t index, uint64_t now)
{
	double t0 = cpu_now_ms();
	if (update_state_apply(c->rep[i], data, len) < 0) {
		fprintf(stderr, "skein-sim coord: entry %" PRIu64 " refused by n%u\n", index, i);
		exit(2);
	}
	if (i != c->head || !c->head_up) return; /* another voter's work */
	const entry *x = NULL;
	for (size_t k = c->nlog; k-- > 0 && !x;)
		if (c->log[k].index == index) x = &c->log[k];
	if (x && c->uncommitted) c->uncommitted--;
	const update_rec *rec = update_state_get(c->rep[i], "j", c->v);
	if (!c->open && rec && update_rec_open(rec)) adopt(c, now); /* begun under the old head */
	if (!x || !c->open || !rec || c->v != c->co.rec.version) {
		c->cpu_ms += cpu_now_ms() - t0;
		return;
	}
	if (update_rec_open(rec) && !c->co.begun) {
		begun(c, now);
	} else if (!update_rec_open(rec) && !rec->measured && x->final) {
		c->t_committed = now;
		update_rec m;
		if (update_coord_measured(&c->co, rec, now / 1e6, 1700000000000ull + now / 1000, &m) == 0) {
			propose(c, &m, now);
			update_rec_free(&m);
		}
		c->msgs++; /* done answered */
		answer_nodes(c, true, now); /* every node told: commit or abort */
		update_coord_free(&c->co);
		c->open = false;
	}
	c->cpu_ms += cpu_now_ms() - t0; /* the head's replica and its coordinator: its work */
}

/* After any call into voter i's raft: its messages go out (a latency
 * later; lost to a voter that is down), what it committed is applied, a
 * voter that became leader while the head is down takes over, and its
 * next tick is scheduled. */
static void rpump(cs *c, uint32_t i, uint64_t now)
{
	raft_t *r = c->raft[i];
	raft_out o;
	while (raft_pop_out(r, &o)) {
		uint32_t to = (uint32_t)atoi(o.to + 1);
		ev *e = malloc(sizeof *e);
		if (!e) exit(2);
		*e = (ev){ EV_RPKT, to, 0, NULL, 0, o.data, o.len };
		if (to >= VOTERS || c->rdown[to] || sk_heap_push(&c->heap, now + c->lat_us, e) < 0) free(o.data), free(e);
	}
	raft_apply ap;
	while (raft_pop_apply(r, &ap))
		if (ap.kind == RAFT_APPLY_ENTRY && ap.type >= RAFT_ENTRY_USER) applied(c, i, ap.data, ap.len, ap.index, now);
	raft_event rev;
	while (raft_pop_event(r, &rev))
		if (rev.type == RAFT_EV_LEADER && !c->head_up && i != c->head) takeover(c, i, now);
	uint64_t d = raft_next_deadline(r) * 1000;
	if (d <= now) d = now + 1000;
	if (!c->rtick_at[i] || d < c->rtick_at[i]) {
		c->rtick_at[i] = d;
		at(c, d, EV_RTICK, i, 0);
	}
}

static void handle(cs *c, const ev *e, uint64_t now)
{
	bool mine = c->open && e->v == c->co.rec.version && c->head_up;
	double t0 = cpu_now_ms(); /* the head's work from here */
	switch (e->kind) {
	case EV_RTICK:
		c->cpu_ms -= cpu_now_ms() - t0; /* raft's own work is not the coordinator's */
		if (c->rtick_at[e->a] <= now) c->rtick_at[e->a] = 0;
		if (!c->rdown[e->a]) raft_tick(c->raft[e->a], now / 1000), rpump(c, e->a, now);
		t0 = cpu_now_ms();
		break;
	case EV_RPKT:
		c->cpu_ms -= cpu_now_ms() - t0;
		if (!c->rdown[e->a]) raft_recv(c->raft[e->a], now / 1000, e->pkt, e->plen), rpump(c, e->a, now);
		t0 = cpu_now_ms();
		break;
	case EV_STAGED: /* not the head's work: its agent's */
		c->cpu_ms -= cpu_now_ms() - t0;
		if (e->v == c->v && engine_runs(c, e->a)) engine_says(c, e->a, e->v - 1, e->v, 0, now);
		t0 = cpu_now_ms();
		break;
	case EV_FLUSH:
		c->cpu_ms -= cpu_now_ms() - t0;
		if (c->flush_at[e->a] <= now) c->flush_at[e->a] = 0; /* late: handled after its update ended */
		node_check(c, e->a, now);
		t0 = cpu_now_ms();
		break;
	case EV_RESEND:
		c->cpu_ms -= cpu_now_ms() - t0;
		if (node_runs(c, e->a)) {
			/* its report says which of its engines' processes exited,
			 * those the old head was told of too */
			update_fanin *f = &c->fan[e->a];
			for (uint32_t id = e->a * c->epa; id < (e->a + 1) * c->epa; id++) {
				char m[32];
				snprintf(m, sizeof m, "j/engine-%u", id);
				if (!c->dead_until[id] || update_fanin_find(f, m) >= 0) continue;
				long k = update_fanin_wait(f, m, c->gen[id], 0, 0, 0, now / 1e6);
				if (k >= 0) update_fanin_gone(f, (size_t)k, now / 1e6);
			}
			update_fanin_answered(f);
			node_send(c, e->a, now);
		}
		t0 = cpu_now_ms();
		break;
	case EV_REPORT: /* a node's report reaches the head */
		if (!c->head_up || !node_runs(c, e->a)) break;
		c->msgs++;
		for (size_t i = 0; i < e->nsnap && mine && !c->co.final; i++) {
			char m[32];
			snprintf(m, sizeof m, "j/engine-%u", e->snap[i].id);
			long k = update_coord_find(&c->co, m);
			if (k < 0) continue;
			if (e->snap[i].word == W_STAGED)
				settled(c, update_coord_staged(&c->co, (size_t)k, now / 1e6, 0.1, (update_timings){ 0.1, 0.01, 0, 0 }, NULL), now);
			else if (e->snap[i].word == W_FAILED)
				settled(c, update_coord_failed(&c->co, (size_t)k, now / 1e6, 0.1, (update_timings){ 0 }, "failed"), now);
			else if (e->snap[i].word == W_GONE)
				settled(c, update_coord_lose(&c->co, (size_t)k, now / 1e6, "its process exited (exited)", false, false), now);
		}
		break;
	case EV_DONE:
		if (!mine) break;
		c->msgs++;
		settled(c, update_coord_done(&c->co, now / 1e6, true, "", NULL, 0.15, 1 << 20, 1, (update_timings){ 0.1, 0.05, 0, 0 }), now);
		settled(c, update_coord_settle(&c->co, now / 1e6), now);
		break;
	case EV_EXIT:
		c->dead_until[e->a] = (uint32_t)e->v + 2;
		c->cpu_ms -= cpu_now_ms() - t0; /* its agent's work: the exit in its next report, at once */
		if (node_runs(c, node_of(c, e->a))) {
			char m2[32];
			snprintf(m2, sizeof m2, "j/engine-%u", e->a);
			update_fanin *f = &c->fan[node_of(c, e->a)];
			long k2 = update_fanin_find(f, m2);
			if (k2 >= 0) update_fanin_gone(f, (size_t)k2, now / 1e6);
			node_check(c, node_of(c, e->a), now);
		}
		t0 = cpu_now_ms();
		break;
	case EV_FAILOVER:
		c->head_up = false;
		c->failed_at = now;
		sim_kill(c->mbr, now, c->head);
		c->node_dead_until[c->head] = (uint32_t)e->v + 3;
		c->rdown[c->head] = true; /* its raft with it: the others elect a leader, which takes over */
		watch(c, c->head, now); /* its engines: the new head sees the node fail */
		break;
	case EV_REBEGIN: /* the trainer's begin again, the same version */
		if (c->head_up && !c->open && e->v == c->v && !update_state_get(c->rep[c->head], "j", c->v)) {
			printf("update v%" PRIu64 ": its begin was lost with the head: begun again\n", c->v);
			c->v--;
			begin(c, now);
		}
		break;
	case EV_POLL:
		if (!c->head_up) {
			at(c, now + 10000, EV_POLL, 0, 0);
			break;
		}
		for (size_t i = 0; i < c->nwatch;) {
			if (sim_view(c->mbr, c->head, c->watch[i]) == SIM_V_FAILED) {
				lose_node(c, c->watch[i], now);
				c->watch[i] = c->watch[--c->nwatch];
			} else {
				i++;
			}
		}
		if (c->nwatch) at(c, now + 10000, EV_POLL, 0, 0);
		break;
	case EV_TICK: /* the watchdog, while the update is open */
		if (!mine) break;
		settled(c, update_coord_tick(&c->co, now / 1e6), now);
		if (!c->co.final) at(c, now + 100000, EV_TICK, 0, e->v);
		break;
	}
	c->cpu_ms += cpu_now_ms() - t0;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

static int cmp_z(const void *x, const void *y)
{
	size_t a = *(const size_t *)x, b = *(const size_t *)y;
	return a < b ? -1 : a > b;
}

/* The next event: the membership simulation run up to it, then handled.
 * -1 past `limit` (simulated microseconds). */
static int step(cs *c, uint64_t limit)
{
	sk_heap_entry he = { 0, 0, NULL };
	if (sk_heap_pop(&c->heap, &he) < 0 || he.key > limit) {
		if (he.ptr) free(((ev *)he.ptr)->snap), free(((ev *)he.ptr)->pkt), free(he.ptr);
		return -1;
	}
	if (he.key > sim_now(c->mbr) && sim_run_until(c->mbr, he.key) < 0) exit(2);
	handle(c, he.ptr, sim_now(c->mbr));
	free(((ev *)he.ptr)->snap);
	free(((ev *)he.ptr)->pkt);
	free(he.ptr);
	return 0;
}

/* Every event up to t (raft keeps ticking between updates). */
static void run_to(cs *c, uint64_t t)
{
	const sk_heap_entry *top;
	while ((top = sk_heap_peek(&c->heap)) && top->key <= t) step(c, t);
	if (t > sim_now(c->mbr)) sim_run_until(c->mbr, t);
}

int sim_coord_main(int argc, char **argv)
{
	uint32_t agents = 1000, epa = 8, updates = 20;
	uint64_t seed = 1;
	double lat_ms = 0.5;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		unsigned long long x = v ? strtoull(v, &end, 10) : 0;
		bool num = v && *v && end && !*end;
		if (!strcmp(o, "--agents") && num && x >= 4 && x <= 4096) agents = (uint32_t)x;
		else if (!strcmp(o, "--engines-per-agent") && num && x >= 1 && x <= 64) epa = (uint32_t)x;
		else if (!strcmp(o, "--updates") && num && x >= 1 && x <= 1000) updates = (uint32_t)x;
		else if (!strcmp(o, "--seed") && num) seed = x;
		else if (!strcmp(o, "--latency-ms") && v && (lat_ms = strtod(v, &end), *end == 0) && lat_ms >= 0 && lat_ms <= 100) ;
		else {
			fprintf(stderr, "skein-sim coord: bad flag '%s' (usage: skein-sim coord [--agents N (4..4096)] "
					"[--engines-per-agent K (1..64)] [--updates U (1..1000)] [--seed S] "
					"[--latency-ms X (0..100)])\n", o);
			return 2;
		}
		i++;
	}
	if ((uint64_t)agents * epa > UPDATE_ENGINES_MAX) {
		fprintf(stderr, "skein-sim coord: %u engines, at most %d in an update\n", agents * epa, UPDATE_ENGINES_MAX);
		return 2;
	}
	cs c;
	memset(&c, 0, sizeof c);
	c.agents = agents;
	c.epa = epa;
	c.E = agents * epa;
	c.trainer = agents - 1;
	c.lat_us = (uint64_t)(lat_ms * 1000);
	c.head_up = true;
	sk_rng_seed(&c.rng, seed);
	sk_heap_init(&c.heap);
	sim_params p;
	char err[256];
	if (sim_params_init(&p, agents, seed, "fast", err, sizeof err) < 0 || !(c.mbr = sim_new(&p, err, sizeof err))) {
		fprintf(stderr, "skein-sim coord: %s\n", err);
		return 2;
	}
	raft_config_profile(&c.rcfg, "fast");
	for (uint32_t i = 0; i < VOTERS; i++) {
		c.rep[i] = update_state_new();
		c.st[i] = raft_mem_storage_new();
	}
	c.dead_until = calloc(c.E, sizeof *c.dead_until);
	c.node_dead_until = calloc(agents, sizeof *c.node_dead_until);
	c.gen = calloc(c.E, sizeof *c.gen);
	c.fan = calloc(agents, sizeof *c.fan);
	c.flush_at = calloc(agents, sizeof *c.flush_at);
	c.part_node = calloc(agents, sizeof *c.part_node);
	c.commit_ms = calloc(updates, sizeof *c.commit_ms);
	c.upd_bytes = calloc(updates, sizeof *c.upd_bytes);
	if (!c.rep[0] || !c.rep[1] || !c.rep[2] || !c.dead_until || !c.node_dead_until || !c.gen || !c.fan || !c.flush_at || !c.part_node || !c.commit_ms || !c.upd_bytes) return 2;
	if (sim_run_until_converged(c.mbr, 120 * SIM_SEC) < 0) {
		fprintf(stderr, "skein-sim coord: membership did not converge\n");
		return 1;
	}
	/* the real raft on agents 0..2 (raft_mem storage), its messages a
	 * latency apart on the event heap; the first leader is the head */
	{
		const char *names[VOTERS] = { "n0", "n1", "n2" };
		raft_voters rv;
		if (raft_voters_make(&rv, names, VOTERS, err, sizeof err) < 0) return 2;
		c.head_up = false;
		c.head = VOTERS; /* none yet: the first leader takes over (nothing open) */
		for (uint32_t i = 0; i < VOTERS; i++) {
			raft_self self = { names[i], seed * 131 + i };
			c.raft[i] = raft_new(&c.rcfg, &self, c.st[i], sim_now(c.mbr) / 1000, err, sizeof err);
			if (!c.raft[i] || raft_bootstrap(c.raft[i], sim_now(c.mbr) / 1000, &rv, err, sizeof err) < 0) {
				fprintf(stderr, "skein-sim coord: raft: %s\n", err);
				return 2;
			}
		}
		for (uint32_t i = 0; i < VOTERS; i++) rpump(&c, i, sim_now(c.mbr));
		uint64_t limit = sim_now(c.mbr) + 30 * SIM_SEC;
		while (!c.head_up || !raft_leader_ok(c.raft[c.head], sim_now(c.mbr) / 1000))
			if (step(&c, limit) < 0) {
				fprintf(stderr, "skein-sim coord: raft elected no leader\n");
				return 1;
			}
	}
	/* every engine waits on its agent; each agent's first report (before
	 * the updates: not counted) */
	for (uint32_t n = 0; n < agents; n++) {
		update_fanin_init(&c.fan[n]);
		for (uint32_t id = n * epa; id < (n + 1) * epa; id++) {
			char m[32];
			snprintf(m, sizeof m, "j/engine-%u", id);
			if (update_fanin_wait(&c.fan[n], m, 0, 0, 0, 0, 0) < 0) return 2;
		}
		update_fanin_sent(&c.fan[n], 0);
	}
	/* idle: every node's report once per UPDATE_FANIN_IDLE_S, the head
	 * looks each of its engines up in the last record (nothing to do); a
	 * simulated minute, before any update */
	double idle_cpu = 0;
	{
		update_rec r;
		memset(&r, 0, sizeof r);
		double t0 = cpu_now_ms();
		for (int s = 0; s < (int)(60 / UPDATE_FANIN_IDLE_S); s++)
			for (uint32_t n = 0; n < agents; n++) {
				(void)update_state_open(c.rep[0], "j");
				for (size_t i = 0; i < c.fan[n].n; i++) (void)update_rec_engine(&r, c.fan[n].e[i].member);
			}
		idle_cpu = (cpu_now_ms() - t0) / 60e3 * 100; /* percent of a core */
	}
	double cpu_total = 0;
	uint64_t msgs_total = 0, bytes_total = 0, entries_total = 0, wall0 = sim_now(c.mbr);
	for (uint32_t u = 0; u < updates; u++) {
		uint64_t now = sim_now(c.mbr);
		/* those back: engines after two updates, nodes after three */
		for (uint32_t id = 0; id < c.E; id++)
			if (c.dead_until[id] && c.dead_until[id] <= c.v + 1) {
				c.dead_until[id] = 0;
				c.gen[id]++;
				if (engine_runs(&c, id)) engine_says(&c, id, c.v, 0, 0, now); /* a new process waits */
			}
		for (uint32_t n = 0; n < agents; n++)
			if (c.node_dead_until[n] && c.node_dead_until[n] <= c.v + 1) {
				c.node_dead_until[n] = 0;
				sim_restart(c.mbr, now, n, 0);
				update_fanin_init(&c.fan[n]); /* its agent starts afresh; its engines wait */
				if (n < VOTERS && c.rdown[n]) { /* its raft too, on the same storage */
					raft_self self = { n == 0 ? "n0" : n == 1 ? "n1" : "n2", seed * 131 + n + 1000 * c.v };
					raft_destroy(&c.raft[n]);
					update_state_free(&c.rep[n]);
					if (!(c.rep[n] = update_state_new()) ||
					    !(c.raft[n] = raft_new(&c.rcfg, &self, c.st[n], now / 1000, err, sizeof err))) {
						fprintf(stderr, "skein-sim coord: raft restart: %s\n", err);
						return 2;
					}
					c.rdown[n] = false;
					c.rtick_at[n] = 0;
					rpump(&c, n, now);
				}
				for (uint32_t id = n * epa; id < (n + 1) * epa; id++)
					if (!c.dead_until[id]) c.gen[id]++, engine_says(&c, id, c.v, 0, 0, now);
			}
		c.bytes = c.msgs = c.entries = 0;
		c.cpu_ms = 0;
		c.t_verdict = c.t_committed = 0;
		double t0 = cpu_now_ms();
		begin(&c, now);
		c.cpu_ms += cpu_now_ms() - t0;
		if (u % 5 == 4 && agents > 4) {
			/* a node fails mid-update (not a voter's or the trainer's) */
			uint32_t n = VOTERS + (uint32_t)sk_rng_below(&c.rng, agents - VOTERS - 1);
			sim_kill(c.mbr, now + 20000, n);
			c.node_dead_until[n] = (uint32_t)c.v + 3;
			watch(&c, n, now + 10000);
		}
		if (u == updates / 2) at(&c, now + 60000, EV_FAILOVER, 0, c.v);
		at(&c, now + 100000, EV_TICK, 0, c.v);
		/* until this update's final record (and its amendment) applied */
		uint64_t v = c.v;
		uint64_t limit = now + 120 * SIM_SEC;
		for (;;) {
			const update_rec *rec = c.head_up ? update_state_get(c.rep[c.head], "j", v) : NULL;
			if (rec && !update_rec_open(rec) && !c.uncommitted) break;
			if (step(&c, limit) < 0) {
				const update_rec *hr = update_state_get(c.rep[c.head], "j", v);
				fprintf(stderr, "skein-sim coord: update %" PRIu64 " never finished (head n%u: record %s, %zu entries "
					"proposed not applied, open %d, final %d, pending %zu)\n", v, c.head, hr ? hr->state : "none",
					c.uncommitted, c.open, c.open && c.co.final, c.open ? update_coord_pending(&c.co) : 0);
				return 1;
			}
		}
		const update_rec *rec = update_state_get(c.rep[c.head], "j", v);
		size_t dropped = 0;
		for (size_t i = 0; i < rec->nengines; i++) dropped += !strcmp(rec->engines[i].state, "dropped");
		c.commit_ms[u] = c.t_committed > c.t_verdict ? (c.t_committed - c.t_verdict) / 1e3 : 0;
		c.upd_bytes[u] = c.bytes;
		printf("update v%" PRIu64 ": %s, %zu engines, %zu dropped, %" PRIu64 " entries, %" PRIu64
		       " bytes, %" PRIu64 " msgs, head cpu %.2f ms, commit %.1f ms\n",
		       v, rec->state, rec->nengines, dropped, c.entries, c.bytes, c.msgs, c.cpu_ms, c.commit_ms[u]);
		cpu_total += c.cpu_ms;
		msgs_total += c.msgs;
		bytes_total += c.bytes;
		entries_total += c.entries;
		run_to(&c, sim_now(c.mbr) + 200000); /* between updates */
	}
	qsort(c.commit_ms, updates, sizeof *c.commit_ms, cmp_d);
	size_t *bs = malloc(updates * sizeof *bs);
	memcpy(bs, c.upd_bytes, updates * sizeof *bs);
	qsort(bs, updates, sizeof *bs, cmp_z);
	printf("raft bytes per update: median %zu, max %zu (main's full records: %" PRIu64 "); entries per update %.1f; "
	       "simulated %.1f s\n", bs[updates / 2], bs[updates - 1], c.full_bytes / updates,
	       (double)entries_total / updates, (sim_now(c.mbr) - wall0) / 1e6);
	size_t p99 = (size_t)ceil(0.99 * updates) - 1;
	printf("coord: engines=%u updates=%u raft_bytes_per_update=%" PRIu64 " head_cpu_ms_per_update=%.2f "
	       "idle_head_cpu_pct=%.3f head_msgs_per_update=%" PRIu64 " commit_ms_p99=%.1f\n",
	       c.E, updates, bytes_total / updates, cpu_total / updates, idle_cpu, msgs_total / updates,
	       c.commit_ms[p99]);
	free(bs);
	sk_heap_entry he;
	while (sk_heap_pop(&c.heap, &he) == 0) free(((ev *)he.ptr)->snap), free(((ev *)he.ptr)->pkt), free(he.ptr);
	sk_heap_free(&c.heap);
	for (size_t i = 0; i < c.nlog; i++) free(c.log[i].data);
	free(c.log);
	if (c.open) update_coord_free(&c.co);
	for (uint32_t i = 0; i < VOTERS; i++) {
		raft_destroy(&c.raft[i]);
		raft_mem_storage_free(&c.st[i]);
		update_state_free(&c.rep[i]);
	}
	free(c.dead_until);
	free(c.node_dead_until);
	free(c.gen);
	free(c.fan);
	free(c.flush_at);
	free(c.part_node);
	free(c.commit_ms);
	free(c.upd_bytes);
	sim_destroy(&c.mbr);
	return 0;
}
