/* jobs/wv_coord: the rules of one open weight update (see wv_coord.h).
 *
 * What moved here from agent/agent_wv.c: finish (the verdict, once), lose
 * (drop or abort), try_finish (commit, with the root cross-check), the
 * sender's done, its loss, the watchdog, and the timings of the final and
 * measured records. */
#include "jobs/wv_coord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_pending(const wv_engine *p) { return !strcmp(p->state, "pending"); }

int wv_coord_start(wv_coord *c, wv_update *rec, double now, int timeout_ms, bool drop, bool adopted)
{
	memset(c, 0, sizeof *c);
	c->part = calloc(rec->nengines ? rec->nengines : 1, sizeof *c->part);
	if (!c->part) {
		wv_update_free(rec);
		return -1;
	}
	c->rec = *rec;
	memset(rec, 0, sizeof *rec);
	c->timeout_ms = timeout_ms;
	c->drop = drop;
	c->adopted = adopted;
	c->begun = adopted; /* an adopted update's begin applied under the old head */
	for (size_t i = 0; i < c->rec.nengines; i++) c->npending += is_pending(&c->rec.engines[i]);
	c->t_begin = c->t_progress = now;
	if (adopted) c->t_answer = now;
	return 0;
}

void wv_coord_free(wv_coord *c)
{
	wv_update_free(&c->rec);
	free(c->part);
	c->part = NULL;
}

long wv_coord_find(const wv_coord *c, const char *member)
{
	const wv_engine *e = wv_update_engine(&c->rec, member); /* by id when compact */
	return e ? (long)(e - c->rec.engines) : -1;
}

size_t wv_coord_pending(const wv_coord *c) { return c->npending; }

void wv_coord_begun(wv_coord *c, double now)
{
	c->begun = true;
	if (c->t_answer == 0) {
		c->t_answer = now;
		c->rec.prepare_seconds = now - c->t_begin; /* the begin record committed, the sender told */
	}
}

void wv_coord_progress(wv_coord *c, double now)
{
	if (!c->done) c->t_progress = now;
}

/* The verdict (once): true when this call made it. */
static bool finish(wv_coord *c, const char *state, const char *cause, const char *reason)
{
	if (c->final) return false;
	c->final = true;
	snprintf(c->final_state, sizeof c->final_state, "%s", state);
	snprintf(c->final_cause, sizeof c->final_cause, "%s", cause ? cause : "");
	snprintf(c->final_reason, sizeof c->final_reason, "%s", reason ? reason : "");
	return true;
}

/* NCCL ranks and colocated engines with verify_device off check nothing
 * and say no root (their bytes come only from the sender). */
static bool says_no_root(const char *mode)
{
	return !strcmp(mode, "broadcast") || !strcmp(mode, "broadcast_packed") || !strcmp(mode, "colocated");
}

bool wv_coord_settle(wv_coord *c, double now)
{
	if (!c->begun || c->final || !c->done || wv_coord_pending(c)) return false;
	/* an engine whose root differs took a forged or corrupted version: a
	 * checksum failure, whatever it said */
	for (size_t i = 0; c->rec.has_root && i < c->rec.nengines; i++) {
		wv_engine *p = &c->rec.engines[i];
		const wv_coord_part *q = &c->part[i];
		if (strcmp(p->state, "verified")) continue;
		if (!q->has_root && says_no_root(c->rec.mode)) continue;
		if (q->has_root && !memcmp(q->root, c->rec.root, WV_DIGEST_LEN)) continue;
		char why[WVC_REASON_MAX];
		snprintf(why, sizeof why, "version %llu: root mismatch: %s (a forged or corrupted data path): checksum "
			 "refused", (unsigned long long)c->rec.version,
			 q->has_root ? "the checksums it verified against are not the sender's"
				     : "it verified against no root, the sender declared one");
		return wv_coord_lose(c, i, now, why, true, true);
	}
	return finish(c, "committed", NULL, NULL);
}

bool wv_coord_lose(wv_coord *c, size_t i, double now, const char *why, bool fault, bool by_sender)
{
	if (c->final || i >= c->rec.nengines) return false;
	wv_engine *p = &c->rec.engines[i];
	if (!is_pending(p) && !(by_sender && !strcmp(p->state, "verified"))) return false;
	char *r = strdup(why);
	if (!r) return false;
	c->npending -= is_pending(p);
	snprintf(p->state, sizeof p->state, "%s", fault || !c->drop ? "failed" : "dropped");
	free(p->reason);
	p->reason = r;
	c->t_last_word = now;
	if (fault || !c->drop) {
		char reason[WVC_REASON_MAX];
		snprintf(reason, sizeof reason, "%s on %s: %s", p->member, p->node, why);
		return finish(c, "aborted", fault ? "engine" : "member_lost", reason);
	}
	return wv_coord_settle(c, now);
}

bool wv_coord_staged(wv_coord *c, size_t i, double now, double seconds, wv_timings t, const uint8_t *root)
{
	if (c->final || i >= c->rec.nengines || !is_pending(&c->rec.engines[i])) return false;
	wv_engine *p = &c->rec.engines[i];
	c->npending--;
	snprintf(p->state, sizeof p->state, "verified");
	p->seconds = seconds;
	p->t = t;
	c->part[i].has_root = root != NULL;
	if (root) memcpy(c->part[i].root, root, WV_DIGEST_LEN);
	c->t_progress = c->t_last_word = now;
	return wv_coord_settle(c, now);
}

