/* tests/unit/update_state_test: jobs/update_state (the replicated table of weight
 * updates) and its codec.
 *
 * Checks the record round trip through the codec and a deep copy; each
 * field rule, one bad field at a time; each table rule (a new version is
 * preparing, above every version of its job, with none open; an open
 * record may change, keeping job, version, base and sender; committed and
 * aborted are final but for one measured amendment of their update and
 * commit seconds), the data path's timings (round trip, bounds, a record
 * from before them decoding as zeros), and that every refusal is counted and leaves the
 * serialized table byte for byte as it was; retention (64 per job, the
 * versions outliving dropped records), the bound on jobs, forget, the
 * global index; the snapshot round trip, every truncation and each
 * inconsistency a snapshot can hold refused with the table unchanged; and a
 * random walk of puts against a model of the rules (seed printed on
 * failure, TEST_SEED replays). */
#include "tests/t.h"

#include <math.h>

#include "common/sk_rng.h"
#include "jobs/update_codec.h"
#include "jobs/update_state.h"
#include "proto/weights.pb-c.h"
#include "tests/unit/update_fixture.h"

enum { ENG_MAX = UPDATE_ENGINES_MAX + 1 };

static update_engine engs[ENG_MAX];

/* A valid record (update_fixture): two engines, pending, or verified if committed. */
static void rec(update_rec *u, const char *job, uint64_t v, const char *state)
{
	update_fixture(u, engs, 2, job, v, state, !strcmp(state, "committed") ? "verified" : "pending");
}

static int put(update_state *s, const update_rec *u)
{
	uint8_t *b;
	size_t n;
	if (update_rec_encode(u, &b, &n) < 0) T_FAIL("encode failed");
	int rc = update_state_apply(s, b, n);
	free(b);
	return rc;
}

static int put_new(update_state *s, const char *job, uint64_t v, const char *state)
{
	update_rec u;
	rec(&u, job, v, state);
	return put(s, &u);
}

/* The table as bytes: what "unchanged" means. */
static uint8_t *snap(const update_state *s, size_t *n)
{
	uint8_t *b;
	if (update_state_serialize(s, &b, n) < 0) T_FAIL("serialize failed");
	return b;
}

/* apply refuses u, counts it, and changes nothing */
static void refused(update_state *s, const update_rec *u)
{
	size_t n0, n1;
	uint8_t *before = snap(s, &n0);
	uint64_t r0 = update_state_refused(s);
	T_EQ(put(s, u), -1);
	T_EQ(update_state_refused(s), r0 + 1);
	uint8_t *after = snap(s, &n1);
	T_CHECK(n0 == n1 && !memcmp(before, after, n0));
	free(before);
	free(after);
}

static bool same(const update_rec *a, const update_rec *b)
{
	uint8_t *pa, *pb;
	size_t na, nb;
	T_EQ(update_rec_encode(a, &pa, &na), 0);
	T_EQ(update_rec_encode(b, &pb, &nb), 0);
	bool eq = na == nb && !memcmp(pa, pb, na);
	free(pa);
	free(pb);
	return eq;
}

