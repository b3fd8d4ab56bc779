/* tests/unit/wv_compact_test: compact update records (issue 25, item 3;
 * jobs/wv_codec.c).
 *
 * At 8,192 engines (the new cap): the begin record names its participants
 * as a bitmap, the final one adds a bitmap of the verified and the losses
 * with reason codes, the measured amendment is bare; each is measured in
 * bytes against the budget (8 KB an update), decodes to the same
 * participants by id, applies on wv_state in order and survives a
 * snapshot.  Hostile compact records (a loss of no participant, an unknown
 * code, verdicts in an open record, too many engines, a bare record that
 * amends nothing) are refused with a reason. */
#include "tests/t.h"

#include <stdlib.h>

#include "jobs/wv_coord.h"
#include "jobs/wv_state.h"
#include "proto/weights.pb-c.h"

enum { N = WV_ENGINES_MAX };

/* The begin record of job "big" v2 as the head builds it: N engines, ids
 * 0..N-1 but every 9th left out (not running), compact. */
static void begin_rec(wv_update *u)
{
	memset(u, 0, sizeof *u);
	snprintf(u->job, sizeof u->job, "big");
	u->version = 2;
	u->base_version = 1;
	snprintf(u->mode, sizeof u->mode, "p2p-tcp");
	snprintf(u->sender, sizeof u->sender, "big/trainer-0");
	snprintf(u->sender_node, sizeof u->sender_node, "n0");
	snprintf(u->state, sizeof u->state, "preparing");
	u->reason = strdup("");
	u->engines = calloc(N, sizeof *u->engines);
	T_CHECK(u->reason && u->engines);
	for (uint32_t id = 0; id < N + N / 8 && u->nengines < N; id++) {
		if (id % 9 == 8) continue;
		wv_engine *e = &u->engines[u->nengines++];
		snprintf(e->member, sizeof e->member, "big/engine-%u", id);
		snprintf(e->node, sizeof e->node, "n%u", 1 + id / 8);
		snprintf(e->state, sizeof e->state, "pending");
		e->reason = strdup("");
	}
	T_EQ(u->nengines, N);
	memset(u->nonce, 7, WV_NONCE_LEN);
	u->has_nonce = true;
	memset(u->root, 9, WV_DIGEST_LEN);
	u->has_root = true;
	u->started_ms = 1700000000000ull;
	u->compact = true;
}

static size_t encode_len(const wv_update *u, uint8_t **out)
{
	size_t len;
	T_EQ(wv_update_encode(u, out, &len), 0);
	return len;
}

