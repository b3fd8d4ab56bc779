/* agent/agent_jobs_int: what the jobs family shares.  Not for other files
 * (but agent_wv.c reads the reports).  Calls go one way, down this list:
 * agent_jobs_cmd.c (the dispatch and the commands) -> agent_jobs.c
 * (placement, orders, supervision) -> agent_drain.c -> agent_jobs_base.c.  A job's layout is
 * jobs/job_model.h's job_layout; jobs/job_codec.h reads and writes records. */
#ifndef AGENT_JOBS_INT_H
#define AGENT_JOBS_INT_H

#include "agent/agent.h"
#include "agent/sup/agent_sup.h"
#include "jobs/job_codec.h"
#include "jobs/job_model.h"
#include "jobs/job_place.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "jobs/job_order.h"
#include "proto/control.pb-c.h"

_Static_assert((int)JOB_MEMBER_ID_MAX < (int)SUP_ID_MAX, "an ordered member id fits the supervisor's");
_Static_assert((int)JOB_ORDER_ENV_MAX < (int)SUP_ENV_MAX, "an order's environment and SKEIN_RPC fit the supervisor's");
_Static_assert((int)JOB_NODE_MAX == (int)MBR_NAME_MAX, "a job's node is a member's name");
_Static_assert(sizeof ((sup_spec *)0)->job == JOB_NAME_MAX + 1, "an ordered job name fits the supervisor's");

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
	ev_timer tick;            /* every 100 ms: the safety net and the order rounds */
	/* head side */
	job_report *reports;      /* each node's latest (job_report.node says whose) */
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
	/* the latest word on a member's disk folder on this node (refused here,
	 * or a warning): skeinctl info shows it */
	char disk_note[400];
	/* the port each stock engine member (--rollout-engine sglang|vllm) was
	 * given, kept while its generation runs: a later order must not change
	 * the environment of what runs (agent_jobs.c) */
	struct engine_port {
		char id[SUP_ID_MAX];
		uint64_t gen;
		int port;
	} *eports;
	size_t neports;
	/* folders judged lately: stat and realpath run in the event loop, and
	 * a shared folder may sit on a slow mount, so each is judged at most
	 * once per DISK_JUDGE_S (agent_jobs.c) */
	struct disk_judged {
		char dir[JOB_DIR_MAX];
		double at;
		bool refused;
		char why[300];
	} judged[8];
};

/* One member's order as the head builds it: o.env points into arena,
 * o.cmd into the committed record. */
typedef struct {
	job_order o;
	char node[MBR_NAME_MAX + 1];
	char arena[JOB_ORDER_ENV_BYTES];  /* every KEY=VALUE, back to back: sized for the longest */
	size_t used;
	const char *env[JOB_ORDER_ENV_MAX];
} order_buf;

/* ---- agent_jobs_base.c: shared by the whole family (and agent_wv.c) ---- */
/* The state of member `id` as `node` last reported it (NULL if none). */
const job_member_status *aj_status_of(agent *a, const char *node, const char *id);
const job_report *aj_report_of(agent *a, const char *node);   /* NULL if none */
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
/* A reconcile round and orders in `after` seconds (sooner if one is due sooner). */
void aj_kick_in(agent *a, double after);
void aj_propose_update(agent *a, const job_rec *old, const char *state, const char *reason, const job_layout *L,
		       const char *why);
void aj_master_of(agent *a, job_layout *L, const place_node *nodes, size_t n);
void aj_fresh_port(agent *a, job_layout *L);
uint32_t aj_free_port(agent *a);   /* a port free on this node now, 0 when none */
/* A port to offer as MASTER_PORT on `node` (`old` while still offered). */
uint32_t aj_node_free_port(agent *a, const char *node, uint32_t old);

/* ---- agent_drain.c: below agent_jobs.c, which alone calls its head-side steps ---- */
void aj_drain_tick(agent *a);                 /* head: before a reconcile round */
void aj_drain_mark(agent *a, place_node *nodes, size_t n); /* drained nodes offer no GPUs */
/* Moves one step of job j off drained nodes (the whole trainer group, or one
 * engine once every engine runs); true when it proposed a change. */
bool aj_drain_step(agent *a, const job_rec *j, const job_spec *s, place_node *nodes, size_t n);
/* Agent side: the drained set as the head's last order said. */
void aj_drained_set(agent *a, const char *const *names, size_t n);
void aj_drained_free(agent *a);
/* skeinctl drain / undrain (called by agent_jobs_cmd.c's dispatch) */
void aj_cmd_drain(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);

/* ---- agent_jobs.c: placement, orders, supervision ---- */
/* An order from the head (checked by the caller) applied on this agent. */
void aj_assign_local(agent *a, const job_assignment *as);
/* The head takes in `node`'s report (NULL: the node the payload names). */
void aj_handle_report(agent *a, const char *node, const uint8_t *data, size_t len);

/* ---- agent_jobs_cmd.c: the commands (the caller checked the head is ready) ---- */
void aj_cmd_job(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);
void aj_cmd_placement(agent *a, const Skein__Control__Request *q, agent_reply *r);
/* skeinctl status; without jobs where no head is known */
void aj_cmd_status(agent *a, const Skein__Control__Request *q, agent_reply *r, bool with_jobs);
/* any agent: served here, or passed to the head / the member's node */
void aj_cmd_logs(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);
void aj_cmd_engine(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r);

#endif
