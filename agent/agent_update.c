/* agent/agent_update: the head's coordinator of weight updates (docs/updates.md).
 *
 * The replicated record of every update lives in jobs/update_state (entry
 * UPDATE_ENTRY_PUT); what the head holds here is only what a new head can do
 * without: the clients waiting for an answer, the words each participant
 * sent, the clocks of the watchdog.  So a head that takes over rebuilds an
 * open update from its record ("adopts" it) and the members, whose every
 * request says everything about them, fill in the rest.
 *
 *   open update:  begin proposed -> begun (record applied: the sender is
 *                 answered, participants told "receive") -> every participant
 *                 verified or dropped, and the sender done -> the final
 *                 record proposed -> applied: the sender's `done` answered,
 *                 participants told "commit" or "abort"
 *   engines:      every engine that waits is known here, with the version
 *                 it holds, the version it staged, its endpoint; a wait is
 *                 held (deferred) until there is an instruction for it, at
 *                 most WAIT_HOLD_S
 *
 * One timer (TICK_S while anything is open or waiting, else IDLE_TICK_S)
 * answers old waits, runs the watchdog, and acts on the head's "state
 * changed" flag: this file is never called from inside the head's pump.
 * Participants whose process or node is gone are looked for only after an
 * event that can tell (a node's report, a membership change, a new process
 * at a wait, an adoption: agent_update_members_changed), not on every tick:
 * the pass costs O(participants), a tick O(open updates) (issue 25, item 4).
 * A held wait's deadline (answered idle after WAIT_HOLD_S) and a silent
 * engine's (forgotten after ENGINE_FORGET_S) sit on a min-heap, popped as
 * they come due: no tick scans the engines. */
#include "agent/agent_update_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "agent/agent_jobs_int.h"
#include "agent/agent_stats.h"
#include "agent/agent_update_show.h"
#include "common/sk_heap.h"
#include "common/sk_log.h"
#include "common/sk_text.h"
#include "common/sk_time.h"
#include "jobs/update_coord.h"
#include "jobs/update_state.h"
#include "proto/control.pb-c.h"
#include "proto/weights.pb-c.h"

/* ---------------------------------------------------------------- small helpers */

/* A duration a member reported: kept when it is one (finite, not negative,
 * under ~30 years), else 0, so that a record the head proposes passes
 * update_rec_check whatever a member said. */
static double secs(double v)
{
	return isfinite(v) && v >= 0 && v < 1e9 ? v : 0;
}

static update_timings timings_of(const Skein__Weights__Timings *t)
{
	if (!t) return (update_timings){ 0 };
	return (update_timings){ secs(t->data_seconds), secs(t->hash_seconds), secs(t->journal_seconds),
			     secs(t->undo_seconds) };
}

static const update_state *state_of(agent *a)
{
	return agent_head_ready(a) ? agent_head_wv(a) : NULL;
}

static void answer(agent *a, const agent_client *c, int code, const char *error, const ProtobufCMessage *m)
{
	uint8_t *buf = NULL;
	size_t n = 0;
	if (m) {
		n = protobuf_c_message_get_packed_size(m);
		buf = malloc(n ? n : 1);
		if (!buf) { agent_ctl_send(a, c, 1, "out of memory", NULL); return; }
		protobuf_c_message_pack(m, buf);
	}
	agent_ctl_send_bin(a, c, code, error, NULL, buf, n);
	free(buf);
}

static void fail_client(agent *a, const agent_client *c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_client(agent *a, const agent_client *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	agent_ctl_send(a, c, 1, msg, NULL);
}

/* "job/engine-3" -> engine 3 (1), "job/trainer-0" -> rank 0 (0); -1 when
 * the id is not of `job`. */
static int member_kind(const char *job, const char *member, uint32_t *k)
{
	size_t jl = strlen(job);
	if (strncmp(member, job, jl) || member[jl] != '/') return -1;
	const char *rest = member + jl + 1, *num;
	int kind;
	if (!strncmp(rest, "engine-", 7)) kind = 1, num = rest + 7;
	else if (!strncmp(rest, "trainer-", 8)) kind = 0, num = rest + 8;
	else return -1;
	char *end;
	unsigned long v = strtoul(num, &end, 10);
	if (*num < '0' || *num > '9' || *end || v > UINT32_MAX) return -1;
	*k = (uint32_t)v;
	return kind;
}

/* The node a member of a running job is placed on ("" when none). */
static bool member_node(agent *a, const char *job, const char *member, int want_kind, char *node, size_t cap,
			job_spec *spec)
{
	const job_state *js = agent_head_jobs(a);
	const job_rec *j = js ? job_state_get(js, job) : NULL;
	uint32_t k;
	job_spec s;
	job_layout L;
	char err[256];
	node[0] = 0;
	if (!j || strcmp(j->state, "running") || !job_rec_placed(j) || member_kind(job, member, &k) != want_kind)
		return false;
	if (job_rec_spec(j, &s, err, sizeof err) < 0 || job_rec_layout(&L, j, &s) < 0) return false;
	const char *n = NULL;
	if (want_kind == 0 && k < job_spec_trainer_ranks(&s)) n = L.node[k];
	else if (want_kind == 1 && k < job_spec_engines(&s)) n = job_layout_engine_node(&s, &L, k);
	if (n) snprintf(node, cap, "%s", n);
	job_layout_free(&L);
	if (spec) *spec = s;
	return node[0] != 0;
}

/* The node the request came from: the forwarding agent, or this one. */
static const char *origin(agent *a, const Skein__Control__Request *q, const agent_client *c)
{
	return q->forwarded ? c->sender : a->opts.name;
}

/* Whether `node` is alive (or suspected) in membership. */
static bool node_alive(agent *a, const char *node)
{
	mbr_member_info mi;
	return mbr_lookup(a->mbr, node, &mi) == 0 && (mi.status == MBR_ALIVE || mi.status == MBR_SUSPECT);
}

/* The endpoint an engine gave must be on its own node's address: the head
 * hands it to a sender, which would send weights wherever it points. */
static bool endpoint_ok(agent *a, const char *node, const char *ep)
{
	if (!ep[0]) return true;
	mbr_member_info mi;
	char ip[INET6_ADDRSTRLEN], host[ENDPOINT_MAX];
	const char *colon = strrchr(ep, ':');
	if (!colon || mbr_lookup(a->mbr, node, &mi) != 0 || (size_t)(colon - ep) >= sizeof host) return false;
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || port < 1 || port > 65535) return false;
	snprintf(host, sizeof host, "%.*s", (int)(colon - ep), ep);
	if (!inet_ntop(mi.addr.len == 4 ? AF_INET : AF_INET6, mi.addr.ip, ip, sizeof ip)) return false;
	return !strcmp(host, ip);
}

/* ---------------------------------------------------------------- proposing */

static void arm(agent *a);
static void catch_up(agent *a);
static void detail_keep(agent_update *W, const update_rec *full);

/* 0 proposed, -1 not (said in the log). */
static int propose(agent *a, const update_rec *u, const char *what)
{
	uint8_t *data;
	size_t len;
	int rc = -1;
	agent_reply r = { 0 };
	sk_buf_init(&r.body);
	bool final = strcmp(u->state, "preparing") != 0;
	if (update_rec_encode(u, &data, &len) < 0) {
		SK_WARN("wv", "%s of %s v%llu: out of memory", what, u->job, (unsigned long long)u->version);
	} else if (final && a->wv->test_refuse > 0) {
		a->wv->test_refuse--;
		free(data);
		SK_WARN("wv", "%s of %s v%llu not proposed: refused (SKEIN_TEST_WV_REFUSE)", what, u->job,
			(unsigned long long)u->version);
	} else if (agent_head_propose(a, NULL, &r, UPDATE_ENTRY_PUT, data, len, NULL, NULL) < 0) {
		SK_WARN("wv", "%s of %s v%llu not proposed: %s", what, u->job, (unsigned long long)u->version, r.error);
	} else {
		rc = 0;
	}
	sk_buf_free(&r.body);
	return rc;
}

