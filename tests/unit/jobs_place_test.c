/* tests/unit/jobs_place_test: jobs/job_place (Miles's placement rules).
 *
 * The worked example of docs/reference.md, Placement (2 nodes x 8 GPUs, actor 1x8,
 * rollout 8 GPUs in engines of 2), split and colocated; node order by IP as
 * a number; gangs that do not fit; busy GPUs; repairs after node deaths.
 * Then property tests over random clusters and jobs, seeded from t_seed():
 * every check names the case, and TEST_SEED=... replays the run. */
#include "tests/t.h"

#include <arpa/inet.h>

#include "common/sk_rng.h"
#include "jobs/job_place.h"

#define T_HAS(hay, needle)                                                        \
	do {                                                                      \
		const char *h_ = (hay), *n_ = (needle);                           \
		if (!strstr(h_, n_)) T_FAIL("'%s' does not contain '%s'", h_, n_); \
	} while (0)

static void node_set(place_node *nd, const char *name, const char *ip, uint32_t gpus)
{
	memset(nd, 0, sizeof *nd);
	snprintf(nd->name, sizeof nd->name, "%s", name);
	if (inet_pton(AF_INET, ip, nd->ip) == 1) nd->iplen = 4;
	else if (inet_pton(AF_INET6, ip, nd->ip) == 1) nd->iplen = 16;
	else T_FAIL("bad ip %s", ip);
	nd->gpus = gpus;
	nd->alive = true;
}

static void spec_set(job_spec *s, uint32_t nodes, uint32_t g, uint32_t rollout, uint32_t tp, bool colo)
{
	char err[256];
	job_spec_defaults(s);
	s->actor_num_nodes = nodes;
	s->actor_num_gpus_per_node = g;
	s->rollout_num_gpus = rollout;
	s->rollout_num_gpus_per_engine = tp;
	s->num_gpus_per_node = g > tp ? g : tp;
	s->colocate = colo;
	snprintf(s->trainer_cmd, sizeof s->trainer_cmd, "train");
	snprintf(s->rollout_cmd, sizeof s->rollout_cmd, "serve");
	if (job_spec_validate(s, err, sizeof err) != 0) T_FAIL("spec: %s", err);
}

static place_layout layout_new(const job_spec *s)
{
	place_layout L = {.nslots = job_spec_slots(s)};
	L.slots = calloc(L.nslots ? L.nslots : 1, sizeof *L.slots);
	return L;
}

/* The worked example: A = "zeta" at 10.0.0.9, B = "alpha" at 10.0.0.10.
 * B's name sorts first and its IP sorts first as a string; A must still
 * come first, since IPs compare as numbers. */
enum { A = 1, B = 0 };
static void example_nodes(place_node *nodes)
{
	node_set(&nodes[B], "alpha", "10.0.0.10", 8);
	node_set(&nodes[A], "zeta", "10.0.0.9", 8);
}

T_TEST(node_order_ip_as_number)
{
	place_node nodes[6];
	node_set(&nodes[0], "alpha", "10.0.0.10", 8);
	node_set(&nodes[1], "zeta", "10.0.0.9", 8);
	node_set(&nodes[2], "v6", "::1", 8);
	node_set(&nodes[3], "b", "9.255.255.255", 8);
	node_set(&nodes[4], "same-ip-b", "10.0.0.9", 8);
	node_set(&nodes[5], "c", "192.168.0.1", 8);
	size_t *o = place_node_order(nodes, 6);
	T_CHECK(o);
	size_t want[] = {3, 4, 1, 0, 5, 2}; /* same IP: by name ("same-ip-b" < "zeta") */
	for (size_t i = 0; i < 6; i++)
		if (o[i] != want[i]) T_FAIL("position %zu: node %zu, want %zu", i, o[i], want[i]);
	free(o);
	o = place_node_order(NULL, 0);
	T_CHECK(o);
	free(o);
}

