/* transfer/paths/xfer_p2p.c: the "p2p" path, which agrees with each peer on
 * p2p-ucx or p2p-tcp.
 *
 * Whether UCX can beat TCP depends on both ends: RDMA needs a NIC that UCX
 * drives on each side, shared memory needs both processes on one host.  So
 * the choice is made per session, by the receiver, from what the sender's
 * p2p-ucx hello says (its UCX transports and its boot id) and what its own
 * UCX offers: UCX when both offer RDMA, or both share a host and offer
 * shared memory; else p2p-tcp.  The chooser holds one endpoint of each path
 * (xfer_sub_open) over one listening socket: it accepts each control
 * connection itself, peeks at the magic of the first message and hands the
 * socket to the path that speaks it.  A sender told "p2p-tcp" reconnects
 * with p2p-tcp's hello and stays on it; its note, and the receiver's, say
 * what was chosen and why (xfer_endpoint_note), and xfer_endpoint_path the
 * path that ran last.  The chooser's door is the gate (xfer_gate.c): each
 * connection's hello is read concurrently and judged by its path's rules,
 * the ticket included, before the socket is handed over. */
#include "transfer/core/xfer_sock.h"
#include "transfer/paths/xfer_ucp.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { SUB_UCX = 0, SUB_TCP = 1 };

typedef struct {
	xfer_endpoint *sub[2];
	int active; /* the sub whose session runs, or -1 */
	int lfd;
} p2p_state;

static int p2p_probe(char *why, size_t n)
{
	int kinds = 0;
	char tls[512], w[256];
	if (xfer_ucx_offers(&kinds, tls, sizeof tls, w, sizeof w) != 0) {
		snprintf(why, n, "p2p-tcp (p2p-ucx unavailable: %s)", w);
		return 0;
	}
	snprintf(why, n, "p2p-ucx with a peer whose UCX offers RDMA too%s, or on this host (shared memory%s); "
		 "else p2p-tcp (UCX offers %s)",
		 kinds & XFER_UCX_RDMA ? "" : " (none here)", kinds & XFER_UCX_SHM ? "" : ": none here", tls);
	return 0;
}

static int p2p_setup(xfer_endpoint *ep, xfer_err *err)
{
	p2p_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->active = -1;
	s->lfd = -1;
	if (ep->cfg.role == XFER_RECEIVER) {
		if ((s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err)) < 0) return -1;
		if (!(s->sub[SUB_UCX] = xfer_sub_open(ep, &xfer_ucx_ops, s->lfd, 1, err)) ||
		    !(s->sub[SUB_TCP] = xfer_sub_open(ep, &xfer_tcp_ops, s->lfd, 0, err)))
			return -1;
	} else if (!(s->sub[SUB_UCX] = xfer_sub_open(ep, &xfer_ucx_ops, -1, 1, err))) {
		return -1;
	}
	char why[384];
	p2p_probe(why, sizeof why);
	snprintf(ep->note, sizeof ep->note, "chosen with each peer: %s", why);
	return 0;
}

static void p2p_teardown(xfer_endpoint *ep)
{
	p2p_state *s = ep->impl;
	if (!s) return;
	xfer_sub_close(&s->sub[SUB_UCX]);
	xfer_sub_close(&s->sub[SUB_TCP]);
	if (s->lfd >= 0) close(s->lfd);
	free(s);
	ep->impl = NULL;
}

static void p2p_abort(xfer_endpoint *ep)
{
	p2p_state *s = ep->impl;
	if (!s) return;
	for (int i = 0; i < 2; i++) {
		if (!s->sub[i]) continue;
		atomic_store(&s->sub[i]->aborted, 1);
		s->sub[i]->keep_listener = ep->keep_listener;
		if (s->sub[i]->ops->abort) s->sub[i]->ops->abort(s->sub[i]);
	}
	if (s->lfd >= 0 && !ep->keep_listener) shutdown(s->lfd, SHUT_RDWR);
}

/* A hello of either path; a p2p-tcp data stream is kept for the tcp sub. */
static xfer_gate_verdict chooser_judge(void *ctx, const unsigned char *buf, size_t n, size_t *need, char *why,
				       size_t whyn)
{
	const xfer_endpoint *ep = ctx;
	if (n < 8) {
		*need = 8;
		return XFER_GATE_MORE;
	}
	if (memcmp(buf, XFER_UCX_MAGIC "\0", 8) == 0) return xfer_ucx_judge(ctx, buf, n, need, why, whyn);
	if (memcmp(buf, "SKUCX", 5) == 0) {
		snprintf(why, whyn, "an older p2p-ucx sender (no ticket in its hello): upgrade its libskein");
		return XFER_GATE_REFUSE;
	}
	return xfer_tcp_judge(ep, 0, 0, 0, buf, n, need, why, whyn);
}

