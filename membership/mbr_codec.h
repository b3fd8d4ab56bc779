/* membership/mbr_codec: gossip messages as plain structs <-> framed bytes.
 *
 * The only file of the membership module that sees protobuf-c types.
 * Encoding packs one message (a protobuf Msg) into a blob; a packet is the
 * frame header plus blobs, each written as field 1 of Packet (tag 0x0a, a
 * varint length, the blob), so the logic can fill a 1400-byte packet with
 * pre-encoded piggyback messages without re-encoding them per packet.
 * Decoding validates every field (names, addresses, sizes) and returns a
 * counted reason on anything malformed; it never asserts. */
#ifndef MBR_CODEC_H
#define MBR_CODEC_H

#include "membership/mbr.h"
#include "proto/wire_frame.h"

typedef enum {
	MBR_MSG_PING = 1,
	MBR_MSG_INDIRECT,
	MBR_MSG_ACK,
	MBR_MSG_NACK,
	MBR_MSG_ALIVE,
	MBR_MSG_SUSPECT,
	MBR_MSG_DEAD,
	MBR_MSG_PUSHPULL,
} mbr_msg_type;

typedef struct {
	const char *name;
	mbr_addr addr;
	uint64_t gen;
	uint32_t inc;
	mbr_status status;
	const uint8_t *meta;
	size_t meta_len;
} mbr_wire_state;

/* Which fields a type uses:
 *   PING      seq, name (target), from (source), src_addr
 *   INDIRECT  seq, name (target), addr (target's), nack, from, src_addr
 *   ACK/NACK  seq
 *   ALIVE     name, addr, gen, inc, meta
 *   SUSPECT   name, gen, inc, from
 *   DEAD      name, gen, inc, from
 *   PUSHPULL  join, reply, from, src_addr, states */
typedef struct {
	mbr_msg_type type;
	uint32_t seq;
	const char *name;
	const char *from;
	mbr_addr addr;
	mbr_addr src_addr;
	uint64_t gen;
	uint32_t inc;
	const uint8_t *meta;
	size_t meta_len;
	bool nack, join, reply;
	const mbr_wire_state *states;
	size_t nstates;
} mbr_msg;

/* Packs one message; returns a malloc'd blob in *out and its length, or -1. */
int mbr_codec_encode_msg(const mbr_msg *msg, uint8_t **out, size_t *len);
/* Bytes one blob of `len` takes inside a packet (tag + varint + blob). */
size_t mbr_codec_blob_cost(size_t len);

/* A packet under construction. */
typedef struct {
	uint8_t *buf;
	size_t len, cap;
	size_t nmsgs;
} mbr_pkt;

int mbr_pkt_init(mbr_pkt *p, size_t cap);
/* Appends a blob; -1 if memory runs out. */
int mbr_pkt_add(mbr_pkt *p, const uint8_t *blob, size_t len);
/* Writes the frame header; the caller takes p->buf (length p->len). */
void mbr_pkt_finish(mbr_pkt *p, uint8_t flags);
void mbr_pkt_free(mbr_pkt *p);

/* A decoded packet: msgs point into memory owned by `priv`. */
typedef struct {
	mbr_msg *msgs;
	size_t nmsgs;
	size_t skipped;   /* messages of a type this version does not know */
	void *priv;
	mbr_wire_state *states;
} mbr_decoded;

/* Decodes a frame of at most `max` payload bytes.  On error returns the
 * reason (and *d holds nothing to free). */
wire_err mbr_codec_decode(const uint8_t *buf, size_t len, size_t max, mbr_decoded *d);
void mbr_codec_free(mbr_decoded *d);

#endif
