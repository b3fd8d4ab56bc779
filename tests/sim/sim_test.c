/* tests/sim/sim_test: simulation tests of the membership protocol.
 *
 * Each test runs the real membership code on the simulator (tests/sim/sim.h)
 * and asserts numbers in simulated time, against bounds derived from the
 * protocol parameters (the helpers below say how).  The seed is t_seed():
 * a failure prints it and TEST_SEED=... replays the same run exactly.
 *
 * The bounds are worst cases built from the protocol's own timers, not
 * tuned to the measured figures; the benchmark (tests/sim/bench.sh) sets
 * the measured figures beside the models of docs/reference.md, Gossip. */
#include <math.h>

#include "tests/sim/sim.h"
#include "tests/t.h"

/* ---- bounds ---- */

/* Probe periods until some survivor has probed a victim, as a bound: each
 * of the N-1 survivors probes it with chance about 1/(N-1) per period, so
 * no one does with chance (1-1/(N-1))^(N-1) <= 1/e per period, and e^-12
 * (6e-6) after 12.  (SWIM's expectation is 1/(1-1/e) = 1.58 periods.) */
enum { FIRST_PROBE_PERIODS = 12 };

/* Bytes an alive message about "n<i>" with no metadata takes in a packet
 * (about 24 measured: name, address, generation, incarnation, tags). */
enum { ALIVE_MSG_BYTES = 32 };

static double log10_at_least_1(uint32_t n) { return n < 10 ? 1.0 : log10((double)n); }

/* Serf's convergence model (docs/reference.md, Gossip): after r gossip rounds the
 * expected number of nodes that have not heard is N - N/(1 + (N+1)e^(-c r)),
 * c = fanout (1 - loss) / 2; it drops below one half for
 * r = ln(2 N (N+1)) / c.  Returned in microseconds. */
static uint64_t dissemination_us(const mbr_config *c, uint32_t n, double loss)
{
	double cc = 0.5 * c->gossip_nodes * (1 - loss);
	double rounds = ceil(log(2.0 * n * (n + 1.0)) / cc);
	return (uint64_t)rounds * c->gossip_interval_ms * SIM_MS;
}

/* memberlist's push-pull interval: unscaled to 32 nodes, then
 * x (ceil(log2 N - 5) + 1). */
static uint64_t pushpull_us(const mbr_config *c, uint32_t n)
{
	double scale = n <= 32 ? 1 : ceil(log2((double)n) - 5) + 1;
	return (uint64_t)(c->pushpull_interval_ms * scale) * SIM_MS;
}

/* Serf's model is an expectation.  Every node sends an update at most
 * R = retransmit_mult x ceil(log10(N+1)) times, so now and then a node
 * misses it altogether (the final size of an epidemic with about R(1-loss)
 * contacts per informed node leaves a fraction near e^-R(1-loss) out, more
 * while a mass join saturates the packets).  The anti-entropy push-pull
 * repairs such a miss within one interval, so a bound on "everyone knows"
 * adds that interval (k successive messages: a suspicion reaching the
 * suspect, then its refutation reaching everyone, is k = 2). */
static uint64_t everyone_us(const mbr_config *c, uint32_t n, double loss, unsigned k)
{
	return k * dissemination_us(c, n, loss) + pushpull_us(c, n);
}

/* memberlist's suspicion timeout before any confirmation:
 * max_mult x mult x max(1, log10 N) x probe interval. */
static uint64_t suspicion_max_us(const mbr_config *c, uint32_t n)
{
	return (uint64_t)(c->suspicion_max_mult * c->suspicion_mult * log10_at_least_1(n) *
			  c->probe_interval_ms) * SIM_MS;
}

/* Kill until every survivor lists the victim failed: some survivor probes
 * it, that probe fails (within one period: timeout, indirect probes), the
 * suspicion spreads (one dissemination) and runs out at every node that
 * holds it (at most max, with no confirmation); the dead message only makes
 * it quicker.  No anti-entropy allowance: a node would have to miss both
 * the suspicion and the dead message. */
static uint64_t detect_bound_us(const mbr_config *c, uint32_t n, double loss)
{
	return (FIRST_PROBE_PERIODS + 1) * (uint64_t)c->probe_interval_ms * SIM_MS +
	       suspicion_max_us(c, n) + dissemination_us(c, n, loss);
}