T_TEST(codec_round_trip_and_copy)
{
	update_rec u, d, c;
	rec(&u, "j1", 7, "preparing");
	u.base_version = 5;
	u.has_digest = true;
	for (int i = 0; i < UPDATE_DIGEST_LEN; i++) u.digest[i] = (uint8_t)(i * 17);
	u.bytes = 1ull << 40;
	u.tensors = 123;
	u.reason = (char *)"engine j1/engine-1: checksum of layer.3 differs";
	engs[1].reason = (char *)"dropped: node n3 failed";
	snprintf(engs[1].state, sizeof engs[1].state, "dropped");
	engs[0].seconds = 0.25;
	u.started_ms = 1700000000123ull;
	u.finished_ms = 1700000000999ull;
	u.wire_bytes = 999;
	u.density = 0.125;
	u.update_seconds = 1.5;
	u.implementation_seconds = 1.25;
	u.prepare_seconds = 0.01;
	u.commit_seconds = 0.02;
	u.sender_t = (update_timings){ 0.5, 0.25, 0, 0 };
	engs[0].t = (update_timings){ 0.125, 0.0625, 0.03125, 0.015625 };
	uint8_t *b;
	size_t n;
	char err[200];
	T_EQ(update_rec_encode(&u, &b, &n), 0);
	T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
	free(b);
	T_STREQ(d.job, "j1");
	T_EQ(d.version, 7);
	T_EQ(d.base_version, 5);
	T_CHECK(d.has_digest && !memcmp(d.digest, u.digest, UPDATE_DIGEST_LEN));
	T_EQ(d.bytes, 1ull << 40);
	T_EQ(d.tensors, 123);
	T_STREQ(d.reason, u.reason);
	T_EQ(d.nengines, 2);
	T_STREQ(d.engines[1].state, "dropped");
	T_STREQ(d.engines[1].reason, "dropped: node n3 failed");
	T_STREQ(d.engines[0].reason, ""); /* never NULL after decode */
	T_CHECK(d.engines[0].seconds == 0.25 && d.density == 0.125 && d.commit_seconds == 0.02);
	T_CHECK(d.sender_t.data == 0.5 && d.sender_t.hash == 0.25 && d.sender_t.journal == 0 && d.sender_t.undo == 0);
	T_CHECK(d.engines[0].t.data == 0.125 && d.engines[0].t.hash == 0.0625 && d.engines[0].t.journal == 0.03125 &&
		d.engines[0].t.undo == 0.015625);
	T_CHECK(d.engines[1].t.data == 0 && !d.measured);
	T_EQ(d.started_ms, 1700000000123ull);
	T_CHECK(same(&u, &d));
	T_EQ(update_rec_copy(&c, &d), 0);
	T_CHECK(c.engines != d.engines && c.reason != d.reason && same(&c, &d));
	T_CHECK(update_rec_engine(&c, "j1/engine-1") == &c.engines[1]);
	T_CHECK(update_rec_engine(&c, "j1/engine-9") == NULL);
	update_rec_free(&d);
	T_CHECK(same(&c, &u)); /* the copy owns its memory */
	update_rec_free(&c);
	update_rec_free(&c); /* safe twice */
	/* a record without engines or reason: reason "" after decode */
	rec(&u, "j1", 1, "preparing");
	u.nengines = 0;
	u.engines = NULL;
	T_EQ(update_rec_encode(&u, &b, &n), 0);
	T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
	T_CHECK(d.reason && !d.reason[0] && d.nengines == 0);
	update_rec_free(&d);
	free(b);
	/* a record from before the timings (no Timings messages): zeros */
	{
		Skein__Weights__Update pu = SKEIN__WEIGHTS__UPDATE__INIT;
		Skein__Weights__Engine pe = SKEIN__WEIGHTS__ENGINE__INIT, *pep = &pe;
		pu.job = (char *)"j1", pu.version = 2, pu.base_version = 1, pu.mode = (char *)"p2p";
		pu.sender = (char *)"j1/trainer-0", pu.sender_node = (char *)"n1", pu.state = (char *)"committed";
		pe.member = (char *)"j1/engine-0", pe.node = (char *)"n2", pe.state = (char *)"verified";
		pe.seconds = 0.5;
		pu.engines = &pep, pu.n_engines = 1;
		n = skein__weights__update__get_packed_size(&pu);
		b = malloc(n);
		skein__weights__update__pack(&pu, b);
		T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
		T_CHECK(d.sender_t.data == 0 && d.sender_t.hash == 0 && d.engines[0].t.data == 0 &&
			d.engines[0].seconds == 0.5 && !d.measured);
		update_rec_free(&d);
		free(b);
	}
	engs[0].t = (update_timings){ 0 };
	/* not an Update at all */
	uint8_t junk[] = { 0xff, 0xff, 0xff };
	T_EQ(update_rec_decode(&d, junk, sizeof junk, err, sizeof err), -1);
	T_CHECK(err[0]);
	update_rec_free(&d);
	/* a C field without its NUL is not encoded */
	rec(&u, "j1", 1, "preparing");
	memset(u.mode, 'x', sizeof u.mode);
	T_EQ(update_rec_encode(&u, &b, &n), -1);
}

/* Decoding rejects u with the one field broken by `breakit`. */
static void rejects(void (*breakit)(update_rec *), const char *what)
{
	update_rec u, d;
	uint8_t *b;
	size_t n;
	char err[200] = "";
	rec(&u, "j1", 3, "preparing");
	breakit(&u);
	if (update_rec_encode(&u, &b, &n) < 0) T_FAIL("%s: encode failed", what);
	if (update_rec_decode(&d, b, n, err, sizeof err) == 0) T_FAIL("%s: accepted", what);
	if (!err[0]) T_FAIL("%s: no reason given", what);
	T_CHECK(d.reason == NULL && d.engines == NULL); /* nothing left to free */
	free(b);
	update_state *s = update_state_new();
	refused(s, &u);
	update_state_free(&s);
}

