/* tests/tools/skein_flood: floods a TCP endpoint of skeind for the flood
 * tests (tests/agent/flood_test.sh).
 *
 *   idle   HOST:PORT N         N connections held open, sending nothing
 *   claim  HOST:PORT N BYTES   each sends a length header claiming BYTES,
 *                              then junk slowly (--rate bytes/s each)
 *   stream HOST:PORT N BYTES   each sends a header claiming BYTES and BYTES
 *                              of junk as fast as the peer takes it
 *
 * Both protocols frame a message as a 4-byte big-endian length and the
 * bytes (gossip streams: agent_net.c; the control transport: the same);
 * gossip junk starts as a sealed blob does (a version byte of 1), so a keyed
 * agent must buffer it to find out it is junk.
 *
 * One thread and one epoll loop.  It always stops by itself: after
 * --hold-ms (at most 120 s), or without --reopen once every message is
 * sent; --reopen opens a slot again (--reopen-ms after the peer closed
 * it, 200 times a slot at most).  Then it prints one line of what it did. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MODE_IDLE, MODE_CLAIM, MODE_STREAM };
enum { N_MAX = 100000, HOLD_MAX_MS = 120000, CHUNK = 64 << 10, REOPENS_PER_SLOT = 200 };

typedef struct {
	int fd;              /* -1: free slot */
	bool connected;
	uint64_t sent;       /* header included */
	double since;        /* connected at (s) */
	double reopen_at;    /* --reopen: when to open this slot again (0: not) */
} conn;

static struct {
	int mode;
	bool control;
	struct sockaddr_storage to, src;
	socklen_t tolen, srclen;
	bool has_src, reopen;
	long n, srcs;
	uint64_t bytes, rate;
	double reopen_after;
	long hold_ms;
	conn *c;
	int ep;
	/* what happened */
	long opened, failed, peer_closed, reopened, completed, peak, now_connected;
	uint64_t total_sent;
} F;

static uint8_t junk[CHUNK];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: skein_flood idle HOST:PORT N [options]\n"
		"       skein_flood claim HOST:PORT N BYTES [options]\n"
		"       skein_flood stream HOST:PORT N BYTES [options]\n"
		"  idle     N connections held open, sending nothing\n"
		"  claim    each sends a 4-byte big-endian length claiming BYTES, then junk at --rate\n"
		"  stream   each sends the length and BYTES of junk as fast as the peer takes it\n"
		"options:\n"
		"  --proto gossip|control  what the junk looks like (default gossip: a sealed blob)\n"
		"  --hold-ms T             stop after T ms (default 5000, at most %d)\n"
		"  --rate B                claim: bytes per second per connection (default 1024)\n"
		"  --reopen                open again a connection the peer closed, until --hold-ms\n"
		"                          (200 times a connection at most)\n"
		"  --reopen-ms T           ... T ms after it was closed (default 50)\n"
		"  --src IP                source address of the connections\n"
		"  --srcs K                spread them over K addresses from --src up (default 1)\n"
		"BYTES takes a K, M or G suffix (KiB, MiB, GiB); at most 4G-1.  HOST is an IPv4 address.\n",
		HOLD_MAX_MS);
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-') return -1;
	if (*end == 'K') { v <<= 10; end++; }
	else if (*end == 'M') { v <<= 20; end++; }
	else if (*end == 'G') { v <<= 30; end++; }
	if (*end || v > UINT32_MAX) return -1;
	*out = v;
	return 0;
}

static int parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *sl, bool port)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof *ss);
	in->sin_family = AF_INET;
	*sl = sizeof *in;
	if (!port) return inet_pton(AF_INET, s, &in->sin_addr) == 1 ? 0 : -1;
	if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || p < 1 || p > 65535) return -1;
	in->sin_port = htons((uint16_t)p);
	return inet_pton(AF_INET, host, &in->sin_addr) == 1 ? 0 : -1;
}

static void conn_open(long i)
{
	conn *c = &F.c[i];
	memset(c, 0, sizeof *c);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) { F.failed++; return; }
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct sockaddr_in src = *(struct sockaddr_in *)&F.src;
	src.sin_addr.s_addr = htonl(ntohl(src.sin_addr.s_addr) + (uint32_t)(i % F.srcs));
	if ((F.has_src && bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0) ||
	    (connect(c->fd, (struct sockaddr *)&F.to, F.tolen) < 0 && errno != EINPROGRESS)) {
		close(c->fd);
		c->fd = -1;
		F.failed++;
		return;
	}
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u64 = (uint64_t)i };
	epoll_ctl(F.ep, EPOLL_CTL_ADD, c->fd, &ev);
	F.opened++;
}

static void conn_close(long i, bool by_peer, double now)
{
	conn *c = &F.c[i];
	if (c->fd < 0) return;
	close(c->fd);
	c->fd = -1;
	if (c->connected) F.now_connected--;
	if (!by_peer) return;
	F.peer_closed++;
	if (F.reopen && F.reopened < REOPENS_PER_SLOT * F.n) c->reopen_at = now + F.reopen_after;
}

