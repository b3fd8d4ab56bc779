/* agent/agent_rpc: see agent_rpc.h. */
#include "agent/agent_rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "proto/control.pb-c.h"

const char AGENT_RPC_AAD_REQ[] = "skein/control/request/1";
const char AGENT_RPC_AAD_RESP[] = "skein/control/response/1";

static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int agent_zmq_recv_payload(void *sock, int flags, uint8_t **data, size_t *len)
{
	zmq_msg_t part;
	int more = 1, got = 0;
	*data = NULL;
	*len = 0;
	while (more) {
		zmq_msg_init(&part);
		if (zmq_msg_recv(&part, sock, flags) < 0) {
			zmq_msg_close(&part);
			break;
		}
		got = 1;
		if (zmq_msg_size(&part) > 0) {
			free(*data);
			*len = zmq_msg_size(&part);
			*data = malloc(*len);
			if (*data) memcpy(*data, zmq_msg_data(&part), *len);
		}
		more = zmq_msg_more(&part);
		zmq_msg_close(&part);
	}
	return got ? 0 : -1;
}

static void parse_reply(agent_rpc *c, const agent_keyring *kr, const uint8_t *data, size_t n)
{
	uint8_t *plain = NULL;
	const uint8_t *msg = data;
	size_t mlen = n;
	bool sealed = n > 0 && data[0] == CRYPTO_VERSION;
	if (sealed) {
		if (!kr || kr->n == 0) {
			snprintf(c->error, sizeof c->error,
				 "the agent answered encrypted: it has a key; set SKEIN_KEY_FILE or pass --key-file");
			return;
		}
		plain = malloc(n);
		if (!plain || agent_open(kr, AGENT_RPC_AAD_RESP, data, n, plain, &mlen) < 0) {
			snprintf(c->error, sizeof c->error, "the agent's answer did not authenticate with our key");
			free(plain);
			return;
		}
		msg = plain;
	}
	Skein__Control__Response *r = skein__control__response__unpack(NULL, mlen, msg);
	free(plain);
	if (!r) {
		snprintf(c->error, sizeof c->error, "the agent's answer is not a control response");
		return;
	}
	c->answered = true;
	c->code = r->code;
	snprintf(c->error, sizeof c->error, "%s", r->error);
	c->body = strdup(r->body);
	skein__control__response__free_unpacked(r, NULL);
}

int agent_rpc_run(agent_rpc *calls, int n, const agent_keyring *kr, int timeout_ms)
{
	void *ctx = zmq_ctx_new();
	if (!ctx) {
		for (int i = 0; i < n; i++) snprintf(calls[i].error, sizeof calls[i].error, "zmq_ctx_new failed");
		return 0;
	}
	void **socks = calloc((size_t)n, sizeof *socks);
	zmq_pollitem_t *items = calloc((size_t)n, sizeof *items);
	int answered = 0, pending = 0;
	for (int i = 0; i < n && socks && items; i++) {
		agent_rpc *c = &calls[i];
		c->answered = false;
		c->body = NULL;
		c->code = 1;
		c->error[0] = 0;
		Skein__Control__Request req = SKEIN__CONTROL__REQUEST__INIT;
		req.cmd = (char *)c->cmd;
		req.args = (char **)c->args;
		req.n_args = (size_t)c->nargs;
		req.format = (char *)(c->format ? c->format : "text");
		req.local_only = c->local_only;
		req.payload.data = (uint8_t *)c->payload;
		req.payload.len = c->payload_len;
		size_t plen = skein__control__request__get_packed_size(&req);
		uint8_t *buf = malloc(plen + CRYPTO_OVERHEAD + 1);
		if (!buf) continue;
		skein__control__request__pack(&req, buf);
		size_t slen = plen;
		if (kr && kr->n && agent_seal_replace(&kr->keys[0], AGENT_RPC_AAD_REQ, &buf, &slen) < 0) continue;
		void *s = zmq_socket(ctx, ZMQ_DEALER);
		int zero = 0;
		zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
		char ep[300];
		snprintf(ep, sizeof ep, "tcp://%s", c->endpoint);
		if (zmq_connect(s, ep) != 0) {
			snprintf(c->error, sizeof c->error, "bad control address %s: %s", c->endpoint,
				 zmq_strerror(zmq_errno()));
			zmq_close(s);
			free(buf);
			continue;
		}
		zmq_send(s, "", 0, ZMQ_SNDMORE);
		zmq_send(s, buf, slen, 0);
		free(buf);
		socks[i] = s;
		items[i].socket = s;
		items[i].events = ZMQ_POLLIN;
		snprintf(c->error, sizeof c->error, "no answer from %s within %d ms (is skeind running there?)",
			 c->endpoint, timeout_ms);
		pending++;
	}
	long long deadline = now_ms() + timeout_ms;
	while (pending > 0) {
		long long left = deadline - now_ms();
		if (left <= 0) break;
		if (zmq_poll(items, n, (long)left) < 0) break;
		for (int i = 0; i < n; i++) {
			if (!socks[i] || !(items[i].revents & ZMQ_POLLIN)) continue;
			uint8_t *data = NULL;
			size_t dlen = 0;
			agent_zmq_recv_payload(socks[i], 0, &data, &dlen);
			if (data) parse_reply(&calls[i], kr, data, dlen);
			free(data);
			if (calls[i].answered) answered++;
			zmq_close(socks[i]);
			socks[i] = NULL;
			items[i].socket = NULL;
			items[i].events = 0;
			pending--;
		}
	}
	for (int i = 0; i < n && socks; i++)
		if (socks[i]) zmq_close(socks[i]);
	free(socks);
	free(items);
	zmq_ctx_term(ctx);
	return answered;
}

void agent_rpc_free(agent_rpc *calls, int n)
{
	for (int i = 0; i < n; i++) {
		free(calls[i].body);
		calls[i].body = NULL;
	}
}
