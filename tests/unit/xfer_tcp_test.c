/* tests/unit/xfer_tcp_test.c: p2p-tcp between two processes on 127.0.0.1
 * (the scenarios: xfer_p2p_cases.h), and what only p2p-tcp's wire 3 does:
 * tree checksums checked chunk by chunk, chunks cut on tree boundaries,
 * and senders or receivers of wire 2 told apart. */
#include "tests/unit/xfer_p2p_cases.h"
#include "transfer/core/xfer_sock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

T_TEST(xfer_tcp_roundtrip_staged) { roundtrip(1, 3, 1024, BIG); }
T_TEST(xfer_tcp_roundtrip_direct) { roundtrip(0, 2, 777, BIG); }
T_TEST(xfer_tcp_roundtrip_one_stream_big_bucket) { roundtrip(1, 1, 1 << 20, BIG); }
/* every dtype at odd sizes over many chunks, cut inside tensors at odd
 * offsets of the byte space (tree cuts), staged and direct */
T_TEST(xfer_tcp_roundtrip_tree_cuts_staged) { roundtrip(1, 3, 1 << 20, (3 << 20) + 1000); }
T_TEST(xfer_tcp_roundtrip_tree_cuts_direct) { roundtrip(0, 2, 1 << 20, (3 << 20) + 1000); }
T_TEST(xfer_tcp_corrupt_stream_keeps_old_version) { corrupt_keeps_old_version(); }
T_TEST(xfer_tcp_corrupt_version_keeps_old_version) { corrupt_keeps_old_version_by(1); }
T_TEST(xfer_tcp_receiver_killed_ends_sender) { receiver_vanishes(1); }
T_TEST(xfer_tcp_receiver_stopped_ends_sender_by_watchdog) { receiver_vanishes(0); }
T_TEST(xfer_tcp_sender_dies_receiver_keeps_old_version) { sender_dies_receiver_keeps_old_version(); }
T_TEST(xfer_tcp_manifest_mismatch) { manifest_mismatch(); }

/* The chunk of the byte space that holds byte at, and how many there are,
 * as p2p-tcp cuts them (wire 3: tree cuts). */
static size_t chunk_of(const xfer_manifest *m, uint64_t bucket, uint64_t at, size_t *n)
{
	uint64_t *off = xfer_manifest_offsets(m);
	xfer_span *c;
	size_t k = 0;
	T_XOK(xfer_chunks_cut(m, off, bucket, 1, &c, n, err_));
	while (k + 1 < *n && c[k].off + c[k].len <= at) k++;
	free(c);
	free(off);
	return k;
}

/* A byte flipped in the last bucket (and, in another version, in the
 * second chunk) fails the version at that chunk: the receiver names it,
 * puts v1 back, and the next version still lands. */
static void corrupt_at_chunk(void)
{
	enum { BUCKET = 1 << 20 };
	uint64_t seed = t_seed(), big = (5 << 20) + 3000;
	sk_rng r;
	sk_rng_seed(&r, seed);
	tmodel tr, en, v1;
	tm_make_three(&r, big, &tr, &en, &v1);
	uint64_t bytes = xfer_manifest_bytes(tr.m);
	long long at[2] = { (long long)bytes - 10, (long long)(BUCKET / 2 + 300) };
	size_t n, k[2] = { chunk_of(tr.m, BUCKET, (uint64_t)at[0], &n), chunk_of(tr.m, BUCKET, (uint64_t)at[1], &n) };
	T_CHECK(n >= 8 && k[0] == n - 1 && k[1] == 1);
	char want[2][64];
	for (int i = 0; i < 2; i++) snprintf(want[i], sizeof want[i], "(chunk %zu of %zu)", k[i], n);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, BUCKET, 5000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_err e;
		if (xfer_receive(rcv, 10000, NULL, &e) != 0 || !tm_equal(&en, &v1)) _exit(1);
		for (int i = 0; i < 2; i++) {
			if (xfer_receive(rcv, 10000, NULL, &e) == 0) _exit(2);
			if (e.code != XFER_ECHECKSUM || !strstr(e.msg, want[i]) || !strstr(e.msg, "put back") ||
			    !tm_equal(&en, &v1)) {
				printf("  receiver (wanted %s): %s\n", want[i], e.msg);
				fflush(stdout);
				_exit(3 + i);
			}
		}
		if (xfer_receive(rcv, 10000, NULL, &e) != 0 || tm_equal(&en, &v1)) _exit(5);
		_exit(0);
	}
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, BUCKET, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	tm_step(&tr, &r, 0.5);
	for (int i = 0; i < 2; i++) {
		xfer_hooks.corrupt_at = 1 + at[i];
		xfer_err e;
		T_EQ(xfer_send(snd, 2 + (uint64_t)i, &e), -1);
		xfer_hooks.corrupt_at = 0;
		if (!strstr(e.msg, "receiver reported") || !strstr(e.msg, "checksum mismatch") || !strstr(e.msg, want[i]))
			T_FAIL("sender: %s", e.msg);
	}
	T_XOK(xfer_send(snd, 4, err_));
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	tm_free(&tr);
	tm_free(&en);
	tm_free(&v1);
}

