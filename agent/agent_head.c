/* agent/agent_head: the head election (raft/) wired into skeind.
 *
 * Agents started with --head-eligible run a Raft voter.  Once
 * --bootstrap-expect eligible agents are visible by gossip (exactly that
 * many: more means the operator's count is wrong, and we refuse rather than
 * risk two different first voter sets), each of them bootstraps the same
 * sorted voter set, as Consul does.  From then on Raft elects the head and
 * replicates the cluster state (agent_state.c: the key-value map and the
 * jobs), persisted in <data-dir>/raft.  This file applies what commits and
 * raises a->state_changed when the jobs' part changed (agent_main.c delivers
 * it to the jobs on the next loop iteration), and a->head_changed when the
 * head or term it publishes in gossip changed; it calls no layer above it
 * (agent.h has the order).  The state machine itself never calls out.
 *
 * The disk stays off the loop: raft's storage calls go to a storage thread
 * (raft_async: ordered, one fdatasync per batch) that wakes the loop through
 * an ev_async when a batch is durable; raft then releases the answers and
 * commits that waited for it.  The loop, which also answers gossip probes,
 * never waits for an fsync.
 *
 * Transport: Raft messages ride the control channel (Request "raft" with a
 * payload, one-way) through agent_peer.c, one connection per peer voter,
 * kept open to every voter of the current set (periodic_cb), not only
 * those written to so far.  Sends never block; a message that cannot go is
 * dropped and counted, and Raft retries on its own.
 *
 * Head-only requests (state put/get/list/del, voters, head) that reach a
 * follower or a non-voter are forwarded to the head (agent_peer.c) and the
 * answer relayed; when this agent becomes the head, forwards still waiting
 * on the old one are taken back and served by agent_ctl.c;
 * a write is answered only once committed (a majority has it).  The head
 * and its term travel in gossip metadata, so every agent knows them, and
 * every order a head sends carries its term (the fence, agent_head_order_ok).
 *
 * The head's control commands (head, state, voters) are agent_head_cmd.c's;
 * they reach this file through agent.h and agent_head_int.h. */
#include "agent/agent.h"
#include "agent/agent_update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "agent/agent_rpc.h"
#include "agent/agent_head_int.h"
#include "agent/agent_stats.h"
#include "agent/agent_state.h"
#include "common/sk_time.h"
#include "common/sk_log.h"
#include "common/sk_text.h"
#include "proto/control.pb-c.h"
#include "proto/gossip.pb-c.h"
#include "raft/raft.h"
#include "raft/raft_kv.h"
#include "jobs/job_state.h"

enum {
	PENDING_MAX = 4096,
};
static const double WRITE_TIMEOUT_S = 5.0;   /* a write not committed by then fails */

typedef struct {
	uint64_t index, term;
	double deadline;
	agent_client client;
	char body[160];           /* the answer once committed ("" = the index and term) */
} pending;

struct agent_head {
	raft_t *raft;
	raft_storage *st;         /* the file (or memory) storage */
	bool file_storage;
	raft_async *disk;         /* the storage thread in front of the file storage */
	ev_async disk_wake;
	agent_state *state;       /* the replicated state machine (agent_state.c) */
	uint64_t applied, applied_term;  /* index and term of the last applied entry */
	ev_timer timer;
	ev_timer periodic;
	pending *pend;
	size_t npend;
	int bootstrap_expect;
	bool bootstrap_warned;
	uint64_t replace_after_ms;
	char published_head[RAFT_NAME_MAX + 1];
	uint64_t published_term;
	uint64_t handover_at;  /* a leave started a handover then (sk_mono_ms), 0 = none */
	char staged[RAFT_NAME_MAX + 1];  /* the replacement we last staged */
	char skip[RAFT_NAME_MAX + 1];    /* ... dropped as it did not catch up: not again until */
	uint64_t skip_until;
};

