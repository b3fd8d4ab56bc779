/* agent/agent_head_int: what agent_head.c (the election wiring) gives
 * agent_head_cmd.c (the head's commands).  Not for other files. */
#ifndef AGENT_HEAD_INT_H
#define AGENT_HEAD_INT_H

#include "agent/agent.h"
#include "raft/raft_kv.h"

/* After every call into raft: sends what it produced, applies what
 * committed, logs its events, publishes the head, re-arms the timer. */
void agent_head_pump(agent *a);
/* A raft message from a peer voter (ignored on a non-voter). */
void agent_head_recv(agent *a, const uint8_t *data, size_t len);
/* The voter to hand the head to when none is named (NULL: raft picks). */
const char *agent_head_handover_target(agent *a, char *buf, size_t cap);
/* This agent's replica of the key-value map (NULL before the head opens). */
const raft_kv *agent_head_kv(agent *a);

#endif
