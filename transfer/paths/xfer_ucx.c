/* transfer/paths/xfer_ucx.c: the p2p-ucx path's session, one-sided puts through UCX.
 *
 * Mooncake's p2p in Miles, over UCX's UCP as NIXL uses it: the receiver
 * maps its landing memory once with ucp_mem_map and hands the sender its
 * workers' addresses and the packed rkeys; the sender writes each chunk
 * with ucp_put_nbx, waits for remote completion with ucp_ep_flush_nbx,
 * then tells the receiver on the TCP control stream, with the chunk's
 * checksums.  The same code runs over RDMA (rc, dc, ud: the NIC writes the
 * receiver's memory), shared memory (the receiver's slots are allocated by
 * UCX in sysv/posix shared memory, which each sender lane maps with
 * ucp_rkey_ptr and writes with memcpy, no put or flush: UCX 1.16 would
 * route large puts through cma, a system call per put, and hash before the
 * copy) or UCX's TCP (puts emulated over active messages:
 * the receiver's workers must progress for them to land), whichever UCX
 * picks under UCX_TLS and UCX_NET_DEVICES (docs/transfer.md).
 *
 *   control  sender: hello (stripes, bucket size, its UCX kinds, boot id)
 *            + manifest text; receiver: status, then a reply (UCX, or "use
 *            p2p-tcp" under the p2p chooser), one worker address per lane
 *            and one (address, length, rkey) per landing region.
 *            Per version: sender: header; per chunk, once its puts are
 *            flushed: "ready" with its tree chunk hashes and the tree
 *            sums of the tensors that end in it (wire 4); receiver:
 *            a credit per chunk it has placed (staged mode), and at the
 *            end, or at the first error, its status.
 *
 * This file: set-up and teardown, the handshake (hello, reply, worker
 * addresses, landing regions and their keys, each checked against this
 * end's own plan before use) and the mapping of the landing memory.  A
 * version's data path, lanes and chunks: xfer_ucx_data.c.
 *
 * The TCP control stream is also the watchdog: a peer that dies closes it,
 * one that stops stops answering; every wait gives up after timeout_ms
 * without progress on any lane (UCX's own failure reports end it too).
 * CUDA tensors are staged through pinned host buffers on both sides.
 * Differs from NIXL: no GPU-direct, no UCX tag/AM messages (the control
 * stream is plain TCP, as in p2p-tcp). */
#include "transfer/core/xfer_sock.h"
#include "transfer/paths/xfer_ucx.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

static const char HELLO_MAGIC[8] = XFER_UCX_MAGIC;

_Static_assert(sizeof(xfer_ucx_hello) == XFER_UCX_HELLO_BYTES, "hello is 184 bytes on the wire");

void xfer_ucx_hello_pack(const xfer_ucx_hello *h, unsigned char out[XFER_UCX_HELLO_BYTES])
{
	xfer_ucx_hello t = *h;
	memcpy(t.magic, HELLO_MAGIC, sizeof t.magic);
	memcpy(out, &t, sizeof t);
}

int xfer_ucx_hello_parse(const void *buf, size_t n, xfer_ucx_hello *h, xfer_err *err)
{
	if (n != sizeof *h) return xfer_fail(err, XFER_EFORMAT, "a hello of %zu bytes", n);
	memcpy(h, buf, sizeof *h);
	if (memcmp(h->magic, HELLO_MAGIC, sizeof h->magic) != 0)
		return xfer_fail(err, XFER_EFORMAT, "not a skein p2p-ucx sender's hello");
	if (h->nstripes < 1 || h->nstripes > XFER_UCX_MAX_STRIPES || h->manifest_len > XFER_P2P_MANIFEST_MAX ||
	    h->bucket_bytes == 0)
		return xfer_fail(err, XFER_EFORMAT, "a p2p-ucx hello with %u stripes, %llu manifest bytes, buckets of %llu",
				 h->nstripes, (unsigned long long)h->manifest_len, (unsigned long long)h->bucket_bytes);
	h->boot_id[sizeof h->boot_id - 1] = 0;
	h->host[sizeof h->host - 1] = 0;
	return 0;
}

#if XFER_HAVE_UCX

typedef xfer_ucx_hello uhello;

/* ---- small helpers ---- */

static void read_boot_id(char out[40])
{
	memset(out, 0, 40);
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(out, 40, f)) out[0] = 0;
		fclose(f);
	}
	out[strcspn(out, "\n")] = 0;
}

