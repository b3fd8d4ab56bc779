/* tests/fuzz/fuzz_control: the control channel's decoders.
 *
 * The input is unpacked as a control Request and as a Response (what
 * skeinctl and a forwarding agent read back).  A Request's payload then
 * goes where the agent sends it, as far as that needs no live agent: a
 * JobSpec (job submit: decode, validate, and the Job record the head would
 * commit, applied to a jobs state as the Raft log would), an Assignment, a
 * Report, a Raft message.  Every payload decoder also sees the payload
 * whatever the command, so none waits for the fuzzer to guess a name. */
#include "tests/fuzz/fuzz_jobs.h"

#include "jobs/job_state.h"
#include "proto/control.pb-c.h"
#include "raft/raft_codec.h"

static job_state *g_jobs;

static job_state *jobs(void)
{
	if (!g_jobs && !(g_jobs = job_state_new())) abort();
	return g_jobs;
}

/* job submit: what agent_jobs_cmd.c does up to the commit, and the commit. */
static void submit(const uint8_t *p, size_t n)
{
	Skein__Jobs__JobSpec *pb = skein__jobs__job_spec__unpack(NULL, n, p);
	if (!pb) return;
	job_spec s;
	char err[300];
	int rc = job_spec_from_pb(&s, pb, err, sizeof err);
	skein__jobs__job_spec__free_unpacked(pb, NULL);
	if (rc < 0 || job_spec_validate(&s, err, sizeof err) < 0) return;
	if (!s.name[0]) snprintf(s.name, sizeof s.name, "job-1");
	fuzz_spec_roundtrip(&s);
	Skein__Jobs__JobSpec spb;
	job_spec_to_pb(&s, &spb);
	size_t len;
	Skein__Jobs__Job j = SKEIN__JOBS__JOB__INIT;
	j.spec = &spb;
	j.state = "pending";
	j.reason = "";
	j.seq = 1;
	j.version = 1;
	uint8_t *e;
	if (job_codec_pack(&j, &e, &len) == 0) {
		job_state_apply(jobs(), JOB_ENTRY_SUBMIT, e, len);
		job_state_apply(jobs(), JOB_ENTRY_DELETE, (const uint8_t *)s.name, strlen(s.name));
		free(e);
	}
}

static void payloads(const uint8_t *p, size_t n)
{
	submit(p, n);
	/* orders and reports through the codec the agent uses: whatever it
	 * accepts is within the bounds of jobs/job_order.h */
	job_assignment as;
	char err[160];
	if (job_codec_assignment_decode(&as, p, n, err, sizeof err) == 0) {
		FUZZ_CHECK(strlen(as.head) <= JOB_NODE_MAX && as.ndrained <= JOB_STATE_DRAINED_MAX);
		for (size_t i = 0; i < as.n; i++) {
			const job_order *o = as.members[i];
			FUZZ_CHECK(o->id[0] && o->cmd && strlen(o->cmd) < JOB_CMD_MAX && o->ngpus <= JOB_GPUS_PER_NODE_MAX);
			FUZZ_CHECK(o->nenv <= JOB_ORDER_ENV_MAX);
			for (uint32_t e = 0; e < o->nenv; e++) FUZZ_CHECK(o->env[e]);
		}
		for (size_t i = 0; i < as.ndrained; i++) FUZZ_CHECK(as.drained[i][0] && strlen(as.drained[i]) <= JOB_NODE_MAX);
		job_assignment_free(&as);
	}
	job_report r;
	if (job_codec_report_decode(&r, p, n, err, sizeof err) == 0) {
		for (size_t i = 0; i < r.n; i++) FUZZ_CHECK(r.members[i].id[0]);
		job_report_free(&r);
	}
	raft_decoded d;
	if (raft_codec_decode(p, n, &d) == WIRE_OK) raft_codec_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Skein__Control__Request *q = skein__control__request__unpack(NULL, size, data);
	if (q) {
		FUZZ_CHECK(q->cmd && q->format);
		for (size_t i = 0; i < q->n_args; i++) FUZZ_CHECK(q->args[i]);
		if (q->payload.len) payloads(q->payload.data, q->payload.len);
		skein__control__request__free_unpacked(q, NULL);
	}
	Skein__Control__Response *r = skein__control__response__unpack(NULL, size, data);
	if (r) {
		FUZZ_CHECK(r->error && r->body);
		skein__control__response__free_unpacked(r, NULL);
	}
	/* Keep the jobs state from growing without bound over a long run. */
	if (job_state_count(jobs()) > 100) job_state_free(&g_jobs);
	return 0;
}
