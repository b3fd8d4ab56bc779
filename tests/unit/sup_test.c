/* tests/unit/sup_test.c: the member supervisor with real processes.
 *
 * Each test runs in its own forked process (tests/t_main.c), so each gets a
 * fresh ev_default_loop.  Waiting is always the loop itself: ev_run ONCE
 * with a 5 ms ticker until a condition holds or a deadline passes.  Members
 * write what they see (environment, grandchild pids) into a mkdtemp folder
 * passed as $DIR; the folder and every process are removed at the end. */
#include "tests/t.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/sup/agent_sup.h"
#include "common/sk_log.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

enum { MAX_EV = 256, MAX_PIDS = 32 };

typedef struct {
	struct ev_loop *loop;
	ev_timer tick;
	char dir[64], logs[128], state[128], direnv[160];
	sup *s;
	sup_status ev[MAX_EV];
	int nev;
	pid_t extra[MAX_PIDS]; /* processes the test started itself */
	int nextra;
} tctx;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_event(void *ud, const sup_status *st)
{
	tctx *c = ud;
	if (c->nev < MAX_EV) c->ev[c->nev++] = *st;
}

static void tick_cb(struct ev_loop *loop, ev_timer *w, int revents) {}

static void ctx_init(tctx *c, bool make_sup)
{
	memset(c, 0, sizeof *c);
	sk_log_set_level(SK_LOG_ERROR);
	c->loop = ev_default_loop(0);
	T_CHECK(c->loop);
	snprintf(c->dir, sizeof c->dir, "/tmp/sup_test.XXXXXX");
	T_CHECK(mkdtemp(c->dir));
	snprintf(c->logs, sizeof c->logs, "%s/logs", c->dir);
	snprintf(c->state, sizeof c->state, "%s/state", c->dir);
	snprintf(c->direnv, sizeof c->direnv, "DIR=%s", c->dir);
	ev_timer_init(&c->tick, tick_cb, 0.005, 0.005);
	ev_timer_start(c->loop, &c->tick);
	if (make_sup) {
		char err[128] = "";
		c->s = sup_new(c->loop, c->logs, c->state, on_event, c, err, sizeof err);
		if (!c->s) T_FAIL("sup_new: %s", err);
	}
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static bool alive(pid_t pid);

static void ctx_fini(tctx *c)
{
	sup_free(&c->s, 3.0);
	T_CHECK(c->s == NULL);
	sup_free(&c->s, 3.0); /* safe twice */
	for (int i = 0; i < c->nextra; i++) {
		kill(-c->extra[i], SIGKILL);
		kill(c->extra[i], SIGKILL);
	}
	while (waitpid(-1, NULL, WNOHANG) > 0) {}
	nftw(c->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	ev_timer_stop(c->loop, &c->tick);
	ev_loop_destroy(c->loop);
#ifdef __SANITIZE_ADDRESS__
	T_EQ(__lsan_do_recoverable_leak_check(), 0);
#endif
}

/* Runs the loop until cond holds; fails the test after ms. */
#define WAIT_FOR(c, cond, ms)                                                          \
	do {                                                                           \
		uint64_t end_ = now_ms() + (ms);                                       \
		while (!(cond)) {                                                      \
			if (now_ms() >= end_) T_FAIL("timed out after %d ms: %s", (int)(ms), #cond); \
			ev_run((c)->loop, EVRUN_ONCE);                                 \
		}                                                                      \
	} while (0)

static void run_for(tctx *c, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	while (now_ms() < end) ev_run(c->loop, EVRUN_ONCE);
}

/* Alive and not a zombie (a zombie still answers kill(pid, 0)). */
static bool alive(pid_t pid)
{
	if (pid <= 0 || kill(pid, 0) != 0) return false;
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0) return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return false;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static sup_status get(tctx *c, const char *id)
{
	sup_status st;
	if (sup_get(c->s, id, &st) != 0) T_FAIL("no member %s", id);
	return st;
}

static bool has(tctx *c, const char *id) { return sup_get(c->s, id, NULL) == 0; }

static bool is_state(tctx *c, const char *id, sup_state want)
{
	sup_status st;
	return sup_get(c->s, id, &st) == 0 && st.state == want;
}

static pid_t pid_of(tctx *c, const char *id)
{
	sup_status st;
	return sup_get(c->s, id, &st) == 0 ? st.pid : 0;
}

/* Running with a pid other than `not`. */
static bool running_new(tctx *c, const char *id, pid_t not)
{
	sup_status st;
	return sup_get(c->s, id, &st) == 0 && st.state == SUP_RUNNING && st.pid && st.pid != not;
}

/* The file's contents ("" when missing). */
static const char *slurp(tctx *c, const char *name, char *buf, size_t cap)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", c->dir, name);
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (!f) return buf;
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The file holds a complete line (the writer finished it). */
static bool has_line(tctx *c, const char *name)
{
	char buf[256];
	return strchr(slurp(c, name, buf, sizeof buf), '\n') != NULL;
}

static pid_t pid_in(tctx *c, const char *name)
{
	char buf[64];
	return (pid_t)atoi(slurp(c, name, buf, sizeof buf));
}

static sup_spec mkspec(tctx *c, const char *id, const char *cmd, uint64_t gen)
{
	sup_spec sp;
	memset(&sp, 0, sizeof sp);
	snprintf(sp.id, sizeof sp.id, "%s", id);
	sp.cmd = cmd;
	sp.env[sp.nenv++] = c->direnv;
	sp.gen = gen;
	sp.max_restarts = 3;
	sp.backoff_min_ms = 50;
	sp.backoff_max_ms = 1000;
	sp.stop_grace_ms = 2000;
	return sp;
}

/* The last event recorded for id, or NULL. */
static const sup_status *last_ev(tctx *c, const char *id)
{
	for (int i = c->nev - 1; i >= 0; i--)
		if (!strcmp(c->ev[i].id, id)) return &c->ev[i];
	return NULL;
}

static bool last_ev_is(tctx *c, const char *id, sup_state want)
{
	const sup_status *e = last_ev(c, id);
	return e && e->state == want;
}

T_TEST_TIMEOUT(sup_start_env_log_same_gen_gen_change_remove, 20)
{
	tctx c;
	ctx_init(&c, true);
	setenv("SUP_TEST_INHERIT", "yes", 1);
	setenv("RANK", "99", 1); /* overridden by the spec */
	sup_spec sp = mkspec(&c, "job1/trainer-3",
			     "echo \"$RANK $SKEIN_RESTART_COUNT $SUP_TEST_INHERIT\" > $DIR/out; echo to-stdout; "
			     "echo to-stderr >&2; exec sleep 60",
			     1);
	sp.env[sp.nenv++] = "RANK=3";
	sp.restart_base = 2;
	sup_set(c.s, &sp, 1);
	T_EQ(c.nev, 0); /* nothing is called back from inside sup_set */
	WAIT_FOR(&c, is_state(&c, "job1/trainer-3", SUP_RUNNING) && has_line(&c, "out"), 3000);
	char buf[4096];
	T_STREQ(slurp(&c, "out", buf, sizeof buf), "3 2 yes\n");
	sup_status st = get(&c, "job1/trainer-3");
	pid_t pid1 = st.pid;
	T_CHECK(pid1 > 0);
	T_EQ(getpgid(pid1), pid1);
	T_EQ(st.restarts, 2);
	T_STREQ(st.job, "job1");
	T_CHECK(st.started_ms > 0);
	WAIT_FOR(&c, last_ev_is(&c, "job1/trainer-3", SUP_RUNNING), 1000);
	T_EQ(last_ev(&c, "job1/trainer-3")->pid, pid1);

	/* log: header, stdout and stderr, read through sup_log_read with offsets */
	sk_buf b;
	sk_buf_init(&b);
	uint64_t next = 0, size = 0;
	WAIT_FOR(&c, (b.len = 0, sup_log_read(c.s, "job1/trainer-3", 0, 1 << 20, &b, &next, &size) == 0 &&
			     strstr(sk_buf_str(&b), "to-stderr")), 2000);
	T_CHECK(strstr(sk_buf_str(&b), "=== skein: start gen 1 restart 2 at "));
	T_CHECK(strstr(sk_buf_str(&b), "to-stdout\n"));
	T_EQ(next, size);
	T_EQ(next, b.len);
	b.len = 0;
	T_EQ(sup_log_read(c.s, "job1/trainer-3", 5, 4, &b, &next, &size), 0);
	T_EQ(b.len, 4);
	T_EQ(next, 9);
	b.len = 0;
	T_EQ(sup_log_read(c.s, "job1/trainer-3", size + 100, 100, &b, &next, &size), 0);
	T_EQ(b.len, 0);
	T_EQ(next, size);
	T_EQ(sup_log_read(c.s, "job1/nope", 0, 100, &b, &next, &size), -1);
	T_EQ(sup_log_read(c.s, "../etc/passwd", 0, 100, &b, &next, &size), -1);
	sk_buf_free(&b);

	/* the same order again, even with a changed command: nothing happens */
	int nev = c.nev;
	sup_set(c.s, &sp, 1);
	sup_spec changed = sp;
	changed.cmd = "exec sleep 61";
	sup_set(c.s, &changed, 1);
	run_for(&c, 150);
	T_EQ(pid_of(&c, "job1/trainer-3"), pid1);
	T_EQ(c.nev, nev);

	/* a new generation: old group gone before the new one runs */
	sp.gen = 2;
	sp.start_delay_ms = 100;
	snprintf(buf, sizeof buf, "%s/out", c.dir);
	unlink(buf);
	uint64_t t0 = now_ms();
	sup_set(c.s, &sp, 1);
	WAIT_FOR(&c, running_new(&c, "job1/trainer-3", pid1), 3000);
	T_CHECK(!alive(pid1));
	st = get(&c, "job1/trainer-3");
	T_EQ(st.gen, 2);
	T_EQ(st.last_exit, -SIGTERM);
	T_CHECK(now_ms() - t0 >= 100); /* start delay */
	WAIT_FOR(&c, has_line(&c, "out"), 2000);
	T_STREQ(slurp(&c, "out", buf, sizeof buf), "3 2 yes\n");
	/* the states went RUNNING(1) -> PENDING(2) -> STARTING(2) -> RUNNING(2) */
	bool saw_pending = false, saw_starting = false;
	for (int i = nev; i < c.nev; i++) {
		if (c.ev[i].state == SUP_PENDING) saw_pending = true;
		if (c.ev[i].state == SUP_STARTING) saw_starting = saw_pending;
	}
	T_CHECK(saw_pending && saw_starting);
	pid_t pid2 = st.pid;

	/* removed from the order: TERM, then forgotten */
	sup_set(c.s, NULL, 0);
	WAIT_FOR(&c, !has(&c, "job1/trainer-3"), 3000);
	T_CHECK(!alive(pid2));
	WAIT_FOR(&c, last_ev_is(&c, "job1/trainer-3", SUP_STOPPED), 1000);
	T_EQ(last_ev(&c, "job1/trainer-3")->last_exit, -SIGTERM);
	sup_status all[4];
	T_EQ(sup_list(c.s, all, 4), 0);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_term_ignored_killed_after_grace, 20)
{
	tctx c;
	ctx_init(&c, true);
	/* sh and its child both ignore TERM (ignored dispositions survive exec) */
	sup_spec sp = mkspec(&c, "j/ignores-term", "trap '' TERM; sleep 60 & echo $! > $DIR/gc; wait", 1);
	sp.stop_grace_ms = 300;
	sup_set(c.s, &sp, 1);
	WAIT_FOR(&c, is_state(&c, "j/ignores-term", SUP_RUNNING) && has_line(&c, "gc"), 3000);
	pid_t pid = pid_of(&c, "j/ignores-term"), gc = pid_in(&c, "gc");
	T_CHECK(alive(gc));
	T_EQ(getpgid(gc), pid);
	uint64_t t0 = now_ms();
	sup_set(c.s, NULL, 0);
	run_for(&c, 150);
	T_CHECK(alive(pid) && alive(gc)); /* TERM was ignored */
	WAIT_FOR(&c, !has(&c, "j/ignores-term"), 3000);
	uint64_t took = now_ms() - t0;
	printf("  TERM ignored: gone after %llu ms (grace 300)\n", (unsigned long long)took);
	T_CHECK(took >= 300);
	T_CHECK(took < 1500);
	T_CHECK(!alive(pid));
	T_CHECK(!alive(gc));
	WAIT_FOR(&c, last_ev_is(&c, "j/ignores-term", SUP_STOPPED), 1000);
	T_EQ(last_ev(&c, "j/ignores-term")->last_exit, -SIGKILL);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_group_kill_takes_grandchildren, 20)
{
	tctx c;
	ctx_init(&c, true);
	/* a: the grandchild dies of the group TERM with its shell.
	 * b: the shell dies of TERM but its grandchild ignores it; the member is
	 *    not gone until the group is empty (SIGKILL after the grace). */
	sup_spec sp[2] = {
		mkspec(&c, "j/a", "sleep 60 & echo $! > $DIR/gca; wait", 1),
		mkspec(&c, "j/b", "sh -c 'trap \"\" TERM; echo $$ > $DIR/gcb; exec sleep 60' & wait", 1),
	};
	sp[1].stop_grace_ms = 300;
	sup_set(c.s, sp, 2);
	WAIT_FOR(&c, has_line(&c, "gca") && has_line(&c, "gcb") && is_state(&c, "j/a", SUP_RUNNING) &&
			     is_state(&c, "j/b", SUP_RUNNING), 3000);
	pid_t gca = pid_in(&c, "gca"), gcb = pid_in(&c, "gcb"), pb = pid_of(&c, "j/b");
	T_CHECK(alive(gca) && alive(gcb));
	uint64_t t0 = now_ms();
	sup_set(c.s, NULL, 0);
	WAIT_FOR(&c, !has(&c, "j/a"), 2000);
	T_CHECK(!alive(gca));
	WAIT_FOR(&c, !alive(pb), 1000);
	T_CHECK(has(&c, "j/b")); /* its leader is gone, its group is not */
	WAIT_FOR(&c, !has(&c, "j/b"), 3000);
	T_CHECK(now_ms() - t0 >= 300);
	T_CHECK(!alive(gcb));
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_local_restart_backoff_max_restarts, 20)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp = mkspec(&c, "j/engine-0", "echo $SKEIN_RESTART_COUNT >> $DIR/runs; exit 3", 1);
	sp.local_restart = true;
	sp.max_restarts = 3;
	sp.backoff_min_ms = 100;
	sp.backoff_max_ms = 150;
	sp.restart_base = 10;
	sup_set(c.s, &sp, 1);
	WAIT_FOR(&c, is_state(&c, "j/engine-0", SUP_FAILED), 5000);
	sup_status st = get(&c, "j/engine-0");
	T_STREQ(st.reason, "exited 4 times, max-restarts 3 reached");
	T_EQ(st.last_exit, 3);
	T_EQ(st.restarts, 13);
	T_EQ(st.pid, 0);
	char buf[256];
	T_STREQ(slurp(&c, "runs", buf, sizeof buf), "10\n11\n12\n13\n");
	/* backoff: 100, then min*2 = 200 capped at 150, then 150 */
	uint64_t exited = 0;
	int restarts = 0;
	const uint64_t want[3] = { 100, 150, 150 };
	WAIT_FOR(&c, last_ev_is(&c, "j/engine-0", SUP_FAILED), 1000);
	for (int i = 0; i < c.nev; i++) {
		if (c.ev[i].state == SUP_RESTARTING) {
			T_EQ(c.ev[i].last_exit, 3);
			exited = c.ev[i].exited_ms;
		} else if (c.ev[i].state == SUP_RUNNING && exited) {
			uint64_t d = c.ev[i].started_ms - exited;
			printf("  restart %d after %llu ms (backoff %llu)\n", restarts + 1, (unsigned long long)d,
			       (unsigned long long)want[restarts]);
			T_CHECK(restarts < 3);
			T_LE(want[restarts], d);
			T_LE(d, want[restarts] + 400);
			restarts++;
			exited = 0;
		}
	}
	T_EQ(restarts, 3);
	/* failed stays failed: no restart, the same order changes nothing */
	int nev = c.nev;
	sup_set(c.s, &sp, 1);
	run_for(&c, 300);
	T_EQ(c.nev, nev);
	T_CHECK(is_state(&c, "j/engine-0", SUP_FAILED));
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_nonlocal_exit_waits_for_new_gen, 20)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp[3] = {
		mkspec(&c, "j/trainer-0", "exit 5", 1),
		mkspec(&c, "j/trainer-1", "exit 0", 1),
		mkspec(&c, "j/trainer-2", "kill -9 $$", 1),
	};
	sup_set(c.s, sp, 3);
	WAIT_FOR(&c, is_state(&c, "j/trainer-0", SUP_FAILED) && is_state(&c, "j/trainer-1", SUP_STOPPED) &&
			     is_state(&c, "j/trainer-2", SUP_FAILED), 3000);
	T_STREQ(get(&c, "j/trainer-0").reason, "exited with status 5");
	T_STREQ(get(&c, "j/trainer-1").reason, "exited with status 0");
	T_STREQ(get(&c, "j/trainer-2").reason, "killed by signal 9");
	T_EQ(get(&c, "j/trainer-2").last_exit, -9);
	T_CHECK(get(&c, "j/trainer-0").exited_ms >= get(&c, "j/trainer-0").started_ms);
	WAIT_FOR(&c, last_ev_is(&c, "j/trainer-0", SUP_FAILED) && last_ev_is(&c, "j/trainer-1", SUP_STOPPED) &&
			     last_ev_is(&c, "j/trainer-2", SUP_FAILED), 1000);
	int nev = c.nev;
	sup_set(c.s, sp, 3);
	run_for(&c, 300);
	T_EQ(c.nev, nev);
	T_EQ(pid_of(&c, "j/trainer-0"), 0);
	/* a new generation runs it again */
	sp[0].gen = 2;
	sp[0].cmd = "exec sleep 60";
	sup_set(c.s, sp, 3);
	WAIT_FOR(&c, running_new(&c, "j/trainer-0", 0), 3000);
	T_EQ(get(&c, "j/trainer-0").gen, 2);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_stop_prefix_no_local_restart, 20)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp[3] = {
		mkspec(&c, "j/trainer-0", "exec sleep 60", 1),
		mkspec(&c, "j/trainer-1", "exec sleep 60", 1),
		mkspec(&c, "j/engine-0", "exec sleep 60", 1),
	};
	sp[1].local_restart = true;
	sup_set(c.s, sp, 3);
	WAIT_FOR(&c, is_state(&c, "j/trainer-0", SUP_RUNNING) && is_state(&c, "j/trainer-1", SUP_RUNNING) &&
			     is_state(&c, "j/engine-0", SUP_RUNNING), 3000);
	pid_t t0 = pid_of(&c, "j/trainer-0"), t1 = pid_of(&c, "j/trainer-1"), e0 = pid_of(&c, "j/engine-0");
	sup_stop_prefix(c.s, "j/trainer-", "stopped by the agent: a sibling died");
	WAIT_FOR(&c, is_state(&c, "j/trainer-0", SUP_FAILED) && is_state(&c, "j/trainer-1", SUP_FAILED), 3000);
	T_CHECK(!alive(t0) && !alive(t1));
	T_STREQ(get(&c, "j/trainer-1").reason, "stopped by the agent: a sibling died");
	run_for(&c, 300);
	T_CHECK(is_state(&c, "j/trainer-1", SUP_FAILED)); /* not restarted locally */
	T_EQ(pid_of(&c, "j/engine-0"), e0);
	T_CHECK(alive(e0));
	sp[0].gen = sp[1].gen = 2;
	sup_set(c.s, sp, 3);
	WAIT_FOR(&c, running_new(&c, "j/trainer-0", t0) && running_new(&c, "j/trainer-1", t1), 3000);
	T_EQ(pid_of(&c, "j/engine-0"), e0);
	ctx_fini(&c);
}