/* Chunks and slots for buckets of b bytes, the same on both ends: chunks
 * of an eighth of a bucket (two tree chunks to SLOT_MAX), so that several
 * are in flight, in as many slots as one bucket holds (2 to MAX_SLOTS);
 * *wire is the bucket size that cuts the weights into such chunks
 * (xfer_chunks_cut with tree cuts, which only shorten a chunk: every tree
 * chunk lies in one chunk, as on p2p-tcp). */
static void slot_plan(uint64_t b, uint64_t *wire, uint64_t *piece, int *nslots)
{
	uint64_t p = b / 8 / PAGE * PAGE;
	if (p > SLOT_MAX) p = SLOT_MAX;
	if (p < 2 * (uint64_t)TREE) p = 2 * (uint64_t)TREE;
	*wire = 2 * p;
	*piece = p;
	uint64_t n = b / p;
	*nslots = n < 2 ? 2 : n > MAX_SLOTS ? MAX_SLOTS : (int)n;
}

/* ---- setup and teardown ---- */

static int ucx_probe(char *why, size_t n)
{
	int kinds = 0;
	char tls[512], w[256];
	if (xfer_ucx_offers(&kinds, tls, sizeof tls, w, sizeof w) != 0) {
		snprintf(why, n, "%s", w);
		return -1;
	}
	snprintf(why, n, "UCX %s offers %s (best: %s%s)", xfer_ucp(NULL, 0)->ucp_get_version_string(), tls,
		 xfer_ucx_kind_name(kinds), kinds & XFER_UCX_RDMA ? "" : "; no RDMA transport: no device, or UCX_TLS/UCX_NET_DEVICES leave none");
	return 0;
}

/* The sender's endpoints and keys; the lanes are idle.  After a failure
 * (force) the endpoints are closed at once: the peer may be dead or stopped,
 * and a graceful close would wait on it.  Otherwise all lanes close
 * together, within CLOSE_MS. */
static void close_eps(ucx_state *s, int force)
{
	const xfer_ucp_api *u = s->u;
	void *req[MAX_STRIPES] = { 0 };
	xfer_ucp_quiet(1); /* UCX's warnings about puts a failed peer never took: the error said so */
	for (int i = 0; i < s->nlanes; i++) {
		lane *l = &s->lane[i];
		l->rptr = NULL; /* unmapped with its key */
		for (size_t r = 0; l->rkey && r < s->nrg; r++)
			if (l->rkey[r]) u->ucp_rkey_destroy(l->rkey[r]);
		free(l->rkey);
		l->rkey = NULL;
		if (!l->uep) continue;
		int flags = force || atomic_load(&l->peer_failed) != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0;
		ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = (uint32_t)flags };
		void *r = u->ucp_ep_close_nbx(l->uep, &p);
		l->uep = NULL;
		if (UCS_PTR_IS_PTR(r)) req[i] = r;
	}
	double end = xfer_now() + CLOSE_MS / 1e3;
	for (int busy = 1; busy && xfer_now() < end;) {
		busy = 0;
		for (int i = 0; i < s->nlanes; i++) {
			if (!req[i]) continue;
			u->ucp_worker_progress(s->lane[i].w);
			if (u->ucp_request_check_status(req[i]) == UCS_INPROGRESS) busy = 1;
		}
	}
	for (int i = 0; i < s->nlanes; i++) {
		if (req[i]) u->ucp_request_free(req[i]);
		atomic_store(&s->lane[i].peer_failed, UCS_OK);
	}
	xfer_ucp_quiet(0);
	free(s->raddr);
	s->raddr = NULL;
	s->nrg = 0;
}

/* Ends the session with the peer; failed: after an error. */
void xfer_ucx_close(ucx_state *s, int failed)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	s->connected = 0;
	close_eps(s, failed);
}

static void unmap_all(ucx_state *s)
{
	const xfer_ucp_api *u = s->u;
	if (s->slot_mh) u->ucp_mem_unmap(s->ctx, s->slot_mh); /* frees what UCX allocated */
	s->slot_mh = NULL;
	if (s->slot_pinned && s->slots) xfer_cuda(NULL, 0)->FreeHost(s->slots);
	s->slots = NULL;
	s->slots_len = 0;
	s->slot_pinned = 0;
	if (s->tensor_mh) {
		for (size_t t = 0; t < s->ep->m->n; t++)
			if (s->tensor_mh[t]) u->ucp_mem_unmap(s->ctx, s->tensor_mh[t]);
		free(s->tensor_mh);
		s->tensor_mh = NULL;
	}
}

