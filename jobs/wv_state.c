/* jobs/wv_state: the replicated table of weight updates (see wv_state.h).
 *
 * Follows job_state.c: plain C records above a codec (wv_codec.c), changed
 * only by committed entries, every refusal deterministic and counted.
 * Where it differs: records are grouped per job (jobs sorted by name, so a
 * snapshot's order does not depend on history; each job's records oldest
 * first, so the open one, when there is one, is the last), and a job keeps
 * its highest version begun and latest committed version apart from the
 * records, since those are dropped past WV_KEEP_PER_JOB.  A global index
 * (wv_state_at) is kept as each job's first position, recomputed after every
 * change: changes are a few per update, lookups many. */
#include "jobs/wv_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_text.h"
#include "jobs/wv_codec.h"

typedef struct {
	char name[JOB_NAME_MAX + 1];
	uint64_t max_version, committed;
	wv_update *recs;     /* by version, oldest first; at most WV_KEEP_PER_JOB */
	size_t n, cap;
	size_t first;        /* wv_state_at's index of recs[0] */
} wv_job;

struct wv_state {
	wv_job *jobs;        /* by name */
	size_t n, cap;
	size_t total;        /* records, all jobs */
	uint64_t refused;
};

static const char *const UPDATE_STATES[] = { "preparing", "committed", "aborted" };
const char *const wv_causes[WV_NCAUSES] = { "engine", "member_lost", "sender", "timeout", "superseded" };
static const char *const ENGINE_STATES[] = { "pending", "verified", "failed", "dropped" };
const char *const wv_whys[WV_NWHYS] = {
	"failed",                        /* its own verdict (a checksum, its data path): the head's log says */
	"its node failed", "its process exited", "its process restarted", "the sender could not reach it",
	"root mismatch",
};

unsigned wv_why_code(const char *reason)
{
	if (!reason) return 0;
	for (unsigned i = 1; i < WV_NWHYS - 1; i++)
		if (!strncmp(reason, wv_whys[i], strlen(wv_whys[i]))) return i;
	return strstr(reason, wv_whys[WV_NWHYS - 1]) ? WV_NWHYS - 1 : 0;
}

static bool one_of(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s, list[i])) return true;
	return false;
}

/* ---------------------------------------------------------------- records */

void wv_update_free(wv_update *u)
{
	if (!u) return;
	for (size_t i = 0; u->engines && i < u->nengines; i++) free(u->engines[i].reason);
	free(u->engines);
	free(u->reason);
	u->engines = NULL;
	u->nengines = 0;
	u->reason = NULL;
}

int wv_update_copy(wv_update *dst, const wv_update *src)
{
	*dst = *src;
	dst->engines = NULL;
	dst->nengines = 0;
	if (!(dst->reason = strdup(src->reason ? src->reason : ""))) return -1;
	if (!src->nengines) return 0;
	if (!(dst->engines = calloc(src->nengines, sizeof *dst->engines))) goto fail;
	dst->nengines = src->nengines;
	for (size_t i = 0; i < src->nengines; i++) {
		dst->engines[i] = src->engines[i];
		dst->engines[i].reason = strdup(src->engines[i].reason ? src->engines[i].reason : "");
		if (!dst->engines[i].reason) goto fail;
	}
	return 0;
fail:
	wv_update_free(dst);
	return -1;
}

bool wv_update_open(const wv_update *u) { return !strcmp(u->state, "preparing"); }

wv_timings wv_update_slowest(const wv_update *u)
{
	wv_timings m = u->engines_t;
	for (size_t i = 0; i < u->nengines; i++) {
		const wv_timings *t = &u->engines[i].t;
		if (t->data > m.data) m.data = t->data;
		if (t->hash > m.hash) m.hash = t->hash;
		if (t->journal > m.journal) m.journal = t->journal;
		if (t->undo > m.undo) m.undo = t->undo;
	}
	return m;
}

