/* transfer/core/xfer_endpoint.c: the endpoint below the public API.
 *
 * What the data paths, the update client (transfer/update/) and the API
 * (xfer_path.c) share, at the bottom of libskein's files so that none of
 * them calls up (tests/agent/layers_test.sh): the config's defaults,
 * sub-endpoints (the p2p chooser's, a coordinated sender's peers), a
 * path's send and receive with the bookkeeping around them, its abort and
 * its undo, and the getters.  Opening by name is one level up (the table,
 * paths/xfer_paths.c); the coordinator one above that; xfer_path.c on top. */
#include "transfer/core/xfer_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

xfer_test_hooks xfer_hooks;

void xfer_config_init(xfer_config *c)
{
	memset(c, 0, sizeof *c);
	c->path = "disk-delta";
	c->bucket_bytes = XFER_DEFAULT_BUCKET_BYTES;
	c->timeout_ms = XFER_DEFAULT_TIMEOUT_MS;
	c->keep_previous = 1;
	c->disk.encoding = XFER_ENC_OVERWRITE;
	c->disk.full_every = 10;
	c->disk.gc = 1;
	c->p2p.host = "127.0.0.1";
	c->p2p.streams = xfer_p2p_default_streams();
	c->nccl.nranks = 1;
	c->verify_device = 1;
}

int xfer_p2p_default_streams(void)
{
	long c = sysconf(_SC_NPROCESSORS_ONLN) / 2;
	return c < 4 ? 4 : c > 8 ? 8 : (int)c;
}

/* A sub-endpoint sharing the parent's config (strings too), manifest and
 * offsets; host, when not NULL, is its own copy (a coordinated sender's peer). */
static xfer_endpoint *sub_open(xfer_endpoint *parent, const xfer_path_ops *ops, int shared_lfd, int p2p_auto,
			       const char *host, int port, xfer_err *err)
{
	xfer_endpoint *ep = calloc(1, sizeof *ep);
	if (!ep) { xfer_fail(err, XFER_ENOMEM, "out of memory"); return NULL; }
	ep->cfg = parent->cfg;
	ep->m = parent->m;
	ep->buckets = parent->buckets;
	ep->nbuckets = parent->nbuckets;
	ep->offsets = parent->offsets;
	ep->shared_lfd = shared_lfd;
	ep->pending_ctl = -1;
	ep->gate = parent->gate; /* the parent's to free */
	ep->has_ticket = parent->has_ticket;
	ep->ticket = parent->ticket;
	ep->p2p_auto = p2p_auto;
	ep->ops = ops;
	if (host) {
		if (!(ep->s_host = strdup(host))) {
			free(ep);
			xfer_fail(err, XFER_ENOMEM, "out of memory");
			return NULL;
		}
		ep->cfg.p2p.host = ep->s_host;
		ep->cfg.p2p.port = port;
	}
	if (ops->setup(ep, err) != 0) {
		xfer_err_prefix(err, "%s setup", ops->name);
		xfer_sub_close(&ep);
		return NULL;
	}
	return ep;
}

xfer_endpoint *xfer_sub_open(xfer_endpoint *parent, const xfer_path_ops *ops, int shared_lfd, int p2p_auto,
			     xfer_err *err)
{
	return sub_open(parent, ops, shared_lfd, p2p_auto, NULL, 0, err);
}

xfer_endpoint *xfer_peer_open(xfer_endpoint *parent, const char *host, int port, xfer_err *err)
{
	return sub_open(parent, parent->ops, -1, 0, host, port, err);
}

void xfer_sub_close(xfer_endpoint **epp)
{
	if (!epp || !*epp) return;
	xfer_endpoint *ep = *epp;
	if (ep->ops && ep->ops->teardown) ep->ops->teardown(ep);
	if (ep->pending_ctl >= 0) close(ep->pending_ctl);
	free(ep->s_host); /* a peer's own; NULL for the chooser's subs */
	free(ep);
	*epp = NULL;
}

int xfer_check_aborted(xfer_endpoint *ep, xfer_err *err)
{
	if (atomic_load(&ep->aborted)) return xfer_fail(err, XFER_EABORTED, "transfer aborted");
	return 0;
}