/* ---------------------------------------------------------------- gossip view */

void agent_head_known(agent *a, char *name, size_t cap, uint64_t *term, char *rpc, size_t rpccap)
{
	name[0] = 0;
	*term = 0;
	agent_head *h = a->head;
	if (h && h->raft) {
		/* a voter trusts its own Raft view for its term and older: gossip
		 * about those terms may be stale (a head that has since stepped
		 * down still claims it until its peers mark it failed) */
		*term = raft_term(h->raft);
		if (raft_leader(h->raft)) snprintf(name, cap, "%s", raft_leader(h->raft));
	}
	/* What the voters say in gossip: the claim of the newest term wins. */
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(n, sizeof *mi);
	if (mi) {
		mbr_members(a->mbr, mi, n);
		for (size_t i = 0; i < n; i++) {
			if (mi[i].status != MBR_ALIVE && mi[i].status != MBR_SUSPECT) continue;
			Skein__Gossip__NodeMeta *m = agent_peer_meta(&mi[i]);
			if (m && m->head_eligible && m->head[0] && m->term > *term) {
				snprintf(name, cap, "%s", m->head);
				*term = m->term;
			}
			if (m) skein__gossip__node_meta__free_unpacked(m, NULL);
		}
		free(mi);
	}
	if (rpc) {
		rpc[0] = 0;
		if (name[0]) agent_peer_rpc(a, name, rpc, rpccap);
	}
}

void agent_head_counters(agent *a, uint64_t c[6])
{
	agent_head *h = a->head;
	memset(c, 0, 6 * sizeof c[0]);
	if (!h || !h->raft) return;
	const raft_stats *st = raft_get_stats(h->raft);
	c[0] = st->msgs_sent;
	c[1] = st->msgs_recv;
	c[2] = agent_peer_drops(a);
	c[3] = st->elections;
	c[4] = st->stepdowns_lease;
	for (int i = 0; i < WIRE_ERR__COUNT; i++) c[5] += st->drop[i];
	c[5] += st->drop_stale_term + st->drop_not_voter + st->drop_bad_state;
}

void agent_head_published(agent *a, const char **head, uint64_t *term)
{
	agent_head *h = a->head;
	*head = h && h->raft ? h->published_head : "";
	*term = h && h->raft ? h->published_term : 0;
}

static void raft_send(agent *a, const raft_out *o)
{
	Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
	q.cmd = "raft";
	q.payload.data = o->data;
	q.payload.len = o->len;
	agent_peer_send(a, o->to, &q);
}

/* ---------------------------------------------------------------- the pump */

static void publish_head(agent *a)
{
	agent_head *h = a->head;
	const char *leader = raft_leader(h->raft);
	uint64_t term = raft_term(h->raft);
	if (!leader) leader = "";
	if (term == h->published_term && !strcmp(leader, h->published_head)) return;
	snprintf(h->published_head, sizeof h->published_head, "%s", leader);
	h->published_term = term;
	agent_defer(a, &a->head_changed); /* agent_main.c puts it in the gossip metadata */
}

static void answer_pending(agent *a, size_t i, int code, const char *error, const char *body)
{
	agent_head *h = a->head;
	agent_ctl_send(a, &h->pend[i].client, code, error, body);
	h->pend[i] = h->pend[--h->npend];
}

static void fail_all_pending(agent *a, const char *why)
{
	while (a->head->npend) answer_pending(a, 0, 1, why, NULL);
}


static void raft_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)loop; (void)revents;
	raft_tick(a->head->raft, sk_boot_ms());
	agent_head_pump(a);
}

/* On the storage thread: a batch is durable (or failed); wake the loop. */
static void disk_notify(void *ctx)
{
	agent *a = ctx;
	ev_async_send(a->loop, &a->head->disk_wake);
}

