/* jobs/update_state: the replicated table of weight updates (docs/updates.md).
 *
 * One record per (job, version) a trainer began (proto/weights.proto
 * Update; jobs/update_codec.c alone reads its protobuf), changed only by
 * committed log entries of type UPDATE_ENTRY_PUT (a packed Update), so every
 * voter holds the same records and a new head adopts the open ones.  The
 * rules, the same on every voter:
 *   - every field checked: a job name (job_name_ok), version > 0, base <
 *     version, a mode, a sender and its node (printable, bounded), a state
 *     of the lists below, a digest of 0 or 16 bytes, at most UPDATE_ENGINES_MAX
 *     engines with distinct members, reasons of at most UPDATE_REASON_MAX bytes,
 *     finite non-negative timings;
 *   - a new (job, version) is `preparing`, above every version the job ever
 *     had, and the job has no open (preparing) record; a job beyond
 *     UPDATE_JOBS_MAX is refused;
 *   - an existing record must be open; the new one keeps its job, version,
 *     base and sender, and is preparing (engines updated), committed or
 *     aborted (a root, once set, stays): those two are final, but for one amendment: a record with
 *     `measured` set may replace a final one without it, and only its
 *     update_seconds and commit_seconds are taken (the head learns how long
 *     the final record took to commit only once it applies).
 * Per job the newest UPDATE_KEEP_PER_JOB records stay (an open one always);
 * the job's highest version begun and latest committed version outlive the
 * records dropped.  Pure: no I/O, no clock, no protobuf in this header. */
#ifndef UPDATE_STATE_H
#define UPDATE_STATE_H

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
enum { UPDATE_NCAUSES = 5, UPDATE_CAUSE_MAX = 15 };
extern const char *const update_causes[UPDATE_NCAUSES];

/* Why a participant failed or was dropped, as a compact record says it
 * (proto Loss.why): a code whose text is update_whys[code]; the full reason
 * stays in the head's memory and log.  update_why_code maps a reason to the
 * code of the text it starts with (root mismatch: anywhere), else 0. */
enum { UPDATE_NWHYS = 6 };
extern const char *const update_whys[UPDATE_NWHYS];
unsigned update_why_code(const char *reason);

enum {
	UPDATE_ENTRY_PUT = 40,         /* a packed Update: begins or replaces the record of (job, version) */
	UPDATE_KEEP_PER_JOB = 64,      /* records kept per job: `skeinctl transfers --last` reaches this far */
	UPDATE_ENGINES_MAX = 8192,     /* participants of one update (refused at begin beyond): 1,000 nodes x 8 GPUs */
	UPDATE_ENGINE_IDS = 65536,     /* engine ids of a compact record: below this */
	UPDATE_JOBS_MAX = 4096,        /* jobs with records: as many as job_state holds (JOB_STATE_JOBS_MAX) */
	UPDATE_MEMBER_MAX = JOB_NAME_MAX + 32, /* "<job>/engine-<i>" with room to spare, without the NUL */
	UPDATE_MODE_MAX = 31,          /* job_spec's transfer_mode field */
	UPDATE_REASON_MAX = 512,       /* bytes of a reason */
	UPDATE_STATE_NAME_MAX = 11,    /* "preparing", "committed", ... */
	UPDATE_DIGEST_LEN = 16,        /* xxh3-128 of the manifest */
	UPDATE_NONCE_LEN = 16,         /* the p2p hello's ticket */
	UPDATE_JOURNAL_WHERE_MAX = 15, /* EngineStatus.journal_where: "device+pinned" and room */
};

/* Where one side's data path spent a version's time (proto Timings; all 0
 * in records from before it). */
typedef struct {
	double data, hash, journal, undo;
} update_timings;

/* One participant.  reason is malloc'd, never NULL in a decoded or copied
 * record. */
typedef struct {
	char member[UPDATE_MEMBER_MAX + 1];
	char node[JOB_NODE_MAX + 1];
	char state[UPDATE_STATE_NAME_MAX + 1];   /* pending verified failed dropped */
	char *reason;
	double seconds;
	update_timings t;                        /* its receive's split */
	/* its receive's undo journal (EngineStatus): the head's in-memory
	 * detail only, never encoded (update_rec_encode leaves them out) */
	uint64_t journal_bytes, journal_spilled;
	char journal_where[UPDATE_JOURNAL_WHERE_MAX + 1]; /* "" when it said none */
} update_engine;

/* One update.  reason and engines are malloc'd; after decode or copy reason
 * is never NULL ("") and engines may be NULL only when nengines is 0.  A
 * record built by hand may leave reason NULL (encoded as ""). */
