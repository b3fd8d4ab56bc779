/* tests/unit/raft_cluster.h: the deterministic in-process cluster of the
 * raft tests (raft_test.c, raft_change_test.c), included by each.
 *
 * The harness keeps a fake clock (ms) and a fake network: a heap of packets
 * ordered by arrival time, with a latency drawn per packet (so packets
 * reorder), loss, cut links (partitions), pauses (a paused node neither
 * ticks nor reads; its packets wait, as with SIGSTOP) and crash-restarts
 * (raft_destroy, then raft_new on the same storage).  Each node applies
 * what raft commits to a raft_kv and snapshots when raft asks.
 *
 * With c.lag_max set (cluster_init_lagging), every node's storage is
 * asynchronous and its durability lags: each call is queued with a durable
 * instant a random delay after it (in order: a disk does not reorder
 * fsyncs), reported to raft then (raft_storage_done); a crash keeps a random
 * prefix of what was not yet durable and loses the rest.  stall_until[i]
 * holds node i's disk still, as a disk hog would.
 *
 * Checked after every step of every test:
 *  - at most one leader per term;
 *  - at most one node whose lease holds (raft_leader_ok) at any instant;
 *  - every node applies the same entry (term) at each index;
 *  - a linearizable read: a node that would serve a read (raft_read_ok,
 *    not paused) has applied every write a leader applied (answered) so far;
 * and with lagging storage in memory, against what each "disk" (c.st[i])
 * holds at that moment:
 *  - a vote granted leaves only once the voter's disk holds it;
 *  - an AppendEntries or InstallSnapshot success (syncing ones too) only
 *    once the entry it acknowledges is on the follower's disk;
 *  - a new leader had a majority of durable votes (its own only if on disk);
 *  - a leader's commit index is on the disks of a majority of voters;
 *  - a node applies only entries on its own disk.
 * Writes are acknowledged when committed; at the end of the randomized
 * tests every acknowledged write must be on every node.  A failing seed is
 * printed; TEST_SEED=... replays the run. */
#ifndef RAFT_CLUSTER_H
#define RAFT_CLUSTER_H

/* each test file uses a part of the harness */
#define RC_STATIC static __attribute__((unused))

#include "tests/t.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sk_heap.h"
#include "common/sk_rng.h"
#include "raft/raft.h"
#include "raft/raft_codec.h"
#include "raft/raft_int.h"
#include "raft/raft_kv.h"

enum { NMAX = 8, WMAX = 20000 };

typedef struct {
	int from, to;
	uint8_t *data;
	size_t len;
} pkt;

typedef struct {
	uint64_t index, term;
	int key;
	bool acked;
} write_rec;

/* One storage call queued on a lagging storage, with a copy of its data. */
typedef enum { LAG_APPEND, LAG_TRUNCATE, LAG_HARD, LAG_SNAP } lag_kind;
typedef struct {
	lag_kind kind;
	uint64_t seq, at;
	raft_entry *ents;
	size_t n;
	uint64_t arg;             /* truncate from, the hard term, compact up to */
	char vote[RAFT_NAME_MAX + 1];
	raft_snap_meta meta;
	uint8_t *data;
	size_t len;
} lag_op;

typedef struct {
	raft_storage st;          /* async; its calls land in c.st[node] later */
	int node;
	uint64_t seq;             /* calls numbered as raft numbers them */
	lag_op *q;
	size_t head, n, cap;
	uint64_t last_at;
} lag_store;

