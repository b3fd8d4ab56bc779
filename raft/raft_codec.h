/* raft/raft_codec: Raft messages as plain structs <-> framed bytes.
 *
 * The only file of the raft module that sees protobuf-c types.  A message
 * is one frame (proto/wire_frame.h) around one skein.raft.Msg.  Decoding
 * checks every field (names, sizes, index ranges, entry order) and returns
 * a wire_err reason on anything malformed; it never asserts. */
#ifndef RAFT_CODEC_H
#define RAFT_CODEC_H

#include "proto/wire_frame.h"
#include "raft/raft.h"

enum {
	RAFT_MSG_MAX = RAFT_SNAPSHOT_MAX + (1 << 20), /* payload bytes of one frame */
	RAFT_MSG_ENTRIES_MAX = 4096,                  /* entries in one AppendEntries */
};

typedef enum {
	RAFT_MSG_VOTE_REQ = 1,
	RAFT_MSG_VOTE_RESP,
	RAFT_MSG_APPEND_REQ,
	RAFT_MSG_APPEND_RESP,
	RAFT_MSG_SNAP_REQ,
	RAFT_MSG_SNAP_RESP,
	RAFT_MSG_TIMEOUT_NOW,
} raft_msg_type;

/* Which fields a type uses (term and from always):
 *   VOTE_REQ     prevote, last_index, last_term, transfer
 *   VOTE_RESP    prevote, granted
 *   APPEND_REQ   prev_index, prev_term, commit, echo, entries
 *   APPEND_RESP  success, last_index, prev_index, echo, syncing
 *   SNAP_REQ     snap (meta), data (the chunk at offset), offset, total, echo
 *   SNAP_RESP    success, last_index, offset, echo
 *   TIMEOUT_NOW  (term and from only) */
typedef struct {
	raft_msg_type type;
	uint64_t term;
	const char *from;
	bool prevote, granted, success, transfer, syncing;
	uint64_t last_index, last_term;
	uint64_t prev_index, prev_term, commit, echo;
	uint64_t offset, total;   /* snapshot chunks */
	const raft_entry *entries;
	size_t nentries;
	const raft_snap_meta *snap;
	const uint8_t *data;
	size_t len;
} raft_msg;

/* Encodes a whole frame into a malloc'd buffer; 0 or -1 (out of memory). */
int raft_codec_encode(const raft_msg *m, uint8_t **out, size_t *len);

/* A decoded message; pointers refer to memory owned by priv. */
typedef struct {
	raft_msg msg;
	raft_entry *entries;
	raft_snap_meta snap;
	void *priv;
} raft_decoded;
wire_err raft_codec_decode(const uint8_t *buf, size_t len, raft_decoded *d);
void raft_codec_free(raft_decoded *d);

/* Checks a name: 1..RAFT_NAME_MAX bytes, printable ASCII, no spaces. */
bool raft_name_ok(const char *s);

#endif
