/* agent/agent_jobs: RL jobs on the cluster.
 *
 * The head decides, every agent executes:
 *
 *   skeinctl job submit --> head: JOB_ENTRY_SUBMIT committed (jobs/job_state)
 *   head reconcile       --> placement (jobs/job_place) committed as JOB_ENTRY_UPDATE;
 *                            so are restarts (a new trainer generation), node
 *                            losses (units moved) and MASTER_PORT
 *   head orders          --> "assign" to every agent, with the head's term
 *                            (fenced: an agent refuses an older term): the
 *                            full list of members that agent must run, derived
 *                            from committed state only, sent on every change
 *                            and every second (level-triggered: a lost order
 *                            or a restarted agent heals by itself)
 *   agent                --> agent_sup reconciles its processes; "report"
 *                            (member states, a free port) back to the head
 *                            after every order and on every exit
 *
 * Restarts: an engine restarts alone, on its agent, with backoff.  A trainer
 * rank's death breaks its world: its agent stops the local siblings at once
 * and reports; the head commits trainer generation g+1 and every agent with
 * trainer ranks restarts them (after the backoff, computed the same way on
 * every node from the generation).  A failed node's units move to free GPUs
 * (or wait, pending, for capacity); a moved trainer unit restarts the group.
 * Members never restart because the head changed: a new head sends the same
 * orders (same generations), which agents treat as no change. */
#include "agent/agent.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent_jobs_int.h"
#include "agent/agent_update.h"
#include "agent/sup/agent_cgroup.h"
#include "agent/agent_stats.h"
#include "agent/sup/agent_sup.h"
#include "common/sk_time.h"
#include "common/sk_log.h"
#include "jobs/job_place.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "proto/control.pb-c.h"
#include "proto/gossip.pb-c.h"

static const double ORDER_INTERVAL_S = 1.0;
static const double RECONCILE_INTERVAL_S = 0.5;
static const double INFLIGHT_TIMEOUT_S = 5.0;
static const double TICK_S = 0.1;  /* the safety net and the order rounds (tick_cb) */
enum { NODE_LOSS_GRACE_MS = 500 };



static void kick(agent *a)
{
	aj_kick_in(a, 0.0);
}

/* ---------------------------------------------------------------- layouts */

/* ---------------------------------------------------------------- the cluster as placement sees it */

/* Every member with GPUs: alive (or suspected: a suspicion does not move
 * anything) or not. */
static size_t cluster_nodes(agent *a, place_node **out)
{
	uint64_t now = sk_mono_ms();
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(n ? n : 1, sizeof *mi);
	place_node *nodes = calloc(n ? n : 1, sizeof *nodes);
	size_t k = 0;
	if (!mi || !nodes) goto done;
	n = mbr_members(a->mbr, mi, n);
	for (size_t i = 0; i < n; i++) {
		uint32_t gpus;
		if (i == 0 || !strcmp(mi[i].name, a->opts.name)) {
			gpus = (uint32_t)a->gpus;
		} else {
			Skein__Gossip__NodeMeta *m = agent_peer_meta(&mi[i]);
			gpus = m ? m->gpus : 0;
			if (m) skein__gossip__node_meta__free_unpacked(m, NULL);
		}
		if (!gpus) continue;
		place_node *p = &nodes[k++];
		snprintf(p->name, sizeof p->name, "%s", mi[i].name);
		memcpy(p->ip, mi[i].addr.ip, mi[i].addr.len);
		p->iplen = mi[i].addr.len;
		p->gpus = gpus > JOB_GPUS_PER_NODE_MAX ? JOB_GPUS_PER_NODE_MAX : gpus;
		/* failed for less than the grace still holds its units: when a
		 * partition heals, the cut-off side's stale death notices make live
		 * nodes "failed" for the tens of ms they take to refute them, and
		 * that must not restart their members */
		p->alive = mi[i].status == MBR_ALIVE || mi[i].status == MBR_SUSPECT ||
			   (mi[i].status == MBR_DEAD && now - mi[i].status_since_ms < NODE_LOSS_GRACE_MS);
	}
done:
	free(mi);
	*out = nodes;
	return k;
}



/* True when `node` last reported a live process of job `job` (a stopped
 * job's members in their stop grace). */
static bool job_lingers_on(agent *a, const char *job, const char *node)
{
	const job_report *r = aj_report_of(a, node);
	for (size_t i = 0; r && i < r->n; i++)
		if (r->members[i].pid > 0 && !strcmp(r->members[i].job, job)) return true;
	return false;
}

/* GPUs held by every active job but `skip`, and by stopped ones whose
 * processes are still going on that node (a long stop grace: a checkpoint
 * being written must not share its GPU with a new job). */
static void mark_busy(agent *a, const job_state *js, const job_rec *skip, place_node *nodes, size_t n)
{
	for (size_t i = 0; i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		if (j == skip || !job_rec_placed(j)) continue;
		bool active = job_rec_active(j);
		for (uint32_t s = 0; s < j->layout.n; s++) {
			const char *at = j->layout.node[s];
			uint32_t gpu = j->layout.gpu[s];
			int ni = job_node_index(nodes, n, at);
			if (ni < 0 || gpu >= 64) continue;
			if (active || job_lingers_on(a, j->spec.name, at)) nodes[ni].busy |= 1ULL << gpu;
		}
	}
}

