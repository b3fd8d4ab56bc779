/* agent/agent_jobs_cmd: skeinctl's job commands, answered by the head from
 * the committed jobs and its agents' latest reports (agent_jobs.c keeps
 * both): job submit|list|status|stop|delete, placement, and logs (served by
 * the agent that runs or ran the member, reached through the head). */
#include "common/sk_time.h"
#include "agent/agent_jobs_int.h"
#include "agent/agent_update.h"
#include "jobs/update_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sk_log.h"
#include "common/sk_text.h"

enum { LOG_READ_MAX = 256 << 10 };


static const job_rec *find_job(const job_state *js, const char *name)
{
	return js ? job_state_get(js, name) : NULL;
}

static void cmd_submit(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const job_state *js = agent_head_jobs(a);
	agent_jobs *J = a->jobs;
	job_spec s;
	char err[300];
	int rc = job_codec_spec_unpack(&s, q->payload.data, q->payload.len, err, sizeof err);
	if (rc == -2) { agent_reply_fail(r, 2, "job submit: the job description could not be read"); return; }
	if (rc < 0 || job_spec_validate(&s, err, sizeof err) < 0) { agent_reply_fail(r, 2, "%s", err); return; }
	/* skeinctl refuses these too, but a raw request must not get past */
	if (job_disk_dir_check(s.disk_dir, a->opts.data_dir, err, sizeof err) < 0) { agent_reply_fail(r, 2, "%s", err); return; }
	char warn[300] = "";
	if (job_disk_dir_warning(s.disk_dir, (unsigned)geteuid(), warn + 9, sizeof warn - 9)) memcpy(warn, "warning: ", 9);
	/* a retried submission (same token) answers with the job it made */
	const char *token = q->n_args >= 2 ? q->args[1] : "";
	if (strlen(token) > 64) { agent_reply_fail(r, 2, "job submit: token longer than 64 bytes"); return; }
	for (size_t i = 0; token[0] && js && i < job_state_count(js); i++) {
		const job_rec *o = job_state_at(js, i);
		if (!strcmp(o->submit_token, token)) {
			sk_buf_printf(&r->body, "job %s submitted\n", o->spec.name);
			return;
		}
	}
	uint64_t seq = job_state_next_seq(js);
	if (J->next_seq > seq) seq = J->next_seq;
	if (!s.name[0]) snprintf(s.name, sizeof s.name, "job-%llu", (unsigned long long)seq);
	if (find_job(js, s.name)) {
		agent_reply_fail(r, 1, "job %s exists already (skeinctl job stop %s, job delete %s, then submit again)",
				 s.name, s.name, s.name);
		return;
	}
	if (job_state_count(js) >= JOB_STATE_JOBS_MAX) {
		agent_reply_fail(r, 1, "the cluster holds %d jobs, the most it keeps: skeinctl job delete finished ones",
				 JOB_STATE_JOBS_MAX);
		return;
	}
	J->next_seq = seq + 1;
	job_rec j = { .spec = s, .state = (char *)"pending", .reason = warn, .seq = seq,
		      .submit_token = (char *)token, .submitted_ms = sk_wall_ms() /* shown to people */ };
	uint8_t *data;
	size_t len;
	if (job_codec_encode(&j, &data, &len) < 0) { agent_reply_fail(r, 1, "out of memory"); return; }
	char body[480];
	snprintf(body, sizeof body, "job %s submitted\n%s%s", s.name, warn, warn[0] ? "\n" : "");
	agent_head_propose(a, c, r, JOB_ENTRY_SUBMIT, data, len, body, NULL);
}

/* A member as `placement` and `job status` show it. */
typedef struct {
	char id[SUP_ID_MAX], node[MBR_NAME_MAX + 1], state[16], reason[128];
	bool trainer;
	uint32_t k, ngpus, gpus[JOB_GPUS_PER_NODE_MAX], restarts;
	int pid;
	bool has_weights;          /* an engine that told the head which version it holds */
	uint64_t weight_version;
} member_view;