/* A final or measured record: proposed, or queued to be proposed again
 * (a refusal must not leave the update stuck open on this head). */
static void propose_final(agent *a, const update_rec *u, const char *what)
{
	agent_update *W = a->wv;
	if (propose(a, u, what) == 0) return;
	update_rec *q = aupd_grow_one((void **)&W->retry, &W->retrycap, W->nretry, sizeof *q, OPEN_MAX * 2);
	if (!q || update_rec_copy(q, u) < 0) {
		SK_WARN("wv", "%s of %s v%llu: cannot queue its retry", what, u->job, (unsigned long long)u->version);
		return;
	}
	W->nretry++;
	if (W->retry_at <= 0) W->retry_at = sk_mono_s() + RETRY_S;
}

/* The queue's records not yet in the state: proposed again; the first one
 * refused again stops this round (Raft refuses them all alike). */
static void retry_finals(agent *a, double now)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	if (!W->nretry || now < W->retry_at || !ws) return;
	W->retry_at = now + RETRY_S;
	for (size_t i = 0; i < W->nretry;) {
		update_rec *q = &W->retry[i];
		const update_rec *rec = update_state_get(ws, q->job, q->version);
		/* taken already (or gone with its job): nothing to do */
		bool done = !rec || (q->measured ? rec->measured : !update_rec_open(rec));
		if (!done && propose(a, q, q->measured ? "timings (again)" : "final record (again)") < 0) break;
		if (!done) SK_INFO("wv", "%s v%llu: the refused %s record proposed again", q->job,
				   (unsigned long long)q->version, q->measured ? "measured" : q->state);
		update_rec_free(q);
		memmove(q, q + 1, (W->nretry - i - 1) * sizeof *q);
		W->nretry--;
	}
	if (!W->nretry) W->retry_at = 0;
}

static void retry_clear(agent_update *W)
{
	for (size_t i = 0; i < W->nretry; i++) update_rec_free(&W->retry[i]);
	W->nretry = 0;
	W->retry_at = 0;
}

/* The final record of u applied: how long it took to commit is known only
 * now, so one amendment (jobs/update_state.h) carries update_seconds and
 * commit_seconds to this moment.  Returns the update's seconds measured. */
static double measure_commit(agent *a, update_open *u, const update_rec *rec)
{
	double now = sk_mono_s();
	uint64_t wall = sk_wall_ms();
	update_rec f;
	int rc = update_coord_measured(&u->co, rec, now, wall, &f);
	if (rc == 1) return rec->update_seconds;
	if (rc < 0) return update_coord_since_begin(&u->co, now, wall);
	double update_s = f.update_seconds;
	propose_final(a, &f, "timings");
	update_rec_free(&f);
	return update_s;
}

/* The coordinator decided u (made_final: this call did): its final record
 * proposed, once. */
static void settled(agent *a, update_open *u, bool made_final)
{
	if (!made_final) return;
	update_rec f;
	const update_coord *c = &u->co;
	if (update_coord_final(c, sk_mono_s(), sk_wall_ms(), &f) == 0) {
		propose_final(a, &f, c->final_state);
		update_rec_free(&f);
	}
	SK_INFO("wv", "%s v%llu %s%s%s", c->rec.job, (unsigned long long)c->rec.version, c->final_state,
		c->final_reason[0] ? ": " : "", c->final_reason);
}

/* A participant is gone or failed: dropped (drop mode, not a data fault),
 * or the update aborts (jobs/update_coord). */
static void lose(agent *a, update_open *u, update_engine *p, const char *why, bool fault, bool by_sender)
{
	size_t i = (size_t)(p - u->co.rec.engines);
	bool was_pending = !strcmp(p->state, "pending");
	bool fin = update_coord_lose(&u->co, i, sk_mono_s(), why, fault, by_sender);
	if (was_pending && !strcmp(p->state, "dropped"))
		SK_INFO("wv", "%s v%llu: %s dropped: %s", u->co.rec.job, (unsigned long long)u->co.rec.version, p->member,
			why);
	settled(a, u, fin);
}

/* ---------------------------------------------------------------- instructions */

static void send_instruction(agent *a, update_eng *e, const Skein__Weights__Instruction *in)
{
	if (!e->waiting) return;
	e->waiting = false;
	answer(a, &e->client, 0, NULL, &in->base);
}

/* Fills "abort v" when version v (its record rec, NULL when gone) was
 * aborted or is no update at all (not the open one, u); false otherwise. */
static bool abort_of(const update_rec *rec, const update_open *u, uint64_t v, Skein__Weights__Instruction *in,
		     char *reason, size_t rcap)
{
	bool aborted = rec && !strcmp(rec->state, "aborted"), gone = !rec && !(u && u->co.rec.version == v);
	if (!aborted && !gone) return false;
	in->kind = "abort";
	in->version = v;
	snprintf(reason, rcap, "%s", rec ? rec->reason : "no such update");
	in->reason = reason;
	return true;
}

/* rec committed without member's staged copy: it took part and ended
 * failed or dropped (the sender did not serve it, whatever it staged).  An
 * engine rec does not list never staged rec (a catch-up lands as held). */
static bool staged_refused(const update_rec *rec, const char *member)
{
	const update_engine *p = update_rec_engine(rec, member);
	return p && strcmp(p->state, "verified") != 0;
}

