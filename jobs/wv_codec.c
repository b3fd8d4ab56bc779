/* jobs/wv_codec: the one file of jobs/ that sees proto/weights.pb-c.h for
 * the table of weight updates (see wv_codec.h).
 *
 * Encoding points protobuf-c's char * fields into the caller's record
 * (packing only reads them); each record's engines get one array of
 * messages and one of pointers.  Decoding copies out and checks only what
 * the C fields need: a string that fits, a digest of 0 or 16 bytes, at most
 * WV_ENGINES_MAX engines (checked before anything is allocated for them). */
#include "jobs/wv_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/weights.pb-c.h"

/* Whether a fixed field holds its NUL (a record built by hand may not). */
#define FITS(field) (memchr((field), 0, sizeof(field)) != NULL)

/* The messages of one record while it is packed: the sender's timings are
 * times[0], engine i's times[i + 1]. */
typedef struct {
	Skein__Weights__Update pb;
	Skein__Weights__Engine *eng;
	Skein__Weights__Engine **engp;
	Skein__Weights__Timings *times;
} pb_rec;

static void pb_rec_free(pb_rec *r)
{
	free(r->eng);
	free(r->engp);
	free(r->times);
	r->eng = NULL;
	r->engp = NULL;
	r->times = NULL;
}

static bool timings_zero(const wv_timings *t)
{
	return t->data == 0 && t->hash == 0 && t->journal == 0 && t->undo == 0;
}

/* t into pb (a zero split is left out: old readers and small records) */
static Skein__Weights__Timings *timings_to_pb(const wv_timings *t, Skein__Weights__Timings *pb)
{
	if (timings_zero(t)) return NULL;
	skein__weights__timings__init(pb);
	pb->data_seconds = t->data;
	pb->hash_seconds = t->hash;
	pb->journal_seconds = t->journal;
	pb->undo_seconds = t->undo;
	return pb;
}

static void timings_from_pb(wv_timings *t, const Skein__Weights__Timings *pb)
{
	*t = pb ? (wv_timings){ pb->data_seconds, pb->hash_seconds, pb->journal_seconds, pb->undo_seconds }
		: (wv_timings){ 0 };
}

static char *str_or_empty(const char *s) { return (char *)(s ? s : ""); }

/* r->pb points into u; -1 when a field lacks its NUL or memory runs out. */
static int pb_rec_fill(pb_rec *r, const wv_update *u)
{
	memset(r, 0, sizeof *r);
	if (!FITS(u->job) || !FITS(u->mode) || !FITS(u->sender) || !FITS(u->sender_node) || !FITS(u->state) ||
	    (u->nengines && !u->engines))
		return -1;
	Skein__Weights__Update *p = &r->pb;
	skein__weights__update__init(p);
	p->job = (char *)u->job;
	p->version = u->version;
	p->base_version = u->base_version;
	p->mode = (char *)u->mode;
	if (u->has_digest) {
		p->digest.data = (uint8_t *)u->digest;
		p->digest.len = WV_DIGEST_LEN;
	}
	p->bytes = u->bytes;
	p->tensors = u->tensors;
	p->sender = (char *)u->sender;
	p->sender_node = (char *)u->sender_node;
	p->state = (char *)u->state;
	p->reason = str_or_empty(u->reason);
	p->cause = (char *)u->cause;
	p->started_ms = u->started_ms;
	p->finished_ms = u->finished_ms;
	p->wire_bytes = u->wire_bytes;
	p->density = u->density;
	p->update_seconds = u->update_seconds;
	p->implementation_seconds = u->implementation_seconds;
	p->prepare_seconds = u->prepare_seconds;
	p->commit_seconds = u->commit_seconds;
	p->measured = u->measured;
	if (u->has_root) {
		p->root.data = (uint8_t *)u->root;
		p->root.len = WV_DIGEST_LEN;
	}
	if (u->has_nonce) {
		p->nonce.data = (uint8_t *)u->nonce;
		p->nonce.len = WV_NONCE_LEN;
	}
	if (!(r->times = calloc(u->nengines + 1, sizeof *r->times))) goto fail;
	p->sender_timings = timings_to_pb(&u->sender_t, &r->times[0]);
	if (!u->nengines) return 0;
	r->eng = calloc(u->nengines, sizeof *r->eng);
	r->engp = calloc(u->nengines, sizeof *r->engp);
	if (!r->eng || !r->engp) goto fail;
	for (size_t i = 0; i < u->nengines; i++) {
		const wv_engine *e = &u->engines[i];
		if (!FITS(e->member) || !FITS(e->node) || !FITS(e->state)) goto fail;
		skein__weights__engine__init(&r->eng[i]);
		r->eng[i].member = (char *)e->member;
		r->eng[i].node = (char *)e->node;
		r->eng[i].state = (char *)e->state;
		r->eng[i].reason = str_or_empty(e->reason);
		r->eng[i].seconds = e->seconds;
		r->eng[i].timings = timings_to_pb(&e->t, &r->times[i + 1]);
		r->engp[i] = &r->eng[i];
	}
	p->n_engines = u->nengines;
	p->engines = r->engp;
	return 0;
fail:
	pb_rec_free(r);
	return -1;
}

