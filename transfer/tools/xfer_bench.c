/* transfer/tools/xfer_bench.c: skein-xfer-bench, each figure beside its baseline
 * measured in the same run.
 *
 *   --mode disk-delta  publish version 2 of --bytes of weights (about
 *                      --changed of the elements changed since version 1) and
 *                      apply it on a receiver: encode + write + fsync + apply
 *                      + verify, end to end.  Baseline: writing the whole
 *                      weights to the same folder, fsync'd, as a checkpoint
 *                      would.  Also the encode and apply rates on one core
 *                      against memcpy (on up to 512 MiB of the weights).
 *   --mode p2p-tcp     send version 2 over p2p-tcp on 127.0.0.1 to a receiver
 *                      process that verifies it bit for bit (version 1 first
 *                      sets the connection up).  Baseline: a plain socket
 *                      send of the same bytes into the same buffers between
 *                      the same processes, just before (after one warm-up
 *                      send, as version 1 warms the transfer up).
 *                      Also the peak extra memory of each side (VmHWM minus
 *                      the resident size once its weights, and the
 *                      receiver's reference copy, were in place) beside
 *                      two buckets, the target.
 *   --mode p2p-ucx     the same over p2p-ucx (UCX's transports as UCX_TLS and
 *                      UCX_NET_DEVICES allow), run just after p2p-tcp of the
 *                      same bytes between a fresh pair of processes: both
 *                      beside their plain socket baseline, and tcp_seconds,
 *                      vs_tcp (p2p-tcp seconds / p2p-ucx seconds) and the
 *                      sender's note (which UCX lanes carried the puts).
 *                      --mode p2p runs the chooser (xfer_p2p.c) the same way.
 *   --mode checksum    xxh3-128 over --bytes against memcpy of the same bytes.
 *   --mode fanout      the data path of a coordinated update run alone: one
 *                      sender, --receivers processes (4) on --path (p2p or
 *                      disk-delta; folder --dir), versions 1..--versions (11)
 *                      of the stand-ins' model (--seed 1, as skein-trainer-sim
 *                      and skein-engine-sim), each one sent to every receiver
 *                      in parallel threads (p2p: one sender endpoint per
 *                      receiver, as xfer_publish serves its participants) or
 *                      written once (disk-delta) and timed from the send to
 *                      the last receiver holding it, checksums verified.
 *                      seconds: the median of versions 2.. (version 1 sets
 *                      up and is full), the baseline of
 *                      tests/agent/updates_bench.sh; each: every version's.
 *
 * ratio = baseline_seconds / seconds: above 1 the figure beats its baseline.
 * JSON keys: mode, bytes, changed, bytes_moved, seconds, baseline_bytes,
 * baseline_seconds, ratio, exact, and per mode gbps, baseline_gbps,
 * bytes_fraction, encode_gbps, apply_gbps, memcpy_gbps. */
#include "transfer/core/xfer_int.h"
#include "transfer/tools/xfer_sim.h"
#include "transfer/core/xfer_sock.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SAMPLE_MAX = 512 << 20 };

typedef struct {
	const char *mode, *dir, *format;
	uint64_t bytes, bucket;
	double changed;
	size_t tensors;
	int streams, keep_previous, zstd, threads;
	xfer_encoding enc;
	const char *path;             /* fanout: the data path */
	int receivers, versions;      /* fanout */
	uint64_t seed;                /* fanout: the stand-ins' model */
} opts;

typedef struct {
	uint64_t bytes_moved, baseline_bytes;
	double seconds, baseline_seconds;
	double encode_gbps, apply_gbps, memcpy_gbps;
	double send_seconds, receive_seconds; /* disk-delta: the two halves */
	int64_t sender_extra, receiver_extra; /* p2p: peak bytes beyond the weights, -1 unknown */
	double tcp_seconds;                   /* p2p-ucx: p2p-tcp of the same bytes, same run */
	char path[32], note[256];             /* p2p: the path that ran, and the sender's note */
	uint64_t bucket;
	int exact;
	double *each;                         /* fanout: every version's seconds, neach of them */
	int neach;
} result;

