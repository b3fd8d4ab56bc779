/* transfer/paths/xfer_ipc.c: the colocated data path (CUDA IPC).
 *
 * Trainer and engine share a GPU (Miles's --colocate).  The sender exports
 * one cudaIpcMemHandle per allocation that holds its tensors (a handle covers
 * a whole allocation, so each tensor travels as allocation + offset, found
 * with the driver's cuMemGetAddressRange); the receiver opens each handle
 * once per session and, per version, copies every tensor device to device
 * into its own buffers.  A TCP control stream (xfer_sock) carries the
 * handles, the per-version header with the xxh3-128 of every tensor, and the
 * receiver's verdict; xfer_send returns once the receiver has copied, so the
 * trainer may then change its weights.
 *
 * Checksums are tree checksums (docs/tree-checksum.md), computed by the GPU
 * kernels (xfer_gpu.cu) where they load, else on CPU threads through a pinned
 * host buffer (same bits).  With the kernels the receiver copies the
 * sender's buckets into its tensors (with cfg.keep_previous through the
 * device-side undo journal, xfer_cuda_journal.c: old words kept where they
 * change, only those written), checking between buckets that the sender is
 * still there, then hashes its own copy on the GPU (cfg.verify_device) and
 * compares with the sender's sums (two kernels: measured on the H200 in
 * one run, journal copy then hash took 10.3 ms for 8 GiB where the one-pass
 * skein_copy_tree took 14.6 ms; xfer_hooks.gpu_fused picks the latter);
 * a mismatch, or a sender gone, replays
 * the journal, so its tensors hold the
 * previous version bit for bit.  Without the kernels it checks the sender's
 * bytes on the CPU BEFORE copying (no undo needed, far slower).
 * stats: data_seconds the copy (journal included), hash_seconds this side's
 * hashing, journal_bytes / device_journal_* / undo_seconds the journal.
 * The version header is SKV2 (tree sums); an SKV1 sender is refused by name.
 *
 * Coordinated (docs/updates.md) there is no socket: the sender packs a
 * handoff (xfer_ipc_handoff: its handles, where each tensor lies in them,
 * every tensor's sum of this version, its pid) that travels in Begin.setup
 * through its agent and the head to each engine's `receive` instruction;
 * the engine opens the handles, checks every place against the allocation's
 * size, copies and verifies as above.  Opening a handle costs about 10 ms
 * a GiB on the H200 (cudaIpcOpenMemHandle maps the allocation), as much as
 * the copy itself, so the engine keeps them open across versions: a handle
 * it holds already (the same bytes from the same sender pid) is reused, one
 * the handoff no longer names is closed, and all of them close when the
 * sender's pid changes (a restarted trainer), when its pidfd says it died,
 * on any failed receive, and at teardown.  What stays open is at most the
 * last handoff's allocations.  The trainer's tensors do not move between
 * versions (the sender exports its handles once), so a mapping kept open
 * maps the memory the next version's handoff names.  The sender's socket
 * at end of file becomes its pidfd readable: a sender that died between
 * buckets is seen the same way.  The sender holds its weights still until
 * the head's verdict, which comes only after every engine copied. */
#include "transfer/core/xfer_int.h"
#include "transfer/gpu/xfer_gpu.h"
#include "transfer/core/xfer_sock.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
	IPC_LAZY_PEER = 1,      /* cudaIpcMemLazyEnablePeerAccess */
	STAGE_BYTES = 64 << 20,
};

typedef struct {
	char magic[8];
	uint32_t ntensors, nallocs;
	uint64_t manifest_len;
} ipc_hello;

typedef struct {
	uint32_t alloc, pad;
	uint64_t offset;
} ipc_place;

typedef struct {
	char magic[4];
	uint32_t ntensors;
	uint64_t version, total;
} ipc_vhead;

/* The coordinated handoff, then handles[nallocs], places[ntensors],
 * sums[ntensors] (one host's layout: both ends are on one GPU's node). */
typedef struct {
	char magic[8];          /* "SKIPCH1" */
	uint64_t version, total;
	uint32_t ntensors, nallocs;
	int32_t pid;            /* the sender's process, watched while we copy */
	uint32_t pad;
} ipc_handoff_head;

typedef struct {
	const xfer_cuda_api *cu;
	int lfd, ctl;
	int pidfd;              /* coordinated receiver: the sender's process while we copy; -1 */
	xfer_cuda_ipc_handle *hx; /* sender: the handles it exported (once: its tensors never move) */
	uint32_t nhx;
	void *stream;
	unsigned char *hstage;
	void **bases;           /* receiver: opened allocations */
	uint32_t nbases;
	/* coordinated receiver: the handles open in bases[] (same order), the
	 * usable bytes at each, and the sender they came from */
	xfer_cuda_ipc_handle *ohx;
	uint64_t *osize;
	int32_t opid;
	ipc_place *place;
	xfer_sum *sums, *got;
	xfer_gpu *gpu;          /* NULL: no GPU kernels here (ep->note says why) */
	xfer_djournal *dj;      /* receiver with keep_previous and kernels */
	void **bdst;            /* per bucket: destinations, sources, sizes */
	const void **bsrc;
	uint64_t *bn;
	/* coordinated receiver: the sender's handoff for the next receive (the
	 * instruction's, ipc_take_setup), read where it lies: no socket */
	const unsigned char *handoff;
	size_t handoff_len;
} ipc_state;

