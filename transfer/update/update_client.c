/* transfer/update/update_client.c: the coordinated sender (xfer_publish) and what the
 * engine loop shares with it: calls that ask again after a lost answer, the
 * heartbeat thread.  The protocol: docs/updates.md.
 *
 * publish(v): begin (the manifest's digest; NCCL: the unique id) -> the
 * head's BeginReply (participants, watchdog); move the bytes while a
 * heartbeat thread asks `outcome` every 500 ms and stops the data path at
 * once when the head aborted the update; then done (our figures, the peers
 * we could not serve) -> the head's Outcome at commit or abort.  A lost
 * answer (the connection broke, the head changed, an error saying retry)
 * is asked again every 50 ms up to the watchdog, done too: it is
 * idempotent on the head, and a new head needs it to finish the update it
 * adopted (the record in the replicated state is the truth, not our
 * connection).
 *
 * Data paths: disk-delta writes the version as it does alone (an aborted
 * version is removed and the next one is full).  p2p, p2p-tcp and p2p-ucx
 * keep one sender sub-endpoint per participant (its session
 * kept across versions, closed when the participant leaves the list) and
 * serve all of them in parallel threads: one receiver's failure is reported
 * in Done.failed and the head drops or aborts as the job says, the others
 * go on.  Colocated: the handoff (CUDA IPC handles, where each tensor lies
 * in them, the tensors' sums) travels in Begin.setup through the agents to
 * the engines, which map and copy from it during their receive; the sender
 * moves nothing and holds its weights still until the verdict.
 * NCCL (broadcast, broadcast_packed): a communicator of the sender
 * (rank 0) and the participants (ranks from the reply), made again with a
 * fresh unique id whenever the participants change; built, not run here
 * (no GPU on the build machine). */
#include "transfer/update/update.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transfer/core/xfer_hash.h"

void xfer_upd_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int xfer_upd_open(xfer_endpoint *ep, xfer_err *err)
{
	if (!ep->cfg.coord.job || !*ep->cfg.coord.job || !ep->cfg.coord.member || !*ep->cfg.coord.member)
		return xfer_fail(err, XFER_EINVAL, "coordinated (coord.rpc %s) but coord.job or coord.member is empty",
				 ep->cfg.coord.rpc);
	xfer_upd_client *c = calloc(1, sizeof *c);
	if (!c) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	pthread_mutex_init(&c->mu, NULL);
	ep->upd = c;
	if (!(c->agent = xfer_agent_new(ep->cfg.coord.rpc, err))) return -1;
	if (ep->cfg.role == XFER_RECEIVER && !ep->fanout && ep->port)
		snprintf(c->endpoint, sizeof c->endpoint, "%s:%d", ep->cfg.p2p.host, ep->port);
	if (ep->cfg.role == XFER_RECEIVER) ep->journal_first = 1; /* issue 23: a forged first version is undone */
	return 0;
}

void xfer_upd_close(xfer_endpoint *ep)
{
	xfer_upd_client *c = ep->upd;
	if (!c) return;
	for (size_t i = 0; i < c->npeers; i++) xfer_sub_close(&c->peers[i].sub);
	free(c->peers);
	xfer_sub_close(&c->nccl);
	xfer_ep_close(&c->side);
	xfer_agent_free(&c->agent);
	pthread_mutex_destroy(&c->mu);
	free(c);
	ep->upd = NULL;
}

void xfer_upd_abort(xfer_endpoint *ep)
{
	xfer_upd_client *c = ep->upd;
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < c->npeers; i++)
		if (c->peers[i].sub) xfer_ep_abort(c->peers[i].sub);
	if (c->nccl) xfer_ep_abort(c->nccl);
	if (c->side) xfer_ep_abort(c->side);
	pthread_mutex_unlock(&c->mu);
}

void xfer_upd_stop(xfer_endpoint *ep)
{
	xfer_ep_abort(ep);
	if (ep->upd) xfer_upd_abort(ep);
}

/* ---- calls ---- */

