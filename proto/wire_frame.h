/* proto/wire_frame: the small frame around every gossip payload.
 *
 *   offset 0  u16  magic 0x534B ("SK"), big-endian
 *          2  u8   version (WIRE_VERSION)
 *          3  u8   flags (WIRE_F_*)
 *          4  u32  payload length, big-endian
 *          8  ...  payload (a protobuf Packet)
 *
 * Decoding never trusts the length: it must match the bytes at hand exactly
 * and stay within the caller's limit.  Encryption (the agent's keyring) wraps
 * the whole frame from outside; the frame itself knows nothing of keys.
 *
 * Version rule: a receiver accepts versions WIRE_VERSION_MIN..WIRE_VERSION.
 * Newer fields inside a version are protobuf fields that older peers skip.
 * A frame of a newer version is dropped and counted (WIRE_ERR_VERSION). */
#ifndef WIRE_FRAME_H
#define WIRE_FRAME_H

#include <stddef.h>
#include <stdint.h>

enum {
	WIRE_MAGIC = 0x534B,
	WIRE_VERSION = 1,
	WIRE_VERSION_MIN = 1,
	WIRE_HDR_LEN = 8,
	/* memberlist's UDP budget (docs/reference.md, Gossip): fits a 1500-byte MTU. */
	WIRE_UDP_MAX = 1400,
	/* The largest stream is a push-pull: the whole member list.  A member
	 * encodes to at most 692 bytes (a 128-byte name, IPv6, the largest
	 * generation and incarnation, 512 bytes of meta: measured with the
	 * codec), so 10,000 members take 6.9 MB at worst and 1.9 MB with
	 * 20-byte names and 120 bytes of meta.  8 MiB holds 12,000 members at
	 * worst (memberlist allows 20 MiB; a receiver buffers a whole stream
	 * before it can authenticate it, so the cap is its memory bound). */
	WIRE_STREAM_MAX = 8 << 20,
};

enum {
	WIRE_F_STREAM = 1 << 0, /* sent over TCP (push-pull, fallback ping) */
};

typedef enum {
	WIRE_OK = 0,
	WIRE_ERR_SHORT,    /* fewer bytes than a header, or than the length says */
	WIRE_ERR_MAGIC,    /* not a skein frame */
	WIRE_ERR_VERSION,  /* a version we do not speak */
	WIRE_ERR_LENGTH,   /* length over the limit, or trailing bytes */
	WIRE_ERR_DECODE,   /* payload is not a valid message */
	WIRE_ERR_INVALID,  /* decoded, but a field breaks a rule (name, address, size) */
	WIRE_ERR__COUNT
} wire_err;

const char *wire_err_str(wire_err e);

typedef struct {
	uint8_t version;
	uint8_t flags;
	const uint8_t *payload;
	size_t len;
} wire_frame;

/* Writes the header for a payload of `len` bytes into hdr[WIRE_HDR_LEN]. */
void wire_frame_header(uint8_t *hdr, uint8_t flags, size_t len);
/* Parses buf[0..n) into *f (payload points into buf).  max bounds the payload. */
wire_err wire_frame_parse(const uint8_t *buf, size_t n, size_t max, wire_frame *f);

#endif