static void bad_job(update_rec *u) { snprintf(u->job, sizeof u->job, "-bad"); }
static void bad_job_empty(update_rec *u) { u->job[0] = 0; }
static void bad_version(update_rec *u) { u->version = 0, u->base_version = 0; }
static void bad_base(update_rec *u) { u->base_version = u->version; }
static void bad_mode(update_rec *u) { u->mode[0] = 0; }
static void bad_mode_ctl(update_rec *u) { u->mode[2] = '\n'; }
static void bad_sender(update_rec *u) { u->sender[0] = 0; }
static void bad_sender_node(update_rec *u) { u->sender_node[0] = '\x1b'; }
static void bad_state(update_rec *u) { snprintf(u->state, sizeof u->state, "moving"); }
static void bad_engine_state(update_rec *u) { snprintf(engs[1].state, sizeof engs[1].state, "serving"); }
static void bad_engine_member(update_rec *u) { engs[0].member[0] = 0; }
static void bad_engine_node(update_rec *u) { engs[0].node[1] = 0x7f; }
static void dup_engine(update_rec *u) { memcpy(engs[1].member, engs[0].member, sizeof engs[0].member); }
static void bad_engine_seconds(update_rec *u) { engs[1].seconds = -1; }
static void nan_seconds(update_rec *u) { u->update_seconds = NAN; }
static void inf_density(update_rec *u) { u->density = INFINITY; }
static void nan_sender_hash(update_rec *u) { u->sender_t.hash = NAN; }
static void neg_engine_undo(update_rec *u) { engs[1].t.undo = -0.5; }
static void inf_engine_data(update_rec *u) { engs[0].t.data = INFINITY; }
static void measured_open(update_rec *u) { u->measured = true; }

static char long_reason[UPDATE_REASON_MAX + 2];
static void bad_reason(update_rec *u)
{
	memset(long_reason, 'r', UPDATE_REASON_MAX + 1);
	u->reason = long_reason;
}
static void bad_engine_reason(update_rec *u)
{
	bad_reason(u);
	u->reason = NULL;
	engs[0].reason = long_reason;
}
static void committed_pending(update_rec *u)
{
	snprintf(u->state, sizeof u->state, "committed");
	snprintf(engs[0].state, sizeof engs[0].state, "verified"); /* engs[1] still pending */
}
static void committed_failed(update_rec *u)
{
	committed_pending(u);
	snprintf(engs[1].state, sizeof engs[1].state, "failed");
}
static void too_many_engines(update_rec *u)
{
	u->nengines = UPDATE_ENGINES_MAX + 1;
	for (size_t i = 0; i < u->nengines; i++) {
		memset(&engs[i], 0, sizeof engs[i]);
		snprintf(engs[i].member, sizeof engs[i].member, "j1/engine-%zu", i);
		snprintf(engs[i].node, sizeof engs[i].node, "n1");
		snprintf(engs[i].state, sizeof engs[i].state, "pending");
	}
}

T_TEST(field_rules)
{
	rejects(bad_job, "job name");
	rejects(bad_job_empty, "empty job");
	rejects(bad_version, "version 0");
	rejects(bad_base, "base not below version");
	rejects(bad_mode, "empty mode");
	rejects(bad_mode_ctl, "mode with a newline");
	rejects(bad_sender, "empty sender");
	rejects(bad_sender_node, "sender node with ESC");
	rejects(bad_state, "state moving (display only)");
	rejects(bad_engine_state, "engine state");
	rejects(bad_engine_member, "engine member");
	rejects(bad_engine_node, "engine node with DEL");
	rejects(dup_engine, "duplicate engine");
	rejects(bad_engine_seconds, "negative seconds");
	rejects(nan_seconds, "NaN seconds");
	rejects(inf_density, "infinite density");
	rejects(nan_sender_hash, "the sender's hash seconds NaN");
	rejects(neg_engine_undo, "an engine's undo seconds negative");
	rejects(inf_engine_data, "an engine's data seconds infinite");
	rejects(measured_open, "measured while preparing");
	engs[0].t = engs[1].t = (update_timings){ 0 };
	rejects(bad_reason, "reason of 513 bytes");
	rejects(bad_engine_reason, "engine reason of 513 bytes");
	rejects(committed_pending, "committed with a pending engine");
	rejects(committed_failed, "committed with a failed engine");
	rejects(too_many_engines, "1025 engines");
	/* the limits themselves pass: 1024 engines, a 512-byte reason */
	update_rec u, d;
	uint8_t *b;
	size_t n;
	char err[200];
	rec(&u, "j1", 3, "preparing");
	too_many_engines(&u);
	u.nengines = UPDATE_ENGINES_MAX;
	memset(long_reason, 'r', UPDATE_REASON_MAX);
	long_reason[UPDATE_REASON_MAX] = 0;
	u.reason = long_reason;
	T_EQ(update_rec_encode(&u, &b, &n), 0);
	T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
	T_EQ(d.nengines, UPDATE_ENGINES_MAX);
	update_rec_free(&d);
	free(b);
}

/* Raw Updates the C record cannot express: a digest of 5 bytes, a job name
 * longer than its field. */
