/* raft/raft_kv: see raft_kv.h.  An open-addressing hash table (linear
 * probing, XXH3 hashes, backward-shift deletion, no tombstones); the list
 * and the snapshot sort by key so every replica yields the same bytes. */
#include "raft/raft_kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
	uint8_t *key, *val;       /* key == NULL: empty slot */
	size_t klen, vlen;
	uint64_t h;
} slot;

struct raft_kv {
	slot *s;
	size_t cap, n;            /* cap is a power of two */
	uint64_t refused;
};

raft_kv *raft_kv_new(void) { return calloc(1, sizeof(raft_kv)); }

static void free_slots(slot *s, size_t cap)
{
	for (size_t i = 0; i < cap; i++)
		if (s[i].key) { free(s[i].key); free(s[i].val); }
	free(s);
}

void raft_kv_destroy(raft_kv **kv)
{
	if (!*kv) return;
	free_slots((*kv)->s, (*kv)->cap);
	free(*kv);
	*kv = NULL;
}

static size_t find(const raft_kv *kv, const void *key, size_t klen, uint64_t h)
{
	size_t m = kv->cap - 1;
	for (size_t i = h & m;; i = (i + 1) & m) {
		const slot *s = &kv->s[i];
		if (!s->key || (s->h == h && s->klen == klen && !memcmp(s->key, key, klen))) return i;
	}
}

static int grow(raft_kv *kv)
{
	size_t nc = kv->cap ? kv->cap * 2 : 64;
	slot *ns = calloc(nc, sizeof *ns), *old = kv->s;
	if (!ns) return -1;
	size_t oc = kv->cap;
	kv->s = ns;
	kv->cap = nc;
	for (size_t i = 0; i < oc; i++)
		if (old[i].key) kv->s[find(kv, old[i].key, old[i].klen, old[i].h)] = old[i];
	free(old);
	return 0;
}

static int put(raft_kv *kv, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
	if ((kv->n + 1) * 4 > kv->cap * 3 && grow(kv) != 0) return -1;
	uint64_t h = XXH3_64bits(k, klen);
	slot *s = &kv->s[find(kv, k, klen, h)];
	uint8_t *nv = malloc(vlen ? vlen : 1);
	if (!nv) return -1;
	if (vlen) memcpy(nv, v, vlen);
	if (!s->key) {
		if (kv->n >= RAFT_KV_KEYS_MAX || !(s->key = malloc(klen ? klen : 1))) {
			free(nv);
			return -1;
		}
		memcpy(s->key, k, klen);
		s->klen = klen;
		s->h = h;
		kv->n++;
	} else {
		free(s->val);
	}
	s->val = nv;
	s->vlen = vlen;
	return 0;
}

static void del(raft_kv *kv, const uint8_t *k, size_t klen)
{
	if (!kv->n) return;
	size_t m = kv->cap - 1, i = find(kv, k, klen, XXH3_64bits(k, klen));
	if (!kv->s[i].key) return;
	free(kv->s[i].key);
	free(kv->s[i].val);
	kv->s[i].key = NULL;
	kv->n--;
	/* backward shift: move later members of the run into the hole */
	for (size_t j = (i + 1) & m; kv->s[j].key; j = (j + 1) & m) {
		size_t home = kv->s[j].h & m;
		bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (between) continue;
		kv->s[i] = kv->s[j];
		kv->s[j].key = NULL;
		i = j;
	}
}

int raft_kv_encode_put(const void *key, size_t klen, const void *val, size_t vlen, uint8_t *type,
		       uint8_t **out, size_t *len, char *err, size_t errlen)
{
	if (!klen || klen > RAFT_KV_KEY_MAX || vlen > RAFT_KV_VALUE_MAX) {
		snprintf(err, errlen, "key must be 1..%d bytes and value at most %d bytes",
			 RAFT_KV_KEY_MAX, RAFT_KV_VALUE_MAX);
		return -1;
	}
	uint8_t *b = malloc(4 + klen + vlen);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	b[0] = (uint8_t)klen;
	b[1] = (uint8_t)(klen >> 8);
	b[2] = b[3] = 0;
	memcpy(b + 4, key, klen);
	if (vlen) memcpy(b + 4 + klen, val, vlen);
	*type = RAFT_KV_PUT;
	*out = b;
	*len = 4 + klen + vlen;
	return 0;
}

int raft_kv_encode_del(const void *key, size_t klen, uint8_t *type, uint8_t **out, size_t *len,
		       char *err, size_t errlen)
{
	if (!klen || klen > RAFT_KV_KEY_MAX) {
		snprintf(err, errlen, "key must be 1..%d bytes", RAFT_KV_KEY_MAX);
		return -1;
	}
	uint8_t *b = malloc(klen);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(b, key, klen);
	*type = RAFT_KV_DEL;
	*out = b;
	*len = klen;
	return 0;
}