static void disk_wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	agent *a = w->data;
	(void)loop; (void)revents;
	if (!a->head->raft) return;
	raft_async_deliver(a->head->disk, a->head->raft, sk_boot_ms());
	agent_head_pump(a);
}

static void apply_all(agent *a)
{
	agent_head *h = a->head;
	raft_apply ap;
	bool jobs_changed = false, update_changed = false;
	while (raft_pop_apply(h->raft, &ap)) {
		int rc = 0;
		if (ap.kind == RAFT_APPLY_SNAPSHOT) {
			char err[200];
			if (agent_state_restore(h->state, ap.data, ap.len, err, sizeof err) < 0) {
				/* going on would answer from a state that differs from the others' */
				SK_ERROR("head", "snapshot restore failed: %s; exiting so a restart recovers", err);
				agent_exit(a, AGENT_EXIT_ERROR);
				return;
			}
			jobs_changed = update_changed = true;
		} else if (ap.type >= RAFT_ENTRY_USER) {
			unsigned changed = 0;
			rc = agent_state_apply(h->state, ap.type, ap.data, ap.len, &changed);
			if (changed & AGENT_STATE_WV) update_changed = true;
			if (changed & AGENT_STATE_JOBS) {
				if (rc < 0) SK_DEBUG("head", "job entry %llu refused (type %u)", (unsigned long long)ap.index, ap.type);
				jobs_changed = true;
			}
		}
		h->applied = ap.index;
		agent_stats_applied(a->stats, ap.index);
		h->applied_term = ap.term;
		for (size_t i = 0; i < h->npend;) {
			pending *p = &h->pend[i];
			if (p->index > ap.index || (ap.kind == RAFT_APPLY_SNAPSHOT && p->index > ap.index)) { i++; continue; }
			if (p->index == ap.index && p->term == ap.term && ap.kind == RAFT_APPLY_ENTRY && rc < 0) {
				/* committed, but the state machine refused it (the same way everywhere) */
				answer_pending(a, i, 1, "the change was refused: the state changed meanwhile (or the entry "
						       "was invalid); retry", NULL);
			} else if (p->index == ap.index && p->term == ap.term && ap.kind == RAFT_APPLY_ENTRY) {
				char body[160];
				if (p->body[0]) snprintf(body, sizeof body, "%s", p->body);
				else snprintf(body, sizeof body, "committed at index %llu, term %llu\n",
					      (unsigned long long)ap.index, (unsigned long long)ap.term);
				answer_pending(a, i, 0, NULL, body);
			} else {
				answer_pending(a, i, 1, "write lost: the head changed before it committed; retry", NULL);
			}
		}
	}
	if (jobs_changed) agent_defer(a, &a->state_changed); /* agent_main.c tells the jobs */
	if (update_changed) agent_defer(a, &a->update_changed);  /* ... and the weight coordinator */
	if (raft_snapshot_wanted(h->raft)) {
		uint8_t *data;
		size_t len;
		char err[200];
		if (agent_state_serialize(h->state, &data, &len) == 0) {
			if (raft_snapshot_take(h->raft, sk_boot_ms(), h->applied, data, len, err, sizeof err) < 0)
				SK_WARN("head", "snapshot not taken: %s", err);
			free(data);
		}
	}
}

