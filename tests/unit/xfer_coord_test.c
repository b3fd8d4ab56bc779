/* tests/unit/xfer_coord_test.c: libskein's side of the coordinated update
 * (docs/updates.md) against a fake agent.
 *
 * The fake agent is a thread serving a Unix socket with the real framing
 * (agent/agent_wire.h) and messages (control.proto, weights.proto), one
 * thread per connection, whose verdicts come from the head's real
 * coordinator (jobs/update_coord, in --update-on-engine-loss abort mode, its
 * final record applied at once as if Raft had committed it): begin opens an
 * update whose participants are the engines holding the latest committed
 * version; an engine's wait is answered receive/commit/abort/catchup/serve
 * (idle after 300 ms); done commits once every participant verified, a
 * failed engine or peer aborts with a reason naming it.  Knobs make it lose the answer to done, or spoil its next
 * answer (truncated, not a Response, oversize, another nonce, a wrong
 * message).  A sender and engines run as threads of the test, each with its
 * own endpoint; every version's bytes are precomputed from the seed so an
 * engine compares what it holds with what the version must be. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/update/update.h"
#include "transfer/core/xfer_sock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "jobs/update_coord.h"
#include "proto/control.pb-c.h"
#include "proto/weights.pb-c.h"

enum { FE_MAX = 4, FCONN_MAX = 64, NV = 6, BIG = 192 << 10 };

/* ---------------------------------------------------------------- fake agent */

/* The p2p hello's nonce the fake hands out (issue 23): per update v, or
 * per catch-up pairing to v (salt 1), as the head draws one for each. */
static uint8_t f_nonces[2][64][XFER_NONCE_BYTES];
static uint8_t *f_nonce(uint64_t v, int salt)
{
	uint8_t *n = f_nonces[salt][v % 64];
	for (int i = 0; i < XFER_NONCE_BYTES; i++) n[i] = (uint8_t)(v * 37 + (uint64_t)i * 11 + (uint64_t)salt * 101);
	return n;
}

typedef struct {
	char member[64], endpoint[64], reason[256];
	uint64_t held, staged, failed, told_receive, told_catchup;
	uint64_t serve_v;
	char serve_peer[64];
	char journal_where[16];  /* its last staged word's undo journal (EngineStatus 12-14) */
	uint64_t journal_bytes, journal_spilled;
} f_eng;

typedef struct {
	char path[108];
	char mode[32];
	int lfd, stop, timeout_ms;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	f_eng eng[FE_MAX];
	int neng;
	/* the newest update */
	int have;
	uint64_t v, base;
	char state[16], reason[512];
	int part[FE_MAX];                  /* 1 + its index among co's participants; 0: none */
	update_coord co;                       /* the newest update's rules: the real coordinator's */
	uint64_t committed, maxv, aborted; /* aborted: the last aborted version */
	char aborted_reason[512];
	/* knobs, counters */
	int lose_done, bad_answer, outcome_calls, done_calls, begin_calls;
	int slow_wait_ms; /* every wait's answer comes no sooner (a head's long poll) */
	int fds[FCONN_MAX];
	pthread_t cth[FCONN_MAX];
	int nconn;
} fake;

static double t_now(void);

/* The coordinator decided (fin): its final record "applied". */
static void f_settled(fake *f, bool fin)
{
	if (!fin || strcmp(f->state, "preparing") != 0) return;
	snprintf(f->state, sizeof f->state, "%s", f->co.final_state);
	snprintf(f->reason, sizeof f->reason, "%s", f->co.final_reason);
	if (!strcmp(f->state, "committed")) {
		f->committed = f->v;
	} else {
		f->aborted = f->v;
		memcpy(f->aborted_reason, f->reason, sizeof f->reason);
	}
	pthread_cond_broadcast(&f->cv);
}

/* A new update v of the participants part[] (engines of the fake): the
 * begin record built as the head builds it, handed to the coordinator. */
static void f_open(fake *f)
{
	update_rec r;
	memset(&r, 0, sizeof r);
	snprintf(r.job, sizeof r.job, "j");
	r.version = f->v;
	r.base_version = f->base;
	snprintf(r.mode, sizeof r.mode, "%s", f->mode);
	snprintf(r.sender, sizeof r.sender, "j/trainer-0");
	snprintf(r.sender_node, sizeof r.sender_node, "node-1");
	snprintf(r.state, sizeof r.state, "preparing");
	r.reason = strdup("");
	r.engines = calloc(FE_MAX, sizeof *r.engines);
	if (!r.reason || !r.engines) T_FAIL("out of memory");
	for (int i = 0; i < f->neng; i++) {
		if (!f->part[i]) continue;
		update_engine *e = &r.engines[r.nengines];
		snprintf(e->member, sizeof e->member, "%s", f->eng[i].member);
		snprintf(e->node, sizeof e->node, "node-1");
		snprintf(e->state, sizeof e->state, "pending");
		if (!(e->reason = strdup(""))) T_FAIL("out of memory");
		f->part[i] = (int)++r.nengines;
	}
	update_coord_free(&f->co);
	if (update_coord_start(&f->co, &r, t_now(), f->timeout_ms, false, false) < 0) T_FAIL("out of memory");
	update_coord_begun(&f->co, t_now());
}

static uint8_t *f_outcome(fake *f, uint64_t v, size_t *len)
{
	Skein__Weights__Outcome o = SKEIN__WEIGHTS__OUTCOME__INIT;
	Skein__Weights__Update u = SKEIN__WEIGHTS__UPDATE__INIT;
	Skein__Weights__Engine e[FE_MAX], *ep[FE_MAX];
	o.job = "j";
	o.version = v;
	o.state = "";
	if (f->have && (v == 0 || v == f->v)) {
		o.version = f->v;
		o.state = f->state;
		o.reason = f->reason;
		o.record = &u;
		u.version = f->v;
		u.state = f->state;
		size_t k = 0;
		for (int i = 0; i < f->neng; i++) {
			if (!f->part[i]) continue;
			skein__weights__engine__init(&e[k]);
			e[k].member = f->eng[i].member;
			e[k].state = f->co.rec.engines[f->part[i] - 1].state;
			ep[k] = &e[k];
			k++;
		}
		u.n_engines = k;
		u.engines = ep;
	}
	*len = skein__weights__outcome__get_packed_size(&o);
	uint8_t *b = malloc(*len + 1);
	skein__weights__outcome__pack(&o, b);
	return b;
}

static int f_engine(fake *f, const char *member)
{
	for (int i = 0; i < f->neng; i++)
		if (!strcmp(f->eng[i].member, member)) return i;
	if (f->neng == FE_MAX) return -1;
	f_eng *e = &f->eng[f->neng];
	memset(e, 0, sizeof *e);
	snprintf(e->member, sizeof e->member, "%s", member);
	return f->neng++;
}