/* Everyone through one seed: the last node starts at (N-1) x spread and
 * gets the seed's whole state in its push-pull reply; the others learn of
 * it by gossip.  A mass join saturates gossip (N alive messages, each sent
 * R times by every node, about UDP budget / ALIVE_MSG_BYTES of them per
 * packet, fanout packets a round), so besides the spreading we allow the
 * time to drain that backlog once.  That is when 99.9% of the (observer,
 * member) pairs are known (serf's model is for 99.9%); all of them within
 * one more push-pull interval (join_bound_us). */
static uint64_t join_gossip_bound_us(const sim_params *p)
{
	const mbr_config *c = &p->cfg;
	uint32_t n = p->nodes;
	double r = c->retransmit_mult * ceil(log10(n + 1.0));
	double drain_rounds = ceil(n * r * ALIVE_MSG_BYTES / ((double)c->udp_budget * c->gossip_nodes));
	return (uint64_t)(n - 1) * p->join_spread_us + dissemination_us(c, n, p->loss) +
	       (uint64_t)drain_rounds * c->gossip_interval_ms * SIM_MS;
}

static uint64_t join_bound_us(const sim_params *p)
{
	return join_gossip_bound_us(p) + pushpull_us(&p->cfg, p->nodes);
}

/* ---- helpers ---- */

static sim_t *make(sim_params *p, uint32_t n, const char *profile, double loss)
{
	char err[256];
	if (sim_params_init(p, n, t_seed(), profile, err, sizeof err) < 0) T_FAIL("%s", err);
	p->loss = loss;
	sim_t *s = sim_new(p, err, sizeof err);
	if (!s) T_FAIL("%s", err);
	return s;
}

static void converge(sim_t *s, const sim_params *p);

/* make(), then run until every node lists all N alive. */
static sim_t *make_converged(sim_params *p, uint32_t n, const char *profile, double loss)
{
	sim_t *s = make(p, n, profile, loss);
	converge(s, p);
	return s;
}

/* Runs until every node lists all N alive, within the join bound. */
static void converge(sim_t *s, const sim_params *p)
{
	uint64_t bound = join_bound_us(p);
	T_EQ(sim_run_until_converged(s, bound), 0);
	T_LE(sim_now(s), bound);
}

static const sim_record *find_rec(const sim_t *s, sim_rec_kind kind, uint32_t node)
{
	const sim_record *r;
	size_t n = sim_records(s, &r);
	for (size_t i = n; i-- > 0;)
		if (r[i].kind == kind && r[i].node == node) return &r[i];
	return NULL;
}

/* Runs in 100 ms steps until the record of (kind, node) is done; fails the
 * test when it is not done by `limit`. */
static const sim_record *expect_done(sim_t *s, sim_rec_kind kind, uint32_t node, uint64_t limit)
{
	static const char *what[] = { "kill", "restart", "leave", "pause" };
	for (;;) {
		const sim_record *r = find_rec(s, kind, node);
		if (r && r->done_us != SIM_NEVER) return r;
		if (sim_now(s) >= limit)
			T_FAIL("%s of n%u not taken in by everyone at %.3f s", what[kind], node,
			       (double)limit / SIM_SEC);
		uint64_t next = sim_now(s) + 100 * SIM_MS;
		T_EQ(sim_run_until(s, next < limit ? next : limit), 0);
	}
}

static sim_stats stats(const sim_t *s)
{
	sim_stats st;
	sim_get_stats(s, &st);
	return st;
}

/* Runs to `from` (a heal, a wake-up), then in 100 ms steps until every live
 * node lists every live node alive; checks that came within `bound` after
 * `from`, and that no one was falsely accused. */
static void expect_whole(sim_t *s, uint64_t from, uint64_t bound)
{
	T_EQ(sim_run_until(s, from), 0);
	while (!sim_all_alive(s) && sim_now(s) < from + bound)
		T_EQ(sim_run_until(s, sim_now(s) + 100 * SIM_MS), 0);
	uint64_t since = stats(s).all_alive_since_us;
	if (since == SIM_NEVER)
		T_FAIL("not whole %.3f s after %.3f s", (double)bound / SIM_SEC, (double)from / SIM_SEC);
	T_LE(since > from ? since - from : 0, bound);
	T_EQ(stats(s).false_failures, 0);
}


/* ---- the simulator itself ---- */

T_TEST(sim_addresses_are_unique_loopback)
{
	mbr_addr a, b;
	sim_addr(0, &a);
	sim_addr(9999, &b);
	char buf[64];
	T_STREQ(mbr_addr_format(&a, buf, sizeof buf), "127.0.0.1:7946");
	T_STREQ(mbr_addr_format(&b, buf, sizeof buf), "127.0.39.16:7946");
	T_CHECK(!mbr_addr_eq(&a, &b));
}

