/* tests/gpu/gpu_xfer_test.c: libskein's GPU paths on a real GPU (run by
 * tests/gpu/run.sh on the H200 machine; needs cuda_runtime.h and libcudart).
 *
 *   gpu_xfer_test ipc BYTES    colocated CUDA IPC between two processes on one
 *                              GPU, bit-exact, beside a device-to-device copy
 *   gpu_xfer_test nccl         NCCL world of one: broadcast and
 *                              broadcast_packed leave the buffers as they were;
 *                              a rank that never joins: watchdog + abort
 *   gpu_xfer_test tcp BYTES    p2p-tcp from device memory to device memory
 *                              (staged through pinned host buffers) beside a
 *                              plain socket send of the same bytes
 *
 * Processes fork before any CUDA call.  Bit-exactness is checked by each side
 * hashing its own device buffers with this file's own code (copy to host,
 * xxh3-128) and comparing through a pipe, independently of the library's
 * checks.  Each mode prints "RESULT key=value ..." lines and "# N passed, M
 * failed". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "transfer/skein_xfer.h"

#include <arpa/inet.h>
#include <cuda_runtime.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static int g_pass, g_fail;
#define CHECK(c, ...)                                                         \
	do {                                                                  \
		if (c) { g_pass++; printf("ok   " __VA_ARGS__); printf("\n"); } \
		else { g_fail++; printf("FAIL " __VA_ARGS__); printf("  (%s:%d)\n", __FILE__, __LINE__); } \
		fflush(stdout);                                               \
	} while (0)
#define CU(call)                                                              \
	do {                                                                  \
		cudaError_t e_ = (call);                                      \
		if (e_ != cudaSuccess) {                                      \
			printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_)); \
			exit(1);                                              \
		}                                                             \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

enum { STAGE = 64 << 20, NALLOC = 4 };

/* A model in NALLOC device allocations, each holding `per` tensors. */
typedef struct {
	size_t n;
	char *alloc[NALLOC];
	char **t;
	uint64_t *bytes;
	xfer_manifest *m;
} gmodel;

static void gm_make(gmodel *g, uint64_t total, size_t per)
{
	memset(g, 0, sizeof *g);
	g->n = NALLOC * per;
	g->t = calloc(g->n, sizeof *g->t);
	g->bytes = calloc(g->n, sizeof *g->bytes);
	g->m = xfer_manifest_new();
	uint64_t abytes = total / NALLOC;
	for (int a = 0; a < NALLOC; a++) {
		CU(cudaMalloc((void **)&g->alloc[a], abytes));
		uint64_t off = 0;
		for (size_t k = 0; k < per; k++) {
			size_t i = a * per + k;
			uint64_t b = k + 1 == per ? abytes - off : (abytes / per) & ~(uint64_t)255;
			if (k == 1) b -= 6; /* an odd size: offsets are not all aligned */
			g->t[i] = g->alloc[a] + off;
			g->bytes[i] = b;
			char name[64];
			snprintf(name, sizeof name, "layers.%d.w%zu", a, k);
			int64_t shape[1] = { (int64_t)b };
			xfer_err e;
			if (xfer_manifest_add(g->m, name, XFER_U8, 1, shape, g->t[i], XFER_MEM_CUDA, &e) != 0) {
				printf("FAIL manifest: %s\n", e.msg);
				exit(1);
			}
			off += b;
		}
	}
}

static void gm_fill(gmodel *g, uint64_t seed)
{
	unsigned char *h = malloc(STAGE);
	uint64_t x = seed;
	for (size_t i = 0; i < STAGE; i += 8) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(h + i, &x, 8);
	}
	for (size_t i = 0; i < g->n; i++)
		for (uint64_t o = 0; o < g->bytes[i]; o += STAGE) {
			uint64_t k = g->bytes[i] - o < STAGE ? g->bytes[i] - o : STAGE;
			size_t rot = (size_t)((i * 977 + o / STAGE * 131) % 4096) * 8;
			if (rot + k > STAGE) rot = 0;
			CU(cudaMemcpy(g->t[i] + o, h + rot, k, cudaMemcpyHostToDevice));
		}
	free(h);
	CU(cudaDeviceSynchronize());
}

/* About `frac` of the bytes change: scattered 4 KiB patches. */
static void gm_step(gmodel *g, double frac, int v)
{
	for (size_t i = 0; i < g->n; i++) {
		uint64_t patches = (uint64_t)(g->bytes[i] * frac / 4096) + 1;
		for (uint64_t p = 0; p < patches; p++) {
			uint64_t at = ((p * 2654435761ull + i * 97 + v * 31) * 4096) % (g->bytes[i] > 4096 ? g->bytes[i] - 4096 : 1);
			CU(cudaMemset(g->t[i] + at, (int)(v * 17 + p) & 0xff, g->bytes[i] < 4096 ? g->bytes[i] : 4096));
		}
	}
	CU(cudaDeviceSynchronize());
}