T_TEST(worked_example_split)
{
	place_node nodes[2];
	job_spec s;
	place_result res;
	example_nodes(nodes);
	spec_set(&s, 1, 8, 8, 2, false);
	T_EQ(job_spec_slots(&s), 16);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), 0);
	T_STREQ(res.reason, "");
	T_EQ(res.placed_units, 5);
	T_EQ(res.pending_units, 0);
	for (uint32_t r = 0; r < 8; r++) {
		int nd;
		uint32_t local;
		T_EQ(L.slots[r].node, A);
		T_EQ(L.slots[r].gpu, r);
		T_EQ(place_trainer_rank(&s, &L, r, &nd, &local), 1);
		T_EQ(nd, A);
		T_EQ(local, r);
	}
	for (uint32_t e = 0; e < 4; e++) {
		int nd;
		uint32_t gpus[8];
		T_EQ(place_engine(&s, &L, e, &nd, gpus, 8), 2);
		T_EQ(nd, B);
		T_EQ(gpus[0], 2 * e);
		T_EQ(gpus[1], 2 * e + 1);
		T_EQ(L.slots[8 + 2 * e].node, B);
	}
	int nd = 7;
	uint32_t gpus[8], local = 9;
	T_EQ(place_engine(&s, &L, 4, &nd, gpus, 8), 0);
	T_EQ(nd, -1);
	T_EQ(place_trainer_rank(&s, &L, 8, &nd, &local), 0);
	T_EQ(nd, -1);
	T_EQ(place_engine(&s, &L, 1, &nd, gpus, 1), 1); /* cap respected */
	T_EQ(gpus[0], 2);
	T_EQ(place_gpus_on(&L, A), 0xff);
	T_EQ(place_gpus_on(&L, B), 0xff);
	T_EQ(place_gpus_on(&L, 2), 0);
	T_EQ(place_gpus_on(&L, -1), 0);
	free(L.slots);
}

/* The slot formula both ways, split and colocated, and its edges. */
T_TEST(engine_slots)
{
	job_spec s;
	spec_set(&s, 1, 8, 8, 2, false); /* split: 8 trainer slots, then 4 engines of 2 */
	for (uint32_t e = 0; e < 4; e++) T_EQ(place_engine_slot(&s, e), 8 + 2 * e);
	T_EQ(place_engine_slot(&s, 4), UINT32_MAX);
	T_EQ(place_slot_engine(&s, 0), -1);
	T_EQ(place_slot_engine(&s, 7), -1);
	T_EQ(place_slot_engine(&s, 8), 0);
	T_EQ(place_slot_engine(&s, 9), 0);
	T_EQ(place_slot_engine(&s, 15), 3);
	T_EQ(place_slot_engine(&s, 16), -1);
	spec_set(&s, 1, 8, 8, 2, true); /* colocated: engines share the trainer's slots */
	for (uint32_t e = 0; e < 4; e++) T_EQ(place_engine_slot(&s, e), 2 * e);
	T_EQ(place_engine_slot(&s, 4), UINT32_MAX);
	T_EQ(place_slot_engine(&s, 0), 0);
	T_EQ(place_slot_engine(&s, 7), 3);
	T_EQ(place_slot_engine(&s, 8), -1);
	s.rollout_num_gpus_per_engine = 0; /* not a valid spec */
	T_EQ(place_engine_slot(&s, 0), UINT32_MAX);
	T_EQ(place_slot_engine(&s, 0), -1);
}

T_TEST(worked_example_colocated)
{
	place_node nodes[2];
	job_spec s;
	place_result res;
	example_nodes(nodes);
	spec_set(&s, 1, 8, 8, 2, true);
	T_EQ(job_spec_slots(&s), 8);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), 0);
	T_EQ(res.placed_units, 1);
	for (uint32_t r = 0; r < 8; r++) {
		int nd;
		uint32_t local;
		T_EQ(place_trainer_rank(&s, &L, r, &nd, &local), 1);
		T_EQ(nd, A);
		T_EQ(L.slots[r].gpu, r);
		T_EQ(local, r);
	}
	for (uint32_t e = 0; e < 4; e++) {
		int nd;
		uint32_t gpus[2];
		T_EQ(place_engine(&s, &L, e, &nd, gpus, 2), 2);
		T_EQ(nd, A);
		T_EQ(gpus[0], 2 * e);
		T_EQ(gpus[1], 2 * e + 1);
	}
	T_EQ(place_gpus_on(&L, A), 0xff);
	T_EQ(place_gpus_on(&L, B), 0); /* B is idle */
	free(L.slots);
}

T_TEST(job_bigger_than_cluster_is_pending)
{
	place_node nodes[2];
	job_spec s;
	place_result res;
	example_nodes(nodes);
	spec_set(&s, 2, 8, 8, 2, false); /* 24 GPUs on 16 */
	place_layout L = layout_new(&s);
	for (uint32_t i = 0; i < L.nslots; i++) L.slots[i].node = 5;
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), 1);
	for (uint32_t i = 0; i < L.nslots; i++) T_EQ(L.slots[i].node, -1);
	T_EQ(res.placed_units, 0);
	T_EQ(res.pending_units, 6);
	T_HAS(res.reason, "needs 24 GPUs");
	printf("  reason: %s\n", res.reason);
	T_HAS(res.reason, "4 engine units of 2 GPUs on one node do not fit");
	T_HAS(res.reason, "the cluster has 16 free");
	T_EQ(place_gpus_on(&L, A), 0);
	free(L.slots);

	/* enough GPUs in all, but no node has 8 free: the reason says so */
	nodes[A].busy = 0x0f;
	nodes[B].busy = 0xf0;
	spec_set(&s, 1, 8, 0, 1, false);
	L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), 1);
	T_HAS(res.reason, "1 trainer unit of 8 GPUs on one node does not fit");
	T_HAS(res.reason, "8 free (at most 4 on one node, 2 of 2 nodes alive)");
	free(L.slots);

	/* no nodes at all */
	L = layout_new(&s);
	T_EQ(place_fresh(&s, NULL, 0, &L, &res), 1);
	T_HAS(res.reason, "0 of 0 nodes alive");
	free(L.slots);
}

