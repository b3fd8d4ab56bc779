/* jobs/job_state: the replicated map of jobs (see job_state.h).
 *
 * Records are unpacked protobuf messages in an array ordered by seq; a few
 * thousand jobs at most, so lookups are linear.  An update replaces the
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
	Skein__Jobs__Job **jobs;
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

static void clear(job_state *js)
{
	for (size_t i = 0; i < js->n; i++) skein__jobs__job__free_unpacked(js->jobs[i], NULL);
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
		if (!strcmp(js->jobs[i]->spec->name, name)) return (long)i;
	return -1;
}

/* A record every replica accepts: a valid spec with a name, a known state. */
static Skein__Jobs__Job *decode_job(const uint8_t *data, size_t len)
{
	Skein__Jobs__Job *j = skein__jobs__job__unpack(NULL, len, data);
	if (!j) return NULL;
	job_spec s;
	char err[256];
	static const char *const states[] = { "pending", "running", "stopping", "stopped", "failed", "completed" };
	bool state_ok = false;
	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) state_ok |= !strcmp(j->state, states[i]);
	if (!state_ok || !j->spec || job_spec_from_pb(&s, j->spec, err, sizeof err) < 0 || !job_name_ok(s.name) ||
	    job_spec_validate(&s, err, sizeof err) < 0 ||
	    (j->layout && j->layout->n_slots && j->layout->n_slots != job_spec_slots(&s))) {
		skein__jobs__job__free_unpacked(j, NULL);
		return NULL;
	}
	return j;
}

static int insert(job_state *js, Skein__Jobs__Job *j)
{
	if (js->n == js->cap) {
		size_t cap = js->cap ? js->cap * 2 : 16;
		Skein__Jobs__Job **p = realloc(js->jobs, cap * sizeof *p);
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
	Skein__Jobs__Drain *d = skein__jobs__drain__unpack(NULL, len, data);
	int rc = -1;
	if (!d || !d->node[0] || strlen(d->node) > JOB_NODE_MAX) goto out;
	long i = find_drained(js, d->node);
	if (!d->on) {
		if (i < 0) goto out;
		memmove(&js->dr[i], &js->dr[i + 1], (js->ndr - (size_t)i - 1) * sizeof *js->dr);
		js->ndr--;
		rc = 0;
		goto out;
	}
	if (i >= 0) { rc = 0; goto out; } /* drained already: the first time stays */
	if (!js->dr && !(js->dr = calloc(JOB_STATE_DRAINED_MAX, sizeof *js->dr))) goto out;
	if (js->ndr >= JOB_STATE_DRAINED_MAX) goto out;
	snprintf(js->dr[js->ndr].node, sizeof js->dr[js->ndr].node, "%s", d->node);
	js->dr[js->ndr++].since_ms = d->since_ms;
	rc = 0;
out:
	if (d) skein__jobs__drain__free_unpacked(d, NULL);
	return rc;
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
	Skein__Jobs__Drain d = SKEIN__JOBS__DRAIN__INIT;
	d.node = (char *)node;
	d.on = on;
	d.since_ms = since_ms;
	*len = skein__jobs__drain__get_packed_size(&d);
	*out = malloc(*len ? *len : 1);
	if (!*out) return -1;
	skein__jobs__drain__pack(&d, *out);
	return 0;
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
		skein__jobs__job__free_unpacked(js->jobs[i], NULL);
		memmove(&js->jobs[i], &js->jobs[i + 1], (js->n - (size_t)i - 1) * sizeof *js->jobs);
		js->n--;
		return 0;
	}
	Skein__Jobs__Job *j = decode_job(data, len);
	if (!j) goto refuse;
	long i = find(js, j->spec->name);
	if (type == JOB_ENTRY_SUBMIT) {
		if (i >= 0 || js->n >= JOB_STATE_JOBS_MAX || insert(js, j) < 0) {
			skein__jobs__job__free_unpacked(j, NULL);
			goto refuse;
		}
		return 0;
	}
	/* compare-and-set: the head builds an update on the record it saw; a
	 * second update built on the same record (a stop racing a restart) loses */
	if (i < 0 || j->seq != js->jobs[i]->seq || j->version != js->jobs[i]->version + 1) {
		skein__jobs__job__free_unpacked(j, NULL);
		goto refuse;
	}
	skein__jobs__job__free_unpacked(js->jobs[i], NULL);
	js->jobs[i] = j;
	return 0;
refuse:
	js->refused++;
	return -1;
}

uint64_t job_state_refused(const job_state *js) { return js->refused; }
size_t job_state_count(const job_state *js) { return js->n; }
uint64_t job_state_next_seq(const job_state *js) { return js->max_seq + 1; }

const Skein__Jobs__Job *job_state_at(const job_state *js, size_t i)
{
	return i < js->n ? js->jobs[i] : NULL;
}

const Skein__Jobs__Job *job_state_get(const job_state *js, const char *name)
{
	long i = find(js, name);
	return i < 0 ? NULL : js->jobs[i];
}

int job_state_encode(const Skein__Jobs__Job *j, uint8_t **out, size_t *len)
{
	*len = skein__jobs__job__get_packed_size(j);
	*out = malloc(*len ? *len : 1);
	if (!*out) return -1;
	skein__jobs__job__pack(j, *out);
	return 0;
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
	size_t total = 9;
	for (size_t i = 0; i < js->n; i++) total += 4 + skein__jobs__job__get_packed_size(js->jobs[i]);
	uint8_t **dp = NULL;
	size_t *dl = NULL;
	if (js->ndr) {
		dp = calloc(js->ndr, sizeof *dp);
		dl = calloc(js->ndr, sizeof *dl);
		bool ok = dp && dl;
		for (size_t i = 0; ok && i < js->ndr; i++) {
			ok = job_state_encode_drain(js->dr[i].node, true, js->dr[i].since_ms, &dp[i], &dl[i]) == 0;
			total += 4 + dl[i];
		}
		total += 4;
		if (!ok) { total = 0; goto done; }
	}
	uint8_t *b = malloc(total), *p = b;
	if (!b) { total = 0; goto done; }
	memcpy(p, "SKJB", 4);
	p[4] = js->ndr ? 2 : 1;
	put32(p + 5, (uint32_t)js->n);
	p += 9;
	for (size_t i = 0; i < js->n; i++) {
		size_t n = skein__jobs__job__pack(js->jobs[i], p + 4);
		put32(p, (uint32_t)n);
		p += 4 + n;
	}
	if (js->ndr) {
		put32(p, (uint32_t)js->ndr);
		p += 4;
		for (size_t i = 0; i < js->ndr; i++) {
			put32(p, (uint32_t)dl[i]);
			memcpy(p + 4, dp[i], dl[i]);
			p += 4 + dl[i];
		}
	}
	*out = b;
done:
	for (size_t i = 0; dp && i < js->ndr; i++) free(dp[i]);
	free(dp);
	free(dl);
	if (!total) return -1;
	*len = total;
	return 0;
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
		Skein__Jobs__Job *j = decode_job(data + off + 4, l);
		if (!j || find(&tmp, j->spec->name) >= 0 || insert(&tmp, j) < 0) {
			if (j) skein__jobs__job__free_unpacked(j, NULL);
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