static void usage(FILE *f)
{
	fprintf(f, "usage: skein-xfer-bench --mode disk-delta|p2p-tcp|p2p-ucx|p2p|checksum --bytes N --changed FRACTION\n"
		   "                        [--tensors K] [--dir DIR] [--format text|json]\n"
		   "       skein-xfer-bench --mode fanout --path p2p|p2p-tcp|disk-delta --bytes N [--receivers R (4)]\n"
		   "                        [--versions V (11)] [--tensors K] [--changed F] [--seed X (1)] [--bucket B]\n"
		   "  extras: --streams S (p2p; half the CPUs, 4 to 8)  --bucket B (512M)  --keep-previous 0|1 (1)\n"
		   "          --encoding overwrite|xor  --zstd LEVEL (0: none)\n"
		   "          --threads T (disk-delta encode/apply threads; 0: one per CPU, at most 16)\n"
		   "  N takes K, M, G suffixes (powers of 1024).  ratio = baseline_seconds / seconds.\n");
}

static void die(const char *what, const xfer_err *e)
{
	fprintf(stderr, "skein-xfer-bench: %s: %s\n", what, e ? e->msg : strerror(errno));
	exit(1);
}

/* A scratch folder for the disk-delta runs, under $TMPDIR (else /tmp);
 * malloc'd, removed by the caller. */
static char *bench_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof path, "%s/skein-bench-XXXXXX", base && *base ? base : "/tmp");
	char *t = strdup(path);
	if (!t || !mkdtemp(t)) die("mkdtemp", NULL);
	return t;
}

static double gbps(uint64_t b, double s) { return s > 0 ? b / s / 1e9 : 0; }

/* A note inside a JSON string: quotes and backslashes become spaces. */
static const char *json_safe(char *s)
{
	for (char *p = s; *p; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = ' ';
	return s;
}

/* ---- checksum ---- */

static void bench_checksum(const opts *o, result *r)
{
	size_t n = (size_t)o->bytes;
	unsigned char *a = malloc(n), *b = malloc(n);
	if (!a || !b) die("memory", NULL);
	for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 2654435761u >> 13);
	memset(b, 0, n);
	double best_h = 1e9, best_m = 1e9;
	volatile uint64_t sink = 0;
	for (int k = 0; k < 3; k++) {
		double t0 = xfer_now();
		xfer_sum s = xfer_checksum(a, n);
		double t1 = xfer_now();
		memcpy(b, a, n);
		double t2 = xfer_now();
		sink ^= s.lo ^ b[n / 2];
		if (t1 - t0 < best_h) best_h = t1 - t0;
		if (t2 - t1 < best_m) best_m = t2 - t1;
	}
	(void)sink;
	r->bytes_moved = r->baseline_bytes = n;
	r->seconds = best_h;
	r->baseline_seconds = best_m;
	r->exact = 1;
	free(a);
	free(b);
}

/* ---- disk-delta ---- */

static double full_write(const char *dir, const xfer_sim_model *s)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/full-checkpoint.bin", dir);
	double t0 = xfer_now();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) die("open baseline file", NULL);
	xfer_err e;
	for (size_t i = 0; i < s->n; i++)
		if (xfer_write_all(fd, s->w[i], s->elems[i] * 2, &e) != 0) die("baseline write", &e);
	if (fsync(fd) != 0) die("fsync", NULL);
	close(fd);
	xfer_fsync_dir(dir, NULL);
	double dt = xfer_now() - t0;
	unlink(path);
	return dt;
}

/* Encode and apply rates on one core over the first tensors up to 512 MiB:
 * old = the receiver's copy (version 2), new = the trainer's (version 3). */