T_TEST(xfer_tcp_corrupt_byte_fails_at_its_chunk) { corrupt_at_chunk(); }

/* ---- wire 2 peers ---- */

typedef struct {
	int port, fd;
	const xfer_manifest *m;
	xfer_err got;
} old_peer;

/* An older sender: a wire 2 hello, its manifest, then it waits for the status. */
static void *old_sender(void *arg)
{
	old_peer *o = arg;
	size_t dl;
	char *desc = xfer_manifest_describe(o->m, &dl);
	xfer_tcp_hello h = { .kind = XFER_TCP_CONTROL, .nstreams = 1, .session = 7, .bucket_bytes = 1 << 20,
			     .manifest_len = dl };
	unsigned char raw[XFER_TCP_HELLO_BYTES];
	xfer_tcp_hello_pack(&h, raw);
	memcpy(raw, "SKXFER2", 8);
	int fd = xfer_sock_connect("127.0.0.1", o->port, 5000, &o->got);
	if (fd >= 0 && xfer_sock_send(fd, raw, sizeof raw, "hello", "receiver", 5000, &o->got) == 0 &&
	    xfer_sock_send(fd, desc, dl, "manifest", "receiver", 5000, &o->got) == 0 &&
	    xfer_sock_recv_status(fd, "receiver", 5000, &o->got) == 0)
		xfer_fail(&o->got, XFER_OK, "the receiver took a wire 2 sender");
	if (fd >= 0) close(fd);
	free(desc);
	return NULL;
}

T_TEST(xfer_tcp_refuses_wire2_sender)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	tmodel en;
	tm_make(&en, &r, 1000, 0);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 1, 1 << 20, 5000);
	old_peer o = { .port = xfer_endpoint_port(rcv), .m = en.m };
	pthread_t th;
	pthread_create(&th, NULL, old_sender, &o);
	xfer_err e;
	/* refused at the gate: the receiver goes on waiting for a real sender,
	 * and its "nothing came" names the refusal */
	T_EQ(xfer_receive(rcv, 1500, NULL, &e), -1);
	pthread_join(th, NULL);
	T_EQ(e.code, XFER_ENOVERSION);
	if (!strstr(e.msg, "wire 2") || !strstr(e.msg, "upgrade the sender")) T_FAIL("receiver: %s", e.msg);
	T_EQ(xfer_p2p_refused(rcv), 1);
	/* the old sender hears why */
	if (!strstr(o.got.msg, "receiver reported") || !strstr(o.got.msg, "wire 2")) T_FAIL("old sender: %s", o.got.msg);
	xfer_close(&rcv);
	tm_free(&en);
}

/* An older receiver: reads the hello, finds no magic it knows, closes. */
static void *old_receiver(void *arg)
{
	old_peer *o = arg;
	int c = accept(o->fd, NULL, NULL);
	unsigned char raw[XFER_TCP_HELLO_BYTES];
	if (c >= 0) {
		xfer_sock_recv(c, raw, sizeof raw, "hello", "sender", 5000, &o->got);
		close(c);
	}
	return NULL;
}

