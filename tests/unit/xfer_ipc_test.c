/* tests/unit/xfer_ipc_test.c: the colocated path's own socket (not the
 * agents' handoff) between two processes, over the stand-in CUDA runtime
 * of tests/fakecuda (make test names it in SKEIN_FAKE_CUDART): its "device"
 * memory is shared memory, so the receiver opens the sender's IPC handles
 * as on one GPU, and without GPU kernels it checks on the CPU.
 *
 * A round trip of two versions, bit for bit; then a sender whose handles
 * place a tensor past the end of its allocation (xfer_hooks.ipc_place_shift)
 * is refused before a byte is read or written, both ends say why, and the
 * next sender's version lands. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_int.h"

#include <sys/wait.h>
#include <unistd.h>

enum { IN = 3 };
static const uint64_t in_bytes[IN] = { (1 << 20) + 5, 3, 300 * 1024 + 7 };

typedef struct {
	xfer_manifest *m;
	unsigned char *p[IN];
} imodel;

/* Three tensors, each its own allocation of the loaded (stand-in) runtime,
 * filled from seed. */
static void im_make(imodel *g, uint64_t seed)
{
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) T_FAIL("CUDA runtime: %s", why);
	g->m = xfer_manifest_new();
	for (int i = 0; i < IN; i++) {
		T_EQ(cu->Malloc((void **)&g->p[i], in_bytes[i]), 0);
		char name[16];
		snprintf(name, sizeof name, "w%d", i);
		int64_t shape[1] = { (int64_t)in_bytes[i] };
		T_XOK(xfer_manifest_add(g->m, name, XFER_U8, 1, shape, g->p[i], XFER_MEM_CUDA, err_));
	}
	sk_rng r;
	sk_rng_seed(&r, seed);
	for (int i = 0; i < IN; i++) tm_fill(&r, g->p[i], in_bytes[i]); /* stand-in device memory is host memory */
}

static int im_same(const imodel *a, const imodel *b)
{
	for (int i = 0; i < IN; i++)
		if (memcmp(a->p[i], b->p[i], in_bytes[i])) return 0;
	return 1;
}

static xfer_endpoint *open_ipc(xfer_role role, const xfer_manifest *m, int port)
{
	xfer_config c;
	xfer_config_init(&c);
	c.path = "colocated";
	c.role = role;
	c.p2p.port = port;
	c.timeout_ms = 5000;
	xfer_endpoint *ep = NULL;
	T_XOK(xfer_open(&ep, &c, m, err_));
	return ep;
}

static void use_fake_cuda(void)
{
	const char *fk = getenv("SKEIN_FAKE_CUDART");
	if (!fk) T_FAIL("SKEIN_FAKE_CUDART must name the stand-in CUDA runtime (make test sets it)");
	setenv("SKEIN_CUDART_LIB", fk, 1);
	setenv("SKEIN_CUDA_LIB", fk, 1);
}

/* The receiver's side of a case: (want_fail[k]) expected per attempt, and
 * after each its tensors compared with the sender's model of that time
 * (seed). */
static int child_receive(xfer_endpoint *rcv, imodel *en, const uint64_t *seeds, const int *want_fail, int n)
{
	imodel want;
	for (int k = 0; k < n; k++) {
		xfer_err e = { 0 };
		uint64_t got = 0;
		int ok = xfer_receive(rcv, 10000, &got, &e) == 0;
		im_make(&want, seeds[k]);
		if (ok == want_fail[k] || !im_same(en, &want)) {
			printf("  receiver, attempt %d: %s (%s)\n", k, ok ? "received" : e.msg,
			       im_same(en, &want) ? "tensors as expected" : "tensors NOT as expected");
			return 1 + k;
		}
		if (want_fail[k] && (e.code != XFER_EFORMAT || !strstr(e.msg, "outside the sender's allocations"))) {
			printf("  receiver, attempt %d: wanted a refusal, got: %s\n", k, e.msg);
			return 10 + k;
		}
	}
	return 0;
}

/* A receiving process (its engine's model of seed + 100) expecting
 * attempts as child_receive does; *port is where it listens. */
static pid_t start_receiver(uint64_t seed, const uint64_t *seeds, const int *fails, int n, int *port)
{
	imodel en;
	use_fake_cuda();
	im_make(&en, seed + 100);
	xfer_endpoint *rcv = open_ipc(XFER_RECEIVER, en.m, 0);
	*port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) _exit(child_receive(rcv, &en, seeds, fails, n));
	xfer_close(&rcv);
	return pid;
}

T_TEST(xfer_ipc_socket_roundtrip)
{
	uint64_t seed = t_seed();
	imodel tr;
	const uint64_t seeds[2] = { seed + 1, seed + 2 };
	const int fails[2] = { 0, 0 };
	int port;
	pid_t pid = start_receiver(seed, seeds, fails, 2, &port);
	im_make(&tr, seeds[0]);
	xfer_endpoint *snd = open_ipc(XFER_SENDER, tr.m, port);
	T_XOK(xfer_send(snd, 1, err_));
	sk_rng r;
	sk_rng_seed(&r, seeds[1]);
	for (int i = 0; i < IN; i++) tm_fill(&r, tr.p[i], in_bytes[i]);
	T_XOK(xfer_send(snd, 2, err_));
	xfer_close(&snd);
	T_EQ(t_wait_child(pid, 20000), 0);
}

T_TEST(xfer_ipc_socket_place_outside_allocation_refused)
{
	uint64_t seed = t_seed();
	imodel tr;
	/* attempt 0 refused: the engine's own bytes stay; attempt 1 lands */
	const uint64_t seeds[2] = { seed + 100, seed + 1 };
	const int fails[2] = { 1, 0 };
	int port;
	pid_t pid = start_receiver(seed, seeds, fails, 2, &port);
	im_make(&tr, seed + 1);
	xfer_hooks.ipc_place_shift = 1 << 20; /* w2 (300 KiB) said to start 1 MiB into its allocation */
	xfer_endpoint *snd = open_ipc(XFER_SENDER, tr.m, port);
	xfer_err e = { 0 };
	T_EQ(xfer_send(snd, 1, &e), -1);
	xfer_hooks.ipc_place_shift = 0;
	if (!strstr(e.msg, "outside the sender's allocations")) T_FAIL("sender: %s", e.msg);
	xfer_close(&snd);
	snd = open_ipc(XFER_SENDER, tr.m, port);
	T_XOK(xfer_send(snd, 1, err_));
	xfer_close(&snd);
	T_EQ(t_wait_child(pid, 20000), 0);
}