void agent_head_pump(agent *a)
{
	agent_head *h = a->head;
	raft_out o;
	while (raft_pop_out(h->raft, &o)) {
		raft_send(a, &o);
		free(o.data);
	}
	apply_all(a);
	raft_event ev;
	while (raft_pop_event(h->raft, &ev)) {
		switch (ev.type) {
		case RAFT_EV_LEADER:
			SK_INFO("head", "this agent is the head (term %llu)", (unsigned long long)ev.term);
			agent_stats_head_seen(a->stats, a->opts.name, ev.term);
			break;
		case RAFT_EV_FOLLOWER:
			SK_INFO("head", "following head %s (term %llu)", ev.leader[0] ? ev.leader : "(unknown)",
				(unsigned long long)ev.term);
			agent_stats_head_seen(a->stats, ev.leader, ev.term);
			break;
		case RAFT_EV_STEPDOWN:
			if (ev.planned)
				SK_INFO("head", "stepped down as head (term %llu): %s", (unsigned long long)ev.term, ev.reason);
			else
				SK_WARN("head", "stepped down as head (term %llu): %s", (unsigned long long)ev.term, ev.reason);
			fail_all_pending(a, "the head stepped down before the write committed; retry");
			break;
		case RAFT_EV_VOTERS: {
			const raft_voters *v = raft_get_voters(h->raft);
			char list[RAFT_VOTERS_MAX * (RAFT_NAME_MAX + 2)] = "";
			for (size_t i = 0; i < v->n; i++) {
				strcat(list, i ? "," : "");
				strcat(list, v->names[i]);
			}
			if (ev.reason[0]) SK_WARN("head", "voters: %s; %s", list, ev.reason);
			else SK_INFO("head", "voters: %s", list);
			break;
		}
		case RAFT_EV_CANDIDATE:
			SK_INFO("head", "standing for election (term %llu)", (unsigned long long)ev.term);
			break;
		case RAFT_EV_TRANSFER:
		case RAFT_EV_WARNING:
			SK_WARN("head", "%s (term %llu)", ev.reason, (unsigned long long)ev.term);
			break;
		case RAFT_EV_FAILED:
			SK_ERROR("head", "consensus storage failed: %s; exiting so a restart recovers", ev.reason);
			agent_exit(a, AGENT_EXIT_STORAGE);
			break;
		}
	}
	publish_head(a);
	uint64_t now = sk_boot_ms(), d = raft_next_deadline(h->raft);
	ev_timer_stop(a->loop, &h->timer);
	ev_timer_set(&h->timer, d > now ? (double)(d - now) / 1000.0 : 0.0, 0.0);
	ev_timer_start(a->loop, &h->timer);
}

/* ---------------------------------------------------------------- bootstrap, replacement */

static void try_bootstrap(agent *a)
{
	agent_head *h = a->head;
	if (h->bootstrap_expect <= 0 || raft_get_voters(h->raft)->n > 0) return;
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(n, sizeof *mi);
	if (!mi) return;
	mbr_members(a->mbr, mi, n);
	const char *names[RAFT_VOTERS_MAX * 4];
	size_t k = 0;
	names[k++] = a->opts.name;
	for (size_t i = 1; i < n && k < sizeof names / sizeof names[0]; i++) {
		if (mi[i].status != MBR_ALIVE) continue;
		Skein__Gossip__NodeMeta *m = agent_peer_meta(&mi[i]);
		if (m && m->head_eligible) names[k++] = mi[i].name;
		if (m) skein__gossip__node_meta__free_unpacked(m, NULL);
	}
	if ((int)k > h->bootstrap_expect && !h->bootstrap_warned) {
		SK_ERROR("head", "%zu head-eligible agents visible but --bootstrap-expect is %d: not bootstrapping "
			 "(two different first voter sets could elect two heads); fix --bootstrap-expect", k,
			 h->bootstrap_expect);
		h->bootstrap_warned = true;
	}
	if ((int)k == h->bootstrap_expect) {
		raft_voters v;
		char err[300];
		if (raft_voters_make(&v, names, k, err, sizeof err) == 0 &&
		    raft_bootstrap(h->raft, sk_boot_ms(), &v, err, sizeof err) == 0)
			SK_INFO("head", "bootstrapped the voter set with %zu voters", k);
		else
			SK_ERROR("head", "bootstrap failed: %s", err);
	}
	free(mi);
	agent_head_pump(a);
}

/* The head replaces a voter failed for longer than --voter-replace-after by
 * an eligible alive non-voter: first the removal, then (next round) the
 * addition, one change at a time through the log. */
