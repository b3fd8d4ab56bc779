/* jobs/job_place: Miles's placement group as pure logic.
 *
 * Follows miles/ray/placement_group.py: N one-GPU slots ordered by (node IP,
 * GPU id), trainer rank r on slot r, engine i from slot offset + i*tp.  Where
 * we differ: Ray packs bundles wherever they fit and Miles sorts afterwards,
 * so an engine may straddle two nodes; here slots are handed out in units
 * that must sit on one node (a trainer node's g GPUs, a split engine's tp
 * GPUs; colocated engines ride inside the trainer units), so no engine and no
 * trainer node is ever split.
 *
 * Each unit, in unit order (trainer units, then engine units), takes the
 * lowest free GPU ids of the first node in slot order that is alive and has
 * enough free GPUs.  Free GPUs only shrink while units are placed, so the
 * first node with room for a given width only moves forward: one cursor per
 * unit kind keeps a placement linear in units + nodes.
 *
 * place_fresh is a gang (all units or none, like Ray's placement group);
 * place_repair keeps every unit that still sits whole on an alive node and
 * moves only the others. */
#include "jobs/job_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PLACE_GPU_BITS = 64 };  /* the busy mask is a uint64_t */

/* The units of a job, derived from a spec once. */
typedef struct {
	uint32_t g, tp, a, r, n;   /* GPUs per trainer unit, per engine, actor and rollout GPUs, slots */
	uint32_t ntu, neu;         /* trainer units, engine units (0 when colocated) */
	uint32_t ne;               /* engines */
	uint32_t off;              /* first rollout slot */
	bool colo;
} place_shape;

static int place_shape_of(const job_spec *s, place_shape *sh)
{
	if (!s) return -1;
	uint32_t g = s->actor_num_gpus_per_node, tp = s->rollout_num_gpus_per_engine;
	if (!s->actor_num_nodes || s->actor_num_nodes > JOB_NODES_MAX || !g || g > PLACE_GPU_BITS || !tp ||
	    tp > PLACE_GPU_BITS || s->rollout_num_gpus % tp ||
	    (uint64_t)s->rollout_num_gpus > (uint64_t)JOB_NODES_MAX * JOB_GPUS_PER_NODE_MAX)
		return -1;
	sh->g = g;
	sh->tp = tp;
	sh->a = s->actor_num_nodes * g;
	sh->r = s->rollout_num_gpus;
	sh->ntu = s->actor_num_nodes;
	sh->ne = sh->r / tp;
	sh->colo = s->colocate;
	if (sh->colo) {
		/* validate() forced R = A and tp | g; engines live in trainer units */
		if (sh->r != sh->a || g % tp) return -1;
		sh->neu = 0;
		sh->off = 0;
		sh->n = sh->a;
	} else {
		sh->neu = sh->ne;
		sh->off = sh->a;
		sh->n = sh->a + sh->r;
	}
	return 0;
}

static uint32_t place_unit_first(const place_shape *sh, uint32_t u)
{
	return u < sh->ntu ? u * sh->g : sh->off + (u - sh->ntu) * sh->tp;
}

static uint32_t place_unit_width(const place_shape *sh, uint32_t u) { return u < sh->ntu ? sh->g : sh->tp; }

static int place_cmp(const place_node *x, const place_node *y)
{
	/* IPv4 (4 bytes) before IPv6 (16), then the address as a big-endian number */
	size_t lx = x->iplen > 16 ? 16 : x->iplen, ly = y->iplen > 16 ? 16 : y->iplen;
	if (lx != ly) return lx < ly ? -1 : 1;
	int c = memcmp(x->ip, y->ip, lx);
	if (c) return c;
	return strncmp(x->name, y->name, sizeof x->name);
}

/* A stable merge sort, so equal nodes keep their index order. */
static void place_msort(const place_node *nodes, size_t *v, size_t *tmp, size_t n)
{
	if (n < 2) return;
	size_t h = n / 2, i = 0, j = h, k = 0;
	place_msort(nodes, v, tmp, h);
	place_msort(nodes, v + h, tmp, n - h);
	while (i < h && j < n) tmp[k++] = place_cmp(&nodes[v[j]], &nodes[v[i]]) < 0 ? v[j++] : v[i++];
	while (i < h) tmp[k++] = v[i++];
	while (j < n) tmp[k++] = v[j++];
	memcpy(v, tmp, n * sizeof *v);
}

