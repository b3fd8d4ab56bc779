/* tests/sim/sim: see sim.h for the model.
 *
 * Everything that happens is an event in one heap keyed by simulated
 * microseconds: a packet delivery, a node's tick, or a scheduled action.
 * After every call into a node (recv, tick, join, leave) we drain its
 * outputs (each malloc'd frame rides in its delivery event and is freed after
 * mbr_recv, never copied) and its events (which update the view matrix), then
 * keep one pending tick per node at mbr_next_deadline: a new tick is pushed
 * only when the deadline moved earlier, and the one it supersedes is skipped
 * when it comes up (its generation no longer matches).  A tick that fires
 * before the deadline is harmless (the API allows early ticks).
 *
 * Randomness: one generator for the network and the simulator's choices,
 * seeded from the run seed; each node seeds its own from the run seed, its
 * index and its generation.  Nothing reads a clock. */
#include "tests/sim/sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_heap.h"
#include "common/sk_rng.h"

enum { EV_DELIVER = 1, EV_TICK, EV_ACT };
enum {
	ACT_START = 1, ACT_KILL, ACT_PAUSE, ACT_RESUME, ACT_RESTART, ACT_LEAVE, ACT_LEAVE_END,
	ACT_JOIN_RETRY, ACT_BLOCK,
};
enum { EV_CHUNK = 4096 };

typedef struct sim_ev {
	struct sim_ev *next; /* free list, or a paused node's backlog */
	uint8_t kind, sub;   /* EV_*; ACT_* or the stream flag */
	uint32_t node;       /* destination or target */
	uint32_t from;       /* sender; generation for per-instance actions */
	uint32_t len;
	uint64_t arg;        /* tick generation, action argument */
	uint8_t *data;
} sim_ev;

typedef struct {
	mbr_t *m;
	uint64_t gen;        /* generation of the current (or last) instance */
	uint64_t tick_at;    /* time of the valid pending tick, SIM_NEVER if none */
	uint64_t tick_gen;
	uint64_t bad_end_us; /* last time a pause or a kill of this node ended */
	uint64_t gone_at;    /* left or killed, and everyone knew: since then */
	sim_ev *q_head, *q_tail; /* backlog while paused */
	int32_t rec;         /* pending record, or -1 */
	uint8_t state, group;
} sim_node;

struct sim {
	sim_params p;
	uint32_t n;
	uint64_t now;
	sk_heap heap;
	sk_rng rng;
	sim_node *node;
	uint8_t *view;                 /* n * n, row = observer */
	uint32_t (*col)[SIM_V__COUNT]; /* per member: live observers by code (self included) */
	uint64_t tot[SIM_V__COUNT];
	uint32_t live, started;
	bool blocked[SIM_GROUPS][SIM_GROUPS];
	bool cut_active[SIM_GROUPS];
	uint64_t cut_end[SIM_GROUPS];
	sim_record *rec;
	size_t nrec, caprec;
	sim_ev *free_ev;
	void **chunks;
	size_t nchunks, capchunks;
	sim_stats st;
	mbr_stats gone_stats; /* summed over destroyed instances */
	uint64_t live_since;  /* for the live node-seconds integral */
	double live_us_acc;
	bool stop_on_converge, stop, oom;
	int64_t trace;        /* member whose events go to the note callback, or -1 */
	sim_note_fn note;
	void *note_ctx;
};

/* ---- small helpers ---- */

