/* tests/unit/codec_test: the gossip frame and codec.  Round trips of every
 * message type, and fuzz-style runs: random bytes, truncations and bit flips
 * of valid packets fed to every decoder, which must reject them with a
 * reason (never crash, never accept garbage as valid fields).  Under
 * BUILD=asan this also checks every byte read stays in bounds. */
#include "tests/t.h"

#include "common/sk_rng.h"
#include "membership/mbr.h"
#include "membership/mbr_codec.h"
#include "proto/wire_frame.h"

static mbr_addr A(uint8_t last, uint16_t port)
{
	mbr_addr a = { .len = 4, .port = port };
	a.ip[0] = 127; a.ip[3] = last;
	return a;
}

/* Builds a frame of the given messages; caller frees p->buf. */
static void build(mbr_pkt *p, const mbr_msg *msgs, size_t n, bool stream)
{
	mbr_pkt_init(p, 256);
	for (size_t i = 0; i < n; i++) {
		uint8_t *b; size_t l;
		T_EQ(mbr_codec_encode_msg(&msgs[i], &b, &l), 0);
		T_EQ(mbr_pkt_add(p, b, l), 0);
		free(b);
	}
	mbr_pkt_finish(p, stream ? WIRE_F_STREAM : 0);
}

T_TEST(frame_header_rules)
{
	uint8_t buf[WIRE_HDR_LEN + 4] = { 0 };
	wire_frame f;
	wire_frame_header(buf, 0, 4);
	T_EQ(wire_frame_parse(buf, sizeof buf, 1400, &f), WIRE_OK);
	T_EQ(f.len, 4);
	T_EQ(wire_frame_parse(buf, sizeof buf - 1, 1400, &f), WIRE_ERR_SHORT);
	T_EQ(wire_frame_parse(buf, 3, 1400, &f), WIRE_ERR_SHORT);
	T_EQ(wire_frame_parse(buf, sizeof buf, 3, &f), WIRE_ERR_LENGTH);
	uint8_t longer[WIRE_HDR_LEN + 5];
	memcpy(longer, buf, sizeof buf);
	T_EQ(wire_frame_parse(longer, sizeof longer, 1400, &f), WIRE_ERR_LENGTH);
	buf[2] = WIRE_VERSION + 1;
	T_EQ(wire_frame_parse(buf, sizeof buf, 1400, &f), WIRE_ERR_VERSION);
	buf[2] = WIRE_VERSION;
	buf[0] = 'X';
	T_EQ(wire_frame_parse(buf, sizeof buf, 1400, &f), WIRE_ERR_MAGIC);
	T_EQ(wire_frame_parse(NULL, 0, 1400, &f), WIRE_ERR_SHORT);
	/* a length field of 4 GiB - 1 must not wrap anything */
	wire_frame_header(buf, 0, 0xffffffffu);
	T_EQ(wire_frame_parse(buf, sizeof buf, WIRE_STREAM_MAX, &f), WIRE_ERR_LENGTH);
	T_STREQ(wire_err_str(WIRE_ERR_VERSION), "unsupported version");
}

/* The transport caps a stream by the type peeked from its first bytes: a
 * push-pull is told from the rest at every prefix long enough, a shorter
 * prefix asks for more, junk is refused. */