T_TEST(codec_rejects_raw)
{
	Skein__Weights__Update p = SKEIN__WEIGHTS__UPDATE__INIT;
	uint8_t dig[5] = { 1, 2, 3, 4, 5 }, buf[1024];
	char longjob[JOB_NAME_MAX + 2], err[200];
	update_rec d;
	p.job = (char *)"j1";
	p.version = 1;
	p.mode = (char *)"p2p";
	p.sender = (char *)"j1/trainer-0";
	p.sender_node = (char *)"n1";
	p.state = (char *)"preparing";
	size_t n = skein__weights__update__pack(&p, buf);
	T_EQ(update_rec_decode(&d, buf, n, err, sizeof err), 0);
	T_CHECK(!d.has_digest);
	update_rec_free(&d);
	p.digest.data = dig;
	p.digest.len = sizeof dig;
	n = skein__weights__update__pack(&p, buf);
	T_EQ(update_rec_decode(&d, buf, n, err, sizeof err), -1);
	T_CHECK(strstr(err, "digest") != NULL);
	p.digest.len = 0;
	memset(longjob, 'a', sizeof longjob - 1);
	longjob[sizeof longjob - 1] = 0;
	p.job = longjob;
	n = skein__weights__update__pack(&p, buf);
	T_EQ(update_rec_decode(&d, buf, n, err, sizeof err), -1);
	T_CHECK(strstr(err, "job") != NULL);
}

T_TEST(table_rules)
{
	update_state *s = update_state_new();
	update_rec u;
	T_CHECK(update_state_open(s, "j1") == NULL);
	T_EQ(update_state_max_version(s, "j1"), 0);
	/* a new version must be preparing */
	rec(&u, "j1", 1, "committed");
	refused(s, &u);
	rec(&u, "j1", 1, "aborted");
	refused(s, &u);
	T_EQ(put_new(s, "j1", 1, "preparing"), 0);
	T_EQ(update_state_max_version(s, "j1"), 1);
	T_EQ(update_state_committed(s, "j1"), 0);
	T_CHECK(update_state_open(s, "j1") == update_state_get(s, "j1", 1));
	/* while 1 is open no other version begins */
	rec(&u, "j1", 2, "preparing");
	u.base_version = 0;
	refused(s, &u);
	/* the open record changes: an engine verified; it keeps base and sender */
	rec(&u, "j1", 1, "preparing");
	snprintf(engs[0].state, sizeof engs[0].state, "verified");
	engs[0].seconds = 0.5;
	T_EQ(put(s, &u), 0);
	T_STREQ(update_state_get(s, "j1", 1)->engines[0].state, "verified");
	rec(&u, "j1", 1, "committed");
	u.base_version = 0;
	snprintf(u.sender, sizeof u.sender, "j1/trainer-1");
	refused(s, &u); /* another sender */
	rec(&u, "j1", 1, "preparing");
	u.version = 2; /* base 0 with version 2: a new record while 1 is open */
	refused(s, &u);
	rec(&u, "j1", 1, "committed");
	snprintf(u.cause, sizeof u.cause, "%s", "timeout");
	refused(s, &u); /* a commit has no cause */
	u.cause[0] = 0;
	T_EQ(put(s, &u), 0);
	T_EQ(update_state_committed(s, "j1"), 1);
	T_CHECK(update_state_open(s, "j1") == NULL);
	/* committed is final: not again, not aborted, not preparing */
	refused(s, &u);
	rec(&u, "j1", 1, "aborted");
	refused(s, &u);
	rec(&u, "j1", 1, "preparing");
	refused(s, &u);
	/* versions only go up */
	T_EQ(put_new(s, "j1", 5, "preparing"), 0);
	rec(&u, "j1", 5, "aborted");
	u.reason = (char *)"j1/engine-0: checksum mismatch";
	snprintf(u.cause, sizeof u.cause, "%s", "");
	refused(s, &u); /* an abort names its cause */
	snprintf(u.cause, sizeof u.cause, "%s", "checksum");
	refused(s, &u); /* ... one of update_causes */
	snprintf(u.cause, sizeof u.cause, "%s", "engine");
	T_EQ(put(s, &u), 0);
	T_EQ(update_state_committed(s, "j1"), 1);
	T_EQ(update_state_max_version(s, "j1"), 5);
	rec(&u, "j1", 5, "committed");
	refused(s, &u); /* aborted is final */
	rec(&u, "j1", 4, "preparing");
	refused(s, &u); /* below the highest version begun */
	rec(&u, "j1", 5, "preparing");
	refused(s, &u);
	T_EQ(put_new(s, "j1", 6, "preparing"), 0);
	/* another job is independent */
	T_EQ(put_new(s, "j0", 1, "preparing"), 0);
	T_EQ(update_state_max_version(s, "j0"), 1);
	T_EQ(update_state_refused(s), 14);
	update_state_free(&s);
	T_CHECK(s == NULL);
	update_state_free(&s);
}