/* ---------------------------------------------------------------- head: reports */




/* Reports of nodes that are gone (failed, left, forgotten) are dropped. */
static void prune_reports(agent *a)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->nreports;) {
		mbr_member_info mi;
		bool keep = !strcmp(J->reports[i].node, a->opts.name) ||
			    (mbr_lookup(a->mbr, J->reports[i].node, &mi) == 0 &&
			     (mi.status == MBR_ALIVE || mi.status == MBR_SUSPECT));
		if (keep) { i++; continue; }
		job_report_free(&J->reports[i]);
		J->reports[i] = J->reports[--J->nreports];
	}
}

/* ---------------------------------------------------------------- head: reconcile */

/* True while an update of any job is proposed and not applied: placement
 * and ports are computed from committed state, so the next job waits for
 * the previous one's GPUs and port to be in it (one commit, a few ms; the
 * commit kicks the next round).  Otherwise two jobs placed in one round
 * would both see the same GPUs free, and get the same MASTER_PORT. */
static bool inflight_any(agent *a)
{
	agent_jobs *J = a->jobs;
	uint64_t applied = agent_head_applied(a);
	double now = sk_mono_s();
	for (size_t i = 0; i < J->ninfl;) {
		if (applied >= J->infl[i].index || now - J->infl[i].since > INFLIGHT_TIMEOUT_S) {
			J->infl[i] = J->infl[--J->ninfl];
			continue;
		}
		i++;
	}
	return J->ninfl > 0;
}








/* Every restart of the trainer group, whatever caused it (a rank died, a
 * rank runs in a new process of its generation, a trainer unit moved off a
 * lost node), is one of the --max-restarts the job may have: true and L
 * advanced to the next generation when one is left; false when the policy
 * is spent (`why` then says so and the job must fail). */
static bool trainer_restart(agent *a, const job_spec *s, job_layout *L, const char *cause, char *why, size_t wl)
{
	if (s->max_restarts >= 0 && L->trainer_failures >= (uint32_t)s->max_restarts) {
		snprintf(why, wl, "the trainer group restarted %u times (--max-restarts %d); last: %s", L->trainer_failures,
			 s->max_restarts, cause);
		return false;
	}
	L->trainer_gen++;
	L->trainer_failures++;
	aj_fresh_port(a, L);
	snprintf(why, wl, "%s; restarting the trainer group (generation %llu, restart %u of %d)", cause,
		 (unsigned long long)L->trainer_gen, L->trainer_failures, s->max_restarts);
	return true;
}


/* Units on failed nodes move; pending ones are retried. */
static void reconcile_layout(agent *a, const job_rec *j, const job_spec *s, place_node *nodes, size_t n)
{
	job_layout L;
	if (job_rec_layout(&L, j, s) < 0) return;
	place_layout pl = { 0 };
	place_result res = { 0 };
	bool *eng = calloc(L.neng ? L.neng : 1, sizeof *eng);
	if (!eng || job_layout_to_place(&L, nodes, n, &pl) < 0) goto out;
	bool fresh = !job_rec_placed(j);
	bool need = fresh;
	for (uint32_t i = 0; i < pl.nslots; i++)
		if (pl.slots[i].node < 0 || !nodes[pl.slots[i].node].alive) need = true;
	if (!need) {
		if (aj_drain_step(a, j, s, nodes, n)) goto out;
		goto port;
	}
	int rc = fresh ? place_fresh(s, nodes, n, &pl, &res) : place_repair(s, nodes, n, &pl, &res);
	if (rc < 0) goto out;
	/* restarts an engine had where it was, for its SKEIN_RESTART_COUNT on the new node */
	for (uint32_t e = 0; !fresh && e < L.neng; e++) {
		char id[SUP_ID_MAX];
		aj_member_id(id, sizeof id, s->name, false, e);
		const char *at = job_layout_engine_node(s, &L, e);
		const job_member_status *st = at[0] ? aj_status_of(a, at, id) : NULL;
		if (st && st->gen == L.engine_gen[e] && st->restarts > L.engine_restarts[e]) L.engine_restarts[e] = st->restarts;
	}
	int changed = job_layout_from_place(s, &L, &pl, nodes, eng);
	if (fresh && rc == 1) {
		if (strcmp(j->reason, res.reason))
			aj_propose_update(a, j, "pending", res.reason, NULL, res.reason);
		goto out;
	}
	if (!changed && !strcmp(j->reason, res.reason)) goto port;
	char why[400];
	if (fresh) {
		L.trainer_gen = 1;
		for (uint32_t e = 0; e < L.neng; e++) L.engine_gen[e] = 1;
		snprintf(why, sizeof why, "placed on %u GPU slots", L.n);
	} else {
		snprintf(why, sizeof why, "re-placed after node loss%s%s", changed & 1 ? " (trainer group restarts)" : "",
			 res.reason[0] ? "; still pending: " : "");
		if (res.reason[0]) strncat(why, res.reason, sizeof why - strlen(why) - 1);
		/* one new generation per move, once every rank has a place again
		 * (while a unit is pending no rank runs, so nothing restarts) */
		if ((changed & 1) && job_layout_trainer_placed(&L, job_spec_trainer_ranks(s))) {
			char cause[sizeof why];
			snprintf(cause, sizeof cause, "%s", why);
			if (!trainer_restart(a, s, &L, cause, why, sizeof why)) {
				aj_propose_update(a, j, "failed", why, &L, why);
				goto out;
			}
		}
		for (uint32_t e = 0; e < L.neng; e++) {
			/* once per move: when it has a place again (not when it loses one) */
			if (!eng[e] || !job_layout_engine_node(s, &L, e)[0]) continue;
			L.engine_gen[e]++;
			L.engine_restarts[e]++;
		}
	}
	aj_master_of(a, &L, nodes, n);
	if (!L.master_port && L.node[0][0]) L.master_port = aj_node_free_port(a, L.node[0], 0);
	aj_propose_update(a, j, "running", res.reason, &L, why);
	goto out;
port:
	/* the trainer waits for MASTER_PORT until rank 0's node has reported one */
	if (job_rec_placed(j) && !L.master_port && L.node[0][0]) {
		aj_master_of(a, &L, nodes, n);
		L.master_port = aj_node_free_port(a, L.node[0], 0);
		if (L.master_port) aj_propose_update(a, j, j->state, j->reason, &L, "MASTER_PORT chosen");
	}
out:
	free(pl.slots);
	free(eng);
	job_layout_free(&L);
}

