/* tests/unit/xfer_p2p_cases.h: the p2p scenarios, run by xfer_tcp_test.c
 * over p2p-tcp and by xfer_ucx_test.c over p2p-ucx (UCX_TLS variants).
 *
 * The receiver's endpoint is opened before fork (port 0), so the child
 * inherits a listening socket and no port can be taken in between.  Both
 * sides build the same model from the seed and replay the same steps, so
 * each can check the other's bytes without shared memory. */
#ifndef XFER_P2P_CASES_H
#define XFER_P2P_CASES_H

#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_int.h"

#include <pthread.h>

enum { BIG = 3000, STEPS = 4 };
static const double fracs[STEPS] = { 0.01, 0.0, 1.0, 0.02 };

static const char *p2p_path = "p2p-tcp"; /* the path under test */

static xfer_endpoint *open_ep(xfer_role role, const xfer_manifest *m, int port, int keep, int streams,
			      uint64_t bucket, int timeout_ms)
{
	xfer_config c;
	xfer_config_init(&c);
	c.path = p2p_path;
	c.role = role;
	c.keep_previous = keep;
	c.p2p.port = port;
	c.p2p.streams = streams;
	c.bucket_bytes = bucket;
	c.timeout_ms = timeout_ms;
	xfer_endpoint *ep = NULL;
	T_XOK(xfer_open(&ep, &c, m, err_));
	return ep;
}

/* The models of a case that fails a version: the trainer's (tr), the
 * engine's (en) and v1, a copy of the trainer's first version. */
static inline void tm_make_three(sk_rng *r, uint64_t big, tmodel *tr, tmodel *en, tmodel *v1)
{
	tm_make(tr, r, big, 1);
	tm_make(en, r, big, 0);
	tm_make(v1, r, big, 0);
	tm_copy(v1, tr);
}

/* Receiver child: receives STEPS versions and checks each bit for bit. */
static inline int child_receive_all(xfer_endpoint *ep, tmodel *en, uint64_t seed, uint64_t big)
{
	sk_rng r;
	sk_rng_seed(&r, seed);
	tmodel ref;
	tm_make(&ref, &r, big, 1);
	for (int v = 1; v <= STEPS; v++) {
		if (v > 1) tm_step(&ref, &r, fracs[v - 1]);
		xfer_err e;
		uint64_t got;
		if (xfer_receive(ep, 10000, &got, &e) != 0) {
			printf("  receiver: %s\n", e.msg);
			return 1;
		}
		if (got != (uint64_t)v || !tm_equal(&ref, en)) {
			printf("  receiver: version %d differs\n", v);
			return 2;
		}
	}
	tm_free(&ref);
	return 0;
}

static inline void roundtrip(int keep, int streams, uint64_t bucket, uint64_t big)
{
	uint64_t seed = t_seed() ^ (uint64_t)(keep * 100 + streams);
	sk_rng r;
	sk_rng_seed(&r, seed);
	tmodel tr, en;
	tm_make(&tr, &r, big, 1);
	tm_make(&en, &r, big, 0);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, keep, streams, bucket, 5000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int rc = child_receive_all(rcv, &en, seed, big);
		fflush(stdout);
		_exit(rc);
	}
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, keep, streams, bucket, 5000);
	sk_rng_seed(&r, seed);
	tmodel scratch;
	tm_make(&scratch, &r, big, 1); /* advance r exactly as the receiver does */
	for (int v = 1; v <= STEPS; v++) {
		if (v > 1) tm_step(&tr, &r, fracs[v - 1]);
		T_XOK(xfer_send(snd, (uint64_t)v, err_));
	}
	T_EQ(xfer_endpoint_stats(snd).bytes_moved, xfer_manifest_bytes(tr.m));
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	tm_free(&scratch);
	tm_free(&tr);
	tm_free(&en);
}


/* A byte flipped on the wire: both sides fail; the receiver keeps v1. */
/* by_version: the --corrupt-version hook (the middle byte of version 2)
 * rather than corrupt_at (a byte near the end). */
static inline void corrupt_keeps_old_version_by(int by_version)
{
	uint64_t seed = t_seed();
	sk_rng r;
	sk_rng_seed(&r, seed);
	tmodel tr, en, v1;
	tm_make_three(&r, BIG, &tr, &en, &v1);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 2048, 5000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_err e;
		if (xfer_receive(rcv, 10000, NULL, &e) != 0 || !tm_equal(&en, &v1)) _exit(1);
		if (xfer_receive(rcv, 10000, NULL, &e) == 0) _exit(2);
		if (e.code != XFER_ECHECKSUM || !tm_equal(&en, &v1)) {
			printf("  receiver: %s\n", e.msg);
			fflush(stdout);
			_exit(3);
		}
		_exit(0);
	}
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 2048, 5000);
	T_XOK(xfer_send(snd, 1, err_));
	tm_step(&tr, &r, 0.5);
	if (by_version) xfer_hooks.corrupt_version = 2;
	else xfer_hooks.corrupt_at = 1 + (long long)(xfer_manifest_bytes(tr.m) - 10);
	xfer_err e;
	T_EQ(xfer_send(snd, 2, &e), -1);
	xfer_hooks.corrupt_at = 0;
	xfer_hooks.corrupt_version = 0;
	T_CHECK(strstr(e.msg, "receiver reported") && strstr(e.msg, "checksum mismatch"));
	T_EQ(t_wait_child(pid, 20000), 0);
	xfer_close(&snd);
	tm_free(&tr);
	tm_free(&en);
	tm_free(&v1);
}

