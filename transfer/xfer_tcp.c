/* transfer/xfer_tcp.c: the p2p-tcp data path.
 *
 * Like Mooncake's p2p in Miles, the receiver registers its buffers once and
 * the sender writes into them; over TCP "writes into them" means one control
 * stream plus S data streams, each carrying a contiguous stripe of every
 * bucket with one header and one large sendmsg straight from the sender's
 * tensors (no per-tensor round trip, no copy on the sender for host memory).
 *
 *   control  sender: hello + manifest text; receiver: status (manifest check)
 *            per version: sender: header; after the data, the xxh3-128 of
 *            every tensor (hashed while the streams send); receiver, at the
 *            end: status (OK, or its error message)
 *   data i   per bucket chunk: a stripe header, then the stripe's bytes
 *
 * Buckets follow the manifest (xfer_buckets) and travel in chunks of half a
 * bucket (a tensor larger than a bucket is cut the same way), so the two
 * staging slots together hold one bucket.  The receiver has two modes:
 *   keep_previous (default): stripes land in one of the two staging slots
 *     (chunk k+1 arrives while chunk k is hashed); each stream copies its
 *     stripe into place, journaling the bytes it overwrites (once the
 *     receiver holds a version), so a failure puts the previous version
 *     back, in host and CUDA memory alike; peak extra memory: one bucket of
 *     staging plus the journals, whose memory is held to half a bucket in
 *     all (xfer_journal.c; beyond it they spill to a temporary file), so
 *     under two buckets.
 *   direct (keep_previous = 0): stripes are received straight into the
 *     registered buffers with recvmsg over the tensors' iovecs; zero copies,
 *     zero extra memory, but a failure leaves the buffers partly updated.
 * Either way every tensor is hashed as it is committed and compared with the
 * sender's checksum at the end of the version; any mismatch fails it.
 * CUDA memory on either side is staged through pinned host buffers.  A CUDA
 * receiver journals on the host too (xfer_journal_copy_device): each stream
 * reads the old bytes of its stripe back from the device, keeps the words
 * that change and then writes the stripe, so keep_previous costs one
 * device-to-host read of every byte per version plus the journal of what
 * changed; a failure in a later bucket writes the earlier ones back. */
#include "transfer/xfer_sock.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include "transfer/xfer_hash.h"

enum {
	MAX_STREAMS = XFER_TCP_MAX_STREAMS,
	PIECE = 256 << 10,    /* hash and copy in pieces that stay in cache */
	KIND_CONTROL = XFER_TCP_CONTROL,
	KIND_DATA = XFER_TCP_DATA,
};

static const char HELLO_MAGIC[8] = "SKXFER2"; /* 2: chunks of half a bucket */

/* The wire structs (xfer_int.h), in host order: both ends are one build. */
typedef xfer_tcp_hello hello;
typedef xfer_tcp_vtrail vtrail;
typedef xfer_tcp_shead shead;

_Static_assert(sizeof(hello) == XFER_TCP_HELLO_BYTES, "hello is 48 bytes on the wire");
_Static_assert(sizeof(shead) == 40, "shead is 40 bytes on the wire");

typedef struct {
	int lfd, lfd_shared, ctl, nstreams, connected;
	int data[MAX_STREAMS];
	uint64_t session, bucket_bytes;
	xfer_span *chunks;
	size_t nchunks;
	unsigned char *slot[2];
	uint64_t slot_bytes;
	int slot_pinned, any_cuda, direct;
	xfer_journal *j[MAX_STREAMS]; /* receiver: one per stream (stripes are disjoint) */
	xfer_sum *sums;        /* the sender's checksums (trailer) */
	xfer_sum *got;         /* receiver: checksums of what arrived */
	/* per version */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t slot_gen[2];  /* the chunk that may use slot k%2 now */
	int *done;             /* per chunk: streams finished with it */
	int failed;
	xfer_err ferr;
	uint64_t version;
	xfer_endpoint *ep;
} tcp_state;

typedef struct {
	tcp_state *s;
	int idx;
} worker;

static int tcp_probe(char *why, size_t n)
{
	(void)why;
	(void)n;
	return 0;
}

/* ---- chunks ---- */

