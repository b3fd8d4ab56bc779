/* transfer/paths/xfer_gate.c: a p2p receiver's door (issue 23).
 *
 * A receiver used to accept one connection and block on its hello for the
 * whole watchdog time: a process that connected first, silent or slow,
 * held the real sender off until the watchdog fired.  The gate instead
 * holds every connection that has not said who it is (up to GATE_MAX; a
 * newcomer past that evicts the oldest), reads their hellos concurrently
 * with poll on non-blocking sockets, each within XFER_GATE_HELLO_MS, and
 * hands the caller's judge each hello as it completes.  A refused one is
 * answered with a status (a wire 2 sender waits for one), closed, logged
 * in one line and counted; one judged for someone else (a data stream
 * seen while the chooser waits for a control one) is kept for them.
 *
 * The ticket: job (XXH3-64 of its name), version and a 128-bit nonce the
 * head drew for the update or catch-up; a sender puts it in its hello, and
 * a receiver given one (xfer_p2p_ticket) takes no hello without it. */
#include "transfer/core/xfer_sock.h"
#include "transfer/core/xfer_hash.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { GATE_MAX = 64, C_READ = 0, C_KEPT = 1, C_CLOSING = 2 };

typedef struct {
	int fd, state;
	double deadline;
	size_t have, need;
	unsigned char buf[XFER_GATE_HELLO_MAX];
	char peer[48];
} gate_conn;

struct xfer_gate {
	gate_conn c[GATE_MAX];
	int n;
	uint64_t refused;
	char last[256]; /* the last refusal's reason */
};

xfer_gate *xfer_gate_new(void)
{
	return calloc(1, sizeof(xfer_gate));
}

void xfer_gate_free(xfer_gate **g)
{
	if (!g || !*g) return;
	for (int i = 0; i < (*g)->n; i++) close((*g)->c[i].fd);
	free(*g);
	*g = NULL;
}

uint64_t xfer_gate_refused(const xfer_gate *g)
{
	return g ? g->refused : 0;
}

const char *xfer_gate_last(const xfer_gate *g)
{
	return g ? g->last : "";
}

static void drop_at(xfer_gate *g, int i)
{
	close(g->c[i].fd);
	g->c[i] = g->c[--g->n];
}

/* Refuses connection i: a status with why (best effort, never blocking),
 * then it lingers as C_CLOSING (what it still sends is read and dropped,
 * so the close sends no reset over the status) until it closes or its
 * time is up. */
static void refuse(xfer_gate *g, int i, const char *why, int answer)
{
	gate_conn *c = &g->c[i];
	g->refused++;
	snprintf(g->last, sizeof g->last, "%s", why);
	fprintf(stderr, "skein: p2p receiver: refused a connection from %s: %s\n", c->peer, why);
	if (!answer) {
		drop_at(g, i);
		return;
	}
	unsigned char m[8 + sizeof g->last];
	uint32_t h[2] = { XFER_EFORMAT, (uint32_t)strlen(why) };
	memcpy(m, h, sizeof h);
	memcpy(m + 8, why, h[1]);
	ssize_t r = send(c->fd, m, 8 + h[1], MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)r;
	shutdown(c->fd, SHUT_WR);
	c->state = C_CLOSING;
	c->deadline = xfer_now() + XFER_GATE_HELLO_MS / 1e3;
}