/* What engine e must do now; false: nothing yet (its wait is held). */
static bool decide(agent *a, update_eng *e, Skein__Weights__Instruction *in, char *reason, size_t rcap)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	if (!ws) return false;
	update_open *u = aupd_open_find(W, e->job);
	uint64_t L = update_state_committed(ws, e->job);
	if (e->staged) {
		const update_rec *rec = update_state_get(ws, e->job, e->staged);
		if (rec && !strcmp(rec->state, "committed") && !staged_refused(rec, e->member)) {
			in->kind = "commit";
			in->version = e->staged;
			e->held = e->staged; /* it holds it once it reads this (its next wait says so) */
			e->staged = 0;
			return true;
		}
		if (rec && !strcmp(rec->state, "committed")) {
			/* committed without it: what it staged is discarded (v-1 back),
			 * then it is caught up like any engine behind */
			in->kind = "abort";
			in->version = e->staged;
			snprintf(reason, rcap, "v%llu committed without %s: %s", (unsigned long long)e->staged, e->member,
				 update_rec_engine(rec, e->member)->reason);
			in->reason = reason;
			return true;
		}
		return abort_of(rec, u, e->staged, in, reason, rcap); /* else open: wait for the verdict */
	}
	if (e->failed && !(e->catchup_version && e->failed == e->catchup_version)) {
		/* it failed to receive an update: it hears the verdict of an aborted
		 * one (its caller is told); one that went on without it is caught
		 * up below */
		const update_rec *rec = update_state_get(ws, e->job, e->failed);
		if (abort_of(rec, u, e->failed, in, reason, rcap)) return true;
		if (!rec || !strcmp(rec->state, "preparing")) return false;
	}
	long pi = u ? update_coord_find(&u->co, e->member) : -1;
	update_engine *p = pi >= 0 ? &u->co.rec.engines[pi] : NULL;
	if (u && u->co.begun && !u->co.final && p && !strcmp(p->state, "pending") && e->failed != u->co.rec.version) {
		/* colocated: the handoff is the receive; an adopted update waits
		 * for the sender's done to bring it (the watchdog bounds that) */
		if (!strcmp(u->co.rec.mode, "colocated") && !u->setup_len) return false;
		in->kind = "receive";
		in->version = u->co.rec.version;
		in->base_version = u->co.rec.base_version;
		in->mode = u->co.rec.mode;
		in->setup.data = u->setup;
		in->setup.len = u->setup_len;
		if (u->co.rec.has_nonce) {
			in->nonce.data = u->co.rec.nonce;
			in->nonce.len = UPDATE_NONCE_LEN;
		}
		in->rank = (int32_t)(p - u->co.rec.engines) + 1;
		in->nranks = (int32_t)u->co.rec.nengines + 1;
		in->timeout_ms = u->co.timeout_ms;
		if (u->co.rec.has_root) {
			in->root.data = u->co.rec.root;
			in->root.len = UPDATE_DIGEST_LEN;
		}
		return true;
	}
	if (e->serve_to[0]) {
		update_eng *t = aupd_eng_find(W, e->serve_to);
		if (t && t->catchup_version == e->serve_version && !strcmp(t->source, e->member)) {
			in->kind = "serve";
			in->version = e->serve_version;
			in->peer = t->endpoint;
			in->nonce.data = e->serve_nonce;
			in->nonce.len = UPDATE_NONCE_LEN;
			e->serve_to[0] = 0;
			return true;
		}
		e->serve_to[0] = 0;
	}
	if (e->held >= L || (p && !strcmp(p->state, "pending"))) return false;
	if (e->catchup_version && sk_mono_s() - e->catchup_since < CATCHUP_STALL_S) return false;
	if (sk_mono_s() < e->retry_at) return false;
	const job_state *js = agent_head_jobs(a);
	const job_rec *j = js ? job_state_get(js, e->job) : NULL;
	if (!j) return false;
	/* the committed record's root: what the catch-up's sums must hash to */
	const update_rec *lrec = update_state_get(ws, e->job, L);
	if (lrec && lrec->has_root) {
		in->root.data = (uint8_t *)lrec->root;
		in->root.len = UPDATE_DIGEST_LEN;
	}
	if (!aupd_is_full_copy(j->spec.transfer_mode)) {
		in->kind = "catchup";
		in->version = L;
		in->peer = "";
		in->mode = (char *)j->spec.transfer_mode;
		e->catchup_version = L;
		e->catchup_since = sk_mono_s();
		return true;
	}
	/* from an engine that holds L and is idle */
	for (size_t i = 0; i < W->neng; i++) {
		update_eng *s = &W->eng[i];
		if (s == e || strcmp(s->job, e->job) || s->held != L || s->staged || !s->waiting || s->serve_to[0] ||
		    !s->endpoint[0] || !e->endpoint[0])
			continue;
		if (u && aupd_part_of(u, s->member) && !strcmp(aupd_part_of(u, s->member)->state, "pending")) continue;
		/* the p2p hello of this pairing: only the server knows it */
		if (getrandom(e->catchup_nonce, UPDATE_NONCE_LEN, 0) != UPDATE_NONCE_LEN) return false;
		memcpy(s->serve_nonce, e->catchup_nonce, UPDATE_NONCE_LEN);
		snprintf(s->serve_to, sizeof s->serve_to, "%s", e->member);
		s->serve_version = L;
		snprintf(e->source, sizeof e->source, "%s", s->member);
		e->catchup_version = L;
		e->catchup_since = sk_mono_s();
		in->kind = "catchup";
		in->version = L;
		in->peer = s->member;
		in->nonce.data = e->catchup_nonce;
		in->nonce.len = UPDATE_NONCE_LEN;
		in->mode = (char *)j->spec.transfer_mode;
		return true;
	}
	return false;
}

/* Answers e's held wait when it has something to do, and the engine it
 * just paired with for a catch-up (that one is told to serve). */
static void wake_one(agent *a, update_eng *e)
{
	Skein__Weights__Instruction in = SKEIN__WEIGHTS__INSTRUCTION__INIT;
	char reason[REASON_MAX];
	if (!e->waiting || !decide(a, e, &in, reason, sizeof reason)) return;
	send_instruction(a, e, &in);
	update_eng *s = e->source[0] ? aupd_eng_find(a->wv, e->source) : NULL;
	if (s && s != e && s->waiting) {
		Skein__Weights__Instruction sin = SKEIN__WEIGHTS__INSTRUCTION__INIT;
		if (decide(a, s, &sin, reason, sizeof reason)) send_instruction(a, s, &sin);
	}
}

/* Answers every held wait of `job` that has something to do (NULL: all). */
static void wake(agent *a, const char *job)
{
	agent_update *W = a->wv;
	for (int round = 0; round < 2; round++) /* a catch-up pairs two engines: the server may come second */
		for (size_t i = 0; i < W->neng; i++) {
			update_eng *e = &W->eng[i];
			if (!e->waiting || (job && strcmp(e->job, job))) continue;
			Skein__Weights__Instruction in = SKEIN__WEIGHTS__INSTRUCTION__INIT;
			char reason[REASON_MAX];
			if (decide(a, e, &in, reason, sizeof reason)) send_instruction(a, e, &in);
		}
}

/* ---------------------------------------------------------------- begin / done / outcome */

static void begin_reply(agent *a, update_open *u)
{
	agent_update *W = a->wv;
	if (!u->begin_waiting) return;
	size_t n = u->co.rec.nengines;
	Skein__Weights__Peer *pv = calloc(n ? n : 1, sizeof *pv);
	Skein__Weights__Peer **pp = calloc(n ? n : 1, sizeof *pp);
	if (!pv || !pp) {
		free(pv);
		free(pp);
		return;
	}
	Skein__Weights__BeginReply br = SKEIN__WEIGHTS__BEGIN_REPLY__INIT;
	br.version = u->co.rec.version;
	br.base_version = u->co.rec.base_version;
	br.timeout_ms = u->co.timeout_ms;
	if (u->co.rec.has_nonce) {
		br.nonce.data = u->co.rec.nonce;
		br.nonce.len = UPDATE_NONCE_LEN;
	}
	for (size_t i = 0; i < n; i++) {
		update_engine *p = &u->co.rec.engines[i];
		update_eng *e = aupd_eng_find(W, p->member);
		skein__weights__peer__init(&pv[i]);
		pv[i].member = p->member;
		pv[i].node = p->node;
		pv[i].endpoint = e ? e->endpoint : "";
		pv[i].rank = (int32_t)i + 1;
		pp[i] = &pv[i];
	}
	br.peers = pp;
	br.n_peers = n;
	u->begin_waiting = false;
	if (u->co.t_answer == 0) {
		u->co.t_answer = sk_mono_s();
		u->co.rec.prepare_seconds = u->co.t_answer - u->co.t_begin; /* the begin record committed, the sender told */
	}
	answer(a, &u->begin_client, 0, NULL, &br.base);
	free(pv);
	free(pp);
}

static void outcome_of(const update_open *u, const update_rec *rec, Skein__Weights__Outcome *o)
{
	if (rec) {
		o->job = (char *)rec->job;
		o->version = rec->version;
		o->state = (char *)rec->state;
		o->reason = rec->reason;
	}
	if (u && !u->co.final && (!rec || !strcmp(rec->state, "preparing"))) {
		o->job = (char *)u->co.rec.job;
		o->version = u->co.rec.version;
		o->state = u->co.begun ? (u->co.t_answer > 0 ? "moving" : "preparing") : "preparing";
		o->reason = "";
	}
}

/* detail: the head's own copy of the update (its engines' seconds and
 * timings), NULL when it has none: a compact record keeps only their
 * slowest, which goes as the first engine's. */
static void answer_outcome(agent *a, const agent_client *c, const update_open *u, const update_rec *rec,
			   const update_rec *detail)
{
	Skein__Weights__Outcome o = SKEIN__WEIGHTS__OUTCOME__INIT;
	outcome_of(u, rec, &o);
	/* a final record goes along, with every engine (not compact): the
	 * sender's stats (participants, dropped, bytes, the slowest engine's
	 * split) come from it */
	uint8_t *data = NULL;
	size_t len;
	update_rec full;
	if (rec && strcmp(rec->state, "preparing") && update_rec_copy(&full, rec) == 0) {
		full.compact = full.bare = false;
		if (detail && detail->nengines == full.nengines) {
			for (size_t i = 0; i < full.nengines; i++) {
				full.engines[i].seconds = detail->engines[i].seconds;
				full.engines[i].t = detail->engines[i].t;
			}
		} else if (full.nengines) {
			full.engines[0].t = update_rec_slowest(rec);
			full.engines[0].seconds = rec->engines_seconds;
		}
		if (update_rec_encode(&full, &data, &len) == 0) o.record = skein__weights__update__unpack(NULL, len, data);
		update_rec_free(&full);
	}
	if (o.record) o.record->nonce.len = 0; /* the ticket goes to participants only */
	answer(a, c, 0, NULL, &o.base);
	if (o.record) skein__weights__update__free_unpacked(o.record, NULL);
	free(data);
}