T_TEST(bad_arguments)
{
	place_node nodes[2];
	job_spec s;
	place_result res;
	example_nodes(nodes);
	spec_set(&s, 1, 8, 8, 2, false);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(NULL, nodes, 2, &L, &res), -1);
	T_EQ(place_fresh(&s, nodes, 2, NULL, &res), -1);
	T_EQ(place_fresh(&s, nodes, 2, &L, NULL), -1);
	T_EQ(place_fresh(&s, NULL, 2, &L, &res), -1);
	L.nslots--;
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), -1);
	T_EQ(place_repair(&s, nodes, 2, &L, &res), -1);
	L.nslots++;
	job_spec bad = s;
	bad.rollout_num_gpus_per_engine = 0;
	T_EQ(place_fresh(&bad, nodes, 2, &L, &res), -1);
	bad = s;
	bad.rollout_num_gpus = 7; /* not a multiple of tp */
	T_EQ(place_fresh(&bad, nodes, 2, &L, &res), -1);
	bad = s;
	bad.colocate = true; /* not validated: R != A would leave engines without a home */
	bad.rollout_num_gpus = 16;
	T_EQ(place_fresh(&bad, nodes, 2, &L, &res), -1);
	int nd;
	uint32_t g[4], local;
	T_EQ(place_engine(&bad, &L, 0, &nd, g, 4), 0);
	T_EQ(nd, -1);
	T_EQ(place_trainer_rank(&s, NULL, 0, &nd, &local), 0);
	T_EQ(place_gpus_on(NULL, 0), 0);
	free(L.slots);
}

T_TEST(busy_gpus_are_skipped)
{
	place_node nodes[2];
	job_spec s;
	place_result res;
	example_nodes(nodes);
	nodes[A].busy = (1u << 0) | (1u << 3);
	spec_set(&s, 1, 4, 4, 2, false);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), 0);
	uint32_t want[4] = {1, 2, 4, 5};
	for (int r = 0; r < 4; r++) {
		T_EQ(L.slots[r].node, A);
		T_EQ(L.slots[r].gpu, want[r]);
	}
	int nd;
	uint32_t g[2];
	T_EQ(place_engine(&s, &L, 0, &nd, g, 2), 2);
	T_EQ(nd, A);
	T_EQ(g[0], 6);
	T_EQ(g[1], 7);
	T_EQ(place_engine(&s, &L, 1, &nd, g, 2), 2);
	T_EQ(nd, B);
	T_EQ(g[0], 0);
	T_EQ(g[1], 1);
	/* a second job sees the first one's GPUs as busy */
	nodes[A].busy |= place_gpus_on(&L, A);
	nodes[B].busy |= place_gpus_on(&L, B);
	T_EQ(nodes[A].busy, 0xff);
	spec_set(&s, 1, 4, 2, 2, false);
	place_layout L2 = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 2, &L2, &res), 0);
	T_EQ(L2.slots[0].node, B);
	T_EQ(L2.slots[0].gpu, 2);
	T_EQ(L2.slots[4].node, B);
	T_EQ(L2.slots[4].gpu, 6);
	/* dead nodes and GPUs beyond a node's count are never used */
	nodes[B].alive = false;
	T_EQ(place_fresh(&s, nodes, 2, &L2, &res), 1);
	T_HAS(res.reason, "1 of 2 nodes alive");
	free(L.slots);
	free(L2.slots);
}

