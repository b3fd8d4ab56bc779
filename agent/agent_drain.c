/* agent/agent_drain: taking a node out of service (skeinctl drain / undrain).
 *
 * The drained set lives in the replicated state (jobs/job_state.c, entry
 * JOB_ENTRY_DRAIN), so a new head continues a drain where the old one was.
 * The head, on every reconcile round:
 *   - gives drained nodes no free GPUs: nothing new is placed there (fresh
 *     jobs, repairs after a node loss);
 *   - moves a job's trainer ranks off them in one step: one new trainer
 *     generation, so the group restarts once (colocated engines go with it);
 *   - moves its engines one at a time, and only while every engine of the
 *     job runs at its current generation: the moved engine is the only one
 *     down, until its new node reports it running.  "Running" is the only
 *     readiness the agents know today; once engines report their weight
 *     version (issue #13), catching up belongs in the same test;
 *   - hands the head over first when its own node is drained.
 * A unit that finds no room (no node with enough free GPUs) stays where it
 * is and keeps running: the drain waits, and `drain status` says why.
 * Undrain makes the node placeable again; nothing moves back by itself.
 *
 * Every agent learns the drained set from the head's orders, to show it in
 * `skeinctl members`. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/agent_jobs_int.h"
#include "agent/agent_update.h"
#include "jobs/update_state.h"
#include "common/sk_time.h"
#include "common/sk_log.h"

struct drain_note {
	char node[JOB_NODE_MAX + 1];
	char why[300];
};

static bool drained(agent *a, const char *node)
{
	const job_state *js = agent_head_jobs(a);
	return js && node[0] && job_state_is_drained(js, node);
}

/* The head's latest reason a drain of `node` waits. */
static void note(agent *a, const char *node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(agent *a, const char *node, const char *fmt, ...)
{
	agent_jobs *J = a->jobs;
	size_t i;
	for (i = 0; i < J->nnotes; i++)
		if (!strcmp(J->notes[i].node, node)) break;
	if (i == J->nnotes) {
		struct drain_note *p = realloc(J->notes, (J->nnotes + 1) * sizeof *p);
		if (!p) return;
		J->notes = p;
		snprintf(p[i].node, sizeof p[i].node, "%s", node);
		J->nnotes++;
	}
	char why[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (strcmp(why, J->notes[i].why)) SK_INFO("jobs", "drain of %s waits: %s", node, why);
	snprintf(J->notes[i].why, sizeof J->notes[i].why, "%s", why);
}

static const char *note_of(agent *a, const char *node)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->nnotes; i++)
		if (!strcmp(J->notes[i].node, node)) return J->notes[i].why;
	return "";
}

void aj_drain_tick(agent *a)
{
	agent_jobs *J = a->jobs;
	char err[300];
	if (drained(a, a->opts.name) && agent_head_drained(a, err, sizeof err) < 0)
		note(a, a->opts.name, "the head is here and cannot hand over: %s", err);
	/* notes of nodes no longer drained go */
	for (size_t i = 0; i < J->nnotes;) {
		if (drained(a, J->notes[i].node)) { i++; continue; }
		J->notes[i] = J->notes[--J->nnotes];
	}
}

void aj_drain_mark(agent *a, place_node *nodes, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (drained(a, nodes[k].name)) nodes[k].busy = ~0ULL;
}

/* An engine is up once it serves.  In a job whose weights are coordinated
 * (a committed version exists, docs/updates.md) that is readiness: its
 * process runs at its current generation and holds the job's latest
 * committed version.  Otherwise nothing says when a process serves, and
 * "running" (its process exists) for ENGINE_SETTLE_S stands in: 1 s, as on
 * a loaded 2-core machine a shell took over 300 ms to run its first line,
 * and the drain then took the next engine down before the last was up. */
static const double ENGINE_SETTLE_S = 1.0;

struct drain_seen {
	char id[SUP_ID_MAX];
	uint64_t gen;
	double since;
};