static void ucx_teardown(xfer_endpoint *ep)
{
	ucx_state *s = ep->impl;
	if (!s) return;
	int mine = !s->ctx || s->pid == getpid(); /* a forked copy has no lane threads and leaves UCX to its parent */
	if (mine) xfer_ucx_pool_stop(s);
	if (s->ctx && mine) {
		xfer_ucx_close(s, 0);
		unmap_all(s);
		xfer_ucp_quiet(1); /* puts a failed peer never took: the error said so */
		for (int i = 0; i < s->nlanes; i++) {
			if (s->lane[i].addr) s->u->ucp_worker_release_address(s->lane[i].w, s->lane[i].addr);
			s->u->ucp_worker_destroy(s->lane[i].w);
		}
		s->u->ucp_cleanup(s->ctx); /* (UCX 1.16 lists registrations it still caches) */
		xfer_ucp_quiet(0);
	} else if (s->ctl >= 0) {
		close(s->ctl);
	}
	for (int i = 0; i < MAX_STRIPES; i++) {
		if (s->lane[i].hs) XXH3_freeState(s->lane[i].hs);
		if (s->lane[i].wake >= 0) close(s->lane[i].wake);
	}
	if (s->lfd_own && s->lfd >= 0) close(s->lfd);
	if (s->lslot) {
		const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
		if (cu) cu->FreeHost(s->lslot);
	}
	for (int i = 0; i < MAX_STRIPES; i++) xfer_journal_free(&s->j[i]);
	free(s->chunks);
	xfer_ucx_tree_free(s);
	pthread_mutex_destroy(&s->pool.mu);
	pthread_cond_destroy(&s->pool.go);
	pthread_cond_destroy(&s->pool.done_cv);
	free(s);
	ep->impl = NULL;
}

/* UCX starts at the first transfer, not at xfer_open: UCX does not survive
 * fork, and an endpoint may be opened before one (as a receiver that hands
 * its listening socket to a child).  One forked after that cannot go on. */
int xfer_ucx_start(ucx_state *s, xfer_err *err)
{
	if (s->ctx) {
		if (s->pid == getpid()) return 0;
		return xfer_fail(err, XFER_EINVAL, "p2p-ucx: this endpoint started UCX in process %d and cannot be used in "
				 "a process forked from it", (int)s->pid);
	}
	if (xfer_ucp_context(s->u, &s->ctx, err) != 0) return -1;
	s->pid = getpid();
	s->kinds = xfer_ucp_context_tls(s->u, s->ctx, s->tls, sizeof s->tls);
	return 0;
}

/* Workers for lanes 0..n-1 (kept for the endpoint's life). */
static int lanes_make(xfer_endpoint *ep, ucx_state *s, int n, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	for (; s->nlanes < n; s->nlanes++) {
		lane *l = &s->lane[s->nlanes];
		ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
					   .thread_mode = UCS_THREAD_MODE_SINGLE };
		ucs_status_t st = u->ucp_worker_create(s->ctx, &wp, &l->w);
		if (st != UCS_OK) return ucx_fail(s, err, XFER_EUNAVAIL, st, "worker");
		if ((st = u->ucp_worker_get_efd(l->w, &l->efd)) != UCS_OK ||
		    (ep->cfg.role == XFER_RECEIVER && (st = u->ucp_worker_get_address(l->w, &l->addr, &l->addr_len)) != UCS_OK)) {
			l->addr = NULL;
			u->ucp_worker_destroy(l->w);
			l->w = NULL;
			return ucx_fail(s, err, XFER_EUNAVAIL, st, "worker");
		}
	}
	return 0;
}