static rank_seen *seen_get(agent *a, const char *id)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->nseen; i++)
		if (!strcmp(J->seen[i].id, id)) return &J->seen[i];
	rank_seen *p = realloc(J->seen, (J->nseen + 1) * sizeof *p);
	if (!p) return NULL;
	J->seen = p;
	p = &J->seen[J->nseen++];
	snprintf(p->id, sizeof p->id, "%s", id);
	p->gen = 0;
	p->pid = 0;
	return p;
}

/* What only a head in office may hold: dropped when it is not one. */
static void forget_head_caches(agent *a)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->nreports; i++) job_report_free(&J->reports[i]);
	J->nreports = 0;
	J->nseen = 0;
	J->ninfl = 0;
}

/* Trainer exits reported for the current generation: restart the group, or
 * fail it when the policy is spent, or complete the job when every rank
 * exited 0. */
static void reconcile_trainer(agent *a, const job_rec *j, const job_spec *s)
{
	job_layout L;
	if (job_rec_layout(&L, j, s) < 0) return;
	uint32_t A = job_spec_trainer_ranks(s), done = 0;
	const job_member_status *dead = NULL, *reborn = NULL;
	if (!job_layout_trainer_placed(&L, A) || !L.master_port) goto out;
	for (uint32_t r = 0; r < A; r++) {
		char id[SUP_ID_MAX];
		aj_member_id(id, sizeof id, s->name, true, r);
		const job_member_status *st = aj_status_of(a, L.node[r], id);
		if (!st || st->gen != L.trainer_gen) continue;
		/* a rank in a new process of the same generation (its agent restarted,
		 * or fenced it and got orders again): the others' world is broken */
		char key[SUP_ID_MAX + 24];
		snprintf(key, sizeof key, "%s#%llu", id, (unsigned long long)j->seq); /* a resubmitted name starts afresh */
		rank_seen *rs = seen_get(a, key);
		/* running only: a rank whose order moved to this generation while its
		 * old process is still stopping reports that old pid with the new
		 * generation (state pending); taking it for the new generation's
		 * process made its real start look like a rebirth: one rank death
		 * restarted the group twice, or in a loop */
		if (rs && st->pid > 0 && !strcmp(st->state, "running")) {
			if (rs->gen == st->gen && rs->pid > 0 && rs->pid != st->pid && !reborn) reborn = st;
			rs->gen = st->gen;
			rs->pid = st->pid;
		}
		/* name the rank that died, not a sibling its agent stopped */
		if (!strcmp(st->state, "failed") && (!dead || !strncmp(dead->reason, "stopped by the agent", 20))) dead = st;
		if (!strcmp(st->state, "stopped") && st->last_exit == 0 && st->pid == 0) done++;
	}
	char why[400], cause[300];
	if (dead || reborn) {
		if (dead)
			snprintf(cause, sizeof cause, "%s: %s", dead->id, dead->reason);
		else
			snprintf(cause, sizeof cause, "%s runs in a new process of the same generation (its agent "
				 "restarted or fenced it)", reborn->id);
		if (trainer_restart(a, s, &L, cause, why, sizeof why)) aj_propose_update(a, j, "running", "", &L, why);
		else aj_propose_update(a, j, "failed", why, &L, why);
	} else if (done == A) {
		aj_propose_update(a, j, "completed", "every trainer rank exited 0", &L, "completed");
	}
out:
	job_layout_free(&L);
}