static bool engine_up(agent *a, const job_spec *s, const job_layout *L, uint32_t e, double *wait)
{
	agent_jobs *J = a->jobs;
	char id[SUP_ID_MAX];
	aj_member_id(id, sizeof id, s->name, false, e);
	const char *node = job_layout_engine_node(s, L, e);
	const job_member_status *st = node[0] ? aj_status_of(a, node, id) : NULL;
	if (!st || st->gen != L->engine_gen[e] || strcmp(st->state, "running")) return false;
	const update_state *ws = agent_head_wv(a);
	if (ws && update_state_committed(ws, s->name) > 0) {
		uint64_t held;
		bool syncing;
		return agent_update_engine_view(a, id, &held, &syncing) && !syncing;
	}
	double now = sk_mono_s();
	size_t i;
	for (i = 0; i < J->nup; i++)
		if (!strcmp(J->up[i].id, id)) break;
	if (i == J->nup) {
		struct drain_seen *p = realloc(J->up, (J->nup + 1) * sizeof *p);
		if (!p) return false;
		J->up = p;
		snprintf(p[i].id, sizeof p[i].id, "%s", id);
		p[i].gen = 0;
		J->nup++;
	}
	if (J->up[i].gen != st->gen) {
		/* first seen now; an engine that never moved has run since before the drain */
		J->up[i].gen = st->gen;
		J->up[i].since = st->gen > 1 ? now : now - ENGINE_SETTLE_S;
	}
	double left = J->up[i].since + ENGINE_SETTLE_S - now;
	if (left > 0 && (*wait < 0 || left < *wait)) *wait = left;
	return left <= 0;
}

bool aj_drain_step(agent *a, const job_rec *j, const job_spec *s, place_node *nodes, size_t n)
{
	const job_state *js = agent_head_jobs(a);
	if (!js || !job_state_drained_count(js) || strcmp(j->state, "running")) return false;
	job_layout L;
	if (job_rec_layout(&L, j, s) < 0) return false;
	uint32_t A = job_spec_trainer_ranks(s), E = job_spec_engines(s), tp = s->rollout_num_gpus_per_engine;
	place_layout pl = { 0 };
	place_result res = { 0 };
	bool *eng = calloc(E ? E : 1, sizeof *eng), moved = false;
	char from[JOB_NODE_MAX + 1] = "", why[400];
	if (!eng || job_layout_to_place(&L, nodes, n, &pl) < 0) goto out;
	/* the trainer group (and, colocated, the engines it carries): one step */
	uint32_t span = s->colocate ? L.n : A;
	for (uint32_t i = 0; i < span; i++)
		if (drained(a, L.node[i])) {
			if (!from[0]) snprintf(from, sizeof from, "%s", L.node[i]);
			pl.slots[i].node = -1;
		}
	if (from[0]) {
		if (place_repair(s, nodes, n, &pl, &res) != 0) {
			note(a, from, "the trainer ranks of job %s have no room elsewhere: %s", s->name, res.reason);
			goto out;
		}
		job_layout_from_place(s, &L, &pl, nodes, eng);
		L.trainer_gen++;
		for (uint32_t e = 0; e < E; e++)
			if (eng[e]) L.engine_gen[e]++;
		aj_master_of(a, &L, nodes, n);
		aj_fresh_port(a, &L);
		snprintf(why, sizeof why, "drain of %s: the trainer group moves off it (one restart, generation %llu)",
			 from, (unsigned long long)L.trainer_gen);
		aj_propose_update(a, j, "running", j->reason, &L, why);
		moved = true;
		goto out;
	}
	if (s->colocate) goto out;
	/* engines: the first one on a drained node, once every engine runs */
	int64_t move = -1;
	for (uint32_t e = 0; e < E && move < 0; e++)
		if (drained(a, job_layout_engine_node(s, &L, e))) move = e;
	if (move < 0) goto out;
	snprintf(from, sizeof from, "%s", job_layout_engine_node(s, &L, (uint32_t)move));
	double wait = -1;
	for (uint32_t e = 0; e < E; e++)
		if (!engine_up(a, s, &L, e, &wait)) {
			note(a, from, "engine %u of job %s is not up yet (running %.1f s where it is): one engine moves at a time, "
				      "and only while the others are up", e, s->name, ENGINE_SETTLE_S);
			if (wait > 0) aj_kick_in(a, wait + 0.01);
			goto out;
		}
	uint32_t first = place_engine_slot(s, (uint32_t)move);
	for (uint32_t k = 0; k < tp && first + k < pl.nslots; k++) pl.slots[first + k].node = -1;
	if (place_repair(s, nodes, n, &pl, &res) != 0) {
		note(a, from, "engine %u of job %s has no room elsewhere (%u free GPUs on one node): %s", (unsigned)move,
		     s->name, tp, res.reason);
		goto out;
	}
	char id[SUP_ID_MAX];
	aj_member_id(id, sizeof id, s->name, false, (uint32_t)move);
	const job_member_status *st = aj_status_of(a, from, id);
	if (st && st->restarts > L.engine_restarts[move]) L.engine_restarts[move] = st->restarts;
	job_layout_from_place(s, &L, &pl, nodes, eng);
	L.engine_gen[move]++;
	const char *to = job_layout_engine_node(s, &L, (uint32_t)move);
	snprintf(why, sizeof why, "drain of %s: engine %u moves to %s", from, (unsigned)move, to);
	note(a, from, "moving engine %u of job %s to %s", (unsigned)move, s->name, to);
	aj_propose_update(a, j, "running", j->reason, &L, why);
	moved = true;
out:
	free(pl.slots);
	free(eng);
	job_layout_free(&L);
	return moved;
}