T_TEST(xfer_tcp_sender_names_a_wire2_receiver)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	tmodel tr;
	tm_make(&tr, &r, 1000, 1);
	old_peer o = { .m = tr.m };
	xfer_err e;
	T_CHECK((o.fd = xfer_sock_listen("127.0.0.1", 0, &o.port, &e)) >= 0);
	pthread_t th;
	pthread_create(&th, NULL, old_receiver, &o);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, o.port, 1, 2, 1 << 20, 3000);
	T_EQ(xfer_send(snd, 1, &e), -1);
	pthread_join(th, NULL);
	if (!strstr(e.msg, "older libskein") || !strstr(e.msg, "wire 2")) T_FAIL("sender: %s", e.msg);
	xfer_close(&snd);
	close(o.fd);
	tm_free(&tr);
}

/* ---- CUDA tensors without the GPU kernels (the stand-in CUDA runtime of
 * tests/fakecuda: its "device" memory is host memory, it has no kernels):
 * the sender hashes the pinned slot on CPU threads, the receiver journals
 * device stripes through the host journal; a corrupt chunk is undone ---- */

enum { FK_N = 4 };
static const uint64_t fk_bytes[FK_N] = { (1 << 20) + 5, 3, 300 * 1024 + 7, 700 * 1024 + 1 };

/* The model of seed (host_only: plain host copies of its bytes, no manifest). */
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

T_TEST(xfer_tcp_cuda_without_kernels_roundtrip_and_undo)
{
	const char *fk = getenv("SKEIN_FAKE_CUDART");
	if (!fk) T_FAIL("SKEIN_FAKE_CUDART must name the stand-in CUDA runtime (make test sets it)");
	setenv("SKEIN_CUDART_LIB", fk, 1);
	setenv("SKEIN_CUDA_LIB", fk, 1);
	uint64_t seed = t_seed();
	unsigned char *tp[FK_N], *rp[FK_N], *held[FK_N], *v1[FK_N];
	xfer_manifest *tm = fk_model(tp, seed, 0), *rm = fk_model(rp, seed + 1, 0), *hm = fk_model(v1, seed, 1);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, rm, 0, 1, 2, 1 << 20, 5000);
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
		if (e.code != XFER_ECHECKSUM || !strstr(e.msg, "put back") || !fk_same(rp, held)) {
			printf("  receiver: %s\n", e.msg);
			fflush(stdout);
			_exit(3);
		}
		for (int i = 0; i < FK_N; i++) v1[i][fk_bytes[i] / 2] ^= 1; /* what the sender changed */
		if (xfer_receive(rcv, 10000, NULL, &e) != 0 || !fk_same(rp, v1)) _exit(4);
		xfer_stats st = xfer_endpoint_stats(rcv);
		_exit(st.journal_bytes > 0 ? 0 : 5);
	}
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tm, port, 1, 2, 1 << 20, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	for (int i = 0; i < FK_N; i++) tp[i][fk_bytes[i] / 2] ^= 1;
	xfer_hooks.corrupt_at = 1 + (long long)(xfer_manifest_bytes(tm) - 2);
	xfer_err e;
	T_EQ(xfer_send(snd, 2, &e), -1);
	xfer_hooks.corrupt_at = 0;
	if (!strstr(e.msg, "checksum mismatch")) T_FAIL("sender: %s", e.msg);
	T_XOK(xfer_send(snd, 3, err_));
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	xfer_manifest_free(&tm);
	xfer_manifest_free(&rm);
	xfer_manifest_free(&hm);
}

/* ---- the hello gate (issue 23): the ticket, concurrent hellos ---- */

typedef struct {
	int port;
	xfer_endpoint *snd;
	xfer_err e;
	int rc;
} real_sender;

static void *send_v1(void *arg)
{
	real_sender *s = arg;
	s->rc = xfer_send(s->snd, 1, &s->e);
	return NULL;
}

/* An attacker's control hello (ticket t, or none) and a manifest; its fd. */
static int attacker_hello(int port, const xfer_manifest *m, const xfer_ticket *t)
{
	xfer_err e;
	size_t dl;
	char *desc = xfer_manifest_describe(m, &dl);
	xfer_tcp_hello h = { .kind = XFER_TCP_CONTROL, .nstreams = 1, .session = 99, .bucket_bytes = 1 << 20,
			     .manifest_len = dl };
	if (t) h.ticket = *t;
	unsigned char raw[XFER_TCP_HELLO_BYTES];
	xfer_tcp_hello_pack(&h, raw);
	int fd = xfer_sock_connect("127.0.0.1", port, 5000, &e);
	T_CHECK(fd >= 0);
	T_XOK(xfer_sock_send(fd, raw, sizeof raw, "hello", "receiver", 5000, err_));
	T_XOK(xfer_sock_send(fd, desc, dl, "manifest", "receiver", 5000, err_));
	free(desc);
	return fd;
}