/* This file's own hash of every tensor (independent of libskein). */
static void gm_hash(gmodel *g, XXH128_hash_t *out)
{
	unsigned char *h;
	CU(cudaMallocHost((void **)&h, STAGE));
	XXH3_state_t *st = XXH3_createState();
	for (size_t i = 0; i < g->n; i++) {
		XXH3_128bits_reset(st);
		for (uint64_t o = 0; o < g->bytes[i]; o += STAGE) {
			uint64_t k = g->bytes[i] - o < STAGE ? g->bytes[i] - o : STAGE;
			CU(cudaMemcpy(h, g->t[i] + o, k, cudaMemcpyDeviceToHost));
			XXH3_128bits_update(st, h, k);
		}
		out[i] = XXH3_128bits_digest(st);
	}
	XXH3_freeState(st);
	CU(cudaFreeHost(h));
}

static void gm_free(gmodel *g)
{
	for (int a = 0; a < NALLOC; a++) cudaFree(g->alloc[a]);
	free(g->t);
	free(g->bytes);
	xfer_manifest_free(&g->m);
}

static int rd(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n);
		if (r <= 0) return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static int wr(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w <= 0) return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static xfer_endpoint *open_or_die(const char *path, xfer_role role, const xfer_manifest *m, int port, uint64_t bucket)
{
	xfer_config c;
	xfer_config_init(&c);
	c.path = path;
	c.role = role;
	c.p2p.port = port;
	c.timeout_ms = 60000;
	if (bucket) c.bucket_bytes = bucket;
	xfer_endpoint *ep;
	xfer_err e;
	if (xfer_open(&ep, &c, m, &e) != 0) {
		printf("FAIL open %s: %s\n", path, e.msg);
		exit(1);
	}
	return ep;
}

/* ---- colocated ---- */

static int mode_ipc(uint64_t total, int versions)
{
	size_t per = 16;
	int p2c[2], c2p[2];
	if (pipe(p2c) || pipe(c2p)) return 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		gmodel g;
		CU(cudaSetDevice(0));
		gm_make(&g, total, per);
		xfer_endpoint *ep = open_or_die("colocated", XFER_RECEIVER, g.m, 0, 0);
		int port = xfer_endpoint_port(ep);
		wr(c2p[1], &port, sizeof port);
		XXH128_hash_t *hs = calloc(g.n, sizeof *hs);
		for (int v = 1; v <= versions; v++) {
			xfer_err e;
			uint64_t got;
			int ok = xfer_receive(ep, 120000, &got, &e) == 0;
			if (!ok) printf("  receiver: %s\n", e.msg);
			gm_hash(&g, hs);
			double ds = xfer_endpoint_stats(ep).data_seconds;
			wr(c2p[1], &ok, sizeof ok);
			wr(c2p[1], &ds, sizeof ds);
			wr(c2p[1], hs, g.n * sizeof *hs);
		}
		xfer_close(&ep);
		gm_free(&g);
		fflush(stdout);
		_exit(0);
	}
	close(c2p[1]);
	int port;
	if (rd(c2p[0], &port, sizeof port)) return 1;
	gmodel g;
	CU(cudaSetDevice(0));
	gm_make(&g, total, per);
	gm_fill(&g, 7);
	xfer_endpoint *ep = open_or_die("colocated", XFER_SENDER, g.m, port, 0);
	XXH128_hash_t *mine = calloc(g.n, sizeof *mine), *theirs = calloc(g.n, sizeof *theirs);
	double copy_s[16] = { 0 }, whole_s[16] = { 0 };
	int all_exact = 1;
	for (int v = 1; v <= versions; v++) {
		if (v > 1) gm_step(&g, 0.01, v);
		xfer_err e;
		int ok = xfer_send(ep, (uint64_t)v, &e) == 0;
		if (!ok) printf("  sender: %s\n", e.msg);
		xfer_stats st = xfer_endpoint_stats(ep);
		whole_s[v - 1] = st.seconds;
		gm_hash(&g, mine);
		int rok;
		double ds;
		if (rd(c2p[0], &rok, sizeof rok) || rd(c2p[0], &ds, sizeof ds) || rd(c2p[0], theirs, g.n * sizeof *theirs))
			return 1;
		copy_s[v - 1] = ds;
		int exact = ok && rok && memcmp(mine, theirs, g.n * sizeof *mine) == 0;
		all_exact &= exact;
		printf("  v%d: update %.3f s (copy %.4f s, the rest is checksums on the CPU)\n", v, st.seconds, ds);
	}
	CHECK(all_exact, "colocated: %d versions of %.2f GiB bit-exact between two processes", versions,
	      total / 1073741824.0);
	/* device-to-device copy of the same bytes in this process */
	char *dst;
	CU(cudaMalloc((void **)&dst, total));
	double d2d[5];
	for (int r = 0; r < 5; r++) {
		CU(cudaDeviceSynchronize());
		double t0 = now();
		uint64_t off = 0;
		for (int a = 0; a < NALLOC; a++) {
			CU(cudaMemcpyAsync(dst + off, g.alloc[a], total / NALLOC, cudaMemcpyDeviceToDevice, 0));
			off += total / NALLOC;
		}
		CU(cudaDeviceSynchronize());
		d2d[r] = now() - t0;
	}
	double best_d2d = d2d[0], best_ipc = copy_s[0];
	for (int r = 1; r < 5; r++) if (d2d[r] < best_d2d) best_d2d = d2d[r];
	for (int v = 1; v < versions; v++) if (copy_s[v] < best_ipc) best_ipc = copy_s[v];
	double gi = total / 1e9;
	printf("RESULT mode=colocated bytes=%llu ipc_copy_s=%.5f ipc_gbps=%.1f d2d_s=%.5f d2d_gbps=%.1f ratio=%.3f "
	       "update_with_checksums_s=%.3f\n",
	       (unsigned long long)total, best_ipc, gi / best_ipc, best_d2d, gi / best_d2d, best_d2d / best_ipc,
	       whole_s[versions - 1]);
	CHECK(best_d2d / best_ipc >= 0.8, "colocated copy >= 0.8x a device-to-device copy (%.2fx)", best_d2d / best_ipc);
	cudaFree(dst);
	xfer_close(&ep);
	gm_free(&g);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "colocated receiver exited cleanly");
	return 0;
}