T_TEST(compact_records_of_8192_engines_fit_8_kb)
{
	char err[256];
	wv_update b, d;
	begin_rec(&b);
	uint8_t *data;
	size_t blen = encode_len(&b, &data);
	printf("  begin: %zu bytes for %zu engines\n", blen, b.nengines);
	T_LE(blen, 1400);
	if (wv_update_decode(&d, data, blen, err, sizeof err) < 0) T_FAIL("decode: %s", err);
	T_CHECK(d.compact && d.nengines == N);
	for (size_t i = 0; i < N; i++) {
		T_STREQ(d.engines[i].member, b.engines[i].member); /* by id: the begin's order */
		T_STREQ(d.engines[i].state, "pending");
		T_STREQ(d.engines[i].node, "");
	}
	T_CHECK(wv_update_engine(&d, "big/engine-9000") == &d.engines[8000]);
	T_CHECK(wv_update_engine(&d, "big/engine-8") == NULL);   /* left out */
	T_CHECK(wv_update_engine(&d, "big/engine-08") == NULL);  /* no such member */
	wv_state *s = wv_state_new();
	T_EQ(wv_state_apply(s, data, blen), 0);
	free(data);
	wv_update_free(&d);

	/* the coordinator: node 3's engines lost, one failure, the rest verified */
	wv_coord c;
	T_EQ(wv_coord_start(&c, &b, 10, 30000, true, false), 0);
	wv_coord_begun(&c, 10.1);
	T_CHECK(!wv_coord_done(&c, 11, true, "", NULL, 1, 1 << 30, 1, (wv_timings){ 0 }));
	for (size_t i = 0; i < N; i++) {
		const char *node = c.rec.engines[i].node;
		if (!strcmp(node, "n3")) wv_coord_lose(&c, i, 12, "its node failed", false, false);
		else if (i != 100) wv_coord_staged(&c, i, 12, 0.5 + i * 1e-4, (wv_timings){ 0.25, 0.125, 0, 0 }, c.rec.root);
	}
	T_CHECK(!c.final);
	T_CHECK(wv_coord_staged(&c, 100, 13, 2.5, (wv_timings){ 1.5, 0.125, 0, 0 }, c.rec.root));
	T_STREQ(c.final_state, "committed");
	wv_update f;
	T_EQ(wv_coord_final(&c, 13.5, 1700000003500ull, &f), 0);
	size_t flen = encode_len(&f, &data);
	printf("  final: %zu bytes\n", flen);
	T_LE(flen, 2600);
	T_EQ(wv_state_apply(s, data, flen), 0);
	free(data);
	const wv_update *r = wv_state_get(s, "big", 2);
	T_STREQ(r->state, "committed");
	size_t dropped = 0;
	for (size_t i = 0; i < r->nengines; i++) {
		if (!strcmp(r->engines[i].state, "dropped")) {
			dropped++;
			T_STREQ(r->engines[i].reason, "its node failed");
		} else {
			T_STREQ(r->engines[i].state, "verified");
		}
	}
	T_EQ(dropped, 8 - 1); /* n3 holds ids 16..23 but for 17 (17 % 9 == 8) */
	T_EQ(r->engines_seconds * 2, 5);
	T_EQ(wv_update_slowest(r).data * 2, 3);
	T_EQ(wv_state_committed(s, "big"), 2);

	/* the amendment: a few bytes, only its figures taken */
	wv_update m;
	T_EQ(wv_coord_measured(&c, r, 14, 1700000004000ull, &m), 0);
	size_t mlen = encode_len(&m, &data);
	printf("  measured: %zu bytes (an update: %zu)\n", mlen, blen + flen + mlen);
	T_LE(mlen, 64);
	T_LE(blen + flen + mlen, 8192);
	T_EQ(wv_state_apply(s, data, mlen), 0);
	T_EQ(wv_state_apply(s, data, mlen), -1); /* once */
	r = wv_state_get(s, "big", 2);
	T_CHECK(r->measured && r->update_seconds == 4 && r->nengines == N);
	free(data);
	wv_update_free(&m);
	wv_update_free(&f);

	/* a snapshot keeps the compact record whole (not bare) */
	uint8_t *snap;
	size_t slen;
	T_EQ(wv_state_serialize(s, &snap, &slen), 0);
	wv_state *s2 = wv_state_new();
	if (wv_state_restore(s2, snap, slen, err, sizeof err) < 0) T_FAIL("restore: %s", err);
	r = wv_state_get(s2, "big", 2);
	T_CHECK(r && r->measured && r->nengines == N && r->update_seconds == 4 && !strcmp(r->state, "committed"));
	free(snap);
	wv_coord_free(&c);
	wv_state_free(&s);
	wv_state_free(&s2);
}

/* A packed Update of job "j" v3 preparing/state with participants bits. */
static size_t pack(uint8_t *buf, const char *state, const uint8_t *bits, size_t nb, const uint8_t *ver, size_t nv,
		   Skein__Weights__Loss **loss, size_t nloss)
{
	Skein__Weights__Update p = SKEIN__WEIGHTS__UPDATE__INIT;
	p.job = "j";
	p.version = 3;
	p.base_version = 2;
	p.mode = "p2p-tcp";
	p.sender = "j/trainer-0";
	p.sender_node = "n1";
	p.state = (char *)state;
	p.cause = (char *)(strcmp(state, "aborted") ? "" : "engine");
	p.participants.data = (uint8_t *)bits;
	p.participants.len = nb;
	p.verified.data = (uint8_t *)ver;
	p.verified.len = nv;
	p.losses = loss;
	p.n_losses = nloss;
	return skein__weights__update__pack(&p, buf);
}

