/* transfer/xfer_gpu.cu: libskein's GPU kernels, loaded at run time through
 * the CUDA driver API (transfer/xfer_gpu.c) from the fatbin that
 * tools/gen_gpu_kernels.sh builds (sm_90 code + compute_90 PTX) and embeds
 * as a C array (transfer/xfer_gpu_kernels.c, committed: building libskein
 * never needs nvcc).  extern "C" names, plain structs: the host side is C.
 *
 *   skein_tree_chunks   the tree checksum's first level: XXH3-64 of every
 *                       256 KiB chunk of a list of tensors, 8 threads a chunk
 *                       (one per XXH3 accumulator lane, the partner word by
 *                       shuffle); the same code as the CPU's through
 *                       transfer/xfer_xxh3.h.
 *   skein_journal_copy  compares the receiver's bytes (old) with the new ones
 *                       word by word, keeps (position, old word) where they
 *                       differ in a device journal (warp-aggregated atomics:
 *                       a compaction), and writes the new word there; with
 *                       copy 0 it only compares and keeps old XOR new.  A full journal stops the
 *                       kernel cleanly: no word is written unless journaled,
 *                       and the host learns where to resume (restart).
 *   skein_journal_undo  writes the old words back.
 *
 * Words are the aligned 8-byte words of the destination's address space, so
 * stores are aligned; the first and last word of a tensor may be partial (a
 * byte mask: the bytes beside a tensor may belong to another one, written
 * at the same time).  Unaligned sources are read with two aligned loads and
 * a funnel shift: it reads at most the aligned words holding the bytes (on
 * the H200 that measured faster, 6.5 ms for 8 GiB of unaligned tensors, than
 * one load a lane and the upper half by shuffle, 9.5 ms). */
#include <stdint.h>

__device__ __forceinline__ uint64_t bload64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
	return v;
}
__device__ __forceinline__ uint32_t bload32(const unsigned char *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
#define XXH3P_LOAD64(p) bload64(p)
#define XXH3P_LOAD32(p) bload32(p)
#define XXH3P_LOAD8(p) (*(p))
#include "xfer_xxh3.h"

#define TREE_CHUNK (256u << 10)
#define PIECE_WORDS 8192u /* words of a journal piece: one block's share */
#define JBLOCK 256u
#define JBATCH 8u

/* A word at any address: aligned loads only. */
__device__ __forceinline__ uint64_t wload(const unsigned char *p)
{
	uintptr_t a = (uintptr_t)p;
	unsigned r = (unsigned)(a & 7);
	const uint64_t *q = (const uint64_t *)(a - r);
	if (!r) return __ldcs(q);
	uint64_t lo = __ldcs(q), hi = __ldcs(q + 1);
	return (lo >> (8 * r)) | (hi << (64 - 8 * r));
}

struct tree_task {
	const unsigned char *p;
	uint64_t n;
	uint64_t first; /* index of its first chunk */
};

/* The task holding chunk c: the last one whose first chunk is <= c (empty
 * tensors share their first with the next one and so are never chosen). */
template <class T> __device__ __forceinline__ unsigned find_task(const T *t, unsigned nt, uint64_t c)
{
	unsigned lo = 0, hi = nt;
	while (hi - lo > 1) {
		unsigned mid = (lo + hi) / 2;
		if (t[mid].first <= c) lo = mid;
		else hi = mid;
	}
	return lo;
}

extern "C" __global__ void __launch_bounds__(256) skein_tree_chunks(const tree_task *tasks, unsigned ntasks,
								   uint64_t nchunks, uint64_t *out)
{
	unsigned lane = threadIdx.x & 7;
	unsigned gmask = 0xffu << (threadIdx.x & 24);
	uint64_t group = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
	uint64_t ngroups = ((uint64_t)gridDim.x * blockDim.x) >> 3;
	/* this lane's secret words, in registers (constant memory serialises
	 * lanes that read different addresses) */
	uint64_t key[16];
#pragma unroll
	for (unsigned s = 0; s < 16; s++) key[s] = xxh3p_s64(8 * s + 8 * lane);
	uint64_t kscr = xxh3p_s64(128 + 8 * lane), klast = xxh3p_s64(XXH3P_LAST_SOFF + 8 * lane);
	for (uint64_t c = group; c < nchunks; c += ngroups) {
		const tree_task *t = &tasks[find_task(tasks, ntasks, c)];
		uint64_t off = (c - t->first) * TREE_CHUNK;
		const unsigned char *p = t->p + off;
		uint64_t len = t->n - off < TREE_CHUNK ? t->n - off : TREE_CHUNK, h;
		if (len <= XXH3P_MIDSIZE_MAX) {
			h = xxh3p_short(p, len);
		} else {
			uint64_t acc = xxh3p_lane_init(lane), nb = xxh3p_blocks(len);
			const unsigned char *lp = p + 8 * lane;
			for (uint64_t b = 0; b < nb; b++, lp += XXH3P_BLOCK) {
				uint64_t w[16];
#pragma unroll
				for (unsigned s = 0; s < 16; s++) w[s] = wload(lp + 64 * s);
#pragma unroll
				for (unsigned s = 0; s < 16; s++)
					acc = xxh3p_lane_acc_k(acc, w[s], __shfl_xor_sync(gmask, w[s], 1), key[s]);
				acc = xxh3p_lane_scramble_k(acc, kscr);
			}
			unsigned ns = xxh3p_tail_stripes(len);
#pragma unroll
			for (unsigned s = 0; s < 16; s++) {
				if (s >= ns) break;
				uint64_t w = wload(lp + 64 * s);
				acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), key[s]);
			}
			uint64_t w = wload(p + len - 64 + 8 * lane);
			acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), klast);
			uint64_t other = __shfl_xor_sync(gmask, acc, 1);
			uint64_t part = (lane & 1) ? 0 : xxh3p_merge_pair(acc, other, lane >> 1);
			part += __shfl_xor_sync(gmask, part, 2);
			part += __shfl_xor_sync(gmask, part, 4);
			h = xxh3p_avalanche(len * XXH3P_P64_1 + part);
		}
		if (lane == 0) out[c] = h;
	}
}