/* An engine's readiness (docs/updates.md): running once it holds the job's
 * latest committed weights, syncing until then. */
static void view_weights(agent *a, const char *job, member_view *v)
{
	const update_state *ws = agent_head_wv(a);
	uint64_t latest = ws ? update_state_committed(ws, job) : 0;
	bool syncing = false;
	v->has_weights = agent_update_engine_view(a, v->id, &v->weight_version, &syncing);
	if (!v->has_weights) syncing = latest > 0;
	if (syncing && !strcmp(v->state, "running")) snprintf(v->state, sizeof v->state, "syncing");
}

static void view_member(agent *a, const job_rec *j, const job_spec *s, const job_layout *L, bool trainer,
			uint32_t k, member_view *v)
{
	order_buf *b = calloc(1, sizeof *b);
	memset(v, 0, sizeof *v);
	v->trainer = trainer;
	v->k = k;
	aj_member_id(v->id, sizeof v->id, s->name, trainer, k);
	snprintf(v->state, sizeof v->state, "pending");
	if (!b) return;
	if (!strcmp(j->state, "running") && aj_build_order(a, j, s, L, trainer, k, b, v->node, sizeof v->node)) {
		v->ngpus = b->o.ngpus;
		memcpy(v->gpus, b->o.gpus, v->ngpus * sizeof *v->gpus);
		const job_member_status *st = aj_status_of(a, v->node, v->id);
		if (b->o.hold) snprintf(v->reason, sizeof v->reason, "waiting for MASTER_PORT");
		else if (!st) snprintf(v->state, sizeof v->state, "starting");
		else if (st->gen != b->o.gen) snprintf(v->state, sizeof v->state, "restarting");
		else {
			snprintf(v->state, sizeof v->state, "%s", st->state);
			snprintf(v->reason, sizeof v->reason, "%s", st->reason);
			v->pid = st->pid;
			v->restarts = st->restarts;
		}
		if (!st || st->gen != b->o.gen) v->restarts = b->o.restart_base;
		if (!trainer) view_weights(a, s->name, v);
	} else if (strcmp(j->state, "running") && strcmp(j->state, "pending")) {
		snprintf(v->state, sizeof v->state, "%s", !strcmp(j->state, "failed") ? "failed" : "stopped");
	} else {
		snprintf(v->reason, sizeof v->reason, "%s", j->reason);
	}
	free(b);
}

static void print_members(agent *a, const job_rec *j, sk_buf *o, bool json, bool *first)
{
	job_spec s;
	char err[256];
	job_layout L;
	if (job_rec_spec(j, &s, err, sizeof err) < 0 || job_rec_layout(&L, j, &s) < 0)
		return;
	uint32_t A = job_spec_trainer_ranks(&s), E = job_spec_engines(&s);
	for (uint32_t m = 0; m < A + E; m++) {
		member_view v;
		bool tr = m < A;
		view_member(a, j, &s, &L, tr, tr ? m : m - A, &v);
		char gl[JOB_GPUS_PER_NODE_MAX * 4];
		aj_gpu_list(gl, sizeof gl, v.gpus, v.ngpus);
		if (json) {
			sk_buf_printf(o, "%s{\"member\":", *first ? "" : ",");
			*first = false;
			sk_buf_json_str(o, v.id);
			sk_buf_printf(o, ",\"job\":");
			sk_buf_json_str(o, s.name);
			sk_buf_printf(o, ",\"role\":\"%s\",\"rank\":%d,\"engine\":%d,\"node\":", tr ? "trainer" : "rollout",
				      tr ? (int)v.k : -1, tr ? -1 : (int)v.k);
			if (v.node[0]) sk_buf_json_str(o, v.node);
			else sk_buf_printf(o, "null");
			sk_buf_printf(o, ",\"gpus\":[%s],\"pid\":%d,\"state\":\"%s\",\"restarts\":%u,\"reason\":", gl, v.pid,
				      v.state, v.restarts);
			sk_buf_json_str(o, v.reason);
			if (!tr && v.has_weights) sk_buf_printf(o, ",\"weight_version\":%llu", (unsigned long long)v.weight_version);
			else if (!tr) sk_buf_printf(o, ",\"weight_version\":null");
			sk_buf_printf(o, "}");
		} else {
			char node[4 * MBR_NAME_MAX + 1], why[4 * sizeof v.reason];
			sk_buf_printf(o, "%-28s %-8s %-16s %-10s %-8d %-10s %-8u %s\n", v.id, tr ? "trainer" : "rollout",
				      v.node[0] ? sk_text_escape(v.node, node, sizeof node) : "-", gl[0] ? gl : "-", v.pid,
				      v.state, v.restarts, sk_text_escape(v.reason, why, sizeof why));
		}
	}
	job_layout_free(&L);
}

