/* agent/agent_jobs_int: what agent_jobs.c (the head's reconcile and orders,
 * the agent's side), agent_jobs_cmd.c (skeinctl's job, placement and logs
 * commands) and agent_drain.c share.  Not for other files.  A job's layout is
 * jobs/job_model.h's job_layout; jobs/job_codec.h reads and writes records. */
#ifndef AGENT_JOBS_INT_H
#define AGENT_JOBS_INT_H

#include "agent/agent.h"
#include "agent/agent_sup.h"
#include "jobs/job_codec.h"
#include "jobs/job_model.h"
#include "jobs/job_place.h"
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
	/* drains: the head's latest word on each drained node; every agent's
	 * copy of the drained set (from orders) */
	struct drain_note *notes;
	size_t nnotes;
	struct drain_seen *up;    /* when the head first saw each moved engine run */
	size_t nup;
	char **drained;
	size_t ndrained;
};

typedef struct {
	Skein__Jobs__MemberOrder o;
	char id[SUP_ID_MAX];
	char node[MBR_NAME_MAX + 1];
	uint32_t gpus[JOB_GPUS_PER_NODE_MAX];
	char arena[JOB_DIR_MAX + 2048];   /* every KEY=VALUE, back to back: sized for the longest */
	size_t used;
	char *env[40];
} order_buf;

/* The state of member `id` as `node` last reported it (NULL if none). */
const Skein__Jobs__MemberStatus *aj_status_of(agent *a, const char *node, const char *id);
/* Whether `node` reported to this head at all (a new head hears from every
 * node within a round of orders). */
bool aj_node_reported(agent *a, const char *node);
void aj_inflight_add(agent *a, const char *job, uint64_t index);
void aj_member_id(char *out, size_t cap, const char *job, bool trainer, uint32_t k);
/* The order of trainer rank / engine k of job j (its node's address from
 * membership); false when it does not run now. */
bool aj_build_order(agent *a, const job_rec *j, const job_spec *s, const job_layout *L, bool trainer, uint32_t k,
		    order_buf *b, char *node, size_t nodecap);
void aj_gpu_list(char *out, size_t cap, const uint32_t *g, uint32_t n);

/* agent_jobs.c helpers the drain uses */
void aj_kick_in(agent *a, double after);
void aj_propose_update(agent *a, const job_rec *old, const char *state, const char *reason, const job_layout *L,
		       const char *why);
void aj_master_of(agent *a, job_layout *L, const place_node *nodes, size_t n);
void aj_fresh_port(agent *a, job_layout *L);

/* agent_drain.c: skeinctl drain / undrain, and the head's moves off drained nodes */
void aj_drain_tick(agent *a);                 /* head: before a reconcile round */
void aj_drain_mark(agent *a, place_node *nodes, size_t n); /* drained nodes offer no GPUs */
/* Moves one step of job j off drained nodes (the whole trainer group, or one
 * engine once every engine runs); true when it proposed a change. */
bool aj_drain_step(agent *a, const job_rec *j, const job_spec *s, place_node *nodes, size_t n);
void aj_cmd_drain(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);
/* Agent side: the drained set as the head's last order said. */
void aj_drained_set(agent *a, char **names, size_t n);
void aj_drained_free(agent *a);

/* agent_jobs_cmd.c: head-side commands (the caller checked the head is ready) */
void aj_cmd_job(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);
void aj_cmd_placement(agent *a, const Skein__Control__Request *q, agent_reply *r);
/* skeinctl status; without jobs where no head is known */
void aj_cmd_status(agent *a, const Skein__Control__Request *q, agent_reply *r, bool with_jobs);
/* any agent: served here, or passed to the head / the member's node */
void aj_cmd_logs(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);

#endif
