/* agent/agent_rpc: one request and its response over the control channel
 * (ZeroMQ DEALER to the agent's ROUTER), sealed with the keyring when one is
 * given.  Used by skeinctl, and by skeinctl's cluster-wide commands to reach
 * every agent in parallel. */
#ifndef AGENT_RPC_H
#define AGENT_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent_crypto.h"

extern const char AGENT_RPC_AAD_REQ[];
extern const char AGENT_RPC_AAD_RESP[];

typedef struct {
	const char *endpoint;      /* IP:PORT */
	const char *cmd;
	const char *const *args;
	int nargs;
	const char *format;        /* "text" | "json" */
	bool local_only;
	const uint8_t *payload;    /* optional bytes (a packed JobSpec for "job submit") */
	size_t payload_len;
	/* results */
	int code;                  /* the agent's answer (0 ok, 1 error, 2 usage) */
	char *body;                /* malloc'd; NULL when none */
	char error[512];           /* the agent's error, or why no answer came */
	bool answered;
} agent_rpc;

/* Runs every call in parallel, waiting at most timeout_ms for all of them.
 * kr may be NULL (plaintext).  Returns how many got an answer. */
int agent_rpc_run(agent_rpc *calls, int n, const agent_keyring *kr, int timeout_ms);
void agent_rpc_free(agent_rpc *calls, int n);
/* Reads one whole multipart message from a DEALER socket and keeps its last
 * non-empty part (the payload after the empty delimiter) in a malloc'd
 * *data.  -1 when nothing could be read (with ZMQ_DONTWAIT: nothing there). */
int agent_zmq_recv_payload(void *sock, int flags, uint8_t **data, size_t *len);

#endif
