/* transfer/update/update_msg.c: the coordinated update's messages
 * (proto/weights.proto) to and from the plain structs of update.h.
 *
 * protobuf-c stays here (and in update_agent.c): pack what we send, unpack
 * what the head answers, check it whole (every string bounded, every enum
 * of text one we know), copy it into fixed-size fields, free.  A bad
 * answer is a one-line XFER_EFORMAT naming the message and the field. */
#include "transfer/update/update.h"

#include <stdlib.h>
#include <string.h>
#include "transfer/core/xfer_hash.h"

#include "proto/weights.pb-c.h"

#define PACK(kind, msg, len)                                                            \
	do {                                                                            \
		*(len) = skein__weights__##kind##__get_packed_size(msg);               \
		uint8_t *b_ = malloc(*(len) ? *(len) : 1);                              \
		if (b_) skein__weights__##kind##__pack(msg, b_);                        \
		return b_;                                                              \
	} while (0)

static char *s_(const char *s) { return (char *)(s ? s : ""); }

/* t into pb, or NULL when it is all zero (left out) */
static Skein__Weights__Timings *timings_pb(const xfer_timings *t, Skein__Weights__Timings *pb)
{
	if (t->data_seconds == 0 && t->hash_seconds == 0 && t->journal_seconds == 0 && t->undo_seconds == 0)
		return NULL;
	skein__weights__timings__init(pb);
	pb->data_seconds = t->data_seconds;
	pb->hash_seconds = t->hash_seconds;
	pb->journal_seconds = t->journal_seconds;
	pb->undo_seconds = t->undo_seconds;
	return pb;
}

uint8_t *xfer_upd_begin_pack(const xfer_upd_begin *b, size_t *len)
{
	Skein__Weights__Begin m = SKEIN__WEIGHTS__BEGIN__INIT;
	m.job = s_(b->job);
	m.member = s_(b->member);
	m.version = b->version;
	m.mode = s_(b->mode);
	m.digest.data = (uint8_t *)b->digest;
	m.digest.len = sizeof b->digest;
	m.bytes = b->bytes;
	m.tensors = b->tensors;
	if (b->setup) {
		m.setup.data = (uint8_t *)b->setup;
		m.setup.len = b->setup_len;
	}
	if (b->root) {
		m.root.data = (uint8_t *)b->root;
		m.root.len = 16;
	}
	PACK(begin, &m, len);
}

uint8_t *xfer_upd_done_pack(const xfer_upd_done *d, size_t *len)
{
	Skein__Weights__Done m = SKEIN__WEIGHTS__DONE__INIT;
	m.job = s_(d->job);
	m.member = s_(d->member);
	m.version = d->version;
	m.ok = d->ok != 0;
	m.reason = s_(d->reason);
	m.implementation_seconds = d->implementation_seconds;
	m.wire_bytes = d->wire_bytes;
	m.density = d->density;
	Skein__Weights__Timings tm;
	m.timings = timings_pb(&d->timings, &tm);
	if (d->root) {
		m.root.data = (uint8_t *)d->root;
		m.root.len = 16;
	}
	if (d->setup) {
		m.setup.data = (uint8_t *)d->setup;
		m.setup.len = d->setup_len;
	}
	Skein__Weights__PeerFailure *f = calloc(d->nfailed + 1, sizeof *f);
	Skein__Weights__PeerFailure **fp = calloc(d->nfailed + 1, sizeof *fp);
	uint8_t *out = NULL;
	if (f && fp) {
		for (size_t i = 0; i < d->nfailed; i++) {
			skein__weights__peer_failure__init(&f[i]);
			f[i].member = s_(d->failed_member[i]);
			f[i].reason = s_(d->failed_reason[i]);
			f[i].verdict = d->failed_verdict && d->failed_verdict[i];
			fp[i] = &f[i];
		}
		m.n_failed = d->nfailed;
		m.failed = fp;
		*len = skein__weights__done__get_packed_size(&m);
		if ((out = malloc(*len ? *len : 1))) skein__weights__done__pack(&m, out);
	}
	free(f);
	free(fp);
	return out;
}