static void reconcile(agent *a)
{
	const job_state *js = agent_head_jobs(a);
	if (!js || !agent_head_ready(a) || a->jobs->closing) return;
	a->jobs->last_reconcile = sk_mono_s();
	aj_drain_tick(a);
	place_node *nodes;
	size_t n = cluster_nodes(a, &nodes);
	if (!nodes) return;
	/* by name: a proposal may commit at once (one voter) and replace records */
	size_t cnt = job_state_count(js);
	char (*names)[JOB_NAME_MAX + 1] = calloc(cnt ? cnt : 1, sizeof *names);
	for (size_t i = 0; names && i < cnt; i++) snprintf(names[i], sizeof names[i], "%s", job_state_at(js, i)->spec.name);
	for (size_t i = 0; names && i < cnt; i++) {
		const job_rec *j = job_state_get(js, names[i]);
		job_spec s;
		char err[256];
		if (!j || !job_rec_active(j) || inflight_any(a)) continue;
		if (job_rec_spec(j, &s, err, sizeof err) < 0) continue;
		for (size_t k = 0; k < n; k++) nodes[k].busy = 0;
		mark_busy(a, js, j, nodes, n);
		aj_drain_mark(a, nodes, n);
		reconcile_layout(a, j, &s, nodes, n);
		j = job_state_get(js, names[i]);
		if (j && job_rec_active(j) && !inflight_any(a) && job_rec_placed(j)) reconcile_trainer(a, j, &s);
	}
	free(names);
	free(nodes);
	prune_reports(a);
}

/* ---------------------------------------------------------------- head: orders */







static int order_cmp(const void *x, const void *y)
{
	const order_buf *a = *(order_buf *const *)x, *b = *(order_buf *const *)y;
	return strcmp(a->node, b->node);
}

/* Sends every alive agent its orders (the members placed on it, maybe
 * none): O(members log members + nodes log members). */
static void send_orders(agent *a)
{
	agent_jobs *J = a->jobs;
	const job_state *js = agent_head_jobs(a);
	if (!js || !agent_head_ready(a) || J->closing) return;
	J->last_orders = sk_mono_s();
	J->dirty = false;
	bool dropped = false;
	size_t cap = 0, cnt = 0;
	static const char *drained[JOB_STATE_DRAINED_MAX]; /* every order carries the drained set */
	size_t ndr = job_state_drained_count(js);
	for (size_t i = 0; i < ndr; i++) drained[i] = job_state_drained_at(js, i, NULL);
	for (size_t i = 0; i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		if (!strcmp(j->state, "running") && job_rec_placed(j)) cap += j->layout.n * 2;
	}
	size_t nm = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(nm ? nm : 1, sizeof *mi);
	order_buf *ob = calloc(cap ? cap : 1, sizeof *ob);
	order_buf **sorted = calloc(cap ? cap : 1, sizeof *sorted);
	const job_order **list = calloc(cap ? cap : 1, sizeof *list);
	if (!mi || !ob || !sorted || !list) goto out;
	nm = mbr_members(a->mbr, mi, nm);
	for (size_t i = 0; i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		job_spec s;
		char err[256];
		job_layout L;
		if (strcmp(j->state, "running") || !job_rec_placed(j)) continue;
		if (job_rec_spec(j, &s, err, sizeof err) < 0 || job_rec_layout(&L, j, &s) < 0)
			continue;
		uint32_t A = job_spec_trainer_ranks(&s), E = job_spec_engines(&s);
		for (uint32_t k = 0; k < A + E && cnt < cap; k++)
			if (aj_build_order(a, j, &s, &L, k < A, k < A ? k : k - A, &ob[cnt], ob[cnt].node, sizeof ob[cnt].node)) {
				sorted[cnt] = &ob[cnt];
				cnt++;
			}
		job_layout_free(&L); /* the orders point into the committed record, not into L or s */
	}
	qsort(sorted, cnt, sizeof *sorted, order_cmp);
	for (size_t i = 0; i < nm; i++) {
		if (i > 0 && mi[i].status != MBR_ALIVE && mi[i].status != MBR_SUSPECT) continue;
		const char *node = i == 0 ? a->opts.name : mi[i].name;
		/* the first order for this node, by binary search */
		size_t lo = 0, hi = cnt, k = 0;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (strcmp(sorted[mid]->node, node) < 0) lo = mid + 1;
			else hi = mid;
		}
		for (; lo < cnt && !strcmp(sorted[lo]->node, node); lo++) list[k++] = &sorted[lo]->o;
		job_assignment as = { .n = k, .members = list, .ndrained = ndr, .drained = drained };
		snprintf(as.head, sizeof as.head, "%s", a->opts.name);
		if (i == 0) {
			aj_assign_local(a, &as);
			continue;
		}
		uint8_t *buf;
		size_t len;
		if (job_codec_assignment_encode(&as, &buf, &len) < 0) continue;
		Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
		q.cmd = "assign";
		q.term = agent_head_term(a);
		q.payload.data = buf;
		q.payload.len = len;
		/* dropped when the connection is not up yet (a new head's first order
		 * to each node): the next round comes in 100 ms, not a second */
		if (agent_peer_send(a, node, &q) < 0) dropped = true;
		free(buf);
	}
	J->quick_rounds = dropped && J->quick_rounds < 5 ? J->quick_rounds + 1 : 0;