T_TEST(stream_type_peek)
{
	mbr_wire_state st[1] = { { "a", A(1, 10), 3, 4, MBR_ALIVE, NULL, 0 } };
	mbr_msg pp = { .type = MBR_MSG_PUSHPULL, .from = "s", .src_addr = A(7, 5), .states = st, .nstates = 1 };
	mbr_msg ping = { .type = MBR_MSG_PING, .seq = 7, .name = "t", .from = "s", .src_addr = A(3, 1) };
	mbr_msg ack = { .type = MBR_MSG_ACK, .seq = 9 };
	struct { const mbr_msg *m; mbr_peek want; } cases[] = {
		{ &pp, MBR_PEEK_PUSHPULL }, { &ping, MBR_PEEK_OTHER }, { &ack, MBR_PEEK_OTHER },
	};
	for (size_t c = 0; c < 3; c++) {
		mbr_pkt p;
		build(&p, cases[c].m, 1, true);
		/* header 8 bytes, packet tag 1, length varint 1 (short messages), body tag 1 */
		for (size_t n = 0; n < WIRE_HDR_LEN + 3; n++) T_EQ(mbr_peek_stream(p.buf, n), MBR_PEEK_MORE);
		for (size_t n = WIRE_HDR_LEN + 3; n <= p.len; n++) T_EQ(mbr_peek_stream(p.buf, n), cases[c].want);
		p.buf[WIRE_HDR_LEN] = 0x12; /* not Packet field 1 */
		T_EQ(mbr_peek_stream(p.buf, p.len), MBR_PEEK_BAD);
		p.buf[0] = 'X';
		T_EQ(mbr_peek_stream(p.buf, 1), MBR_PEEK_MORE);
		T_EQ(mbr_peek_stream(p.buf, 2), MBR_PEEK_BAD);
		mbr_pkt_free(&p);
	}
	/* an empty packet is whole at the header: not a push-pull */
	uint8_t hdr[WIRE_HDR_LEN];
	wire_frame_header(hdr, WIRE_F_STREAM, 0);
	T_EQ(mbr_peek_stream(hdr, sizeof hdr), MBR_PEEK_OTHER);
	/* a length varint that never ends */
	uint8_t longv[WIRE_HDR_LEN + 8];
	wire_frame_header(longv, WIRE_F_STREAM, 8);
	longv[WIRE_HDR_LEN] = 0x0a;
	memset(longv + WIRE_HDR_LEN + 1, 0xff, 7);
	T_EQ(mbr_peek_stream(longv, sizeof longv), MBR_PEEK_BAD);
	/* a newer version is refused before its body is read */
	hdr[2] = WIRE_VERSION + 1;
	T_EQ(mbr_peek_stream(hdr, 3), MBR_PEEK_BAD);
}

T_TEST(every_message_round_trips)
{
	uint8_t meta[MBR_META_MAX];
	for (size_t i = 0; i < sizeof meta; i++) meta[i] = (uint8_t)i;
	mbr_wire_state st[2] = {
		{ "a", A(1, 10), 3, 4, MBR_SUSPECT, meta, 7 },
		{ "b", A(2, 11), 5, 6, MBR_LEFT, NULL, 0 },
	};
	mbr_msg in[] = {
		{ .type = MBR_MSG_PING, .seq = 7, .name = "t", .from = "s", .src_addr = A(3, 1) },
		{ .type = MBR_MSG_INDIRECT, .seq = 8, .name = "t", .addr = A(4, 2), .nack = true,
		  .from = "s", .src_addr = A(5, 3) },
		{ .type = MBR_MSG_ACK, .seq = 9 },
		{ .type = MBR_MSG_NACK, .seq = 10 },
		{ .type = MBR_MSG_ALIVE, .name = "x", .addr = A(6, 4), .gen = 1ull << 40, .inc = 99,
		  .meta = meta, .meta_len = sizeof meta },
		{ .type = MBR_MSG_SUSPECT, .name = "x", .gen = 2, .inc = 3, .from = "y" },
		{ .type = MBR_MSG_DEAD, .name = "x", .gen = 2, .inc = 3, .from = "x" },
		{ .type = MBR_MSG_PUSHPULL, .join = true, .from = "s", .src_addr = A(7, 5),
		  .states = st, .nstates = 2 },
	};
	size_t n = sizeof in / sizeof in[0];
	mbr_pkt p;
	build(&p, in, n, true);
	mbr_decoded d;
	T_EQ(mbr_codec_decode(p.buf, p.len, WIRE_STREAM_MAX, &d), WIRE_OK);
	T_EQ(d.nmsgs, n);
	for (size_t i = 0; i < n; i++) T_EQ(d.msgs[i].type, in[i].type);
	T_EQ(d.msgs[0].seq, 7);
	T_STREQ(d.msgs[0].name, "t");
	T_CHECK(mbr_addr_eq(&d.msgs[1].addr, &in[1].addr));
	T_CHECK(d.msgs[1].nack);
	T_EQ(d.msgs[4].gen, 1ull << 40);
	T_EQ(d.msgs[4].meta_len, MBR_META_MAX);
	T_CHECK(memcmp(d.msgs[4].meta, meta, MBR_META_MAX) == 0);
	T_STREQ(d.msgs[6].from, "x");
	T_EQ(d.msgs[7].nstates, 2);
	T_EQ(d.msgs[7].states[0].status, MBR_SUSPECT);
	T_EQ(d.msgs[7].states[1].status, MBR_LEFT);
	T_STREQ(d.msgs[7].states[1].name, "b");
	mbr_codec_free(&d);
	mbr_pkt_free(&p);
}

