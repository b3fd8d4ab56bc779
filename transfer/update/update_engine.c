/* transfer/update/update_engine.c: the coordinated receiver, the engine loop of
 * docs/updates.md behind xfer_receive.
 *
 * The engine asks its agent `wait` with its whole state (held, staged,
 * failed and why, its endpoint, its generation: level-triggered, so a new
 * head learns everything from the next wait) and does what the answer says:
 *   idle         ask again (the head answers within a second)
 *   receive v    run the path's receive up to exactly v and verify it; v is
 *                staged (or failed, with the reason); a heartbeat thread
 *                asks `outcome` meanwhile and stops the receive when the
 *                update was aborted
 *   commit v     v is held: returned to the caller, who may serve it now
 *   abort v      the undo journal puts v-1 back (xfer_rollback); the caller
 *                hears XFER_EABORTED once, its buffers on v-1
 *   catchup L    reach exactly L, from the disk chain (peer "") or from the
 *                engine at `peer`, which serves it; then held = L, returned
 *   serve L      send the held version L to the endpoint in `peer` (a
 *                p2p-tcp sender over our own buffers), then ask again
 * The receive runs in slices of RECV_SLICE_MS so that an abort is seen
 * while no sender has connected yet, and while nothing comes the engine
 * asks the head itself every RECV_ASK_MS (a disk-delta version its sender
 * removed when the update aborted never comes; the heartbeat would see it
 * only after XFER_UPD_HEARTBEAT_MS).  A wait shorter than the head's long
 * poll returns XFER_ENOVERSION with its `wait` still pending in the client
 * (update_agent.c): the next xfer_receive reads that answer, so no
 * instruction is lost to the caller's deadline. */
#include "transfer/update/update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	RECV_SLICE_MS = 50, /* a receive waits this long per call, then looks at the abort flag */
	RECV_ASK_MS = 200,  /* and asks the head at most this often while nothing comes */
};

static int parse_instr(const uint8_t *p, size_t n, void *out, xfer_err *err)
{
	return xfer_upd_instr_parse(p, n, out, err);
}

static void set_update(xfer_endpoint *ep, uint64_t v, const char *state, const char *reason, double seconds)
{
	xfer_update_stats *u = &ep->update;
	memset(u, 0, sizeof *u);
	u->version = v;
	snprintf(u->state, sizeof u->state, "%s", state);
	snprintf(u->reason, sizeof u->reason, "%s", reason);
	u->update_seconds = u->implementation_seconds = seconds;
	u->wire_bytes = ep->stats.bytes_moved;
	u->timings = ((xfer_upd_client *)ep->upd)->timings;
}

/* Runs rx's receive of exactly version v in slices until it arrives, fails,
 * is aborted, or timeout_ms pass.  ep: the engine whose update v is (its
 * head is asked after an empty slice), or NULL (a catch-up). */
static int receive_exact(xfer_endpoint *ep, xfer_endpoint *rx, uint64_t v, int timeout_ms, xfer_err *err)
{
	double deadline = xfer_now() + timeout_ms / 1e3;
	uint64_t got = 0;
	size_t qlen = 0;
	uint8_t *q = ep ? xfer_upd_query_pack(ep->cfg.coord.job, v, ep->cfg.coord.member, &qlen) : NULL;
	char why[512];
	double asked = xfer_now();
	uint64_t refused0 = xfer_p2p_refused(rx);
	rx->target = v;
	int rc;
	for (;;) {
		rc = xfer_path_receive(rx, RECV_SLICE_MS, &got, err);
		if (rc == 0 || err->code != XFER_ENOVERSION) break;
		if (q && xfer_now() - asked >= RECV_ASK_MS / 1e3) {
			asked = xfer_now();
			if (xfer_upd_aborted(((xfer_upd_client *)ep->upd)->agent, q, qlen, v, why, sizeof why)) {
				rc = xfer_fail(err, XFER_EABORTED, "stopped: the update was aborted (%s)", why);
				break;
			}
		}
		if (atomic_load(&rx->aborted)) {
			rc = xfer_fail(err, XFER_EABORTED, "receive of version %llu stopped", (unsigned long long)v);
			break;
		}
		if (xfer_now() >= deadline) {
			uint64_t refused = xfer_p2p_refused(rx) - refused0;
			if (refused) /* someone knocked without the head's ticket: say so */
				rc = xfer_fail(err, XFER_ETIMEOUT,
					       "version %llu did not arrive within %d ms (%llu connection(s) refused meanwhile, "
					       "the last: %s)",
					       (unsigned long long)v, timeout_ms, (unsigned long long)refused,
					       xfer_gate_last(rx->gate));
			else
				rc = xfer_fail(err, XFER_ETIMEOUT, "version %llu did not arrive within %d ms",
					       (unsigned long long)v, timeout_ms);
			break;
		}
	}
	rx->target = 0;
	free(q);
	if (rc == 0 && got != v)
		rc = xfer_fail(err, XFER_EINVAL, "received version %llu, told %llu", (unsigned long long)got,
			       (unsigned long long)v);
	return rc;
}

