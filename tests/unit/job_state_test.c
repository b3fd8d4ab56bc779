/* tests/unit/job_state_test: jobs/job_state (the replicated map of jobs).
 *
 * Checks each entry type (submit, update, delete) applied and refused, the
 * refusal counter, the validation of records (spec rules, state names,
 * layout size), submission order, the snapshot round trip (packed bytes of
 * every job equal), that a bad snapshot fails and leaves the state as it
 * was, and that random bytes fed to apply never crash and never break the
 * map's invariants (unique names, ordered by seq). */
#include "tests/t.h"

#include "common/sk_rng.h"
#include "jobs/job_codec.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "proto/jobs.pb-c.h"

enum { SLOTS_MAX = 64 };

/* A valid split spec: 8 trainer ranks, 4 engines of 2 GPUs (16 slots). */
static void good_spec(job_spec *s, const char *name)
{
	char err[256];
	job_spec_defaults(s);
	snprintf(s->name, sizeof s->name, "%s", name);
	s->rollout_num_gpus = 8;
	s->rollout_num_gpus_per_engine = 2;
	snprintf(s->trainer_cmd, sizeof s->trainer_cmd, "python train.py");
	snprintf(s->rollout_cmd, sizeof s->rollout_cmd, "python -m sglang.launch_server");
	if (job_spec_validate(s, err, sizeof err) != 0) T_FAIL("good_spec: %s", err);
}

/* A Job around spec s; nslots > 0 adds a layout of that many slots. */
typedef struct {
	Skein__Jobs__Job job;
	Skein__Jobs__JobSpec spec;
	Skein__Jobs__Layout layout;
	Skein__Jobs__Slot slot[SLOTS_MAX];
	Skein__Jobs__Slot *slotp[SLOTS_MAX];
	char node[SLOTS_MAX][16];
} job_buf;

static void job_build(job_buf *b, const job_spec *s, const char *state, uint64_t seq, size_t nslots)
{
	T_CHECK(nslots <= SLOTS_MAX);
	skein__jobs__job__init(&b->job);
	job_spec_to_pb(s, &b->spec);
	b->job.spec = &b->spec;
	b->job.state = (char *)state;
	b->job.reason = (char *)"";
	b->job.seq = seq;
	b->job.submitted_ms = 1700000000000ull + seq;
	if (nslots) {
		skein__jobs__layout__init(&b->layout);
		for (size_t i = 0; i < nslots; i++) {
			skein__jobs__slot__init(&b->slot[i]);
			snprintf(b->node[i], sizeof b->node[i], "node-%zu", i / 8);
			b->slot[i].node = b->node[i];
			b->slot[i].gpu = (uint32_t)(i % 8);
			b->slotp[i] = &b->slot[i];
		}
		b->layout.n_slots = nslots;
		b->layout.slots = b->slotp;
		b->layout.trainer_gen = 1;
		b->layout.master_addr = (char *)"10.0.0.1";
		b->job.layout = &b->layout;
	}
}

/* Applies a Job built from these values; returns apply's result. */
static int apply_job(job_state *js, uint8_t type, const job_spec *s, const char *state, uint64_t seq,
		     size_t nslots)
{
	job_buf b;
	uint8_t *p;
	size_t len;
	job_build(&b, s, state, seq, nslots);
	/* an update is built on the record it replaces (version + 1) */
	const job_rec *cur = job_state_get(js, s->name);
	if (type == JOB_ENTRY_UPDATE && cur) b.job.version = cur->version + 1;
	T_EQ(job_codec_pack(&b.job, &p, &len), 0);
	int rc = job_state_apply(js, type, p, len);
	free(p);
	return rc;
}

static int submit(job_state *js, const char *name, uint64_t seq)
{
	job_spec s;
	good_spec(&s, name);
	return apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", seq, 0);
}

static int del(job_state *js, const char *name)
{
	return job_state_apply(js, JOB_ENTRY_DELETE, (const uint8_t *)name, strlen(name));
}

/* The packed bytes of a job, for comparing records. */
static uint8_t *packed(const job_rec *j, size_t *len)
{
	uint8_t *p;
	T_CHECK(j != NULL);
	T_EQ(job_codec_encode(j, &p, len), 0);
	return p;
}

static void check_same_job(const job_rec *a, const job_rec *b)
{
	size_t la, lb;
	uint8_t *pa = packed(a, &la), *pb = packed(b, &lb);
	T_EQ(la, lb);
	T_CHECK(memcmp(pa, pb, la) == 0);
	free(pa);
	free(pb);
}

/* A record that reads back as the generated Job it came from: the same bytes. */
static void check_same_as_pb(const job_rec *a, const Skein__Jobs__Job *b)
{
	size_t la, lb;
	uint8_t *pa = packed(a, &la), *pb;
	T_EQ(job_codec_pack(b, &pb, &lb), 0);
	T_EQ(la, lb);
	T_CHECK(memcmp(pa, pb, la) == 0);
	free(pa);
	free(pb);
}

/* Every job of a and b equal, in the same order. */
static void check_same_state(const job_state *a, const job_state *b)
{
	T_EQ(job_state_count(a), job_state_count(b));
	T_EQ(job_state_next_seq(a), job_state_next_seq(b));
	for (size_t i = 0; i < job_state_count(a); i++) check_same_job(job_state_at(a, i), job_state_at(b, i));
}