/* ---- NCCL ---- */

static int mode_nccl(void)
{
	char why[256];
	if (xfer_probe("broadcast", why, sizeof why) != 0) {
		CHECK(0, "NCCL available (%s)", why);
		return 0;
	}
	CU(cudaSetDevice(0));
	gmodel g;
	gm_make(&g, 256ull << 20, 9);
	gm_fill(&g, 11);
	XXH128_hash_t *before = calloc(g.n, sizeof *before), *after = calloc(g.n, sizeof *after);
	gm_hash(&g, before);
	const char *paths[2] = { "broadcast", "broadcast_packed" };
	for (int p = 0; p < 2; p++) {
		xfer_config c;
		xfer_config_init(&c);
		c.path = paths[p];
		c.role = XFER_SENDER;
		c.bucket_bytes = 40 << 20; /* several buckets, one tensor alone */
		c.timeout_ms = 20000;
		xfer_err e;
		if (xfer_nccl_unique_id(c.nccl.id, &e) != 0) { CHECK(0, "ncclGetUniqueId: %s", e.msg); continue; }
		c.nccl.nranks = 1;
		xfer_endpoint *ep;
		if (xfer_open(&ep, &c, g.m, &e) != 0) { CHECK(0, "%s open: %s", paths[p], e.msg); continue; }
		int ok = 1;
		for (uint64_t v = 1; v <= 3 && ok; v++) ok = xfer_send(ep, v, &e) == 0;
		if (!ok) printf("  %s: %s\n", paths[p], e.msg);
		xfer_stats st = xfer_endpoint_stats(ep);
		gm_hash(&g, after);
		CHECK(ok && memcmp(before, after, g.n * sizeof *after) == 0,
		      "%s world of one: 3 versions, buffers as they were", paths[p]);
		printf("RESULT mode=%s ranks=1 bytes=%llu broadcast_s=%.5f with_checksums_s=%.3f\n", paths[p],
		       (unsigned long long)xfer_manifest_bytes(g.m), st.data_seconds, st.seconds);
		xfer_close(&ep);
	}
	/* A world of two where rank 1 never comes: the watchdog aborts init. */
	xfer_config c;
	xfer_config_init(&c);
	c.path = "broadcast";
	c.role = XFER_SENDER;
	c.timeout_ms = 3000;
	c.nccl.nranks = 2;
	xfer_err e;
	xfer_nccl_unique_id(c.nccl.id, &e);
	xfer_endpoint *ep = NULL;
	double t0 = now();
	int rc = xfer_open(&ep, &c, g.m, &e);
	double dt = now() - t0;
	printf("  watchdog: %s\n", rc ? e.msg : "(opened?)");
	CHECK(rc != 0 && e.code == XFER_ETIMEOUT && strstr(e.msg, "ncclCommAbort") && dt < 10,
	      "NCCL rank missing: watchdog timeout and ncclCommAbort after %.1f s (limit 3 s)", dt);
	printf("RESULT mode=nccl-watchdog timeout_ms=3000 seconds=%.2f\n", dt);
	xfer_close(&ep);
	/* abort from another thread is the same loop (ep->aborted); not timed here */
	gm_free(&g);
	return 0;
}