size_t *place_node_order(const place_node *nodes, size_t n)
{
	size_t *v = malloc((n ? n : 1) * sizeof *v), *tmp = malloc((n ? n : 1) * sizeof *tmp);
	if (!v || !tmp || (n && !nodes)) {
		free(v);
		free(tmp);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) v[i] = i;
	place_msort(nodes, v, tmp, n);
	free(tmp);
	return v;
}

static uint64_t place_cap_mask(const place_node *nd)
{
	return nd->gpus >= PLACE_GPU_BITS ? UINT64_MAX : ((uint64_t)1 << nd->gpus) - 1;
}

/* The work area of one placement: this job's view of every node. */
typedef struct {
	const place_node *nodes;
	size_t n;
	size_t *order;
	uint64_t *used;     /* busy | this job's GPUs */
	size_t cursor[2];   /* per unit kind: no node before it has room */
} place_ctx;

static int place_ctx_init(place_ctx *c, const place_node *nodes, size_t n)
{
	memset(c, 0, sizeof *c);
	c->nodes = nodes;
	c->n = n;
	c->order = place_node_order(nodes, n);
	c->used = calloc(n ? n : 1, sizeof *c->used);
	if (!c->order || !c->used) {
		free(c->order);
		free(c->used);
		return -1;
	}
	for (size_t i = 0; i < n; i++) c->used[i] = nodes[i].busy;
	return 0;
}

static void place_ctx_free(place_ctx *c)
{
	free(c->order);
	free(c->used);
}

static uint64_t place_free_mask(const place_ctx *c, size_t node)
{
	return c->nodes[node].alive ? place_cap_mask(&c->nodes[node]) & ~c->used[node] : 0;
}

/* Places unit u on the first node with room; 0 placed, -1 no room. */
static int place_unit(place_ctx *c, const place_shape *sh, uint32_t u, place_slot *slots)
{
	uint32_t w = place_unit_width(sh, u), first = place_unit_first(sh, u);
	size_t *cur = &c->cursor[u < sh->ntu ? 0 : 1];
	for (; *cur < c->n; ++*cur) {
		size_t nd = c->order[*cur];
		uint64_t fm = place_free_mask(c, nd);
		if ((uint32_t)__builtin_popcountll(fm) < w) continue;
		for (uint32_t k = 0; k < w; k++) {
			uint32_t gpu = (uint32_t)__builtin_ctzll(fm);
			fm &= fm - 1;
			c->used[nd] |= (uint64_t)1 << gpu;
			slots[first + k].node = (int)nd;
			slots[first + k].gpu = gpu;
		}
		return 0;
	}
	return -1;
}

static void place_unit_clear(const place_shape *sh, uint32_t u, place_slot *slots)
{
	uint32_t w = place_unit_width(sh, u), first = place_unit_first(sh, u);
	for (uint32_t k = 0; k < w; k++) {
		slots[first + k].node = -1;
		slots[first + k].gpu = 0;
	}
}

/* "2 engine units of 2 GPUs on one node" */
static size_t place_units_text(char *b, size_t cap, uint32_t count, const char *kind, uint32_t w)
{
	int k = snprintf(b, cap, "%u %s unit%s of %u GPU%s on one node", count, kind, count == 1 ? "" : "s", w,
			 w == 1 ? "" : "s");
	return k < 0 ? 0 : (size_t)k;
}

/* Fills res->reason for units that do not fit. */
static void place_reason(place_result *res, const place_ctx *c, const place_shape *sh, uint32_t tu_fail,
			 uint32_t eu_fail, bool fresh)
{
	char units[160] = "";
	size_t len = 0;
	uint32_t free_all = 0, free_max = 0, alive = 0;
	uint32_t need = tu_fail * sh->g + eu_fail * sh->tp;
	const char *tkind = sh->colo ? "trainer+rollout" : "trainer";
	for (size_t i = 0; i < c->n; i++) {
		uint32_t f = (uint32_t)__builtin_popcountll(place_free_mask(c, i));
		alive += c->nodes[i].alive;
		free_all += f;
		if (f > free_max) free_max = f;
	}
	if (tu_fail) len += place_units_text(units + len, sizeof units - len, tu_fail, tkind, sh->g);
	if (eu_fail && len < sizeof units)
		len += (size_t)snprintf(units + len, sizeof units - len, "%s", tu_fail ? " and " : "");
	if (eu_fail && len < sizeof units) place_units_text(units + len, sizeof units - len, eu_fail, "engine", sh->tp);
	const char *verb = tu_fail + eu_fail == 1 ? "does" : "do";
	if (fresh)
		/* for a gang the GPUs the other units took in the trial are free again */
		snprintf(res->reason, sizeof res->reason,
			 "needs %u GPUs, the cluster has %u free (at most %u on one node, %u of %zu nodes alive); %s %s not fit",
			 sh->n, free_all, free_max, alive, c->n, units, verb);
	else
		snprintf(res->reason, sizeof res->reason,
			 "needs %u more GPUs: %s %s not fit; the cluster has %u free (at most %u on one node, %u of %zu nodes alive)",
			 need, units, verb, free_all, free_max, alive, c->n);
}

