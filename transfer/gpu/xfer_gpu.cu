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
 *   skein_copy_tree     skein_journal_copy and skein_tree_chunks of the new
 *                       bytes in one pass over the source (the colocated
 *                       receiver), where source and destination share their
 *                       alignment mod 8.
 *
 * Words are the aligned 8-byte words of the destination's address space, so
 * stores are aligned; the first and last word of a tensor may be partial (a
 * byte mask: the bytes beside a tensor may belong to another one, written
 * at the same time).  The hashing kernels stage each 1 KiB block through
 * shared memory (stage_block): 8 GiB of unaligned tensors hash in 2.2 ms on
 * the H200 that way, 6.6 ms with wload's two 8-byte loads a word (the
 * *_direct kernels, kept to compare), 9.5 ms with one load a lane and the
 * upper half by shuffle.  skein_journal_copy reads whole aligned words
 * where a piece has only those (journal_piece_whole), else with wload. */
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

/* Staged loads: a group copies a 1 KiB block (+16 bytes) of its chunk
 * into shared memory with aligned 16-byte loads, 8 lanes reading 128
 * contiguous bytes each time, and its lanes take their words from there;
 * an unaligned source then costs no more global loads than an aligned one
 * (wload's two 8-byte loads per word measured 2.7x slower on the H200).
 * STAGE_WORDS pads a group's buffer to 1088 bytes: the 4 groups of a warp
 * then sit 64 bytes apart modulo 128 (shared memory banks). */
#define STAGE_WORDS 136u
#define STAGE_VECS 65u /* 16-byte vectors of a full block, from its aligned start */

__device__ __forceinline__ void stage_block(uint64_t *buf, const unsigned char *blk, unsigned nv, unsigned lane,
					    unsigned gmask)
{
	const uint4 *v = (const uint4 *)((uintptr_t)blk & ~(uintptr_t)15);
	uint4 x[9];
	__syncwarp(gmask); /* the previous block's words were read */
#pragma unroll
	for (unsigned i = 0; i < 9; i++)
		if (lane + 8 * i < nv) x[i] = __ldcs(v + lane + 8 * i);
#pragma unroll
	for (unsigned i = 0; i < 9; i++)
		if (lane + 8 * i < nv) ((uint4 *)buf)[lane + 8 * i] = x[i];
	__syncwarp(gmask);
}

/* The word at byte 8 j + sh / 8 of a staged block. */
__device__ __forceinline__ uint64_t stage_word(const uint64_t *buf, unsigned j, unsigned sh)
{
	return sh ? (buf[j] >> sh) | (buf[j + 1] << (64 - sh)) : buf[j];
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

template <bool STAGED>
__device__ __forceinline__ void tree_chunks(const tree_task *tasks, unsigned ntasks, uint64_t nchunks, uint64_t *out)
{
	__shared__ __align__(16) uint64_t sbuf[STAGED ? 32 * STAGE_WORDS : 2];
	uint64_t *buf = sbuf + (STAGED ? (threadIdx.x >> 3) * STAGE_WORDS : 0);
	unsigned lane = threadIdx.x & 7;
	unsigned gmask = 0xffu << (threadIdx.x & 24);
	uint64_t group = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
	uint64_t ngroups = ((uint64_t)gridDim.x * blockDim.x) >> 3;
	/* this lane's secret words, in registers (constant memory serialises
	 * lanes that read different addresses) */
	uint64_t key[16], kscr = 0, klast = xxh3p_s64(XXH3P_LAST_SOFF + 8 * lane);
	__shared__ uint64_t skey[24]; /* staged: the registers go to the staging */
	if (STAGED) {
		if (threadIdx.x < 24) skey[threadIdx.x] = xxh3p_s64(8 * threadIdx.x);
		__syncthreads();
	} else {
#pragma unroll
		for (unsigned s = 0; s < 16; s++) key[s] = xxh3p_s64(8 * s + 8 * lane);
		kscr = xxh3p_s64(128 + 8 * lane);
	}
#define KEY(s) (STAGED ? skey[(s) + lane] : key[s])
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
			unsigned e = ((uintptr_t)p & 15) >> 3, sh = 8 * ((uintptr_t)p & 7);
			for (uint64_t b = 0; b < nb; b++, lp += XXH3P_BLOCK) {
				if (STAGED) {
					stage_block(buf, p + b * XXH3P_BLOCK, STAGE_VECS, lane, gmask);
#pragma unroll
					for (unsigned s = 0; s < 16; s++) {
						uint64_t w = stage_word(buf, 8 * s + lane + e, sh);
						acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), KEY(s));
					}
				} else {
					uint64_t w[16];
#pragma unroll
					for (unsigned s = 0; s < 16; s++) w[s] = wload(lp + 64 * s);
#pragma unroll
					for (unsigned s = 0; s < 16; s++)
						acc = xxh3p_lane_acc_k(acc, w[s], __shfl_xor_sync(gmask, w[s], 1), KEY(s));
				}
				acc = xxh3p_lane_scramble_k(acc, STAGED ? skey[16 + lane] : kscr);
			}
			unsigned ns = xxh3p_tail_stripes(len);
			if (STAGED && ns) stage_block(buf, p + nb * XXH3P_BLOCK, 4 * ns + 1, lane, gmask);