bool wv_engine_id(const char *job, const char *member, uint32_t *id)
{
	size_t jl = strlen(job);
	if (strncmp(member, job, jl) || strncmp(member + jl, "/engine-", 8)) return false;
	const char *num = member + jl + 8;
	char *end;
	if (*num < '0' || *num > '9' || (num[0] == '0' && num[1])) return false;
	unsigned long v = strtoul(num, &end, 10);
	if (*end || v >= WV_ENGINE_IDS) return false;
	*id = (uint32_t)v;
	return true;
}

const wv_engine *wv_update_engine(const wv_update *u, const char *member)
{
	uint32_t id, mid;
	if (u->compact && wv_engine_id(u->job, member, &id)) {
		/* a compact record's engines are by id */
		size_t lo = 0, hi = u->nengines;
		while (lo < hi) {
			size_t m = lo + (hi - lo) / 2;
			if (!wv_engine_id(u->job, u->engines[m].member, &mid)) break;
			if (mid == id) return &u->engines[m];
			if (mid < id) lo = m + 1;
			else hi = m;
		}
		if (lo >= hi) return NULL;
	}
	for (size_t i = 0; i < u->nengines; i++)
		if (!strcmp(u->engines[i].member, member)) return &u->engines[i];
	return NULL;
}

static bool seconds_ok(double v) { return isfinite(v) && v >= 0; }

static bool timings_ok(const wv_timings *t)
{
	return seconds_ok(t->data) && seconds_ok(t->hash) && seconds_ok(t->journal) && seconds_ok(t->undo);
}

static bool reason_ok(const char *r) { return !r || strlen(r) <= WV_REASON_MAX; }

static int cmp_member(const void *a, const void *b)
{
	return strcmp((*(const wv_engine *const *)a)->member, (*(const wv_engine *const *)b)->member);
}

/* Whether two engines share a member: sorted pointers, so 1024 engines cost
 * ~10^4 comparisons, not 5 * 10^5. */
static int engines_distinct(const wv_update *u, char *err, size_t errlen)
{
	if (u->nengines < 2) return 0;
	const wv_engine **p = malloc(u->nengines * sizeof *p);
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < u->nengines; i++) p[i] = &u->engines[i];
	qsort(p, u->nengines, sizeof *p, cmp_member);
	int rc = 0;
	for (size_t i = 1; i < u->nengines && rc == 0; i++) {
		if (!strcmp(p[i]->member, p[i - 1]->member)) {
			char esc[WV_MEMBER_MAX * 4 + 1];
			snprintf(err, errlen, "engine %s appears twice", sk_text_escape(p[i]->member, esc, sizeof esc));
			rc = -1;
		}
	}
	free(p);
	return rc;
}