static int ucx_setup(xfer_endpoint *ep, xfer_err *err)
{
	ucx_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->ep = ep;
	s->lfd = s->ctl = -1;
	pthread_mutex_init(&s->pool.mu, NULL);
	pthread_cond_init(&s->pool.go, NULL);
	pthread_cond_init(&s->pool.done_cv, NULL);
	for (int i = 0; i < MAX_STRIPES; i++) {
		lane *l = &s->lane[i];
		l->s = s;
		l->idx = i;
		l->efd = -1;
		if ((l->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) return xfer_fail_errno(err, XFER_EIO, "eventfd");
		if (!(l->hs = XXH3_createState())) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	}
	char why[256];
	if (!(s->u = xfer_ucp(why, sizeof why))) return xfer_fail(err, XFER_EUNAVAIL, "%s", why);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem == XFER_MEM_CUDA) s->any_cuda = 1;
	if (s->any_cuda && !xfer_cuda(why, sizeof why))
		return xfer_fail(err, XFER_EUNAVAIL, "the manifest has CUDA tensors but %s", why);
	read_boot_id(s->boot_here);
	const char *pv = getenv("SKEIN_UCX_PROFILE");
	s->prof = pv && *pv && strcmp(pv, "0") != 0;
	s->nstripes = ep->cfg.p2p.streams < MAX_STRIPES ? ep->cfg.p2p.streams : MAX_STRIPES;
	if (s->nstripes < 1) s->nstripes = 1;
	if (ep->cfg.role == XFER_RECEIVER) {
		s->direct = !ep->cfg.keep_previous && !s->any_cuda;
		if (ep->shared_lfd >= 0) {
			s->lfd = ep->shared_lfd;
		} else {
			s->lfd_own = 1;
			if ((s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err)) < 0) return -1;
		}
	} else {
		uint64_t wire;
		s->bucket_bytes = ep->cfg.bucket_bytes;
		slot_plan(s->bucket_bytes, &wire, &s->slot_bytes, &s->nslots);
		free(s->chunks);
		if (xfer_chunks_cut(ep->m, ep->offsets, wire, 1, &s->chunks, &s->nchunks, err) != 0 ||
		    xfer_ucx_tree_plan(ep, s, err) != 0)
			return -1;
		if (ep->cfg.p2p.port <= 0 || ep->cfg.p2p.port > 65535)
			return xfer_fail(err, XFER_EINVAL, "p2p sender needs the receiver's port (cfg.p2p.port)");
		if (s->any_cuda) {
			const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
			s->lslot_bytes = s->slot_bytes;
			if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->lslot, s->lslot_bytes), "cudaMallocHost", err) != 0)
				return -1;
		}
	}
	return 0;
}

static void ucx_abort(xfer_endpoint *ep)
{
	ucx_state *s = ep->impl;
	if (!s) return;
	if (s->ctl >= 0) shutdown(s->ctl, SHUT_RDWR);
	if (s->lfd_own && s->lfd >= 0 && !ep->keep_listener) shutdown(s->lfd, SHUT_RDWR);
}

static int ucx_connected(const xfer_endpoint *ep)
{
	const ucx_state *s = ep->impl;
	return s && s->connected;
}

int xfer_ucx_fell_back(const xfer_endpoint *ep, char *why, size_t n)
{
	const ucx_state *s = ep && ep->ops == &xfer_ucx_ops ? ep->impl : NULL;
	if (!s || !s->fallback) return 0;
	snprintf(why, n, "%s", s->fallback_why);
	return 1;
}

/* ---- sender ---- */

static void ep_failed(void *arg, ucp_ep_h uep, ucs_status_t st)
{
	(void)uep;
	atomic_store(&((lane *)arg)->peer_failed, st == UCS_OK ? UCS_ERR_ENDPOINT_TIMEOUT : st);
}

/* Whether [p, p + n) lies in one mapping of this process.  UCX's
 * ucp_rkey_ptr (1.16) checks nothing: the peer's packed key says how much
 * of its segment this process attaches, the reply how much we write there;
 * a receiver whose key covers less would have the lanes' memcpy write past
 * the mapping. */
static int mapped_here(const void *p, uint64_t n)
{
	uintptr_t a = (uintptr_t)p, lo, hi;
	FILE *f = fopen("/proc/self/maps", "r");
	int ok = 0;
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) != 2 || a < lo || a >= hi) continue;
		ok = n <= hi - a;
		break;
	}
	if (f) fclose(f);
	return ok;
}

/* The receiver's landing regions (its slots, or its tensors), each key
 * unpacked for every lane's endpoint. */