/* A group like one a dead agent left: leader `sleep`, plus a grandchild. */
static pid_t start_group(tctx *c, const char *gcfile)
{
	char cmd[256];
	snprintf(cmd, sizeof cmd, "sleep 60 & echo $! > %s/%s; exec sleep 60", c->dir, gcfile);
	pid_t pid = fork();
	T_CHECK(pid >= 0);
	if (pid == 0) {
		setpgid(0, 0);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	T_CHECK(c->nextra < MAX_PIDS);
	c->extra[c->nextra++] = pid;
	return pid;
}

static unsigned long long starttime_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	T_CHECK(f);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')') + 2;
	for (int field = 3; field < 22; field++) p = strchr(p, ' ') + 1;
	return strtoull(p, NULL, 10);
}

T_TEST_TIMEOUT(sup_stale_state_cleanup, 20)
{
	tctx c;
	ctx_init(&c, false);
	pid_t stale = start_group(&c, "gc1"), decoy = start_group(&c, "gc2");
	WAIT_FOR(&c, has_line(&c, "gc1") && has_line(&c, "gc2"), 3000);
	pid_t gc1 = pid_in(&c, "gc1"), gc2 = pid_in(&c, "gc2");
	FILE *f = fopen(c.state, "w");
	T_CHECK(f);
	fprintf(f, "%d %llu old/rank-0\n", (int)stale, starttime_of(stale));
	fprintf(f, "%d %llu old/rank-1\n", (int)decoy, starttime_of(decoy) + 1); /* pid reused: not ours */
	fprintf(f, "1 0 old/init\n");
	fclose(f);
	char err[128] = "";
	c.s = sup_new(c.loop, c.logs, c.state, on_event, &c, err, sizeof err);
	T_CHECK(c.s);
	WAIT_FOR(&c, !alive(stale) && !alive(gc1), 2000);
	run_for(&c, 50);
	T_CHECK(alive(decoy) && alive(gc2));
	char buf[256];
	/* rewritten: this agent's mark, nothing running */
	slurp(&c, "state", buf, sizeof buf);
	T_CHECK(!strncmp(buf, "mark ", 5) && strlen(buf) == 5 + 32 + 1);
	sup_free(&c.s, 1.0);

	/* garbage: never a crash, nothing killed */
	sk_log_set_level(SK_LOG_OFF);
	f = fopen(c.state, "w");
	T_CHECK(f);
	uint64_t x = t_seed() | 1;
	for (int i = 0; i < 3000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		fputc((int)(x & 0xff), f);
	}
	fprintf(f, "\n%d\n%d x y\n-%d 5 z\n%d 99999999999999999999999 q\n0 0 zero\n", (int)decoy, (int)decoy,
		(int)decoy, (int)decoy);
	for (int i = 0; i < 2000; i++) fputc('7', f);
	fprintf(f, " 1 long\n%d %llu", (int)getpid(), starttime_of(getpid()));
	fclose(f);
	c.s = sup_new(c.loop, c.logs, c.state, on_event, &c, err, sizeof err);
	T_CHECK(c.s);
	run_for(&c, 50);
	T_CHECK(alive(decoy) && alive(gc2));
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_bad_ids_fail_with_reason, 20)
{
	tctx c;
	ctx_init(&c, true);
	const char *bad[] = { "nojob", "a/b/c", "../x", "j/..", "j/x y", "j/", "/x", "j/a\nb", "", "j/$(id)" };
	enum { NBAD = sizeof bad / sizeof bad[0] };
	sup_spec sp[NBAD + 4];
	for (int i = 0; i < NBAD; i++) sp[i] = mkspec(&c, bad[i], "touch $DIR/ran; exec sleep 60", 1);
	sp[NBAD] = mkspec(&c, "j/ok", "exec sleep 60", 1);
	sp[NBAD + 1] = mkspec(&c, "j/nocmd", NULL, 1);
	sp[NBAD + 2] = mkspec(&c, "j/badenv", "exec sleep 60", 1);
	sp[NBAD + 2].env[sp[NBAD + 2].nenv++] = "NOEQUALS";
	sp[NBAD + 3] = mkspec(&c, "j/long", "touch $DIR/ran; exec sleep 60", 1);
	memset(sp[NBAD + 3].id, 'x', sizeof sp[NBAD + 3].id); /* not NUL-terminated */
	sup_set(c.s, sp, NBAD + 4);
	WAIT_FOR(&c, is_state(&c, "j/ok", SUP_RUNNING), 3000);
	sup_status all[32];
	size_t n = sup_list(c.s, all, 32);
	T_EQ(n, NBAD + 4);
	for (size_t i = 0; i < n; i++) {
		if (i) T_CHECK(strcmp(all[i - 1].id, all[i].id) < 0);
		if (!strcmp(all[i].id, "j/ok")) continue;
		T_EQ(all[i].state, SUP_FAILED);
		T_EQ(all[i].pid, 0);
		T_CHECK(!strncmp(all[i].reason, "bad ", 4));
	}
	T_CHECK(strstr(get(&c, "j/badenv").reason, "KEY=VALUE"));
	run_for(&c, 100);
	char buf[16];
	T_STREQ(slurp(&c, "ran", buf, sizeof buf), "");
	T_STREQ(slurp(&c, "x.log", buf, sizeof buf), ""); /* "../x" did not escape the log folder */
	T_EQ(sup_list(c.s, all, 2), NBAD + 4); /* the count even past cap */
	/* events: one "failed" per bad member */
	int failed = 0;
	WAIT_FOR(&c, last_ev_is(&c, "j/ok", SUP_RUNNING), 1000);
	for (int i = 0; i < c.nev; i++) failed += c.ev[i].state == SUP_FAILED;
	T_EQ(failed, NBAD + 3);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_hold_and_start_delay, 20)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp = mkspec(&c, "j/e", "exec sleep 60", 1);
	sp.hold = true;
	sp.start_delay_ms = 150;
	sup_set(c.s, &sp, 1);
	run_for(&c, 200);
	T_CHECK(is_state(&c, "j/e", SUP_PENDING));
	T_EQ(pid_of(&c, "j/e"), 0);
	sp.hold = false;
	uint64_t t0 = now_ms();
	sup_set(c.s, &sp, 1);
	T_CHECK(is_state(&c, "j/e", SUP_STARTING));
	WAIT_FOR(&c, is_state(&c, "j/e", SUP_RUNNING), 2000);
	T_CHECK(now_ms() - t0 >= 150);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_restart_latency, 20)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp = mkspec(&c, "j/engine-1", "echo $SKEIN_RESTART_COUNT > $DIR/rc; exec sleep 60", 1);
	sp.local_restart = true;
	sp.backoff_min_ms = sp.backoff_max_ms = 0;
	sp.max_restarts = 10;
	sup_set(c.s, &sp, 1);
	WAIT_FOR(&c, is_state(&c, "j/engine-1", SUP_RUNNING), 3000);
	uint64_t worst = 0;
	for (int i = 1; i <= 3; i++) {
		pid_t old = pid_of(&c, "j/engine-1");
		uint64_t t0 = now_ms();
		kill(old, SIGKILL);
		WAIT_FOR(&c, running_new(&c, "j/engine-1", old), 2000);
		uint64_t lat = now_ms() - t0;
		if (lat > worst) worst = lat;
		printf("  restart latency (death to new pid running, backoff 0): %llu ms\n", (unsigned long long)lat);
		T_EQ(get(&c, "j/engine-1").restarts, i);
	}
	T_LE(worst, 200);
	char buf[32];
	WAIT_FOR(&c, !strcmp(slurp(&c, "rc", buf, sizeof buf), "3\n"), 2000);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_free_kills_everything, 20)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp[2] = {
		mkspec(&c, "j/ignores-term", "trap '' TERM; sleep 60 & echo $! > $DIR/gc; wait", 1),
		mkspec(&c, "j/plain", "exec sleep 60", 1),
	};
	sp[0].stop_grace_ms = 10000;
	sup_set(c.s, sp, 2);
	WAIT_FOR(&c, has_line(&c, "gc") && is_state(&c, "j/ignores-term", SUP_RUNNING) &&
			     is_state(&c, "j/plain", SUP_RUNNING), 3000);
	pid_t a = pid_of(&c, "j/ignores-term"), b = pid_of(&c, "j/plain"), gc = pid_in(&c, "gc");
	char buf[256];
	T_CHECK(strstr(slurp(&c, "state", buf, sizeof buf), " j/plain\n"));
	uint64_t t0 = now_ms();
	sup_free(&c.s, 0.3);
	uint64_t took = now_ms() - t0;
	printf("  sup_free(0.3 s) took %llu ms\n", (unsigned long long)took);
	T_CHECK(took >= 300 && took < 1500);
	T_CHECK(!alive(a) && !alive(b) && !alive(gc));
	T_CHECK(access(c.state, F_OK) != 0);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_needs_default_loop, 10)
{
	struct ev_loop *l = ev_loop_new(0);
	char err[128] = "";
	T_CHECK(sup_new(l, NULL, NULL, NULL, NULL, err, sizeof err) == NULL);
	T_CHECK(strstr(err, "default"));
	ev_loop_destroy(l);
	/* no log dir and no state file: members still run, with output to /dev/null */
	tctx c;
	ctx_init(&c, false);
	c.s = sup_new(c.loop, NULL, NULL, on_event, &c, err, sizeof err);
	T_CHECK(c.s);
	sup_spec sp = mkspec(&c, "j/x", "echo hi; echo ok > $DIR/out; exec sleep 60", 1);
	sup_set(c.s, &sp, 1);
	WAIT_FOR(&c, has_line(&c, "out"), 3000);
	sk_buf b;
	sk_buf_init(&b);
	uint64_t next, size;
	T_EQ(sup_log_read(c.s, "j/x", 0, 100, &b, &next, &size), -1);
	sk_buf_free(&b);
	ctx_fini(&c);
}

