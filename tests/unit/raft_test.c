/* tests/unit/raft_test: raft/ on a deterministic in-process cluster
 * (tests/unit/raft_cluster.h): elections, the lease, pre-vote, replication,
 * randomized runs with crashes, pauses, partitions, loss and handovers (on
 * synchronous storage, and on asynchronous storage whose durability lags),
 * a slow disk that must not cost the lease, linearizable reads on a new
 * leader, a lease across a suspend, a power loss after a crash between write
 * and sync,
 * catch-up from the log and from snapshots, failover timing, file storage,
 * the codec and the state machine.  Voter changes and handovers on purpose:
 * raft_change_test.c. */
#include "tests/unit/raft_cluster.h"

#include <errno.h>

#include "common/sk_time.h"

static struct {
	uint64_t acked, proposed, elections, snaps, truncs, restarts, handovers, abandoned, chunks;
	uint64_t held, syncing, undurable_lost;
	uint64_t torn, power, cut_bytes;
	uint64_t changes, outside;
} chaos_tot;

static void chaos_report(const char *what)
{
	if (chaos_tot.held)
		printf("  %s: %llu answers waited for the disk, %llu 'syncing' answers, %llu storage calls lost "
		       "in crashes before they were durable\n", what, (unsigned long long)chaos_tot.held,
		       (unsigned long long)chaos_tot.syncing, (unsigned long long)chaos_tot.undurable_lost);
	printf("  %s: %llu writes acknowledged of %llu proposed, %llu restarts, %llu elections, "
	       "%llu snapshots installed (%llu chunks sent), %llu log truncations, %llu handovers (%llu abandoned); "
	       "none lost\n", what,
	       (unsigned long long)chaos_tot.acked, (unsigned long long)chaos_tot.proposed,
	       (unsigned long long)chaos_tot.restarts, (unsigned long long)chaos_tot.elections,
	       (unsigned long long)chaos_tot.snaps, (unsigned long long)chaos_tot.chunks,
	       (unsigned long long)chaos_tot.truncs,
	       (unsigned long long)chaos_tot.handovers, (unsigned long long)chaos_tot.abandoned);
	memset(&chaos_tot, 0, sizeof chaos_tot);
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
		uint64_t lapsed_at = 0;
		for (int k = 0; k < 4000 && nl < 0; k++) {
			run_until(c.now + 1);
			if (!lapsed_at && !raft_leader_ok(c.r[l], c.now)) lapsed_at = c.now;
			for (int i = 0; i < 5; i++)
				if (i != l && i != buddy && raft_is_leader(c.r[i])) nl = i;
			if (raft_is_leader(c.r[l])) propose(l);   /* never acknowledged */
		}
		for (int k = 0; k < 100 && raft_is_leader(c.r[l]); k++) run_until(c.now + 10);
		CHECK(nl >= 0);
		CHECK(!raft_is_leader(c.r[l]));
		/* it stopped acting within its lease (plus one heartbeat round),
		 * before the majority's new leader took over, and stepped down
		 * within a heartbeat timeout */
		CHECK(lapsed_at > cut_at);
		CHECK(lapsed_at <= cut_at + c.cfg.leader_lease_ms + c.cfg.heartbeat_interval_ms + 10);
		CHECK(lapsed_at < c.leader_at[nl]);
		CHECK(c.stepdown_at[l] > cut_at);
		CHECK(c.stepdown_at[l] <= cut_at + c.cfg.heartbeat_timeout_ms + c.cfg.heartbeat_interval_ms + 10);
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

/* lag: 0 = synchronous storage, else asynchronous storage durable up to
 * lag ms late (raft_cluster.h), crashes losing what was not yet durable */
static bool chaos_changes;   /* chaos_run_pl: random voter changes too */

static void chaos_run_pl(uint64_t seed, int n, uint64_t ms, bool file, uint32_t lag, bool power)
{
	cluster_init_lagging(n, seed, "default", lag);
	if (file) {
		c.file_storage = true;
		c.power_loss = power;
		for (int i = 0; i < n; i++) {
			char err[256];
			const char *base = getenv("TMPDIR");
			snprintf(c.dirs[i], sizeof c.dirs[i], "%s/raft_test.XXXXXX", base && *base ? base : "/tmp");
			if (!mkdtemp(c.dirs[i])) T_FAIL("mkdtemp");
			raft_mem_storage_free(&c.st[i]);
			c.st[i] = raft_file_storage_new(c.dirs[i], power, err, sizeof err);
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
	cluster_start(chaos_changes ? 3 : n);
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
		if (chaos_changes && sk_rng_below(&c.rng, 3) == 0) {
			/* a voter change by the leader, whatever the links say:
			 * voters cut off during it keep a stale set, and must
			 * still hear a candidate of the newer one */
			for (int i = 0; i < n; i++)
				if (c.r[i] && !paused(i) && raft_is_leader(c.r[i])) {
					char err[256];
					const raft_voters *v = raft_get_voters(c.r[i]);
					bool has = raft_voters_has(v, c.names[x]);
					if ((!has || v->n > 2) &&
					    (has ? raft_voter_remove(c.r[i], c.now, c.names[x], err, sizeof err)
						 : raft_voter_add(c.r[i], c.now, c.names[x], err, sizeof err)) == 0)
						chaos_tot.changes++;
					drain(i);
				}
		}
		/* some rounds are quiet: with no writes, every log is as up to
		 * date as the leader's, and only stickiness protects it */
		bool quiet = sk_rng_below(&c.rng, 4) == 0;
		for (int k = 0; k < 10; k++) {
			for (int i = 0; i < n && !quiet; i++)
				if (c.r[i] && !paused(i) && raft_is_leader(c.r[i])) propose(i);
			/* lagging storage: crashes in the middle of the writes, and
			 * soon after an election, lose what was not yet durable */
			uint64_t y = sk_rng_below(&c.rng, 100);
			int z = (int)sk_rng_below(&c.rng, (uint64_t)n);
			if (lag && y < 2 && c.r[z]) crash(z);
			else if (lag && y < 10 && !c.r[z]) restart(z);
			run_until(c.now + (lag ? 10 + sk_rng_below(&c.rng, 80) : 50));
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
		chaos_tot.held += st->replies_held;
		chaos_tot.syncing += st->replies_syncing;
		chaos_tot.outside += st->votes_outside_set;
	}
	chaos_tot.undurable_lost += c.lost_writes;
	chaos_tot.acked += acked_count();
	chaos_tot.proposed += c.nw;
	chaos_tot.elections += c.tot_elections;
	chaos_tot.snaps += c.tot_snap;
	chaos_tot.truncs += c.tot_trunc;
	for (int i = 0; i < n; i++) chaos_tot.restarts += c.restarts[i];
	chaos_tot.torn += c.torn_writes;
	chaos_tot.power += c.power_losses;
	chaos_tot.cut_bytes += c.power_cut_bytes;
	if (file)
		for (int i = 0; i < n; i++) {
			char cmd[400];
			snprintf(cmd, sizeof cmd, "rm -rf '%s'", c.dirs[i]);
			if (system(cmd) != 0) T_FAIL("rm");
		}
	cluster_free();
}

static void chaos_run(uint64_t seed, int n, uint64_t ms, bool file, uint32_t lag)
{
	chaos_run_pl(seed, n, ms, file, lag, false);
}

T_TEST_TIMEOUT(raft_randomized_no_lost_writes, 120)
{
	const char *e = getenv("RAFT_CHAOS_SEEDS");
	uint64_t nseeds = e && *e ? strtoull(e, NULL, 0) : 120;
	const char *f = getenv("RAFT_CHAOS_FROM");
	for (uint64_t s = f && *f ? strtoull(f, NULL, 0) : 0; s < nseeds; s++)
		chaos_run(t_seed() * 1000 + s, s % 2 ? 5 : 3, 30000, false, 0);
	chaos_report("memory storage");
}

/* The same chaos on asynchronous storage: every write durable 0-3 ms late,
 * one in ten up to 400 ms (beyond the lease), crashes losing what was not
 * yet durable.  Nothing acknowledged may be lost, no two leaders in a term,
 * every map the same: the proof that raft sends, counts and applies only
 * what is durable. */
T_TEST_TIMEOUT(raft_randomized_async_storage, 120)
{
	const char *e = getenv("RAFT_CHAOS_SEEDS");
	uint64_t nseeds = e && *e ? strtoull(e, NULL, 0) : 120;
	const char *f = getenv("RAFT_CHAOS_FROM");
	for (uint64_t s = f && *f ? strtoull(f, NULL, 0) : 0; s < nseeds; s++)
		chaos_run(t_seed() * 1000 + 500000 + s, s % 2 ? 5 : 3, 30000, false, 400);
	chaos_report("async storage");
}

T_TEST(raft_randomized_file_storage)
{
	/* half of them through lagging asynchronous storage */
	for (uint64_t s = 0; s < 6; s++) chaos_run(t_seed() * 977 + s, 3, 20000, true, s % 2 ? 100 : 0);
	chaos_report("file storage");
}

/* Voter changes among chaos (partitions, crashes, pauses, loss): a voter
 * cut off during a change keeps a stale set and hears candidates outside
 * it; one leader per term, linearizable reads and no lost write must hold
 * (the harness checks them after every step). */
T_TEST_TIMEOUT(raft_randomized_voter_changes, 120)
{
	chaos_changes = true;
	memset(&chaos_tot, 0, sizeof chaos_tot);
	for (uint64_t s = 0; s < 200; s++) chaos_run(t_seed() * 104729 + s, 5, 30000, false, s % 2 ? 200 : 0);
	chaos_changes = false;
	printf("  %llu voter changes started, %llu vote requests heard from outside a voter's set\n",
	       (unsigned long long)chaos_tot.changes, (unsigned long long)chaos_tot.outside);
	CHECK(chaos_tot.changes > 0 && chaos_tot.outside > 0);
	chaos_report("voter changes");
}

/* Power losses on file storage through the seam (raft_cluster.h): crashes
 * between an append's write and its fdatasync leave records in the page
 * cache; half the crashes also lose power (the log cut to its last synced
 * offset).  After every restart the loaded log must be on disk (raft
 * acknowledges it), and no acknowledged write is lost at the end. */
T_TEST_TIMEOUT(raft_randomized_power_loss, 120)
{
	raft_file_io io = { pl_sync, NULL };
	raft_file_set_io(&io);
	memset(&chaos_tot, 0, sizeof chaos_tot);
	for (uint64_t s = 0; s < 40; s++) {
		pl_n = 0;
		chaos_run_pl(t_seed() * 7919 + s, 3, 20000, true, 20 + (uint32_t)(s % 4) * 60, true);
	}
	raft_file_set_io(NULL);
	printf("  %llu crashes between write and sync, %llu power losses (%llu unsynced bytes dropped)\n",
	       (unsigned long long)chaos_tot.torn, (unsigned long long)chaos_tot.power,
	       (unsigned long long)chaos_tot.cut_bytes);
	CHECK(chaos_tot.torn > 0 && chaos_tot.power > 0);
	chaos_report("file storage, power losses");
}

/* The followers' disks stall (a disk hog) while the leader writes: the
 * leader keeps its term and lease ('syncing' answers carry the contact
 * without promising entries), nothing commits before a majority has it on
 * disk, the leader does not resend on every answer, and all commits once
 * the disks catch up.  Then the leader's own disk stalls: the followers'
 * disks commit without it, but it applies (answers) only what its disk has. */
T_TEST(raft_slow_disk_keeps_lease)
{
	cluster_init_lagging(3, t_seed() + 900, "fast", 5);
	cluster_start(3);
	int l = wait_leader(10000);
	CHECK(l >= 0);
	run_until(c.now + 500);
	uint64_t term = raft_term(c.r[l]), ci = raft_commit_index(c.r[l]);
	uint64_t sent0 = raft_get_stats(c.r[l])->msgs_sent, stall_end = c.now + 2500;
	for (int i = 0; i < 3; i++)
		if (i != l) c.stall_until[i] = stall_end;
	for (int k = 0; k < 20; k++) {
		propose(l);
		run_until(c.now + 50);
	}
	run_until(stall_end - 10);
	CHECK(leader() == l && raft_term(c.r[l]) == term);
	CHECK(raft_commit_index(c.r[l]) == ci);
	uint64_t sent = raft_get_stats(c.r[l])->msgs_sent - sent0, syncing = 0;
	for (int i = 0; i < 3; i++) syncing += raft_get_stats(c.r[i])->replies_syncing;
	printf("  followers' disks stalled 2.5 s: leader kept term %llu, sent %llu messages, "
	       "%llu 'syncing' answers\n", (unsigned long long)term, (unsigned long long)sent,
	       (unsigned long long)syncing);
	/* a heartbeat per interval to each of 2 followers (a leader that resent
	 * on every 'syncing' answer sent 1.7 times that) */
	uint64_t beats = 2 * 2500 / c.cfg.heartbeat_interval_ms;
	CHECK(syncing > 0 && sent < beats * 14 / 10);
	run_until(stall_end + 500);
	CHECK(leader() == l && raft_commit_index(c.r[l]) >= ci + 20);
	CHECK(c.w[c.nw - 1].acked);

	/* the leader's disk stalls: committed by the followers, not applied here */
	stall_end = c.now + 1500;
	c.stall_until[l] = stall_end;
	uint64_t applied = c.applied[l];
	ci = raft_commit_index(c.r[l]);
	for (int k = 0; k < 10; k++) {
		propose(l);
		run_until(c.now + 50);
	}
	CHECK(raft_commit_index(c.r[l]) >= ci + 10);
	CHECK(c.applied[l] == applied && raft_durable_index(c.r[l]) < raft_commit_index(c.r[l]));
	run_until(stall_end + 100);
	CHECK(leader() == l && c.applied[l] == raft_commit_index(c.r[l]));
	converge_and_check();
	cluster_free();
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

/* ---------------------------------------------------------------- reads */

/* Issue 23's stale read: x=v1 committed everywhere; x=v2 committed and
 * applied by the leader (acknowledged), which dies before its next
 * heartbeat tells the followers.  A follower wins; its lease holds from the
 * election, but it may serve reads (raft_read_ok) only once its no-op has
 * applied.  The harness checks after every step that a node that would
 * serve a read has every acknowledged write (a linearizable read). */
T_TEST(raft_new_leader_reads_not_stale)
{
	uint64_t served = 0, gated = 0;
	for (uint64_t s = 0; s < 40; s++) {
		cluster_init(3, t_seed() * 31 + 1500 + s, "fast");
		c.lat_min = 0;
		c.lat_max = (uint32_t)(1 + s % 3);
		cluster_start(3);
		for (int k = 0; k < 4; k++) {
			int l = wait_leader(10000);
			CHECK(l >= 0);
			propose(l);                           /* x = v1 */
			for (int t = 0; t < 200 && !c.w[c.nw - 1].acked; t++) run_until(c.now + 1);
			run_until(c.now + 100);               /* everywhere */
			l = leader();
			CHECK(l >= 0);
			if (propose(l) != 0) continue;        /* x = v2 */
			while (!c.w[c.nw - 1].acked) {
				CHECK(c.now < 10000000);
				run_until(c.now + 1);
			}
			crash(l);                             /* before its next heartbeat */
			uint64_t t0 = c.now;
			int nl;
			while ((nl = leader()) < 0 && c.now - t0 < 10000) run_until(c.now + 1);
			CHECK(nl >= 0);
			gated += !raft_read_ok(c.r[nl], c.now) && c.applied[nl] < c.acked_max;
			run_until(c.now + 200);
			served += raft_read_ok(c.r[nl], c.now);
			restart(l);
		}
		converge_and_check();
		cluster_free();
	}
	printf("  40 seeds x 4 failovers: %llu new leaders would have read stale state (gated), %llu served after their no-op\n",
	       (unsigned long long)gated, (unsigned long long)served);
	CHECK(gated > 0);   /* the schedule reaches the stale window */
	CHECK(served > 0);
}

/* A suspend through the clock seam.  The agent feeds raft sk_boot_ms
 * (agent_head.c); sk_time_sim_suspend moves that clock as a system suspend
 * does, and not sk_mono_ms.  The leader's host sleeps for a few seconds:
 * the others elect a successor meanwhile; on waking, the old leader's
 * clock is where it was plus what the seam moved, and its lease (and
 * reads) must be gone before it handles anything.  With a clock that stops
 * during the suspend it would wake a second head with a lease. */
T_TEST(raft_lease_survives_suspend)
{
	for (uint64_t s = 0; s < 30; s++) {
		cluster_init(3, t_seed() * 17 + 2500 + s, s % 2 ? "fast" : "default");
		cluster_start(3);
		int l = wait_leader(20000);
		CHECK(l >= 0);
		propose(l);
		run_until(c.now + 300);
		l = leader();
		CHECK(l >= 0 && raft_read_ok(c.r[l], c.now));
		uint64_t nap = 2 * c.cfg.heartbeat_timeout_ms + 1000 + s * 37, t0 = c.now;
		uint64_t before = sk_boot_ms();
		sk_time_sim_suspend(nap);
		uint64_t moved = sk_boot_ms() - before;   /* what the sleeper's clock saw */
		c.paused_until[l] = t0 + nap;             /* neither ticks nor reads meanwhile */
		run_until(t0 + nap - 1);
		int nl = leader();
		CHECK(nl >= 0 && nl != l);
		uint64_t woke = t0 + moved;               /* the sleeper's now on waking */
		if (raft_leader_ok(c.r[l], woke) || raft_read_ok(c.r[l], woke))
			fail_seed("a suspended head woke with its lease while another head holds one", __LINE__);
		c.paused_until[l] = 0;
		run_until(c.now + 1000);
		converge_and_check();
		cluster_free();
	}
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
static size_t loaded_count(const char *d)
{
	char err[256];
	raft_loaded l;
	raft_storage *s = raft_file_storage_new(d, true, err, sizeof err);
	T_CHECK(s);
	if (s->load(s->ctx, &l, err, sizeof err) != 0) T_FAIL("load: %s", err);
	size_t n = l.nentries;
	raft__loaded_free(&l);
	raft_file_storage_free(&s);
	return n;
}

/* A crash between an append's write and its fdatasync, a restart that
 * acknowledges what it loaded, a power loss, a restart: no acknowledged
 * entry is lost (file_load syncs what it loads).  Then a failed fdatasync:
 * the log is cut back to the last synced offset, so a restart never
 * loads the unsynced tail as durable.  Random sizes over many seeds. */
T_TEST(raft_file_power_loss_keeps_acked)
{
	raft_file_io io = { pl_sync, NULL };
	raft_file_set_io(&io);
	sk_rng rng;
	sk_rng_seed(&rng, t_seed());
	for (int s = 0; s < 30; s++) {
		char d[256], err[256];
		mk_tmp(d, sizeof d);
		pl_n = pl_fail = 0;
		size_t n1 = 1 + (size_t)sk_rng_below(&rng, 40), n2 = 1 + (size_t)sk_rng_below(&rng, 40);
		raft_entry e[100];
		uint8_t bufs[100][64];
		fill_entries(e, bufs, 1, 100, 3);
		raft_storage *st = raft_file_storage_new(d, true, err, sizeof err);
		raft_loaded l;
		T_CHECK(st && st->load(st->ctx, &l, err, sizeof err) == 0);
		raft__loaded_free(&l);
		T_CHECK(st->save_hard(st->ctx, 3, "", err, sizeof err) == 0);
		T_CHECK(st->append(st->ctx, e, n1, err, sizeof err) == 0 && st->sync(st->ctx, err, sizeof err) == 0);
		T_CHECK(st->append(st->ctx, e + n1, n2, err, sizeof err) == 0);
		raft_file_storage_free(&st);               /* crash before the sync */

		/* restart: the node acknowledges everything it loaded */
		raft_config cfg;
		raft_config_profile(&cfg, "default");
		raft_self self = { "a", t_seed() + (uint64_t)s };
		st = raft_file_storage_new(d, true, err, sizeof err);
		raft_t *r = raft_new(&cfg, &self, st, 0, err, sizeof err);
		if (!r) T_FAIL("raft_new: %s", err);
		raft_msg m = { .type = RAFT_MSG_APPEND_REQ, .term = 3, .from = "b", .prev_index = n1 + n2,
			       .prev_term = 3, .echo = 1 };
		uint8_t *buf;
		size_t len;
		T_CHECK(raft_codec_encode(&m, &buf, &len) == 0);
		raft_recv(r, 10, buf, len);
		free(buf);
		uint64_t acked = 0;
		raft_out o;
		while (raft_pop_out(r, &o)) {
			raft_decoded dm;
			if (raft_codec_decode(o.data, o.len, &dm) == WIRE_OK && dm.msg.type == RAFT_MSG_APPEND_RESP &&
			    dm.msg.success)
				acked = dm.msg.last_index;
			raft_codec_free(&dm);
			free(o.data);
		}
		raft_destroy(&r);
		raft_file_storage_free(&st);
		T_EQ(acked, n1 + n2);

		power_loss();
		size_t got = loaded_count(d);
		if (got < acked)
			T_FAIL("seed %d (TEST_SEED=%llu): %zu of %llu acknowledged entries after a power loss", s,
			       (unsigned long long)t_seed(), got, (unsigned long long)acked);

		/* a failed fdatasync: the tail it was for is cut, never loaded */
		st = raft_file_storage_new(d, true, err, sizeof err);
		T_CHECK(st->load(st->ctx, &l, err, sizeof err) == 0);
		raft__loaded_free(&l);
		size_t n3 = 1 + (size_t)sk_rng_below(&rng, 20);
		T_CHECK(st->append(st->ctx, e + n1 + n2, n3, err, sizeof err) == 0);
		pl_fail = 1;
		T_CHECK(st->sync(st->ctx, err, sizeof err) == -1 && strstr(err, "fdatasync"));
		raft_file_storage_free(&st);               /* the node stops */
		T_EQ(loaded_count(d), n1 + n2);
		power_loss();
		T_EQ(loaded_count(d), n1 + n2);
		/* a sync that fails at load: refused, not trusted */
		pl_fail = 1;
		st = raft_file_storage_new(d, true, err, sizeof err);
		T_CHECK(st->load(st->ctx, &l, err, sizeof err) == -1 && strstr(err, "fdatasync at load"));
		raft_file_storage_free(&st);
		rm_tmp(d);
	}
	raft_file_set_io(NULL);
}

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
	/* a 'syncing' answer (contact while the disk holds the real one) */
	raft_msg sy = { .type = RAFT_MSG_APPEND_RESP, .term = 3, .from = "n2", .success = true, .last_index = 4,
			.prev_index = 6, .echo = 98, .syncing = true };
	uint8_t *b1;
	size_t l1;
	T_CHECK(raft_codec_encode(&sy, &b1, &l1) == 0);
	T_EQ(raft_codec_decode(b1, l1, &d), WIRE_OK);
	T_CHECK(d.msg.syncing && d.msg.success && d.msg.last_index == 4 && d.msg.echo == 98);
	raft_codec_free(&d);
	free(b1);
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
		for (int k = 0; k < WIRE_ERR__COUNT; k++) drops += raft_get_stats(c.r[i])->drop[k];
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

/* A bootstrap cut short by a crash (its hard state durable, its entry not)
 * can be done again; a node that has voted or holds entries cannot. */
T_TEST(raft_bootstrap_again_after_half_loss)
{
	char err[256];
	raft_config cfg;
	raft_config_profile(&cfg, "default");
	raft_voters v;
	const char *names[] = { "a", "b", "c" };
	raft_voters_make(&v, names, 3, err, sizeof err);
	raft_self self = { "a", t_seed() };
	raft_storage *s = raft_mem_storage_new();
	T_EQ(s->save_hard(s->ctx, 1, "", err, sizeof err), 0);
	raft_t *r = raft_new(&cfg, &self, s, 0, err, sizeof err);
	T_EQ(raft_bootstrap(r, 0, &v, err, sizeof err), 0);
	T_EQ(raft_last_index(r), 1);
	T_CHECK(raft_bootstrap(r, 0, &v, err, sizeof err) != 0); /* now it has its entry */
	raft_destroy(&r);
	raft_mem_storage_free(&s);
	s = raft_mem_storage_new();
	T_EQ(s->save_hard(s->ctx, 1, "b", err, sizeof err), 0);
	r = raft_new(&cfg, &self, s, 0, err, sizeof err);
	T_CHECK(raft_bootstrap(r, 0, &v, err, sizeof err) != 0);  /* it voted: not a fresh node */
	raft_destroy(&r);
	raft_mem_storage_free(&s);
}