int xfer_upd_call(xfer_agent *a, const char *verb, const uint8_t *req, size_t len, int call_ms, double deadline,
		    xfer_upd_parse_fn parse, void *out, xfer_err *err)
{
	for (;;) {
		uint8_t *ans = NULL;
		size_t alen = 0;
		int left = (int)((deadline - xfer_now()) * 1e3);
		int ms = left < call_ms ? left : call_ms;
		if (xfer_agent_call(a, verb, req, len, ms > 0 ? ms : 1, &ans, &alen, err) == 0) {
			int rc = parse ? parse(ans, alen, out, err) : 0;
			free(ans);
			return rc;
		}
		if (err->code != XFER_EPEER && err->code != XFER_ETIMEOUT) return -1;
		if (xfer_now() + XFER_UPD_POLL_MS / 1e3 >= deadline) return -1;
		xfer_upd_sleep_ms(XFER_UPD_POLL_MS);
	}
}

static int parse_outcome(const uint8_t *p, size_t n, void *out, xfer_err *err)
{
	return xfer_upd_outcome_parse(p, n, out, err);
}

static int parse_begin(const uint8_t *p, size_t n, void *out, xfer_err *err)
{
	return xfer_upd_begin_reply_parse(p, n, out, err);
}

int xfer_job_newest(xfer_endpoint *ep, uint64_t *newest, xfer_err *err)
{
	if (!ep || !ep->upd) return xfer_fail(err, XFER_EINVAL, "the endpoint is not coordinated (not in a job)");
	size_t len;
	uint8_t *q = xfer_upd_query_pack(ep->cfg.coord.job, 0, "", &len);
	if (!q) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	xfer_upd_outcome o;
	int rc = xfer_upd_call(((xfer_upd_client *)ep->upd)->agent, "outcome", q, len, XFER_UPD_CALL_MS,
				 xfer_now() + ep->cfg.timeout_ms / 1e3, parse_outcome, &o, err);
	free(q);
	if (rc == 0) *newest = o.version;
	return rc;
}

static int final_state(const xfer_upd_outcome *o)
{
	return o->state == XFER_UPD_COMMITTED || o->state == XFER_UPD_ABORTED;
}

int xfer_upd_aborted(xfer_agent *a, const uint8_t *q, size_t qlen, uint64_t v, char *reason, size_t n)
{
	xfer_upd_outcome o;
	xfer_err e;
	uint8_t *ans = NULL;
	size_t alen;
	int aborted = xfer_agent_call(a, "outcome", q, qlen, XFER_UPD_CALL_MS, &ans, &alen, &e) == 0 &&
		      xfer_upd_outcome_parse(ans, alen, &o, &e) == 0 && o.version == v && o.state == XFER_UPD_ABORTED;
	free(ans);
	if (aborted) snprintf(reason, n, "%s", o.reason);
	return aborted;
}

/* ---- the heartbeat ---- */

struct xfer_heartbeat {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, aborted;
	char reason[512];
	xfer_agent *agent;
	uint8_t *query;
	size_t qlen;
	uint64_t version;
	xfer_endpoint *const *eps;
	size_t neps;
};

static void *heartbeat_main(void *arg)
{
	xfer_heartbeat *h = arg;
	pthread_mutex_lock(&h->mu);
	while (!h->stop && !h->aborted) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += XFER_UPD_HEARTBEAT_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&h->cv, &h->mu, &ts);
		if (h->stop) break;
		pthread_mutex_unlock(&h->mu);
		char reason[sizeof h->reason];
		int aborted = xfer_upd_aborted(h->agent, h->query, h->qlen, h->version, reason, sizeof reason);
		pthread_mutex_lock(&h->mu);
		if (aborted && !h->stop) {
			h->aborted = 1;
			memcpy(h->reason, reason, sizeof h->reason);
			for (size_t i = 0; i < h->neps; i++) xfer_upd_stop(h->eps[i]);
		}
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void heartbeat_free(xfer_heartbeat *h)
{
	xfer_agent_free(&h->agent);
	free(h->query);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h);
}

xfer_heartbeat *xfer_heartbeat_start(const char *rpc, const char *job, const char *member, uint64_t v,
				     xfer_endpoint *const *eps, size_t neps)
{
	xfer_heartbeat *h = calloc(1, sizeof *h);
	if (!h) return NULL;
	xfer_err e;
	h->version = v;
	h->eps = eps;
	h->neps = neps;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	if (!(h->agent = xfer_agent_new(rpc, &e)) || !(h->query = xfer_upd_query_pack(job, v, member, &h->qlen)) ||
	    pthread_create(&h->th, NULL, heartbeat_main, h) != 0) {
		/* no heartbeat: the watchdog still ends the update, only later */
		heartbeat_free(h);
		return NULL;
	}
	return h;
}

