/* tests/unit/mbr_test: protocol points of membership/mbr on a tiny
 * in-process network (a fake clock in ms, a FIFO of packets with 1 ms of
 * latency, and a drop filter).  The many-node behaviour is tested on the
 * simulator (tests/sim); here each test pins one rule. */
#include "tests/t.h"

#include "membership/mbr.h"
#include "membership/mbr_codec.h"
#include "common/sk_rng.h"

enum { NMAX = 16 };

typedef struct {
	uint64_t at;
	int to;
	int from;
	mbr_out o;
} pkt;

static struct {
	mbr_t *n[NMAX];
	int nn;
	bool down[NMAX];          /* killed or paused: packets to it vanish */
	bool cut[NMAX][NMAX];     /* from -> to dropped */
	uint64_t now;
	pkt *q;
	size_t qlen, qcap;
	mbr_config cfg;
	int events[NMAX][8];      /* per observer, count of each event type */
	char last_conflict[MBR_REASON_MAX];
} net;

static mbr_addr addr_of(int i)
{
	mbr_addr a = { .len = 4, .port = 7946 };
	a.ip[0] = 127; a.ip[1] = 0; a.ip[2] = 1; a.ip[3] = (uint8_t)(i + 1);
	return a;
}

static int index_of(const mbr_addr *a)
{
	for (int i = 0; i < net.nn; i++) {
		mbr_addr b = addr_of(i);
		if (mbr_addr_eq(a, &b)) return i;
	}
	return -1;
}

static void drain(int i)
{
	mbr_out o;
	mbr_event ev;
	if (!net.n[i]) return;
	while (mbr_pop_out(net.n[i], &o)) {
		int to = index_of(&o.to);
		if (to < 0 || net.cut[i][to]) { free(o.data); continue; }
		if (net.qlen == net.qcap) {
			net.qcap = net.qcap ? net.qcap * 2 : 256;
			net.q = realloc(net.q, net.qcap * sizeof *net.q);
		}
		net.q[net.qlen++] = (pkt){ net.now + 1, to, i, o };
	}
	while (mbr_pop_event(net.n[i], &ev)) {
		net.events[i][ev.type]++;
		if (ev.type == MBR_EV_CONFLICT) snprintf(net.last_conflict, sizeof net.last_conflict, "%s", ev.reason);
	}
}

static mbr_t *start(int i, uint64_t gen)
{
	char name[16], err[200];
	snprintf(name, sizeof name, "n%d", i);
	mbr_self self = { .name = name, .addr = addr_of(i), .generation = gen,
			  .seed = sk_mix64(t_seed() + (uint64_t)i * 7919 + gen) };
	mbr_t *m = mbr_new(&net.cfg, &self, net.now, err, sizeof err);
	if (!m) T_FAIL("mbr_new: %s", err);
	net.n[i] = m;
	net.down[i] = false;
	return m;
}

static void setup(int n, const char *profile)
{
	memset(&net, 0, sizeof net);
	net.now = 1000;
	mbr_config_profile(&net.cfg, profile);
	net.nn = n;
	for (int i = 0; i < n; i++) start(i, 1);
}

static void teardown(void)
{
	for (int i = 0; i < net.nn; i++) mbr_destroy(&net.n[i]);
	for (size_t i = 0; i < net.qlen; i++) free(net.q[i].o.data);
	free(net.q);
}

/* Advances the clock by ms, delivering packets and ticking every node. */
static void run(uint64_t ms)
{
	uint64_t end = net.now + ms;
	while (net.now < end) {
		net.now++;
		size_t w = 0;
		size_t n = net.qlen;
		for (size_t i = 0; i < n; i++) {
			pkt p = net.q[i];
			if (p.at > net.now) { net.q[w++] = p; continue; }
			if (!net.down[p.to] && net.n[p.to]) {
				mbr_addr from = addr_of(p.from);
				mbr_recv(net.n[p.to], net.now, &from, p.o.data, p.o.len, p.o.stream);
			}
			free(p.o.data);
		}
		/* packets queued by drain() during delivery land after n */
		memmove(net.q + w, net.q + n, (net.qlen - n) * sizeof *net.q);
		net.qlen = w + (net.qlen - n);
		for (int i = 0; i < net.nn; i++) {
			if (!net.n[i] || net.down[i]) continue;
			if (mbr_next_deadline(net.n[i]) <= net.now) mbr_tick(net.n[i], net.now);
			drain(i);
		}
	}
}

static void join_all(void)
{
	mbr_addr seed = addr_of(0);
	for (int i = 1; i < net.nn; i++) {
		mbr_join(net.n[i], net.now, &seed);
		drain(i);
	}
}

static mbr_status status_at(int obs, int who)
{
	char name[16];
	mbr_member_info mi;
	snprintf(name, sizeof name, "n%d", who);
	if (mbr_lookup(net.n[obs], name, &mi) < 0) return (mbr_status)-1;
	return mi.status;
}

