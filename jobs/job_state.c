/* jobs/job_state: the replicated map of jobs (see job_state.h).
 *
 * Records are plain C (job_rec, jobs/job_model.h; job_codec.c reads and
 * writes the bytes) in an array ordered by seq; a few thousand jobs at
 * most, so lookups are linear.  An update replaces the
 * whole record: the head sends what it computed, and replicas never derive
 * placement themselves (their membership views differ; the log does not). */
#include "jobs/job_state.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "jobs/job_codec.h"
#include "jobs/job_spec.h"

typedef struct {
	char node[JOB_NODE_MAX + 1];
	uint64_t since_ms;
} drained;

struct job_state {
	job_rec **jobs;
	size_t n, cap;
	drained *dr;              /* JOB_STATE_DRAINED_MAX, allocated on the first drain */
	size_t ndr;
	uint64_t refused;
	uint64_t max_seq;
};

job_state *job_state_new(void)
{
	return calloc(1, sizeof(job_state));
}

static void rec_free(job_rec *r)
{
	if (!r) return;
	job_rec_free(r);
	free(r);
}

static void clear(job_state *js)
{
	for (size_t i = 0; i < js->n; i++) rec_free(js->jobs[i]);
	js->n = 0;
}

void job_state_free(job_state **pjs)
{
	job_state *js = *pjs;
	if (!js) return;
	clear(js);
	free(js->jobs);
	free(js->dr);
	free(js);
	*pjs = NULL;
}

static long find(const job_state *js, const char *name)
{
	for (size_t i = 0; i < js->n; i++)
		if (!strcmp(js->jobs[i]->spec.name, name)) return (long)i;
	return -1;
}

/* A record every replica accepts: a valid spec with a name, a known state,
 * a layout of the spec's slots (or none). */
static job_rec *decode_job(const uint8_t *data, size_t len)
{
	job_rec *j = malloc(sizeof *j);
	if (!j) return NULL;
	if (job_codec_decode(j, data, len) < 0) {
		free(j);
		return NULL;
	}
	job_spec s = j->spec;
	char err[256];
	static const char *const states[] = { "pending", "running", "stopping", "stopped", "failed", "completed" };
	bool state_ok = false;
	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) state_ok |= !strcmp(j->state, states[i]);
	if (!state_ok || !job_name_ok(s.name) || job_spec_validate(&s, err, sizeof err) < 0 ||
	    (j->has_layout && j->layout.n && j->layout.n != job_spec_slots(&s))) {
		rec_free(j);
		return NULL;
	}
	return j;
}

static int insert(job_state *js, job_rec *j)
{
	if (js->n == js->cap) {
		size_t cap = js->cap ? js->cap * 2 : 16;
		job_rec **p = realloc(js->jobs, cap * sizeof *p);
		if (!p) return -1;
		js->jobs = p;
		js->cap = cap;
	}
	size_t i = js->n;
	while (i > 0 && js->jobs[i - 1]->seq > j->seq) {
		js->jobs[i] = js->jobs[i - 1];
		i--;
	}
	js->jobs[i] = j;
	js->n++;
	if (j->seq > js->max_seq) js->max_seq = j->seq;
	return 0;
}

static long find_drained(const job_state *js, const char *node)
{
	for (size_t i = 0; i < js->ndr; i++)
		if (!strcmp(js->dr[i].node, node)) return (long)i;
	return -1;
}

/* 0 applied, -1 refused (bad bytes, full, or an undrain of a node not drained). */
static int apply_drain(job_state *js, const uint8_t *data, size_t len)
{
	char node[JOB_NODE_MAX + 1];
	bool on;
	uint64_t since_ms;
	if (job_codec_drain_decode(data, len, node, &on, &since_ms) < 0) return -1;
	long i = find_drained(js, node);
	if (!on) {
		if (i < 0) return -1;
		memmove(&js->dr[i], &js->dr[i + 1], (js->ndr - (size_t)i - 1) * sizeof *js->dr);
		js->ndr--;
		return 0;
	}
	if (i >= 0) return 0; /* drained already: the first time stays */
	if (!js->dr && !(js->dr = calloc(JOB_STATE_DRAINED_MAX, sizeof *js->dr))) return -1;
	if (js->ndr >= JOB_STATE_DRAINED_MAX) return -1;
	snprintf(js->dr[js->ndr].node, sizeof js->dr[js->ndr].node, "%s", node);
	js->dr[js->ndr++].since_ms = since_ms;
	return 0;
}

size_t job_state_drained_count(const job_state *js) { return js->ndr; }

const char *job_state_drained_at(const job_state *js, size_t i, uint64_t *since_ms)
{
	if (i >= js->ndr) return NULL;
	if (since_ms) *since_ms = js->dr[i].since_ms;
	return js->dr[i].node;
}

bool job_state_is_drained(const job_state *js, const char *node)
{
	return find_drained(js, node) >= 0;
}

int job_state_encode_drain(const char *node, bool on, uint64_t since_ms, uint8_t **out, size_t *len)
{
	return job_codec_drain_encode(node, on, since_ms, out, len);
}

