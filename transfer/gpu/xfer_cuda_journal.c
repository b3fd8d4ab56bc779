/* transfer/gpu/xfer_cuda_journal.c: the undo journal of a CUDA receiver, kept
 * on the device.
 *
 * xfer_journal.c journals device memory by reading it back to the host:
 * right for p2p-tcp, whose bytes cross the host anyway, far too slow for a
 * device-to-device copy.  Here the kernel skein_journal_copy (xfer_gpu.cu)
 * compares old and new words on the device, appends (position, old word) for
 * those that differ to an entry array in device memory (a compaction with
 * warp-aggregated atomics), and writes only those words: a 1% update reads
 * both sides once and writes 1%.
 *
 * The entry array has a fixed budget (16 bytes a word).  When it fills, the
 * kernel stops cleanly (no word is written that is not journaled; the first
 * piece not finished is reported), the host copies the entries to host
 * blocks ("spill"), empties the array and runs the kernel again from that
 * piece: words already copied now compare equal and cost a read.  Device
 * memory stays at the budget whatever the update.
 *
 * Sizing (issue 27), all at open, in this order: the engine has loaded its
 * weights and opens the receiver; the budget is cfg.device_journal_bytes,
 * or an eighth of the device's free memory then, capped at 2x the model
 * (every word changed); the engine's KV cache and a colocated trainer's
 * optimizer states and activations are allocated after it, out of the
 * seven eighths left (engines size their KV cache from what is free when
 * they do).  The array is allocated at open, halved until it fits (more
 * spilling, never a failed open over the journal's size).  Then the spill
 * pool: pinned blocks covering what a version changing every word spills
 * (2x model - budget), under the node's pinned cap (SKEIN_PINNED_BYTES,
 * shared by the GPUs the runtime sees), allocated at open: cudaMallocHost
 * of gigabytes takes seconds, which a version must not wait for (the
 * multi-second second version of issue 27).  Past the pool a spill goes
 * to pageable blocks (malloc, kept for later versions; their copies are
 * slower, staged by the driver), never to a failure.
 *
 * Undo writes old words back: the device's entries, then each spilled
 * block, newest first, copied back into the (now free) entry array.  Old
 * values (not old XOR new) are kept so that undo is right even where a copy
 * was cut short: writing the old word is idempotent. */
#include "transfer/gpu/xfer_gpu.h"

#include <stdlib.h>
#include <string.h>

enum {
	DEFAULT_BUDGET = 256 << 20,
	MIN_BUDGET = 1 << 20,
	ENTRY_BYTES = 16,
	FREE_DIV = 8,             /* the budget's share of the device's free memory at open */
	SPILL_BLOCK = 256 << 20,  /* a spill block's bytes, at most (the device array's, at most) */
};
#define DEFAULT_PINNED_CAP (16ull << 30) /* the node's pinned spill pools, unless SKEIN_PINNED_BYTES */

typedef struct {
	void *dst;
	const void *src;
	uint64_t n, first;
} jtask; /* = journal_task in xfer_gpu.cu */

typedef struct {
	unsigned long long count, restart;
	unsigned int full, pad;
} jstat; /* = journal_stat */

typedef struct {
	void *p;
	uint64_t used; /* entries in it (at most the journal's block) */
	int pinned;    /* the pool's (cudaMallocHost), else malloc'd past it */
} spill_chunk;

struct xfer_djournal {
	xfer_gpu *g;
	uint64_t cap;       /* entries the device array holds */
	uint64_t block;     /* entries a spill block holds */
	void *d_ent;        /* allocated at open */
	jstat *d_st, *h_st; /* device counters and their pinned copy */
	uint64_t fill;      /* entries in the device array */
	spill_chunk *sp;    /* the pool, then blocks added past it; kept across versions */
	size_t nsp, usedsp;
	uint64_t entries, spilled;
};

uint64_t xfer_djournal_budget(uint64_t flag, uint64_t free_bytes, uint64_t model_bytes)
{
	if (flag) return flag < MIN_BUDGET ? MIN_BUDGET : flag;
	uint64_t b = free_bytes ? free_bytes / FREE_DIV : DEFAULT_BUDGET;
	if (model_bytes && b > 2 * model_bytes) b = 2 * model_bytes;
	return b < MIN_BUDGET ? MIN_BUDGET : b / ENTRY_BYTES * ENTRY_BYTES;
}

