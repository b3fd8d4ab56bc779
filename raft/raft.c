/* raft/raft: Raft as logic with no I/O.
 *
 * What it follows (the Raft paper, Ongaro's thesis, hashicorp/raft):
 *  - terms, one vote per term (persisted before the vote is sent), the
 *    "at least as up to date" log check, randomized timeouts;
 *  - pre-vote (thesis 9.6): a follower whose timer fires first asks "would
 *    you vote for me in term T+1" without changing any term; only with a
 *    majority of yes does it bump its term and ask for real votes.  A voter
 *    that was paused or cut off therefore cannot force a new term on a
 *    healthy leader;
 *  - leader stickiness (hashicorp): a voter refuses pre-votes and votes
 *    while it has heard from a leader, or granted a vote, less than
 *    heartbeat_timeout ago, and for heartbeat_timeout after it starts;
 *  - log replication with the consistency check on (prev_index, prev_term),
 *    conflicting suffixes truncated, never a committed entry; the commit
 *    rule: the leader counts replicas only for entries of its own term
 *    (a new leader appends a no-op to get there);
 *  - check-quorum with a lease (below); single-server voter changes
 *    (thesis 4.1): a voter set takes effect when it is appended, one change
 *    in flight at a time, and only after the leader committed an entry of
 *    its term (the fix Ongaro posted for the single-server bug);
 *  - bootstrap as hashicorp does: every bootstrapping voter writes the same
 *    voter set as entry 1 of term 1;
 *  - snapshots taken by the state machine at an applied index; the log
 *    keeps `snapshot_trailing` entries behind it; a follower behind the
 *    log's start gets InstallSnapshot.
 *
 * The lease, and why a stepped-down leader is gone before a successor:
 *   Every AppendEntries and InstallSnapshot carries `echo`, the leader's
 *   clock when it sent it; the reply returns it.  The leader's proof of
 *   contact with voter V is the largest echo V returned (for the current
 *   term): V received that message at or after that instant, so V heard
 *   from the leader no earlier than it.  The leader stops acting (its
 *   lease, raft_leader_ok, lapses; proposals and handovers are refused) at
 *   the instant its majority-th freshest contact becomes leader_lease old.
 *   A successor needs (pre-)votes from a majority; that majority shares a
 *   voter V with the leader's contact majority, and V refuses every vote
 *   until heartbeat_timeout after it last heard from the leader.  So while
 *   the old leader still leads at time t (its contact with V >= t - lease),
 *   no successor can be elected before t - lease + heartbeat_timeout, i.e.
 *   the old leader stops acting at least heartbeat_timeout - lease_ms
 *   before anyone else can win (500 ms with the defaults, 100 ms with
 *   "fast"), which also absorbs clock-rate drift.  A new leader starts with
 *   every contact at the instant it asked for votes: each voter that
 *   granted it one is sticky for heartbeat_timeout from then on.
 *   raft_config_check refuses lease >= heartbeat_timeout.
 *   It steps down only once that contact is heartbeat_timeout old (check-
 *   quorum, as etcd does over its election timeout): a leader that merely
 *   waited for the CPU past its lease sends its heartbeats on waking and,
 *   if its followers still follow, leads on; stepping down at the lease
 *   turned every such stall into a change of head.
 *
 * Where it differs:
 *  - InstallSnapshot travels in chunks (snapshot_chunk_bytes), each one
 *    acknowledged with the bytes the follower holds, so a lost or repeated
 *    chunk costs one chunk; the follower assembles it in memory and installs
 *    it whole; a chunk of another snapshot, or out of order, restarts it;
 *  - no read index: the agent reads from the leader while raft_read_ok()
 *    holds: its lease, and it has handed out for apply an entry of its own
 *    term (its no-op at least), so its state holds every write committed
 *    before it took over (a new leader's lease holds from its election,
 *    before that: reading then could miss a write its predecessor had
 *    already acknowledged).
 * Voter changes with a catch-up and leadership handover: raft_change.c.
 * Configuration and voter-set values: raft_config.c.
 *
 * Storage may lag (etcd's asynchronous storage writes): every storage call
 * gets a number, and the caller reports the highest durable one
 * (raft_storage_done; a synchronous storage is durable at once).  What waits
 * for it, and why:
 *  - a vote granted leaves once the hard state holding it is durable, and a
 *    candidate counts its own vote only then (a vote forgotten in a crash
 *    could be given twice in a term);
 *  - an AppendEntries success leaves once the entries it acknowledges are
 *    durable (each log entry remembers the call that wrote it), an
 *    InstallSnapshot success once the snapshot is; the leader counts itself
 *    towards a commit only up to its own durable index (raft_durable_index),
 *    and entries are applied only when committed and durable here.  The
 *    leader sends entries to followers while its own write is in flight.
 *  - contact does not wait: while an acknowledgement is held, the follower
 *    answers at most every half heartbeat interval with a `syncing` success
 *    that claims only its durable prefix, so a slow disk never costs the
 *    leader its lease; the leader neither resends nor clears the append in
 *    flight on it.  Requests, refusals and pre-votes promise nothing and
 *    leave at once.
 *
 * All output goes to queues (raft_pop_out, raft_pop_apply, raft_pop_event). */
#include "raft/raft_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_rng.h"
#include "raft/raft_codec.h"

/* ---------------------------------------------------------------- queues */

void raft__push_event(raft_t *r, raft_event_type t, const char *reason)
{
	if (r->ev_len >= RAFT_QUEUE_CAP) return;
	if (r->ev_len == r->ev_cap) {
		size_t nc = r->ev_cap ? r->ev_cap * 2 : 16;
		raft_event *n = malloc(nc * sizeof *n);
		if (!n) return;
		for (size_t i = 0; i < r->ev_len; i++) n[i] = r->evs[(r->ev_head + i) % r->ev_cap];
		free(r->evs);
		r->evs = n;
		r->ev_cap = nc;
		r->ev_head = 0;
	}
	raft_event *e = &r->evs[(r->ev_head + r->ev_len++) % r->ev_cap];
	memset(e, 0, sizeof *e);
	e->type = t;
	e->term = r->term;
	snprintf(e->leader, sizeof e->leader, "%s", r->leader);
	snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
	e->at_ms = r->last_now;
	e->planned = t == RAFT_EV_STEPDOWN && r->handed_over;
}

int raft_pop_event(raft_t *r, raft_event *ev)
{
	if (!r->ev_len) return 0;
	*ev = r->evs[r->ev_head];
	r->ev_head = (r->ev_head + 1) % r->ev_cap;
	r->ev_len--;
	return 1;
}

static void push_out(raft_t *r, const char *to, uint8_t *data, size_t len)
{
	if (r->out_len >= RAFT_QUEUE_CAP) { free(data); return; }
	if (r->out_len == r->out_cap) {
		size_t nc = r->out_cap ? r->out_cap * 2 : 16;
		raft_out *n = malloc(nc * sizeof *n);
		if (!n) { free(data); return; }
		for (size_t i = 0; i < r->out_len; i++) n[i] = r->outs[(r->out_head + i) % r->out_cap];
		free(r->outs);
		r->outs = n;
		r->out_cap = nc;
		r->out_head = 0;
	}
	raft_out *o = &r->outs[(r->out_head + r->out_len++) % r->out_cap];
	snprintf(o->to, sizeof o->to, "%s", to);
	o->data = data;
	o->len = len;
}

