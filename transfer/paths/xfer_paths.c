/* transfer/paths/xfer_paths.c: the table of data paths, and an endpoint
 * opened on one by name.
 *
 * xfer_ep_open looks the path up by name, asks it whether it can run here
 * (probe), and sets it up; "p2p" is the p2p chooser (xfer_p2p.c: UCX or
 * p2p-tcp, agreed with each peer) where UCX can run, else p2p-tcp, with the
 * reason kept in the endpoint's note.  Every later call goes through the
 * chosen table, so adding a path is one file and one line below.  Above
 * this file: the coordinator (transfer/update/) and the API (xfer_path.c),
 * which adds the coordinator to a coordinated endpoint. */
#include "transfer/core/xfer_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const xfer_path_ops *const paths[] = {
	&xfer_disk_ops, &xfer_tcp_ops, &xfer_ucx_ops, &xfer_rdma_ops, &xfer_bcast_ops, &xfer_bcast_packed_ops,
	&xfer_ipc_ops,
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

const char *const *xfer_path_names(void)
{
	static const char *names[NPATHS + 2];
	if (!names[0]) {
		size_t k = 0;
		names[k++] = "p2p";
		for (size_t i = 0; i < NPATHS; i++) names[k++] = paths[i]->name;
		names[k] = NULL;
	}
	return names;
}

static const xfer_path_ops *lookup(const char *name)
{
	for (size_t i = 0; i < NPATHS; i++)
		if (strcmp(paths[i]->name, name) == 0) return paths[i];
	return NULL;
}

int xfer_probe(const char *path, char *why, size_t n)
{
	if (why && n) why[0] = 0;
	if (path && strcmp(path, "p2p") == 0) return xfer_p2p_ops.probe(why, n);
	const xfer_path_ops *ops = path ? lookup(path) : NULL;
	if (!ops) {
		snprintf(why, n, "unknown data path \"%s\"", path ? path : "(null)");
		return -1;
	}
	return ops->probe(why, n);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int xfer_ep_open(xfer_endpoint **out, const xfer_config *cfg, const xfer_manifest *m, xfer_err *err)
{
	*out = NULL;
	if (!cfg || !m) return xfer_fail(err, XFER_EINVAL, "xfer_open: NULL config or manifest");
	if (cfg->role != XFER_SENDER && cfg->role != XFER_RECEIVER)
		return xfer_fail(err, XFER_EINVAL, "xfer_open: role must be sender or receiver");
	if (cfg->timeout_ms < 0) return xfer_fail(err, XFER_EINVAL, "xfer_open: negative timeout");
	xfer_endpoint *ep = calloc(1, sizeof *ep);
	if (!ep) return xfer_fail(err, XFER_ENOMEM, "xfer_open: out of memory");
	ep->cfg = *cfg;
	if (!ep->cfg.bucket_bytes) ep->cfg.bucket_bytes = XFER_DEFAULT_BUCKET_BYTES;
	if (!ep->cfg.timeout_ms) ep->cfg.timeout_ms = XFER_DEFAULT_TIMEOUT_MS;
	if (ep->cfg.p2p.streams <= 0) ep->cfg.p2p.streams = xfer_p2p_default_streams();
	if (ep->cfg.p2p.streams > 64) ep->cfg.p2p.streams = 64;
	ep->s_dir = dup_or_null(cfg->disk.dir);
	ep->s_rid = dup_or_null(cfg->disk.receiver_id);
	for (char *p = ep->s_rid; p && *p; p++)
		if (*p == '/') *p = '-'; /* a member's name, "job/engine-3", is one file under receivers/ */
	ep->s_host = dup_or_null(cfg->p2p.host ? cfg->p2p.host : "127.0.0.1");
	ep->s_jdir = dup_or_null(cfg->journal_dir);
	ep->s_rpc = dup_or_null(cfg->coord.rpc);
	ep->s_job = dup_or_null(cfg->coord.job ? cfg->coord.job : "");
	ep->s_member = dup_or_null(cfg->coord.member ? cfg->coord.member : "");
	ep->cfg.disk.dir = ep->s_dir;
	ep->cfg.disk.receiver_id = ep->s_rid;
	ep->cfg.p2p.host = ep->s_host;
	ep->cfg.journal_dir = ep->s_jdir;
	ep->cfg.coord.rpc = ep->s_rpc;
	ep->cfg.coord.job = ep->s_job;
	ep->cfg.coord.member = ep->s_member;
	ep->m = m;
	ep->shared_lfd = ep->pending_ctl = -1;
	if (cfg->role == XFER_RECEIVER && !(ep->gate = xfer_gate_new())) {
		xfer_fail(err, XFER_ENOMEM, "xfer_open: out of memory");
		goto err;
	}
	const char *name = cfg->path ? cfg->path : "(null)";
	char why[256] = "";
	if (strcmp(name, "p2p") == 0) {
		if (xfer_ucx_ops.probe(why, sizeof why) == 0) {
			ep->ops = &xfer_p2p_ops;
		} else {
			ep->ops = &xfer_tcp_ops;
			snprintf(ep->note, sizeof ep->note, "p2p-ucx unavailable (%s): using p2p-tcp", why);
		}
	} else {
		ep->ops = lookup(name);
	}
	if (!ep->ops) {
		xfer_fail(err, XFER_EINVAL, "unknown data path \"%s\" (disk-delta, p2p, p2p-tcp, p2p-ucx, p2p-rdma, broadcast, broadcast_packed, colocated)",
			  name);
		goto err;
	}
	if (ep->ops->probe(why, sizeof why) != 0) {
		xfer_fail(err, XFER_EUNAVAIL, "%s unavailable: %s", ep->ops->name, why);
		goto err;
	}
	if (xfer_buckets(m, ep->cfg.bucket_bytes, &ep->buckets, &ep->nbuckets, err) != 0) goto err;
	ep->offsets = xfer_manifest_offsets(m);
	if (!ep->offsets) { xfer_fail(err, XFER_ENOMEM, "xfer_open: out of memory"); goto err; }
	if (ep->cfg.coord.rpc) {
		/* a sender on a peer path learns its receivers (NCCL: its ranks)
		 * from the head at each version; so does an NCCL receiver.  A
		 * colocated sender hands its handles to the head instead (Begin.setup) */
		xfer_fan fan = ep->ops->fan;
		ep->fanout = cfg->role == XFER_SENDER ? fan == XFER_FAN_PEERS || fan == XFER_FAN_BCAST
						      : fan == XFER_FAN_BCAST;
		ep->keep_listener = 1;
		ep->commit_later = 1;
		ep->setup_blobs = 1;
	}
	if (!ep->fanout && ep->ops->setup(ep, err) != 0) {
		xfer_err_prefix(err, "%s setup", ep->ops->name);
		ep->ops = NULL;
		goto err;
	}
	*out = ep;
	return 0;
err:
	xfer_ep_close(&ep);
	return -1;
}

void xfer_ep_close(xfer_endpoint **epp)
{
	if (!epp || !*epp) return;
	xfer_endpoint *ep = *epp;
	if (ep->ops && ep->ops->teardown && !ep->fanout) ep->ops->teardown(ep);
	if (ep->pending_ctl >= 0) close(ep->pending_ctl);
	xfer_gate_free(&ep->gate);
	free(ep->s_rpc);
	free(ep->s_job);
	free(ep->s_member);
	free(ep->buckets);
	free(ep->offsets);
	free(ep->s_dir);
	free(ep->s_rid);
	free(ep->s_host);
	free(ep->s_jdir);
	free(ep);
	*epp = NULL;
}

