/* tests/gpu/ucx_gpu_test.c: p2p-ucx from device memory to device memory,
 * staged through pinned host buffers on both sides (run by
 * tests/gpu/ucx_run.sh on the H200 machine, under each UCX_TLS given).
 *
 *   ucx_gpu_test BYTES [KEEP]
 *
 * Two processes (forked before any CUDA or UCX call) each hold BYTES of
 * bf16 in 8 device tensors.  Version 1 lands everything; version 2 changes
 * about 1% and is timed; version 3 has a byte corrupted on its way in its
 * last bucket and must fail on both sides with the receiver's device
 * buffers still on version 2 (KEEP 1, the default: the undo journal on the
 * device's behalf); version 4 lands again.  Each side hashes its own device
 * buffers with this file's own code (copy to host, xxh3-128) and the parent
 * compares through a pipe.  CUDA comes through libskein's dlopen'd runtime,
 * so this builds without CUDA's headers.  Prints RESULT lines and "# N
 * passed, M failed". */
#include "transfer/core/xfer_int.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "transfer/core/xfer_hash.h"

enum { NT = 8, BUCKET = 64 << 20 };

static int g_pass, g_fail;
#define CHECK(c, ...)                                                                              \
	do {                                                                                       \
		if (c) { g_pass++; printf("ok   " __VA_ARGS__); printf("\n"); }                    \
		else { g_fail++; printf("FAIL " __VA_ARGS__); printf("  (line %d)\n", __LINE__); } \
		fflush(stdout);                                                                    \
	} while (0)

typedef struct {
	const xfer_cuda_api *cu;
	void *d[NT];
	unsigned char *h; /* a host copy of one tensor */
	uint64_t per;
	xfer_manifest *m;
} model;

static void die(const char *what, const char *why)
{
	printf("FAIL %s: %s\n# 0 passed, 1 failed\n", what, why);
	exit(1);
}

static void make(model *x, uint64_t bytes, int fill, uint64_t seed)
{
	char why[256];
	if (!(x->cu = xfer_cuda(why, sizeof why))) die("CUDA", why);
	x->cu->SetDevice(0);
	x->per = bytes / NT / 2 * 2;
	x->h = malloc(x->per);
	x->m = xfer_manifest_new();
	for (int i = 0; i < NT; i++) {
		if (x->cu->Malloc(&x->d[i], x->per) != 0) die("cudaMalloc", "failed");
		for (uint64_t k = 0; k < x->per; k++)
			x->h[k] = fill ? (unsigned char)((k * 2654435761u + (uint64_t)i * 977 + seed) >> 7) : 0xA5;
		x->cu->Memcpy(x->d[i], x->h, x->per, XFER_CUDA_H2D);
		char name[32];
		int64_t shape[1] = { (int64_t)(x->per / 2) };
		xfer_err e;
		snprintf(name, sizeof name, "layers.%d.w", i);
		if (xfer_manifest_add(x->m, name, XFER_BF16, 1, shape, x->d[i], XFER_MEM_CUDA, &e) != 0) die("manifest", e.msg);
	}
}

/* About frac of the bf16 elements of every tensor changed (on the device). */
static void step(model *x, double frac, unsigned salt)
{
	for (int i = 0; i < NT; i++) {
		x->cu->Memcpy(x->h, x->d[i], x->per, XFER_CUDA_D2H);
		uint64_t n = (uint64_t)(x->per / 2 * frac) + 1;
		for (uint64_t k = 0; k < n; k++) x->h[(k * 7919 * 2 + salt * 2) % x->per] ^= (unsigned char)(1 + salt % 200);
		x->cu->Memcpy(x->d[i], x->h, x->per, XFER_CUDA_H2D);
	}
}

static xfer_sum hash(model *x)
{
	XXH3_state_t *st = XXH3_createState();
	XXH3_128bits_reset(st);
	for (int i = 0; i < NT; i++) {
		x->cu->Memcpy(x->h, x->d[i], x->per, XFER_CUDA_D2H);
		XXH3_128bits_update(st, x->h, x->per);
	}
	XXH128_hash_t d = XXH3_128bits_digest(st);
	XXH3_freeState(st);
	return (xfer_sum){ d.low64, d.high64 };
}

static xfer_config config(xfer_role role, int port, int keep)
{
	xfer_config c;
	xfer_config_init(&c);
	c.path = "p2p-ucx";
	c.role = role;
	c.p2p.port = port;
	c.keep_previous = keep;
	c.bucket_bytes = BUCKET;
	c.timeout_ms = 20000;
	return c;
}