uint8_t *xfer_upd_query_pack(const char *job, uint64_t version, const char *member, size_t *len)
{
	Skein__Weights__Query m = SKEIN__WEIGHTS__QUERY__INIT;
	m.job = s_(job);
	m.version = version;
	m.member = s_(member);
	PACK(query, &m, len);
}

uint8_t *xfer_upd_status_pack(const xfer_upd_status *s, size_t *len)
{
	Skein__Weights__EngineStatus m = SKEIN__WEIGHTS__ENGINE_STATUS__INIT;
	m.job = s_(s->job);
	m.member = s_(s->member);
	m.held = s->held;
	m.staged = s->staged;
	m.endpoint = s_(s->endpoint);
	m.failed = s->failed;
	m.reason = s_(s->reason);
	m.seconds = s->seconds;
	m.generation = s->generation;
	Skein__Weights__Timings tm;
	m.timings = timings_pb(&s->timings, &tm);
	if (s->root) {
		m.root.data = (uint8_t *)s->root;
		m.root.len = 16;
	}
	m.journal_bytes = s->journal_bytes;
	m.journal_spilled_bytes = s->journal_spilled;
	m.journal_where = s_(s->journal_where);
	PACK(engine_status, &m, len);
}

/* A string of the answer into a fixed field: longer is refused. */
static int copy_str(char *dst, size_t cap, const char *src, const char *msg, const char *field, xfer_err *err)
{
	size_t n = src ? strlen(src) : 0;
	if (n >= cap)
		return xfer_fail(err, XFER_EFORMAT, "the head's %s: field %s of %zu bytes (at most %zu)", msg, field, n,
				 cap - 1);
	memcpy(dst, src ? src : "", n + 1);
	return 0;
}