int raft_pop_out(raft_t *r, raft_out *out)
{
	if (!r->out_len) return 0;
	*out = r->outs[r->out_head];
	r->out_head = (r->out_head + 1) % r->out_cap;
	r->out_len--;
	return 1;
}

static bool is_reply(const raft_msg *m) { return m->type == RAFT_MSG_APPEND_RESP || m->type == RAFT_MSG_SNAP_RESP; }

/* Fills term and from, encodes and queues; the message leaves once storage
 * call `seq` is durable (at once for 0 or one durable already). */
static void send_after(raft_t *r, const char *to, raft_msg *m, uint64_t seq)
{
	if (!m->term) m->term = r->term;
	m->from = r->name;
	uint8_t *buf;
	size_t len;
	if (raft_codec_encode(m, &buf, &len) != 0) return;
	r->stats.msgs_sent++;
	if (seq <= r->st_durable) {
		if (is_reply(m)) r->reply_at = r->last_now;
		push_out(r, to, buf, len);
		return;
	}
	if (r->nheld >= RAFT_QUEUE_CAP) { free(buf); return; }
	if (r->nheld == r->capheld) {
		size_t nc = r->capheld ? r->capheld * 2 : 16;
		held_out *n = realloc(r->held, nc * sizeof *n);
		if (!n) { free(buf); return; }
		r->held = n;
		r->capheld = nc;
	}
	held_out *h = &r->held[r->nheld++];
	snprintf(h->out.to, sizeof h->out.to, "%s", to);
	h->out.data = buf;
	h->out.len = len;
	h->seq = seq;
	h->reply = is_reply(m);
	r->stats.replies_held++;
}

void raft__send_msg(raft_t *r, const char *to, raft_msg *m) { send_after(r, to, m, 0); }

/* Queues, in order, the held messages whose storage call is now durable. */
static void release_held(raft_t *r)
{
	size_t k = 0;
	for (size_t i = 0; i < r->nheld; i++) {
		held_out *h = &r->held[i];
		if (h->seq > r->st_durable) { r->held[k++] = *h; continue; }
		if (h->reply) r->reply_at = r->last_now;
		push_out(r, h->out.to, h->out.data, h->out.len);
	}
	r->nheld = k;
}

/* ---------------------------------------------------------------- log */

uint64_t raft__last_index(const raft_t *r) { return r->log_start + r->nlog - 1; }

static lentry *entry_at(const raft_t *r, uint64_t i)
{
	if (i < r->log_start || i > raft__last_index(r)) return NULL;
	return &r->log[i - r->log_start];
}

/* The term of entry i; false when unknown (compacted away). */
bool raft__term_at(const raft_t *r, uint64_t i, uint64_t *term)
{
	if (i == 0) { *term = 0; return true; }
	const lentry *e = entry_at(r, i);
	if (e) { *term = e->term; return true; }
	if (i == r->snap.index) { *term = r->snap.term; return true; }
	return false;
}

static uint64_t last_term(const raft_t *r)
{
	uint64_t t = 0;
	raft__term_at(r, raft__last_index(r), &t);
	return t;
}

static void fail(raft_t *r, const char *what, const char *err)
{
	char buf[RAFT_ERR_MAX];
	snprintf(buf, sizeof buf, "storage: %s: %s", what, err);
	if (!r->failed) raft__push_event(r, RAFT_EV_FAILED, buf);
	r->failed = true;
}

/* Counts a storage call that was accepted.  A synchronous storage has it
 * durable now (after its sync, for a log record: one fsync per batch). */
static int st_counted(raft_t *r, const char *what, bool record)
{
	char err[RAFT_ERR_MAX] = "";
	r->st_issued++;
	if (r->st->async) return 0;
	if (record && r->st->sync && r->st->sync(r->st->ctx, err, sizeof err) != 0) {
		fail(r, what, err);
		return -1;
	}
	r->st_durable = r->st_issued;
	return 0;
}

uint64_t raft_durable_index(const raft_t *r)
{
	/* entries are written in index order, so the durable ones are a prefix */
	for (size_t k = r->nlog; k-- > 0;)
		if (r->log[k].seq <= r->st_durable) return r->log[k].index;
	return r->snap_seq <= r->st_durable ? r->snap.index : 0;
}

/* The storage call that must be durable before we may claim entry i. */
static uint64_t seq_of(const raft_t *r, uint64_t i)
{
	const lentry *e = entry_at(r, i);
	if (e) return e->seq;
	return i <= r->snap.index ? r->snap_seq : r->st_issued;
}

/* Drops entries >= from from memory. */
static void mem_truncate(raft_t *r, uint64_t from)
{
	while (r->nlog && raft__last_index(r) >= from) {
		free(r->log[r->nlog - 1].data);
		r->nlog--;
	}
}

/* Drops entries <= upto from memory. */
static void mem_compact(raft_t *r, uint64_t upto)
{
	size_t k = 0;
	while (k < r->nlog && r->log[k].index <= upto) free(r->log[k++].data);
	if (k) memmove(r->log, r->log + k, (r->nlog - k) * sizeof *r->log); /* (an empty log may have no array) */
	r->nlog -= k;
	r->log_start += k;
	if (r->log_start <= upto) r->log_start = upto + 1;
}

static int mem_append(raft_t *r, const raft_entry *e, uint64_t seq)
{
	if (r->nlog == r->caplog) {
		size_t nc = r->caplog ? r->caplog * 2 : 64;
		lentry *n = realloc(r->log, nc * sizeof *n);
		if (!n) return -1;
		r->log = n;
		r->caplog = nc;
	}
	uint8_t *d = malloc(e->len ? e->len : 1);
	if (!d) return -1;
	if (e->len) memcpy(d, e->data, e->len);
	r->log[r->nlog++] = (lentry){ e->index, e->term, e->type, d, e->len, seq };
	return 0;
}

void raft__rebuild_peers(raft_t *r, uint64_t now);

/* The latest voter set: the last VOTERS entry after the snapshot, else the
 * snapshot's. */
static void recompute_voters(raft_t *r, uint64_t now)
{
	raft_voters old = r->voters;
	memset(&r->voters, 0, sizeof r->voters);
	r->voters_index = 0;
	for (size_t k = r->nlog; k-- > 0;) {
		const lentry *e = &r->log[k];
		if (e->index <= r->snap.index) break;
		if (e->type == RAFT_ENTRY_VOTERS && raft__voters_decode(&r->voters, e->data, e->len) == 0) {
			r->voters_index = e->index;
			break;
		}
	}
	if (!r->voters_index && r->snap.index) {
		r->voters = r->snap.voters;
		r->voters_index = r->snap.index;
	}
	if (memcmp(&old, &r->voters, sizeof old) != 0) {
		if (r->role == RAFT_LEADER) raft__rebuild_peers(r, now);
		raft__push_event(r, RAFT_EV_VOTERS, NULL);
	}
}

/* The voter set as of entry i (i > snapshot index, or the snapshot's). */
static raft_voters voters_at(const raft_t *r, uint64_t i)
{
	raft_voters v = r->snap.voters;
	for (uint64_t j = i; j > r->snap.index && j >= r->log_start; j--) {
		const lentry *e = entry_at(r, j);
		if (e && e->type == RAFT_ENTRY_VOTERS && raft__voters_decode(&v, e->data, e->len) == 0)
			return v;
	}
	return r->snap.voters;
}

