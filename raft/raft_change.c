/* raft/raft_change: changes of who votes and who leads, on purpose.
 *
 * A new voter catches up first (thesis 4.2.1, Consul's autopilot): the
 *   leader replicates to it as a non-voting peer (not counted for commits,
 *   the lease or elections) and appends the voter set that includes it only
 *   once its log is within one AppendEntries of the commit index; one that
 *   has not caught up after 10 election timeouts is dropped (RAFT_EV_VOTERS
 *   with a reason).  A slow or unreachable newcomer therefore never raises
 *   the majority the cluster needs while it cannot vote usefully.
 *
 * Leadership transfer (thesis 3.10), for a planned stop of the head:
 *   raft_transfer names a voter (or picks the one with the most of the log);
 *   the leader stops taking writes, brings the target's log up to its own,
 *   then steps down and sends it TimeoutNow; the target stands for election
 *   at once, its VoteReq flagged `transfer`, which voters do not refuse for
 *   stickiness.  The lease argument of raft.c still holds: the leader stops
 *   leading before the message that starts the election leaves it, so no
 *   voter grants a flagged vote while it leads.  A target that does not
 *   catch up within election_timeout ends the transfer (RAFT_EV_TRANSFER
 *   says so) and writes resume; a TimeoutNow lost after the step-down costs
 *   one ordinary election.
 *
 * Both work on raft.c's node state (raft_int.h); raft.c calls the checks
 * below on every answer from a peer and every leader tick. */
#include "raft/raft_int.h"

#include <stdio.h>
#include <string.h>

/* The leader of our term handed over to us: stand now, flagged. */
void raft__on_timeout_now(raft_t *r, uint64_t now, const raft_msg *m)
{
	if (m->term != r->term || r->role != RAFT_FOLLOWER || strcmp(r->leader, m->from) != 0 || !raft__self_voter(r) ||
	    r->no_campaign) {
		r->stats.drop_bad_state++;
		return;
	}
	r->stats.transfers_received++;
	r->campaign_transfer = true;
	raft__start_election(r, now);
	r->campaign_transfer = false;
}

/* ---------------------------------------------------------------- transfer */

/* Leader with a handover under way: once the target holds every entry, step
 * down first, then tell it to stand; past xfer_until, give up. */
void raft__transfer_check(raft_t *r, uint64_t now)
{
	if (r->role != RAFT_LEADER || !r->xfer_to[0]) return;
	char to[RAFT_NAME_MAX + 1], why[RAFT_ERR_MAX];
	snprintf(to, sizeof to, "%s", r->xfer_to);
	peer *p = raft__find_peer(r, to);
	if (!p || now >= r->xfer_until) {
		r->xfer_to[0] = 0;
		r->stats.transfers_failed++;
		snprintf(why, sizeof why, "handover to %s abandoned: %s", to,
			 p ? "it did not catch up within the election timeout" : "no longer a voter");
		raft__push_event(r, RAFT_EV_TRANSFER, why);
		return;
	}
	/* every entry, acknowledged since we asked (an old match of a voter
	 * that has died since would hand the cluster to nobody) */
	if (p->match < raft__last_index(r) || p->contact < r->xfer_start) return;
	r->stats.transfers++;
	r->xfer_to[0] = 0; /* done, not abandoned */
	snprintf(why, sizeof why, "handing over to %s", to);
	r->handed_over = true;
	int rc = raft__become_follower(r, now, r->term, "", why);
	r->handed_over = false;
	if (rc != 0) return;
	raft_msg m = { .type = RAFT_MSG_TIMEOUT_NOW };
	raft__send_msg(r, to, &m);
}

int raft_transfer(raft_t *r, uint64_t now, const char *name, char *target, size_t tlen, char *err, size_t errlen)
{
	if (raft__leading(r, &now, err, errlen) != 0) return -1;
	if (r->xfer_to[0]) {
		snprintf(err, errlen, "a handover to %s is under way", r->xfer_to);
		return -1;
	}
	peer *best = NULL;
	if (name && *name) {
		if (!strcmp(name, r->name)) {
			snprintf(err, errlen, "%s is the leader already", name);
			return -1;
		}
		if (!(best = raft__find_peer(r, name)) || best->learner) {
			snprintf(err, errlen, "%s is not a voter", name);
			return -1;
		}
	} else {
		/* the most of the log, then the freshest contact */
		for (size_t i = 0; i < r->npeers; i++) {
			peer *p = &r->peers[i];
			if (p->learner) continue;
			if (!best || p->match > best->match || (p->match == best->match && p->contact > best->contact))
				best = p;
		}
		if (!best) {
			snprintf(err, errlen, "no other voter to hand over to");
			return -1;
		}
	}
	snprintf(r->xfer_to, sizeof r->xfer_to, "%s", best->name);
	r->xfer_start = now;
	r->xfer_until = now + r->cfg.election_timeout_ms;
	if (target) snprintf(target, tlen, "%s", best->name);
	if (!best->inflight) raft__send_append(r, best, now); /* its answer proves it is there */
	raft__transfer_check(r, now);
	return 0;
}