static void place_result_clear(place_result *res)
{
	if (res) memset(res, 0, sizeof *res);
}

int place_fresh(const job_spec *s, const place_node *nodes, size_t n, place_layout *out, place_result *res)
{
	place_shape sh;
	place_ctx c;
	place_result_clear(res);
	if (!out || !out->slots || !res || (n && !nodes) || place_shape_of(s, &sh) != 0 || out->nslots != sh.n)
		return -1;
	for (uint32_t i = 0; i < sh.n; i++) {
		out->slots[i].node = -1;
		out->slots[i].gpu = 0;
	}
	if (place_ctx_init(&c, nodes, n) != 0) {
		snprintf(res->reason, sizeof res->reason, "out of memory");
		return -1;
	}
	uint32_t units = sh.ntu + sh.neu, tu_fail = 0, eu_fail = 0;
	for (uint32_t u = 0; u < units; u++) {
		/* keep going after a failure: the reason counts every unit that misses */
		if (place_unit(&c, &sh, u, out->slots) != 0) {
			if (u < sh.ntu) tu_fail++;
			else eu_fail++;
		}
	}
	if (tu_fail + eu_fail) {
		for (uint32_t i = 0; i < sh.n; i++) {
			out->slots[i].node = -1;
			out->slots[i].gpu = 0;
		}
		for (size_t i = 0; i < n; i++) c.used[i] = nodes[i].busy;
		place_reason(res, &c, &sh, tu_fail, eu_fail, true);
		res->pending_units = units;
		place_ctx_free(&c);
		return 1;
	}
	res->placed_units = units;
	place_ctx_free(&c);
	return 0;
}

/* A unit stays where it is when all its slots sit on one alive node, on
 * GPUs the node has, not taken by an earlier kept unit of this job. */
static bool place_unit_keep(place_ctx *c, const place_shape *sh, uint32_t u, const place_slot *slots)
{
	uint32_t w = place_unit_width(sh, u), first = place_unit_first(sh, u);
	int nd = slots[first].node;
	uint64_t m = 0;
	if (nd < 0 || (size_t)nd >= c->n || !c->nodes[nd].alive) return false;
	for (uint32_t k = 0; k < w; k++) {
		const place_slot *sl = &slots[first + k];
		if (sl->node != nd || sl->gpu >= PLACE_GPU_BITS) return false;
		uint64_t bit = (uint64_t)1 << sl->gpu;
		if (!(place_cap_mask(&c->nodes[nd]) & bit) || (m & bit)) return false;
		m |= bit;
	}
	/* used[] holds only this job's kept GPUs here; other jobs' busy GPUs are
	 * not checked, since busy never includes ours */
	if (c->used[nd] & m) return false;
	c->used[nd] |= m;
	return true;
}

static bool place_slots_differ(const place_slot *a, const place_slot *b, uint32_t first, uint32_t w)
{
	for (uint32_t k = first; k < first + w; k++)
		if (a[k].node != b[k].node || (a[k].node >= 0 && a[k].gpu != b[k].gpu)) return true;
	return false;
}

