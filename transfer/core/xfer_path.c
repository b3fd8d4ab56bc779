/* transfer/core/xfer_path.c: the endpoint and the table of data paths.
 *
 * xfer_open looks the path up by name, asks it whether it can run here
 * (probe), and sets it up; "p2p" is the p2p chooser (xfer_p2p.c: UCX or
 * p2p-tcp, agreed with each peer) where UCX can run, else p2p-tcp, with the
 * reason kept in the endpoint's note.  Every later call goes through the
 * chosen table, so adding a path is one file and one line below.
 * Coordinated endpoints (cfg.coord.rpc) hand send and receive to
 * xfer_coord.c, which drives the same tables through xfer_path_send and
 * xfer_path_receive. */
#include "transfer/update/xfer_coord.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

xfer_test_hooks xfer_hooks;

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

int xfer_open(xfer_endpoint **out, const xfer_config *cfg, const xfer_manifest *m, xfer_err *err)
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
		int nccl = ep->ops == &xfer_bcast_ops || ep->ops == &xfer_bcast_packed_ops;
		ep->fanout = cfg->role == XFER_SENDER ? ep->ops != &xfer_disk_ops && ep->ops != &xfer_ipc_ops : nccl;
		ep->keep_listener = 1;
		ep->coord_record = 1;
	}
	if (!ep->fanout && ep->ops->setup(ep, err) != 0) {
		xfer_err_prefix(err, "%s setup", ep->ops->name);
		ep->ops = NULL;
		goto err;
	}
	if (ep->cfg.coord.rpc && xfer_coord_open(ep, err) != 0) goto err;
	*out = ep;
	return 0;
err:
	xfer_close(&ep);
	return -1;
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

void xfer_peer_close(xfer_endpoint **sub) { xfer_sub_close(sub); }

int xfer_check_aborted(xfer_endpoint *ep, xfer_err *err)
{
	if (atomic_load(&ep->aborted)) return xfer_fail(err, XFER_EABORTED, "transfer aborted");
	return 0;
}

int xfer_send(xfer_endpoint *ep, uint64_t version, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_send: NULL endpoint");
	if (ep->cfg.role != XFER_SENDER) return xfer_fail(err, XFER_EINVAL, "xfer_send on a receiver");
	if (ep->coord) return xfer_coord_publish(ep, version, NULL, err);
	return xfer_path_send(ep, version, err);
}

int xfer_publish(xfer_endpoint *ep, uint64_t version, xfer_update_stats *st, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_publish: NULL endpoint");
	if (ep->cfg.role != XFER_SENDER) return xfer_fail(err, XFER_EINVAL, "xfer_publish on a receiver");
	if (ep->coord) return xfer_coord_publish(ep, version, st, err);
	double t0 = xfer_now();
	if (xfer_path_send(ep, version, err) != 0) return -1;
	xfer_update_stats u = { .version = version, .update_seconds = xfer_now() - t0,
				.implementation_seconds = ep->stats.seconds, .wire_bytes = ep->stats.bytes_moved };
	snprintf(u.state, sizeof u.state, "committed");
	if (ep->ops == &xfer_disk_ops && ep->m->bytes) u.density = (double)ep->stats.bytes_moved / (double)ep->m->bytes;
	ep->update = u;
	if (st) *st = u;
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

int xfer_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_receive: NULL endpoint");
	if (ep->cfg.role != XFER_RECEIVER) return xfer_fail(err, XFER_EINVAL, "xfer_receive on a sender");
	if (ep->coord) return xfer_coord_receive(ep, wait_ms, version, err);
	return xfer_path_receive(ep, wait_ms, version, err);
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

int xfer_rollback(xfer_endpoint *ep, xfer_err *err)
{
	if (!ep) return xfer_fail(err, XFER_EINVAL, "xfer_rollback: NULL endpoint");
	if (ep->cfg.role != XFER_RECEIVER) return xfer_fail(err, XFER_EINVAL, "xfer_rollback on a sender");
	if (!ep->undo_ready || !ep->ops || !ep->ops->rollback || ep->fanout)
		return xfer_fail(err, XFER_EUNAVAIL, "%s: no undo journal of the last receive (the first version, "
			       "keep_previous off, rolled back already, or a path without one)", xfer_endpoint_path(ep));
	ep->undo_ready = 0; /* one undo per journal, whatever happens */
	if (ep->ops->rollback(ep, err) != 0) return -1;
	ep->stats.version = ep->undo_to;
	return 0;
}

void xfer_abort(xfer_endpoint *ep)
{
	if (!ep) return;
	atomic_store(&ep->user_aborted, 1);
	xfer_abort_data(ep);
}

void xfer_abort_data(xfer_endpoint *ep)
{
	if (!ep) return;
	atomic_store(&ep->aborted, 1);
	if (ep->ops && ep->ops->abort && !ep->fanout) ep->ops->abort(ep);
	if (ep->coord) xfer_coord_abort(ep);
}

void xfer_rearm(xfer_endpoint *ep)
{
	if (ep && !atomic_load(&ep->user_aborted)) atomic_store(&ep->aborted, 0);
}

void xfer_close(xfer_endpoint **epp)
{
	if (!epp || !*epp) return;
	xfer_endpoint *ep = *epp;
	if (ep->coord) xfer_coord_close(ep);
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
