/* agent/agent_state: the replicated state machine every voter applies.
 *
 * The key-value map (raft/raft_kv.h) and the jobs with the drained nodes
 * (jobs/job_state.h) as one machine: a committed entry goes to the map, or
 * to the jobs when the map does not know its type; a snapshot holds both
 * ("SKSM").  Pure: no loop, no agent, no election; the caller (agent_head.c)
 * learns what changed from the return values and tells the jobs itself. */
#ifndef AGENT_STATE_H
#define AGENT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_state.h"
#include "raft/raft_kv.h"

typedef struct agent_state agent_state;

agent_state *agent_state_new(void);
void agent_state_free(agent_state **sp);   /* safe on NULL, sets *sp to NULL */

/* Applies one committed entry of a user type: 0 applied, -1 refused (the
 * same way on every voter).  *jobs_changed is set when it was a jobs entry. */
int agent_state_apply(agent_state *s, uint8_t type, const uint8_t *data, size_t len, bool *jobs_changed);

/* The whole machine as one snapshot (malloc'd), and back.  restore checks
 * everything before it changes anything; a bare key-value snapshot (what
 * earlier versions wrote) is still read. */
int agent_state_serialize(const agent_state *s, uint8_t **out, size_t *len);
int agent_state_restore(agent_state *s, const uint8_t *d, size_t len, char *err, size_t errlen);

const raft_kv *agent_state_kv(const agent_state *s);
const job_state *agent_state_jobs(const agent_state *s);

#endif
