/* common/sk_heap: a binary min-heap of (key, seq, ptr) entries.
 *
 * Ties on key are broken by an insertion sequence number, so two deadlines at
 * the same instant always come out in the order they went in: the fake clock
 * of the simulator relies on that for determinism. */
#ifndef SK_HEAP_H
#define SK_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	uint64_t key;
	uint64_t seq;
	void *ptr;
} sk_heap_entry;

typedef struct {
	sk_heap_entry *v;
	size_t len, cap;
	uint64_t next_seq;
} sk_heap;

void sk_heap_init(sk_heap *h);
void sk_heap_free(sk_heap *h);
/* Returns 0, or -1 when memory runs out (the heap is unchanged). */
int sk_heap_push(sk_heap *h, uint64_t key, void *ptr);
/* Smallest entry without removing it; NULL when empty. */
const sk_heap_entry *sk_heap_peek(const sk_heap *h);
/* Removes the smallest entry into *out; returns 0, or -1 when empty. */
int sk_heap_pop(sk_heap *h, sk_heap_entry *out);

#endif