/* ---- p2p-tcp from device memory ---- */

static int plain_listen(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	bind(fd, (struct sockaddr *)&sa, sizeof sa);
	listen(fd, 4);
	socklen_t sl = sizeof sa;
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	*port = ntohs(sa.sin_port);
	return fd;
}

static int mode_tcp(uint64_t total)
{
	int p2c[2], c2p[2];
	if (pipe(p2c) || pipe(c2p)) return 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int pport, lfd = plain_listen(&pport);
		gmodel g;
		CU(cudaSetDevice(0));
		gm_make(&g, total, 8);
		xfer_endpoint *ep = open_or_die("p2p-tcp", XFER_RECEIVER, g.m, 0, 64 << 20);
		int port = xfer_endpoint_port(ep);
		wr(c2p[1], &port, sizeof port);
		wr(c2p[1], &pport, sizeof pport);
		XXH128_hash_t *hs = calloc(g.n, sizeof *hs);
		for (int v = 1; v <= 2; v++) {
			xfer_err e;
			uint64_t got;
			int ok = xfer_receive(ep, 120000, &got, &e) == 0;
			if (!ok) printf("  receiver: %s\n", e.msg);
			gm_hash(&g, hs);
			wr(c2p[1], &ok, sizeof ok);
			wr(c2p[1], hs, g.n * sizeof *hs);
		}
		/* plain socket baseline: receive `total` bytes into host memory */
		int fd = accept(lfd, NULL, NULL);
		char *buf = malloc(64 << 20);
		uint64_t left = total;
		while (left) {
			ssize_t r = recv(fd, buf, left < (64u << 20) ? left : (64u << 20), 0);
			if (r <= 0) break;
			left -= (uint64_t)r;
		}
		char ack = 1;
		send(fd, &ack, 1, 0);
		close(fd);
		xfer_close(&ep);
		gm_free(&g);
		fflush(stdout);
		_exit(left ? 1 : 0);
	}
	close(c2p[1]);
	int port, pport;
	if (rd(c2p[0], &port, sizeof port) || rd(c2p[0], &pport, sizeof pport)) return 1;
	CU(cudaSetDevice(0));
	gmodel g;
	gm_make(&g, total, 8);
	gm_fill(&g, 3);
	xfer_endpoint *ep = open_or_die("p2p-tcp", XFER_SENDER, g.m, port, 64 << 20);
	XXH128_hash_t *mine = calloc(g.n, sizeof *mine), *theirs = calloc(g.n, sizeof *theirs);
	int exact = 1;
	double sec = 0;
	for (int v = 1; v <= 2; v++) {
		if (v > 1) gm_step(&g, 0.01, v);
		xfer_err e;
		int ok = xfer_send(ep, (uint64_t)v, &e) == 0;
		if (!ok) printf("  sender: %s\n", e.msg);
		sec = xfer_endpoint_stats(ep).seconds;
		gm_hash(&g, mine);
		int rok;
		if (rd(c2p[0], &rok, sizeof rok) || rd(c2p[0], theirs, g.n * sizeof *theirs)) return 1;
		exact &= ok && rok && memcmp(mine, theirs, g.n * sizeof *mine) == 0;
	}
	CHECK(exact, "p2p-tcp device to device through pinned host buffers: bit-exact");
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)pport),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	connect(fd, (struct sockaddr *)&sa, sizeof sa);
	char *buf = malloc(64 << 20);
	memset(buf, 1, 64 << 20);
	double t0 = now();
	uint64_t left = total;
	while (left) {
		ssize_t w = send(fd, buf, left < (64u << 20) ? left : (64u << 20), MSG_NOSIGNAL);
		if (w <= 0) break;
		left -= (uint64_t)w;
	}
	char ack;
	recv(fd, &ack, 1, 0);
	double plain = now() - t0;
	close(fd);
	printf("RESULT mode=p2p-tcp-device bytes=%llu seconds=%.3f gbps=%.2f plain_socket_s=%.3f plain_gbps=%.2f ratio=%.3f\n",
	       (unsigned long long)total, sec, total / 1e9 / sec, plain, total / 1e9 / plain, plain / sec);
	xfer_close(&ep);
	gm_free(&g);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "p2p-tcp receiver exited cleanly");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s ipc BYTES | nccl | tcp BYTES\n", argv[0]);
		return 2;
	}
	uint64_t bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : (1ull << 30);
	int rc = 1;
	if (!strcmp(argv[1], "ipc")) rc = mode_ipc(bytes, 4);
	else if (!strcmp(argv[1], "nccl")) rc = mode_nccl();
	else if (!strcmp(argv[1], "tcp")) rc = mode_tcp(bytes);
	printf("# %d passed, %d failed\n", g_pass, g_fail + (rc ? 1 : 0));
	return g_fail || rc ? 1 : 0;
}