/* What engine i is told now ("idle" when nothing). */
static void f_instr(fake *f, int i, Skein__Weights__Instruction *in)
{
	f_eng *e = &f->eng[i];
	in->kind = "idle";
	if (f->have && f->part[i] && !strcmp(f->state, "preparing")) {
		size_t k = (size_t)f->part[i] - 1;
		if (e->staged == f->v) f_settled(f, update_coord_staged(&f->co, k, t_now(), 0, (update_timings){ 0 }, NULL));
		if (e->failed == f->v)
			f_settled(f, update_coord_failed(&f->co, k, t_now(), 0, (update_timings){ 0 }, e->reason));
	}
	in->timeout_ms = f->timeout_ms;
	if (e->staged && e->staged == f->committed) { /* the commit it has not heard yet comes first */
		in->kind = "commit";
		in->version = f->committed;
		return;
	}
	if (f->aborted && (e->staged == f->aborted || e->failed == f->aborted)) {
		/* an aborted update it touched, maybe older than the newest */
		in->kind = "abort";
		in->version = f->aborted;
		in->reason = f->aborted_reason;
		return;
	}
	if (e->serve_v) {
		in->kind = "serve";
		in->version = e->serve_v;
		in->peer = e->serve_peer;
		in->nonce.data = f_nonce(e->serve_v, 1);
		in->nonce.len = XFER_NONCE_BYTES;
		e->serve_v = 0;
		return;
	}
	if (f->have) {
		if (!strcmp(f->state, "committed") && e->staged == f->v) {
			in->kind = "commit";
			in->version = f->v;
			return;
		}
		if (!strcmp(f->state, "aborted") && (e->staged == f->v || e->failed == f->v)) {
			in->kind = "abort";
			in->version = f->v;
			in->reason = f->reason;
			return;
		}
		if (!strcmp(f->state, "preparing") && f->part[i] && e->told_receive != f->v && e->staged != f->v &&
		    e->failed != f->v) {
			e->told_receive = f->v;
			in->kind = "receive";
			in->version = f->v;
			in->base_version = f->base;
			in->mode = f->mode;
			in->nonce.data = f_nonce(f->v, 0);
			in->nonce.len = XFER_NONCE_BYTES;
			return;
		}
	}
	int open = f->have && !strcmp(f->state, "preparing") && f->part[i];
	if (e->held < f->committed && !open && e->told_catchup != f->committed) {
		in->kind = "catchup";
		in->version = f->committed;
		in->peer = "";
		if (strcmp(f->mode, "disk-delta") != 0) {
			int h = -1;
			for (int k = 0; k < f->neng; k++)
				if (k != i && f->eng[k].held == f->committed && f->eng[k].endpoint[0]) h = k;
			if (h < 0) { in->kind = "idle"; return; }
			f->eng[h].serve_v = f->committed;
			memcpy(f->eng[h].serve_peer, e->endpoint, sizeof e->endpoint); /* both 64 bytes */
			in->peer = f->eng[h].endpoint;
			in->nonce.data = f_nonce(f->committed, 1);
			in->nonce.len = XFER_NONCE_BYTES;
			pthread_cond_broadcast(&f->cv);
		}
		e->told_catchup = f->committed;
	}
}

typedef struct {
	int code;
	char error[256];
	uint8_t *payload;
	size_t len;
	int drop; /* close without answering */
} f_answer;

static double t_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void f_waitcv(fake *f, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&f->cv, &f->mu, &ts);
}

static void f_handle(fake *f, const Skein__Control__Request *q, f_answer *a)
{
	const char *verb = q->n_args ? q->args[0] : "";
	const uint8_t *p = q->payload.data;
	size_t n = q->payload.len;
	pthread_mutex_lock(&f->mu);
	if (!strcmp(verb, "begin")) {
		Skein__Weights__Begin *b = skein__weights__begin__unpack(NULL, n, p);
		f->begin_calls++;
		if (!b) {
			a->code = 1;
			snprintf(a->error, sizeof a->error, "not a Begin");
		} else if (f->have && !strcmp(f->state, "preparing") && b->version != f->v) {
			a->code = 1;
			snprintf(a->error, sizeof a->error, "an update of the job is open");
		} else if ((b->version <= f->maxv && !(f->have && b->version == f->v && !strcmp(f->state, "preparing"))) ||
			   b->digest.len != 16) {
			a->code = 1;
			snprintf(a->error, sizeof a->error, "version %llu is not above %llu", (unsigned long long)b->version,
				 (unsigned long long)f->maxv);
		} else {
			/* a repeated begin (its answer was lost) gets the same reply */
			int again = f->have && b->version == f->v && !strcmp(f->state, "preparing");
			f->have = 1;
			f->v = f->maxv = b->version;
			if (!again) {
				f->base = f->committed;
				snprintf(f->state, sizeof f->state, "preparing");
				f->reason[0] = 0;
				snprintf(f->mode, sizeof f->mode, "%s", b->mode);
			}
			Skein__Weights__BeginReply r = SKEIN__WEIGHTS__BEGIN_REPLY__INIT;
			Skein__Weights__Peer pe[FE_MAX], *pp[FE_MAX];
			for (int i = 0; i < f->neng; i++) {
				/* holding the committed version, or verified it and
				 * about to hear its commit */
				if (!again)
					f->part[i] = f->eng[i].held == f->committed ||
						     (f->committed && f->eng[i].staged == f->committed);
				if (!f->part[i]) continue;
				skein__weights__peer__init(&pe[r.n_peers]);
				pe[r.n_peers].member = f->eng[i].member;
				pe[r.n_peers].node = "node-1";
				pe[r.n_peers].endpoint = f->eng[i].endpoint;
				pe[r.n_peers].rank = (int)r.n_peers + 1;
				pp[r.n_peers] = &pe[r.n_peers];
				r.n_peers++;
			}
			if (!again) f_open(f);
			r.peers = pp;
			r.version = f->v;
			r.base_version = f->base;
			r.timeout_ms = f->timeout_ms;
			r.nonce.data = f_nonce(f->v, 0);
			r.nonce.len = XFER_NONCE_BYTES;
			a->len = skein__weights__begin_reply__get_packed_size(&r);
			a->payload = malloc(a->len + 1);
			skein__weights__begin_reply__pack(&r, a->payload);
			pthread_cond_broadcast(&f->cv);
		}
		if (b) skein__weights__begin__free_unpacked(b, NULL);
	} else if (!strcmp(verb, "done")) {
		Skein__Weights__Done *d = skein__weights__done__unpack(NULL, n, p);
		f->done_calls++;
		if (!d || !f->have || d->version != f->v) {
			a->code = 1;
			snprintf(a->error, sizeof a->error, "no such update");
		} else {
			double now = t_now();
			f_settled(f, update_coord_done(&f->co, now, d->ok, d->reason, NULL, 0, 0, 0, (update_timings){ 0 }));
			for (size_t i = 0; i < d->n_failed; i++) {
				long k = update_coord_find(&f->co, d->failed[i]->member);
				if (k >= 0) f_settled(f, update_coord_lose(&f->co, (size_t)k, now, d->failed[i]->reason,
								       d->failed[i]->verdict, true));
			}
			f_settled(f, update_coord_settle(&f->co, now));
			double end = t_now() + f->timeout_ms / 1e3;
			while (!strcmp(f->state, "preparing") && t_now() < end && !f->stop) f_waitcv(f, 50);
			if (f->lose_done) {
				f->lose_done = 0;
				a->drop = 1;
			} else {
				a->payload = f_outcome(f, d->version, &a->len);
			}
		}
		if (d) skein__weights__done__free_unpacked(d, NULL);
	} else if (!strcmp(verb, "outcome")) {
		Skein__Weights__Query *qq = skein__weights__query__unpack(NULL, n, p);
		f->outcome_calls++;
		a->payload = f_outcome(f, qq ? qq->version : 0, &a->len);
		if (qq) skein__weights__query__free_unpacked(qq, NULL);
	} else if (!strcmp(verb, "wait")) {
		Skein__Weights__EngineStatus *s = skein__weights__engine_status__unpack(NULL, n, p);
		int i = s ? f_engine(f, s->member) : -1;
		if (i < 0) {
			a->code = 1;
			snprintf(a->error, sizeof a->error, "bad status");
		} else {
			f_eng *e = &f->eng[i];
			e->held = s->held;
			e->staged = s->staged;
			e->failed = s->failed;
			snprintf(e->endpoint, sizeof e->endpoint, "%s", s->endpoint);
			snprintf(e->reason, sizeof e->reason, "%s", s->reason);
			if (s->staged) {
				snprintf(e->journal_where, sizeof e->journal_where, "%s", s->journal_where);
				e->journal_bytes = s->journal_bytes;
				e->journal_spilled = s->journal_spilled_bytes;
			}
			Skein__Weights__Instruction in = SKEIN__WEIGHTS__INSTRUCTION__INIT;
			double t0 = t_now(), end = t0 + 0.3;
			for (;;) {
				f_instr(f, i, &in);
				if (strcmp(in.kind, "idle") != 0 || t_now() >= end || f->stop) break;
				f_waitcv(f, 20);
			}
			while (t_now() < t0 + f->slow_wait_ms / 1e3 && !f->stop) f_waitcv(f, 20);
			a->len = skein__weights__instruction__get_packed_size(&in);
			a->payload = malloc(a->len + 1);
			skein__weights__instruction__pack(&in, a->payload);
		}
		if (s) skein__weights__engine_status__free_unpacked(s, NULL);
	} else {
		a->code = 2;
		snprintf(a->error, sizeof a->error, "unknown verb %s", verb);
	}
	pthread_mutex_unlock(&f->mu);
}

