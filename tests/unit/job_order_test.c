/* tests/unit/job_order_test: jobs/job_codec's orders and reports
 * (jobs/job_order.h <-> proto/jobs.proto Assignment and Report).
 *
 * Checks that an assignment and a report read back field for field, that an
 * empty one does, that every bound of job_order.h refuses a message one past it and takes
 * one at it, and that random bytes and cut or flipped encodings end in -1
 * or a message within the bounds, never a crash (seeded: TEST_SEED). */
#include "tests/t.h"

#include <stdlib.h>
#include <string.h>

#include "common/sk_rng.h"
#include "jobs/job_codec.h"
#include "jobs/job_state.h"
#include "proto/jobs.pb-c.h"

#define T_HAS(hay, needle)                                                        \
	do {                                                                      \
		const char *h_ = (hay), *n_ = (needle);                           \
		if (!strstr(h_, n_)) T_FAIL("'%s' does not contain '%s'", h_, n_); \
	} while (0)

static const char *ENV0[] = { "RANK=0", "MASTER_ADDR=10.0.0.1", "SKEIN_DISK_DIR=/shared/w" };
static const char *DRAINED[] = { "n7", "gpu-09" };

/* A trainer rank and an engine of 2 GPUs, from head n1, two drained nodes. */
static void sample(job_order o[2], const job_order *ptrs[2], job_assignment *as)
{
	memset(o, 0, 2 * sizeof *o);
	snprintf(o[0].id, sizeof o[0].id, "rl/trainer-0");
	snprintf(o[0].job, sizeof o[0].job, "rl");
	o[0].trainer = true;
	o[0].rank = 0;
	o[0].engine = -1;
	o[0].ngpus = 1;
	o[0].gpus[0] = 3;
	o[0].cmd = "python train.py --lr 1e-6";
	o[0].nenv = 3;
	o[0].env = ENV0;
	o[0].gen = 7;
	o[0].restart_base = 6;
	o[0].max_restarts = 10;
	o[0].backoff_min_ms = 1000;
	o[0].backoff_max_ms = 30000;
	o[0].start_delay_ms = 4000;
	o[0].hold = true;
	o[0].stop_grace_ms = 5000;
	snprintf(o[1].id, sizeof o[1].id, "rl/engine-3");
	snprintf(o[1].job, sizeof o[1].job, "rl");
	o[1].rank = -1;
	o[1].engine = 3;
	o[1].ngpus = 2;
	o[1].gpus[0] = 6;
	o[1].gpus[1] = 7;
	o[1].cmd = "";
	o[1].gen = UINT64_MAX;
	o[1].local_restart = true;
	o[1].max_restarts = -1;
	ptrs[0] = &o[0];
	ptrs[1] = &o[1];
	memset(as, 0, sizeof *as);
	snprintf(as->head, sizeof as->head, "n1");
	as->n = 2;
	as->members = ptrs;
	as->ndrained = 2;
	as->drained = DRAINED;
}

static void same_order(const job_order *a, const job_order *b)
{
	T_STREQ(a->id, b->id);
	T_STREQ(a->job, b->job);
	T_EQ(a->trainer, b->trainer);
	T_EQ(a->rank, b->rank);
	T_EQ(a->engine, b->engine);
	T_EQ(a->ngpus, b->ngpus);
	T_CHECK(!memcmp(a->gpus, b->gpus, a->ngpus * sizeof *a->gpus));
	T_STREQ(a->cmd, b->cmd);
	T_EQ(a->nenv, b->nenv);
	for (uint32_t e = 0; e < a->nenv; e++) T_STREQ(a->env[e], b->env[e]);
	T_CHECK(a->gen == b->gen);
	T_EQ(a->restart_base, b->restart_base);
	T_EQ(a->local_restart, b->local_restart);
	T_EQ(a->max_restarts, b->max_restarts);
	T_EQ(a->backoff_min_ms, b->backoff_min_ms);
	T_EQ(a->backoff_max_ms, b->backoff_max_ms);
	T_EQ(a->start_delay_ms, b->start_delay_ms);
	T_EQ(a->hold, b->hold);
	T_EQ(a->stop_grace_ms, b->stop_grace_ms);
}