/* A reason is shown, not parsed: a long one is cut, not refused. */
static void copy_reason(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

static int one_of(const char *s, const char *const *names)
{
	for (; *names; names++)
		if (!strcmp(s, *names)) return 1;
	return 0;
}

static int bad_int(int64_t v, int64_t lo, int64_t hi, const char *msg, const char *field, xfer_err *err)
{
	if (v >= lo && v <= hi) return 0;
	return xfer_fail(err, XFER_EFORMAT, "the head's %s: %s %lld out of range", msg, field, (long long)v);
}

int xfer_upd_begin_reply_parse(const uint8_t *p, size_t n, xfer_upd_begin_reply *out, xfer_err *err)
{
	memset(out, 0, sizeof *out);
	Skein__Weights__BeginReply *m = skein__weights__begin_reply__unpack(NULL, n, p);
	if (!m) return xfer_fail(err, XFER_EFORMAT, "the head's answer to begin is not a BeginReply");
	int rc = -1;
	if (m->n_peers > XFER_UPD_PEERS_MAX) {
		xfer_fail(err, XFER_EFORMAT, "the head's BeginReply: %zu peers (at most %d)", m->n_peers, XFER_UPD_PEERS_MAX);
		goto out;
	}
	if (bad_int(m->timeout_ms, 0, 24 * 3600 * 1000, "BeginReply", "timeout_ms", err) != 0) goto out;
	if (m->nonce.len != 0 && m->nonce.len != XFER_NONCE_BYTES) {
		xfer_fail(err, XFER_EFORMAT, "the head's BeginReply: a nonce of %zu bytes (0 or %d)", m->nonce.len,
			  XFER_NONCE_BYTES);
		goto out;
	}
	out->peers = calloc(m->n_peers + 1, sizeof *out->peers);
	if (!out->peers) { xfer_fail(err, XFER_ENOMEM, "out of memory"); goto out; }
	for (size_t i = 0; i < m->n_peers; i++) {
		const Skein__Weights__Peer *q = m->peers[i];
		xfer_upd_peer *d = &out->peers[i];
		if (copy_str(d->member, sizeof d->member, q->member, "BeginReply", "peers.member", err) != 0 ||
		    copy_str(d->node, sizeof d->node, q->node, "BeginReply", "peers.node", err) != 0 ||
		    copy_str(d->endpoint, sizeof d->endpoint, q->endpoint, "BeginReply", "peers.endpoint", err) != 0 ||
		    bad_int(q->rank, 0, XFER_UPD_PEERS_MAX, "BeginReply", "peers.rank", err) != 0)
			goto out;
		d->rank = q->rank;
	}
	out->npeers = m->n_peers;
	out->version = m->version;
	out->base_version = m->base_version;
	out->timeout_ms = m->timeout_ms;
	out->has_nonce = m->nonce.len == XFER_NONCE_BYTES;
	if (out->has_nonce) memcpy(out->nonce, m->nonce.data, XFER_NONCE_BYTES);
	rc = 0;
out:
	if (rc != 0) xfer_upd_begin_reply_free(out);
	skein__weights__begin_reply__free_unpacked(m, NULL);
	return rc;
}

void xfer_upd_begin_reply_free(xfer_upd_begin_reply *r)
{
	free(r->peers);
	memset(r, 0, sizeof *r);
}

/* Outcome.state's words, by xfer_upd_state */
static const char *const upd_states[] = { "", "preparing", "moving", "committed", "aborted" };

const char *xfer_upd_state_name(xfer_upd_state s)
{
	return s >= XFER_UPD_UNKNOWN && s <= XFER_UPD_ABORTED ? upd_states[s] : "";
}

int xfer_upd_outcome_parse(const uint8_t *p, size_t n, xfer_upd_outcome *out, xfer_err *err)
{
	memset(out, 0, sizeof *out);
	Skein__Weights__Outcome *m = skein__weights__outcome__unpack(NULL, n, p);
	if (!m) return xfer_fail(err, XFER_EFORMAT, "the head's answer is not an Outcome");
	int rc = -1;
	char state[16];
	if (copy_str(state, sizeof state, m->state, "Outcome", "state", err) != 0) goto out;
	int s = XFER_UPD_UNKNOWN;
	while (s <= XFER_UPD_ABORTED && strcmp(state, upd_states[s]) != 0) s++;
	if (s > XFER_UPD_ABORTED) {
		xfer_fail(err, XFER_EFORMAT, "the head's Outcome: state \"%s\" is unknown", state);
		goto out;
	}
	out->state = (xfer_upd_state)s;
	out->version = m->version;
	copy_reason(out->reason, sizeof out->reason, m->reason);
	if (m->record) {
		const Skein__Weights__Update *u = m->record;
		out->has_record = 1;
		out->wire_bytes = u->wire_bytes;
		out->density = u->density;
		out->update_seconds = u->update_seconds;
		out->implementation_seconds = u->implementation_seconds;
		out->participants = (uint32_t)(u->n_engines > UINT32_MAX ? UINT32_MAX : u->n_engines);
		for (size_t i = 0; i < u->n_engines; i++) {
			const Skein__Weights__Engine *e = u->engines[i];
			if (e->state && !strcmp(e->state, "dropped")) out->dropped++;
			if (e->state && !strcmp(e->state, "verified") && e->seconds > out->engine_seconds &&
			    e->seconds < 1e9)
				out->engine_seconds = e->seconds;
			const Skein__Weights__Timings *t = e->timings;
			if (!t) continue;
			/* shown, not relied on: only what is a sane duration counts */
#define TAKE_MAX(f)                                                                      \
	if (t->f > out->engines.f && t->f < 1e9) out->engines.f = t->f
			TAKE_MAX(data_seconds);
			TAKE_MAX(hash_seconds);
			TAKE_MAX(journal_seconds);
			TAKE_MAX(undo_seconds);
#undef TAKE_MAX
		}
		if (!*out->reason) copy_reason(out->reason, sizeof out->reason, u->reason);
	}
	rc = 0;
out:
	skein__weights__outcome__free_unpacked(m, NULL);
	return rc;
}

int xfer_upd_instr_parse(const uint8_t *p, size_t n, xfer_upd_instr *out, xfer_err *err)
{
	static const char *const kinds[] = { "idle", "receive", "commit", "abort", "catchup", "serve", NULL };
	memset(out, 0, sizeof *out);
	Skein__Weights__Instruction *m = skein__weights__instruction__unpack(NULL, n, p);
	if (!m) return xfer_fail(err, XFER_EFORMAT, "the head's answer to wait is not an Instruction");
	int rc = -1;
	if (copy_str(out->kind, sizeof out->kind, m->kind, "Instruction", "kind", err) != 0 ||
	    copy_str(out->mode, sizeof out->mode, m->mode, "Instruction", "mode", err) != 0 ||
	    copy_str(out->peer, sizeof out->peer, m->peer, "Instruction", "peer", err) != 0 ||
	    bad_int(m->timeout_ms, 0, 24 * 3600 * 1000, "Instruction", "timeout_ms", err) != 0 ||
	    bad_int(m->nranks, 0, XFER_UPD_PEERS_MAX + 1, "Instruction", "nranks", err) != 0 ||
	    bad_int(m->rank, 0, m->nranks > 0 ? m->nranks - 1 : 0, "Instruction", "rank", err) != 0)
		goto out;
	if (!one_of(out->kind, kinds)) {
		xfer_fail(err, XFER_EFORMAT, "the head's Instruction: kind \"%s\" is unknown", out->kind);
		goto out;
	}
	/* colocated: the sender's handoff, checked whole where it is used */
	if (!strcmp(out->mode, "colocated") ? m->setup.len > XFER_UPD_SETUP_MAX
					    : m->setup.len != 0 && m->setup.len != XFER_NCCL_ID_BYTES) {
		xfer_fail(err, XFER_EFORMAT, "the head's Instruction: a setup of %zu bytes (%s)", m->setup.len,
			  !strcmp(out->mode, "colocated") ? "at most 512 KiB" : "0 or 128");
		goto out;
	}
	if (m->root.len != 0 && m->root.len != 16) {
		xfer_fail(err, XFER_EFORMAT, "the head's Instruction: a root of %zu bytes (0 or 16)", m->root.len);
		goto out;
	}
	out->has_root = m->root.len == 16;
	if (out->has_root) memcpy(out->root, m->root.data, 16);
	if (m->nonce.len != 0 && m->nonce.len != XFER_NONCE_BYTES) {
		xfer_fail(err, XFER_EFORMAT, "the head's Instruction: a nonce of %zu bytes (0 or %d)", m->nonce.len,
			  XFER_NONCE_BYTES);
		goto out;
	}
	if (strcmp(out->kind, "idle") != 0 && m->version == 0) {
		xfer_fail(err, XFER_EFORMAT, "the head's Instruction: %s of version 0", out->kind);
		goto out;
	}
	if (m->setup.len) {
		if (!(out->setup = malloc(m->setup.len))) {
			xfer_fail(err, XFER_ENOMEM, "out of memory");
			goto out;
		}
		memcpy(out->setup, m->setup.data, m->setup.len);
	}
	out->setup_len = m->setup.len;
	out->version = m->version;
	out->base_version = m->base_version;
	out->rank = m->rank;
	out->nranks = m->nranks;
	out->timeout_ms = m->timeout_ms;
	out->has_nonce = m->nonce.len == XFER_NONCE_BYTES;
	if (out->has_nonce) memcpy(out->nonce, m->nonce.data, XFER_NONCE_BYTES);
	copy_reason(out->reason, sizeof out->reason, m->reason);
	rc = 0;
out:
	skein__weights__instruction__free_unpacked(m, NULL);
	return rc;
}

void xfer_upd_instr_free(xfer_upd_instr *in)
{
	free(in->setup);
	in->setup = NULL;
	in->setup_len = 0;
}