out:
	free(list);
	free(sorted);
	free(ob);
	free(mi);
}

/* ---------------------------------------------------------------- agent: orders and reports */


static void send_report(agent *a)
{
	agent_jobs *J = a->jobs;
	if (J->closing) return;
	char head[MBR_NAME_MAX + 1];
	uint64_t term;
	agent_head_known(a, head, sizeof head, &term, NULL, 0);
	if (!head[0]) snprintf(head, sizeof head, "%s", J->head);
	if (!head[0]) return;
	size_t n = sup_list(J->sup, NULL, 0);
	sup_status *st = calloc(n ? n : 1, sizeof *st);
	job_report rep = { .members = calloc(n ? n : 1, sizeof *rep.members) };
	uint8_t *buf = NULL;
	size_t len;
	if (!st || !rep.members) goto out;
	n = sup_list(J->sup, st, n);
	for (size_t i = 0; i < n; i++) {
		job_member_status *m = &rep.members[i];
		snprintf(m->id, sizeof m->id, "%s", st[i].id);
		snprintf(m->job, sizeof m->job, "%s", st[i].job);
		m->gen = st[i].gen;
		m->pid = st[i].pid;
		snprintf(m->state, sizeof m->state, "%s", sup_state_str(st[i].state));
		m->restarts = st[i].restarts;
		m->last_exit = st[i].last_exit;
		snprintf(m->reason, sizeof m->reason, "%s", st[i].reason);
	}
	rep.n = n;
	snprintf(rep.node, sizeof rep.node, "%s", a->opts.name);
	rep.free_port = aj_free_port(a);
	if (job_codec_report_encode(&rep, &buf, &len) < 0) goto out;
	if (!strcmp(head, a->opts.name)) {
		aj_handle_report(a, a->opts.name, buf, len);
	} else {
		Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
		q.cmd = "report";
		q.payload.data = buf;
		q.payload.len = len;
		agent_peer_send(a, head, &q);
	}
out:
	free(buf);
	free(st);
	job_report_free(&rep);
}

/* Whether this node may give dir to job's members; notes a refusal or a
 * warning (logged when it changes) for skeinctl info. */
enum { DISK_JUDGE_S = 30 }; /* a folder's modes are judged again after this long */

const char *agent_jobs_disk_judge(agent *a, const char *dir, bool *refused)
{
	agent_jobs *J = a->jobs;
	*refused = false;
	if (!J || !dir || !dir[0]) return "";
	double now = sk_mono_s();
	struct disk_judged *d = NULL, *oldest = &J->judged[0];
	for (size_t i = 0; i < sizeof J->judged / sizeof J->judged[0]; i++) {
		struct disk_judged *x = &J->judged[i];
		if (x->dir[0] && !strcmp(x->dir, dir)) d = x;
		if (x->at < oldest->at) oldest = x;
	}
	if (!d || now - d->at >= DISK_JUDGE_S) {
		if (!d) d = oldest;
		snprintf(d->dir, sizeof d->dir, "%s", dir);
		d->at = now;
		d->why[0] = 0;
		d->refused = job_disk_dir_check(dir, a->opts.data_dir, d->why, sizeof d->why) != 0;
		if (!d->refused) job_disk_dir_warning(dir, (unsigned)geteuid(), d->why, sizeof d->why);
	}
	*refused = d->refused;
	return d->why;
}

static bool disk_dir_ok(agent *a, const char *job, const char *dir)
{
	agent_jobs *J = a->jobs;
	char note[sizeof J->disk_note];
	bool refused;
	const char *why = agent_jobs_disk_judge(a, dir, &refused);
	if (refused) snprintf(note, sizeof note, "job %s: %s: not given to its members here", job, why);
	else if (why[0]) snprintf(note, sizeof note, "job %s: %s", job, why);
	else return true;
	bool ok = !refused;
	if (strcmp(note, J->disk_note)) {
		SK_WARN("jobs", "%s", note);
		snprintf(J->disk_note, sizeof J->disk_note, "%s", note);
	}
	return ok;
}

/* A stock engine's member (--rollout-engine sglang|vllm, docs/engines.md) runs
 * skein's sidecar, which starts the job's --rollout-cmd itself
 * ($SKEIN_ENGINE_CMD) and outlives its restarts.  SKEIN_PYTHON names the
 * interpreter (the agent's environment; default python3).  The engine's
 * port is picked here, by the agent that starts the member (issue 24):
 * free on this node now (aj_free_port: bound, read, closed), given as
 * SKEIN_ENGINE_PORT and SKEIN_ENGINE_URL; the same one for the member's
 * whole generation (the sidecar starts every restart of its engine on it). */