int wv_codec_encode(const wv_update *u, uint8_t **out, size_t *len)
{
	pb_rec r;
	*out = NULL;
	if (pb_rec_fill(&r, u) < 0) return -1;
	*len = skein__weights__update__get_packed_size(&r.pb);
	*out = malloc(*len ? *len : 1);
	if (*out) skein__weights__update__pack(&r.pb, *out);
	pb_rec_free(&r);
	return *out ? 0 : -1;
}

/* Copies src into a fixed field of cap bytes; -1 with err when it does not fit. */
static int copy_str(char *dst, size_t cap, const char *src, const char *what, char *err, size_t errlen)
{
	size_t n = src ? strlen(src) : 0;
	if (n >= cap) {
		snprintf(err, errlen, "%s: %zu bytes, at most %zu", what, n, cap - 1);
		return -1;
	}
	memcpy(dst, src ? src : "", n);
	dst[n] = 0;
	return 0;
}

static int from_pb(wv_update *u, const Skein__Weights__Update *p, char *err, size_t errlen)
{
	memset(u, 0, sizeof *u);
	if (copy_str(u->job, sizeof u->job, p->job, "job", err, errlen) < 0 ||
	    copy_str(u->mode, sizeof u->mode, p->mode, "mode", err, errlen) < 0 ||
	    copy_str(u->sender, sizeof u->sender, p->sender, "sender", err, errlen) < 0 ||
	    copy_str(u->sender_node, sizeof u->sender_node, p->sender_node, "sender_node", err, errlen) < 0 ||
	    copy_str(u->state, sizeof u->state, p->state, "state", err, errlen) < 0 ||
	    copy_str(u->cause, sizeof u->cause, p->cause, "cause", err, errlen) < 0)
		return -1;
	if (p->digest.len != 0 && p->digest.len != WV_DIGEST_LEN) {
		snprintf(err, errlen, "digest: %zu bytes, not 0 or %d", p->digest.len, WV_DIGEST_LEN);
		return -1;
	}
	if (p->root.len != 0 && p->root.len != WV_DIGEST_LEN) {
		snprintf(err, errlen, "root: %zu bytes, not 0 or %d", p->root.len, WV_DIGEST_LEN);
		return -1;
	}
	if (p->nonce.len != 0 && p->nonce.len != WV_NONCE_LEN) {
		snprintf(err, errlen, "nonce: %zu bytes, not 0 or %d", p->nonce.len, WV_NONCE_LEN);
		return -1;
	}
	if (p->n_engines > WV_ENGINES_MAX) {
		snprintf(err, errlen, "%zu engines, at most %d", p->n_engines, WV_ENGINES_MAX);
		return -1;
	}
	u->has_digest = p->digest.len == WV_DIGEST_LEN;
	if (u->has_digest) memcpy(u->digest, p->digest.data, WV_DIGEST_LEN);
	u->version = p->version;
	u->base_version = p->base_version;
	u->bytes = p->bytes;
	u->tensors = p->tensors;
	u->started_ms = p->started_ms;
	u->finished_ms = p->finished_ms;
	u->wire_bytes = p->wire_bytes;
	u->density = p->density;
	u->update_seconds = p->update_seconds;
	u->implementation_seconds = p->implementation_seconds;
	u->prepare_seconds = p->prepare_seconds;
	u->commit_seconds = p->commit_seconds;
	u->measured = p->measured;
	u->has_root = p->root.len == WV_DIGEST_LEN;
	if (u->has_root) memcpy(u->root, p->root.data, WV_DIGEST_LEN);
	u->has_nonce = p->nonce.len == WV_NONCE_LEN;
	if (u->has_nonce) memcpy(u->nonce, p->nonce.data, WV_NONCE_LEN);
	timings_from_pb(&u->sender_t, p->sender_timings);
	u->reason = strdup(p->reason ? p->reason : "");
	if (!u->reason) goto oom;
	if (!p->n_engines) return 0;
	u->engines = calloc(p->n_engines, sizeof *u->engines);
	if (!u->engines) goto oom;
	u->nengines = p->n_engines;
	for (size_t i = 0; i < p->n_engines; i++) {
		const Skein__Weights__Engine *pe = p->engines[i];
		wv_engine *e = &u->engines[i];
		char what[32];
		snprintf(what, sizeof what, "engine %zu", i);
		if (copy_str(e->member, sizeof e->member, pe->member, what, err, errlen) < 0 ||
		    copy_str(e->node, sizeof e->node, pe->node, what, err, errlen) < 0 ||
		    copy_str(e->state, sizeof e->state, pe->state, what, err, errlen) < 0)
			return -1;
		e->seconds = pe->seconds;
		timings_from_pb(&e->t, pe->timings);
		if (!(e->reason = strdup(pe->reason ? pe->reason : ""))) goto oom;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

int wv_codec_decode(wv_update *u, const uint8_t *d, size_t n, char *err, size_t errlen)
{
	Skein__Weights__Update *p = skein__weights__update__unpack(NULL, n, d);
	if (!p) {
		memset(u, 0, sizeof *u);
		snprintf(err, errlen, "not a packed Update");
		return -1;
	}
	int rc = from_pb(u, p, err, errlen);
	skein__weights__update__free_unpacked(p, NULL);
	if (rc < 0) wv_update_free(u);
	return rc;
}

int wv_codec_snapshot_encode(const wv_update *const *u, size_t nu, const wv_jobver *jv, size_t nj, uint8_t **out,
			     size_t *len)
{
	Skein__Weights__Snapshot snap = SKEIN__WEIGHTS__SNAPSHOT__INIT;
	pb_rec *recs = calloc(nu ? nu : 1, sizeof *recs);
	Skein__Weights__Update **up = calloc(nu ? nu : 1, sizeof *up);
	Skein__Weights__JobVersions *jobs = calloc(nj ? nj : 1, sizeof *jobs);
	Skein__Weights__JobVersions **jp = calloc(nj ? nj : 1, sizeof *jp);
	size_t filled = 0;
	*out = NULL;
	if (!recs || !up || !jobs || !jp) goto out;
	for (; filled < nu; filled++) {
		if (pb_rec_fill(&recs[filled], u[filled]) < 0) goto out;
		up[filled] = &recs[filled].pb;
	}
	for (size_t i = 0; i < nj; i++) {
		if (!FITS(jv[i].job)) goto out;
		skein__weights__job_versions__init(&jobs[i]);
		jobs[i].job = (char *)jv[i].job;
		jobs[i].max_version = jv[i].max_version;
		jobs[i].committed = jv[i].committed;
		jp[i] = &jobs[i];
	}
	snap.n_updates = nu;
	snap.updates = up;
	snap.n_jobs = nj;
	snap.jobs = jp;
	*len = skein__weights__snapshot__get_packed_size(&snap);
	*out = malloc(*len ? *len : 1);
	if (*out) skein__weights__snapshot__pack(&snap, *out);
out:
	for (size_t i = 0; recs && i < filled; i++) pb_rec_free(&recs[i]);
	free(recs);
	free(up);
	free(jobs);
	free(jp);
	return *out ? 0 : -1;
}

int wv_codec_snapshot_decode(const uint8_t *d, size_t n, wv_update **u, size_t *nu, wv_jobver **jv, size_t *nj,
			     char *err, size_t errlen)
{
	*u = NULL;
	*jv = NULL;
	*nu = *nj = 0;
	Skein__Weights__Snapshot *p = skein__weights__snapshot__unpack(NULL, n, d);
	if (!p) {
		snprintf(err, errlen, "weights snapshot: not a packed Snapshot");
		return -1;
	}
	int rc = -1;
	char why[200];
	size_t done = 0;
	wv_update *recs = calloc(p->n_updates ? p->n_updates : 1, sizeof *recs);
	wv_jobver *jobs = calloc(p->n_jobs ? p->n_jobs : 1, sizeof *jobs);
	if (!recs || !jobs) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (; done < p->n_updates; done++) {
		if (from_pb(&recs[done], p->updates[done], why, sizeof why) < 0) {
			wv_update_free(&recs[done]);
			snprintf(err, errlen, "weights snapshot: update %zu: %s", done, why);
			goto out;
		}
	}
	for (size_t i = 0; i < p->n_jobs; i++) {
		if (copy_str(jobs[i].job, sizeof jobs[i].job, p->jobs[i]->job, "job", why, sizeof why) < 0) {
			snprintf(err, errlen, "weights snapshot: job %zu: %s", i, why);
			goto out;
		}
		jobs[i].max_version = p->jobs[i]->max_version;
		jobs[i].committed = p->jobs[i]->committed;
	}
	*u = recs;
	*nu = p->n_updates;
	*jv = jobs;
	*nj = p->n_jobs;
	recs = NULL;
	jobs = NULL;
	rc = 0;
out:
	for (size_t i = 0; recs && i < done; i++) wv_update_free(&recs[i]);
	free(recs);
	free(jobs);
	skein__weights__snapshot__free_unpacked(p, NULL);
	return rc;
}
