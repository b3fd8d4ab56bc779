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
 * The entry array has a fixed budget (cfg.device_journal_bytes, 16 bytes a
 * word).  When it fills, the kernel stops cleanly (no word is written that
 * is not journaled; the first piece not finished is reported), the host
 * copies the entries to a pinned host chunk ("spill"), empties the array and
 * runs the kernel again from that piece: words already copied now compare
 * equal and cost a read.  Device memory stays at the budget whatever the
 * update; pinned chunks are kept for the next version.
 *
 * Undo writes old words back: the device's entries, then each spilled
 * chunk, newest first, copied back into the (now free) entry array.  Old
 * values (not old XOR new) are kept so that undo is right even where a copy
 * was cut short: writing the old word is idempotent. */
#include "transfer/gpu/xfer_gpu.h"

#include <stdlib.h>
#include <string.h>

enum {
	DEFAULT_BUDGET = 256 << 20,
	MIN_BUDGET = 1 << 20,
	ENTRY_BYTES = 16,
};

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
	void *p;       /* pinned, cap entries */
	uint64_t used; /* entries in it */
} spill_chunk;

struct xfer_djournal {
	xfer_gpu *g;
	uint64_t cap;       /* entries the device array holds */
	void *d_ent;        /* allocated on first use */
	jstat *d_st, *h_st; /* device counters and their pinned copy */
	uint64_t fill;      /* entries in the device array */
	spill_chunk *sp;
	size_t nsp, usedsp;
	uint64_t entries, spilled;
};

xfer_djournal *xfer_djournal_new(xfer_gpu *g, uint64_t budget, xfer_err *err)
{
	xfer_djournal *j = calloc(1, sizeof *j);
	if (!j) {
		xfer_fail(err, XFER_ENOMEM, "out of memory");
		return NULL;
	}
	j->g = g;
	if (!budget) budget = DEFAULT_BUDGET;
	if (budget < MIN_BUDGET) budget = MIN_BUDGET;
	j->cap = budget / ENTRY_BYTES;
	return j;
}

void xfer_djournal_free(xfer_djournal **jp)
{
	if (!jp || !*jp) return;
	xfer_djournal *j = *jp;
	const xfer_cuda_api *cu = j->g->cu;
	if (j->d_ent) cu->Free(j->d_ent);
	if (j->d_st) cu->Free(j->d_st);
	if (j->h_st) cu->FreeHost(j->h_st);
	for (size_t i = 0; i < j->nsp; i++) cu->FreeHost(j->sp[i].p);
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
	return s;
}

static int first_use(xfer_djournal *j, xfer_err *err)
{
	const xfer_cuda_api *cu = j->g->cu;
	if (j->d_ent) return 0;
	if (xfer_cuda_check(cu, cu->Malloc((void **)&j->d_st, sizeof(jstat)), "cudaMalloc (journal)", err) != 0 ||
	    xfer_cuda_check(cu, cu->MallocHost((void **)&j->h_st, sizeof(jstat)), "cudaMallocHost (journal)", err) != 0)
		return -1;
	if (cu->Malloc(&j->d_ent, j->cap * ENTRY_BYTES) != 0) {
		j->d_ent = NULL;
		return xfer_fail(err, XFER_ENOMEM, "the device journal's budget (%llu MiB) does not fit on the device: "
				 "lower cfg.device_journal_bytes", (unsigned long long)(j->cap * ENTRY_BYTES >> 20));
	}
	return 0;
}

/* Moves the device entries to a pinned chunk (reused across versions). */
static int spill(xfer_djournal *j, void *stream, xfer_err *err)
{
	const xfer_cuda_api *cu = j->g->cu;
	if (j->usedsp == j->nsp) {
		spill_chunk *s = realloc(j->sp, (j->nsp + 1) * sizeof *s);
		if (!s) return xfer_fail(err, XFER_ENOMEM, "out of memory");
		j->sp = s;
		void *p = NULL;
		if (cu->MallocHost(&p, j->cap * ENTRY_BYTES) != 0 || !p)
			return xfer_fail(err, XFER_ENOMEM, "the device journal spills %llu MiB to pinned host memory: "
					 "cudaMallocHost failed", (unsigned long long)(j->cap * ENTRY_BYTES >> 20));
		j->sp[j->nsp++] = (spill_chunk){ p, 0 };
	}
	spill_chunk *c = &j->sp[j->usedsp];
	if (xfer_cuda_check(cu, cu->MemcpyAsync(c->p, j->d_ent, j->fill * ENTRY_BYTES, XFER_CUDA_D2H, stream),
			    "journal spill", err) != 0 ||
	    xfer_cuda_check(cu, cu->StreamSynchronize(stream), "journal spill", err) != 0)
		return -1;
	c->used = j->fill;
	j->usedsp++;
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
	if (first_use(j, err) != 0) return -1;
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
	if (first_use(j, err) != 0) return -1;
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