static void try_replace(agent *a)
{
	agent_head *h = a->head;
	uint64_t now = sk_mono_ms(), rnow = sk_boot_ms();   /* membership's clock, raft's */
	if (!h->replace_after_ms || !raft_leader_ok(h->raft, rnow)) return;
	const raft_voters *v = raft_get_voters(h->raft);
	char err[300];
	for (size_t i = 0; i < v->n; i++) {
		mbr_member_info mi;
		if (!strcmp(v->names[i], a->opts.name) || mbr_lookup(a->mbr, v->names[i], &mi) < 0) continue;
		if ((mi.status == MBR_DEAD || mi.status == MBR_LEFT) && now - mi.status_since_ms >= h->replace_after_ms) {
			char name[RAFT_NAME_MAX + 1]; /* v changes under the removal */
			snprintf(name, sizeof name, "%s", v->names[i]);
			if (raft_voter_remove(h->raft, rnow, name, err, sizeof err) == 0)
				SK_WARN("head", "removing voter %s: %s for %llu s", name, mbr_status_str(mi.status),
					(unsigned long long)((now - mi.status_since_ms) / 1000));
			agent_head_pump(a);
			return;
		}
	}
	if (h->staged[0] && !raft_staging(h->raft)) {
		if (!raft_voters_has(v, h->staged)) { /* dropped: try another one first */
			snprintf(h->skip, sizeof h->skip, "%s", h->staged);
			h->skip_until = now + 60000;
		}
		h->staged[0] = 0;
	}
	if ((int)v->n >= h->bootstrap_expect || h->bootstrap_expect <= 0) return;
	/* below the expected count: add an eligible alive non-voter */
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *all = calloc(n, sizeof *all);
	if (!all) return;
	mbr_members(a->mbr, all, n);
	const char *best = NULL;
	for (size_t i = 1; i < n; i++) {
		if (all[i].status != MBR_ALIVE || raft_voters_has(v, all[i].name)) continue;
		if (now < h->skip_until && !strcmp(all[i].name, h->skip)) continue;
		Skein__Gossip__NodeMeta *m = agent_peer_meta(&all[i]);
		if (m && m->head_eligible && (!best || strcmp(all[i].name, best) < 0)) best = all[i].name;
		if (m) skein__gossip__node_meta__free_unpacked(m, NULL);
	}
	if (best && raft_voter_add(h->raft, rnow, best, err, sizeof err) == 0) {
		SK_WARN("head", "adding voter %s to replace a failed one (it catches up first)", best);
		snprintf(h->staged, sizeof h->staged, "%s", best);
	}
	free(all);
	agent_head_pump(a);
}

static void periodic_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)loop; (void)revents;
	agent_head *h = a->head;
	if (!h->raft) return;
	double now = sk_mono_s();
	for (size_t i = 0; i < h->npend;) {
		if (now >= h->pend[i].deadline) answer_pending(a, i, 1, "write not committed within 5 s (no majority?)", NULL);
		else i++;
	}
	try_bootstrap(a);
	try_replace(a);
	/* a connection to every other voter, made ahead of need: sends never
	 * wait (ZMQ_IMMEDIATE), so a follower's first VoteReqs to voters it
	 * never wrote to would be dropped and a handover turn into an ordinary
	 * election timeout later */
	const raft_voters *v = raft_get_voters(h->raft);
	for (size_t i = 0; i < v->n; i++)
		agent_peer_connect(a, v->names[i]);
}

void agent_head_members_changed(agent *a)
{
	if (!a->head || !a->head->raft) return;
	try_bootstrap(a);
}

/* ---------------------------------------------------------------- forwarding */

