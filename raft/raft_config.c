/* raft/raft_config: the values around a Raft node: timing profiles and their
 * check, names of roles and events, the fence an agent keeps, voter sets
 * (sorted names) and their encoding in entries and snapshot files, and two
 * storage helpers.  No node state here. */
#include "raft/raft_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int raft_config_profile(raft_config *c, const char *profile)
{
	/* hashicorp/raft DefaultConfig: HeartbeatTimeout 1 s, ElectionTimeout
	 * 1 s, LeaderLeaseTimeout 500 ms, heartbeats at HeartbeatTimeout/10,
	 * MaxAppendEntries 64, SnapshotThreshold 8192, TrailingLogs 10240. */
	*c = (raft_config){
		.heartbeat_timeout_ms = 1000,
		.election_timeout_ms = 1000,
		.leader_lease_ms = 500,
		.heartbeat_interval_ms = 100,
		.max_append_entries = 64,
		.max_append_bytes = 1 << 20,
		.snapshot_threshold = 8192,
		.snapshot_trailing = 10240,
		.snapshot_chunk_bytes = 4 << 20,
	};
	if (!profile || !strcmp(profile, "default")) return 0;
	if (!strcmp(profile, "fast")) {
		/* One fabric, sub-ms RTT: 4x faster.  A dead head is noticed in
		 * 250-500 ms; pre-vote, vote and the first commit add three
		 * round trips and two fsyncs, so failover is about 0.4 s.  The
		 * disk no longer limits it: fsyncs run on the storage thread
		 * (raft_async) and a follower waiting for its disk still answers
		 * ('syncing'), so only scheduling delays count against the
		 * 150 ms lease; before, 100 and 150 ms leases made a loaded
		 * 2-core machine's head step down in bursts of fsync'd writes
		 * (fsyncs of up to 130 ms on the loop), and 400/250 ms it was.
		 * 100 ms between the lease and the heartbeat timeout still
		 * absorbs timer lateness (raft.c: the lease). */
		c->heartbeat_timeout_ms = 250;
		c->election_timeout_ms = 250;
		c->leader_lease_ms = 150;
		c->heartbeat_interval_ms = 25;
		return 0;
	}
	return -1;
}

int raft_config_check(const raft_config *c, char *err, size_t errlen)
{
	const char *why = NULL;
	if (!c->heartbeat_timeout_ms || !c->election_timeout_ms || !c->leader_lease_ms ||
	    !c->heartbeat_interval_ms)
		why = "timeouts must be > 0";
	else if (c->leader_lease_ms >= c->heartbeat_timeout_ms)
		why = "leader_lease_ms must be < heartbeat_timeout_ms (a leader must step down before a successor can win)";
	else if (c->heartbeat_interval_ms * 2 > c->leader_lease_ms)
		why = "heartbeat_interval_ms must be <= leader_lease_ms / 2 (or a healthy leader loses its lease)";
	else if (!c->max_append_entries || c->max_append_entries > RAFT_MSG_ENTRIES_MAX)
		why = "max_append_entries must be 1..4096";
	else if (c->max_append_bytes < 1024)
		why = "max_append_bytes must be >= 1024";
	else if (!c->snapshot_threshold)
		why = "snapshot_threshold must be > 0";
	else if (c->snapshot_chunk_bytes < 64 || c->snapshot_chunk_bytes > (32u << 20))
		why = "snapshot_chunk_bytes must be 64..32 MiB";
	if (why && err) snprintf(err, errlen, "%s", why);
	return why ? -1 : 0;
}

const char *raft_role_str(raft_role r)
{
	static const char *s[] = { "follower", "precandidate", "candidate", "leader" };
	return (unsigned)r < 4 ? s[r] : "?";
}

const char *raft_event_str(raft_event_type t)
{
	static const char *s[] = { "leader", "follower", "stepdown", "voters", "failed", "candidate", "transfer",
				   "warning" };
	return (unsigned)t < sizeof s / sizeof s[0] ? s[t] : "?";
}

int raft_fence_check(raft_fence *f, uint64_t term)
{
	if (term < f->newest) return -1;
	f->newest = term;
	return 0;
}

/* ---------------------------------------------------------------- voters */

static int name_cmp(const void *a, const void *b) { return strcmp(a, b); }

int raft_voters_make(raft_voters *v, const char *const *names, size_t n, char *err, size_t errlen)
{
	memset(v, 0, sizeof *v);
	if (n == 0 || n > RAFT_VOTERS_MAX) {
		if (err) snprintf(err, errlen, "a voter set holds 1..%d names", RAFT_VOTERS_MAX);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (!raft_name_ok(names[i])) {
			if (err) snprintf(err, errlen, "bad voter name");
			return -1;
		}
		snprintf(v->names[i], sizeof v->names[i], "%s", names[i]);
	}
	v->n = n;
	qsort(v->names, n, sizeof v->names[0], name_cmp);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(v->names[i - 1], v->names[i])) {
			if (err) snprintf(err, errlen, "voter named twice");
			return -1;
		}
	return 0;
}

bool raft_voters_has(const raft_voters *v, const char *name)
{
	for (size_t i = 0; i < v->n; i++)
		if (!strcmp(v->names[i], name)) return true;
	return false;
}

size_t raft__voters_encode(const raft_voters *v, uint8_t *buf)
{
	size_t o = 0;
	buf[o++] = (uint8_t)v->n;
	for (size_t i = 0; i < v->n; i++) {
		size_t l = strlen(v->names[i]);
		buf[o++] = (uint8_t)l;
		memcpy(buf + o, v->names[i], l);
		o += l;
	}
	return o;
}

int raft__voters_decode(raft_voters *v, const uint8_t *buf, size_t len)
{
	char names[RAFT_VOTERS_MAX][RAFT_NAME_MAX + 1];
	const char *ptrs[RAFT_VOTERS_MAX];
	if (len < 1 || buf[0] == 0 || buf[0] > RAFT_VOTERS_MAX) return -1;
	size_t n = buf[0], o = 1;
	for (size_t i = 0; i < n; i++) {
		if (o >= len) return -1;
		size_t l = buf[o++];
		if (l == 0 || l > RAFT_NAME_MAX || o + l > len) return -1;
		memcpy(names[i], buf + o, l);
		names[i][l] = 0;
		if (strlen(names[i]) != l) return -1;
		ptrs[i] = names[i];
		o += l;
	}
	if (o != len) return -1;
	return raft_voters_make(v, ptrs, n, NULL, 0);
}

int raft__append_follows(uint64_t last, uint64_t first, char *err, size_t errlen)
{
	if (first == last + 1) return 0;
	snprintf(err, errlen, "append at %llu after %llu", (unsigned long long)first, (unsigned long long)last);
	return -1;
}

void raft__loaded_free(raft_loaded *l)
{
	free(l->snap_data);
	for (size_t i = 0; i < l->nentries; i++) free((void *)l->entries[i].data);
	free(l->entries);
	memset(l, 0, sizeof *l);
}