/* Names unique, seq non-decreasing, every record readable. */
static void check_invariants(const job_state *js)
{
	size_t n = job_state_count(js);
	T_LE(n, JOB_STATE_JOBS_MAX);
	T_CHECK(job_state_at(js, n) == NULL);
	for (size_t i = 0; i < n; i++) {
		const job_rec *j = job_state_at(js, i);
		T_CHECK(j && j->spec.name[0] && j->state);
		T_CHECK(job_state_get(js, j->spec.name) == j);
		T_LE(j->seq + 1, job_state_next_seq(js));
		if (i) T_LE(job_state_at(js, i - 1)->seq, j->seq);
	}
}

T_TEST(submit_then_get)
{
	job_state *js = job_state_new();
	T_CHECK(js != NULL);
	T_EQ(job_state_count(js), 0);
	T_EQ(job_state_next_seq(js), 1);
	T_CHECK(job_state_get(js, "grpo") == NULL);
	T_CHECK(job_state_at(js, 0) == NULL);

	T_EQ(submit(js, "grpo", 1), 0);
	T_EQ(job_state_count(js), 1);
	T_EQ(job_state_refused(js), 0);
	T_EQ(job_state_next_seq(js), 2);
	const job_rec *j = job_state_get(js, "grpo");
	T_CHECK(j != NULL);
	T_CHECK(job_state_at(js, 0) == j);
	T_STREQ(j->spec.name, "grpo");
	T_STREQ(j->spec.trainer_cmd, "python train.py");
	T_STREQ(j->spec.rollout_cmd, "python -m sglang.launch_server");
	T_EQ(j->spec.rollout_num_gpus, 8);
	T_EQ(j->spec.rollout_num_gpus_per_engine, 2);
	T_STREQ(j->state, "pending");
	T_EQ(j->seq, 1);
	T_EQ(j->submitted_ms, 1700000000001ull);
	T_CHECK(!j->has_layout);
	T_CHECK(job_state_get(js, "grpo2") == NULL);
	T_CHECK(job_state_get(js, "grp") == NULL);

	/* a record with a layout of the right size */
	job_spec s;
	good_spec(&s, "with-layout");
	T_EQ(apply_job(js, JOB_ENTRY_SUBMIT, &s, "running", 7, 16), 0);
	j = job_state_get(js, "with-layout");
	T_CHECK(j && j->has_layout);
	T_EQ(j->layout.n, 16);
	T_STREQ(j->layout.node[15], "node-1");
	T_EQ(j->layout.gpu[15], 7);
	T_EQ(job_state_next_seq(js), 8);
	job_state_free(&js);
	T_CHECK(js == NULL);
	job_state_free(&js);  /* safe twice */
}

T_TEST(submit_same_name_refused)
{
	job_state *js = job_state_new();
	T_EQ(submit(js, "a", 1), 0);
	const job_rec *before = job_state_get(js, "a");
	size_t lb;
	uint8_t *pb = packed(before, &lb);
	/* same name, other seq and state: refused, record untouched */
	job_spec s;
	good_spec(&s, "a");
	s.max_restarts = 3;
	T_EQ(apply_job(js, JOB_ENTRY_SUBMIT, &s, "running", 2, 0), -1);
	T_EQ(job_state_refused(js), 1);
	T_EQ(submit(js, "a", 1), -1);
	T_EQ(job_state_refused(js), 2);
	T_EQ(job_state_count(js), 1);
	T_EQ(job_state_next_seq(js), 2);
	size_t la;
	uint8_t *pa = packed(job_state_get(js, "a"), &la);
	T_EQ(la, lb);
	T_CHECK(memcmp(pa, pb, la) == 0);
	T_EQ(job_state_get(js, "a")->spec.max_restarts, 10);
	free(pa);
	free(pb);
	/* another name is fine */
	T_EQ(submit(js, "b", 2), 0);
	T_EQ(job_state_count(js), 2);
	T_EQ(job_state_refused(js), 2);
	job_state_free(&js);
}

T_TEST(update_absent_refused)
{
	job_state *js = job_state_new();
	job_spec s;
	good_spec(&s, "ghost");
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 1, 16), -1);
	T_EQ(job_state_refused(js), 1);
	T_EQ(job_state_count(js), 0);
	T_EQ(submit(js, "real", 1), 0);
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 1, 16), -1);
	T_EQ(job_state_refused(js), 2);
	T_EQ(job_state_count(js), 1);
	T_CHECK(job_state_get(js, "ghost") == NULL);
	/* deleted, then updated: still absent */
	T_EQ(del(js, "real"), 0);
	good_spec(&s, "real");
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 1, 0), -1);
	T_EQ(job_state_refused(js), 3);
	T_EQ(job_state_count(js), 0);
	job_state_free(&js);
}

