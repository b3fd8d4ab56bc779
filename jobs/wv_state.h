/* jobs/wv_state: the replicated table of weight updates (docs/updates.md).
 *
 * One record per (job, version) a trainer began (proto/weights.proto
 * Update; jobs/wv_codec.c alone reads its protobuf), changed only by
 * committed log entries of type WV_ENTRY_PUT (a packed Update), so every
 * voter holds the same records and a new head adopts the open ones.  The
 * rules, the same on every voter:
 *   - every field checked: a job name (job_name_ok), version > 0, base <
 *     version, a mode, a sender and its node (printable, bounded), a state
 *     of the lists below, a digest of 0 or 16 bytes, at most WV_ENGINES_MAX
 *     engines with distinct members, reasons of at most WV_REASON_MAX bytes,
 *     finite non-negative timings;
 *   - a new (job, version) is `preparing`, above every version the job ever
 *     had, and the job has no open (preparing) record; a job beyond
 *     WV_JOBS_MAX is refused;
 *   - an existing record must be open; the new one keeps its job, version,
 *     base and sender, and is preparing (engines updated), committed or
 *     aborted (a root, once set, stays): those two are final, but for one amendment: a record with
 *     `measured` set may replace a final one without it, and only its
 *     update_seconds and commit_seconds are taken (the head learns how long
 *     the final record took to commit only once it applies).
 * Per job the newest WV_KEEP_PER_JOB records stay (an open one always);
 * the job's highest version begun and latest committed version outlive the
 * records dropped.  Pure: no I/O, no clock, no protobuf in this header. */
#ifndef WV_STATE_H
#define WV_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_model.h"
#include "jobs/job_state.h"
#include "jobs/job_spec.h"

/* Why an update was aborted, one fixed word (the reason says the rest):
 *   engine       a participant failed to receive or verify it (a checksum)
 *   member_lost  a participant was lost and the job aborts then
 *               (--update-on-engine-loss abort)
 *   sender       the sender failed, died or lost its node
 *   timeout      the watchdog: no progress for --update-weight-timeout
 *   superseded   the sender began a newer version (it gave this one up) */
enum { WV_NCAUSES = 5, WV_CAUSE_MAX = 15 };
extern const char *const wv_causes[WV_NCAUSES];

/* Why a participant failed or was dropped, as a compact record says it
 * (proto Loss.why): a code whose text is wv_whys[code]; the full reason
 * stays in the head's memory and log.  wv_why_code maps a reason to the
 * code of the text it starts with (root mismatch: anywhere), else 0. */
enum { WV_NWHYS = 6 };
extern const char *const wv_whys[WV_NWHYS];
unsigned wv_why_code(const char *reason);

enum {
	WV_ENTRY_PUT = 40,         /* a packed Update: begins or replaces the record of (job, version) */
	WV_KEEP_PER_JOB = 64,      /* records kept per job: `skeinctl transfers --last` reaches this far */
	WV_ENGINES_MAX = 8192,     /* participants of one update (refused at begin beyond): 1,000 nodes x 8 GPUs */
	WV_ENGINE_IDS = 65536,     /* engine ids of a compact record: below this */
	WV_JOBS_MAX = 4096,        /* jobs with records: as many as job_state holds (JOB_STATE_JOBS_MAX) */
	WV_MEMBER_MAX = JOB_NAME_MAX + 32, /* "<job>/engine-<i>" with room to spare, without the NUL */
	WV_MODE_MAX = 31,          /* job_spec's transfer_mode field */
	WV_REASON_MAX = 512,       /* bytes of a reason */
	WV_STATE_NAME_MAX = 11,    /* "preparing", "committed", ... */
	WV_DIGEST_LEN = 16,        /* xxh3-128 of the manifest */
	WV_NONCE_LEN = 16,         /* the p2p hello's ticket */
};

/* Where one side's data path spent a version's time (proto Timings; all 0
 * in records from before it). */
typedef struct {
	double data, hash, journal, undo;
} wv_timings;

/* One participant.  reason is malloc'd, never NULL in a decoded or copied
 * record. */
typedef struct {
	char member[WV_MEMBER_MAX + 1];
	char node[JOB_NODE_MAX + 1];
	char state[WV_STATE_NAME_MAX + 1];   /* pending verified failed dropped */
	char *reason;
	double seconds;
	wv_timings t;                        /* its receive's split */
} wv_engine;

/* One update.  reason and engines are malloc'd; after decode or copy reason
 * is never NULL ("") and engines may be NULL only when nengines is 0.  A
 * record built by hand may leave reason NULL (encoded as ""). */