static int ipc_probe(char *why, size_t n)
{
	const xfer_cuda_api *cu = xfer_cuda(why, n);
	if (!cu) return -1;
	if (!cu->MemGetAddressRange) {
		snprintf(why, n, "the CUDA driver library (libcuda.so.1) was not found: needed for cuMemGetAddressRange");
		return -1;
	}
	return 0;
}

static void close_handles(ipc_state *s)
{
	for (uint32_t i = 0; i < s->nbases; i++)
		if (s->bases[i]) s->cu->IpcCloseMemHandle(s->bases[i]);
	free(s->bases);
	free(s->ohx);
	free(s->osize);
	s->bases = NULL;
	s->ohx = NULL;
	s->osize = NULL;
	s->nbases = 0;
	s->opid = 0;
}

static void close_session(ipc_state *s)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	if (s->pidfd >= 0) close(s->pidfd);
	s->pidfd = -1;
	close_handles(s);
}

static int ipc_setup(xfer_endpoint *ep, xfer_err *err)
{
	ipc_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->lfd = s->ctl = s->pidfd = -1;
	s->cu = xfer_cuda(NULL, 0);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem != XFER_MEM_CUDA)
			return xfer_fail(err, XFER_EINVAL, "colocated: tensor %s is not in CUDA memory", ep->m->t[i].name);
	int dev = ep->m->n ? ep->m->t[0].device : 0;
	if (xfer_cuda_check(s->cu, s->cu->SetDevice(dev), "cudaSetDevice", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->StreamCreate(&s->stream), "cudaStreamCreate", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->MallocHost((void **)&s->hstage, STAGE_BYTES), "cudaMallocHost", err) != 0)
		return -1;
	size_t n = ep->m->n + 1;
	s->place = calloc(n, sizeof *s->place);
	s->sums = calloc(n, sizeof *s->sums);
	s->got = calloc(n, sizeof *s->got);
	s->bdst = calloc(n, sizeof *s->bdst);
	s->bsrc = calloc(n, sizeof *s->bsrc);
	s->bn = calloc(n, sizeof *s->bn);
	if (!s->place || !s->sums || !s->got || !s->bdst || !s->bsrc || !s->bn)
		return xfer_fail(err, XFER_ENOMEM, "out of memory");
	xfer_err ge = { 0 };
	if (!(s->gpu = xfer_gpu_new(dev, &ge))) snprintf(ep->note, sizeof ep->note, "%s", ge.msg);
	if (s->gpu && ep->cfg.role == XFER_RECEIVER && ep->cfg.keep_previous &&
	    !(s->dj = xfer_djournal_new(s->gpu, ep->cfg.device_journal_bytes, ep->m->bytes, err)))
		return -1;
	if (ep->setup_blobs) return 0; /* coordinated: the handoff goes through the agents, no socket */
	if (ep->cfg.role == XFER_RECEIVER) {
		s->lfd = xfer_sock_listen(ep->cfg.p2p.host, ep->cfg.p2p.port, &ep->port, err);
		if (s->lfd < 0) return -1;
	} else if (ep->cfg.p2p.port <= 0) {
		return xfer_fail(err, XFER_EINVAL, "colocated sender needs the receiver's port (cfg.p2p.port)");
	}
	return 0;
}

static void ipc_teardown(xfer_endpoint *ep)
{
	ipc_state *s = ep->impl;
	if (!s) return;
	close_session(s);
	if (s->lfd >= 0) close(s->lfd);
	if (s->stream) s->cu->StreamDestroy(s->stream);
	if (s->hstage) s->cu->FreeHost(s->hstage);
	xfer_djournal_free(&s->dj);
	xfer_gpu_free(&s->gpu);
	free(s->place);
	free(s->sums);
	free(s->got);
	free(s->bdst);
	free(s->bsrc);
	free(s->bn);
	free(s->hx);
	free(s);
	ep->impl = NULL;
}

static void ipc_abort(xfer_endpoint *ep)
{
	ipc_state *s = ep->impl;
	if (s && s->ctl >= 0) shutdown(s->ctl, SHUT_RDWR);
	if (s && s->lfd >= 0 && !ep->keep_listener) shutdown(s->lfd, SHUT_RDWR);
}

/* Both sides, after a version went through: the copy time is the receiver's. */
static int version_done(xfer_endpoint *ep, double copy_seconds)
{
	ep->stats.data_seconds = copy_seconds;
	ep->stats.bytes_moved = ep->m->bytes;
	return 0;
}

/* Tree checksums of tensors [a, b): at their own pointers, or (receiver,
 * src set) in the sender's memory; GPU kernels, else CPU threads. */
