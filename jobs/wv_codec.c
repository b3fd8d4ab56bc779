/* jobs/wv_codec: the one file of jobs/ that sees proto/weights.pb-c.h for
 * the table of weight updates (see wv_codec.h).
 *
 * Encoding points protobuf-c's char * fields into the caller's record
 * (packing only reads them); each record's engines get one array of
 * messages and one of pointers.  Decoding copies out and checks only what
 * the C fields need: a string that fits, a digest of 0 or 16 bytes, at most
 * WV_ENGINES_MAX engines (checked before anything is allocated for them).
 *
 * A compact record (wv_update.compact, issue 25) packs its engines as
 * bitmaps of engine ids and a list of losses with reason codes, when its
 * members are "<job>/engine-<i>" in ascending id order (else the full list
 * goes, as before); a compact measured record packs bare: its amendment's
 * figures alone.  Decoding reads both forms: records of older heads load. */
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
	uint8_t *bits;                 /* compact: participants, then verified */
	Skein__Weights__Loss *loss;
	Skein__Weights__Loss **lossp;
	Skein__Weights__Timings slowest;
} pb_rec;

static void pb_rec_free(pb_rec *r)
{
	free(r->eng);
	free(r->engp);
	free(r->times);
	free(r->bits);
	free(r->loss);
	free(r->lossp);
	r->eng = NULL;
	r->engp = NULL;
	r->times = NULL;
	r->bits = NULL;
	r->loss = NULL;
	r->lossp = NULL;
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

/* u's engines as ids, ascending: their count + 1 is the bitmap's bits
 * needed (*maxid), or false when one is not "<job>/engine-<i>" in order. */
static bool compact_ids(const wv_update *u, uint32_t *maxid)
{
	uint32_t id, prev = 0;
	for (size_t i = 0; i < u->nengines; i++) {
		if (!FITS(u->engines[i].member) || !wv_engine_id(u->job, u->engines[i].member, &id) ||
		    (i && id <= prev))
			return false;
		prev = id;
	}
	*maxid = prev;
	return true;
}

/* The compact form of u's engines into r (engines (12) left empty). */
static int fill_compact(pb_rec *r, const wv_update *u, uint32_t maxid)
{
	Skein__Weights__Update *p = &r->pb;
	size_t nb = (size_t)maxid / 8 + 1, nloss = 0;
	bool final = !wv_update_open(u);
	if (!(r->bits = calloc(2, nb))) return -1;
	for (size_t i = 0; i < u->nengines; i++) nloss += !strcmp(u->engines[i].state, "failed") ||
							   !strcmp(u->engines[i].state, "dropped");
	if (nloss && (!(r->loss = calloc(nloss, sizeof *r->loss)) || !(r->lossp = calloc(nloss, sizeof *r->lossp))))
		return -1;
	double slowest_s = u->engines_seconds;
	nloss = 0;
	for (size_t i = 0; i < u->nengines; i++) {
		const wv_engine *e = &u->engines[i];
		uint32_t id;
		wv_engine_id(u->job, e->member, &id);
		r->bits[id / 8] |= (uint8_t)(1u << (id % 8));
		if (e->seconds > slowest_s) slowest_s = e->seconds;
		if (!strcmp(e->state, "verified")) {
			r->bits[nb + id / 8] |= (uint8_t)(1u << (id % 8));
		} else if (!strcmp(e->state, "failed") || !strcmp(e->state, "dropped")) {
			Skein__Weights__Loss *l = &r->loss[nloss];
			skein__weights__loss__init(l);
			l->engine = id;
			l->dropped = !strcmp(e->state, "dropped");
			l->why = wv_why_code(e->reason);
			r->lossp[nloss++] = l;
		}
	}
	p->participants.data = r->bits;
	p->participants.len = u->nengines ? nb : 0;
	if (final && u->nengines) {
		p->verified.data = r->bits + nb;
		p->verified.len = nb;
	}
	p->n_losses = nloss;
	p->losses = r->lossp;
	wv_timings sl = wv_update_slowest(u);
	p->engines_slowest = timings_to_pb(&sl, &r->slowest);
	p->engines_seconds = slowest_s;
	return 0;
}

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
	if (u->bare && u->measured) {
		/* bare: what an amendment changes (wv_state's put), and whom */
		p->state = (char *)u->state;
		p->cause = (char *)u->cause;
		p->reason = "";
		p->measured = true;
		p->update_seconds = u->update_seconds;
		p->commit_seconds = u->commit_seconds;
		return FITS(u->cause) ? 0 : -1;
	}
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
	uint32_t maxid;
	if (u->compact && compact_ids(u, &maxid)) {
		if (!(r->times = calloc(1, sizeof *r->times)) || fill_compact(r, u, maxid) < 0) goto fail;
		p->sender_timings = timings_to_pb(&u->sender_t, &r->times[0]);
		return 0;
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

static size_t popcount(const uint8_t *b, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) k += (size_t)__builtin_popcount(b[i]);
	return k;
}

static bool bit(const ProtobufCBinaryData *b, uint32_t id)
{
	return id / 8 < b->len && (b->data[id / 8] >> (id % 8) & 1);
}

/* A compact record's engines from its bitmaps and losses. */
static int compact_from_pb(wv_update *u, const Skein__Weights__Update *p, char *err, size_t errlen)
{
	size_t nb = p->participants.len, n = popcount(p->participants.data, nb);
	if (p->n_engines || nb > WV_ENGINE_IDS / 8 || n > WV_ENGINES_MAX || p->verified.len > nb) {
		snprintf(err, errlen, "compact participants: %zu engines in %zu bytes (engines %zu), at most %d in %d",
			 n, nb, p->n_engines, WV_ENGINES_MAX, WV_ENGINE_IDS / 8);
		return -1;
	}
	if (wv_update_open(u) && (p->verified.len || p->n_losses)) {
		snprintf(err, errlen, "compact participants: verdicts in an open record");
		return -1;
	}
	timings_from_pb(&u->engines_t, p->engines_slowest);
	u->engines_seconds = p->engines_seconds;
	u->compact = true;
	if (!n) return 0;
	if (!(u->engines = calloc(n, sizeof *u->engines))) goto oom;
	bool final = !wv_update_open(u);
	for (uint32_t id = 0; id < nb * 8; id++) {
		if (!bit(&p->participants, id)) continue;
		wv_engine *e = &u->engines[u->nengines++];
		snprintf(e->member, sizeof e->member, "%s/engine-%u", u->job, id);
		snprintf(e->state, sizeof e->state, "%s", !final ? "pending" : bit(&p->verified, id) ? "verified" : "pending");
		if (!(e->reason = strdup(""))) goto oom;
	}
	for (size_t i = 0; i < p->n_losses; i++) {
		const Skein__Weights__Loss *l = p->losses[i];
		char what[64];
		snprintf(what, sizeof what, "%s/engine-%u", u->job, l->engine);
		wv_engine *e = (wv_engine *)wv_update_engine(u, what);
		if (!e || strcmp(e->state, "pending") || l->why >= WV_NWHYS) {
			snprintf(err, errlen, "loss %zu: engine %u not a participant without a verdict, or why %u unknown", i,
				 l->engine, l->why);
			return -1;
		}
		snprintf(e->state, sizeof e->state, "%s", l->dropped ? "dropped" : "failed");
		free(e->reason);
		if (!(e->reason = strdup(wv_whys[l->why]))) goto oom;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

static int from_pb(wv_update *u, const Skein__Weights__Update *p, char *err, size_t errlen)
{
	memset(u, 0, sizeof *u);
	if (p->measured && !(p->mode && p->mode[0]) && !(p->sender && p->sender[0]) && !p->n_engines &&
	    !p->participants.len) {
		/* a bare amendment */
		if (copy_str(u->job, sizeof u->job, p->job, "job", err, errlen) < 0 ||
		    copy_str(u->state, sizeof u->state, p->state, "state", err, errlen) < 0 ||
		    copy_str(u->cause, sizeof u->cause, p->cause, "cause", err, errlen) < 0)
			return -1;
		u->version = p->version;
		u->measured = u->bare = u->compact = true;
		u->update_seconds = p->update_seconds;
		u->commit_seconds = p->commit_seconds;
		if (!(u->reason = strdup(""))) return snprintf(err, errlen, "out of memory"), -1;
		return 0;
	}
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
	if (p->participants.len) return compact_from_pb(u, p, err, errlen);
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