static const char MEMBER_HDR[] = "%-28s %-8s %-16s %-10s %-8s %-10s %-8s %s\n";

void aj_cmd_placement(agent *a, const Skein__Control__Request *q, agent_reply *r)
{
	const job_state *js = agent_head_jobs(a);
	bool json = !strcmp(q->format, "json"), first = true;
	const char *only = q->n_args ? q->args[0] : NULL;
	if (only && !find_job(js, only)) { agent_reply_fail(r, 1, "no such job: %s", only); return; }
	if (json) sk_buf_printf(&r->body, "{\"members\":[");
	else sk_buf_printf(&r->body, MEMBER_HDR, "MEMBER", "ROLE", "NODE", "GPUS", "PID", "STATE", "RESTARTS", "REASON");
	for (size_t i = 0; i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		if (only ? strcmp(j->spec.name, only) != 0 : !job_rec_active(j)) continue;
		print_members(a, j, &r->body, json, &first);
	}
	/* drained nodes: their members are moving (or waiting to) */
	size_t ndr = js ? job_state_drained_count(js) : 0;
	if (json) {
		sk_buf_printf(&r->body, "],\"drained\":[");
		for (size_t i = 0; i < ndr; i++) {
			if (i) sk_buf_add(&r->body, ",", 1);
			sk_buf_json_str(&r->body, job_state_drained_at(js, i, NULL));
		}
		sk_buf_printf(&r->body, "]}\n");
	} else if (ndr) {
		sk_buf_printf(&r->body, "drained nodes (nothing new placed there; skeinctl drain status NODE):");
		for (size_t i = 0; i < ndr; i++) sk_buf_printf(&r->body, " %s", job_state_drained_at(js, i, NULL));
		sk_buf_printf(&r->body, "\n");
	}
}

static void job_line(const job_rec *j, sk_buf *o, bool json)
{
	const job_spec *s = &j->spec;
	uint32_t A = s->actor_num_nodes * s->actor_num_gpus_per_node;
	uint32_t R = s->colocate ? A : s->rollout_num_gpus;
	uint32_t E = s->rollout_num_gpus_per_engine ? R / s->rollout_num_gpus_per_engine : 0;
	unsigned long long gen = j->has_layout ? (unsigned long long)j->layout.trainer_gen : 0;
	if (json) {
		sk_buf_printf(o, "{\"name\":");
		sk_buf_json_str(o, s->name);
		sk_buf_printf(o, ",\"state\":\"%s\",\"reason\":", j->state);
		sk_buf_json_str(o, j->reason);
		sk_buf_printf(o, ",\"trainer_ranks\":%u,\"engines\":%u,\"gpus_per_engine\":%u,\"colocate\":%s,"
			      "\"transfer_mode\":", A, E, s->rollout_num_gpus_per_engine, s->colocate ? "true" : "false");
		sk_buf_json_str(o, s->transfer_mode);
		sk_buf_printf(o, ",\"trainer_generation\":%llu,\"master\":", gen);
		char m[96] = "";
		if (j->has_layout && j->layout.master_port)
			snprintf(m, sizeof m, "%s:%u", j->layout.master_addr, j->layout.master_port);
		sk_buf_json_str(o, m);
		sk_buf_printf(o, ",\"seq\":%llu}", (unsigned long long)j->seq);
	} else {
		sk_buf_printf(o, "%-20s %-10s %-8u %-8u %-11llu ", s->name, j->state, A, E, gen);
		sk_buf_text(o, j->reason);
		sk_buf_add(o, "\n", 1);
	}
}