/* ---------------------------------------------------------------- commands (head) */

typedef struct {
	uint32_t ranks, engines, lingering;
	bool head;
} drain_left;

/* What still holds `node`: members of active jobs placed there, live
 * processes it reports (a stopped member in its grace), the head. */
static drain_left left_on(agent *a, const char *node)
{
	drain_left d = { 0 };
	const job_state *js = agent_head_jobs(a);
	for (size_t i = 0; js && i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		if (!job_rec_active(j) || !job_rec_placed(j)) continue;
		job_spec s = j->spec; /* as submitted, unvalidated, as before */
		uint32_t A = job_spec_trainer_ranks(&s), E = job_spec_engines(&s);
		for (uint32_t r = 0; r < A && r < j->layout.n; r++)
			if (!strcmp(j->layout.node[r], node)) d.ranks++;
		for (uint32_t e = 0; e < E; e++) {
			uint32_t first = place_engine_slot(&s, e);
			if (first < j->layout.n && !strcmp(j->layout.node[first], node)) d.engines++;
		}
	}
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->nreports; i++) {
		if (strcmp(J->reports[i].node, node)) continue;
		for (size_t k = 0; k < J->reports[i].n; k++)
			if (J->reports[i].members[k].pid > 0) d.lingering++;
	}
	d.head = !strcmp(node, a->opts.name);
	return d;
}

static void drain_status(agent *a, const char *node, bool json, agent_reply *r)
{
	const job_state *js = agent_head_jobs(a);
	bool on = js && job_state_is_drained(js, node);
	drain_left d = left_on(a, node);
	bool complete = on && !d.ranks && !d.engines && !d.lingering && !d.head;
	const char *why = on ? note_of(a, node) : "";
	if (json) {
		sk_buf_printf(&r->body, "{\"node\":");
		sk_buf_json_str(&r->body, node);
		sk_buf_printf(&r->body, ",\"drained\":%s,\"complete\":%s,\"trainer_ranks\":%u,\"engines\":%u,"
			      "\"processes\":%u,\"head\":%s,\"waiting\":",
			      on ? "true" : "false", complete ? "true" : "false", d.ranks, d.engines, d.lingering,
			      d.head ? "true" : "false");
		sk_buf_json_str(&r->body, why);
		sk_buf_printf(&r->body, "}\n");
		return;
	}
	if (!on) sk_buf_printf(&r->body, "%s: not drained\n", node);
	else if (complete) sk_buf_printf(&r->body, "%s: drained, nothing runs there\n", node);
	else
		sk_buf_printf(&r->body, "%s: draining: %u trainer ranks, %u engines, %u processes left%s%s%s\n", node,
			      d.ranks, d.engines, d.lingering,
			      !d.head ? "" : why[0] ? ", the head is here" : ", the head is here (handing over)",
			      why[0] ? "; " : "", why);
}

