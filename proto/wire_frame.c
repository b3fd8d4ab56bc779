/* proto/wire_frame: see wire_frame.h. */
#include "proto/wire_frame.h"

static const char *const err_names[WIRE_ERR__COUNT] = {
	[WIRE_OK] = "ok",
	[WIRE_ERR_SHORT] = "truncated",
	[WIRE_ERR_MAGIC] = "bad magic",
	[WIRE_ERR_VERSION] = "unsupported version",
	[WIRE_ERR_LENGTH] = "bad length",
	[WIRE_ERR_DECODE] = "undecodable payload",
	[WIRE_ERR_INVALID] = "invalid field",
};

const char *wire_err_str(wire_err e)
{
	return (unsigned)e < WIRE_ERR__COUNT ? err_names[e] : "unknown";
}

void wire_frame_header(uint8_t *hdr, uint8_t flags, size_t len)
{
	hdr[0] = WIRE_MAGIC >> 8;
	hdr[1] = WIRE_MAGIC & 0xff;
	hdr[2] = WIRE_VERSION;
	hdr[3] = flags;
	hdr[4] = (uint8_t)(len >> 24);
	hdr[5] = (uint8_t)(len >> 16);
	hdr[6] = (uint8_t)(len >> 8);
	hdr[7] = (uint8_t)len;
}

wire_err wire_frame_parse(const uint8_t *buf, size_t n, size_t max, wire_frame *f)
{
	if (!buf || n < WIRE_HDR_LEN) return WIRE_ERR_SHORT;
	if (((unsigned)buf[0] << 8 | buf[1]) != WIRE_MAGIC) return WIRE_ERR_MAGIC;
	if (buf[2] < WIRE_VERSION_MIN || buf[2] > WIRE_VERSION) return WIRE_ERR_VERSION;
	uint32_t len = (uint32_t)buf[4] << 24 | (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 | buf[7];
	if (len > max) return WIRE_ERR_LENGTH;
	if (n - WIRE_HDR_LEN < len) return WIRE_ERR_SHORT;
	if (n - WIRE_HDR_LEN > len) return WIRE_ERR_LENGTH;
	f->version = buf[2];
	f->flags = buf[3];
	f->payload = buf + WIRE_HDR_LEN;
	f->len = len;
	return WIRE_OK;
}