static inline void corrupt_keeps_old_version(void) { corrupt_keeps_old_version_by(0); }

typedef struct {
	pid_t pid;
	int kill_it;
} killer_arg;

/* Waits until the receiver stops itself mid-transfer, then kills it (or not). */
static inline void *killer(void *p)
{
	killer_arg *k = p;
	int st;
	waitpid(k->pid, &st, WUNTRACED);
	if (k->kill_it) kill(k->pid, SIGKILL);
	return NULL;
}

static inline void receiver_vanishes(int kill_it)
{
	enum { TIMEOUT_MS = 800 };
	uint64_t big = 48 << 20; /* more than the sockets' buffers hold */
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	tmodel tr, en;
	tm_make(&tr, &r, big, 1);
	tm_make(&en, &r, big, 0);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 2 << 20, TIMEOUT_MS);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_hooks.stop_after_bucket = 1;
		xfer_receive(rcv, 10000, NULL, NULL);
		_exit(0);
	}
	xfer_close(&rcv);
	pthread_t th;
	killer_arg ka = { pid, kill_it };
	pthread_create(&th, NULL, killer, &ka);
	xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 2 << 20, TIMEOUT_MS);
	double t0 = xfer_now();
	xfer_err e;
	T_EQ(xfer_send(snd, 1, &e), -1);
	double dt = xfer_now() - t0;
	pthread_join(th, NULL);
	if (!kill_it) kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	if (kill_it) T_CHECK(e.code == XFER_EPEER);
	else T_CHECK(e.code == XFER_ETIMEOUT);
	T_CHECK(strstr(e.msg, "receiver"));
	/* Within the watchdog time, not a hang: "no progress for TIMEOUT_MS"
	 * can take up to twice that when the last send made partial progress,
	 * plus scheduling on a loaded 2-core machine. */
	T_LE(dt, 4.0 * TIMEOUT_MS / 1000.0);
	xfer_close(&snd);
	tm_free(&tr);
	tm_free(&en);
}


/* The sender dies after three chunks (a bucket and a half): the receiver
 * errs and keeps v1. */
static inline void sender_dies_receiver_keeps_old_version(void)
{
	uint64_t big = 8 << 20;
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	tmodel tr, en, v1;
	tm_make_three(&r, big, &tr, &en, &v1);
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, en.m, 0, 1, 2, 1 << 20, 2000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_endpoint *snd = open_ep(XFER_SENDER, tr.m, port, 1, 2, 1 << 20, 2000);
		if (xfer_send(snd, 1, NULL) != 0) _exit(1);
		tm_step(&tr, &r, 1.0);
		xfer_hooks.die_after_bucket = 3;
		xfer_send(snd, 2, NULL);
		_exit(2);
	}
	T_XOK(xfer_receive(rcv, 10000, NULL, err_));
	T_CHECK(tm_equal(&en, &v1));
	xfer_err e;
	T_EQ(xfer_receive(rcv, 10000, NULL, &e), -1);
	T_CHECK(e.code == XFER_EPEER);
	T_CHECK(strstr(e.msg, "sender"));
	T_CHECK(tm_equal(&en, &v1));
	T_CHECK(xfer_endpoint_stats(rcv).journal_bytes > 0);
	T_EQ(t_wait_child(pid, 10000), 3);
	xfer_close(&rcv);
	tm_free(&tr);
	tm_free(&en);
	tm_free(&v1);
}

/* A receiver that registered another dtype: clear errors on both sides. */
static inline void manifest_mismatch(void)
{
	static uint16_t a[64];
	static float b[64];
	int64_t shape[1] = { 64 };
	xfer_manifest *ms = xfer_manifest_new(), *mr = xfer_manifest_new();
	T_XOK(xfer_manifest_add(ms, "w", XFER_BF16, 1, shape, a, XFER_MEM_HOST, err_));
	T_XOK(xfer_manifest_add(mr, "w", XFER_F32, 1, shape, b, XFER_MEM_HOST, err_));
	xfer_endpoint *rcv = open_ep(XFER_RECEIVER, mr, 0, 1, 1, 1024, 2000);
	int port = xfer_endpoint_port(rcv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		xfer_err e;
		if (xfer_receive(rcv, 10000, NULL, &e) == 0) _exit(1);
		_exit(e.code == XFER_EMISMATCH && strstr(e.msg, "dtype") ? 0 : 2);
	}
	xfer_close(&rcv);
	xfer_endpoint *snd = open_ep(XFER_SENDER, ms, port, 1, 1, 1024, 2000);
	xfer_err e;
	T_EQ(xfer_send(snd, 1, &e), -1);
	T_CHECK(strstr(e.msg, "receiver reported") && strstr(e.msg, "dtype bf16"));
	T_EQ(t_wait_child(pid, 10000), 0);
	xfer_close(&snd);
	xfer_manifest_free(&ms);
	xfer_manifest_free(&mr);
}

#endif
