/* transfer/core/xfer_path.c: the endpoint's public calls (skein_xfer.h).
 *
 * The top of libskein's files: xfer_open opens the endpoint on its path
 * (paths/xfer_paths.c) and, for a coordinated one (cfg.coord.rpc), adds the
 * update client (transfer/update/update_*.c), to which send, publish and
 * receive then go; it drives the same path through xfer_path_send and
 * xfer_path_receive (core/xfer_endpoint.c), never through these calls. */
#include "transfer/core/xfer_int.h"

#include <stdlib.h>
#include <string.h>

int xfer_open(xfer_endpoint **out, const xfer_config *cfg, const xfer_manifest *m, xfer_err *err)
{
	if (xfer_ep_open(out, cfg, m, err) != 0) return -1;
	if ((*out)->cfg.coord.rpc && xfer_upd_open(*out, err) != 0) {
		xfer_close(out);
		return -1;
	}
	return 0;
}

int xfer_send(xfer_endpoint *ep, uint64_t version, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_send: NULL endpoint");
	if (ep->cfg.role != XFER_SENDER) return xfer_fail(err, XFER_EINVAL, "xfer_send on a receiver");
	if (ep->upd) return xfer_upd_publish(ep, version, NULL, err);
	return xfer_path_send(ep, version, err);
}

int xfer_publish(xfer_endpoint *ep, uint64_t version, xfer_update_stats *st, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_publish: NULL endpoint");
	if (ep->cfg.role != XFER_SENDER) return xfer_fail(err, XFER_EINVAL, "xfer_publish on a receiver");
	if (ep->upd) return xfer_upd_publish(ep, version, st, err);
	double t0 = xfer_now();
	if (xfer_path_send(ep, version, err) != 0) return -1;
	xfer_update_stats u = { .version = version, .update_seconds = xfer_now() - t0,
				.implementation_seconds = ep->stats.seconds, .wire_bytes = ep->stats.bytes_moved };
	snprintf(u.state, sizeof u.state, "committed");
	if (ep->ops->fan == XFER_FAN_SELF && ep->m->bytes) u.density = (double)ep->stats.bytes_moved / (double)ep->m->bytes;
	ep->update = u;
	if (st) *st = u;
	return 0;
}

int xfer_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_receive: NULL endpoint");
	if (ep->cfg.role != XFER_RECEIVER) return xfer_fail(err, XFER_EINVAL, "xfer_receive on a sender");
	if (ep->upd) return xfer_upd_receive(ep, wait_ms, version, err);
	return xfer_path_receive(ep, wait_ms, version, err);
}

int xfer_rollback(xfer_endpoint *ep, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_rollback: NULL endpoint");
	if (ep->cfg.role != XFER_RECEIVER) return xfer_fail(err, XFER_EINVAL, "xfer_rollback on a sender");
	return xfer_ep_rollback(ep, err);
}

void xfer_abort(xfer_endpoint *ep)
{
	if (!ep) return;
	atomic_store(&ep->user_aborted, 1);
	if (ep->upd) xfer_upd_stop(ep);
	else xfer_ep_abort(ep);
}

void xfer_close(xfer_endpoint **epp)
{
	if (!epp || !*epp) return;
	if ((*epp)->upd) xfer_upd_close(*epp);
	xfer_ep_close(epp);
}