T_TEST(invalid_fields_are_rejected)
{
	char longname[MBR_NAME_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	uint8_t meta[MBR_META_MAX + 1] = { 0 };
	mbr_addr noport = A(1, 0);
	mbr_addr badlen = A(1, 1);
	badlen.len = 5;
	mbr_msg bad[] = {
		{ .type = MBR_MSG_ALIVE, .name = "", .addr = A(1, 1) },
		{ .type = MBR_MSG_ALIVE, .name = longname, .addr = A(1, 1) },
		{ .type = MBR_MSG_ALIVE, .name = "x", .addr = noport },
		{ .type = MBR_MSG_ALIVE, .name = "x", .addr = badlen },
		{ .type = MBR_MSG_ALIVE, .name = "x", .addr = A(1, 1), .meta = meta, .meta_len = sizeof meta },
		{ .type = MBR_MSG_ALIVE, .name = "bad\nname", .addr = A(1, 1) },
		{ .type = MBR_MSG_PING, .seq = 1, .name = "t", .from = "s" /* no source address */ },
		{ .type = MBR_MSG_SUSPECT, .name = "x", .from = "" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		mbr_pkt p;
		build(&p, &bad[i], 1, false);
		mbr_decoded d;
		wire_err e = mbr_codec_decode(p.buf, p.len, 65507, &d);
		if (e != WIRE_ERR_INVALID) T_FAIL("bad message %zu decoded with %s", i, wire_err_str(e));
		mbr_pkt_free(&p);
	}
	/* an empty packet is not a message */
	uint8_t empty[WIRE_HDR_LEN];
	wire_frame_header(empty, 0, 0);
	mbr_decoded d;
	T_EQ(mbr_codec_decode(empty, sizeof empty, 1400, &d), WIRE_ERR_INVALID);
}

static void decode_any(const uint8_t *b, size_t n, size_t *ok, size_t *bad)
{
	mbr_decoded d;
	wire_err e = mbr_codec_decode(b, n, WIRE_STREAM_MAX, &d);
	if (e == WIRE_OK) {
		/* whatever decodes must have passed validation */
		for (size_t i = 0; i < d.nmsgs; i++) {
			const mbr_msg *m = &d.msgs[i];
			if (m->name && (!*m->name || strlen(m->name) > MBR_NAME_MAX)) T_FAIL("bad name accepted");
			if (m->meta_len > MBR_META_MAX) T_FAIL("oversized meta accepted");
		}
		mbr_codec_free(&d);
		(*ok)++;
	} else {
		T_CHECK(e > WIRE_OK && e < WIRE_ERR__COUNT);
		(*bad)++;
	}
}

T_TEST_TIMEOUT(fuzz_random_bytes_and_mutations, 120)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	size_t ok = 0, bad = 0;
	uint8_t buf[2048];
	/* random bytes, with and without a valid header */
	for (int it = 0; it < 200000; it++) {
		size_t n = (size_t)sk_rng_below(&r, sizeof buf);
		for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)sk_rng_next(&r);
		if (it & 1 && n >= WIRE_HDR_LEN) wire_frame_header(buf, 0, n - WIRE_HDR_LEN);
		decode_any(buf, n, &ok, &bad);
	}
	/* bit flips, truncations and splices of a valid packet */
	mbr_wire_state st[1] = { { "a", A(1, 10), 3, 4, MBR_ALIVE, NULL, 0 } };
	mbr_msg in[] = {
		{ .type = MBR_MSG_PING, .seq = 7, .name = "target", .from = "source", .src_addr = A(3, 1) },
		{ .type = MBR_MSG_ALIVE, .name = "x", .addr = A(6, 4), .gen = 5, .inc = 1 },
		{ .type = MBR_MSG_PUSHPULL, .from = "s", .src_addr = A(7, 5), .states = st, .nstates = 1 },
	};
	mbr_pkt p;
	build(&p, in, 3, false);
	for (int it = 0; it < 200000; it++) {
		size_t n = p.len;
		memcpy(buf, p.buf, n);
		int flips = 1 + (int)sk_rng_below(&r, 4);
		for (int f = 0; f < flips; f++) buf[sk_rng_below(&r, n)] ^= (uint8_t)(1u << sk_rng_below(&r, 8));
		if (sk_rng_below(&r, 4) == 0) n = (size_t)sk_rng_below(&r, n + 1);
		decode_any(buf, n, &ok, &bad);
	}
	mbr_pkt_free(&p);
	printf("  fuzz: %zu decoded, %zu rejected (seed %llu)\n", ok, bad, (unsigned long long)t_seed());
	T_CHECK(bad > 0 && ok > 0);
}