static int tree_sums(xfer_endpoint *ep, ipc_state *s, size_t a, size_t b, void **src, xfer_sum *out, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	if (s->gpu) {
		for (size_t i = a; i < b; i++) {
			s->bsrc[i - a] = src ? src[i - a] : m->t[i].ptr;
			s->bn[i - a] = m->t[i].nbytes;
		}
		return xfer_gpu_tree_sums(s->gpu, s->stream, s->bsrc, s->bn, b - a, out + a, err);
	}
	for (size_t i = a; i < b; i++) {
		xfer_tensor t = m->t[i];
		if (src) t.ptr = src[i - a];
		if (xfer_tensor_tree_sum(&t, s->hstage, STAGE_BYTES, ep->cfg.threads, &out[i], err) != 0) return -1;
	}
	return 0;
}

/* Receiver, between buckets: the sender's socket at end of file (or,
 * coordinated, its pidfd readable) means it died, and its memory may be
 * gone with it. */
static int peer_gone(const ipc_state *s, int wait_ms)
{
	int fd = s->ctl >= 0 ? s->ctl : s->pidfd;
	if (fd < 0) return 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;
	if (poll(&p, 1, wait_ms) <= 0) return 0;
	return fd == s->pidfd || recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Sender: exports the allocations behind its tensors, once (s->hx, and
 * s->place for each tensor). */
static int export_handles(xfer_endpoint *ep, ipc_state *s, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	if (s->hx) return 0;
	unsigned long long *base = calloc(m->n + 1, sizeof *base);
	xfer_cuda_ipc_handle *h = calloc(m->n + 1, sizeof *h);
	uint32_t nb = 0;
	if (!base || !h) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	for (size_t i = 0; i < m->n; i++) {
		unsigned long long b = 0;
		size_t size = 0;
		if (m->t[i].nbytes == 0) continue;
		int rc = s->cu->MemGetAddressRange(&b, &size, (unsigned long long)(uintptr_t)m->t[i].ptr);
		if (rc != 0) {
			xfer_fail(err, XFER_EINVAL, "tensor %s: cuMemGetAddressRange failed (%d): not device memory from cudaMalloc?",
				  m->t[i].name, rc);
			goto err;
		}
		uint32_t k = 0;
		while (k < nb && base[k] != b) k++;
		if (k == nb) {
			base[nb] = b;
			if (xfer_cuda_check(s->cu, s->cu->IpcGetMemHandle(&h[nb], (void *)(uintptr_t)b), "cudaIpcGetMemHandle",
					    err) != 0)
				goto err;
			nb++;
		}
		s->place[i] = (ipc_place){ k, 0, (uint64_t)(uintptr_t)m->t[i].ptr - b };
	}
	free(base);
	s->hx = h;
	s->nhx = nb;
	return 0;
err:
	free(base);
	free(h);
	return -1;
}

static int sender_connect(xfer_endpoint *ep, ipc_state *s, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	size_t dlen = 0;
	char *desc = xfer_manifest_describe(m, &dlen);
	if (!desc) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	if (export_handles(ep, s, err) != 0) goto err;
	ipc_hello hh = { .ntensors = (uint32_t)m->n, .nallocs = s->nhx, .manifest_len = dlen };
	memcpy(hh.magic, "SKIPC1", 7);
	s->ctl = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
	if (s->ctl < 0) goto err;
	ipc_place *pl = s->place, *shifted = NULL;
	if (xfer_hooks.ipc_place_shift && m->n && (shifted = malloc(m->n * sizeof *pl))) {
		/* test hook: the last tensor said to lie further into its allocation */
		memcpy(shifted, pl, m->n * sizeof *pl);
		shifted[m->n - 1].offset += xfer_hooks.ipc_place_shift;
		pl = shifted;
	}
	struct iovec v[4] = { { &hh, sizeof hh }, { desc, dlen }, { s->hx, s->nhx * sizeof *s->hx },
			      { pl, m->n * sizeof *pl } };
	int rc = xfer_sock_sendv(s->ctl, v, 4, "handles", "receiver", to, err);
	free(shifted);
	if (rc != 0) goto err;
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	free(desc);
	return 0;
err:
	free(desc);
	close_session(s);
	return -1;
}

/* The bytes usable from p, an opened allocation of the sender's, to its end. */
static int usable_bytes(const ipc_state *s, void *p, uint32_t i, uint64_t *size, xfer_err *err)
{
	unsigned long long base = 0;
	size_t n = 0;
	if (s->cu->MemGetAddressRange(&base, &n, (unsigned long long)(uintptr_t)p) != 0)
		return xfer_fail(err, XFER_EIO, "cuMemGetAddressRange of the sender's allocation %u failed", i);
	if (base > (uintptr_t)p || (uintptr_t)p - base > n)
		return xfer_fail(err, XFER_EIO, "cuMemGetAddressRange of the sender's allocation %u: %p lies outside "
				 "[%#llx, +%zu)", i, p, base, n);
	*size = (uint64_t)n - ((uint64_t)(uintptr_t)p - base);
	return 0;
}

/* Receiver: every place the sender named checked before use: a tensor
 * with bytes lies in one of its nallocs allocations, inside the usable
 * size[] of it (cuMemGetAddressRange of the opened handle); an empty one is pointed at slot 0, which the
 * bases array (nallocs + 1 entries) always has, whatever the sender said. */
static int check_places(const xfer_manifest *m, ipc_place *place, uint32_t nallocs, const uint64_t *size,
			xfer_err *err)
{
	for (size_t i = 0; i < m->n; i++) {
		const ipc_place *q = &place[i];
		if (!m->t[i].nbytes) {
			place[i] = (ipc_place){ 0, 0, 0 };
			continue;
		}
		if (q->alloc >= nallocs || q->offset > size[q->alloc] || m->t[i].nbytes > size[q->alloc] - q->offset)
			return xfer_fail(err, XFER_EFORMAT, "colocated: tensor %s lies outside the sender's allocations",
					 m->t[i].name);
	}
	return 0;
}

/* Sender: the sums of the version its tensors hold now (the caller's
 * kernels done first). */
static int hash_version(xfer_endpoint *ep, ipc_state *s, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	if (xfer_cuda_check(s->cu, s->cu->DeviceSynchronize(), "cudaDeviceSynchronize", err) != 0) return -1;
	double th = xfer_now();
	memset(s->sums, 0, m->n * sizeof *s->sums);
	if (ep->cfg.verify_device && tree_sums(ep, s, 0, m->n, NULL, s->sums, err) != 0) return -1;
	ep->stats.hash_seconds = xfer_now() - th;
	return 0;
}

static int ipc_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	ipc_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	if (s->ctl < 0 && sender_connect(ep, s, err) != 0) return -1;
	if (hash_version(ep, s, err) != 0) goto err;
	ipc_vhead h = { .ntensors = (uint32_t)m->n, .version = v, .total = m->bytes };
	memcpy(h.magic, "SKV2", 4);
	struct iovec iv[2] = { { &h, sizeof h }, { s->sums, m->n * sizeof *s->sums } };
	if (xfer_sock_sendv(s->ctl, iv, 2, "version header", "receiver", to, err) != 0) goto err;
	if (xfer_hooks.die_after_bucket) _exit(3); /* tests: a sender killed while the receiver copies */
	/* The receiver copies now; its verdict (and copy time) comes back. */
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	double dsec;
	if (xfer_sock_recv(s->ctl, &dsec, sizeof dsec, "copy time", "receiver", to, err) == 0)
		return version_done(ep, dsec);
err:
	close_session(s);
	return -1;
}