T_TEST(retention_and_index)
{
	update_state *s = update_state_new();
	update_rec u;
	enum { V = UPDATE_KEEP_PER_JOB + 10 };
	for (uint64_t v = 1; v <= V; v++) {
		T_EQ(put_new(s, "big", v, "preparing"), 0);
		rec(&u, "big", v, v % 3 ? "committed" : "aborted");
		if (v % 3 == 0) u.reason = (char *)"aborted for the test";
		T_EQ(put(s, &u), 0);
	}
	T_EQ(put_new(s, "big", V + 1, "preparing"), 0); /* one open */
	T_EQ(update_state_count(s), UPDATE_KEEP_PER_JOB);
	T_CHECK(update_state_get(s, "big", V + 1 - UPDATE_KEEP_PER_JOB) == NULL);
	T_CHECK(update_state_get(s, "big", V + 2 - UPDATE_KEEP_PER_JOB) != NULL);
	T_EQ(update_state_max_version(s, "big"), V + 1);
	T_EQ(update_state_committed(s, "big"), V); /* 74 % 3 != 0: committed */
	/* the newest first, open at 0 */
	T_EQ(update_state_job_at(s, "big", 0)->version, V + 1);
	T_CHECK(update_state_open(s, "big") == update_state_job_at(s, "big", 0));
	T_EQ(update_state_job_at(s, "big", UPDATE_KEEP_PER_JOB - 1)->version, V + 2 - UPDATE_KEEP_PER_JOB);
	T_CHECK(update_state_job_at(s, "big", UPDATE_KEEP_PER_JOB) == NULL);
	T_CHECK(update_state_job_at(s, "none", 0) == NULL);
	/* a dropped version is not reused */
	rec(&u, "big", 2, "preparing");
	u.base_version = 0;
	refused(s, &u);
	/* the global index: jobs by name, oldest first within a job */
	T_EQ(put_new(s, "a", 1, "preparing"), 0);
	T_EQ(put_new(s, "zz", 3, "preparing"), 0);
	T_EQ(update_state_count(s), UPDATE_KEEP_PER_JOB + 2);
	T_STREQ(update_state_at(s, 0)->job, "a");
	T_STREQ(update_state_at(s, 1)->job, "big");
	T_EQ(update_state_at(s, 1)->version, V + 2 - UPDATE_KEEP_PER_JOB);
	T_EQ(update_state_at(s, UPDATE_KEEP_PER_JOB)->version, V + 1);
	T_STREQ(update_state_at(s, UPDATE_KEEP_PER_JOB + 1)->job, "zz");
	T_CHECK(update_state_at(s, UPDATE_KEEP_PER_JOB + 2) == NULL);
	T_EQ(update_state_jobs(s), 3);
	T_STREQ(update_state_job_name(s, 1), "big");
	T_CHECK(update_state_job_name(s, 3) == NULL);
	/* forget: the job's records and versions go; others stay */
	update_state_forget_job(s, "big");
	update_state_forget_job(s, "never-there");
	T_EQ(update_state_count(s), 2);
	T_EQ(update_state_max_version(s, "big"), 0);
	T_STREQ(update_state_at(s, 1)->job, "zz");
	T_EQ(put_new(s, "big", 1, "preparing"), 0); /* submitted again: from 1 */
	update_state_free(&s);
}

T_TEST(job_bound)
{
	update_state *s = update_state_new();
	char name[32];
	for (int i = 0; i < UPDATE_JOBS_MAX; i++) {
		snprintf(name, sizeof name, "job-%05d", i);
		T_EQ(put_new(s, name, 1, "preparing"), 0);
	}
	update_rec u;
	rec(&u, "job-x", 1, "preparing");
	refused(s, &u);
	/* a job held still takes new versions */
	rec(&u, "job-00007", 1, "aborted");
	u.reason = (char *)"x";
	T_EQ(put(s, &u), 0);
	T_EQ(put_new(s, "job-00007", 2, "preparing"), 0);
	update_state_forget_job(s, "job-00000");
	T_EQ(put_new(s, "job-x", 1, "preparing"), 0);
	update_state_free(&s);
}

/* A table with a bit of everything: three jobs, open, committed, aborted. */
static update_state *sample(void)
{
	update_state *s = update_state_new();
	update_rec u;
	for (uint64_t v = 1; v <= 3; v++) {
		T_EQ(put_new(s, "alpha", v, "preparing"), 0);
		rec(&u, "alpha", v, v == 2 ? "aborted" : "committed");
		T_EQ(put(s, &u), 0);
	}
	T_EQ(put_new(s, "alpha", 4, "preparing"), 0);
	T_EQ(put_new(s, "beta", 9, "preparing"), 0);
	rec(&u, "beta", 9, "committed");
	T_EQ(put(s, &u), 0);
	T_EQ(put_new(s, "gamma", 2, "preparing"), 0);
	return s;
}

T_TEST(snapshot_round_trip)
{
	update_state *s = sample(), *t = update_state_new();
	size_t n, m;
	char err[200];
	uint8_t *b = snap(s, &n);
	T_EQ(update_state_restore(t, b, n, err, sizeof err), 0);
	uint8_t *c = snap(t, &m);
	T_CHECK(n == m && !memcmp(b, c, n));
	T_EQ(update_state_count(t), 6);
	T_EQ(update_state_committed(t, "alpha"), 3);
	T_EQ(update_state_open(t, "alpha")->version, 4);
	T_EQ(update_state_max_version(t, "beta"), 9);
	T_EQ(put_new(t, "beta", 10, "preparing"), 0); /* the rules go on */
	free(b);
	free(c);
	/* an empty table round-trips too */
	update_state *e = update_state_new();
	b = snap(e, &n);
	T_EQ(update_state_restore(t, b, n, err, sizeof err), 0);
	T_EQ(update_state_count(t), 0);
	T_EQ(update_state_jobs(t), 0);
	free(b);
	update_state_free(&e);
	update_state_free(&s);
	update_state_free(&t);
}