static int read_regions(xfer_endpoint *ep, ucx_state *s, const ureply *r, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	s->nrg = r->nregions;
	int ok = (s->raddr = calloc(r->nregions, sizeof *s->raddr)) != NULL;
	for (int i = 0; i < s->nstripes; i++)
		ok &= (s->lane[i].rkey = calloc(r->nregions, sizeof(ucp_rkey_h))) != NULL;
	unsigned char *blob = ok ? malloc(MAX_BLOB) : NULL;
	if (!blob) return xfer_fail(err, XFER_ENOMEM, "out of memory"); /* the caller frees the rest */
	s->remote_direct = (int)r->direct;
	for (uint32_t i = 0; i < r->nregions; i++) {
		uregion g;
		if (xfer_sock_recv(s->ctl, &g, sizeof g, "regions", "receiver", to, err) != 0) goto err;
		uint64_t want = r->direct ? m->t[i].nbytes : (uint64_t)s->nslots * s->slot_bytes;
		if (g.rkey_len > MAX_BLOB || (r->direct ? g.len != want : g.len < want) || (g.len && !g.rkey_len)) {
			xfer_fail(err, XFER_EFORMAT, "the receiver's landing region %u (%llu bytes, key %u bytes) does not fit "
				  "%llu bytes", i, (unsigned long long)g.len, g.rkey_len, (unsigned long long)want);
			goto err;
		}
		if (xfer_sock_recv(s->ctl, blob, g.rkey_len, "rkey", "receiver", to, err) != 0) goto err;
		s->raddr[i] = g.addr;
		for (int k = 0; g.len && k < s->nstripes; k++) {
			lane *l = &s->lane[k];
			ucs_status_t st = s->u->ucp_ep_rkey_unpack(l->uep, blob, &l->rkey[i]);
			if (st != UCS_OK) {
				ucx_fail(s, err, XFER_EFORMAT, st, "the receiver's rkey");
				goto err;
			}
			/* slots UCX allocated in shared memory: this process maps
			 * them too, and a memcpy is the put */
			void *p = NULL;
			if (r->direct || s->u->ucp_rkey_ptr(l->rkey[i], g.addr, &p) != UCS_OK || !p) continue;
			if (!mapped_here(p, want)) {
				xfer_fail(err, XFER_EFORMAT, "the receiver's slots are mapped here for fewer than the %llu "
					  "bytes it said (a forged key?)", (unsigned long long)want);
				goto err;
			}
			l->rptr = p;
		}
	}
	free(blob);
	return 0;
err:
	free(blob);
	return -1;
}

/* One endpoint per lane, to the receiver's lane of the same index. */
static int connect_lanes(xfer_endpoint *ep, ucx_state *s, const ureply *r, xfer_err *err)
{
	int to = ep->cfg.timeout_ms;
	void *addr = malloc(MAX_BLOB);
	if (!addr) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	for (int i = 0; i < s->nstripes; i++) {
		uint32_t len;
		if (xfer_sock_recv(s->ctl, &len, sizeof len, "worker address", "receiver", to, err) != 0) goto err;
		if (len == 0 || len > MAX_BLOB) {
			xfer_fail(err, XFER_EFORMAT, "a worker address of %u bytes from the receiver", len);
			goto err;
		}
		if (xfer_sock_recv(s->ctl, addr, len, "worker address", "receiver", to, err) != 0) goto err;
		ucp_ep_params_t p = {
			.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
				      UCP_EP_PARAM_FIELD_ERR_HANDLER,
			.address = addr,
			.err_mode = r->same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
			.err_handler = { .cb = ep_failed, .arg = &s->lane[i] },
		};
		xfer_ucp_quiet(1); /* why UCX cannot reach it goes into the error */
		ucs_status_t st = s->u->ucp_ep_create(s->lane[i].w, &p, &s->lane[i].uep);
		xfer_ucp_quiet(0);
		if (st != UCS_OK) {
			s->lane[i].uep = NULL;
			const char *said = xfer_ucp_last();
			xfer_fail(err, XFER_EUNAVAIL, "no UCX endpoint to the receiver (UCX_TLS on both ends?): %s%s%s%s",
				  s->u->ucs_status_string(st), XFER_UCP_SAID(said));
			goto err;
		}
	}
	free(addr);
	return 0;
err:
	free(addr);
	return -1;
}