T_TEST(repair_split_worked_example)
{
	place_node nodes[3];
	job_spec s;
	place_result res;
	example_nodes(nodes);
	spec_set(&s, 1, 8, 8, 2, false);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 2, &L, &res), 0);

	/* all alive: nothing moves */
	T_EQ(place_repair(&s, nodes, 2, &L, &res), 0);
	T_CHECK(!res.trainer_moved && !res.engines_moved_any && !res.engines_moved);
	T_EQ(res.placed_units, 5);

	/* B dies: the engines have nowhere to go (A is full) */
	nodes[B].alive = false;
	T_EQ(place_repair(&s, nodes, 2, &L, &res), 1);
	T_CHECK(!res.trainer_moved);
	T_CHECK(res.engines_moved_any);
	T_EQ(res.engines_moved, 0xf);
	T_EQ(res.placed_units, 1);
	T_EQ(res.pending_units, 4);
	T_HAS(res.reason, "needs 8 more GPUs: 4 engine units of 2 GPUs on one node do not fit");
	printf("  reason: %s\n", res.reason);
	for (uint32_t r = 0; r < 8; r++) T_EQ(L.slots[r].node, A);
	for (uint32_t i = 8; i < 16; i++) T_EQ(L.slots[i].node, -1);
	/* and stays pending, unchanged, while nothing changes */
	T_EQ(place_repair(&s, nodes, 2, &L, &res), 1);
	T_CHECK(!res.engines_moved_any && !res.trainer_moved);

	/* C joins: the engines go there, the trainer stays */
	node_set(&nodes[2], "c", "10.0.0.11", 8);
	T_EQ(place_repair(&s, nodes, 3, &L, &res), 0);
	T_CHECK(!res.trainer_moved);
	T_EQ(res.engines_moved, 0xf);
	T_STREQ(res.reason, "");
	for (uint32_t e = 0; e < 4; e++) {
		int nd;
		uint32_t g[2];
		T_EQ(place_engine(&s, &L, e, &nd, g, 2), 2);
		T_EQ(nd, 2);
		T_EQ(g[0], 2 * e);
	}
	for (uint32_t r = 0; r < 8; r++) T_EQ(L.slots[r].node, A);

	/* B comes back empty, then A dies: the trainer moves to B */
	nodes[B].alive = true;
	T_EQ(place_repair(&s, nodes, 3, &L, &res), 0);
	T_CHECK(!res.trainer_moved && !res.engines_moved_any);
	nodes[A].alive = false;
	T_EQ(place_repair(&s, nodes, 3, &L, &res), 0);
	T_CHECK(res.trainer_moved);
	T_CHECK(!res.engines_moved_any);
	for (uint32_t r = 0; r < 8; r++) {
		T_EQ(L.slots[r].node, B);
		T_EQ(L.slots[r].gpu, r);
	}
	free(L.slots);
}

T_TEST(repair_colocated_moves_unit_with_its_engines)
{
	place_node nodes[3];
	job_spec s;
	place_result res;
	node_set(&nodes[0], "n0", "10.0.1.1", 4);
	node_set(&nodes[1], "n1", "10.0.1.2", 4);
	node_set(&nodes[2], "n2", "10.0.1.3", 4);
	nodes[2].alive = false;
	spec_set(&s, 2, 4, 0, 2, true); /* 2 units of 4; engines 0,1 on unit 0, engines 2,3 on unit 1 */
	T_EQ(job_spec_engines(&s), 4);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 3, &L, &res), 0);
	T_EQ(L.slots[0].node, 0);
	T_EQ(L.slots[4].node, 1);
	nodes[2].alive = true;
	nodes[1].alive = false;
	T_EQ(place_repair(&s, nodes, 3, &L, &res), 0);
	T_CHECK(res.trainer_moved);
	T_EQ(res.engines_moved, 0xc);
	int nd;
	uint32_t g[2], local;
	T_EQ(place_engine(&s, &L, 3, &nd, g, 2), 2);
	T_EQ(nd, 2);
	T_EQ(g[0], 2);
	T_EQ(place_trainer_rank(&s, &L, 5, &nd, &local), 1);
	T_EQ(nd, 2);
	T_EQ(local, 1);
	T_EQ(place_trainer_rank(&s, &L, 1, &nd, &local), 1);
	T_EQ(nd, 0);
	free(L.slots);
}

/* A layout from elsewhere (the replicated log) may be inconsistent with
 * the nodes: GPUs used twice or beyond a node's count move like dead ones. */
T_TEST(repair_fixes_inconsistent_layout)
{
	place_node nodes[1];
	job_spec s;
	place_result res;
	node_set(&nodes[0], "n0", "10.0.0.1", 8);
	spec_set(&s, 1, 2, 4, 2, false);
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, 1, &L, &res), 0);
	T_EQ(L.slots[2].gpu, 2);
	T_EQ(L.slots[4].gpu, 4);
	/* engine 1 on engine 0's GPUs: the first keeps them, engine 1 moves */
	L.slots[4].gpu = 2;
	L.slots[5].gpu = 3;
	T_EQ(place_repair(&s, nodes, 1, &L, &res), 0);
	T_CHECK(!res.trainer_moved);
	T_EQ(res.engines_moved, 0x2);
	T_EQ(L.slots[4].node, 0);
	T_EQ(L.slots[4].gpu, 4);
	T_EQ(L.slots[5].gpu, 5);
	/* a trainer rank on GPU 9 of an 8-GPU node: the unit moves */
	L.slots[1].gpu = 9;
	T_EQ(place_repair(&s, nodes, 1, &L, &res), 0);
	T_CHECK(res.trainer_moved);
	T_CHECK(!res.engines_moved_any);
	T_EQ(L.slots[0].gpu, 0);
	T_EQ(L.slots[1].gpu, 1);
	/* a unit split across two nodes, or on a node index out of range */
	L.slots[3].node = 5;
	T_EQ(place_repair(&s, nodes, 1, &L, &res), 0);
	T_EQ(res.engines_moved, 0x1);
	T_EQ(L.slots[3].node, 0);
	T_EQ(L.slots[2].gpu, 2);
	T_EQ(L.slots[3].gpu, 3);
	free(L.slots);
}