/* Sends the request on to the head (agent_peer.c relays the answer). */
void agent_head_forward(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	char head[RAFT_NAME_MAX + 1], rpc[64];
	uint64_t term;
	agent_head_known(a, head, sizeof head, &term, rpc, sizeof rpc);
	if (q->forwarded) {
		agent_reply_fail(r, 1, "not the head (head is %s, term %llu): retry", head[0] ? head : "unknown",
				 (unsigned long long)term);
		return;
	}
	if (!head[0] || !rpc[0] || !strcmp(head, a->opts.name)) {
		agent_reply_fail(r, 1, "no head elected yet (term %llu): retry in a moment", (unsigned long long)term);
		return;
	}
	agent_peer_forward(a, q, c, r, head, rpc);
}

/* ---------------------------------------------------------------- the head's view */

static bool is_head(agent *a)
{
	return a->head->raft && raft_leader_ok(a->head->raft, sk_boot_ms());
}

bool agent_head_is_head(agent *a)
{
	return a->head && is_head(a);
}

bool agent_head_order_ok(agent *a, const char *sender, uint64_t term, char *why, size_t whylen)
{
	char head[RAFT_NAME_MAX + 1];
	uint64_t known;
	agent_head_known(a, head, sizeof head, &known, NULL, 0);
	if (!term || !head[0])
		snprintf(why, whylen, "order refused: %s", !term ? "it carries no term" : "no head is known here");
	else if (!sender || strcmp(sender, head))
		snprintf(why, whylen, "order refused: from '%s', but the head is %s (term %llu)", sender ? sender : "",
			 head, (unsigned long long)known);
	else if (term < known)
		snprintf(why, whylen, "stale order: term %llu is older than head %s's term %llu", (unsigned long long)term,
			 head, (unsigned long long)known);
	else if (term > known)
		/* a term this agent has not seen its head at: taking it would let
		 * an order raise the fence instead of the election */
		snprintf(why, whylen, "order refused: term %llu is newer than head %s's term %llu known here",
			 (unsigned long long)term, head, (unsigned long long)known);
	else
		return true;
	return false;
}

/* The head has applied an entry of its own term (its first, a no-op, at
 * least): its state holds everything committed before it took over. */
bool agent_head_ready(agent *a)
{
	return agent_head_is_head(a) && a->head->applied_term == raft_term(a->head->raft);
}

int agent_head_propose(agent *a, const agent_client *c, agent_reply *r, uint8_t type, uint8_t *data, size_t len,
		       const char *body, uint64_t *index_out)
{
	agent_head *h = a->head;
	uint64_t index, term;
	char err[300];
	if (c && h->npend >= PENDING_MAX) { agent_reply_fail(r, 1, "too many writes in flight"); free(data); return -1; }
	if (!h->pend) h->pend = calloc(PENDING_MAX, sizeof *h->pend);
	if (!h->pend) { agent_reply_fail(r, 1, "out of memory"); free(data); return -1; }
	if (raft_propose(h->raft, sk_boot_ms(), type, data, len, &index, &term, err, sizeof err) < 0) {
		agent_reply_fail(r, 1, "write refused: %s", err);
		free(data);
		return -1;
	}
	free(data);
	agent_stats_proposed(a->stats, index);
	if (index_out) *index_out = index;
	if (c) {
		pending *p = &h->pend[h->npend++];
		p->index = index;
		p->term = term;
		p->deadline = sk_mono_s() + WRITE_TIMEOUT_S;
		p->client = *c;
		snprintf(p->body, sizeof p->body, "%s", body ? body : "");
		r->deferred = true;
	}
	agent_head_pump(a);
	return 0;
}

uint64_t agent_head_applied(agent *a)
{
	return a->head && a->head->raft ? a->head->applied : 0;
}

const job_state *agent_head_jobs(agent *a)
{
	return a->head ? agent_state_jobs(a->head->state) : NULL;
}

const update_state *agent_head_wv(agent *a)
{
	return a->head ? agent_state_wv(a->head->state) : NULL;
}

struct raft *agent_head_raft(agent *a)
{
	return a->head ? a->head->raft : NULL;
}

