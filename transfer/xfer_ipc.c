/* transfer/xfer_ipc.c: the colocated data path (CUDA IPC).
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
 * With cfg.verify_device the receiver checks the sender's bytes (through a
 * pinned host buffer, on the CPU) BEFORE copying, so a mismatch leaves its
 * previous version untouched; that check costs far more than the copy (no
 * GPU hash kernel here), and stats.data_seconds reports the copy alone. */
#include "transfer/xfer_sock.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

typedef struct {
	const xfer_cuda_api *cu;
	int lfd, ctl;
	void *stream;
	unsigned char *hstage;
	void **bases;           /* receiver: opened allocations */
	uint32_t nbases;
	ipc_place *place;
	xfer_sum *sums;
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
	s->bases = NULL;
	s->nbases = 0;
}

static void close_session(ipc_state *s)
{
	if (s->ctl >= 0) close(s->ctl);
	s->ctl = -1;
	close_handles(s);
}

static int ipc_setup(xfer_endpoint *ep, xfer_err *err)
{
	ipc_state *s = calloc(1, sizeof *s);
	if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
	ep->impl = s;
	s->lfd = s->ctl = -1;
	s->cu = xfer_cuda(NULL, 0);
	for (size_t i = 0; i < ep->m->n; i++)
		if (ep->m->t[i].mem != XFER_MEM_CUDA)
			return xfer_fail(err, XFER_EINVAL, "colocated: tensor %s is not in CUDA memory", ep->m->t[i].name);
	int dev = ep->m->n ? ep->m->t[0].device : 0;
	if (xfer_cuda_check(s->cu, s->cu->SetDevice(dev), "cudaSetDevice", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->StreamCreate(&s->stream), "cudaStreamCreate", err) != 0 ||
	    xfer_cuda_check(s->cu, s->cu->MallocHost((void **)&s->hstage, STAGE_BYTES), "cudaMallocHost", err) != 0)
		return -1;
	s->place = calloc(ep->m->n + 1, sizeof *s->place);
	s->sums = calloc(ep->m->n + 1, sizeof *s->sums);
	if (!s->place || !s->sums) return xfer_fail(err, XFER_ENOMEM, "out of memory");
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
	free(s->place);
	free(s->sums);
	free(s);
	ep->impl = NULL;
}

static void ipc_abort(xfer_endpoint *ep)
{
	ipc_state *s = ep->impl;
	if (s && s->ctl >= 0) shutdown(s->ctl, SHUT_RDWR);
	if (s && s->lfd >= 0) shutdown(s->lfd, SHUT_RDWR);
}

/* Both sides, after a version went through: the copy time is the receiver's. */
static int version_done(xfer_endpoint *ep, double copy_seconds)
{
	ep->stats.data_seconds = copy_seconds;
	ep->stats.bytes_moved = ep->m->bytes;
	return 0;
}

/* Sender: exports the allocations behind its tensors. */
static int sender_connect(xfer_endpoint *ep, ipc_state *s, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	unsigned long long *base = calloc(m->n + 1, sizeof *base);
	xfer_cuda_ipc_handle *h = calloc(m->n + 1, sizeof *h);
	size_t dlen = 0;
	char *desc = xfer_manifest_describe(m, &dlen);
	uint32_t nb = 0;
	if (!base || !h || !desc) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
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
	ipc_hello hh = { .ntensors = (uint32_t)m->n, .nallocs = nb, .manifest_len = dlen };
	memcpy(hh.magic, "SKIPC1", 7);
	s->ctl = xfer_sock_connect(ep->cfg.p2p.host, ep->cfg.p2p.port, to, err);
	if (s->ctl < 0) goto err;
	struct iovec v[4] = { { &hh, sizeof hh }, { desc, dlen }, { h, nb * sizeof *h }, { s->place, m->n * sizeof *s->place } };
	if (xfer_sock_sendv(s->ctl, v, 4, "handles", "receiver", to, err) != 0) goto err;
	if (xfer_sock_recv_status(s->ctl, "receiver", to, err) != 0) goto err;
	free(base);
	free(h);
	free(desc);
	return 0;
err:
	free(base);
	free(h);
	free(desc);
	close_session(s);
	return -1;
}

