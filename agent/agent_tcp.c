/* agent/agent_tcp: the gossip TCP streams, bounded in memory, fds and time.
 *
 * The layout is agent_net.c's: one message per connection, a 4-byte
 * big-endian length and the (sealed) frame; the sender connects, writes,
 * closes.  A stream is authenticated only once it is whole, so everything a
 * stranger can make us hold before that is bounded here:
 *
 *  - size, by message type: a ping or an ack fits STREAM_SMALL_MAX; only a
 *    push-pull (the member list) may be larger, up to WIRE_STREAM_MAX.  A
 *    plaintext stream's type shows in its first bytes (mbr_peek_stream); a
 *    sealed one must start as a sealed blob does and is checked once opened.
 *  - memory: a buffer grows with the bytes that came, not with the length a
 *    header claims; all half-received streams share IN_BYTES_MAX, and over
 *    it the connection holding the most (the oldest of equals) is dropped.
 *  - connections: inbound (anyone) and outbound (ours: pings, push-pulls and
 *    their replies) have separate budgets, so a flood of one cannot stop the
 *    other; inbound also has a cap per source address.  Both are at most an
 *    eighth of RLIMIT_NOFILE each, leaving fds to the rest of the agent.
 *  - time: the first byte within FIRST_BYTE_S, no gap over IDLE_S, the whole
 *    stream within STREAM_S.  A real sender writes at once.
 *  - at a cap, the newcomer is let in and another connection shed: the one
 *    quiet longest (silent so far, or nothing for STALE_S), else the oldest.
 *    Idle connections of an attacker, even reopened as fast as they are
 *    shed, cannot keep a joining agent out: its stream arrives at once and
 *    is read at accept, and it is shed only after every older idle one.
 *    The per-source cap sheds among that source's connections only, so
 *    one address cannot push out the others.
 *  - out of fds (EMFILE/ENFILE) at accept: shed an inbound connection as
 *    at a cap, else give up the reserve fd to accept and close the pending
 *    connection (the listener would otherwise wake the loop forever); if
 *    the reserve cannot be had back, the listener rests ACCEPT_PAUSE_S.
 * Every drop is counted by reason (agent_counters, `skeinctl info`). */
#include "agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sk_time.h"
#include "common/sk_log.h"
#include "proto/wire_frame.h"

enum {
	/* A ping or an ack over TCP: a seq, two names of at most
	 * MBR_NAME_MAX bytes and an address, under 400 bytes framed and
	 * sealed.  Any type fits this size. */
	STREAM_SMALL_MAX = 4096,
	/* A push-pull: see WIRE_STREAM_MAX (8 MiB, 12,000 members). */
	STREAM_LARGE_MAX = WIRE_HDR_LEN + WIRE_STREAM_MAX + CRYPTO_OVERHEAD,
	/* memberlist allows 128 concurrent push-pulls.  An agent has a
	 * push-pull, its reply and a ping in flight to us at most, so 16 per
	 * address leaves room for a few agents behind one address (tests run
	 * dozens on 127.0.0.1: their streams are read at accept and seldom
	 * overlap). */
	IN_MAX = 128,
	IN_PER_SOURCE = 16,
	OUT_MAX = 128,
	/* Each budget holds two push-pulls of 10,000 members; with the rest of
	 * the agent (~10 MB) and one stream being decoded, a flooded agent
	 * stays well below 64 MB. */
	IN_BYTES_MAX = 16 << 20,
	OUT_BYTES_MAX = 16 << 20,
	GROW_MIN = 64 << 10,      /* first buffer of a large stream; doubles as bytes come */
	ACCEPT_BATCH = 64,        /* accepts per wake-up: the loop serves others in between */
	NOFILE_SHARE = 8,         /* each budget: at most 1/8 of the fd limit */
};
static const double FIRST_BYTE_S = 1.0;
static const double IDLE_S = 2.0;
static const double STREAM_S = 10.0;     /* memberlist's LAN TCPTimeout */
static const double STALE_S = 0.25;
static const double ACCEPT_PAUSE_S = 0.1;
static const double WARN_EVERY_S = 10.0;
static const char AAD_STREAM[] = "skein/gossip/stream/1";

