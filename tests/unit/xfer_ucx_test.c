/* tests/unit/xfer_ucx_test.c: p2p-ucx between two processes on one host,
 * with UCX over TCP (UCX_TLS=tcp) and over shared memory (UCX_TLS=sm), the
 * same scenarios as p2p-tcp (xfer_p2p_cases.h); then what "p2p" chooses
 * and says, and what xfer_probe("p2p-ucx") lists.  UCX (libucp.so.0) must
 * be installed: tools/deps.sh installs libucx-dev, which brings it. */
#include "tests/unit/xfer_p2p_cases.h"
#include "transfer/core/xfer_sock.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Every test runs in its own process (t_main forks), so UCX_TLS set here
 * holds for that test's sender and receiver alone. */
static void use_ucx(const char *tls)
{
	char why[512];
	setenv("UCX_TLS", tls, 1);
	p2p_path = "p2p-ucx";
	if (xfer_probe("p2p-ucx", why, sizeof why) != 0) T_FAIL("p2p-ucx cannot run here: %s", why);
}

/* Buckets of 8 KiB: every tensor of the model, and one of 20 kB larger
 * than a bucket, in about 150 chunks per version through two slots; ring:
 * buckets of 64 KiB, chunks of 8 KiB through a ring of 8 slots on 4 lanes. */