static int receiver_accept(xfer_endpoint *ep, ipc_state *s, int wait_ms, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	char *desc = NULL;
	xfer_manifest *theirs = NULL;
	xfer_cuda_ipc_handle *h = NULL;
	uint64_t *size = NULL;
	ipc_hello hh;
	s->ctl = xfer_sock_accept(s->lfd, wait_ms, to, err);
	if (s->ctl < 0) {
		if (err->code == XFER_ETIMEOUT) err->code = XFER_ENOVERSION;
		return -1;
	}
	if (xfer_sock_recv(s->ctl, &hh, sizeof hh, "handles", "sender", to, err) != 0) goto err;
	if (memcmp(hh.magic, "SKIPC1", 7) != 0 || hh.manifest_len > (64u << 20) || hh.nallocs > hh.ntensors ||
	    hh.ntensors != m->n) {
		xfer_fail(err, XFER_EFORMAT, "not a skein colocated sender, or another tensor count");
		goto err;
	}
	desc = malloc(hh.manifest_len + 1);
	h = calloc(hh.nallocs + 1, sizeof *h);
	size = calloc(hh.nallocs + 1, sizeof *size);
	s->bases = calloc(hh.nallocs + 1, sizeof *s->bases);
	if (!desc || !h || !size || !s->bases) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
	struct iovec v[3] = { { desc, hh.manifest_len }, { h, hh.nallocs * sizeof *h }, { s->place, m->n * sizeof *s->place } };
	if (xfer_sock_recvv(s->ctl, v, 3, "handles", "sender", to, err) != 0) goto err;
	xfer_err st = { 0 };
	theirs = xfer_manifest_parse(desc, hh.manifest_len, m->n, &st);
	if (theirs) xfer_manifest_compare(theirs, m, &st);
	for (uint32_t i = 0; st.code == XFER_OK && i < hh.nallocs; i++) {
		if (xfer_cuda_check(s->cu, s->cu->IpcOpenMemHandle(&s->bases[i], h[i], IPC_LAZY_PEER), "cudaIpcOpenMemHandle",
				    &st) != 0)
			break;
		s->nbases = i + 1;
		if (usable_bytes(s, s->bases[i], i, &size[i], &st) != 0) break;
	}
	/* every tensor inside the allocation it names, as the handoff's are */
	if (st.code == XFER_OK) check_places(m, s->place, hh.nallocs, size, &st);
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	free(desc);
	free(h);
	free(size);
	xfer_manifest_free(&theirs);
	return 0;
err:
	free(desc);
	free(h);
	free(size);
	xfer_manifest_free(&theirs);
	close_session(s);
	return -1;
}