static uint64_t total_len(void) { return 4 + F.bytes; }

/* Sends what this connection may send by now; true when it has sent all. */
static bool conn_send(long i, double now)
{
	conn *c = &F.c[i];
	if (F.mode == MODE_IDLE) return false;
	uint64_t limit = total_len();
	if (F.mode == MODE_CLAIM) {
		uint64_t allowed = 4 + (uint64_t)((now - c->since) * (double)F.rate);
		if (allowed < limit) limit = allowed;
	}
	while (c->sent < limit) {
		uint8_t hdr[4];
		const uint8_t *p;
		size_t n;
		if (c->sent < 4) {
			hdr[0] = (uint8_t)(F.bytes >> 24);
			hdr[1] = (uint8_t)(F.bytes >> 16);
			hdr[2] = (uint8_t)(F.bytes >> 8);
			hdr[3] = (uint8_t)F.bytes;
			p = hdr + c->sent;
			n = 4 - c->sent;
		} else {
			p = junk;
			n = limit - c->sent < CHUNK ? (size_t)(limit - c->sent) : CHUNK;
		}
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
			conn_close(i, true, now);
			return false;
		}
		c->sent += (uint64_t)w;
		F.total_sent += (uint64_t)w;
	}
	return c->sent == total_len();
}

static void on_event(long i, uint32_t ev, double now)
{
	conn *c = &F.c[i];
	if (c->fd < 0) return;
	if (!c->connected && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		int err = 0;
		socklen_t el = sizeof err;
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
		if (err || (ev & EPOLLERR)) {
			close(c->fd);
			c->fd = -1;
			F.failed++;
			return;
		}
		c->connected = true;
		c->since = now;
		if (++F.now_connected > F.peak) F.peak = F.now_connected;
		/* from now on only the peer closing matters, and writes for stream mode */
		struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP | (F.mode == MODE_STREAM ? EPOLLOUT : 0),
					 .data.u64 = (uint64_t)i };
		epoll_ctl(F.ep, EPOLL_CTL_MOD, c->fd, &e);
	}
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		uint8_t b[512];
		ssize_t r = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			if (c->sent == total_len() && F.mode != MODE_IDLE) F.completed++;
			conn_close(i, true, now);
			return;
		}
	}
	if (F.mode == MODE_STREAM && conn_send(i, now)) {
		/* all sent: wait for the peer to close, no more EPOLLOUT */
		struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)i };
		epoll_ctl(F.ep, EPOLL_CTL_MOD, c->fd, &e);
	}
}

