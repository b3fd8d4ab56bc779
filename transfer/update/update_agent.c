/* transfer/update/update_agent.c: libskein's blocking client of its agent's Unix
 * socket (SKEIN_RPC "unix:PATH"), for the coordinated update
 * (docs/updates.md).
 *
 * One call is one frame out and one frame back, as agent/agent_wire.h frames
 * them: a 4-byte big-endian length, then a packed control Request {cmd "wv",
 * args [verb], payload, recipient "unix:PATH", time_ms, a fresh 16-byte
 * nonce}; the answer is a packed Response whose payload holds the reply
 * message.  The connection is kept between calls and made again after any
 * failure (a half-read answer leaves the stream out of step, so it is never
 * reused).  Everything from the agent is bounded: the length before any
 * allocation (XFER_AGENT_ANSWER_MAX), the time of the whole call (poll with a
 * deadline), the answer's nonce must be ours.  A `wait` (the head's long
 * poll) whose time runs out before any byte of its answer came is not
 * dropped but kept pending: the next `wait` reads that answer instead of
 * asking again, so a caller's short wait never loses an instruction the
 * head handed out meanwhile (a `serve` for a peer's catch-up, a `receive`).
 * Any other verb gives a pending wait up.  Unlike agent_rpc.c this
 * client does not seal: a Unix socket needs no key, and libskein does not
 * link the agent's crypto.  Not thread-safe: one client per thread. */
#include "transfer/update/update.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto/control.pb-c.h"

struct xfer_agent {
	char rpc[sizeof(((struct sockaddr_un *)0)->sun_path) + 8]; /* "unix:PATH" */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;
	/* a `wait` sent on fd whose answer has not come yet */
	int pending;
	double pending_since;
	uint8_t pending_nonce[XFER_AGENT_NONCE];
};

enum { AGENT_PENDING_MAX_MS = 2 * XFER_UPD_CALL_MS }; /* then it is asked afresh */

xfer_agent *xfer_agent_new(const char *rpc, xfer_err *err)
{
	xfer_agent *a = calloc(1, sizeof *a);
	if (!a) {
		xfer_fail(err, XFER_ENOMEM, "out of memory");
		return NULL;
	}
	if (xfer_rpc_parse(rpc, a->path, sizeof a->path, err) != 0) {
		free(a);
		return NULL;
	}
	snprintf(a->rpc, sizeof a->rpc, "unix:%s", a->path);
	a->fd = -1;
	return a;
}

void xfer_agent_free(xfer_agent **ap)
{
	if (!ap || !*ap) return;
	if ((*ap)->fd >= 0) close((*ap)->fd);
	free(*ap);
	*ap = NULL;
}

static void drop(xfer_agent *a)
{
	if (a->fd >= 0) close(a->fd);
	a->fd = -1;
	a->pending = 0;
}

int xfer_agent_pending(const xfer_agent *a)
{
	return a && a->pending;
}

static int left_ms(double deadline)
{
	double l = (deadline - xfer_now()) * 1e3;
	return l <= 0 ? 0 : l > 1e9 ? 1000000000 : (int)l + 1;
}

static int agent_connect(xfer_agent *a, xfer_err *err)
{
	if (a->fd >= 0) {
		/* a kept connection the agent closed (its idle timer, a restart)
		 * reads as readable; nothing else may be pending between calls */
		struct pollfd q = { .fd = a->fd, .events = POLLIN };
		if (poll(&q, 1, 0) == 0) return 0;
		drop(a);
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", a->path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "socket");
	/* a Unix connect completes or fails at once (EAGAIN: backlog full) */
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return xfer_fail_errno(err, XFER_EPEER, "agent %s", a->rpc);
	}
	a->fd = fd;
	return 0;
}

/* Moves n bytes in one direction before the deadline. */
static int move(xfer_agent *a, int out, void *p, size_t n, double deadline, const char *what, xfer_err *err)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = out ? send(a->fd, (char *)p + done, n - done, MSG_NOSIGNAL)
				: recv(a->fd, (char *)p + done, n - done, 0);
		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (r == 0) return xfer_fail(err, XFER_EPEER, "agent %s closed the connection (%s)", a->rpc, what);
		if (errno == EINTR) continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return xfer_fail_errno(err, XFER_EPEER, "agent %s (%s)", a->rpc, what);
		int ms = left_ms(deadline);
		if (ms == 0) return xfer_fail(err, XFER_ETIMEOUT, "agent %s: no %s within the call's time", a->rpc, what);
		struct pollfd q = { .fd = a->fd, .events = out ? POLLOUT : POLLIN };
		if (poll(&q, 1, ms) < 0 && errno != EINTR) return xfer_fail_errno(err, XFER_EIO, "poll");
	}
	return 0;
}

/* An agent's error that says to ask again: no head right now, a head
 * handing over, a busy replay cache. */
static int says_retry(const char *e)
{
	return strstr(e, "retry") || strstr(e, "no head") || strstr(e, "not the head") || strstr(e, "head changed");
}