static int timeout_of(const xfer_endpoint *ep, const xfer_upd_instr *in)
{
	return in->timeout_ms > 0 ? in->timeout_ms : ep->cfg.timeout_ms;
}

/* NCCL receivers: the communicator the instruction names (made again when
 * its id, rank or size changed). */
static xfer_endpoint *nccl_rx(xfer_endpoint *ep, const xfer_upd_instr *in, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	if (in->setup_len != XFER_NCCL_ID_BYTES) {
		if (c->nccl) return c->nccl;
		xfer_fail(err, XFER_EINVAL, "NCCL: the head sent no unique id");
		return NULL;
	}
	if (c->nccl && !memcmp(c->nccl_id, in->setup, XFER_NCCL_ID_BYTES) && c->nccl_rank == in->rank &&
	    c->nccl_nranks == in->nranks)
		return c->nccl;
	pthread_mutex_lock(&c->mu);
	xfer_sub_close(&c->nccl);
	pthread_mutex_unlock(&c->mu);
	memcpy(ep->cfg.nccl.id, in->setup, XFER_NCCL_ID_BYTES);
	ep->cfg.nccl.rank = in->rank;
	ep->cfg.nccl.nranks = in->nranks;
	ep->cfg.nccl.root = 0;
	xfer_endpoint *sub = xfer_sub_open(ep, ep->ops, -1, 0, err);
	if (!sub) return NULL;
	sub->stats.version = c->held;
	pthread_mutex_lock(&c->mu);
	c->nccl = sub;
	memcpy(c->nccl_id, in->setup, XFER_NCCL_ID_BYTES);
	c->nccl_rank = in->rank;
	c->nccl_nranks = in->nranks;
	pthread_mutex_unlock(&c->mu);
	return sub;
}

/* The root of what rx just received as version v against the sender's, when
 * the head sent it: 0 when they agree or either is unknown, else -1 with a
 * checksum error, the buffers put back where the path can (a catch-up or a
 * first version has no journal: its bytes stay, never held). */
static int check_root(xfer_endpoint *ep, xfer_endpoint *rx, const xfer_upd_instr *in, uint64_t v, xfer_err *err)
{
	if (!in->has_root || rx->root_version != v || !memcmp(rx->root, in->root, 16)) return 0;
	char mine[33], want[33];
	xfer_root_hex(rx->root, mine);
	xfer_root_hex(in->root, want);
	xfer_err e;
	if (xfer_ep_rollback(rx, &e) != 0) rx->stats.version = ((xfer_upd_client *)ep->upd)->held;
	if (rx->ops->forget) rx->ops->forget(rx); /* disk-delta: the next receive plans from a full version */
	return xfer_fail(err, XFER_ECHECKSUM, "version %llu: root mismatch: the checksums it was verified against "
			 "(root %.12s) are not the sender's (root %.12s): a forged or corrupted data path",
			 (unsigned long long)v, mine, want);
}

