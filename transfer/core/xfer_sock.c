/* transfer/core/xfer_sock.c: TCP helpers shared by p2p-tcp and colocated's
 * control stream.
 *
 * Every socket carries SO_SNDTIMEO/SO_RCVTIMEO of the watchdog time, so a
 * blocked send or receive returns after that long without progress: a peer
 * that vanished (RST, EOF, EPIPE) or stopped (timeout) ends the transfer with
 * an error that says which.  No SIGPIPE: sends use MSG_NOSIGNAL. */
#include "transfer/core/xfer_sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int xfer_sock_timeouts(int fd, int timeout_ms)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return 0;
}

static int parse_addr(const char *host, int port, struct sockaddr_in *sa, xfer_err *err)
{
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return xfer_fail(err, XFER_EINVAL, "address \"%s\": an IPv4 address is needed", host);
	return 0;
}

int xfer_sock_listen(const char *host, int port, int *out_port, xfer_err *err)
{
	struct sockaddr_in sa;
	if (parse_addr(host, port, &sa, err) != 0) return -1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		xfer_fail_errno(err, XFER_EIO, "bind %s:%d", host, port);
		close(fd);
		return -1;
	}
	if (listen(fd, 128) != 0) {
		xfer_fail_errno(err, XFER_EIO, "listen");
		close(fd);
		return -1;
	}
	socklen_t sl = sizeof sa;
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	*out_port = ntohs(sa.sin_port);
	return fd;
}

int xfer_sock_accept(int lfd, int wait_ms, int timeout_ms, xfer_err *err)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	for (;;) {
		int r = poll(&p, 1, wait_ms);
		if (r < 0 && errno == EINTR) continue;
		if (r < 0) return xfer_fail_errno(err, XFER_EIO, "poll");
		if (r == 0) return xfer_fail(err, XFER_ETIMEOUT, "no sender connected within %d ms", wait_ms);
		break;
	}
	if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
		return xfer_fail(err, XFER_EABORTED, "the listening socket was closed");
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "accept");
	xfer_sock_timeouts(fd, timeout_ms);
	return fd;
}

int xfer_sock_connect(const char *host, int port, int timeout_ms, xfer_err *err)
{
	struct sockaddr_in sa;
	if (parse_addr(host, port, &sa, err) != 0) return -1;
	double deadline = xfer_now() + timeout_ms / 1e3;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "socket");
		xfer_sock_timeouts(fd, timeout_ms);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
		int e = errno;
		close(fd);
		if ((e != ECONNREFUSED && e != EINTR && e != EAGAIN) || xfer_now() >= deadline) {
			errno = e;
			return xfer_fail_errno(err, e == ECONNREFUSED ? XFER_EPEER : XFER_EIO,
					       "connect %s:%d (for %d ms)", host, port, timeout_ms);
		}
		struct timespec ts = { 0, 20 * 1000000L }; /* the receiver is not listening yet */
		nanosleep(&ts, NULL);
	}
}

static int io_fail(xfer_err *err, const char *what, const char *peer, int timeout_ms, ssize_t r)
{
	if (r == 0) return xfer_fail(err, XFER_EPEER, "%s: the %s closed the connection", what, peer);
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return xfer_fail(err, XFER_ETIMEOUT, "%s: the %s made no progress for %d ms (watchdog)", what, peer,
				 timeout_ms);
	if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
		return xfer_fail_errno(err, XFER_EPEER, "%s: the %s went away", what, peer);
	return xfer_fail_errno(err, XFER_EIO, "%s", what);
}

/* Moves every byte of iov in one direction, resuming after partial calls. */
static int move_iov(int fd, int out, struct iovec *iov, int n, const char *what, const char *peer, int timeout_ms,
		    xfer_err *err)
{
	while (n > 0 && iov->iov_len == 0) { iov++; n--; }
	while (n > 0) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)(n > 1024 ? 1024 : n) };
		ssize_t r = out ? sendmsg(fd, &mh, MSG_NOSIGNAL) : recvmsg(fd, &mh, MSG_WAITALL);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) return io_fail(err, what, peer, timeout_ms, r);
		while (n > 0 && (size_t)r >= iov->iov_len) {
			r -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

int xfer_sock_sendv(int fd, struct iovec *iov, int n, const char *what, const char *peer, int timeout_ms,
		    xfer_err *err)
{
	return move_iov(fd, 1, iov, n, what, peer, timeout_ms, err);
}

int xfer_sock_recvv(int fd, struct iovec *iov, int n, const char *what, const char *peer, int timeout_ms,
		    xfer_err *err)
{
	return move_iov(fd, 0, iov, n, what, peer, timeout_ms, err);
}

int xfer_sock_send(int fd, const void *p, size_t n, const char *what, const char *peer, int timeout_ms,
		   xfer_err *err)
{
	struct iovec v = { (void *)p, n };
	return xfer_sock_sendv(fd, &v, 1, what, peer, timeout_ms, err);
}

int xfer_sock_recv(int fd, void *p, size_t n, const char *what, const char *peer, int timeout_ms,
		   xfer_err *err)
{
	struct iovec v = { p, n };
	return xfer_sock_recvv(fd, &v, 1, what, peer, timeout_ms, err);
}

int xfer_sock_wait(int fd, int wait_ms, xfer_err *err)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	for (;;) {
		int r = poll(&p, 1, wait_ms);
		if (r < 0 && errno == EINTR) continue;
		if (r < 0) return xfer_fail_errno(err, XFER_EIO, "poll");
		if (r == 0) return xfer_fail(err, XFER_ENOVERSION, "no new version within %d ms", wait_ms);
		return 0;
	}
}