/* The view matrix is built from events only; it must agree with what every
 * instance holds in its own table, after kills, restarts and a leave. */
T_TEST(sim_views_match_member_tables)
{
	sim_params p;
	sim_t *s = make_converged(&p, 40, "fast", 0.05);
	uint64_t t = sim_now(s) + SIM_SEC;
	sim_kill(s, t, 3);
	sim_restart(s, t, 5, 2 * SIM_SEC);
	sim_leave(s, t, 7);
	sim_pause(s, t, 9, 3 * SIM_SEC);
	T_EQ(sim_run_until(s, t + 30 * SIM_SEC), 0);
	size_t checked = 0;
	for (uint32_t o = 0; o < 40; o++) {
		mbr_t *m = sim_mbr(s, o);
		if (!m) continue;
		for (uint32_t x = 0; x < 40; x++) {
			char name[16];
			snprintf(name, sizeof name, "n%u", x);
			mbr_member_info in;
			sim_view_code v = sim_view(s, o, x);
			if (mbr_lookup(m, name, &in) < 0) {
				T_EQ(v, SIM_V_NONE);
				continue;
			}
			sim_view_code want = in.generation < sim_generation(s, x) ? SIM_V_STALE
					     : in.status == MBR_ALIVE   ? SIM_V_ALIVE
					     : in.status == MBR_SUSPECT ? SIM_V_SUSPECT
					     : in.status == MBR_DEAD    ? SIM_V_FAILED
									: SIM_V_LEFT;
			if (v != want) T_FAIL("n%u's view of n%u: sim %d, table %d", o, x, v, want);
			checked++;
		}
	}
	T_LE(38 * 39, checked); /* 38 live observers (n3 down, n7 gone), each knows all */
	sim_destroy(&s);
}

/* ---- joining ---- */

T_TEST_TIMEOUT(sim_join_1000_through_one_seed, 150)
{
	sim_params p;
	sim_t *s = make(&p, 1000, "lan", 0);
	uint64_t pairs = 1000 * 1000;
	if (sim_run_until_converged(s, join_gossip_bound_us(&p)) < 0)
		T_LE(pairs - pairs / 1000, sim_total(s, SIM_V_ALIVE));
	converge(s, &p);
	sim_stats st = stats(s);
	/* Not before the last node has even started. */
	T_LE(999 * p.join_spread_us, st.converge_us);
	T_EQ(st.false_failures, 0);
	T_EQ(st.ev_conflict, 0);
	sim_destroy(&s);
}

/* ---- detection ---- */

static void kill_one(uint32_t n, const char *profile)
{
	sim_params p;
	sim_t *s = make_converged(&p, n, profile, 0);
	uint32_t victim = n / 2;
	uint64_t at = sim_now(s) + SIM_SEC;
	uint64_t bound = detect_bound_us(&p.cfg, n, 0);
	sim_kill(s, at, victim);
	const sim_record *r = expect_done(s, SIM_R_KILL, victim, at + bound);
	T_LE(r->done_us - r->at_us, bound);
	T_EQ(sim_column(s, victim, SIM_V_FAILED), n - 1);
	T_EQ(stats(s).false_failures, 0);
	sim_destroy(&s);
}

T_TEST(sim_kill_detected_10_nodes) { kill_one(10, "lan"); }
T_TEST(sim_kill_detected_100_nodes) { kill_one(100, "lan"); }
T_TEST_TIMEOUT(sim_kill_detected_1000_nodes, 170) { kill_one(1000, "lan"); }
T_TEST(sim_kill_detected_100_nodes_fast) { kill_one(100, "fast"); }

/* ---- loss ---- */

/* 10% UDP loss for 10 simulated minutes, 3 nodes killed half way: every
 * kill is detected within its bound and no live node is ever declared
 * failed (Lifeguard: the suspicion timeout leaves room to refute). */
