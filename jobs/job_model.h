/* jobs/job_model: a job and its layout as plain C, what the replicated
 * state holds and the agent computes on.
 *
 * A job record (job_rec) is the spec as submitted, its state and reason,
 * its layout and the counters of the replicated map (seq, version).  A
 * layout is where each of a job's slots sits (a node name and a GPU id, in
 * job_place.c's slot order) with the generations and counters that go with
 * it.  Three forms existed for one layout (the protobuf record, the
 * agent's own struct, placement's node indices); now everything above
 * jobs/job_codec.c works on job_layout, and job_layout_to_place / _from_place
 * convert to and from placement's indices.  Pure: no I/O, no protobuf. */
#ifndef JOB_MODEL_H
#define JOB_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/job_place.h"
#include "jobs/job_spec.h"

enum {
	JOB_NODE_MAX = 128,          /* a node name, as membership allows it */
	JOB_ADDR_MAX = 63,           /* master_addr: an IP address as text */
};

typedef struct {
	uint32_t n, neng;                /* slots (job_spec_slots), engines (job_spec_engines) */
	char (*node)[JOB_NODE_MAX + 1];  /* per slot; "" = not placed */
	uint32_t *gpu;                   /* per slot */
	uint64_t trainer_gen;            /* bumped on every trainer group restart */
	uint32_t trainer_failures;       /* trainer group restarts a rank's exit caused */
	char master_addr[JOB_ADDR_MAX + 1];
	uint32_t master_port;            /* 0 = not chosen yet */
	uint32_t *engine_gen, *engine_restarts;  /* per engine */
} job_layout;

/* A job record, as the log and the snapshots carry it (proto/jobs.proto
 * Job).  Strings are malloc'd and never NULL. */
typedef struct {
	job_spec spec;            /* as submitted: job_spec_validate a copy before use */
	char *state;              /* pending, running, stopping, stopped, failed, completed */
	char *reason;             /* why pending or failed */
	bool has_layout;          /* the record carries a layout (placed: with slots) */
	job_layout layout;        /* as recorded: n may be 0, neng what the record holds */
	uint64_t submitted_ms;    /* the head's wall clock at submission (for display) */
	uint64_t seq;             /* submission order */
	uint64_t version;         /* +1 on every update (compare-and-set) */
	char *submit_token;       /* the submitting client's token: a retried submit finds its job */
} job_rec;

void job_rec_free(job_rec *r);   /* safe twice */
/* Whether the job has a placement (a layout with slots). */
bool job_rec_placed(const job_rec *r);
/* Pending or running: it holds (or waits for) GPUs. */
bool job_rec_active(const job_rec *r);
/* The record's spec, validated (colocated: the rollout GPUs forced to the
 * actor's) into *s; -1 with the reason in err. */
int job_rec_spec(const job_rec *r, job_spec *s, char *err, size_t errlen);
/* The record's layout sized for spec s (extra slots or engines ignored,
 * missing ones unplaced / 0); -1 when memory runs out. */
int job_rec_layout(job_layout *L, const job_rec *r, const job_spec *s);

/* An empty (unplaced) layout sized for spec s; -1 when memory runs out. */
int job_layout_init(job_layout *L, const job_spec *s);
/* ... sized n slots and neng engines. */
int job_layout_alloc(job_layout *L, uint32_t n, uint32_t neng);
void job_layout_free(job_layout *L);   /* safe twice */

/* Whether trainer ranks 0..ranks-1 all have a node. */
bool job_layout_trainer_placed(const job_layout *L, uint32_t ranks);
/* The node engine e of a valid spec runs on ("" when none), through
 * job_place.c's slot formula. */
const char *job_layout_engine_node(const job_spec *s, const job_layout *L, uint32_t e);

/* Index of the node named `name` in nodes[0..n), -1 when absent. */
int job_node_index(const place_node *nodes, size_t n, const char *name);
/* Fills pl (slots malloc'd, caller frees pl->slots) from the node names:
 * a name not in nodes is unplaced (-1).  -1 when memory runs out. */
int job_layout_to_place(const job_layout *L, const place_node *nodes, size_t n, place_layout *pl);
/* Copies pl back into L; returns a bitmask of what changed: 1 a trainer
 * slot, 2 an engine slot (eng_changed[e] set for each, L->neng of them). */
int job_layout_from_place(const job_spec *s, job_layout *L, const place_layout *pl, const place_node *nodes,
			  bool *eng_changed);

#endif
