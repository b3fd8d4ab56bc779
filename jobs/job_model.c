/* jobs/job_model: the plain C layout (see job_model.h).
 *
 * Every array is sized from the spec once (job_layout_init), so indexing by
 * slot or engine below a valid spec's counts stays inside; the conversions
 * to placement's node indices are by name, as a layout outlives the
 * membership view it was computed from. */
#include "jobs/job_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void job_layout_free(job_layout *L)
{
	free(L->node);
	free(L->gpu);
	free(L->engine_gen);
	free(L->engine_restarts);
	memset(L, 0, sizeof *L);
}

int job_layout_init(job_layout *L, const job_spec *s)
{
	return job_layout_alloc(L, job_spec_slots(s), job_spec_engines(s));
}

int job_layout_alloc(job_layout *L, uint32_t n, uint32_t neng)
{
	memset(L, 0, sizeof *L);
	L->n = n;
	L->neng = neng;
	L->node = calloc(n ? n : 1, sizeof *L->node);
	L->gpu = calloc(n ? n : 1, sizeof *L->gpu);
	L->engine_gen = calloc(neng ? neng : 1, sizeof *L->engine_gen);
	L->engine_restarts = calloc(neng ? neng : 1, sizeof *L->engine_restarts);
	if (!L->node || !L->gpu || !L->engine_gen || !L->engine_restarts) {
		job_layout_free(L);
		return -1;
	}
	return 0;
}

bool job_layout_trainer_placed(const job_layout *L, uint32_t ranks)
{
	for (uint32_t r = 0; r < ranks; r++)
		if (r >= L->n || !L->node[r][0]) return false;
	return true;
}

const char *job_layout_engine_node(const job_spec *s, const job_layout *L, uint32_t e)
{
	uint32_t first = place_engine_slot(s, e);
	return first < L->n ? L->node[first] : "";
}

int job_node_index(const place_node *nodes, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(nodes[i].name, name)) return (int)i;
	return -1;
}

int job_layout_to_place(const job_layout *L, const place_node *nodes, size_t n, place_layout *pl)
{
	pl->nslots = L->n;
	pl->slots = calloc(L->n ? L->n : 1, sizeof *pl->slots);
	if (!pl->slots) return -1;
	for (uint32_t i = 0; i < L->n; i++) {
		pl->slots[i].node = L->node[i][0] ? job_node_index(nodes, n, L->node[i]) : -1;
		pl->slots[i].gpu = L->gpu[i];
	}
	return 0;
}

int job_layout_from_place(const job_spec *s, job_layout *L, const place_layout *pl, const place_node *nodes,
			  bool *eng_changed)
{
	uint32_t A = job_spec_trainer_ranks(s);
	int changed = 0;
	for (uint32_t i = 0; i < L->n && i < pl->nslots; i++) {
		char name[JOB_NODE_MAX + 1] = "";
		if (pl->slots[i].node >= 0) snprintf(name, sizeof name, "%s", nodes[pl->slots[i].node].name);
		if (!strcmp(name, L->node[i]) && (!name[0] || pl->slots[i].gpu == L->gpu[i])) continue;
		snprintf(L->node[i], sizeof L->node[i], "%s", name);
		L->gpu[i] = pl->slots[i].gpu;
		if (i < A) changed |= 1;
		int64_t e = place_slot_engine(s, i);
		if (e >= 0 && (uint64_t)e < L->neng) {
			eng_changed[e] = true;
			changed |= 2;
		}
	}
	return changed;
}

void job_rec_free(job_rec *r)
{
	free(r->state);
	free(r->reason);
	free(r->submit_token);
	job_layout_free(&r->layout);
	memset(r, 0, sizeof *r);
}

bool job_rec_placed(const job_rec *r)
{
	return r->has_layout && r->layout.n > 0;
}

bool job_rec_active(const job_rec *r)
{
	return !strcmp(r->state, "pending") || !strcmp(r->state, "running");
}

int job_rec_layout(job_layout *L, const job_rec *r, const job_spec *s)
{
	if (job_layout_init(L, s) < 0) return -1;
	if (!r->has_layout) return 0;
	const job_layout *R = &r->layout;
	for (uint32_t i = 0; i < L->n && i < R->n; i++) {
		memcpy(L->node[i], R->node[i], sizeof L->node[i]);
		L->gpu[i] = R->gpu[i];
	}
	L->trainer_gen = R->trainer_gen;
	L->trainer_failures = R->trainer_failures;
	memcpy(L->master_addr, R->master_addr, sizeof L->master_addr);
	L->master_port = R->master_port;
	for (uint32_t e = 0; e < L->neng && e < R->neng; e++) {
		L->engine_gen[e] = R->engine_gen[e];
		L->engine_restarts[e] = R->engine_restarts[e];
	}
	return 0;
}

int job_rec_spec(const job_rec *r, job_spec *s, char *err, size_t errlen)
{
	*s = r->spec;
	return job_spec_validate(s, err, errlen);
}
