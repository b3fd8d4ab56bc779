/* agent/agent_state: the replicated state machine (kv + jobs + weight
 * updates), pure.
 *
 * Split out of agent_head.c so that the election wiring and the machine it
 * replicates are read apart: this file knows raft_kv, job_state and
 * update_state and nothing of raft, the loop or the agent.  It never calls out;
 * what changed goes back to the caller as return values (agent_state_apply's
 * *changed), and the caller decides whom to tell.  The one rule across
 * parts lives here: a job's delete forgets its weight updates, and a weight
 * update of a job not held is refused (else a begin committed after the
 * delete would stay forever).
 *
 * Snapshot format ("SKSM"): the bytes "SKSM", u8 version, then its sections,
 * each as a u64 length (host order, as raft's own files) followed by its
 * bytes: version 1 the key-value and the jobs snapshots, version 2 those and
 * the weight updates' (jobs/update_state.h).  Version 1 is still written while
 * the weight table is empty, so that voters of the previous release read
 * the snapshots of a mixed cluster until the first update.  Anything not
 * starting with the magic is read as a bare key-value snapshot. */
#include "agent/agent_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t SKSM_MAGIC[4] = { 'S', 'K', 'S', 'M' };
enum { SKSM_HEAD = 5, SKSM_LEN = 8, SKSM_SECTIONS_MAX = 3 };

struct agent_state {
	raft_kv *kv;
	job_state *jobs;
	update_state *wv;
};

agent_state *agent_state_new(void)
{
	agent_state *s = calloc(1, sizeof *s);
	if (!s) return NULL;
	s->kv = raft_kv_new();
	s->jobs = job_state_new();
	s->wv = update_state_new();
	if (!s->kv || !s->jobs || !s->wv) agent_state_free(&s);
	return s;
}

void agent_state_free(agent_state **sp)
{
	if (!sp || !*sp) return;
	raft_kv_destroy(&(*sp)->kv);
	job_state_free(&(*sp)->jobs);
	update_state_free(&(*sp)->wv);
	free(*sp);
	*sp = NULL;
}

int agent_state_apply(agent_state *s, uint8_t type, const uint8_t *data, size_t len, unsigned *changed)
{
	unsigned dummy;
	if (!changed) changed = &dummy;
	int rc = raft_kv_apply(s->kv, type, data, len);
	if (rc != 1) return rc < 0 ? -1 : 0;
	if (type == UPDATE_ENTRY_PUT) {
		*changed |= AGENT_STATE_WV;
		return update_state_apply_known(s->wv, data, len, s->jobs);
	}
	rc = job_state_apply(s->jobs, type, data, len);
	if (rc == 1) return 0; /* nobody's type: ignored, as before */
	*changed |= AGENT_STATE_JOBS;
	if (rc == 0 && type == JOB_ENTRY_DELETE) {
		/* applied: data is the job's name, 1..JOB_NAME_MAX bytes, no NUL */
		char name[JOB_NAME_MAX + 1];
		memcpy(name, data, len);
		name[len] = 0;
		if (update_state_max_version(s->wv, name)) {
			update_state_forget_job(s->wv, name);
			*changed |= AGENT_STATE_WV;
		}
	}
	return rc;
}

int agent_state_serialize(const agent_state *s, uint8_t **out, size_t *len)
{
	uint8_t *sec[SKSM_SECTIONS_MAX] = { 0 };
	size_t sl[SKSM_SECTIONS_MAX] = { 0 };
	size_t nsec = update_state_jobs(s->wv) ? 3 : 2;
	int rc = -1;
	*out = NULL;
	if (raft_kv_serialize(s->kv, &sec[0], &sl[0]) < 0 || job_state_serialize(s->jobs, &sec[1], &sl[1]) < 0 ||
	    (nsec == 3 && update_state_serialize(s->wv, &sec[2], &sl[2]) < 0))
		goto out;
	*len = SKSM_HEAD;
	for (size_t i = 0; i < nsec; i++) *len += SKSM_LEN + sl[i];
	uint8_t *b = malloc(*len), *p = b;
	if (!b) goto out;
	memcpy(p, SKSM_MAGIC, 4);
	p[4] = (uint8_t)(nsec - 1);
	p += SKSM_HEAD;
	for (size_t i = 0; i < nsec; i++) {
		uint64_t l = sl[i];
		memcpy(p, &l, SKSM_LEN);
		memcpy(p + SKSM_LEN, sec[i], sl[i]);
		p += SKSM_LEN + sl[i];
	}
	*out = b;
	rc = 0;
out:
	for (size_t i = 0; i < SKSM_SECTIONS_MAX; i++) free(sec[i]);
	return rc;
}

int agent_state_restore(agent_state *s, const uint8_t *d, size_t len, char *err, size_t errlen)
{
	if (len < SKSM_HEAD || memcmp(d, SKSM_MAGIC, 4)) return raft_kv_restore(s->kv, d, len, err, errlen);
	if (d[4] != 1 && d[4] != 2) {
		snprintf(err, errlen, "state snapshot: version %u unknown", d[4]);
		return -1;
	}
	/* the sections: each length within what is left, and nothing after the last */
	size_t nsec = (size_t)d[4] + 1, off = SKSM_HEAD;
	const uint8_t *sec[SKSM_SECTIONS_MAX] = { 0 };
	size_t sl[SKSM_SECTIONS_MAX] = { 0 };
	for (size_t i = 0; i < nsec; i++) {
		uint64_t l;
		if (len - off < SKSM_LEN || (memcpy(&l, d + off, SKSM_LEN), l > len - off - SKSM_LEN)) {
			snprintf(err, errlen, "state snapshot: bad lengths");
			return -1;
		}
		sec[i] = d + off + SKSM_LEN;
		sl[i] = (size_t)l;
		off += SKSM_LEN + sl[i];
	}
	if (off != len) {
		snprintf(err, errlen, "state snapshot: bad lengths");
		return -1;
	}
	/* jobs and weight updates into fresh tables, the map last: each checks
	 * everything before it changes anything */
	job_state *jobs = job_state_new();
	update_state *wv = update_state_new();
	int rc = -1;
	if (!jobs || !wv) snprintf(err, errlen, "out of memory");
	else if (job_state_restore(jobs, sec[1], sl[1], err, errlen) == 0 &&
		 (nsec < 3 || update_state_restore(wv, sec[2], sl[2], err, errlen) == 0) &&
		 raft_kv_restore(s->kv, sec[0], sl[0], err, errlen) == 0) {
		job_state_free(&s->jobs);
		update_state_free(&s->wv);
		s->jobs = jobs;
		s->wv = wv;
		jobs = NULL;
		wv = NULL;
		rc = 0;
	}
	job_state_free(&jobs);
	update_state_free(&wv);
	return rc;
}

const raft_kv *agent_state_kv(const agent_state *s) { return s ? s->kv : NULL; }
const job_state *agent_state_jobs(const agent_state *s) { return s ? s->jobs : NULL; }
const update_state *agent_state_wv(const agent_state *s) { return s ? s->wv : NULL; }
