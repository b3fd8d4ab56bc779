/* agent/agent_update: coordinated weight updates (docs/updates.md).
 *
 *   agent_update_gate.c  every agent: a member's "wv" request on the Unix
 *                    socket is checked (the connecting process is that
 *                    member, or a child of it) and sent to the head
 *   agent_update.c       the head: opens, commits and aborts updates in the
 *                    replicated state (jobs/update_state.h), answers engines'
 *                    waits, catches syncing engines up, `skeinctl transfers`
 *
 * Calls go one way: ctl -> wv -> head/jobs.  The head tells wv that the
 * replicated state changed through agent_update_state_changed (a flag read on
 * wv's own timer, so wv never runs inside the head's pump). */
#ifndef AGENT_UPDATE_H
#define AGENT_UPDATE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/agent.h"

int agent_update_open(agent *a, char *err, size_t errlen);
void agent_update_close(agent *a);

/* "wv" (members, and agents forwarding them) and "transfers" (skeinctl). */
bool agent_update_dispatch(agent *a, const struct Skein__Control__Request *q, const agent_client *c, agent_reply *r);

/* The head applied a weight-update entry or a snapshot. */
void agent_update_state_changed(agent *a);
/* A node's report came or the membership changed: the open updates'
 * participants are looked at again (their process, their node). */
void agent_update_members_changed(agent *a);

/* What the head knows of an engine's weights: false when it has not heard
 * from it.  syncing: it does not hold the job's latest committed version. */
bool agent_update_engine_view(agent *a, const char *member, uint64_t *held, bool *syncing);

/* The gateway (agent_update_gate.c): the member `member` of job `job` asked
 * from process `pid` on this node; 0 when that process is the member or
 * its descendant, else -1 with why. */
int agent_update_gate_check(agent *a, const char *member, int pid, char *why, size_t whylen);

#endif