/* The receiver: 4 versions, the third must fail; its hash after each. */
static int receiver(uint64_t bytes, int keep, int out)
{
	model x;
	make(&x, bytes, 0, 0);
	xfer_config c = config(XFER_RECEIVER, 0, keep);
	xfer_endpoint *ep;
	xfer_err e;
	if (xfer_open(&ep, &c, x.m, &e) != 0) die("receiver open", e.msg);
	int port = xfer_endpoint_port(ep);
	if (write(out, &port, sizeof port) != sizeof port) return 2;
	for (int v = 1; v <= 4; v++) {
		uint64_t got = 0;
		int rc = xfer_receive(ep, 60000, &got, &e);
		if (v == 3) printf("RESULT receiver_v3=%s undo_s=%.3f journal_bytes=%llu (%s)\n", rc ? "failed" : "LANDED",
				   xfer_endpoint_stats(ep).undo_seconds,
				   (unsigned long long)xfer_endpoint_stats(ep).journal_bytes, rc ? e.msg : "");
		else if (rc) printf("receiver v%d: %s\n", v, e.msg);
		fflush(stdout);
		xfer_sum s = hash(&x);
		if (write(out, &s, sizeof s) != sizeof s) return 2;
	}
	xfer_close(&ep);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (1ull << 30);
	int keep = argc > 2 ? atoi(argv[2]) : 1;
	int pfd[2];
	if (pipe(pfd) != 0) die("pipe", "failed");
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		_exit(receiver(bytes, keep, pfd[1]));
	}
	close(pfd[1]);
	model x;
	make(&x, bytes, 1, 1);
	int port;
	xfer_err e;
	if (read(pfd[0], &port, sizeof port) != sizeof port) die("receiver", "no port");
	xfer_config c = config(XFER_SENDER, port, keep);
	xfer_endpoint *ep;
	if (xfer_open(&ep, &c, x.m, &e) != 0) die("sender open", e.msg);
	xfer_sum got, want, v2;
	CHECK(xfer_send(ep, 1, &e) == 0, "v1 sent (%s)", e.msg);
	printf("RESULT tls=%s path=%s note=\"%s\"\n", getenv("UCX_TLS") ? getenv("UCX_TLS") : "(default)",
	       xfer_endpoint_path(ep), xfer_endpoint_note(ep));
	want = hash(&x);
	CHECK(read(pfd[0], &got, sizeof got) == sizeof got && xfer_sum_equal(got, want), "v1 bit-exact on the device");
	step(&x, 0.01, 2);
	double t0 = xfer_now();
	CHECK(xfer_send(ep, 2, &e) == 0, "v2 sent (%s)", e.msg);
	double dt = xfer_now() - t0;
	v2 = hash(&x);
	CHECK(read(pfd[0], &got, sizeof got) == sizeof got && xfer_sum_equal(got, v2), "v2 bit-exact on the device");
	printf("RESULT device_to_device bytes=%llu seconds=%.3f gbps=%.2f keep_previous=%d sender_staging=%llu\n",
	       (unsigned long long)xfer_manifest_bytes(x.m), dt, xfer_manifest_bytes(x.m) / dt / 1e9, keep,
	       (unsigned long long)xfer_endpoint_stats(ep).staging_peak);
	step(&x, 0.5, 3);
	xfer_hooks.corrupt_at = 1 + (long long)(xfer_manifest_bytes(x.m) - 100);
	CHECK(xfer_send(ep, 3, &e) != 0 && strstr(e.msg, "checksum"), "v3 with a corrupt byte fails (%s)", e.msg);
	xfer_hooks.corrupt_at = 0;
	CHECK(read(pfd[0], &got, sizeof got) == sizeof got && (!keep || xfer_sum_equal(got, v2)),
	      "after v3 failed the receiver's device buffers hold v2%s", keep ? "" : " (not checked: keep_previous 0)");
	CHECK(xfer_send(ep, 4, &e) == 0, "v4 sent (%s)", e.msg);
	want = hash(&x);
	CHECK(read(pfd[0], &got, sizeof got) == sizeof got && xfer_sum_equal(got, want), "v4 bit-exact on the device");
	xfer_close(&ep);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "receiver exited cleanly");
	printf("# %d passed, %d failed\n", g_pass, g_fail);
	return g_fail ? 1 : 0;
}
