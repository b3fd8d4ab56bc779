/* tests/unit/raft_test: raft/ on a deterministic in-process cluster.
 *
 * The harness keeps a fake clock (ms) and a fake network: a heap of packets
 * ordered by arrival time, with a latency drawn per packet (so packets
 * reorder), loss, cut links (partitions), pauses (a paused node neither
 * ticks nor reads; its packets wait, as with SIGSTOP) and crash-restarts
 * (raft_destroy, then raft_new on the same storage).  Each node applies
 * what raft commits to a raft_kv and snapshots when raft asks.
 *
 * Checked after every step of every test:
 *  - at most one leader per term;
 *  - at most one node whose lease holds (raft_leader_ok) at any instant;
 *  - every node applies the same entry (term) at each index.
 * Writes are acknowledged when committed; at the end of the randomized
 * tests every acknowledged write must be on every node.  A failing seed is
 * printed; TEST_SEED=... replays the run. */
#include "tests/t.h"

#include <dirent.h>
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

static struct {
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
} c;

static struct { uint64_t acked, proposed, elections, snaps, truncs, restarts, handovers, abandoned, chunks; } chaos_tot;

static void chaos_report(const char *what)
{
	printf("  %s: %llu writes acknowledged of %llu proposed, %llu restarts, %llu elections, "
	       "%llu snapshots installed (%llu chunks sent), %llu log truncations, %llu handovers (%llu abandoned); "
	       "none lost\n", what,
	       (unsigned long long)chaos_tot.acked, (unsigned long long)chaos_tot.proposed,
	       (unsigned long long)chaos_tot.restarts, (unsigned long long)chaos_tot.elections,
	       (unsigned long long)chaos_tot.snaps, (unsigned long long)chaos_tot.chunks,
	       (unsigned long long)chaos_tot.truncs,
	       (unsigned long long)chaos_tot.handovers, (unsigned long long)chaos_tot.abandoned);
}

static void fail_seed(const char *what, int line)
{
	T_FAIL("line %d: %s (cluster seed %llu, now %llu ms)", line, what, (unsigned long long)c.seed,
	       (unsigned long long)c.now);
}
#define CHECK(cond) do { if (!(cond)) fail_seed(#cond, __LINE__); } while (0)

static int idx_of(const char *name)
{
	for (int i = 0; i < c.n; i++)
		if (!strcmp(c.names[i], name)) return i;
	return -1;
}

static bool paused(int i) { return c.paused_until[i] > c.now; }

static void start_node(int i)
{
	char err[256] = "";
	raft_self self = { c.names[i], sk_mix64(c.seed * 131 + (uint64_t)i * 7 + c.restarts[i] * 1000003) };
	c.r[i] = raft_new(&c.cfg, &self, c.st[i], c.now, err, sizeof err);
	if (!c.r[i]) T_FAIL("raft_new %s: %s", c.names[i], err);
	raft_kv_destroy(&c.kv[i]);
	c.kv[i] = raft_kv_new();
	c.applied[i] = 0;
	c.up[i] = true;
}

static void cluster_init(int n, uint64_t seed, const char *profile)
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

static void cluster_start(int nvoters)
{
	const char *names[NMAX];
	raft_voters v;
	char err[256];
	for (int i = 0; i < nvoters; i++) names[i] = c.names[i];
	T_CHECK(raft_voters_make(&v, names, (size_t)nvoters, err, sizeof err) == 0);
	for (int i = 0; i < c.n; i++) {
		start_node(i);
		if (i < nvoters && raft_bootstrap(c.r[i], c.now, &v, err, sizeof err) != 0)
			T_FAIL("bootstrap: %s", err);
	}
}

static void crash(int i)
{
	raft_destroy(&c.r[i]);
	c.up[i] = false;
}

static void restart(int i)
{
	c.restarts[i]++;
	if (c.file_storage) {
		char err[256];
		raft_file_storage_free(&c.st[i]);
		c.st[i] = raft_file_storage_new(c.dirs[i], false, err, sizeof err);
		if (!c.st[i]) T_FAIL("file storage: %s", err);
	}
	start_node(i);
}

static void cluster_free(void)
{
	for (int i = 0; i < c.n; i++) {
		raft_destroy(&c.r[i]);
		raft_kv_destroy(&c.kv[i]);
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

static void grow_u64(uint64_t **a, size_t *cap, size_t need)
{
	if (need < *cap) return;
	size_t nc = *cap ? *cap : 1024;
	while (nc <= need) nc *= 2;
	*a = realloc(*a, nc * sizeof **a);
	memset(*a + *cap, 0, (nc - *cap) * sizeof **a);
	*cap = nc;
}

static void on_apply(int i, const raft_apply *a)
{
	char err[256];
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
		if (c.w[k].index == a->index && c.w[k].term == a->term) c.w[k].acked = true;
	if (raft_snapshot_wanted(c.r[i])) {
		uint8_t *buf;
		size_t len;
		T_CHECK(raft_kv_serialize(c.kv[i], &buf, &len) == 0);
		if (raft_snapshot_take(c.r[i], c.now, a->index, buf, len, err, sizeof err) != 0)
			T_FAIL("snapshot on %s: %s", c.names[i], err);
		free(buf);
	}
}

static void drain(int i)
{
	raft_out o;
	raft_apply a;
	raft_event ev;
	if (!c.r[i]) return;
	while (raft_pop_out(c.r[i], &o)) {
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
		if (ev.type == RAFT_EV_LEADER) {
			c.leader_at[i] = c.now;
			c.commit_at_lead[i] = raft_commit_index(c.r[i]);
		}
		CHECK(ev.type != RAFT_EV_FAILED);
	}
	while (raft_pop_apply(c.r[i], &a)) on_apply(i, &a);
	/* the commit rule: a leader's commit moves only to an entry of its
	 * own term (Figure 8 of the Raft paper) */
	uint64_t ci = raft_commit_index(c.r[i]);
	if (raft_is_leader(c.r[i]) && ci > c.commit_at_lead[i] && c.applied[i] == ci)
		CHECK(c.last_applied_term[i] == raft_term(c.r[i]));
}

static void check_invariants(void)
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
	}
	CHECK(ok <= 1);
}

static uint64_t node_deadline(int i)
{
	if (!c.r[i]) return UINT64_MAX;
	uint64_t d = raft_next_deadline(c.r[i]);
	return d < c.paused_until[i] ? c.paused_until[i] : d;
}

static void run_until(uint64_t until)
{
	uint64_t stuck = 0, last = c.now;
	for (;;) {
		uint64_t t = UINT64_MAX;
		int who = -1;
		for (int i = 0; i < c.n; i++) {
			uint64_t d = node_deadline(i);
			if (d < t) { t = d; who = i; }
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
		} else {
			raft_tick(c.r[who], c.now);
			drain(who);
		}
		check_invariants();
	}
}

static int leader(void)
{
	int l = -1;
	for (int i = 0; i < c.n; i++)
		if (c.r[i] && !paused(i) && raft_leader_ok(c.r[i], c.now)) l = i;
	return l;
}

/* Runs until a leader with a lease exists (or the time limit). */
static int wait_leader(uint64_t limit_ms)
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
static int propose(int i)
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

static void heal(void)
{
	memset(c.cut, 0, sizeof c.cut);
	c.loss = 0;
	for (int i = 0; i < c.n; i++) {
		c.paused_until[i] = 0;
		if (!c.r[i]) restart(i);
	}
}

/* After heal: waits for a leader, commits one more write, lets every node
 * apply it, then checks every acknowledged write is everywhere and the maps
 * are byte for byte the same. */
static void converge_and_check(void)
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