int xfer_sock_peek(int fd, void *p, size_t n, const char *peer, int timeout_ms, xfer_err *err)
{
	double deadline = xfer_now() + timeout_ms / 1e3;
	for (;;) {
		ssize_t r = recv(fd, p, n, MSG_PEEK | MSG_DONTWAIT);
		if (r == (ssize_t)n) return 0;
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return io_fail(err, "first message", peer, timeout_ms, r);
		int left = (int)((deadline - xfer_now()) * 1e3);
		if (left <= 0) {
			errno = EAGAIN;
			return io_fail(err, "first message", peer, timeout_ms, -1);
		}
		/* a partial message: wait a little for the rest (POLLIN stays set) */
		struct pollfd q = { .fd = fd, .events = POLLIN };
		if (r > 0) {
			struct timespec ts = { 0, 1000000L };
			nanosleep(&ts, NULL);
		} else if (poll(&q, 1, left) < 0 && errno != EINTR) {
			return xfer_fail_errno(err, XFER_EIO, "poll");
		}
	}
}

/* ---- status messages: u32 code, u32 length, text ---- */

int xfer_sock_send_status(int fd, const xfer_err *st, int timeout_ms, xfer_err *err)
{
	uint32_t h[2] = { st ? (uint32_t)st->code : 0, 0 };
	size_t len = st && st->code ? strnlen(st->msg, sizeof st->msg) : 0;
	h[1] = (uint32_t)len;
	struct iovec v[2] = { { h, sizeof h }, { (void *)(st ? st->msg : ""), len } };
	return xfer_sock_sendv(fd, v, 2, "status", "peer", timeout_ms, err);
}

int xfer_sock_recv_status(int fd, const char *peer, int timeout_ms, xfer_err *err)
{
	uint32_t h[2];
	if (xfer_sock_recv(fd, h, sizeof h, "status", peer, timeout_ms, err) != 0) return -1;
	return xfer_sock_status_rest(fd, h, peer, timeout_ms, err);
}

int xfer_sock_status_rest(int fd, const uint32_t h[2], const char *peer, int timeout_ms, xfer_err *err)
{
	if (h[0] == 0) return 0;
	char msg[sizeof err->msg];
	size_t k = h[1] < sizeof msg - 1 ? h[1] : sizeof msg - 1;
	if (h[1] >= sizeof msg || xfer_sock_recv(fd, msg, k, "status", peer, timeout_ms, err) != 0)
		return xfer_fail(err, XFER_EPEER, "the %s reported an error (%s) and its message was lost", peer,
				 xfer_code_name((xfer_code)h[0]));
	msg[k] = 0;
	return xfer_fail(err, h[0] <= XFER_ENOVERSION ? (xfer_code)h[0] : XFER_EPEER, "the %s reported: %s", peer, msg);
}

/* ---- p2p version headers ---- */

int xfer_sock_send_vhead(int fd, const xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	xfer_vhead h = { .ntensors = (uint32_t)ep->m->n, .version = v, .total = ep->m->bytes };
	memcpy(h.magic, "SKV1", 4);
	return xfer_sock_send(fd, &h, sizeof h, "version header", "receiver", ep->cfg.timeout_ms, err);
}

int xfer_sock_recv_vhead(int fd, const xfer_endpoint *ep, int wait_ms, double t0, uint64_t *v, xfer_err *err)
{
	if (wait_ms >= 0) {
		wait_ms -= (int)((xfer_now() - t0) * 1e3);
		if (wait_ms < 0) wait_ms = 0;
	}
	if (xfer_sock_wait(fd, wait_ms, err) != 0) return 1;
	xfer_vhead h;
	if (xfer_sock_recv(fd, &h, sizeof h, "version header", "sender", ep->cfg.timeout_ms, err) != 0 ||
	    xfer_vhead_parse(&h, sizeof h, ep->m, ep->stats.version, v, err) != 0)
		return -1;
	return 0;
}