int xfer_heartbeat_stop(xfer_heartbeat **hp, char *reason, size_t n)
{
	xfer_heartbeat *h = *hp;
	if (!h) return 0;
	pthread_mutex_lock(&h->mu);
	h->stop = 1;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->th, NULL);
	int aborted = h->aborted;
	if (aborted && reason) snprintf(reason, n, "%s", h->reason);
	heartbeat_free(h);
	*hp = NULL;
	return aborted;
}

/* ---- the sender's peers ---- */

/* "host:port" (IPv4 host). */
static int split_endpoint(const char *ep, char *host, size_t n, int *port)
{
	const char *colon = strrchr(ep, ':');
	if (!colon || colon == ep || (size_t)(colon - ep) >= n) return -1;
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 1 || p > 65535) return -1;
	memcpy(host, ep, (size_t)(colon - ep));
	host[colon - ep] = 0;
	*port = (int)p;
	return 0;
}

/* Makes the peer list the reply's: new participants get an entry (their
 * sub-endpoint opens when served), those that left are closed. */
static int sync_peers(xfer_upd_client *c, const xfer_upd_begin_reply *r, xfer_err *err)
{
	for (size_t i = 0; i < c->npeers; i++) c->peers[i].in_reply = 0;
	for (size_t k = 0; k < r->npeers; k++) {
		const xfer_upd_peer *q = &r->peers[k];
		size_t i = 0;
		while (i < c->npeers && strcmp(c->peers[i].member, q->member) != 0) i++;
		if (i == c->npeers) {
			upd_peer *np = realloc(c->peers, (c->npeers + 1) * sizeof *np);
			if (!np) return xfer_fail(err, XFER_ENOMEM, "out of memory");
			pthread_mutex_lock(&c->mu);
			c->peers = np;
			memset(&c->peers[i], 0, sizeof c->peers[i]);
			snprintf(c->peers[i].member, sizeof c->peers[i].member, "%s", q->member);
			c->npeers++;
			pthread_mutex_unlock(&c->mu);
		}
		upd_peer *p = &c->peers[i];
		if (strcmp(p->endpoint, q->endpoint) != 0) { /* a restarted engine listens elsewhere */
			pthread_mutex_lock(&c->mu);
			xfer_sub_close(&p->sub);
			pthread_mutex_unlock(&c->mu);
			snprintf(p->endpoint, sizeof p->endpoint, "%s", q->endpoint);
		}
		p->in_reply = 1;
		p->failed = 0;
		p->wire = 0;
		memset(&p->err, 0, sizeof p->err);
	}
	pthread_mutex_lock(&c->mu);
	size_t k = 0;
	for (size_t i = 0; i < c->npeers; i++) {
		if (!c->peers[i].in_reply) {
			xfer_sub_close(&c->peers[i].sub);
			continue;
		}
		c->peers[k++] = c->peers[i];
	}
	c->npeers = k;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

typedef struct {
	xfer_endpoint *ep;
	upd_peer *p;
	uint64_t v;
} serve_arg;

static void *serve_peer(void *arg)
{
	serve_arg *a = arg;
	upd_peer *p = a->p;
	xfer_upd_client *c = a->ep->upd;
	if (!p->sub) {
		char host[XFER_UPD_STR];
		int port;
		if (split_endpoint(p->endpoint, host, sizeof host, &port) != 0) {
			p->failed = 1;
			xfer_fail(&p->err, XFER_EINVAL, "its endpoint \"%s\" is not host:port", p->endpoint);
			return NULL;
		}
		xfer_endpoint *sub = xfer_peer_open(a->ep, host, port, &p->err);
		if (!sub) {
			p->failed = 1;
			return NULL;
		}
		pthread_mutex_lock(&c->mu);
		p->sub = sub;
		if (atomic_load(&a->ep->aborted)) xfer_ep_abort(sub); /* the head aborted while it opened */
		pthread_mutex_unlock(&c->mu);
	}
	p->sub->has_ticket = a->ep->has_ticket; /* this version's, from the head */
	p->sub->ticket = a->ep->ticket;
	if (xfer_path_send(p->sub, a->v, &p->err) != 0) p->failed = 1;
	else p->wire = p->sub->stats.bytes_moved;
	return NULL;
}

/* Serves every participant in parallel; 0 even when some failed (their
 * errors are in c->peers). */
static void send_peers(xfer_endpoint *ep, uint64_t v)
{
	xfer_upd_client *c = ep->upd;
	pthread_t *th = calloc(c->npeers + 1, sizeof *th);
	serve_arg *args = calloc(c->npeers + 1, sizeof *args);
	int *started = calloc(c->npeers + 1, sizeof *started);
	for (size_t i = 0; th && args && started && i < c->npeers; i++) {
		args[i] = (serve_arg){ ep, &c->peers[i], v };
		started[i] = pthread_create(&th[i], NULL, serve_peer, &args[i]) == 0;
		if (!started[i]) {
			c->peers[i].failed = 1;
			xfer_fail(&c->peers[i].err, XFER_EIO, "no thread to serve it");
		}
	}
	for (size_t i = 0; th && args && started && i < c->npeers; i++)
		if (started[i]) pthread_join(th[i], NULL);
	if (!th || !args || !started)
		for (size_t i = 0; i < c->npeers; i++) {
			c->peers[i].failed = 1;
			xfer_fail(&c->peers[i].err, XFER_ENOMEM, "out of memory");
		}
	for (size_t i = 0; i < c->npeers; i++)
		if (c->peers[i].sub) xfer_rearm(c->peers[i].sub);
	free(th);
	free(args);
	free(started);
}

static uint64_t peer_set_hash(const xfer_upd_begin_reply *r)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ r->npeers;
	for (size_t i = 0; i < r->npeers; i++) {
		h ^= XXH3_64bits(r->peers[i].member, strlen(r->peers[i].member)) + (uint64_t)r->peers[i].rank;
		h *= 0xbf58476d1ce4e5b9ull;
	}
	return h;
}

