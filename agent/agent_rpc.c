/* agent/agent_rpc: see agent_rpc.h. */
#include "agent/agent_rpc.h"
#include "common/sk_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent_wire.h"
#include "proto/control.pb-c.h"

const char AGENT_RPC_AAD_REQ[] = "skein/control/request/1";
const char AGENT_RPC_AAD_RESP[] = "skein/control/response/1";
const char AGENT_RPC_AAD_OP_REQ[] = "skein/control/operator-request/1";
const char AGENT_RPC_AAD_OP_RESP[] = "skein/control/operator-response/1";

static bool sealing(const agent_rpc_cred *cred)
{
	return cred && cred->kr && cred->kr->n > 0;
}

uint8_t *agent_req_pack(Skein__Control__Request *q, const agent_rpc_cred *cred, const char *recipient,
			uint8_t nonce[AUTH_NONCE], size_t *len)
{
	if (getrandom(nonce, AUTH_NONCE, 0) != AUTH_NONCE) return NULL;
	q->sender = (char *)(cred && cred->sender ? cred->sender : "");
	q->recipient = (char *)(recipient ? recipient : "");
	q->time_ms = sk_wall_ms();
	q->nonce.data = nonce;
	q->nonce.len = AUTH_NONCE;
	size_t n = skein__control__request__get_packed_size(q);
	uint8_t *buf = malloc(n + CRYPTO_OVERHEAD);
	if (!buf) return NULL;
	skein__control__request__pack(q, buf);
	*len = n;
	if (sealing(cred) &&
	    agent_seal_replace(&cred->kr->keys[0], cred->operator_key ? AGENT_RPC_AAD_OP_REQ : AGENT_RPC_AAD_REQ, &buf,
			       len) < 0)
		return NULL;
	return buf;
}

Skein__Control__Response *agent_resp_open(const uint8_t *data, size_t n, const agent_rpc_cred *cred,
					  const uint8_t nonce[AUTH_NONCE], char *why, size_t cap)
{
	uint8_t *plain = NULL;
	const uint8_t *msg = data;
	size_t mlen = n;
	bool sealed = n > 0 && data[0] == CRYPTO_VERSION;
	if (sealed) {
		if (!sealing(cred)) {
			snprintf(why, cap, "the agent answered encrypted: it has a key; give the cluster key "
					   "(SKEIN_KEY_FILE) or an operator key (SKEIN_OPERATOR_KEY_FILE)");
			return NULL;
		}
		plain = malloc(n);
		if (!plain || agent_open(cred->kr, cred->operator_key ? AGENT_RPC_AAD_OP_RESP : AGENT_RPC_AAD_RESP, data,
					 n, plain, &mlen) < 0) {
			snprintf(why, cap, "the agent's answer did not authenticate with our key");
			free(plain);
			return NULL;
		}
		msg = plain;
	}
	Skein__Control__Response *r = skein__control__response__unpack(NULL, mlen, msg);
	free(plain);
	if (!r) {
		snprintf(why, cap, "the agent's answer is not a control response");
		return NULL;
	}
	if (sealed && (r->nonce.len != AUTH_NONCE || memcmp(r->nonce.data, nonce, AUTH_NONCE))) {
		snprintf(why, cap, "the agent's answer belongs to another request (a replayed answer?)");
		skein__control__response__free_unpacked(r, NULL);
		return NULL;
	}
	return r;
}

/* ---- the client: every call a non-blocking socket, all polled together ---- */


typedef struct {
	int fd;
	bool connecting;
	uint8_t *out;
	size_t olen, ooff;
	uint8_t hdr[4];
	size_t hgot;
	uint8_t *in;
	size_t want, got;
	uint8_t nonce[AUTH_NONCE];
} call_io;