void aj_cmd_job(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const char *op = q->n_args ? q->args[0] : "";
	const job_state *js = agent_head_jobs(a);
	bool json = !strcmp(q->format, "json");
	if (!strcmp(op, "submit") && (q->n_args == 1 || q->n_args == 2)) {
		cmd_submit(a, q, c, r);
	} else if (!strcmp(op, "list") && q->n_args == 1) {
		if (json) sk_buf_printf(&r->body, "{\"jobs\":[");
		else sk_buf_printf(&r->body, "%-20s %-10s %-8s %-8s %-11s %s\n", "JOB", "STATE", "TRAINER", "ENGINES",
				   "GENERATION", "REASON");
		for (size_t i = 0; i < job_state_count(js); i++) {
			if (json && i) sk_buf_add(&r->body, ",", 1);
			job_line(job_state_at(js, i), &r->body, json);
		}
		if (json) sk_buf_printf(&r->body, "]}\n");
	} else if (!strcmp(op, "status") && q->n_args <= 2) {
		size_t n = job_state_count(js);
		const job_rec *j = q->n_args == 2 ? find_job(js, q->args[1]) : n ? job_state_at(js, n - 1) : NULL;
		if (!j) { agent_reply_fail(r, 1, q->n_args == 2 ? "no such job: %s" : "no jobs%s", q->n_args == 2 ? q->args[1] : ""); return; }
		bool first = true;
		/* judged on the head's host (again every 30 s): a folder can be opened up later */
		bool refused;
		const char *dw = agent_jobs_disk_judge(a, j->spec.disk_dir, &refused);
		if (json) {
			sk_buf_printf(&r->body, "{\"job\":");
			job_line(j, &r->body, true);
			sk_buf_printf(&r->body, ",\"disk_warning\":");
			sk_buf_json_str(&r->body, dw);
			sk_buf_printf(&r->body, ",\"members\":[");
			print_members(a, j, &r->body, true, &first);
			sk_buf_printf(&r->body, "]}\n");
		} else {
			sk_buf_printf(&r->body, "job:        %s\nstate:      %s\n", j->spec.name, j->state);
			if (j->reason[0]) {
				sk_buf_printf(&r->body, "reason:     ");
				sk_buf_text(&r->body, j->reason);
				sk_buf_add(&r->body, "\n", 1);
			}
			if (dw[0]) {
				sk_buf_printf(&r->body, "warning:    ");
				sk_buf_text(&r->body, dw);
				sk_buf_add(&r->body, "\n", 1);
			}
			if (j->has_layout && j->layout.master_port)
				sk_buf_printf(&r->body, "master:     %s:%u\n", j->layout.master_addr, j->layout.master_port);
			sk_buf_printf(&r->body, "generation: %llu (trainer group)\n\n",
				      j->has_layout ? (unsigned long long)j->layout.trainer_gen : 0ULL);
			sk_buf_printf(&r->body, MEMBER_HDR, "MEMBER", "ROLE", "NODE", "GPUS", "PID", "STATE", "RESTARTS", "REASON");
			print_members(a, j, &r->body, false, &first);
		}
	} else if (!strcmp(op, "stop") && q->n_args == 2) {
		const job_rec *j = find_job(js, q->args[1]);
		if (!j) { agent_reply_fail(r, 1, "no such job: %s", q->args[1]); return; }
		if (!job_rec_active(j)) { sk_buf_printf(&r->body, "job %s is %s already\n", j->spec.name, j->state); return; }
		uint8_t *data;
		size_t len;
		if (job_codec_update(j, "stopped", "stopped by the operator", NULL, &data, &len) < 0) {
			agent_reply_fail(r, 1, "out of memory");
			return;
		}
		char body[160], name[JOB_NAME_MAX + 1];
		snprintf(body, sizeof body, "job %s stopped (members get SIGTERM, then SIGKILL after %u ms)\n",
			 j->spec.name, j->spec.stop_grace_ms);
		snprintf(name, sizeof name, "%s", j->spec.name);
		uint64_t index;
		if (agent_head_propose(a, c, r, JOB_ENTRY_UPDATE, data, len, body, &index) == 0) aj_inflight_add(a, name, index);
	} else if (!strcmp(op, "delete") && q->n_args == 2) {
		const job_rec *j = find_job(js, q->args[1]);
		if (!j) { agent_reply_fail(r, 1, "no such job: %s", q->args[1]); return; }
		if (job_rec_active(j)) {
			agent_reply_fail(r, 1, "job %s is %s: stop it first (skeinctl job stop %s)", j->spec.name, j->state,
					 j->spec.name);
			return;
		}
		size_t len = strlen(j->spec.name);
		uint8_t *data = malloc(len);
		if (!data) { agent_reply_fail(r, 1, "out of memory"); return; }
		memcpy(data, j->spec.name, len);
		char body[160];
		snprintf(body, sizeof body, "job %s deleted\n", j->spec.name);
		agent_head_propose(a, c, r, JOB_ENTRY_DELETE, data, len, body, NULL);
	} else {
		agent_reply_fail(r, 2, "usage: skeinctl job submit FLAGS | list | status [JOB] | stop JOB | delete JOB");
	}
}