/* receive v: staged, or failed with the reason. */
static void do_receive(xfer_endpoint *ep, const xfer_upd_instr *in)
{
	xfer_upd_client *c = ep->upd;
	uint64_t v = in->version;
	if (c->staged == v || c->held >= v || c->failed == v) return; /* told again: our status answers */
	xfer_err e = { 0 };
	double t0 = xfer_now();
	xfer_endpoint *rx = xfer_upd_nccl(ep) ? nccl_rx(ep, in, &e) : ep;
	int rc = -1;
	if (ep->ops->take_setup &&
	    ep->ops->take_setup(ep, in->setup ? in->setup : (const unsigned char *)"", in->setup_len, &e) != 0)
		rx = NULL; /* colocated: the sender's handles come with the instruction */
	/* p2p: only a hello with the head's ticket for v opens the session */
	xfer_p2p_ticket(ep, ep->cfg.coord.job, v, in->has_nonce ? in->nonce : NULL, NULL);
	if (rx) {
		xfer_endpoint *self = ep;
		xfer_heartbeat *hb = xfer_heartbeat_start(ep->cfg.coord.rpc, ep->cfg.coord.job, ep->cfg.coord.member, v,
							  &self, 1);
		rc = receive_exact(ep, rx, v, timeout_of(ep, in), &e);
		char why[512] = "";
		if (xfer_heartbeat_stop(&hb, why, sizeof why) && rc != 0)
			snprintf(e.msg, sizeof e.msg, "stopped: the update was aborted (%s)", why);
		xfer_rearm(ep);
		if (rx != ep) {
			xfer_rearm(rx);
			ep->stats = rx->stats;
			ep->undo_ready = 0; /* NCCL keeps no journal */
		}
	}
	if (ep->ops->take_setup) ep->ops->take_setup(ep, NULL, 0, &e);
	c->seconds = xfer_now() - t0;
	/* the split goes with the verdict (a failed receive's undo included) */
	c->timings = rx ? xfer_upd_timings(&ep->stats) : (xfer_timings){ 0 };
	/* the journal's figures go with it (`skeinctl updates JOB VERSION`) */
	c->journal_bytes = rx ? ep->stats.journal_bytes : 0;
	c->journal_spilled = rx ? ep->stats.device_journal_spilled : 0;
	snprintf(c->journal_where, sizeof c->journal_where, "%s", rx ? xfer_upd_journal_where(&ep->stats) : "");
	/* and to the engine's log only when it spilled past the device: the case to act on */
	if (rc == 0 && ep->stats.device_journal_spilled)
		fprintf(stderr, "skein: %s v%llu: undo journal %llu MiB, %llu MiB of it spilled past the device's %llu MiB "
			"to host memory (device_journal_bytes, docs/transfer.md)\n",
			ep->cfg.coord.member ? ep->cfg.coord.member : "engine",
			(unsigned long long)v, (unsigned long long)(ep->stats.journal_bytes >> 20),
			(unsigned long long)(ep->stats.device_journal_spilled >> 20),
			(unsigned long long)(ep->stats.device_journal_peak >> 20));
	if (rc == 0 && xfer_hooks.stall_file) {
		FILE *f = fopen(xfer_hooks.stall_file, "re");
		unsigned long long sv = 0;
		if (f && fscanf(f, "%llu", &sv) == 1 && sv == v) xfer_upd_sleep_ms(xfer_hooks.stall_ms);
		if (f) fclose(f);
	}
	if (rc == 0 && rx && check_root(ep, rx, in, v, &e) != 0) rc = -1;
	if (rc == 0) {
		c->staged = v;
		c->failed = 0;
		c->reason[0] = 0;
		c->has_staged_root = rx && rx->root_version == v;
		if (c->has_staged_root) memcpy(c->staged_root, rx->root, 16);
	} else {
		c->failed = v;
		snprintf(c->reason, sizeof c->reason, "%s", e.msg);
	}
}

/* The held version changes to v: receivers/<id> says so on disk-delta. */
static void now_holding(xfer_endpoint *ep, uint64_t v)
{
	xfer_upd_client *c = ep->upd;
	xfer_err e;
	c->held = v;
	c->staged = 0;
	c->failed = 0;
	c->reason[0] = 0;
	if (ep->ops->commit && ep->ops->commit(ep, v, &e) != 0)
		snprintf(c->reason, sizeof c->reason, "recording version %llu: %s", (unsigned long long)v, e.msg);
}

/* abort v: 1 when the caller is to hear of it (our buffers held or were
 * taking v), 0 when the update never touched them. */