T_TEST(large_cluster_is_fast)
{
	enum { NN = 4096 };
	place_node *nodes = calloc(NN, sizeof *nodes);
	job_spec s;
	place_result res;
	for (uint32_t i = 0; i < NN; i++) {
		char ip[32], name[16];
		snprintf(ip, sizeof ip, "10.%u.%u.%u", (i * 7919) % 251, (i / 251) % 256, i % 251 + 1);
		snprintf(name, sizeof name, "n%u", i);
		node_set(&nodes[i], name, ip, 8);
	}
	spec_set(&s, 1024, 8, 16384, 1, false); /* 8192 + 16384 GPUs, 17408 units */
	place_layout L = layout_new(&s);
	T_EQ(place_fresh(&s, nodes, NN, &L, &res), 0);
	for (uint32_t i = 0; i < NN; i += 16) nodes[i].alive = false;
	T_EQ(place_repair(&s, nodes, NN, &L, &res), 0);
	T_CHECK(res.trainer_moved && res.engines_moved_any);
	free(L.slots);
	free(nodes);
}

/* ---- properties over random clusters and jobs ---- */

enum { PN_MAX = 12 };

typedef struct {
	sk_rng r;
	uint64_t seed;
	int iter;
	const char *step;
} prop_ctx;

#define P_FAIL(p, ...)                                                             \
	do {                                                                       \
		char m_[256];                                                      \
		snprintf(m_, sizeof m_, __VA_ARGS__);                              \
		T_FAIL("case %d (%s, seed %" PRIu64 "): %s", (p)->iter, (p)->step, \
		       (p)->seed, m_);                                             \
	} while (0)

static void rand_node(prop_ctx *p, place_node *nd)
{
	char name[16], ip[64];
	snprintf(name, sizeof name, "n%d", (int)sk_rng_below(&p->r, 5));
	if (sk_rng_below(&p->r, 4) == 0)
		snprintf(ip, sizeof ip, "fd00::%x", (unsigned)sk_rng_below(&p->r, 4));
	else
		snprintf(ip, sizeof ip, "10.0.%u.%u", (unsigned)sk_rng_below(&p->r, 3), (unsigned)sk_rng_below(&p->r, 20));
	node_set(nd, name, ip, 0);
	uint64_t k = sk_rng_below(&p->r, 10);
	nd->gpus = k == 0 ? 0 : k == 1 ? 64 + (uint32_t)sk_rng_below(&p->r, 8) : (uint32_t)sk_rng_below(&p->r, 13);
	nd->alive = sk_rng_below(&p->r, 6) != 0;
	nd->busy = sk_rng_below(&p->r, 3) ? 0 : sk_rng_next(&p->r) & sk_rng_next(&p->r);
}

static void rand_spec(prop_ctx *p, job_spec *s)
{
	bool colo = sk_rng_below(&p->r, 3) == 0;
	uint32_t g = 1 + (uint32_t)sk_rng_below(&p->r, 8), nodes = 1 + (uint32_t)sk_rng_below(&p->r, 3), tp, rollout;
	if (colo) {
		do tp = 1 + (uint32_t)sk_rng_below(&p->r, g);
		while (g % tp);
		rollout = 0;
	} else {
		tp = 1 + (uint32_t)sk_rng_below(&p->r, 8);
		rollout = tp * (uint32_t)sk_rng_below(&p->r, 5);
	}
	spec_set(s, nodes, g, rollout, tp, colo);
}

typedef struct { uint32_t first, width; bool trainer; } unit_t;

static uint32_t units_of(const job_spec *s, unit_t *u)
{
	uint32_t n = 0, g = s->actor_num_gpus_per_node, tp = s->rollout_num_gpus_per_engine;
	for (uint32_t c = 0; c < s->actor_num_nodes; c++) u[n++] = (unit_t){c * g, g, true};
	if (!s->colocate)
		for (uint32_t i = 0; i < job_spec_engines(s); i++)
			u[n++] = (unit_t){job_spec_trainer_ranks(s) + i * tp, tp, false};
	return n;
}

