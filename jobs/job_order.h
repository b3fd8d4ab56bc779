/* jobs/job_order: what the head orders an agent to run, and what the agent
 * reports back, as plain C (proto/jobs.proto MemberOrder, Assignment,
 * MemberStatus, Report on the wire; jobs/job_codec.c alone converts).
 *
 * An assignment is the full list of members one agent must run (members not
 * listed are stopped), sent with the head's term on every change and every
 * second.  A report is the state of every member an agent supervises, sent
 * to the head after each order and on every exit.
 *
 * Ownership: an assignment the head builds points into the head's own
 * buffers (the committed record's command, an order's environment arena);
 * one the codec decodes owns a single block (job_assignment_free).  A
 * report's members are malloc'd either way (job_report_free).  Every
 * decoded string is bounded by the fields below: a value over its bound is
 * refused, never cut, except a member's reason (display text), which is. */
#ifndef JOB_ORDER_H
#define JOB_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_model.h"
#include "jobs/job_spec.h"

enum {
	JOB_MEMBER_ID_MAX = 159,      /* "<job>/trainer-<rank>": the supervisor's id, less its NUL */
	JOB_ORDER_ENV_MAX = 47,       /* KEY=VALUE entries of one member (the agent adds one) */
	JOB_ORDER_ENV_BYTES = JOB_DIR_MAX + 2048, /* all of them, NULs included: room for the longest */
	JOB_STATE_NAME_MAX = 15,      /* pending, starting, running, restarting, failed, stopped */
	JOB_REASON_MAX = 127,         /* a member's reason, as its supervisor words it */
};

/* One member an agent must run. */
typedef struct {
	char id[JOB_MEMBER_ID_MAX + 1];
	char job[JOB_NAME_MAX + 1];
	bool trainer;                 /* role: trainer, or rollout (an engine) */
	int32_t rank, engine;         /* trainer rank or -1; engine id or -1 */
	uint32_t ngpus;
	uint32_t gpus[JOB_GPUS_PER_NODE_MAX];
	const char *cmd;              /* run with /bin/sh -c; at most JOB_CMD_MAX - 1 bytes */
	uint32_t nenv;
	const char *const *env;       /* KEY=VALUE, computed by the head */
	uint64_t gen;                 /* a new generation restarts the member */
	uint32_t restart_base;        /* SKEIN_RESTART_COUNT = base + local restarts */
	bool local_restart;           /* engines: the agent restarts it; trainer: the head does */
	int32_t max_restarts;
	uint32_t backoff_min_ms, backoff_max_ms;
	uint32_t start_delay_ms;      /* backoff before the first start of this generation */
	bool hold;                    /* do not start yet (MASTER_PORT not chosen) */
	uint32_t stop_grace_ms;
} job_order;

/* Everything one agent must run, from the head `head`. */
typedef struct {
	char head[JOB_NODE_MAX + 1];  /* who gave it: reports go there */
	size_t n;
	const job_order *const *members;
	size_t ndrained;
	const char *const *drained;   /* every drained node (skeinctl members shows them) */
	void *mem;                    /* decoded: the block all of it lives in; NULL when built */
} job_assignment;

/* One member as its agent last saw it. */
typedef struct {
	char id[JOB_MEMBER_ID_MAX + 1];
	char job[JOB_NAME_MAX + 1];
	uint64_t gen;
	int32_t pid;
	char state[JOB_STATE_NAME_MAX + 1];
	uint32_t restarts;            /* SKEIN_RESTART_COUNT of the running process */
	int32_t last_exit;            /* wait status decoded: exit code, or -signal */
	char reason[JOB_REASON_MAX + 1];
} job_member_status;

/* An agent's report: its members, and a port found free on its node. */
typedef struct {
	char node[JOB_NODE_MAX + 1];
	uint32_t free_port;           /* for MASTER_PORT; 0 = none */
	size_t n;
	job_member_status *members;   /* malloc'd */
} job_report;

#endif