static int do_abort(xfer_endpoint *ep, const xfer_upd_instr *in, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	uint64_t v = in->version;
	int touched = c->staged == v || c->failed == v;
	if (c->staged == v) {
		xfer_err e;
		if (xfer_ep_rollback(ep, &e) != 0 && e.code != XFER_EUNAVAIL) {
			/* the buffers are damaged: say so to the head and the caller */
			c->failed = v;
			snprintf(c->reason, sizeof c->reason, "rollback of version %llu: %s", (unsigned long long)v, e.msg);
			c->staged = 0;
			return xfer_fail(err, XFER_EIO, "version %llu aborted (%s) and %s", (unsigned long long)v,
					 in->reason, c->reason);
		}
		if (e.code == XFER_EUNAVAIL) {
			ep->stats.version = c->held;
			if (ep->ops->forget) ep->ops->forget(ep); /* its bytes are no version any more */
		}
		c->staged = 0;
	}
	if (c->failed == v) {
		c->failed = 0;
		c->reason[0] = 0;
	}
	if (!touched || c->last_notice == v) return 0;
	c->last_notice = v;
	set_update(ep, v, "aborted", in->reason, c->seconds);
	xfer_fail(err, XFER_EABORTED, "version %llu aborted: %s; back on version %llu", (unsigned long long)v,
		  *in->reason ? in->reason : "(no reason given)", (unsigned long long)c->held);
	return -1;
}

/* catchup L: from the disk chain or from the engine that serves it. */
static int do_catchup(xfer_endpoint *ep, const xfer_upd_instr *in, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	uint64_t L = in->version;
	int to = timeout_of(ep, in), rc;
	double t0 = xfer_now();
	if (*in->peer || ep->ops->chain) {
		/* p2p: the serving peer's hello carries the pairing's ticket */
		xfer_p2p_ticket(ep, ep->cfg.coord.job, L, in->has_nonce ? in->nonce : NULL, NULL);
		rc = receive_exact(NULL, ep, L, to, err); /* disk-delta: its own chain; p2p: the peer connects */
	} else if (ep->cfg.disk.dir) {
		/* a p2p engine catching up from the folder the job also writes */
		xfer_config dc = ep->cfg;
		dc.path = "disk-delta";
		dc.coord.rpc = NULL;
		dc.disk.receiver_id = NULL;
		xfer_endpoint *d = NULL;
		rc = xfer_ep_open(&d, &dc, ep->m, err);
		if (rc == 0) {
			pthread_mutex_lock(&c->mu);
			c->side = d;
			pthread_mutex_unlock(&c->mu);
			rc = receive_exact(NULL, d, L, to, err); /* its sums are the folder's kind, not the
								    p2p sender's: no root to hold them to */
			pthread_mutex_lock(&c->mu);
			c->side = NULL;
			pthread_mutex_unlock(&c->mu);
			xfer_ep_close(&d);
		}
		if (rc == 0) {
			ep->stats.version = L; /* a p2p sender's next version must be newer */
			ep->undo_ready = 0;
		}
	} else {
		rc = xfer_fail(err, XFER_EUNAVAIL, "catch-up from the disk chain, but %s has no disk folder",
			       xfer_endpoint_path(ep));
	}
	if (rc == 0 && (*in->peer || ep->ops->chain)) rc = check_root(ep, ep, in, L, err);
	xfer_rearm(ep);
	c->seconds = xfer_now() - t0;
	c->timings = xfer_upd_timings(&ep->stats);
	if (rc != 0) {
		c->failed = L;
		snprintf(c->reason, sizeof c->reason, "catch-up to version %llu: %s", (unsigned long long)L, err->msg);
		return -1;
	}
	ep->undo_ready = 0; /* nothing before a catch-up is ever put back */
	now_holding(ep, L);
	return 0;
}

/* serve L: our buffers to the syncing engine at in->peer, over p2p-tcp. */
static void do_serve(xfer_endpoint *ep, const xfer_upd_instr *in)
{
	xfer_upd_client *c = ep->upd;
	if (c->held != in->version || !*in->peer) return; /* we cannot: its catch-up fails and is retried */
	const char *colon = strrchr(in->peer, ':');
	char host[XFER_UPD_STR];
	if (!colon || colon == in->peer) return;
	snprintf(host, sizeof host, "%.*s", (int)(colon - in->peer), in->peer);
	xfer_config sc = ep->cfg;
	sc.path = "p2p-tcp";
	sc.role = XFER_SENDER;
	sc.coord.rpc = NULL;
	sc.p2p.host = host;
	sc.p2p.port = atoi(colon + 1);
	xfer_endpoint *s = NULL;
	xfer_err e;
	if (xfer_ep_open(&s, &sc, ep->m, &e) != 0) return;
	xfer_p2p_ticket(s, ep->cfg.coord.job, in->version, in->has_nonce ? in->nonce : NULL, NULL);
	pthread_mutex_lock(&c->mu);
	c->side = s;
	pthread_mutex_unlock(&c->mu);
	xfer_path_send(s, in->version, &e);
	pthread_mutex_lock(&c->mu);
	c->side = NULL;
	pthread_mutex_unlock(&c->mu);
	xfer_ep_close(&s);
}