int xfer_ucx_connect(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	int to = ep->cfg.timeout_ms;
	size_t dlen;
	char *desc = xfer_manifest_describe(ep->m, &dlen), *why = NULL;
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	uhello h = { .flags = ep->p2p_auto ? F_AUTO : 0, .kinds = (uint32_t)s->kinds, .nstripes = (uint32_t)s->nstripes,
		     .bucket_bytes = s->bucket_bytes, .manifest_len = dlen };
	read_boot_id(h.boot_id);
	gethostname(h.host, sizeof h.host - 1);
	if (ep->has_ticket) h.ticket = ep->ticket;
	xfer_ucx_hello_pack(&h, (unsigned char *)&h);
	s->ctl = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
	if (s->ctl < 0) goto err;
	struct iovec v[2] = { { &h, sizeof h }, { desc, dlen } };
	if (xfer_sock_sendv(s->ctl, v, 2, "hello", "receiver", to, err) != 0) goto err;
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	ureply r;
	if (xfer_sock_recv(s->ctl, &r, sizeof r, "reply", "receiver", to, err) != 0) goto err;
	if (memcmp(r.magic, "SKU2", 4) != 0 || r.mode > MODE_TCP || r.why_len > 1024 ||
	    (r.mode == MODE_UCX && (r.nlanes != (uint32_t)s->nstripes || r.nregions != (r.direct ? ep->m->n : 1) ||
				    (!r.direct && (r.nslots != (uint32_t)s->nslots || r.slot_bytes != s->slot_bytes))))) {
		xfer_fail(err, XFER_EFORMAT, "malformed reply from the receiver (not this build of p2p-ucx?)");
		goto err;
	}
	why = calloc(1, r.why_len + 1);
	if (!why) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, why, r.why_len, "reply", "receiver", to, err) != 0) goto err;
	if (r.mode == MODE_TCP) {
		s->fallback = 1;
		snprintf(s->fallback_why, sizeof s->fallback_why, "%s", why);
		xfer_fail(err, XFER_EUNAVAIL, "the receiver chose p2p-tcp: %s", why);
		goto err;
	}
	if (lanes_make(ep, s, s->nstripes, err) != 0 || connect_lanes(ep, s, &r, err) != 0 ||
	    read_regions(ep, s, &r, err) != 0)
		goto err;
	char lanes[256];
	xfer_ucp_ep_lanes(u, s->lane[0].uep, lanes, sizeof lanes);
	snprintf(ep->note, sizeof ep->note, "%s%s%s%s; %d lanes of ours, a UCX worker each (UCX %s)", why, *why ? "; " : "",
		 s->lane[0].rptr ? "puts by memcpy into the receiver's slots, mapped here (ucp_rkey_ptr); " : "", lanes,
		 s->nstripes, u->ucp_get_version_string());
	free(desc);
	free(why);
	s->connected = 1;
	return 0;
err:
	free(desc);
	free(why);
	xfer_ucx_close(s, 1);
	return -1;
}

/* ---- receiver ---- */

/* Maps the landing memory: the ring of slots (one region), or the tensors. */
static int map_landing(xfer_endpoint *ep, ucx_state *s, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	if (s->direct) {
		if (s->tensor_mh) return 0;
		if (!(s->tensor_mh = calloc(ep->m->n + 1, sizeof *s->tensor_mh)))
			return xfer_fail(err, XFER_ENOMEM, "out of memory");
		for (size_t t = 0; t < ep->m->n; t++) {
			if (!ep->m->t[t].nbytes) continue;
			ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
						    .address = ep->m->t[t].ptr, .length = ep->m->t[t].nbytes };
			ucs_status_t st = u->ucp_mem_map(s->ctx, &mp, &s->tensor_mh[t]);
			if (st != UCS_OK) return ucx_fail(s, err, XFER_EIO, st, "mapping a tensor");
		}
		return 0;
	}
	uint64_t want = (uint64_t)s->nslots * s->slot_bytes;
	if (s->slots && s->slots_len == want) return 0;
	unmap_all(s);
	const xfer_cuda_api *cu = s->any_cuda ? xfer_cuda(NULL, 0) : NULL;
	ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
				    .length = want };
	if (cu) {
		/* pinned, for the copies to the device */
		if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->slots, want), "cudaMallocHost", err) != 0) return -1;
		s->slot_pinned = 1;
		mp.address = s->slots;
	} else {
		/* UCX allocates: shared memory (sysv, posix) a sender on this
		 * host attaches and writes with memcpy; mapped memory of ours
		 * could only take emulated puts there (UCX 1.13 puts need a
		 * transport with short and bcopy puts, which cma lacks) */
		mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
		mp.flags = UCP_MEM_MAP_ALLOCATE;
	}
	ucs_status_t st = u->ucp_mem_map(s->ctx, &mp, &s->slot_mh);
	if (st != UCS_OK) {
		s->slot_mh = NULL;
		return ucx_fail(s, err, XFER_EIO, st, "mapping the staging slots");
	}
	if (!cu) {
		ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH };
		if ((st = u->ucp_mem_query(s->slot_mh, &ma)) != UCS_OK) return ucx_fail(s, err, XFER_EIO, st, "slots");
		if (ma.length < want) return xfer_fail(err, XFER_EIO, "UCX gave staging slots of %zu bytes", ma.length);
		s->slots = ma.address;
	}
	s->slots_len = want;
	return 0;
}

/* p2p chooser on both ends: UCX when both offer RDMA, or both are on one
 * host and offer shared memory; else p2p-tcp. */