static void note(sim_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(sim_t *s, const char *fmt, ...)
{
	if (!s->note) return;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	s->note(s->note_ctx, s->now, buf);
}

static uint64_t now_ms(const sim_t *s) { return SIM_EPOCH_MS + s->now / SIM_MS; }

void sim_addr(uint32_t node, mbr_addr *a)
{
	uint32_t v = node + 1;
	memset(a, 0, sizeof *a);
	a->len = 4;
	a->ip[0] = 127;
	a->ip[1] = (uint8_t)(v >> 16);
	a->ip[2] = (uint8_t)(v >> 8);
	a->ip[3] = (uint8_t)v;
	a->port = SIM_PORT;
}

static int node_of_addr(const sim_t *s, const mbr_addr *a, uint32_t *out)
{
	if (a->len != 4 || a->ip[0] != 127 || a->port != SIM_PORT) return -1;
	uint32_t v = ((uint32_t)a->ip[1] << 16) | ((uint32_t)a->ip[2] << 8) | a->ip[3];
	if (v == 0 || v > s->n) return -1;
	*out = v - 1;
	return 0;
}

/* "n<i>" -> i, or -1. */
static int node_of_name(const sim_t *s, const char *name, uint32_t *out)
{
	if (name[0] != 'n' || name[1] < '0' || name[1] > '9') return -1;
	uint64_t v = 0;
	const char *p = name + 1;
	for (; *p >= '0' && *p <= '9' && v <= s->n; p++) v = v * 10 + (uint64_t)(*p - '0');
	if (*p || v >= s->n || (name[1] == '0' && name[2])) return -1;
	*out = (uint32_t)v;
	return 0;
}

static bool is_live(uint8_t st) { return st == SIM_N_UP || st == SIM_N_PAUSED || st == SIM_N_LEAVING; }

static sim_ev *ev_alloc(sim_t *s)
{
	if (!s->free_ev) {
		if (s->nchunks == s->capchunks) {
			size_t nc = s->capchunks ? s->capchunks * 2 : 16;
			void **c = realloc(s->chunks, nc * sizeof *c);
			if (!c) return NULL;
			s->chunks = c;
			s->capchunks = nc;
		}
		sim_ev *chunk = malloc(EV_CHUNK * sizeof *chunk);
		if (!chunk) return NULL;
		s->chunks[s->nchunks++] = chunk;
		for (size_t i = 0; i < EV_CHUNK; i++) {
			chunk[i].next = s->free_ev;
			s->free_ev = &chunk[i];
		}
	}
	sim_ev *e = s->free_ev;
	s->free_ev = e->next;
	memset(e, 0, sizeof *e);
	return e;
}

static void ev_free(sim_t *s, sim_ev *e)
{
	free(e->data);
	e->data = NULL;
	e->next = s->free_ev;
	s->free_ev = e;
}

static int push(sim_t *s, uint64_t at, sim_ev *e)
{
	if (sk_heap_push(&s->heap, at, e) < 0) {
		ev_free(s, e);
		s->oom = true;
		return -1;
	}
	return 0;
}

static int schedule(sim_t *s, uint64_t at, uint8_t act, uint32_t node, uint32_t from, uint64_t arg)
{
	sim_ev *e = ev_alloc(s);
	if (!e) {
		s->oom = true;
		return -1;
	}
	e->kind = EV_ACT;
	e->sub = act;
	e->node = node;
	e->from = from;
	e->arg = arg;
	return push(s, at < s->now ? s->now : at, e);
}

static int add_record(sim_t *s, sim_rec_kind kind, uint32_t node, bool pending)
{
	if (s->nrec == s->caprec) {
		size_t nc = s->caprec ? s->caprec * 2 : 16;
		sim_record *r = realloc(s->rec, nc * sizeof *r);
		if (!r) {
			s->oom = true;
			return -1;
		}
		s->rec = r;
		s->caprec = nc;
	}
	s->rec[s->nrec] = (sim_record){ kind, node, s->now, SIM_NEVER };
	if (pending) s->node[node].rec = (int32_t)s->nrec;
	return (int)s->nrec++;
}

_Static_assert(sizeof(mbr_stats) % sizeof(uint64_t) == 0, "mbr_stats is all uint64_t");

static void add_stats(mbr_stats *acc, const mbr_stats *x)
{
	/* mbr_stats is all uint64_t: add field by field. */
	uint64_t *a = (uint64_t *)acc;
	const uint64_t *b = (const uint64_t *)x;
	for (size_t i = 0; i < sizeof *acc / sizeof(uint64_t); i++) a[i] += b[i];
}

/* ---- the view matrix and its counters ---- */

static void live_changed(sim_t *s, int delta)
{
	s->live_us_acc += (double)s->live * (double)(s->now - s->live_since);
	s->live_since = s->now;
	s->live = (uint32_t)((int64_t)s->live + delta);
}

static void check_converged(sim_t *s)
{
	uint64_t l = s->live;
	bool all = l > 0 && s->tot[SIM_V_ALIVE] == l * l;
	if (all && s->st.all_alive_since_us == SIM_NEVER) s->st.all_alive_since_us = s->now;
	if (!all) s->st.all_alive_since_us = SIM_NEVER;
	if (all && s->st.converge_us == SIM_NEVER && s->started == s->n && l == s->n) {
		s->st.converge_us = s->now;
		note(s, "converged: all %u nodes list all %u alive", s->n, s->n);
		if (s->stop_on_converge) s->stop = true;
	}
}

uint32_t sim_column(const sim_t *s, uint32_t x, sim_view_code c)
{
	uint32_t v = s->col[x][c];
	if (is_live(s->node[x].state) && s->view[(size_t)x * s->n + x] == c) v--;
	return v;
}

static const char *rec_name[] = { "kill", "restart", "leave", "pause" };

static void check_record(sim_t *s, uint32_t x)
{
	sim_node *nd = &s->node[x];
	if (nd->rec < 0) return;
	sim_record *r = &s->rec[nd->rec];
	sim_view_code want = r->kind == SIM_R_KILL ? SIM_V_FAILED
			     : r->kind == SIM_R_LEAVE ? SIM_V_LEFT : SIM_V_ALIVE;
	uint32_t others = s->live - (is_live(nd->state) ? 1 : 0);
	if (r->kind == SIM_R_RESTART) {
		/* Everyone must list the new generation alive. */
		if (sim_column(s, x, want) < others) return;
	} else {
		/* Everyone who knows the member lists it failed (left): a node
		 * that joined after it went away may rightly never hear of it. */
		for (int c = SIM_V_NONE + 1; c < SIM_V__COUNT; c++)
			if (c != (int)want && sim_column(s, x, (sim_view_code)c)) return;
		if (!sim_column(s, x, want) && others) return;
	}
	r->done_us = s->now;
	nd->rec = -1;
	if (r->kind != SIM_R_RESTART) nd->gone_at = s->now;
	note(s, "%s of n%u: all %u others list it %s after %.3f s", rec_name[r->kind], x, others,
	     want == SIM_V_FAILED ? "failed" : want == SIM_V_LEFT ? "left" : "alive",
	     (double)(s->now - r->at_us) / SIM_SEC);
}

static void check_all_records(sim_t *s)
{
	for (size_t i = 0; i < s->nrec; i++)
		if (s->rec[i].done_us == SIM_NEVER && s->rec[i].kind != SIM_R_PAUSE)
			check_record(s, s->rec[i].node);
}

static void view_set(sim_t *s, uint32_t o, uint32_t x, uint8_t code)
{
	uint8_t *v = &s->view[(size_t)o * s->n + x];
	if (*v == code) return;
	if (*v != SIM_V_NONE) { s->col[x][*v]--; s->tot[*v]--; }
	if (code != SIM_V_NONE) { s->col[x][code]++; s->tot[code]++; }
	*v = code;
}

/* An observer stops counting (killed, gone): clears its row. */
static void row_clear(sim_t *s, uint32_t o)
{
	for (uint32_t x = 0; x < s->n; x++) view_set(s, o, x, SIM_V_NONE);
}

/* A member has a new generation: what everyone lists about it is stale. */
static void column_stale(sim_t *s, uint32_t x)
{
	for (uint32_t o = 0; o < s->n; o++) {
		if (o == x || !is_live(s->node[o].state)) continue;
		uint8_t c = s->view[(size_t)o * s->n + x];
		if (c != SIM_V_NONE && c != SIM_V_STALE) view_set(s, o, x, SIM_V_STALE);
	}
}

static uint64_t false_window_us(const sim_t *s, uint32_t o)
{
	uint64_t mn = 0, mx = 0;
	mbr_suspicion_bounds(s->node[o].m, &mn, &mx);
	const mbr_config *c = &s->p.cfg;
	uint64_t retx = c->retransmit_mult * (uint64_t)ceil(log10((double)s->n + 1));
	return (mx + c->probe_interval_ms + retx * c->gossip_interval_ms) * SIM_MS;
}

/* A failure mark against x now: is there a reason for it (sim.h)? */
static bool failure_explained(const sim_t *s, uint32_t o, uint32_t x)
{
	const sim_node *nx = &s->node[x];
	if (nx->state != SIM_N_UP) return true;
	uint64_t w = false_window_us(s, o);
	if (nx->bad_end_us != SIM_NEVER && s->now - nx->bad_end_us <= w) return true;
	uint8_t g = nx->group;
	if (s->cut_active[g]) return true;
	return s->cut_end[g] != SIM_NEVER && s->now - s->cut_end[g] <= w;
}

static void on_event(sim_t *s, uint32_t o, const mbr_event *ev)
{
	uint32_t x;
	s->st.ev_total++;
	if (node_of_name(s, ev->name, &x) < 0) {
		s->st.ev_foreign++;
		return;
	}
	s->st.digest = sk_mix64(s->st.digest ^ (s->now * 31 + ((uint64_t)o << 32) + x)) +
		       ((uint64_t)ev->type << 8) + ev->status + ev->generation * 7 + ev->incarnation;
	switch (ev->type) {
	case MBR_EV_JOIN: s->st.ev_join++; break;
	case MBR_EV_ALIVE: s->st.ev_alive++; break;
	case MBR_EV_SUSPECT: s->st.ev_suspect++; break;
	case MBR_EV_FAILED: s->st.ev_failed++; break;
	case MBR_EV_LEFT: s->st.ev_left++; break;
	case MBR_EV_CONFLICT: s->st.ev_conflict++; return;
	default: break;
	}
	if ((int64_t)x == s->trace)
		note(s, "trace: n%u sees n%u %s -> %s (generation %llu, incarnation %u)", o, x,
		     mbr_event_str(ev->type), mbr_status_str(ev->status),
		     (unsigned long long)ev->generation, ev->incarnation);
	if (x == o) return;
	sim_node *nx = &s->node[x];
	bool current = ev->generation >= nx->gen;
	uint8_t code;
	if (ev->type == MBR_EV_REAP) code = SIM_V_NONE;
	else if (!current) code = SIM_V_STALE;
	else if (ev->status == MBR_ALIVE) code = SIM_V_ALIVE;
	else if (ev->status == MBR_SUSPECT) code = SIM_V_SUSPECT;
	else if (ev->status == MBR_DEAD) code = SIM_V_FAILED;
	else code = SIM_V_LEFT;

	if (ev->type == MBR_EV_FAILED && current && !failure_explained(s, o, x)) {
		s->st.false_failures++;
		note(s, "FALSE FAILURE: n%u marks n%u failed (inc %u)", o, x, ev->incarnation);
	}
	if ((ev->type == MBR_EV_JOIN || ev->type == MBR_EV_ALIVE || ev->type == MBR_EV_UPDATE) &&
	    (ev->status == MBR_ALIVE || ev->status == MBR_SUSPECT) && current &&
	    nx->gone_at != SIM_NEVER && s->now > nx->gone_at) {
		s->st.resurrections++;
		note(s, "RESURRECTION: n%u lists n%u %s again (%s)", o, x,
		     mbr_status_str(ev->status), mbr_event_str(ev->type));
	}
	view_set(s, o, x, code);
	check_record(s, x);
	check_converged(s);
}

/* ---- the network ---- */

static uint64_t latency(sim_t *s)
{
	uint64_t l = s->p.latency_us, j = s->p.jitter_us;
	if (j == 0) return l;
	uint64_t d = sk_rng_below(&s->rng, 2 * j + 1);
	return l + d >= j ? l + d - j : 0;
}

/* UDP needs the one direction; a stream (TCP) needs both, for its handshake. */
static bool is_blocked(const sim_t *s, uint32_t from, uint32_t to, bool stream)
{
	uint8_t a = s->node[from].group, b = s->node[to].group;
	return s->blocked[a][b] || (stream && s->blocked[b][a]);
}

static void send_out(sim_t *s, uint32_t from, mbr_out *o)
{
	uint32_t to;
	s->st.bytes_sent += o->len;
	if (o->stream) s->st.stream_bytes += o->len;
	if (o->stream) s->st.stream_sent++;
	else s->st.udp_sent++;
	if (node_of_addr(s, &o->to, &to) < 0) {
		s->st.bad_dest++;
		free(o->data);
		return;
	}
	if (!o->stream && s->p.loss > 0 && sk_rng_unit(&s->rng) < s->p.loss) {
		s->st.udp_lost++;
		free(o->data);
		return;
	}
	if (is_blocked(s, from, to, o->stream)) {
		s->st.cut++;
		free(o->data);
		return;
	}
	if (!is_live(s->node[to].state)) {
		s->st.to_down++;
		free(o->data);
		return;
	}
	uint64_t lat = latency(s);
	if (o->stream) lat += latency(s) + latency(s);
	sim_ev *e = ev_alloc(s);
	if (!e || o->len > UINT32_MAX) {
		s->oom = true;
		free(o->data);
		if (e) ev_free(s, e);
		return;
	}
	e->kind = EV_DELIVER;
	e->sub = o->stream;
	e->node = to;
	e->from = from;
	e->data = o->data;
	e->len = (uint32_t)o->len;
	push(s, s->now + lat, e);
}

static void schedule_tick(sim_t *s, uint32_t i, bool ticked)
{
	sim_node *nd = &s->node[i];
	uint64_t d = mbr_next_deadline(nd->m);
	if (d == UINT64_MAX) return;
	uint64_t at = d <= SIM_EPOCH_MS ? 0 : (d - SIM_EPOCH_MS) * SIM_MS;
	if (at < s->now) at = s->now;
	if (ticked && at <= s->now) {
		/* Still due right after a tick: move to the next millisecond so a
		 * deadline that never advances cannot spin the clock. */
		s->st.tick_spins++;
		at = (s->now / SIM_MS + 1) * SIM_MS;
	}
	if (at >= nd->tick_at) return;
	sim_ev *e = ev_alloc(s);
	if (!e) {
		s->oom = true;
		return;
	}
	e->kind = EV_TICK;
	e->node = i;
	e->arg = ++nd->tick_gen;
	nd->tick_at = at;
	push(s, at, e);
}

static void finish_leave(sim_t *s, uint32_t i);

/* After any call into node i: its outputs, its events, its next tick. */
static void after_call(sim_t *s, uint32_t i, bool ticked)
{
	sim_node *nd = &s->node[i];
	mbr_out o;
	while (mbr_pop_out(nd->m, &o)) send_out(s, i, &o);
	mbr_event ev;
	while (mbr_pop_event(nd->m, &ev)) on_event(s, i, &ev);
	if (nd->state == SIM_N_LEAVING && mbr_leave_done(nd->m)) {
		finish_leave(s, i);
		return;
	}
	schedule_tick(s, i, ticked);
}

static void recv_one(sim_t *s, sim_ev *e)
{
	uint32_t i = e->node;
	mbr_addr from;
	sim_addr(e->from, &from);
	s->st.deliveries++;
	mbr_recv(s->node[i].m, now_ms(s), &from, e->data, e->len, e->sub != 0);
	ev_free(s, e);
	after_call(s, i, false);
}

static void on_deliver(sim_t *s, sim_ev *e)
{
	sim_node *nd = &s->node[e->node];
	if (!is_live(nd->state)) {
		s->st.to_down++;
		ev_free(s, e);
	} else if (is_blocked(s, e->from, e->node, e->sub != 0)) {
		s->st.cut++;
		ev_free(s, e);
	} else if (nd->state == SIM_N_PAUSED) {
		s->st.queued_paused++;
		e->next = NULL;
		if (nd->q_tail) nd->q_tail->next = e;
		else nd->q_head = e;
		nd->q_tail = e;
	} else {
		recv_one(s, e);
	}
}

/* ---- nodes coming and going ---- */

static void drop_backlog(sim_t *s, sim_node *nd)
{
	while (nd->q_head) {
		sim_ev *e = nd->q_head;
		nd->q_head = e->next;
		ev_free(s, e);
	}
	nd->q_tail = NULL;
}

/* Destroys the running instance of node i (killed or gone). */
static void stop_node(sim_t *s, uint32_t i, uint8_t state)
{
	sim_node *nd = &s->node[i];
	add_stats(&s->gone_stats, mbr_get_stats(nd->m));
	mbr_destroy(&nd->m);
	drop_backlog(s, nd);
	nd->state = state;
	nd->tick_at = SIM_NEVER;
	nd->tick_gen++;
	row_clear(s, i);
	live_changed(s, -1);
	check_all_records(s);
	check_converged(s);
}

static void finish_leave(sim_t *s, uint32_t i)
{
	stop_node(s, i, SIM_N_GONE);
	note(s, "n%u has left and stopped", i);
}

static int pick_seed(sim_t *s, uint32_t self, uint32_t *out)
{
	if (self != 0 && s->node[0].state == SIM_N_UP) {
		*out = 0;
		return 0;
	}
	for (int tries = 0; tries < 64; tries++) {
		uint32_t c = (uint32_t)sk_rng_below(&s->rng, s->n);
		if (c != self && s->node[c].state == SIM_N_UP) {
			*out = c;
			return 0;
		}
	}
	uint32_t start = (uint32_t)sk_rng_below(&s->rng, s->n);
	for (uint32_t k = 0; k < s->n; k++) {
		uint32_t c = (start + k) % s->n;
		if (c != self && s->node[c].state == SIM_N_UP) {
			*out = c;
			return 0;
		}
	}
	return -1;
}

static void join(sim_t *s, uint32_t i)
{
	uint32_t seed;
	if (pick_seed(s, i, &seed) < 0) return;
	mbr_addr a;
	sim_addr(seed, &a);
	s->st.joins_sent++;
	mbr_join(s->node[i].m, now_ms(s), &a);
	after_call(s, i, false);
}

static void start_node(sim_t *s, uint32_t i)
{
	sim_node *nd = &s->node[i];
	if (nd->state != SIM_N_NEW && nd->state != SIM_N_DOWN) return;
	char name[24], err[256];
	snprintf(name, sizeof name, "n%u", i);
	mbr_self self = { .name = name, .generation = ++nd->gen };
	sim_addr(i, &self.addr);
	self.seed = sk_mix64(s->p.seed ^ sk_mix64(((uint64_t)i << 20) ^ nd->gen));
	nd->m = mbr_new(&s->p.cfg, &self, now_ms(s), err, sizeof err);
	if (!nd->m) {
		note(s, "n%u: mbr_new failed: %s", i, err);
		s->oom = true;
		return;
	}
	bool restart = nd->state == SIM_N_DOWN;
	if (nd->state == SIM_N_NEW) s->started++;
	nd->state = SIM_N_UP;
	nd->tick_at = SIM_NEVER;
	nd->gone_at = SIM_NEVER;
	live_changed(s, +1);
	view_set(s, i, i, SIM_V_ALIVE);
	if (restart) {
		nd->bad_end_us = s->now;
		column_stale(s, i);
		add_record(s, SIM_R_RESTART, i, true);
		note(s, "n%u restarts, generation %llu", i, (unsigned long long)nd->gen);
	}
	if (i != 0 || restart) {
		join(s, i);
		schedule(s, s->now + s->p.join_retry_us, ACT_JOIN_RETRY, i, (uint32_t)nd->gen, 0);
	} else {
		after_call(s, i, false);
	}
	check_all_records(s);
	check_converged(s);
}

static void kill_node(sim_t *s, uint32_t i, bool record)
{
	sim_node *nd = &s->node[i];
	if (!is_live(nd->state)) return;
	nd->bad_end_us = SIM_NEVER;
	if (record) add_record(s, SIM_R_KILL, i, true);
	note(s, "kill n%u", i);
	stop_node(s, i, SIM_N_DOWN);
}

static void resume_node(sim_t *s, uint32_t i)
{
	sim_node *nd = &s->node[i];
	if (nd->state != SIM_N_PAUSED) return;
	nd->state = SIM_N_UP;
	nd->bad_end_us = s->now;
	for (size_t r = s->nrec; r-- > 0;)
		if (s->rec[r].node == i && s->rec[r].kind == SIM_R_PAUSE && s->rec[r].done_us == SIM_NEVER) {
			s->rec[r].done_us = s->now;
			break;
		}
	note(s, "resume n%u", i);
	/* The backlog first, as a process reading its socket on waking. */
	while (nd->q_head && nd->state == SIM_N_UP) {
		sim_ev *e = nd->q_head;
		nd->q_head = e->next;
		if (!nd->q_head) nd->q_tail = NULL;
		if (is_blocked(s, e->from, i, e->sub != 0)) {
			s->st.cut++;
			ev_free(s, e);
		} else {
			recv_one(s, e);
		}
	}
	if (nd->state != SIM_N_UP) return;
	nd->tick_gen++;
	nd->tick_at = SIM_NEVER;
	s->st.ticks++;
	mbr_tick(nd->m, now_ms(s));
	after_call(s, i, true);
}

static void update_cuts(sim_t *s)
{
	for (int g = 0; g < SIM_GROUPS; g++) {
		bool any = false;
		for (int h = 0; h < SIM_GROUPS; h++) any |= s->blocked[g][h] || s->blocked[h][g];
		if (s->cut_active[g] && !any) s->cut_end[g] = s->now;
		s->cut_active[g] = any;
	}
}

static void on_action(sim_t *s, sim_ev *e)
{
	uint32_t i = e->node;
	sim_node *nd = &s->node[i];
	switch (e->sub) {
	case ACT_START:
		start_node(s, i);
		break;
	case ACT_KILL:
		kill_node(s, i, true);
		break;
	case ACT_RESTART:
		if (is_live(nd->state)) {
			note(s, "restart n%u: kill, start again in %.3f s", i, (double)e->arg / SIM_SEC);
			kill_node(s, i, false);
		}
		if (nd->state == SIM_N_DOWN) schedule(s, s->now + e->arg, ACT_START, i, 0, 0);
		break;
	case ACT_PAUSE:
		if (nd->state != SIM_N_UP) break;
		nd->state = SIM_N_PAUSED;
		add_record(s, SIM_R_PAUSE, i, false);
		note(s, "pause n%u for %.3f s", i, (double)e->arg / SIM_SEC);
		schedule(s, s->now + e->arg, ACT_RESUME, i, 0, 0);
		break;
	case ACT_RESUME:
		resume_node(s, i);
		break;
	case ACT_LEAVE:
		if (nd->state != SIM_N_UP) break;
		add_record(s, SIM_R_LEAVE, i, true);
		note(s, "n%u leaves", i);
		nd->state = SIM_N_LEAVING;
		mbr_leave(nd->m, now_ms(s));
		schedule(s, s->now + s->p.leave_max_us, ACT_LEAVE_END, i, (uint32_t)nd->gen, 0);
		after_call(s, i, false);
		break;
	case ACT_LEAVE_END:
		if (nd->state == SIM_N_LEAVING && nd->gen == e->from) finish_leave(s, i);
		break;
	case ACT_JOIN_RETRY:
		if (nd->gen != e->from || !is_live(nd->state) || nd->state == SIM_N_LEAVING) break;
		if (nd->state == SIM_N_UP && mbr_member_count(nd->m) > 1) break;
		if (nd->state == SIM_N_UP) join(s, i);
		schedule(s, s->now + s->p.join_retry_us, ACT_JOIN_RETRY, i, e->from, 0);
		break;
	case ACT_BLOCK: {
		uint8_t a = (uint8_t)(e->from >> 8), b = (uint8_t)e->from;
		s->blocked[a][b] = e->arg != 0;
		update_cuts(s);
		note(s, "%s group %u -> group %u", e->arg ? "cut" : "heal", a, b);
		break;
	}
	default:
		break;
	}
	ev_free(s, e);
}

static void dispatch(sim_t *s, sim_ev *e)
{
	if (e->kind == EV_DELIVER) {
		on_deliver(s, e);
	} else if (e->kind == EV_TICK) {
		sim_node *nd = &s->node[e->node];
		uint32_t i = e->node;
		bool valid = e->arg == nd->tick_gen;
		ev_free(s, e);
		if (!valid) return;
		nd->tick_at = SIM_NEVER;
		if (nd->state != SIM_N_UP && nd->state != SIM_N_LEAVING) return;
		s->st.ticks++;
		mbr_tick(nd->m, now_ms(s));
		after_call(s, i, true);
	} else {
		on_action(s, e);
	}
}

/* ---- public API ---- */

int sim_params_init(sim_params *p, uint32_t nodes, uint64_t seed, const char *profile,
		    char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	if (nodes < 1 || nodes > SIM_MAX_NODES) {
		snprintf(err, errlen, "nodes must be 1..%d", SIM_MAX_NODES);
		return -1;
	}
	if (!profile) profile = "lan";
	if (strlen(profile) >= sizeof p->profile || mbr_config_profile(&p->cfg, profile) < 0) {
		snprintf(err, errlen, "unknown profile '%s' (lan, fast, wan, local)", profile);
		return -1;
	}
	snprintf(p->profile, sizeof p->profile, "%s", profile);
	p->nodes = nodes;
	p->seed = seed;
	p->latency_us = 500;
	p->jitter_us = 200;
	p->loss = 0;
	/* 10 ms apart up to 1000 nodes (a rolling start), then the whole
	 * cluster within 10 s. */
	p->join_spread_us = 10 * SIM_SEC / nodes < 10 * SIM_MS ? 10 * SIM_SEC / nodes : 10 * SIM_MS;
	p->join_retry_us = SIM_SEC;
	p->leave_max_us = 5 * SIM_SEC;
	return 0;
}

sim_t *sim_new(const sim_params *p, char *err, size_t errlen)
{
	if (p->nodes < 1 || p->nodes > SIM_MAX_NODES) {
		snprintf(err, errlen, "nodes must be 1..%d", SIM_MAX_NODES);
		return NULL;
	}
	if (mbr_config_check(&p->cfg, err, errlen) < 0) return NULL;
	if (p->loss < 0 || p->loss >= 1 || p->jitter_us > p->latency_us) {
		snprintf(err, errlen, "loss must be in [0,1) and jitter at most the latency");
		return NULL;
	}
	sim_t *s = calloc(1, sizeof *s);
	if (!s) goto oom;
	s->p = *p;
	s->n = p->nodes;
	s->trace = -1;
	sk_heap_init(&s->heap);
	sk_rng_seed(&s->rng, sk_mix64(p->seed ^ 0x5eed51e0ULL));
	s->node = calloc(s->n, sizeof *s->node);
	s->view = calloc((size_t)s->n * s->n, 1); /* untouched pages stay unmapped */
	s->col = calloc(s->n, sizeof *s->col);
	if (!s->node || !s->view || !s->col) goto oom;
	for (int g = 0; g < SIM_GROUPS; g++) s->cut_end[g] = SIM_NEVER;
	s->st.converge_us = s->st.all_alive_since_us = SIM_NEVER;
	for (uint32_t i = 0; i < s->n; i++) {
		s->node[i].tick_at = SIM_NEVER;
		s->node[i].bad_end_us = SIM_NEVER;
		s->node[i].gone_at = SIM_NEVER;
		s->node[i].rec = -1;
		if (schedule(s, (uint64_t)i * p->join_spread_us, ACT_START, i, 0, 0) < 0) goto oom;
	}
	return s;
oom:
	snprintf(err, errlen, "out of memory for %u nodes", p->nodes);
	sim_destroy(&s);
	return NULL;
}

void sim_destroy(sim_t **sp)
{
	sim_t *s = *sp;
	if (!s) return;
	sk_heap_entry e;
	while (sk_heap_pop(&s->heap, &e) == 0) free(((sim_ev *)e.ptr)->data);
	sk_heap_free(&s->heap);
	if (s->node)
		for (uint32_t i = 0; i < s->n; i++) {
			for (sim_ev *q = s->node[i].q_head; q; q = q->next) free(q->data);
			mbr_destroy(&s->node[i].m);
		}
	for (size_t i = 0; i < s->nchunks; i++) free(s->chunks[i]);
	free(s->chunks);
	free(s->node);
	free(s->view);
	free(s->col);
	free(s->rec);
	free(s);
	*sp = NULL;
}

int sim_run_until(sim_t *s, uint64_t t)
{
	const sk_heap_entry *top;
	sk_heap_entry e;
	s->stop = false;
	while (!s->stop && (top = sk_heap_peek(&s->heap)) && top->key <= t) {
		sk_heap_pop(&s->heap, &e);
		s->now = e.key;
		dispatch(s, e.ptr);
	}
	if (!s->stop && t > s->now) s->now = t;
	return s->oom ? -1 : 0;
}

int sim_run_until_converged(sim_t *s, uint64_t limit)
{
	if (s->st.converge_us != SIM_NEVER) return 0;
	s->stop_on_converge = true;
	int rc = sim_run_until(s, limit);
	s->stop_on_converge = false;
	s->stop = false;
	return rc == 0 && s->st.converge_us != SIM_NEVER ? 0 : -1;
}

uint64_t sim_now(const sim_t *s) { return s->now; }

static int check_node(const sim_t *s, uint32_t node) { return node < s->n ? 0 : -1; }

int sim_kill(sim_t *s, uint64_t at, uint32_t node)
{
	return check_node(s, node) ? -1 : schedule(s, at, ACT_KILL, node, 0, 0);
}

int sim_pause(sim_t *s, uint64_t at, uint32_t node, uint64_t for_us)
{
	return check_node(s, node) ? -1 : schedule(s, at, ACT_PAUSE, node, 0, for_us);
}

int sim_restart(sim_t *s, uint64_t at, uint32_t node, uint64_t down_us)
{
	return check_node(s, node) ? -1 : schedule(s, at, ACT_RESTART, node, 0, down_us);
}

int sim_leave(sim_t *s, uint64_t at, uint32_t node)
{
	return check_node(s, node) ? -1 : schedule(s, at, ACT_LEAVE, node, 0, 0);
}

int sim_block(sim_t *s, uint64_t at, uint8_t from, uint8_t to, bool on)
{
	if (from >= SIM_GROUPS || to >= SIM_GROUPS) return -1;
	return schedule(s, at, ACT_BLOCK, 0, ((uint32_t)from << 8) | to, on);
}

int sim_partition(sim_t *s, uint64_t start, uint64_t end, uint8_t a, uint8_t b)
{
	if (a >= SIM_GROUPS || b >= SIM_GROUPS || a == b || end < start) return -1;
	if (sim_block(s, start, a, b, true) || sim_block(s, start, b, a, true)) return -1;
	if (sim_block(s, end, a, b, false) || sim_block(s, end, b, a, false)) return -1;
	return 0;
}

int sim_set_group(sim_t *s, uint32_t node, uint8_t group)
{
	if (check_node(s, node) || group >= SIM_GROUPS) return -1;
	s->node[node].group = group;
	return 0;
}

void sim_set_note(sim_t *s, sim_note_fn fn, void *ctx)
{
	s->note = fn;
	s->note_ctx = ctx;
}

void sim_trace(sim_t *s, int64_t member) { s->trace = member; }

uint32_t sim_nodes(const sim_t *s) { return s->n; }
uint32_t sim_live(const sim_t *s) { return s->live; }
sim_node_state sim_state(const sim_t *s, uint32_t i) { return (sim_node_state)s->node[i].state; }
uint8_t sim_group(const sim_t *s, uint32_t i) { return s->node[i].group; }
uint64_t sim_generation(const sim_t *s, uint32_t i) { return s->node[i].gen; }

sim_view_code sim_view(const sim_t *s, uint32_t o, uint32_t x)
{
	return (sim_view_code)s->view[(size_t)o * s->n + x];
}

uint32_t sim_count(const sim_t *s, uint32_t o, sim_view_code c)
{
	const uint8_t *row = &s->view[(size_t)o * s->n];
	uint32_t k = 0;
	for (uint32_t x = 0; x < s->n; x++) k += row[x] == c;
	return k;
}

uint64_t sim_total(const sim_t *s, sim_view_code c) { return s->tot[c]; }

bool sim_all_alive(const sim_t *s) { return s->st.all_alive_since_us != SIM_NEVER; }

mbr_t *sim_mbr(sim_t *s, uint32_t i) { return i < s->n ? s->node[i].m : NULL; }

size_t sim_records(const sim_t *s, const sim_record **out)
{
	*out = s->rec;
	return s->nrec;
}

void sim_get_stats(const sim_t *s, sim_stats *out)
{
	*out = s->st;
	out->live_node_s = (s->live_us_acc + (double)s->live * (double)(s->now - s->live_since)) / SIM_SEC;
	mbr_stats m = s->gone_stats;
	for (uint32_t i = 0; i < s->n; i++)
		if (s->node[i].m) add_stats(&m, mbr_get_stats(s->node[i].m));
	out->suspects_raised = m.suspects_raised;
	out->refutes = m.refutes;
	out->dead_declared = m.dead_declared;
	out->probes = m.probes;
	out->probe_fails = m.probe_fails;
	out->pushpulls = m.pushpulls;
	out->reconnects = m.reconnects;
	out->queue_overflow = m.queue_overflow;
	out->decode_drops = m.drop_not_for_us + m.drop_conflict;
	for (int k = 0; k < WIRE_ERR__COUNT; k++) out->decode_drops += m.drop[k];
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank. */
static double pct(const double *v, size_t n, double q)
{
	size_t k = (size_t)ceil(q * (double)n);
	return v[k ? k - 1 : 0];
}

void sim_dist_of(const sim_t *s, sim_rec_kind kind, sim_dist *out)
{
	memset(out, 0, sizeof *out);
	double *v = malloc((s->nrec + 1) * sizeof *v);
	if (!v) return;
	size_t n = 0;
	for (size_t i = 0; i < s->nrec; i++) {
		if (s->rec[i].kind != kind) continue;
		out->count++;
		if (s->rec[i].done_us == SIM_NEVER) out->undone++;
		else v[n++] = (double)(s->rec[i].done_us - s->rec[i].at_us) / SIM_SEC;
	}
	if (n) {
		qsort(v, n, sizeof *v, cmp_double);
		out->p50 = pct(v, n, 0.50);
		out->p99 = pct(v, n, 0.99);
		out->max = v[n - 1];
	}
	free(v);
}