static int by_engine_id(const void *x, const void *y)
{
	const update_engine *a = x, *b = y;
	/* members of one job: "<job>/engine-<i>" (cmd_wait checked them) */
	const char *sa = strrchr(a->member, '-'), *sb = strrchr(b->member, '-');
	unsigned long i = sa ? strtoul(sa + 1, NULL, 10) : ULONG_MAX, k = sb ? strtoul(sb + 1, NULL, 10) : ULONG_MAX;
	return i < k ? -1 : i > k;
}

/* The engines of job that take part in a new update at base L. */
static size_t pick_participants(agent *a, const char *job, const char *mode, uint64_t L, update_engine **out)
{
	agent_update *W = a->wv;
	size_t n = 0;
	update_engine *v = calloc(W->neng ? W->neng : 1, sizeof *v);
	if (!v) return 0;
	for (size_t i = 0; i < W->neng; i++) {
		update_eng *e = &W->eng[i];
		/* verified the version that just committed: it holds it once told */
		const update_rec *lr = e->staged && e->staged == L ? update_state_get(state_of(a), job, L) : NULL;
		uint64_t held = lr && !staged_refused(lr, e->member) ? L : e->held;
		if (strcmp(e->job, job) || (e->staged && e->staged != L)) continue;
		const job_member_status *st = aj_status_of(a, e->node, e->member);
		if (!st || strcmp(st->state, "running") || st->pid != e->pid || !node_alive(a, e->node)) continue;
		/* a delta needs the base; a whole copy does not, unless the engine
		 * is being caught up right now (it joins the next one) */
		bool mid_catchup = e->catchup_version && sk_mono_s() - e->catchup_since < CATCHUP_STALL_S;
		if (held != L && (!aupd_is_full_copy(mode) || mid_catchup)) continue;
		/* NCCL ranks and colocated engines (the handles come to them) need no endpoint */
		if (aupd_is_full_copy(mode) && strcmp(mode, "broadcast") && strcmp(mode, "broadcast_packed") &&
		    strcmp(mode, "colocated") && !e->endpoint[0])
			continue;
		snprintf(v[n].member, sizeof v[n].member, "%s", e->member);
		snprintf(v[n].node, sizeof v[n].node, "%s", e->node);
		snprintf(v[n].state, sizeof v[n].state, "pending");
		v[n].reason = strdup("");
		n++;
	}
	/* by engine id: the record's order (ranks) is the one its bitmap gives
	 * a head that adopts it */
	qsort(v, n, sizeof *v, by_engine_id);
	*out = v;
	return n;
}

static void cmd_begin(agent *a, const Skein__Control__Request *q, const agent_client *c, const Skein__Weights__Begin *b)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	char node[MBR_NAME_MAX + 1];
	job_spec s;
	if (!member_node(a, b->job, b->member, 0, node, sizeof node, &s))
		return fail_client(a, c, "%s is not a trainer rank of a running job %s", b->member, b->job);
	if (strcmp(node, origin(a, q, c)))
		return fail_client(a, c, "%s runs on %s, not on %s", b->member, node, origin(a, q, c));
	if (strcmp(b->mode, s.transfer_mode))
		return fail_client(a, c, "mode %s: job %s moves weights with %s", b->mode, b->job, s.transfer_mode);
	if (b->digest.len != 0 && b->digest.len != 16) return fail_client(a, c, "manifest digest: 16 bytes expected");
	if (b->setup.len > SETUP_MAX) return fail_client(a, c, "setup: at most %d bytes", SETUP_MAX);
	if (b->root.len != 0 && b->root.len != UPDATE_DIGEST_LEN) return fail_client(a, c, "root: 16 bytes expected");
	update_open *u = aupd_open_find(W, b->job);
	if (u) {
		if (u->co.rec.version == b->version && !strcmp(u->co.rec.sender, b->member) && !u->co.final) {
			/* the same begin again (its answer was lost, or the head changed:
			 * an adopted update has its setup back from it) */
			if (!u->setup_len && b->setup.len && (u->setup = malloc(b->setup.len))) {
				memcpy(u->setup, b->setup.data, b->setup.len);
				u->setup_len = b->setup.len;
			}
			u->begin_client = *c;
			u->begin_waiting = true;
			update_coord_progress(&u->co, sk_mono_s());
			if (u->co.begun) begin_reply(a, u);
			return;
		}
		if (!u->co.final) {
			/* a new begin from the job's trainer: the old update's sender gave up or restarted */
			char why[REASON_MAX];
			snprintf(why, sizeof why, "%s: sender restarted or gave up (it began v%llu)", u->co.rec.sender,
				 (unsigned long long)b->version);
			settled(a, u, update_coord_superseded(&u->co, sk_mono_s(), why));
		}
		return fail_client(a, c, "update v%llu of %s is still open: retry", (unsigned long long)u->co.rec.version,
				   b->job);
	}
	uint64_t max = update_state_max_version(ws, b->job), L = update_state_committed(ws, b->job);
	if (b->version <= max)
		return fail_client(a, c, "version %llu of %s: versions must grow (the newest is %llu)",
				   (unsigned long long)b->version, b->job, (unsigned long long)max);
	u = aupd_open_new(W);
	if (!u) return fail_client(a, c, "too many open updates");
	update_rec *r = &u->co.rec;
	snprintf(r->job, sizeof r->job, "%s", b->job);
	r->version = b->version;
	r->base_version = L;
	snprintf(r->mode, sizeof r->mode, "%s", b->mode);
	if (b->digest.len == 16) memcpy(r->digest, b->digest.data, 16), r->has_digest = true;
	if (b->root.len == UPDATE_DIGEST_LEN) memcpy(r->root, b->root.data, UPDATE_DIGEST_LEN), r->has_root = true;
	r->bytes = b->bytes;
	r->tensors = b->tensors;
	snprintf(r->sender, sizeof r->sender, "%s", b->member);
	snprintf(r->sender_node, sizeof r->sender_node, "%s", node);
	snprintf(r->state, sizeof r->state, "preparing");
	r->reason = strdup("");
	r->started_ms = sk_wall_ms();
	/* the p2p hello's ticket: in the record, so a head that adopts the
	 * update hands out the same one */
	r->has_nonce = getrandom(r->nonce, UPDATE_NONCE_LEN, 0) == UPDATE_NONCE_LEN;
	r->nengines = pick_participants(a, b->job, b->mode, L, &r->engines);
	r->compact = true; /* participants as a bitmap (jobs/update_codec.c) */
	if (r->nengines > W->engines_max) {
		/* every voter refuses such a record at apply (update_codec.c): say so now
		 * rather than let the update time out */
		size_t n = r->nengines;
		aupd_open_free(W, u);
		return fail_client(a, c, "update v%llu of %s: %zu engines would take part, at most %zu per update",
				   (unsigned long long)b->version, b->job, n, W->engines_max);
	}
	if (b->setup.len && (u->setup = malloc(b->setup.len))) {
		memcpy(u->setup, b->setup.data, b->setup.len);
		u->setup_len = b->setup.len;
	}
	u->begin_client = *c;
	u->begin_waiting = true;
	if (!r->reason || !r->engines || (b->setup.len && !u->setup)) {
		aupd_open_free(W, u);
		return fail_client(a, c, "out of memory");
	}
	update_rec r0 = *r;
	memset(r, 0, sizeof *r);
	if (update_coord_start(&u->co, &r0, sk_mono_s(), (int)s.update_timeout_ms, strcmp(s.on_engine_loss, "abort") != 0,
			   false) < 0) {
		aupd_open_free(W, u);
		return fail_client(a, c, "out of memory");
	}
	propose(a, &u->co.rec, "begin");
	arm(a);
}