/* A receiver given a ticket: an attacker's silent connection, one with a
 * forged version (no ticket), one with a wrong nonce and one with the right
 * nonce for another version all connect first; then the real sender.  The
 * real version arrives whole, well before the silent one's 2 s are up, and
 * every forged hello was answered with a refusal and no byte of its data
 * read (the receiver never answered its manifest with an OK). */
T_TEST(xfer_tcp_gate_refuses_forged_hellos_and_takes_the_real_sender)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	tmodel tr, en;
	tm_make(&tr, &r, 1000, 1);
	tm_make(&en, &r, 1000, 0);
	unsigned char nonce[XFER_NONCE_BYTES], other[XFER_NONCE_BYTES];
	for (int i = 0; i < XFER_NONCE_BYTES; i++) {
		nonce[i] = (unsigned char)sk_rng_next(&r);
		other[i] = (unsigned char)(nonce[i] ^ (i == 7 ? 1 : 0)); /* one bit off */
	}
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 1 << 20, 5000);
	T_XOK(xfer_p2p_ticket(rcv, "job-a", 1, nonce, err_));
	int port = xfer_endpoint_port(rcv);
	xfer_err e;
	int silent = xfer_sock_connect("127.0.0.1", port, 5000, &e);
	T_CHECK(silent >= 0);
	xfer_ticket bad = { .flags = XFER_TICKET_SET, .job = xfer_ticket_job("job-a"), .version = 1 };
	memcpy(bad.nonce, other, sizeof other);
	xfer_ticket wrong_v = bad;
	memcpy(wrong_v.nonce, nonce, sizeof nonce);
	wrong_v.version = 2;
	xfer_ticket wrong_job = wrong_v;
	wrong_job.version = 1;
	wrong_job.job = xfer_ticket_job("job-b");
	int forged = attacker_hello(port, tr.m, NULL);
	int badnonce = attacker_hello(port, tr.m, &bad);
	int badver = attacker_hello(port, tr.m, &wrong_v);
	int badjob = attacker_hello(port, tr.m, &wrong_job);

	real_sender s = { .port = port };
	s.snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 1 << 20, 5000);
	T_XOK(xfer_p2p_ticket(s.snd, "job-a", 1, nonce, err_));
	double t0 = xfer_now();
	pthread_t th;
	pthread_create(&th, NULL, send_v1, &s);
	uint64_t got = 0;
	int rc = xfer_receive(rcv, 10000, &got, &e);
	double took = xfer_now() - t0;
	pthread_join(th, NULL);
	if (rc != 0) T_FAIL("receiver: %s", e.msg);
	if (s.rc != 0) T_FAIL("sender: %s", s.e.msg);
	T_EQ(got, 1);
	T_CHECK(tm_equal(&tr, &en));
	printf("  the real version in %.3f s past a silent connection (its hello time: %d ms)\n", took,
	       XFER_GATE_HELLO_MS);
	T_LE(took, XFER_GATE_HELLO_MS / 1e3 * 0.9);
	/* four refused (the silent one is still waiting out its time) */
	T_EQ(xfer_p2p_refused(rcv), 4);
	const char *want[] = { "carries no ticket", "nonce", "names version 2", "another job" };
	int fds[] = { forged, badnonce, badver, badjob };
	for (int i = 0; i < 4; i++) {
		xfer_err st;
		T_EQ(xfer_sock_recv_status(fds[i], "receiver", 5000, &st), -1);
		if (!strstr(st.msg, "receiver reported") || !strstr(st.msg, want[i]))
			T_FAIL("attacker %d heard: %s", i, st.msg);
		close(fds[i]);
	}
	/* the silent one is closed once its time is up, by the gate of a later
	 * receive (after this session ends): its peer sees the end of the stream */
	xfer_close(&s.snd);
	double t1 = xfer_now();
	while (xfer_now() - t1 < XFER_GATE_HELLO_MS / 1e3 + 0.3) {
		T_EQ(xfer_receive(rcv, 300, &got, &e), -1);
		T_CHECK(e.code == XFER_ENOVERSION || e.code == XFER_EPEER);
	}
	T_EQ(xfer_p2p_refused(rcv), 5);
	char c;
	T_EQ(recv(silent, &c, 1, 0), 0);
	close(silent);
	xfer_close(&rcv);
	tm_free(&tr);
	tm_free(&en);
}