int place_repair(const job_spec *s, const place_node *nodes, size_t n, place_layout *io, place_result *res)
{
	place_shape sh;
	place_ctx c;
	place_result_clear(res);
	if (!io || !io->slots || !res || (n && !nodes) || place_shape_of(s, &sh) != 0 || io->nslots != sh.n)
		return -1;
	place_slot *old = malloc((sh.n ? sh.n : 1) * sizeof *old);
	if (!old || place_ctx_init(&c, nodes, n) != 0) {
		free(old);
		snprintf(res->reason, sizeof res->reason, "out of memory");
		return -1;
	}
	memcpy(old, io->slots, sh.n * sizeof *old);
	uint32_t units = sh.ntu + sh.neu, tu_fail = 0, eu_fail = 0;
	uint8_t *move = calloc(units ? units : 1, 1);
	if (!move) {
		free(old);
		place_ctx_free(&c);
		snprintf(res->reason, sizeof res->reason, "out of memory");
		return -1;
	}
	/* first every unit that stays claims its GPUs, then the others move */
	memset(c.used, 0, (n ? n : 1) * sizeof *c.used);
	for (uint32_t u = 0; u < units; u++) {
		if (!place_unit_keep(&c, &sh, u, io->slots)) {
			move[u] = 1;
			place_unit_clear(&sh, u, io->slots);
		}
	}
	for (size_t i = 0; i < n; i++) c.used[i] |= nodes[i].busy;
	for (uint32_t u = 0; u < units; u++) {
		if (!move[u]) continue;
		if (place_unit(&c, &sh, u, io->slots) != 0) {
			if (u < sh.ntu) tu_fail++;
			else eu_fail++;
		}
	}
	res->pending_units = tu_fail + eu_fail;
	res->placed_units = units - res->pending_units;
	for (uint32_t u = 0; u < sh.ntu; u++)
		if (place_slots_differ(old, io->slots, u * sh.g, sh.g)) res->trainer_moved = true;
	for (uint32_t i = 0; i < sh.ne; i++) {
		if (!place_slots_differ(old, io->slots, sh.off + i * sh.tp, sh.tp)) continue;
		res->engines_moved_any = true;
		if (i < 64) res->engines_moved |= (uint64_t)1 << i;
	}
	if (res->pending_units) place_reason(res, &c, &sh, tu_fail, eu_fail, false);
	free(move);
	free(old);
	place_ctx_free(&c);
	return res->pending_units ? 1 : 0;
}

uint32_t place_trainer_rank(const job_spec *s, const place_layout *L, uint32_t rank, int *node,
			    uint32_t *local_rank)
{
	place_shape sh;
	if (node) *node = -1;
	if (local_rank) *local_rank = 0;
	if (!L || !L->slots || place_shape_of(s, &sh) != 0 || L->nslots != sh.n || rank >= sh.a) return 0;
	if (local_rank) *local_rank = rank % sh.g;
	if (L->slots[rank].node < 0) return 0;
	if (node) *node = L->slots[rank].node;
	return 1;
}

uint32_t place_engine(const job_spec *s, const place_layout *L, uint32_t engine, int *node, uint32_t *gpus,
		      uint32_t cap)
{
	place_shape sh;
	if (node) *node = -1;
	if (!L || !L->slots || place_shape_of(s, &sh) != 0 || L->nslots != sh.n || engine >= sh.ne) return 0;
	uint32_t first = sh.off + engine * sh.tp;
	int nd = L->slots[first].node;
	for (uint32_t k = 0; k < sh.tp; k++)
		if (L->slots[first + k].node < 0 || L->slots[first + k].node != nd) return 0;
	if (node) *node = nd;
	uint32_t cnt = 0;
	for (uint32_t k = 0; k < sh.tp && cnt < cap && gpus; k++) gpus[cnt++] = L->slots[first + k].gpu;
	return cnt;
}

uint32_t place_engine_slot(const job_spec *s, uint32_t engine)
{
	place_shape sh;
	if (place_shape_of(s, &sh) != 0 || engine >= sh.ne) return UINT32_MAX;
	return sh.off + engine * sh.tp;
}

int64_t place_slot_engine(const job_spec *s, uint32_t slot)
{
	place_shape sh;
	if (place_shape_of(s, &sh) != 0 || slot < sh.off || slot >= sh.n) return -1;
	uint32_t e = (slot - sh.off) / sh.tp;
	return e < sh.ne ? (int64_t)e : -1;
}

uint64_t place_gpus_on(const place_layout *L, int node)
{
	uint64_t m = 0;
	if (!L || !L->slots || node < 0) return 0;
	for (uint32_t i = 0; i < L->nslots; i++)
		if (L->slots[i].node == node && L->slots[i].gpu < PLACE_GPU_BITS) m |= (uint64_t)1 << L->slots[i].gpu;
	return m;
}