static int f_io(int fd, int out, void *p, size_t n)
{
	size_t k = 0;
	while (k < n) {
		ssize_t r = out ? send(fd, (char *)p + k, n - k, MSG_NOSIGNAL) : recv(fd, (char *)p + k, n - k, 0);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) return -1;
		k += (size_t)r;
	}
	return 0;
}

typedef struct {
	fake *f;
	int fd;
} f_conn;

static void *f_conn_main(void *arg)
{
	f_conn *k = arg;
	fake *f = k->f;
	int fd = k->fd;
	free(k);
	for (;;) {
		uint8_t h[4];
		if (f_io(fd, 0, h, 4) != 0) break;
		uint32_t n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
		if (n > (1u << 20)) break;
		uint8_t *buf = malloc(n + 1);
		if (f_io(fd, 0, buf, n) != 0) { free(buf); break; }
		Skein__Control__Request *q = skein__control__request__unpack(NULL, n, buf);
		free(buf);
		if (!q) break;
		f_answer a = { 0 };
		if (strcmp(q->cmd, "wv") || q->nonce.len != 16 || strncmp(q->recipient, "unix:", 5)) {
			a.code = 1;
			snprintf(a.error, sizeof a.error, "bad envelope");
		} else {
			f_handle(f, q, &a);
		}
		if (getenv("FAKE_DEBUG"))
			fprintf(stderr, "fake %.3f fd %d: %s -> code %d drop %d %s\n", t_now(), fd, q->n_args ? q->args[0] : "",
				a.code, a.drop, a.error);
		pthread_mutex_lock(&f->mu);
		int bad = f->bad_answer;
		f->bad_answer = 0;
		pthread_mutex_unlock(&f->mu);
		Skein__Control__Response r = SKEIN__CONTROL__RESPONSE__INIT;
		uint8_t other[16] = { 1 };
		r.code = a.code;
		r.error = a.error;
		r.nonce.data = bad == 4 ? other : q->nonce.data;
		r.nonce.len = 16;
		r.payload.data = a.payload;
		r.payload.len = a.len;
		if (bad == 5) { /* a Response whose payload is no message of weights.proto */
			static uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0x0f };
			r.payload.data = junk;
			r.payload.len = sizeof junk;
		}
		size_t rl = skein__control__response__get_packed_size(&r);
		uint8_t *out = malloc(rl + 4);
		skein__control__response__pack(&r, out + 4);
		skein__control__request__free_unpacked(q, NULL);
		free(a.payload);
		uint32_t wl = bad == 3 ? (64u << 20) : bad == 2 ? 7 : (uint32_t)rl;
		if (bad == 2) memcpy(out + 4, "\xff\xff\xff\xff\xff\xff\xff", 7); /* not a Response */
		out[0] = (uint8_t)(wl >> 24), out[1] = (uint8_t)(wl >> 16), out[2] = (uint8_t)(wl >> 8), out[3] = (uint8_t)wl;
		int rc = 0;
		if (a.drop) rc = -1;
		else if (bad == 1) { f_io(fd, 1, out, 4 + rl / 2); rc = -1; } /* truncated, then gone */
		else if (bad == 3) { f_io(fd, 1, out, 4); rc = -1; }
		else rc = f_io(fd, 1, out, 4 + (bad == 2 ? 7 : rl));
		free(out);
		if (rc != 0) break;
	}
	shutdown(fd, SHUT_RDWR);
	return NULL;
}

static void *f_main(void *arg)
{
	fake *f = arg;
	for (;;) {
		struct pollfd p = { .fd = f->lfd, .events = POLLIN };
		if (poll(&p, 1, 50) < 0 && errno != EINTR) break;
		pthread_mutex_lock(&f->mu);
		int stop = f->stop;
		pthread_mutex_unlock(&f->mu);
		if (stop) break;
		if (!(p.revents & POLLIN)) continue;
		int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) continue;
		pthread_mutex_lock(&f->mu);
		if (f->nconn == FCONN_MAX) {
			pthread_mutex_unlock(&f->mu);
			close(fd);
			continue;
		}
		f_conn *k = malloc(sizeof *k);
		k->f = f;
		k->fd = fd;
		f->fds[f->nconn] = fd;
		pthread_create(&f->cth[f->nconn], NULL, f_conn_main, k);
		f->nconn++;
		pthread_mutex_unlock(&f->mu);
	}
	return NULL;
}