RC_STATIC struct {
	int n;
	uint64_t seed;
	raft_config cfg;
	char names[NMAX][16];
	raft_storage *st[NMAX];
	raft_t *r[NMAX];
	raft_kv *kv[NMAX];
	uint64_t applied[NMAX];
	bool up[NMAX];
	uint64_t paused_until[NMAX];
	bool cut[NMAX][NMAX];
	double loss;
	uint32_t lat_min, lat_max;
	sk_rng rng;
	uint64_t now;
	sk_heap q;
	uint64_t restarts[NMAX];
	/* checks */
	int *leader_of;           /* by term: node index + 1 */
	size_t leader_of_cap;
	uint64_t *applied_term;   /* by index */
	size_t applied_cap;
	write_rec *w;
	size_t nw;
	int next_key;
	uint64_t stepdown_at[NMAX], leader_at[NMAX];
	bool file_storage;
	char dirs[NMAX][256];
	uint64_t tot_elections, tot_snap, tot_trunc;
	uint64_t last_applied_term[NMAX], commit_at_lead[NMAX];
	uint64_t transfer_abandoned[NMAX];
	uint32_t lag_max;         /* > 0: lagging asynchronous storage */
	lag_store *lag[NMAX];
	uint64_t stall_until[NMAX];
	uint64_t lost_writes;     /* storage calls lost in crashes (not yet durable) */
	raft_voters boot;         /* the first voter set (cluster_start) */
	uint64_t acked_max;       /* the largest index of an acknowledged write */
	/* file storage through the power-loss seam (pl_sync): a crash may
	 * write an append without its sync, and half the crashes lose power */
	bool power_loss;
	bool voters_changed;      /* some node held a set other than the first */
	uint64_t torn_writes, power_losses, power_cut_bytes;
	uint64_t reads_checked;   /* node-steps where a read would have been served */
} c;

RC_STATIC void fail_seed(const char *what, int line)
{
	T_FAIL("line %d: %s (cluster seed %llu, now %llu ms)", line, what, (unsigned long long)c.seed,
	       (unsigned long long)c.now);
}
#define CHECK(cond) do { if (!(cond)) fail_seed(#cond, __LINE__); } while (0)

RC_STATIC int idx_of(const char *name)
{
	for (int i = 0; i < c.n; i++)
		if (!strcmp(c.names[i], name)) return i;
	return -1;
}

RC_STATIC bool paused(int i) { return c.paused_until[i] > c.now; }

/* ---- the lagging storage ---- */

RC_STATIC lag_op *lag_push(void *ctx, lag_kind kind)
{
	lag_store *l = ctx;
	if (l->head + l->n == l->cap) {
		if (l->head) {
			memmove(l->q, l->q + l->head, l->n * sizeof *l->q);
			l->head = 0;
		} else {
			l->cap = l->cap ? l->cap * 2 : 64;
			l->q = realloc(l->q, l->cap * sizeof *l->q);
		}
	}
	/* half within a few ms, half up to lag_max (a slow fsync) */
	uint64_t d = sk_rng_below(&c.rng, 4);
	if (sk_rng_below(&c.rng, 2) == 0) d = sk_rng_below(&c.rng, c.lag_max + 1);
	uint64_t at = c.now + d < l->last_at ? l->last_at : c.now + d;
	l->last_at = at;
	lag_op *o = &l->q[l->head + l->n++];
	memset(o, 0, sizeof *o);
	o->kind = kind;
	o->seq = ++l->seq;
	o->at = at;
	return o;
}

RC_STATIC uint8_t *lag_dup(const uint8_t *p, size_t len)
{
	uint8_t *d = malloc(len ? len : 1);
	if (len) memcpy(d, p, len);
	return d;
}

RC_STATIC int lag_load(void *ctx, raft_loaded *out, char *err, size_t errlen)
{
	raft_storage *in = c.st[((lag_store *)ctx)->node];
	return in->load(in->ctx, out, err, errlen);
}

RC_STATIC int lag_save_hard(void *ctx, uint64_t term, const char *vote, char *err, size_t errlen)
{
	lag_op *o = lag_push(ctx, LAG_HARD);
	o->arg = term;
	snprintf(o->vote, sizeof o->vote, "%s", vote);
	return 0;
}

RC_STATIC int lag_append(void *ctx, const raft_entry *e, size_t n, char *err, size_t errlen)
{
	lag_op *o = lag_push(ctx, LAG_APPEND);
	o->ents = calloc(n ? n : 1, sizeof *o->ents);
	o->n = n;
	for (size_t i = 0; i < n; i++) {
		o->ents[i] = e[i];
		o->ents[i].data = lag_dup(e[i].data, e[i].len);
	}
	return 0;
}

RC_STATIC int lag_truncate(void *ctx, uint64_t from, char *err, size_t errlen)
{
	lag_push(ctx, LAG_TRUNCATE)->arg = from;
	return 0;
}

RC_STATIC int lag_save_snapshot(void *ctx, const raft_snap_meta *meta, const uint8_t *data, size_t len,
				uint64_t upto, char *err, size_t errlen)
{
	lag_op *o = lag_push(ctx, LAG_SNAP);
	o->meta = *meta;
	o->data = lag_dup(data, len);
	o->len = len;
	o->arg = upto;
	return 0;
}