static int make_chunks(xfer_endpoint *ep, tcp_state *s, uint64_t bucket_bytes, xfer_err *err)
{
	if (xfer_chunks_make(ep, bucket_bytes, &s->chunks, &s->nchunks, err) != 0) return -1;
	s->bucket_bytes = bucket_bytes;
	return 0;
}

static void stripe_of(const tcp_state *s, size_t k, int i, uint64_t *a, uint64_t *b)
{
	xfer_stripe_of(s->chunks[k], s->nstreams, i, a, b);
}

/* ---- what a receiver checks, pure (tests/fuzz/fuzz_p2p.c feeds them) ---- */

int xfer_tcp_hello_parse(const void *buf, size_t n, xfer_tcp_hello *h, xfer_err *err)
{
	if (n != sizeof *h) return xfer_fail(err, XFER_EFORMAT, "a hello of %zu bytes", n);
	memcpy(h, buf, sizeof *h);
	if (memcmp(h->magic, HELLO_MAGIC, 8) != 0 || (h->kind != KIND_CONTROL && h->kind != KIND_DATA))
		return xfer_fail(err, XFER_EFORMAT, "not a skein p2p sender's hello");
	if (h->kind == KIND_CONTROL && (h->nstreams < 1 || h->nstreams > MAX_STREAMS ||
					 h->manifest_len > XFER_P2P_MANIFEST_MAX || h->bucket_bytes == 0))
		return xfer_fail(err, XFER_EFORMAT, "a control hello with %u streams, %llu manifest bytes, buckets of %llu",
				 h->nstreams, (unsigned long long)h->manifest_len, (unsigned long long)h->bucket_bytes);
	return 0;
}

void xfer_tcp_hello_pack(const xfer_tcp_hello *h, unsigned char out[XFER_TCP_HELLO_BYTES])
{
	hello t = *h;
	memcpy(t.magic, HELLO_MAGIC, 8);
	memcpy(out, &t, sizeof t);
}

int xfer_tcp_shead_parse(const void *buf, size_t n, const xfer_tcp_shead *want, xfer_err *err)
{
	shead h;
	if (n != sizeof h) return xfer_fail(err, XFER_EFORMAT, "a stripe header of %zu bytes", n);
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, "SKS1", 4) != 0 || h.version != want->version || h.chunk != want->chunk ||
	    h.off != want->off || h.len != want->len || h.stream != want->stream)
		return xfer_fail(err, XFER_EFORMAT, "unexpected stripe header (version %llu bucket %llu offset %llu)",
				 (unsigned long long)h.version, (unsigned long long)h.chunk, (unsigned long long)h.off);
	return 0;
}

int xfer_tcp_vtrail_parse(const void *buf, size_t n, size_t ntensors, xfer_err *err)
{
	vtrail t;
	if (n != sizeof t) return xfer_fail(err, XFER_EFORMAT, "malformed checksum trailer");
	memcpy(&t, buf, sizeof t);
	if (memcmp(t.magic, "SKT1", 4) != 0 || t.ntensors != ntensors)
		return xfer_fail(err, XFER_EFORMAT, "malformed checksum trailer");
	return 0;
}

/* ---- session ---- */

static void close_session(tcp_state *s)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	for (int i = 0; i < MAX_STREAMS; i++) {
		if (s->data[i] >= 0) close(s->data[i]);
		s->data[i] = -1;
	}
	s->connected = 0;
}

static void shutdown_all(tcp_state *s)
{
	if (s->ctl >= 0) shutdown(s->ctl, SHUT_RDWR);
	for (int i = 0; i < MAX_STREAMS; i++)
		if (s->data[i] >= 0) shutdown(s->data[i], SHUT_RDWR);
}

/* Between versions nothing may arrive on the control stream: readable
 * means the sender closed it (or broke the protocol): its session is over. */