/* restore of these bytes fails with a reason and t stays as it was */
static void restore_fails(update_state *t, const uint8_t *b, size_t n, const char *what)
{
	size_t n0, n1;
	char err[200] = "";
	uint8_t *before = snap(t, &n0);
	if (update_state_restore(t, b, n, err, sizeof err) == 0) T_FAIL("%s: restored", what);
	if (!err[0]) T_FAIL("%s: no reason", what);
	uint8_t *after = snap(t, &n1);
	T_CHECK(n0 == n1 && !memcmp(before, after, n0));
	free(before);
	free(after);
}

/* A snapshot built from records and versions as given (no rules applied). */
static uint8_t *raw_snap(const update_rec *const *u, size_t nu, const update_jobver *jv, size_t nj, size_t *n)
{
	uint8_t *b;
	if (update_codec_snapshot_encode(u, nu, jv, nj, &b, n) < 0) T_FAIL("snapshot encode failed");
	return b;
}

/* A snapshot of these records and versions, as given, fails to restore. */
static void raw_fails(update_state *t, const update_rec *const *u, size_t nu, const update_jobver *jv, size_t nj,
		      const char *what)
{
	size_t n;
	uint8_t *r = raw_snap(u, nu, jv, nj, &n);
	restore_fails(t, r, n, what);
	free(r);
}

T_TEST(bad_snapshot_changes_nothing)
{
	update_state *s = sample(), *t = update_state_new();
	T_EQ(put_new(t, "old", 1, "preparing"), 0);
	size_t n;
	uint8_t *b = snap(s, &n);
	for (size_t k = 1; k < n; k++) { /* 0 bytes: the empty table */
		char what[48];
		snprintf(what, sizeof what, "truncated to %zu of %zu bytes", k, n);
		restore_fails(t, b, k, what);
	}
	free(b);
	uint8_t junk[] = { 0x0a, 0x80 };
	restore_fails(t, junk, sizeof junk, "not protobuf");

	update_rec a1, a2, a3;
	update_engine e1[2], e2[2];
	rec(&a1, "j", 1, "committed");
	memcpy(e1, engs, sizeof e1);
	a1.engines = e1;
	rec(&a2, "j", 2, "preparing");
	memcpy(e2, engs, sizeof e2);
	a2.engines = e2;
	rec(&a3, "j", 3, "preparing");
	update_jobver jv = { "j", 3, 1 }, jv2[2] = { { "j", 3, 1 }, { "j", 3, 1 } };
	const update_rec *two_open[] = { &a1, &a2, &a3 }, *ok[] = { &a1, &a3 }, *dup[] = { &a1, &a1, &a3 };
	uint8_t *r = raw_snap(ok, 2, &jv, 1, &n);
	update_state *fine = update_state_new();
	char err[200];
	T_EQ(update_state_restore(fine, r, n, err, sizeof err), 0); /* the control: this one is consistent */
	update_state_free(&fine);
	free(r);
	raw_fails(t, two_open, 3, &jv, 1, "two open records");
	raw_fails(t, dup, 3, &jv, 1, "a version twice");
	raw_fails(t, ok, 2, NULL, 0, "records without their job's versions");
	raw_fails(t, ok, 2, jv2, 2, "a job twice");
	update_jobver low = { "j", 2, 1 }, comm_hi = { "j", 3, 0 }, comm_ab = { "j", 3, 3 }, empty = { "k", 0, 0 },
		  badname = { "-j", 3, 1 };
	raw_fails(t, ok, 2, &low, 1, "a record above the job's highest version");
	raw_fails(t, ok, 2, &comm_hi, 1, "committed below a committed record");
	snprintf(a3.state, sizeof a3.state, "aborted");
	snprintf(a3.cause, sizeof a3.cause, "timeout");
	raw_fails(t, ok, 2, &comm_ab, 1, "committed naming an aborted record");
	raw_fails(t, NULL, 0, &empty, 1, "a job holding nothing");
	raw_fails(t, NULL, 0, &badname, 1, "a bad job name");
	/* a record breaking a field rule */
	rec(&a3, "j", 3, "preparing");
	a3.base_version = 3;
	raw_fails(t, ok, 2, &jv, 1, "a bad record");
	/* more records than a job keeps */
	update_rec many[UPDATE_KEEP_PER_JOB + 1];
	const update_rec *mp[UPDATE_KEEP_PER_JOB + 1];
	for (int i = 0; i <= UPDATE_KEEP_PER_JOB; i++) {
		rec(&many[i], "j", (uint64_t)i + 1, "aborted");
		many[i].nengines = 0;
		mp[i] = &many[i];
	}
	update_jobver jm = { "j", UPDATE_KEEP_PER_JOB + 1, 0 };
	r = raw_snap(mp, UPDATE_KEEP_PER_JOB, &jm, 1, &n);
	T_EQ(update_state_restore(t, r, n, err, sizeof err), 0);
	free(r);
	raw_fails(t, mp, UPDATE_KEEP_PER_JOB + 1, &jm, 1, "65 records of a job");
	update_state_free(&s);
	update_state_free(&t);
}