T_TEST(garbage_into_a_node_is_counted_not_fatal)
{
	mbr_config c;
	mbr_config_profile(&c, "fast");
	char err[128];
	mbr_self self = { .name = "n0", .addr = A(1, 7946), .generation = 1, .seed = 1 };
	mbr_t *m = mbr_new(&c, &self, 0, err, sizeof err);
	T_CHECK(m);
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	uint8_t buf[512];
	mbr_addr from = A(2, 7946);
	for (int it = 0; it < 20000; it++) {
		size_t n = (size_t)sk_rng_below(&r, sizeof buf);
		for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)sk_rng_next(&r);
		if (n >= WIRE_HDR_LEN && (it & 1)) wire_frame_header(buf, 0, n - WIRE_HDR_LEN);
		mbr_recv(m, (uint64_t)it, &from, buf, n, it % 3 == 0);
		mbr_out o;
		while (mbr_pop_out(m, &o)) free(o.data);
		mbr_event ev;
		while (mbr_pop_event(m, &ev)) {}
	}
	const mbr_stats *s = mbr_get_stats(m);
	uint64_t drops = 0;
	for (int i = 0; i < WIRE_ERR__COUNT; i++) drops += s->drop[i];
	T_CHECK(drops > 19000);
	T_EQ(mbr_member_count(m), 1);
	mbr_destroy(&m);
	T_CHECK(m == NULL);
	mbr_destroy(&m);
}

T_TEST(addresses_parse_and_format)
{
	mbr_addr a;
	char buf[64];
	T_EQ(mbr_addr_parse("127.0.0.1:7946", &a), 0);
	T_STREQ(mbr_addr_format(&a, buf, sizeof buf), "127.0.0.1:7946");
	T_EQ(mbr_addr_parse("[::1]:80", &a), 0);
	T_EQ(a.len, 16);
	T_STREQ(mbr_addr_format(&a, buf, sizeof buf), "[::1]:80");
	T_EQ(mbr_addr_parse("127.0.0.1", &a), -1);
	T_EQ(mbr_addr_parse("127.0.0.1:0", &a), -1);
	T_EQ(mbr_addr_parse("127.0.0.1:65536", &a), -1);
	T_EQ(mbr_addr_parse("host:1", &a), -1);
	T_EQ(mbr_addr_parse("[::1:80", &a), -1);
	T_EQ(mbr_addr_parse(NULL, &a), -1);
}