static void cmd_done(agent *a, const Skein__Control__Request *q, const agent_client *c, const Skein__Weights__Done *d)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	update_open *u = aupd_open_find(W, d->job);
	if (!u || u->co.rec.version != d->version) {
		const update_rec *rec = update_state_get(ws, d->job, d->version);
		if (!rec) return fail_client(a, c, "no update v%llu of %s", (unsigned long long)d->version, d->job);
		return answer_outcome(a, c, NULL, rec, NULL);
	}
	if (strcmp(d->member, u->co.rec.sender)) return fail_client(a, c, "%s is not the sender of v%llu", d->member,
								 (unsigned long long)d->version);
	/* as begin: its node's agent speaks for it (the handoff below is what
	 * the engines will map) */
	if (strcmp(u->co.rec.sender_node, origin(a, q, c)))
		return fail_client(a, c, "%s sends v%llu from %s, not from %s", d->member, (unsigned long long)d->version,
				   u->co.rec.sender_node, origin(a, q, c));
	if (d->setup.len > SETUP_MAX) return fail_client(a, c, "setup: at most %d bytes", SETUP_MAX);
	if (d->root.len != 0 && d->root.len != UPDATE_DIGEST_LEN) return fail_client(a, c, "root: 16 bytes expected");
	u->done_client = *c;
	u->done_waiting = true;
	bool again = u->co.done;
	if (!u->setup_len && d->setup.len && !strcmp(u->co.rec.mode, "colocated") &&
	    (u->setup = malloc(d->setup.len))) {
		/* an adopted colocated update: its engines wait for this */
		memcpy(u->setup, d->setup.data, d->setup.len);
		u->setup_len = d->setup.len;
		SK_INFO("wv", "%s v%llu: the sender's handoff came with its done", u->co.rec.job,
			(unsigned long long)u->co.rec.version);
		wake(a, u->co.rec.job);
	}
	double density = isfinite(d->density) && d->density >= 0 && d->density <= 1e6 ? d->density : 0;
	bool fin = update_coord_done(&u->co, sk_mono_s(), d->ok, d->reason, d->root.len == UPDATE_DIGEST_LEN ? d->root.data : NULL,
				 secs(d->implementation_seconds), d->wire_bytes, density, timings_of(d->timings));
	if (again) return; /* said again (its answer was lost): wait for the verdict */
	if (fin || u->co.final) return settled(a, u, fin);
	/* at most one entry per participant counts: a longer list is not read */
	for (size_t i = 0; i < d->n_failed && i < u->co.rec.nengines && !u->co.final; i++) {
		update_engine *p = aupd_part_of(u, d->failed[i]->member);
		/* the receiver's own verdict on the bytes (a checksum mismatch) is a
		 * failure, as its `failed v` would be, which this done may overtake;
		 * anything else (it could not be reached, it went away) is a lost
		 * participant */
		bool fault = d->failed[i]->verdict;
		char why[REASON_MAX];
		snprintf(why, sizeof why, "%s%s", fault ? "" : "the sender could not reach it: ", d->failed[i]->reason);
		if (p) lose(a, u, p, why, fault, true);
	}
	settled(a, u, update_coord_settle(&u->co, sk_mono_s()));
}

static void cmd_outcome(agent *a, const agent_client *c, const Skein__Weights__Query *qq)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	update_open *u = aupd_open_find(W, qq->job);
	uint64_t v = qq->version ? qq->version : (u ? u->co.rec.version : update_state_max_version(ws, qq->job));
	if (u && u->co.rec.version != v) u = NULL;
	/* the sender's heartbeat while it moves bytes is progress (its data
	 * path ends itself when the bytes stop); an engine's is not: an engine
	 * that never gets its bytes must not keep the update open */
	if (u && !strcmp(qq->member, u->co.rec.sender)) update_coord_progress(&u->co, sk_mono_s());
	const update_rec *rec = update_state_get(ws, qq->job, v);
	if (!u && !rec && !qq->version) {
		/* the newest of a job that has none (or whose records were forgotten) */
		Skein__Weights__Outcome o = SKEIN__WEIGHTS__OUTCOME__INIT;
		o.job = qq->job;
		o.version = v;
		return answer(a, c, 0, NULL, &o.base);
	}
	if (!u && !rec) return fail_client(a, c, "no update v%llu of %s", (unsigned long long)v, qq->job);
	answer_outcome(a, c, u, rec, u ? &u->co.rec : NULL);
}

/* EngineStatus.journal_where: "" (no receive yet) or a name libskein says
 * (xfer_upd_journal_where); anything else is refused, not shown. */
static bool journal_where_ok(const char *w)
{
	static const char *const names[] = { "", "none", "host", "device", "pinned", "device+pinned" };
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (!strcmp(w, names[i])) return true;
	return false;
}

static void cmd_wait(agent *a, const Skein__Control__Request *q, const agent_client *c, const Skein__Weights__EngineStatus *st)
{
	agent_update *W = a->wv;
	char node[MBR_NAME_MAX + 1];
	/* the message's own bounds first, whoever sent it */
	if (!journal_where_ok(st->journal_where)) {
		char w[4 * (UPDATE_JOURNAL_WHERE_MAX + 1) + 1], cut[UPDATE_JOURNAL_WHERE_MAX + 2];
		snprintf(cut, sizeof cut, "%s", st->journal_where); /* at most 16 bytes of it, escaped */
		return fail_client(a, c, "journal_where '%s' is not one of none, host, device, pinned, device+pinned",
				   sk_text_escape(cut, w, sizeof w));
	}
	if (st->journal_spilled_bytes > st->journal_bytes)
		return fail_client(a, c, "journal_spilled_bytes %llu over journal_bytes %llu",
				   (unsigned long long)st->journal_spilled_bytes, (unsigned long long)st->journal_bytes);
	if (!member_node(a, st->job, st->member, 1, node, sizeof node, NULL))
		return fail_client(a, c, "%s is not an engine of a running job %s", st->member, st->job);
	if (strcmp(node, origin(a, q, c)))
		return fail_client(a, c, "%s runs on %s, not on %s", st->member, node, origin(a, q, c));
	if (strlen(st->endpoint) >= ENDPOINT_MAX || !endpoint_ok(a, node, st->endpoint))
		return fail_client(a, c, "endpoint '%.64s' is not on %s's address", st->endpoint, node);
	if (st->root.len != 0 && st->root.len != UPDATE_DIGEST_LEN) return fail_client(a, c, "root: 16 bytes expected");
	update_eng *e = aupd_eng_get(W, st->member);
	if (!e) return fail_client(a, c, "too many engines");
	if (e->waiting) { /* the older wait gives way */
		Skein__Weights__Instruction idle = SKEIN__WEIGHTS__INSTRUCTION__INIT;
		idle.kind = "idle";
		send_instruction(a, e, &idle);
	}
	const job_member_status *ms = aj_status_of(a, node, st->member);
	if (e->gen != st->generation || (ms && ms->pid != e->pid)) {
		/* a new process: nothing it said before holds (and a participant
		 * of that name is the old one's: lost) */
		W->recheck = true;
		e->serve_to[0] = e->source[0] = 0;
		e->catchup_version = 0;
	}
	snprintf(e->job, sizeof e->job, "%s", st->job);
	snprintf(e->node, sizeof e->node, "%s", node);
	e->gen = st->generation;
	e->pid = ms ? ms->pid : 0;
	e->held = st->held;
	e->staged = st->staged;
	e->has_staged_root = st->staged && st->root.len == UPDATE_DIGEST_LEN;
	if (e->has_staged_root) memcpy(e->staged_root, st->root.data, UPDATE_DIGEST_LEN);
	e->failed = st->failed;
	snprintf(e->reason, sizeof e->reason, "%s", st->reason);
	snprintf(e->endpoint, sizeof e->endpoint, "%s", st->endpoint);
	e->seconds = secs(st->seconds);
	e->last_seen = sk_mono_s();
	if (e->catchup_version && (e->held >= e->catchup_version || e->failed == e->catchup_version)) {
		if (e->failed == e->catchup_version) e->retry_at = sk_mono_s() + CATCHUP_RETRY_S;
		else SK_INFO("wv", "%s caught up to v%llu (data path %.3f s): running", e->member,
			     (unsigned long long)e->held, e->seconds);
		e->catchup_version = 0;
		e->source[0] = 0;
	}
	/* its word on the open update */
	update_open *u = aupd_open_find(W, st->job);
	long pi = u ? update_coord_find(&u->co, st->member) : -1;
	if (pi >= 0) {
		double now = sk_mono_s();
		bool fin = false;
		if (st->staged == u->co.rec.version || st->failed == u->co.rec.version) {
			/* its receive's journal, into the head's detail (not replicated) */
			update_engine *x = &u->co.rec.engines[pi];
			x->journal_bytes = st->journal_bytes;
			x->journal_spilled = st->journal_spilled_bytes;
			snprintf(x->journal_where, sizeof x->journal_where, "%s", st->journal_where);
		}
		if (st->staged == u->co.rec.version)
			fin = update_coord_staged(&u->co, (size_t)pi, now, secs(st->seconds), timings_of(st->timings),
					      e->has_staged_root ? e->staged_root : NULL);
		else if (st->failed == u->co.rec.version)
			fin = update_coord_failed(&u->co, (size_t)pi, now, secs(st->seconds), timings_of(st->timings), st->reason);
		settled(a, u, fin);
	}
	e->waiting = true;
	e->client = *c;
	e->wait_since = sk_mono_s();
	aupd_due_push(W, e->member, e->wait_since, false);
	if (!e->forget_queued) e->forget_queued = true, aupd_due_push(W, e->member, e->last_seen, true);
	/* its own answer; the others' change only with an applied record
	 * (on_changed wakes them), or when it pairs for a catch-up */
	const update_state *ws = state_of(a);
	uint64_t L = ws ? update_state_committed(ws, st->job) : 0;
	bool behind = e->held < L && e->staged != L;
	if (behind != e->behind) W->nbehind = behind ? W->nbehind + 1 : W->nbehind - 1;
	e->behind = behind;
	wake_one(a, e);
	/* one that could serve a peer catch-up: those behind may pair with it */
	if (W->nbehind && !behind && !e->staged) wake(a, st->job);
	arm(a);
}