uint64_t xfer_djournal_pool_bytes(uint64_t budget, uint64_t model_bytes, uint64_t pinned_cap)
{
	uint64_t need = 2 * model_bytes > budget ? 2 * model_bytes - budget : 0;
	return need < pinned_cap ? need : pinned_cap;
}

uint64_t xfer_djournal_pinned_cap(void)
{
	const char *e = getenv("SKEIN_PINNED_BYTES");
	uint64_t cap = DEFAULT_PINNED_CAP;
	if (e && *e) {
		char *end;
		unsigned long long v = strtoull(e, &end, 10);
		if (*end == 0) cap = v;
	}
	const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
	int n = 0;
	if (cu && cu->GetDeviceCount(&n) == 0 && n > 1) cap /= (uint64_t)n; /* this GPU's share of the node's */
	return cap;
}

static int add_block(xfer_djournal *j, int pinned)
{
	const xfer_cuda_api *cu = j->g->cu;
	spill_chunk *s = realloc(j->sp, (j->nsp + 1) * sizeof *s);
	if (!s) return -1;
	j->sp = s;
	void *p = NULL;
	size_t bytes = (size_t)(j->block * ENTRY_BYTES);
	if (pinned ? cu->MallocHost(&p, bytes) != 0 : !(p = malloc(bytes))) return -1;
	if (!p) return -1;
	j->sp[j->nsp++] = (spill_chunk){ p, 0, pinned };
	return 0;
}

xfer_djournal *xfer_djournal_new(xfer_gpu *g, uint64_t budget, uint64_t model_bytes, xfer_err *err)
{
	xfer_djournal *j = calloc(1, sizeof *j);
	if (!j) {
		xfer_fail(err, XFER_ENOMEM, "out of memory");
		return NULL;
	}
	j->g = g;
	const xfer_cuda_api *cu = g->cu;
	size_t fr = 0, total = 0;
	if (!budget && cu->MemGetInfo && (cu->SetDevice(g->device) != 0 || cu->MemGetInfo(&fr, &total) != 0)) fr = 0;
	budget = xfer_djournal_budget(budget, fr, model_bytes);
	if (xfer_cuda_check(cu, cu->Malloc((void **)&j->d_st, sizeof(jstat)), "cudaMalloc (journal)", err) != 0 ||
	    xfer_cuda_check(cu, cu->MallocHost((void **)&j->h_st, sizeof(jstat)), "cudaMallocHost (journal)", err) != 0)
		goto fail;
	/* what does not fit on the device spills instead */
	for (;; budget /= 2) {
		j->cap = budget / ENTRY_BYTES;
		if (cu->Malloc(&j->d_ent, j->cap * ENTRY_BYTES) == 0 && j->d_ent) break;
		j->d_ent = NULL;
		if (budget / 2 < MIN_BUDGET) {
			xfer_fail(err, XFER_ENOMEM, "the device journal's %llu MiB do not fit on the device",
				  (unsigned long long)(budget >> 20));
			goto fail;
		}
	}
	j->block = j->cap < SPILL_BLOCK / ENTRY_BYTES ? j->cap : SPILL_BLOCK / ENTRY_BYTES;
	uint64_t pool = xfer_djournal_pool_bytes(j->cap * ENTRY_BYTES, model_bytes, xfer_djournal_pinned_cap());
	for (uint64_t have = 0; have < pool; have += j->block * ENTRY_BYTES)
		if (add_block(j, 1) != 0) break; /* pinned memory short: the rest spills to pageable blocks */
	return j;
fail:
	xfer_djournal_free(&j);
	return NULL;
}

void xfer_djournal_free(xfer_djournal **jp)
{
	if (!jp || !*jp) return;
	xfer_djournal *j = *jp;
	const xfer_cuda_api *cu = j->g->cu;
	if (j->d_ent) cu->Free(j->d_ent);
	if (j->d_st) cu->Free(j->d_st);
	if (j->h_st) cu->FreeHost(j->h_st);
	for (size_t i = 0; i < j->nsp; i++) {
		if (j->sp[i].pinned) cu->FreeHost(j->sp[i].p);
		else free(j->sp[i].p);
	}
	free(j->sp);
	free(j);
	*jp = NULL;
}