static void codec_rates(const opts *o, xfer_sim_model *tr, xfer_sim_model *rc, result *r)
{
	uint64_t sample = 0;
	size_t k = 0;
	while (k < tr->n && sample + tr->elems[k] * 2 <= SAMPLE_MAX) sample += tr->elems[k++] * 2;
	if (k == 0) { k = 1; sample = tr->elems[0] * 2; }
	xfer_buf *pay = calloc(k, sizeof *pay);
	unsigned char *scratch = malloc(sample + 1);
	if (!pay || !scratch) die("memory", NULL);
	memset(scratch, 0, sample + 1); /* fault the pages in before timing */
	xfer_err e;
	uint64_t at;
	for (int w = 0; w < 2; w++) { /* memcpy rate: the better of two passes */
		double m0 = xfer_now();
		memcpy(scratch, tr->w[0], tr->elems[0] * 2);
		at = 0;
		for (size_t i = 0; i < k; i++) {
			memcpy(scratch + at, rc->w[i], tr->elems[i] * 2);
			at += tr->elems[i] * 2;
		}
		double m = gbps(sample, xfer_now() - m0);
		if (m > r->memcpy_gbps) r->memcpy_gbps = m;
	}
	double t0 = xfer_now();
	for (size_t i = 0; i < k; i++)
		if (xfer_delta_encode(o->enc, 2, rc->w[i], tr->w[i], tr->elems[i] * 2, 0, &pay[i], NULL, NULL, &e) != 0)
			die("encode", &e);
	double t1 = xfer_now();
	at = 0;
	for (size_t i = 0; i < k; i++) {
		memcpy(scratch + at, rc->w[i], tr->elems[i] * 2);
		at += tr->elems[i] * 2;
	}
	double t2 = xfer_now();
	at = 0;
	for (size_t i = 0; i < k; i++) {
		if (xfer_delta_apply(o->enc, 2, scratch + at, tr->elems[i] * 2, pay[i].p, pay[i].len, NULL, NULL, &e) != 0)
			die("apply", &e);
		at += tr->elems[i] * 2;
	}
	double t3 = xfer_now();
	at = 0;
	for (size_t i = 0; i < k; i++) {
		if (memcmp(scratch + at, tr->w[i], tr->elems[i] * 2) != 0) r->exact = 0;
		at += tr->elems[i] * 2;
		xfer_buf_free(&pay[i]);
	}
	r->encode_gbps = gbps(sample, t1 - t0);
	r->apply_gbps = gbps(sample, t3 - t2);
	(void)t1;
	free(pay);
	free(scratch);
}

static void bench_disk(const opts *o, result *r)
{
	xfer_sim_model tr, rc;
	xfer_err e;
	char *tmp = NULL;
	const char *dir = o->dir;
	if (!dir) dir = tmp = bench_tmpdir();
	if (xfer_sim_model_init(&tr, o->bytes, o->tensors, 11, o->changed, &e) != 0 ||
	    xfer_sim_model_init(&rc, o->bytes, o->tensors, 11, o->changed, &e) != 0)
		die("model", &e);
	xfer_sim_model_poison(&rc);
	char sub[4200];
	snprintf(sub, sizeof sub, "%s/weights", dir);
	xfer_rmtree(sub);
	xfer_config c;
	xfer_config_init(&c);
	c.path = "disk-delta";
	c.disk.dir = sub;
	c.disk.full_every = 1000;
	c.disk.encoding = o->enc;
	c.disk.zstd_level = o->zstd;
	c.keep_previous = o->keep_previous;
	c.threads = o->threads;
	if (o->bucket) c.bucket_bytes = o->bucket;
	c.role = XFER_SENDER;
	xfer_endpoint *snd, *rcv;
	if (xfer_open(&snd, &c, tr.m, &e) != 0) die("open sender", &e);
	c.role = XFER_RECEIVER;
	c.disk.receiver_id = "bench";
	if (xfer_open(&rcv, &c, rc.m, &e) != 0) die("open receiver", &e);
	if (xfer_send(snd, 1, &e) != 0 || xfer_receive(rcv, 0, NULL, &e) != 0) die("version 1", &e);
	xfer_sim_model_advance(&tr, 2);
	double t0 = xfer_now();
	if (xfer_send(snd, 2, &e) != 0) die("send version 2", &e);
	double t1 = xfer_now();
	if (xfer_receive(rcv, 0, NULL, &e) != 0) die("receive version 2", &e);
	r->seconds = xfer_now() - t0;
	r->send_seconds = t1 - t0;
	r->receive_seconds = r->seconds - r->send_seconds;
	r->bytes_moved = xfer_endpoint_stats(snd).bytes_moved;
	r->exact = xfer_sim_model_diff(&tr, &rc) < 0;
	xfer_sim_model_advance(&tr, 3);
	codec_rates(o, &tr, &rc, r);
	r->baseline_bytes = o->bytes;
	r->baseline_seconds = full_write(dir, &tr);
	xfer_close(&snd);
	xfer_close(&rcv);
	xfer_rmtree(sub);
	if (tmp) { xfer_rmtree(tmp); free(tmp); }
	xfer_sim_model_free(&tr);
	xfer_sim_model_free(&rc);
}

/* ---- p2p-tcp ---- */

