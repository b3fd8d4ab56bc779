/* transfer/core/xfer_sock.h: TCP helpers with a watchdog time on every socket
 * (see xfer_sock.c).  Functions return an fd or 0, or -1 with err set; what
 * and peer name the step and the other side in error messages. */
#ifndef XFER_SOCK_H
#define XFER_SOCK_H

#include "transfer/core/xfer_int.h"

#include <sys/uio.h>

int xfer_sock_timeouts(int fd, int timeout_ms);
/* Listens on host:port (port 0: any); *out_port gets the port. */
int xfer_sock_listen(const char *host, int port, int *out_port, xfer_err *err);
/* Waits up to wait_ms (-1: forever) for a connection. */
int xfer_sock_accept(int lfd, int wait_ms, int timeout_ms, xfer_err *err);
/* Connects, retrying a refused connection until timeout_ms. */
int xfer_sock_connect(const char *host, int port, int timeout_ms, xfer_err *err);
int xfer_sock_sendv(int fd, struct iovec *iov, int n, const char *what, const char *peer, int timeout_ms,
		    xfer_err *err);
int xfer_sock_recvv(int fd, struct iovec *iov, int n, const char *what, const char *peer, int timeout_ms,
		    xfer_err *err);
int xfer_sock_send(int fd, const void *p, size_t n, const char *what, const char *peer, int timeout_ms,
		   xfer_err *err);
int xfer_sock_recv(int fd, void *p, size_t n, const char *what, const char *peer, int timeout_ms,
		   xfer_err *err);
/* Waits up to wait_ms for fd to be readable; XFER_ENOVERSION when not. */
int xfer_sock_wait(int fd, int wait_ms, xfer_err *err);
/* A status message: code 0 is OK; otherwise the peer's error text. */
int xfer_sock_send_status(int fd, const xfer_err *st, int timeout_ms, xfer_err *err);
/* 0 when the peer sent OK; -1 with "the <peer> reported: ..." otherwise. */
int xfer_sock_recv_status(int fd, const char *peer, int timeout_ms, xfer_err *err);

/* Sends version v's header (xfer_vhead) on the control stream. */
int xfer_sock_send_vhead(int fd, const xfer_endpoint *ep, uint64_t v, xfer_err *err);
/* A p2p receiver: waits what is left of wait_ms since t0 for the next
 * version header on the control stream and checks it against the manifest
 * and the version held (xfer_vhead_parse).  0 with *v; 1 when none came
 * (the session stays); -1 when the session is broken. */
int xfer_sock_recv_vhead(int fd, const xfer_endpoint *ep, int wait_ms, double t0, uint64_t *v, xfer_err *err);
/* The rest of a status whose 8-byte header h was read already. */
int xfer_sock_status_rest(int fd, const uint32_t h[2], const char *peer, int timeout_ms, xfer_err *err);
/* Waits up to timeout_ms until n bytes can be read, and copies them to p
 * without taking them off the socket. */
int xfer_sock_peek(int fd, void *p, size_t n, const char *peer, int timeout_ms, xfer_err *err);

#endif
