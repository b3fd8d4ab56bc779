/* transfer/core/xfer_chunk.c: how the p2p paths cut a version into pieces, and
 * the receiver's side of placing them, shared by p2p-tcp and p2p-ucx.
 *
 * Buckets follow the manifest (xfer_buckets) and travel in chunks of half a
 * bucket (a tensor larger than a bucket is cut the same way), so two staging
 * slots hold one bucket.  Each chunk is cut into page-aligned stripes, one per
 * stream or worker thread.  A receiver that keeps its previous version places
 * a stripe from its staging slot into the tensors through its own undo
 * journal (stripes are disjoint); the journals' memory is held to half a
 * bucket in all, so staging plus journals stay under two buckets.
 *
 * What a receiver takes from a sender's hello is checked here too, for both
 * paths, before anything is allocated from it: the manifest text must
 * describe the receiver's own (and is parsed no further than its tensor
 * count), and the hello's bucket size may not cut the weights into more
 * than XFER_P2P_CHUNKS_MAX chunks.
 *
 * Tree cuts (p2p-tcp's wire 3, xfer_chunks_cut with tree set): a chunk that
 * ends inside a tensor ends on one of that tensor's tree-chunk boundaries
 * (a multiple of XFER_TREE_CHUNK from its first byte), so every 256 KiB tree
 * chunk (docs/tree-checksum.md) lies in one p2p chunk and both ends hash it
 * from one buffer, on CPU threads or GPU blocks, with no state carried from
 * chunk to chunk.  The piece is then at least two tree chunks (512 KiB), so
 * every chunk but a bucket's last holds over half a piece. */
#include "transfer/core/xfer_int.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(xfer_vhead) == 24, "a version header is 24 bytes on the wire");

enum { STRIPE_ALIGN = 4096 }; /* stripes start on page boundaries of the byte space */

uint64_t xfer_chunk_piece(uint64_t bucket_bytes)
{
	uint64_t half = bucket_bytes / 2 / STRIPE_ALIGN * STRIPE_ALIGN;
	return half ? half : bucket_bytes;
}

/* The tensor whose bytes hold byte e (offsets: n+1 entries; n past the end):
 * xfer_tensor_at without an endpoint. */
static size_t tensor_holding(const xfer_manifest *m, const uint64_t *offsets, uint64_t e)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (offsets[mid + 1] <= e) lo = mid + 1;
		else hi = mid;
	}
	return lo;
}

int xfer_chunks_cut(const xfer_manifest *m, const uint64_t *offsets, uint64_t bucket_bytes, int tree, xfer_span **out,
		    size_t *n, xfer_err *err)
{
	xfer_bucket *b = NULL;
	size_t nb = 0, k = 0, cap = 0;
	uint64_t piece = xfer_chunk_piece(bucket_bytes);
	if (tree && piece < 2 * (uint64_t)XFER_TREE_CHUNK) piece = 2 * (uint64_t)XFER_TREE_CHUNK;
	*out = NULL;
	*n = 0;
	if (!bucket_bytes) return xfer_fail(err, XFER_EFORMAT, "a bucket of 0 bytes");
	if (xfer_buckets(m, bucket_bytes, &b, &nb, err) != 0) return -1;
	/* counted before anything is allocated: a hello's bucket size of a few
	 * bytes must not make a table larger than the weights (a tree cut
	 * leaves more than piece - XFER_TREE_CHUNK >= piece / 2 in a chunk) */
	for (size_t i = 0; i < nb && cap <= XFER_P2P_CHUNKS_MAX; i++)
		cap += tree ? 2 * (b[i].bytes / piece) + 2 : (b[i].bytes + piece - 1) / piece + 1;
	if (cap > XFER_P2P_CHUNKS_MAX) {
		free(b);
		return xfer_fail(err, XFER_EFORMAT, "buckets of %llu bytes cut the weights into over %d chunks",
				 (unsigned long long)bucket_bytes, XFER_P2P_CHUNKS_MAX);
	}
	xfer_span *c = calloc(cap + 1, sizeof *c);
	if (!c) { free(b); return xfer_fail(err, XFER_ENOMEM, "out of memory"); }
	for (size_t i = 0; i < nb; i++) {
		uint64_t off = offsets[b[i].first];
		for (uint64_t done = 0; done < b[i].bytes || (b[i].bytes == 0 && done == 0);) {
			uint64_t len = b[i].bytes - done < piece ? b[i].bytes - done : piece;
			if (tree && done + len < b[i].bytes) {
				/* end on a tree-chunk boundary of the tensor that holds the cut */
				uint64_t e = off + done + len, t0 = offsets[tensor_holding(m, offsets, e)];
				len = t0 + (e - t0) / XFER_TREE_CHUNK * XFER_TREE_CHUNK - (off + done);
			}
			c[k++] = (xfer_span){ off + done, len };
			if (len == 0) break;
			done += len;
		}
	}
	free(b);
	*out = c;
	*n = k;
	return 0;
}

