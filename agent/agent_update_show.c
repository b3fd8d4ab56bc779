/* agent/agent_update_show: the transfers table as text or JSON (see
 * agent_update_show.h).
 *
 * Follows agent_jobs_cmd.c's listings: JSON strings through
 * sk_buf_json_str, text through sk_text_escape, numbers printed by us.  A
 * double that is not finite (a copy the caller changed; the table refuses
 * them) is written as null, never as "nan", which no JSON reader takes. */
#include "agent/agent_update_show.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sk_text.h"

/* "key":value, after a comma unless it opens its object; the value a
 * string, a double (null unless finite) or an integer */
static void key(sk_buf *o, const char *k)
{
	bool opens = o->len && o->p[o->len - 1] == '{';
	sk_buf_printf(o, "%s\"%s\":", opens ? "" : ",", k);
}

static void kv_str(sk_buf *o, const char *k, const char *v)
{
	key(o, k);
	sk_buf_json_str(o, v ? v : "");
}

static void kv_num(sk_buf *o, const char *k, double v)
{
	key(o, k);
	if (isfinite(v)) sk_buf_printf(o, "%.6f", v);
	else sk_buf_printf(o, "null");
}

static void kv_u64(sk_buf *o, const char *k, unsigned long long v)
{
	key(o, k);
	sk_buf_printf(o, "%llu", v);
}

/* {"data_seconds":..,"hash_seconds":..,"journal_seconds":..,"undo_seconds":..} */
static void json_timings(sk_buf *o, const update_timings *t)
{
	sk_buf_add(o, "{", 1);
	kv_num(o, "data_seconds", t->data);
	kv_num(o, "hash_seconds", t->hash);
	kv_num(o, "journal_seconds", t->journal);
	kv_num(o, "undo_seconds", t->undo);
	sk_buf_add(o, "}", 1);
}

static size_t count_state(const update_rec *u, const char *state)
{
	size_t k = 0;
	for (size_t i = 0; i < u->nengines; i++) k += !strcmp(u->engines[i].state, state);
	return k;
}

static void json_engine(sk_buf *o, const update_engine *e)
{
	sk_buf_add(o, "{", 1);
	kv_str(o, "member", e->member);
	kv_str(o, "node", e->node);
	kv_str(o, "state", e->state);
	kv_num(o, "seconds", e->seconds);
	/* its receive's undo journal (issue 27; the head's detail: 0 and "" past it) */
	kv_u64(o, "journal_bytes", e->journal_bytes);
	kv_u64(o, "journal_spilled_bytes", e->journal_spilled);
	kv_str(o, "journal_where", e->journal_where);
	sk_buf_printf(o, ",\"verified\":%s}", !strcmp(e->state, "verified") ? "true" : "false");
}

static void json_update(sk_buf *o, const update_rec *u)
{
	sk_buf_add(o, "{", 1);
	kv_str(o, "job", u->job);
	kv_u64(o, "version", u->version);
	kv_str(o, "mode", u->mode);
	kv_str(o, "state", u->state);
	kv_str(o, "reason", u->reason);
	kv_str(o, "cause", u->cause);
	kv_u64(o, "bytes", u->bytes);
	kv_u64(o, "wire_bytes", u->wire_bytes);
	kv_u64(o, "participants", u->nengines);
	kv_u64(o, "dropped", count_state(u, "dropped"));
	kv_u64(o, "started_ms", u->started_ms);
	key(o, "seconds");
	sk_buf_add(o, "{", 1);
	kv_num(o, "update_weights", u->update_seconds);
	kv_num(o, "implementation", u->implementation_seconds);
	kv_num(o, "prepare", u->prepare_seconds);
	kv_num(o, "commit", u->commit_seconds);
	sk_buf_printf(o, "},\"engines\":[");
	for (size_t i = 0; i < u->nengines; i++) {
		if (i) sk_buf_add(o, ",", 1);
		json_engine(o, &u->engines[i]);
	}
	sk_buf_printf(o, "],\"perf\":{");
	kv_num(o, "perf/update_weights_time", u->update_seconds);
	kv_num(o, "perf/update_weights_implementation_time", u->implementation_seconds);
	kv_u64(o, "perf/update_weights_wire_bytes", u->wire_bytes);
	kv_num(o, "perf/update_weights_density", u->density);
	/* the data path's split (issue #15): the sender's, each engine's by member */
	key(o, "sender");
	json_timings(o, &u->sender_t);
	sk_buf_printf(o, ",\"engines\":{");
	for (size_t i = 0; i < u->nengines; i++) {
		if (i) sk_buf_add(o, ",", 1);
		sk_buf_json_str(o, u->engines[i].member);
		sk_buf_add(o, ":", 1);
		json_timings(o, &u->engines[i].t);
	}
	sk_buf_printf(o, "}}}");
}