int xfer_agent_call(xfer_agent *a, const char *verb, const void *payload, size_t len, int timeout_ms,
		    uint8_t **out, size_t *olen, xfer_err *err)
{
	*out = NULL;
	*olen = 0;
	double deadline = xfer_now() + (timeout_ms > 0 ? timeout_ms : 1) / 1e3;
	uint8_t nonce[XFER_AGENT_NONCE], *frame = NULL, *in = NULL;
	Skein__Control__Response *r = NULL;
	int keep = !strcmp(verb, "wait");
	if (a->pending && (!keep || xfer_now() - a->pending_since > AGENT_PENDING_MAX_MS / 1e3))
		drop(a); /* another call, or a wait unanswered for too long: ask afresh */
	if (a->pending) {
		memcpy(nonce, a->pending_nonce, sizeof nonce); /* the request is out: read its answer */
	} else {
		if (getrandom(nonce, sizeof nonce, 0) != sizeof nonce)
			return xfer_fail_errno(err, XFER_EIO, "getrandom");
		Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
		char *args[1] = { (char *)verb };
		struct timespec wall;
		clock_gettime(CLOCK_REALTIME, &wall);
		q.cmd = "wv";
		q.n_args = 1;
		q.args = args;
		q.format = "text";
		q.recipient = a->rpc;
		q.time_ms = (uint64_t)wall.tv_sec * 1000 + (uint64_t)wall.tv_nsec / 1000000;
		q.nonce.data = nonce;
		q.nonce.len = sizeof nonce;
		q.payload.data = (uint8_t *)payload;
		q.payload.len = len;
		size_t n = skein__control__request__get_packed_size(&q);
		if (n > XFER_AGENT_REQUEST_MAX)
			return xfer_fail(err, XFER_EINVAL, "wv %s: a request of %zu bytes", verb, n);
		frame = malloc(n + 4);
		if (!frame) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		frame[0] = (uint8_t)(n >> 24), frame[1] = (uint8_t)(n >> 16), frame[2] = (uint8_t)(n >> 8),
		frame[3] = (uint8_t)n;
		skein__control__request__pack(&q, frame + 4);
		if (agent_connect(a, err) != 0 || move(a, 1, frame, n + 4, deadline, "request", err) != 0) goto broken;
	}
	if (keep) {
		/* the head's answer may take its long poll: if none of it came in
		 * our time, the request stays pending for the next wait */
		struct pollfd pq = { .fd = a->fd, .events = POLLIN };
		int pr;
		while ((pr = poll(&pq, 1, left_ms(deadline))) < 0 && errno == EINTR) {}
		if (pr < 0) { xfer_fail_errno(err, XFER_EIO, "poll"); goto broken; }
		if (pr == 0) {
			if (!a->pending) {
				a->pending = 1;
				a->pending_since = xfer_now();
				memcpy(a->pending_nonce, nonce, sizeof nonce);
			}
			free(frame);
			return xfer_fail(err, XFER_ETIMEOUT, "agent %s: no answer to wv %s yet (kept pending)", a->rpc,
					 verb);
		}
		a->pending = 0;
		/* its first bytes are here: the rest is in flight, a small frame */
		if (deadline < xfer_now() + 1.0) deadline = xfer_now() + 1.0;
	}
	uint8_t hdr[4];
	if (move(a, 0, hdr, 4, deadline, "answer", err) != 0) goto broken;
	uint32_t alen = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (alen > XFER_AGENT_ANSWER_MAX) {
		xfer_fail(err, XFER_EFORMAT, "agent %s: an answer of %u bytes (at most %d)", a->rpc, alen,
			  XFER_AGENT_ANSWER_MAX);
		goto broken;
	}
	in = malloc(alen ? alen : 1);
	if (!in) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto broken; }
	if (move(a, 0, in, alen, deadline, "answer", err) != 0) goto broken;
	r = skein__control__response__unpack(NULL, alen, in);
	if (!r) {
		xfer_fail(err, XFER_EFORMAT, "agent %s: the answer to wv %s is not a control response", a->rpc, verb);
		goto broken;
	}
	if (r->nonce.len != sizeof nonce || memcmp(r->nonce.data, nonce, sizeof nonce) != 0) {
		xfer_fail(err, XFER_EFORMAT, "agent %s: the answer belongs to another request (nonce)", a->rpc);
		goto broken;
	}
	if (r->code != 0) {
		const char *e = r->error && *r->error ? r->error : "(no message)";
		xfer_fail(err, says_retry(e) ? XFER_EPEER : XFER_EINVAL, "wv %s: %.*s", verb, 400, e);
		goto done; /* a whole answer: the connection stays in step */
	}
	*out = malloc(r->payload.len ? r->payload.len : 1);
	if (!*out) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto done; }
	if (r->payload.len) memcpy(*out, r->payload.data, r->payload.len);
	*olen = r->payload.len;
	skein__control__response__free_unpacked(r, NULL);
	free(frame);
	free(in);
	return 0;
broken:
	drop(a);
done:
	if (r) skein__control__response__free_unpacked(r, NULL);
	free(frame);
	free(in);
	return -1;
}