/* The bytes of tensor i in the sender's memory. */
static void *their(const ipc_state *s, size_t i)
{
	return (char *)s->bases[s->place[i].alloc] + s->place[i].offset;
}

/* Without GPU kernels: check the sender's bytes on the CPU, then copy. */
static double receive_cpu(xfer_endpoint *ep, ipc_state *s, uint64_t v, xfer_err *st)
{
	const xfer_manifest *m = ep->m;
	double th = xfer_now();
	for (size_t i = 0; ep->cfg.verify_device && i < m->n; i++) {
		void *src = their(s, i);
		if (!m->t[i].nbytes) continue;
		if (tree_sums(ep, s, i, i + 1, &src, s->got, st) != 0) break;
		if (!xfer_sum_equal(s->got[i], s->sums[i])) {
			xfer_fail(st, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch in the sender's memory",
				  (unsigned long long)v, m->t[i].name);
			break;
		}
	}
	ep->stats.hash_seconds = xfer_now() - th;
	double t0 = xfer_now();
	for (size_t i = 0; st->code == XFER_OK && i < m->n; i++) {
		if (!m->t[i].nbytes) continue;
		xfer_cuda_check(s->cu, s->cu->MemcpyAsync(m->t[i].ptr, their(s, i), m->t[i].nbytes, XFER_CUDA_D2D, s->stream),
				"cudaMemcpyAsync", st);
	}
	if (st->code == XFER_OK) xfer_cuda_check(s->cu, s->cu->StreamSynchronize(s->stream), "cudaStreamSynchronize", st);
	return xfer_now() - t0;
}

/* Tests: flips one byte of the sender's memory (byte-space offset at) just
 * before we copy it, as if its bytes had changed after it hashed them. */
static void corrupt_source(xfer_endpoint *ep, ipc_state *s, size_t a, size_t b, uint64_t at)
{
	for (size_t i = a; i < b; i++) {
		if (at < ep->offsets[i] || at >= ep->offsets[i + 1]) continue;
		unsigned char c;
		char *p = (char *)their(s, i) + (at - ep->offsets[i]);
		s->cu->Memcpy(&c, p, 1, XFER_CUDA_D2H);
		c ^= 0x40;
		s->cu->Memcpy(p, &c, 1, XFER_CUDA_H2D);
	}
}

/* With GPU kernels: per bucket, copy (journaled), hash our copy, compare;
 * on failure put the previous version back. */
static double receive_gpu(xfer_endpoint *ep, ipc_state *s, uint64_t v, xfer_err *st)
{
	const xfer_manifest *m = ep->m;
	double copy = 0, hash = 0;
	/* nothing to keep before the first version: no journal then */
	xfer_djournal *dj = ep->stats.version > 0 ? s->dj : NULL;
	if (dj) xfer_djournal_reset(dj);
	/* xfer_hooks.gpu_fused: copy, journal and hash in one pass
	 * (skein_copy_tree) over all the buckets after their checks; slower than
	 * the two kernels on the H200 (above), kept to measure against. */
	int fused = dj && ep->cfg.verify_device && xfer_hooks.gpu_fused;
	for (size_t b = 0; st->code == XFER_OK && b < ep->nbuckets; b++) {
		const xfer_bucket *bk = &ep->buckets[b];
		size_t a = bk->first, e = bk->first + bk->count;
		if (b > 0 && xfer_hooks.wait_sender_gone_before == (int)b) peer_gone(s, ep->cfg.timeout_ms);
		if (b > 0 && peer_gone(s, 0)) {
			xfer_fail(st, XFER_EPEER, "version %llu: the sender vanished before bucket %zu", (unsigned long long)v, b);
			break;
		}
		if (xfer_hooks.corrupt_at && b + 1 == ep->nbuckets) corrupt_source(ep, s, a, e, (uint64_t)xfer_hooks.corrupt_at - 1);
		if (fused) continue; /* one pass over every bucket below */
		double t0 = xfer_now();
		for (size_t i = a; i < e; i++) {
			s->bdst[i - a] = m->t[i].ptr;
			s->bsrc[i - a] = their(s, i);
			s->bn[i - a] = m->t[i].nbytes;
		}
		if (dj) {
			if (xfer_djournal_copy(dj, s->stream, s->bdst, s->bsrc, s->bn, e - a, st) != 0) break;
		} else {
			for (size_t i = a; st->code == XFER_OK && i < e; i++)
				if (m->t[i].nbytes)
					xfer_cuda_check(s->cu, s->cu->MemcpyAsync(m->t[i].ptr, their(s, i), m->t[i].nbytes,
										  XFER_CUDA_D2D, s->stream), "cudaMemcpyAsync", st);
			if (st->code == XFER_OK)
				xfer_cuda_check(s->cu, s->cu->StreamSynchronize(s->stream), "cudaStreamSynchronize", st);
			if (st->code != XFER_OK) break;
		}
		copy += xfer_now() - t0;
	}
	double t0 = xfer_now();
	if (fused && st->code == XFER_OK) {
		for (size_t i = 0; i < m->n; i++) {
			s->bdst[i] = m->t[i].ptr;
			s->bsrc[i] = their(s, i);
			s->bn[i] = m->t[i].nbytes;
		}
		int rc = xfer_djournal_copy_tree(dj, s->stream, s->bdst, s->bsrc, s->bn, m->n, s->got, st);
		if (rc == 1) { /* alignments differ: copy, then hash */
			rc = xfer_djournal_copy(dj, s->stream, s->bdst, s->bsrc, s->bn, m->n, st);
			fused = 0;
		}
		copy += xfer_now() - t0;
	}
	/* Our copy is hashed in one call, not per bucket: a bucket of 512 MiB
	 * is 2048 chunks, too few to keep every SM busy (the journal can undo
	 * every bucket, so checking at the end loses nothing). */
	t0 = xfer_now();
	if (st->code == XFER_OK && ep->cfg.verify_device && (fused || tree_sums(ep, s, 0, m->n, NULL, s->got, st) == 0))
		for (size_t i = 0; i < m->n; i++)
			if (!xfer_sum_equal(s->got[i], s->sums[i])) {
				xfer_fail(st, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch after the copy",
					  (unsigned long long)v, m->t[i].name);
				break;
			}
	hash += xfer_now() - t0;
	ep->stats.hash_seconds = hash;
	ep->stats.undo_seconds = 0;
	if (dj) {
		xfer_djournal_stats js = xfer_djournal_get_stats(dj);
		ep->stats.journal_bytes = js.bytes;
		ep->stats.device_journal_peak = js.device_peak;
		ep->stats.device_journal_spilled = js.spilled;
	}
	if (st->code != XFER_OK) {
		double tu = xfer_now();
		xfer_err ue = { 0 };
		if (!dj) {
			xfer_err_prefix(st, "(no previous version kept: the tensors are partly updated)");
		} else if (xfer_djournal_undo(dj, s->stream, &ue) != 0) {
			xfer_err_prefix(st, "(and the undo failed: %s)", ue.msg);
		}
		ep->stats.undo_seconds = xfer_now() - tu;
	}
	return copy;
}