static int decide(const ucx_state *s, const uhello *h, char *why, size_t n)
{
	int theirs = (int)h->kinds, same = h->boot_id[0] && !strncmp(h->boot_id, s->boot_here, sizeof h->boot_id);
	if ((s->kinds & theirs) & XFER_UCX_RDMA) {
		snprintf(why, n, "p2p-ucx over RDMA (UCX offers it on both ends)");
		return MODE_UCX;
	}
	if (same && (s->kinds & theirs & XFER_UCX_SHM)) {
		snprintf(why, n, "p2p-ucx over shared memory (both ends on host %.63s)", h->host);
		return MODE_UCX;
	}
	snprintf(why, n, "p2p-tcp: no RDMA transport in UCX %s%s", !(s->kinds & XFER_UCX_RDMA) ? "here" : "on the sender",
		 same ? " and no shared memory transport on both ends (UCX_TLS?)" : ", and the ends are on different hosts");
	return MODE_TCP;
}

/* A p2p-ucx hello and its ticket (alone, and under the p2p chooser). */
xfer_gate_verdict xfer_ucx_judge(void *ctx, const unsigned char *buf, size_t n, size_t *need, char *why, size_t whyn)
{
	const xfer_endpoint *ep = ctx;
	uhello h;
	xfer_err e;
	if (n < 8) {
		*need = 8;
		return XFER_GATE_MORE;
	}
	if (memcmp(buf, HELLO_MAGIC, sizeof HELLO_MAGIC) != 0) {
		snprintf(why, whyn, "not a skein p2p-ucx sender's hello (or an older one, without a ticket)");
		return XFER_GATE_REFUSE;
	}
	if (n < sizeof h) {
		*need = sizeof h;
		return XFER_GATE_MORE;
	}
	if (xfer_ucx_hello_parse(buf, n, &h, &e) != 0) {
		snprintf(why, whyn, "%s", e.msg);
		return XFER_GATE_REFUSE;
	}
	return xfer_ticket_check(ep, &h.ticket, why, whyn) == 0 ? XFER_GATE_TAKE : XFER_GATE_REFUSE;
}

int xfer_ucx_accept(xfer_endpoint *ep, ucx_state *s, int wait_ms, xfer_err *err)
{
	const xfer_ucp_api *u = s->u;
	int to = ep->cfg.timeout_ms;
	char *desc = NULL, why[256] = "";
	void **tkeys = NULL;
	size_t *tklen = NULL, nkeys = 0;
	uhello h;
	unsigned char raw[XFER_GATE_HELLO_MAX];
	size_t rn = 0;
	/* accepted, and its hello judged, by the p2p chooser; else through the gate */
	if ((s->ctl = xfer_gate_take_pending(ep, raw, &rn)) < 0 &&
	    (s->ctl = xfer_gate_next(ep->gate, s->lfd, wait_ms, to, xfer_ucx_judge, ep, raw, &rn, err)) < 0)
		return -1;
	if (xfer_ucx_hello_parse(raw, rn, &h, err) != 0) {
		xfer_fail(err, XFER_EFORMAT, "the first connection is not a skein p2p-ucx sender's control stream");
		goto err;
	}
	if (!(desc = malloc(h.manifest_len + 1))) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, desc, h.manifest_len, "manifest", "sender", to, err) != 0) goto err;
	s->nstripes = (int)h.nstripes;
	s->bucket_bytes = h.bucket_bytes;
	uint64_t wire;
	slot_plan(h.bucket_bytes, &wire, &s->slot_bytes, &s->nslots);
	xfer_err st = { 0 };
	int mode = MODE_UCX;
	free(s->chunks);
	if (xfer_chunk_plan_cut(ep->m, ep->offsets, wire, 1, desc, h.manifest_len, &s->chunks, &s->nchunks, &st) ==
		    0 &&
	    xfer_ucx_tree_plan(ep, s, &st) == 0)
		st.code = XFER_OK;
	if (st.code != XFER_OK) xfer_err_prefix(&st, "sender's manifest vs receiver's");
	else if (ep->p2p_auto && (h.flags & F_AUTO)) mode = decide(s, &h, why, sizeof why);
	if (st.code == XFER_OK && mode == MODE_UCX &&
	    (map_landing(ep, s, &st) != 0 || lanes_make(ep, s, s->nstripes, &st) != 0))
		xfer_err_prefix(&st, "p2p-ucx receiver");
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	/* the reply: mode and why, the lanes' worker addresses, the landing
	 * regions and their keys */
	nkeys = s->direct ? ep->m->n : 1;
	ureply r = { .mode = (uint32_t)mode, .direct = (uint32_t)s->direct, .nregions = (uint32_t)nkeys,
		     .nlanes = (uint32_t)s->nstripes, .why_len = (uint32_t)strlen(why), .nslots = (uint32_t)s->nslots,
		     .slot_bytes = s->slot_bytes,
		     .same_host = h.boot_id[0] && !strncmp(h.boot_id, s->boot_here, sizeof h.boot_id) };
	memcpy(r.magic, "SKU2", 4);
	struct iovec v[2] = { { &r, sizeof r }, { why, r.why_len } };
	if (mode == MODE_TCP) {
		xfer_sock_sendv(s->ctl, v, 2, "reply", "sender", to, NULL);
		s->fallback = 1;
		snprintf(s->fallback_why, sizeof s->fallback_why, "%s", why);
		xfer_fail(err, XFER_EUNAVAIL, "%s", why);
		goto err;
	}
	if (xfer_sock_sendv(s->ctl, v, 2, "reply", "sender", to, err) != 0) goto err;
	for (int i = 0; i < s->nstripes; i++) {
		uint32_t len = (uint32_t)s->lane[i].addr_len;
		struct iovec av[2] = { { &len, sizeof len }, { s->lane[i].addr, len } };
		if (xfer_sock_sendv(s->ctl, av, 2, "worker address", "sender", to, err) != 0) goto err;
	}
	tkeys = calloc(nkeys, sizeof *tkeys);
	tklen = calloc(nkeys, sizeof *tklen);
	if (!tkeys || !tklen) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	for (size_t i = 0; i < nkeys; i++) {
		ucp_mem_h mh = s->direct ? s->tensor_mh[i] : s->slot_mh;
		uregion g = { .addr = (uint64_t)(uintptr_t)(s->direct ? ep->m->t[i].ptr : s->slots),
			      .len = s->direct ? ep->m->t[i].nbytes : s->slots_len };
		if (mh) {
			ucs_status_t ks = u->ucp_rkey_pack(s->ctx, mh, &tkeys[i], &tklen[i]);
			if (ks != UCS_OK) { ucx_fail(s, err, XFER_EIO, ks, "packing a key"); goto err; }
		} else {
			g.len = 0;
		}
		g.rkey_len = (uint32_t)tklen[i];
		struct iovec gv[2] = { { &g, sizeof g }, { tkeys[i], tklen[i] } };
		if (xfer_sock_sendv(s->ctl, gv, 2, "regions", "sender", to, err) != 0) goto err;
	}
	snprintf(ep->note, sizeof ep->note, "%s%sUCX %s offers %s; %d lanes of ours, a UCX worker each", why,
		 *why ? "; " : "", u->ucp_get_version_string(), s->tls, s->nstripes);
	s->connected = 1;
	goto out;