RC_STATIC void lag_free_op(lag_op *o)
{
	for (size_t i = 0; i < o->n; i++) free((void *)o->ents[i].data);
	free(o->ents);
	free(o->data);
}

/* Does the oldest queued call on the node's real storage. */
RC_STATIC void lag_do_one(int i)
{
	lag_store *l = c.lag[i];
	lag_op *o = &l->q[l->head];
	raft_storage *in = c.st[i];
	char err[256] = "";
	int rc = 0;
	switch (o->kind) {
	case LAG_APPEND: rc = in->append(in->ctx, o->ents, o->n, err, sizeof err); break;
	case LAG_TRUNCATE: rc = in->truncate(in->ctx, o->arg, err, sizeof err); break;
	case LAG_HARD: rc = in->save_hard(in->ctx, o->arg, o->vote, err, sizeof err); break;
	case LAG_SNAP: rc = in->save_snapshot(in->ctx, &o->meta, o->data, o->len, o->arg, err, sizeof err); break;
	}
	if (rc == 0 && in->sync) rc = in->sync(in->ctx, err, sizeof err);
	if (rc != 0) T_FAIL("lagging storage of %s: %s (seed %llu)", c.names[i], err, (unsigned long long)c.seed);
	lag_free_op(o);
	l->head++;
	l->n--;
}

/* When node i's disk next reports (UINT64_MAX: nothing queued). */
RC_STATIC uint64_t lag_deadline(int i)
{
	lag_store *l = c.lag[i];
	if (!l || !l->n || !c.r[i]) return UINT64_MAX;
	uint64_t d = l->q[l->head].at;
	if (d < c.stall_until[i]) d = c.stall_until[i];
	return d < c.paused_until[i] ? c.paused_until[i] : d;
}

RC_STATIC void drain(int i);

/* What is due on node i's disk becomes durable and is reported. */
RC_STATIC void lag_complete(int i)
{
	lag_store *l = c.lag[i];
	uint64_t last = 0;
	while (l->n && l->q[l->head].at <= c.now) {
		last = l->q[l->head].seq;
		lag_do_one(i);
	}
	if (last) raft_storage_done(c.r[i], c.now, last);
	drain(i);
}

/* A crash: a random prefix of the queue reached the disk anyway. */
RC_STATIC void lag_crash(int i)
{
	lag_store *l = c.lag[i];
	if (!l) return;
	size_t keep = (size_t)sk_rng_below(&c.rng, l->n + 1);
	for (size_t k = 0; k < keep; k++) lag_do_one(i);
	if (c.power_loss && l->n && l->q[l->head].kind == LAG_APPEND) {
		/* the next append's write() happened, its fdatasync did not */
		char err[256];
		raft_storage *in = c.st[i];
		if (in->append(in->ctx, l->q[l->head].ents, l->q[l->head].n, err, sizeof err) != 0)
			T_FAIL("torn append on %s: %s", c.names[i], err);
		c.torn_writes++;
	}
	c.lost_writes += l->n;
	while (l->n) {
		lag_free_op(&l->q[l->head++]);
		l->n--;
	}
	l->head = 0;
	l->seq = 0;
	l->last_at = 0;
}

/* ---- the power-loss seam: a fake disk behind raft_file_io that remembers,
 * per log file, its inode and size at the last sync; a power loss cuts each
 * log back to that (a file replaced since was fsync'd whole: kept). */
RC_STATIC struct { char path[400]; ino_t ino; off_t off; } pl_disk[16];
RC_STATIC int pl_n, pl_fail;   /* pl_fail: so many data syncs fail with EIO */

RC_STATIC int pl_sync(void *ctx, int fd, const char *path, bool data_only)
{
	struct stat sb;
	if (data_only && pl_fail > 0) {
		pl_fail--;
		errno = EIO;
		return -1;
	}
	if (fstat(fd, &sb) != 0) return -1;
	if (S_ISDIR(sb.st_mode)) return 0;
	int k = 0;
	while (k < pl_n && strcmp(pl_disk[k].path, path)) k++;
	if (k == pl_n) {
		if (pl_n == 16) T_FAIL("pl_disk full");
		snprintf(pl_disk[pl_n++].path, sizeof pl_disk[0].path, "%s", path);
	}
	pl_disk[k].ino = sb.st_ino;
	pl_disk[k].off = sb.st_size;
	return 0;
}