static int engine_loop(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_upd_instr *inp, xfer_err *err);

int xfer_upd_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	xfer_upd_instr in = { 0 };
	int rc = engine_loop(ep, wait_ms, version, &in, err);
	xfer_upd_instr_free(&in);
	return rc;
}

/* *inp: the last instruction (its setup freed before the next is parsed). */
static int engine_loop(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_upd_instr *inp, xfer_err *err)
{
	xfer_upd_client *c = ep->upd;
	double deadline = wait_ms < 0 ? 1e300 : xfer_now() + wait_ms / 1e3;
	if (xfer_check_aborted(ep, err) != 0) return -1;
	for (;;) {
		xfer_upd_status s = { .job = ep->cfg.coord.job, .member = ep->cfg.coord.member, .endpoint = c->endpoint,
				     .reason = c->reason, .held = c->held, .staged = c->staged, .failed = c->failed,
				     .generation = ep->cfg.coord.generation, .seconds = c->seconds,
				     .timings = c->timings, .journal_bytes = c->journal_bytes,
				     .journal_spilled = c->journal_spilled, .journal_where = c->journal_where,
				     .root = c->staged && c->has_staged_root ? c->staged_root : NULL };
		size_t len;
		uint8_t *req = xfer_upd_status_pack(&s, &len);
		if (!req) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		xfer_upd_instr_free(inp);
		double asked = xfer_now();
		double call_deadline = deadline < xfer_now() + XFER_UPD_CALL_MS / 1e3 ? deadline
											 : xfer_now() + XFER_UPD_CALL_MS / 1e3;
		int rc = xfer_upd_call(c->agent, "wait", req, len, XFER_UPD_CALL_MS, call_deadline, parse_instr, inp,
					 err);
		free(req);
		if (rc != 0) {
			if (err->code == XFER_EPEER || err->code == XFER_ETIMEOUT) {
				if (xfer_now() < deadline) continue; /* the agent or head comes back */
				if (xfer_agent_pending(c->agent)) /* the head's long poll outlasts our wait: */
					return xfer_fail(err, XFER_ENOVERSION, /* its answer is read next time */
							 "no version committed within %d ms (holding %llu)", wait_ms,
							 (unsigned long long)c->held);
				xfer_err_prefix(err, "no word from the head within %d ms", wait_ms);
			}
			return -1;
		}
		if (xfer_check_aborted(ep, err) != 0) return -1;
		const xfer_upd_instr in = *inp;
		if (!strcmp(in.kind, "idle") && xfer_now() - asked < XFER_UPD_POLL_MS / 1e3)
			xfer_upd_sleep_ms(XFER_UPD_POLL_MS); /* a head that answers idle at once: no busy loop */
		if (!strcmp(in.kind, "receive")) {
			do_receive(ep, &in);
		} else if (!strcmp(in.kind, "commit")) {
			if (c->staged == in.version) {
				now_holding(ep, in.version);
				set_update(ep, in.version, "committed", "", c->seconds);
				*version = in.version;
				return 0;
			}
			if (c->held != in.version && c->failed != in.version) {
				c->failed = in.version;
				snprintf(c->reason, sizeof c->reason, "told to commit version %llu, which it has not staged",
					 (unsigned long long)in.version);
			}
		} else if (!strcmp(in.kind, "abort")) {
			if (do_abort(ep, &in, err) != 0) return -1;
		} else if (!strcmp(in.kind, "catchup")) {
			if (c->held == in.version) continue;
			if (do_catchup(ep, &in, err) == 0) {
				set_update(ep, in.version, "committed", "", c->seconds);
				*version = in.version;
				return 0;
			}
		} else if (!strcmp(in.kind, "serve")) {
			do_serve(ep, &in);
		}
		if (xfer_now() >= deadline)
			return xfer_fail(err, XFER_ENOVERSION, "no version committed within %d ms (holding %llu)", wait_ms,
					 (unsigned long long)c->held);
	}
}