static int handoff_receive(xfer_endpoint *ep, ipc_state *s, uint64_t *version, xfer_err *err);

static int ipc_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	ipc_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	if (s->handoff) return handoff_receive(ep, s, version, err);
	if (s->lfd < 0) return xfer_fail(err, XFER_EINVAL, "colocated: a coordinated receiver receives from a handoff");
	if (s->ctl < 0 && receiver_accept(ep, s, wait_ms, err) != 0) return -1;
	if (xfer_sock_wait(s->ctl, wait_ms, err) != 0) return -1;
	ipc_vhead h;
	if (xfer_sock_recv(s->ctl, &h, sizeof h, "version header", "sender", to, err) != 0) goto err;
	if (!memcmp(h.magic, "SKV1", 4)) {
		xfer_fail(err, XFER_EFORMAT, "the colocated sender sends xxh3-128 checksums (SKV1): "
			  "this receiver needs tree checksums (SKV2); upgrade the sender");
		goto err;
	}
	if (memcmp(h.magic, "SKV2", 4) != 0 || h.ntensors != m->n || h.total != m->bytes) {
		xfer_fail(err, XFER_EFORMAT, "malformed version header");
		goto err;
	}
	if (xfer_sock_recv(s->ctl, s->sums, m->n * sizeof *s->sums, "checksums", "sender", to, err) != 0) goto err;
	if (ep->target && h.version != ep->target) {
		xfer_fail(err, XFER_EINVAL, "the sender sends version %llu, this receiver was told to receive %llu",
			  (unsigned long long)h.version, (unsigned long long)ep->target);
		goto err;
	}
	int journaled = ep->stats.version > 0; /* receive_gpu's choice */
	xfer_err st = { 0 };
	double dsec = s->gpu ? receive_gpu(ep, s, h.version, &st) : receive_cpu(ep, s, h.version, &st);
	if (st.code != XFER_OK) {
		xfer_err ignored; /* the sender may be gone: our own error is the one to report */
		xfer_sock_send_status(s->ctl, &st, to, &ignored);
		*err = st;
		goto err;
	}
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (xfer_sock_send(s->ctl, &dsec, sizeof dsec, "copy time", "sender", to, err) != 0) goto err;
	ep->undo_ready = s->gpu && s->dj && journaled; /* receive_gpu journaled it */
	*version = h.version;
	return version_done(ep, dsec);
err:
	close_session(s);
	return -1;
}

/* ---- the coordinated handoff ---- */

/* A coordinated receiver's handoff for its next receive (blob NULL: the
 * receive is over; 0 bytes: the instruction brought none). */
