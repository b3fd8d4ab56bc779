/* agent/agent_update_int.h: what agent_update.c (the head's coordinator's
 * wiring) and agent_update_table.c (its engine, open-update and deadline
 * tables) share.  Not for other files. */
#ifndef AGENT_UPDATE_INT_H
#define AGENT_UPDATE_INT_H

#include "agent/agent_jobs_int.h"
#include "agent/agent_update.h"
#include "common/sk_heap.h"
#include "jobs/update_coord.h"
#include "jobs/update_state.h"

static const double TICK_S = 0.02;
static const double IDLE_TICK_S = 0.5;
static const double WAIT_HOLD_S = 1.0;      /* a wait with nothing to do is answered idle after this */
static const double ENGINE_FORGET_S = 10.0; /* an engine not heard from for this long is forgotten */
static const double CATCHUP_STALL_S = 30.0; /* a peer catch-up without news is given up */
static const double CATCHUP_RETRY_S = 1.0;
static const double RETRY_S = 0.1;          /* a refused final/measured proposal is made again after this */

enum {
	MEMBER_MAX = JOB_NAME_MAX + 32,
	ENDPOINT_MAX = 64,
	REASON_MAX = 400,
	ENGINES_MAX = 4 * UPDATE_ENGINES_MAX, /* engines known to the head, every job */
	OPEN_MAX = 1024,
	DETAIL_MAX = 512,             /* finished updates whose engines' detail this head keeps (all jobs) */
	SETUP_MAX = 512 << 10,         /* an NCCL unique id (128), a colocated sender's handoff (xfer_ipc.c) */
};

typedef struct {
	char member[MEMBER_MAX], job[JOB_NAME_MAX + 1], node[MBR_NAME_MAX + 1];
	uint64_t gen, held, staged, failed;
	int pid;                       /* its process, as its node last reported it */
	char reason[REASON_MAX], endpoint[ENDPOINT_MAX];
	double seconds, last_seen;
	bool forget_queued;            /* its silence's deadline is on the heap (one at a time) */
	bool waiting;
	bool behind;                   /* its last wait held less than its job's latest committed version */
	agent_client client;
	double wait_since;
	/* p2p catch-up: this engine serves `serve_version` to `serve_to`, or is
	 * served `catchup_version` by `source` */
	char serve_to[MEMBER_MAX], source[MEMBER_MAX];
	uint8_t staged_root[UPDATE_DIGEST_LEN]; /* the root it verified `staged` against (EngineStatus.root) */
	bool has_staged_root;
	uint64_t serve_version, catchup_version;
	uint8_t serve_nonce[UPDATE_NONCE_LEN], catchup_nonce[UPDATE_NONCE_LEN]; /* the pairing's p2p ticket (both ends) */
	double catchup_since, retry_at; /* a failed catch-up is asked again after CATCHUP_RETRY_S */
} update_eng;

typedef struct {
	update_coord co;                   /* the record as proposed and the rules (jobs/update_coord) */
	bool begin_waiting, done_waiting;
	agent_client begin_client, done_client;
	uint8_t *setup;                /* malloc'd; held here only: a new head adopts an update without it
					  (colocated: the sender's done brings it again) */
	size_t setup_len;
} update_open;

struct agent_update {
	ev_timer tick;
	bool changed;                  /* the head applied a weight entry */
	bool recheck;                  /* a report or membership changed: look at the participants again */
	bool was_ready;
	update_eng *eng;
	size_t neng, engcap;
	/* eng by member: open addressing, index + 1 (0 empty), at most half
	 * full; rebuilt after a drop (rare: an engine silent for 10 s) */
	uint32_t *hidx;
	size_t hcap;
	bool hdirty;
	size_t nbehind;                /* engines whose last wait held less than the job's latest (catch-ups to pair) */
	/* deadlines of waits (wait_since + WAIT_HOLD_S; one per wait, stale
	 * ones skipped when popped) and of silences (last_seen +
	 * ENGINE_FORGET_S; one per engine, pushed again if it was heard
	 * since), in microseconds */
	sk_heap due;
	update_open *open;
	size_t nopen, opencap;
	/* final and measured records Raft refused (a handover in progress, the
	 * lease lapsing): proposed again every RETRY_S until one is taken or the
	 * head steps down (forget_all; the next head adopts what is open) */
	update_rec *retry;
	size_t nretry, retrycap;
	double retry_at;
	/* the per-engine detail of the last DETAIL_MAX updates this head
	 * finished (nodes, seconds, timings, reasons' text): compact records do
	 * not replicate it; `transfers` shows it from here (a ring) */
	update_rec detail[DETAIL_MAX];
	size_t detail_next;
	size_t engines_max;            /* UPDATE_ENGINES_MAX; SKEIN_TEST_WV_ENGINES_MAX lowers it (tests) */
	int test_refuse;               /* SKEIN_TEST_WV_REFUSE=N: the first N final/measured
					  proposals refused as Raft refuses them in a handover */
};

/* ---- the head's tables (agent_update_table.c) ---- */
/* A deadline on W->due: a held wait's (at + WAIT_HOLD_S) or an engine's
 * silence's (forget: at + ENGINE_FORGET_S). */
typedef struct {
	char member[MEMBER_MAX];
	double at;                     /* the wait_since (or last_seen) it was pushed for */
	bool forget;                   /* a silence's deadline, not a wait's */
} update_due;
/* Room for one more of n elements in *arr (capacity *cap, at most max):
 * the new element's address, or NULL. */
void *aupd_grow_one(void **arr, size_t *cap, size_t n, size_t elem, size_t max);
void aupd_due_push(agent_update *W, const char *member, double at, bool forget);
void aupd_due_clear(agent_update *W);
update_eng *aupd_eng_find(agent_update *W, const char *member);  /* by member, NULL */
update_eng *aupd_eng_get(agent_update *W, const char *member);   /* found or added, NULL when full */
void aupd_eng_drop_at(agent_update *W, size_t i);
update_open *aupd_open_find(agent_update *W, const char *job);
update_open *aupd_open_new(agent_update *W);
void aupd_open_free(agent_update *W, update_open *u);
update_engine *aupd_part_of(update_open *u, const char *member);  /* a participant of u, NULL */
bool aupd_is_full_copy(const char *mode);                        /* every mode but disk-delta */

#endif