/* Persists and appends entries that follow last_index. */
static int append_entries(raft_t *r, const raft_entry *e, size_t n, uint64_t now)
{
	char err[RAFT_ERR_MAX] = "";
	if (!n) return 0;
	if (r->st->append(r->st->ctx, e, n, err, sizeof err) != 0) {
		fail(r, "append", err);
		return -1;
	}
	if (st_counted(r, "append", true) != 0) return -1;
	bool cfg = false;
	for (size_t i = 0; i < n; i++) {
		if (mem_append(r, &e[i], r->st_issued) != 0) {
			fail(r, "append", "out of memory");
			return -1;
		}
		if (e[i].type == RAFT_ENTRY_VOTERS) cfg = true;
	}
	if (cfg) recompute_voters(r, now);
	return 0;
}

static int truncate_from(raft_t *r, uint64_t from, uint64_t now)
{
	char err[RAFT_ERR_MAX] = "";
	if (r->st->truncate(r->st->ctx, from, err, sizeof err) != 0) {
		fail(r, "truncate", err);
		return -1;
	}
	if (st_counted(r, "truncate", true) != 0) return -1;
	r->stats.truncations++;
	bool cfg = r->voters_index >= from;
	mem_truncate(r, from);
	if (cfg) recompute_voters(r, now);
	return 0;
}

static int save_hard(raft_t *r)
{
	char err[RAFT_ERR_MAX] = "";
	if (r->st->save_hard(r->st->ctx, r->term, r->vote, err, sizeof err) != 0) {
		fail(r, "save hard state", err);
		return -1;
	}
	if (st_counted(r, "save hard state", false) != 0) return -1;
	r->hard_seq = r->st_issued;
	return 0;
}

/* ---------------------------------------------------------------- roles */

static uint64_t rand_between(raft_t *r, uint32_t lo)
{
	return lo + sk_rng_below(&r->rng, lo);
}

static size_t majority(const raft_t *r) { return r->voters.n / 2 + 1; }

bool raft__self_voter(const raft_t *r) { return raft_voters_has(&r->voters, r->name); }

peer *raft__find_peer(raft_t *r, const char *name)
{
	for (size_t i = 0; i < r->npeers; i++)
		if (!strcmp(r->peers[i].name, name)) return &r->peers[i];
	return NULL;
}

void raft__rebuild_peers(raft_t *r, uint64_t now)
{
	peer old[RAFT_VOTERS_MAX];
	size_t nold = r->npeers;
	memcpy(old, r->peers, sizeof old);
	r->npeers = 0;
	for (size_t i = 0; i < r->voters.n; i++) {
		if (!strcmp(r->voters.names[i], r->name)) continue;
		peer *p = &r->peers[r->npeers++];
		memset(p, 0, sizeof *p);
		snprintf(p->name, sizeof p->name, "%s", r->voters.names[i]);
		p->next = raft__last_index(r) + 1;
		/* A voter new in the set counts as contacted now (a grace of
		 * one lease, so adding a voter does not cost the lease).  Safe:
		 * only a node holding this set counts that voter's vote, and it
		 * got the set from us after now, so it heard from us after now
		 * and cannot campaign before now + heartbeat_timeout, when this
		 * grace (now + lease) is long over. */
		p->contact = now;
		for (size_t j = 0; j < nold; j++)
			if (!strcmp(old[j].name, p->name)) *p = old[j];
	}
	if (r->staging[0] && !raft_voters_has(&r->voters, r->staging) && r->npeers < RAFT_VOTERS_MAX) {
		peer *p = &r->peers[r->npeers++]; /* replicated to, never counted */
		memset(p, 0, sizeof *p);
		snprintf(p->name, sizeof p->name, "%s", r->staging);
		p->next = raft__last_index(r) + 1;
		p->learner = true;
		for (size_t j = 0; j < nold; j++)
			if (!strcmp(old[j].name, p->name)) *p = old[j];
	}
}

static void set_leader(raft_t *r, const char *leader)
{
	if (strcmp(r->leader, leader) != 0) {
		snprintf(r->leader, sizeof r->leader, "%s", leader);
		if (r->role == RAFT_FOLLOWER && *leader) raft__push_event(r, RAFT_EV_FOLLOWER, NULL);
	}
}

/* Becomes a follower of `term` (persisting a newer term first). */
int raft__become_follower(raft_t *r, uint64_t now, uint64_t term, const char *leader, const char *why)
{
	if (term > r->term) {
		r->term = term;
		r->vote[0] = 0;
		if (save_hard(r) != 0) return -1;
	}
	if (r->role == RAFT_LEADER) raft__push_event(r, RAFT_EV_STEPDOWN, why);
	char lost[RAFT_ERR_MAX];
	if (r->xfer_to[0]) {
		snprintf(lost, sizeof lost, "handover to %s abandoned: no longer the leader", r->xfer_to);
		raft__push_event(r, RAFT_EV_TRANSFER, lost);
	}
	if (r->staging[0]) {
		snprintf(lost, sizeof lost, "%s not added: no longer the leader", r->staging);
		raft__push_event(r, RAFT_EV_VOTERS, lost);
	}
	r->xfer_to[0] = 0;
	r->staging[0] = 0;
	bool was_follower = r->role == RAFT_FOLLOWER;
	r->role = RAFT_FOLLOWER;
	r->npeers = 0;
	if (!was_follower) r->leader[0] = 0;
	set_leader(r, leader);
	r->election_at = now + rand_between(r, r->cfg.heartbeat_timeout_ms);
	return 0;
}

void raft__send_append(raft_t *r, peer *p, uint64_t now);
static void advance_commit(raft_t *r, uint64_t now);

static void become_leader(raft_t *r, uint64_t now)
{
	r->role = RAFT_LEADER;
	snprintf(r->leader, sizeof r->leader, "%s", r->name);
	r->stats.leaderships++;
	r->npeers = 0;
	raft__rebuild_peers(r, now);
	for (size_t i = 0; i < r->npeers; i++) r->peers[i].contact = r->elect_start;
	raft__push_event(r, RAFT_EV_LEADER, NULL);
	raft_entry noop = { raft__last_index(r) + 1, r->term, RAFT_ENTRY_NOOP, NULL, 0 };
	if (append_entries(r, &noop, 1, now) != 0) return;
	for (size_t i = 0; i < r->npeers; i++) raft__send_append(r, &r->peers[i], now);
	advance_commit(r, now);
}

static void count_votes(raft_t *r, uint64_t now);

static void send_vote_reqs(raft_t *r, bool prevote)
{
	for (size_t i = 0; i < r->voters.n; i++) {
		if (!strcmp(r->voters.names[i], r->name)) continue;
		raft_msg m = { .type = RAFT_MSG_VOTE_REQ, .prevote = prevote,
			       .transfer = !prevote && r->campaign_transfer,
			       .term = prevote ? r->term + 1 : r->term,
			       .last_index = raft__last_index(r), .last_term = last_term(r) };
		raft__send_msg(r, r->voters.names[i], &m);
	}
}

static void mark_granted(raft_t *r, const char *name)
{
	for (size_t i = 0; i < r->voters.n; i++)
		if (!strcmp(r->voters.names[i], name)) r->granted[i] = true;
}

/* One round of asking: our own vote counted, a timer for the round. */
static void ask_votes(raft_t *r, uint64_t now, raft_role role)
{
	r->role = role;
	memset(r->granted, 0, sizeof r->granted);
	mark_granted(r, r->name);
	r->election_at = now + rand_between(r, r->cfg.election_timeout_ms);
	send_vote_reqs(r, role == RAFT_PRECANDIDATE);
	count_votes(r, now);
}