static int count_status(int who, mbr_status st)
{
	int c = 0;
	for (int i = 0; i < net.nn; i++)
		if (i != who && net.n[i] && !net.down[i] && status_at(i, who) == st) c++;
	return c;
}

static bool all_alive(void)
{
	for (int i = 0; i < net.nn; i++)
		for (int j = 0; j < net.nn; j++)
			if (status_at(i, j) != MBR_ALIVE) return false;
	return true;
}

T_TEST(join_through_one_seed_converges)
{
	setup(8, "fast");
	join_all();
	uint64_t t0 = net.now;
	while (!all_alive() && net.now - t0 < 20000) run(10);
	T_CHECK(all_alive());
	/* Everyone joins at the same instant, so the seed's answers are
	 * partial; gossip spreads the rest, and the first push-pull (within one
	 * interval of the start) repairs what gossip missed. */
	T_LE(net.now - t0, net.cfg.pushpull_interval_ms + 500);
	for (int i = 0; i < 8; i++) T_EQ(mbr_member_count(net.n[i]), 8);
	teardown();
}

T_TEST(kill_is_detected_and_others_stay_alive)
{
	setup(6, "fast");
	join_all();
	run(2000);
	T_CHECK(all_alive());
	net.down[3] = true;
	uint64_t t0 = net.now, min, max;
	mbr_suspicion_bounds(net.n[0], &min, &max);
	while (count_status(3, MBR_DEAD) < 5 && net.now - t0 < 20000) run(10);
	T_EQ(count_status(3, MBR_DEAD), 5);
	/* first probe within ~2 intervals, failed probe one interval, then at
	 * most the max suspicion timeout, then gossip */
	T_LE(net.now - t0, 3 * 200 + max + 500);
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			if (i != 3 && j != 3) T_EQ(status_at(i, j), MBR_ALIVE);
	teardown();
}

T_TEST(suspect_refutes_through_buddy_and_incarnation)
{
	setup(4, "fast");
	join_all();
	run(2000);
	/* cut 0 -> 2 only: 0's pings to 2 fail, the others still reach 2 */
	mbr_config c = net.cfg;
	(void)c;
	net.cut[0][2] = true;
	net.cut[2][0] = true;
	uint32_t inc0 = 0;
	mbr_member_info mi;
	mbr_lookup(net.n[2], "n2", &mi);
	inc0 = mi.incarnation;
	run(4000);
	/* indirect probes through 1 and 3 keep 2 alive in 0's view */
	T_EQ(status_at(0, 2), MBR_ALIVE);
	/* now isolate 2 from everyone for a moment so a suspicion starts, then
	 * heal before it times out: 2 must refute with a higher incarnation */
	for (int i = 0; i < 4; i++) net.cut[i][2] = true;
	uint64_t t0 = net.now;
	while (count_status(2, MBR_SUSPECT) == 0 && net.now - t0 < 5000) run(5);
	T_CHECK(count_status(2, MBR_SUSPECT) > 0);
	for (int i = 0; i < 4; i++) net.cut[i][2] = net.cut[2][i] = false;
	run(3000);
	mbr_lookup(net.n[2], "n2", &mi);
	T_CHECK(mi.incarnation > inc0);
	T_CHECK(mbr_get_stats(net.n[2])->refutes > 0);
	for (int i = 0; i < 4; i++) T_EQ(status_at(i, 2), MBR_ALIVE);
	T_EQ(count_status(2, MBR_DEAD), 0);
	teardown();
}

T_TEST(graceful_leave_is_left_and_stays_left)
{
	setup(5, "fast");
	join_all();
	run(2000);
	mbr_leave(net.n[4], net.now);
	drain(4);
	uint64_t t0 = net.now;
	while (!mbr_leave_done(net.n[4]) && net.now - t0 < 5000) run(10);
	T_CHECK(mbr_leave_done(net.n[4]));
	net.down[4] = true;
	run(2000);
	T_EQ(count_status(4, MBR_LEFT), 4);
	/* stale gossip: replay an alive of n4 with the incarnation it left with */
	mbr_member_info mi;
	mbr_lookup(net.n[0], "n4", &mi);
	mbr_msg alive = { .type = MBR_MSG_ALIVE, .name = "n4", .addr = addr_of(4),
			  .gen = mi.generation, .inc = mi.incarnation };
	uint8_t *blob; size_t len;
	T_EQ(mbr_codec_encode_msg(&alive, &blob, &len), 0);
	mbr_pkt p;
	mbr_pkt_init(&p, 256);
	mbr_pkt_add(&p, blob, len);
	mbr_pkt_finish(&p, 0);
	mbr_addr from = addr_of(4);
	mbr_recv(net.n[1], net.now, &from, p.buf, p.len, false);
	drain(1);
	free(blob);
	mbr_pkt_free(&p);
	run(20000);
	T_EQ(count_status(4, MBR_LEFT), 4);
	T_EQ(count_status(4, MBR_DEAD), 0);
	teardown();
}

