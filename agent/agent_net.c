/* agent/agent_net: the gossip sockets.
 *
 * One UDP socket and one TCP listener on the same address (memberlist's
 * layout).  A stream message is a 4-byte big-endian length and the frame;
 * one message per connection: the sender connects, writes, closes; an answer
 * (push-pull reply, ack of a fallback ping) is a new connection back to the
 * sender's advertised address.  With a keyring, every datagram and every
 * stream payload is sealed (agent_crypto.h) and anything that does not open
 * is dropped and counted.  Nothing read from the network is trusted: lengths
 * are bounded, connections time out, at most CONN_MAX are open at once. */
#include "agent/agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sk_log.h"
#include "proto/wire_frame.h"

enum {
	CONN_MAX = 256,          /* memberlist allows 128 concurrent push-pulls */
	UDP_RECV_MAX = 65536,
	STREAM_MAX = WIRE_HDR_LEN + WIRE_STREAM_MAX + CRYPTO_OVERHEAD,
};
static const double CONN_TIMEOUT_S = 10.0; /* memberlist LAN TCPTimeout */
static const char AAD_UDP[] = "skein/gossip/udp/1";
static const char AAD_STREAM[] = "skein/gossip/stream/1";

struct agent_conn {
	agent *a;
	int fd;
	bool outgoing;
	ev_io w;
	ev_timer t;
	uint8_t *buf;
	size_t len, cap, off;   /* outgoing: bytes to write / written; incoming: read so far */
	mbr_addr peer;
	agent_conn *next;
};

static void to_sockaddr(const mbr_addr *a, struct sockaddr_storage *ss, socklen_t *sl)
{
	memset(ss, 0, sizeof *ss);
	if (a->len == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->ip, 4);
		*sl = sizeof *s;
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(a->port);
		memcpy(&s->sin6_addr, a->ip, 16);
		*sl = sizeof *s;
	}
}

static void from_sockaddr(const struct sockaddr_storage *ss, mbr_addr *a)
{
	memset(a, 0, sizeof *a);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
		a->len = 4;
		memcpy(a->ip, &s->sin_addr, 4);
		a->port = ntohs(s->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
		a->len = 16;
		memcpy(a->ip, &s->sin6_addr, 16);
		a->port = ntohs(s->sin6_port);
	}
}

/* Unseals (or passes through) one payload; returns the frame or NULL. */
static const uint8_t *unseal(agent *a, const char *aad, const uint8_t *in, size_t n,
			     uint8_t *scratch, size_t *outlen)
{
	if (a->kr.n == 0) {
		if (n > 0 && in[0] == CRYPTO_VERSION) {
			a->cnt.drop_plain++;
			return NULL;
		}
		*outlen = n;
		return in;
	}
	if (agent_open(&a->kr, aad, in, n, scratch, outlen) < 0) {
		a->cnt.drop_auth++;
		return NULL;
	}
	return scratch;
}

/* ---- UDP ---- */

static void udp_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent *a = w->data;
	static uint8_t buf[UDP_RECV_MAX], plain[UDP_RECV_MAX];
	(void)loop; (void)revents;
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		ssize_t n = recvfrom(a->udp_fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&ss, &sl);
		if (n < 0) break;
		a->cnt.udp_in++;
		a->cnt.bytes_in += (uint64_t)n;
		if (a->drop_in > 0 && sk_rng_unit(&a->rng) < a->drop_in) {
			a->cnt.drop_debug_in++;
			continue;
		}
		size_t flen;
		const uint8_t *frame = unseal(a, AAD_UDP, buf, (size_t)n, plain, &flen);
		if (!frame) continue;
		mbr_addr from;
		from_sockaddr(&ss, &from);
		mbr_recv(a->mbr, agent_now_ms(), &from, frame, flen, false);
	}
	agent_pump(a);
}

