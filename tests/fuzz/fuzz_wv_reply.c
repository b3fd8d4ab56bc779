/* tests/fuzz/fuzz_wv_reply: what libskein reads back from its agent during
 * a coordinated update (transfer/update/update_msg.c): the head's BeginReply to a
 * sender's begin, the Instruction an engine's wait is answered with, and the
 * Outcome of a version.  fuzz_wv covers the head's own table; these are the
 * other end, parsed in the trainer's and the engines' processes.
 *
 * Every input goes to all three parsers, so none waits for the fuzzer to
 * guess which one it is.  Properties: a refused answer leaves nothing
 * allocated and nothing set (peers NULL, setup NULL); an accepted one keeps
 * the promises of update.h: every string ends inside its field, the
 * state or kind is one of those named, the peers and ranks are within their
 * bounds, a setup is 0 or 128 bytes (colocated: at most 512 KiB), and only
 * an idle instruction has version 0. */
#include "tests/fuzz/fuzz.h"

#include "transfer/update/update.h"

static int ends_in(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

static int one_of(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (!strcmp(s, *set)) return 1;
	return 0;
}

static void begin_reply(const uint8_t *data, size_t size)
{
	xfer_upd_begin_reply r;
	xfer_err err = { 0 };
	if (xfer_upd_begin_reply_parse(data, size, &r, &err) != 0) {
		FUZZ_CHECK(err.code == XFER_EFORMAT || err.code == XFER_ENOMEM);
		FUZZ_CHECK(!r.peers && r.npeers == 0);
		return;
	}
	FUZZ_CHECK(r.npeers <= XFER_UPD_PEERS_MAX);
	FUZZ_CHECK(r.timeout_ms >= 0);
	FUZZ_CHECK(r.peers || r.npeers == 0);
	for (size_t i = 0; i < r.npeers; i++) {
		const xfer_upd_peer *p = &r.peers[i];
		FUZZ_CHECK(ends_in(p->member, sizeof p->member) && ends_in(p->node, sizeof p->node) &&
			   ends_in(p->endpoint, sizeof p->endpoint));
		FUZZ_CHECK(p->rank >= 0 && p->rank <= XFER_UPD_PEERS_MAX);
	}
	xfer_upd_begin_reply_free(&r);
	FUZZ_CHECK(!r.peers && r.npeers == 0);
}

static void outcome(const uint8_t *data, size_t size)
{
	xfer_upd_outcome o;
	xfer_err err = { 0 };
	if (xfer_upd_outcome_parse(data, size, &o, &err) != 0) {
		FUZZ_CHECK(err.code == XFER_EFORMAT);
		return;
	}
	FUZZ_CHECK(o.state >= XFER_UPD_UNKNOWN && o.state <= XFER_UPD_ABORTED);
	FUZZ_CHECK(ends_in(o.reason, sizeof o.reason));
	FUZZ_CHECK(o.dropped <= o.participants || o.participants == UINT32_MAX);
	FUZZ_CHECK(o.has_record || (o.participants == 0 && o.dropped == 0 && o.wire_bytes == 0));
	FUZZ_CHECK(!(o.engine_seconds < 0) && !(o.engine_seconds >= 1e9));
}

static void instruction(const uint8_t *data, size_t size)
{
	static const char *const kinds[] = { "idle", "receive", "commit", "abort", "catchup", "serve", NULL };
	xfer_upd_instr in;
	xfer_err err = { 0 };
	if (xfer_upd_instr_parse(data, size, &in, &err) != 0) {
		FUZZ_CHECK(err.code == XFER_EFORMAT || err.code == XFER_ENOMEM);
		FUZZ_CHECK(!in.setup && in.setup_len == 0);
		return;
	}
	FUZZ_CHECK(ends_in(in.kind, sizeof in.kind) && one_of(in.kind, kinds));
	FUZZ_CHECK(ends_in(in.mode, sizeof in.mode) && ends_in(in.peer, sizeof in.peer) &&
		   ends_in(in.reason, sizeof in.reason));
	FUZZ_CHECK(in.version != 0 || !strcmp(in.kind, "idle"));
	FUZZ_CHECK(in.timeout_ms >= 0 && in.nranks >= 0 && in.nranks <= XFER_UPD_PEERS_MAX + 1);
	FUZZ_CHECK(in.rank >= 0 && (in.rank < in.nranks || in.rank == 0));
	FUZZ_CHECK((in.setup != NULL) == (in.setup_len != 0));
	if (!strcmp(in.mode, "colocated")) FUZZ_CHECK(in.setup_len <= XFER_UPD_SETUP_MAX);
	else FUZZ_CHECK(in.setup_len == 0 || in.setup_len == XFER_NCCL_ID_BYTES);
	if (in.setup_len) FUZZ_CHECK(!memcmp(in.setup, in.setup, in.setup_len)); /* ASan: readable */
	xfer_upd_instr_free(&in);
	FUZZ_CHECK(!in.setup && in.setup_len == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	begin_reply(data, size);
	outcome(data, size);
	instruction(data, size);
	return 0;
}