/* ---------------------------------------------------------------- the timer */

/* Adopts every open record a previous head left (docs/updates.md, 7). */
static void adopt(agent *a)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	const job_state *js = agent_head_jobs(a);
	for (size_t i = 0; ws && i < update_state_count(ws); i++) {
		const update_rec *rec = update_state_at(ws, i);
		if (strcmp(rec->state, "preparing") || aupd_open_find(W, rec->job)) continue;
		update_rec r;
		if (update_rec_copy(&r, rec) < 0) continue;
		job_spec s;
		char err[256];
		const job_rec *j = js ? job_state_get(js, rec->job) : NULL;
		bool spec_ok = j && job_rec_spec(j, &s, err, sizeof err) == 0;
		job_layout L;
		if (spec_ok && job_rec_placed(j) && job_rec_layout(&L, j, &s) == 0) {
			/* a compact record names no nodes: the job's layout has them */
			for (size_t k = 0; k < r.nengines; k++) {
				uint32_t id;
				const char *n = !r.engines[k].node[0] && update_engine_id(r.job, r.engines[k].member, &id) &&
							id < job_spec_engines(&s) ? job_layout_engine_node(&s, &L, id) : NULL;
				if (n) snprintf(r.engines[k].node, sizeof r.engines[k].node, "%s", n);
			}
			job_layout_free(&L);
		}
		update_open *u = aupd_open_new(W);
		if (!u) {
			update_rec_free(&r);
			continue;
		}
		if (update_coord_start(&u->co, &r, sk_mono_s(), spec_ok ? (int)s.update_timeout_ms : 30000,
				   spec_ok ? strcmp(s.on_engine_loss, "abort") != 0 : true, true) < 0) {
			W->nopen--;
			continue;
		}
		W->recheck = true; /* reports came before: their news holds */
		SK_INFO("wv", "%s v%llu: open when the head changed: adopted", rec->job, (unsigned long long)rec->version);
	}
}

/* The head applied weight entries: answer whoever waited on them. */
static void on_changed(agent *a)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	if (!ws) return;
	for (size_t i = 0; i < W->nopen;) {
		update_open *u = &W->open[i];
		const update_rec *rec = update_state_get(ws, u->co.rec.job, u->co.rec.version);
		if (rec && !u->co.begun && !strcmp(rec->state, "preparing")) {
			u->co.begun = true;
			begin_reply(a, u);
			wake(a, u->co.rec.job);
		}
		if (rec && strcmp(rec->state, "preparing")) {
			char job[JOB_NAME_MAX + 1];
			detail_keep(W, &u->co.rec);
			agent_stats_transfer(a->stats, rec, measure_commit(a, u, rec));
			if (u->done_waiting) answer_outcome(a, &u->done_client, NULL, rec, &u->co.rec);
			if (u->begin_waiting) fail_client(a, &u->begin_client, "update v%llu %s: %s",
							  (unsigned long long)rec->version, rec->state, rec->reason);
			snprintf(job, sizeof job, "%s", u->co.rec.job);
			aupd_open_free(W, u);
			wake(a, job);
			continue;
		}
		if (!rec && u->co.final) {
			/* a begin that never committed (refused, or lost with a head change) */
			if (u->begin_waiting) fail_client(a, &u->begin_client, "update v%llu of %s was not recorded: retry",
							  (unsigned long long)u->co.rec.version, u->co.rec.job);
			aupd_open_free(W, u);
			continue;
		}
		i++;
	}
	adopt(a);
	wake(a, NULL);
}

/* Participants whose process or node is gone; the watchdog. */
static void check_open(agent *a, double now)
{
	agent_update *W = a->wv;
	bool pass = W->recheck;
	W->recheck = false;
	if (pass && W->nopen) a->cnt.wv_passes++; /* `skeinctl status`: update_participant_passes */
	for (size_t i = 0; i < W->nopen; i++) {
		update_open *u = &W->open[i];
		if (u->co.final) {
			/* the final record did not commit (the head lost its majority, or
			 * it was refused): forget it after a while; a new head adopts */
			continue;
		}
		if (!pass) {
			settled(a, u, update_coord_tick(&u->co, now));
			continue;
		}
		/* participants by id sit node by node: each node's liveness asked once */
		const char *last_node = NULL;
		bool last_alive = false;
		for (size_t k = 0; k < u->co.rec.nengines && !u->co.final && update_coord_pending(&u->co); k++) {
			update_engine *p = &u->co.rec.engines[k];
			if (strcmp(p->state, "pending")) continue;
			if (!last_node || strcmp(last_node, p->node)) {
				last_node = p->node;
				last_alive = node_alive(a, p->node);
			}
			update_eng *e = aupd_eng_find(W, p->member);
			const job_member_status *st = aj_status_of(a, p->node, p->member);
			if (!last_alive) lose(a, u, p, "its node failed", false, false);
			else if (!st && !aj_node_reported(a, p->node))
				continue; /* a new head, not yet told of the node's members: the watchdog bounds this */
			else if (!st || strcmp(st->state, "running")) {
				char why[160];
				snprintf(why, sizeof why, "its process exited (%s)", st ? st->state : "gone");
				lose(a, u, p, why, false, false);
			} else if (e && e->pid && st->pid != e->pid) {
				lose(a, u, p, "its process restarted", false, false);
			}
		}
		if (u->co.final) continue;
		/* the sender: its process, its node */
		const job_member_status *ss = aj_status_of(a, u->co.rec.sender_node, u->co.rec.sender);
		if (!node_alive(a, u->co.rec.sender_node) || (ss && strcmp(ss->state, "running"))) {
			bool fin = update_coord_sender_lost(&u->co, now, node_alive(a, u->co.rec.sender_node)
									 ? "its process exited" : "its node failed");
			settled(a, u, fin);
			if (fin) continue;
		}
		settled(a, u, update_coord_tick(&u->co, now));
	}
}