static size_t acked_count(void)
{
	size_t n = 0;
	for (size_t k = 0; k < c.nw; k++) n += c.w[k].acked;
	return n;
}

/* ---------------------------------------------------------------- election */

static void elect_n(int n)
{
	for (uint64_t s = 0; s < 20; s++) {
		cluster_init(n, t_seed() + s, "default");
		cluster_start(n);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		uint64_t term = raft_term(c.r[l]);
		run_until(c.now + 10000);
		/* a stable leader: same node, same term, everyone follows it */
		CHECK(leader() == l && raft_term(c.r[l]) == term);
		for (int i = 0; i < n; i++) {
			CHECK(raft_term(c.r[i]) == term);
			CHECK(raft_leader(c.r[i]) && !strcmp(raft_leader(c.r[i]), c.names[l]));
		}
		CHECK(raft_commit_index(c.r[l]) >= 2);
		cluster_free();
	}
}

T_TEST(raft_elect_3) { elect_n(3); }
T_TEST(raft_elect_5) { elect_n(5); }

T_TEST(raft_single_voter)
{
	cluster_init(1, t_seed(), "default");
	cluster_start(1);
	int l = wait_leader(5000);
	CHECK(l == 0);
	for (int i = 0; i < 10; i++) CHECK(propose(0) == 0);
	run_until(c.now + 10);
	CHECK(acked_count() == 10);
	cluster_free();
}

/* Slow links (latency close to the timeout spread) make candidates collide;
 * every seed must still end with one leader, and some must have split. */
T_TEST(raft_split_votes_resolve)
{
	uint64_t splits = 0;
	for (uint64_t s = 0; s < 60; s++) {
		cluster_init(4, t_seed() * 7 + s, "default");
		c.lat_min = 100;
		c.lat_max = 400;
		cluster_start(4);
		int l = wait_leader(60000);
		CHECK(l >= 0);
		uint64_t el = 0;
		for (int i = 0; i < 4; i++) el += raft_get_stats(c.r[i])->elections;
		if (el > 1) splits++;
		cluster_free();
	}
	printf("  split elections in %llu of 60 seeds\n", (unsigned long long)splits);
	T_CHECK(splits > 0);
}

/* ---------------------------------------------------------------- lease */

T_TEST(raft_partitioned_leader_steps_down)
{
	for (uint64_t s = 0; s < 10; s++) {
		cluster_init(5, t_seed() + 100 + s, "default");
		cluster_start(5);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		for (int i = 0; i < 20; i++) propose(l);
		run_until(c.now + 500);
		/* the leader and one follower on one side, three on the other */
		int buddy = (l + 1) % 5;
		for (int i = 0; i < 5; i++)
			for (int j = 0; j < 5; j++) {
				bool a = i == l || i == buddy, b = j == l || j == buddy;
				if (a != b) c.cut[i][j] = true;
			}
		uint64_t cut_at = c.now;
		uint64_t old_term = raft_term(c.r[l]);
		int nl = -1;
		for (int k = 0; k < 400 && nl < 0; k++) {
			run_until(c.now + 10);
			for (int i = 0; i < 5; i++)
				if (i != l && i != buddy && raft_is_leader(c.r[i])) nl = i;
			if (raft_is_leader(c.r[l])) propose(l);   /* never acknowledged */
		}
		CHECK(nl >= 0);
		CHECK(!raft_is_leader(c.r[l]));
		/* it stepped down within its lease (plus one heartbeat round),
		 * and before the majority's new leader took over */
		CHECK(c.stepdown_at[l] > cut_at);
		CHECK(c.stepdown_at[l] <= cut_at + c.cfg.leader_lease_ms + c.cfg.heartbeat_interval_ms + 10);
		CHECK(c.stepdown_at[l] < c.leader_at[nl]);
		CHECK(raft_term(c.r[nl]) > old_term);
		for (int i = 0; i < 10; i++) propose(nl);
		run_until(c.now + 3000);
		heal();
		run_until(c.now + 3000);
		int one = 0;
		for (int i = 0; i < 5; i++) one += raft_is_leader(c.r[i]);
		CHECK(one == 1);
		converge_and_check();
		cluster_free();
	}
}

/* ---------------------------------------------------------------- pre-vote */

T_TEST(raft_paused_or_cut_voter_does_not_disrupt)
{
	for (uint64_t s = 0; s < 10; s++) {
		cluster_init(3, t_seed() + 200 + s, "default");
		cluster_start(3);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		uint64_t term = raft_term(c.r[l]);
		int f = (l + 1) % 3;
		/* paused for 5 election timeouts, then resumed with its backlog */
		c.paused_until[f] = c.now + 5000;
		for (int i = 0; i < 20; i++) { propose(l); run_until(c.now + 100); }
		run_until(c.now + 5000);
		CHECK(leader() == l && raft_term(c.r[l]) == term);
		/* cut off for 10 s: it keeps asking for pre-votes, no term grows */
		for (int i = 0; i < 3; i++) c.cut[f][i] = c.cut[i][f] = true;
		run_until(c.now + 10000);
		CHECK(raft_get_stats(c.r[f])->prevotes > 0);
		CHECK(raft_term(c.r[f]) == term);
		heal();
		run_until(c.now + 3000);
		CHECK(leader() == l && raft_term(c.r[l]) == term);
		CHECK(raft_term(c.r[f]) == term);
		converge_and_check();
		cluster_free();
	}
}

/* A follower cut off from the leader alone (it still reaches the others)
 * in a quiet cluster: its log is as good as anyone's, so only leader
 * stickiness keeps the others from electing it.  The leader stays. */
T_TEST(raft_partial_partition_does_not_disrupt)
{
	for (uint64_t s = 0; s < 10; s++) {
		cluster_init(s % 2 ? 5 : 3, t_seed() + 250 + s, "default");
		cluster_start(c.n);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		run_until(c.now + 2000);
		uint64_t term = raft_term(c.r[l]);
		int f = (l + 1) % c.n;
		c.cut[l][f] = c.cut[f][l] = true;
		run_until(c.now + 20000);
		CHECK(leader() == l && raft_term(c.r[l]) == term);
		CHECK(raft_get_stats(c.r[f])->prevotes > 0);
		uint64_t refused = 0;
		for (int i = 0; i < c.n; i++) refused += raft_get_stats(c.r[i])->votes_refused_sticky;
		CHECK(refused > 0);
		heal();
		converge_and_check();
		cluster_free();
	}
}

/* ---------------------------------------------------------------- replication */

T_TEST(raft_loss_and_reordering)
{
	for (uint64_t s = 0; s < 5; s++) {
		cluster_init(5, t_seed() + 300 + s, "default");
		c.loss = 0.2;
		c.lat_min = 1;
		c.lat_max = 60;
		cluster_start(5);
		int l = wait_leader(60000);
		CHECK(l >= 0);
		for (int i = 0; i < 200; i++) {
			l = leader();
			if (l >= 0) propose(l);
			run_until(c.now + 20);
		}
		run_until(c.now + 5000);
		CHECK(acked_count() > 100);
		heal();
		converge_and_check();
		cluster_free();
	}
}

T_TEST(raft_restart_mid_write)
{
	for (uint64_t s = 0; s < 20; s++) {
		cluster_init(3, t_seed() + 400 + s, "default");
		cluster_start(3);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		for (int i = 0; i < 5; i++) propose(l);
		/* crash the leader a few ms into the replication, or a follower */
		run_until(c.now + sk_rng_below(&c.rng, 4));
		int victim = s % 2 ? l : (l + 1) % 3;
		crash(victim);
		run_until(c.now + 3000);
		restart(victim);
		run_until(c.now + 3000);
		converge_and_check();
		cluster_free();
	}
}