static void start_prevote(raft_t *r, uint64_t now)
{
	r->leader[0] = 0;
	r->npeers = 0;
	r->stats.prevotes++;
	ask_votes(r, now, RAFT_PRECANDIDATE);
}

void raft__start_election(raft_t *r, uint64_t now)
{
	r->term++;
	snprintf(r->vote, sizeof r->vote, "%s", r->name);
	if (save_hard(r) != 0) return;
	r->stats.elections++;
	r->elect_start = now;
	raft__push_event(r, RAFT_EV_CANDIDATE, NULL);
	ask_votes(r, now, RAFT_CANDIDATE);
}

static void count_votes(raft_t *r, uint64_t now)
{
	size_t n = 0;
	/* our own vote counts once it is durable (not for pre-votes: they
	 * promise nothing) */
	bool own = r->role != RAFT_CANDIDATE || r->hard_seq <= r->st_durable;
	for (size_t i = 0; i < r->voters.n; i++)
		n += r->granted[i] && (own || strcmp(r->voters.names[i], r->name) != 0);
	if (n < majority(r)) return;
	if (r->role == RAFT_PRECANDIDATE) raft__start_election(r, now);
	else if (r->role == RAFT_CANDIDATE) become_leader(r, now);
}

/* ---------------------------------------------------------------- leader */

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The majority-th largest of one value per voter (ours: `self`). */
static uint64_t quorum_value(raft_t *r, uint64_t self, bool match)
{
	uint64_t v[RAFT_VOTERS_MAX];
	size_t n = 0;
	for (size_t i = 0; i < r->voters.n; i++) {
		if (!strcmp(r->voters.names[i], r->name)) { v[n++] = self; continue; }
		peer *p = raft__find_peer(r, r->voters.names[i]);
		v[n++] = p ? (match ? p->match : p->contact) : 0;
	}
	if (!n) return 0;
	qsort(v, n, sizeof v[0], cmp_desc);
	return v[majority(r) - 1];
}

static void advance_commit(raft_t *r, uint64_t now)
{
	/* ourselves only up to what our disk has */
	uint64_t n = quorum_value(r, raft_durable_index(r), true), t;
	/* Raft's commit rule: count replicas only for an entry of our term. */
	if (n > r->commit && raft__term_at(r, n, &t) && t == r->term) r->commit = n;
	if (r->voters_index <= r->commit && !raft__self_voter(r))
		raft__become_follower(r, now, r->term, "", "removed from the voter set");
}

/* When the lease runs out unless a majority answers before. */
static uint64_t lease_end(raft_t *r, uint64_t now)
{
	return quorum_value(r, now, false) + r->cfg.leader_lease_ms;
}

/* When we step down unless a majority answers before (check-quorum). */
static uint64_t quorum_end(raft_t *r, uint64_t now)
{
	return quorum_value(r, now, false) + r->cfg.heartbeat_timeout_ms;
}

static void check_lease(raft_t *r, uint64_t now)
{
	if (r->role != RAFT_LEADER || now < quorum_end(r, now)) return;
	r->stats.stepdowns_lease++;
	raft__become_follower(r, now, r->term, "", "no contact with a majority for the heartbeat timeout");
}

/* The chunk of our snapshot that starts at off (a new transfer: 0). */
static void send_snapshot_at(raft_t *r, peer *p, uint64_t now, uint64_t off)
{
	if (off > r->snap_len) off = 0;
	uint64_t n = r->snap_len - off;
	if (n > r->cfg.snapshot_chunk_bytes) n = r->cfg.snapshot_chunk_bytes;
	raft_msg m = { .type = RAFT_MSG_SNAP_REQ, .snap = &r->snap, .data = r->snap_data + off, .len = n,
		       .offset = off, .total = r->snap_len, .echo = now };
	raft__send_msg(r, p->name, &m);
	if (off == 0) r->stats.snapshots_sent++;
	r->stats.snapshot_chunks_sent++;
	p->snap_off = off;
	p->snap_inflight = p->inflight = true;
	p->sent_at = p->snap_sent_at = now;
}

static void send_snapshot(raft_t *r, peer *p, uint64_t now) { send_snapshot_at(r, p, now, 0); }

void raft__send_append(raft_t *r, peer *p, uint64_t now)
{
	uint64_t prev = p->next - 1, pterm = 0;
	/* entries it needs are compacted away: the snapshot (raft__term_at(0) is
	 * "known", so an empty follower of a compacted log needs the first test) */
	if (!p->snap_inflight && (p->next < r->log_start || !raft__term_at(r, prev, &pterm))) {
		send_snapshot(r, p, now);
		return;
	}
	raft_msg m = { .type = RAFT_MSG_APPEND_REQ, .commit = r->commit, .echo = now };
	raft_entry ents[RAFT_MSG_ENTRIES_MAX];
	if (p->snap_inflight) {
		/* a heartbeat while the snapshot travels */
		m.prev_index = r->snap.index;
		m.prev_term = r->snap.term;
	} else {
		m.prev_index = prev;
		m.prev_term = pterm;
		size_t n = 0, bytes = 0;
		for (uint64_t i = p->next; i <= raft__last_index(r) && n < r->cfg.max_append_entries; i++) {
			const lentry *e = entry_at(r, i);
			if (n && bytes + e->len > r->cfg.max_append_bytes) break;
			ents[n++] = (raft_entry){ e->index, e->term, e->type, e->data, e->len };
			bytes += e->len;
		}
		m.entries = ents;
		m.nentries = n;
	}
	raft__send_msg(r, p->name, &m);
	p->inflight = true;
	p->sent_at = now;
}


static void leader_tick(raft_t *r, uint64_t now)
{
	check_lease(r, now);
	if (r->role != RAFT_LEADER) return;
	raft__transfer_check(r, now);
	if (r->role != RAFT_LEADER) return;
	raft__staging_check(r, now);
	for (size_t i = 0; i < r->npeers; i++) {
		peer *p = &r->peers[i];
		if (now >= p->sent_at + r->cfg.heartbeat_interval_ms) {
			/* a lost snapshot chunk is sent again after a heartbeat
			 * timeout (the follower answers a repeat with what it has) */
			if (p->snap_inflight && now >= p->snap_sent_at + r->cfg.heartbeat_timeout_ms)
				send_snapshot_at(r, p, now, p->snap_off);
			else
				raft__send_append(r, p, now);
		}
	}
}

static void note_contact(peer *p, uint64_t echo, uint64_t now)
{
	if (echo <= now && echo > p->contact) p->contact = echo;
}

/* ---------------------------------------------------------------- handlers */

static bool log_ok(const raft_t *r, uint64_t li, uint64_t lt)
{
	uint64_t mt = last_term(r);
	return lt > mt || (lt == mt && li >= raft__last_index(r));
}

