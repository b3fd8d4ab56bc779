/* jobs/job_place: Miles's placement rules as pure logic (docs/reference.md, Placement).
 *
 * A job owns N one-GPU slots (split: A actor + R rollout slots, rollout
 * offset A; colocated: max(A, R) slots shared, offset 0).  Trainer rank r
 * runs on slot r; engine i on slots offset + i*tp .. offset + i*tp + tp-1.
 * Slots are handed out in (node IP as numbers, GPU id) order, in units that
 * must sit on one node:
 *   - a trainer unit: actor-num-gpus-per-node slots (ranks c*g .. c*g+g-1);
 *   - split mode, an engine unit: tp slots;
 *   - colocated, the trainer units carry the engines (the spec guarantees tp
 *     divides the unit, so no engine straddles nodes).
 * A unit takes the lowest free GPU ids of the first node (in order) with
 * enough free GPUs; GPUs of other jobs are busy; colocated members of one
 * job share their GPUs.  A fresh job is placed all or nothing (a gang, like
 * Ray's placement group); a re-placement keeps every unit whose node is
 * alive and moves only the units of failed nodes. */
#ifndef JOB_PLACE_H
#define JOB_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_spec.h"

typedef struct {
	char name[64];
	uint8_t ip[16];         /* network order; IPv4 in the first 4 bytes */
	uint8_t iplen;          /* 4 or 16 */
	uint32_t gpus;          /* declared or discovered GPU count */
	bool alive;             /* placeable: alive in gossip */
	uint64_t busy;          /* bit g: GPU g is used by another job */
} place_node;

typedef struct {
	int node;               /* index into the node array, -1 = not placed */
	uint32_t gpu;
} place_slot;

typedef struct {
	place_slot *slots;      /* job_spec_slots() of them, caller-owned */
	uint32_t nslots;
} place_layout;

typedef struct {
	uint32_t placed_units, pending_units;
	bool trainer_moved;     /* a trainer unit changed node: restart the group */
	uint64_t engines_moved; /* bit i (i < 64): engine i changed node; see engines_moved_any */
	bool engines_moved_any;
	char reason[256];       /* why units are pending ("" when all placed) */
} place_result;

/* Orders nodes by (IP as numbers, then name): the slot order. Returns a
 * malloc'd permutation of indices, or NULL when memory runs out. */
size_t *place_node_order(const place_node *nodes, size_t n);

/* Places a fresh job (every slot of `out` is written): all units or none.
 * Returns 0 when placed, 1 when pending (reason set, every slot -1), -1 on
 * a bad argument. */
int place_fresh(const job_spec *s, const place_node *nodes, size_t n, place_layout *out, place_result *res);

/* Re-places: slots on nodes that are not alive (or unplaced) move, unit by
 * unit, to free GPUs; the rest stay.  A unit that finds no room stays
 * unplaced (-1) and is counted pending.  Returns 0 all placed, 1 some
 * pending, -1 bad argument. */
int place_repair(const job_spec *s, const place_node *nodes, size_t n, place_layout *io, place_result *res);

/* Where members run.  gpus gets up to cap GPU ids; returns the count, and
 * the node index in *node (-1 when not placed). */
uint32_t place_trainer_rank(const job_spec *s, const place_layout *L, uint32_t rank, int *node,
			    uint32_t *local_rank);
uint32_t place_engine(const job_spec *s, const place_layout *L, uint32_t engine, int *node, uint32_t *gpus,
		      uint32_t cap);

/* Slot arithmetic of a valid spec, the one place the formula lives: the
 * first of engine e's tp slots (offset + e*tp), UINT32_MAX when e is not an
 * engine of s; the engine whose slots hold `slot`, -1 when none does (a
 * trainer slot in split mode, or past the end). */
uint32_t place_engine_slot(const job_spec *s, uint32_t engine);
int64_t place_slot_engine(const job_spec *s, uint32_t slot);

/* GPUs of node `node` this layout uses (bit g), for the busy masks of other jobs. */
uint64_t place_gpus_on(const place_layout *L, int node);

#endif