static int dial(const char *endpoint, char *err, size_t errlen)
{
	int fd = -1, rc;
	if (!strncmp(endpoint, "unix:", 5)) {
		struct sockaddr_un su = { .sun_family = AF_UNIX };
		if (strlen(endpoint + 5) >= sizeof su.sun_path) {
			snprintf(err, errlen, "control socket path too long: %s", endpoint + 5);
			return -1;
		}
		snprintf(su.sun_path, sizeof su.sun_path, "%s", endpoint + 5);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&su, sizeof su);
	} else {
		char host[256];
		const char *colon = strrchr(endpoint, ':');
		if (!colon || colon == endpoint || (size_t)(colon - endpoint) >= sizeof host) {
			snprintf(err, errlen, "bad control address '%s': expected IP:PORT or unix:PATH", endpoint);
			return -1;
		}
		memcpy(host, endpoint, (size_t)(colon - endpoint));
		host[colon - endpoint] = 0;
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			memmove(host, host + 1, strlen(host));
			host[strlen(host) - 1] = 0;
		}
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
		int g = getaddrinfo(host, colon + 1, &hints, &ai);
		if (g != 0 || !ai) {
			snprintf(err, errlen, "bad control address '%s': %s", endpoint, gai_strerror(g));
			return -1;
		}
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (fd >= 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		}
		freeaddrinfo(ai);
	}
	if (fd < 0 || (rc < 0 && errno != EINPROGRESS && errno != EAGAIN)) {
		snprintf(err, errlen, "cannot reach %s: %s%s", endpoint, strerror(errno),
			 errno == ENOENT || errno == ECONNREFUSED ? " (is skeind running there?)" :
			 errno == EACCES ? " (the control socket is for root and --operator-group)" : "");
		if (fd >= 0) close(fd);
		return -1;
	}
	return fd;
}

static void call_done(call_io *io)
{
	if (io->fd >= 0) close(io->fd);
	io->fd = -1;
	free(io->out);
	free(io->in);
	io->out = io->in = NULL;
}

/* One step of a call's I/O; true when it is over (answered or failed). */
static int build_frame(agent_rpc *c, call_io *io, const agent_rpc_cred *cred);

static bool call_step(agent_rpc *c, call_io *io, const agent_rpc_cred *cred, short revents)
{
	if (revents & (POLLERR | POLLNVAL) && io->connecting) {
		int e = 0;
		socklen_t sl = sizeof e;
		getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &e, &sl);
		snprintf(c->error, sizeof c->error, "cannot reach %s: %s", c->endpoint, strerror(e ? e : ECONNREFUSED));
		return true;
	}
	if (io->connecting && (revents & POLLOUT)) {
		io->connecting = false;
		if (build_frame(c, io, cred) < 0) return true;
	}
	while (!io->connecting && io->ooff < io->olen) {
		ssize_t n = send(io->fd, io->out + io->ooff, io->olen - io->ooff, MSG_NOSIGNAL);
		if (n > 0) { io->ooff += (size_t)n; continue; }
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
		snprintf(c->error, sizeof c->error, "%s closed the connection while we sent (%s)", c->endpoint,
			 strerror(errno));
		return true;
	}
	if (io->connecting || !(revents & (POLLIN | POLLHUP))) return false;
	for (;;) {
		ssize_t n;
		if (io->hgot < 4) {
			n = recv(io->fd, io->hdr + io->hgot, 4 - io->hgot, 0);
			if (n > 0 && (io->hgot += (size_t)n) == 4) {
				uint32_t be;
				memcpy(&be, io->hdr, 4);
				io->want = ntohl(be);
				io->in = io->want && io->want <= WIRE_ANSWER_MAX ? malloc(io->want) : NULL;
				if (!io->in) {
					snprintf(c->error, sizeof c->error, "the answer from %s is empty or over %d MiB",
						 c->endpoint, WIRE_ANSWER_MAX >> 20);
					return true;
				}
			}
		} else {
			n = recv(io->fd, io->in + io->got, io->want - io->got, 0);
			if (n > 0 && (io->got += (size_t)n) == io->want) {
				char why[256];
				Skein__Control__Response *r = agent_resp_open(io->in, io->got, cred, io->nonce, why, sizeof why);
				if (!r) {
					snprintf(c->error, sizeof c->error, "%s", why);
					return true;
				}
				c->answered = true;
				c->code = r->code;
				snprintf(c->error, sizeof c->error, "%s", r->error);
				c->body = strdup(r->body);
				skein__control__response__free_unpacked(r, NULL);
				return true;
			}
		}
		if (n > 0) continue;
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
		snprintf(c->error, sizeof c->error, "%s closed the connection without an answer%s", c->endpoint,
			 io->hgot == 0 && io->got == 0 ? " (refused: too many connections, or not a skein agent?)" : "");
		return true;
	}
}