T_TEST(update_other_seq_refused)
{
	job_state *js = job_state_new();
	T_EQ(submit(js, "a", 4), 0);
	job_spec s;
	good_spec(&s, "a");
	/* a stale update meant for an earlier job of the same name */
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 3, 16), -1);
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 5, 16), -1);
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 0, 16), -1);
	T_EQ(job_state_refused(js), 3);
	T_STREQ(job_state_get(js, "a")->state, "pending");
	T_CHECK(!job_state_get(js, "a")->has_layout);
	T_EQ(job_state_get(js, "a")->seq, 4);
	T_EQ(job_state_next_seq(js), 5);
	job_state_free(&js);
}

T_TEST(update_replaces)
{
	job_state *js = job_state_new();
	T_EQ(submit(js, "a", 1), 0);
	T_EQ(submit(js, "b", 2), 0);
	T_EQ(submit(js, "c", 3), 0);
	job_spec s;
	good_spec(&s, "b");
	job_buf buf;
	job_build(&buf, &s, "running", 2, 16);
	buf.job.reason = (char *)"placed";
	buf.layout.trainer_gen = 5;
	buf.layout.master_port = 29500;
	uint32_t gens[4] = { 1, 2, 3, 4 }, restarts[4] = { 0, 1, 0, 2 };
	buf.layout.n_engine_gen = 4;
	buf.layout.engine_gen = gens;
	buf.layout.n_engine_restarts = 4;
	buf.layout.engine_restarts = restarts;
	buf.job.version = job_state_get(js, s.name)->version + 1;
	uint8_t *p;
	size_t len;
	T_EQ(job_codec_pack(&buf.job, &p, &len), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_UPDATE, p, len), 0);
	free(p);
	T_EQ(job_state_refused(js), 0);
	T_EQ(job_state_count(js), 3);
	const job_rec *j = job_state_get(js, "b");
	check_same_as_pb(j, &buf.job);
	T_CHECK(job_state_at(js, 1) == j);  /* same place */
	T_STREQ(j->state, "running");
	T_STREQ(j->reason, "placed");
	T_EQ(j->layout.trainer_gen, 5);
	T_EQ(j->layout.master_port, 29500);
	T_EQ(j->layout.neng, 4);
	T_EQ(j->layout.engine_restarts[3], 2);
	/* the spec may change too (the head rewrites it); the others stay */
	good_spec(&s, "b");
	s.max_restarts = 1;
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "stopping", 2, 0), 0);
	j = job_state_get(js, "b");
	T_STREQ(j->state, "stopping");
	T_EQ(j->spec.max_restarts, 1);
	T_CHECK(!j->has_layout);
	T_STREQ(job_state_at(js, 0)->spec.name, "a");
	T_STREQ(job_state_at(js, 2)->spec.name, "c");
	/* every state name is accepted */
	static const char *const states[] = { "pending", "running", "stopping", "stopped", "failed", "completed" };
	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
		T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, states[i], 2, 16), 0);
		T_STREQ(job_state_get(js, "b")->state, states[i]);
	}
	T_EQ(job_state_refused(js), 0);
	job_state_free(&js);
}

T_TEST(delete_job)
{
	job_state *js = job_state_new();
	T_EQ(submit(js, "a", 1), 0);
	T_EQ(submit(js, "b", 2), 0);
	T_EQ(submit(js, "c", 3), 0);
	T_EQ(del(js, "b"), 0);
	T_EQ(job_state_count(js), 2);
	T_CHECK(job_state_get(js, "b") == NULL);
	T_STREQ(job_state_at(js, 0)->spec.name, "a");
	T_STREQ(job_state_at(js, 1)->spec.name, "c");
	T_EQ(job_state_next_seq(js), 4);  /* seqs are not reused */
	T_EQ(job_state_refused(js), 0);
	/* absent, empty, prefix, too long */
	T_EQ(del(js, "b"), -1);
	T_EQ(job_state_apply(js, JOB_ENTRY_DELETE, NULL, 0), -1);
	T_EQ(del(js, "a."), -1);
	T_EQ(job_state_apply(js, JOB_ENTRY_DELETE, (const uint8_t *)"a\0x", 3), -1);  /* not a name */
	T_EQ(job_state_apply(js, JOB_ENTRY_DELETE, (const uint8_t *)"a\0", 2), -1);
	T_CHECK(job_state_get(js, "a") != NULL);
	T_EQ(job_state_apply(js, JOB_ENTRY_DELETE, (const uint8_t *)"ab", 1), 0);  /* length counts, not NUL */
	T_CHECK(job_state_get(js, "a") == NULL);
	char lng[JOB_NAME_MAX + 2];
	memset(lng, 'x', sizeof lng - 1);
	lng[sizeof lng - 1] = 0;
	T_EQ(del(js, lng), -1);
	T_EQ(job_state_refused(js), 6);
	T_EQ(job_state_count(js), 1);
	/* the name may be submitted again after its delete */
	T_EQ(submit(js, "b", job_state_next_seq(js)), 0);
	T_EQ(job_state_get(js, "b")->seq, 4);
	T_EQ(del(js, "c"), 0);
	T_EQ(del(js, "b"), 0);
	T_EQ(job_state_count(js), 0);
	T_EQ(job_state_next_seq(js), 5);
	/* the longest name works */
	lng[JOB_NAME_MAX] = 0;
	T_EQ(submit(js, lng, 9), 0);
	T_EQ(del(js, lng), 0);
	T_EQ(job_state_count(js), 0);
	job_state_free(&js);
}