/* ---- the journal ---- */

struct journal_task {
	unsigned char *dst;
	const unsigned char *src;
	uint64_t n;
	uint64_t first; /* index of its first piece */
};

struct journal_entry {
	uint64_t where; /* aligned word address | byte mask << 56 */
	uint64_t old;
};

struct journal_stat {
	unsigned long long count;   /* entries claimed (may pass cap: those were not written) */
	unsigned long long restart; /* the first piece not fully done, when full */
	unsigned int full;
	unsigned int pad;
};

__device__ __forceinline__ uint64_t masked_load(const unsigned char *p, unsigned mask)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) v = (v << 8) | ((mask >> i) & 1 ? p[i] : 0);
	return v;
}

__device__ __forceinline__ void masked_store(unsigned char *p, uint64_t v, unsigned mask)
{
	for (int i = 0; i < 8; i++)
		if ((mask >> i) & 1) p[i] = (unsigned char)(v >> (8 * i));
}

extern "C" __global__ void __launch_bounds__(256) skein_journal_copy(const journal_task *tasks, unsigned ntasks,
								    uint64_t npieces, uint64_t from, journal_entry *ent,
								    uint64_t cap, journal_stat *st, int copy)
{
	__shared__ int stop;
	unsigned lane = threadIdx.x & 31;
	for (uint64_t piece = from + blockIdx.x; piece < npieces; piece += gridDim.x) {
		if (threadIdx.x == 0) {
			stop = *(volatile unsigned *)&st->full != 0;
			if (stop) atomicMin(&st->restart, (unsigned long long)piece);
		}
		__syncthreads();
		if (stop) return;
		const journal_task *t = &tasks[find_task(tasks, ntasks, piece)];
		uintptr_t d0 = (uintptr_t)t->dst, dend = d0 + t->n, base = d0 & ~(uintptr_t)7;
		uint64_t nwords = ((dend + 7) & ~(uintptr_t)7) - base;
		nwords /= 8;
		uint64_t w0 = (piece - t->first) * PIECE_WORDS;
		for (unsigned b = 0; b < PIECE_WORDS / (JBLOCK * JBATCH); b++) {
			uint64_t oldv[JBATCH], newv[JBATCH];
			unsigned mask[JBATCH];
#pragma unroll
			for (unsigned k = 0; k < JBATCH; k++) {
				uint64_t w = w0 + (uint64_t)(b * JBATCH + k) * JBLOCK + threadIdx.x;
				uintptr_t wa = base + 8 * w;
				mask[k] = 0;
				oldv[k] = newv[k] = 0;
				if (w >= nwords) continue;
				unsigned m = 0xff;
				if (wa < d0) m &= 0xffu << (d0 - wa);
				if (wa + 8 > dend) m &= 0xffu >> (wa + 8 - dend);
				mask[k] = m;
				const unsigned char *sp = t->src + (wa - d0); /* may point before src: masked */
				if (m == 0xff) {
					oldv[k] = __ldcs((const uint64_t *)wa);
					newv[k] = wload(sp);
				} else {
					oldv[k] = masked_load((const unsigned char *)wa, m);
					newv[k] = masked_load(sp, m);
				}
			}
#pragma unroll
			for (unsigned k = 0; k < JBATCH; k++) {
				int diff = mask[k] && oldv[k] != newv[k];
				unsigned bal = __ballot_sync(0xffffffffu, diff);
				if (!bal) continue;
				unsigned long long at = 0;
				if (lane == __ffs(bal) - 1) at = atomicAdd(&st->count, (unsigned long long)__popc(bal));
				at = __shfl_sync(0xffffffffu, at, __ffs(bal) - 1);
				if (!diff) continue;
				at += __popc(bal & ((1u << lane) - 1));
				uint64_t w = w0 + (uint64_t)(b * JBATCH + k) * JBLOCK + threadIdx.x;
				uintptr_t wa = base + 8 * w;
				if (at >= cap) {
					st->full = 1;
					atomicMin(&st->restart, (unsigned long long)piece);
					continue;
				}
				ent[at].where = (uint64_t)wa | ((uint64_t)mask[k] << 56);
				ent[at].old = copy ? oldv[k] : oldv[k] ^ newv[k]; /* compare only: what changed */
				if (!copy) continue;
				if (mask[k] == 0xff) *(uint64_t *)wa = newv[k];
				else masked_store((unsigned char *)wa, newv[k], mask[k]);
			}
		}
	}
}

extern "C" __global__ void skein_journal_undo(const journal_entry *ent, uint64_t n)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
		journal_entry e = ent[i];
		unsigned mask = (unsigned)(e.where >> 56);
		unsigned char *p = (unsigned char *)(uintptr_t)(e.where & ((1ull << 56) - 1));
		if (mask == 0xff) *(uint64_t *)p = e.old;
		else masked_store(p, e.old, mask);
	}
}