static void on_vote_req(raft_t *r, uint64_t now, const raft_msg *m)
{
	raft_msg resp = { .type = RAFT_MSG_VOTE_RESP, .prevote = m->prevote };
	bool sticky = r->role == RAFT_LEADER || now < r->sticky_until;
	/* A candidate outside our voter set is heard when its log is at
	 * least as up to date: our set may be the stale one (we missed the
	 * change that added it), and the majority of its newer set may need
	 * our vote.  One vote per term still holds, and it counts only where
	 * we are in the candidate's set; a removed voter that is behind stays
	 * ignored (pre-vote and stickiness keep a current one harmless). */
	if (!raft_voters_has(&r->voters, m->from)) {
		if (!r->voters.n || !log_ok(r, m->last_index, m->last_term)) {
			r->stats.drop_not_voter++;
			return;
		}
		r->stats.votes_outside_set++;
	}
	if (m->prevote) {
		if (m->term > r->term && !sticky && log_ok(r, m->last_index, m->last_term)) {
			resp.granted = true;
			resp.term = m->term;
		}
		if (sticky) r->stats.votes_refused_sticky++;
		raft__send_msg(r, m->from, &resp);
		return;
	}
	if (m->term < r->term) { raft__send_msg(r, m->from, &resp); return; }
	/* a leader's handover: it stepped down before the candidate heard of
	 * it, so nobody's lease is at stake (a live leader still refuses) */
	if (m->transfer && r->role != RAFT_LEADER) sticky = false;
	if (sticky) {
		/* refused without taking its term: a live leader stays */
		r->stats.votes_refused_sticky++;
		raft__send_msg(r, m->from, &resp);
		return;
	}
	if (m->term > r->term && raft__become_follower(r, now, m->term, "", "a newer term") != 0) return;
	if ((!r->vote[0] || !strcmp(r->vote, m->from)) && log_ok(r, m->last_index, m->last_term)) {
		snprintf(r->vote, sizeof r->vote, "%s", m->from);
		if (save_hard(r) != 0) return;
		resp.granted = true;
		r->sticky_until = now + r->cfg.heartbeat_timeout_ms;
		r->election_at = now + rand_between(r, r->cfg.heartbeat_timeout_ms);
	}
	send_after(r, m->from, &resp, resp.granted ? r->hard_seq : 0);
}

static void on_vote_resp(raft_t *r, uint64_t now, const raft_msg *m)
{
	if (m->prevote && m->granted) {
		if (r->role == RAFT_PRECANDIDATE && m->term == r->term + 1) mark_granted(r, m->from);
	} else if (m->term > r->term) {
		raft__become_follower(r, now, m->term, "", "a newer term");
		return;
	} else if (!m->prevote && m->granted && r->role == RAFT_CANDIDATE && m->term == r->term) {
		mark_granted(r, m->from);
	}
	count_votes(r, now);
}

/* AppendEntries and InstallSnapshot from a leader of term >= ours. */
static int accept_leader(raft_t *r, uint64_t now, const raft_msg *m)
{
	if (m->term == r->term && r->role == RAFT_LEADER) {
		r->stats.drop_bad_state++;   /* two leaders in one term: never */
		return -1;
	}
	if (raft__become_follower(r, now, m->term, m->from, NULL) != 0) return -1;
	r->sticky_until = now + r->cfg.heartbeat_timeout_ms;
	return 0;
}

static void on_append_req(raft_t *r, uint64_t now, const raft_msg *m)
{
	raft_msg resp = { .type = RAFT_MSG_APPEND_RESP, .prev_index = m->prev_index, .echo = m->echo };
	if (m->term < r->term) {
		r->stats.drop_stale_term++;
		resp.last_index = raft__last_index(r);
		raft__send_msg(r, m->from, &resp);
		return;
	}
	if (accept_leader(r, now, m) != 0) return;
	resp.last_index = raft__last_index(r);
	uint64_t t;
	/* entries at or below the snapshot are committed: skip them */
	size_t skip = 0;
	while (skip < m->nentries && m->entries[skip].index <= r->snap.index) {
		if (m->entries[skip].index == r->snap.index && m->entries[skip].term != r->snap.term) {
			r->stats.drop_bad_state++;
			return;
		}
		skip++;
	}
	if (m->prev_index > raft__last_index(r)) { raft__send_msg(r, m->from, &resp); return; }
	if (m->prev_index >= r->snap.index && (!raft__term_at(r, m->prev_index, &t) || t != m->prev_term)) {
		resp.last_index = m->prev_index - 1 < raft__last_index(r) ? m->prev_index - 1 : raft__last_index(r);
		raft__send_msg(r, m->from, &resp);
		return;
	}
	/* a heartbeat has no entries array: NULL + 0 is undefined in C */
	const raft_entry *e = m->nentries ? m->entries + skip : m->entries;
	size_t n = m->nentries - skip, k = 0;
	while (k < n && e[k].index <= raft__last_index(r) && raft__term_at(r, e[k].index, &t) && t == e[k].term) k++;
	if (k < n) {
		for (size_t i = k; i < n; i++)
			if (e[i].type == RAFT_ENTRY_VOTERS) {
				raft_voters v;
				if (raft__voters_decode(&v, e[i].data, e[i].len) != 0) {
					r->stats.drop_bad_state++;
					return;
				}
			}
		if (e[k].index <= raft__last_index(r)) {
			if (e[k].index <= r->commit) {
				r->stats.drop_bad_state++;   /* would undo a committed entry */
				return;
			}
			if (truncate_from(r, e[k].index, now) != 0) return;
		}
		if (append_entries(r, e + k, n - k, now) != 0) return;
	}
	uint64_t matched = m->prev_index + m->nentries;
	uint64_t c = m->commit < matched ? m->commit : matched;
	if (c > r->commit) r->commit = c;
	resp.success = true;
	resp.last_index = matched;
	uint64_t need = seq_of(r, matched);
	if (need > r->st_durable && now >= r->reply_at + r->cfg.heartbeat_interval_ms / 2) {
		/* contact now, claiming only what is on disk; the answer follows */
		raft_msg early = resp;
		uint64_t d = raft_durable_index(r);
		early.last_index = d < matched ? d : matched;
		early.syncing = true;
		r->stats.replies_syncing++;
		raft__send_msg(r, m->from, &early);
	}
	send_after(r, m->from, &resp, need);
}

/* A reply to AppendEntries or InstallSnapshot: steps down on a newer term;
 * otherwise the peer it comes from (NULL: not for us), its contact noted. */
static peer *reply_peer(raft_t *r, uint64_t now, const raft_msg *m)
{
	if (m->term > r->term) {
		raft__become_follower(r, now, m->term, "", "a newer term");
		return NULL;
	}
	if (r->role != RAFT_LEADER || m->term != r->term) return NULL;
	peer *p = raft__find_peer(r, m->from);
	if (!p) {
		r->stats.drop_not_voter++;
		return NULL;
	}
	note_contact(p, m->echo, now);
	return p;
}

/* A peer's match moved: the commit index, a handover, a newcomer's
 * promotion may follow.  The peer again (promotion rebuilds the peer table),
 * or NULL when we no longer lead or it is gone. */
static peer *after_progress(raft_t *r, uint64_t now, peer *p)
{
	char nm[RAFT_NAME_MAX + 1];
	snprintf(nm, sizeof nm, "%s", p->name);
	advance_commit(r, now);
	if (r->role == RAFT_LEADER) raft__transfer_check(r, now);
	if (r->role != RAFT_LEADER || !(p = raft__find_peer(r, nm))) return NULL;
	if (p->learner) raft__staging_check(r, now);
	return r->role == RAFT_LEADER ? raft__find_peer(r, nm) : NULL;
}

