/* tests/unit/agent_state_test: agent/agent_state (the replicated state machine).
 *
 * Checks that a key-value entry goes to the map, a jobs entry to the jobs
 * and a weight update to the updates (and says which), that a refused entry
 * reads -1, that a weight update needs its job and a job's delete forgets
 * its updates, that the "SKSM" snapshot round-trips every part (version 2
 * with updates, version 1 while there are none), that a version 1 snapshot
 * and a bare key-value snapshot (the older formats) are still read, and
 * that every truncation or corruption of a snapshot's lengths or of its
 * update section fails and leaves the state as it was. */
#include "tests/t.h"

#include <stdlib.h>
#include <string.h>

#include "agent/agent_state.h"
#include "jobs/job_codec.h"
#include "jobs/job_spec.h"
#include "tests/unit/update_fixture.h"

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

/* t holds only k=old: nothing else, before and after */
static bool empty_state(const agent_state *t)
{
	return has(t, "k", "old") && job_state_count(agent_state_jobs(t)) == 0 &&
	       job_state_drained_count(agent_state_jobs(t)) == 0 && update_state_count(agent_state_wv(t)) == 0;
}

/* every truncation of snap past the magic fails with a reason, t unchanged */
static void every_truncation_fails(agent_state *t, const uint8_t *snap, size_t len)
{
	char err[200];
	for (size_t n = 5; n < len; n++) {
		err[0] = 0;
		T_EQ(agent_state_restore(t, snap, n, err, sizeof err), -1);
		T_CHECK(err[0] != 0);
		T_CHECK(empty_state(t));
	}
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
	T_EQ(agent_state_apply(s, UPDATE_ENTRY_PUT, junk, sizeof junk, &jobs), -1);
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
	every_truncation_fails(t, snap, len);
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

/* ---- weight updates: the third section ---- */

static int submit(agent_state *s, const char *name, uint64_t seq, unsigned *changed)
{
	job_rec j;
	char err[256];
	memset(&j, 0, sizeof j);
	job_spec_defaults(&j.spec);
	snprintf(j.spec.name, sizeof j.spec.name, "%s", name);
	snprintf(j.spec.trainer_cmd, sizeof j.spec.trainer_cmd, "train");
	snprintf(j.spec.rollout_cmd, sizeof j.spec.rollout_cmd, "serve");
	j.spec.rollout_num_gpus = 2;
	if (job_spec_validate(&j.spec, err, sizeof err) < 0) T_FAIL("spec: %s", err);
	j.state = (char *)"pending";
	j.reason = (char *)"";
	j.submit_token = (char *)"";
	j.seq = seq;
	uint8_t *data;
	size_t len;
	T_EQ(job_codec_encode(&j, &data, &len), 0);
	int rc = agent_state_apply(s, JOB_ENTRY_SUBMIT, data, len, changed);
	free(data);
	return rc;
}

static int update_put(agent_state *s, const char *job, uint64_t v, const char *state, unsigned *changed)
{
	update_rec u;
	update_fixture(&u, NULL, 0, job, v, state, NULL);
	uint8_t *data;
	size_t len;
	T_EQ(update_rec_encode(&u, &data, &len), 0);
	int rc = agent_state_apply(s, UPDATE_ENTRY_PUT, data, len, changed);
	free(data);
	return rc;
}

T_TEST(weight_updates_follow_their_job)
{
	agent_state *s = agent_state_new();
	unsigned ch = 0;
	/* a job the state does not hold takes no update (a begin committed after its delete) */
	T_EQ(update_put(s, "j1", 1, "preparing", &ch), -1);
	T_EQ(ch, AGENT_STATE_WV);
	T_EQ(update_state_refused(agent_state_wv(s)), 1);
	ch = 0;
	T_EQ(submit(s, "j1", 1, &ch), 0);
	T_EQ(ch, AGENT_STATE_JOBS);
	ch = 0;
	T_EQ(update_put(s, "j1", 1, "preparing", &ch), 0);
	T_EQ(ch, AGENT_STATE_WV);
	T_EQ(update_put(s, "j1", 1, "committed", NULL), 0);
	T_EQ(update_state_committed(agent_state_wv(s), "j1"), 1);
	/* the delete forgets the job's updates and says so */
	ch = 0;
	T_EQ(agent_state_apply(s, JOB_ENTRY_DELETE, (const uint8_t *)"j1", 2, &ch), 0);
	T_EQ(ch, AGENT_STATE_JOBS | AGENT_STATE_WV);
	T_EQ(update_state_count(agent_state_wv(s)), 0);
	T_EQ(update_state_max_version(agent_state_wv(s), "j1"), 0);
	/* a delete refused (no such job) touches no update */
	T_EQ(submit(s, "j2", 2, NULL), 0);
	T_EQ(update_put(s, "j2", 4, "preparing", NULL), 0);
	ch = 0;
	T_EQ(agent_state_apply(s, JOB_ENTRY_DELETE, (const uint8_t *)"j1", 2, &ch), -1);
	T_EQ(ch, AGENT_STATE_JOBS);
	T_EQ(update_state_max_version(agent_state_wv(s), "j2"), 4);
	agent_state_free(&s);
}

/* A state with a key, a drained node, a job and an open update of it. */
static agent_state *full_state(void)
{
	agent_state *s = agent_state_new();
	T_EQ(put(s, "k", "new", NULL), 0);
	T_EQ(drain(s, "n3", NULL), 0);
	T_EQ(submit(s, "j1", 1, NULL), 0);
	T_EQ(update_put(s, "j1", 1, "preparing", NULL), 0);
	T_EQ(update_put(s, "j1", 1, "committed", NULL), 0);
	T_EQ(update_put(s, "j1", 2, "preparing", NULL), 0);
	return s;
}

T_TEST(snapshot_v2_round_trip_and_older_formats)
{
	agent_state *s = full_state(), *t = agent_state_new();
	uint8_t *snap, *again;
	size_t len, len2;
	char err[200];
	T_EQ(agent_state_serialize(s, &snap, &len), 0);
	T_CHECK(len > 5 && !memcmp(snap, "SKSM\2", 5));
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), 0);
	T_CHECK(has(t, "k", "new"));
	T_CHECK(job_state_get(agent_state_jobs(t), "j1") != NULL);
	T_EQ(update_state_committed(agent_state_wv(t), "j1"), 1);
	T_EQ(update_state_open(agent_state_wv(t), "j1")->version, 2);
	T_EQ(agent_state_serialize(t, &again, &len2), 0);
	T_CHECK(len == len2 && !memcmp(snap, again, len));
	free(snap);
	free(again);
	/* version 1, as the previous release wrote it: kv and jobs; the updates empty */
	uint8_t *kv, *jb;
	size_t kvl, jbl;
	T_EQ(raft_kv_serialize(agent_state_kv(s), &kv, &kvl), 0);
	T_EQ(job_state_serialize(agent_state_jobs(s), &jb, &jbl), 0);
	len = 5 + 8 + kvl + 8 + jbl;
	snap = malloc(len);
	uint64_t l1 = kvl, l2 = jbl;
	memcpy(snap, "SKSM\1", 5);
	memcpy(snap + 5, &l1, 8);
	memcpy(snap + 13, kv, kvl);
	memcpy(snap + 13 + kvl, &l2, 8);
	memcpy(snap + 21 + kvl, jb, jbl);
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), 0);
	T_CHECK(job_state_get(agent_state_jobs(t), "j1") != NULL);
	T_EQ(update_state_count(agent_state_wv(t)), 0);
	T_EQ(update_state_max_version(agent_state_wv(t), "j1"), 0);
	free(snap);
	free(jb);
	/* a bare key-value snapshot: the map alone changes */
	agent_state *u = full_state();
	T_EQ(agent_state_restore(u, kv, kvl, err, sizeof err), 0);
	T_CHECK(has(u, "k", "new"));
	free(kv);
	/* an empty update table still writes version 1 (older voters read it) */
	T_EQ(agent_state_serialize(t, &snap, &len), 0);
	T_CHECK(!memcmp(snap, "SKSM\1", 5));
	free(snap);
	/* an unknown version is refused */
	T_EQ(agent_state_serialize(s, &snap, &len), 0);
	snap[4] = 3;
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), -1);
	free(snap);
	agent_state_free(&s);
	agent_state_free(&t);
	agent_state_free(&u);
}