/* The deadlines come due: old waits answered idle, silent engines forgotten. */
static void check_waits(agent *a, double now)
{
	agent_update *W = a->wv;
	const sk_heap_entry *top;
	while ((top = sk_heap_peek(&W->due)) && top->key <= (uint64_t)(now * 1e6)) {
		sk_heap_entry he;
		sk_heap_pop(&W->due, &he);
		update_due *d = he.ptr;
		update_eng *e = aupd_eng_find(W, d->member);
		if (e && !d->forget && e->waiting && e->wait_since == d->at) {
			Skein__Weights__Instruction idle = SKEIN__WEIGHTS__INSTRUCTION__INIT;
			idle.kind = "idle";
			send_instruction(a, e, &idle);
		} else if (e && d->forget) {
			e->forget_queued = false;
			if (!e->waiting && now - e->last_seen > ENGINE_FORGET_S) aupd_eng_drop_at(W, (size_t)(e - W->eng));
			else e->forget_queued = true, aupd_due_push(W, e->member, e->last_seen, true); /* heard since */
		}
		free(d);
	}
}

/* Not the head (any more): forget everything.  Whoever waits here is told
 * to ask again, and so reaches the next head: a forward waits on the agent
 * it went to until that one answers, and this one may be elected again,
 * when nobody would answer it before the forward's timeout (5 s, more than
 * a watchdog). */
static void forget_all(agent *a)
{
	agent_update *W = a->wv;
	static const char AGAIN[] = "the head changed: retry";
	for (size_t i = 0; i < W->neng; i++)
		if (W->eng[i].waiting) agent_ctl_send(a, &W->eng[i].client, 1, AGAIN, NULL);
	for (size_t i = 0; i < W->nopen; i++) {
		update_open *u = &W->open[i];
		if (u->begin_waiting) agent_ctl_send(a, &u->begin_client, 1, AGAIN, NULL);
		if (u->done_waiting) agent_ctl_send(a, &u->done_client, 1, AGAIN, NULL);
		update_coord_free(&u->co);
		free(u->setup);
	}
	W->nopen = 0;
	W->neng = 0;
	aupd_due_clear(W);
	W->nbehind = 0;
	W->hdirty = true;
	retry_clear(W);
}

/* A head that became ready (adopting what the last one left open), or
 * whose state changed, acts on it: from the timer, or from the first
 * request of its term when that comes first (a sender's done said again
 * must find the update it finishes adopted). */
static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	agent_update *W = a->wv;
	(void)loop; (void)revents;
	bool ready = agent_head_ready(a);
	if (!ready) {
		if (W->was_ready) forget_all(a);
		W->was_ready = false;
		W->changed = false;
	} else {
		double now = sk_mono_s();
		catch_up(a);
		retry_finals(a, now);
		check_open(a, now);
		check_waits(a, now);
	}
	arm(a);
}

static void arm(agent *a)
{
	agent_update *W = a->wv;
	if (!W) return;
	double want = W->nopen || W->changed || W->nretry ? TICK_S : IDLE_TICK_S;
	/* while engines wait: every 0.1 s at most (catch-ups pair on the
	 * tick), sooner for a deadline due, never sooner than a tick */
	const sk_heap_entry *top = sk_heap_peek(&W->due);
	if (top) {
		double d = top->key / 1e6 - sk_mono_s();
		if (d > 0.1) d = 0.1;
		if (d < want) want = d < TICK_S ? TICK_S : d;
	}
	if (ev_is_active(&W->tick) && ev_timer_remaining(a->loop, &W->tick) <= want) return;
	ev_timer_stop(a->loop, &W->tick);
	ev_timer_set(&W->tick, want, 0.0);
	ev_timer_start(a->loop, &W->tick);
}

void agent_update_members_changed(agent *a)
{
	if (!a->wv || a->wv->recheck) return;
	a->wv->recheck = true;
	if (a->wv->nopen) { /* at once, not at the next tick */
		ev_timer_stop(a->loop, &a->wv->tick);
		ev_timer_set(&a->wv->tick, 0.0, 0.0);
		ev_timer_start(a->loop, &a->wv->tick);
	}
}

void agent_update_state_changed(agent *a)
{
	if (!a->wv) return;
	a->wv->changed = true;
	ev_timer_stop(a->loop, &a->wv->tick);
	ev_timer_set(&a->wv->tick, 0.0, 0.0);
	ev_timer_start(a->loop, &a->wv->tick);
}

/* ---------------------------------------------------------------- transfers */

static void detail_keep(agent_update *W, const update_rec *full)
{
	update_rec *d = &W->detail[W->detail_next];
	update_rec_free(d);
	if (update_rec_copy(d, full) < 0) memset(d, 0, sizeof *d);
	W->detail_next = (W->detail_next + 1) % DETAIL_MAX;
}

static const update_rec *detail_find(const agent_update *W, const char *job, uint64_t version)
{
	for (size_t i = 0; i < DETAIL_MAX; i++)
		if (W->detail[i].version == version && !strcmp(W->detail[i].job, job)) return &W->detail[i];
	return NULL;
}

static void detail_clear(agent_update *W)
{
	for (size_t i = 0; i < DETAIL_MAX; i++) update_rec_free(&W->detail[i]);
	memset(W->detail, 0, sizeof W->detail);
}

static int by_start_desc(const void *x, const void *y)
{
	const update_rec *a = *(const update_rec *const *)x, *b = *(const update_rec *const *)y;
	if (a->started_ms != b->started_ms) return a->started_ms < b->started_ms ? 1 : -1;
	return a->version < b->version ? 1 : a->version > b->version ? -1 : 0;
}

