/* tests/fuzz/fuzz_raft: Raft messages between voters.
 *
 * The input goes through raft_codec_decode as it comes, and again inside a
 * well-formed frame header so the protobuf decoder and the field checks
 * are reached.  Whatever decodes is encoded again and must decode to the
 * same message (the codec's round trip); entries of the job types and a
 * snapshot's bytes then go where a voter applies them (jobs/job_state.c).
 * Both frames are also delivered to a live follower (voters fuzz, n1, n2;
 * in-memory storage, restarted every 2000 inputs so it stays small), whose
 * committed entries and snapshots go to the key-value and jobs state
 * machines as the agent applies them. */
#include "tests/fuzz/fuzz.h"

#include "jobs/job_state.h"
#include "raft/raft_codec.h"
#include "raft/raft_kv.h"

static struct {
	raft_t *r;
	raft_storage *st;
	raft_kv *kv;
	job_state *js;
	uint64_t now, inputs;
} node;

static void node_restart(void)
{
	raft_destroy(&node.r);
	raft_mem_storage_free(&node.st);
	raft_kv_destroy(&node.kv);
	job_state_free(&node.js);
	raft_config c;
	raft_config_profile(&c, "fast");
	raft_self self = { "fuzz", 1 };
	const char *names[] = { "fuzz", "n1", "n2" };
	raft_voters v;
	char err[200];
	node.st = raft_mem_storage_new();
	node.kv = raft_kv_new();
	node.js = job_state_new();
	node.now = 1000;
	if (!node.st || !node.kv || !node.js || raft_voters_make(&v, names, 3, err, sizeof err) != 0 ||
	    !(node.r = raft_new(&c, &self, node.st, node.now, err, sizeof err)) ||
	    raft_bootstrap(node.r, node.now, &v, err, sizeof err) != 0)
		abort();
}

/* One message to the follower, then whatever it does about it. */
static void deliver(const uint8_t *buf, size_t len)
{
	node.now += 3;
	raft_recv(node.r, node.now, buf, len);
	raft_tick(node.r, node.now);
	raft_out o;
	while (raft_pop_out(node.r, &o)) free(o.data);
	raft_apply a;
	char err[200];
	while (raft_pop_apply(node.r, &a)) {
		if (a.kind == RAFT_APPLY_SNAPSHOT) {
			raft_kv_restore(node.kv, a.data, a.len, err, sizeof err);
			job_state_restore(node.js, a.data, a.len, err, sizeof err);
		} else {
			raft_kv_apply(node.kv, a.type, a.data, a.len);
			job_state_apply(node.js, a.type, a.data, a.len);
		}
	}
	raft_event ev;
	while (raft_pop_event(node.r, &ev)) {}
}

static void same(const raft_msg *a, const raft_msg *b)
{
	FUZZ_CHECK(a->type == b->type && a->term == b->term && !strcmp(a->from, b->from));
	FUZZ_CHECK(a->prevote == b->prevote && a->granted == b->granted && a->success == b->success &&
		   a->transfer == b->transfer);
	FUZZ_CHECK(a->last_index == b->last_index && a->last_term == b->last_term);
	FUZZ_CHECK(a->prev_index == b->prev_index && a->prev_term == b->prev_term && a->commit == b->commit &&
		   a->echo == b->echo);
	FUZZ_CHECK(a->offset == b->offset && a->total == b->total && a->nentries == b->nentries);
	for (size_t i = 0; i < a->nentries; i++) {
		const raft_entry *x = &a->entries[i], *y = &b->entries[i];
		FUZZ_CHECK(x->index == y->index && x->term == y->term && x->type == y->type && x->len == y->len);
		FUZZ_CHECK(!x->len || !memcmp(x->data, y->data, x->len));
	}
	FUZZ_CHECK(!a->snap == !b->snap);
	if (a->snap) {
		FUZZ_CHECK(a->snap->index == b->snap->index && a->snap->term == b->snap->term);
		FUZZ_CHECK(a->snap->voters.n == b->snap->voters.n);
		for (size_t i = 0; i < a->snap->voters.n; i++)
			FUZZ_CHECK(!strcmp(a->snap->voters.names[i], b->snap->voters.names[i]));
		FUZZ_CHECK(a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len)));
	}
}

static void one(const uint8_t *buf, size_t len)
{
	raft_decoded d;
	if (raft_codec_decode(buf, len, &d) != WIRE_OK) return;
	FUZZ_CHECK(raft_name_ok(d.msg.from));
	uint8_t *out;
	size_t olen;
	FUZZ_CHECK(raft_codec_encode(&d.msg, &out, &olen) == 0);
	raft_decoded e;
	FUZZ_CHECK(raft_codec_decode(out, olen, &e) == WIRE_OK);
	same(&d.msg, &e.msg);
	raft_codec_free(&e);
	free(out);

	job_state *js = job_state_new();
	if (!js) abort();
	for (size_t i = 0; i < d.msg.nentries; i++)
		job_state_apply(js, d.msg.entries[i].type, d.msg.entries[i].data, d.msg.entries[i].len);
	if (d.msg.type == RAFT_MSG_SNAP_REQ) {
		char err[200];
		job_state_restore(js, d.msg.data, d.msg.len, err, sizeof err);
	}
	job_state_free(&js);
	raft_codec_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (node.inputs++ % 2000 == 0) node_restart();
	one(data, size);
	deliver(data, size);
	if (size < 1 << 20) {
		uint8_t *buf = malloc(size + WIRE_HDR_LEN);
		if (!buf) abort();
		wire_frame_header(buf, 0, size);
		if (size) memcpy(buf + WIRE_HDR_LEN, data, size);
		one(buf, size + WIRE_HDR_LEN);
		deliver(buf, size + WIRE_HDR_LEN);
		free(buf);
	}
	return 0;
}