typedef struct agent_conn agent_conn;

typedef struct {
	agent_conn *head, *tail;  /* in the order they were opened */
	int n, max;
	size_t bytes;             /* buffers held */
} conn_list;

struct agent_tcp {
	conn_list in, out;
	int reserve_fd;           /* /dev/null, given up to accept-and-close when out of fds */
	ev_timer pause;           /* the listener resting after it ran out of fds */
	double warned;            /* last "out of fds" warning */
	uint64_t warned_count;
};

struct agent_conn {
	agent *a;
	int fd;
	bool outgoing;
	bool typed;               /* inbound: its type is known to fit its size */
	ev_io w;
	ev_timer t;
	uint8_t hdr[4];
	uint8_t *buf;             /* inbound: the payload; outbound: length and payload */
	size_t len, cap, off;     /* outbound: bytes to write, allocated, written;
				   * inbound: payload read, allocated, header bytes read */
	size_t want;              /* inbound: the payload length the header claims */
	double opened, active;    /* ev_now at open, at the last byte moved */
	mbr_addr peer;
	agent_conn *prev, *next;
};

static conn_list *list_of(const agent_conn *c)
{
	return c->outgoing ? &c->a->tcp->out : &c->a->tcp->in;
}

static void conn_close(agent_conn *c)
{
	agent *a = c->a;
	conn_list *l = list_of(c);
	ev_io_stop(a->loop, &c->w);
	ev_timer_stop(a->loop, &c->t);
	close(c->fd);
	if (c->prev) c->prev->next = c->next;
	else l->head = c->next;
	if (c->next) c->next->prev = c->prev;
	else l->tail = c->prev;
	l->n--;
	l->bytes -= c->cap;
	free(c->buf);
	free(c);
}

static bool same_ip(const mbr_addr *x, const mbr_addr *y)
{
	return x->len == y->len && !memcmp(x->ip, y->ip, x->len);
}

/* The connection to shed for a newcomer (only those of `src` when given):
 * the one quiet longest, if any is silent so far (inbound) or has moved
 * nothing for STALE_S; else the oldest.  *idle says which. */
static agent_conn *victim(const conn_list *l, double now, const mbr_addr *src, bool *idle)
{
	agent_conn *quiet = NULL, *oldest = NULL;
	for (agent_conn *c = l->head; c; c = c->next) {
		if (src && !same_ip(&c->peer, src)) continue;
		if (!oldest) oldest = c;
		bool q = now - c->active >= STALE_S || (!c->outgoing && c->off == 0);
		if (q && (!quiet || c->active < quiet->active)) quiet = c;
	}
	*idle = quiet != NULL;
	return quiet ? quiet : oldest;
}

/* Sheds one inbound connection to make room (of `src` when given); false
 * when there is none. */
static bool in_shed(agent *a, const mbr_addr *src)
{
	bool idle;
	agent_conn *v = victim(&a->tcp->in, sk_mono_s(), src, &idle);
	if (!v) return false;
	(*(idle ? &a->cnt.tcp_in_shed_idle : &a->cnt.tcp_in_shed_busy))++;
	conn_close(v);
	return true;
}

/* ---- inbound ---- */

/* Gives the inbound stream `c` a buffer of `cap` bytes within the byte
 * budget; -1 when `c` itself had to go. */
static int in_resize(agent_conn *c, size_t cap)
{
	agent *a = c->a;
	conn_list *l = &a->tcp->in;
	while (l->bytes - c->cap + cap > IN_BYTES_MAX) {
		agent_conn *big = NULL;
		size_t most = 0;
		for (agent_conn *x = l->head; x; x = x->next) {
			size_t held = x == c ? cap : x->cap;
			if (held > most) { most = held; big = x; }
		}
		a->cnt.tcp_in_budget++;
		if (big == c || !big) { conn_close(c); return -1; }
		conn_close(big);
	}
	uint8_t *nb = realloc(c->buf, cap);
	if (!nb) { conn_close(c); return -1; }
	l->bytes += cap - c->cap;
	c->buf = nb;
	c->cap = cap;
	return 0;
}