static void refused(const uint8_t *buf, size_t n, const char *what)
{
	wv_update d;
	char err[256] = "";
	if (wv_update_decode(&d, buf, n, err, sizeof err) == 0) T_FAIL("%s: decoded", what);
	if (!err[0]) T_FAIL("%s: no reason", what);
	printf("  %s: %s\n", what, err);
}

T_TEST(hostile_compact_records_are_refused)
{
	static uint8_t buf[1 << 16], big[WV_ENGINE_IDS / 8 + 1];
	uint8_t bits[1] = { 0x05 }, ver[1] = { 0x01 };
	Skein__Weights__Loss l = SKEIN__WEIGHTS__LOSS__INIT, *lp = &l;
	wv_update d;
	char err[256];
	/* a fine one: engines 0 and 2, 0 verified, 2 failed (code 4) */
	l.engine = 2;
	l.why = 4;
	size_t n = pack(buf, "aborted", bits, 1, ver, 1, &lp, 1);
	if (wv_update_decode(&d, buf, n, err, sizeof err) < 0) T_FAIL("decode: %s", err);
	T_EQ(d.nengines, 2);
	T_STREQ(d.engines[1].member, "j/engine-2");
	T_STREQ(d.engines[1].state, "failed");
	T_STREQ(d.engines[1].reason, "the sender could not reach it");
	T_STREQ(d.engines[0].state, "verified");
	wv_update_free(&d);
	l.engine = 1;
	refused(buf, pack(buf, "aborted", bits, 1, ver, 1, &lp, 1), "a loss of no participant");
	l.engine = 0;
	refused(buf, pack(buf, "aborted", bits, 1, ver, 1, &lp, 1), "a loss of a verified engine");
	l.engine = 2;
	l.why = WV_NWHYS;
	refused(buf, pack(buf, "aborted", bits, 1, ver, 1, &lp, 1), "an unknown why");
	l.why = 0;
	Skein__Weights__Loss *two[2] = { &l, &l };
	refused(buf, pack(buf, "aborted", bits, 1, ver, 1, two, 2), "one loss twice");
	refused(buf, pack(buf, "preparing", bits, 1, ver, 1, NULL, 0), "verdicts in an open record");
	refused(buf, pack(buf, "committed", bits, 1, NULL, 0, NULL, 0), "committed with pending engines");
	memset(big, 0xff, sizeof big);
	refused(buf, pack(buf, "preparing", big, sizeof big, NULL, 0, NULL, 0), "a bitmap beyond the ids");
	refused(buf, pack(buf, "preparing", big, WV_ENGINES_MAX / 8 + 1, NULL, 0, NULL, 0), "8200 engines");
	/* the cap itself passes */
	if (wv_update_decode(&d, buf, pack(buf, "preparing", big, WV_ENGINES_MAX / 8, NULL, 0, NULL, 0), err,
			     sizeof err) < 0)
		T_FAIL("8192 engines: %s", err);
	T_EQ(d.nengines, WV_ENGINES_MAX);
	wv_update_free(&d);
	/* a bare amendment of nothing, or of another state, is refused */
	wv_state *s = wv_state_new();
	Skein__Weights__Update p = SKEIN__WEIGHTS__UPDATE__INIT;
	p.job = "j";
	p.version = 3;
	p.state = "committed";
	p.measured = true;
	p.update_seconds = 1;
	n = skein__weights__update__pack(&p, buf);
	T_EQ(wv_state_apply(s, buf, n), -1);
	n = pack(buf, "preparing", bits, 1, NULL, 0, NULL, 0);
	T_EQ(wv_state_apply(s, buf, n), 0);
	p.state = "committed";
	n = skein__weights__update__pack(&p, buf);
	T_EQ(wv_state_apply(s, buf, n), -1); /* the record is open */
	p.update_seconds = -1;
	n = skein__weights__update__pack(&p, buf);
	refused(buf, n, "a bare amendment with negative seconds");
	wv_state_free(&s);
}