static const char SIDECAR_CMD[] = "exec \"${SKEIN_PYTHON:-python3}\" -m skein.sidecar";
enum { AJ_KEEP = 3 }; /* strings a sidecar's spec points to until sup_set copies them */

/* The member's port: the one it got in this generation (old: the last
 * order's ports), else a fresh one; recorded in fresh[*nfresh]. */
static int aj_engine_port(agent *a, const sup_spec *p, const job_order *o, struct engine_port *fresh,
			  size_t *nfresh)
{
	const agent_jobs *J = a->jobs;
	int port = -1;
	for (size_t i = 0; i < J->neports; i++)
		if (!strcmp(J->eports[i].id, p->id) && J->eports[i].gen == o->gen) port = J->eports[i].port;
	if (port <= 0 && (port = (int)aj_free_port(a)) <= 0) return -1;
	struct engine_port *e = &fresh[(*nfresh)++];
	snprintf(e->id, sizeof e->id, "%s", p->id);
	e->gen = o->gen;
	e->port = port;
	return port;
}

static void aj_sidecar_wrap(agent *a, sup_spec *p, const job_order *o, char **keep, struct engine_port *fresh,
			    size_t *nfresh)
{
	bool stock = false;
	for (size_t e = 0; e < o->nenv; e++)
		if (!strncmp(o->env[e], "SKEIN_ROLLOUT_ENGINE=", 21) && strcmp(o->env[e] + 21, "skein")) stock = true;
	if (!stock || !o->cmd) return;
	int port = aj_engine_port(a, p, o, fresh, nfresh);
	const char *why = NULL;
	if (port <= 0) why = "no free port for the engine";
	else if (p->nenv + AJ_KEEP > SUP_ENV_MAX) why = "no room in the environment";
	else if ((asprintf(&keep[0], "SKEIN_ENGINE_CMD=%s", o->cmd) < 0 && !(keep[0] = NULL)) ||
		 (asprintf(&keep[1], "SKEIN_ENGINE_PORT=%d", port) < 0 && !(keep[1] = NULL)) ||
		 (asprintf(&keep[2], "SKEIN_ENGINE_URL=http://127.0.0.1:%d", port) < 0 && !(keep[2] = NULL)))
		why = "out of memory"; /* a failed asprintf's pointer is undefined: NULL for the free */
	if (why) {
		SK_ERROR("jobs", "%s: %s: the engine cannot start", o->id, why);
		/* never the stock engine without its sidecar: it would never get weights */
		p->cmd = "echo 'skein: the agent could not set the stock engine up (see its log)' >&2; exit 1";
		return;
	}
	for (int k = 0; k < AJ_KEEP; k++) p->env[p->nenv++] = keep[k];
	p->cmd = SIDECAR_CMD;
}

const char *agent_jobs_disk_note(agent *a) { return a->jobs ? a->jobs->disk_note : ""; }

void aj_assign_local(agent *a, const job_assignment *as)
{
	agent_jobs *J = a->jobs;
	if (J->closing) return;
	J->last_order = sk_mono_s();
	if (J->fenced) SK_INFO("jobs", "orders from head %s again: members follow them", as->head);
	J->fenced = false;
	snprintf(J->head, sizeof J->head, "%s", as->head);
	aj_drained_set(a, as->drained, as->ndrained);
	size_t n = as->n;
	sup_spec *sp = calloc(n ? n : 1, sizeof *sp);
	char **cmds = calloc(n ? n * AJ_KEEP : 1, sizeof *cmds); /* sidecars' SKEIN_ENGINE_*=..., until sup_set copies */
	struct engine_port *ports = calloc(n ? n : 1, sizeof *ports);
	size_t nports = 0;
	/* members reach their agent on its Unix socket: they run as its user,
	 * so they need no key (and get none, see agent_sup.c) */
	char rpc_env[300];
	snprintf(rpc_env, sizeof rpc_env, "SKEIN_RPC=unix:%s", a->control_socket);
	if (!sp || !cmds || !ports) {
		free(sp);
		free(cmds);
		free(ports);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const job_order *o = as->members[i];
		sup_spec *p = &sp[i];
		snprintf(p->id, sizeof p->id, "%s", o->id);   /* sizes checked where job_order.h meets sup.h */
		snprintf(p->job, sizeof p->job, "%s", o->job);
		p->cmd = o->cmd;
		for (size_t e = 0; e < o->nenv; e++) {
			/* the head judged the folder on its host; this one judges it
			 * here too (its own data dir, its own links): a refused
			 * folder is not given, so the member fails on its own */
			if (!strncmp(o->env[e], "SKEIN_DISK_DIR=", 15) && !disk_dir_ok(a, o->job, o->env[e] + 15)) continue;
			p->env[p->nenv++] = o->env[e];
		}
		p->env[p->nenv++] = rpc_env;
		aj_sidecar_wrap(a, p, o, &cmds[i * AJ_KEEP], ports, &nports);
		p->gen = o->gen;
		p->restart_base = o->restart_base;
		p->local_restart = o->local_restart;
		p->max_restarts = o->max_restarts;
		p->backoff_min_ms = o->backoff_min_ms;
		p->backoff_max_ms = o->backoff_max_ms;
		p->start_delay_ms = o->start_delay_ms;
		p->stop_grace_ms = o->stop_grace_ms;
		p->hold = o->hold;
	}
	sup_set(J->sup, sp, n);
	for (size_t i = 0; i < n * AJ_KEEP; i++) free(cmds[i]);
	free(cmds);
	free(J->eports); /* the members of this order only */
	J->eports = ports;
	J->neports = nports;
	free(sp);
	send_report(a);
}