T_TEST_TIMEOUT(sup_stopped_process_still_takes_term, 10)
{
	tctx c;
	ctx_init(&c, true);
	sup_spec sp = mkspec(&c, "j/paused", "exec sleep 60", 1);
	sp.stop_grace_ms = 5000;
	sup_set(c.s, &sp, 1);
	WAIT_FOR(&c, is_state(&c, "j/paused", SUP_RUNNING), 3000);
	pid_t pid = pid_of(&c, "j/paused");
	kill(pid, SIGSTOP);
	uint64_t t0 = now_ms();
	sup_set(c.s, NULL, 0);
	WAIT_FOR(&c, !has(&c, "j/paused"), 2000); /* TERM + CONT, not the 5 s grace */
	T_CHECK(now_ms() - t0 < 1000);
	WAIT_FOR(&c, last_ev_is(&c, "j/paused", SUP_STOPPED), 1000);
	T_EQ(last_ev(&c, "j/paused")->last_exit, -SIGTERM);
	ctx_fini(&c);
}

/* Secrets of the agent stay out of members' environment; logs are 0600 in
 * 0700 folders under umask 000 (and a 0755 folder of ours is fixed); a
 * symlink planted for a job's log folder is refused, nothing written
 * through it, and reading a log never follows a link. */
T_TEST_TIMEOUT(sup_env_secrets_log_modes_symlinks, 20)
{
	tctx c;
	mode_t old = umask(0);
	setenv("SKEIN_KEY", "c2VjcmV0LWtleS1ieXRlcy0xNg==", 1);
	setenv("SKEIN_KEY_FILE", "/etc/skein/key", 1);
	setenv("SKEIN_OPERATOR_TOKEN", "op-secret", 1);
	setenv("SKEIN_KEEP_ME", "visible", 1);
	ctx_init(&c, false);
	T_EQ(mkdir(c.logs, 0755), 0); /* a log folder made 0755 by an older agent */
	char err[128] = "";
	c.s = sup_new(c.loop, c.logs, c.state, on_event, &c, err, sizeof err);
	if (!c.s) T_FAIL("sup_new: %s", err);
	struct stat st;
	T_EQ(stat(c.logs, &st), 0);
	T_EQ(st.st_mode & 0777, 0700);
	/* j2's folder is a link to a folder of someone else's choosing */
	char target[128], link[160];
	snprintf(target, sizeof target, "%s/elsewhere", c.dir);
	snprintf(link, sizeof link, "%s/j2", c.logs);
	T_EQ(mkdir(target, 0777), 0);
	T_EQ(symlink(target, link), 0);
	sup_spec sp[2] = { mkspec(&c, "j/env", "env > \"$DIR/env\"; echo done > \"$DIR/envdone\"", 1),
			   mkspec(&c, "j2/m", "echo pwned", 1) };
	sup_set(c.s, sp, 2);
	WAIT_FOR(&c, has_line(&c, "envdone") && is_state(&c, "j2/m", SUP_FAILED), 5000);
	char env[8192];
	slurp(&c, "env", env, sizeof env);
	T_CHECK(strstr(env, "SKEIN_KEEP_ME=visible"));
	T_CHECK(!strstr(env, "SKEIN_KEY"));
	T_CHECK(!strstr(env, "SKEIN_OPERATOR"));
	T_CHECK(strstr(get(&c, "j2/m").reason, "symbolic link"));
	char path[256];
	snprintf(path, sizeof path, "%s/j/env.log", c.logs);
	T_EQ(lstat(path, &st), 0);
	T_EQ(st.st_mode & 0777, 0600);
	snprintf(path, sizeof path, "%s/j", c.logs);
	T_EQ(lstat(path, &st), 0);
	T_EQ(st.st_mode & 0777, 0700);
	snprintf(path, sizeof path, "%s/m.log", target);
	T_CHECK(access(path, F_OK) != 0); /* nothing written through the link */
	/* a log replaced by a link to a secret is not read */
	char secret[128];
	snprintf(secret, sizeof secret, "%s/secret", c.dir);
	FILE *f = fopen(secret, "w");
	T_CHECK(f);
	fputs("secret line\n", f);
	fclose(f);
	snprintf(path, sizeof path, "%s/j/env.log", c.logs);
	T_EQ(unlink(path), 0);
	T_EQ(symlink(secret, path), 0);
	sk_buf out;
	sk_buf_init(&out);
	T_EQ(sup_log_read(c.s, "j/env", 0, 4096, &out, NULL, NULL), -1);
	T_EQ(out.len, 0);
	sk_buf_free(&out);
	umask(old);
	ctx_fini(&c);
}