int wv_update_check(const wv_update *u, char *err, size_t errlen)
{
	/* the fixed fields may come from a caller: bounded reads only */
	if (!memchr(u->job, 0, sizeof u->job) || !job_name_ok(u->job)) return snprintf(err, errlen, "bad job name"), -1;
	if (u->version == 0) return snprintf(err, errlen, "version 0"), -1;
	if (u->base_version >= u->version)
		return snprintf(err, errlen, "base version %llu is not below version %llu",
				(unsigned long long)u->base_version, (unsigned long long)u->version), -1;
	if (u->bare) {
		/* a measured amendment alone: it may only amend (put) */
		if (!u->measured || u->nengines || !memchr(u->state, 0, sizeof u->state) ||
		    !one_of(u->state, UPDATE_STATES + 1, 2) || !memchr(u->cause, 0, sizeof u->cause) ||
		    !seconds_ok(u->update_seconds) || !seconds_ok(u->commit_seconds))
			return snprintf(err, errlen, "bad amendment"), -1;
		return 0;
	}
	if (!sk_name_ok(u->mode, WV_MODE_MAX) || !memchr(u->mode, 0, sizeof u->mode))
		return snprintf(err, errlen, "bad mode"), -1;
	if (!sk_name_ok(u->sender, WV_MEMBER_MAX) || !memchr(u->sender, 0, sizeof u->sender))
		return snprintf(err, errlen, "bad sender"), -1;
	if (!sk_name_ok(u->sender_node, JOB_NODE_MAX) || !memchr(u->sender_node, 0, sizeof u->sender_node))
		return snprintf(err, errlen, "bad sender node"), -1;
	if (!memchr(u->state, 0, sizeof u->state) || !one_of(u->state, UPDATE_STATES, 3))
		return snprintf(err, errlen, "bad state"), -1;
	if (!reason_ok(u->reason)) return snprintf(err, errlen, "reason longer than %d bytes", WV_REASON_MAX), -1;
	if (!memchr(u->cause, 0, sizeof u->cause) ||
	    (strcmp(u->state, "aborted") ? u->cause[0] != 0 : !one_of(u->cause, wv_causes, WV_NCAUSES)))
		return snprintf(err, errlen, "bad cause: one of wv_causes when aborted, else none"), -1;
	if (!seconds_ok(u->density) || !seconds_ok(u->update_seconds) || !seconds_ok(u->implementation_seconds) ||
	    !seconds_ok(u->prepare_seconds) || !seconds_ok(u->commit_seconds) || !timings_ok(&u->sender_t))
		return snprintf(err, errlen, "a timing or the density is negative or not finite"), -1;
	if (u->measured && wv_update_open(u)) return snprintf(err, errlen, "measured, but not final"), -1;
	if (u->nengines > WV_ENGINES_MAX || (u->nengines && !u->engines))
		return snprintf(err, errlen, "%zu engines, at most %d", u->nengines, WV_ENGINES_MAX), -1;
	bool committed = !strcmp(u->state, "committed");
	for (size_t i = 0; i < u->nengines; i++) {
		const wv_engine *e = &u->engines[i];
		if (!sk_name_ok(e->member, WV_MEMBER_MAX) || !memchr(e->member, 0, sizeof e->member) ||
		    !memchr(e->node, 0, sizeof e->node) || (!(u->compact && !e->node[0]) && !sk_name_ok(e->node, JOB_NODE_MAX)) ||
		    !memchr(e->state, 0, sizeof e->state) || !one_of(e->state, ENGINE_STATES, 4) ||
		    !reason_ok(e->reason) || !seconds_ok(e->seconds) || !timings_ok(&e->t))
			return snprintf(err, errlen, "engine %zu: bad member, node, state, reason or seconds", i), -1;
		/* the safety rule itself: a version commits only when every
		 * participant holds it, or was dropped and will catch up */
		if (committed && strcmp(e->state, "verified") && strcmp(e->state, "dropped"))
			return snprintf(err, errlen, "committed with engine %zu %s", i, e->state), -1;
	}
	return engines_distinct(u, err, errlen);
}

int wv_update_encode(const wv_update *u, uint8_t **out, size_t *len)
{
	return wv_codec_encode(u, out, len);
}

int wv_update_decode(wv_update *u, const uint8_t *d, size_t n, char *err, size_t errlen)
{
	if (wv_codec_decode(u, d, n, err, errlen) < 0) return -1;
	if (wv_update_check(u, err, errlen) < 0) {
		wv_update_free(u);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- the table */

wv_state *wv_state_new(void) { return calloc(1, sizeof(wv_state)); }

static void job_clear(wv_job *j)
{
	for (size_t i = 0; i < j->n; i++) wv_update_free(&j->recs[i]);
	free(j->recs);
	j->recs = NULL;
	j->n = j->cap = 0;
}

static void table_clear(wv_state *s)
{
	for (size_t i = 0; i < s->n; i++) job_clear(&s->jobs[i]);
	free(s->jobs);
	s->jobs = NULL;
	s->n = s->cap = s->total = 0;
}

void wv_state_free(wv_state **sp)
{
	if (!sp || !*sp) return;
	table_clear(*sp);
	free(*sp);
	*sp = NULL;
}

/* The job's index, or -(insertion point) - 1. */
static long find_job(const wv_state *s, const char *name)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(s->jobs[mid].name, name);
		if (c == 0) return (long)mid;
		if (c < 0) lo = mid + 1;
		else hi = mid;
	}
	return -(long)lo - 1;
}