int job_state_apply(job_state *js, uint8_t type, const uint8_t *data, size_t len)
{
	if (type == JOB_ENTRY_DRAIN) {
		if (apply_drain(js, data, len) == 0) return 0;
		js->refused++;
		return -1;
	}
	if (type < JOB_ENTRY_SUBMIT || type > JOB_ENTRY_DELETE) return 1;
	if (type == JOB_ENTRY_DELETE) {
		char name[JOB_NAME_MAX + 1];
		long i;
		/* a name holds no NUL: "a\0x" must not delete "a" */
		if (len == 0 || len > JOB_NAME_MAX || memchr(data, 0, len)) goto refuse;
		memcpy(name, data, len);
		name[len] = 0;
		if ((i = find(js, name)) < 0) goto refuse;
		rec_free(js->jobs[i]);
		memmove(&js->jobs[i], &js->jobs[i + 1], (js->n - (size_t)i - 1) * sizeof *js->jobs);
		js->n--;
		return 0;
	}
	job_rec *j = decode_job(data, len);
	if (!j) goto refuse;
	long i = find(js, j->spec.name);
	if (type == JOB_ENTRY_SUBMIT) {
		if (i >= 0 || js->n >= JOB_STATE_JOBS_MAX || insert(js, j) < 0) {
			rec_free(j);
			goto refuse;
		}
		return 0;
	}
	/* compare-and-set: the head builds an update on the record it saw; a
	 * second update built on the same record (a stop racing a restart) loses */
	if (i < 0 || j->seq != js->jobs[i]->seq || j->version != js->jobs[i]->version + 1) {
		rec_free(j);
		goto refuse;
	}
	rec_free(js->jobs[i]);
	js->jobs[i] = j;
	return 0;
refuse:
	js->refused++;
	return -1;
}

uint64_t job_state_refused(const job_state *js) { return js->refused; }
size_t job_state_count(const job_state *js) { return js->n; }
uint64_t job_state_next_seq(const job_state *js) { return js->max_seq + 1; }

const job_rec *job_state_at(const job_state *js, size_t i)
{
	return i < js->n ? js->jobs[i] : NULL;
}

const job_rec *job_state_get(const job_state *js, const char *name)
{
	long i = find(js, name);
	return i < 0 ? NULL : js->jobs[i];
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int job_state_serialize(const job_state *js, uint8_t **out, size_t *len)
{
	/* every job, then every drained node, packed first: then one buffer */
	size_t m = js->n + js->ndr, total = 9 + (js->ndr ? 4 : 0);
	uint8_t **ep = calloc(m ? m : 1, sizeof *ep);
	size_t *el = calloc(m ? m : 1, sizeof *el);
	bool ok = ep && el;
	for (size_t i = 0; ok && i < m; i++) {
		ok = (i < js->n ? job_codec_encode(js->jobs[i], &ep[i], &el[i])
				: job_codec_drain_encode(js->dr[i - js->n].node, true, js->dr[i - js->n].since_ms, &ep[i],
							 &el[i])) == 0;
		if (ok) total += 4 + el[i];
	}
	uint8_t *b = ok ? malloc(total) : NULL, *p = b;
	if (b) {
		memcpy(p, "SKJB", 4);
		p[4] = js->ndr ? 2 : 1;
		put32(p + 5, (uint32_t)js->n);
		p += 9;
		for (size_t i = 0; i < m; i++) {
			if (i == js->n) {
				put32(p, (uint32_t)js->ndr);
				p += 4;
			}
			put32(p, (uint32_t)el[i]);
			memcpy(p + 4, ep[i], el[i]);
			p += 4 + el[i];
		}
		*out = b;
		*len = total;
	}
	for (size_t i = 0; ep && i < m; i++) free(ep[i]);
	free(ep);
	free(el);
	return b ? 0 : -1;
}

int job_state_restore(job_state *js, const uint8_t *data, size_t len, char *err, size_t errlen)
{
	if (len < 9 || memcmp(data, "SKJB", 4) || (data[4] != 1 && data[4] != 2)) {
		snprintf(err, errlen, "jobs snapshot: bad header");
		return -1;
	}
	job_state tmp = { 0 };
	uint32_t n = get32(data + 5);
	size_t off = 9;
	for (uint32_t i = 0; i < n; i++) {
		if (len - off < 4 || get32(data + off) > len - off - 4) {
			snprintf(err, errlen, "jobs snapshot: truncated at job %u", i);
			goto fail;
		}
		uint32_t l = get32(data + off);
		job_rec *j = decode_job(data + off + 4, l);
		if (!j || find(&tmp, j->spec.name) >= 0 || insert(&tmp, j) < 0) {
			rec_free(j);
			snprintf(err, errlen, "jobs snapshot: job %u unreadable or repeated", i);
			goto fail;
		}
		off += 4 + l;
	}
	if (data[4] == 2) {
		uint32_t nd = len - off >= 4 ? get32(data + off) : UINT32_MAX;
		off += 4;
		for (uint32_t i = 0; nd != UINT32_MAX && i < nd; i++) {
			uint32_t l;
			if (off > len || len - off < 4 || (l = get32(data + off)) > len - off - 4 ||
			    apply_drain(&tmp, data + off + 4, l) < 0) {
				snprintf(err, errlen, "jobs snapshot: drained node %u unreadable", i);
				goto fail;
			}
			off += 4 + l;
		}
		if (nd == UINT32_MAX) { snprintf(err, errlen, "jobs snapshot: truncated before the drained nodes"); goto fail; }
	}
	if (off != len) {
		snprintf(err, errlen, "jobs snapshot: %zu trailing bytes", len - off);
		goto fail;
	}
	clear(js);
	free(js->jobs);
	free(js->dr);
	tmp.refused = js->refused;
	*js = tmp;
	return 0;
fail:
	clear(&tmp);
	free(tmp.jobs);
	free(tmp.dr);
	return -1;
}