/* ---------------------------------------------------------------- randomized */

static void chaos_run(uint64_t seed, int n, uint64_t ms, bool file)
{
	cluster_init(n, seed, "default");
	if (file) {
		c.file_storage = true;
		for (int i = 0; i < n; i++) {
			char err[256];
			const char *base = getenv("TMPDIR");
			snprintf(c.dirs[i], sizeof c.dirs[i], "%s/raft_test.XXXXXX", base && *base ? base : "/tmp");
			if (!mkdtemp(c.dirs[i])) T_FAIL("mkdtemp");
			raft_mem_storage_free(&c.st[i]);
			c.st[i] = raft_file_storage_new(c.dirs[i], false, err, sizeof err);
			if (!c.st[i]) T_FAIL("file storage: %s", err);
		}
	}
	c.cfg.snapshot_threshold = 64;
	c.cfg.snapshot_trailing = 16;
	/* snapshots (a few KB here) in many chunks: lost, repeated, reordered
	 * and interrupted by crashes and new snapshots */
	c.cfg.snapshot_chunk_bytes = 64 + (uint32_t)(seed % 7) * 100;
	/* one entry per message makes "an old entry on a majority before
	 * the new leader's no-op" frequent: the commit rule's case */
	if (seed % 3 == 0) c.cfg.max_append_entries = 1;
	c.lat_min = 1;
	c.lat_max = 30;
	cluster_start(n);
	uint64_t end = c.now + ms;
	while (c.now < end) {
		uint64_t r = sk_rng_below(&c.rng, 100);
		int x = (int)sk_rng_below(&c.rng, (uint64_t)n);
		if (r < 4 && c.r[x]) crash(x);
		else if (r < 10 && !c.r[x]) restart(x);
		else if (r < 13) c.paused_until[x] = c.now + 200 + sk_rng_below(&c.rng, 3000);
		else if (r < 16) {
			/* a random partition in two */
			uint32_t side = (uint32_t)sk_rng_below(&c.rng, 1u << n);
			for (int i = 0; i < n; i++)
				for (int j = 0; j < n; j++) c.cut[i][j] = ((side >> i) & 1) != ((side >> j) & 1);
		} else if (r < 22) memset(c.cut, 0, sizeof c.cut);
		else if (r < 25) c.loss = sk_rng_unit(&c.rng) * 0.3;
		else if (r < 30) {
			/* one link cut both ways: a partial partition */
			int y = (int)sk_rng_below(&c.rng, (uint64_t)n);
			c.cut[x][y] = c.cut[y][x] = x != y;
		} else if (r < 34) {
			/* a handover, to a named voter or the best one, whatever
			 * the links and pauses say (the invariants must hold) */
			for (int i = 0; i < n; i++)
				if (c.r[i] && !paused(i) && raft_is_leader(c.r[i])) {
					char err[256];
					raft_transfer(c.r[i], c.now, r < 32 ? c.names[x] : NULL, NULL, 0, err, sizeof err);
					drain(i);
				}
		}
		/* some rounds are quiet: with no writes, every log is as up to
		 * date as the leader's, and only stickiness protects it */
		bool quiet = sk_rng_below(&c.rng, 4) == 0;
		for (int k = 0; k < 10; k++) {
			for (int i = 0; i < n && !quiet; i++)
				if (c.r[i] && !paused(i) && raft_is_leader(c.r[i])) propose(i);
			run_until(c.now + 50);
		}
	}
	heal();
	converge_and_check();
	for (int i = 0; i < n; i++) {
		const raft_stats *st = raft_get_stats(c.r[i]);
		c.tot_elections += st->elections;
		c.tot_snap += st->snapshots_installed;
		c.tot_trunc += st->truncations;
		chaos_tot.handovers += st->transfers;
		chaos_tot.chunks += st->snapshot_chunks_sent;
		chaos_tot.abandoned += st->transfers_failed;
	}
	chaos_tot.acked += acked_count();
	chaos_tot.proposed += c.nw;
	chaos_tot.elections += c.tot_elections;
	chaos_tot.snaps += c.tot_snap;
	chaos_tot.truncs += c.tot_trunc;
	for (int i = 0; i < n; i++) chaos_tot.restarts += c.restarts[i];
	if (file)
		for (int i = 0; i < n; i++) {
			char cmd[400];
			snprintf(cmd, sizeof cmd, "rm -rf '%s'", c.dirs[i]);
			if (system(cmd) != 0) T_FAIL("rm");
		}
	cluster_free();
}

T_TEST_TIMEOUT(raft_randomized_no_lost_writes, 120)
{
	const char *e = getenv("RAFT_CHAOS_SEEDS");
	uint64_t nseeds = e && *e ? strtoull(e, NULL, 0) : 120;
	const char *f = getenv("RAFT_CHAOS_FROM");
	for (uint64_t s = f && *f ? strtoull(f, NULL, 0) : 0; s < nseeds; s++)
		chaos_run(t_seed() * 1000 + s, s % 2 ? 5 : 3, 30000, false);
	chaos_report("memory storage");
}

T_TEST(raft_randomized_file_storage)
{
	for (uint64_t s = 0; s < 6; s++) chaos_run(t_seed() * 977 + s, 3, 20000, true);
	chaos_report("file storage");
}

/* ---------------------------------------------------------------- catch-up */

T_TEST(raft_restarted_voter_catches_up_from_log)
{
	cluster_init(3, t_seed() + 500, "default");
	cluster_start(3);
	int l = wait_leader(20000);
	int f = (l + 1) % 3;
	crash(f);
	for (int i = 0; i < 50; i++) { propose(l); run_until(c.now + 10); }
	restart(f);
	run_until(c.now + 3000);
	CHECK(raft_get_stats(c.r[f])->snapshots_installed == 0);
	CHECK(c.applied[f] == raft_commit_index(c.r[l]));
	converge_and_check();
	cluster_free();
}

T_TEST(raft_restarted_voter_catches_up_from_snapshot)
{
	cluster_init(3, t_seed() + 600, "default");
	c.cfg.snapshot_threshold = 20;
	c.cfg.snapshot_trailing = 5;
	cluster_start(3);
	int l = wait_leader(20000);
	int f = (l + 1) % 3;
	crash(f);
	for (int i = 0; i < 200; i++) { propose(l); run_until(c.now + 5); }
	run_until(c.now + 100);
	CHECK(raft_snapshot_index(c.r[l]) > 100);
	restart(f);
	run_until(c.now + 3000);
	CHECK(raft_get_stats(c.r[f])->snapshots_installed >= 1);
	CHECK(c.applied[f] == raft_commit_index(c.r[l]));
	/* and restarting it again recovers from its own snapshot */
	crash(f);
	restart(f);
	run_until(c.now + 3000);
	/* a voter whose storage was lost (a replaced disk or volume) comes back
	 * empty: the leader, whose log starts past entry 1, sends the snapshot
	 * (it used to read a compacted entry and crash) */
	crash(f);
	raft_mem_storage_free(&c.st[f]);
	c.st[f] = raft_mem_storage_new();
	for (int i = 0; i < 20; i++) { propose(l); run_until(c.now + 5); }
	restart(f);
	run_until(c.now + 3000);
	CHECK(c.applied[f] == raft_commit_index(c.r[l]));
	converge_and_check();
	cluster_free();
}

/* A voter whose storage was lost comes back empty with a log the leader has
 * not compacted: the leader notices it lacks acknowledged entries and sends
 * them again (it used to resend the same entries forever). */