T_TEST(assignment_round_trip)
{
	job_order o[2];
	const job_order *ptrs[2];
	job_assignment as, back;
	char err[160] = "";
	sample(o, ptrs, &as);
	uint8_t *buf;
	size_t len;
	T_EQ(job_codec_assignment_encode(&as, &buf, &len), 0);
	if (job_codec_assignment_decode(&back, buf, len, err, sizeof err) != 0) T_FAIL("%s", err);
	T_STREQ(back.head, "n1");
	T_EQ(back.n, 2);
	for (size_t i = 0; i < 2; i++) same_order(back.members[i], &o[i]);
	T_EQ(back.ndrained, 2);
	T_STREQ(back.drained[0], "n7");
	T_STREQ(back.drained[1], "gpu-09");
	/* the old wire: the role as text, the generated reader sees the same */
	Skein__Jobs__Assignment *pa = skein__jobs__assignment__unpack(NULL, len, buf);
	T_CHECK(pa);
	T_STREQ(pa->members[0]->role, "trainer");
	T_STREQ(pa->members[1]->role, "rollout");
	T_EQ(pa->members[1]->n_gpus, 2);
	skein__jobs__assignment__free_unpacked(pa, NULL);
	/* encode(decode(x)) == x */
	uint8_t *again;
	size_t alen;
	T_EQ(job_codec_assignment_encode(&back, &again, &alen), 0);
	T_EQ(alen, len);
	T_CHECK(!memcmp(again, buf, len));
	free(again);
	free(buf);
	job_assignment_free(&back);
	job_assignment_free(&back); /* safe twice */

	/* nothing to run: the empty message */
	job_assignment none = { .n = 0 };
	T_EQ(job_codec_assignment_encode(&none, &buf, &len), 0);
	T_EQ(job_codec_assignment_decode(&back, buf, len, err, sizeof err), 0);
	T_EQ(back.n, 0);
	T_EQ(back.ndrained, 0);
	T_STREQ(back.head, "");
	job_assignment_free(&back);
	free(buf);
}

T_TEST(report_round_trip)
{
	job_member_status ms[2] = {
		{ .id = "rl/trainer-0", .job = "rl", .gen = 3, .pid = 4242, .state = "failed", .restarts = 2,
		  .last_exit = -9, .reason = "killed by signal 9" },
		{ .id = "rl/engine-1", .job = "rl", .gen = 1, .pid = 0, .state = "restarting" },
	};
	job_report r = { .node = "n4", .free_port = 29500, .n = 2, .members = ms }, back;
	char err[160] = "";
	uint8_t *buf;
	size_t len;
	T_EQ(job_codec_report_encode(&r, &buf, &len), 0);
	if (job_codec_report_decode(&back, buf, len, err, sizeof err) != 0) T_FAIL("%s", err);
	T_STREQ(back.node, "n4");
	T_EQ(back.free_port, 29500);
	T_EQ(back.n, 2);
	for (size_t i = 0; i < 2; i++) {
		T_STREQ(back.members[i].id, ms[i].id);
		T_STREQ(back.members[i].job, ms[i].job);
		T_CHECK(back.members[i].gen == ms[i].gen);
		T_EQ(back.members[i].pid, ms[i].pid);
		T_STREQ(back.members[i].state, ms[i].state);
		T_EQ(back.members[i].restarts, ms[i].restarts);
		T_EQ(back.members[i].last_exit, ms[i].last_exit);
		T_STREQ(back.members[i].reason, ms[i].reason);
	}
	job_report_free(&back);
	job_report_free(&back);
	free(buf);

}

static char *text(size_t n, char c)
{
	char *s = malloc(n + 1);
	memset(s, c, n);
	s[n] = 0;
	return s;
}

/* Packs pa, decodes it; returns decode's result (err filled). */
static int decode_raw(const Skein__Jobs__Assignment *pa, char *err, size_t errlen)
{
	size_t len = skein__jobs__assignment__get_packed_size(pa);
	uint8_t *buf = malloc(len ? len : 1);
	skein__jobs__assignment__pack(pa, buf);
	job_assignment as;
	err[0] = 0;
	int rc = job_codec_assignment_decode(&as, buf, len, err, errlen);
	if (rc == 0) job_assignment_free(&as);
	else T_EQ(as.n, 0); /* nothing half-filled */
	free(buf);
	return rc;
}

/* Each bound of job_order.h: one past it is refused (naming what), at it
 * is taken. */