static bool all_sent(void)
{
	if (F.mode == MODE_IDLE || F.reopen) return false;
	for (long i = 0; i < F.n; i++)
		if (F.c[i].fd >= 0 && F.c[i].sent < total_len()) return false;
	return true;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { usage(stdout); return 0; }
	if (argc < 4) { usage(stderr); return 2; }
	if (!strcmp(argv[1], "idle")) F.mode = MODE_IDLE;
	else if (!strcmp(argv[1], "claim")) F.mode = MODE_CLAIM;
	else if (!strcmp(argv[1], "stream")) F.mode = MODE_STREAM;
	else { fprintf(stderr, "skein_flood: unknown mode '%s' (idle, claim or stream)\n", argv[1]); return 2; }
	if (parse_addr(argv[2], &F.to, &F.tolen, true) < 0) {
		fprintf(stderr, "skein_flood: expected IPv4:PORT, got '%s'\n", argv[2]);
		return 2;
	}
	char *end;
	F.n = strtol(argv[3], &end, 10);
	if (*end || F.n < 1 || F.n > N_MAX) {
		fprintf(stderr, "skein_flood: N: expected 1 to %d, got '%s'\n", N_MAX, argv[3]);
		return 2;
	}
	int ai = 4;
	if (F.mode != MODE_IDLE) {
		if (argc < 5 || parse_size(argv[4], &F.bytes) < 0 || F.bytes == 0) {
			fprintf(stderr, "skein_flood: BYTES: expected 1 to 4G-1 (K, M, G suffixes), got '%s'\n",
				argc < 5 ? "" : argv[4]);
			return 2;
		}
		ai = 5;
	}
	F.hold_ms = 5000;
	F.srcs = 1;
	F.reopen_after = 0.05;
	F.rate = 1024;
	for (; ai < argc; ai++) {
		const char *o = argv[ai], *v = ai + 1 < argc ? argv[ai + 1] : NULL;
		if (!strcmp(o, "--reopen")) { F.reopen = true; continue; }
		if (!v) { fprintf(stderr, "skein_flood: %s needs a value\n", o); return 2; }
		ai++;
		if (!strcmp(o, "--hold-ms")) {
			F.hold_ms = strtol(v, &end, 10);
			if (*end || F.hold_ms < 1 || F.hold_ms > HOLD_MAX_MS) {
				fprintf(stderr, "skein_flood: --hold-ms: expected 1 to %d, got '%s'\n", HOLD_MAX_MS, v);
				return 2;
			}
		} else if (!strcmp(o, "--rate")) {
			if (parse_size(v, &F.rate) < 0 || !F.rate) {
				fprintf(stderr, "skein_flood: --rate: expected bytes per second, got '%s'\n", v);
				return 2;
			}
		} else if (!strcmp(o, "--proto")) {
			if (strcmp(v, "gossip") && strcmp(v, "control")) {
				fprintf(stderr, "skein_flood: --proto: expected gossip or control, got '%s'\n", v);
				return 2;
			}
			F.control = !strcmp(v, "control");
		} else if (!strcmp(o, "--reopen-ms")) {
			long ms = strtol(v, &end, 10);
			if (*end || ms < 1 || ms > HOLD_MAX_MS) {
				fprintf(stderr, "skein_flood: --reopen-ms: expected 1 to %d, got '%s'\n", HOLD_MAX_MS, v);
				return 2;
			}
			F.reopen_after = (double)ms / 1000.0;
		} else if (!strcmp(o, "--srcs")) {
			F.srcs = strtol(v, &end, 10);
			if (*end || F.srcs < 1 || F.srcs > 65536) {
				fprintf(stderr, "skein_flood: --srcs: expected 1 to 65536, got '%s'\n", v);
				return 2;
			}
		} else if (!strcmp(o, "--src")) {
			if (parse_addr(v, &F.src, &F.srclen, false) < 0) {
				fprintf(stderr, "skein_flood: --src: expected an IPv4 address, got '%s'\n", v);
				return 2;
			}
			F.has_src = true;
		} else {
			fprintf(stderr, "skein_flood: unknown option '%s'\n", o);
			return 2;
		}
	}

	if (F.srcs > 1 && !F.has_src) {
		fprintf(stderr, "skein_flood: --srcs needs --src\n");
		return 2;
	}
	/* N connections need N fds: the soft limit up to the hard one */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)F.n + 16 > rl.rlim_cur)
		fprintf(stderr, "skein_flood: warning: %ld connections but %llu file descriptors\n", F.n,
			(unsigned long long)rl.rlim_cur);
	/* junk: random bytes; gossip's starts as a sealed blob (version 1) */
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < sizeof junk; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		junk[i] = (uint8_t)x;
	}
	junk[0] = F.control ? 0x0a : 0x01;

	F.ep = epoll_create1(EPOLL_CLOEXEC);
	F.c = calloc((size_t)F.n, sizeof *F.c);
	if (F.ep < 0 || !F.c) { fprintf(stderr, "skein_flood: out of memory or fds\n"); return 1; }
	double t0 = now_s(), stop = t0 + (double)F.hold_ms / 1000.0;
	for (long i = 0; i < F.n; i++) conn_open(i);
	struct epoll_event evs[256];
	for (;;) {
		double now = now_s();
		if (now >= stop || all_sent()) break;
		int ms = (int)((stop - now) * 1000) + 1;
		if (ms > 20) ms = 20;
		int k = epoll_wait(F.ep, evs, 256, ms);
		now = now_s();
		for (int j = 0; j < k; j++) on_event((long)evs[j].data.u64, evs[j].events, now);
		for (long i = 0; i < F.n; i++) {
			conn *c = &F.c[i];
			if (c->fd >= 0 && c->connected && F.mode == MODE_CLAIM) conn_send(i, now);
			if (c->fd < 0 && c->reopen_at > 0 && now >= c->reopen_at) {
				F.reopened++;
				conn_open(i);
			}
		}
	}
	/* stream mode: give the peer a moment to take the last bytes and close */
	if (F.mode == MODE_STREAM) {
		double end2 = now_s() + 1.0;
		if (end2 > stop) end2 = stop;
		while (now_s() < end2) {
			bool open = false;
			for (long i = 0; i < F.n; i++) open |= F.c[i].fd >= 0;
			if (!open) break;
			int k = epoll_wait(F.ep, evs, 256, 20);
			for (int j = 0; j < k; j++) on_event((long)evs[j].data.u64, evs[j].events, now_s());
		}
	}
	long still = 0;
	for (long i = 0; i < F.n; i++) {
		if (F.c[i].fd >= 0) still += F.c[i].connected;
		if (F.c[i].fd >= 0) close(F.c[i].fd);
	}
	static const char *modes[] = { "idle", "claim", "stream" };
	printf("skein_flood %s %s (%s): %ld connections, %ld opened (%ld reopened), %ld failed, "
	       "peak %ld connected, %ld closed by the peer, %ld still open at the end, %ld whole messages sent, "
	       "%.1f MB sent, %.0f ms\n",
	       modes[F.mode], argv[2], F.control ? "control" : "gossip", F.n, F.opened, F.reopened, F.failed,
	       F.peak, F.peer_closed, still, F.completed, (double)F.total_sent / 1e6, (now_s() - t0) * 1000);
	free(F.c);
	close(F.ep);
	return 0;
}