const char *raft_transfer_target(const raft_t *r) { return r->xfer_to[0] ? r->xfer_to : NULL; }

void raft_stop_campaigning(raft_t *r) { r->no_campaign = true; }

/* ---------------------------------------------------------------- voter changes */

/* Appends the voter set with `name` added or removed. */
static int append_voters(raft_t *r, uint64_t now, const char *name, bool add, char *err, size_t errlen)
{
	const char *names[RAFT_VOTERS_MAX + 1];
	size_t n = 0;
	for (size_t i = 0; i < r->voters.n; i++)
		if (add || strcmp(r->voters.names[i], name) != 0) names[n++] = r->voters.names[i];
	if (add) names[n++] = name;
	raft_voters v;
	if (raft_voters_make(&v, names, n, err, errlen) != 0) return -1;
	uint8_t buf[RAFT__VOTERS_BYTES];
	size_t len = raft__voters_encode(&v, buf);
	return raft__leader_append(r, now, RAFT_ENTRY_VOTERS, buf, len, err, errlen);
}

static int change_voters(raft_t *r, uint64_t now, const char *name, bool add, char *err, size_t errlen)
{
	uint64_t t;
	if (raft__leading(r, &now, err, errlen) != 0) return -1;
	if (!raft__term_at(r, r->commit, &t) || t != r->term) {
		snprintf(err, errlen, "the leader has not committed an entry of its term yet; retry");
		return -1;
	}
	if (r->voters_index > r->commit || r->staging[0]) {
		snprintf(err, errlen, "a voter change is in flight%s%s; retry", r->staging[0] ? ": catching up " : "",
			 r->staging);
		return -1;
	}
	bool has = raft_voters_has(&r->voters, name);
	if (add && has) {
		snprintf(err, errlen, "%s is a voter already", name);
		return -1;
	}
	if (add && r->voters.n == RAFT_VOTERS_MAX) {
		snprintf(err, errlen, "at most %d voters", RAFT_VOTERS_MAX);
		return -1;
	}
	if (!add && !has) {
		snprintf(err, errlen, "%s is not a voter", name);
		return -1;
	}
	if (!add) return append_voters(r, now, name, false, err, errlen);
	if (!raft_name_ok(name) || strchr(name, ' ')) {
		snprintf(err, errlen, "bad voter name");
		return -1;
	}
	/* first a non-voting catch-up (staging_check appends the set) */
	snprintf(r->staging, sizeof r->staging, "%s", name);
	r->staging_until = now + 10ull * r->cfg.election_timeout_ms;
	raft__rebuild_peers(r, now);
	peer *p = raft__find_peer(r, name);
	if (p) raft__send_append(r, p, now);
	return 0;
}

/* Leader with a voter-to-be: once its log is within one AppendEntries of the
 * commit index, append the set with it; past staging_until, drop it. */
void raft__staging_check(raft_t *r, uint64_t now)
{
	if (r->role != RAFT_LEADER || !r->staging[0]) return;
	char name[RAFT_NAME_MAX + 1], why[RAFT_ERR_MAX], err[RAFT_ERR_MAX];
	snprintf(name, sizeof name, "%s", r->staging);
	peer *p = raft__find_peer(r, name);
	if (!p || now >= r->staging_until) {
		r->staging[0] = 0;
		raft__rebuild_peers(r, now);
		snprintf(why, sizeof why, "%s not added: it did not catch up within %u ms", name,
			 10u * r->cfg.election_timeout_ms);
		raft__push_event(r, RAFT_EV_VOTERS, why);
		return;
	}
	/* it answered with entries (or a snapshot) of ours, and is close */
	if (!p->match || p->match + r->cfg.max_append_entries < r->commit || p->snap_inflight ||
	    now - p->contact >= r->cfg.heartbeat_timeout_ms)
		return;
	if (r->voters_index > r->commit || r->xfer_to[0]) return; /* not while those are under way */
	r->staging[0] = 0;
	p->learner = false; /* the peer entry carries over: rebuild keeps its state */
	if (append_voters(r, now, name, true, err, sizeof err) != 0) {
		raft__rebuild_peers(r, now);
		snprintf(why, sizeof why, "%s not added: %s", name, err);
		raft__push_event(r, RAFT_EV_VOTERS, why);
	}
}

const char *raft_staging(const raft_t *r) { return r->staging[0] ? r->staging : NULL; }

int raft_voter_add(raft_t *r, uint64_t now, const char *name, char *err, size_t errlen)
{
	return change_voters(r, now, name, true, err, errlen);
}

int raft_voter_remove(raft_t *r, uint64_t now, const char *name, char *err, size_t errlen)
{
	return change_voters(r, now, name, false, err, errlen);
}