/* Without a ticket the receiver takes a sender that presents none (as
 * before), but a silent connection opened first still does not stall it. */
T_TEST(xfer_tcp_gate_silent_connection_does_not_stall_an_open_receiver)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed() + 1);
	tmodel tr, en;
	tm_make(&tr, &r, 1000, 1);
	tm_make(&en, &r, 1000, 0);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 1 << 20, 5000);
	int port = xfer_endpoint_port(rcv);
	xfer_err e;
	int silent[3];
	for (int i = 0; i < 3; i++) T_CHECK((silent[i] = xfer_sock_connect("127.0.0.1", port, 5000, &e)) >= 0);
	real_sender s = { .port = port };
	s.snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 1 << 20, 5000);
	double t0 = xfer_now();
	pthread_t th;
	pthread_create(&th, NULL, send_v1, &s);
	uint64_t got = 0;
	int rc = xfer_receive(rcv, 10000, &got, &e);
	double took = xfer_now() - t0;
	pthread_join(th, NULL);
	if (rc != 0) T_FAIL("receiver: %s", e.msg);
	if (s.rc != 0) T_FAIL("sender: %s", s.e.msg);
	T_CHECK(tm_equal(&tr, &en));
	T_LE(took, XFER_GATE_HELLO_MS / 1e3 * 0.9);
	for (int i = 0; i < 3; i++) close(silent[i]);
	xfer_close(&s.snd);
	xfer_close(&rcv);
	tm_free(&tr);
	tm_free(&en);
}

/* A flood: 100 silent connections (more than the gate holds) opened before
 * the real sender: the oldest are evicted as newer ones come, the real
 * sender's hello is read the round after it is accepted, and it delivers. */
T_TEST(xfer_tcp_gate_survives_a_flood_of_silent_connections)
{
	enum { FLOOD = 100 };
	sk_rng r;
	sk_rng_seed(&r, t_seed() + 2);
	tmodel tr, en;
	tm_make(&tr, &r, 1000, 1);
	tm_make(&en, &r, 1000, 0);
	unsigned char nonce[XFER_NONCE_BYTES];
	for (int i = 0; i < XFER_NONCE_BYTES; i++) nonce[i] = (unsigned char)sk_rng_next(&r);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 1 << 20, 5000);
	T_XOK(xfer_p2p_ticket(rcv, "job-f", 1, nonce, err_));
	int port = xfer_endpoint_port(rcv);
	xfer_err e;
	int fl[FLOOD];
	for (int i = 0; i < FLOOD; i++) T_CHECK((fl[i] = xfer_sock_connect("127.0.0.1", port, 5000, &e)) >= 0);
	real_sender s = { .port = port };
	s.snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 1 << 20, 5000);
	T_XOK(xfer_p2p_ticket(s.snd, "job-f", 1, nonce, err_));
	double t0 = xfer_now();
	pthread_t th;
	pthread_create(&th, NULL, send_v1, &s);
	uint64_t got = 0;
	int rc = xfer_receive(rcv, 10000, &got, &e);
	double took = xfer_now() - t0;
	pthread_join(th, NULL);
	if (rc != 0) T_FAIL("receiver: %s", e.msg);
	if (s.rc != 0) T_FAIL("sender: %s", s.e.msg);
	T_CHECK(tm_equal(&tr, &en));
	printf("  through %d silent connections in %.3f s (%llu evicted)\n", FLOOD, took,
	       (unsigned long long)xfer_p2p_refused(rcv));
	T_LE(took, XFER_GATE_HELLO_MS / 1e3 * 0.9);
	for (int i = 0; i < FLOOD; i++) close(fl[i]);
	xfer_close(&s.snd);
	xfer_close(&rcv);
	tm_free(&tr);
	tm_free(&en);
}