static void on_append_resp(raft_t *r, uint64_t now, const raft_msg *m)
{
	peer *p = reply_peer(r, now, m);
	if (!p) return;
	if (m->success) {
		if (m->last_index > raft__last_index(r)) { r->stats.drop_bad_state++; return; }
		uint64_t was = p->match;
		if (m->last_index > p->match) p->match = m->last_index;
		if (m->syncing) {
			/* contact (noted), and what its disk has: the append stays
			 * in flight, its real answer follows */
			if (p->match > was && !p->snap_inflight) after_progress(r, now, p);
			return;
		}
		if (p->snap_inflight) {
			/* a heartbeat sent while the snapshot travels: only a
			 * follower that has the snapshot's last entry ends it */
			if (p->match < r->snap.index) return;
			p->snap_inflight = false;
		}
		if (p->next < p->match + 1) p->next = p->match + 1;
		p->inflight = false;
		if (!(p = after_progress(r, now, p))) return;
	} else if (!p->snap_inflight) {
		if (m->last_index < p->match && m->echo >= p->contact) {
			/* the freshest answer says it lacks entries it acknowledged:
			 * its storage was lost (Raft assumes it never is).  Start
			 * again from what it has, or it would be sent the same
			 * entries forever and never catch up. */
			char why[RAFT_ERR_MAX];
			snprintf(why, sizeof why, "%s lost entries it had acknowledged (had %llu, now %llu): storage lost? "
				 "sending it the log again", p->name, (unsigned long long)p->match,
				 (unsigned long long)m->last_index);
			raft__push_event(r, RAFT_EV_WARNING, why);
			r->stats.peer_log_lost++;
			p->match = m->last_index;
		}
		uint64_t nx = m->prev_index < m->last_index + 1 ? m->prev_index : m->last_index + 1;
		if (nx < p->match + 1) nx = p->match + 1;
		if (nx < p->next) p->next = nx;
		p->inflight = false;
	}
	if (!p->inflight && (p->next <= raft__last_index(r) || p->next <= r->snap.index)) raft__send_append(r, p, now);
}

static void rs_reset(raft_t *r)
{
	free(r->rs_buf);
	r->rs_buf = NULL;
	memset(&r->rs, 0, sizeof r->rs);
	r->rs_total = r->rs_have = 0;
}

/* Installs a whole snapshot (data, len) as ours. */
static int install_snapshot(raft_t *r, uint64_t now, const raft_snap_meta *s, const uint8_t *data, size_t len)
{
	char err[RAFT_ERR_MAX] = "";
	uint64_t t;
	bool keep = raft__term_at(r, s->index, &t) && t == s->term;
	if (!keep && raft__last_index(r) > s->index && truncate_from(r, s->index + 1, now) != 0) return -1;
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy) { fail(r, "snapshot", "out of memory"); return -1; }
	memcpy(copy, data, len);
	if (r->st->save_snapshot(r->st->ctx, s, data, len, s->index, err, sizeof err) != 0) {
		free(copy);
		fail(r, "save snapshot", err);
		return -1;
	}
	if (st_counted(r, "save snapshot", false) != 0) {
		free(copy);
		return -1;
	}
	r->snap_seq = r->st_issued;
	if (!keep) mem_truncate(r, r->log_start);
	mem_compact(r, s->index);
	if (r->log_start < s->index + 1) r->log_start = s->index + 1;
	free(r->snap_data);
	r->snap = *s;
	r->snap_data = copy;
	r->snap_len = len;
	r->commit = s->index;
	r->applied = s->index;
	r->restore_pending = true;
	r->stats.snapshots_installed++;
	recompute_voters(r, now);
	return 0;
}

static void on_snap_req(raft_t *r, uint64_t now, const raft_msg *m)
{
	raft_msg resp = { .type = RAFT_MSG_SNAP_RESP, .echo = m->echo };
	if (m->term < r->term) {
		r->stats.drop_stale_term++;
		raft__send_msg(r, m->from, &resp);
		return;
	}
	if (accept_leader(r, now, m) != 0) return;
	const raft_snap_meta *s = m->snap;
	resp.last_index = s->index;
	if (s->index <= r->commit) { /* we have all of it already */
		resp.success = true;
		resp.offset = m->total;
		send_after(r, m->from, &resp, seq_of(r, s->index));
		return;
	}
	bool same = r->rs_buf && r->rs.index == s->index && r->rs.term == s->term && r->rs_total == m->total;
	if (m->offset == 0 && !same) {
		rs_reset(r);
		if (!(r->rs_buf = malloc(m->total ? m->total : 1))) { fail(r, "snapshot", "out of memory"); return; }
		r->rs = *s;
		r->rs_total = m->total;
		same = true;
	}
	if (!same || m->offset > r->rs_have) {
		/* another snapshot's chunk, or a gap: say what we hold (the leader
		 * sends from there, or from 0 for another snapshot) */
		resp.offset = same ? r->rs_have : 0;
		raft__send_msg(r, m->from, &resp);
		return;
	}
	/* a repeat of bytes we hold is harmless: they are the same bytes */
	uint64_t end = m->offset + m->len;
	if (end > r->rs_have) {
		memcpy(r->rs_buf + m->offset, m->data, m->len);
		r->rs_have = end;
	}
	if (r->rs_have < r->rs_total) {
		resp.offset = r->rs_have;
		raft__send_msg(r, m->from, &resp);
		return;
	}
	raft_snap_meta meta = r->rs;
	int rc = install_snapshot(r, now, &meta, r->rs_buf, r->rs_total);
	resp.offset = r->rs_total;
	rs_reset(r);
	if (rc != 0) return;
	resp.success = true;
	send_after(r, m->from, &resp, r->snap_seq);
}

static void on_snap_resp(raft_t *r, uint64_t now, const raft_msg *m)
{
	peer *p = reply_peer(r, now, m);
	if (!p) return;
	if (!p->snap_inflight) return;
	if (!m->success) {
		/* only the answer to the chunk in flight moves the transfer on (an
		 * older one, late or repeated, would send bytes again) */
		if (m->echo < p->snap_sent_at) return;
		/* more to send: from what it holds of this snapshot, else anew */
		bool ours = m->last_index == r->snap.index && m->offset < r->snap_len;
		send_snapshot_at(r, p, now, ours ? m->offset : 0);
		return;
	}
	p->snap_inflight = p->inflight = false;
	if (m->success && m->last_index <= raft__last_index(r)) {
		if (m->last_index > p->match) p->match = m->last_index;
		p->next = p->match + 1;
		if (!(p = after_progress(r, now, p))) return;
	}
	raft__send_append(r, p, now);
}

static uint64_t clamp_now(raft_t *r, uint64_t now)
{
	if (now < r->last_now) now = r->last_now;
	r->last_now = now;
	return now;
}

/* For a leader's operations: the clock clamped, the lease checked; -1 with
 * the reason (and the leader, when known) if we do not lead, or our lease
 * has lapsed (we may still be the leader: retry once contact is back). */
int raft__leading(raft_t *r, uint64_t *now, char *err, size_t errlen)
{
	*now = clamp_now(r, *now);
	check_lease(r, *now);
	if (!r->failed && r->role == RAFT_LEADER && *now < lease_end(r, *now)) return 0;
	if (!r->failed && r->role == RAFT_LEADER)
		snprintf(err, errlen, "no contact with a majority for the leader lease; retry");
	else
		snprintf(err, errlen, "not the leader%s%s", r->leader[0] ? "; the leader is " : "", r->leader);
	return -1;
}

/* ---------------------------------------------------------------- inputs */