/* A model of the rules for the random walk: per job the highest version,
 * the committed one, and the open record's version, base and sender. */
typedef struct {
	uint64_t max, committed, open, base;
	int sender;
} model_job;

T_TEST(random_walk_matches_the_rules)
{
	enum { JOBS = 3, STEPS = 4000 };
	static const char *const jobs[JOBS] = { "a", "b", "c" };
	static const char *const states[] = { "preparing", "committed", "aborted" };
	model_job m[JOBS] = { { 0 } };
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	update_state *s = update_state_new();
	int applied = 0;
	for (int step = 0; step < STEPS; step++) {
		int j = (int)sk_rng_below(&r, JOBS);
		model_job *mj = &m[j];
		update_rec u;
		/* near the job's versions: often the open one, often the next */
		uint64_t v = mj->max + sk_rng_below(&r, 3);
		if (v == 0 || (mj->open && sk_rng_below(&r, 2))) v = mj->open ? mj->open : 1;
		const char *st = states[sk_rng_below(&r, 3)];
		rec(&u, jobs[j], v, st);
		u.base_version = sk_rng_below(&r, 4) ? (mj->open == v ? mj->base : mj->committed) : sk_rng_below(&r, v);
		int sender = sk_rng_below(&r, 5) ? (mj->open == v ? mj->sender : 0) : 1;
		snprintf(u.sender, sizeof u.sender, "%s/trainer-%d", jobs[j], sender);
		if (!strcmp(st, "committed") && sk_rng_below(&r, 4) == 0)
			snprintf(engs[1].state, sizeof engs[1].state, "dropped");
		if (u.base_version >= v) u.base_version = v - 1;
		bool want;
		if (mj->open == v) want = u.base_version == mj->base && sender == mj->sender;
		else want = v > mj->max && !mj->open && !strcmp(st, "preparing");
		int rc = put(s, &u);
		applied += rc == 0;
		if ((rc == 0) != want)
			T_FAIL("step %d: job %s version %" PRIu64 " %s base %" PRIu64 " sender %d: apply %d, model %d", step,
			       jobs[j], v, st, u.base_version, sender, rc, want);
		if (want) {
			if (mj->open != v) mj->base = u.base_version, mj->sender = sender;
			mj->max = v > mj->max ? v : mj->max;
			mj->open = !strcmp(st, "preparing") ? v : 0;
			if (!strcmp(st, "committed")) mj->committed = v;
		}
		T_EQ(update_state_max_version(s, jobs[j]), mj->max);
		T_EQ(update_state_committed(s, jobs[j]), mj->committed);
		const update_rec *o = update_state_open(s, jobs[j]);
		T_EQ(o ? o->version : 0, mj->open);
		if (step % 500 == 0) {
			/* a voter restored from a snapshot now holds the same table */
			update_state *t = update_state_new();
			size_t n, k;
			char err[200];
			uint8_t *b = snap(s, &n);
			T_EQ(update_state_restore(t, b, n, err, sizeof err), 0);
			uint8_t *c = snap(t, &k);
			T_CHECK(n == k && !memcmp(b, c, n));
			free(b);
			free(c);
			update_state_free(&t);
		}
	}
	T_CHECK(update_state_count(s) <= JOBS * UPDATE_KEEP_PER_JOB);
	/* the walk reached past retention on some job, with both kinds of answer */
	T_CHECK(applied > STEPS / 4 && applied < STEPS * 3 / 4);
	T_CHECK(m[0].max > UPDATE_KEEP_PER_JOB || m[1].max > UPDATE_KEEP_PER_JOB || m[2].max > UPDATE_KEEP_PER_JOB);
	update_state_free(&s);
}

/* A final record's one amendment: measured, the same state; only its update
 * and commit seconds are taken; a second one, another state, or one of an
 * open record is refused. */