/* The length header is in: check it against the largest type. */
static int in_header(agent_conn *c)
{
	uint32_t L = (uint32_t)c->hdr[0] << 24 | (uint32_t)c->hdr[1] << 16 | (uint32_t)c->hdr[2] << 8 | c->hdr[3];
	if (L == 0 || L > STREAM_LARGE_MAX) {
		c->a->cnt.drop_oversize++;
		conn_close(c);
		return -1;
	}
	c->want = L;
	c->typed = L <= STREAM_SMALL_MAX;
	return in_resize(c, c->typed ? L : GROW_MIN);
}

/* A stream over the small size must be a push-pull: decided from its first
 * bytes when plaintext; a sealed one must at least start as sealed blobs
 * do (its type is checked once opened). */
static int in_check_type(agent_conn *c)
{
	agent *a = c->a;
	if (agent_keyless_closed(a)) {
		a->cnt.drop_keyless++;
		conn_close(c);
		return -1;
	}
	if (a->kr.n) {
		if (c->buf[0] != CRYPTO_VERSION) {
			a->cnt.drop_auth++;
			conn_close(c);
			return -1;
		}
		c->typed = true;
		return 0;
	}
	if (c->buf[0] == CRYPTO_VERSION) {
		a->cnt.drop_plain++;
		conn_close(c);
		return -1;
	}
	mbr_peek p = mbr_peek_stream(c->buf, c->len);
	if (p == MBR_PEEK_MORE) return 0;
	if (p != MBR_PEEK_PUSHPULL) {
		a->cnt.drop_stream_type++;
		conn_close(c);
		return -1;
	}
	c->typed = true;
	return 0;
}

static void in_deliver(agent_conn *c)
{
	agent *a = c->a;
	uint8_t *plain = a->kr.n ? malloc(c->len) : NULL;
	if (a->kr.n && !plain) return;
	size_t flen;
	const uint8_t *frame = agent_net_unseal(a, AAD_STREAM, c->buf, c->len, plain, &flen);
	if (frame && c->want > STREAM_SMALL_MAX && mbr_peek_stream(frame, flen) != MBR_PEEK_PUSHPULL) {
		a->cnt.drop_stream_type++;
		frame = NULL;
	}
	if (frame) {
		if (plain) {
			/* the sealed copy is no longer needed while the frame is decoded */
			free(c->buf);
			c->buf = NULL;
			list_of(c)->bytes -= c->cap;
			c->cap = 0;
		}
		a->cnt.tcp_in++;
		mbr_recv(a->mbr, sk_mono_ms(), &c->peer, frame, flen, true);
	}
	free(plain);
}

/* Reads what has come; the connection is closed when whole or bad. */
static void in_read(agent_conn *c)
{
	agent *a = c->a;
	for (;;) {
		uint8_t *dst;
		size_t room;
		if (c->off < 4) {
			dst = c->hdr + c->off;
			room = 4 - c->off;
		} else {
			if (c->len == c->cap) {
				size_t cap = c->cap * 2 > GROW_MIN ? c->cap * 2 : GROW_MIN;
				if (in_resize(c, cap < c->want ? cap : c->want) < 0) return;
			}
			dst = c->buf + c->len;
			room = c->cap - c->len;
		}
		ssize_t n = recv(c->fd, dst, room, 0);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
		if (n <= 0) { conn_close(c); return; } /* closed or reset before a whole message */
		a->cnt.bytes_in += (uint64_t)n;
		c->active = sk_mono_s();
		if (c->off < 4) {
			c->off += (size_t)n;
			if (c->off == 4 && in_header(c) < 0) return;
			continue;
		}
		c->len += (size_t)n;
		if (!c->typed && in_check_type(c) < 0) return;
		if (c->len == c->want) {
			in_deliver(c);
			conn_close(c);
			agent_defer(a, &a->pump_due);
			return;
		}
	}
}

/* ---- outbound ---- */