void aj_cmd_drain(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const job_state *js = agent_head_jobs(a);
	bool undrain = !strcmp(q->cmd, "undrain");
	bool status = !undrain && q->n_args == 2 && !strcmp(q->args[0], "status");
	const char *node = status ? q->args[1] : q->n_args == 1 ? q->args[0] : NULL;
	if (!node || !node[0] || strlen(node) > JOB_NODE_MAX) {
		agent_reply_fail(r, 2, "usage: skeinctl drain NODE [--deadline S] | undrain NODE | drain status NODE");
		return;
	}
	if (status) { drain_status(a, node, !strcmp(q->format, "json"), r); return; }
	mbr_member_info mi;
	if (!undrain && strcmp(node, a->opts.name) && mbr_lookup(a->mbr, node, &mi) < 0) {
		agent_reply_fail(r, 1, "no member named '%s' (see skeinctl members)", node);
		return;
	}
	bool on = js && job_state_is_drained(js, node);
	if (undrain && !on) { agent_reply_fail(r, 1, "%s is not drained", node); return; }
	if (!undrain && on) { sk_buf_printf(&r->body, "%s is drained already\n", node); return; }
	uint8_t *data;
	size_t len;
	if (job_state_encode_drain(node, !undrain, sk_wall_ms(), /* shown to people: the wall clock */
				   &data, &len) < 0) {
		agent_reply_fail(r, 1, "out of memory");
		return;
	}
	char body[300];
	snprintf(body, sizeof body, undrain ? "%s: undrained (members placed elsewhere stay there)\n"
					    : "%s: drained; its members move elsewhere\n", node);
	SK_INFO("jobs", "%s %s (asked by an operator)", undrain ? "undrain" : "drain", node);
	agent_head_propose(a, c, r, JOB_ENTRY_DRAIN, data, len, body, NULL);
}

/* ---------------------------------------------------------------- every agent */

void aj_drained_free(agent *a)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->ndrained; i++) free(J->drained[i]);
	free(J->drained);
	J->drained = NULL;
	J->ndrained = 0;
	free(J->notes);
	J->notes = NULL;
	J->nnotes = 0;
	free(J->up);
	J->up = NULL;
	J->nup = 0;
}

void aj_drained_set(agent *a, const char *const *names, size_t n)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->ndrained; i++) free(J->drained[i]);
	J->ndrained = 0;
	if (n > JOB_STATE_DRAINED_MAX) n = JOB_STATE_DRAINED_MAX;
	char **p = n ? realloc(J->drained, n * sizeof *p) : J->drained;
	if (n && !p) return;
	J->drained = p;
	for (size_t i = 0; i < n; i++)
		if ((J->drained[J->ndrained] = strndup(names[i], JOB_NODE_MAX))) J->ndrained++;
}

bool agent_jobs_drained(agent *a, const char *node)
{
	agent_jobs *J = a->jobs;
	if (!J) return false;
	const job_state *js = agent_head_jobs(a);
	if (js && agent_head_is_head(a)) return job_state_is_drained(js, node);
	for (size_t i = 0; i < J->ndrained; i++)
		if (!strcmp(J->drained[i], node)) return true;
	return false;
}