static void lossy(const char *profile)
{
	sim_params p;
	sim_t *s = make_converged(&p, 100, profile, 0.10);
	uint64_t t = 300 * SIM_SEC;
	for (uint32_t v = 11; v <= 13; v++) sim_kill(s, t, v);
	T_EQ(sim_run_until(s, 600 * SIM_SEC), 0);
	sim_stats st = stats(s);
	T_EQ(st.false_failures, 0);
	T_EQ(st.resurrections, 0);
	sim_dist d;
	sim_dist_of(s, SIM_R_KILL, &d);
	T_EQ(d.count, 3);
	T_EQ(d.undone, 0);
	T_LE(d.max * SIM_SEC, detect_bound_us(&p.cfg, 100, 0.10));
	sim_destroy(&s);
}

T_TEST(sim_loss10_no_false_failures_lan) { lossy("lan"); }
T_TEST(sim_loss10_no_false_failures_fast) { lossy("fast"); }

/* ---- a paused node (Lifeguard) ---- */

/* A node stopped for 5 s (SIGSTOP) with the fast profile: when it wakes,
 * it reads its backlog before its timers run, and accuses no one.  The
 * others may rightly have declared it failed; it refutes, and everyone is
 * alive everywhere again within two disseminations (the news that it is
 * suspected reaching it, its refutation reaching everyone: everyone_us)
 * plus a probe period (its probe in flight). */
T_TEST(sim_pause_makes_no_false_accusations)
{
	sim_params p;
	sim_t *s = make_converged(&p, 50, "fast", 0);
	uint64_t at = sim_now(s) + SIM_SEC, dur = 5 * SIM_SEC;
	sim_pause(s, at, 17, dur);
	uint64_t resume = at + dur;
	expect_whole(s, resume, everyone_us(&p.cfg, 50, 0, 2) + p.cfg.probe_interval_ms * SIM_MS);
	T_EQ(sim_run_until(s, resume + 60 * SIM_SEC), 0);
	T_EQ(stats(s).false_failures, 0);
	T_CHECK(sim_all_alive(s));
	sim_destroy(&s);
}

/* ---- partitions ---- */

/* Even nodes against odd ones for 60 s.  Each side must list the whole
 * other side failed before the heal: 60 s exceeds the detection bound at
 * N = 40.  After the heal, one reconnect interval brings a push-pull across
 * (some node tries a failed member about that often), and the refutations
 * spread: bound = reconnect interval + 4 disseminations (everyone_us: a
 * push-pull carries the other side's dead marks over, each node learns it
 * is thought dead, refutes, and the refutations spread). */
T_TEST(sim_partition_50_50_heals)
{
	sim_params p;
	uint32_t n = 40;
	sim_t *s = make(&p, n, "lan", 0);
	for (uint32_t i = 1; i < n; i += 2) sim_set_group(s, i, 1);
	converge(s, &p);
	uint64_t start = sim_now(s) + SIM_SEC, end = start + 60 * SIM_SEC;
	T_LE(detect_bound_us(&p.cfg, n, 0), end - start);
	T_EQ(sim_partition(s, start, end, 0, 1), 0);
	T_EQ(sim_run_until(s, end - 1), 0);
	for (uint32_t o = 0; o < n; o++)
		for (uint32_t x = 0; x < n; x++) {
			sim_view_code v = sim_view(s, o, x);
			sim_view_code want = (o ^ x) & 1 ? SIM_V_FAILED : SIM_V_ALIVE;
			if (v != want) T_FAIL("n%u lists n%u as %d before the heal, want %d", o, x, v, want);
		}
	expect_whole(s, end, p.cfg.reconnect_interval_ms * SIM_MS + everyone_us(&p.cfg, n, 0, 4));
	sim_destroy(&s);
}

/* One-way: group 1 cannot hear group 0 for 40 s (n0's side keeps talking).
 * The cluster must be whole again within the partition's heal bound. */
T_TEST(sim_one_way_cut_heals)
{
	sim_params p;
	uint32_t n = 30;
	sim_t *s = make(&p, n, "fast", 0);
	for (uint32_t i = 20; i < n; i++) sim_set_group(s, i, 1);
	converge(s, &p);
	uint64_t start = sim_now(s) + SIM_SEC, end = start + 40 * SIM_SEC;
	sim_block(s, start, 0, 1, true);
	sim_block(s, end, 0, 1, false);
	expect_whole(s, end, p.cfg.reconnect_interval_ms * SIM_MS + everyone_us(&p.cfg, n, 0, 4));
	sim_destroy(&s);
}

/* ---- restarts ---- */

/* A restarted node (same name and address, generation + 1) joins the seed;
 * the seed holds it alive at once and gossip carries it: alive everywhere
 * within one join retry plus two disseminations (everyone_us).  Both before
 * anyone noticed it was gone (down 2 s) and after everyone listed it failed. */