static int ipc_take_setup(xfer_endpoint *ep, const unsigned char *blob, size_t len, xfer_err *err)
{
	ipc_state *s = ep->impl;
	if (!s) return xfer_fail(err, XFER_EINVAL, "colocated: not set up");
	s->handoff = blob && len ? blob : NULL;
	s->handoff_len = blob ? len : 0;
	if (blob && !len)
		return xfer_fail(err, XFER_EINVAL, "colocated: the head sent no handoff (the sender's handles); "
				 "a head that took over mid-update has none");
	return 0;
}

/* A coordinated sender's begin: hashes version v where it lies and packs
 * the handoff the engines need to copy it with no socket (its CUDA IPC
 * handles, where each tensor lies in them, the sums, its pid); *out
 * malloc'd.  It travels in Begin.setup; an engine's receive given it
 * (ipc_take_setup) maps and copies from it. */
static int ipc_begin_setup(xfer_endpoint *ep, uint64_t v, unsigned char **out, size_t *len, xfer_err *err)
{
	ipc_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	*out = NULL;
	if (!s || ep->cfg.role != XFER_SENDER)
		return xfer_fail(err, XFER_EINVAL, "a handoff is a colocated sender's");
	if (export_handles(ep, s, err) != 0 || hash_version(ep, s, err) != 0) return -1;
	if (ep->cfg.verify_device && xfer_root_keep(ep, v, XFER_SUM_TREE, s->sums, err) != 0) return -1;
	size_t n = sizeof(ipc_handoff_head) + s->nhx * sizeof *s->hx + m->n * (sizeof *s->place + sizeof *s->sums);
	if (n > XFER_UPD_SETUP_MAX)
		return xfer_fail(err, XFER_EINVAL, "colocated: the handoff of %zu tensors needs %zu bytes (at most %d)",
				 m->n, n, XFER_UPD_SETUP_MAX);
	unsigned char *b = calloc(1, n);
	if (!b) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ipc_handoff_head h = { .version = v, .total = m->bytes, .ntensors = (uint32_t)m->n, .nallocs = s->nhx,
			       .pid = (int32_t)getpid() };
	memcpy(h.magic, "SKIPCH1", 8);
	unsigned char *p = b;
	memcpy(p, &h, sizeof h), p += sizeof h;
	memcpy(p, s->hx, s->nhx * sizeof *s->hx), p += s->nhx * sizeof *s->hx;
	memcpy(p, s->place, m->n * sizeof *s->place), p += m->n * sizeof *s->place;
	memcpy(p, s->sums, m->n * sizeof *s->sums);
	/* tests: one byte of ours changes after it was hashed, as a bad
	 * device or a racing kernel would; the next version writes it again */
	if (xfer_hooks.corrupt_version == v && m->n) {
		const xfer_tensor *t = &m->t[m->n - 1];
		unsigned char c;
		if (t->nbytes && s->cu->Memcpy(&c, (char *)t->ptr + t->nbytes / 2, 1, XFER_CUDA_D2H) == 0) {
			c ^= 0x40;
			s->cu->Memcpy((char *)t->ptr + t->nbytes / 2, &c, 1, XFER_CUDA_H2D);
		}
	}
	*out = b;
	*len = n;
	return 0;
}

/* One handle of the handoff mapped: the one open already (the same bytes
 * from the same sender: moved from old[] into the new tables at i), or
 * opened now, with the bytes usable from its base. */
static int map_handle(ipc_state *s, const xfer_cuda_ipc_handle *hx, void **nb, xfer_cuda_ipc_handle *nhx,
		      uint64_t *nsize, uint32_t i, xfer_err *err)
{
	for (uint32_t k = 0; k < s->nbases; k++) {
		if (!s->bases[k] || memcmp(&s->ohx[k], hx, sizeof *hx) != 0) continue;
		nb[i] = s->bases[k], nhx[i] = s->ohx[k], nsize[i] = s->osize[k];
		s->bases[k] = NULL; /* moved: not closed below */
		return 0;
	}
	xfer_cuda_ipc_handle one;
	memcpy(&one, hx, sizeof one);
	if (xfer_cuda_check(s->cu, s->cu->IpcOpenMemHandle(&nb[i], one, IPC_LAZY_PEER), "cudaIpcOpenMemHandle", err) != 0)
		return -1;
	nhx[i] = one;
	return usable_bytes(s, nb[i], i, &nsize[i], err);
}

/* The handoff checked whole against our manifest; its handles mapped (kept
 * from the last version where they are the same, each place inside its
 * allocation) and the sums taken.  -1 leaves nothing open. */