/* The recipient a request names: the agent's name when the caller knows it,
 * else the address this connection reached, as the agent formats its end
 * (agent_wire.c): "IP:PORT" or "[IPv6]:PORT"; a Unix socket's path. */
static void recipient_of(const agent_rpc *c, const agent_rpc_cred *cred, int fd, char *out, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char ip[INET6_ADDRSTRLEN];
	const char *named = c->recipient ? c->recipient : cred && cred->recipient ? cred->recipient : NULL;
	snprintf(out, cap, "%s", named ? named : c->endpoint);
	if (named || !strncmp(c->endpoint, "unix:", 5) || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
		return;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
		snprintf(out, cap, "%s:%u", ip, ntohs(s4->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
		snprintf(out, cap, "[%s]:%u", ip, ntohs(s6->sin6_port));
	}
}

/* Builds the call's frame once its connection is up (the recipient is the
 * address it reached); -1 with c->error set. */
static int build_frame(agent_rpc *c, call_io *io, const agent_rpc_cred *cred)
{
	Skein__Control__Request req = SKEIN__CONTROL__REQUEST__INIT;
	req.cmd = (char *)c->cmd;
	req.args = (char **)c->args;
	req.n_args = (size_t)c->nargs;
	req.format = (char *)(c->format ? c->format : "text");
	req.local_only = c->local_only;
	req.payload.data = (uint8_t *)c->payload;
	req.payload.len = c->payload_len;
	char to[300];
	recipient_of(c, cred, io->fd, to, sizeof to);
	size_t plen;
	uint8_t *buf = agent_req_pack(&req, cred, to, io->nonce, &plen);
	if (!buf || plen > WIRE_FRAME_MAX || !(io->out = malloc(plen + 4))) {
		snprintf(c->error, sizeof c->error, buf ? "request too large" : "cannot build the request");
		free(buf);
		return -1;
	}
	uint32_t be = htonl((uint32_t)plen);
	memcpy(io->out, &be, 4);
	memcpy(io->out + 4, buf, plen);
	io->olen = plen + 4;
	free(buf);
	return 0;
}

int agent_rpc_run(agent_rpc *calls, int n, const agent_rpc_cred *cred, int timeout_ms)
{
	call_io *io = calloc((size_t)n, sizeof *io);
	struct pollfd *pf = calloc((size_t)n, sizeof *pf);
	int answered = 0, pending = 0;
	for (int i = 0; i < n; i++) {
		agent_rpc *c = &calls[i];
		c->answered = false;
		c->body = NULL;
		c->code = 1;
		c->error[0] = 0;
		if (!io || !pf) { snprintf(c->error, sizeof c->error, "out of memory"); continue; }
		io[i].fd = dial(c->endpoint, c->error, sizeof c->error);
		if (io[i].fd < 0) continue;
		io[i].connecting = true;
		snprintf(c->error, sizeof c->error, "no answer from %s within %d ms (is skeind running there?)",
			 c->endpoint, timeout_ms);
		pending++;
	}
	long long deadline = (long long)sk_mono_ms() + timeout_ms;
	while (pending > 0) {
		long long left = deadline - (long long)sk_mono_ms();
		if (left <= 0) break;
		for (int i = 0; i < n; i++) {
			pf[i].fd = io[i].fd;
			pf[i].events = io[i].fd < 0 ? 0 : io[i].connecting || io[i].ooff < io[i].olen ? POLLOUT : POLLIN;
			pf[i].revents = 0;
		}
		if (poll(pf, (nfds_t)n, (int)left) < 0 && errno != EINTR) break;
		for (int i = 0; i < n; i++) {
			if (io[i].fd < 0 || !pf[i].revents) continue;
			if (!call_step(&calls[i], &io[i], cred, pf[i].revents)) continue;
			if (calls[i].answered) answered++;
			call_done(&io[i]);
			pending--;
		}
	}
	for (int i = 0; io && i < n; i++) call_done(&io[i]);
	free(io);
	free(pf);
	return answered;
}

void agent_rpc_free(agent_rpc *calls, int n)
{
	for (int i = 0; i < n; i++) {
		free(calls[i].body);
		calls[i].body = NULL;
	}
}