T_TEST(assignment_bounds)
{
	char err[160];
	static char *env[JOB_ORDER_ENV_MAX + 1];
	uint32_t gpus[JOB_GPUS_PER_NODE_MAX + 1] = { 0 };
	char *drained[JOB_STATE_DRAINED_MAX + 1];
	char *big_env = text(JOB_ORDER_ENV_BYTES - 1, 'e'), *big_env2 = text(JOB_ORDER_ENV_BYTES, 'e');
	big_env[0] = big_env2[0] = 'K';
	big_env[1] = big_env2[1] = '=';
	for (size_t i = 0; i <= JOB_ORDER_ENV_MAX; i++) env[i] = "A=1";
	for (size_t i = 0; i <= JOB_STATE_DRAINED_MAX; i++) drained[i] = "n";
	struct {
		const char *what;
		int field;
		size_t ok, bad;    /* a length (or count) taken, and one refused */
		const char *want;
	} cases[] = {
		{ "id", 0, JOB_MEMBER_ID_MAX, JOB_MEMBER_ID_MAX + 1, "member id" },
		{ "job", 1, JOB_NAME_MAX, JOB_NAME_MAX + 1, "member job" },
		{ "cmd", 2, JOB_CMD_MAX - 1, JOB_CMD_MAX, "command" },
		{ "gpus", 3, JOB_GPUS_PER_NODE_MAX, JOB_GPUS_PER_NODE_MAX + 1, "GPUs" },
		{ "env count", 4, JOB_ORDER_ENV_MAX, JOB_ORDER_ENV_MAX + 1, "environment entries" },
		{ "env bytes", 5, 0, 1, "environment longer" },
		{ "head", 6, JOB_NODE_MAX, JOB_NODE_MAX + 1, "head" },
		{ "drained name", 7, JOB_NODE_MAX, JOB_NODE_MAX + 1, "drained node" },
		{ "drained count", 8, JOB_STATE_DRAINED_MAX, JOB_STATE_DRAINED_MAX + 1, "drained nodes" },
		{ "empty id", 0, 1, 0, "member id: empty" },
		{ "empty drained name", 7, 1, 0, "drained node" },
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		for (int pass = 0; pass < 2; pass++) {
			size_t n = pass ? cases[c].bad : cases[c].ok;
			Skein__Jobs__MemberOrder mo = SKEIN__JOBS__MEMBER_ORDER__INIT, *mp = &mo;
			mo.id = "rl/trainer-0";
			mo.job = "rl";
			mo.role = "trainer";
			mo.cmd = "true";
			Skein__Jobs__Assignment pa = SKEIN__JOBS__ASSIGNMENT__INIT;
			pa.members = &mp;
			pa.n_members = 1;
			pa.head = "n1";
			char *s = NULL;
			switch (cases[c].field) {
			case 0: mo.id = s = text(n, 'i'); break;
			case 1: mo.job = s = text(n, 'j'); break;
			case 2: mo.cmd = s = text(n, 'c'); break;
			case 3: mo.gpus = gpus; mo.n_gpus = n; break;
			case 4: mo.env = env; mo.n_env = n; break;
			case 5: mo.env = n ? &big_env2 : &big_env; mo.n_env = 1; break; /* +1 for its NUL */
			case 6: pa.head = s = text(n, 'h'); break;
			case 7: pa.drained = &s; s = text(n, 'd'); pa.n_drained = 1; break;
			case 8: pa.drained = drained; pa.n_drained = n; break;
			}
			int rc = decode_raw(&pa, err, sizeof err);
			if (pass == 0 && rc != 0) T_FAIL("%s at its bound (%zu) refused: %s", cases[c].what, n, err);
			if (pass == 1) {
				if (rc != -1) T_FAIL("%s past its bound (%zu) taken", cases[c].what, n);
				T_HAS(err, cases[c].want);
				T_CHECK(!strchr(err, '\n'));
			}
			free(s);
		}
	}
	/* a role other than trainer or rollout */
	Skein__Jobs__MemberOrder mo = SKEIN__JOBS__MEMBER_ORDER__INIT, *mp = &mo;
	mo.id = "rl/x-0";
	mo.role = "observer";
	Skein__Jobs__Assignment pa = SKEIN__JOBS__ASSIGNMENT__INIT;
	pa.members = &mp;
	pa.n_members = 1;
	T_EQ(decode_raw(&pa, err, sizeof err), -1);
	T_HAS(err, "role");
	free(big_env);
	free(big_env2);
}