static fake *f_start(const char *dir, int timeout_ms)
{
	fake *f = calloc(1, sizeof *f);
	snprintf(f->path, sizeof f->path, "%s/agent.sock", dir);
	f->timeout_ms = timeout_ms;
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
	if (bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(f->lfd, 64) != 0)
		T_FAIL("fake agent: bind/listen %s: %s", f->path, strerror(errno));
	pthread_create(&f->th, NULL, f_main, f);
	return f;
}

static void f_stop(fake *f)
{
	pthread_mutex_lock(&f->mu);
	f->stop = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->th, NULL);
	for (int i = 0; i < f->nconn; i++) shutdown(f->fds[i], SHUT_RDWR);
	for (int i = 0; i < f->nconn; i++) {
		pthread_join(f->cth[i], NULL);
		close(f->fds[i]);
	}
	close(f->lfd);
	unlink(f->path);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	update_coord_free(&f->co);
	free(f);
}

static void f_set(fake *f, int *knob, int v)
{
	pthread_mutex_lock(&f->mu);
	*knob = v;
	pthread_mutex_unlock(&f->mu);
}

/* ---------------------------------------------------------------- members */

typedef struct {
	tmodel snap[NV + 1]; /* snap[v]: what version v must be (snap[0] unused) */
	char *dir;
	fake *f;
	char rpc[160];
	sk_rng rng;
} world;

static void w_init(world *w, int timeout_ms)
{
	memset(w, 0, sizeof *w);
	sk_rng_seed(&w->rng, t_seed());
	tm_make(&w->snap[1], &w->rng, BIG, 1);
	for (int v = 2; v <= NV; v++) {
		tm_make(&w->snap[v], &w->rng, BIG, 0);
		tm_copy(&w->snap[v], &w->snap[v - 1]);
		tm_step(&w->snap[v], &w->rng, v == 4 ? 1.0 : 0.02);
	}
	w->dir = t_tmpdir();
	w->f = f_start(w->dir, timeout_ms);
	snprintf(w->rpc, sizeof w->rpc, "unix:%s", w->f->path);
}

static void w_free(world *w)
{
	f_stop(w->f);
	for (int v = 1; v <= NV; v++) tm_free(&w->snap[v]);
	t_rmdir(w->dir);
}

static void w_config(world *w, xfer_config *c, const char *path, xfer_role role, const char *member)
{
	xfer_config_init(c);
	c->path = path;
	c->role = role;
	c->bucket_bytes = 64 << 10;
	c->timeout_ms = 5000;
	c->threads = 2;
	c->p2p.streams = 2;
	c->disk.dir = w->dir;
	c->disk.full_every = 100;
	c->coord.rpc = w->rpc;
	c->coord.job = "j";
	c->coord.member = member;
	c->coord.generation = 1;
	if (role == XFER_RECEIVER) c->disk.receiver_id = member;
}

typedef struct {
	world *w;
	const char *member;
	tmodel m;
	xfer_endpoint *ep;
	uint64_t until, held;
	int commits, aborts, wrong, rc;
	xfer_err err;
} engine;

/* Opens an engine's endpoint (listening, for p2p) in the calling thread. */
static void e_open(engine *e, world *w, const char *path, const char *member, uint64_t until)
{
	memset(e, 0, sizeof *e);
	e->w = w;
	e->member = member;
	e->until = until;
	tm_make(&e->m, &w->rng, BIG, 0);
	xfer_config c;
	w_config(w, &c, path, XFER_RECEIVER, member);
	T_XOK(xfer_open(&e->ep, &c, e->m.m, err_));
}

/* The engine: committed versions until `until`; after every commit and
 * every abort its buffers are compared with the version it holds. */
static void *e_main(void *arg)
{
	engine *e = arg;
	while (e->held < e->until) {
		uint64_t v = 0;
		xfer_err er = { 0 };
		if (xfer_receive(e->ep, 20000, &v, &er) == 0) {
			e->held = v;
			e->commits++;
		} else if (er.code == XFER_EABORTED) {
			e->aborts++;
			e->err = er;
		} else {
			e->err = er;
			e->rc = -1;
			return NULL;
		}
		if (e->held && !tm_equal(&e->m, &e->w->snap[e->held])) e->wrong++;
	}
	return NULL;
}

static void e_close(engine *e)
{
	xfer_close(&e->ep);
	tm_free(&e->m);
}

/* aborts < 0: at most -aborts (an engine the update never reached hears
 * nothing of its abort). */
static void e_check(engine *e, uint64_t held, int aborts)
{
	if (e->rc != 0) T_FAIL("%s: %s (%s)", e->member, e->err.msg, xfer_code_name(e->err.code));
	T_EQ(e->held, held);
	if (aborts >= 0) T_EQ(e->aborts, aborts);
	else T_LE(e->aborts, -aborts);
	T_EQ(e->wrong, 0);
	T_CHECK(tm_equal(&e->m, &e->w->snap[held]));
}

typedef struct {
	world *w;
	const char *path;
	tmodel m;
	xfer_endpoint *ep;
} sender;

static void s_open(sender *s, world *w, const char *path)
{
	memset(s, 0, sizeof *s);
	s->w = w;
	s->path = path;
	tm_make(&s->m, &w->rng, BIG, 0);
	xfer_config c;
	w_config(w, &c, path, XFER_SENDER, "j/trainer-0");
	T_XOK(xfer_open(&s->ep, &c, s->m.m, err_));
}

static int s_publish(sender *s, uint64_t v, xfer_update_stats *u, xfer_err *e)
{
	tm_copy(&s->m, &s->w->snap[v]);
	return xfer_publish(s->ep, v, u, e);
}

static void s_close(sender *s)
{
	xfer_close(&s->ep);
	tm_free(&s->m);
}