static void out_write(agent_conn *c)
{
	agent *a = c->a;
	while (c->off < c->len) {
		ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR) continue;
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) return;
			a->cnt.tcp_refused++;
			conn_close(c);
			return;
		}
		c->off += (size_t)n;
		c->active = sk_mono_s();
	}
	a->cnt.tcp_out++;
	a->cnt.bytes_out += c->len;
	conn_close(c);
}

/* ---- connections ---- */

static void conn_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent_conn *c = w->data;
	(void)loop; (void)revents;
	if (c->outgoing) out_write(c);
	else in_read(c);
}

static void conn_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent_conn *c = t->data;
	agent *a = c->a;
	(void)revents;
	uint64_t *why = &a->cnt.tcp_timeouts;
	double due = c->opened + STREAM_S, now = sk_mono_s();
	if (!c->outgoing && c->off == 0) {
		due = c->opened + FIRST_BYTE_S;
		why = &a->cnt.tcp_in_first_byte_timeouts;
	} else if (!c->outgoing && c->active + IDLE_S < due) {
		due = c->active + IDLE_S;
		why = &a->cnt.tcp_in_idle_timeouts;
	}
	if (now + 1e-3 >= due) {
		(*why)++;
		conn_close(c);
		return;
	}
	ev_timer_set(t, due - now, 0);
	ev_timer_start(loop, t);
}

static agent_conn *conn_new(agent *a, int fd, bool outgoing, const mbr_addr *peer)
{
	agent_conn *c = calloc(1, sizeof *c);
	if (!c) return NULL;
	conn_list *l = outgoing ? &a->tcp->out : &a->tcp->in;
	c->a = a;
	c->fd = fd;
	c->outgoing = outgoing;
	c->peer = *peer;
	c->opened = c->active = sk_mono_s();
	ev_io_init(&c->w, conn_io_cb, fd, outgoing ? EV_WRITE : EV_READ);
	c->w.data = c;
	ev_timer_init(&c->t, conn_timer_cb, outgoing ? STREAM_S : FIRST_BYTE_S, 0);
	c->t.data = c;
	ev_io_start(a->loop, &c->w);
	ev_timer_start(a->loop, &c->t);
	c->prev = l->tail;
	if (l->tail) l->tail->next = c;
	else l->head = c;
	l->tail = c;
	l->n++;
	return c;
}

/* Room for one more inbound connection from `src`: at the per-source cap
 * one of that source's goes, at the total cap one of any. */
static void in_admit(agent *a, const mbr_addr *src)
{
	conn_list *l = &a->tcp->in;
	int same = 0;
	for (agent_conn *c = l->head; c; c = c->next) same += same_ip(&c->peer, src);
	if (same >= IN_PER_SOURCE) in_shed(a, src);
	if (l->n >= l->max) in_shed(a, NULL);
}

static void accept_pause_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)revents;
	if (a->tcp->reserve_fd < 0) a->tcp->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ev_io_start(loop, &a->tcp_w);
}

/* accept() failed for want of fds.  Returns true when one was freed and
 * accepting may go on. */
static bool accept_no_fd(agent *a, int err)
{
	agent_tcp *t = a->tcp;
	double now = sk_mono_s();
	if (in_shed(a, NULL)) return true;
	a->cnt.tcp_accept_no_fd++;
	if (t->reserve_fd >= 0) {
		close(t->reserve_fd);
		int fd = accept4(a->tcp_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) close(fd);
		t->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (now - t->warned >= WARN_EVERY_S) {
		SK_WARN("net", "gossip TCP: out of file descriptors (%s): %llu accepts failed so far",
			strerror(err), (unsigned long long)a->cnt.tcp_accept_no_fd);
		t->warned = now;
	}
	if (t->reserve_fd >= 0) return true;
	ev_io_stop(a->loop, &a->tcp_w);
	ev_timer_set(&t->pause, ACCEPT_PAUSE_S, 0);
	ev_timer_start(a->loop, &t->pause);
	return false;
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent *a = w->data;
	(void)loop; (void)revents;
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(a->tcp_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				if (accept_no_fd(a, errno)) continue;
			}
			return;
		}
		mbr_addr src;
		agent_net_from_sockaddr(&ss, &src);
		in_admit(a, &src);
		agent_conn *c = conn_new(a, fd, false, &src);
		if (!c) { close(fd); continue; }
		in_read(c); /* a real sender wrote at once: often the whole stream is here */
	}
}