/* Whole unit on one node, or wholly unplaced; 1 placed, 0 not. */
static int unit_state(prop_ctx *p, const place_layout *L, unit_t u)
{
	int nd = L->slots[u.first].node;
	for (uint32_t k = 0; k < u.width; k++)
		if (L->slots[u.first + k].node != nd) P_FAIL(p, "unit at slot %u is split across nodes", u.first);
	return nd >= 0;
}

/* The invariants every layout we hand out must hold. */
static void check_layout(prop_ctx *p, const job_spec *s, const place_node *nodes, size_t n, const place_layout *L)
{
	uint64_t seen[PN_MAX + 4] = {0};
	T_EQ(L->nslots, job_spec_slots(s));
	for (uint32_t i = 0; i < L->nslots; i++) {
		const place_slot *sl = &L->slots[i];
		if (sl->node < 0) continue;
		if ((size_t)sl->node >= n) P_FAIL(p, "slot %u on node %d of %zu", i, sl->node, n);
		const place_node *nd = &nodes[sl->node];
		if (!nd->alive) P_FAIL(p, "slot %u on dead node %d", i, sl->node);
		if (sl->gpu >= nd->gpus || sl->gpu >= 64) P_FAIL(p, "slot %u GPU %u of %u", i, sl->gpu, nd->gpus);
		uint64_t bit = 1ull << sl->gpu;
		if (nd->busy & bit) P_FAIL(p, "slot %u on busy GPU %d/%u", i, sl->node, sl->gpu);
		if (seen[sl->node] & bit) P_FAIL(p, "GPU %d/%u used twice (slot %u)", sl->node, sl->gpu, i);
		seen[sl->node] |= bit;
	}
	for (size_t i = 0; i < n; i++)
		if (place_gpus_on(L, (int)i) != seen[i]) P_FAIL(p, "place_gpus_on(%zu) wrong", i);
	unit_t u[64];
	uint32_t nu = units_of(s, u);
	for (uint32_t k = 0; k < nu; k++) unit_state(p, L, u[k]);
	/* every member is where its slots say, and engines never straddle */
	for (uint32_t r = 0; r < job_spec_trainer_ranks(s); r++) {
		int nd;
		uint32_t local;
		uint32_t got = place_trainer_rank(s, L, r, &nd, &local);
		if (got != (L->slots[r].node >= 0) || nd != L->slots[r].node ||
		    local != r % s->actor_num_gpus_per_node)
			P_FAIL(p, "trainer rank %u", r);
	}
	uint32_t off = s->colocate ? 0 : job_spec_trainer_ranks(s), tp = s->rollout_num_gpus_per_engine;
	for (uint32_t e = 0; e < job_spec_engines(s); e++) {
		int nd;
		uint32_t g[64];
		uint32_t got = place_engine(s, L, e, &nd, g, 64);
		int first = L->slots[off + e * tp].node;
		if (first < 0) {
			if (got || nd != -1) P_FAIL(p, "engine %u unplaced but reported", e);
			continue;
		}
		if (got != tp || nd != first) P_FAIL(p, "engine %u: %u GPUs on %d", e, got, nd);
		for (uint32_t k = 0; k < tp; k++)
			if (L->slots[off + e * tp + k].node != nd || g[k] != L->slots[off + e * tp + k].gpu)
				P_FAIL(p, "engine %u straddles or misreports", e);
	}
}

static uint32_t count_placed_units(prop_ctx *p, const job_spec *s, const place_layout *L)
{
	unit_t u[64];
	uint32_t nu = units_of(s, u), placed = 0;
	for (uint32_t k = 0; k < nu; k++) placed += (uint32_t)unit_state(p, L, u[k]);
	return placed;
}