/* Waits until the fake knows n engines (their first wait). */
static void w_engines(world *w, int n)
{
	double end = t_now() + 10;
	for (;;) {
		pthread_mutex_lock(&w->f->mu);
		int k = w->f->neng;
		pthread_mutex_unlock(&w->f->mu);
		if (k >= n) return;
		if (t_now() > end) T_FAIL("only %d of %d engines asked the fake agent", k, n);
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

/* ---------------------------------------------------------------- cases */

/* An attacker at engine i's p2p listener before the first version: a
 * silent connection and a forged version's hello (no ticket), which it
 * would follow with its data.  fds[2] for the test to close. */
static void attack_engine(world *w, int i, int fds[2])
{
	char ep[64];
	pthread_mutex_lock(&w->f->mu);
	memcpy(ep, w->f->eng[i].endpoint, sizeof ep);
	pthread_mutex_unlock(&w->f->mu);
	const char *colon = strrchr(ep, ':');
	T_CHECK(colon != NULL);
	int port = atoi(colon + 1);
	xfer_err e;
	fds[0] = xfer_sock_connect("127.0.0.1", port, 5000, &e);
	fds[1] = xfer_sock_connect("127.0.0.1", port, 5000, &e);
	T_CHECK(fds[0] >= 0 && fds[1] >= 0);
	xfer_tcp_hello h = { .kind = XFER_TCP_CONTROL, .nstreams = 1, .session = 5, .bucket_bytes = 1 << 20,
			     .manifest_len = 8 };
	unsigned char raw[XFER_TCP_HELLO_BYTES + 8];
	xfer_tcp_hello_pack(&h, raw);
	memcpy(raw + XFER_TCP_HELLO_BYTES, "x f32 1\n", 8);
	T_XOK(xfer_sock_send(fds[1], raw, sizeof raw, "hello", "receiver", 5000, err_));
}

/* v1..3 commit on two engines; v2 can be corrupted (aborted, both back on
 * v1, the sender told why, v3 commits: full on disk).  attack: p2p, an
 * attacker's connections on each engine first (attack_engine). */
static void commit_run_with(const char *path, uint64_t corrupt, int attack);
static void commit_run(const char *path, uint64_t corrupt)
{
	commit_run_with(path, corrupt, 0);
}

static void commit_run_with(const char *path, uint64_t corrupt, int attack)
{
	world w;
	w_init(&w, 5000);
	engine e[2];
	pthread_t th[2];
	e_open(&e[0], &w, path, "j/engine-0", 3);
	e_open(&e[1], &w, path, "j/engine-1", 3);
	for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, e_main, &e[i]);
	w_engines(&w, 2);
	int afd[2][2];
	if (attack) {
		for (int i = 0; i < 2; i++) {
			/* its endpoint is known once it asked again */
			double end = t_now() + 10;
			for (;;) {
				pthread_mutex_lock(&w.f->mu);
				int known = w.f->eng[i].endpoint[0] != 0;
				pthread_mutex_unlock(&w.f->mu);
				if (known) break;
				if (t_now() > end) T_FAIL("engine %d told no endpoint", i);
				struct timespec ts = { 0, 5 * 1000000L };
				nanosleep(&ts, NULL);
			}
			attack_engine(&w, i, afd[i]);
		}
	}
	sender s;
	s_open(&s, &w, path);
	xfer_hooks.corrupt_version = corrupt;
	for (uint64_t v = 1; v <= 3; v++) {
		xfer_update_stats u;
		xfer_err er = { 0 };
		pthread_mutex_lock(&w.f->mu);
		int polls = w.f->outcome_calls;
		pthread_mutex_unlock(&w.f->mu);
		double t0 = t_now();
		int rc = s_publish(&s, v, &u, &er);
		pthread_mutex_lock(&w.f->mu);
		/* the verdict is the answer to done, not the outcome poll's (the
		 * heartbeat asks only after XFER_UPD_HEARTBEAT_MS) */
		if (t_now() - t0 < 0.9 * XFER_UPD_HEARTBEAT_MS / 1e3) T_EQ(w.f->outcome_calls, polls);
		pthread_mutex_unlock(&w.f->mu);
		if (v == corrupt) {
			if (rc == 0) T_FAIL("v%llu: the corrupted version committed", (unsigned long long)v);
			T_EQ(er.code, XFER_EABORTED);
			if (!strstr(er.msg, "j/engine-")) T_FAIL("the reason names no engine: %s", er.msg);
			if (!strstr(er.msg, "checksum")) T_FAIL("the reason says no checksum: %s", er.msg);
			xfer_update_stats x = xfer_endpoint_update(s.ep);
			T_STREQ(x.state, "aborted");
			continue;
		}
		if (rc != 0) T_FAIL("publish v%llu: %s (%s)", (unsigned long long)v, er.msg, xfer_code_name(er.code));
		if (attack && v == 1) {
			/* not held off by the silent connections (their 2 s), and
			 * each forged hello refused before its data */
			printf("  v1 past the attackers: update_weights_time %.1f ms\n", u.update_seconds * 1e3);
			T_LE(u.update_seconds, 0.9 * XFER_GATE_HELLO_MS / 1e3);
			for (int i = 0; i < 2; i++) {
				T_LE(1, xfer_p2p_refused(e[i].ep));
				xfer_err st;
				T_EQ(xfer_sock_recv_status(afd[i][1], "receiver", 5000, &st), -1);
				if (!strstr(st.msg, "carries no ticket")) T_FAIL("attacker at engine %d heard: %s", i, st.msg);
			}
		}
		T_STREQ(u.state, "committed");
		T_EQ(u.version, v);
		T_EQ(u.participants, 2);
		T_CHECK(u.update_seconds >= u.implementation_seconds && u.wire_bytes > 0);
		if (!corrupt)
			printf("  %s v%llu: update_weights_time %.1f ms, implementation %.1f ms, 2 engines, %llu bytes\n", path,
			       (unsigned long long)v, u.update_seconds * 1e3, u.implementation_seconds * 1e3,
			       (unsigned long long)xfer_manifest_bytes(s.m.m));
		if (!strcmp(path, "disk-delta") && corrupt && v == corrupt + 1) {
			T_LE(0.99, u.density); /* the version after an aborted one is full */
			char vd[600];
			snprintf(vd, sizeof vd, "%s/weight_v%06llu", w.dir, (unsigned long long)corrupt);
			T_CHECK(access(vd, F_OK) != 0);
		}
	}
	xfer_hooks.corrupt_version = 0;
	if (strcmp(path, "disk-delta") != 0) {
		/* the head's nonce for v3 reached the sender and both engines */
		T_CHECK(s.ep->has_ticket && s.ep->ticket.version == 3 &&
			!memcmp(s.ep->ticket.nonce, f_nonce(3, 0), XFER_NONCE_BYTES));
		for (int i = 0; i < 2; i++)
			T_CHECK(e[i].ep->has_ticket && e[i].ep->ticket.version == 3 &&
				!memcmp(e[i].ep->ticket.nonce, f_nonce(3, 0), XFER_NONCE_BYTES));
	}
	if (attack)
		for (int i = 0; i < 2; i++) close(afd[i][0]), close(afd[i][1]);
	/* each engine told the head its last receive's undo journal (issue 27):
	 * host memory on these paths, past v1 (which journals nothing) */
	pthread_mutex_lock(&w.f->mu);
	for (int i = 0; i < 2; i++) {
		f_eng *fe = &w.f->eng[i];
		printf("  %s: journal %llu bytes, %llu spilled, where '%s'\n", fe->member,
		       (unsigned long long)fe->journal_bytes, (unsigned long long)fe->journal_spilled, fe->journal_where);
		T_STREQ(fe->journal_where, "host");
		T_LE(1, fe->journal_bytes);
		T_EQ(fe->journal_spilled, 0);
	}
	pthread_mutex_unlock(&w.f->mu);
	int heard = 0;
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		e_check(&e[i], 3, corrupt ? -1 : 0); /* never held v2: e_main compares after every commit */
		heard += e[i].aborts;
		e_close(&e[i]);
	}
	if (corrupt && !heard) T_FAIL("no engine heard of the abort of v%llu", (unsigned long long)corrupt);
	s_close(&s);
	w_free(&w);
}