/* NCCL: the communicator for the reply's participants (rank 0 is ours).
 * The id in Begin was the current communicator's when there was one; when
 * the participants changed under it this version cannot run (-1: its
 * reason) and the next one begins with a fresh id. */
static int nccl_ready(xfer_endpoint *ep, const xfer_upd_begin_reply *r, int fresh, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	uint64_t set = peer_set_hash(r);
	if (!fresh && c->nccl && set == c->nccl_set) return 0;
	pthread_mutex_lock(&c->mu);
	xfer_sub_close(&c->nccl);
	pthread_mutex_unlock(&c->mu);
	if (!fresh)
		return xfer_fail(err, XFER_EPEER, "NCCL: the participants changed; the next version sets up a new "
				 "communicator");
	memcpy(ep->cfg.nccl.id, c->nccl_id, XFER_NCCL_ID_BYTES);
	ep->cfg.nccl.nranks = (int)r->npeers + 1;
	ep->cfg.nccl.rank = 0;
	ep->cfg.nccl.root = 0;
	xfer_endpoint *sub = xfer_sub_open(ep, ep->ops, -1, 0, err);
	if (!sub) return -1;
	pthread_mutex_lock(&c->mu);
	c->nccl = sub;
	c->nccl_set = set;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int xfer_upd_nccl(const xfer_endpoint *ep)
{
	return ep->ops->fan == XFER_FAN_BCAST;
}

xfer_timings xfer_upd_timings(const xfer_stats *st)
{
	return (xfer_timings){ st->data_seconds, st->hash_seconds, st->journal_seconds, st->undo_seconds };
}

const char *xfer_upd_journal_where(const xfer_stats *st)
{
	uint64_t dev = st->device_journal_peak, spill = st->device_journal_spilled;
	if (dev || spill) return dev && spill ? "device+pinned" : dev ? "device" : "pinned";
	return st->journal_bytes ? "host" : "none";
}

/* Each figure of *to the larger of its own and from's. */
static void timings_max(xfer_timings *to, xfer_timings from)
{
	if (from.data_seconds > to->data_seconds) to->data_seconds = from.data_seconds;
	if (from.hash_seconds > to->hash_seconds) to->hash_seconds = from.hash_seconds;
	if (from.journal_seconds > to->journal_seconds) to->journal_seconds = from.journal_seconds;
	if (from.undo_seconds > to->undo_seconds) to->undo_seconds = from.undo_seconds;
}

/* ---- publish ----
 *
 * xfer_upd_publish runs four steps over one pub_state: begin (the
 * path's setup blob, the head's reply), move (the bytes, as the path's fan
 * says, under the heartbeat), done (our figures; the head's verdict) and
 * the record of it (ep->update; an aborted version dropped). */

typedef struct {
	uint64_t v;
	double t0;
	int to;                    /* the watchdog: ours, or the head's */
	int fresh;                 /* NCCL: a new communicator for this version */
	xfer_upd_begin b;
	xfer_upd_begin_reply r;
	unsigned char *setup;      /* the begin's setup blob when the path made one (ours to free) */
	double setup_s;            /* its making is part of the data path's time */
	/* what the move did */
	int ok;
	xfer_err derr;
	double impl, density;
	uint64_t wire;
	xfer_timings split;
	const char **fm, **fr;     /* the peers we could not serve: Done.failed */
	int *fv;
	size_t nf;
	const unsigned char *root; /* the root of the sums we sent (xfer_root.c): Done.root */
	int no_root;               /* a peer served over a path that keeps none */
	int head_aborted;
	char hreason[512];
	xfer_upd_outcome o;
} pub_state;

/* The path's setup blob for Begin.setup: a fresh NCCL id when the
 * communicator is to be made again, a colocated sender's handoff. */
static int pub_setup(xfer_endpoint *ep, pub_state *P, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	const xfer_path_ops *ops = ep->ops;
	if (!ops->begin_setup) return 0;
	if (ops->fan == XFER_FAN_BCAST) {
		if (!c->nccl) {
			unsigned char *id = NULL;
			size_t n = 0;
			if (ops->begin_setup(ep, P->v, &id, &n, err) != 0) return -1;
			if (n != XFER_NCCL_ID_BYTES) {
				free(id);
				return xfer_fail(err, XFER_EINVAL, "%s: a setup of %zu bytes, not an NCCL id", ops->name, n);
			}
			memcpy(c->nccl_id, id, n);
			free(id);
			P->fresh = 1;
		}
		P->b.setup = c->nccl_id;
		P->b.setup_len = XFER_NCCL_ID_BYTES;
		return 0;
	}
	/* colocated: no bytes move here; the engines copy from our memory
	 * with what the handoff says, and we hold it still until the verdict */
	double th = xfer_now();
	ep->root_version = 0;
	if (ops->begin_setup(ep, P->v, &P->setup, &P->b.setup_len, err) != 0) return -1;
	P->setup_s = xfer_now() - th;
	P->b.setup = P->setup;
	if (ep->root_version == P->v) P->b.root = ep->root; /* the handoff's sums: known before any copy */
	return 0;
}

/* begin: the head opens v and answers with the participants. */
static int pub_begin(xfer_endpoint *ep, pub_state *P, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	const char *job = ep->cfg.coord.job, *me = ep->cfg.coord.member;
	if (xfer_manifest_digest(ep->m, P->b.digest, err) != 0 || pub_setup(ep, P, err) != 0) return -1;
	size_t len;
	uint8_t *req = xfer_upd_begin_pack(&P->b, &len);
	if (!req) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	int rc = xfer_upd_call(c->agent, "begin", req, len, XFER_UPD_CALL_MS, P->t0 + P->to / 1e3, parse_begin,
				 &P->r, err);
	free(req);
	if (rc != 0) {
		if (err->code != XFER_EINVAL) {
			/* the head may have opened v and its answer was lost or
			 * spoiled: say at once that this sender gives it up */
			xfer_upd_done d = { .job = job, .member = me, .version = P->v, .reason = err->msg };
			xfer_err ignored;
			uint8_t *out = NULL;
			size_t olen;
			if ((req = xfer_upd_done_pack(&d, &len)) &&
			    xfer_agent_call(c->agent, "done", req, len, XFER_UPD_CALL_MS, &out, &olen, &ignored) == 0)
				free(out);
			free(req);
		}
		xfer_err_prefix(err, "version %llu: begin", (unsigned long long)P->v);
		return -1;
	}
	if (P->r.timeout_ms > 0) P->to = P->r.timeout_ms;
	/* p2p: our hellos carry the head's ticket for v; receivers take no other */
	xfer_p2p_ticket(ep, job, P->v, P->r.has_nonce ? P->r.nonce : NULL, NULL);
	return 0;
}

/* The peers' results: wire bytes, the slowest split, the root, the failed. */
static void pub_peers(xfer_endpoint *ep, pub_state *P)
{
	xfer_upd_client *c = ep->upd;
	send_peers(ep, P->v);
	P->fm = calloc(c->npeers + 1, sizeof *P->fm);
	P->fr = calloc(c->npeers + 1, sizeof *P->fr);
	P->fv = calloc(c->npeers + 1, sizeof *P->fv);
	for (size_t i = 0; i < c->npeers; i++) {
		upd_peer *p = &c->peers[i];
		P->wire += p->wire;
		if (p->sub && !p->failed) {
			timings_max(&P->split, xfer_upd_timings(&p->sub->stats));
			/* every peer's sub hashed the same bytes; a root only when every
			 * peer served kept one (p2p-ucx keeps none): the head then holds
			 * every verified engine to it, and one without it refused */
			if (p->sub->root_version != P->v) P->no_root = 1;
			else if (!P->root) P->root = p->sub->root;
		}
		if (p->failed && P->fm && P->fr && P->fv) {
			xfer_code code = p->err.code;
			P->fm[P->nf] = p->member;
			P->fv[P->nf] = code == XFER_ECHECKSUM || code == XFER_EMISMATCH;
			P->fr[P->nf++] = p->err.msg;
		}
	}
}

/* move the bytes, as the path reaches the participants, the heartbeat
 * listening for an abort */
static void pub_move(xfer_endpoint *ep, pub_state *P)
{
	xfer_upd_client *c = ep->upd;
	uint64_t v = P->v;
	xfer_endpoint *self = ep;
	xfer_heartbeat *hb = xfer_heartbeat_start(ep->cfg.coord.rpc, ep->cfg.coord.job, ep->cfg.coord.member, v,
						  &self, 1);
	double ti = xfer_now();
	P->ok = 1;
	switch (ep->ops->fan) {
	case XFER_FAN_SELF: /* disk-delta: a delta on the last version written */
		if (xfer_path_send(ep, v, &P->derr) != 0) P->ok = 0;
		P->wire = ep->stats.bytes_moved;
		P->density = ep->m->bytes ? (double)P->wire / (double)ep->m->bytes : 0;
		P->split = xfer_upd_timings(&ep->stats);
		if (P->ok && ep->root_version == v) P->root = ep->root;
		break;
	case XFER_FAN_BCAST:
		if (nccl_ready(ep, &P->r, P->fresh, &P->derr) != 0 || xfer_path_send(c->nccl, v, &P->derr) != 0) P->ok = 0;
		if (c->nccl) xfer_rearm(c->nccl), P->split = xfer_upd_timings(&c->nccl->stats);
		if (P->ok && c->nccl && c->nccl->root_version == v) P->root = c->nccl->root;
		P->wire = P->ok ? ep->m->bytes : 0;
		break;
	case XFER_FAN_HANDOFF:
		P->wire = ep->m->bytes * P->r.npeers; /* each engine copies it all, device to device */
		P->split.hash_seconds = ep->stats.hash_seconds; /* the handoff's sums; the engines move the bytes */
		if (ep->root_version == v) P->root = ep->root;
		break;
	case XFER_FAN_PEERS:
		if (sync_peers(c, &P->r, &P->derr) != 0) P->ok = 0;
		else pub_peers(ep, P);
		break;
	}
	P->impl = xfer_now() - ti + P->setup_s;
	ep->stats.version = v; /* the job's versions only go up, committed or not */
	P->head_aborted = xfer_heartbeat_stop(&hb, P->hreason, sizeof P->hreason);
	xfer_rearm(ep);
}

/* done -> the verdict.  A lost answer (the head died, a forward timed
 * out) is replaced by saying done again: the head answers a repeated
 * done at once when the verdict is in, and a new head that adopted the
 * update learns only from it that the bytes moved (polling outcome
 * would wait for a verdict that needs this word) */
static int pub_done(xfer_endpoint *ep, pub_state *P, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	uint64_t v = P->v;
	xfer_upd_done d = { .job = ep->cfg.coord.job, .member = ep->cfg.coord.member, .version = v, .ok = P->ok,
			   .reason = P->ok ? "" : P->derr.msg, .implementation_seconds = P->impl,
			   .density = P->density, .wire_bytes = P->wire, .failed_member = P->fm,
			   .failed_reason = P->fr, .failed_verdict = P->fv, .nfailed = P->nf, .timings = P->split,
			   .setup = P->setup, .setup_len = P->setup ? P->b.setup_len : 0,
			   .root = P->no_root ? NULL : P->root };
	size_t len;
	uint8_t *req = xfer_upd_done_pack(&d, &len);
	if (!req) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	double deadline = xfer_now() + P->to / 1e3 + XFER_UPD_CALL_MS / 1e3;
	int rc;
	for (;;) {
		xfer_err e = { 0 };
		int left = (int)((deadline - xfer_now()) * 1e3);
		rc = xfer_upd_call(c->agent, "done", req, len, left > 1 ? left : 1, deadline, parse_outcome, &P->o, &e);
		if (rc == 0 && P->o.version == v && final_state(&P->o)) break;
		if (rc != 0 && e.code == XFER_EFORMAT) {
			*err = e;
			break;
		}
		if (xfer_now() + XFER_UPD_POLL_MS / 1e3 >= deadline) {
			rc = xfer_fail(err, XFER_ETIMEOUT, "no verdict from the head in time (last: %s)",
				       rc == 0 ? (P->o.state ? xfer_upd_state_name(P->o.state) : "unknown") : e.msg);
			break;
		}
		xfer_upd_sleep_ms(XFER_UPD_POLL_MS);
	}
	free(req);
	if (rc == 0) return 0;
	if (!P->head_aborted) {
		xfer_err_prefix(err, "version %llu: done", (unsigned long long)v);
		return -1;
	}
	/* the heartbeat heard the verdict already */
	P->o.state = XFER_UPD_ABORTED;
	snprintf(P->o.reason, sizeof P->o.reason, "%s", P->hreason);
	return 0;
}

/* The verdict in ep->update (and *st); an aborted version is dropped. */
static int pub_record(xfer_endpoint *ep, pub_state *P, xfer_update_stats *st, xfer_err *err)
{
	xfer_update_stats *u = &ep->update;
	snprintf(u->state, sizeof u->state, "%s", xfer_upd_state_name(P->o.state));
	snprintf(u->reason, sizeof u->reason, "%s", P->o.reason);
	u->update_seconds = xfer_now() - P->t0;
	/* colocated: the data path ran in the engines (their copy and check),
	 * after the hashing here; the record's figure is ours alone */
	u->implementation_seconds = P->impl + (ep->ops->fan == XFER_FAN_HANDOFF ? P->o.engine_seconds : 0);
	u->wire_bytes = P->wire;
	u->density = P->density;
	u->participants = P->o.has_record ? P->o.participants : (uint32_t)P->r.npeers;
	u->dropped = P->o.dropped;
	u->timings = P->split;
	u->engines = P->o.engines;
	ep->stats.seconds = u->update_seconds;
	ep->stats.bytes_moved = P->wire;
	int rc = 0;
	if (P->o.state != XFER_UPD_COMMITTED) {
		rc = xfer_fail(err, XFER_EABORTED, "version %llu aborted: %s", (unsigned long long)P->v,
			       *P->o.reason ? P->o.reason : "(no reason given)");
		xfer_err de;
		if (ep->ops->drop && ep->ops->drop(ep, P->v, &de) != 0)
			xfer_err_prefix(err, "(and removing it from the folder failed: %s)", de.msg);
	}
	if (st) *st = *u;
	return rc;
}

int xfer_upd_publish(xfer_endpoint *ep, uint64_t v, xfer_update_stats *st, xfer_err *err)
{
	if (v == 0 || v <= ep->stats.version)
		return xfer_fail(err, XFER_EINVAL, "version %llu: versions start at 1 and increase (last %llu)",
				 (unsigned long long)v, (unsigned long long)ep->stats.version);
	if (xfer_check_aborted(ep, err) != 0) return -1;
	pub_state P = { .v = v, .t0 = xfer_now(), .to = ep->cfg.timeout_ms };
	P.b = (xfer_upd_begin){ .job = ep->cfg.coord.job, .member = ep->cfg.coord.member, .mode = ep->cfg.path,
			       .version = v, .bytes = ep->m->bytes, .tensors = (uint32_t)ep->m->n };
	memset(&ep->update, 0, sizeof ep->update);
	ep->update.version = v;
	int rc = pub_begin(ep, &P, err);
	if (rc == 0) {
		pub_move(ep, &P);
		rc = pub_done(ep, &P, err);
		if (rc == 0) rc = pub_record(ep, &P, st, err);
	}
	free(P.fm);
	free(P.fv);
	free(P.fr);
	free(P.setup);
	xfer_upd_begin_reply_free(&P.r);
	return rc;
}