RC_STATIC void power_loss(void)
{
	struct stat sb;
	for (int k = 0; k < pl_n; k++)
		if (stat(pl_disk[k].path, &sb) == 0 && sb.st_ino == pl_disk[k].ino && sb.st_size > pl_disk[k].off &&
		    truncate(pl_disk[k].path, pl_disk[k].off) != 0)
			T_FAIL("truncate %s", pl_disk[k].path);
}

/* Node i's power fails: its log loses what was not synced. */
RC_STATIC void power_loss_node(int i)
{
	struct stat sb;
	char path[300];
	snprintf(path, sizeof path, "%s/raft.log", c.dirs[i]);
	for (int k = 0; k < pl_n; k++)
		if (!strcmp(pl_disk[k].path, path) && stat(path, &sb) == 0 && sb.st_ino == pl_disk[k].ino &&
		    sb.st_size > pl_disk[k].off) {
			if (truncate(path, pl_disk[k].off) != 0) T_FAIL("truncate %s", path);
			c.power_cut_bytes += (uint64_t)(sb.st_size - pl_disk[k].off);
		}
	c.power_losses++;
}

/* After node i loaded its log: all of it is on the (fake) disk, since raft
 * treats what it loads as durable and acknowledges it. */
RC_STATIC bool loaded_all_synced(int i)
{
	struct stat sb;
	char path[300];
	snprintf(path, sizeof path, "%s/raft.log", c.dirs[i]);
	if (stat(path, &sb) != 0) return false;
	for (int k = 0; k < pl_n; k++)
		if (!strcmp(pl_disk[k].path, path)) return sb.st_ino == pl_disk[k].ino && sb.st_size == pl_disk[k].off;
	return false;
}

/* ---- durability checks (lagging storage in memory) ---- */

RC_STATIC bool durable_checks(void) { return c.lag_max && !c.file_storage; }

/* Entry `index`, as node i's log holds it now, is on its disk. */
RC_STATIC bool on_disk(int i, uint64_t index)
{
	uint64_t t = 0;
	if (!index) return true;
	/* compacted into a snapshot (maybe not yet durable): its term is gone
	 * from memory, any entry there (or a snapshot covering it) will do */
	if (!raft__term_at(c.r[i], index, &t)) t = 0;
	return raft_mem_storage_has(c.st[i], index, t);
}

/* A message node i sends promises only what its disk holds. */
RC_STATIC void check_sent(int i, const raft_out *o)
{
	raft_decoded d;
	if (!durable_checks() || raft_codec_decode(o->data, o->len, &d) != WIRE_OK) return;
	const raft_msg *m = &d.msg;
	/* (an answer of an older term may be outdone by a later write: the
	 * leader it was for is gone, as in synchronous Raft) */
	if (m->term == raft_term(c.r[i])) {
		if (m->type == RAFT_MSG_VOTE_RESP && m->granted && !m->prevote) {
			uint64_t t;
			const char *v;
			raft_mem_storage_hard(c.st[i], &t, &v);
			CHECK(t == m->term && !strcmp(v, o->to));
		}
		if ((m->type == RAFT_MSG_APPEND_RESP || m->type == RAFT_MSG_SNAP_RESP) && m->success)
			CHECK(on_disk(i, m->last_index));
	}
	raft_codec_free(&d);
}

/* Node i just became leader of `term`: a majority of durable votes. */
RC_STATIC void check_votes(int i, uint64_t term)
{
	const raft_t *r = c.r[i];
	if (!durable_checks() || raft_term(r) != term || !raft_is_leader(r)) return;
	uint64_t t;
	const char *v;
	size_t n = 0;
	raft_mem_storage_hard(c.st[i], &t, &v);
	for (size_t j = 0; j < r->voters.n; j++)
		if (!strcmp(r->voters.names[j], c.names[i])) n += t == term && !strcmp(v, c.names[i]);
		else n += r->granted[j]; /* their durability is checked as they are sent */
	CHECK(n >= r->voters.n / 2 + 1);
}

/* Leader i's commit index is on a majority of its voters' disks.  After a
 * voter change the commit may have been counted in the set before or after
 * it (one whose change never reached us, even): then it must be on enough
 * disks that every majority of our set includes one, which is what keeps a
 * leader without it from being elected (single-server changes make any
 * majority of the one set overlap any of the other). */