#pragma unroll
			for (unsigned s = 0; s < 16; s++) {
				if (s >= ns) break;
				uint64_t w = STAGED ? stage_word(buf, 8 * s + lane + e, sh) : wload(lp + 64 * s);
				acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), KEY(s));
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
#undef KEY
}

extern "C" __global__ void __launch_bounds__(256, 2) skein_tree_chunks(const tree_task *tasks, unsigned ntasks,
								      uint64_t nchunks, uint64_t *out)
{
	tree_chunks<true>(tasks, ntasks, nchunks, out);
}

/* the same with wload (xfer_hooks.gpu_direct_loads: to compare) */
extern "C" __global__ void __launch_bounds__(256) skein_tree_chunks_direct(const tree_task *tasks, unsigned ntasks,
									  uint64_t nchunks, uint64_t *out)
{
	tree_chunks<false>(tasks, ntasks, nchunks, out);
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

/* One word's entry claimed by its warp (ballot, one atomic for all the
 * warp's differing words), then kept and, with copy, written.  Every lane
 * of the warp calls it together; diff says whether this lane's word
 * differs.  Past the budget nothing is written: the host spills, resumes. */
__device__ __forceinline__ void journal_word(int diff, uintptr_t wa, unsigned mask, uint64_t oldv, uint64_t newv,
					     uint64_t piece, journal_entry *ent, uint64_t cap, journal_stat *st, int copy)
{
	unsigned lane = threadIdx.x & 31, bal = __ballot_sync(0xffffffffu, diff);
	if (!bal) return;
	unsigned long long at = 0;
	if (lane == __ffs(bal) - 1) at = atomicAdd(&st->count, (unsigned long long)__popc(bal));
	at = __shfl_sync(0xffffffffu, at, __ffs(bal) - 1);
	if (!diff) return;
	at += __popc(bal & ((1u << lane) - 1));
	if (at >= cap) {
		st->full = 1;
		atomicMin(&st->restart, (unsigned long long)piece);
		return;
	}
	ent[at].where = (uint64_t)wa | ((uint64_t)mask << 56);
	ent[at].old = copy ? oldv : oldv ^ newv; /* compare only: what changed */
	if (!copy) return;
	if (mask == 0xff) *(uint64_t *)wa = newv;
	else masked_store((unsigned char *)wa, newv, mask);
}

/* A piece of whole words only, the source aligned like the destination
 * (nearly every piece): JBATCH plain loads of each side a thread, and the
 * ballots only where a warp saw a difference.  On the H200 this runs at
 * cudaMemcpy's speed for a 1% change (8 GiB: 4.01 vs 4.06 ms), where one
 * loop for every case (masks, unaligned loads) took 4.68 ms. */
__device__ __forceinline__ void journal_piece_whole(const uint64_t *dw, const uint64_t *sw, uint64_t piece,
						    journal_entry *ent, uint64_t cap, journal_stat *st, int copy)
{
	for (unsigned b = 0; b < PIECE_WORDS / (JBLOCK * JBATCH); b++) {
		uint64_t o[JBATCH], n[JBATCH];
#pragma unroll
		for (unsigned k = 0; k < JBATCH; k++) {
			unsigned i = (b * JBATCH + k) * JBLOCK + threadIdx.x;
			o[k] = __ldcs(dw + i);
			n[k] = __ldcs(sw + i);
		}
		unsigned diff = 0;
#pragma unroll
		for (unsigned k = 0; k < JBATCH; k++) diff |= (unsigned)(o[k] != n[k]) << k;
		if (!__any_sync(0xffffffffu, diff)) continue;
#pragma unroll
		for (unsigned k = 0; k < JBATCH; k++)
			journal_word((diff >> k) & 1, (uintptr_t)(dw + (b * JBATCH + k) * JBLOCK + threadIdx.x), 0xff, o[k],
				     n[k], piece, ent, cap, st, copy);
	}
}

/* Any other piece (a tensor's first or last, or a source unaligned with
 * its destination): word by word, partial words masked. */
__device__ __forceinline__ void journal_piece_any(const journal_task *t, uint64_t w0, uint64_t piece,
						  journal_entry *ent, uint64_t cap, journal_stat *st, int copy)
{
	uintptr_t d0 = (uintptr_t)t->dst, dend = d0 + t->n, base = d0 & ~(uintptr_t)7;
	uint64_t nwords = (((dend + 7) & ~(uintptr_t)7) - base) / 8;
	for (unsigned j = 0; j < PIECE_WORDS / JBLOCK; j++) {
		uint64_t w = w0 + (uint64_t)j * JBLOCK + threadIdx.x, oldv = 0, newv = 0;
		uintptr_t wa = base + 8 * w;
		unsigned m = 0;
		if (w < nwords) {
			m = 0xff;
			if (wa < d0) m &= 0xffu << (d0 - wa);
			if (wa + 8 > dend) m &= 0xffu >> (wa + 8 - dend);
			const unsigned char *sp = t->src + (wa - d0); /* may point before src: masked */
			if (m == 0xff) {
				oldv = __ldcs((const uint64_t *)wa);
				newv = wload(sp);
			} else {
				oldv = masked_load((const unsigned char *)wa, m);
				newv = masked_load(sp, m);
			}
		}
		journal_word(m && oldv != newv, wa, m, oldv, newv, piece, ent, cap, st, copy);
	}
}

extern "C" __global__ void __launch_bounds__(256) skein_journal_copy(const journal_task *tasks, unsigned ntasks,
								    uint64_t npieces, uint64_t from, journal_entry *ent,
								    uint64_t cap, journal_stat *st, int copy)
{
	/* The block's verdict for each piece, by the parity of its round: thread
	 * 0 may write the next round's while a slower warp still reads this
	 * one's (one barrier a round), and with one flag that warp would read
	 * "stop" and leave its share of this piece undone, unjournaled, behind
	 * a restart set past it. */
	__shared__ int stop[2];
	unsigned round = 0;
	for (uint64_t piece = from + blockIdx.x; piece < npieces; piece += gridDim.x, round ^= 1) {
		if (threadIdx.x == 0) {
			stop[round] = *(volatile unsigned *)&st->full != 0;
			if (stop[round]) atomicMin(&st->restart, (unsigned long long)piece);
		}
		__syncthreads();
		if (stop[round]) return;
		const journal_task *t = &tasks[find_task(tasks, ntasks, piece)];
		uintptr_t d0 = (uintptr_t)t->dst;
		uint64_t w0 = (piece - t->first) * PIECE_WORDS;
		uintptr_t p0 = (d0 & ~(uintptr_t)7) + 8 * w0, p1 = p0 + 8 * (uint64_t)PIECE_WORDS;
		const unsigned char *s0 = t->src + (p0 - d0);
		if (p0 >= d0 && p1 <= d0 + t->n && !((uintptr_t)s0 & 7))
			journal_piece_whole((const uint64_t *)p0, (const uint64_t *)s0, piece, ent, cap, st, copy);
		else
			journal_piece_any(t, w0, piece, ent, cap, st, copy);
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

/* ---- copy, journal and tree hash in one pass (skein_copy_tree) ----
 *
 * The receiver's journaled copy and its hash of the new bytes, reading the
 * source once: a group of 8 threads takes a tree chunk, as skein_tree_chunks
 * does, and with each stripe's words it also compares, journals and writes
 * the destination.  Source and destination must share their alignment mod 8
 * (the host checks): then the aligned source word a lane loads for the hash
 * is the new value of one aligned destination word.  Word k of a chunk is
 * the aligned word holding chunk byte 8k - r (r: the chunk's misalignment);
 * the first and last words are partial (a byte mask), shared with the
 * neighbouring chunk or tensor, each side writing only its bytes.  Changed
 * words are journaled per 1 KiB block with one atomic per group; a full
 * journal stops the chunk (what was written is journaled) and reports it
 * as the restart, whose chunks the host runs again: words already copied
 * compare equal, and the hash is recomputed from the source. */

struct cchunk {
	const uint64_t *qs; /* source words */
	uint64_t *qd;       /* destination words */
	uint64_t len, nwords;
	unsigned r;
};

__device__ __forceinline__ unsigned cc_mask(const cchunk &j, uint64_t k)
{
	unsigned m = 0xff;
	if (k == 0) m &= 0xffu << j.r;
	uint64_t end = 8 * k + 8 - j.r; /* chunk byte just past word k */
	if (end > j.len) m &= 0xffu >> (end - j.len);
	return m & 0xff;
}

__device__ __forceinline__ uint64_t byte_mask(unsigned m)
{
	uint64_t b = 0;
	for (int i = 0; i < 8; i++)
		if ((m >> i) & 1) b |= 0xffull << (8 * i);
	return b;
}

__device__ __forceinline__ int cc_differs(const cchunk &j, uint64_t k, uint64_t nw)
{
	uint64_t d = j.qd[k] ^ nw;
	unsigned m = cc_mask(j, k);
	return (m == 0xff ? d : d & byte_mask(m)) != 0;
}

/* Journals and writes this lane's changed words (bit i of dm: word k0 + 8 i)
 * after one atomic for the group's entries; 1 when the journal is full (the
 * entries below cap are written, with their words; the group stops). */
__device__ __forceinline__ int cc_flush(const cchunk &j, uint64_t k0, unsigned dm, unsigned lane, unsigned gmask,
					journal_entry *ent, uint64_t cap, journal_stat *st)
{
	unsigned cnt = __popc(dm), x = cnt;
	for (unsigned d = 1; d < 8; d <<= 1) {
		unsigned y = __shfl_up_sync(gmask, x, d, 8);
		if (lane >= d) x += y;
	}
	unsigned total = __shfl_sync(gmask, x, 7, 8);
	if (!total) return 0;
	unsigned long long base = 0;
	if (lane == 0) base = atomicAdd(&st->count, (unsigned long long)total);
	base = __shfl_sync(gmask, base, 0, 8);
	int full = base + total > cap;
	base += x - cnt;
	for (; dm; dm &= dm - 1, base++) {
		if (base >= cap) break;
		uint64_t k = k0 + 8ull * (__ffs(dm) - 1);
		unsigned m = cc_mask(j, k);
		uint64_t nw = __ldg(j.qs + k);
		ent[base].where = (uint64_t)(uintptr_t)(j.qd + k) | ((uint64_t)m << 56);
		ent[base].old = j.qd[k] & byte_mask(m);
		if (m == 0xff) j.qd[k] = nw;
		else masked_store((unsigned char *)(j.qd + k), nw, m);
	}
	return full;
}

template <bool STAGED>
__device__ __forceinline__ void copy_tree(const journal_task *tasks, unsigned ntasks, uint64_t nchunks, uint64_t from,
					  journal_entry *ent, uint64_t cap, journal_stat *st, uint64_t *out)
{
	__shared__ __align__(16) uint64_t sbuf[STAGED ? 32 * STAGE_WORDS : 2];
	uint64_t *buf = sbuf + (STAGED ? (threadIdx.x >> 3) * STAGE_WORDS : 0);
	unsigned lane = threadIdx.x & 7;
	unsigned gmask = 0xffu << (threadIdx.x & 24);
	uint64_t group = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
	uint64_t ngroups = ((uint64_t)gridDim.x * blockDim.x) >> 3;
	/* the secret's words in shared memory: registers go to the loads here */
	__shared__ uint64_t key[24];
	if (threadIdx.x < 24) key[threadIdx.x] = xxh3p_s64(8 * threadIdx.x);
	__syncthreads();
	uint64_t klast = xxh3p_s64(XXH3P_LAST_SOFF + 8 * lane);
	for (uint64_t c = from + group; c < nchunks; c += ngroups) {
		unsigned stop = 0;
		if (lane == 0 && (stop = *(volatile unsigned *)&st->full)) atomicMin(&st->restart, (unsigned long long)c);
		if (__shfl_sync(gmask, stop, 0, 8)) return;
		const journal_task *t = &tasks[find_task(tasks, ntasks, c)];
		uint64_t off = (c - t->first) * TREE_CHUNK;
		const unsigned char *p = t->src + off;
		cchunk j;
		j.len = t->n - off < TREE_CHUNK ? t->n - off : TREE_CHUNK;
		j.r = (unsigned)((uintptr_t)p & 7);
		j.qs = (const uint64_t *)(p - j.r);
		j.qd = (uint64_t *)(t->dst + off - j.r);
		j.nwords = (j.r + j.len + 7) / 8;
		uint64_t row = 0, h;
		int full = 0;
		if (j.len <= XXH3P_MIDSIZE_MAX) {
			h = xxh3p_short(p, j.len);
		} else {
			uint64_t acc = xxh3p_lane_init(lane), nb = xxh3p_blocks(j.len);
			unsigned ns = xxh3p_tail_stripes(j.len), sh = 8 * j.r, e = ((uintptr_t)p & 15) >> 3;
			for (uint64_t b = 0; b <= nb && !full; b++) {
				unsigned nr = b < nb ? 16 : ns, dm = 0;
				uint64_t k0 = 8 * row + lane;
				if (STAGED) {
					if (nr) stage_block(buf, p + b * XXH3P_BLOCK, b < nb ? STAGE_VECS : 4 * nr + 1, lane, gmask);
#pragma unroll
					for (unsigned s = 0; s < 16; s++) {
						if (s >= nr) break;
						uint64_t lo = buf[8 * s + lane + e], w = stage_word(buf, 8 * s + lane + e, sh);
						if (cc_differs(j, k0 + 8 * s, lo)) dm |= 1u << s;
						acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), key[s + lane]);
					}
				} else {
					uint64_t lo[16];
#pragma unroll
					for (unsigned s = 0; s < 16; s++)
						if (s < nr) lo[s] = __ldg(j.qs + k0 + 8 * s);
#pragma unroll
					for (unsigned s = 0; s < 16; s++) {
						if (s >= nr) break;
						uint64_t w = sh ? (lo[s] >> sh) | (__ldg(j.qs + k0 + 8 * s + 1) << (64 - sh)) : lo[s];
						if (cc_differs(j, k0 + 8 * s, lo[s])) dm |= 1u << s;
						acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), key[s + lane]);
					}
				}
				if (b < nb) acc = xxh3p_lane_scramble_k(acc, key[16 + lane]);
				full = cc_flush(j, k0, dm, lane, gmask, ent, cap, st);
				row += nr;
			}
			uint64_t w = wload(p + j.len - 64 + 8 * lane);
			acc = xxh3p_lane_acc_k(acc, w, __shfl_xor_sync(gmask, w, 1), klast);
			uint64_t other = __shfl_xor_sync(gmask, acc, 1);
			uint64_t part = (lane & 1) ? 0 : xxh3p_merge_pair(acc, other, lane >> 1);
			part += __shfl_xor_sync(gmask, part, 2);
			part += __shfl_xor_sync(gmask, part, 4);
			h = xxh3p_avalanche(j.len * XXH3P_P64_1 + part);
		}
		/* the words past the hash's loops: the last stripe's, a partial one */
		for (uint64_t k0 = 8 * row + lane; !full && k0 - lane < j.nwords; k0 += 8 * 16) {
			unsigned dm = 0;
			for (unsigned s = 0; s < 16; s++) {
				uint64_t k = k0 + 8 * s;
				if (k < j.nwords && cc_differs(j, k, __ldg(j.qs + k))) dm |= 1u << s;
			}
			full = cc_flush(j, k0, dm, lane, gmask, ent, cap, st);
		}
		if (full) {
			if (lane == 0) {
				st->full = 1;
				atomicMin(&st->restart, (unsigned long long)c);
			}
			return;
		}
		if (lane == 0) out[c] = h;
	}
}

extern "C" __global__ void __launch_bounds__(256, 2) skein_copy_tree(const journal_task *tasks, unsigned ntasks,
								 uint64_t nchunks, uint64_t from, journal_entry *ent,
								 uint64_t cap, journal_stat *st, uint64_t *out)
{
	copy_tree<true>(tasks, ntasks, nchunks, from, ent, cap, st, out);
}

/* the same with direct loads (xfer_hooks.gpu_direct_loads: to compare) */
extern "C" __global__ void __launch_bounds__(256, 2) skein_copy_tree_direct(const journal_task *tasks, unsigned ntasks,
									uint64_t nchunks, uint64_t from,
									journal_entry *ent, uint64_t cap,
									journal_stat *st, uint64_t *out)
{
	copy_tree<false>(tasks, ntasks, nchunks, from, ent, cap, st, out);
}
