/* agent/agent_sup: the supervisor of member processes on one agent.
 *
 * The agent hands it the desired state (every member this node must run,
 * from the head's latest order); sup_set reconciles: starts what is new,
 * restarts what changed generation, stops what is gone.  Each member runs
 * as `/bin/sh -c CMD` in its own process group (setpgid), with the agent's
 * environment less its secrets (SKEIN_KEY*, SKEIN_OPERATOR*, ...), the
 * order's environment and SKEIN_RESTART_COUNT, stdout and stderr appended to
 * <log_dir>/<job>/<member>.log (0600 in 0700 folders, never through a link:
 * agent_files.h), and PR_SET_PDEATHSIG so it dies with the agent.  Where
 * the agent gives it a cgroup folder (sup_set_cgroup), each member also runs
 * in a cgroup of its own, which holds all its descendants (agent_cgroup.h).
 * Every member carries SKEIN_SUP_MARK, random per agent run.  <state_file>
 * records the mark, the cgroup folder and the process groups (pgid and
 * leader start time); sup_new kills everything a previous agent left: its
 * cgroups, its live groups, and every process with its mark (what a group
 * leader left when it died with the agent).
 *
 * Exit handling (libev child watcher, so within a loop iteration of death):
 *   - local_restart (engines): restarted after backoff min*2^k capped at max
 *     (k = consecutive quick exits; a run of 30 s resets it), up to
 *     max_restarts restarts, then state "failed";
 *   - otherwise (trainer ranks): state "failed" (exit != 0) or "stopped"
 *     (exit 0), the event callback fires, and the member waits for a new
 *     generation from the head.  sup_stop_prefix stops the siblings.
 * Stopping sends SIGTERM to the group, then SIGKILL after the grace time.
 * A member whose generation changed is stopped first; the new one starts
 * once the old group is gone, after start_delay_ms. */
#ifndef AGENT_SUP_H
#define AGENT_SUP_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/sk_buf.h"

enum { SUP_ENV_MAX = 48, SUP_ID_MAX = 160 };

typedef struct {
	char id[SUP_ID_MAX];       /* "<job>/trainer-3": the key, also the log file name */
	char job[64];              /* may be empty; when set, must be the id's part before '/' */
	const char *cmd;           /* run with /bin/sh -c */
	const char *env[SUP_ENV_MAX]; /* KEY=VALUE, added to the agent's environment */
	size_t nenv;
	uint64_t gen;
	uint32_t restart_base;
	bool local_restart;
	int32_t max_restarts;      /* local restarts per generation; < 0: no limit */
	uint32_t backoff_min_ms, backoff_max_ms;
	uint32_t start_delay_ms;
	uint32_t stop_grace_ms;
	bool hold;                 /* keep it listed but do not start it yet */
} sup_spec;

typedef enum {
	SUP_PENDING,     /* held, or waiting for its old process to go */
	SUP_STARTING,    /* waiting for its start delay */
	SUP_RUNNING,
	SUP_RESTARTING,  /* exited; restart scheduled (backoff) */
	SUP_FAILED,      /* exited non-zero and will not be restarted here */
	SUP_STOPPED,     /* exited 0, or stopped on order */
} sup_state;
const char *sup_state_str(sup_state s);

typedef struct {
	char id[SUP_ID_MAX];
	char job[64];
	uint64_t gen;
	pid_t pid;                 /* 0 when not running */
	sup_state state;
	uint32_t restarts;         /* the SKEIN_RESTART_COUNT of the current or last process */
	int last_exit;             /* exit code, or -signal; 0 before any exit */
	uint64_t started_ms, exited_ms; /* sk_mono_ms; 0 when never */
	char reason[128];
} sup_status;

typedef struct sup sup;
/* Called after a member changes state (exited, started, failed, ...), with a
 * snapshot.  Events are queued and delivered from the loop (a zero timer),
 * never from inside sup_set or sup_stop_prefix; the callback may call
 * sup_set, sup_get, sup_list, sup_stop_prefix, but not sup_free. */
typedef void (*sup_event_fn)(void *ud, const sup_status *st);

/* log_dir and state_file may be NULL (no logs / no stale cleanup).
 * `loop` must be the default loop (ev_default_loop): libev child watchers
 * only work there.  Kills what a previous agent left (see the top: its
 * cgroup, its live groups, its marked processes), and makes this process a
 * child subreaper (PR_SET_CHILD_SUBREAPER) so that members' orphans are
 * reaped here.  Returns NULL with a message on failure. */
sup *sup_new(struct ev_loop *loop, const char *log_dir, const char *state_file, sup_event_fn cb, void *ud,
	     char *err, size_t errlen);
/* Members run in cgroups under `dir` from now on (agent_cgroup.h), each in a
 * leaf of its own; without it, process groups alone.  The folder is
 * recorded in the state file: a restarted agent kills all that is in it.
 * Call before the first sup_set.  -1 on out of memory. */
int sup_set_cgroup(sup *s, const char *dir);
/* Stops every member (TERM, then KILL after its grace) and waits for them,
 * running the loop at most `max_wait_s`; then SIGKILLs what is left, frees,
 * removes the state file and sets *s to NULL (safe twice).  No events are
 * delivered from here on. */
void sup_free(sup **s, double max_wait_s);

/* The desired state: exactly these members (copied). */
void sup_set(sup *s, const sup_spec *specs, size_t n);
/* Current state of every member known (running, or stopped/failed and still
 * ordered), sorted by id; returns the count (may exceed cap). */
size_t sup_list(sup *s, sup_status *out, size_t cap);
int sup_get(sup *s, const char *id, sup_status *out);
/* Stops (TERM then KILL) the running members of a job with the given id
 * prefix, e.g. "job1/trainer-", marking them failed/"stopped by the agent: a
 * sibling died"; they wait for a new generation. */
void sup_stop_prefix(sup *s, const char *prefix, const char *why);

/* Reads a member's log from `offset` (at most `max` bytes) into out; *next
 * is the offset after it, *size the file size (an offset past the end, after
 * a truncation, reads nothing and sets *next to the size).  -1 when no such
 * log (bad id, no log_dir, no file). */
int sup_log_read(sup *s, const char *id, uint64_t offset, size_t max, sk_buf *out, uint64_t *next, uint64_t *size);

#endif