T_TEST(raft_voter_with_lost_storage_catches_up)
{
	cluster_init(3, t_seed() + 650, "default"); /* snapshots far away */
	cluster_start(3);
	int l = wait_leader(20000);
	CHECK(l >= 0);
	for (int i = 0; i < 50; i++) { propose(l); run_until(c.now + 5); }
	run_until(c.now + 200);
	int f = (l + 1) % 3;
	CHECK(c.applied[f] == raft_commit_index(c.r[l]));
	crash(f);
	raft_mem_storage_free(&c.st[f]);
	c.st[f] = raft_mem_storage_new();
	restart(f);
	run_until(c.now + 2000);
	CHECK(raft_get_stats(c.r[l])->peer_log_lost >= 1);
	CHECK(c.applied[f] == raft_commit_index(c.r[l]));
	converge_and_check();
	cluster_free();
}

/* A snapshot of about 1.2 MB travels in 64 KiB chunks over lossy links to a
 * follower that was away: it installs it whole and its map matches. */
T_TEST(raft_snapshot_in_chunks)
{
	cluster_init(3, t_seed() + 660, "default");
	c.cfg.snapshot_threshold = 50;
	c.cfg.snapshot_trailing = 5;
	c.cfg.snapshot_chunk_bytes = 64 << 10;
	cluster_start(3);
	int l = wait_leader(20000);
	CHECK(l >= 0);
	int f = (l + 1) % 3;
	crash(f);
	static char val[4096];
	memset(val, 'x', sizeof val - 1);
	char err[256];
	for (int i = 0; i < 300; i++) {
		char key[32];
		snprintf(key, sizeof key, "big%d", i);
		uint8_t *buf, type;
		size_t len;
		uint64_t ix, tm;
		T_CHECK(raft_kv_encode_put(key, strlen(key), val, sizeof val - 1, &type, &buf, &len, err, sizeof err) == 0);
		CHECK(raft_propose(c.r[l], c.now, type, buf, len, &ix, &tm, err, sizeof err) == 0);
		free(buf);
		drain(l);
		run_until(c.now + 3);
	}
	run_until(c.now + 500);
	CHECK(raft_snapshot_index(c.r[l]) > 200);
	c.loss = 0.2;
	restart(f);
	run_until(c.now + 20000);
	c.loss = 0;
	const raft_stats *st = raft_get_stats(c.r[l]);
	printf("  %llu chunks sent for %llu snapshot transfers (64 KiB chunks, 20%% loss)\n",
	       (unsigned long long)st->snapshot_chunks_sent, (unsigned long long)st->snapshots_sent);
	CHECK(st->snapshot_chunks_sent >= 19); /* 1.2 MB / 64 KiB */
	CHECK(raft_get_stats(c.r[f])->snapshots_installed >= 1);
	converge_and_check();
	cluster_free();
}

/* ---------------------------------------------------------------- voters */

T_TEST(raft_voter_add_remove)
{
	char err[256];
	cluster_init(5, t_seed() + 700, "default");
	cluster_start(3);   /* n3 and n4 start empty: not voters */
	int l = wait_leader(20000);
	CHECK(l >= 0);
	for (int i = 0; i < 10; i++) propose(l);
	run_until(c.now + 200);
	CHECK(raft_voter_add(c.r[l], c.now, "n3", err, sizeof err) == 0);
	/* one change at a time */
	CHECK(raft_voter_add(c.r[l], c.now, "n4", err, sizeof err) != 0);
	drain(l);
	run_until(c.now + 1000);
	CHECK(raft_get_voters(c.r[l])->n == 4);
	CHECK(raft_voters_has(raft_get_voters(c.r[3]), "n3"));
	CHECK(raft_voter_add(c.r[l], c.now, "n4", err, sizeof err) == 0);
	drain(l);
	run_until(c.now + 1000);
	CHECK(raft_get_voters(c.r[l])->n == 5);
	CHECK(raft_voter_add(c.r[l], c.now, "n4", err, sizeof err) != 0);   /* already */
	/* remove a follower, then the leader itself */
	int f = l == 0 ? 1 : 0;
	CHECK(raft_voter_remove(c.r[l], c.now, c.names[f], err, sizeof err) == 0);
	drain(l);
	run_until(c.now + 1000);
	CHECK(raft_get_voters(c.r[l])->n == 4);
	CHECK(raft_voter_remove(c.r[l], c.now, c.names[l], err, sizeof err) == 0);
	drain(l);
	run_until(c.now + 5000);
	CHECK(!raft_is_leader(c.r[l]));
	int nl = wait_leader(20000);
	CHECK(nl >= 0 && nl != l && nl != f);
	CHECK(raft_get_voters(c.r[nl])->n == 3);
	crash(l);
	crash(f);
	for (int i = 0; i < 10; i++) propose(nl);
	run_until(c.now + 1000);
	/* the three voters left carry on without the two removed */
	c.up[l] = c.up[f] = true;
	converge_and_check();
	cluster_free();
}

/* A voter-to-be catches up as a non-voter first: one that cannot be reached
 * never enters the set (the majority needed stays 2 of 3) and is dropped
 * after 10 election timeouts; one far behind gets the snapshot, then joins. */
T_TEST(raft_voter_add_catches_up_first)
{
	char err[256];
	for (uint64_t s = 0; s < 6; s++) {
		cluster_init(5, t_seed() + 720 + s, "default");
		c.cfg.snapshot_threshold = 64;
		c.cfg.snapshot_trailing = 16;
		cluster_start(3); /* n3, n4: empty, not voters */
		int l = wait_leader(20000);
		CHECK(l >= 0);
		for (int i = 0; i < 300; i++) {
			propose(l);
			if (i % 20 == 0) run_until(c.now + 20);
		}
		run_until(c.now + 500);
		CHECK(raft_snapshot_index(c.r[l]) > 0); /* n3 will need the snapshot */
		/* n4 cut off from everyone: staged, never a voter, then dropped */
		for (int i = 0; i < 5; i++) c.cut[4][i] = c.cut[i][4] = true;
		uint64_t t0 = c.now;
		CHECK(raft_voter_add(c.r[l], c.now, "n4", err, sizeof err) == 0);
		drain(l);
		CHECK(raft_staging(c.r[l]) && !strcmp(raft_staging(c.r[l]), "n4"));
		CHECK(raft_voter_add(c.r[l], c.now, "n3", err, sizeof err) == -1 && strstr(err, "catching up n4"));
		run_until(c.now + 1000);
		CHECK(raft_get_voters(c.r[l])->n == 3);
		/* the old majority still commits while n4 is staged */
		size_t w = c.nw;
		CHECK(propose(l) == 0);
		run_until(c.now + 300);
		CHECK(c.w[w].acked);
		run_until(t0 + 10 * c.cfg.election_timeout_ms + 200);
		CHECK(raft_is_leader(c.r[l]));
		CHECK(raft_staging(c.r[l]) == NULL);
		CHECK(raft_get_voters(c.r[l])->n == 3 && !raft_voters_has(raft_get_voters(c.r[l]), "n4"));
		/* n3, reachable but far behind: snapshot, then the set with it */
		CHECK(raft_voter_add(c.r[l], c.now, "n3", err, sizeof err) == 0);
		drain(l);
		run_until(c.now + 2000);
		CHECK(raft_get_voters(c.r[l])->n == 4 && raft_voters_has(raft_get_voters(c.r[l]), "n3"));
		CHECK(raft_get_stats(c.r[3])->snapshots_installed >= 1);
		CHECK(raft_commit_index(c.r[3]) + c.cfg.max_append_entries >= raft_commit_index(c.r[l]));
		heal();
		converge_and_check();
		cluster_free();
	}
}

/* ---------------------------------------------------------------- failover timing */