bool wv_coord_failed(wv_coord *c, size_t i, double now, double seconds, wv_timings t, const char *why)
{
	if (c->final || i >= c->rec.nengines || !is_pending(&c->rec.engines[i])) return false;
	c->rec.engines[i].seconds = seconds;
	c->rec.engines[i].t = t;
	c->t_progress = now;
	return wv_coord_lose(c, i, now, why && *why ? why : "failed", true, false);
}

bool wv_coord_done(wv_coord *c, double now, bool ok, const char *reason, const uint8_t *root, double impl_s,
		   uint64_t wire_bytes, double density, wv_timings sender_t)
{
	c->t_progress = c->t_last_word = now;
	if (c->done || c->final) return false; /* said again (its answer was lost): wait for the verdict */
	c->done = true;
	c->done_ok = ok;
	c->impl_s = impl_s;
	c->wire_bytes = wire_bytes;
	c->density = density;
	c->sender_t = sender_t;
	char why[WVC_REASON_MAX];
	if (!ok) {
		snprintf(why, sizeof why, "%s (sender) on %s: %s", c->rec.sender, c->rec.sender_node, reason ? reason : "");
		return finish(c, "aborted", "sender", why);
	}
	if (root) {
		if (c->rec.has_root && memcmp(c->rec.root, root, WV_DIGEST_LEN)) {
			snprintf(why, sizeof why, "%s (sender) on %s: the root in its done differs from its begin's",
				 c->rec.sender, c->rec.sender_node);
			return finish(c, "aborted", "sender", why);
		}
		memcpy(c->rec.root, root, WV_DIGEST_LEN); /* into the final record */
		c->rec.has_root = true;
	}
	return false;
}

bool wv_coord_sender_lost(wv_coord *c, double now, const char *why)
{
	(void)now;
	if (c->done) return false; /* its part is over: the participants decide */
	char reason[WVC_REASON_MAX];
	snprintf(reason, sizeof reason, "%s (sender) on %s: %s", c->rec.sender, c->rec.sender_node, why);
	return finish(c, "aborted", "sender", reason);
}

bool wv_coord_superseded(wv_coord *c, double now, const char *why)
{
	(void)now;
	return finish(c, "aborted", "superseded", why);
}

bool wv_coord_tick(wv_coord *c, double now)
{
	if (c->final || c->timeout_ms <= 0 || now - c->t_progress <= c->timeout_ms / 1000.0) return false;
	char why[WVC_REASON_MAX], who[300] = "";
	size_t off = 0;
	if (!c->done) off += (size_t)snprintf(who + off, sizeof who - off, " %s (sender)", c->rec.sender);
	for (size_t k = 0; k < c->rec.nengines && off < sizeof who - 1; k++)
		if (is_pending(&c->rec.engines[k]))
			off += (size_t)snprintf(who + off, sizeof who - off, " %s", c->rec.engines[k].member);
	snprintf(why, sizeof why, "watchdog: no progress for %.1f s; waiting for%s", c->timeout_ms / 1000.0, who);
	return finish(c, "aborted", "timeout", why);
}

double wv_coord_since_begin(const wv_coord *c, double now, uint64_t wall_ms)
{
	if (!c->adopted) return now - c->t_begin;
	double s = (double)((int64_t)wall_ms - (int64_t)c->rec.started_ms) / 1e3;
	return s > 0 ? s : 0;
}

int wv_coord_final(const wv_coord *c, double now, uint64_t wall_ms, wv_update *out)
{
	if (wv_update_copy(out, &c->rec) < 0) return -1;
	char *r = strdup(c->final_reason);
	if (!r) {
		wv_update_free(out);
		return -1;
	}
	snprintf(out->state, sizeof out->state, "%s", c->final_state);
	snprintf(out->cause, sizeof out->cause, "%s", c->final_cause);
	free(out->reason);
	out->reason = r;
	out->finished_ms = wall_ms;
	out->wire_bytes = c->wire_bytes;
	out->density = c->density;
	out->implementation_seconds = c->impl_s;
	out->sender_t = c->sender_t;
	/* to the proposal; the amendment (wv_coord_measured) runs them to the commit */
	out->update_seconds = wv_coord_since_begin(c, now, wall_ms);
	out->commit_seconds = c->t_last_word > 0 ? now - c->t_last_word : 0;
	return 0;
}

int wv_coord_measured(const wv_coord *c, const wv_update *rec, double now, uint64_t wall_ms, wv_update *out)
{
	if (rec->measured || !c->final) return 1;
	if (wv_update_copy(out, rec) < 0) return -1;
	out->measured = true;
	out->bare = c->rec.compact; /* a few bytes: the figures alone (wv_codec) */
	out->update_seconds = wv_coord_since_begin(c, now, wall_ms);
	out->commit_seconds = c->t_last_word > 0 ? now - c->t_last_word : 0;
	return 0;
}