static wv_job *job_get(const wv_state *s, const char *name)
{
	long i = name ? find_job(s, name) : -1;
	return i < 0 ? NULL : &s->jobs[i];
}

static long find_rec(const wv_job *j, uint64_t version)
{
	size_t lo = 0, hi = j->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (j->recs[mid].version == version) return (long)mid;
		if (j->recs[mid].version < version) lo = mid + 1;
		else hi = mid;
	}
	return -(long)lo - 1;
}

static void reindex(wv_state *s)
{
	size_t at = 0;
	for (size_t i = 0; i < s->n; i++) {
		s->jobs[i].first = at;
		at += s->jobs[i].n;
	}
	s->total = at;
}

/* Room for one more job and one more record of a job: allocated before
 * anything changes, so that running out of memory refuses cleanly. */
static int reserve_jobs(wv_state *s)
{
	if (s->n < s->cap) return 0;
	size_t cap = s->cap ? s->cap * 2 : 8;
	wv_job *p = realloc(s->jobs, cap * sizeof *p);
	if (!p) return -1;
	s->jobs = p;
	s->cap = cap;
	return 0;
}

static int reserve_recs(wv_job *j)
{
	if (j->n < j->cap) return 0;
	size_t cap = j->cap ? j->cap * 2 : 4;
	if (cap > WV_KEEP_PER_JOB + 1) cap = WV_KEEP_PER_JOB + 1;
	wv_update *p = realloc(j->recs, cap * sizeof *p);
	if (!p) return -1;
	j->recs = p;
	j->cap = cap;
	return 0;
}

static wv_job *insert_job(wv_state *s, const char *name)
{
	long i = find_job(s, name);
	if (i >= 0) return &s->jobs[i];
	if (s->n >= WV_JOBS_MAX || reserve_jobs(s) < 0) return NULL;
	size_t at = (size_t)(-i - 1);
	memmove(&s->jobs[at + 1], &s->jobs[at], (s->n - at) * sizeof *s->jobs);
	memset(&s->jobs[at], 0, sizeof s->jobs[at]);
	snprintf(s->jobs[at].name, sizeof s->jobs[at].name, "%s", name);
	s->n++;
	return &s->jobs[at];
}

static void remove_job(wv_state *s, wv_job *j)
{
	size_t at = (size_t)(j - s->jobs);
	job_clear(j);
	memmove(&s->jobs[at], &s->jobs[at + 1], (s->n - at - 1) * sizeof *s->jobs);
	s->n--;
}

/* Past WV_KEEP_PER_JOB the oldest closed record goes. */
static void retain(wv_job *j)
{
	for (size_t i = 0; j->n > WV_KEEP_PER_JOB && i < j->n;) {
		if (wv_update_open(&j->recs[i])) { i++; continue; }
		wv_update_free(&j->recs[i]);
		memmove(&j->recs[i], &j->recs[i + 1], (j->n - i - 1) * sizeof *j->recs);
		j->n--;
	}
}

/* A record replacing the open one of its (job, version): the same update
 * going on, ending, or failing. */
static bool may_replace(const wv_update *old, const wv_update *u)
{
	return wv_update_open(old) && old->base_version == u->base_version && !strcmp(old->sender, u->sender) &&
	       (!old->has_root || (u->has_root && !memcmp(old->root, u->root, WV_DIGEST_LEN)));
}

/* The final record's one amendment: the same ending, measured. */
static bool amends(const wv_update *old, const wv_update *u)
{
	return !wv_update_open(old) && !old->measured && u->measured && !strcmp(old->state, u->state);
}