T_TEST(invalid_records_refused)
{
	job_state *js = job_state_new();
	job_spec s;
	uint64_t refused = 0;
#define REFUSED(expr)                                  \
	do {                                           \
		T_EQ((expr), -1);                      \
		T_EQ(job_state_refused(js), ++refused); \
		T_EQ(job_state_count(js), 0);          \
	} while (0)
	/* rollout GPUs not a multiple of the per-engine count */
	good_spec(&s, "a");
	s.rollout_num_gpus = 6;
	s.rollout_num_gpus_per_engine = 4;
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	/* empty trainer command */
	good_spec(&s, "a");
	s.trainer_cmd[0] = 0;
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	/* rollout GPUs without a rollout command */
	good_spec(&s, "a");
	s.rollout_cmd[0] = 0;
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	/* unknown transfer mode */
	good_spec(&s, "a");
	snprintf(s.transfer_mode, sizeof s.transfer_mode, "carrier-pigeon");
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	/* zero GPUs per node */
	good_spec(&s, "a");
	s.num_gpus_per_node = 0;
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	/* bad state strings */
	good_spec(&s, "a");
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "bogus", 1, 0));
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "", 1, 0));
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "Running", 1, 0));
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "running ", 1, 0));
	/* layouts of the wrong size (16 slots is right) */
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 15));
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 17));
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 8));
	/* names: empty (the head names it before submitting), bad characters */
	good_spec(&s, "");
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	good_spec(&s, "a");
	s.name[0] = '-';
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	good_spec(&s, "a");
	snprintf(s.name, sizeof s.name, "a/b");
	REFUSED(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 1, 0));
	/* a Job without a spec */
	job_buf b;
	uint8_t *p;
	size_t len;
	good_spec(&s, "a");
	job_build(&b, &s, "pending", 1, 0);
	b.job.spec = NULL;
	T_EQ(job_codec_pack(&b.job, &p, &len), 0);
	REFUSED(job_state_apply(js, JOB_ENTRY_SUBMIT, p, len));
	free(p);
	/* not a Job at all */
	static const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f };
	REFUSED(job_state_apply(js, JOB_ENTRY_SUBMIT, junk, sizeof junk));
	/* the same rules hold for updates */
	T_EQ(submit(js, "a", 1), 0);
	T_EQ(job_state_refused(js), refused);
	good_spec(&s, "a");
	s.rollout_num_gpus = 6;
	s.rollout_num_gpus_per_engine = 4;
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 1, 0), -1);
	good_spec(&s, "a");
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "lost", 1, 0), -1);
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 1, 3), -1);
	T_EQ(job_state_refused(js), refused + 3);
	T_STREQ(job_state_get(js, "a")->state, "pending");
	/* colocated: slots = max(actor, rollout) = 8 */
	good_spec(&s, "colo");
	s.colocate = true;
	s.rollout_num_gpus = 0;
	char err[256];
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(job_spec_slots(&s), 8);
	T_EQ(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 2, 16), -1);
	T_EQ(apply_job(js, JOB_ENTRY_SUBMIT, &s, "pending", 2, 8), 0);
	T_EQ(job_state_count(js), 2);
#undef REFUSED
	job_state_free(&js);
}

T_TEST(other_types_ignored)
{
	job_state *js = job_state_new();
	job_spec s;
	good_spec(&s, "a");
	job_buf b;
	uint8_t *p;
	size_t len;
	job_build(&b, &s, "pending", 1, 0);
	T_EQ(job_codec_pack(&b.job, &p, &len), 0);
	static const uint8_t types[] = { 0, 1, 2, 31, 36, 37, 64, 128, 255 }; /* 35: drains */
	for (size_t i = 0; i < sizeof types; i++) {
		T_EQ(job_state_apply(js, types[i], p, len), 1);
		T_EQ(job_state_apply(js, types[i], (const uint8_t *)"a", 1), 1);
		T_EQ(job_state_apply(js, types[i], NULL, 0), 1);
	}
	T_EQ(job_state_count(js), 0);
	T_EQ(job_state_refused(js), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_SUBMIT, p, len), 0);
	T_EQ(job_state_apply(js, 36, (const uint8_t *)"a", 1), 1);
	T_EQ(job_state_count(js), 1);
	free(p);
	job_state_free(&js);
}

