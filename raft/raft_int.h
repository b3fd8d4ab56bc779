/* raft/raft_int.h: helpers shared inside the raft module (not public). */
#ifndef RAFT_INT_H
#define RAFT_INT_H

#include "raft/raft.h"

/* A voter set as bytes (the payload of a RAFT_ENTRY_VOTERS entry, and the
 * voters of a snapshot file): u8 count, then per name u8 length + bytes.
 * raft__voters_encode needs RAFT__VOTERS_BYTES bytes at most. */
enum { RAFT__VOTERS_BYTES = 1 + RAFT_VOTERS_MAX * (1 + RAFT_NAME_MAX) };
size_t raft__voters_encode(const raft_voters *v, uint8_t *buf);
/* -1 on a malformed payload or a bad set. */
int raft__voters_decode(raft_voters *v, const uint8_t *buf, size_t len);

/* Storage helper: 0 when `first` follows `last`, else -1 with a message. */
int raft__append_follows(uint64_t last, uint64_t first, char *err, size_t errlen);

/* Frees what a raft_loaded holds and zeroes it. */
void raft__loaded_free(raft_loaded *l);

#endif