/* A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), -1 when unreadable. */
static int64_t proc_status_bytes(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long long kb = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, key, kl) && line[kl] == ':') kb = atoll(line + kl + 1);
	if (f) fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

static int child_p2p(const opts *o, xfer_endpoint *ep, xfer_sim_model *mine, xfer_sim_model *ref_, int64_t base,
		     int plain_lfd, int ready_fd)
{
	xfer_sim_model ref = *ref_;
	xfer_err e;
	char go = 1; /* the parent starts its clock only once we are ready */
	if (write(ready_fd, &go, 1) != 1) return 2;
	/* plain socket baseline first, into the same buffers, so that nothing the
	 * transfer leaves behind (threads, staging, sockets) can slow it down */
	int fd = xfer_sock_accept(plain_lfd, 60000, 60000, &e);
	if (fd < 0) return 4;
	for (int round = 0; round < 2; round++) { /* a warm-up, then the timed one */
		for (size_t i = 0; i < mine->n; i++)
			if (xfer_sock_recv(fd, mine->w[i], mine->elems[i] * 2, "plain", "sender", 60000, &e) != 0) return 5;
		char ack = 1;
		if (xfer_sock_send(fd, &ack, 1, "ack", "sender", 60000, &e) != 0) return 6;
	}
	close(fd);
	xfer_sim_model_poison(mine);
	uint64_t v = 0;
	for (int i = 0; i < 2; i++) {
		if (xfer_receive(ep, 60000, &v, &e) != 0) {
			fprintf(stderr, "receiver: %s\n", e.msg);
			return 1;
		}
		xfer_sim_model_advance(&ref, v);
		if (xfer_sim_model_diff(&ref, mine) >= 0) return 3;
		if (i == 0 && write(ready_fd, &go, 1) != 1) return 2; /* v1 checked: the parent may go on */
	}
	int64_t hwm = proc_status_bytes("VmHWM");
	int64_t extra = hwm < 0 || base < 0 ? -1 : hwm - base;
	if (write(ready_fd, &extra, sizeof extra) != sizeof extra) return 2;
	xfer_sim_model_free(&ref);
	return 0;
}

static void bench_p2p(const opts *o, result *r, const char *path)
{
	xfer_sim_model tr, rc;
	xfer_err e;
	if (xfer_sim_model_init(&tr, o->bytes, o->tensors, 11, o->changed, &e) != 0) die("model", &e);
	xfer_config c;
	xfer_config_init(&c);
	c.path = path;
	if (o->streams > 0) c.p2p.streams = o->streams;
	c.keep_previous = o->keep_previous;
	if (o->bucket) c.bucket_bytes = o->bucket;
	c.timeout_ms = 60000;
	c.role = XFER_RECEIVER;
	int pport, plain = xfer_sock_listen("127.0.0.1", 0, &pport, &e);
	if (plain < 0) die("listen", &e);
	xfer_endpoint *ep;
	int pfd[2];
	if (pipe(pfd) != 0) die("pipe", NULL);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		xfer_sim_model_free(&tr);
		xfer_sim_model ref;
		if (xfer_sim_model_init(&rc, o->bytes, o->tensors, 11, o->changed, &e) != 0 ||
		    xfer_sim_model_init(&ref, o->bytes, o->tensors, 11, o->changed, &e) != 0)
			_exit(2);
		xfer_sim_model_poison(&rc);
		int64_t base = proc_status_bytes("VmRSS"); /* weights and the reference copy in place */
		if (xfer_open(&ep, &c, rc.m, &e) != 0) _exit(2);
		int port = xfer_endpoint_port(ep);
		if (write(pfd[1], &port, sizeof port) != sizeof port) _exit(2);
		_exit(child_p2p(o, ep, &rc, &ref, base, plain, pfd[1]));
	}
	close(pfd[1]);
	close(plain);
	int port = 0;
	char go;
	if (pid < 0 || xfer_read_all(pfd[0], &port, sizeof port, &e) != 0 || xfer_read_all(pfd[0], &go, 1, &e) != 0)
		die("receiver process", &e);
	int fd = xfer_sock_connect("127.0.0.1", pport, 60000, &e);
	if (fd < 0) die("plain connect", &e);
	double t0 = 0;
	for (int round = 0; round < 2; round++) { /* a warm-up, then the timed one */
		t0 = xfer_now();
		for (size_t i = 0; i < tr.n; i++)
			if (xfer_sock_send(fd, tr.w[i], tr.elems[i] * 2, "plain", "receiver", 60000, &e) != 0)
				die("plain send", &e);
		char ack;
		if (xfer_sock_recv(fd, &ack, 1, "ack", "receiver", 60000, &e) != 0) die("plain ack", &e);
	}
	r->baseline_seconds = xfer_now() - t0;
	r->baseline_bytes = o->bytes;
	close(fd);
	/* the sender's weights are in place (and were sent once): what the
	 * transfer adds from here is its own */
	int64_t sbase = proc_status_bytes("VmRSS");
	c.role = XFER_SENDER;
	c.p2p.port = port;
	if (xfer_open(&ep, &c, tr.m, &e) != 0) die("open sender", &e);
	if (xfer_send(ep, 1, &e) != 0) die("version 1", &e);
	xfer_sim_model_advance(&tr, 2);
	if (xfer_read_all(pfd[0], &go, 1, &e) != 0) die("receiver process", &e); /* it checked v1 */
	t0 = xfer_now();
	if (xfer_send(ep, 2, &e) != 0) die("version 2", &e);
	r->seconds = xfer_now() - t0;
	r->bytes_moved = xfer_endpoint_stats(ep).bytes_moved;
	int64_t shwm = proc_status_bytes("VmHWM");
	r->sender_extra = shwm < 0 || sbase < 0 ? -1 : shwm - sbase;
	r->bucket = ep->cfg.bucket_bytes;
	snprintf(r->path, sizeof r->path, "%s", xfer_endpoint_path(ep));
	snprintf(r->note, sizeof r->note, "%s", xfer_endpoint_note(ep));
	int64_t rextra = -1;
	if (xfer_read_all(pfd[0], &rextra, sizeof rextra, &e) != 0) rextra = -1;
	r->receiver_extra = rextra;
	close(pfd[0]);
	int st;
	waitpid(pid, &st, 0);
	r->exact = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	xfer_close(&ep);
	xfer_sim_model_free(&tr);
}