/* Checks one repair against the layout before it. */
static void check_repair(prop_ctx *p, const job_spec *s, const place_node *nodes, size_t n, const place_slot *old,
			 const place_layout *L, const place_result *res, int rc)
{
	check_layout(p, s, nodes, n, L);
	unit_t u[64];
	uint32_t nu = units_of(s, u), placed = count_placed_units(p, s, L);
	if (res->placed_units != placed || res->pending_units != nu - placed)
		P_FAIL(p, "counts %u/%u, want %u/%u", res->placed_units, res->pending_units, placed, nu - placed);
	if (rc != (placed == nu ? 0 : 1)) P_FAIL(p, "rc %d with %u of %u placed", rc, placed, nu);
	if ((rc == 1) != (res->reason[0] != 0)) P_FAIL(p, "reason '%s' with rc %d", res->reason, rc);
	bool tmoved = false;
	for (uint32_t k = 0; k < nu; k++) {
		bool changed = false, kept = old[u[k].first].node >= 0 && nodes[old[u[k].first].node].alive;
		for (uint32_t j = u[k].first; j < u[k].first + u[k].width; j++) {
			if (old[j].node != L->slots[j].node || (old[j].node >= 0 && old[j].gpu != L->slots[j].gpu))
				changed = true;
		}
		if (kept && changed) P_FAIL(p, "unit at slot %u moved off alive node %d", u[k].first, old[u[k].first].node);
		if (u[k].trainer && changed) tmoved = true;
	}
	if (tmoved != res->trainer_moved) P_FAIL(p, "trainer_moved %d, want %d", res->trainer_moved, tmoved);
	uint32_t off = s->colocate ? 0 : job_spec_trainer_ranks(s), tp = s->rollout_num_gpus_per_engine;
	bool any = false;
	for (uint32_t e = 0; e < job_spec_engines(s); e++) {
		bool changed = false;
		for (uint32_t j = off + e * tp; j < off + e * tp + tp; j++)
			if (old[j].node != L->slots[j].node || (old[j].node >= 0 && old[j].gpu != L->slots[j].gpu))
				changed = true;
		any |= changed;
		if (e < 64 && changed != !!(res->engines_moved & (1ull << e))) P_FAIL(p, "engines_moved bit %u", e);
	}
	if (any != res->engines_moved_any) P_FAIL(p, "engines_moved_any %d, want %d", res->engines_moved_any, any);
}

/* The rule written the slow, obvious way, to compare place_fresh with:
 * nodes by (IPv4 as a 32-bit number before IPv6, then name, then index);
 * each unit on the first alive node with enough free GPUs, lowest ids. */
static bool ref_before(const place_node *x, size_t ix, const place_node *y, size_t iy)
{
	if (x->iplen != y->iplen) return x->iplen < y->iplen;
	if (x->iplen == 4) {
		uint32_t a, b;
		memcpy(&a, x->ip, 4);
		memcpy(&b, y->ip, 4);
		if (ntohl(a) != ntohl(b)) return ntohl(a) < ntohl(b);
	} else if (memcmp(x->ip, y->ip, 16)) {
		return memcmp(x->ip, y->ip, 16) < 0;
	}
	int c = strcmp(x->name, y->name);
	return c ? c < 0 : ix < iy;
}

static int ref_fresh(const job_spec *s, const place_node *nodes, size_t n, place_slot *out)
{
	size_t order[PN_MAX];
	uint64_t used[PN_MAX];
	for (size_t i = 0; i < n; i++) {
		size_t j = i;
		while (j > 0 && ref_before(&nodes[i], i, &nodes[order[j - 1]], order[j - 1])) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
		used[i] = nodes[i].busy;
	}
	unit_t u[64];
	uint32_t nu = units_of(s, u);
	for (uint32_t k = 0; k < nu; k++) {
		bool ok = false;
		for (size_t oi = 0; oi < n && !ok; oi++) {
			size_t i = order[oi];
			uint32_t have = 0;
			for (uint32_t g = 0; g < nodes[i].gpus && g < 64; g++) have += !(used[i] >> g & 1);
			if (!nodes[i].alive || have < u[k].width) continue;
			for (uint32_t g = 0, w = 0; w < u[k].width; g++) {
				if (used[i] >> g & 1) continue;
				used[i] |= 1ull << g;
				out[u[k].first + w++] = (place_slot){(int)i, g};
			}
			ok = true;
		}
		if (!ok) return 1;
	}
	return 0;
}

