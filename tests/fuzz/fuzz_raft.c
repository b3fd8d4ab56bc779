/* tests/fuzz/fuzz_raft: Raft messages between voters.
 *
 * The input goes through raft_codec_decode as it comes, and again inside a
 * well-formed frame header so the protobuf decoder and the field checks
 * are reached.  Whatever decodes is encoded again and must decode to the
 * same message (the codec's round trip); entries of the job types and a
 * snapshot's bytes then go where a voter applies them (jobs/job_state.c). */
#include "tests/fuzz/fuzz.h"

#include "jobs/job_state.h"
#include "raft/raft_codec.h"

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
	one(data, size);
	if (size < 1 << 20) {
		uint8_t *buf = malloc(size + WIRE_HDR_LEN);
		if (!buf) abort();
		wire_frame_header(buf, 0, size);
		if (size) memcpy(buf + WIRE_HDR_LEN, data, size);
		one(buf, size + WIRE_HDR_LEN);
		free(buf);
	}
	return 0;
}