#define UCX_CASES(tls, name)                                                                            \
	T_TEST(xfer_ucx_##name##_roundtrip_staged) { use_ucx(tls); roundtrip(1, 3, 8192, 20000); }     \
	T_TEST(xfer_ucx_##name##_roundtrip_direct) { use_ucx(tls); roundtrip(0, 2, 8192, 20000); }     \
	T_TEST(xfer_ucx_##name##_roundtrip_ring) { use_ucx(tls); roundtrip(1, 4, 65536, 200000); }     \
	T_TEST(xfer_ucx_##name##_corrupt_bucket_undone) { use_ucx(tls); corrupt_keeps_old_version(); } \
	T_TEST(xfer_ucx_##name##_corrupt_version_undone)                                                \
	{                                                                                               \
		use_ucx(tls);                                                                           \
		corrupt_keeps_old_version_by(1);                                                        \
	}                                                                                               \
	T_TEST(xfer_ucx_##name##_receiver_killed_ends_sender) { use_ucx(tls); receiver_vanishes(1); }  \
	T_TEST(xfer_ucx_##name##_receiver_stopped_ends_sender_by_watchdog)                              \
	{                                                                                               \
		use_ucx(tls);                                                                           \
		receiver_vanishes(0);                                                                   \
	}                                                                                               \
	T_TEST(xfer_ucx_##name##_sender_dies_receiver_keeps_old_version)                                \
	{                                                                                               \
		use_ucx(tls);                                                                           \
		sender_dies_receiver_keeps_old_version();                                               \
	}

UCX_CASES("tcp", tcp)
UCX_CASES("sm", sm)

/* Tensors of several tree chunks (256 KiB) and a partial one, cut into
 * chunks and lanes on tree boundaries (wire 4): staged, direct, and
 * buckets of 64 MiB (chunks of 8 MiB). */
T_TEST(xfer_ucx_sm_tree_chunks_staged) { use_ucx("sm"); roundtrip(1, 4, 1 << 20, (3 << 20) + 12346); }
T_TEST(xfer_ucx_sm_tree_chunks_direct) { use_ucx("sm"); roundtrip(0, 3, 1 << 20, (3 << 20) + 12346); }
T_TEST(xfer_ucx_tcp_tree_chunks_big_buckets) { use_ucx("tcp"); roundtrip(1, 5, 64 << 20, (9 << 20) + 78); }

/* The tree sums checked per chunk are the version's: the receiver keeps the
 * root of what it verified (Done.root), the sender of what it sent, and
 * both are the root of the tensors' tree checksums. */
T_TEST(xfer_ucx_receiver_root_is_the_senders)
{
	use_ucx("sm");
	uint64_t seed = t_seed();
	sk_rng r;
	sk_rng_seed(&r, seed);
	tmodel tr, en;
	tm_make(&tr, &r, (1 << 20) + 6, 1);
	tm_make(&en, &r, (1 << 20) + 6, 0);
	int fd[2];
	T_EQ(pipe(fd), 0);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 1 << 20, 5000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_err e;
		uint64_t got = 0;
		if (xfer_receive(rcv, 10000, &got, &e) != 0 || got != 1 || rcv->root_version != 1) {
			printf("  receiver: %s (root of v%llu)\n", e.msg, (unsigned long long)rcv->root_version);
			fflush(stdout);
			_exit(1);
		}
		_exit(write(fd[1], rcv->root, 16) == 16 ? 0 : 2);
	}
	close(fd[1]);
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 1 << 20, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	unsigned char theirs[16];
	T_EQ(read(fd[0], theirs, 16), 16);
	close(fd[0]);
	T_EQ(t_wait_child(pid, 20000), 0);
	T_EQ(snd->root_version, 1);
	T_CHECK(!memcmp(snd->root, theirs, 16));
	xfer_sum *sums = calloc(tr.n + 1, sizeof *sums);
	unsigned char want[16];
	T_XOK(xfer_tree_sums((const void *const *)tr.p, tr.bytes, tr.n, sums, 1, err_));
	T_XOK(xfer_root_of(snd->mdigest, XFER_SUM_TREE, sums, tr.n, want, err_));
	T_CHECK(!memcmp(want, theirs, 16));
	free(sums);
	xfer_close(&snd);
	tm_free(&tr);
	tm_free(&en);
}

T_TEST(xfer_ucx_manifest_mismatch) { use_ucx("sm"); manifest_mismatch(); }

T_TEST(xfer_ucx_probe_lists_transports)
{
	char why[512];
	setenv("UCX_TLS", "tcp,sm", 1);
	T_EQ(xfer_probe("p2p-ucx", why, sizeof why), 0);
	T_CHECK(strstr(why, "tcp/lo") && strstr(why, "posix/memory"));
	T_CHECK(strstr(why, "no RDMA transport")); /* no RDMA device on this machine */
	T_EQ(xfer_probe("p2p", why, sizeof why), 0);
	T_CHECK(strstr(why, "p2p-ucx") && strstr(why, "p2p-tcp"));
	setenv("UCX_TLS", "rc", 1); /* nothing UCX can use here */
	/* UCX's own complaint goes into the answer, not onto our stdout */
	fflush(stdout);
	int out = dup(1);
	FILE *f = tmpfile();
	T_CHECK(out >= 0 && f);
	dup2(fileno(f), 1);
	int rc = xfer_probe("p2p-ucx", why, sizeof why);
	fflush(stdout);
	dup2(out, 1);
	close(out);
	T_EQ(rc, -1);
	T_EQ(ftell(f) + lseek(fileno(f), 0, SEEK_END), 0);
	fclose(f);
	T_CHECK(strstr(why, "UCX") && strstr(why, "could not start") && strstr(why, "(UCX: "));
}

/* A trainer's model, an engine's, and a "p2p" receiver for the engine's. */
static xfer_endpoint *p2p_receiver(sk_rng *r, tmodel *tr, tmodel *en)
{
	sk_rng_seed(r, t_seed());
	tm_make(tr, r, 20000, 1);
	tm_make(en, r, 20000, 0);
	p2p_path = "p2p";
	return open_ep(XFER_RECEIVER, en->m, 0, 1, 2, 8192, 5000);
}

/* Forks the receiver: versions 1 and 2 on rcv, each equal to tr's (which
 * steps once between them, as the sender's does), and when want_path is
 * given, on that path with want_note in its note.  Returns the child. */
static pid_t receive_two(xfer_endpoint *rcv, tmodel *en, tmodel *tr, sk_rng *r, const char *want_path,
			 const char *want_note)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid != 0) return pid;
	xfer_err e;
	uint64_t v;
	int rc = 0;
	for (int i = 1; i <= 2 && !rc; i++) {
		if (xfer_receive(rcv, 10000, &v, &e) != 0) {
			printf("  receiver, v%d: %s\n", i, e.msg);
			rc = 1;
		} else if (v != (uint64_t)i || !tm_equal(en, tr) ||
			   (want_path && (strcmp(xfer_endpoint_path(rcv), want_path) != 0 ||
					  !strstr(xfer_endpoint_note(rcv), want_note)))) {
			printf("  receiver: v%llu on %s (%s)\n", (unsigned long long)v, xfer_endpoint_path(rcv),
			       xfer_endpoint_note(rcv));
			rc = 2;
		}
		if (i == 1) tm_step(tr, r, 0.1); /* as the sender does */
	}
	fflush(stdout);
	_exit(rc);
}

/* "p2p" on both ends of one host: UCX shared memory when UCX offers it,
 * p2p-tcp when UCX_TLS leaves only TCP; both ends say which and why. */
static void p2p_chooses(const char *tls, const char *want_path, const char *want_note)
{
	setenv("UCX_TLS", tls, 1);
	sk_rng r;
	tmodel tr, en;
	xfer_endpoint *rcv = p2p_receiver(&r, &tr, &en);
	T_STREQ(xfer_endpoint_path(rcv), "p2p");
	T_CHECK(strstr(xfer_endpoint_note(rcv), "chosen with each peer"));
	int port = xfer_endpoint_port(rcv);
	pid_t pid = receive_two(rcv, &en, &tr, &r, want_path, want_note);
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 8192, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	T_STREQ(xfer_endpoint_path(snd), want_path);
	T_CHECK(strstr(xfer_endpoint_note(snd), want_note));
	tm_step(&tr, &r, 0.1);
	T_XOK(xfer_send(snd, 2, err_));
	T_STREQ(xfer_endpoint_path(snd), want_path);
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	tm_free(&tr);
	tm_free(&en);
}

T_TEST(xfer_ucx_p2p_chooses_shared_memory_on_one_host)
{
	p2p_chooses("sm,tcp", "p2p-ucx", "shared memory (both ends on host");
}

T_TEST(xfer_ucx_p2p_chooses_tcp_without_rdma_or_shared_memory)
{
	p2p_chooses("tcp", "p2p-tcp", "p2p-tcp: no RDMA transport in UCX here");
}

/* A "p2p" receiver whose session with a p2p-tcp sender ended (an engine
 * that served a catch-up closes it) takes the next sender as the chooser
 * does, whatever path it speaks: the p2p-tcp sub-endpoint used to accept
 * the next connection itself and refuse a p2p-ucx hello ("the first
 * connection is not a skein p2p sender's control stream"), or, when the
 * session ended while it waited on it, fail ("the sender closed the
 * connection"). */
T_TEST(xfer_ucx_p2p_next_sender_after_a_tcp_one_ended)
{
	setenv("UCX_TLS", "sm,tcp", 1);
	sk_rng r;
	tmodel tr, en;
	xfer_endpoint *rcv = p2p_receiver(&r, &tr, &en);
	int port = xfer_endpoint_port(rcv);
	pid_t pid = receive_two(rcv, &en, &tr, &r, NULL, NULL);
	xfer_close(&rcv);
	p2p_path = "p2p-tcp";
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 8192, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	/* the receiver is most likely waiting on this session for v2 when it
	 * ends (it also passes when it looks only after the end) */
	nanosleep(&(struct timespec){ 0, 200 * 1000000L }, NULL);
	xfer_close(&snd);
	tm_step(&tr, &r, 0.1);
	p2p_path = "p2p";
	snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 8192, 5000);
	T_XOK(xfer_send(snd, 2, err_));
	T_STREQ(xfer_endpoint_path(snd), "p2p-ucx");
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	tm_free(&tr);
	tm_free(&en);
}

/* ---- the hello gate under the p2p chooser (issue 23) ---- */

typedef struct {
	xfer_endpoint *rcv;
	uint64_t got;
	int rc;
	xfer_err e;
} gate_rx;

static void *gate_receive(void *arg)
{
	gate_rx *g = arg;
	g->rc = xfer_receive(g->rcv, 10000, &g->got, &g->e);
	return NULL;
}

/* A connection that sends hello (n bytes) and a manifest, then waits. */
static int gate_attacker(int port, const void *hello, size_t n, const xfer_manifest *m)
{
	size_t dl;
	char *desc = xfer_manifest_describe(m, &dl);
	xfer_err e;
	int fd = xfer_sock_connect("127.0.0.1", port, 5000, &e);
	T_CHECK(fd >= 0);
	T_XOK(xfer_sock_send(fd, hello, n, "hello", "receiver", 5000, err_));
	T_XOK(xfer_sock_send(fd, desc, dl, "manifest", "receiver", 5000, err_));
	free(desc);
	return fd;
}

/* A "p2p" receiver given a ticket: a silent connection, a p2p-ucx hello
 * and a p2p-tcp hello without the ticket come first; the sender with it
 * (p2p-ucx over shared memory) still delivers at once, and both forged
 * hellos are refused before their data. */
T_TEST(xfer_ucx_p2p_gate_takes_the_ticketed_sender_past_attackers)
{
	setenv("UCX_TLS", "sm,tcp", 1);
	sk_rng r;
	tmodel tr, en;
	xfer_endpoint *rcv = p2p_receiver(&r, &tr, &en);
	unsigned char nonce[XFER_NONCE_BYTES];
	for (int i = 0; i < XFER_NONCE_BYTES; i++) nonce[i] = (unsigned char)sk_rng_next(&r);
	T_XOK(xfer_p2p_ticket(rcv, "job-u", 1, nonce, err_));
	int port = xfer_endpoint_port(rcv);
	xfer_err e;
	int silent = xfer_sock_connect("127.0.0.1", port, 5000, &e);
	T_CHECK(silent >= 0);
	xfer_ucx_hello uh = { .nstripes = 2, .bucket_bytes = 8192 };
	unsigned char uraw[XFER_UCX_HELLO_BYTES];
	size_t dl;
	free(xfer_manifest_describe(tr.m, &dl));
	uh.manifest_len = dl;
	xfer_ucx_hello_pack(&uh, uraw);
	int fu = gate_attacker(port, uraw, sizeof uraw, tr.m);
	xfer_tcp_hello th = { .kind = XFER_TCP_CONTROL, .nstreams = 1, .session = 3, .bucket_bytes = 8192,
			      .manifest_len = dl };
	unsigned char traw[XFER_TCP_HELLO_BYTES];
	xfer_tcp_hello_pack(&th, traw);
	int ft = gate_attacker(port, traw, sizeof traw, tr.m);
	gate_rx g = { .rcv = rcv };
	pthread_t t;
	double t0 = xfer_now();
	pthread_create(&t, NULL, gate_receive, &g);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 8192, 5000);
	T_XOK(xfer_p2p_ticket(snd, "job-u", 1, nonce, err_));
	T_XOK(xfer_send(snd, 1, err_));
	pthread_join(t, NULL);
	double took = xfer_now() - t0;
	if (g.rc != 0) T_FAIL("receiver: %s", g.e.msg);
	T_EQ(g.got, 1);
	T_CHECK(tm_equal(&en, &tr));
	T_STREQ(xfer_endpoint_path(snd), "p2p-ucx");
	T_LE(took, 0.9 * XFER_GATE_HELLO_MS / 1e3);
	T_EQ(xfer_p2p_refused(rcv), 2);
	int fds[2] = { fu, ft };
	for (int i = 0; i < 2; i++) {
		xfer_err st;
		T_EQ(xfer_sock_recv_status(fds[i], "receiver", 5000, &st), -1);
		if (!strstr(st.msg, "carries no ticket")) T_FAIL("attacker %d heard: %s", i, st.msg);
		close(fds[i]);
	}
	close(silent);
	xfer_close(&snd);
	xfer_close(&rcv);
	tm_free(&tr);
	tm_free(&en);
}

/* ---- CUDA tensors on the stand-in runtime (no kernels): staged through
 * pinned slots on both ends, tree chunks hashed from the slots; a version
 * corrupted with --corrupt-version's hook put back on the receiver ---- */

enum { FK_N = 4 };
static const uint64_t fk_bytes[FK_N] = { (1 << 20) + 6, 4, 300 * 1024 + 8, 700 * 1024 + 2 };

static xfer_manifest *fk_model(unsigned char **p, uint64_t seed, int host_only)
{
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) T_FAIL("CUDA runtime: %s", why);
	xfer_manifest *m = xfer_manifest_new();
	sk_rng r;
	sk_rng_seed(&r, seed);
	for (int i = 0; i < FK_N; i++) {
		int dev = i != 2 && !host_only; /* one host tensor among them */
		if (dev) T_EQ(cu->Malloc((void **)&p[i], fk_bytes[i]), 0);
		else p[i] = malloc(fk_bytes[i]);
		tm_fill(&r, p[i], fk_bytes[i]);
		char name[32];
		snprintf(name, sizeof name, "t%d", i);
		int64_t shape[1] = { (int64_t)fk_bytes[i] };
		T_XOK(xfer_manifest_add(m, name, XFER_U8, 1, shape, p[i], dev ? XFER_MEM_CUDA : XFER_MEM_HOST, err_));
	}
	return m;
}

static int fk_same(unsigned char **a, unsigned char **b)
{
	for (int i = 0; i < FK_N; i++)
		if (memcmp(a[i], b[i], fk_bytes[i])) return 0;
	return 1;
}

T_TEST(xfer_ucx_cuda_tree_sums_and_corrupt_version_undone)
{
	const char *fk = getenv("SKEIN_FAKE_CUDART");
	if (!fk) T_FAIL("SKEIN_FAKE_CUDART must name the stand-in CUDA runtime (make test sets it)");
	setenv("SKEIN_CUDART_LIB", fk, 1);
	setenv("SKEIN_CUDA_LIB", fk, 1);
	use_ucx("sm");
	uint64_t seed = t_seed();
	unsigned char *tp[FK_N], *rp[FK_N], *held[FK_N], *v1[FK_N];
	xfer_manifest *tm = fk_model(tp, seed, 0), *rm = fk_model(rp, seed + 1, 0), *hm = fk_model(v1, seed, 1);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, rm, 0, 1, 3, 1 << 20, 5000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_err e;
		if (xfer_receive(rcv, 10000, NULL, &e) != 0 || !fk_same(rp, v1)) _exit(1);
		for (int i = 0; i < FK_N; i++) {
			held[i] = malloc(fk_bytes[i]);
			memcpy(held[i], rp[i], fk_bytes[i]);
		}
		if (xfer_receive(rcv, 10000, NULL, &e) == 0) _exit(2);
		if (e.code != XFER_ECHECKSUM || !strstr(e.msg, "tensor t") || !fk_same(rp, held)) {
			printf("  receiver: %s\n", e.msg);
			fflush(stdout);
			_exit(3);
		}
		for (int i = 0; i < FK_N; i++) v1[i][fk_bytes[i] / 2] ^= 1; /* what the sender changed */
		if (xfer_receive(rcv, 10000, NULL, &e) != 0 || !fk_same(rp, v1)) {
			printf("  receiver v3: %s\n", e.msg);
			fflush(stdout);
			_exit(4);
		}
		_exit(rcv->root_version == 3 ? 0 : 5);
	}
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tm, port, 1, 3, 1 << 20, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	for (int i = 0; i < FK_N; i++) tp[i][fk_bytes[i] / 2] ^= 1;
	xfer_hooks.corrupt_version = 2;
	xfer_err e;
	T_EQ(xfer_send(snd, 2, &e), -1);
	xfer_hooks.corrupt_version = 0;
	if (!strstr(e.msg, "checksum mismatch")) T_FAIL("sender: %s", e.msg);
	T_XOK(xfer_send(snd, 3, err_));
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	xfer_manifest_free(&tm);
	xfer_manifest_free(&rm);
	xfer_manifest_free(&hm);
}
