/* transfer/core/xfer_tree.c: the tree checksum on CPU threads (the reference).
 *
 * A tensor of n bytes is cut into chunks of XFER_TREE_CHUNK (256 KiB; the
 * last one shorter); each chunk gets its XXH3-64 (seed 0), and the tensor's
 * checksum is the XXH3-128 of those chunk hashes (little-endian, in order)
 * seeded with n.  Chunks are independent, so many threads (or GPU blocks:
 * xfer_gpu.cu, same bits through transfer/core/xfer_xxh3.h) share one tensor;
 * the second level reads 8 bytes per 256 KiB and is left to one thread.
 * The collision argument is in docs/tree-checksum.md.
 *
 * Threads are started per call (a pool would save ~20 us a call; the calls
 * that matter hash hundreds of MiB) and only when there are at least
 * MIN_CHUNKS_PER_THREAD chunks each; work is handed out a chunk at a time
 * from an atomic counter over all the tensors of the call, so one large
 * tensor and many small ones spread alike. */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "transfer/core/xfer_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "transfer/core/xfer_hash.h"

enum {
	MAX_THREADS = 64,
	MIN_CHUNKS_PER_THREAD = 4, /* below this a thread costs more than it saves */
};

uint64_t xfer_tree_nchunks(uint64_t n) { return (n + XFER_TREE_CHUNK - 1) / XFER_TREE_CHUNK; }

xfer_sum xfer_tree_top(const uint64_t *h, uint64_t nchunks, uint64_t nbytes)
{
	XXH128_hash_t r;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	r = XXH3_128bits_withSeed(h, nchunks * sizeof *h, nbytes);
#else
#error "the tree checksum hashes its chunk hashes as little-endian words"
#endif
	return (xfer_sum){ r.low64, r.high64 };
}

typedef struct {
	const unsigned char *const *p;
	const uint64_t *n;
	const uint64_t *first; /* first chunk of each tensor, count+1 entries */
	size_t count;
	uint64_t *h;           /* every chunk hash, first[count] of them */
	atomic_uint_fast64_t next;
} tree_job;

static void *tree_worker(void *arg)
{
	tree_job *J = arg;
	size_t t = 0;
	for (;;) {
		uint64_t c = atomic_fetch_add(&J->next, 1);
		if (c >= J->first[J->count]) break;
		while (J->first[t + 1] <= c) t++; /* chunks are handed out in order */
		uint64_t off = (c - J->first[t]) * XFER_TREE_CHUNK;
		uint64_t k = J->n[t] - off < XFER_TREE_CHUNK ? J->n[t] - off : XFER_TREE_CHUNK;
		J->h[c] = XXH3_64bits(J->p[t] + off, (size_t)k);
	}
	return NULL;
}

int xfer_tree_threads(int threads)
{
	if (threads > 0) return threads > MAX_THREADS ? MAX_THREADS : threads;
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	return c < 1 ? 1 : c > 16 ? 16 : (int)c;
}