RC_STATIC void check_commit(int i)
{
	const raft_t *r = c.r[i];
	uint64_t ci = raft_commit_index(r), t;
	if (!durable_checks() || !raft_is_leader(r) || ci <= r->snap.index || !raft__term_at(r, ci, &t)) return;
	size_t n = 0, maj = r->voters.n / 2 + 1;
	for (size_t j = 0; j < r->voters.n; j++) {
		int k = idx_of(r->voters.names[j]);
		n += k >= 0 && raft_mem_storage_has(c.st[k], ci, t);
	}
	CHECK(n >= (c.voters_changed ? r->voters.n - maj + 1 : maj));
}

RC_STATIC raft_storage *node_storage(int i)
{
	if (!c.lag_max) return c.st[i];
	if (!c.lag[i]) {
		c.lag[i] = calloc(1, sizeof *c.lag[i]);
		c.lag[i]->node = i;
		c.lag[i]->st = (raft_storage){ .ctx = c.lag[i], .async = true, .load = lag_load,
					       .save_hard = lag_save_hard, .append = lag_append,
					       .truncate = lag_truncate, .save_snapshot = lag_save_snapshot };
	}
	return &c.lag[i]->st;
}

RC_STATIC void start_node(int i)
{
	char err[256] = "";
	raft_self self = { c.names[i], sk_mix64(c.seed * 131 + (uint64_t)i * 7 + c.restarts[i] * 1000003) };
	c.r[i] = raft_new(&c.cfg, &self, node_storage(i), c.now, err, sizeof err);
	if (!c.r[i]) T_FAIL("raft_new %s: %s", c.names[i], err);
	raft_kv_destroy(&c.kv[i]);
	c.kv[i] = raft_kv_new();
	c.applied[i] = 0;
	c.up[i] = true;
}

RC_STATIC void cluster_init(int n, uint64_t seed, const char *profile)
{
	memset(&c, 0, sizeof c);
	c.n = n;
	c.seed = seed;
	raft_config_profile(&c.cfg, profile);
	sk_rng_seed(&c.rng, seed);
	sk_heap_init(&c.q);
	c.lat_min = 1;
	c.lat_max = 5;
	c.now = 1000;
	for (int i = 0; i < n; i++) {
		snprintf(c.names[i], sizeof c.names[i], "n%d", i);
		c.st[i] = raft_mem_storage_new();
	}
}

/* The same with lagging asynchronous storage (durable up to lag_max ms late). */
RC_STATIC void cluster_init_lagging(int n, uint64_t seed, const char *profile, uint32_t lag_max)
{
	cluster_init(n, seed, profile);
	c.lag_max = lag_max;
}

RC_STATIC void cluster_start(int nvoters)
{
	const char *names[NMAX];
	raft_voters v;
	char err[256];
	for (int i = 0; i < nvoters; i++) names[i] = c.names[i];
	T_CHECK(raft_voters_make(&v, names, (size_t)nvoters, err, sizeof err) == 0);
	c.boot = v;
	for (int i = 0; i < c.n; i++) {
		start_node(i);
		if (i < nvoters && raft_bootstrap(c.r[i], c.now, &v, err, sizeof err) != 0)
			T_FAIL("bootstrap: %s", err);
	}
}

RC_STATIC void crash(int i)
{
	raft_destroy(&c.r[i]);
	lag_crash(i);
	if (c.power_loss && sk_rng_below(&c.rng, 2) == 0) power_loss_node(i);
	c.up[i] = false;
}

RC_STATIC void restart(int i)
{
	c.restarts[i]++;
	if (c.file_storage) {
		char err[256];
		raft_file_storage_free(&c.st[i]);
		c.st[i] = raft_file_storage_new(c.dirs[i], c.power_loss, err, sizeof err);
		if (!c.st[i]) T_FAIL("file storage: %s", err);
	}
	start_node(i);
	if (c.power_loss && !loaded_all_synced(i))
		fail_seed("a restart loaded log records that are not on disk (it will acknowledge them)", __LINE__);
	/* a bootstrap lost (or half lost) before it was durable is done again,
	 * as the agent does while it has no voter set */
	char err[256];
	if (c.lag_max && raft_voters_has(&c.boot, c.names[i]) && !raft_get_voters(c.r[i])->n &&
	    raft_bootstrap(c.r[i], c.now, &c.boot, err, sizeof err) != 0)
		T_FAIL("bootstrap again on %s: %s (seed %llu)", c.names[i], err, (unsigned long long)c.seed);
}