/* Serves a piece of a member's log file from this node; false when it has none. */
static bool serve_log(agent *a, const char *id, unsigned long long off, unsigned long mx, agent_reply *r)
{
	sk_buf data;
	sk_buf_init(&data);
	uint64_t next, size;
	bool ok = sup_log_read(a->jobs->sup, id, off, mx, &data, &next, &size) == 0;
	if (ok) {
		for (size_t i = 0; i < data.len; i++)
			if (!data.p[i]) data.p[i] = '?'; /* the answer is a string */
		sk_buf_printf(&r->body, "%llu %llu %s\n", (unsigned long long)next, (unsigned long long)size, a->opts.name);
		sk_buf_add(&r->body, data.p, data.len);
	}
	sk_buf_free(&data);
	return ok;
}

/* The node a member is (or was last) placed on, from the committed layout
 * whatever the job's state; "" when unknown. */
static void member_node(agent *a, const char *id, char *node, size_t cap)
{
	node[0] = 0;
	const char *slash = strchr(id, '/');
	char job[JOB_NAME_MAX + 1];
	if (!slash || slash - id > JOB_NAME_MAX) return;
	snprintf(job, sizeof job, "%.*s", (int)(slash - id), id);
	const job_rec *j = find_job(agent_head_jobs(a), job);
	job_spec s;
	char err[256];
	job_layout L;
	if (!j || job_rec_spec(j, &s, err, sizeof err) < 0 || job_rec_layout(&L, j, &s) < 0)
		return;
	uint32_t A = job_spec_trainer_ranks(&s), E = job_spec_engines(&s);
	for (uint32_t m = 0; m < A + E; m++) {
		char mid[SUP_ID_MAX];
		aj_member_id(mid, sizeof mid, s.name, m < A, m < A ? m : m - A);
		uint32_t slot = m < A ? m : place_engine_slot(&s, m - A);
		if (!strcmp(mid, id) && slot < L.n) snprintf(node, cap, "%s", L.node[slot]);
	}
	job_layout_free(&L);
}

/* logs MEMBER OFFSET MAX: served by the agent that runs (or ran) the member;
 * any other agent passes it to the head, which knows where it is placed. */