T_TEST(bad_v2_snapshot_changes_nothing)
{
	agent_state *s = full_state(), *t = agent_state_new();
	T_EQ(put(t, "k", "old", NULL), 0);
	uint8_t *snap;
	size_t len;
	char err[200];
	T_EQ(agent_state_serialize(s, &snap, &len), 0);
	every_truncation_fails(t, snap, len);
	/* the update section's bytes corrupted: a record open twice (1 back to preparing) */
	uint64_t l1, l2, l3;
	memcpy(&l1, snap + 5, 8);
	memcpy(&l2, snap + 13 + l1, 8);
	size_t at3 = 21 + (size_t)l1 + (size_t)l2;
	memcpy(&l3, snap + at3, 8);
	uint8_t *wv = snap + at3 + 8;
	uint8_t *hit = memmem(wv, (size_t)l3, "committed", 9);
	T_CHECK(hit != NULL);
	memcpy(hit, "preparing", 9);
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), -1);
	T_CHECK(strstr(err, "weights snapshot") != NULL);
	T_CHECK(empty_state(t));
	memcpy(hit, "committed", 9);
	/* the third length off by one either way, and huge */
	uint64_t bad[3] = { l3 + 1, l3 - 1, UINT64_MAX };
	for (int b = 0; b < 3; b++) {
		memcpy(snap + at3, &bad[b], 8);
		T_EQ(agent_state_restore(t, snap, len, err, sizeof err), -1);
		T_CHECK(empty_state(t));
	}
	memcpy(snap + at3, &l3, 8);
	T_EQ(agent_state_restore(t, snap, len, err, sizeof err), 0);
	T_EQ(update_state_count(agent_state_wv(t)), 2);
	free(snap);
	agent_state_free(&s);
	agent_state_free(&t);
}