static const char SIBLING_WHY[] = "stopped by the agent: a trainer rank of this job died";

static void sup_event(void *ud, const sup_status *st)
{
	agent *a = ud;
	/* a trainer rank died: its world is broken, stop the local siblings now */
	const char *slash = strchr(st->id, '/');
	sup_status now;
	bool current = sup_get(a->jobs->sup, st->id, &now) == 0 && now.gen == st->gen; /* not a late event */
	if (current && st->state == SUP_FAILED && slash && !strncmp(slash + 1, "trainer-", 8) &&
	    strncmp(st->reason, SIBLING_WHY, sizeof SIBLING_WHY - 1)) {
		char prefix[SUP_ID_MAX];
		snprintf(prefix, sizeof prefix, "%.*strainer-", (int)(slash - st->id + 1), st->id);
		sup_stop_prefix(a->jobs->sup, prefix, SIBLING_WHY);
	}
	SK_INFO("jobs", "member %s %s (pid %d, restarts %u%s%s)", st->id, sup_state_str(st->state), (int)st->pid,
		st->restarts, st->reason[0] ? ": " : "", st->reason);
	if (current) agent_stats_member_event(a->stats, st);
	send_report(a);
}

void aj_handle_report(agent *a, const char *node, const uint8_t *data, size_t len)
{
	agent_jobs *J = a->jobs;
	job_report nr;
	char err[160];
	if (job_codec_report_decode(&nr, data, len, err, sizeof err) < 0) {
		a->cnt.ctl_rejected++;
		SK_DEBUG("jobs", "report refused: %s", err);
		return;
	}
	if (node) snprintf(nr.node, sizeof nr.node, "%s", node);
	node = nr.node;
	size_t i;
	for (i = 0; i < J->nreports; i++)
		if (!strcmp(J->reports[i].node, node)) break;
	if (i == J->nreports) {
		job_report *p = realloc(J->reports, (J->nreports + 1) * sizeof *p);
		if (!p) {
			job_report_free(&nr);
			return;
		}
		J->reports = p;
		memset(&p[i], 0, sizeof p[i]);
		J->nreports++;
	}
	job_report_free(&J->reports[i]);
	J->reports[i] = nr;
	const job_report *r = &J->reports[i];
	node = r->node;
	agent_update_members_changed(a); /* a participant's process may be gone */
	/* act now on what needs the head (a trainer rank exited, a port came);
	 * the rest waits for the periodic round */
	bool act = false;
	const job_state *js = agent_head_jobs(a);
	for (size_t k = 0; js && k < r->n && !act; k++) {
		const job_member_status *m = &r->members[k];
		if (!strstr(m->id, "/trainer-") || (strcmp(m->state, "failed") && strcmp(m->state, "stopped"))) continue;
		const job_rec *j = job_state_get(js, m->job);
		act = j && job_rec_placed(j) && m->gen == j->layout.trainer_gen; /* of the current generation */
	}
	for (size_t k = 0; js && k < job_state_count(js) && !act; k++) {
		const job_rec *j = job_state_at(js, k);
		act = !strcmp(j->state, "running") && job_rec_placed(j) && !j->layout.master_port &&
		      !strcmp(j->layout.node[0], node); /* rank 0's node: its port came */
	}
	/* a drain moves the next engine as soon as the last one runs */
	if (!act && js && job_state_drained_count(js)) act = true;
	if (act) kick(a);
}



/* ---------------------------------------------------------------- lifecycle */

static void kick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)loop; (void)revents;
	if (!agent_head_ready(a) || a->jobs->closing) return;
	reconcile(a);
	if (a->jobs->dirty) send_orders(a);
}

/* --member-fence-after: a node that hears no head for that long stops its
 * members (the majority may have placed them elsewhere: better none than
 * two of a trainer rank); the next order starts them again. */
static void fence_check(agent *a)
{
	agent_jobs *J = a->jobs;
	if (J->fence_after_s <= 0 || J->fenced || agent_head_ready(a)) { J->fence_ticks = 0; return; }
	if (sk_mono_s() - J->last_order < J->fence_after_s) { J->fence_ticks = 0; return; }
	/* seen on two ticks: after a stall, orders already queued are read between them */
	if (++J->fence_ticks < 2) return;
	size_t n = sup_list(J->sup, NULL, 0);
	if (!n) return;
	SK_WARN("jobs", "no order from a head for %.1f s (--member-fence-after): stopping %zu members",
		sk_mono_s() - J->last_order, n);
	sup_set(J->sup, NULL, 0);
	J->fenced = true;
	send_report(a);
}