T_TEST(order_by_seq)
{
	job_state *js = job_state_new();
	static const struct { const char *name; uint64_t seq; } in[] = {
		{ "e", 5 }, { "b", 2 }, { "i", 9 }, { "a", 1 }, { "g", 7 }, { "c", 3 },
	};
	for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) T_EQ(submit(js, in[i].name, in[i].seq), 0);
	static const char *const want[] = { "a", "b", "c", "e", "g", "i" };
	T_EQ(job_state_count(js), 6);
	for (size_t i = 0; i < 6; i++) T_STREQ(job_state_at(js, i)->spec.name, want[i]);
	T_EQ(job_state_next_seq(js), 10);
	/* delete in the middle, update in place: order kept */
	T_EQ(del(js, "c"), 0);
	job_spec s;
	good_spec(&s, "e");
	T_EQ(apply_job(js, JOB_ENTRY_UPDATE, &s, "running", 5, 16), 0);
	static const char *const want2[] = { "a", "b", "e", "g", "i" };
	for (size_t i = 0; i < 5; i++) T_STREQ(job_state_at(js, i)->spec.name, want2[i]);
	/* equal seqs keep their arrival order */
	T_EQ(submit(js, "x", 7), 0);
	T_STREQ(job_state_at(js, 3)->spec.name, "g");
	T_STREQ(job_state_at(js, 4)->spec.name, "x");
	T_STREQ(job_state_at(js, 5)->spec.name, "i");
	check_invariants(js);
	/* many, in a shuffled order, well past the first growth */
	job_state_free(&js);
	js = job_state_new();
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	enum { N = 200 };
	uint64_t seqs[N];
	for (size_t i = 0; i < N; i++) seqs[i] = i + 1;
	for (size_t i = N - 1; i > 0; i--) {
		size_t k = (size_t)sk_rng_below(&r, i + 1);
		uint64_t t = seqs[i];
		seqs[i] = seqs[k];
		seqs[k] = t;
	}
	for (size_t i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof name, "job-%" PRIu64, seqs[i]);
		T_EQ(submit(js, name, seqs[i]), 0);
	}
	for (size_t i = 0; i < N; i++) T_EQ(job_state_at(js, i)->seq, i + 1);
	T_EQ(job_state_next_seq(js), N + 1);
	check_invariants(js);
	job_state_free(&js);
}

T_TEST(jobs_max)
{
	job_state *js = job_state_new();
	job_spec s;
	good_spec(&s, "x");
	job_buf b;
	job_build(&b, &s, "pending", 0, 0);
	uint8_t p[512];
	for (uint64_t i = 0; i < JOB_STATE_JOBS_MAX; i++) {
		snprintf(s.name, sizeof s.name, "j%" PRIu64, i);
		b.job.seq = i + 1;
		size_t len = skein__jobs__job__get_packed_size(&b.job);
		T_CHECK(len <= sizeof p);
		skein__jobs__job__pack(&b.job, p);
		T_EQ(job_state_apply(js, JOB_ENTRY_SUBMIT, p, len), 0);
	}
	T_EQ(job_state_count(js), JOB_STATE_JOBS_MAX);
	T_EQ(submit(js, "one-more", JOB_STATE_JOBS_MAX + 1), -1);
	T_EQ(job_state_refused(js), 1);
	T_EQ(job_state_count(js), JOB_STATE_JOBS_MAX);
	T_EQ(del(js, "j17"), 0);
	T_EQ(submit(js, "one-more", JOB_STATE_JOBS_MAX + 1), 0);
	T_STREQ(job_state_at(js, JOB_STATE_JOBS_MAX - 1)->spec.name, "one-more");
	job_state_free(&js);
}

/* A state with a few jobs of every shape: layouts, updates, a delete. */
static job_state *sample_state(void)
{
	job_state *js = job_state_new();
	job_spec s;
	T_EQ(submit(js, "alpha", 1), 0);
	T_EQ(submit(js, "beta", 2), 0);
	T_EQ(submit(js, "gamma", 3), 0);
	T_EQ(submit(js, "delta", 4), 0);
	good_spec(&s, "beta");
	job_buf b;
	job_build(&b, &s, "running", 2, 16);
	uint32_t gens[4] = { 3, 1, 4, 1 };
	b.layout.engine_gen = gens;
	b.layout.n_engine_gen = 4;
	b.layout.master_port = 41000;
	b.job.reason = (char *)"trainer restarted";
	b.job.version = job_state_get(js, "beta")->version + 1;
	uint8_t *p;
	size_t len;
	T_EQ(job_codec_pack(&b.job, &p, &len), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_UPDATE, p, len), 0);
	free(p);
	good_spec(&s, "colo");
	s.colocate = true;
	char err[256];
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(apply_job(js, JOB_ENTRY_SUBMIT, &s, "failed", 5, 8), 0);
	T_EQ(del(js, "gamma"), 0);
	T_EQ(submit(js, "beta", 7), -1);
	T_EQ(submit(js, "alpha", 6), -1);
	T_EQ(job_state_count(js), 4);
	return js;
}