RC_STATIC void cluster_free(void)
{
	for (int i = 0; i < c.n; i++) {
		raft_destroy(&c.r[i]);
		raft_kv_destroy(&c.kv[i]);
		if (c.lag[i]) {
			while (c.lag[i]->n) {
				lag_free_op(&c.lag[i]->q[c.lag[i]->head++]);
				c.lag[i]->n--;
			}
			free(c.lag[i]->q);
			free(c.lag[i]);
		}
		if (c.file_storage) raft_file_storage_free(&c.st[i]);
		else raft_mem_storage_free(&c.st[i]);
	}
	sk_heap_entry e;
	while (sk_heap_pop(&c.q, &e) == 0) {
		free(((pkt *)e.ptr)->data);
		free(e.ptr);
	}
	sk_heap_free(&c.q);
	free(c.leader_of);
	free(c.applied_term);
	free(c.w);
}

RC_STATIC void grow_u64(uint64_t **a, size_t *cap, size_t need)
{
	if (need < *cap) return;
	size_t nc = *cap ? *cap : 1024;
	while (nc <= need) nc *= 2;
	*a = realloc(*a, nc * sizeof **a);
	memset(*a + *cap, 0, (nc - *cap) * sizeof **a);
	*cap = nc;
}

RC_STATIC void on_apply(int i, const raft_apply *a)
{
	char err[256];
	CHECK(!durable_checks() || raft_mem_storage_has(c.st[i], a->index, a->term));
	if (a->kind == RAFT_APPLY_SNAPSHOT) {
		if (raft_kv_restore(c.kv[i], a->data, a->len, err, sizeof err) != 0)
			T_FAIL("restore on %s: %s (seed %llu)", c.names[i], err, (unsigned long long)c.seed);
		c.applied[i] = a->index;
		return;
	}
	CHECK(a->index == c.applied[i] + 1);
	c.applied[i] = a->index;
	c.last_applied_term[i] = a->term;
	grow_u64(&c.applied_term, &c.applied_cap, a->index);
	if (!c.applied_term[a->index]) c.applied_term[a->index] = a->term;
	else CHECK(c.applied_term[a->index] == a->term);
	raft_kv_apply(c.kv[i], a->type, a->data, a->len);
	for (size_t k = c.nw; k-- > 0;)
		if (c.w[k].index == a->index && c.w[k].term == a->term) {
			c.w[k].acked = true;
			/* a client hears of it from the leader that applies it (a
			 * follower may apply first: the leader's own disk lags) */
			if (raft_is_leader(c.r[i]) && a->index > c.acked_max) c.acked_max = a->index;
		}
	if (raft_snapshot_wanted(c.r[i])) {
		uint8_t *buf;
		size_t len;
		T_CHECK(raft_kv_serialize(c.kv[i], &buf, &len) == 0);
		if (raft_snapshot_take(c.r[i], c.now, a->index, buf, len, err, sizeof err) != 0)
			T_FAIL("snapshot on %s: %s", c.names[i], err);
		free(buf);
	}
}

RC_STATIC void drain(int i)
{
	raft_out o;
	raft_apply a;
	raft_event ev;
	if (!c.r[i]) return;
	while (raft_pop_out(c.r[i], &o)) {
		check_sent(i, &o);
		int to = idx_of(o.to);
		if (to < 0 || c.cut[i][to] || (c.loss > 0 && sk_rng_unit(&c.rng) < c.loss)) {
			free(o.data);
			continue;
		}
		pkt *p = malloc(sizeof *p);
		*p = (pkt){ i, to, o.data, o.len };
		uint64_t lat = c.lat_min + sk_rng_below(&c.rng, c.lat_max - c.lat_min + 1);
		sk_heap_push(&c.q, c.now + lat, p);
	}
	while (raft_pop_event(c.r[i], &ev)) {
		if (ev.type == RAFT_EV_STEPDOWN) c.stepdown_at[i] = c.now;
		if (ev.type == RAFT_EV_TRANSFER) c.transfer_abandoned[i]++;
		if (ev.type == RAFT_EV_VOTERS) {
			const raft_voters *v = raft_get_voters(c.r[i]);
			if (v->n && (v->n != c.boot.n || memcmp(v->names, c.boot.names, v->n * sizeof v->names[0])))
				c.voters_changed = true;
		}
		if (ev.type == RAFT_EV_LEADER) {
			check_votes(i, ev.term);
			c.leader_at[i] = c.now;
			c.commit_at_lead[i] = raft_commit_index(c.r[i]);
		}
		CHECK(ev.type != RAFT_EV_FAILED);
	}
	check_commit(i);
	while (raft_pop_apply(c.r[i], &a)) on_apply(i, &a);
	/* the commit rule: a leader's commit moves only to an entry of its
	 * own term (Figure 8 of the Raft paper) */
	uint64_t ci = raft_commit_index(c.r[i]);
	if (raft_is_leader(c.r[i]) && ci > c.commit_at_lead[i] && c.applied[i] == ci)
		CHECK(c.last_applied_term[i] == raft_term(c.r[i]));
}