/* Every 100 ms: events kick the head at once; this is the safety net
 * (a lost kick, pending jobs waiting for capacity) and the order round. */
static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	agent_jobs *J = a->jobs;
	(void)loop; (void)revents;
	if (!J || J->closing) return;
	if (!agent_head_ready(a)) {
		if (J->nreports || J->nseen || J->ninfl) forget_head_caches(a);
		fence_check(a);
		return;
	}
	double now = sk_mono_s();
	if (now - J->last_reconcile >= RECONCILE_INTERVAL_S) reconcile(a);
	if (J->dirty || now - J->last_orders >= (J->quick_rounds ? 0.1 : ORDER_INTERVAL_S)) send_orders(a);
	fence_check(a);
}

void agent_jobs_state_changed(agent *a)
{
	if (!a->jobs) return;
	a->jobs->dirty = true;
	kick(a);
}

static void grace_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop; (void)revents;
	kick(t->data);
}

void agent_jobs_members_changed(agent *a)
{
	kick(a);
	/* and once more when a node that just failed is past the grace */
	agent_jobs *J = a->jobs;
	if (!J || J->closing) return;
	ev_timer_stop(a->loop, &J->grace);
	ev_timer_set(&J->grace, NODE_LOSS_GRACE_MS / 1000.0 + 0.01, 0.0);
	ev_timer_start(a->loop, &J->grace);
}

int agent_jobs_open(agent *a, char *err, size_t errlen)
{
	agent_jobs *J = calloc(1, sizeof *J);
	if (!J) { snprintf(err, errlen, "out of memory"); return -1; }
	a->jobs = J;
	/* the private folder only (agent_files.h): never a shared one of a fixed name */
	if ((size_t)snprintf(J->log_dir, sizeof J->log_dir, "%s/logs", a->run_dir) >= sizeof J->log_dir ||
	    (size_t)snprintf(J->state_file, sizeof J->state_file, "%s/members", a->run_dir) >= sizeof J->state_file) {
		snprintf(err, errlen, "the member log folder path is too long: %s/logs", a->run_dir);
		return -1;
	}
	J->sup = sup_new(a->loop, J->log_dir, J->state_file, sup_event, a, err, errlen);
	if (!J->sup) return -1;
	/* members in cgroups of their own where cgroup v2 is ours to use;
	 * SKEIN_NO_CGROUP=1 keeps to process groups (tests of that path) */
	char cg[PATH_MAX], why[PATH_MAX + 64];
	const char *no_cg = getenv("SKEIN_NO_CGROUP");
	a->members_in = "process tree";
	if (no_cg && *no_cg && strcmp(no_cg, "0"))
		SK_INFO("jobs", "members in process groups and their /proc descendants (SKEIN_NO_CGROUP)");
	else if (agent_cg_agent_dir(a->opts.name, a->run_dir, cg, sizeof cg, why, sizeof why) != 0)
		SK_INFO("jobs", "members in process groups and their /proc descendants, no cgroup: %s", why);
	else if (sup_set_cgroup(J->sup, cg) == 0) {
		SK_INFO("jobs", "members in cgroups under %s", cg);
		a->members_in = "cgroup";
	}
	ev_init(&J->kick, kick_cb);
	J->kick.data = a;
	ev_init(&J->grace, grace_cb);
	J->grace.data = a;
	ev_timer_init(&J->tick, tick_cb, TICK_S, TICK_S);
	J->tick.data = a;
	char *end;
	J->fence_after_s = strtod(a->opts.member_fence_after, &end);
	if (*end || end == a->opts.member_fence_after || J->fence_after_s < 0 || J->fence_after_s > 86400) {
		snprintf(err, errlen, "--member-fence-after: expected seconds (0 to 86400), got '%s'",
			 a->opts.member_fence_after);
		return -2; /* a usage error */
	}
	J->last_order = sk_mono_s();
	ev_timer_start(a->loop, &J->tick);
	return 0;
}

void agent_jobs_close(agent *a)
{
	agent_jobs *J = a->jobs;
	if (!J) return;
	ev_timer_stop(a->loop, &J->kick);
	ev_timer_stop(a->loop, &J->grace);
	ev_timer_stop(a->loop, &J->tick);
	J->closing = true; /* sup_free runs the loop: ticks, orders and reports must not touch it */
	sup_free(&J->sup, 30.0);
	ev_timer_stop(a->loop, &J->kick);
	ev_timer_stop(a->loop, &J->grace);
	for (size_t i = 0; i < J->nreports; i++) job_report_free(&J->reports[i]);
	free(J->reports);
	free(J->infl);
	free(J->seen);
	aj_drained_free(a);
	free(a->jobs->eports);
	a->jobs->eports = NULL;
	a->jobs->neports = 0;
	free(J);
	a->jobs = NULL;
}