T_TEST(sim_restart_is_alive_everywhere)
{
	sim_params p;
	uint32_t n = 50;
	sim_t *s = make_converged(&p, n, "lan", 0);
	uint64_t bound = p.join_retry_us + everyone_us(&p.cfg, n, 0, 2);

	uint64_t t = sim_now(s) + SIM_SEC;
	sim_restart(s, t, 21, 2 * SIM_SEC);
	const sim_record *r = expect_done(s, SIM_R_RESTART, 21, t + 2 * SIM_SEC + bound);
	T_LE(r->done_us - r->at_us, bound);
	T_EQ(sim_generation(s, 21), 2);

	t = sim_now(s) + SIM_SEC;
	sim_kill(s, t, 22);
	expect_done(s, SIM_R_KILL, 22, t + detect_bound_us(&p.cfg, n, 0));
	t = sim_now(s);
	sim_restart(s, t, 22, 0);
	r = expect_done(s, SIM_R_RESTART, 22, t + bound);
	T_LE(r->done_us - r->at_us, bound);
	T_EQ(sim_generation(s, 22), 2);

	T_EQ(sim_run_until(s, sim_now(s) + 60 * SIM_SEC), 0);
	T_CHECK(sim_all_alive(s));
	sim_stats st = stats(s);
	T_EQ(st.false_failures, 0);
	T_EQ(st.ev_conflict, 0);
	sim_destroy(&s);
}

/* ---- leaving ---- */

/* n7 leaves while n8 is stopped (so n8 wakes with n7 alive in its table and
 * gossips and push-pulls that stale view), at 5% loss.  Every node lists n7
 * left within two disseminations (everyone_us) of n8 waking, and for ten
 * simulated minutes (ten push-pull intervals, twenty reconnect rounds)
 * nothing brings n7 back. */
T_TEST(sim_left_stays_left)
{
	sim_params p;
	uint32_t n = 50;
	sim_t *s = make_converged(&p, n, "lan", 0.05);
	uint64_t t = sim_now(s) + SIM_SEC;
	sim_pause(s, t - 500 * SIM_MS, 8, 20 * SIM_SEC);
	sim_leave(s, t, 7);
	const sim_record *r = expect_done(s, SIM_R_LEAVE, 7, t + 30 * SIM_SEC);
	/* n8 is live (paused) and must list n7 left too; it can only once awake. */
	T_LE(r->done_us, t + 19500 * SIM_MS + everyone_us(&p.cfg, n, 0.05, 2));
	T_EQ(sim_run_until(s, t + 600 * SIM_SEC), 0);
	T_EQ(sim_state(s, 7), SIM_N_GONE);
	T_EQ(sim_column(s, 7, SIM_V_LEFT), n - 1);
	sim_stats st = stats(s);
	T_EQ(st.resurrections, 0);
	T_EQ(st.false_failures, 0);
	sim_destroy(&s);
}

/* ---- determinism ---- */

static void scenario(uint64_t seed, sim_stats *out)
{
	sim_params p;
	char err[256];
	if (sim_params_init(&p, 60, seed, "fast", err, sizeof err) < 0) T_FAIL("%s", err);
	p.loss = 0.05;
	sim_t *s = sim_new(&p, err, sizeof err);
	T_CHECK(s != NULL);
	for (uint32_t i = 0; i < 60; i += 3) sim_set_group(s, i, 2);
	sim_kill(s, 5 * SIM_SEC, 10);
	sim_pause(s, 6 * SIM_SEC, 11, 2 * SIM_SEC);
	sim_restart(s, 7 * SIM_SEC, 13, SIM_SEC);
	sim_leave(s, 8 * SIM_SEC, 14);
	sim_partition(s, 10 * SIM_SEC, 20 * SIM_SEC, 0, 2);
	T_EQ(sim_run_until(s, 60 * SIM_SEC), 0);
	sim_get_stats(s, out);
	sim_destroy(&s);
}

T_TEST(sim_same_seed_same_run)
{
	sim_stats a, b, c;
	scenario(t_seed(), &a);
	scenario(t_seed(), &b);
	scenario(t_seed() + 1, &c);
	T_CHECK(a.ev_total > 1000);
	T_EQ(a.digest, b.digest);
	T_EQ(a.udp_sent, b.udp_sent);
	T_CHECK(memcmp(&a, &b, sizeof a) == 0);
	T_CHECK(a.digest != c.digest);
}