int xfer_path_send(xfer_endpoint *ep, uint64_t version, xfer_err *err)
{
	if (version == 0 || version <= ep->stats.version)
		return xfer_fail(err, XFER_EINVAL, "version %llu: versions start at 1 and increase (last %llu)",
				 (unsigned long long)version, (unsigned long long)ep->stats.version);
	if (xfer_check_aborted(ep, err) != 0) return -1;
	double t0 = xfer_now();
	ep->stats.bytes_moved = 0;
	ep->stats.journal_bytes = 0;
	ep->stats.journal_seconds = 0;
	ep->stats.undo_seconds = 0;
	ep->stats.data_seconds = 0;
	ep->root_version = 0; /* the path sets it (xfer_root_keep) */
	if (ep->ops->send(ep, version, err) != 0) {
		xfer_err_prefix(err, "%s send v%llu", ep->ops->name, (unsigned long long)version);
		return -1;
	}
	ep->stats.version = version;
	ep->stats.seconds = xfer_now() - t0;
	if (ep->stats.data_seconds == 0) ep->stats.data_seconds = ep->stats.seconds;
	return 0;
}

int xfer_path_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	if (xfer_check_aborted(ep, err) != 0) return -1;
	double t0 = xfer_now();
	uint64_t v = 0, had = ep->stats.version;
	int had_undo = ep->undo_ready;
	ep->undo_ready = 0; /* the path sets it when this receive journals */
	ep->stats.bytes_moved = 0;
	ep->stats.journal_bytes = 0;
	ep->stats.journal_seconds = 0;
	ep->stats.undo_seconds = 0;
	ep->stats.versions_applied = 0;
	ep->stats.full_loaded = 0;
	ep->stats.data_seconds = 0;
	ep->root_version = 0; /* the path sets it (xfer_root_keep) */
	if (ep->ops->receive(ep, wait_ms, &v, err) != 0) {
		/* nothing arrived: the last receive's journal is still whole */
		if (err && err->code == XFER_ENOVERSION) ep->undo_ready = had_undo;
		else xfer_err_prefix(err, "%s receive", ep->ops->name);
		return -1;
	}
	if (ep->undo_ready) ep->undo_to = had;
	ep->stats.version = v;
	ep->stats.seconds = xfer_now() - t0;
	if (ep->stats.data_seconds == 0) ep->stats.data_seconds = ep->stats.seconds;
	if (version) *version = v;
	return 0;
}

/* The data path's undo of the last receive (xfer_rollback without the
 * argument checks). */
int xfer_ep_rollback(xfer_endpoint *ep, xfer_err *err)
{
	if (!ep->undo_ready || !ep->ops || !ep->ops->rollback || ep->fanout)
		return xfer_fail(err, XFER_EUNAVAIL, "%s: no undo journal of the last receive (the first version, "
			       "keep_previous off, rolled back already, or a path without one)", xfer_endpoint_path(ep));
	ep->undo_ready = 0; /* one undo per journal, whatever happens */
	if (ep->ops->rollback(ep, err) != 0) return -1;
	ep->stats.version = ep->undo_to;
	return 0;
}

void xfer_ep_abort(xfer_endpoint *ep)
{
	if (!ep) return;
	atomic_store(&ep->aborted, 1);
	if (ep->ops && ep->ops->abort && !ep->fanout) ep->ops->abort(ep);
}

void xfer_rearm(xfer_endpoint *ep)
{
	if (ep && !atomic_load(&ep->user_aborted)) atomic_store(&ep->aborted, 0);
}

const char *xfer_endpoint_path(const xfer_endpoint *ep)
{
	return !ep || !ep->ops ? "" : ep->run_path ? ep->run_path : ep->ops->name;
}
const char *xfer_endpoint_note(const xfer_endpoint *ep) { return ep ? ep->note : ""; }
int xfer_endpoint_port(const xfer_endpoint *ep) { return ep ? ep->port : 0; }
xfer_stats xfer_endpoint_stats(const xfer_endpoint *ep)
{
	xfer_stats z = { 0 };
	return ep ? ep->stats : z;
}
xfer_update_stats xfer_endpoint_update(const xfer_endpoint *ep)
{
	xfer_update_stats z = { 0 };
	return ep ? ep->update : z;
}
