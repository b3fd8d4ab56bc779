/* membership/mbr_int.h: the member table and the dissemination queue,
 * shared by mbr.c (the protocol) and mbr_table.c (the data structures).
 * Internal to the membership module. */
#ifndef MBR_INT_H
#define MBR_INT_H

#include "membership/mbr.h"
#include "membership/mbr_codec.h"

/* Most transmissions any one update can need: retransmit_mult (<= 16 is
 * sensible) x ceil(log10(N+1)) (<= 6 up to a million nodes), clamped. */
enum { MBR_MAX_TX = 96 };

typedef struct mbr_suspicion {
	uint64_t start_ms;
	uint64_t min_ms, max_ms;
	uint32_t k;          /* confirmations that bring the timeout to min */
	uint32_t n;          /* independent confirmations so far */
	uint64_t seen[8];    /* name hashes of accusers (the first one included) */
} mbr_suspicion;

typedef struct mbr_member {
	mbr_addr addr;
	uint64_t gen;
	uint32_t inc;
	uint8_t status;      /* mbr_status */
	uint8_t bc_sent;     /* transmissions of the queued update */
	uint16_t meta_len;
	uint16_t bc_len;
	uint32_t plist_pos;  /* index in the probe list (not for self) */
	uint32_t hash;       /* of the name: compared before the name itself */
	uint64_t since_ms;
	uint8_t *meta;
	mbr_suspicion *susp;
	/* the queued update about this member (at most one: newer replaces older) */
	uint8_t *bc_blob;
	struct mbr_member *bc_prev, *bc_next;
	char name[];
} mbr_member;

/* Name -> member, open addressing with linear probing. */
typedef struct {
	mbr_member **slot;
	size_t cap, len;
} mbr_table;

int mbr_table_init(mbr_table *t);
void mbr_table_free(mbr_table *t);
mbr_member *mbr_table_get(const mbr_table *t, const char *name);
int mbr_table_put(mbr_table *t, mbr_member *mem);
void mbr_table_del(mbr_table *t, const char *name);
uint64_t mbr_name_hash(const char *name);

/* Dissemination queue: one list per transmission count; the fewest-sent
 * updates go first, newest first among equals (memberlist's btree order). */
typedef struct {
	mbr_member *head[MBR_MAX_TX];
	size_t len;
} mbr_bcq;

void mbr_bcq_push(mbr_bcq *q, mbr_member *mem, uint8_t *blob, size_t len);
void mbr_bcq_remove(mbr_bcq *q, mbr_member *mem);
/* Appends queued updates to pkt while they fit in budget bytes; each one
 * taken counts a transmission and is dropped after `limit` of them.
 * `skip` (may be NULL) is not taken.  Returns how many were added. */
size_t mbr_bcq_fill(mbr_bcq *q, mbr_pkt *pkt, size_t budget, uint32_t limit,
		    const mbr_member *skip);

#endif