static void add_conn(xfer_gate *g, int fd)
{
	if (g->n == GATE_MAX) {
		int old = 0;
		for (int i = 1; i < g->n; i++)
			if (g->c[i].deadline < g->c[old].deadline) old = i;
		refuse(g, old, "evicted: too many connections without a hello", 0);
	}
	gate_conn *c = &g->c[g->n++];
	memset(c, 0, sizeof *c);
	c->fd = fd;
	c->deadline = xfer_now() + XFER_GATE_HELLO_MS / 1e3;
	c->need = 8;
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	char ip[INET_ADDRSTRLEN] = "?";
	if (getpeername(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sin_family == AF_INET)
		inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
	snprintf(c->peer, sizeof c->peer, "%s:%u", ip, sl == sizeof sa ? ntohs(sa.sin_port) : 0);
}

/* Connection i judged: 1 taken (its fd and hello in *fd, out), 0 otherwise. */
static int judge_at(xfer_gate *g, int i, xfer_gate_judge judge, void *ctx, int timeout_ms, int *fd,
		    unsigned char *out, size_t *outn)
{
	gate_conn *c = &g->c[i];
	char why[256] = "";
	size_t need = c->need;
	xfer_gate_verdict v = judge(ctx, c->buf, c->have, &need, why, sizeof why);
	switch (v) {
	case XFER_GATE_MORE:
		if (need <= c->have || need > sizeof c->buf) {
			refuse(g, i, "a hello of an unknown size", 0);
			return 0;
		}
		c->need = need;
		c->state = C_READ;
		return 0;
	case XFER_GATE_KEEP:
		c->state = C_KEPT;
		return 0;
	case XFER_GATE_REFUSE:
		refuse(g, i, why[0] ? why : "refused", 1);
		return 0;
	case XFER_GATE_TAKE:
		break;
	}
	*fd = c->fd;
	memcpy(out, c->buf, c->have);
	*outn = c->have;
	int fl = fcntl(c->fd, F_GETFL);
	if (fl >= 0) fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	xfer_sock_timeouts(c->fd, timeout_ms);
	g->c[i] = g->c[--g->n];
	return 1;
}

int xfer_gate_next(xfer_gate *g, int lfd, int wait_ms, int timeout_ms, xfer_gate_judge judge, void *ctx,
		   unsigned char out[XFER_GATE_HELLO_MAX], size_t *outn, xfer_err *err)
{
	double end = wait_ms < 0 ? 1e300 : xfer_now() + wait_ms / 1e3;
	int fd = -1, fl = fcntl(lfd, F_GETFL);
	/* non-blocking: a connection reset between poll and accept must not
	 * block us (only the gate accepts on a p2p listener) */
	if (fl >= 0 && !(fl & O_NONBLOCK)) fcntl(lfd, F_SETFL, fl | O_NONBLOCK);
	/* those kept for someone else: perhaps for this caller */
	for (int i = 0; i < g->n; i++)
		if (g->c[i].state == C_KEPT) {
			int n0 = g->n;
			if (judge_at(g, i, judge, ctx, timeout_ms, &fd, out, outn)) return fd;
			if (g->n < n0) i--; /* i now holds another */
		}
	for (;;) {
		double now = xfer_now(), next = end;
		for (int i = 0; i < g->n; i++) {
			gate_conn *c = &g->c[i];
			if (c->deadline <= now) {
				if (c->state == C_READ) {
					char why[128];
					snprintf(why, sizeof why, "no hello within %d ms", XFER_GATE_HELLO_MS);
					refuse(g, i, why, 0);
				} else {
					drop_at(g, i);
				}
				i--;
				continue;
			}
			if (c->deadline < next) next = c->deadline;
		}
		struct pollfd p[GATE_MAX + 1];
		int map[GATE_MAX + 1], np = 0;
		p[np] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		map[np++] = -1;
		for (int i = 0; i < g->n; i++)
			if (g->c[i].state != C_KEPT) {
				p[np] = (struct pollfd){ .fd = g->c[i].fd, .events = POLLIN };
				map[np++] = i;
			}
		double left = next - now;
		int ms = left > 3600 ? 3600 * 1000 : left <= 0 ? 0 : (int)(left * 1e3) + 1;
		int r = poll(p, (nfds_t)np, ms);
		if (r < 0 && errno != EINTR) return xfer_fail_errno(err, XFER_EIO, "poll");
		if (r > 0) {
			/* newest index first: refusing swaps the last one into i */
			for (int k = np - 1; k >= 1; k--) {
				if (!p[k].revents) continue;
				int i = map[k];
				gate_conn *c = &g->c[i];
				if (c->state == C_CLOSING) {
					unsigned char sink[4096];
					ssize_t got = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
					if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) drop_at(g, i);
					continue;
				}
				ssize_t got = recv(c->fd, c->buf + c->have, c->need - c->have, MSG_DONTWAIT);
				if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
					refuse(g, i, got == 0 ? "closed before its hello" : "an error before its hello", 0);
					continue;
				}
				if (got < 0) continue;
				c->have += (size_t)got;
				if (c->have < c->need) continue;
				if (judge_at(g, i, judge, ctx, timeout_ms, &fd, out, outn)) return fd;
			}
			if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
				return xfer_fail(err, XFER_EABORTED, "the listening socket was closed");
			for (int k = 0; (p[0].revents & POLLIN) && k < 16; k++) {
				int nfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
				if (nfd >= 0) {
					add_conn(g, nfd);
					continue;
				}
				if (errno == EINVAL) /* shut down: an abort */
					return xfer_fail(err, XFER_EABORTED, "the listening socket was closed");
				if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
					return xfer_fail_errno(err, XFER_EIO, "accept");
				break;
			}
		}
		if (xfer_now() >= end) {
			if (g->refused && g->last[0])
				return xfer_fail(err, XFER_ENOVERSION,
						 "no sender within %d ms (%llu connection(s) refused so far, the last: %s)",
						 wait_ms, (unsigned long long)g->refused, g->last);
			return xfer_fail(err, XFER_ENOVERSION, "no sender connected within %d ms", wait_ms);
		}
	}
}

