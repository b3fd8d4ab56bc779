/* raft/raft_kv: the replicated state machine, a key-value map applied from
 * committed log entries, with serialize/restore for snapshots.
 *
 * Keys and values are bytes.  Entry types RAFT_KV_PUT and RAFT_KV_DEL
 * (16 and 17) are ours; types 18..31 are reserved for the map, and later
 * features (jobs, placement, weight versions) take their own ranges from
 * 32 on: raft_kv_apply returns 1 for a type it does not own so a wider
 * state machine can route it.  Like Consul's KV store, minus sessions and
 * watches.  A committed entry that breaks a rule (too big, malformed, map
 * full) is refused the same way on every replica and counted. */
#ifndef RAFT_KV_H
#define RAFT_KV_H

#include <stddef.h>
#include <stdint.h>

#include "raft/raft.h"

enum {
	RAFT_KV_PUT = RAFT_ENTRY_USER,      /* u32 key length, key, value */
	RAFT_KV_DEL = RAFT_ENTRY_USER + 1,  /* key */
	RAFT_KV_TYPE_LAST = RAFT_ENTRY_USER + 15,
	RAFT_KV_KEY_MAX = 1024,             /* bytes */
	RAFT_KV_VALUE_MAX = 512 << 10,      /* Consul's 512 KiB */
	RAFT_KV_KEYS_MAX = 1 << 20,
};

typedef struct raft_kv raft_kv;

raft_kv *raft_kv_new(void);
void raft_kv_destroy(raft_kv **kv);

/* Builds the payload of a put or delete entry (malloc'd in *out) and its
 * type; -1 with a message when a size limit is broken. */
int raft_kv_encode_put(const void *key, size_t klen, const void *val, size_t vlen, uint8_t *type,
		       uint8_t **out, size_t *len, char *err, size_t errlen);
int raft_kv_encode_del(const void *key, size_t klen, uint8_t *type, uint8_t **out, size_t *len,
		       char *err, size_t errlen);

/* Applies one committed entry: 0 applied, 1 not a map type (ignored),
 * -1 refused (counted in raft_kv_refused). */
int raft_kv_apply(raft_kv *kv, uint8_t type, const uint8_t *data, size_t len);

/* 0 and the value (valid until the next change), or -1 when absent. */
int raft_kv_get(const raft_kv *kv, const void *key, size_t klen, const uint8_t **val, size_t *vlen);
size_t raft_kv_count(const raft_kv *kv);
uint64_t raft_kv_refused(const raft_kv *kv);

typedef struct {
	const uint8_t *key, *val;
	size_t klen, vlen;
} raft_kv_item;
/* Every pair sorted by key (bytewise), in a malloc'd array the caller
 * frees; pointers valid until the next change.  Returns the count, or
 * (size_t)-1 when memory runs out. */
size_t raft_kv_list(const raft_kv *kv, raft_kv_item **out);

/* The whole map, sorted by key (the same bytes on every replica):
 * "SKKV", u8 version 1, u64 count, per pair u32 key length, u32 value
 * length, key, value. */
int raft_kv_serialize(const raft_kv *kv, uint8_t **out, size_t *len);
/* Replaces the map with a serialized one; on error the map is unchanged. */
int raft_kv_restore(raft_kv *kv, const uint8_t *data, size_t len, char *err, size_t errlen);

#endif