int xfer_chunks(const xfer_manifest *m, const uint64_t *offsets, uint64_t bucket_bytes, xfer_span **out, size_t *n,
		xfer_err *err)
{
	return xfer_chunks_cut(m, offsets, bucket_bytes, 0, out, n, err);
}

int xfer_chunks_make(const xfer_endpoint *ep, uint64_t bucket_bytes, xfer_span **out, size_t *n, xfer_err *err)
{
	free(*out);
	return xfer_chunks(ep->m, ep->offsets, bucket_bytes, out, n, err);
}

int xfer_chunk_plan_cut(const xfer_manifest *mine, const uint64_t *offsets, uint64_t bucket_bytes, int tree,
			const char *desc, size_t len, xfer_span **chunks, size_t *nchunks, xfer_err *err)
{
	*chunks = NULL;
	*nchunks = 0;
	/* no more tensors than ours: each parsed name is looked up among the
	 * earlier ones, so a long manifest of tiny lines would cost n^2 */
	xfer_manifest *theirs = xfer_manifest_parse(desc, len, mine->n, err);
	int rc = theirs && xfer_manifest_compare(theirs, mine, err) == 0
			 ? xfer_chunks_cut(mine, offsets, bucket_bytes, tree, chunks, nchunks, err)
			 : -1;
	xfer_manifest_free(&theirs);
	return rc;
}

int xfer_chunk_plan(const xfer_manifest *mine, const uint64_t *offsets, uint64_t bucket_bytes, const char *desc,
		    size_t len, xfer_span **chunks, size_t *nchunks, xfer_err *err)
{
	return xfer_chunk_plan_cut(mine, offsets, bucket_bytes, 0, desc, len, chunks, nchunks, err);
}

int xfer_vhead_parse(const void *buf, size_t n, const xfer_manifest *m, uint64_t have, uint64_t *version,
		     xfer_err *err)
{
	xfer_vhead h;
	if (n != sizeof h) return xfer_fail(err, XFER_EFORMAT, "malformed version header");
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, "SKV1", 4) != 0 || h.ntensors != m->n || h.total != m->bytes)
		return xfer_fail(err, XFER_EFORMAT, "malformed version header");
	if (h.version <= have)
		return xfer_fail(err, XFER_EFORMAT, "version %llu is not newer than %llu", (unsigned long long)h.version,
				 (unsigned long long)have);
	*version = h.version;
	return 0;
}

void xfer_stripe_of(xfer_span c, int nstripes, int i, uint64_t *a, uint64_t *b)
{
	uint64_t per = (c.len + (uint64_t)nstripes - 1) / (uint64_t)nstripes;
	per = (per + STRIPE_ALIGN - 1) / STRIPE_ALIGN * STRIPE_ALIGN;
	uint64_t lo = (uint64_t)i * per, hi = lo + per;
	if (lo > c.len) lo = c.len;
	if (hi > c.len) hi = c.len;
	*a = c.off + lo;
	*b = c.off + hi;
}

size_t xfer_tensor_at(const xfer_endpoint *ep, uint64_t a)
{
	return tensor_holding(ep->m, ep->offsets, a);
}

int xfer_tensor_iov(const xfer_endpoint *ep, uint64_t a, uint64_t b, struct iovec **iov, int *cap, int *n,
		    xfer_err *err)
{
	*n = 0;
	for (size_t t = xfer_tensor_at(ep, a); t < ep->m->n && a < b; t++) {
		uint64_t lo = ep->offsets[t], hi = ep->offsets[t + 1];
		if (hi <= a) continue;
		uint64_t e = hi < b ? hi : b;
		if (*n == *cap) {
			int nc = *cap ? *cap * 2 : 64;
			struct iovec *v = realloc(*iov, (size_t)nc * sizeof *v);
			if (!v) return xfer_fail(err, XFER_ENOMEM, "out of memory");
			*iov = v;
			*cap = nc;
		}
		(*iov)[(*n)++] = (struct iovec){ (char *)ep->m->t[t].ptr + (a - lo), (size_t)(e - a) };
		a = e;
	}
	return 0;
}