/* One call on a sub-endpoint, its figures passed through. */
static int run_sub(xfer_endpoint *ep, xfer_endpoint *sub, int wait_ms, uint64_t v, uint64_t *got, xfer_err *err)
{
	sub->stats = ep->stats;
	sub->target = ep->target;
	sub->undo_ready = 0;
	sub->has_ticket = ep->has_ticket;
	sub->ticket = ep->ticket;
	atomic_store(&sub->aborted, atomic_load(&ep->aborted)); /* xfer_rearm of the parent reaches it */
	sub->root_version = 0;
	sub->journal_first = ep->journal_first;
	int rc = ep->cfg.role == XFER_SENDER ? sub->ops->send(sub, v, err) : sub->ops->receive(sub, wait_ms, got, err);
	ep->stats = sub->stats;
	memcpy(ep->root, sub->root, sizeof ep->root);
	ep->root_version = rc == 0 ? sub->root_version : 0;
	ep->undo_ready = sub->undo_ready;
	if (rc == 0) ep->run_path = sub->ops->name;
	return rc;
}

static int p2p_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	p2p_state *s = ep->impl;
	int i = s->active >= 0 ? s->active : SUB_UCX;
	char why[256];
	int rc = run_sub(ep, s->sub[i], -1, v, NULL, err);
	if (rc != 0 && i == SUB_UCX && xfer_ucx_fell_back(s->sub[i], why, sizeof why)) {
		/* the receiver chose p2p-tcp: connect again with it, and stay */
		if (!s->sub[SUB_TCP] && !(s->sub[SUB_TCP] = xfer_sub_open(ep, &xfer_tcp_ops, -1, 0, err))) return -1;
		snprintf(ep->note, sizeof ep->note, "%s", why);
		i = SUB_TCP;
		rc = run_sub(ep, s->sub[i], -1, v, NULL, err);
	}
	if (rc == 0) {
		if (i == SUB_UCX) snprintf(ep->note, sizeof ep->note, "%s", s->sub[i]->note);
		s->active = i;
	}
	return rc;
}

static int p2p_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	p2p_state *s = ep->impl;
	int to = ep->cfg.timeout_ms;
	double t0 = xfer_now();
	for (;;) {
		int left = wait_ms;
		if (wait_ms >= 0) {
			left = wait_ms - (int)((xfer_now() - t0) * 1e3);
			if (left < 0) left = 0;
		}
		if (s->active < 0 || !s->sub[s->active]->ops->connected(s->sub[s->active])) {
			/* the next sender: which path does it speak? */
			unsigned char raw[XFER_GATE_HELLO_MAX];
			size_t rn = 0;
			int fd = xfer_gate_next(ep->gate, s->lfd, left, to, chooser_judge, ep, raw, &rn, err);
			if (fd < 0) return -1;
			s->active = memcmp(raw, XFER_UCX_MAGIC "\0", 8) == 0 ? SUB_UCX : SUB_TCP;
			memcpy(s->sub[s->active]->pending_hello, raw, rn);
			s->sub[s->active]->pending_hello_len = rn;
			s->sub[s->active]->pending_ctl = fd;
		}
		xfer_endpoint *sub = s->sub[s->active];
		char why[256];
		int rc = run_sub(ep, sub, left, 0, version, err);
		if (rc != 0 && err->code == XFER_ENOVERSION && !sub->ops->connected(sub) && left != 0) {
			s->active = -1; /* its sender ended the session: the next one may speak either path */
			continue;
		}
		if (rc != 0 && s->active == SUB_UCX && xfer_ucx_fell_back(sub, why, sizeof why)) {
			snprintf(ep->note, sizeof ep->note, "%s", why); /* the sender comes back with p2p-tcp */
			s->active = -1;
			continue;
		}
		if (rc == 0) /* what came with or after this sender: judged now, not at the session's end */
			xfer_gate_sweep(ep->gate, s->lfd, chooser_judge, ep);
		if (rc == 0 && s->active == SUB_UCX) snprintf(ep->note, sizeof ep->note, "%s", sub->note);
		else if (rc == 0 && strncmp(ep->note, "p2p-tcp", 7) != 0)
			snprintf(ep->note, sizeof ep->note, "p2p-tcp: the sender runs p2p-tcp (it has no UCX, or asked for it)");
		return rc;
	}
}

static int p2p_rollback(xfer_endpoint *ep, xfer_err *err)
{
	p2p_state *s = ep->impl;
	xfer_endpoint *sub = s->active >= 0 ? s->sub[s->active] : NULL;
	if (!sub || !sub->ops->rollback) return xfer_fail(err, XFER_EUNAVAIL, "p2p: no receive to roll back");
	int rc = sub->ops->rollback(sub, err);
	ep->stats.undo_seconds = sub->stats.undo_seconds;
	return rc;
}

const xfer_path_ops xfer_p2p_ops = {
	.name = "p2p",
	.probe = p2p_probe,
	.setup = p2p_setup,
	.send = p2p_send,
	.receive = p2p_receive,
	.abort = p2p_abort,
	.teardown = p2p_teardown,
	.rollback = p2p_rollback,
	.fan = XFER_FAN_PEERS,
};