void aj_cmd_logs(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	if (q->n_args != 3) { agent_reply_fail(r, 2, "usage: skeinctl logs MEMBER [--follow]"); return; }
	const char *id = q->args[0];
	char *end;
	unsigned long long off = strtoull(q->args[1], &end, 10);
	unsigned long mx = *end ? 0 : strtoul(q->args[2], &end, 10);
	if (*end || !mx) { agent_reply_fail(r, 2, "logs: bad offset or size"); return; }
	if (mx > LOG_READ_MAX) mx = LOG_READ_MAX;
	sup_status st;
	if (sup_get(a->jobs->sup, id, &st) == 0 && serve_log(a, id, off, mx, r)) return;
	if (agent_head_is_head(a)) {
		char node[MBR_NAME_MAX + 1];
		member_node(a, id, node, sizeof node);
		if (node[0] && strcmp(node, a->opts.name)) {
			agent_peer_forward_node(a, q, c, r, node);
			return;
		}
		if (!serve_log(a, id, off, mx, r))
			agent_reply_fail(r, 1, "no such member, or no log of it: %s (see skeinctl placement)", id);
		return;
	}
	/* sent here by the head: this node ran it (a finished job's log) */
	if (q->forwarded) {
		if (!serve_log(a, id, off, mx, r)) agent_reply_fail(r, 1, "no log of %s on %s", id, a->opts.name);
		return;
	}
	agent_head_forward(a, q, c, r);
}

/* ---------------------------------------------------------------- engines */

/* engine MEMBER (issue 24, docs/engines.md): a stock engine's state as its
 * sidecar wrote it beside this agent's control socket
 * (engines/JOB/K.json), served by the node that runs the member, like logs.
 * A file whose sidecar is not this member's running process says "gone". */
static bool serve_engine(agent *a, const char *id, agent_reply *r)
{
	const char *slash = strchr(id, '/');
	char job[JOB_NAME_MAX + 1];
	unsigned k;
	char tail;
	if (!slash || slash - id > JOB_NAME_MAX || sscanf(slash + 1, "engine-%u%c", &k, &tail) != 1) return false;
	snprintf(job, sizeof job, "%.*s", (int)(slash - id), id);
	if (!job_name_ok(job)) return false;
	char dir[sizeof a->control_socket], path[sizeof a->control_socket + JOB_NAME_MAX + 32];
	snprintf(dir, sizeof dir, "%s", a->control_socket);
	char *cut = strrchr(dir, '/');
	if (!cut) return false;
	*cut = 0;
	snprintf(path, sizeof path, "%s/engines/%s/%u.json", dir, job, k);
	char buf[8192];
	FILE *f = fopen(path, "r");
	if (!f) return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = 0;
	if (!n || buf[n - 1] != '}') return false; /* the sidecar renames a whole file in place */
	const char *sp = strstr(buf, "\"sidecar_pid\": ");
	long pid = sp ? strtol(sp + strlen("\"sidecar_pid\": "), NULL, 10) : 0;
	sup_status st;
	bool live = sup_get(a->jobs->sup, id, &st) == 0 && st.state == SUP_RUNNING && st.pid == pid;
	buf[n - 1] = 0;
	sk_buf_printf(&r->body, "%s, \"live\": %s}\n", buf, live ? "true" : "false");
	return true;
}

void aj_cmd_engine(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	if (q->n_args != 1) { agent_reply_fail(r, 2, "usage: engine JOB/engine-K"); return; }
	const char *id = q->args[0];
	sup_status st;
	if (sup_get(a->jobs->sup, id, &st) == 0) {
		if (!serve_engine(a, id, r)) agent_reply_fail(r, 1, "%s: no state from its sidecar yet", id);
		return;
	}
	if (agent_head_is_head(a) && !q->forwarded) {
		char node[MBR_NAME_MAX + 1];
		member_node(a, id, node, sizeof node);
		if (node[0] && strcmp(node, a->opts.name)) {
			agent_peer_forward_node(a, q, c, r, node);
			return;
		}
		agent_reply_fail(r, 1, "no such engine running: %s", id);
		return;
	}
	if (q->forwarded) { agent_reply_fail(r, 1, "%s does not run on %s", id, a->opts.name); return; }
	agent_head_forward(a, q, c, r);
}

/* ---------------------------------------------------------------- status */