void xfer_djournal_reset(xfer_djournal *j)
{
	j->fill = 0;
	j->usedsp = 0;
	j->entries = j->spilled = 0;
}

xfer_djournal_stats xfer_djournal_get_stats(const xfer_djournal *j)
{
	xfer_djournal_stats s = { 0 };
	if (!j) return s;
	s.entries = j->entries;
	s.bytes = j->entries * ENTRY_BYTES;
	s.spilled = j->spilled;
	s.device_peak = j->d_ent ? j->cap * ENTRY_BYTES + sizeof(jstat) : 0;
	for (size_t i = 0; i < j->nsp; i++) s.pinned_pool += j->sp[i].pinned ? j->block * ENTRY_BYTES : 0;
	return s;
}

/* Moves the device entries to host blocks, block by block: the pool's
 * pinned ones first, then pageable ones added past it (kept for the next
 * versions). */
static int spill(xfer_djournal *j, void *stream, xfer_err *err)
{
	const xfer_cuda_api *cu = j->g->cu;
	for (uint64_t at = 0; at < j->fill;) {
		if (j->usedsp == j->nsp && add_block(j, 0) != 0)
			return xfer_fail(err, XFER_ENOMEM, "the device journal spills past its pinned pool: out of host memory");
		spill_chunk *c = &j->sp[j->usedsp];
		uint64_t n = j->fill - at < j->block ? j->fill - at : j->block;
		if (xfer_cuda_check(cu, cu->MemcpyAsync(c->p, (char *)j->d_ent + at * ENTRY_BYTES, n * ENTRY_BYTES,
							XFER_CUDA_D2H, stream),
				    "journal spill", err) != 0)
			return -1;
		c->used = n;
		j->usedsp++;
		at += n;
	}
	if (xfer_cuda_check(cu, cu->StreamSynchronize(stream), "journal spill", err) != 0) return -1;
	j->spilled += j->fill * ENTRY_BYTES;
	j->fill = 0;
	return 0;
}

/* Runs skein_journal_copy (fused 0: units are pieces) or skein_copy_tree
 * (units are tree chunks) over the nt uploaded tasks, spilling and resuming
 * while the device array fills. */
static int run_journaled(xfer_djournal *j, void *stream, size_t nt, uint64_t units, int fused, xfer_err *err)
{
	const xfer_cuda_api *cu = j->g->cu;
	if (xfer_gpu_upload_tasks(j->g, stream, nt * sizeof(jtask), err) != 0) return -1;
	uint64_t from = 0;
	for (;;) {
		*j->h_st = (jstat){ .count = j->fill, .restart = ~0ull };
		if (xfer_cuda_check(cu, cu->MemcpyAsync(j->d_st, j->h_st, sizeof(jstat), XFER_CUDA_H2D, stream),
				    "journal counters", err) != 0 ||
		    (fused ? xfer_gpu_copy_tree_launch(j->g, stream, (unsigned)nt, units, from, j->d_ent, j->cap, j->d_st, err)
			   : xfer_gpu_journal_launch(j->g, stream, (unsigned)nt, units, from, j->d_ent, j->cap, j->d_st, 1,
						     err)) != 0 ||
		    xfer_cuda_check(cu, cu->MemcpyAsync(j->h_st, j->d_st, sizeof(jstat), XFER_CUDA_D2H, stream),
				    "journal counters", err) != 0 ||
		    xfer_cuda_check(cu, cu->StreamSynchronize(stream), fused ? "skein_copy_tree" : "skein_journal_copy",
				    err) != 0)
			return -1;
		jstat st = *j->h_st;
		uint64_t got = st.count < j->cap ? st.count : j->cap;
		j->entries += got - j->fill;
		j->fill = got;
		if (!st.full) return 0;
		if (st.restart < from || st.restart >= units)
			return xfer_fail(err, XFER_EIO, "device journal: resume %s %llu outside [%llu, %llu)",
					 fused ? "chunk" : "piece", st.restart, (unsigned long long)from,
					 (unsigned long long)units);
		if (spill(j, stream, err) != 0) return -1;
		from = st.restart;
	}
}