T_TEST(xfer_coord_commit_disk_delta) { commit_run("disk-delta", 0); }
T_TEST(xfer_coord_commit_p2p_tcp) { commit_run("p2p-tcp", 0); }
T_TEST(xfer_coord_corrupt_aborts_disk_delta) { commit_run("disk-delta", 2); }
T_TEST(xfer_coord_corrupt_aborts_p2p_tcp) { commit_run("p2p-tcp", 2); }
T_TEST(xfer_coord_p2p_tcp_attackers_first_do_not_stall_v1) { commit_run_with("p2p-tcp", 0, 1); }

/* Engine 0 takes v1, v2; engine 1 starts then and catches up to v2: from
 * the disk chain, or (p2p-tcp) from engine 0, which serves it. */
static void catchup_run(const char *path)
{
	world w;
	w_init(&w, 5000);
	engine e[2];
	pthread_t th[2];
	e_open(&e[0], &w, path, "j/engine-0", 3);
	pthread_create(&th[0], NULL, e_main, &e[0]);
	w_engines(&w, 1);
	sender s;
	s_open(&s, &w, path);
	for (uint64_t v = 1; v <= 2; v++) {
		xfer_err er = { 0 };
		if (s_publish(&s, v, NULL, &er) != 0) T_FAIL("publish v%llu: %s", (unsigned long long)v, er.msg);
	}
	e_open(&e[1], &w, path, "j/engine-1", 2);
	pthread_create(&th[1], NULL, e_main, &e[1]);
	pthread_join(th[1], NULL);
	e_check(&e[1], 2, 0);
	T_EQ(e[1].commits, 1); /* one catch-up, straight to v2 */
	/* both take part in v3 */
	xfer_update_stats u;
	xfer_err er = { 0 };
	e[1].until = 3;
	pthread_create(&th[1], NULL, e_main, &e[1]);
	double end = t_now() + 5;
	for (;;) { /* engine 1 must hold v2 in the fake's eyes before v3 begins */
		pthread_mutex_lock(&w.f->mu);
		int ok = w.f->neng == 2 && w.f->eng[1].held == 2;
		pthread_mutex_unlock(&w.f->mu);
		if (ok) break;
		if (t_now() > end) T_FAIL("engine 1 never reported v2");
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (s_publish(&s, 3, &u, &er) != 0) T_FAIL("publish v3: %s", er.msg);
	T_EQ(u.participants, 2);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		e_check(&e[i], 3, 0);
		e_close(&e[i]);
	}
	s_close(&s);
	w_free(&w);
}

T_TEST(xfer_coord_catchup_from_disk_chain) { catchup_run("disk-delta"); }
T_TEST(xfer_coord_catchup_from_a_peer) { catchup_run("p2p-tcp"); }

/* An engine that waits less than the head's long poll (the fake answers
 * every wait after 150 ms; the engine waits 40 ms at a time, as a sidecar
 * that also watches its engine does): the wait stays pending across its
 * xfer_receive calls, so the `serve` the head hands it for engine 1's
 * catch-up reaches it, and every commit too.  Before the fix each cut-off
 * wait lost its answer: the serve never came and engine 1 stalled. */
typedef struct {
	engine *e;
	volatile int stop;
	int short_waits, errors;
	char err[256];
} short_waiter;

static void *short_main(void *arg)
{
	short_waiter *sw = arg;
	engine *e = sw->e;
	while (!sw->stop) {
		uint64_t v = 0;
		xfer_err er = { 0 };
		if (xfer_receive(e->ep, 40, &v, &er) == 0) {
			e->held = v;
			e->commits++;
			if (!tm_equal(&e->m, &e->w->snap[v])) e->wrong++;
		} else if (er.code == XFER_ENOVERSION) {
			sw->short_waits++;
		} else if (!sw->errors++) {
			snprintf(sw->err, sizeof sw->err, "%s (%s)", er.msg, xfer_code_name(er.code));
		}
	}
	return NULL;
}

static void short_wait_run(const char *path)
{
	world w;
	w_init(&w, 5000);
	f_set(w.f, &w.f->slow_wait_ms, 150);
	engine e[2];
	pthread_t th[2];
	short_waiter sw = { .e = &e[0] };
	e_open(&e[0], &w, path, "j/engine-0", 0);
	pthread_create(&th[0], NULL, short_main, &sw);
	w_engines(&w, 1);
	sender s;
	s_open(&s, &w, path);
	for (uint64_t v = 1; v <= 2; v++) {
		xfer_err er = { 0 };
		if (s_publish(&s, v, NULL, &er) != 0) T_FAIL("publish v%llu: %s", (unsigned long long)v, er.msg);
	}
	double end = t_now() + 10;
	while (e[0].held < 2 && t_now() < end) {
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
	}
	T_EQ(e[0].held, 2);
	/* engine 1 catches up to v2 (p2p: served by engine 0); bounded: its
	 * receive gives up after 8 s */
	e_open(&e[1], &w, path, "j/engine-1", 2);
	double t0 = t_now();
	uint64_t v = 0;
	xfer_err er = { 0 };
	int rc = xfer_receive(e[1].ep, 8000, &v, &er);
	sw.stop = 1;
	pthread_join(th[0], NULL);
	if (rc != 0) T_FAIL("%s: engine 1's catch-up after %.1f s: %s (seed %llu)", path, t_now() - t0, er.msg,
			    (unsigned long long)t_seed());
	T_EQ(v, 2);
	T_CHECK(tm_equal(&e[1].m, &w.snap[2]));
	T_EQ(sw.errors, 0);
	if (sw.errors) T_FAIL("engine 0: %s", sw.err);
	T_CHECK(sw.short_waits > 0);
	T_EQ(e[0].wrong, 0);
	T_EQ(e[0].commits, 2);
	for (int i = 0; i < 2; i++) e_close(&e[i]);
	s_close(&s);
	w_free(&w);
}

T_TEST(xfer_coord_short_waits_lose_no_serve_p2p_tcp) { short_wait_run("p2p-tcp"); }
T_TEST(xfer_coord_short_waits_lose_no_commit_disk_delta) { short_wait_run("disk-delta"); }

/* The answer to done is lost: the sender says done again (the head answers
 * a repeated done with its verdict; a new head needs that word to commit). */