T_TEST(final_record_amended_once)
{
	update_state *s = update_state_new();
	update_rec u;
	T_EQ(put_new(s, "j1", 1, "preparing"), 0);
	rec(&u, "j1", 1, "committed");
	u.update_seconds = 0.5;
	u.commit_seconds = 0.001;
	T_EQ(put(s, &u), 0);
	/* another state: refused */
	rec(&u, "j1", 1, "aborted");
	u.measured = true;
	refused(s, &u);
	/* the amendment: only the two figures come from it */
	rec(&u, "j1", 1, "committed");
	u.measured = true;
	u.update_seconds = 0.75;
	u.commit_seconds = 0.25;
	u.wire_bytes = 12345;
	u.reason = (char *)"not taken";
	T_EQ(put(s, &u), 0);
	const update_rec *g = update_state_get(s, "j1", 1);
	T_CHECK(g && g->measured && g->update_seconds == 0.75 && g->commit_seconds == 0.25);
	T_CHECK(g->wire_bytes == 0 && !strcmp(g->reason, ""));
	/* once */
	u.commit_seconds = 9;
	refused(s, &u);
	/* kept through a snapshot */
	size_t n;
	char err[200];
	uint8_t *b = snap(s, &n);
	update_state *t = update_state_new();
	T_EQ(update_state_restore(t, b, n, err, sizeof err), 0);
	g = update_state_get(t, "j1", 1);
	T_CHECK(g && g->measured && g->commit_seconds == 0.25);
	free(b);
	update_state_free(&t);
	/* an open record takes no amendment (a measured record is final) */
	T_EQ(put_new(s, "j1", 2, "preparing"), 0);
	rec(&u, "j1", 2, "preparing");
	u.measured = true;
	refused(s, &u);
	/* nor is a new version opened by one */
	rec(&u, "j1", 3, "committed");
	u.measured = true;
	refused(s, &u);
	update_state_free(&s);
}

/* Issue 23: the sender's root travels in the record, 0 or 16 bytes, and once
 * set it stays: a replacing record with another root (or none) is refused. */
T_TEST(root_set_once)
{
	update_state *s = update_state_new();
	update_rec u, d;
	char err[200];
	rec(&u, "j1", 1, "preparing");
	memset(u.root, 0x5a, sizeof u.root);
	u.has_root = true;
	uint8_t *b;
	size_t n;
	T_EQ(update_rec_encode(&u, &b, &n), 0);
	T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
	T_CHECK(d.has_root && !memcmp(d.root, u.root, sizeof u.root));
	update_rec_free(&d);
	free(b);
	T_EQ(put(s, &u), 0);
	rec(&u, "j1", 1, "committed");
	refused(s, &u); /* the root dropped */
	memset(u.root, 0x5b, sizeof u.root);
	u.has_root = true;
	refused(s, &u); /* another root */
	memset(u.root, 0x5a, sizeof u.root);
	T_EQ(put(s, &u), 0);
	T_CHECK(update_state_get(s, "j1", 1)->has_root);
	/* a record without a root may get one (a sender that hashes while it sends: its done) */
	rec(&u, "j1", 2, "preparing");
	u.base_version = 1;
	T_EQ(put(s, &u), 0);
	rec(&u, "j1", 2, "committed");
	u.base_version = 1;
	memset(u.root, 0x11, sizeof u.root);
	u.has_root = true;
	T_EQ(put(s, &u), 0);
	T_CHECK(update_state_get(s, "j1", 2)->has_root && update_state_get(s, "j1", 2)->root[0] == 0x11);
	update_state_free(&s);
}

/* Issue 23: the p2p hello's nonce lives in the record (Update.nonce = 25),
 * so a head that adopts an open update hands out the same one; a nonce of
 * another size is refused. */
T_TEST(codec_keeps_the_nonce)
{
	update_rec u, d;
	rec(&u, "j1", 7, "preparing");
	u.has_nonce = true;
	for (int i = 0; i < UPDATE_NONCE_LEN; i++) u.nonce[i] = (uint8_t)(0xa5 ^ i);
	uint8_t *b;
	size_t n;
	char err[200];
	T_EQ(update_rec_encode(&u, &b, &n), 0);
	T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
	free(b);
	T_CHECK(d.has_nonce && !memcmp(d.nonce, u.nonce, UPDATE_NONCE_LEN));
	update_rec c;
	T_EQ(update_rec_copy(&c, &d), 0);
	T_CHECK(c.has_nonce && !memcmp(c.nonce, u.nonce, UPDATE_NONCE_LEN));
	update_rec_free(&c);
	update_rec_free(&d);
	/* none: none */
	u.has_nonce = false;
	T_EQ(update_rec_encode(&u, &b, &n), 0);
	T_EQ(update_rec_decode(&d, b, n, err, sizeof err), 0);
	free(b);
	T_CHECK(!d.has_nonce);
	update_rec_free(&d);
	/* 5 bytes: refused */
	Skein__Weights__Update p = SKEIN__WEIGHTS__UPDATE__INIT;
	uint8_t five[5] = { 1, 2, 3, 4, 5 }, buf[512];
	p.job = (char *)"j1";
	p.version = 1;
	p.mode = (char *)"p2p";
	p.sender = (char *)"j1/trainer-0";
	p.sender_node = (char *)"n1";
	p.state = (char *)"preparing";
	p.nonce.data = five;
	p.nonce.len = sizeof five;
	n = skein__weights__update__pack(&p, buf);
	T_EQ(update_rec_decode(&d, buf, n, err, sizeof err), -1);
	T_CHECK(strstr(err, "nonce") != NULL);
}
