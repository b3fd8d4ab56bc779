/* jobs/job_state: the jobs part of the replicated cluster state.
 *
 * A map of job name -> job record (job_rec, jobs/job_model.h: the spec,
 * its state, its placement layout; proto/jobs.proto Job on the wire, read
 * and written by jobs/job_codec.c), changed only by committed log entries, so every
 * voter holds the same records and a new head continues from them:
 *   JOB_ENTRY_SUBMIT (32)  a packed Job; refused when the name exists or the
 *                          spec is invalid
 *   JOB_ENTRY_UPDATE (33)  a packed Job replacing the record of that name
 *                          (the head computes placement and restarts and
 *                          commits the result); refused when absent, or
 *                          when its version is not the record's + 1
 *   JOB_ENTRY_DELETE (34)  a job name
 *   JOB_ENTRY_DRAIN (35)   a packed Drain: a node drained (on) or not; an
 *                          undrain of a node not drained is refused
 * Refusals are deterministic (same bytes, same code on every replica) and
 * counted.  Records are kept in submission order (seq). */
#ifndef JOB_STATE_H
#define JOB_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_model.h"

enum {
	JOB_ENTRY_SUBMIT = 32,
	JOB_ENTRY_UPDATE = 33,
	JOB_ENTRY_DELETE = 34,
	JOB_ENTRY_DRAIN = 35,
	JOB_STATE_JOBS_MAX = 4096,
	JOB_STATE_DRAINED_MAX = 1024,
};

typedef struct job_state job_state;

job_state *job_state_new(void);
void job_state_free(job_state **js);

/* 0 applied, 1 not a job entry (ignored), -1 refused (counted). */
int job_state_apply(job_state *js, uint8_t type, const uint8_t *data, size_t len);
uint64_t job_state_refused(const job_state *js);

size_t job_state_count(const job_state *js);
/* In submission order; valid until the next apply or restore. */
const job_rec *job_state_at(const job_state *js, size_t i);
const job_rec *job_state_get(const job_state *js, const char *name);
/* The seq the next submission takes (1 + the highest seen). */
uint64_t job_state_next_seq(const job_state *js);

/* Drained nodes, in the order they were drained; since_ms is the head's
 * wall clock at the drain. */
size_t job_state_drained_count(const job_state *js);
const char *job_state_drained_at(const job_state *js, size_t i, uint64_t *since_ms);
bool job_state_is_drained(const job_state *js, const char *node);
int job_state_encode_drain(const char *node, bool on, uint64_t since_ms, uint8_t **out, size_t *len);

/* Job entry payloads: jobs/job_codec.h (job_codec_encode, _update). */

/* Snapshot: "SKJB", u8 version 1, u32 count, per job u32 length + packed Job;
 * version 2 (written only while a node is drained, so that voters of an
 * older version read the rest) adds u32 count, per drained node u32 length
 * + packed Drain. */
int job_state_serialize(const job_state *js, uint8_t **out, size_t *len);
/* On error the state is unchanged. */
int job_state_restore(job_state *js, const uint8_t *data, size_t len, char *err, size_t errlen);

#endif