err:
	xfer_ucx_close(s, 1);
out:
	for (size_t i = 0; tkeys && i < nkeys; i++)
		if (tkeys[i]) u->ucp_rkey_buffer_release(tkeys[i]);
	free(tkeys);
	free(tklen);
	free(desc);
	return s->connected ? 0 : -1;
}

static int ucx_rollback(xfer_endpoint *ep, xfer_err *err)
{
	ucx_state *s = ep->impl;
	return xfer_stripe_journals_rollback(ep, s->j, MAX_STRIPES, err);
}

#else /* built without UCX's headers: p2p-ucx says so */

static int ucx_probe(char *why, size_t n) { return xfer_ucx_offers(NULL, NULL, 0, why, n); }

static int ucx_setup(xfer_endpoint *ep, xfer_err *err)
{
	char why[256];
	(void)ep;
	ucx_probe(why, sizeof why);
	return xfer_fail(err, XFER_EUNAVAIL, "%s", why);
}

int xfer_ucx_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	(void)ep;
	(void)v;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-ucx: not built");
}

int xfer_ucx_receive(xfer_endpoint *ep, int wait_ms, uint64_t *v, xfer_err *err)
{
	(void)ep;
	(void)wait_ms;
	(void)v;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-ucx: not built");
}

static void ucx_abort(xfer_endpoint *ep) { (void)ep; }
static void ucx_teardown(xfer_endpoint *ep) { (void)ep; }
static int ucx_connected(const xfer_endpoint *ep) { (void)ep; return 0; }
static int ucx_rollback(xfer_endpoint *ep, xfer_err *err)
{
	(void)ep;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-ucx: not built");
}

int xfer_ucx_fell_back(const xfer_endpoint *ep, char *why, size_t n)
{
	(void)ep;
	(void)why;
	(void)n;
	return 0;
}

#endif

const xfer_path_ops xfer_ucx_ops = {
	.name = "p2p-ucx",
	.probe = ucx_probe,
	.setup = ucx_setup,
	.send = xfer_ucx_send,
	.receive = xfer_ucx_receive,
	.abort = ucx_abort,
	.teardown = ucx_teardown,
	.connected = ucx_connected,
	.rollback = ucx_rollback,
	.fan = XFER_FAN_PEERS,
};
