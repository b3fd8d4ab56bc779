/* tests/unit/job_model_test: jobs/job_model (the plain C layout) and
 * jobs/job_codec (the layout and the update record in protobuf).
 *
 * Checks a layout's sizes from its spec, the trip through placement's node
 * indices and back (unknown names unplaced, the change bits per trainer
 * and engine slot), that an update packed from a record and a layout reads
 * back the same layout with the state, reason and version + 1 (or keeps
 * the old layout when given none), that encode(decode(x)) == x, and that
 * bad bytes or a Job without a spec do not decode. */
#include "tests/t.h"

#include <stdlib.h>
#include <string.h>

#include "jobs/job_codec.h"
#include "jobs/job_model.h"
#include "proto/jobs.pb-c.h"

/* split: 1 trainer node of 4 GPUs, 2 engines of 2 GPUs (8 slots) */
static void spec_split(job_spec *s)
{
	char err[256];
	job_spec_defaults(s);
	snprintf(s->name, sizeof s->name, "j");
	s->actor_num_nodes = 1;
	s->actor_num_gpus_per_node = 4;
	s->rollout_num_gpus = 4;
	s->rollout_num_gpus_per_engine = 2;
	snprintf(s->trainer_cmd, sizeof s->trainer_cmd, "train");
	snprintf(s->rollout_cmd, sizeof s->rollout_cmd, "serve");
	if (job_spec_validate(s, err, sizeof err) != 0) T_FAIL("spec: %s", err);
}

static void fill(job_layout *L)
{
	for (uint32_t i = 0; i < L->n; i++) {
		snprintf(L->node[i], sizeof L->node[i], "%s", i < 4 ? "a" : "b");
		L->gpu[i] = i % 4;
	}
	L->trainer_gen = 3;
	L->trainer_failures = 2;
	snprintf(L->master_addr, sizeof L->master_addr, "10.0.0.1");
	L->master_port = 29500;
	for (uint32_t e = 0; e < L->neng; e++) L->engine_gen[e] = 10 + e, L->engine_restarts[e] = 20 + e;
}

T_TEST(layout_sizes_and_engines)
{
	job_spec s;
	job_layout L;
	spec_split(&s);
	T_EQ(job_layout_init(&L, &s), 0);
	T_EQ(L.n, 8);
	T_EQ(L.neng, 2);
	T_CHECK(!job_layout_trainer_placed(&L, 4));
	fill(&L);
	T_CHECK(job_layout_trainer_placed(&L, 4));
	T_STREQ(job_layout_engine_node(&s, &L, 0), "b");
	T_STREQ(job_layout_engine_node(&s, &L, 2), ""); /* no engine 2 */
	job_layout_free(&L);
	job_layout_free(&L); /* safe twice */
}

T_TEST(place_round_trip)
{
	job_spec s;
	job_layout L;
	spec_split(&s);
	T_EQ(job_layout_init(&L, &s), 0);
	fill(&L);
	snprintf(L.node[6], sizeof L.node[6], "gone"); /* engine 1 on a node placement does not know */
	place_node nodes[2] = { 0 };
	snprintf(nodes[0].name, sizeof nodes[0].name, "b");
	snprintf(nodes[1].name, sizeof nodes[1].name, "a");
	T_EQ(job_node_index(nodes, 2, "a"), 1);
	T_EQ(job_node_index(nodes, 2, "zz"), -1);
	place_layout pl;
	T_EQ(job_layout_to_place(&L, nodes, 2, &pl), 0);
	T_EQ(pl.nslots, 8);
	T_EQ(pl.slots[0].node, 1);
	T_EQ(pl.slots[4].node, 0);
	T_EQ(pl.slots[6].node, -1);
	bool eng[2] = { false, false };
	T_EQ(job_layout_from_place(&s, &L, &pl, nodes, eng), 2); /* only slot 6 differs: engine 1 */
	T_CHECK(!eng[0] && eng[1]);
	T_STREQ(L.node[6], "");
	pl.slots[0].node = 0; /* trainer rank 0 moves to b */
	eng[1] = false;
	T_EQ(job_layout_from_place(&s, &L, &pl, nodes, eng), 1);
	T_STREQ(L.node[0], "b");
	T_CHECK(!eng[0] && !eng[1]);
	T_EQ(job_layout_from_place(&s, &L, &pl, nodes, eng), 0); /* nothing left to change */
	free(pl.slots);
	job_layout_free(&L);
}