T_TEST(snapshot_round_trip)
{
	job_state *a = sample_state(), *b = job_state_new();
	uint8_t *snap, *snap2;
	size_t len, len2;
	char err[128] = "";
	T_EQ(job_state_serialize(a, &snap, &len), 0);
	T_CHECK(len > 9);
	T_CHECK(memcmp(snap, "SKJB\x01", 5) == 0);
	if (job_state_restore(b, snap, len, err, sizeof err) != 0) T_FAIL("restore: %s", err);
	check_same_state(a, b);
	check_invariants(b);
	T_EQ(job_state_refused(b), 0);  /* the counter is local */
	T_STREQ(job_state_get(b, "beta")->reason, "trainer restarted");
	T_EQ(job_state_get(b, "beta")->layout.engine_gen[2], 4);
	/* serialize(restore(x)) == x */
	T_EQ(job_state_serialize(b, &snap2, &len2), 0);
	T_EQ(len2, len);
	T_CHECK(memcmp(snap, snap2, len) == 0);
	free(snap2);
	/* restoring over a state replaces it, keeping its refusal counter */
	job_state *c = job_state_new();
	T_EQ(submit(c, "zeta", 40), 0);
	T_EQ(submit(c, "zeta", 41), -1);
	T_EQ(job_state_restore(c, snap, len, err, sizeof err), 0);
	T_CHECK(job_state_get(c, "zeta") == NULL);
	T_EQ(job_state_refused(c), 1);
	T_EQ(job_state_count(c), job_state_count(a));
	for (size_t i = 0; i < job_state_count(a); i++) check_same_job(job_state_at(a, i), job_state_at(c, i));
	/* entries apply the same on both afterwards */
	T_EQ(submit(a, "eta", 10), 0);
	T_EQ(submit(b, "eta", 10), 0);
	T_EQ(del(a, "alpha"), 0);
	T_EQ(del(b, "alpha"), 0);
	check_same_state(a, b);
	free(snap);
	/* the empty state */
	job_state *e = job_state_new(), *f = sample_state();
	T_EQ(job_state_serialize(e, &snap, &len), 0);
	T_EQ(len, 9);
	T_EQ(job_state_restore(f, snap, len, err, sizeof err), 0);
	T_EQ(job_state_count(f), 0);
	free(snap);
	job_state_free(&a);
	job_state_free(&b);
	job_state_free(&c);
	job_state_free(&e);
	job_state_free(&f);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* restore must fail and leave js exactly as `want` (a serialized copy). */
static void restore_fails(job_state *js, const uint8_t *data, size_t len, const uint8_t *want, size_t wlen,
			  uint64_t refused)
{
	char err[128] = "";
	uint8_t *now;
	size_t nlen;
	if (job_state_restore(js, data, len, err, sizeof err) != -1) T_FAIL("restore of %zu bytes succeeded", len);
	T_CHECK(err[0] != 0);
	T_EQ(job_state_serialize(js, &now, &nlen), 0);
	T_EQ(nlen, wlen);
	T_CHECK(memcmp(now, want, wlen) == 0);
	T_EQ(job_state_refused(js), refused);
	free(now);
	check_invariants(js);
}

T_TEST(bad_snapshots_fail_unchanged)
{
	job_state *src = sample_state(), *js = job_state_new();
	T_EQ(submit(js, "keep-me", 3), 0);
	T_EQ(submit(js, "and-me", 8), 0);
	T_EQ(submit(js, "and-me", 9), -1);
	uint64_t refused = job_state_refused(js), next = job_state_next_seq(js);
	uint8_t *want, *snap;
	size_t wlen, len;
	T_EQ(job_state_serialize(js, &want, &wlen), 0);
	T_EQ(job_state_serialize(src, &snap, &len), 0);

	/* every truncation */
	for (size_t n = 0; n < len; n++) restore_fails(js, snap, n, want, wlen, refused);
	/* a trailing byte, or several */
	uint8_t *big = malloc(len + 8);
	memcpy(big, snap, len);
	memset(big + len, 0, 8);
	for (size_t extra = 1; extra <= 8; extra++) restore_fails(js, big, len + extra, want, wlen, refused);
	/* bad magic, bad version */
	memcpy(big, snap, len);
	big[0] = 'X';
	restore_fails(js, big, len, want, wlen, refused);
	memcpy(big, snap, len);
	big[4] = 2;
	restore_fails(js, big, len, want, wlen, refused);
	/* a count larger or smaller than the jobs that follow */
	memcpy(big, snap, len);
	put32(big + 5, (uint32_t)job_state_count(src) + 1);
	restore_fails(js, big, len, want, wlen, refused);
	put32(big + 5, (uint32_t)job_state_count(src) - 1);
	restore_fails(js, big, len, want, wlen, refused);
	put32(big + 5, UINT32_MAX);
	restore_fails(js, big, len, want, wlen, refused);
	/* a job length running past the end */
	memcpy(big, snap, len);
	put32(big + 9, UINT32_MAX);
	restore_fails(js, big, len, want, wlen, refused);
	put32(big + 9, (uint32_t)(len - 13 + 1));
	restore_fails(js, big, len, want, wlen, refused);
	free(big);

	/* the same job twice */
	size_t l0 = 0;
	{
		uint8_t *p0 = packed(job_state_at(src, 0), &l0);
		size_t dlen = 9 + 2 * (4 + l0);
		uint8_t *dup = malloc(dlen);
		memcpy(dup, "SKJB\x01", 5);
		put32(dup + 5, 2);
		put32(dup + 9, (uint32_t)l0);
		memcpy(dup + 13, p0, l0);
		put32(dup + 13 + l0, (uint32_t)l0);
		memcpy(dup + 17 + l0, p0, l0);
		restore_fails(js, dup, dlen, want, wlen, refused);
		/* the same name with another seq */
		Skein__Jobs__Job *j = skein__jobs__job__unpack(NULL, l0, p0);
		T_CHECK(j != NULL);
		j->seq += 100;
		size_t l1 = skein__jobs__job__get_packed_size(j);
		uint8_t *d2 = malloc(9 + 8 + l0 + l1);
		memcpy(d2, "SKJB\x01", 5);
		put32(d2 + 5, 2);
		put32(d2 + 9, (uint32_t)l0);
		memcpy(d2 + 13, p0, l0);
		put32(d2 + 13 + l0, (uint32_t)l1);
		skein__jobs__job__pack(j, d2 + 17 + l0);
		restore_fails(js, d2, 9 + 8 + l0 + l1, want, wlen, refused);
		/* and a well-formed snapshot of the two is fine */
		char *orig = j->spec->name;
		j->spec->name = (char *)"other";
		l1 = skein__jobs__job__get_packed_size(j);
		put32(d2 + 13 + l0, (uint32_t)l1);
		skein__jobs__job__pack(j, d2 + 17 + l0);
		job_state *ok = job_state_new();
		char err[128];
		T_EQ(job_state_restore(ok, d2, 9 + 8 + l0 + l1, err, sizeof err), 0);
		T_EQ(job_state_count(ok), 2);
		job_state_free(&ok);
		j->spec->name = orig;  /* unpacked memory: free its own string */
		skein__jobs__job__free_unpacked(j, NULL);
		free(d2);
		free(dup);
		free(p0);
	}

	/* an invalid record inside a well-framed snapshot */
	{
		job_spec s;
		good_spec(&s, "bad");
		s.trainer_cmd[0] = 0;
		job_buf b;
		job_build(&b, &s, "pending", 1, 0);
		size_t l = skein__jobs__job__get_packed_size(&b.job);
		uint8_t *d = malloc(13 + l);
		memcpy(d, "SKJB\x01", 5);
		put32(d + 5, 1);
		put32(d + 9, (uint32_t)l);
		skein__jobs__job__pack(&b.job, d + 13);
		restore_fails(js, d, 13 + l, want, wlen, refused);
		free(d);
	}

	/* random garbage, and random damage to a good snapshot */
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	uint8_t buf[1024];
	for (int k = 0; k < 2000; k++) {
		size_t n;
		if (k % 2) {
			n = (size_t)sk_rng_below(&r, sizeof buf);
			for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)sk_rng_next(&r);
			if (n >= 5 && sk_rng_below(&r, 2)) memcpy(buf, "SKJB\x01", 5);
		} else {
			T_CHECK(len <= sizeof buf);
			n = len;
			memcpy(buf, snap, len);
			int flips = 1 + (int)sk_rng_below(&r, 4);
			for (int f = 0; f < flips; f++) buf[sk_rng_below(&r, n)] ^= (uint8_t)(1u << sk_rng_below(&r, 8));
			if (sk_rng_below(&r, 4) == 0) n = (size_t)sk_rng_below(&r, n + 1);
		}
		char err[128];
		job_state *t = job_state_new();
		if (job_state_restore(t, buf, n, err, sizeof err) == 0) check_invariants(t);
		job_state_free(&t);
	}
	/* after all of that, js is still itself */
	T_EQ(job_state_next_seq(js), next);
	T_STREQ(job_state_at(js, 0)->spec.name, "keep-me");
	T_EQ(job_state_restore(js, snap, len, (char[64]){ 0 }, 64), 0);
	T_EQ(job_state_count(js), job_state_count(src));
	free(want);
	free(snap);
	job_state_free(&src);
	job_state_free(&js);
}