static void failover_times(int n)
{
	uint64_t t[20];
	cluster_init(n, t_seed() + 800 + (uint64_t)n, "fast");
	c.lat_min = 0;
	c.lat_max = 1;
	cluster_start(n);
	for (int k = 0; k < 20; k++) {
		int l = wait_leader(10000);
		CHECK(l >= 0);
		run_until(c.now + 500);
		l = leader();
		CHECK(l >= 0);
		crash(l);
		uint64_t t0 = c.now;
		size_t w0 = c.nw;
		for (;;) {
			run_until(c.now + 5);
			int nl = leader();
			if (nl >= 0 && c.nw == w0) propose(nl);
			if (c.nw > w0 && c.w[c.nw - 1].acked) break;
			CHECK(c.now - t0 < 10000);
		}
		t[k] = c.now - t0;
		restart(l);
	}
	for (int i = 0; i < 20; i++)
		for (int j = i + 1; j < 20; j++)
			if (t[j] < t[i]) { uint64_t x = t[i]; t[i] = t[j]; t[j] = x; }
	printf("  fast profile, %d voters: kill -> new head commits: median %llu ms, max %llu ms (fake clock)\n",
	       n, (unsigned long long)t[10], (unsigned long long)t[19]);
	CHECK(t[10] <= 1500 && t[19] <= 3000);
	converge_and_check();
	cluster_free();
}

T_TEST(raft_failover_fast_profile) { failover_times(3); failover_times(5); }

/* ---------------------------------------------------------------- handover */

/* The leader hands over to a named voter (or the best one): the old leader
 * steps down before the new one is elected, far faster than a failover; no
 * acknowledged write is lost; writes are refused while the target catches
 * up, and a lagging target is caught up first. */
T_TEST(raft_transfer_hands_over)
{
	uint64_t worst = 0, sum = 0, runs = 0;
	for (uint64_t s = 0; s < 20; s++) {
		int n = s % 2 ? 5 : 3;
		cluster_init(n, t_seed() + 900 + s, "default");
		cluster_start(n);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		for (int i = 0; i < 10; i++) propose(l);
		run_until(c.now + 200);
		int target = (l + 1 + (int)(s % (uint64_t)(n - 1))) % n;
		if (s % 4 == 2) {
			/* the target misses writes: the leader must catch it up first */
			c.paused_until[target] = c.now + 300;
			for (int i = 0; i < 10; i++) propose(l);
			run_until(c.now + 100);
		}
		uint64_t term = raft_term(c.r[l]), t0 = c.now;
		char err[256], to[RAFT_NAME_MAX + 1] = "";
		bool named = s % 3 != 0;
		CHECK(raft_transfer(c.r[l], c.now, named ? c.names[target] : NULL, to, sizeof to, err, sizeof err) == 0);
		if (!named) target = idx_of(to);
		CHECK(target >= 0 && target != l);
		drain(l);
		if (raft_is_leader(c.r[l])) {
			/* still catching the target up: writes wait */
			uint8_t *buf, type;
			size_t len;
			uint64_t ix, tm;
			T_CHECK(raft_kv_encode_put("x", 1, "y", 1, &type, &buf, &len, err, sizeof err) == 0);
			CHECK(raft_propose(c.r[l], c.now, type, buf, len, &ix, &tm, err, sizeof err) == -1);
			CHECK(strstr(err, "handing leadership over") != NULL);
			free(buf);
		}
		int nl = -1;
		while (nl < 0 && c.now < t0 + 5000) {
			run_until(c.now + 1);
			if (raft_is_leader(c.r[target])) nl = target;
		}
		CHECK(nl == target);
		CHECK(raft_term(c.r[nl]) == term + 1);
		CHECK(c.stepdown_at[l] >= t0 && c.stepdown_at[l] < c.leader_at[nl]);
		uint64_t took = c.leader_at[nl] - t0;
		if (took > worst) worst = took;
		sum += took;
		runs++;
		CHECK(raft_get_stats(c.r[l])->transfers == 1);
		for (int i = 0; i < 5; i++) propose(nl);
		run_until(c.now + 2000);
		CHECK(leader() == nl);
		converge_and_check();
		cluster_free();
	}
	printf("  handover -> new leader: mean %llu ms, max %llu ms (links 1-5 ms; a failover waits >= 1000)\n",
	       (unsigned long long)(sum / runs), (unsigned long long)worst);
	CHECK(worst < 400);
}

/* A target that cannot be reached is given up after the election timeout:
 * the leader never stepped down and takes writes again.  Bad requests fail. */
T_TEST(raft_transfer_abandoned_and_refused)
{
	cluster_init(3, t_seed() + 950, "default");
	cluster_start(3);
	int l = wait_leader(20000);
	CHECK(l >= 0);
	propose(l);
	run_until(c.now + 200);
	int t = (l + 1) % 3, o = (l + 2) % 3;
	char err[256];
	/* errors */
	CHECK(raft_transfer(c.r[t], c.now, NULL, NULL, 0, err, sizeof err) == -1 && strstr(err, "not the leader"));
	CHECK(raft_transfer(c.r[l], c.now, c.names[l], NULL, 0, err, sizeof err) == -1 && strstr(err, "leader already"));
	CHECK(raft_transfer(c.r[l], c.now, "nosuch", NULL, 0, err, sizeof err) == -1 && strstr(err, "not a voter"));
	/* the target cut off from everyone; a write it has not seen */
	for (int i = 0; i < 3; i++) c.cut[t][i] = c.cut[i][t] = i != t;
	propose(l);
	run_until(c.now + 50);
	uint64_t term = raft_term(c.r[l]), t0 = c.now;
	CHECK(raft_transfer(c.r[l], c.now, c.names[t], NULL, 0, err, sizeof err) == 0);
	CHECK(raft_transfer(c.r[l], c.now, c.names[o], NULL, 0, err, sizeof err) == -1 && strstr(err, "under way"));
	drain(l);
	run_until(c.now + c.cfg.election_timeout_ms + 50);
	CHECK(raft_is_leader(c.r[l]) && raft_term(c.r[l]) == term);
	CHECK(c.transfer_abandoned[l] == 1);
	CHECK(raft_transfer_target(c.r[l]) == NULL);
	CHECK(c.stepdown_at[l] < t0);
	size_t w = c.nw;
	CHECK(propose(l) == 0);
	run_until(c.now + 200);
	CHECK(c.w[w].acked);
	/* a target that acknowledged every entry and then died (an idle
	 * cluster): its old match is not enough, the leader waits for an
	 * answer, gets none, and stays */
	heal();
	run_until(c.now + 500);
	crash(o);
	term = raft_term(c.r[l]);
	CHECK(raft_transfer(c.r[l], c.now, c.names[o], NULL, 0, err, sizeof err) == 0);
	drain(l);
	run_until(c.now + c.cfg.election_timeout_ms + 50);
	CHECK(raft_is_leader(c.r[l]) && raft_term(c.r[l]) == term);
	CHECK(c.transfer_abandoned[l] == 2);
	restart(o);
	/* a single voter has nobody to hand over to */
	heal();
	converge_and_check();
	cluster_free();
	cluster_init(1, t_seed() + 951, "default");
	cluster_start(1);
	CHECK(wait_leader(5000) == 0);
	CHECK(raft_transfer(c.r[0], c.now, NULL, NULL, 0, err, sizeof err) == -1 && strstr(err, "no other voter"));
	cluster_free();
}

/* ---------------------------------------------------------------- file storage */