/* Takes u (moved into the table, or freed): 0 applied, -1 refused. */
static int put(wv_state *s, wv_update *u)
{
	wv_job *j = job_get(s, u->job);
	long r = j ? find_rec(j, u->version) : -1;
	if (r >= 0 && amends(&j->recs[r], u)) {
		/* only the figures that end at the final record's commit */
		j->recs[r].update_seconds = u->update_seconds;
		j->recs[r].commit_seconds = u->commit_seconds;
		j->recs[r].measured = true;
		wv_update_free(u);
		return 0;
	}
	if (u->bare) goto refuse; /* an amendment of nothing, or of a record it does not amend */
	if (r >= 0) {
		if (!may_replace(&j->recs[r], u)) goto refuse;
		wv_update_free(&j->recs[r]);
		j->recs[r] = *u;
	} else {
		/* a new update: opened above every version the job had, none open */
		if (!wv_update_open(u) || (j && (u->version <= j->max_version || (j->n && wv_update_open(&j->recs[j->n - 1])))))
			goto refuse;
		if (!j) {
			wv_job *nj = insert_job(s, u->job);
			if (!nj) goto refuse;
			j = nj;
		}
		if (reserve_recs(j) < 0) {
			if (!j->n && !j->max_version) remove_job(s, j); /* the job this call made */
			goto refuse;
		}
		j->recs[j->n++] = *u;
		j->max_version = u->version;
		retain(j);
	}
	if (!strcmp(u->state, "committed") && u->version > j->committed) j->committed = u->version;
	reindex(s);
	return 0;
refuse:
	wv_update_free(u);
	return -1;
}

int wv_state_apply_known(wv_state *s, const uint8_t *data, size_t len, const job_state *jobs)
{
	wv_update u;
	char err[200];
	if (wv_update_decode(&u, data, len, err, sizeof err) == 0) {
		if (!jobs || job_state_get(jobs, u.job)) {
			if (put(s, &u) == 0) return 0;
		} else {
			wv_update_free(&u);
		}
	}
	s->refused++;
	return -1;
}

int wv_state_apply(wv_state *s, const uint8_t *data, size_t len)
{
	return wv_state_apply_known(s, data, len, NULL);
}

uint64_t wv_state_refused(const wv_state *s) { return s->refused; }

void wv_state_forget_job(wv_state *s, const char *job)
{
	wv_job *j = job_get(s, job);
	if (!j) return;
	remove_job(s, j);
	reindex(s);
}

const wv_update *wv_state_get(const wv_state *s, const char *job, uint64_t version)
{
	wv_job *j = job_get(s, job);
	long r = j ? find_rec(j, version) : -1;
	return r < 0 ? NULL : &j->recs[r];
}

const wv_update *wv_state_open(const wv_state *s, const char *job)
{
	const wv_update *u = wv_state_job_at(s, job, 0);
	return u && wv_update_open(u) ? u : NULL;
}

uint64_t wv_state_committed(const wv_state *s, const char *job)
{
	wv_job *j = job_get(s, job);
	return j ? j->committed : 0;
}

uint64_t wv_state_max_version(const wv_state *s, const char *job)
{
	wv_job *j = job_get(s, job);
	return j ? j->max_version : 0;
}

const wv_update *wv_state_job_at(const wv_state *s, const char *job, size_t i)
{
	wv_job *j = job_get(s, job);
	return j && i < j->n ? &j->recs[j->n - 1 - i] : NULL;
}

size_t wv_state_count(const wv_state *s) { return s->total; }

const wv_update *wv_state_at(const wv_state *s, size_t i)
{
	if (i >= s->total) return NULL;
	/* the last job whose first record is at or before i: it holds i (a
	 * job without records shares its first with the next one) */
	size_t lo = 0, hi = s->n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->jobs[mid].first <= i) lo = mid;
		else hi = mid;
	}
	return &s->jobs[lo].recs[i - s->jobs[lo].first];
}

size_t wv_state_jobs(const wv_state *s) { return s->n; }

const char *wv_state_job_name(const wv_state *s, size_t i) { return i < s->n ? s->jobs[i].name : NULL; }

/* ---------------------------------------------------------------- snapshot */