T_TEST_TIMEOUT(fuzz_apply, 120)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	job_state *js = job_state_new();
	enum { CASES = 5000 };
	uint8_t buf[2048];
	size_t applied = 0, refused = 0, ignored = 0;
	static const char *const names[] = { "a", "b", "c", "d", "e" };
	static const char *const states[] = { "pending", "running", "failed", "bogus" };
	for (int k = 0; k < CASES; k++) {
		uint8_t type = (uint8_t)(31 + sk_rng_below(&r, 5));
		if (sk_rng_below(&r, 16) == 0) type = (uint8_t)sk_rng_next(&r);
		size_t n = 0;
		int mode = (int)sk_rng_below(&r, 4);
		if (mode == 0) {
			/* pure garbage */
			n = (size_t)sk_rng_below(&r, 256);
			for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)sk_rng_next(&r);
		} else if (mode == 1 && type == JOB_ENTRY_DELETE) {
			const char *nm = names[sk_rng_below(&r, 5)];
			n = strlen(nm);
			memcpy(buf, nm, n);
			if (sk_rng_below(&r, 4) == 0) buf[n++] = (uint8_t)sk_rng_next(&r);
		} else {
			/* a job, maybe valid, maybe damaged */
			job_spec s;
			good_spec(&s, names[sk_rng_below(&r, 5)]);
			if (sk_rng_below(&r, 3) == 0) s.rollout_num_gpus = (uint32_t)sk_rng_below(&r, 20);
			if (sk_rng_below(&r, 3) == 0) s.colocate = sk_rng_below(&r, 2);
			job_buf b;
			size_t slots = sk_rng_below(&r, 3) ? 0 : (size_t)sk_rng_below(&r, 20);
			job_build(&b, &s, states[sk_rng_below(&r, 4)], 1 + sk_rng_below(&r, 8), slots);
			n = skein__jobs__job__get_packed_size(&b.job);
			T_CHECK(n <= sizeof buf);
			skein__jobs__job__pack(&b.job, buf);
			if (mode == 3 && n) {
				int flips = 1 + (int)sk_rng_below(&r, 4);
				for (int f = 0; f < flips; f++)
					buf[sk_rng_below(&r, n)] ^= (uint8_t)(1u << sk_rng_below(&r, 8));
				if (sk_rng_below(&r, 4) == 0) n = (size_t)sk_rng_below(&r, n + 1);
			}
		}
		uint64_t before = job_state_refused(js);
		int rc = job_state_apply(js, type, n ? buf : NULL, n);
		if (type < JOB_ENTRY_SUBMIT || type > JOB_ENTRY_DRAIN) {
			T_EQ(rc, 1);
			T_EQ(job_state_refused(js), before);
			ignored++;
		} else if (rc == 0) {
			T_EQ(job_state_refused(js), before);
			applied++;
		} else {
			T_EQ(rc, -1);
			T_EQ(job_state_refused(js), before + 1);
			refused++;
		}
		if (k % 64 == 0) check_invariants(js);
	}
	check_invariants(js);
	/* whatever it holds survives a snapshot */
	uint8_t *snap;
	size_t len;
	char err[128];
	job_state *copy = job_state_new();
	T_EQ(job_state_serialize(js, &snap, &len), 0);
	if (job_state_restore(copy, snap, len, err, sizeof err) != 0) T_FAIL("restore: %s", err);
	T_EQ(job_state_count(copy), job_state_count(js));
	for (size_t i = 0; i < job_state_count(js); i++) check_same_job(job_state_at(js, i), job_state_at(copy, i));
	free(snap);
	printf("  fuzz: %zu applied, %zu refused, %zu ignored (seed %llu)\n", applied, refused, ignored,
	       (unsigned long long)t_seed());
	T_CHECK(applied > 0 && refused > 0 && ignored > 0);
	job_state_free(&copy);
	job_state_free(&js);
}