int xfer_djournal_copy(xfer_djournal *j, void *stream, void *const *dst, const void *const *src, const uint64_t *n,
		       size_t count, xfer_err *err)
{
	if (!count) return 0;
	jtask *t = xfer_gpu_host_tasks(j->g, count * sizeof *t, err);
	if (!t) return -1;
	uint64_t pieces = 0;
	size_t nt = 0;
	for (size_t i = 0; i < count; i++) {
		if (!n[i]) continue;
		uintptr_t a = (uintptr_t)dst[i], lo = a & ~(uintptr_t)7, hi = (a + n[i] + 7) & ~(uintptr_t)7;
		uint64_t words = (hi - lo) / 8;
		t[nt++] = (jtask){ dst[i], src[i], n[i], pieces };
		pieces += (words + XFER_GPU_PIECE_WORDS - 1) / XFER_GPU_PIECE_WORDS;
	}
	return nt ? run_journaled(j, stream, nt, pieces, 0, err) : 0;
}

int xfer_djournal_copy_tree(xfer_djournal *j, void *stream, void *const *dst, const void *const *src,
			    const uint64_t *n, size_t count, xfer_sum *out, xfer_err *err)
{
	for (size_t i = 0; i < count; i++)
		if (n[i] && (((uintptr_t)dst[i] ^ (uintptr_t)src[i]) & 7)) return 1;
	if (!count) return 0;
	jtask *t = xfer_gpu_host_tasks(j->g, count * sizeof *t, err);
	if (!t) return -1;
	uint64_t chunks = 0;
	size_t nt = 0;
	for (size_t i = 0; i < count; i++) {
		if (!n[i]) continue;
		t[nt++] = (jtask){ dst[i], src[i], n[i], chunks };
		chunks += xfer_tree_nchunks(n[i]);
	}
	if (xfer_gpu_hash_room(j->g, chunks, err) != 0) return -1;
	if (nt && run_journaled(j, stream, nt, chunks, 1, err) != 0) return -1;
	const xfer_cuda_api *cu = j->g->cu;
	if (chunks && (xfer_cuda_check(cu, cu->MemcpyAsync(j->g->h_hash, j->g->d_hash, chunks * 8, XFER_CUDA_D2H, stream),
				       "cudaMemcpyAsync (chunk hashes)", err) != 0 ||
		       xfer_cuda_check(cu, cu->StreamSynchronize(stream), "skein_copy_tree", err) != 0))
		return -1;
	for (size_t i = 0, k = 0; out && i < count; i++) {
		out[i] = xfer_tree_top(j->g->h_hash + (n[i] ? t[k].first : 0), xfer_tree_nchunks(n[i]), n[i]);
		if (n[i]) k++;
	}
	return 0;
}

int xfer_djournal_copy_chunks(xfer_djournal *j, void *stream, void *const *dst, const void *const *src,
			      const uint64_t *n, size_t count, uint64_t *out, xfer_err *err)
{
	int rc = xfer_djournal_copy_tree(j, stream, dst, src, n, count, NULL, err);
	if (rc == 0) xfer_gpu_hashes_out(j->g, n, count, out);
	return rc;
}

int xfer_djournal_undo(xfer_djournal *j, void *stream, xfer_err *err)
{
	const xfer_cuda_api *cu = j->g->cu;
	if (j->fill && xfer_gpu_undo_launch(j->g, stream, j->d_ent, j->fill, err) != 0) return -1;
	j->fill = 0;
	while (j->usedsp) {
		spill_chunk *c = &j->sp[--j->usedsp];
		if (xfer_cuda_check(cu, cu->MemcpyAsync(j->d_ent, c->p, c->used * ENTRY_BYTES, XFER_CUDA_H2D, stream),
				    "journal undo (spilled entries)", err) != 0 ||
		    xfer_gpu_undo_launch(j->g, stream, j->d_ent, c->used, err) != 0)
			return -1;
	}
	return xfer_cuda_check(cu, cu->StreamSynchronize(stream), "skein_journal_undo", err);
}