static void udp_send(agent *a, const mbr_out *o)
{
	static uint8_t sealed[UDP_RECV_MAX + CRYPTO_OVERHEAD];
	const uint8_t *data = o->data;
	size_t len = o->len;
	if (a->drop_out > 0 && sk_rng_unit(&a->rng) < a->drop_out) {
		a->cnt.drop_debug_out++;
		return;
	}
	if (a->kr.n) {
		if (len > UDP_RECV_MAX || agent_seal(&a->kr, AAD_UDP, data, len, sealed) < 0) {
			a->cnt.drop_send++;
			return;
		}
		data = sealed;
		len += CRYPTO_OVERHEAD;
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	to_sockaddr(&o->to, &ss, &sl);
	if (sendto(a->udp_fd, data, len, MSG_DONTWAIT, (struct sockaddr *)&ss, sl) < 0) {
		a->cnt.drop_send++;
		return;
	}
	a->cnt.udp_out++;
	a->cnt.bytes_out += len;
}

/* ---- TCP streams ---- */

static void conn_close(agent_conn *c)
{
	agent *a = c->a;
	ev_io_stop(a->loop, &c->w);
	ev_timer_stop(a->loop, &c->t);
	close(c->fd);
	for (agent_conn **p = &a->conns; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	a->nconns--;
	free(c->buf);
	free(c);
}

static void conn_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent_conn *c = t->data;
	(void)loop; (void)revents;
	c->a->cnt.tcp_timeouts++;
	conn_close(c);
}

static void conn_deliver(agent_conn *c)
{
	agent *a = c->a;
	const uint8_t *payload = c->buf + 4;
	size_t n = c->len - 4, flen;
	uint8_t *plain = a->kr.n ? malloc(n) : NULL;
	if (a->kr.n && !plain) return;
	const uint8_t *frame = unseal(a, AAD_STREAM, payload, n, plain, &flen);
	if (frame) {
		a->cnt.tcp_in++;
		mbr_recv(a->mbr, agent_now_ms(), &c->peer, frame, flen, true);
	}
	free(plain);
}

static void conn_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent_conn *c = w->data;
	agent *a = c->a;
	(void)loop; (void)revents;
	if (c->outgoing) {
		while (c->off < c->len) {
			ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK) return;
				a->cnt.tcp_refused++;
				conn_close(c);
				return;
			}
			c->off += (size_t)n;
		}
		a->cnt.tcp_out++;
		a->cnt.bytes_out += c->len;
		conn_close(c);
		return;
	}
	for (;;) {
		size_t want = c->len < 4 ? 4 - c->len : c->cap - c->len;
		ssize_t n = recv(c->fd, c->buf + c->len, want, 0);
		if (n == 0) { conn_close(c); return; } /* closed before a whole message */
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) return;
			conn_close(c);
			return;
		}
		c->len += (size_t)n;
		a->cnt.bytes_in += (uint64_t)n;
		if (c->len == 4 && c->cap == 4) {
			uint32_t L = (uint32_t)c->buf[0] << 24 | (uint32_t)c->buf[1] << 16 |
				     (uint32_t)c->buf[2] << 8 | c->buf[3];
			if (L == 0 || L > STREAM_MAX) {
				a->cnt.drop_oversize++;
				conn_close(c);
				return;
			}
			uint8_t *nb = realloc(c->buf, 4 + (size_t)L);
			if (!nb) { conn_close(c); return; }
			c->buf = nb;
			c->cap = 4 + (size_t)L;
		}
		if (c->cap > 4 && c->len == c->cap) {
			conn_deliver(c);
			conn_close(c);
			agent_pump(a);
			return;
		}
	}
}