/* skeinctl status: the operator's first screen.  The cluster as this agent
 * sees it (members by status, drained nodes), the head and its term, and,
 * from the head's replicated state (`with_jobs`), every job with its state
 * and members running, the latest committed weight version and when the
 * job's last update ended (docs/updates.md): "-" / null when none yet. */
void aj_cmd_status(agent *a, const Skein__Control__Request *q, agent_reply *r, bool with_jobs)
{
	bool json = !strcmp(q->format, "json");
	size_t by[4] = { mbr_count(a->mbr, MBR_ALIVE), mbr_count(a->mbr, MBR_SUSPECT), mbr_count(a->mbr, MBR_DEAD),
			 mbr_count(a->mbr, MBR_LEFT) };
	char head[MBR_NAME_MAX + 1];
	uint64_t term;
	agent_head_known(a, head, sizeof head, &term, NULL, 0);
	const job_state *js = with_jobs ? agent_head_jobs(a) : NULL;
	size_t ndr = js ? job_state_drained_count(js) : 0;
	sk_buf *o = &r->body;
	if (json) {
		sk_buf_printf(o, "{\"members\":{\"alive\":%zu,\"suspect\":%zu,\"dead\":%zu,\"left\":%zu},\"drained\":[",
			      by[0], by[1], by[2], by[3]);
		for (size_t i = 0; i < ndr; i++) {
			if (i) sk_buf_add(o, ",", 1);
			sk_buf_json_str(o, job_state_drained_at(js, i, NULL));
		}
		sk_buf_printf(o, "],\"head\":");
		if (head[0]) sk_buf_json_str(o, head);
		else sk_buf_printf(o, "null");
		sk_buf_printf(o, ",\"term\":%llu,\"jobs\":", (unsigned long long)(head[0] ? term : 0));
		if (!js) sk_buf_printf(o, "null");
		else sk_buf_printf(o, "[");
	} else {
		sk_buf_printf(o, "members: %zu alive, %zu suspect, %zu dead, %zu left", by[0], by[1], by[2], by[3]);
		if (ndr) {
			sk_buf_printf(o, "; drained:");
			for (size_t i = 0; i < ndr; i++) sk_buf_printf(o, " %s", job_state_drained_at(js, i, NULL));
		}
		if (head[0]) sk_buf_printf(o, "\nhead: %s (term %llu)\n", head, (unsigned long long)term);
		else sk_buf_printf(o, "\nhead: none (no head elected, or none known here)\n");
		if (!js) sk_buf_printf(o, "jobs: unknown without a head\n");
		else sk_buf_printf(o, "%-20s %-10s %-9s %-14s %-20s %s\n", "JOB", "STATE", "RUNNING", "WEIGHT_VERSION",
				   "LAST_UPDATE", "REASON");
	}
	for (size_t i = 0; js && i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		job_spec s = j->spec; /* as submitted: status counts what the record says */
		job_layout L;
		if (job_rec_layout(&L, j, &s) < 0) continue;
		uint32_t A = job_spec_trainer_ranks(&s), E = job_spec_engines(&s), running = 0;
		for (uint32_t m = 0; m < A + E && job_rec_placed(j); m++) {
			member_view v;
			view_member(a, j, &s, &L, m < A, m < A ? m : m - A, &v);
			if (!strcmp(v.state, "running") && v.pid > 0) running++;
		}
		job_layout_free(&L);
		const update_state *ws = agent_head_wv(a);
		const update_rec *last = ws ? update_state_job_at(ws, s.name, 0) : NULL;
		uint64_t wv = ws ? update_state_committed(ws, s.name) : 0;
		char wvs[24] = "-", lus[32] = "-", wvj[24] = "null", luj[24] = "null";
		if (wv) snprintf(wvs, sizeof wvs, "%llu", (unsigned long long)wv), snprintf(wvj, sizeof wvj, "%s", wvs);
		if (last && last->finished_ms) {
			time_t t = (time_t)(last->finished_ms / 1000);
			struct tm tm;
			gmtime_r(&t, &tm);
			strftime(lus, sizeof lus, "%Y-%m-%dT%H:%M:%SZ", &tm);
			snprintf(luj, sizeof luj, "%llu", (unsigned long long)last->finished_ms);
		}
		if (json) {
			sk_buf_printf(o, "%s{\"name\":", i ? "," : "");
			sk_buf_json_str(o, s.name);
			sk_buf_printf(o, ",\"state\":\"%s\",\"members\":%u,\"running\":%u,\"weight_version\":%s,"
				      "\"last_update_ms\":%s,\"reason\":", j->state, A + E, running, wvj, luj);
			sk_buf_json_str(o, j->reason);
			sk_buf_printf(o, "}");
		} else {
			char rn[24];
			snprintf(rn, sizeof rn, "%u/%u", running, A + E);
			sk_buf_printf(o, "%-20s %-10s %-9s %-14s %-20s %s\n", s.name, j->state, rn, wvs, lus, j->reason);
		}
	}
	if (json) sk_buf_printf(o, "%s}\n", js ? "]" : "");
	else if (js && job_state_count(js))
		sk_buf_printf(o, "(weight version and last update: with the transfer coordinator, issue #13)\n");
}