RC_STATIC void check_invariants(void)
{
	int ok = 0;
	for (int i = 0; i < c.n; i++) {
		if (!c.r[i]) continue;
		if (raft_is_leader(c.r[i])) {
			uint64_t t = raft_term(c.r[i]);
			if (t >= c.leader_of_cap) {
				size_t nc = c.leader_of_cap ? c.leader_of_cap : 1024;
				while (nc <= t) nc *= 2;
				c.leader_of = realloc(c.leader_of, nc * sizeof *c.leader_of);
				memset(c.leader_of + c.leader_of_cap, 0, (nc - c.leader_of_cap) * sizeof *c.leader_of);
				c.leader_of_cap = nc;
			}
			if (!c.leader_of[t]) c.leader_of[t] = i + 1;
			CHECK(c.leader_of[t] == i + 1);
		}
		ok += raft_leader_ok(c.r[i], c.now);
		if (!paused(i) && raft_read_ok(c.r[i], c.now)) {
			c.reads_checked++;
			CHECK(c.applied[i] >= c.acked_max);
		}
	}
	CHECK(ok <= 1);
}

RC_STATIC uint64_t node_deadline(int i)
{
	if (!c.r[i]) return UINT64_MAX;
	uint64_t d = raft_next_deadline(c.r[i]);
	return d < c.paused_until[i] ? c.paused_until[i] : d;
}

RC_STATIC void run_until(uint64_t until)
{
	uint64_t stuck = 0, last = c.now;
	for (;;) {
		uint64_t t = UINT64_MAX;
		int who = -1;
		bool disk = false;
		for (int i = 0; i < c.n; i++) {
			uint64_t d = node_deadline(i), dd = lag_deadline(i);
			if (d < t) { t = d; who = i; disk = false; }
			if (dd < t) { t = dd; who = i; disk = true; }
		}
		const sk_heap_entry *top = sk_heap_peek(&c.q);
		bool is_pkt = top && top->key <= t;
		if (is_pkt) t = top->key;
		if (t > until) { c.now = until; return; }
		if (t > c.now) c.now = t;
		if (c.now == last) { if (++stuck > 1000000) fail_seed("no progress", __LINE__); }
		else { stuck = 0; last = c.now; }
		if (is_pkt) {
			sk_heap_entry e;
			sk_heap_pop(&c.q, &e);
			pkt *p = e.ptr;
			if (!c.r[p->to]) {
				free(p->data);
				free(p);
			} else if (paused(p->to)) {
				sk_heap_push(&c.q, c.paused_until[p->to], p);
			} else {
				int to = p->to;
				raft_recv(c.r[to], c.now, p->data, p->len);
				free(p->data);
				free(p);
				drain(to);
			}
		} else if (disk) {
			lag_complete(who);
		} else {
			raft_tick(c.r[who], c.now);
			drain(who);
		}
		check_invariants();
	}
}

RC_STATIC int leader(void)
{
	int l = -1;
	for (int i = 0; i < c.n; i++)
		if (c.r[i] && !paused(i) && raft_leader_ok(c.r[i], c.now)) l = i;
	return l;
}

/* Runs until a leader with a lease exists (or the time limit). */
RC_STATIC int wait_leader(uint64_t limit_ms)
{
	uint64_t end = c.now + limit_ms;
	while (c.now < end) {
		int l = leader();
		if (l >= 0) return l;
		run_until(c.now + 10);
	}
	return leader();
}

