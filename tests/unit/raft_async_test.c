/* tests/unit/raft_async_test: the storage thread (raft/raft_async.c) under
 * a real node on file storage with fsync: writes batched (far fewer syncs
 * than calls), nothing committed or applied before the thread made it
 * durable, a failure stops the node, and freeing finishes what is queued.
 * The thread wakes the test through a pipe, as it wakes skeind's loop. */
#include "tests/t.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "raft/raft.h"
#include "raft/raft_kv.h"

static int wake[2];
static uint64_t now_ms = 1000;

static void notify(void *ctx)
{
	(void)ctx;
	char b = 1;
	if (write(wake[1], &b, 1) < 0) { /* full: a wake-up is pending anyway */ }
}

/* Waits up to ms for the thread, then hands raft what is durable and ticks. */
static void pump(raft_async *a, raft_t *r, int ms)
{
	struct pollfd p = { .fd = wake[0], .events = POLLIN };
	char buf[64];
	if (poll(&p, 1, ms) > 0)
		while (read(wake[0], buf, sizeof buf) > 0) {}
	now_ms += 5;
	raft_async_deliver(a, r, now_ms);
	raft_tick(r, now_ms);
}

static void mk_dir(char *d, size_t cap)
{
	const char *base = getenv("TMPDIR");
	snprintf(d, cap, "%s/raft_async.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(d)) T_FAIL("mkdtemp");
}

static void rm_dir(const char *d)
{
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	if (system(cmd) != 0) T_FAIL("rm");
}

/* A single voter on `st`, bootstrapped and leading. */
static raft_t *single_leader(raft_async *a, raft_storage *st)
{
	char err[256];
	raft_config cfg;
	raft_config_profile(&cfg, "fast");
	raft_self self = { "n0", 7 };
	raft_t *r = raft_new(&cfg, &self, st, now_ms, err, sizeof err);
	if (!r) T_FAIL("raft_new: %s", err);
	const char *names[] = { "n0" };
	raft_voters v;
	T_CHECK(raft_voters_make(&v, names, 1, err, sizeof err) == 0);
	if (raft_bootstrap(r, now_ms, &v, err, sizeof err) != 0) T_FAIL("bootstrap: %s", err);
	for (int i = 0; i < 400 && !raft_is_leader(r); i++) pump(a, r, 1);
	T_CHECK(raft_is_leader(r));
	return r;
}

static int put(raft_t *r, int k)
{
	char key[32], err[256];
	uint8_t *buf, type;
	size_t len;
	uint64_t ix, tm;
	snprintf(key, sizeof key, "k%d", k);
	T_CHECK(raft_kv_encode_put(key, strlen(key), "v", 1, &type, &buf, &len, err, sizeof err) == 0);
	int rc = raft_propose(r, now_ms, type, buf, len, &ix, &tm, err, sizeof err);
	free(buf);
	return rc;
}

/* The last index a synchronous reopen of dir finds. */
static uint64_t stored_last(const char *dir)
{
	char err[256];
	raft_storage *s = raft_file_storage_new(dir, true, err, sizeof err);
	if (!s) T_FAIL("reopen: %s", err);
	raft_loaded l;
	if (s->load(s->ctx, &l, err, sizeof err) != 0) T_FAIL("load: %s", err);
	uint64_t last = l.nentries ? l.entries[l.nentries - 1].index : l.snap.index;
	free(l.snap_data);
	for (size_t i = 0; i < l.nentries; i++) free((void *)l.entries[i].data);
	free(l.entries);
	raft_file_storage_free(&s);
	return last;
}

T_TEST(raft_async_batches_and_orders)
{
	char dir[256], err[256];
	mk_dir(dir, sizeof dir);
	T_CHECK(pipe2(wake, O_NONBLOCK | O_CLOEXEC) == 0);
	raft_storage *file = raft_file_storage_new(dir, true, err, sizeof err);
	if (!file) T_FAIL("file storage: %s", err);
	raft_async *a = raft_async_new(file, notify, NULL, err, sizeof err);
	if (!a) T_FAIL("raft_async_new: %s", err);
	raft_t *r = single_leader(a, raft_async_storage(a));
	/* bursts of 100 proposals, as a busy loop iteration would make them */
	uint64_t applied = 0, last = 0;
	for (int burst = 0; burst < 20; burst++) {
		for (int k = 0; k < 100; k++) T_CHECK(put(r, burst * 100 + k) == 0);
		last = raft_last_index(r);
		for (int i = 0; i < 2000 && applied < last; i++) {
			pump(a, r, 20);
			raft_apply ap;
			while (raft_pop_apply(r, &ap)) {
				/* a single voter commits only what its disk has */
				T_CHECK(ap.index <= raft_durable_index(r));
				applied = ap.index;
			}
		}
		T_EQ(applied, last);
	}
	raft_async_stats st;
	raft_async_get_stats(a, &st);
	printf("  %llu storage calls in %llu batches (one fdatasync each), largest %llu calls, slowest %llu ms\n",
	       (unsigned long long)st.calls, (unsigned long long)st.batches, (unsigned long long)st.max_batch,
	       (unsigned long long)st.max_batch_ms);
	T_CHECK(st.calls >= 2000 && st.batches * 4 < st.calls);
	T_EQ(st.done, st.queued);
	raft_destroy(&r);
	raft_async_free(&a);
	raft_async_free(&a); /* safe twice */
	raft_file_storage_free(&file);
	T_EQ(stored_last(dir), last);
	close(wake[0]);
	close(wake[1]);
	rm_dir(dir);
}

/* Freeing the thread finishes the queue: a clean stop loses nothing. */
T_TEST(raft_async_free_finishes_queue)
{
	char dir[256], err[256];
	mk_dir(dir, sizeof dir);
	T_CHECK(pipe2(wake, O_NONBLOCK | O_CLOEXEC) == 0);
	raft_storage *file = raft_file_storage_new(dir, true, err, sizeof err);
	raft_async *a = raft_async_new(file, notify, NULL, err, sizeof err);
	T_CHECK(file && a);
	raft_t *r = single_leader(a, raft_async_storage(a));
	for (int k = 0; k < 300; k++) T_CHECK(put(r, k) == 0);
	uint64_t last = raft_last_index(r);
	raft_destroy(&r);
	raft_async_free(&a);
	raft_file_storage_free(&file);
	T_EQ(stored_last(dir), last);
	close(wake[0]);
	close(wake[1]);
	rm_dir(dir);
}

/* ---- a storage whose appends fail after a few ---- */

static raft_storage *fail_inner;
static int appends_left;

static int f_load(void *ctx, raft_loaded *o, char *e, size_t el) { return fail_inner->load(fail_inner->ctx, o, e, el); }
static int f_hard(void *ctx, uint64_t t, const char *v, char *e, size_t el)
{
	return fail_inner->save_hard(fail_inner->ctx, t, v, e, el);
}
static int f_append(void *ctx, const raft_entry *en, size_t n, char *e, size_t el)
{
	if (appends_left-- <= 0) {
		snprintf(e, el, "disk full (test)");
		return -1;
	}
	return fail_inner->append(fail_inner->ctx, en, n, e, el);
}
static int f_trunc(void *ctx, uint64_t from, char *e, size_t el) { return fail_inner->truncate(fail_inner->ctx, from, e, el); }
static int f_snap(void *ctx, const raft_snap_meta *m, const uint8_t *d, size_t len, uint64_t upto, char *e, size_t el)
{
	return fail_inner->save_snapshot(fail_inner->ctx, m, d, len, upto, e, el);
}

T_TEST(raft_async_failure_stops_node)
{
	char err[256];
	T_CHECK(pipe2(wake, O_NONBLOCK | O_CLOEXEC) == 0);
	fail_inner = raft_mem_storage_new();
	appends_left = 5;
	raft_storage failing = { .load = f_load, .save_hard = f_hard, .append = f_append, .truncate = f_trunc,
				 .save_snapshot = f_snap };
	raft_async *a = raft_async_new(&failing, notify, NULL, err, sizeof err);
	T_CHECK(a);
	raft_t *r = single_leader(a, raft_async_storage(a));
	for (int k = 0; k < 20 && !raft_failed(r); k++) {
		put(r, k);
		pump(a, r, 50);
	}
	for (int i = 0; i < 100 && !raft_failed(r); i++) pump(a, r, 20);
	T_CHECK(raft_failed(r));
	raft_event ev;
	bool seen = false;
	while (raft_pop_event(r, &ev))
		if (ev.type == RAFT_EV_FAILED) {
			seen = true;
			T_CHECK(strstr(ev.reason, "disk full (test)") != NULL);
		}
	T_CHECK(seen);
	T_CHECK(put(r, 99) != 0); /* a failed node takes no writes */
	raft_destroy(&r);
	raft_async_free(&a);
	raft_mem_storage_free(&fail_inner);
	close(wake[0]);
	close(wake[1]);
}