/* ---- fanout: a coordinated update's data path, alone ---- */

static void fanout_config(const opts *o, xfer_config *c, const char *dir, xfer_role role)
{
	xfer_config_init(c); /* the defaults a job's members get, as xfer_config_from_env */
	c->path = o->path;
	c->role = role;
	if (o->bucket) c->bucket_bytes = o->bucket;
	c->timeout_ms = 120000;
	c->disk.dir = dir;
	c->p2p.host = "127.0.0.1";
}

/* A receiver process: its port on port_fd, then each version it holds on
 * done_fd (0: it failed), then whether the last one is bit for bit. */
static int fanout_child(const opts *o, const char *dir, int idx, int port_fd, int done_fd)
{
	xfer_sim_model mine, ref;
	xfer_config c;
	xfer_endpoint *ep;
	xfer_err e;
	char rid[32];
	if (xfer_sim_model_init(&mine, o->bytes, o->tensors, o->seed, o->changed, &e) != 0) return 2;
	xfer_sim_model_poison(&mine);
	fanout_config(o, &c, dir, XFER_RECEIVER);
	snprintf(rid, sizeof rid, "fanout-%d", idx);
	c.disk.receiver_id = rid;
	if (xfer_open(&ep, &c, mine.m, &e) != 0) {
		fprintf(stderr, "receiver %d: %s\n", idx, e.msg);
		return 2;
	}
	int port = xfer_endpoint_port(ep);
	if (write(port_fd, &port, sizeof port) != sizeof port) return 2;
	uint64_t got = 0;
	for (int v = 1; v <= o->versions; v++) {
		if (xfer_receive(ep, 120000, &got, &e) != 0) {
			fprintf(stderr, "receiver %d: version %d: %s\n", idx, v, e.msg);
			got = 0;
		}
		if (write(done_fd, &got, sizeof got) != sizeof got || !got) return 1;
	}
	if (xfer_sim_model_init(&ref, o->bytes, o->tensors, o->seed, o->changed, &e) != 0) return 2;
	xfer_sim_model_advance(&ref, got);
	char exact = xfer_sim_model_diff(&ref, &mine) < 0;
	if (write(done_fd, &exact, 1) != 1) return 2;
	xfer_close(&ep);
	xfer_sim_model_free(&mine);
	xfer_sim_model_free(&ref);
	return 0;
}