/* Room for one more outbound stream of `need` bytes: the stream quiet
 * longest (a peer that does not read, an address that does not answer) or
 * the oldest goes. */
static bool out_admit(agent *a, size_t need)
{
	conn_list *l = &a->tcp->out;
	double now = sk_mono_s();
	while (l->n >= l->max || l->bytes + need > OUT_BYTES_MAX) {
		bool idle;
		agent_conn *v = victim(l, now, NULL, &idle);
		a->cnt.tcp_out_shed++;
		if (!v) return false;
		conn_close(v);
	}
	return true;
}

void agent_tcp_send(agent *a, const mbr_out *o)
{
	if (agent_keyless_closed(a)) {
		a->cnt.drop_keyless++;
		return;
	}
	size_t plen = o->len + (a->kr.n ? CRYPTO_OVERHEAD : 0);
	if (!out_admit(a, 4 + plen)) return;
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
	agent_net_to_sockaddr(&o->to, &ss, &sl);
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
	agent_conn *c = conn_new(a, fd, true, &o->to);
	if (!c) { close(fd); free(buf); return; }
	c->buf = buf;
	c->len = c->cap = 4 + plen;
	a->tcp->out.bytes += c->cap;
}

void agent_tcp_gauges(const agent *a, uint64_t g[4])
{
	memset(g, 0, 4 * sizeof *g);
	if (!a->tcp) return;
	g[0] = (uint64_t)a->tcp->in.n;
	g[1] = (uint64_t)a->tcp->out.n;
	g[2] = a->tcp->in.bytes;
	/* IN_MAX^2 comparisons at most, and only when asked */
	for (agent_conn *c = a->tcp->in.head; c; c = c->next) {
		uint64_t same = 0;
		for (agent_conn *x = a->tcp->in.head; x; x = x->next) same += same_ip(&c->peer, &x->peer);
		if (same > g[3]) g[3] = same;
	}
}

int agent_tcp_open(agent *a, char *err, size_t errlen)
{
	agent_tcp *t = calloc(1, sizeof *t);
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	a->tcp = t;
	t->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (t->reserve_fd < 0) {
		snprintf(err, errlen, "cannot open /dev/null: %m");
		return -1;
	}
	struct rlimit rl;
	rlim_t share = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur / NOFILE_SHARE : 1024 / NOFILE_SHARE;
	if (share < 4) share = 4;
	t->in.max = share < IN_MAX ? (int)share : IN_MAX;
	t->out.max = share < OUT_MAX ? (int)share : OUT_MAX;
	ev_timer_init(&t->pause, accept_pause_cb, ACCEPT_PAUSE_S, 0);
	t->pause.data = a;
	ev_io_init(&a->tcp_w, accept_cb, a->tcp_fd, EV_READ);
	a->tcp_w.data = a;
	ev_io_start(a->loop, &a->tcp_w);
	SK_DEBUG("net", "gossip TCP: at most %d inbound (%d per address) and %d outbound connections, %d MiB for "
		 "half-received streams", t->in.max, IN_PER_SOURCE, t->out.max, IN_BYTES_MAX >> 20);
	return 0;
}

void agent_tcp_close(agent *a)
{
	agent_tcp *t = a->tcp;
	if (t) {
		while (t->in.head) conn_close(t->in.head);
		while (t->out.head) conn_close(t->out.head);
		ev_timer_stop(a->loop, &t->pause);
		if (t->reserve_fd >= 0) close(t->reserve_fd);
		free(t);
		a->tcp = NULL;
	}
	if (a->tcp_fd >= 0) {
		ev_io_stop(a->loop, &a->tcp_w);
		close(a->tcp_fd);
		a->tcp_fd = -1;
	}
}