void raft_tick(raft_t *r, uint64_t now)
{
	if (r->failed) return;
	now = clamp_now(r, now);
	if (r->role == RAFT_LEADER) {
		leader_tick(r, now);
		return;
	}
	if (now < r->election_at) return;
	if (raft__self_voter(r) && !r->no_campaign) start_prevote(r, now);
	else r->election_at = now + rand_between(r, r->cfg.heartbeat_timeout_ms);
}

uint64_t raft_next_deadline(const raft_t *r)
{
	if (r->failed) return UINT64_MAX;
	if (r->role != RAFT_LEADER) return r->election_at;
	uint64_t d = quorum_end((raft_t *)r, r->last_now);
	if (r->xfer_to[0] && r->xfer_until < d) d = r->xfer_until;
	if (r->staging[0] && r->staging_until < d) d = r->staging_until;
	for (size_t i = 0; i < r->npeers; i++) {
		uint64_t t = r->peers[i].sent_at + r->cfg.heartbeat_interval_ms;
		if (t < d) d = t;
	}
	return d;
}

void raft_recv(raft_t *r, uint64_t now, const uint8_t *buf, size_t len)
{
	if (r->failed) return;
	now = clamp_now(r, now);
	check_lease(r, now);
	raft_decoded d;
	wire_err e = raft_codec_decode(buf, len, &d);
	if (e != WIRE_OK) {
		r->stats.drop[e < WIRE_ERR__COUNT ? e : WIRE_ERR_INVALID]++;
		return;
	}
	r->stats.msgs_recv++;
	const raft_msg *m = &d.msg;
	if (!strcmp(m->from, r->name)) {
		r->stats.drop_bad_state++;
	} else {
		switch (m->type) {
		case RAFT_MSG_VOTE_REQ: on_vote_req(r, now, m); break;
		case RAFT_MSG_VOTE_RESP: on_vote_resp(r, now, m); break;
		case RAFT_MSG_APPEND_REQ: on_append_req(r, now, m); break;
		case RAFT_MSG_APPEND_RESP: on_append_resp(r, now, m); break;
		case RAFT_MSG_SNAP_REQ: on_snap_req(r, now, m); break;
		case RAFT_MSG_SNAP_RESP: on_snap_resp(r, now, m); break;
		case RAFT_MSG_TIMEOUT_NOW: raft__on_timeout_now(r, now, m); break;
		}
	}
	raft_codec_free(&d);
}

bool raft_leader_ok(const raft_t *r, uint64_t now_ms)
{
	return !r->failed && r->role == RAFT_LEADER && now_ms < lease_end((raft_t *)r, now_ms);
}

bool raft_read_ok(const raft_t *r, uint64_t now_ms)
{
	uint64_t t;
	return raft_leader_ok(r, now_ms) && raft__term_at(r, r->applied, &t) && t == r->term;
}

int raft__leader_append(raft_t *r, uint64_t now, uint8_t type, const uint8_t *data, size_t len,
			 char *err, size_t errlen)
{
	if (raft__leading(r, &now, err, errlen) != 0) return -1;
	if (r->xfer_to[0]) {
		/* the target's log must stop moving for it to catch up */
		snprintf(err, errlen, "handing leadership over to %s; retry", r->xfer_to);
		return -1;
	}
	if (r->st_issued - r->st_durable >= RAFT_BEHIND_MAX) {
		r->stats.proposals_behind++;
		snprintf(err, errlen, "storage is behind (%llu writes not yet on disk); retry",
			 (unsigned long long)(r->st_issued - r->st_durable));
		return -1;
	}
	raft_entry e = { raft__last_index(r) + 1, r->term, type, data, len };
	if (append_entries(r, &e, 1, now) != 0) {
		snprintf(err, errlen, "storage failed");
		return -1;
	}
	for (size_t i = 0; i < r->npeers; i++)
		if (!r->peers[i].inflight) raft__send_append(r, &r->peers[i], now);
	advance_commit(r, now);
	return 0;
}

int raft_propose(raft_t *r, uint64_t now, uint8_t type, const uint8_t *data, size_t len,
		 uint64_t *index, uint64_t *term, char *err, size_t errlen)
{
	if (type < RAFT_ENTRY_USER || len > RAFT_ENTRY_MAX) {
		snprintf(err, errlen, "bad entry (type %u, %zu bytes)", type, len);
		return -1;
	}
	if (raft__leader_append(r, now, type, data, len, err, errlen) != 0) return -1;
	*index = raft__last_index(r);
	*term = r->term;
	return 0;
}

/* ---------------------------------------------------------------- apply, snapshots */

int raft_pop_apply(raft_t *r, raft_apply *a)
{
	if (r->restore_pending) {
		if (r->snap_seq > r->st_durable) return 0;
		r->restore_pending = false;
		*a = (raft_apply){ RAFT_APPLY_SNAPSHOT, r->snap.index, r->snap.term, 0, r->snap_data, r->snap_len };
		return 1;
	}
	uint64_t upto = raft_durable_index(r);
	if (upto > r->commit) upto = r->commit;
	if (r->applied >= upto) return 0;
	const lentry *e = entry_at(r, r->applied + 1);
	if (!e) return 0;
	r->applied++;
	*a = (raft_apply){ RAFT_APPLY_ENTRY, e->index, e->term, e->type, e->data, e->len };
	return 1;
}

bool raft_snapshot_wanted(const raft_t *r)
{
	return r->applied > r->snap.index && r->applied - r->snap.index >= r->cfg.snapshot_threshold;
}

int raft_snapshot_take(raft_t *r, uint64_t now, uint64_t index, const uint8_t *data, size_t len,
		       char *err, size_t errlen)
{
	uint64_t t;
	now = clamp_now(r, now);
	if (r->failed || r->restore_pending || index <= r->snap.index || index > r->applied ||
	    !raft__term_at(r, index, &t) || len > RAFT_SNAPSHOT_MAX) {
		snprintf(err, errlen, "cannot snapshot at %llu (snapshot %llu, applied %llu)",
			 (unsigned long long)index, (unsigned long long)r->snap.index,
			 (unsigned long long)r->applied);
		return -1;
	}
	raft_snap_meta meta = { index, t, voters_at(r, index) };
	uint64_t upto = index > r->cfg.snapshot_trailing ? index - r->cfg.snapshot_trailing : 0;
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy) { snprintf(err, errlen, "out of memory"); return -1; }
	memcpy(copy, data, len);
	if (r->st->save_snapshot(r->st->ctx, &meta, data, len, upto, err, errlen) != 0) {
		free(copy);
		fail(r, "save snapshot", err);
		return -1;
	}
	if (st_counted(r, "save snapshot", false) != 0) {
		free(copy);
		return -1;
	}
	r->snap_seq = r->st_issued;
	free(r->snap_data);
	r->snap = meta;
	r->snap_data = copy;
	r->snap_len = len;
	if (upto >= r->log_start) mem_compact(r, upto);
	r->stats.snapshots_taken++;
	return 0;
}

/* ---------------------------------------------------------------- lifecycle */