T_TEST(report_bounds)
{
	char err[160];
	char *long_reason = text(1000, 'r');
	struct { int field; size_t len; int rc; } cases[] = {
		{ 0, JOB_MEMBER_ID_MAX, 0 }, { 0, JOB_MEMBER_ID_MAX + 1, -1 }, { 0, 0, -1 },
		{ 1, JOB_NAME_MAX + 1, -1 }, { 2, JOB_STATE_NAME_MAX + 1, -1 }, { 3, JOB_NODE_MAX + 1, -1 },
		{ 3, JOB_NODE_MAX, 0 },
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		Skein__Jobs__MemberStatus ms = SKEIN__JOBS__MEMBER_STATUS__INIT, *mp = &ms;
		ms.id = "rl/engine-0";
		ms.reason = long_reason;
		Skein__Jobs__Report pr = SKEIN__JOBS__REPORT__INIT;
		pr.node = "n2";
		pr.members = &mp;
		pr.n_members = 1;
		char *s = text(cases[c].len, 'x');
		char **f[] = { &ms.id, &ms.job, &ms.state, &pr.node };
		*f[cases[c].field] = s;
		size_t len = skein__jobs__report__get_packed_size(&pr);
		uint8_t *buf = malloc(len);
		skein__jobs__report__pack(&pr, buf);
		job_report r;
		err[0] = 0;
		int rc = job_codec_report_decode(&r, buf, len, err, sizeof err);
		if (rc != cases[c].rc) T_FAIL("case %zu: rc %d, want %d (%s)", c, rc, cases[c].rc, err);
		if (rc == 0) {
			T_EQ(strlen(r.members[0].reason), JOB_REASON_MAX); /* display text: cut, not refused */
		} else {
			T_CHECK(err[0] && !strchr(err, '\n'));
			T_EQ(r.n, 0);
			T_CHECK(!r.members);
		}
		job_report_free(&r);
		free(buf);
		free(s);
	}
	free(long_reason);
}

/* Random bytes, and a good encoding cut short or with bytes flipped: -1, or
 * a message within the bounds. */
T_TEST_TIMEOUT(garbage_never_crashes, 120)
{
	job_order o[2];
	const job_order *ptrs[2];
	job_assignment as;
	sample(o, ptrs, &as);
	uint8_t *good;
	size_t glen;
	T_EQ(job_codec_assignment_encode(&as, &good, &glen), 0);
	job_member_status ms = { .id = "rl/trainer-0", .job = "rl", .state = "running", .pid = 9 };
	job_report rep = { .node = "n1", .n = 1, .members = &ms };
	uint8_t *grep_;
	size_t rlen;
	T_EQ(job_codec_report_encode(&rep, &grep_, &rlen), 0);
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	uint8_t buf[1024];
	for (int it = 0; it < 20000; it++) {
		size_t len;
		const uint8_t *src = it % 2 ? good : grep_;
		size_t slen = it % 2 ? glen : rlen;
		if (it % 3 == 0) {
			len = sk_rng_below(&r, sizeof buf);
			for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)sk_rng_below(&r, 256);
		} else {
			len = it % 3 == 1 ? sk_rng_below(&r, slen + 1) : slen;
			memcpy(buf, src, len);
			for (int k = 0, nk = it % 3 == 2 ? 1 + (int)sk_rng_below(&r, 4) : 0; k < nk && len; k++)
				buf[sk_rng_below(&r, len)] = (uint8_t)sk_rng_below(&r, 256);
		}
		char err[160];
		job_assignment a;
		if (job_codec_assignment_decode(&a, buf, len, err, sizeof err) == 0) {
			T_CHECK(strlen(a.head) <= JOB_NODE_MAX);
			for (size_t i = 0; i < a.n; i++) {
				const job_order *m = a.members[i];
				T_CHECK(m->id[0] && strlen(m->cmd) < JOB_CMD_MAX && m->ngpus <= JOB_GPUS_PER_NODE_MAX);
				T_CHECK(m->nenv <= JOB_ORDER_ENV_MAX);
			}
			job_assignment_free(&a);
		} else if (!err[0] || strchr(err, '\n')) {
			T_FAIL("iteration %d: bad message '%s'", it, err);
		}
		job_report rp;
		if (job_codec_report_decode(&rp, buf, len, err, sizeof err) == 0) {
			for (size_t i = 0; i < rp.n; i++) T_CHECK(rp.members[i].id[0]);
			job_report_free(&rp);
		}
	}
	free(good);
	free(grep_);
}