static bool timings_zero(const update_timings *t)
{
	return !(t->data > 0 || t->hash > 0 || t->journal > 0 || t->undo > 0);
}

static void text_secs(sk_buf *o, const char *name, double v, bool always)
{
	if (!always && !(v > 0)) return;
	if (isfinite(v)) sk_buf_printf(o, " %s %.4f", name, v);
	else sk_buf_printf(o, " %s -", name);
}

/* The data path's split under its update, when there is one (records
 * from before it have none): the sender's, and each figure's largest over
 * the engines (the slowest is what an operator looks for; the JSON has
 * them all). */
static void text_split(sk_buf *o, const update_rec *u)
{
	update_timings slow = update_rec_slowest(u);
	if (timings_zero(&u->sender_t) && timings_zero(&slow)) return;
	sk_buf_printf(o, "  split (s): sender");
	text_secs(o, "data", u->sender_t.data, true);
	text_secs(o, "hash", u->sender_t.hash, true);
	sk_buf_printf(o, "; engines, slowest:");
	text_secs(o, "data", slow.data, true);
	text_secs(o, "hash", slow.hash, true);
	text_secs(o, "journal", slow.journal, true);
	text_secs(o, "undo", slow.undo, false);
	sk_buf_add(o, "\n", 1);
}

/* Each engine's undo journal, where it told one (the head's detail). */
static void text_journal(sk_buf *o, const update_rec *u)
{
	for (size_t i = 0; i < u->nengines; i++) {
		const update_engine *e = &u->engines[i];
		if (!e->journal_where[0]) continue;
		sk_buf_printf(o, "  journal: ");
		sk_buf_text(o, e->member);
		sk_buf_printf(o, " %llu bytes, %llu spilled, ", (unsigned long long)e->journal_bytes,
			      (unsigned long long)e->journal_spilled);
		sk_buf_text(o, e->journal_where);
		sk_buf_add(o, "\n", 1);
	}
}

static const char TEXT_HDR[] = "%-24s %-8s %-12s %-10s %-14s %-9s %-9s %s\n";

static void text_update(sk_buf *o, const update_rec *u)
{
	char job[4 * sizeof u->job], mode[4 * sizeof u->mode], state[4 * sizeof u->state], secs[32], eng[48];
	if (isfinite(u->update_seconds)) snprintf(secs, sizeof secs, "%.3f", u->update_seconds);
	else snprintf(secs, sizeof secs, "-");
	snprintf(eng, sizeof eng, "%zu/%zu", count_state(u, "verified"), u->nengines);
	sk_buf_printf(o, "%-24s %-8llu %-12s %-10s %-14llu %-9s %-9s ", sk_text_escape(u->job, job, sizeof job),
		      (unsigned long long)u->version, sk_text_escape(u->mode, mode, sizeof mode),
		      sk_text_escape(u->state, state, sizeof state), (unsigned long long)u->bytes, secs, eng);
	bool said = u->reason && u->reason[0];
	sk_buf_text(o, said ? u->reason : "");
	/* who an update went on without, and why */
	for (size_t i = 0; i < u->nengines; i++) {
		const update_engine *e = &u->engines[i];
		if (strcmp(e->state, "dropped")) continue;
		sk_buf_printf(o, "%s", said ? "; " : "dropped ");
		sk_buf_text(o, e->member);
		sk_buf_add(o, " (", 2);
		sk_buf_text(o, e->reason ? e->reason : "");
		sk_buf_add(o, ")", 1);
		said = true;
	}
	if (!said) sk_buf_add(o, "-", 1);
	sk_buf_add(o, "\n", 1);
	text_split(o, u);
	text_journal(o, u);
}

void update_show(sk_buf *out, const update_rec *const *list, size_t n, bool json)
{
	if (json) {
		sk_buf_printf(out, "{\"transfers\":[");
		for (size_t i = 0; i < n; i++) {
			if (i) sk_buf_add(out, ",", 1);
			json_update(out, list[i]);
		}
		sk_buf_printf(out, "]}\n");
		return;
	}
	sk_buf_printf(out, TEXT_HDR, "JOB", "VERSION", "MODE", "STATE", "BYTES", "SECONDS", "ENGINES", "REASON");
	for (size_t i = 0; i < n; i++) text_update(out, list[i]);
}