T_TEST(restart_with_new_generation_is_alive_again)
{
	setup(5, "fast");
	join_all();
	run(2000);
	net.down[2] = true;
	run(8000);
	T_EQ(count_status(2, MBR_DEAD), 4);
	mbr_destroy(&net.n[2]);
	start(2, 2);
	mbr_addr seed = addr_of(0);
	mbr_join(net.n[2], net.now, &seed);
	drain(2);
	uint64_t t0 = net.now;
	while (count_status(2, MBR_ALIVE) < 4 && net.now - t0 < 5000) run(10);
	T_EQ(count_status(2, MBR_ALIVE), 4);
	T_LE(net.now - t0, 2000);
	mbr_member_info mi;
	mbr_lookup(net.n[3], "n2", &mi);
	T_EQ(mi.generation, 2);
	teardown();
}

T_TEST(name_from_second_address_is_refused)
{
	setup(3, "fast");
	join_all();
	run(2000);
	/* an impostor announces n1 from another address */
	mbr_addr other = addr_of(9);
	mbr_msg alive = { .type = MBR_MSG_ALIVE, .name = "n1", .addr = other, .gen = 5, .inc = 0 };
	uint8_t *blob; size_t len;
	T_EQ(mbr_codec_encode_msg(&alive, &blob, &len), 0);
	mbr_pkt p;
	mbr_pkt_init(&p, 256);
	mbr_pkt_add(&p, blob, len);
	mbr_pkt_finish(&p, 0);
	mbr_recv(net.n[0], net.now, &other, p.buf, p.len, false);
	drain(0);
	free(blob);
	mbr_pkt_free(&p);
	T_EQ(net.events[0][MBR_EV_CONFLICT], 1);
	T_CHECK(strstr(net.last_conflict, "n1") && strstr(net.last_conflict, "127.0.1.10:7946"));
	T_EQ(mbr_get_stats(net.n[0])->drop_conflict, 1);
	mbr_member_info mi;
	mbr_lookup(net.n[0], "n1", &mi);
	mbr_addr a1 = addr_of(1);
	T_CHECK(mbr_addr_eq(&mi.addr, &a1));
	T_EQ(mi.generation, 1);
	teardown();
}

T_TEST(paused_node_wakes_without_accusing)
{
	setup(6, "fast");
	join_all();
	run(3000);
	T_CHECK(all_alive());
	/* pause n5 for 3 s: its packets queue (here: are dropped; the others
	 * fail it), then it resumes.  It must not declare anyone failed. */
	net.down[5] = true;
	run(3000);
	net.down[5] = false;
	run(5000);
	for (int j = 0; j < 5; j++) T_EQ(status_at(5, j), MBR_ALIVE);
	T_EQ(net.events[5][MBR_EV_FAILED], 0);
	T_CHECK(mbr_get_stats(net.n[5])->time_jumps >= 1);
	/* and it is alive again everywhere: it refuted */
	T_EQ(count_status(5, MBR_ALIVE), 5);
	teardown();
}

T_TEST(metadata_update_spreads)
{
	setup(4, "fast");
	join_all();
	run(2000);
	const uint8_t meta[] = "gpus=8";
	T_EQ(mbr_set_meta(net.n[1], net.now, meta, sizeof meta), 0);
	drain(1);
	run(2000);
	for (int i = 0; i < 4; i++) {
		mbr_member_info mi;
		mbr_lookup(net.n[i], "n1", &mi);
		T_EQ(mi.meta_len, sizeof meta);
		T_CHECK(memcmp(mi.meta, meta, sizeof meta) == 0);
	}
	uint8_t big[MBR_META_MAX + 1] = { 0 };
	T_EQ(mbr_set_meta(net.n[1], net.now, big, sizeof big), -1);
	teardown();
}

T_TEST(config_profiles_and_overrides)
{
	mbr_config c;
	char err[200];
	T_EQ(mbr_config_profile(&c, "lan"), 0);
	T_EQ(c.probe_interval_ms, 1000);
	T_EQ(c.suspicion_mult, 4);
	T_EQ(mbr_config_profile(&c, "nope"), -1);
	T_EQ(mbr_config_set(&c, "probe_interval_ms", "300", err, sizeof err), 0);
	T_EQ(c.probe_interval_ms, 300);
	T_EQ(mbr_config_set(&c, "probe_interval_ms", "-1", err, sizeof err), -1);
	T_CHECK(strstr(err, "probe_interval_ms"));
	T_EQ(mbr_config_set(&c, "bogus", "1", err, sizeof err), -1);
	T_CHECK(strstr(err, "bogus"));
	T_EQ(mbr_config_set(&c, "probe_timeout_ms", "400", err, sizeof err), 0);
	T_EQ(mbr_config_check(&c, err, sizeof err), -1);
}

T_TEST(suspicion_bounds_follow_memberlist)
{
	/* LAN: 4 s at N <= 10, 8 s at 100, 12 s at 1000 (docs/reference.md, Gossip) */
	setup(1, "lan");
	uint64_t min, max;
	mbr_suspicion_bounds(net.n[0], &min, &max);
	T_EQ(min, 4000);
	T_EQ(max, 24000);
	teardown();
}