static agent_conn *conn_new(agent *a, int fd, bool outgoing)
{
	agent_conn *c = calloc(1, sizeof *c);
	if (!c) return NULL;
	c->a = a;
	c->fd = fd;
	c->outgoing = outgoing;
	ev_io_init(&c->w, conn_io_cb, fd, outgoing ? EV_WRITE : EV_READ);
	c->w.data = c;
	ev_timer_init(&c->t, conn_timeout_cb, CONN_TIMEOUT_S, 0);
	c->t.data = c;
	ev_io_start(a->loop, &c->w);
	ev_timer_start(a->loop, &c->t);
	c->next = a->conns;
	a->conns = c;
	a->nconns++;
	return c;
}

static void tcp_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent *a = w->data;
	(void)loop; (void)revents;
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(a->tcp_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) return;
		if (a->nconns >= CONN_MAX) {
			a->cnt.drop_oversize++;
			close(fd);
			continue;
		}
		agent_conn *c = conn_new(a, fd, false);
		if (!c) { close(fd); continue; }
		c->buf = malloc(4);
		c->cap = 4;
		from_sockaddr(&ss, &c->peer);
	}
}

static void stream_send(agent *a, const mbr_out *o)
{
	if (a->nconns >= CONN_MAX) { a->cnt.drop_send++; return; }
	size_t plen = o->len + (a->kr.n ? CRYPTO_OVERHEAD : 0);
	uint8_t *buf = malloc(4 + plen);
	if (!buf) return;
	buf[0] = (uint8_t)(plen >> 24);
	buf[1] = (uint8_t)(plen >> 16);
	buf[2] = (uint8_t)(plen >> 8);
	buf[3] = (uint8_t)plen;
	if (a->kr.n) {
		if (agent_seal(&a->kr, AAD_STREAM, o->data, o->len, buf + 4) < 0) { free(buf); return; }
	} else {
		memcpy(buf + 4, o->data, o->len);
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	to_sockaddr(&o->to, &ss, &sl);
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) { free(buf); a->cnt.drop_send++; return; }
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		close(fd);
		free(buf);
		a->cnt.tcp_refused++;
		return;
	}
	agent_conn *c = conn_new(a, fd, true);
	if (!c) { close(fd); free(buf); return; }
	c->buf = buf;
	c->len = 4 + plen;
	c->peer = o->to;
}

void agent_net_send(agent *a, const mbr_out *o)
{
	if (o->stream) stream_send(a, o);
	else udp_send(a, o);
}

int agent_net_open(agent *a, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	char b[64];
	to_sockaddr(&a->bind, &ss, &sl);
	a->udp_fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	a->tcp_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (a->udp_fd < 0 || a->tcp_fd < 0) {
		snprintf(err, errlen, "cannot create sockets: %m");
		return -1;
	}
	int one = 1, rcv = 4 << 20;
	setsockopt(a->tcp_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(a->udp_fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	if (bind(a->udp_fd, (struct sockaddr *)&ss, sl) < 0 || bind(a->tcp_fd, (struct sockaddr *)&ss, sl) < 0) {
		snprintf(err, errlen, "cannot bind %s: %m", mbr_addr_format(&a->bind, b, sizeof b));
		return -1;
	}
	if (listen(a->tcp_fd, 128) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %m", mbr_addr_format(&a->bind, b, sizeof b));
		return -1;
	}
	ev_io_init(&a->udp_w, udp_cb, a->udp_fd, EV_READ);
	a->udp_w.data = a;
	ev_io_start(a->loop, &a->udp_w);
	ev_io_init(&a->tcp_w, tcp_accept_cb, a->tcp_fd, EV_READ);
	a->tcp_w.data = a;
	ev_io_start(a->loop, &a->tcp_w);
	return 0;
}

void agent_net_close(agent *a)
{
	while (a->conns) conn_close(a->conns);
	if (a->udp_fd >= 0) { ev_io_stop(a->loop, &a->udp_w); close(a->udp_fd); a->udp_fd = -1; }
	if (a->tcp_fd >= 0) { ev_io_stop(a->loop, &a->tcp_w); close(a->tcp_fd); a->tcp_fd = -1; }
}
