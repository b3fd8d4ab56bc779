/* tests/fuzz/fuzz_gossip: libFuzzer target for every gossip decoder.
 * The input goes through the frame parser, the codec, and into a live node
 * (as UDP and as a stream), so the protocol handlers see whatever decodes.
 * Built and run by `make fuzz` with clang -fsanitize=fuzzer,address,undefined. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "membership/mbr.h"
#include "membership/mbr_codec.h"
#include "proto/wire_frame.h"

/* File-level, so that destroying it below really starts a new node (a
 * static inside node() outlived mbr_destroy: use after free). */
static mbr_t *m;

static mbr_t *node(void)
{
	if (!m) {
		mbr_config c;
		char err[128];
		mbr_config_profile(&c, "fast");
		mbr_self self = { .name = "fuzz", .generation = 1, .seed = 1 };
		mbr_addr_parse("127.0.0.1:7946", &self.addr);
		m = mbr_new(&c, &self, 1, err, sizeof err);
		if (!m) abort();
	}
	return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint64_t now = 1;
	wire_frame f;
	(void)wire_frame_parse(data, size, WIRE_STREAM_MAX, &f);
	(void)mbr_peek_stream(data, size);
	mbr_decoded d;
	if (mbr_codec_decode(data, size, WIRE_STREAM_MAX, &d) == WIRE_OK) mbr_codec_free(&d);

	node();
	mbr_addr from;
	mbr_addr_parse("127.0.0.2:7946", &from);
	now += 7;
	mbr_recv(m, now, &from, data, size, size & 1);
	/* Again with a well-formed header, so the payload decoders get explored
	 * rather than stopping at the length check. */
	if (size > 0 && size < 70000) {
		uint8_t *buf = malloc(size + WIRE_HDR_LEN);
		if (!buf) abort();
		wire_frame_header(buf, 0, size);
		memcpy(buf + WIRE_HDR_LEN, data, size);
		mbr_recv(m, now, &from, buf, size + WIRE_HDR_LEN, (size >> 1) & 1);
		free(buf);
	}
	mbr_tick(m, now);
	mbr_out o;
	while (mbr_pop_out(m, &o)) free(o.data);
	mbr_event ev;
	while (mbr_pop_event(m, &ev)) {}
	/* Keep the node from growing without bound across a long run. */
	if (mbr_member_count(m) > 4096) {
		mbr_destroy(&m);
	}
	return 0;
}