static void cmd_transfers(agent *a, const Skein__Control__Request *q, agent_reply *r)
{
	agent_update *W = a->wv;
	const update_state *ws = state_of(a);
	const char *job = NULL;
	long last = 20;
	uint64_t version = 0; /* JOB VERSION: that update alone */
	for (size_t i = 0; i < q->n_args; i++) {
		if (!strcmp(q->args[i], "--last") && i + 1 < q->n_args) {
			char *end;
			last = strtol(q->args[++i], &end, 10);
			if (*end || last < 1 || last > 100000) return agent_reply_fail(r, 2, "--last: a count from 1");
		} else if (job && !version && q->args[i][0] >= '1' && q->args[i][0] <= '9') {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(q->args[i], &end, 10);
			if (*end || errno) return agent_reply_fail(r, 2, "VERSION: a number from 1");
			version = v;
		} else if (q->args[i][0] == '-' || job) {
			return agent_reply_fail(r, 2, "usage: transfers [JOB [VERSION]] [--last N] [--format text|json]");
		} else {
			job = q->args[i];
		}
	}
	size_t n = update_state_count(ws);
	const update_rec **list = calloc(n ? n : 1, sizeof *list);
	update_rec *live = calloc(W->nopen + DETAIL_MAX, sizeof *live);
	size_t k = 0, nl = 0;
	if (!list || !live) {
		free(list);
		free(live);
		return agent_reply_fail(r, 1, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const update_rec *u = update_state_at(ws, i);
		if ((job && strcmp(u->job, job)) || (version && u->version != version)) continue;
		update_open *o = !strcmp(u->state, "preparing") ? aupd_open_find(W, u->job) : NULL;
		const update_rec *d = u->compact && !o ? detail_find(W, u->job, u->version) : NULL;
		if (o && o->co.rec.version == u->version && update_rec_copy(&live[nl], &o->co.rec) == 0) {
			/* the head's live view: engines verified so far, moving once begun */
			snprintf(live[nl].state, sizeof live[nl].state, "%s", o->co.t_answer > 0 ? "moving" : "preparing");
			list[k++] = &live[nl++];
		} else if (d && d->nengines == u->nengines && update_rec_copy(&live[nl], u) == 0) {
			/* a compact record with this head's detail of its engines */
			for (size_t e = 0; e < d->nengines; e++) {
				update_engine *x = &live[nl].engines[e];
				char *why = strdup(d->engines[e].reason ? d->engines[e].reason : "");
				if (!why) continue;
				free(x->reason);
				*x = d->engines[e];
				x->reason = why;
			}
			list[k++] = &live[nl++];
		} else {
			list[k++] = u;
		}
	}
	qsort(list, k, sizeof *list, by_start_desc);
	if ((long)k > last) k = (size_t)last;
	update_show(&r->body, list, k, !strcmp(q->format, "json"));
	for (size_t i = 0; i < nl; i++) update_rec_free(&live[i]);
	free(live);
	free(list);
}

/* ---------------------------------------------------------------- dispatch */

bool agent_update_engine_view(agent *a, const char *member, uint64_t *held, bool *syncing)
{
	if (!a->wv) return false;
	update_eng *e = aupd_eng_find(a->wv, member);
	const update_state *ws = state_of(a);
	if (!e || !ws) return false;
	/* what it said is of the process that runs now, not of one before it */
	const job_member_status *st = aj_status_of(a, e->node, member);
	if (!st || st->pid != e->pid) return false;
	*held = e->held;
	*syncing = e->held < update_state_committed(ws, e->job);
	return true;
}

/* A head that just took over adopts the open records before it answers
 * anyone: a `done` re-sent by a forward must find its update open here. */
static void catch_up(agent *a)
{
	agent_update *W = a->wv;
	if (W->was_ready && !W->changed) return;
	W->was_ready = true;
	W->changed = false;
	on_changed(a);
}

/* On the head: one verb.  Everything is answered through answer() or
 * fail_client(), now or later. */
static void head_verb(agent *a, const Skein__Control__Request *q, const agent_client *c, const char *verb)
{
	const uint8_t *d = q->payload.data;
	size_t n = q->payload.len;
	catch_up(a);
	if (!strcmp(verb, "begin")) {
		Skein__Weights__Begin *m = skein__weights__begin__unpack(NULL, n, d);
		if (!m) return fail_client(a, c, "wv begin: malformed");
		cmd_begin(a, q, c, m);
		skein__weights__begin__free_unpacked(m, NULL);
	} else if (!strcmp(verb, "done")) {
		Skein__Weights__Done *m = skein__weights__done__unpack(NULL, n, d);
		if (!m) return fail_client(a, c, "wv done: malformed");
		cmd_done(a, q, c, m);
		skein__weights__done__free_unpacked(m, NULL);
	} else if (!strcmp(verb, "outcome")) {
		Skein__Weights__Query *m = skein__weights__query__unpack(NULL, n, d);
		if (!m) return fail_client(a, c, "wv outcome: malformed");
		cmd_outcome(a, c, m);
		skein__weights__query__free_unpacked(m, NULL);
	} else if (!strcmp(verb, "wait")) {
		Skein__Weights__EngineStatus *m = skein__weights__engine_status__unpack(NULL, n, d);
		if (!m) return fail_client(a, c, "wv wait: malformed");
		cmd_wait(a, q, c, m);
		skein__weights__engine_status__free_unpacked(m, NULL);
	} else {
		fail_client(a, c, "wv: unknown verb '%.32s' (begin, done, outcome, wait)", verb);
	}
}

/* The member a request speaks for, read from its payload (every message
 * names it as field 2, "member", except Query's field 3). */
static int payload_member(const Skein__Control__Request *q, const char *verb, char *job, char *member)
{
	const uint8_t *d = q->payload.data;
	size_t n = q->payload.len;
	int rc = -1;
#define TAKE(T, fn)                                                                                            \
	do {                                                                                                   \
		T *m = fn##__unpack(NULL, n, d);                                                              \
		if (m && strlen(m->job) <= JOB_NAME_MAX && strlen(m->member) < MEMBER_MAX) {                  \
			strcpy(job, m->job);                                                                  \
			strcpy(member, m->member);                                                            \
			rc = 0;                                                                               \
		}                                                                                              \
		if (m) fn##__free_unpacked(m, NULL);                                                          \
	} while (0)
	if (!strcmp(verb, "begin")) TAKE(Skein__Weights__Begin, skein__weights__begin);
	else if (!strcmp(verb, "done")) TAKE(Skein__Weights__Done, skein__weights__done);
	else if (!strcmp(verb, "outcome")) TAKE(Skein__Weights__Query, skein__weights__query);
	else if (!strcmp(verb, "wait")) TAKE(Skein__Weights__EngineStatus, skein__weights__engine_status);
#undef TAKE
	return rc;
}

bool agent_update_dispatch(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	if (strcmp(q->cmd, "wv") && strcmp(q->cmd, "transfers")) return false;
	if (!a->wv) {
		agent_reply_fail(r, 1, "the agent is stopping");
		return true;
	}
	bool head = agent_head_is_head(a);
	if (!strcmp(q->cmd, "transfers")) {
		if (!head) agent_head_forward(a, q, c, r);
		else if (!agent_head_ready(a)) agent_reply_fail(r, 1, "the head is catching up with its new term: retry");
		else catch_up(a), cmd_transfers(a, q, r);
		return true;
	}
	if (q->n_args != 1) {
		agent_reply_fail(r, 2, "usage: wv begin|done|outcome|wait (a member's request, from libskein)");
		return true;
	}
	const char *verb = q->args[0];
	if (!q->forwarded) {
		/* a member on this node's socket: only its own process speaks for it */
		char job[JOB_NAME_MAX + 1], member[MEMBER_MAX], why[256];
		if (payload_member(q, verb, job, member) < 0) {
			agent_reply_fail(r, 1, "wv %.32s: malformed request", verb);
			return true;
		}
		if (strcmp(verb, "outcome") || member[0]) {
			if (c->remote || c->pid <= 0) {
				agent_reply_fail(r, 1, "wv %.32s is for a job's members, on their node's control socket", verb);
				return true;
			}
			if (agent_update_gate_check(a, member, c->pid, why, sizeof why) < 0) {
				agent_reply_fail(r, 1, "wv %.32s refused: %s", verb, why);
				return true;
			}
		}
		if (!head) {
			agent_head_forward(a, q, c, r);
			return true;
		}
	}
	r->deferred = true;
	if (!head || !agent_head_ready(a)) {
		agent_ctl_send(a, c, 1, "the head is changing: retry", NULL);
		return true;
	}
	catch_up(a);
	head_verb(a, q, c, verb);
	return true;
}

/* ---------------------------------------------------------------- lifecycle */

int agent_update_open(agent *a, char *err, size_t errlen)
{
	agent_update *W = calloc(1, sizeof *W);
	if (!W) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	a->wv = W;
	const char *refuse = getenv("SKEIN_TEST_WV_REFUSE"); /* tests of the retry queue (issue 23) */
	if (refuse && *refuse) {
		W->test_refuse = atoi(refuse);
		SK_WARN("wv", "SKEIN_TEST_WV_REFUSE: the first %d final records are refused (a test)", W->test_refuse);
	}
	W->engines_max = UPDATE_ENGINES_MAX;
	const char *emax = getenv("SKEIN_TEST_WV_ENGINES_MAX");
	if (emax && atoi(emax) > 0 && (size_t)atoi(emax) < UPDATE_ENGINES_MAX) {
		W->engines_max = (size_t)atoi(emax);
		SK_WARN("wv", "SKEIN_TEST_WV_ENGINES_MAX: at most %zu engines per update (a test)", W->engines_max);
	}
	sk_heap_init(&W->due);
	ev_timer_init(&W->tick, tick_cb, IDLE_TICK_S, 0.0);
	W->tick.data = a;
	ev_timer_start(a->loop, &W->tick);
	return 0;
}

void agent_update_close(agent *a)
{
	agent_update *W = a->wv;
	if (!W) return;
	ev_timer_stop(a->loop, &W->tick);
	forget_all(a);
	sk_heap_free(&W->due);
	detail_clear(W);
	free(W->eng);
	free(W->hidx);
	free(W->open);
	free(W->retry);
	free(W);
	a->wv = NULL;
}
