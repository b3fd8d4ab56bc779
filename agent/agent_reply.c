/* agent/agent_reply: answering control requests, below every handler.
 *
 * A handler fills an agent_reply (agent_reply_fail for a refusal); the
 * dispatcher (agent_ctl.c) sends it at once, or the handler defers it and
 * a lower layer answers later with agent_ctl_send: the head once a write
 * commits (agent_head.c), the peer layer when a forwarded request's answer
 * comes back (agent_peer.c).  agent_ctl_cred is how this agent seals what
 * it sends to other agents.  Kept apart from agent_ctl.c so that those
 * layers call down to it, never up into the dispatcher; the names keep
 * their agent_ctl_ prefix, since every caller knows them by it. */
#include "agent/agent.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/agent_rpc.h"
#include "proto/control.pb-c.h"

void agent_reply_fail(agent_reply *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof r->error, fmt, ap);
	va_end(ap);
	r->code = code;
}

agent_rpc_cred agent_ctl_cred(agent *a)
{
	return (agent_rpc_cred){ .kr = &a->kr, .operator_key = false, .sender = a->opts.name };
}

void agent_ctl_send(agent *a, const agent_client *c, int code, const char *error, const char *body)
{
	agent_ctl_send_bin(a, c, code, error, body, NULL, 0);
}

void agent_ctl_send_bin(agent *a, const agent_client *c, int code, const char *error, const char *body,
			const uint8_t *payload, size_t plen)
{
	if (!c->conn || !a->wire) return;
	Skein__Control__Response resp = SKEIN__CONTROL__RESPONSE__INIT;
	resp.code = code;
	resp.error = (char *)(error ? error : "");
	resp.body = (char *)(body ? body : "");
	resp.payload.data = (uint8_t *)payload;
	resp.payload.len = payload ? plen : 0;
	if (c->has_nonce) {
		resp.nonce.data = (uint8_t *)c->nonce;
		resp.nonce.len = AUTH_NONCE;
	}
	size_t n = skein__control__response__get_packed_size(&resp);
	uint8_t *buf = malloc(n + CRYPTO_OVERHEAD);
	if (!buf) return;
	skein__control__response__pack(&resp, buf);
	size_t len = n;
	if (c->sealed &&
	    agent_seal_replace(&c->key, c->operator_key ? AGENT_RPC_AAD_OP_RESP : AGENT_RPC_AAD_RESP, &buf, &len) < 0)
		return;
	agent_wire_send(a->wire, c->conn, buf, len);
	free(buf);
}