typedef struct {
	char job[JOB_NAME_MAX + 1];
	uint64_t version, base_version;
	char mode[UPDATE_MODE_MAX + 1];
	uint8_t digest[UPDATE_DIGEST_LEN];
	bool has_digest;
	uint64_t bytes;
	uint32_t tensors;
	char sender[UPDATE_MEMBER_MAX + 1];
	char sender_node[JOB_NODE_MAX + 1];
	char state[UPDATE_STATE_NAME_MAX + 1];   /* preparing committed aborted */
	char cause[UPDATE_CAUSE_MAX + 1];        /* aborted: one of update_causes; else "" */
	char *reason;
	update_engine *engines;
	size_t nengines;
	uint64_t started_ms, finished_ms, wire_bytes;
	double density, update_seconds, implementation_seconds, prepare_seconds, commit_seconds;
	update_timings sender_t;                 /* the sender's split */
	bool measured;                       /* the final record's amendment (below) */
	uint8_t root[UPDATE_DIGEST_LEN];         /* the sender's root of v's checksums (transfer/xfer_root.c) */
	bool has_root;                       /* set once: a replacing record keeps it */
	uint8_t nonce[UPDATE_NONCE_LEN];         /* drawn by the head at begin: the p2p hello's ticket */
	bool has_nonce;                      /* (records of older heads have none) */
	/* compact (issue 25): engines travel as bitmaps of engine ids
	 * (proto Update.participants): members "<job>/engine-<i>" by id, their
	 * nodes "" once decoded (the job's layout has them), their seconds,
	 * timings and reasons' detail not replicated; a measured one is bare
	 * (only the amendment's figures, job, version, state and cause). */
	bool compact;
	bool bare;                           /* decoded from a bare amendment: amends only */
	update_timings engines_t;                /* compact: each figure's largest over the engines */
	double engines_seconds;              /* compact: the slowest engine's receive */
} update_rec;

/* A packed skein.weights.Update (*out malloc'd): 0, -1 when memory runs out
 * or a string does not fit its field (the C struct may hold anything). */
int update_rec_encode(const update_rec *u, uint8_t **out, size_t *len);
/* A packed Update into u (overwritten; update_rec_free it), every rule of a
 * record on its own checked (not those against the table): 0, or -1 with
 * one line in err. */
int update_rec_decode(update_rec *u, const uint8_t *d, size_t n, char *err, size_t errlen);
/* The same check on a record in memory (what the head is about to propose). */
int update_rec_check(const update_rec *u, char *err, size_t errlen);
int update_rec_copy(update_rec *dst, const update_rec *src);   /* deep; -1 when memory runs out */
void update_rec_free(update_rec *u);   /* safe twice */
/* "<job>/engine-<i>" -> i (below UPDATE_ENGINE_IDS, no leading zero): true. */
bool update_engine_id(const char *job, const char *member, uint32_t *id);
/* The engine of u named member, or NULL. */
const update_engine *update_rec_engine(const update_rec *u, const char *member);
bool update_rec_open(const update_rec *u);   /* state "preparing" */
/* Each figure's largest over u's engines (the slowest participant's split;
 * a compact record's engines_t included). */
update_timings update_rec_slowest(const update_rec *u);

typedef struct update_state update_state;

update_state *update_state_new(void);
void update_state_free(update_state **s);   /* safe on NULL, sets *s to NULL */

/* One UPDATE_ENTRY_PUT: 0 applied, -1 refused (counted; the state unchanged). */
int update_state_apply(update_state *s, const uint8_t *data, size_t len);
/* The same, also refusing a record of a job that jobs does not hold (NULL:
 * no such check): a begin committed after its job's delete would otherwise
 * stay, since the delete already forgot the job. */
int update_state_apply_known(update_state *s, const uint8_t *data, size_t len, const job_state *jobs);
uint64_t update_state_refused(const update_state *s);
/* The job was deleted: its records and versions go (a job submitted again
 * under the name starts from version 1). */
void update_state_forget_job(update_state *s, const char *job);

/* Lookups; records are valid until the next apply, forget or restore. */
const update_rec *update_state_get(const update_state *s, const char *job, uint64_t version);
const update_rec *update_state_open(const update_state *s, const char *job);   /* its preparing record, or NULL */
uint64_t update_state_committed(const update_state *s, const char *job);      /* latest committed version, 0 */
uint64_t update_state_max_version(const update_state *s, const char *job);    /* highest version ever begun, 0 */
/* A job's records newest first: i = 0..; NULL past the end. */
const update_rec *update_state_job_at(const update_state *s, const char *job, size_t i);
/* Every record (jobs by name, each job's oldest first); NULL past the end. */
size_t update_state_count(const update_state *s);
const update_rec *update_state_at(const update_state *s, size_t i);
/* Jobs with records or versions, by name; NULL past the end. */
size_t update_state_jobs(const update_state *s);
const char *update_state_job_name(const update_state *s, size_t i);

/* Snapshot: a packed Snapshot (every record, every job's versions);
 * restore checks everything (the rules above, per job at most
 * UPDATE_KEEP_PER_JOB records, one open at most and the newest, versions that
 * agree) before it changes anything. */
int update_state_serialize(const update_state *s, uint8_t **out, size_t *len);
int update_state_restore(update_state *s, const uint8_t *d, size_t n, char *err, size_t errlen);

#endif
