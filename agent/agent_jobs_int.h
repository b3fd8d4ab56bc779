/* agent/agent_jobs_int: what agent_jobs.c (the head's reconcile and orders,
 * the agent's side) and agent_jobs_cmd.c (skeinctl's job, placement and logs
 * commands) share.  Not for other files. */
#ifndef AGENT_JOBS_INT_H
#define AGENT_JOBS_INT_H

#include "agent/agent.h"
#include "agent/agent_sup.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "proto/control.pb-c.h"
#include "proto/jobs.pb-c.h"

typedef struct {
	char node[MBR_NAME_MAX + 1];
	Skein__Jobs__Report *rep;
} node_report;

typedef struct {
	char job[JOB_NAME_MAX + 1];
	uint64_t index;
	double since;
} inflight;

typedef struct {
	char id[SUP_ID_MAX + 24];
	uint64_t gen;
	int32_t pid;
} rank_seen;

struct agent_jobs {
	sup *sup;
	char log_dir[PATH_MAX + 16], state_file[PATH_MAX + 16];
	ev_timer kick;            /* reconcile and send orders soon, outside the Raft pump */
	ev_timer grace;           /* a kick once a failed node's grace is over */
	/* head side */
	node_report *reports;
	size_t nreports;
	inflight *infl;
	size_t ninfl;
	rank_seen *seen;          /* the process each trainer rank last ran in */
	size_t nseen;
	double last_orders;
	bool dirty;
	uint64_t next_seq;        /* names of jobs submitted but not yet applied */
	/* agent side */
	char head[MBR_NAME_MAX + 1];
	bool closing;             /* sup_free runs the loop: no more orders or reports */
	double last_reconcile;
	double fence_after_s;     /* --member-fence-after; 0 = never */
	double last_order;        /* ev_now of the last order applied */
	bool fenced;              /* members stopped for want of orders */
	int quick_rounds;         /* order rounds 100 ms apart after a dropped send */
	int fence_ticks;
};

/* A job's layout as plain C, for computing the next one. */
typedef struct {
	uint32_t n, neng;
	char (*node)[MBR_NAME_MAX + 1];
	uint32_t *gpu;
	uint64_t trainer_gen;
	uint32_t trainer_failures;
	char master_addr[64];
	uint32_t master_port;
	uint32_t *engine_gen, *engine_restarts;
} lay;

typedef struct {
	Skein__Jobs__MemberOrder o;
	char id[SUP_ID_MAX];
	char node[MBR_NAME_MAX + 1];
	uint32_t gpus[JOB_GPUS_PER_NODE_MAX];
	char arena[JOB_DIR_MAX + 2048];   /* every KEY=VALUE, back to back: sized for the longest */
	size_t used;
	char *env[40];
} order_buf;

void aj_lay_free(lay *L);
int aj_lay_from_job(lay *L, const Skein__Jobs__Job *j, const job_spec *s);
bool aj_placed(const Skein__Jobs__Job *j);
bool aj_job_active(const Skein__Jobs__Job *j);
/* Packs a Job equal to `old` but with this state, reason and layout (NULL: old's),
 * version + 1. */
int aj_pack_job(const Skein__Jobs__Job *old, const char *state, const char *reason, const lay *L, uint8_t **out,
		size_t *len);
/* The state of member `id` as `node` last reported it (NULL if none). */
const Skein__Jobs__MemberStatus *aj_status_of(agent *a, const char *node, const char *id);
void aj_inflight_add(agent *a, const char *job, uint64_t index);
void aj_member_id(char *out, size_t cap, const char *job, bool trainer, uint32_t k);
/* The order of trainer rank / engine k of job j; false when it does not run now. */
bool aj_build_order(const Skein__Jobs__Job *j, const job_spec *s, const lay *L, bool trainer, uint32_t k,
		    order_buf *b, char *node, size_t nodecap);
void aj_gpu_list(char *out, size_t cap, const uint32_t *g, uint32_t n);

/* agent_jobs_cmd.c: head-side commands (the caller checked the head is ready) */
void aj_cmd_job(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);
void aj_cmd_placement(agent *a, const Skein__Control__Request *q, agent_reply *r);
/* any agent: served here, or passed to the head / the member's node */
void aj_cmd_logs(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);

#endif
