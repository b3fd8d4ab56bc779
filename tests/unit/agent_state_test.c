/* tests/unit/agent_state_test: agent/agent_state (the replicated state machine).
 *
 * Checks that a key-value entry goes to the map and a jobs entry to the
 * jobs (and says so), that a refused entry reads -1, that the "SKSM"
 * snapshot round-trips both parts, that a bare key-value snapshot (the
 * older format) is still read, and that every truncation or corruption of a
 * snapshot's lengths fails and leaves the state as it was. */
#include "tests/t.h"

#include <stdlib.h>
#include <string.h>

#include "agent/agent_state.h"

static int put(agent_state *s, const char *k, const char *v, unsigned *jobs)
{
	uint8_t type, *data;
	size_t len;
	char err[128];
	if (raft_kv_encode_put(k, strlen(k), v, strlen(v), &type, &data, &len, err, sizeof err) < 0) return -2;
	int rc = agent_state_apply(s, type, data, len, jobs);
	free(data);
	return rc;
}

static int drain(agent_state *s, const char *node, unsigned *jobs)
{
	uint8_t *data;
	size_t len;
	if (job_state_encode_drain(node, true, 1000, &data, &len) < 0) return -2;
	int rc = agent_state_apply(s, JOB_ENTRY_DRAIN, data, len, jobs);
	free(data);
	return rc;
}

static bool has(const agent_state *s, const char *k, const char *want)
{
	const uint8_t *v;
	size_t vl;
	if (raft_kv_get(agent_state_kv(s), k, strlen(k), &v, &vl) < 0) return false;
	return vl == strlen(want) && !memcmp(v, want, vl);
}

T_TEST(apply_routes_entries)
{
	agent_state *s = agent_state_new();
	T_CHECK(s != NULL);
	unsigned jobs = 0;
	T_EQ(put(s, "a", "1", &jobs), 0);
	T_EQ(jobs, 0);
	T_CHECK(has(s, "a", "1"));
	T_EQ(drain(s, "n1", &jobs), 0);
	T_EQ(jobs, AGENT_STATE_JOBS);
	T_CHECK(job_state_is_drained(agent_state_jobs(s), "n1"));
	jobs = 0;
	uint8_t junk[3] = { 1, 2, 3 };
	T_EQ(agent_state_apply(s, JOB_ENTRY_SUBMIT, junk, sizeof junk, &jobs), -1); /* refused, the same everywhere */
	T_EQ(jobs, AGENT_STATE_JOBS);
	jobs = 0;
	T_EQ(agent_state_apply(s, WV_ENTRY_PUT, junk, sizeof junk, &jobs), -1);
	T_EQ(jobs, AGENT_STATE_WV);
	agent_state_free(&s);
	T_CHECK(s == NULL);
	agent_state_free(&s); /* safe twice */
}

T_TEST(snapshot_round_trip)
{
	agent_state *s = agent_state_new(), *t = agent_state_new();
	unsigned jobs;
	T_EQ(put(s, "k", "v", &jobs), 0);
	T_EQ(drain(s, "n2", &jobs), 0);
	uint8_t *snap;
	size_t len;
	char err[200];
	T_EQ(agent_state_serialize(s, &snap, &len), 0);
	T_CHECK(len > 5 && !memcmp(snap, "SKSM\1", 5));
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), 0);
	T_CHECK(has(t, "k", "v"));
	T_CHECK(job_state_is_drained(agent_state_jobs(t), "n2"));
	free(snap);
	/* an older voter's snapshot: the key-value map alone */
	agent_state *u = agent_state_new();
	T_EQ(raft_kv_serialize(agent_state_kv(s), &snap, &len), 0);
	T_EQ(agent_state_restore(u, snap, len, err, sizeof err), 0);
	T_CHECK(has(u, "k", "v"));
	T_EQ(job_state_drained_count(agent_state_jobs(u)), 0);
	free(snap);
	agent_state_free(&s);
	agent_state_free(&t);
	agent_state_free(&u);
}

T_TEST(bad_snapshot_changes_nothing)
{
	agent_state *s = agent_state_new(), *t = agent_state_new();
	unsigned jobs;
	T_EQ(put(s, "k", "new", &jobs), 0);
	T_EQ(drain(s, "n3", &jobs), 0);
	T_EQ(put(t, "k", "old", &jobs), 0);
	uint8_t *snap;
	size_t len;
	char err[200];
	T_EQ(agent_state_serialize(s, &snap, &len), 0);
	/* every truncation past the magic */
	for (size_t n = 5; n < len; n++) {
		err[0] = 0;
		T_EQ(agent_state_restore(t, snap, n, err, sizeof err), -1);
		T_CHECK(err[0] != 0);
		T_CHECK(has(t, "k", "old"));
		T_EQ(job_state_drained_count(agent_state_jobs(t)), 0);
	}
	/* each length field off by one either way, and huge */
	uint64_t l1;
	memcpy(&l1, snap + 5, 8);
	size_t at[2] = { 5, 13 + (size_t)l1 };
	for (int f = 0; f < 2; f++) {
		uint64_t orig, bad[3];
		memcpy(&orig, snap + at[f], 8);
		bad[0] = orig + 1, bad[1] = orig - 1, bad[2] = UINT64_MAX;
		for (int b = 0; b < 3; b++) {
			memcpy(snap + at[f], &bad[b], 8);
			T_EQ(agent_state_restore(t, snap, len, err, sizeof err), -1);
			T_CHECK(has(t, "k", "old"));
		}
		memcpy(snap + at[f], &orig, 8);
	}
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), 0);
	T_CHECK(has(t, "k", "new"));
	free(snap);
	agent_state_free(&s);
	agent_state_free(&t);
}
