/* agent/agent_update_table: the head's tables for weight updates: the
 * engines it knows (an array, indexed by member with open addressing), the
 * open updates (a short array: at most one per job) and the deadlines of
 * held waits and silent engines (a min-heap).  agent_update.c holds the
 * logic; these only find, add and drop. */
#include "agent/agent_update_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_text.h"

void aupd_due_push(agent_update *W, const char *member, double at, bool forget)
{
	update_due *d = malloc(sizeof *d);
	if (!d) return; /* the engine's next wait pushes again; meanwhile it waits longer */
	snprintf(d->member, sizeof d->member, "%s", member);
	d->at = at;
	d->forget = forget;
	double when = at + (forget ? ENGINE_FORGET_S : WAIT_HOLD_S);
	if (sk_heap_push(&W->due, (uint64_t)(when * 1e6), d) < 0) free(d);
}

void aupd_due_clear(agent_update *W)
{
	sk_heap_entry he;
	while (sk_heap_pop(&W->due, &he) == 0) free(he.ptr);
}

/* Room for one more of n elements in *arr (capacity *cap, at most max):
 * the new element's address, or NULL. */
void *aupd_grow_one(void **arr, size_t *cap, size_t n, size_t elem, size_t max)
{
	if (n >= max) return NULL;
	if (n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		void *p = realloc(*arr, nc * elem);
		if (!p) return NULL;
		*arr = p;
		*cap = nc;
	}
	return (char *)*arr + n * elem;
}

void hash_put(agent_update *W, size_t i)
{
	size_t m = W->hcap - 1, k = (size_t)sk_str_hash(W->eng[i].member) & m;
	while (W->hidx[k]) k = (k + 1) & m;
	W->hidx[k] = (uint32_t)i + 1;
}

/* The index for cap engines: 0, -1 when memory runs out (then linear). */
int hash_rebuild(agent_update *W, size_t cap)
{
	size_t hc = 16;
	while (hc < cap * 2) hc *= 2;
	uint32_t *h = calloc(hc, sizeof *h);
	if (!h) return -1;
	free(W->hidx);
	W->hidx = h;
	W->hcap = hc;
	W->hdirty = false;
	for (size_t i = 0; i < W->neng; i++) hash_put(W, i);
	return 0;
}

update_eng *aupd_eng_find(agent_update *W, const char *member)
{
	if ((W->hdirty || !W->hidx) && hash_rebuild(W, W->neng + 1) < 0) {
		for (size_t i = 0; i < W->neng; i++)
			if (!strcmp(W->eng[i].member, member)) return &W->eng[i];
		return NULL;
	}
	size_t m = W->hcap - 1;
	for (size_t k = (size_t)sk_str_hash(member) & m; W->hidx[k]; k = (k + 1) & m)
		if (!strcmp(W->eng[W->hidx[k] - 1].member, member)) return &W->eng[W->hidx[k] - 1];
	return NULL;
}

update_eng *aupd_eng_get(agent_update *W, const char *member)
{
	update_eng *e = aupd_eng_find(W, member);
	if (e) return e;
	if ((W->neng + 1) * 2 > W->hcap && hash_rebuild(W, W->neng + 1) < 0) return NULL;
	if (!(e = aupd_grow_one((void **)&W->eng, &W->engcap, W->neng, sizeof *e, ENGINES_MAX))) return NULL;
	W->neng++;
	memset(e, 0, sizeof *e);
	snprintf(e->member, sizeof e->member, "%s", member);
	hash_put(W, W->neng - 1);
	return e;
}

void aupd_eng_drop_at(agent_update *W, size_t i)
{
	W->nbehind -= W->eng[i].behind;
	W->eng[i] = W->eng[--W->neng];
	W->hdirty = true;
}

update_open *aupd_open_find(agent_update *W, const char *job)
{
	for (size_t i = 0; i < W->nopen; i++)
		if (!strcmp(W->open[i].co.rec.job, job)) return &W->open[i];
	return NULL;
}

update_open *aupd_open_new(agent_update *W)
{
	update_open *u = aupd_grow_one((void **)&W->open, &W->opencap, W->nopen, sizeof *u, OPEN_MAX);
	if (!u) return NULL;
	W->nopen++;
	memset(u, 0, sizeof *u);
	return u;
}

void aupd_open_free(agent_update *W, update_open *u)
{
	update_coord_free(&u->co);
	free(u->setup);
	*u = W->open[--W->nopen];
}

update_engine *aupd_part_of(update_open *u, const char *member)
{
	long i = update_coord_find(&u->co, member);
	return i >= 0 ? &u->co.rec.engines[i] : NULL;
}

bool aupd_is_full_copy(const char *mode)
{
	return strcmp(mode, "disk-delta") != 0;
}
