/* agent/agent_net: the gossip sockets.
 *
 * One UDP socket and one TCP listener on the same address (memberlist's
 * layout).  A stream message is a 4-byte big-endian length and the frame;
 * one message per connection: the sender connects, writes, closes; an answer
 * (push-pull reply, ack of a fallback ping) is a new connection back to the
 * sender's advertised address.  With a keyring, every datagram and every
 * stream payload is sealed (agent_crypto.h) and anything that does not open
 * is dropped and counted.  Nothing read from the network is trusted: a
 * datagram is read into a fixed buffer; the streams and their limits are in
 * agent_tcp.c. */
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

#include "common/sk_time.h"
#include "common/sk_log.h"
#include "proto/wire_frame.h"

enum { UDP_RECV_MAX = 65536 };
static const char AAD_UDP[] = "skein/gossip/udp/1";

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
		const uint8_t *frame = agent_net_unseal(a, AAD_UDP, buf, (size_t)n, plain, &flen);
		if (!frame) continue;
		mbr_addr from;
		agent_net_from_sockaddr(&ss, &from);
		mbr_recv(a->mbr, sk_mono_ms(), &from, frame, flen, false);
	}
	agent_defer(a, &a->pump_due); /* agent_pump.c sends the answers */
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
	if (agent_keyless_closed(a)) {
		a->cnt.drop_keyless++;
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
	agent_net_to_sockaddr(&o->to, &ss, &sl);
	if (sendto(a->udp_fd, data, len, MSG_DONTWAIT, (struct sockaddr *)&ss, sl) < 0) {
		a->cnt.drop_send++;
		return;
	}
	a->cnt.udp_out++;
	a->cnt.bytes_out += len;
}

void agent_net_send(agent *a, const mbr_out *o)
{
	if (o->stream) agent_tcp_send(a, o);
	else udp_send(a, o);
}

int agent_net_open(agent *a, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	char b[64];
	agent_net_to_sockaddr(&a->bind, &ss, &sl);
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
	return agent_tcp_open(a, err, errlen);
}

void agent_net_close(agent *a)
{
	agent_tcp_close(a);
	if (a->udp_fd >= 0) { ev_io_stop(a->loop, &a->udp_w); close(a->udp_fd); a->udp_fd = -1; }
}