int wv_state_serialize(const wv_state *s, uint8_t **out, size_t *len)
{
	const wv_update **recs = calloc(s->total ? s->total : 1, sizeof *recs);
	wv_jobver *jv = calloc(s->n ? s->n : 1, sizeof *jv);
	int rc = -1;
	*out = NULL;
	if (recs && jv) {
		for (size_t i = 0; i < s->total; i++) recs[i] = wv_state_at(s, i);
		for (size_t i = 0; i < s->n; i++) {
			memcpy(jv[i].job, s->jobs[i].name, sizeof jv[i].job);
			jv[i].max_version = s->jobs[i].max_version;
			jv[i].committed = s->jobs[i].committed;
		}
		rc = wv_codec_snapshot_encode(recs, s->total, jv, s->n, out, len);
	}
	free(recs);
	free(jv);
	return rc;
}

/* The invariants apply keeps, checked on a restored job. */
static int job_consistent(const wv_job *j, char *why, size_t wl)
{
	uint64_t top_committed = 0;
	for (size_t i = 0; i < j->n; i++) {
		if (wv_update_open(&j->recs[i]) && i != j->n - 1)
			return snprintf(why, wl, "version %llu is open but not the newest",
					(unsigned long long)j->recs[i].version), -1;
		if (!strcmp(j->recs[i].state, "committed")) top_committed = j->recs[i].version;
	}
	if (!j->n && !j->max_version) return snprintf(why, wl, "holds nothing"), -1;
	if (j->n && j->recs[j->n - 1].version > j->max_version)
		return snprintf(why, wl, "a record is above its highest version"), -1;
	long c = j->committed ? find_rec(j, j->committed) : -1;
	if (j->committed > j->max_version || j->committed < top_committed ||
	    (c >= 0 && strcmp(j->recs[c].state, "committed")))
		return snprintf(why, wl, "its committed version disagrees with its records"), -1;
	return 0;
}

int wv_state_restore(wv_state *s, const uint8_t *d, size_t n, char *err, size_t errlen)
{
	wv_update *recs;
	wv_jobver *jv;
	size_t nu, nj, moved = 0;
	if (wv_codec_snapshot_decode(d, n, &recs, &nu, &jv, &nj, err, errlen) < 0) return -1;
	wv_state tmp = { 0 };
	char why[200];
	for (size_t i = 0; i < nj; i++) {
		if (!job_name_ok(jv[i].job) || find_job(&tmp, jv[i].job) >= 0) {
			snprintf(err, errlen, "weights snapshot: job %zu: bad name or repeated", i);
			goto fail;
		}
		wv_job *j = insert_job(&tmp, jv[i].job);
		if (!j) {
			snprintf(err, errlen, "weights snapshot: more than %d jobs", WV_JOBS_MAX);
			goto fail;
		}
		j->max_version = jv[i].max_version;
		j->committed = jv[i].committed;
	}
	for (; moved < nu; moved++) {
		wv_update *u = &recs[moved];
		wv_job *j = job_get(&tmp, u->job);
		const char *bad = NULL;
		if (wv_update_check(u, why, sizeof why) < 0) bad = why;
		else if (!j) bad = "its job has no versions";
		else if (find_rec(j, u->version) >= 0) bad = "repeated";
		else if (j->n >= WV_KEEP_PER_JOB) bad = "over the records kept per job";
		else if (reserve_recs(j) < 0) bad = "out of memory";
		if (bad) {
			snprintf(err, errlen, "weights snapshot: update %zu: %s", moved, bad);
			goto fail;
		}
		size_t at = (size_t)(-find_rec(j, u->version) - 1);
		memmove(&j->recs[at + 1], &j->recs[at], (j->n - at) * sizeof *j->recs);
		j->recs[at] = *u;
		j->n++;
	}
	for (size_t i = 0; i < tmp.n; i++) {
		if (job_consistent(&tmp.jobs[i], why, sizeof why) < 0) {
			snprintf(err, errlen, "weights snapshot: job %s: %s", tmp.jobs[i].name, why);
			goto fail;
		}
	}
	free(recs);
	free(jv);
	reindex(&tmp);
	tmp.refused = s->refused;
	table_clear(s);
	*s = tmp;
	return 0;
fail:
	/* records moved into tmp are freed with it; the rest here */
	for (size_t i = moved; i < nu; i++) wv_update_free(&recs[i]);
	free(recs);
	free(jv);
	table_clear(&tmp);
	return -1;
}