T_TEST(xfer_coord_lost_done_answer_recovered_by_done_again)
{
	world w;
	w_init(&w, 5000);
	engine e;
	pthread_t th;
	e_open(&e, &w, "p2p-tcp", "j/engine-0", 2);
	pthread_create(&th, NULL, e_main, &e);
	w_engines(&w, 1);
	sender s;
	s_open(&s, &w, "p2p-tcp");
	xfer_err er = { 0 };
	if (s_publish(&s, 1, NULL, &er) != 0) T_FAIL("v1: %s", er.msg);
	pthread_mutex_lock(&w.f->mu);
	w.f->lose_done = 1;
	pthread_mutex_unlock(&w.f->mu);
	xfer_update_stats u;
	if (s_publish(&s, 2, &u, &er) != 0) T_FAIL("v2 with its done answer lost: %s", er.msg);
	T_STREQ(u.state, "committed");
	pthread_mutex_lock(&w.f->mu);
	T_EQ(w.f->done_calls, 3); /* v1's, v2's lost one, v2's again */
	pthread_mutex_unlock(&w.f->mu);
	pthread_join(th, NULL);
	e_check(&e, 2, 0);
	e_close(&e);
	s_close(&s);
	w_free(&w);
}

/* Spoiled answers: clear errors, the next call works on a new connection. */
T_TEST(xfer_coord_malformed_answers)
{
	world w;
	w_init(&w, 2000);
	xfer_err er;
	xfer_agent *a = xfer_agent_new(w.rpc, &er);
	T_CHECK(a != NULL);
	size_t ql;
	uint8_t *q = xfer_upd_query_pack("j", 0, "j/trainer-0", &ql), *out;
	size_t olen;
	static const struct {
		int knob;
		xfer_code code;
		const char *says;
	} cases[] = {
		{ 1, XFER_EPEER, "closed the connection" },
		{ 2, XFER_EFORMAT, "not a control response" },
		{ 3, XFER_EFORMAT, "an answer of 67108864 bytes" },
		{ 4, XFER_EFORMAT, "another request" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		f_set(w.f, &w.f->bad_answer, cases[i].knob);
		memset(&er, 0, sizeof er);
		T_EQ(xfer_agent_call(a, "outcome", q, ql, 2000, &out, &olen, &er), -1);
		T_EQ(er.code, cases[i].code);
		if (!strstr(er.msg, cases[i].says)) T_FAIL("knob %d: \"%s\" lacks \"%s\"", cases[i].knob, er.msg, cases[i].says);
		T_XOK(xfer_agent_call(a, "outcome", q, ql, 2000, &out, &olen, err_));
		xfer_upd_outcome o;
		T_XOK(xfer_upd_outcome_parse(out, olen, &o, err_));
		free(out);
	}
	free(q);
	xfer_agent_free(&a);
	/* a wrong message where a BeginReply belongs: publish says so */
	sender s;
	s_open(&s, &w, "disk-delta");
	f_set(w.f, &w.f->bad_answer, 5);
	memset(&er, 0, sizeof er);
	T_EQ(s_publish(&s, 1, NULL, &er), -1);
	T_EQ(er.code, XFER_EFORMAT);
	if (!strstr(er.msg, "BeginReply")) T_FAIL("%s", er.msg);
	/* a truncated answer to begin: asked again, the update runs */
	f_set(w.f, &w.f->bad_answer, 1);
	xfer_update_stats u;
	if (s_publish(&s, 2, &u, &er) != 0) T_FAIL("v2 after a truncated answer: %s", er.msg);
	T_STREQ(u.state, "committed");
	s_close(&s);
	/* the parsers on random bytes: errors, never a crash */
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	uint8_t junk[256];
	for (int i = 0; i < 2000; i++) {
		size_t n = sk_rng_below(&r, sizeof junk);
		for (size_t k = 0; k < n; k++) junk[k] = (uint8_t)sk_rng_next(&r);
		xfer_upd_begin_reply br;
		xfer_upd_outcome o;
		xfer_upd_instr in;
		if (xfer_upd_begin_reply_parse(junk, n, &br, &er) == 0) xfer_upd_begin_reply_free(&br);
		xfer_upd_outcome_parse(junk, n, &o, &er);
		xfer_upd_instr_parse(junk, n, &in, &er);
		xfer_upd_instr_free(&in);
	}
	/* an instruction of an unknown kind, a setup of the wrong size */
	Skein__Weights__Instruction in = SKEIN__WEIGHTS__INSTRUCTION__INIT;
	uint8_t buf[512];
	xfer_upd_instr got;
	in.kind = "explode";
	in.version = 3;
	size_t n = skein__weights__instruction__pack(&in, buf);
	T_EQ(xfer_upd_instr_parse(buf, n, &got, &er), -1);
	if (!strstr(er.msg, "explode")) T_FAIL("%s", er.msg);
	in.kind = "receive";
	in.setup.data = buf;
	in.setup.len = 5;
	n = skein__weights__instruction__pack(&in, buf + 256);
	T_EQ(xfer_upd_instr_parse(buf + 256, n, &got, &er), -1);
	if (!strstr(er.msg, "setup of 5 bytes")) T_FAIL("%s", er.msg);
	/* colocated: a handoff of any size up to XFER_UPD_SETUP_MAX, kept whole */
	uint8_t *big = calloc(1, XFER_UPD_SETUP_MAX + 1024);
	T_CHECK(big != NULL);
	in.mode = "colocated";
	in.setup.data = big;
	in.setup.len = 5;
	n = skein__weights__instruction__pack(&in, buf + 256);
	T_EQ(xfer_upd_instr_parse(buf + 256, n, &got, &er), 0);
	T_EQ(got.setup_len, 5);
	xfer_upd_instr_free(&got);
	T_CHECK(got.setup == NULL);
	in.setup.len = XFER_UPD_SETUP_MAX + 1;
	uint8_t *packed = malloc(XFER_UPD_SETUP_MAX + 2048);
	T_CHECK(packed != NULL);
	n = skein__weights__instruction__pack(&in, packed);
	T_EQ(xfer_upd_instr_parse(packed, n, &got, &er), -1);
	if (!strstr(er.msg, "at most 512 KiB")) T_FAIL("%s", er.msg);
	free(packed);
	free(big);
	/* issue 23: the p2p hello's nonce, 16 bytes or none */
	Skein__Weights__Instruction rc = SKEIN__WEIGHTS__INSTRUCTION__INIT;
	uint8_t nonce[XFER_NONCE_BYTES];
	for (int i = 0; i < XFER_NONCE_BYTES; i++) nonce[i] = (uint8_t)(i * 7 + 1);
	rc.kind = "receive";
	rc.version = 4;
	rc.nonce.data = nonce;
	rc.nonce.len = sizeof nonce;
	n = skein__weights__instruction__pack(&rc, buf);
	T_EQ(xfer_upd_instr_parse(buf, n, &got, &er), 0);
	T_CHECK(got.has_nonce && !memcmp(got.nonce, nonce, sizeof nonce));
	xfer_upd_instr_free(&got);
	rc.nonce.len = 5;
	n = skein__weights__instruction__pack(&rc, buf);
	T_EQ(xfer_upd_instr_parse(buf, n, &got, &er), -1);
	if (!strstr(er.msg, "nonce of 5 bytes")) T_FAIL("%s", er.msg);
	Skein__Weights__BeginReply br = SKEIN__WEIGHTS__BEGIN_REPLY__INIT;
	xfer_upd_begin_reply gb;
	br.version = 4;
	br.nonce.data = nonce;
	br.nonce.len = sizeof nonce;
	n = skein__weights__begin_reply__pack(&br, buf);
	T_EQ(xfer_upd_begin_reply_parse(buf, n, &gb, &er), 0);
	T_CHECK(gb.has_nonce && !memcmp(gb.nonce, nonce, sizeof nonce));
	xfer_upd_begin_reply_free(&gb);
	br.nonce.len = 3;
	n = skein__weights__begin_reply__pack(&br, buf);
	T_EQ(xfer_upd_begin_reply_parse(buf, n, &gb, &er), -1);
	if (!strstr(er.msg, "nonce of 3 bytes")) T_FAIL("%s", er.msg);
	w_free(&w);
}

/* ---------------------------------------------------------------- rollback */

typedef struct {
	xfer_endpoint *ep;
	tmodel *m;
	world *w;
	int rc;
	xfer_err err;
} plain_sender;

typedef struct {
	plain_sender *p;
	uint64_t v;
} ps_arg;

static void *ps_main(void *arg)
{
	ps_arg *a = arg;
	tm_copy(a->p->m, &a->p->w->snap[a->v]);
	a->p->rc = xfer_send(a->p->ep, a->v, &a->p->err);
	return NULL;
}

/* The sender publishes v (p2p-tcp: while the receiver takes it here). */
static void ps_version(plain_sender *p, xfer_endpoint *rx, uint64_t v)
{
	pthread_t th;
	ps_arg a = { p, v };
	uint64_t got = 0;
	pthread_create(&th, NULL, ps_main, &a);
	T_XOK(xfer_receive(rx, 10000, &got, err_));
	pthread_join(th, NULL);
	if (p->rc != 0) T_FAIL("sender v%llu: %s", (unsigned long long)v, p->err.msg);
	T_EQ(got, v);
}

/* Not coordinated: v1, v2 received; xfer_rollback puts v1 back, once. */
static void rollback_run(const char *path)
{
	world w;
	w_init(&w, 5000);
	tmodel sm, rm;
	tm_make(&sm, &w.rng, BIG, 0);
	tm_make(&rm, &w.rng, BIG, 0);
	xfer_config rc, sc;
	xfer_endpoint *rx = NULL, *tx = NULL;
	w_config(&w, &rc, path, XFER_RECEIVER, "r0");
	rc.coord.rpc = NULL;
	T_XOK(xfer_open(&rx, &rc, rm.m, err_));
	w_config(&w, &sc, path, XFER_SENDER, "s");
	sc.coord.rpc = NULL;
	sc.p2p.port = xfer_endpoint_port(rx);
	T_XOK(xfer_open(&tx, &sc, sm.m, err_));
	plain_sender p = { tx, &sm, &w, 0, { 0 } };
	xfer_err er = { 0 };
	ps_version(&p, rx, 1);
	T_EQ(xfer_rollback(rx, &er), -1); /* nothing held before v1: no journal */
	T_EQ(er.code, XFER_EUNAVAIL);
	ps_version(&p, rx, 2);
	T_CHECK(tm_equal(&rm, &w.snap[2]));
	T_XOK(xfer_rollback(rx, err_));
	T_CHECK(tm_equal(&rm, &w.snap[1]));
	T_EQ(xfer_endpoint_stats(rx).version, 1);
	T_EQ(xfer_rollback(rx, &er), -1); /* once */
	T_EQ(er.code, XFER_EUNAVAIL);
	xfer_close(&tx);
	xfer_close(&rx);
	tm_free(&sm);
	tm_free(&rm);
	w_free(&w);
}

T_TEST(xfer_coord_rollback_disk_delta) { rollback_run("disk-delta"); }
T_TEST(xfer_coord_rollback_p2p_tcp) { rollback_run("p2p-tcp"); }

T_TEST(xfer_coord_config_from_env)
{
	xfer_config c;
	xfer_err er;
	unsetenv("SKEIN_JOB");
	T_EQ(xfer_config_from_env(&c, XFER_SENDER, &er), -1);
	if (!strstr(er.msg, "not inside a skein job")) T_FAIL("%s", er.msg);
	setenv("SKEIN_JOB", "grpo", 1);
	setenv("SKEIN_RPC", "unix:/run/skein/control.sock", 1);
	setenv("SKEIN_MEMBER", "grpo/engine-3", 1);
	setenv("SKEIN_GENERATION", "7", 1);
	setenv("SKEIN_TRANSFER_MODE", "p2p-tcp", 1);
	setenv("SKEIN_BUFFER_SIZE", "1048576", 1);
	setenv("SKEIN_DISK_DIR", "/shared/w", 1);
	setenv("SKEIN_NODE_ADDR", "10.0.0.7", 1);
	setenv("SKEIN_UPDATE_TIMEOUT_MS", "4000", 1);
	T_XOK(xfer_config_from_env(&c, XFER_RECEIVER, err_));
	T_STREQ(c.path, "p2p-tcp");
	T_EQ(c.bucket_bytes, 1048576);
	T_STREQ(c.disk.dir, "/shared/w");
	T_STREQ(c.p2p.host, "10.0.0.7");
	T_EQ(c.p2p.port, 0);
	T_EQ(c.timeout_ms, 4000);
	T_STREQ(c.coord.rpc, "unix:/run/skein/control.sock");
	T_STREQ(c.coord.job, "grpo");
	T_STREQ(c.coord.member, "grpo/engine-3");
	T_EQ(c.coord.generation, 7);
	T_STREQ(c.disk.receiver_id, "grpo/engine-3");
	static const char *const bad[][3] = {
		{ "SKEIN_BUFFER_SIZE", "12abc", "SKEIN_BUFFER_SIZE" },
		{ "SKEIN_TRANSFER_MODE", "carrier-pigeon", "SKEIN_TRANSFER_MODE" },
		{ "SKEIN_UPDATE_TIMEOUT_MS", "-1", "SKEIN_UPDATE_TIMEOUT_MS" },
		{ "SKEIN_NODE_ADDR", "gpu-07", "SKEIN_NODE_ADDR" },
		{ "SKEIN_RPC", "10.0.0.1:7373", "SKEIN_RPC" },
		{ "SKEIN_GENERATION", "x", "SKEIN_GENERATION" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *old = strdup(getenv(bad[i][0]));
		setenv(bad[i][0], bad[i][1], 1);
		memset(&er, 0, sizeof er);
		T_EQ(xfer_config_from_env(&c, XFER_SENDER, &er), -1);
		T_EQ(er.code, XFER_EINVAL);
		if (!strstr(er.msg, bad[i][2])) T_FAIL("%s=%s: \"%s\" does not name it", bad[i][0], bad[i][1], er.msg);
		setenv(bad[i][0], old, 1);
		free(old);
	}
}