static int restore(raft_t *r, raft_loaded *l, char *err, size_t errlen)
{
	r->term = l->term;
	snprintf(r->vote, sizeof r->vote, "%s", l->vote);
	r->snap = l->snap;
	r->snap_data = l->snap_data;
	r->snap_len = l->snap_len;
	l->snap_data = NULL;
	r->log_start = r->snap.index + 1;
	if (l->nentries) {
		uint64_t first = l->entries[0].index, t = 0;
		for (size_t i = 0; i < l->nentries; i++)
			if (l->entries[i].index != first + i || l->entries[i].term < t || l->entries[i].term > r->term) {
				snprintf(err, errlen, "stored log is not contiguous at index %llu",
					 (unsigned long long)l->entries[i].index);
				return -1;
			} else {
				t = l->entries[i].term;
			}
		if (first > r->snap.index + 1) {
			snprintf(err, errlen, "stored log starts at %llu, after the snapshot at %llu",
				 (unsigned long long)first, (unsigned long long)r->snap.index);
			return -1;
		}
		uint64_t lastl = first + l->nentries - 1;
		const raft_entry *at = r->snap.index >= first && r->snap.index <= lastl
				       ? &l->entries[r->snap.index - first] : NULL;
		bool usable = r->snap.index == 0 || first == r->snap.index + 1 ||
			      (at && at->term == r->snap.term);
		if (usable) {
			r->log_start = first;
			for (size_t i = 0; i < l->nentries; i++)
				if (mem_append(r, &l->entries[i], 0) != 0) {
					snprintf(err, errlen, "out of memory");
					return -1;
				}
		} else if (r->st->truncate(r->st->ctx, first, err, errlen) != 0 ||
			   st_counted(r, "truncate", true) != 0) {
			/* Entries that do not meet the snapshot: a crash between
			 * storing a snapshot and compacting the log.  Those up to
			 * the snapshot are in it; a suffix after a mismatch was
			 * never acknowledged (raft truncated it before the
			 * snapshot was stored). */
			if (r->failed) snprintf(err, errlen, "storage failed truncating the log");
			return -1;
		}
	}
	r->commit = r->applied = r->snap.index;
	r->restore_pending = r->snap.index > 0;
	recompute_voters(r, r->last_now);
	return 0;
}

raft_t *raft_new(const raft_config *cfg, const raft_self *self, raft_storage *st, uint64_t now,
		 char *err, size_t errlen)
{
	if (raft_config_check(cfg, err, errlen) != 0) return NULL;
	if (!raft_name_ok(self->name)) {
		snprintf(err, errlen, "bad name");
		return NULL;
	}
	raft_t *r = calloc(1, sizeof *r);
	if (!r) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->cfg = *cfg;
	sk_rng_seed(&r->rng, self->seed);
	snprintf(r->name, sizeof r->name, "%s", self->name);
	r->st = st;
	r->last_now = now;
	r->log_start = 1;
	raft_loaded l;
	memset(&l, 0, sizeof l);
	if (st->load(st->ctx, &l, err, errlen) != 0 || restore(r, &l, err, errlen) != 0) {
		raft__loaded_free(&l);
		raft_destroy(&r);
		return NULL;
	}
	raft__loaded_free(&l);
	/* refuse votes for a heartbeat timeout after a start: we may have
	 * heard from a leader just before a crash */
	r->sticky_until = now + cfg->heartbeat_timeout_ms;
	r->election_at = now + rand_between(r, cfg->heartbeat_timeout_ms);
	/* events of the load itself are noise: start with an empty queue */
	r->ev_len = 0;
	return r;
}

int raft_bootstrap(raft_t *r, uint64_t now, const raft_voters *v, char *err, size_t errlen)
{
	now = clamp_now(r, now);
	/* term 1 with an empty log and no vote is a bootstrap cut short by a
	 * crash (its hard state reached the disk, its entry did not): anything
	 * else would have moved the term or written an entry, so do it again */
	if (r->term > 1 || (r->term && r->vote[0]) || raft__last_index(r) || r->snap.index) {
		snprintf(err, errlen, "already bootstrapped (term %llu, last index %llu)",
			 (unsigned long long)r->term, (unsigned long long)raft__last_index(r));
		return -1;
	}
	raft_voters chk;
	const char *names[RAFT_VOTERS_MAX];
	if (v->n == 0 || v->n > RAFT_VOTERS_MAX) {
		snprintf(err, errlen, "a voter set holds 1..%d names", RAFT_VOTERS_MAX);
		return -1;
	}
	for (size_t i = 0; i < v->n; i++) names[i] = v->names[i];
	if (raft_voters_make(&chk, names, v->n, err, errlen) != 0) return -1;
	r->term = 1;
	if (save_hard(r) != 0) {
		snprintf(err, errlen, "storage failed");
		return -1;
	}
	uint8_t buf[RAFT__VOTERS_BYTES];
	raft_entry e = { 1, 1, RAFT_ENTRY_VOTERS, buf, raft__voters_encode(&chk, buf) };
	if (append_entries(r, &e, 1, now) != 0) {
		snprintf(err, errlen, "storage failed");
		return -1;
	}
	return 0;
}

void raft_destroy(raft_t **rp)
{
	raft_t *r = *rp;
	if (!r) return;
	for (size_t i = 0; i < r->nlog; i++) free(r->log[i].data);
	free(r->log);
	free(r->snap_data);
	free(r->rs_buf);
	for (size_t i = 0; i < r->out_len; i++) free(r->outs[(r->out_head + i) % r->out_cap].data);
	free(r->outs);
	for (size_t i = 0; i < r->nheld; i++) free(r->held[i].out.data);
	free(r->held);
	free(r->evs);
	free(r);
	*rp = NULL;
}

/* ---------------------------------------------------------------- storage reports */

void raft_storage_done(raft_t *r, uint64_t now, uint64_t seq)
{
	if (r->failed || seq <= r->st_durable) return;
	now = clamp_now(r, now);
	if (seq > r->st_issued) {
		fail(r, "report", "durable beyond the calls made");
		return;
	}
	r->st_durable = seq;
	release_held(r);
	if (r->role == RAFT_CANDIDATE) {
		count_votes(r, now);
	} else if (r->role == RAFT_LEADER) {
		advance_commit(r, now);
		raft__transfer_check(r, now);
	}
}

void raft_storage_failed(raft_t *r, const char *err) { fail(r, "write", err); }
uint64_t raft_storage_issued(const raft_t *r) { return r->st_issued; }
uint64_t raft_storage_durable(const raft_t *r) { return r->st_durable; }

/* ---------------------------------------------------------------- queries */

raft_role raft_get_role(const raft_t *r) { return r->role; }
uint64_t raft_term(const raft_t *r) { return r->term; }
const char *raft_leader(const raft_t *r) { return r->leader[0] ? r->leader : NULL; }
bool raft_is_leader(const raft_t *r) { return r->role == RAFT_LEADER; }
uint64_t raft_commit_index(const raft_t *r) { return r->commit; }
uint64_t raft_last_index(const raft_t *r) { return raft__last_index(r); }
uint64_t raft_snapshot_index(const raft_t *r) { return r->snap.index; }
const raft_voters *raft_get_voters(const raft_t *r) { return &r->voters; }
bool raft_failed(const raft_t *r) { return r->failed; }
const char *raft_name(const raft_t *r) { return r->name; }
const raft_config *raft_get_config(const raft_t *r) { return &r->cfg; }
const raft_stats *raft_get_stats(const raft_t *r) { return &r->stats; }

int64_t raft_last_contact_ms(const raft_t *r, const char *name, uint64_t now)
{
	if (r->role != RAFT_LEADER) return -1;
	if (!strcmp(name, r->name)) return 0;
	for (size_t i = 0; i < r->npeers; i++)
		if (!strcmp(r->peers[i].name, name) && !r->peers[i].learner)
			return now >= r->peers[i].contact ? (int64_t)(now - r->peers[i].contact) : 0;
	return -1;
}