typedef struct {
	xfer_gate_judge judge;
	void *ctx;
} sweep_ctx;

static xfer_gate_verdict sweep_judge(void *ctx, const unsigned char *buf, size_t n, size_t *need, char *why,
				     size_t whyn)
{
	const sweep_ctx *w = ctx;
	xfer_gate_verdict v = w->judge(w->ctx, buf, n, need, why, whyn);
	return v == XFER_GATE_TAKE ? XFER_GATE_KEEP : v;
}

void xfer_gate_sweep(xfer_gate *g, int lfd, xfer_gate_judge judge, void *ctx)
{
	if (!g || lfd < 0) return;
	sweep_ctx w = { judge, ctx };
	unsigned char out[XFER_GATE_HELLO_MAX];
	size_t n;
	xfer_err ignored;
	/* a few rounds: accept, read the magic, read the rest (never takes: KEEP instead) */
	for (int round = 0; round < 3; round++) xfer_gate_next(g, lfd, 0, 0, sweep_judge, &w, out, &n, &ignored);
}

/* ---- the ticket ---- */

uint64_t xfer_ticket_job(const char *job)
{
	return job ? XXH3_64bits(job, strlen(job)) : 0;
}

int xfer_ticket_check(const xfer_endpoint *ep, const xfer_ticket *t, char *why, size_t n)
{
	if (!ep->has_ticket) return 0;
	if (!(t->flags & XFER_TICKET_SET)) {
		snprintf(why, n, "its hello carries no ticket (job, version, nonce) and this receiver was given one");
		return -1;
	}
	unsigned diff = 0;
	for (int i = 0; i < XFER_NONCE_BYTES; i++) diff |= (unsigned)(t->nonce[i] ^ ep->ticket.nonce[i]);
	if (t->job != ep->ticket.job) {
		snprintf(why, n, "its hello names another job");
		return -1;
	}
	if (t->version != ep->ticket.version) {
		snprintf(why, n, "its hello names version %llu, not %llu", (unsigned long long)t->version,
			 (unsigned long long)ep->ticket.version);
		return -1;
	}
	if (diff) {
		snprintf(why, n, "its hello's nonce is not the one the head gave for version %llu",
			 (unsigned long long)ep->ticket.version);
		return -1;
	}
	return 0;
}

int xfer_p2p_ticket(xfer_endpoint *ep, const char *job, uint64_t version, const unsigned char *nonce, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "no endpoint");
	ep->has_ticket = 0;
	memset(&ep->ticket, 0, sizeof ep->ticket);
	if (!nonce) return 0;
	if (!job || !*job || version == 0) return xfer_fail(err, XFER_EINVAL, "a ticket needs a job and a version > 0");
	ep->ticket.flags = XFER_TICKET_SET;
	ep->ticket.job = xfer_ticket_job(job);
	ep->ticket.version = version;
	memcpy(ep->ticket.nonce, nonce, XFER_NONCE_BYTES);
	ep->has_ticket = 1;
	return 0;
}

uint64_t xfer_p2p_refused(const xfer_endpoint *ep)
{
	return ep ? xfer_gate_refused(ep->gate) : 0;
}

int xfer_gate_take_pending(xfer_endpoint *ep, unsigned char raw[XFER_GATE_HELLO_MAX], size_t *rn)
{
	int fd = ep->pending_ctl;
	if (fd < 0) return -1;
	ep->pending_ctl = -1;
	*rn = ep->pending_hello_len < XFER_GATE_HELLO_MAX ? ep->pending_hello_len : XFER_GATE_HELLO_MAX;
	memcpy(raw, ep->pending_hello, *rn);
	return fd;
}