uint64_t agent_head_term(agent *a)
{
	return a->head && a->head->raft ? raft_term(a->head->raft) : 0;
}

/* The voter to hand the head to when none is named: alive in gossip the
 * longest (a voter that restarted a moment ago may not have its connections
 * back yet, and its vote requests or their answers would be dropped), among
 * those that answered Raft within a heartbeat timeout (one killed a moment
 * ago is still alive in gossip until it is suspected); NULL lets raft pick
 * by log. */
const char *agent_head_handover_target(agent *a, char *buf, size_t cap)
{
	const raft_voters *v = raft_get_voters(a->head->raft);
	uint64_t best_since = UINT64_MAX, now = sk_boot_ms();
	int64_t fresh = (int64_t)raft_get_config(a->head->raft)->heartbeat_timeout_ms;
	buf[0] = 0;
	for (size_t i = 0; i < v->n; i++) {
		mbr_member_info mi;
		if (!strcmp(v->names[i], a->opts.name) || mbr_lookup(a->mbr, v->names[i], &mi) < 0) continue;
		int64_t contact = raft_last_contact_ms(a->head->raft, v->names[i], now);
		if (contact < 0 || contact > fresh) continue;
		if (mi.status != MBR_ALIVE || mi.status_since_ms >= best_since) continue;
		best_since = mi.status_since_ms;
		snprintf(buf, cap, "%s", v->names[i]);
	}
	return buf[0] ? buf : NULL;
}

/* Hands the head to the voter alive the longest; 0 when started (or already
 * under way), -1 with the reason logged. */
static int hand_over(agent *a, const char *why, char *err, size_t errlen)
{
	agent_head *h = a->head;
	char to[RAFT_NAME_MAX + 1] = "", pick[RAFT_NAME_MAX + 1];
	if (raft_transfer_target(h->raft)) return 0;
	if (raft_transfer(h->raft, sk_boot_ms(), agent_head_handover_target(a, pick, sizeof pick), to, sizeof to, err,
			  errlen) != 0)
		return -1;
	SK_INFO("head", "%s: handing the head over to %s", why, to);
	agent_head_pump(a);
	return 0;
}

void agent_head_leave(agent *a)
{
	agent_head *h = a->head;
	if (!h || !h->raft) return;
	raft_stop_campaigning(h->raft); /* on its way out: never take the head (back) */
	if (!raft_is_leader(h->raft)) return;
	char err[300];
	if (hand_over(a, "leaving", err, sizeof err) == 0) h->handover_at = sk_mono_ms();
	else SK_WARN("head", "leaving as the head without a handover: %s", err);
}

int agent_head_drained(agent *a, char *err, size_t errlen)
{
	return agent_head_is_head(a) ? hand_over(a, "this node is drained", err, errlen) : 0;
}

bool agent_head_handing_over(agent *a)
{
	agent_head *h = a->head;
	if (!h || !h->raft || !h->handover_at) return false;
	if (raft_is_leader(h->raft)) return raft_transfer_target(h->raft) != NULL; /* catching it up */
	const char *l = raft_leader(h->raft);
	/* stepped down: done once another head is heard of (bounded by the leave's limit) */
	return !l || !*l || !strcmp(l, a->opts.name);
}

void agent_head_recv(agent *a, const uint8_t *data, size_t len)
{
	if (!a->head || !a->head->raft) return;
	raft_recv(a->head->raft, sk_boot_ms(), data, len);
	agent_head_pump(a);
}

const raft_kv *agent_head_kv(agent *a)
{
	return a->head ? agent_state_kv(a->head->state) : NULL;
}

/* ---------------------------------------------------------------- lifecycle */