static void mk_tmp(char *d, size_t cap)
{
	const char *base = getenv("TMPDIR");
	snprintf(d, cap, "%s/raft_test.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(d)) T_FAIL("mkdtemp %s", d);
}

static void rm_tmp(const char *d)
{
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	if (system(cmd) != 0) T_FAIL("rm");
}

static void fill_entries(raft_entry *e, uint8_t (*bufs)[64], uint64_t first, size_t n, uint64_t term)
{
	for (size_t i = 0; i < n; i++) {
		for (int k = 0; k < 64; k++) bufs[i][k] = (uint8_t)(first + i + k);
		e[i] = (raft_entry){ first + i, term, RAFT_ENTRY_USER, bufs[i], (first + i) % 64 };
	}
}

T_TEST(raft_file_storage_roundtrip)
{
	char d[256], err[256], path[400];
	mk_tmp(d, sizeof d);
	raft_storage *s = raft_file_storage_new(d, true, err, sizeof err);
	T_CHECK(s);
	raft_loaded l;
	T_CHECK(s->load(s->ctx, &l, err, sizeof err) == 0);
	T_EQ(l.term, 0);
	T_EQ(l.nentries, 0);
	raft__loaded_free(&l);
	T_CHECK(s->save_hard(s->ctx, 7, "n2", err, sizeof err) == 0);
	raft_entry e[100];
	uint8_t bufs[100][64];
	fill_entries(e, bufs, 1, 100, 3);
	T_CHECK(s->append(s->ctx, e, 60, err, sizeof err) == 0);
	T_CHECK(s->append(s->ctx, e + 60, 40, err, sizeof err) == 0);
	T_CHECK(s->truncate(s->ctx, 91, err, sizeof err) == 0);
	raft_snap_meta m = { 50, 3, { 0 } };
	const char *names[] = { "n0", "n1", "n2" };
	T_CHECK(raft_voters_make(&m.voters, names, 3, err, sizeof err) == 0);
	T_CHECK(s->save_snapshot(s->ctx, &m, (const uint8_t *)"state", 5, 40, err, sizeof err) == 0);
	raft_file_storage_free(&s);

	s = raft_file_storage_new(d, true, err, sizeof err);
	T_CHECK(s->load(s->ctx, &l, err, sizeof err) == 0);
	T_EQ(l.term, 7);
	T_STREQ(l.vote, "n2");
	T_EQ(l.snap.index, 50);
	T_EQ(l.snap.voters.n, 3);
	T_EQ(l.snap_len, 5);
	T_CHECK(!memcmp(l.snap_data, "state", 5));
	T_EQ(l.nentries, 50);                 /* 41..90 */
	T_EQ(l.entries[0].index, 41);
	for (size_t i = 0; i < l.nentries; i++) {
		T_EQ(l.entries[i].len, e[40 + i].len);
		T_CHECK(!memcmp(l.entries[i].data, e[40 + i].data, e[40 + i].len));
	}
	raft__loaded_free(&l);
	/* appends continue after the reload */
	T_CHECK(s->append(s->ctx, e + 90, 10, err, sizeof err) == 0);
	raft_file_storage_free(&s);

	/* a torn tail: cut the file anywhere inside the last record */
	snprintf(path, sizeof path, "%s/raft.log", d);
	struct stat sb;
	T_CHECK(stat(path, &sb) == 0);
	for (int cut = 1; cut < 16 + 17 + 36; cut += 5) {
		char d2[256];
		mk_tmp(d2, sizeof d2);
		char cmd[1000];
		snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/ && truncate -s %lld '%s/raft.log'", d, d2,
			 (long long)sb.st_size - cut, d2);
		T_CHECK(system(cmd) == 0);
		s = raft_file_storage_new(d2, true, err, sizeof err);
		T_CHECK(s->load(s->ctx, &l, err, sizeof err) == 0);
		T_EQ(l.nentries, 59);         /* 41..99: the last one dropped */
		raft__loaded_free(&l);
		T_CHECK(s->append(s->ctx, e + 99, 1, err, sizeof err) == 0);
		raft_file_storage_free(&s);
		s = raft_file_storage_new(d2, true, err, sizeof err);
		T_CHECK(s->load(s->ctx, &l, err, sizeof err) == 0);
		T_EQ(l.nentries, 60);
		raft__loaded_free(&l);
		raft_file_storage_free(&s);
		rm_tmp(d2);
	}
	/* zeros after the last record (a torn append that only grew the file) */
	{
		int fd = open(path, O_WRONLY | O_APPEND);
		uint8_t z[100] = { 0 };
		T_CHECK(write(fd, z, sizeof z) == (ssize_t)sizeof z);
		close(fd);
		s = raft_file_storage_new(d, true, err, sizeof err);
		T_CHECK(s->load(s->ctx, &l, err, sizeof err) == 0);
		T_EQ(l.nentries, 60);
		raft__loaded_free(&l);
		raft_file_storage_free(&s);
	}
	/* damage in the middle is an error, not a silent loss */
	{
		int fd = open(path, O_RDWR);
		uint8_t b;
		T_CHECK(pread(fd, &b, 1, 8 + 16 + 20) == 1);
		b ^= 0x40;
		T_CHECK(pwrite(fd, &b, 1, 8 + 16 + 20) == 1);
		close(fd);
		s = raft_file_storage_new(d, true, err, sizeof err);
		T_CHECK(s->load(s->ctx, &l, err, sizeof err) != 0);
		T_CHECK(strstr(err, "corrupt") != NULL);
		raft_file_storage_free(&s);
	}
	/* a damaged hard state or snapshot is an error too */
	snprintf(path, sizeof path, "%s/raft.hard", d);
	{
		int fd = open(path, O_RDWR);
		T_CHECK(pwrite(fd, "X", 1, 9) == 1);
		close(fd);
		s = raft_file_storage_new(d, true, err, sizeof err);
		T_CHECK(s->load(s->ctx, &l, err, sizeof err) != 0);
		T_CHECK(strstr(err, "raft.hard") != NULL);
		raft_file_storage_free(&s);
	}
	rm_tmp(d);
}

/* A cluster on file storage: crash-restart a voter mid-run and check it
 * rejoins from its files. */
T_TEST(raft_file_storage_cluster_restart)
{
	cluster_init(3, t_seed() + 900, "default");
	c.file_storage = true;
	for (int i = 0; i < 3; i++) {
		char err[256];
		mk_tmp(c.dirs[i], sizeof c.dirs[i]);
		raft_mem_storage_free(&c.st[i]);
		c.st[i] = raft_file_storage_new(c.dirs[i], false, err, sizeof err);
		T_CHECK(c.st[i]);
	}
	c.cfg.snapshot_threshold = 30;
	c.cfg.snapshot_trailing = 10;
	cluster_start(3);
	int l = wait_leader(20000);
	for (int i = 0; i < 100; i++) { propose(l); run_until(c.now + 5); }
	for (int i = 0; i < 3; i++) crash(i);
	for (int i = 0; i < 3; i++) restart(i);
	l = wait_leader(20000);
	CHECK(l >= 0);
	for (int i = 0; i < 20; i++) { propose(l); run_until(c.now + 5); }
	converge_and_check();
	CHECK(acked_count() >= 100);
	char dirs[3][256];
	memcpy(dirs, c.dirs, sizeof dirs);
	cluster_free();
	for (int i = 0; i < 3; i++) rm_tmp(dirs[i]);
}

/* ---------------------------------------------------------------- codec, fuzz */

