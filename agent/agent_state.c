/* agent/agent_state: the replicated state machine (kv + jobs), pure.
 *
 * Split out of agent_head.c so that the election wiring and the machine it
 * replicates are read apart: this file knows raft_kv and job_state and
 * nothing of raft, the loop or the agent.  It never calls out; what changed
 * goes back to the caller as return values (agent_state_apply's
 * *jobs_changed), and the caller decides whom to tell.
 *
 * Snapshot format ("SKSM"): the bytes "SKSM", u8 version 1, then the
 * key-value snapshot and the jobs snapshot, each as a u64 length (host
 * order, as raft's own files) followed by its bytes.  Anything not starting
 * with the magic is read as a bare key-value snapshot. */
#include "agent/agent_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t SKSM_MAGIC[5] = { 'S', 'K', 'S', 'M', 1 };
enum { SKSM_HEAD = 5, SKSM_LEN = 8 };

struct agent_state {
	raft_kv *kv;
	job_state *jobs;
};

agent_state *agent_state_new(void)
{
	agent_state *s = calloc(1, sizeof *s);
	if (!s) return NULL;
	s->kv = raft_kv_new();
	s->jobs = job_state_new();
	if (!s->kv || !s->jobs) agent_state_free(&s);
	return s;
}

void agent_state_free(agent_state **sp)
{
	if (!sp || !*sp) return;
	raft_kv_destroy(&(*sp)->kv);
	job_state_free(&(*sp)->jobs);
	free(*sp);
	*sp = NULL;
}

int agent_state_apply(agent_state *s, uint8_t type, const uint8_t *data, size_t len, bool *jobs_changed)
{
	int rc = raft_kv_apply(s->kv, type, data, len);
	if (rc != 1) return rc < 0 ? -1 : 0;
	/* not a key-value entry: the jobs' */
	if (jobs_changed) *jobs_changed = true;
	return job_state_apply(s->jobs, type, data, len) < 0 ? -1 : 0;
}

int agent_state_serialize(const agent_state *s, uint8_t **out, size_t *len)
{
	uint8_t *kv = NULL, *jb = NULL;
	size_t kvl, jbl;
	*out = NULL;
	if (raft_kv_serialize(s->kv, &kv, &kvl) < 0 || job_state_serialize(s->jobs, &jb, &jbl) < 0) {
		free(kv);
		return -1;
	}
	*len = SKSM_HEAD + SKSM_LEN + kvl + SKSM_LEN + jbl;
	uint8_t *b = malloc(*len);
	if (b) {
		uint64_t l1 = kvl, l2 = jbl;
		uint8_t *p = b;
		memcpy(p, SKSM_MAGIC, SKSM_HEAD), p += SKSM_HEAD;
		memcpy(p, &l1, SKSM_LEN), p += SKSM_LEN;
		memcpy(p, kv, kvl), p += kvl;
		memcpy(p, &l2, SKSM_LEN), p += SKSM_LEN;
		memcpy(p, jb, jbl);
	}
	free(kv);
	free(jb);
	*out = b;
	return b ? 0 : -1;
}

int agent_state_restore(agent_state *s, const uint8_t *d, size_t len, char *err, size_t errlen)
{
	if (len < SKSM_HEAD || memcmp(d, SKSM_MAGIC, SKSM_HEAD)) return raft_kv_restore(s->kv, d, len, err, errlen);
	uint64_t l1, l2;
	const size_t h1 = SKSM_HEAD + SKSM_LEN; /* where the key-value bytes start */
	if (len < h1 || (memcpy(&l1, d + SKSM_HEAD, SKSM_LEN), l1 > len - h1) || len - h1 - l1 < SKSM_LEN ||
	    (memcpy(&l2, d + h1 + l1, SKSM_LEN), l2 != len - h1 - l1 - SKSM_LEN)) {
		snprintf(err, errlen, "state snapshot: bad lengths");
		return -1;
	}
	/* jobs first: it checks everything before changing anything */
	job_state *tmp = job_state_new();
	if (!tmp || job_state_restore(tmp, d + h1 + l1 + SKSM_LEN, l2, err, errlen) < 0 ||
	    raft_kv_restore(s->kv, d + h1, l1, err, errlen) < 0) {
		if (!tmp) snprintf(err, errlen, "out of memory");
		job_state_free(&tmp);
		return -1;
	}
	job_state_free(&s->jobs);
	s->jobs = tmp;
	return 0;
}

const raft_kv *agent_state_kv(const agent_state *s) { return s ? s->kv : NULL; }
const job_state *agent_state_jobs(const agent_state *s) { return s ? s->jobs : NULL; }
