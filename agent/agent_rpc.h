/* agent/agent_rpc: one request and its answer over the control channel
 * (frames over TCP or a Unix socket, agent/agent_wire.h), sealed when a key
 * is given.  Used by skeinctl, and by its cluster-wide commands to reach
 * every agent in parallel; agent_req_pack and agent_resp_open are also what
 * agents use between themselves. */
#ifndef AGENT_RPC_H
#define AGENT_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent_auth.h"
#include "agent/agent_crypto.h"

/* Associated data of a sealed request and answer: the cluster key's and an
 * operator key's differ, so neither can pass for the other. */
extern const char AGENT_RPC_AAD_REQ[];
extern const char AGENT_RPC_AAD_RESP[];
extern const char AGENT_RPC_AAD_OP_REQ[];
extern const char AGENT_RPC_AAD_OP_RESP[];

/* How a client seals: with the cluster keyring's primary key, an operator
 * key, or not at all (kr NULL or empty). */
typedef struct {
	const agent_keyring *kr;
	bool operator_key;
	const char *sender;        /* our agent name; "" for skeinctl */
	const char *recipient;     /* the agent's name for calls that name none (skeinctl
				    * --node); NULL: the address the connection reached */
} agent_rpc_cred;

typedef struct {
	const char *endpoint;      /* IP:PORT, HOST:PORT or unix:PATH */
	const char *recipient;     /* the agent's name when known; default: the endpoint */
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
 * Returns how many got an answer. */
int agent_rpc_run(agent_rpc *calls, int n, const agent_rpc_cred *cred, int timeout_ms);
void agent_rpc_free(agent_rpc *calls, int n);

struct Skein__Control__Request;
struct Skein__Control__Response;
/* Fills q's envelope (sender, recipient, wall-clock time, a fresh nonce,
 * copied to `nonce`), packs it and seals it as cred says.  malloc'd, *len
 * bytes; NULL on failure. */
uint8_t *agent_req_pack(struct Skein__Control__Request *q, const agent_rpc_cred *cred, const char *recipient,
			uint8_t nonce[AUTH_NONCE], size_t *len);
/* Opens (when sealed) and unpacks an answer; a sealed one must carry
 * `nonce`.  NULL with the reason in why. */
struct Skein__Control__Response *agent_resp_open(const uint8_t *data, size_t n, const agent_rpc_cred *cred,
						 const uint8_t nonce[AUTH_NONCE], char *why, size_t cap);

#endif