int agent_head_open(agent *a, char *err, size_t errlen)
{
	char *end;
	long be = strtol(a->opts.bootstrap_expect, &end, 10);
	if (*end || be < 0 || be > RAFT_VOTERS_MAX) {
		snprintf(err, errlen, "--bootstrap-expect: expected 0 to %d, got '%s'", RAFT_VOTERS_MAX,
			 a->opts.bootstrap_expect);
		return -2; /* a usage error */
	}
	long ra = strtol(a->opts.voter_replace_after, &end, 10);
	if (*end || ra < 0) {
		snprintf(err, errlen, "--voter-replace-after: expected seconds, got '%s'", a->opts.voter_replace_after);
		return -2; /* a usage error */
	}
	if (!a->opts.head_eligible && be > 0) {
		snprintf(err, errlen, "--bootstrap-expect needs --head-eligible");
		return -2; /* a usage error */
	}
	agent_head *h = calloc(1, sizeof *h);
	if (!h) { snprintf(err, errlen, "out of memory"); return -1; }
	a->head = h;
	/* Every agent forwards head-only requests; only eligible ones vote. */
	ev_timer_init(&h->periodic, periodic_cb, 0.1, 0.1);
	h->periodic.data = a;
	ev_timer_start(a->loop, &h->periodic);
	if (!a->opts.head_eligible) return 0;
	h->bootstrap_expect = (int)be;
	h->replace_after_ms = (uint64_t)ra * 1000;
	raft_config rc;
	raft_config_profile(&rc, !strcmp(a->opts.profile, "fast") ? "fast" : "default");
	if (a->opts.data_dir[0]) {
		char dir[600];
		snprintf(dir, sizeof dir, "%s/raft", a->opts.data_dir);
		h->st = raft_file_storage_new(dir, true, err, errlen);
		h->file_storage = true;
		ev_async_init(&h->disk_wake, disk_wake_cb);
		h->disk_wake.data = a;
		ev_async_start(a->loop, &h->disk_wake);
		if (h->st && !(h->disk = raft_async_new(h->st, disk_notify, a, err, errlen))) return -1;
	} else {
		SK_WARN("head", "no --data-dir: the cluster state of this voter is kept in memory only");
		h->st = raft_mem_storage_new();
	}
	if (!h->st) return -1;
	h->state = agent_state_new();
	if (!h->state) { snprintf(err, errlen, "out of memory"); return -1; }
	/* Each voter its own timeouts: a seed from the generation alone was the
	 * same on every fresh voter (generation 1), so all of them stood for
	 * election in the same millisecond, round after round (split votes for
	 * seconds).  Name, pid, clock and the kernel's randomness differ. */
	uint64_t seed = 0;
	if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) seed = 0;
	for (const char *p = a->opts.name; *p; p++) seed = (seed ^ (uint8_t)*p) * 0x100000001b3ULL;
	seed ^= a->generation * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() << 32 ^ sk_mono_ms();
	raft_self self = { .name = a->opts.name, .seed = seed };
	raft_storage *st = h->disk ? raft_async_storage(h->disk) : h->st;
	h->raft = raft_new(&rc, &self, st, sk_boot_ms(), err, errlen);
	if (!h->raft) return -1;
	ev_init(&h->timer, raft_timer_cb);
	h->timer.data = a;
	agent_head_pump(a);
	return 0;
}

void agent_head_close(agent *a)
{
	agent_head *h = a->head;
	if (!h) return;
	if (a->loop) {
		ev_timer_stop(a->loop, &h->periodic);
		if (h->raft) ev_timer_stop(a->loop, &h->timer);
	}
	/* the thread finishes what is queued before it stops; then no wake-up */
	raft_async_free(&h->disk);
	if (a->loop && h->file_storage) ev_async_stop(a->loop, &h->disk_wake);
	raft_destroy(&h->raft);
	agent_state_free(&h->state);
	if (h->st && h->file_storage) raft_file_storage_free(&h->st);
	else if (h->st) raft_mem_storage_free(&h->st);
	free(h->pend);
	free(h);
	a->head = NULL;
}