/* Proposes a put of a fresh key on node i; records it. */
RC_STATIC int propose(int i)
{
	uint8_t *buf, type;
	size_t len;
	char key[32], val[32], err[256];
	int k = c.next_key++;
	snprintf(key, sizeof key, "k%d", k);
	snprintf(val, sizeof val, "v%d", k);
	T_CHECK(raft_kv_encode_put(key, strlen(key), val, strlen(val), &type, &buf, &len, err, sizeof err) == 0);
	uint64_t index, term;
	int rc = raft_propose(c.r[i], c.now, type, buf, len, &index, &term, err, sizeof err);
	free(buf);
	if (rc == 0 && c.nw < WMAX) {
		c.w = realloc(c.w, (c.nw + 1) * sizeof *c.w);
		c.w[c.nw++] = (write_rec){ index, term, k, false };
	}
	drain(i);
	return rc;
}

RC_STATIC void heal(void)
{
	memset(c.cut, 0, sizeof c.cut);
	c.loss = 0;
	for (int i = 0; i < c.n; i++) {
		c.paused_until[i] = 0;
		c.stall_until[i] = 0;
		if (!c.r[i]) restart(i);
	}
}

/* After heal: waits for a leader, commits one more write, lets every node
 * apply it, then checks every acknowledged write is everywhere and the maps
 * are byte for byte the same. */
RC_STATIC void converge_and_check(void)
{
	int l = -1;
	/* a write of the current leader, acknowledged (a leader that loses
	 * its lease right after the proposal loses the write: try again) */
	for (int tries = 0; tries < 100; tries++) {
		l = wait_leader(60000);
		CHECK(l >= 0);
		if (propose(l) != 0) { run_until(c.now + 50); continue; }
		for (int k = 0; k < 50 && !c.w[c.nw - 1].acked; k++) run_until(c.now + 100);
		if (c.w[c.nw - 1].acked) break;
	}
	CHECK(c.w[c.nw - 1].acked);
	l = wait_leader(60000);
	CHECK(l >= 0);
	uint64_t target = c.w[c.nw - 1].index;
	for (int rounds = 0; rounds < 600; rounds++) {
		bool all = true;
		for (int i = 0; i < c.n; i++)
			if (raft_voters_has(raft_get_voters(c.r[l]), c.names[i]) && c.applied[i] < target) all = false;
		if (all) break;
		run_until(c.now + 100);
	}
	uint8_t *ref = NULL;
	size_t reflen = 0;
	for (int i = 0; i < c.n; i++) {
		if (!raft_voters_has(raft_get_voters(c.r[l]), c.names[i])) continue;
		if (c.applied[i] < target) {
			for (int j = 0; j < c.n; j++)
				if (c.r[j]) printf("  %s role %s term %llu commit %llu last %llu snap %llu applied %llu\n", c.names[j],
				       raft_role_str(raft_get_role(c.r[j])), (unsigned long long)raft_term(c.r[j]),
				       (unsigned long long)raft_commit_index(c.r[j]), (unsigned long long)raft_last_index(c.r[j]),
				       (unsigned long long)raft_snapshot_index(c.r[j]), (unsigned long long)c.applied[j]);
		}
		CHECK(c.applied[i] >= target);
		for (size_t k = 0; k < c.nw; k++) {
			if (!c.w[k].acked) continue;
			char key[32], val[32];
			const uint8_t *v;
			size_t vl;
			snprintf(key, sizeof key, "k%d", c.w[k].key);
			snprintf(val, sizeof val, "v%d", c.w[k].key);
			if (raft_kv_get(c.kv[i], key, strlen(key), &v, &vl) != 0 || vl != strlen(val) || memcmp(v, val, vl))
				T_FAIL("acknowledged write %s lost on %s (seed %llu)", key, c.names[i],
				       (unsigned long long)c.seed);
		}
		uint8_t *s;
		size_t sl;
		T_CHECK(raft_kv_serialize(c.kv[i], &s, &sl) == 0);
		if (!ref) { ref = s; reflen = sl; continue; }
		CHECK(sl == reflen && !memcmp(s, ref, sl));
		free(s);
	}
	free(ref);
}

RC_STATIC size_t acked_count(void)
{
	size_t n = 0;
	for (size_t k = 0; k < c.nw; k++) n += c.w[k].acked;
	return n;
}

#endif