static int sender_gone(const tcp_state *s)
{
	struct pollfd q = { .fd = s->ctl, .events = POLLIN };
	unsigned char b;
	return poll(&q, 1, 0) == 1 && recv(s->ctl, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void fail_version(tcp_state *s, const xfer_err *e)
{
	pthread_mutex_lock(&s->mu);
	if (!s->failed) {
		s->failed = 1;
		s->ferr = *e;
		for (int i = 0; i < MAX_STREAMS; i++)
			if (s->data[i] >= 0) shutdown(s->data[i], SHUT_RDWR);
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static int alloc_slots(tcp_state *s, xfer_err *err)
{
	uint64_t want = xfer_chunk_piece(s->bucket_bytes);
	if (s->slot[0] && s->slot_bytes >= want) return 0;
	const xfer_cuda_api *cu = s->slot_pinned ? xfer_cuda(NULL, 0) : NULL;
	for (int i = 0; i < 2; i++) {
		if (s->slot[i]) {
			if (cu) cu->FreeHost(s->slot[i]);
			else free(s->slot[i]);
			s->slot[i] = NULL;
		}
	}
	s->slot_pinned = 0;
	if (s->any_cuda) {
		char why[256];
		cu = xfer_cuda(why, sizeof why);
		if (!cu) return xfer_fail(err, XFER_EUNAVAIL, "CUDA tensors but %s", why);
		for (int i = 0; i < 2; i++)
			if (xfer_cuda_check(cu, cu->MallocHost((void **)&s->slot[i], want), "cudaMallocHost", err) != 0)
				return -1;
		s->slot_pinned = 1;
	} else {
		for (int i = 0; i < 2; i++)
			if (!(s->slot[i] = malloc(want ? want : 1)))
				return xfer_fail(err, XFER_ENOMEM, "no memory for a %llu-byte staging bucket",
						 (unsigned long long)want);
	}
	s->slot_bytes = want;
	return 0;
}

static int tcp_setup(xfer_endpoint *ep, xfer_err *err)
{
	tcp_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->ep = ep;
	s->lfd = s->ctl = -1;
	for (int i = 0; i < MAX_STREAMS; i++) s->data[i] = -1;
	s->nstreams = ep->cfg.p2p.streams;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem == XFER_MEM_CUDA) s->any_cuda = 1;
	if (s->any_cuda) {
		char why[256];
		if (!xfer_cuda(why, sizeof why))
			return xfer_fail(err, XFER_EUNAVAIL, "the manifest has CUDA tensors but %s", why);
	}
	s->sums = calloc(ep->m->n + 1, sizeof *s->sums);
	s->got = calloc(ep->m->n + 1, sizeof *s->got);
	if (!s->sums || !s->got) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	if (ep->cfg.role == XFER_RECEIVER) {
		s->direct = !ep->cfg.keep_previous && !s->any_cuda;
		if (ep->shared_lfd >= 0) {
			s->lfd = ep->shared_lfd; /* the p2p chooser's */
			s->lfd_shared = 1;
		} else if ((s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err)) < 0) {
			return -1;
		}
	} else {
		if (make_chunks(ep, s, ep->cfg.bucket_bytes, err) != 0) return -1;
		if (ep->cfg.p2p.port <= 0 || ep->cfg.p2p.port > 65535)
			return xfer_fail(err, XFER_EINVAL, "p2p sender needs the receiver's port (cfg.p2p.port)");
	}
	return 0;
}

static void tcp_teardown(xfer_endpoint *ep)
{
	tcp_state *s = ep->impl;
	if (!s) return;
	close_session(s);
	if (s->lfd >= 0 && !s->lfd_shared) close(s->lfd);
	const xfer_cuda_api *cu = s->slot_pinned ? xfer_cuda(NULL, 0) : NULL;
	for (int i = 0; i < 2; i++) {
		if (!s->slot[i]) continue;
		if (cu) cu->FreeHost(s->slot[i]);
		else free(s->slot[i]);
	}
	for (int i = 0; i < MAX_STREAMS; i++) xfer_journal_free(&s->j[i]);
	free(s->chunks);
	free(s->sums);
	free(s->got);
	free(s->done);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	ep->impl = NULL;
}

static void tcp_abort(xfer_endpoint *ep)
{
	tcp_state *s = ep->impl;
	if (!s) return;
	shutdown_all(s);
	if (s->lfd >= 0 && !s->lfd_shared && !ep->keep_listener) shutdown(s->lfd, SHUT_RDWR);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* ---- sender ---- */

static int sender_connect(xfer_endpoint *ep, tcp_state *s, xfer_err *err)
{
	int to = ep->cfg.timeout_ms;
	char *desc = NULL;
	size_t dlen;
	if (getrandom(&s->session, sizeof s->session, 0) != sizeof s->session)
		s->session = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(xfer_now() * 1e9);
	desc = xfer_manifest_describe(ep->m, &dlen);
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	hello h = { .kind = KIND_CONTROL, .nstreams = (uint32_t)s->nstreams, .session = s->session,
		    .bucket_bytes = s->bucket_bytes, .manifest_len = dlen };
	xfer_tcp_hello_pack(&h, (unsigned char *)&h);
	s->ctl = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
	if (s->ctl < 0) goto err;
	struct iovec v[2] = { { &h, sizeof h }, { desc, dlen } };
	if (xfer_sock_sendv(s->ctl, v, 2, "hello", "receiver", to, err) != 0) goto err;
	for (int i = 0; i < s->nstreams; i++) {
		hello d = h;
		d.kind = KIND_DATA;
		d.stream = (uint32_t)i;
		d.manifest_len = 0;
		s->data[i] = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
		if (s->data[i] < 0) goto err;
		if (xfer_sock_send(s->data[i], &d, sizeof d, "hello", "receiver", to, err) != 0) goto err;
	}
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	free(desc);
	s->connected = 1;
	return 0;
err:
	free(desc);
	close_session(s);
	return -1;
}

static void *send_worker(void *arg)
{
	worker *w = arg;
	tcp_state *s = w->s;
	xfer_endpoint *ep = s->ep;
	struct iovec *iov = NULL, one;
	int cap = 0, n = 0, to = ep->cfg.timeout_ms, fd = s->data[w->idx];
	unsigned char *tmp = NULL;
	xfer_err e = { 0 };
	for (size_t k = 0; k < s->nchunks; k++) {
		uint64_t a, b;
		stripe_of(s, k, w->idx, &a, &b);
		shead h = { .stream = (uint32_t)w->idx, .version = s->version, .chunk = k, .off = a, .len = b - a };
		memcpy(h.magic, "SKS1", 4);
		if (s->any_cuda) {
			pthread_mutex_lock(&s->mu);
			while (s->slot_gen[k % 2] != k && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			if (s->failed) goto out;
			one = (struct iovec){ s->slot[k % 2] + (a - s->chunks[k].off), (size_t)(b - a) };
			iov = iov ? iov : malloc(sizeof *iov);
			if (!iov) { xfer_fail(&e, XFER_ENOMEM, "out of memory"); goto fail; }
			iov[0] = one;
			n = b > a;
			cap = cap ? cap : 1;
		} else if (xfer_tensor_iov(ep, a, b, &iov, &cap, &n, &e) != 0) {
			goto fail;
		}
		long long c = xfer_hooks.corrupt_at - 1;
		if (xfer_hooks.corrupt_version && xfer_hooks.corrupt_version == s->version)
			c = (long long)(ep->m->bytes / 2); /* test hook: the middle byte of this version */
		if ((xfer_hooks.corrupt_at || xfer_hooks.corrupt_version == s->version) && c >= 0 && (uint64_t)c >= a &&
		    (uint64_t)c < b) {
			/* test hook: send a copy of the stripe with one byte flipped */
			tmp = malloc(b - a);
			if (!tmp) { xfer_fail(&e, XFER_ENOMEM, "out of memory"); goto fail; }
			size_t at = 0;
			for (int i = 0; i < n; i++) {
				memcpy(tmp + at, iov[i].iov_base, iov[i].iov_len);
				at += iov[i].iov_len;
			}
			tmp[(uint64_t)c - a] ^= 0x40;
			iov[0] = (struct iovec){ tmp, (size_t)(b - a) };
			n = 1;
		}
		struct iovec hv = { &h, sizeof h };
		if (xfer_sock_sendv(fd, &hv, 1, "stripe header", "receiver", to, &e) != 0 ||
		    xfer_sock_sendv(fd, iov, n, "stripe", "receiver", to, &e) != 0) {
			xfer_err_prefix(&e, "stream %d, chunk %zu", w->idx, k);
			goto fail;
		}
		free(tmp);
		tmp = NULL;
		pthread_mutex_lock(&s->mu);
		s->done[k]++;
		/* test hook: the process dies once every stream has sent bucket k */
		if (xfer_hooks.die_after_bucket && k + 1 == (size_t)xfer_hooks.die_after_bucket &&
		    s->done[k] == s->nstreams)
			_exit(3);
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (s->failed) goto out;
	}
	goto out;
fail:
	fail_version(s, &e);
out:
	free(tmp);
	free(iov);
	return NULL;
}

static int run_workers(tcp_state *s, void *(*fn)(void *), pthread_t *th, worker *w, int *started,
		       xfer_err *err)
{
	*started = 0;
	for (int i = 0; i < s->nstreams; i++) {
		w[i] = (worker){ s, i };
		if (pthread_create(&th[i], NULL, fn, &w[i]) != 0) {
			xfer_fail(err, XFER_EIO, "cannot start stream thread %d", i);
			fail_version(s, err);
			return -1;
		}
		(*started)++;
	}
	return 0;
}

static int begin_version(tcp_state *s, uint64_t v, xfer_err *err)
{
	free(s->done);
	s->done = calloc(s->nchunks + 1, sizeof *s->done);
	if (!s->done) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	s->failed = 0;
	memset(&s->ferr, 0, sizeof s->ferr);
	s->version = v;
	s->slot_gen[0] = 0;
	s->slot_gen[1] = 1;
	return 0;
}

static int tcp_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	tcp_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms, started = 0;
	pthread_t th[MAX_STREAMS];
	worker w[MAX_STREAMS];
	const xfer_cuda_api *cu = s->any_cuda ? xfer_cuda(NULL, 0) : NULL;
	if (!s->connected && sender_connect(ep, s, err) != 0) return -1;
	if (s->any_cuda && alloc_slots(s, err) != 0) goto err;
	if (begin_version(s, v, err) != 0) goto err;
	if (cu) s->slot_gen[0] = s->slot_gen[1] = UINT64_MAX; /* staged below */
	if (xfer_sock_send_vhead(s->ctl, ep, v, err) != 0) goto err;
	if (run_workers(s, send_worker, th, w, &started, err) != 0) goto join;
	if (!cu) {
		/* Hash host tensors while the streams send them. */
		for (size_t i = 0; i < m->n && !s->failed; i++) s->sums[i] = xfer_checksum(m->t[i].ptr, m->t[i].nbytes);
	} else {
		/* Stage device chunks into the two pinned slots ahead of the streams,
		 * hashing each piece once it is in host memory. */
		size_t cur = 0;
		XXH3_state_t *st = XXH3_createState();
		if (!st) {
			xfer_err e;
			xfer_fail(&e, XFER_ENOMEM, "out of memory");
			fail_version(s, &e);
		} else {
			XXH3_128bits_reset(st);
		}
		for (size_t k = 0; st && k < s->nchunks; k++) {
			pthread_mutex_lock(&s->mu);
			while (k >= 2 && s->done[k - 2] < s->nstreams && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			if (s->failed) break;
			xfer_err e;
			uint64_t a = s->chunks[k].off, b = a + s->chunks[k].len;
			for (; cur < m->n; cur++) {
				uint64_t end = ep->offsets[cur + 1], hi = end < b ? end : b;
				unsigned char *dst = s->slot[k % 2] + (a - s->chunks[k].off);
				if (hi > a && xfer_cuda_copy(cu, dst, XFER_MEM_HOST, (char *)m->t[cur].ptr + (a - ep->offsets[cur]),
							     m->t[cur].mem, hi - a, &e) != 0) {
					fail_version(s, &e);
					break;
				}
				XXH3_128bits_update(st, dst, hi - a);
				a = hi;
				if (end > b) break;
				XXH128_hash_t d = XXH3_128bits_digest(st);
				s->sums[cur] = (xfer_sum){ d.low64, d.high64 };
				XXH3_128bits_reset(st);
			}
			pthread_mutex_lock(&s->mu);
			s->slot_gen[k % 2] = k;
			pthread_cond_broadcast(&s->cv);
			pthread_mutex_unlock(&s->mu);
		}
		for (; st && cur < m->n; cur++) s->sums[cur] = xfer_checksum("", 0); /* empty tensors at the end */
		if (st) XXH3_freeState(st);
	}
join:
	for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
	if (s->failed) {
		/* The receiver may have said why (a checksum, its own watchdog);
		 * one that stopped answering has nothing to say. */
		xfer_err peer = { 0 };
		int pto = to < 1000 ? to : 1000;
		if (s->ferr.code != XFER_ETIMEOUT && s->ctl >= 0 && xfer_sock_wait(s->ctl, pto, &peer) == 0 &&
		    xfer_sock_recv_status(s->ctl, "receiver", pto, &peer) != 0 && strstr(peer.msg, "reported"))
			*err = peer;
		else
			*err = s->ferr;
		goto err;
	}
	vtrail tr = { .ntensors = (uint32_t)m->n };
	memcpy(tr.magic, "SKT1", 4);
	struct iovec tv[2] = { { &tr, sizeof tr }, { s->sums, m->n * sizeof *s->sums } };
	if (xfer_sock_sendv(s->ctl, tv, 2, "checksums", "receiver", to, err) != 0) goto err;
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	ep->stats.bytes_moved = m->bytes;
	ep->stats.staging_peak = s->any_cuda ? 2 * s->slot_bytes : 0;
	return 0;
err:
	close_session(s);
	return -1;
}

/* ---- receiver ---- */

static int receiver_accept(xfer_endpoint *ep, tcp_state *s, int wait_ms, xfer_err *err)
{
	int to = ep->cfg.timeout_ms, fd = -1;
	char *desc = NULL;
	hello h;
	if (ep->pending_ctl >= 0) { /* accepted by the p2p chooser */
		s->ctl = ep->pending_ctl;
		ep->pending_ctl = -1;
	} else if ((s->ctl = xfer_sock_accept(s->lfd, wait_ms, to, err)) < 0) {
		if (err->code == XFER_ETIMEOUT) err->code = XFER_ENOVERSION;
		return -1;
	}
	unsigned char raw[sizeof h];
	if (xfer_sock_recv(s->ctl, raw, sizeof raw, "hello", "sender", to, err) != 0) goto err;
	if (xfer_tcp_hello_parse(raw, sizeof raw, &h, err) != 0 || h.kind != KIND_CONTROL) {
		xfer_fail(err, XFER_EFORMAT, "the first connection is not a skein p2p sender's control stream");
		goto err;
	}
	desc = malloc(h.manifest_len + 1);
	if (!desc) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	if (xfer_sock_recv(s->ctl, desc, h.manifest_len, "manifest", "sender", to, err) != 0) goto err;
	s->nstreams = (int)h.nstreams;
	s->session = h.session;
	int seen = 0;
	while (seen < s->nstreams) {
		hello d;
		fd = xfer_sock_accept(s->lfd, to, to, err);
		if (fd < 0) goto err;
		xfer_err ignored;
		if (xfer_sock_recv(fd, raw, sizeof raw, "hello", "sender", to, err) != 0) goto err;
		if (xfer_tcp_hello_parse(raw, sizeof raw, &d, &ignored) != 0 || d.kind != KIND_DATA ||
		    d.session != s->session || d.stream >= h.nstreams || s->data[d.stream] >= 0) {
			close(fd); /* a stale or foreign connection */
			fd = -1;
			continue;
		}
		s->data[d.stream] = fd;
		fd = -1;
		seen++;
	}
	xfer_err st = { 0 };
	free(s->chunks);
	if (xfer_chunk_plan(ep->m, ep->offsets, h.bucket_bytes, desc, h.manifest_len, &s->chunks, &s->nchunks, &st) ==
	    0) {
		s->bucket_bytes = h.bucket_bytes;
		if (s->direct || alloc_slots(s, &st) == 0) st.code = XFER_OK;
	}
	if (st.code != XFER_OK) xfer_err_prefix(&st, "sender's manifest vs receiver's");
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	free(desc);
	s->connected = 1;
	return 0;
err:
	if (fd >= 0) close(fd);
	free(desc);
	close_session(s);
	return -1;
}

static void *recv_worker(void *arg)
{
	worker *w = arg;
	tcp_state *s = w->s;
	xfer_endpoint *ep = s->ep;
	struct iovec *iov = NULL;
	int cap = 0, n = 0, to = ep->cfg.timeout_ms, fd = s->data[w->idx];
	xfer_err e = { 0 };
	for (size_t k = 0; k < s->nchunks; k++) {
		uint64_t a, b;
		shead h;
		stripe_of(s, k, w->idx, &a, &b);
		if (!s->direct) {
			pthread_mutex_lock(&s->mu);
			while (s->slot_gen[k % 2] != k && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			if (s->failed) goto out;
		}
		shead want = { .stream = (uint32_t)w->idx, .version = s->version, .chunk = k, .off = a, .len = b - a };
		if (xfer_sock_recv(fd, &h, sizeof h, "stripe header", "sender", to, &e) != 0 ||
		    xfer_tcp_shead_parse(&h, sizeof h, &want, &e) != 0)
			goto fail;
		if (s->direct) {
			if (xfer_tensor_iov(ep, a, b, &iov, &cap, &n, &e) != 0) goto fail;
			if (xfer_sock_recvv(fd, iov, n, "stripe", "sender", to, &e) != 0) goto fail;
		} else if (xfer_sock_recv(fd, s->slot[k % 2] + (a - s->chunks[k].off), b - a, "stripe", "sender", to,
					  &e) != 0 ||
			   xfer_place_stripe(ep, s->slot[k % 2], s->chunks[k].off, a, b,
					     ep->stats.version ? s->j[w->idx] : NULL, &e) != 0) {
			goto fail;
		}
		pthread_mutex_lock(&s->mu);
		s->done[k]++;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	goto out;
fail:
	xfer_err_prefix(&e, "stream %d", w->idx);
	fail_version(s, &e);
out:
	free(iov);
	return NULL;
}

/* Hashes chunk k (the staging slot, or the buffers when direct) once every
 * stream has placed its stripe; a tensor's digest is kept when its last byte
 * is in, and compared with the sender's at the end of the version. */
static int commit_chunk(xfer_endpoint *ep, tcp_state *s, size_t k, XXH3_state_t *st, size_t *cur,
			xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	(void)err;
	uint64_t a = s->chunks[k].off, b = a + s->chunks[k].len;
	while (*cur < m->n) {
		size_t t = *cur;
		const xfer_tensor *x = &m->t[t];
		uint64_t lo = ep->offsets[t], end = ep->offsets[t + 1], hi = end < b ? end : b;
		if (hi > a)
			XXH3_128bits_update(st, s->direct ? (const unsigned char *)x->ptr + (a - lo)
							  : s->slot[k % 2] + (a - s->chunks[k].off),
					    hi - a);
		if (end > b) break; /* the tensor goes on in the next chunk */
		a = end;
		XXH128_hash_t h = XXH3_128bits_digest(st);
		s->got[t] = (xfer_sum){ h.low64, h.high64 };
		XXH3_128bits_reset(st);
		(*cur)++;
	}
	return 0;
}

static int tcp_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	tcp_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms, started = 0;
	pthread_t th[MAX_STREAMS];
	worker w[MAX_STREAMS];
	XXH3_state_t *st = NULL;
	double t0 = xfer_now();
	int journaled = ep->stats.version && !s->direct && ep->cfg.keep_previous; /* recv_worker's choice */
	if (s->connected && sender_gone(s)) close_session(s); /* not this version's failure: accept the next */
	if (!s->connected && receiver_accept(ep, s, wait_ms, err) != 0) return -1;
	uint64_t hv = 0;
	int got = xfer_sock_recv_vhead(s->ctl, ep, wait_ms, t0, &hv, err);
	if (got > 0) return -1; /* no version yet: the session stays */
	if (got < 0 && s->lfd_shared && sender_gone(s)) {
		/* the sender ended its session while we waited for its next
		 * version: the p2p chooser takes the next sender */
		close_session(s);
		return xfer_fail(err, XFER_ENOVERSION, "the sender ended its session");
	}
	if (got < 0) goto err;
	if (ep->target && hv < ep->target) {
		/* what is left of an update that was aborted before we took it
		 * (its sender closed this session then): wait for the next one */
		close_session(s);
		return xfer_fail(err, XFER_ENOVERSION, "a stale session (version %llu), waiting for version %llu",
				 (unsigned long long)hv, (unsigned long long)ep->target);
	}
	if (ep->target && hv != ep->target) {
		xfer_fail(err, XFER_EINVAL, "the sender sends version %llu, this receiver was told to receive %llu",
			  (unsigned long long)hv, (unsigned long long)ep->target);
		goto err;
	}
	if (begin_version(s, hv, err) != 0) goto err;
	/* a journal per stream of this session (stripes are disjoint) */
	if (xfer_stripe_journals(ep, s->j, MAX_STREAMS, s->direct || !ep->cfg.keep_previous ? 0 : s->nstreams,
				 s->bucket_bytes, s->any_cuda, err) != 0)
		goto err;
	st = XXH3_createState();
	if (!st) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	XXH3_128bits_reset(st);
	if (run_workers(s, recv_worker, th, w, &started, err) != 0) goto join;
	size_t cur = 0;
	for (size_t k = 0; k < s->nchunks; k++) {
		pthread_mutex_lock(&s->mu);
		while (s->done[k] < s->nstreams && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
		if (s->failed) break;
		xfer_err e;
		if (commit_chunk(ep, s, k, st, &cur, &e) != 0) {
			fail_version(s, &e);
			break;
		}
		pthread_mutex_lock(&s->mu);
		s->slot_gen[k % 2] = k + 2;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (xfer_hooks.stop_after_bucket && k + 1 == (size_t)xfer_hooks.stop_after_bucket) raise(SIGSTOP);
		if (k == 0 && xfer_hooks.crash_receiving_version && xfer_hooks.crash_receiving_version == hv) _exit(3);
	}
	if (!s->failed && cur != m->n) {
		xfer_err e;
		xfer_fail(&e, XFER_EFORMAT, "only %zu of %zu tensors arrived", cur, m->n);
		fail_version(s, &e);
	}
	if (!s->failed) {
		/* The sender's checksums come after the data. */
		xfer_err e;
		vtrail tr;
		if (xfer_sock_recv(s->ctl, &tr, sizeof tr, "checksums", "sender", to, &e) != 0 ||
		    xfer_tcp_vtrail_parse(&tr, sizeof tr, m->n, &e) != 0 ||
		    xfer_sock_recv(s->ctl, s->sums, m->n * sizeof *s->sums, "checksums", "sender", to, &e) != 0) {
			fail_version(s, &e);
		} else {
			for (size_t i = 0; i < m->n; i++) {
				if (xfer_sum_equal(s->got[i], s->sums[i])) continue;
				xfer_fail(&e, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch on arrival",
					  (unsigned long long)s->version, m->t[i].name);
				fail_version(s, &e);
				break;
			}
		}
	}
join:
	for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
	xfer_stripe_journals_stats(ep, s->j, MAX_STREAMS);
	if (s->failed) {
		*err = s->ferr;
		xfer_stripe_journals_undo(ep, s->j, MAX_STREAMS, err);
		xfer_sock_send_status(s->ctl, err, to < 1000 ? to : 1000, NULL);
		goto err;
	}
	if (xfer_sock_send_status(s->ctl, NULL, to, err) != 0) goto err;
	XXH3_freeState(st);
	ep->stats.bytes_moved = m->bytes;
	ep->stats.staging_peak = s->direct ? 0 : 2 * s->slot_bytes;
	ep->undo_ready = journaled && s->j[0];
	*version = hv;
	return 0;
err:
	if (st) XXH3_freeState(st);
	close_session(s);
	return -1;
}

/* A session whose sender is still there.  The p2p chooser asks this before
 * it lets us receive: a session the sender ended (an engine that served a
 * catch-up closes it) must not make us accept the next connection ourselves,
 * which may be a p2p-ucx sender's: the chooser peeks at it first. */
static int tcp_connected(const xfer_endpoint *ep)
{
	const tcp_state *s = ep->impl;
	return s && s->connected && !sender_gone(s);
}

static int tcp_rollback(xfer_endpoint *ep, xfer_err *err)
{
	tcp_state *s = ep->impl;
	return xfer_stripe_journals_rollback(ep, s->j, MAX_STREAMS, err);
}

const xfer_path_ops xfer_tcp_ops = {
	.name = "p2p-tcp",
	.probe = tcp_probe,
	.setup = tcp_setup,
	.send = tcp_send,
	.receive = tcp_receive,
	.abort = tcp_abort,
	.teardown = tcp_teardown,
	.connected = tcp_connected,
	.rollback = tcp_rollback,
};