int xfer_place_stripe(const xfer_endpoint *ep, const unsigned char *slot, uint64_t slot_off, uint64_t a,
		      uint64_t b, xfer_journal *j, xfer_err *err)
{
	const xfer_manifest *m = ep->m;
	for (size_t t = xfer_tensor_at(ep, a); t < m->n && a < b; t++) {
		uint64_t hi = ep->offsets[t + 1] < b ? ep->offsets[t + 1] : b;
		if (hi <= a) continue;
		char *dst = (char *)m->t[t].ptr + (a - ep->offsets[t]);
		const unsigned char *src = slot + (a - slot_off);
		if (m->t[t].mem == XFER_MEM_CUDA) {
			if (j ? xfer_journal_copy_device(j, dst, src, hi - a, err)
			      : xfer_cuda_copy(xfer_cuda(NULL, 0), dst, XFER_MEM_CUDA, src, XFER_MEM_HOST, hi - a, err))
				return -1;
		} else if (xfer_journal_copy(j, dst, src, hi - a, err) != 0) {
			return -1;
		}
		a = hi;
	}
	return 0;
}

int xfer_stripe_journals(const xfer_endpoint *ep, xfer_journal **j, int max, int active, uint64_t bucket_bytes,
			 int any_cuda, xfer_err *err)
{
	for (int i = 0; i < max; i++) {
		/* one left from a session with more stripes would undo stripes
		 * it no longer covers */
		if (i >= active) {
			xfer_journal_free(&j[i]);
			continue;
		}
		if (!j[i] && !(j[i] = xfer_journal_new(ep->cfg.journal_dir, err))) return -1;
		xfer_journal_reset(j[i]);
		/* the staging slots take one bucket; the journals' memory stays
		 * within half of the other (their fixed buffers, 2 MiB each, and
		 * 4 MiB pinned for device memory, counted too; with small buckets
		 * or many stripes the fixed part alone may exceed it) */
		uint64_t fixed = (2u << 20) + (any_cuda ? 4u << 20 : 0);
		uint64_t share = xfer_chunk_piece(bucket_bytes) / (uint64_t)active;
		xfer_journal_limit(j[i], share > fixed ? share - fixed : 0);
	}
	return 0;
}

void xfer_stripe_journals_stats(xfer_endpoint *ep, xfer_journal *const *j, int max)
{
	ep->stats.journal_bytes = 0;
	ep->stats.journal_seconds = 0;
	for (int i = 0; i < max; i++) {
		ep->stats.journal_bytes += xfer_journal_bytes(j[i]);
		double js = xfer_journal_seconds(j[i]);
		if (js > ep->stats.journal_seconds) ep->stats.journal_seconds = js;
	}
}

int xfer_stripe_journals_rollback(xfer_endpoint *ep, xfer_journal **j, int max, xfer_err *err)
{
	double u0 = xfer_now();
	int rc = 0;
	for (int i = 0; i < max; i++)
		if (j[i] && xfer_journal_undo(j[i], err) != 0) rc = -1;
	ep->stats.undo_seconds = xfer_now() - u0;
	if (rc != 0) xfer_err_prefix(err, "rollback: the undo failed, the buffers are damaged");
	return rc;
}

void xfer_stripe_journals_undo(xfer_endpoint *ep, xfer_journal **j, int max, xfer_err *err)
{
	if (!j[0]) {
		xfer_err_prefix(err, "(keep_previous off: buffers partly updated)");
		return;
	}
	/* host and device buffers alike: the previous version back */
	xfer_err u;
	int undone = 1;
	double u0 = xfer_now();
	for (int i = 0; i < max; i++)
		if (j[i] && xfer_journal_undo(j[i], &u) != 0) undone = 0;
	ep->stats.undo_seconds = xfer_now() - u0;
	if (!undone) xfer_err_prefix(err, "AND THE UNDO FAILED (%s)", u.msg);
}