T_TEST_TIMEOUT(random_clusters_and_jobs, 120)
{
	prop_ctx p = {.seed = t_seed()};
	sk_rng_seed(&p.r, p.seed);
	uint32_t placed = 0, pending = 0, moves = 0;
	for (p.iter = 0; p.iter < 3000; p.iter++) {
		place_node nodes[PN_MAX];
		size_t n = sk_rng_below(&p.r, 9);
		for (size_t i = 0; i < n; i++) rand_node(&p, &nodes[i]);
		job_spec s;
		rand_spec(&p, &s);
		place_layout L = layout_new(&s);
		place_result res;
		p.step = "fresh";
		for (uint32_t i = 0; i < L.nslots; i++) L.slots[i] = (place_slot){(int)sk_rng_below(&p.r, 4) - 1, 99};
		int rc = place_fresh(&s, nodes, n, &L, &res);
		if (rc != 0 && rc != 1) P_FAIL(&p, "place_fresh rc %d", rc);
		check_layout(&p, &s, nodes, n, &L);
		unit_t u[64];
		uint32_t nu = units_of(&s, u), np = count_placed_units(&p, &s, &L);
		if (rc == 0 && (np != nu || res.placed_units != nu || res.pending_units || res.reason[0]))
			P_FAIL(&p, "placed but %u of %u units", np, nu);
		if (rc == 1 && (np != 0 || res.pending_units != nu || !res.reason[0]))
			P_FAIL(&p, "pending but %u units placed", np);
		/* a gang that fits on one fully free alive node is never refused:
		 * every unit finds room there at the latest */
		for (size_t i = 0; i < n && rc == 1; i++) {
			uint32_t cap = nodes[i].gpus > 64 ? 64 : nodes[i].gpus;
			if (nodes[i].alive && !nodes[i].busy && cap >= job_spec_slots(&s))
				P_FAIL(&p, "refused though node %zu alone fits it: %s", i, res.reason);
		}
		place_slot want[256];
		int rrc = ref_fresh(&s, nodes, n, want);
		if (rrc != rc) P_FAIL(&p, "place_fresh rc %d, the plain rule says %d", rc, rrc);
		for (uint32_t i = 0; rc == 0 && i < L.nslots; i++)
			if (want[i].node != L.slots[i].node || want[i].gpu != L.slots[i].gpu)
				P_FAIL(&p, "slot %u on %d/%u, the plain rule says %d/%u", i, L.slots[i].node,
				       L.slots[i].gpu, want[i].node, want[i].gpu);
		rc == 0 ? placed++ : pending++;

		for (int step = 0; step < 4; step++) {
			place_slot old[64 * 3 + 64];
			p.step = "repair";
			if (L.nslots > sizeof old / sizeof old[0]) P_FAIL(&p, "too many slots");
			/* on an unchanged cluster a placed layout stays as it is */
			memcpy(old, L.slots, L.nslots * sizeof *old);
			bool was_placed = count_placed_units(&p, &s, &L) == nu;
			rc = place_repair(&s, nodes, n, &L, &res);
			check_repair(&p, &s, nodes, n, old, &L, &res, rc);
			if (was_placed && (rc != 0 || memcmp(old, L.slots, L.nslots * sizeof *old) != 0))
				P_FAIL(&p, "repair of a placed layout on an unchanged cluster moved units");
			memcpy(old, L.slots, L.nslots * sizeof *old);
			int rc2 = place_repair(&s, nodes, n, &L, &res);
			p.step = "repair twice";
			if (rc2 != rc || memcmp(old, L.slots, L.nslots * sizeof *old) != 0 || res.trainer_moved ||
			    res.engines_moved_any)
				P_FAIL(&p, "a second repair changed something");

			/* change the cluster: deaths, revivals, a new node, other jobs come and go */
			for (size_t i = 0; i < n; i++) {
				uint64_t k = sk_rng_below(&p.r, 8);
				if (k == 0) nodes[i].alive = !nodes[i].alive;
				if (k == 1) nodes[i].busy = (sk_rng_next(&p.r) & sk_rng_next(&p.r)) & ~place_gpus_on(&L, (int)i);
				if (k == 2) nodes[i].busy = 0;
			}
			if (n < PN_MAX && sk_rng_below(&p.r, 3) == 0) rand_node(&p, &nodes[n++]);
			p.step = "repair after change";
			memcpy(old, L.slots, L.nslots * sizeof *old);
			rc = place_repair(&s, nodes, n, &L, &res);
			check_repair(&p, &s, nodes, n, old, &L, &res, rc);
			moves += res.trainer_moved + res.engines_moved_any;
		}
		free(L.slots);
	}
	/* the generator must exercise both outcomes */
	T_CHECK(placed > 300 && pending > 300 && moves > 300);
	printf("  %u placed, %u pending, %u repairs that moved members\n", placed, pending, moves);
}

/* A fully alive placed layout is never touched by repair, whatever else. */
T_TEST(repair_of_alive_layout_is_noop)
{
	prop_ctx p = {.seed = t_seed() ^ 0x5eed};
	sk_rng_seed(&p.r, p.seed);
	p.step = "noop";
	int done = 0;
	for (p.iter = 0; p.iter < 2000; p.iter++) {
		place_node nodes[PN_MAX];
		size_t n = 1 + sk_rng_below(&p.r, 8);
		for (size_t i = 0; i < n; i++) {
			rand_node(&p, &nodes[i]);
			nodes[i].alive = true;
		}
		job_spec s;
		rand_spec(&p, &s);
		place_layout L = layout_new(&s);
		place_result res;
		if (place_fresh(&s, nodes, n, &L, &res) == 0) {
			place_slot old[256];
			memcpy(old, L.slots, L.nslots * sizeof *old);
			/* other jobs fill every GPU this job does not use */
			for (size_t i = 0; i < n; i++) nodes[i].busy = ~place_gpus_on(&L, (int)i);
			if (place_repair(&s, nodes, n, &L, &res) != 0 || res.trainer_moved || res.engines_moved_any ||
			    memcmp(old, L.slots, L.nslots * sizeof *old) != 0)
				P_FAIL(&p, "repair moved an alive layout");
			done++;
		}
		free(L.slots);
	}
	T_CHECK(done > 500);
}