static void same_layout(const job_layout *x, const job_layout *y)
{
	T_EQ(x->n, y->n);
	T_EQ(x->neng, y->neng);
	for (uint32_t i = 0; i < x->n; i++) {
		T_STREQ(x->node[i], y->node[i]);
		T_EQ(x->gpu[i], y->gpu[i]);
	}
	T_EQ(x->trainer_gen, y->trainer_gen);
	T_EQ(x->trainer_failures, y->trainer_failures);
	T_STREQ(x->master_addr, y->master_addr);
	T_EQ(x->master_port, y->master_port);
	for (uint32_t e = 0; e < x->neng; e++) {
		T_EQ(x->engine_gen[e], y->engine_gen[e]);
		T_EQ(x->engine_restarts[e], y->engine_restarts[e]);
	}
}

T_TEST(codec_update_round_trip)
{
	job_spec s;
	job_layout L, M, E;
	spec_split(&s);
	T_EQ(job_layout_init(&L, &s), 0);
	fill(&L);
	job_rec old = { .spec = s, .state = (char *)"pending", .reason = (char *)"", .seq = 7, .version = 4,
			.submit_token = (char *)"tok", .submitted_ms = 123 };
	T_CHECK(!job_rec_placed(&old));
	T_EQ(job_rec_layout(&E, &old, &s), 0); /* no layout: an empty one, sized */
	T_EQ(E.n, 8);
	T_STREQ(E.node[0], "");
	uint8_t *p;
	size_t len;
	job_rec j, k;
	T_EQ(job_codec_update(&old, "running", "placed", &L, &p, &len), 0);
	T_EQ(job_codec_decode(&j, p, len), 0);
	free(p);
	T_STREQ(j.state, "running");
	T_STREQ(j.reason, "placed");
	T_STREQ(j.submit_token, "tok");
	T_STREQ(j.spec.trainer_cmd, "train");
	T_EQ(j.version, 5);
	T_EQ(j.seq, 7);
	T_EQ(j.submitted_ms, 123);
	T_CHECK(job_rec_placed(&j));
	T_EQ(job_rec_layout(&M, &j, &s), 0);
	same_layout(&L, &M);
	/* no layout given: the old one stays; and encode(decode(x)) == x */
	T_EQ(job_codec_update(&j, "stopped", NULL, NULL, &p, &len), 0);
	T_EQ(job_codec_decode(&k, p, len), 0);
	T_STREQ(k.reason, "");
	T_EQ(k.version, 6);
	job_layout_free(&M);
	T_EQ(job_rec_layout(&M, &k, &s), 0);
	same_layout(&L, &M);
	uint8_t *q;
	size_t qlen;
	T_EQ(job_codec_encode(&k, &q, &qlen), 0);
	T_EQ(qlen, len);
	T_CHECK(memcmp(p, q, len) == 0);
	free(p);
	free(q);
	/* bytes that are not a Job, and a Job without a spec */
	job_rec_free(&k);
	uint8_t junk[4] = { 0xff, 0xff, 0xff, 0xff };
	T_EQ(job_codec_decode(&k, junk, sizeof junk), -1);
	Skein__Jobs__Job bare = SKEIN__JOBS__JOB__INIT;
	bare.state = (char *)"running";
	T_EQ(job_codec_pack(&bare, &p, &len), 0);
	T_EQ(job_codec_decode(&k, p, len), -1);
	free(p);
	job_rec_free(&j);
	job_rec_free(&j); /* safe twice */
	job_layout_free(&E);
	job_layout_free(&L);
	job_layout_free(&M);
}