typedef struct {
	xfer_endpoint *ep;
	uint64_t v;
	xfer_err e;
	int rc;
} fanout_send;

static void *fanout_send_main(void *arg)
{
	fanout_send *f = arg;
	f->rc = xfer_send(f->ep, f->v, &f->e);
	return NULL;
}

static int by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void bench_fanout(const opts *o, result *r)
{
	int n = o->receivers, disk = !strcmp(o->path, "disk-delta");
	xfer_err e;
	char *tmp = NULL;
	const char *dir = o->dir;
	if (disk && !dir) dir = tmp = bench_tmpdir();
	pid_t *pid = calloc((size_t)n, sizeof *pid);
	int *done = calloc((size_t)n, sizeof *done), *port = calloc((size_t)n, sizeof *port);
	xfer_endpoint **snd = calloc((size_t)n, sizeof *snd);
	fanout_send *fs = calloc((size_t)n, sizeof *fs);
	pthread_t *th = calloc((size_t)n, sizeof *th);
	r->each = calloc((size_t)o->versions, sizeof *r->each);
	if (!pid || !done || !port || !snd || !fs || !th || !r->each) die("memory", NULL);
	fflush(stdout);
	for (int i = 0; i < n; i++) { /* the receivers first: no weights of ours to copy */
		int pp[2], dp[2];
		if (pipe(pp) != 0 || pipe(dp) != 0) die("pipe", NULL);
		if ((pid[i] = fork()) < 0) die("fork", NULL);
		if (pid[i] == 0) {
			close(pp[0]);
			close(dp[0]);
			_exit(fanout_child(o, dir, i, pp[1], dp[1]));
		}
		close(pp[1]);
		close(dp[1]);
		if (xfer_read_all(pp[0], &port[i], sizeof port[i], &e) != 0) die("a receiver did not start", &e);
		close(pp[0]);
		done[i] = dp[0];
	}
	xfer_sim_model tr;
	if (xfer_sim_model_init(&tr, o->bytes, o->tensors, o->seed, o->changed, &e) != 0) die("model", &e);
	xfer_config c;
	fanout_config(o, &c, dir, XFER_SENDER);
	for (int i = 0; i < (disk ? 1 : n); i++) {
		c.p2p.port = port[i];
		if (xfer_open(&snd[i], &c, tr.m, &e) != 0) die("open sender", &e);
	}
	for (int v = 1; v <= o->versions; v++) {
		xfer_sim_model_advance(&tr, (uint64_t)v);
		double t0 = xfer_now();
		if (disk) {
			if (xfer_send(snd[0], (uint64_t)v, &e) != 0) die("send", &e);
			r->bytes_moved = xfer_endpoint_stats(snd[0]).bytes_moved;
		} else {
			for (int i = 0; i < n; i++) {
				fs[i] = (fanout_send){ .ep = snd[i], .v = (uint64_t)v };
				if (pthread_create(&th[i], NULL, fanout_send_main, &fs[i]) != 0) die("thread", NULL);
			}
			r->bytes_moved = 0;
			for (int i = 0; i < n; i++) {
				pthread_join(th[i], NULL);
				if (fs[i].rc != 0) die("send", &fs[i].e);
				r->bytes_moved += xfer_endpoint_stats(snd[i]).bytes_moved;
			}
		}
		for (int i = 0; i < n; i++) {
			uint64_t got = 0;
			if (xfer_read_all(done[i], &got, sizeof got, &e) != 0 || got != (uint64_t)v)
				die("a receiver did not get the version", got ? NULL : &e);
		}
		r->each[v - 1] = xfer_now() - t0;
	}
	r->exact = 1;
	for (int i = 0; i < n; i++) {
		char ok = 0;
		if (xfer_read_all(done[i], &ok, 1, &e) != 0 || !ok) r->exact = 0;
		close(done[i]);
		int st;
		waitpid(pid[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) r->exact = 0;
	}
	/* the median of versions 2..: version 1 sets the sessions up and is full */
	r->neach = o->versions;
	int k = o->versions > 1 ? o->versions - 1 : 1;
	double *sorted = malloc((size_t)k * sizeof *sorted);
	if (!sorted) die("memory", NULL);
	memcpy(sorted, r->each + (o->versions > 1), (size_t)k * sizeof *sorted);
	qsort(sorted, (size_t)k, sizeof *sorted, by_double);
	r->seconds = k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
	free(sorted);
	snprintf(r->path, sizeof r->path, "%s", xfer_endpoint_path(snd[0]));
	snprintf(r->note, sizeof r->note, "%s", xfer_endpoint_note(snd[0]));
	for (int i = 0; i < n; i++) xfer_close(&snd[i]);
	xfer_sim_model_free(&tr);
	if (tmp) {
		xfer_rmtree(tmp);
		free(tmp);
	}
	free(pid);
	free(done);
	free(port);
	free(snd);
	free(fs);
	free(th);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "mode", 1, 0, 'm' }, { "bytes", 1, 0, 'b' }, { "changed", 1, 0, 'c' }, { "tensors", 1, 0, 'k' },
		{ "dir", 1, 0, 'd' }, { "format", 1, 0, 'f' }, { "streams", 1, 0, 's' }, { "bucket", 1, 0, 'B' },
		{ "keep-previous", 1, 0, 'K' }, { "encoding", 1, 0, 'e' }, { "zstd", 1, 0, 'z' },
		{ "threads", 1, 0, 't' }, { "path", 1, 0, 'a' }, { "receivers", 1, 0, 'r' }, { "versions", 1, 0, 'v' },
		{ "seed", 1, 0, 'S' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	opts o = { .format = "text", .tensors = 256, .changed = 0.01, .streams = 0, .keep_previous = 1,
		   .path = "p2p", .receivers = 4, .versions = 11, .seed = 1 };
	int ch;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'm': o.mode = optarg; break;
		case 'b': if (xfer_parse_bytes(optarg, &o.bytes) != 0) goto bad; break;
		case 'c': o.changed = atof(optarg); break;
		case 'k': o.tensors = (size_t)strtoull(optarg, NULL, 10); break;
		case 'd': o.dir = optarg; break;
		case 'f': o.format = optarg; break;
		case 's': o.streams = atoi(optarg); break;
		case 'B': if (xfer_parse_bytes(optarg, &o.bucket) != 0) goto bad; break;
		case 'K': o.keep_previous = atoi(optarg); break;
		case 'e': o.enc = !strcmp(optarg, "xor") ? XFER_ENC_XOR : XFER_ENC_OVERWRITE; break;
		case 'z': o.zstd = atoi(optarg); break;
		case 't': o.threads = atoi(optarg); break;
		case 'a': o.path = optarg; break;
		case 'r': o.receivers = atoi(optarg); break;
		case 'v': o.versions = atoi(optarg); break;
		case 'S': o.seed = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (!o.mode || !o.bytes || o.changed < 0 || o.changed > 1 ||
	    (strcmp(o.format, "text") && strcmp(o.format, "json")))
		goto bad;
	result r = { .exact = 1, .sender_extra = -1, .receiver_extra = -1 };
	if (!strcmp(o.mode, "fanout")) {
		if (o.receivers < 1 || o.receivers > 1024 || o.versions < 1 || o.versions > 100000) goto bad;
		bench_fanout(&o, &r);
		int json = !strcmp(o.format, "json");
		printf(json ? "{\"mode\": \"fanout\", \"path\": \"%s\", \"receivers\": %d, \"bytes\": %llu, "
			      "\"changed\": %g, \"bytes_moved\": %llu, \"seconds\": %.6f, \"exact\": %s, \"each\": ["
			    : "fanout %s: %d receivers, %llu bytes (%g changed), %llu bytes moved a version; median of "
			      "versions 2..: %.4f s; %s; each:",
		       r.path, o.receivers, (unsigned long long)o.bytes, o.changed, (unsigned long long)r.bytes_moved,
		       r.seconds, json ? (r.exact ? "true" : "false") : (r.exact ? "bit-exact" : "NOT EXACT"));
		for (int i = 0; i < r.neach; i++) printf(json ? "%s%.6f" : "%s%.4f", json && i ? ", " : " ", r.each[i]);
		printf(json ? "]}\n" : "\n");
		free(r.each);
		return r.exact ? 0 : 1;
	}
	if (!strcmp(o.mode, "checksum")) bench_checksum(&o, &r);
	else if (!strcmp(o.mode, "disk-delta")) bench_disk(&o, &r);
	else if (!strcmp(o.mode, "p2p-tcp")) bench_p2p(&o, &r, "p2p-tcp");
	else if (!strcmp(o.mode, "p2p-ucx") || !strcmp(o.mode, "p2p")) {
		result t = { .exact = 1, .sender_extra = -1, .receiver_extra = -1 };
		bench_p2p(&o, &t, "p2p-tcp");
		bench_p2p(&o, &r, o.mode);
		r.tcp_seconds = t.seconds;
		r.exact = r.exact && t.exact;
		if (t.baseline_seconds < r.baseline_seconds) r.baseline_seconds = t.baseline_seconds;
	} else goto bad;
	double ratio = r.seconds > 0 ? r.baseline_seconds / r.seconds : 0;
	if (!strcmp(o.format, "json")) {
		printf("{\"mode\": \"%s\", \"bytes\": %llu, \"changed\": %g, \"bytes_moved\": %llu, \"seconds\": %.6f, "
		       "\"baseline_bytes\": %llu, \"baseline_seconds\": %.6f, \"ratio\": %.4f, \"exact\": %s, "
		       "\"gbps\": %.3f, \"baseline_gbps\": %.3f, \"bytes_fraction\": %.6f, \"encode_gbps\": %.3f, "
		       "\"apply_gbps\": %.3f, \"memcpy_gbps\": %.3f, \"send_seconds\": %.6f, \"receive_seconds\": %.6f, "
		       "\"sender_extra_bytes\": %lld, \"receiver_extra_bytes\": %lld, \"two_buckets_bytes\": %llu, "
		       "\"tcp_seconds\": %.6f, \"vs_tcp\": %.4f, \"path\": \"%s\", \"note\": \"%s\"}\n",
		       o.mode, (unsigned long long)o.bytes, o.changed, (unsigned long long)r.bytes_moved, r.seconds,
		       (unsigned long long)r.baseline_bytes, r.baseline_seconds, ratio, r.exact ? "true" : "false",
		       gbps(r.bytes_moved, r.seconds), gbps(r.baseline_bytes, r.baseline_seconds),
		       o.bytes ? (double)r.bytes_moved / (double)o.bytes : 0, r.encode_gbps, r.apply_gbps, r.memcpy_gbps,
		       r.send_seconds, r.receive_seconds, (long long)r.sender_extra, (long long)r.receiver_extra,
		       (unsigned long long)(2 * r.bucket), r.tcp_seconds, r.seconds > 0 ? r.tcp_seconds / r.seconds : 0,
		       r.path, json_safe(r.note));
	} else {
		printf("%s: %llu bytes moved in %.3f s (%.2f GB/s); baseline %llu bytes in %.3f s (%.2f GB/s); "
		       "ratio %.2f; %s\n",
		       o.mode, (unsigned long long)r.bytes_moved, r.seconds, gbps(r.bytes_moved, r.seconds),
		       (unsigned long long)r.baseline_bytes, r.baseline_seconds,
		       gbps(r.baseline_bytes, r.baseline_seconds), ratio, r.exact ? "bit-exact" : "NOT EXACT");
		if (r.send_seconds > 0)
			printf("  sender (encode, write, fsync) %.3f s, receiver (read, apply, verify) %.3f s\n",
			       r.send_seconds, r.receive_seconds);
		if (r.encode_gbps > 0)
			printf("  one core: encode %.2f GB/s, apply %.2f GB/s, memcpy %.2f GB/s\n", r.encode_gbps,
			       r.apply_gbps, r.memcpy_gbps);
		if (r.tcp_seconds > 0)
			printf("  p2p-tcp of the same bytes %.3f s (%.2f GB/s): %s %.2fx p2p-tcp\n", r.tcp_seconds,
			       gbps(r.bytes_moved, r.tcp_seconds), o.mode, r.seconds > 0 ? r.tcp_seconds / r.seconds : 0);
		if (r.note[0]) printf("  %s: %s\n", r.path, r.note);
		if (r.bucket)
			printf("  peak extra memory: sender %.1f MiB, receiver %.1f MiB; two buckets %.1f MiB\n",
			       r.sender_extra / 1048576.0, r.receiver_extra / 1048576.0, 2.0 * r.bucket / 1048576.0);
	}
	return r.exact ? 0 : 1;
bad:
	usage(stderr);
	return 2;
}