/* Two updates built on the same record (a stop racing a restart): the
 * first wins, the second is refused and the record is the first's. */
T_TEST(update_on_a_stale_version_refused)
{
	job_state *js = job_state_new();
	T_EQ(submit(js, "a", 1), 0);
	job_spec s;
	good_spec(&s, "a");
	job_buf b1, b2;
	job_build(&b1, &s, "stopped", 1, 0);
	job_build(&b2, &s, "running", 1, 0);
	b1.job.version = b2.job.version = job_state_get(js, "a")->version + 1;
	uint8_t *p1, *p2;
	size_t l1, l2;
	T_EQ(job_codec_pack(&b1.job, &p1, &l1), 0);
	T_EQ(job_codec_pack(&b2.job, &p2, &l2), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_UPDATE, p1, l1), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_UPDATE, p2, l2), -1);
	T_STREQ(job_state_get(js, "a")->state, "stopped");
	T_EQ(job_state_get(js, "a")->version, 1);
	T_EQ(job_state_refused(js), 1);
	free(p1);
	free(p2);
	job_state_free(&js);
}

/* Drains: on, again (no change), off, off again (refused); snapshots keep
 * them (version 2) and stay version 1 without; damaged drain bytes refused. */
T_TEST(job_state_drain)
{
	job_state *js = job_state_new();
	uint8_t *d;
	size_t l;
	T_EQ(job_state_encode_drain("n4", true, 1000, &d, &l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), 0);
	free(d);
	T_EQ(job_state_encode_drain("n5", true, 2000, &d, &l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), 0);
	free(d);
	T_EQ(job_state_drained_count(js), 2);
	uint64_t since;
	T_CHECK(!strcmp(job_state_drained_at(js, 0, &since), "n4"));
	T_EQ(since, 1000);
	T_CHECK(job_state_is_drained(js, "n5") && !job_state_is_drained(js, "n6"));
	uint8_t *snap;
	size_t sl;
	T_EQ(job_state_serialize(js, &snap, &sl), 0);
	T_EQ(snap[4], 2);
	job_state *js2 = job_state_new();
	char err[200];
	T_EQ(job_state_restore(js2, snap, sl, err, sizeof err), 0);
	T_CHECK(job_state_is_drained(js2, "n4") && job_state_is_drained(js2, "n5"));
	for (size_t cut = 9; cut < sl; cut++) T_EQ(job_state_restore(js2, snap, cut, err, sizeof err), -1);
	free(snap);
	job_state_free(&js2);
	T_EQ(job_state_encode_drain("n4", false, 0, &d, &l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), -1); /* not drained any more */
	free(d);
	T_EQ(job_state_encode_drain("n5", false, 0, &d, &l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), 0);
	free(d);
	T_EQ(job_state_drained_count(js), 0);
	T_EQ(job_state_serialize(js, &snap, &sl), 0);
	T_EQ(snap[4], 1); /* nothing drained: a snapshot older voters read */
	free(snap);
	uint8_t junk[] = { 0x0a, 0xff, 0x01 };
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, junk, sizeof junk), -1);
	T_EQ(job_state_encode_drain("", true, 0, &d, &l), 0);
	T_EQ(job_state_apply(js, JOB_ENTRY_DRAIN, d, l), -1);
	free(d);
	job_state_free(&js);
}