/* The jobs family's control commands: orders and reports between agents,
 * and skeinctl's (job, placement, drain, undrain, logs, status). */
bool agent_jobs_dispatch(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const char *cmd = q->cmd;
	if (!strcmp(cmd, "assign")) {
		/* one-way; followed only from the head this agent knows, at exactly
		 * its term (agent_head_order_ok): the head sends its orders again
		 * every round */
		r->deferred = true;
		if (a->jobs->closing) return true;
		char why[300];
		if (!agent_head_order_ok(a, c->sender, q->term, why, sizeof why)) {
			a->cnt.ctl_refused_order++;
			SK_DEBUG("jobs", "%s", why);
			return true;
		}
		job_assignment as;
		char err[160];
		if (job_codec_assignment_decode(&as, q->payload.data, q->payload.len, err, sizeof err) < 0) {
			a->cnt.ctl_rejected++;
			SK_DEBUG("jobs", "order from %s refused: %s", c->sender, err);
			return true;
		}
		aj_assign_local(a, &as);
		job_assignment_free(&as);
		return true;
	}
	if (!strcmp(cmd, "report")) {
		r->deferred = true;
		if (agent_head_is_head(a)) aj_handle_report(a, NULL, q->payload.data, q->payload.len);
		return true;
	}
	if (!strcmp(cmd, "logs")) {
		if (a->jobs->closing) agent_reply_fail(r, 1, "the agent is stopping");
		else aj_cmd_logs(a, q, c, r);
		return true;
	}
	if (!strcmp(cmd, "engine")) {
		aj_cmd_engine(a, q, c, r);
		return true;
	}
	if (!strcmp(cmd, "status")) {
		char head[MBR_NAME_MAX + 1];
		uint64_t term;
		agent_head_known(a, head, sizeof head, &term, NULL, 0);
		if (agent_head_is_head(a) && agent_head_ready(a)) aj_cmd_status(a, q, r, true);
		else if (head[0] && !agent_head_is_head(a)) agent_head_forward(a, q, c, r);
		else aj_cmd_status(a, q, r, false); /* no head: what this agent knows */
		return true;
	}
	if (strcmp(cmd, "job") && strcmp(cmd, "placement") && strcmp(cmd, "drain") && strcmp(cmd, "undrain"))
		return false;
	if (!agent_head_is_head(a)) {
		agent_head_forward(a, q, c, r);
		return true;
	}
	if (!agent_head_ready(a)) {
		agent_reply_fail(r, 1, "the head is catching up with the log of its new term: retry");
		return true;
	}
	if (!strcmp(cmd, "job")) aj_cmd_job(a, q, c, r);
	else if (!strcmp(cmd, "placement")) aj_cmd_placement(a, q, r);
	else aj_cmd_drain(a, q, c, r);
	return true;
}
