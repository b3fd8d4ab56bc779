/* membership/mbr_table: the member table (name -> member) and the
 * dissemination queue.  Both are sized for the simulator, which holds N
 * tables of N members: no per-member allocation beyond the member itself. */
#include "membership/mbr_int.h"
#include "common/sk_text.h"

#include <stdlib.h>
#include <string.h>

uint64_t mbr_name_hash(const char *name)
{
	uint64_t h = sk_str_hash(name);
	return h ^ (h >> 29);
}

int mbr_table_init(mbr_table *t)
{
	t->cap = 16;
	t->len = 0;
	t->slot = calloc(t->cap, sizeof *t->slot);
	return t->slot ? 0 : -1;
}

void mbr_table_free(mbr_table *t)
{
	free(t->slot);
	t->slot = NULL;
	t->cap = t->len = 0;
}

mbr_member *mbr_table_get(const mbr_table *t, const char *name)
{
	size_t mask = t->cap - 1;
	uint64_t h = mbr_name_hash(name);
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		mbr_member *m = t->slot[i];
		if (!m) return NULL;
		if (m->hash == (uint32_t)h && strcmp(m->name, name) == 0) return m;
	}
}

static void place(mbr_member **slot, size_t cap, mbr_member *mem)
{
	size_t mask = cap - 1;
	uint64_t h = mbr_name_hash(mem->name);
	mem->hash = (uint32_t)h;
	size_t i = h & mask;
	while (slot[i]) i = (i + 1) & mask;
	slot[i] = mem;
}

int mbr_table_put(mbr_table *t, mbr_member *mem)
{
	if ((t->len + 1) * 2 > t->cap) {
		size_t ncap = t->cap * 2;
		mbr_member **ns = calloc(ncap, sizeof *ns);
		if (!ns) return -1;
		for (size_t i = 0; i < t->cap; i++)
			if (t->slot[i]) place(ns, ncap, t->slot[i]);
		free(t->slot);
		t->slot = ns;
		t->cap = ncap;
	}
	place(t->slot, t->cap, mem);
	t->len++;
	return 0;
}

void mbr_table_del(mbr_table *t, const char *name)
{
	size_t mask = t->cap - 1;
	size_t i = mbr_name_hash(name) & mask;
	while (t->slot[i] && strcmp(t->slot[i]->name, name) != 0) i = (i + 1) & mask;
	if (!t->slot[i]) return;
	t->slot[i] = NULL;
	t->len--;
	/* Backward-shift deletion: re-place the rest of the cluster. */
	for (size_t j = (i + 1) & mask; t->slot[j]; j = (j + 1) & mask) {
		mbr_member *m = t->slot[j];
		t->slot[j] = NULL;
		place(t->slot, t->cap, m);
	}
}

/* ---- dissemination queue ---- */

static void unlink_bc(mbr_bcq *q, mbr_member *mem)
{
	if (mem->bc_prev) mem->bc_prev->bc_next = mem->bc_next;
	else q->head[mem->bc_sent] = mem->bc_next;
	if (mem->bc_next) mem->bc_next->bc_prev = mem->bc_prev;
	mem->bc_prev = mem->bc_next = NULL;
}

static void link_bc(mbr_bcq *q, mbr_member *mem)
{
	mem->bc_prev = NULL;
	mem->bc_next = q->head[mem->bc_sent];
	if (mem->bc_next) mem->bc_next->bc_prev = mem;
	q->head[mem->bc_sent] = mem;
}

void mbr_bcq_remove(mbr_bcq *q, mbr_member *mem)
{
	if (!mem->bc_blob) return;
	unlink_bc(q, mem);
	free(mem->bc_blob);
	mem->bc_blob = NULL;
	mem->bc_len = 0;
	mem->bc_sent = 0;
	q->len--;
}

void mbr_bcq_push(mbr_bcq *q, mbr_member *mem, uint8_t *blob, size_t len)
{
	mbr_bcq_remove(q, mem);
	mem->bc_blob = blob;
	mem->bc_len = (uint16_t)len;
	mem->bc_sent = 0;
	link_bc(q, mem);
	q->len++;
}

size_t mbr_bcq_fill(mbr_bcq *q, mbr_pkt *pkt, size_t budget, uint32_t limit,
		    const mbr_member *skip)
{
	mbr_member *taken[64];
	size_t ntaken = 0;
	if (limit > MBR_MAX_TX) limit = MBR_MAX_TX;
	for (uint32_t b = 0; b < limit && ntaken < 64; b++) {
		for (mbr_member *mem = q->head[b]; mem && ntaken < 64; mem = mem->bc_next) {
			if (mem == skip) continue;
			size_t cost = mbr_codec_blob_cost(mem->bc_len);
			if (pkt->len + cost > budget) {
				/* Small ones may still fit; stop once the packet is nearly full. */
				if (budget - pkt->len < 48) goto done;
				continue;
			}
			if (mbr_pkt_add(pkt, mem->bc_blob, mem->bc_len) < 0) goto done;
			taken[ntaken++] = mem;
		}
	}
done:
	for (size_t i = 0; i < ntaken; i++) {
		mbr_member *mem = taken[i];
		unlink_bc(q, mem);
		mem->bc_sent++;
		if (mem->bc_sent >= limit) {
			free(mem->bc_blob);
			mem->bc_blob = NULL;
			mem->bc_len = 0;
			mem->bc_sent = 0;
			q->len--;
		} else {
			link_bc(q, mem);
		}
	}
	return ntaken;
}
