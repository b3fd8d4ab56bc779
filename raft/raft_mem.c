/* raft/raft_mem: an in-memory raft_storage for tests.  It outlives the
 * raft_t that uses it, so a test "crashes" a node by destroying it and
 * "restarts" it with raft_new on the same storage: what was stored
 * (synchronously, before any reply) survives, the rest is gone. */
#include "raft/raft_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	raft_storage st;
	uint64_t term;
	char vote[RAFT_NAME_MAX + 1];
	raft_snap_meta snap;
	uint8_t *snap_data;
	size_t snap_len;
	raft_entry *log;
	size_t n, cap;
} mem_store;

static uint8_t *dup_bytes(const uint8_t *p, size_t len)
{
	uint8_t *d = malloc(len ? len : 1);
	if (d && len) memcpy(d, p, len);
	return d;
}

static int oom(char *err, size_t errlen)
{
	snprintf(err, errlen, "out of memory");
	return -1;
}

static int mem_load(void *ctx, raft_loaded *out, char *err, size_t errlen)
{
	mem_store *m = ctx;
	memset(out, 0, sizeof *out);
	out->term = m->term;
	snprintf(out->vote, sizeof out->vote, "%s", m->vote);
	out->snap = m->snap;
	if (m->snap.index) {
		out->snap_data = dup_bytes(m->snap_data, m->snap_len);
		if (!out->snap_data) return oom(err, errlen);
		out->snap_len = m->snap_len;
	}
	if (!m->n) return 0;
	out->entries = calloc(m->n, sizeof *out->entries);
	if (!out->entries) return oom(err, errlen);
	for (size_t i = 0; i < m->n; i++) {
		out->entries[i] = m->log[i];
		out->entries[i].data = dup_bytes(m->log[i].data, m->log[i].len);
		out->nentries++;
		if (!out->entries[i].data) return oom(err, errlen);
	}
	return 0;
}

static int mem_save_hard(void *ctx, uint64_t term, const char *vote, char *err, size_t errlen)
{
	mem_store *m = ctx;
	m->term = term;
	snprintf(m->vote, sizeof m->vote, "%s", vote);
	return 0;
}

static int mem_append(void *ctx, const raft_entry *e, size_t n, char *err, size_t errlen)
{
	mem_store *m = ctx;
	if (n && m->n && raft__append_follows(m->log[m->n - 1].index, e[0].index, err, errlen) != 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (m->n == m->cap) {
			size_t nc = m->cap ? m->cap * 2 : 64;
			raft_entry *p = realloc(m->log, nc * sizeof *p);
			if (!p) return oom(err, errlen);
			m->log = p;
			m->cap = nc;
		}
		raft_entry c = e[i];
		c.data = dup_bytes(e[i].data, e[i].len);
		if (!c.data) return oom(err, errlen);
		m->log[m->n++] = c;
	}
	return 0;
}

static int mem_truncate(void *ctx, uint64_t from, char *err, size_t errlen)
{
	mem_store *m = ctx;
	while (m->n && m->log[m->n - 1].index >= from) free((void *)m->log[--m->n].data);
	return 0;
}

static int mem_save_snapshot(void *ctx, const raft_snap_meta *meta, const uint8_t *data, size_t len,
			     uint64_t upto, char *err, size_t errlen)
{
	mem_store *m = ctx;
	uint8_t *d = dup_bytes(data, len);
	if (!d) return oom(err, errlen);
	free(m->snap_data);
	m->snap = *meta;
	m->snap_data = d;
	m->snap_len = len;
	size_t k = 0;
	while (k < m->n && m->log[k].index <= upto) free((void *)m->log[k++].data);
	if (k) memmove(m->log, m->log + k, (m->n - k) * sizeof *m->log); /* (an empty store has no log array) */
	m->n -= k;
	return 0;
}

void raft_mem_storage_hard(const raft_storage *s, uint64_t *term, const char **vote)
{
	const mem_store *m = s->ctx;
	*term = m->term;
	*vote = m->vote;
}

bool raft_mem_storage_has(const raft_storage *s, uint64_t index, uint64_t term)
{
	const mem_store *m = s->ctx;
	if (index <= m->snap.index) return true;
	if (!m->n || index < m->log[0].index || index > m->log[m->n - 1].index) return false;
	return !term || m->log[index - m->log[0].index].term == term;
}

raft_storage *raft_mem_storage_new(void)
{
	mem_store *m = calloc(1, sizeof *m);
	if (!m) return NULL;
	m->st = (raft_storage){ .ctx = m, .load = mem_load, .save_hard = mem_save_hard, .append = mem_append,
				.truncate = mem_truncate, .save_snapshot = mem_save_snapshot };
	return &m->st;
}

void raft_mem_storage_free(raft_storage **s)
{
	if (!*s) return;
	mem_store *m = (*s)->ctx;
	for (size_t i = 0; i < m->n; i++) free((void *)m->log[i].data);
	free(m->log);
	free(m->snap_data);
	free(m);
	*s = NULL;
}