static int ipc_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	ipc_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	if (s->ctl < 0 && sender_connect(ep, s, err) != 0) return -1;
	if (xfer_cuda_check(s->cu, s->cu->DeviceSynchronize(), "cudaDeviceSynchronize", err) != 0) goto err;
	for (size_t i = 0; i < m->n; i++) {
		s->sums[i] = (xfer_sum){ 0, 0 };
		if (ep->cfg.verify_device && xfer_tensor_checksum(&m->t[i], s->hstage, STAGE_BYTES, &s->sums[i], err) != 0)
			goto err;
	}
	ipc_vhead h = { .ntensors = (uint32_t)m->n, .version = v, .total = m->bytes };
	memcpy(h.magic, "SKV1", 4);
	struct iovec iv[2] = { { &h, sizeof h }, { s->sums, m->n * sizeof *s->sums } };
	if (xfer_sock_sendv(s->ctl, iv, 2, "version header", "receiver", to, err) != 0) goto err;
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
	s->bases = calloc(hh.nallocs + 1, sizeof *s->bases);
	if (!desc || !h || !s->bases) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto err; }
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
	}
	for (size_t i = 0; st.code == XFER_OK && i < m->n; i++)
		if (m->t[i].nbytes && s->place[i].alloc >= hh.nallocs)
			xfer_fail(&st, XFER_EFORMAT, "tensor %s: allocation index out of range", m->t[i].name);
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	free(desc);
	free(h);
	xfer_manifest_free(&theirs);
	return 0;
err:
	free(desc);
	free(h);
	xfer_manifest_free(&theirs);
	close_session(s);
	return -1;
}

static int ipc_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err)
{
	ipc_state *s = ep->impl;
	const xfer_manifest *m = ep->m;
	int to = ep->cfg.timeout_ms;
	if (s->ctl < 0 && receiver_accept(ep, s, wait_ms, err) != 0) return -1;
	if (xfer_sock_wait(s->ctl, wait_ms, err) != 0) return -1;
	ipc_vhead h;
	if (xfer_sock_recv(s->ctl, &h, sizeof h, "version header", "sender", to, err) != 0) goto err;
	if (memcmp(h.magic, "SKV1", 4) != 0 || h.ntensors != m->n || h.total != m->bytes) {
		xfer_fail(err, XFER_EFORMAT, "malformed version header");
		goto err;
	}
	if (xfer_sock_recv(s->ctl, s->sums, m->n * sizeof *s->sums, "checksums", "sender", to, err) != 0) goto err;
	xfer_err st = { 0 };
	/* Check the sender's bytes first: a mismatch leaves our buffers alone. */
	for (size_t i = 0; ep->cfg.verify_device && i < m->n; i++) {
		xfer_tensor src = m->t[i];
		xfer_sum got;
		if (!src.nbytes) continue;
		src.ptr = (char *)s->bases[s->place[i].alloc] + s->place[i].offset;
		if (xfer_tensor_checksum(&src, s->hstage, STAGE_BYTES, &got, &st) != 0) break;
		if (!xfer_sum_equal(got, s->sums[i])) {
			xfer_fail(&st, XFER_ECHECKSUM, "version %llu tensor %s: checksum mismatch in the sender's memory",
				  (unsigned long long)h.version, m->t[i].name);
			break;
		}
	}
	double t0 = xfer_now();
	for (size_t i = 0; st.code == XFER_OK && i < m->n; i++) {
		if (!m->t[i].nbytes) continue;
		const char *src = (char *)s->bases[s->place[i].alloc] + s->place[i].offset;
		xfer_cuda_check(s->cu, s->cu->MemcpyAsync(m->t[i].ptr, src, m->t[i].nbytes, XFER_CUDA_D2D, s->stream),
				"cudaMemcpyAsync", &st);
	}
	if (st.code == XFER_OK) xfer_cuda_check(s->cu, s->cu->StreamSynchronize(s->stream), "cudaStreamSynchronize", &st);
	double dsec = xfer_now() - t0;
	if (xfer_sock_send_status(s->ctl, &st, to, err) != 0) goto err;
	if (st.code != XFER_OK) {
		*err = st;
		goto err;
	}
	if (xfer_sock_send(s->ctl, &dsec, sizeof dsec, "copy time", "sender", to, err) != 0) goto err;
	*version = h.version;
	return version_done(ep, dsec);
err:
	close_session(s);
	return -1;
}

const xfer_path_ops xfer_ipc_ops = {
	.name = "colocated",
	.probe = ipc_probe,
	.setup = ipc_setup,
	.send = ipc_send,
	.receive = ipc_receive,
	.abort = ipc_abort,
	.teardown = ipc_teardown,
};