int raft_kv_apply(raft_kv *kv, uint8_t type, const uint8_t *d, size_t len)
{
	if (type < RAFT_KV_PUT || type > RAFT_KV_TYPE_LAST) return 1;
	if (type == RAFT_KV_PUT && len >= 4) {
		size_t klen = (size_t)d[0] | (size_t)d[1] << 8 | (size_t)d[2] << 16 | (size_t)d[3] << 24;
		if (klen && klen <= RAFT_KV_KEY_MAX && klen <= len - 4 && len - 4 - klen <= RAFT_KV_VALUE_MAX &&
		    put(kv, d + 4, klen, d + 4 + klen, len - 4 - klen) == 0)
			return 0;
	} else if (type == RAFT_KV_DEL && len && len <= RAFT_KV_KEY_MAX) {
		del(kv, d, len);
		return 0;
	}
	kv->refused++;
	return -1;
}

int raft_kv_get(const raft_kv *kv, const void *key, size_t klen, const uint8_t **val, size_t *vlen)
{
	if (!kv->n) return -1;
	const slot *s = &kv->s[find(kv, key, klen, XXH3_64bits(key, klen))];
	if (!s->key) return -1;
	*val = s->val;
	*vlen = s->vlen;
	return 0;
}

size_t raft_kv_count(const raft_kv *kv) { return kv->n; }
uint64_t raft_kv_refused(const raft_kv *kv) { return kv->refused; }

static int item_cmp(const void *a, const void *b)
{
	const raft_kv_item *x = a, *y = b;
	size_t n = x->klen < y->klen ? x->klen : y->klen;
	int c = memcmp(x->key, y->key, n);
	if (c) return c;
	return x->klen < y->klen ? -1 : x->klen > y->klen;
}

size_t raft_kv_list(const raft_kv *kv, raft_kv_item **out)
{
	raft_kv_item *v = malloc((kv->n ? kv->n : 1) * sizeof *v);
	if (!v) return (size_t)-1;
	size_t n = 0;
	for (size_t i = 0; i < kv->cap; i++)
		if (kv->s[i].key) v[n++] = (raft_kv_item){ kv->s[i].key, kv->s[i].val, kv->s[i].klen, kv->s[i].vlen };
	qsort(v, n, sizeof *v, item_cmp);
	*out = v;
	return n;
}

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

int raft_kv_serialize(const raft_kv *kv, uint8_t **out, size_t *len)
{
	raft_kv_item *v;
	size_t n = raft_kv_list(kv, &v), total = 13;
	if (n == (size_t)-1) return -1;
	for (size_t i = 0; i < n; i++) total += 8 + v[i].klen + v[i].vlen;
	uint8_t *b = malloc(total);
	if (!b) { free(v); return -1; }
	memcpy(b, "SKKV", 4);
	b[4] = 1;
	for (int i = 0; i < 8; i++) b[5 + i] = (uint8_t)((uint64_t)n >> (8 * i));
	size_t o = 13;
	for (size_t i = 0; i < n; i++) {
		put32(b + o, (uint32_t)v[i].klen);
		put32(b + o + 4, (uint32_t)v[i].vlen);
		memcpy(b + o + 8, v[i].key, v[i].klen);
		if (v[i].vlen) memcpy(b + o + 8 + v[i].klen, v[i].val, v[i].vlen);
		o += 8 + v[i].klen + v[i].vlen;
	}
	free(v);
	*out = b;
	*len = total;
	return 0;
}

int raft_kv_restore(raft_kv *kv, const uint8_t *d, size_t len, char *err, size_t errlen)
{
	if (len < 13 || memcmp(d, "SKKV", 4) != 0 || d[4] != 1) {
		snprintf(err, errlen, "not a key-value snapshot (magic or version)");
		return -1;
	}
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--) n = n << 8 | d[5 + i];
	if (n > RAFT_KV_KEYS_MAX) {
		snprintf(err, errlen, "snapshot holds too many keys");
		return -1;
	}
	raft_kv fresh = { 0 };
	size_t o = 13;
	for (uint64_t i = 0; i < n; i++) {
		if (len - o < 8) goto bad;
		size_t kl = get32(d + o), vl = get32(d + o + 4);
		if (!kl || kl > RAFT_KV_KEY_MAX || vl > RAFT_KV_VALUE_MAX || len - o - 8 < kl + vl) goto bad;
		if (put(&fresh, d + o + 8, kl, d + o + 8 + kl, vl) != 0) goto bad;
		o += 8 + kl + vl;
	}
	if (o != len || fresh.n != n) goto bad;
	free_slots(kv->s, kv->cap);
	kv->s = fresh.s;
	kv->cap = fresh.cap;
	kv->n = fresh.n;
	return 0;
bad:
	free_slots(fresh.s, fresh.cap);
	snprintf(err, errlen, "corrupt key-value snapshot at byte %zu", o);
	return -1;
}