/* Runs J on up to `threads` threads (the caller is one of them). */
static void tree_run(tree_job *J, int threads)
{
	uint64_t total = J->first[J->count];
	int want = xfer_tree_threads(threads);
	if ((uint64_t)want > total / MIN_CHUNKS_PER_THREAD) want = (int)(total / MIN_CHUNKS_PER_THREAD);
	if (want < 1) want = 1;
	pthread_t tid[MAX_THREADS];
	int started = 0;
	for (int i = 1; i < want; i++)
		if (pthread_create(&tid[started], NULL, tree_worker, J) == 0) started++;
	tree_worker(J); /* with no thread started this does it all */
	for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

void xfer_tree_chunk_hashes(const void *p, uint64_t n, uint64_t *out, int threads)
{
	const unsigned char *pp = p;
	uint64_t first[2] = { 0, xfer_tree_nchunks(n) };
	tree_job J = { .p = &pp, .n = &n, .first = first, .count = 1, .h = out };
	atomic_init(&J.next, 0);
	tree_run(&J, threads);
}

int xfer_tree_sums(const void *const *p, const uint64_t *n, size_t count, xfer_sum *out, int threads,
		   xfer_err *err)
{
	uint64_t *first = malloc((count + 1) * sizeof *first);
	if (!first) return xfer_fail(err, XFER_ENOMEM, "tree checksum: out of memory");
	first[0] = 0;
	for (size_t i = 0; i < count; i++) first[i + 1] = first[i] + xfer_tree_nchunks(n[i]);
	uint64_t *h = malloc((first[count] + 1) * sizeof *h);
	if (!h) {
		free(first);
		return xfer_fail(err, XFER_ENOMEM, "tree checksum: out of memory");
	}
	tree_job J = { .p = (const unsigned char *const *)p, .n = n, .first = first, .count = count, .h = h };
	atomic_init(&J.next, 0);
	tree_run(&J, threads);
	for (size_t i = 0; i < count; i++) out[i] = xfer_tree_top(h + first[i], first[i + 1] - first[i], n[i]);
	free(h);
	free(first);
	return 0;
}

xfer_sum xfer_tree_checksum(const void *p, size_t n, int threads)
{
	uint64_t nn = n, stack[64], *h = stack, nc = xfer_tree_nchunks(n);
	if (nc > 64 && !(h = malloc(nc * sizeof *h))) {
		/* no memory for 8 bytes per 256 KiB: hash the chunks one by one */
		XXH3_state_t st;
		XXH3_128bits_reset_withSeed(&st, nn);
		for (uint64_t c = 0; c < nc; c++) {
			uint64_t off = c * XFER_TREE_CHUNK, k = nn - off < XFER_TREE_CHUNK ? nn - off : XFER_TREE_CHUNK;
			uint64_t x = XXH3_64bits((const char *)p + off, (size_t)k);
			XXH3_128bits_update(&st, &x, sizeof x);
		}
		XXH128_hash_t r = XXH3_128bits_digest(&st);
		return (xfer_sum){ r.low64, r.high64 };
	}
	xfer_tree_chunk_hashes(p, nn, h, threads);
	xfer_sum s = xfer_tree_top(h, nc, nn);
	if (h != stack) free(h);
	return s;
}

/* A tensor wherever it lives: CUDA memory through the stage buffer (a
 * multiple of the chunk size, so chunks never straddle two pieces). */
int xfer_tensor_tree_sum(const xfer_tensor *t, void *stage, size_t stage_len, int threads, xfer_sum *out,
			 xfer_err *err)
{
	if (t->mem == XFER_MEM_HOST) {
		*out = xfer_tree_checksum(t->ptr, t->nbytes, threads);
		return 0;
	}
	const xfer_cuda_api *cu = xfer_tensor_cuda(t, err);
	if (!cu) return -1;
	stage_len -= stage_len % XFER_TREE_CHUNK;
	if (!stage_len) return xfer_fail(err, XFER_EINVAL, "tree checksum: stage smaller than a chunk");
	uint64_t nc = xfer_tree_nchunks(t->nbytes);
	uint64_t *h = malloc((nc + 1) * sizeof *h);
	if (!h) return xfer_fail(err, XFER_ENOMEM, "tree checksum: out of memory");
	for (uint64_t off = 0; off < t->nbytes; off += stage_len) {
		size_t k = t->nbytes - off < stage_len ? (size_t)(t->nbytes - off) : stage_len;
		if (xfer_cuda_copy(cu, stage, XFER_MEM_HOST, (const char *)t->ptr + off, XFER_MEM_CUDA, k, err) != 0) {
			free(h);
			return -1;
		}
		xfer_tree_chunk_hashes(stage, k, h + off / XFER_TREE_CHUNK, threads);
	}
	*out = xfer_tree_top(h, nc, t->nbytes);
	free(h);
	return 0;
}