static int handoff_open(xfer_endpoint *ep, ipc_state *s, ipc_handoff_head *h, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	const unsigned char *p = s->handoff;
	if (s->handoff_len < sizeof *h) return xfer_fail(err, XFER_EFORMAT, "colocated handoff: %zu bytes", s->handoff_len);
	memcpy(h, p, sizeof *h);
	p += sizeof *h;
	if (memcmp(h->magic, "SKIPCH1", 8) != 0)
		return xfer_fail(err, XFER_EFORMAT, "colocated handoff: not a skein colocated sender's");
	if (h->ntensors != m->n || h->total != m->bytes || h->nallocs > h->ntensors ||
	    s->handoff_len != sizeof *h + (size_t)h->nallocs * sizeof(xfer_cuda_ipc_handle) +
				       m->n * (sizeof *s->place + sizeof *s->sums))
		return xfer_fail(err, XFER_EFORMAT, "colocated handoff: %u tensors, %llu bytes, %u allocations in %zu "
				 "bytes; this engine has %zu tensors, %llu bytes", h->ntensors,
				 (unsigned long long)h->total, h->nallocs, s->handoff_len, m->n,
				 (unsigned long long)m->bytes);
	if (h->pid <= 0)
		return xfer_fail(err, XFER_EFORMAT, "colocated handoff: sender pid %d", h->pid);
	if (ep->target && h->version != ep->target)
		return xfer_fail(err, XFER_EINVAL, "the handoff is of version %llu, this receiver was told %llu",
				 (unsigned long long)h->version, (unsigned long long)ep->target);
	const xfer_cuda_ipc_handle *hx = (const void *)p;
	p += h->nallocs * sizeof *hx;
	memcpy(s->place, p, m->n * sizeof *s->place);
	p += m->n * sizeof *s->place;
	memcpy(s->sums, p, m->n * sizeof *s->sums);
	/* another sender (a restarted trainer), or ours died since: nothing
	 * of what is open is its memory */
	if (s->pidfd >= 0 && (h->pid != s->opid || peer_gone(s, 0))) close_session(s);
	/* the sender's process, to see it die between buckets (its pid is in
	 * the handoff: a lying sender only misleads its own engines) */
	if (s->pidfd < 0) {
		s->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)h->pid, 0);
		if (s->pidfd < 0 && errno == ESRCH) {
			close_session(s);
			return xfer_fail(err, XFER_EPEER, "version %llu: the sender (pid %d) is gone",
					 (unsigned long long)h->version, h->pid);
		}
		if (s->pidfd < 0) close_handles(s); /* nothing tells us it changed: open them again */
	}
	void **nb = calloc(h->nallocs + 1, sizeof *nb);
	xfer_cuda_ipc_handle *nhx = calloc(h->nallocs + 1, sizeof *nhx);
	uint64_t *nsize = calloc(h->nallocs + 1, sizeof *nsize);
	if (!nb || !nhx || !nsize) {
		free(nb), free(nhx), free(nsize);
		close_session(s);
		return xfer_fail(err, XFER_ENOMEM, "out of memory");
	}
	uint32_t mapped = 0;
	while (mapped < h->nallocs && map_handle(s, &hx[mapped], nb, nhx, nsize, mapped, err) == 0) mapped++;
	if (mapped < h->nallocs && nb[mapped]) mapped++; /* opened, its size unknown: closed with the rest */
	/* those the handoff no longer names (moved ones are NULL there) */
	close_handles(s);
	s->bases = nb, s->ohx = nhx, s->osize = nsize;
	s->nbases = mapped;
	s->opid = h->pid;
	if (err->code != XFER_OK || check_places(m, s->place, h->nallocs, nsize, err) != 0) {
		close_session(s);
		return -1;
	}
	return 0;
}

/* Coordinated receive: copy and verify from the handoff; its handles stay
 * open for the next version unless this one failed. */
static int handoff_receive(xfer_endpoint *ep, ipc_state *s, uint64_t *version, xfer_err *err)
{
	ipc_handoff_head h;
	err->code = XFER_OK;
	if (handoff_open(ep, s, &h, err) != 0) {
		close_session(s); /* a refused handoff too: nothing kept on its word */
		return -1;
	}
	int journaled = ep->stats.version > 0; /* receive_gpu's choice */
	xfer_err st = { 0 };
	double dsec = s->gpu ? receive_gpu(ep, s, h.version, &st) : receive_cpu(ep, s, h.version, &st);
	if (st.code != XFER_OK) {
		close_session(s);
		*err = st;
		return -1;
	}
	ep->undo_ready = s->gpu && s->dj && journaled;
	/* the handoff's sums every tensor matched: their root goes to the head */
	if (ep->cfg.verify_device && xfer_root_keep(ep, h.version, XFER_SUM_TREE, s->sums, err) != 0) return -1;
	*version = h.version;
	return version_done(ep, dsec);
}

static int ipc_rollback(xfer_endpoint *ep, xfer_err *err)
{
	ipc_state *s = ep->impl;
	double t0 = xfer_now();
	int rc = xfer_djournal_undo(s->dj, s->stream, err);
	ep->stats.undo_seconds = xfer_now() - t0;
	if (rc != 0) xfer_err_prefix(err, "colocated rollback");
	return rc;
}

const xfer_path_ops xfer_ipc_ops = {
	.name = "colocated",
	.probe = ipc_probe,
	.setup = ipc_setup,
	.send = ipc_send,
	.receive = ipc_receive,
	.abort = ipc_abort,
	.teardown = ipc_teardown,
	.rollback = ipc_rollback,
	.fan = XFER_FAN_HANDOFF,
	.begin_setup = ipc_begin_setup,
	.take_setup = ipc_take_setup,
};