T_TEST(raft_codec_roundtrip)
{
	raft_entry e[3] = { { 5, 2, 16, (const uint8_t *)"a", 1 }, { 6, 3, 0, NULL, 0 }, { 7, 3, 17, (const uint8_t *)"xyz", 3 } };
	raft_msg m = { .type = RAFT_MSG_APPEND_REQ, .term = 3, .from = "n1", .prev_index = 4, .prev_term = 2,
		       .commit = 4, .echo = 99, .entries = e, .nentries = 3 };
	uint8_t *buf;
	size_t len;
	T_CHECK(raft_codec_encode(&m, &buf, &len) == 0);
	raft_decoded d;
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_OK);
	T_EQ(d.msg.type, RAFT_MSG_APPEND_REQ);
	T_EQ(d.msg.nentries, 3);
	T_EQ(d.msg.entries[2].len, 3);
	T_EQ(d.msg.echo, 99);
	T_STREQ(d.msg.from, "n1");
	raft_codec_free(&d);
	/* entries out of order or newer than the message are refused */
	e[1].index = 9;
	uint8_t *b2;
	size_t l2;
	T_CHECK(raft_codec_encode(&m, &b2, &l2) == 0);
	T_EQ(raft_codec_decode(b2, l2, &d), WIRE_ERR_INVALID);
	free(b2);
	e[1].index = 6;
	m.term = 2;
	T_CHECK(raft_codec_encode(&m, &b2, &l2) == 0);
	T_EQ(raft_codec_decode(b2, l2, &d), WIRE_ERR_INVALID);
	free(b2);
	T_EQ(raft_codec_decode(buf, len - 1, &d), WIRE_ERR_SHORT);
	free(buf);
	raft_snap_meta sm = { 10, 2, { 0 } };
	const char *names[] = { "b", "a" };
	T_CHECK(raft_voters_make(&sm.voters, names, 2, NULL, 0) == 0);
	T_STREQ(sm.voters.names[0], "a");
	raft_msg sn = { .type = RAFT_MSG_SNAP_REQ, .term = 3, .from = "n1", .snap = &sm,
			.data = (const uint8_t *)"S", .len = 1, .offset = 4, .total = 5 };
	T_CHECK(raft_codec_encode(&sn, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_OK);
	T_EQ(d.msg.snap->voters.n, 2);
	T_EQ(d.msg.snap->index, 10);
	T_EQ(d.msg.offset, 4);
	T_EQ(d.msg.total, 5);
	raft_codec_free(&d);
	free(buf);
	/* a whole snapshot with no total (a sender from before chunks) */
	sn.offset = 0;
	sn.total = 0;
	T_CHECK(raft_codec_encode(&sn, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_OK);
	T_EQ(d.msg.total, 1);
	raft_codec_free(&d);
	free(buf);
	sn.total = 5;
	/* a chunk past the snapshot's end, or an empty one before it, is refused */
	sn.offset = 5;
	T_CHECK(raft_codec_encode(&sn, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_ERR_INVALID);
	free(buf);
	sn.offset = 2;
	sn.len = 0;
	T_CHECK(raft_codec_encode(&sn, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_ERR_INVALID);
	free(buf);
	/* TimeoutNow, and a transfer-flagged vote request (never a pre-vote) */
	raft_msg tn = { .type = RAFT_MSG_TIMEOUT_NOW, .term = 4, .from = "n2" };
	T_CHECK(raft_codec_encode(&tn, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_OK);
	T_EQ(d.msg.type, RAFT_MSG_TIMEOUT_NOW);
	T_EQ(d.msg.term, 4);
	raft_codec_free(&d);
	free(buf);
	raft_msg vr = { .type = RAFT_MSG_VOTE_REQ, .term = 5, .from = "n2", .transfer = true, .last_index = 3,
			.last_term = 4 };
	T_CHECK(raft_codec_encode(&vr, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_OK);
	T_CHECK(d.msg.transfer && !d.msg.prevote);
	raft_codec_free(&d);
	free(buf);
	vr.prevote = true;
	T_CHECK(raft_codec_encode(&vr, &buf, &len) == 0);
	T_EQ(raft_codec_decode(buf, len, &d), WIRE_ERR_INVALID);
	free(buf);
}

T_TEST(raft_fuzz_decoder_and_node)
{
	sk_rng rng;
	sk_rng_seed(&rng, t_seed());
	/* a node with a log, to feed garbage and mutated messages to */
	cluster_init(3, t_seed() + 1000, "default");
	cluster_start(3);
	int l = wait_leader(20000);
	for (int i = 0; i < 10; i++) propose(l);
	run_until(c.now + 200);
	/* real messages, captured */
	uint8_t *samples[64];
	size_t slen[64], ns = 0;
	raft_entry e[2] = { { 1, 1, 1, (const uint8_t *)"\x01\x02n0", 4 }, { 2, 2, 16, (const uint8_t *)"\0\0\0\0", 4 } };
	raft_snap_meta sm = { 10, 2, { 0 } };
	const char *names[] = { "n0", "n1", "n2" };
	raft_voters_make(&sm.voters, names, 3, NULL, 0);
	raft_msg ms[] = {
		{ .type = RAFT_MSG_VOTE_REQ, .term = 9, .from = "n1", .prevote = true, .last_index = 30, .last_term = 9 },
		{ .type = RAFT_MSG_VOTE_RESP, .term = 9, .from = "n1", .granted = true },
		{ .type = RAFT_MSG_APPEND_REQ, .term = 9, .from = "n2", .prev_index = 0, .entries = e, .nentries = 2, .commit = 2 },
		{ .type = RAFT_MSG_APPEND_RESP, .term = 9, .from = "n2", .success = true, .last_index = 5 },
		{ .type = RAFT_MSG_SNAP_REQ, .term = 9, .from = "n1", .snap = &sm, .data = (const uint8_t *)"SKKV", .len = 4,
		  .total = 4 },
		{ .type = RAFT_MSG_SNAP_RESP, .term = 9, .from = "n1", .success = true, .last_index = 10 },
	};
	for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
		T_CHECK(raft_codec_encode(&ms[i], &samples[ns], &slen[ns]) == 0);
		ns++;
	}
	uint64_t ok = 0;
	for (int it = 0; it < 200000; it++) {
		uint8_t buf[512];
		size_t len;
		if (it % 4 == 0) {
			len = sk_rng_below(&rng, sizeof buf);
			for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)sk_rng_next(&rng);
			if (len >= 8 && it % 8 == 0) {   /* a valid frame header around garbage */
				buf[0] = 0x53; buf[1] = 0x4b; buf[2] = 1; buf[3] = 0;
				uint32_t pl = (uint32_t)(len - 8);
				buf[4] = (uint8_t)(pl >> 24); buf[5] = (uint8_t)(pl >> 16); buf[6] = (uint8_t)(pl >> 8); buf[7] = (uint8_t)pl;
			}
		} else {
			size_t k = sk_rng_below(&rng, ns);
			len = slen[k];
			memcpy(buf, samples[k], len);
			int flips = 1 + (int)sk_rng_below(&rng, 4);
			for (int f = 0; f < flips; f++) buf[8 + sk_rng_below(&rng, len - 8)] ^= (uint8_t)(1u << sk_rng_below(&rng, 8));
		}
		raft_decoded d;
		if (raft_codec_decode(buf, len, &d) == WIRE_OK) { ok++; raft_codec_free(&d); }
		if (it % 16 == 0) {
			int x = (int)sk_rng_below(&rng, 3);
			if (c.r[x]) {
				raft_recv(c.r[x], c.now, buf, len);
				/* swallow what it sends back; keep applies consistent */
				raft_out o;
				while (raft_pop_out(c.r[x], &o)) free(o.data);
				raft_apply a;
				while (raft_pop_apply(c.r[x], &a)) {
					if (a.kind == RAFT_APPLY_SNAPSHOT) {
						char err[128];
						raft_kv_restore(c.kv[x], a.data, a.len, err, sizeof err);
					} else {
						raft_kv_apply(c.kv[x], a.type, a.data, a.len);
					}
				}
				raft_event ev;
				while (raft_pop_event(c.r[x], &ev)) T_CHECK(ev.type != RAFT_EV_FAILED);
			}
		}
	}
	printf("  %llu of 200000 fuzz inputs decoded as valid\n", (unsigned long long)ok);
	for (size_t i = 0; i < ns; i++) free(samples[i]);
	uint64_t drops = 0;
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 12; k++) drops += raft_get_stats(c.r[i])->drop[k];
	T_CHECK(drops > 0);
	cluster_free();
}

/* ---------------------------------------------------------------- kv, fencing, config */

T_TEST(raft_kv_map)
{
	char err[256];
	raft_kv *kv = raft_kv_new();
	uint8_t *b, type;
	size_t len;
	for (int i = 0; i < 1000; i++) {
		char k[16], v[16];
		snprintf(k, sizeof k, "key%d", i);
		snprintf(v, sizeof v, "val%d", i * 3);
		T_CHECK(raft_kv_encode_put(k, strlen(k), v, strlen(v), &type, &b, &len, err, sizeof err) == 0);
		T_EQ(raft_kv_apply(kv, type, b, len), 0);
		free(b);
	}
	for (int i = 0; i < 1000; i += 2) {
		char k[16];
		snprintf(k, sizeof k, "key%d", i);
		T_CHECK(raft_kv_encode_del(k, strlen(k), &type, &b, &len, err, sizeof err) == 0);
		T_EQ(raft_kv_apply(kv, type, b, len), 0);
		free(b);
	}
	T_EQ(raft_kv_count(kv), 500);
	const uint8_t *v;
	size_t vl;
	T_CHECK(raft_kv_get(kv, "key7", 4, &v, &vl) == 0 && vl == 5 && !memcmp(v, "val21", 5));
	T_CHECK(raft_kv_get(kv, "key8", 4, &v, &vl) != 0);
	raft_kv_item *items;
	size_t n = raft_kv_list(kv, &items);
	T_EQ(n, 500);
	for (size_t i = 1; i < n; i++) T_CHECK(memcmp(items[i - 1].key, items[i].key, 4) <= 0);
	free(items);
	T_CHECK(raft_kv_serialize(kv, &b, &len) == 0);
	raft_kv *kv2 = raft_kv_new();
	T_CHECK(raft_kv_restore(kv2, b, len, err, sizeof err) == 0);
	T_EQ(raft_kv_count(kv2), 500);
	T_CHECK(raft_kv_restore(kv2, b, len - 1, err, sizeof err) != 0);
	T_EQ(raft_kv_count(kv2), 500);   /* unchanged on error */
	b[20] ^= 0xff;
	raft_kv_restore(kv2, b, len, err, sizeof err);   /* must not crash */
	free(b);
	/* limits */
	static uint8_t big[RAFT_KV_VALUE_MAX + 1];
	T_CHECK(raft_kv_encode_put("k", 1, big, sizeof big, &type, &b, &len, err, sizeof err) != 0);
	T_CHECK(raft_kv_encode_put("", 0, "v", 1, &type, &b, &len, err, sizeof err) != 0);
	T_EQ(raft_kv_apply(kv, RAFT_KV_PUT, (const uint8_t *)"\xff\xff\0\0x", 5), -1);
	T_EQ(raft_kv_refused(kv), 1);
	T_EQ(raft_kv_apply(kv, 40, (const uint8_t *)"x", 1), 1);
	raft_kv_destroy(&kv);
	raft_kv_destroy(&kv2);
	raft_kv_destroy(&kv2);
}

T_TEST(raft_fence_and_config)
{
	raft_fence f = { 0 };
	T_EQ(raft_fence_check(&f, 3), 0);
	T_EQ(raft_fence_check(&f, 3), 0);
	T_EQ(raft_fence_check(&f, 2), -1);
	T_EQ(raft_fence_check(&f, 5), 0);
	T_EQ(f.newest, 5);
	raft_config cfg;
	char err[256];
	T_EQ(raft_config_profile(&cfg, "default"), 0);
	T_EQ(raft_config_check(&cfg, err, sizeof err), 0);
	T_EQ(cfg.heartbeat_timeout_ms, 1000);
	T_EQ(cfg.leader_lease_ms, 500);
	T_EQ(raft_config_profile(&cfg, "fast"), 0);
	T_EQ(raft_config_check(&cfg, err, sizeof err), 0);
	T_CHECK(raft_config_profile(&cfg, "nope") != 0);
	cfg.leader_lease_ms = cfg.heartbeat_timeout_ms;
	T_CHECK(raft_config_check(&cfg, err, sizeof err) != 0);
	/* a bootstrapped node refuses a second bootstrap */
	raft_storage *s = raft_mem_storage_new();
	raft_self self = { "a", 1 };
	raft_config_profile(&cfg, "default");
	raft_t *r = raft_new(&cfg, &self, s, 0, err, sizeof err);
	raft_voters v;
	const char *names[] = { "a", "b", "c" };
	raft_voters_make(&v, names, 3, err, sizeof err);
	T_EQ(raft_bootstrap(r, 0, &v, err, sizeof err), 0);
	T_CHECK(raft_bootstrap(r, 0, &v, err, sizeof err) != 0);
	T_CHECK(!raft_is_leader(r));
	uint64_t idx, term;
	T_CHECK(raft_propose(r, 0, RAFT_KV_PUT, (const uint8_t *)"x", 1, &idx, &term, err, sizeof err) != 0);
	raft_destroy(&r);
	raft_destroy(&r);
	raft_mem_storage_free(&s);
}

/* One node fed by hand: a vote survives a restart (persisted before the
 * reply), so a second candidate of the same term is refused. */
static int vote_of(raft_t *r, uint64_t now, uint64_t term, const char *from)
{
	raft_msg m = { .type = RAFT_MSG_VOTE_REQ, .term = term, .from = from, .last_index = 1, .last_term = 1 };
	uint8_t *buf;
	size_t len;
	T_CHECK(raft_codec_encode(&m, &buf, &len) == 0);
	raft_recv(r, now, buf, len);
	free(buf);
	raft_out o;
	int granted = -1;
	while (raft_pop_out(r, &o)) {
		raft_decoded d;
		if (raft_codec_decode(o.data, o.len, &d) == WIRE_OK && d.msg.type == RAFT_MSG_VOTE_RESP)
			granted = d.msg.granted;
		raft_codec_free(&d);
		free(o.data);
	}
	return granted;
}

T_TEST(raft_vote_survives_restart)
{
	char err[256];
	raft_config cfg;
	raft_config_profile(&cfg, "default");
	raft_storage *s = raft_mem_storage_new();
	raft_self self = { "a", t_seed() };
	raft_t *r = raft_new(&cfg, &self, s, 0, err, sizeof err);
	raft_voters v;
	const char *names[] = { "a", "b", "c" };
	raft_voters_make(&v, names, 3, err, sizeof err);
	T_EQ(raft_bootstrap(r, 0, &v, err, sizeof err), 0);
	/* sticky for a heartbeat timeout after the start */
	T_EQ(vote_of(r, 500, 5, "b"), 0);
	T_EQ(raft_term(r), 1);
	T_EQ(vote_of(r, 5000, 5, "b"), 1);
	T_EQ(vote_of(r, 5001, 5, "b"), 0);   /* sticky again: it just voted */
	raft_destroy(&r);
	r = raft_new(&cfg, &self, s, 10000, err, sizeof err);
	T_EQ(raft_term(r), 5);
	T_EQ(vote_of(r, 20000, 5, "c"), 0);  /* voted for b in term 5 */
	T_EQ(vote_of(r, 20001, 6, "c"), 1);  /* a newer term is fine */
	raft_destroy(&r);
	raft_mem_storage_free(&s);
}
