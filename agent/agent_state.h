/* agent/agent_state: the replicated state machine every voter applies.
 *
 * The key-value map (raft/raft_kv.h), the jobs with the drained nodes
 * (jobs/job_state.h) and the weight updates (jobs/update_state.h) as one
 * machine: a committed entry goes to the map, to the weight updates
 * (UPDATE_ENTRY_PUT) or to the jobs; a snapshot holds all three ("SKSM").
 * Pure: no loop, no agent, no election; the caller (agent_head.c) learns
 * what changed from the return values and tells the jobs and the updates'
 * coordinator itself. */
#ifndef AGENT_STATE_H
#define AGENT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_state.h"
#include "jobs/update_state.h"
#include "raft/raft_kv.h"

/* What an entry touched (agent_state_apply's *changed, or'ed in). */
enum { AGENT_STATE_JOBS = 1, AGENT_STATE_WV = 2 };

typedef struct agent_state agent_state;

agent_state *agent_state_new(void);
void agent_state_free(agent_state **sp);   /* safe on NULL, sets *sp to NULL */

/* Applies one committed entry of a user type: 0 applied, -1 refused (the
 * same way on every voter).  *changed (may be NULL) gets AGENT_STATE_JOBS
 * for a jobs entry, AGENT_STATE_WV for a weight update entry, and both for
 * a job's delete that forgot its weight updates.  A weight update of a job
 * the jobs do not hold is refused. */
int agent_state_apply(agent_state *s, uint8_t type, const uint8_t *data, size_t len, unsigned *changed);

/* The whole machine as one snapshot (malloc'd), and back.  restore checks
 * everything before it changes anything; the earlier formats (a bare
 * key-value snapshot, "SKSM" version 1 without weight updates) are still
 * read. */
int agent_state_serialize(const agent_state *s, uint8_t **out, size_t *len);
int agent_state_restore(agent_state *s, const uint8_t *d, size_t len, char *err, size_t errlen);

const raft_kv *agent_state_kv(const agent_state *s);
const job_state *agent_state_jobs(const agent_state *s);
const update_state *agent_state_wv(const agent_state *s);

#endif
