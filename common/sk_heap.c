/* common/sk_heap: see sk_heap.h. */
#include "common/sk_heap.h"

#include <stdlib.h>

void sk_heap_init(sk_heap *h) { h->v = NULL; h->len = h->cap = 0; h->next_seq = 0; }

void sk_heap_free(sk_heap *h)
{
	free(h->v);
	sk_heap_init(h);
}

static int less(const sk_heap_entry *a, const sk_heap_entry *b)
{
	return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

int sk_heap_push(sk_heap *h, uint64_t key, void *ptr)
{
	if (h->len == h->cap) {
		size_t ncap = h->cap ? h->cap * 2 : 64;
		sk_heap_entry *nv = realloc(h->v, ncap * sizeof *nv);
		if (!nv) return -1;
		h->v = nv;
		h->cap = ncap;
	}
	size_t i = h->len++;
	sk_heap_entry e = { key, h->next_seq++, ptr };
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!less(&e, &h->v[p])) break;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = e;
	return 0;
}

const sk_heap_entry *sk_heap_peek(const sk_heap *h) { return h->len ? &h->v[0] : NULL; }

int sk_heap_pop(sk_heap *h, sk_heap_entry *out)
{
	if (!h->len) return -1;
	*out = h->v[0];
	sk_heap_entry last = h->v[--h->len];
	size_t i = 0, n = h->len;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const sk_heap_entry *best = &last;
		if (l < n && less(&h->v[l], best)) { m = l; best = &h->v[l]; }
		if (r < n && less(&h->v[r], best)) { m = r; best = &h->v[r]; }
		if (m == i) break;
		h->v[i] = h->v[m];
		i = m;
	}
	if (n) h->v[i] = last;
	return 0;
}