typedef struct {
	char job[JOB_NAME_MAX + 1];
	uint64_t version, base_version;
	char mode[WV_MODE_MAX + 1];
	uint8_t digest[WV_DIGEST_LEN];
	bool has_digest;
	uint64_t bytes;
	uint32_t tensors;
	char sender[WV_MEMBER_MAX + 1];
	char sender_node[JOB_NODE_MAX + 1];
	char state[WV_STATE_NAME_MAX + 1];   /* preparing committed aborted */
	char cause[WV_CAUSE_MAX + 1];        /* aborted: one of wv_causes; else "" */
	char *reason;
	wv_engine *engines;
	size_t nengines;
	uint64_t started_ms, finished_ms, wire_bytes;
	double density, update_seconds, implementation_seconds, prepare_seconds, commit_seconds;
	wv_timings sender_t;                 /* the sender's split */
	bool measured;                       /* the final record's amendment (below) */
	uint8_t root[WV_DIGEST_LEN];         /* the sender's root of v's checksums (transfer/xfer_root.c) */
	bool has_root;                       /* set once: a replacing record keeps it */
	uint8_t nonce[WV_NONCE_LEN];         /* drawn by the head at begin: the p2p hello's ticket */
	bool has_nonce;                      /* (records of older heads have none) */
	/* compact (issue 25): engines travel as bitmaps of engine ids
	 * (proto Update.participants): members "<job>/engine-<i>" by id, their
	 * nodes "" once decoded (the job's layout has them), their seconds,
	 * timings and reasons' detail not replicated; a measured one is bare
	 * (only the amendment's figures, job, version, state and cause). */
	bool compact;
	bool bare;                           /* decoded from a bare amendment: amends only */
	wv_timings engines_t;                /* compact: each figure's largest over the engines */
	double engines_seconds;              /* compact: the slowest engine's receive */
} wv_update;

/* A packed skein.weights.Update (*out malloc'd): 0, -1 when memory runs out
 * or a string does not fit its field (the C struct may hold anything). */
int wv_update_encode(const wv_update *u, uint8_t **out, size_t *len);
/* A packed Update into u (overwritten; wv_update_free it), every rule of a
 * record on its own checked (not those against the table): 0, or -1 with
 * one line in err. */
int wv_update_decode(wv_update *u, const uint8_t *d, size_t n, char *err, size_t errlen);
/* The same check on a record in memory (what the head is about to propose). */
int wv_update_check(const wv_update *u, char *err, size_t errlen);
int wv_update_copy(wv_update *dst, const wv_update *src);   /* deep; -1 when memory runs out */
void wv_update_free(wv_update *u);   /* safe twice */
/* "<job>/engine-<i>" -> i (below WV_ENGINE_IDS, no leading zero): true. */
bool wv_engine_id(const char *job, const char *member, uint32_t *id);
/* The engine of u named member, or NULL. */
const wv_engine *wv_update_engine(const wv_update *u, const char *member);
bool wv_update_open(const wv_update *u);   /* state "preparing" */
/* Each figure's largest over u's engines (the slowest participant's split;
 * a compact record's engines_t included). */
wv_timings wv_update_slowest(const wv_update *u);

typedef struct wv_state wv_state;

wv_state *wv_state_new(void);
void wv_state_free(wv_state **s);   /* safe on NULL, sets *s to NULL */

/* One WV_ENTRY_PUT: 0 applied, -1 refused (counted; the state unchanged). */
int wv_state_apply(wv_state *s, const uint8_t *data, size_t len);
/* The same, also refusing a record of a job that jobs does not hold (NULL:
 * no such check): a begin committed after its job's delete would otherwise
 * stay, since the delete already forgot the job. */
int wv_state_apply_known(wv_state *s, const uint8_t *data, size_t len, const job_state *jobs);
uint64_t wv_state_refused(const wv_state *s);
/* The job was deleted: its records and versions go (a job submitted again
 * under the name starts from version 1). */
void wv_state_forget_job(wv_state *s, const char *job);

/* Lookups; records are valid until the next apply, forget or restore. */
const wv_update *wv_state_get(const wv_state *s, const char *job, uint64_t version);
const wv_update *wv_state_open(const wv_state *s, const char *job);   /* its preparing record, or NULL */
uint64_t wv_state_committed(const wv_state *s, const char *job);      /* latest committed version, 0 */
uint64_t wv_state_max_version(const wv_state *s, const char *job);    /* highest version ever begun, 0 */
/* A job's records newest first: i = 0..; NULL past the end. */
const wv_update *wv_state_job_at(const wv_state *s, const char *job, size_t i);
/* Every record (jobs by name, each job's oldest first); NULL past the end. */
size_t wv_state_count(const wv_state *s);
const wv_update *wv_state_at(const wv_state *s, size_t i);
/* Jobs with records or versions, by name; NULL past the end. */
size_t wv_state_jobs(const wv_state *s);
const char *wv_state_job_name(const wv_state *s, size_t i);

/* Snapshot: a packed Snapshot (every record, every job's versions);
 * restore checks everything (the rules above, per job at most
 * WV_KEEP_PER_JOB records, one open at most and the newest, versions that
 * agree) before it changes anything. */
int wv_state_serialize(const wv_state *s, uint8_t **out, size_t *len);
int wv_state_restore(wv_state *s, const uint8_t *d, size_t n, char *err, size_t errlen);

#endif
