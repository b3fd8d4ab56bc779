/* jobs/update_fanin: an agent's fan-in of its engines' waits (see the header). */
#include "jobs/update_fanin.h"

#include <stdio.h>
#include <string.h>

const double UPDATE_FANIN_FLUSH_S = 0.25;  /* a "staged" waits at most this for the node's other words */
const double UPDATE_FANIN_IDLE_S = 5.0;    /* the head holds an idle node's report this long */
const double UPDATE_FANIN_HOLD_S = 1.0;    /* an engine's wait on its agent, as it was on the head */
const double UPDATE_FANIN_FORGET_S = 10.0; /* an engine not heard from for this long is forgotten */

void update_fanin_init(update_fanin *f)
{
	memset(f, 0, sizeof *f);
}

long update_fanin_find(const update_fanin *f, const char *member)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->e[i].member, member)) return (long)i;
	return -1;
}

static void mark(update_fanin *f, update_fanin_eng *e, double now, bool urgent)
{
	bool any = false;
	for (size_t i = 0; i < f->n && !any; i++) any = f->e[i].dirty;
	if (!any) f->first_dirty = now;
	e->dirty = true;
	f->urgent |= urgent;
}

long update_fanin_wait(update_fanin *f, const char *member, uint64_t gen, uint64_t held, uint64_t staged,
		       uint64_t failed, double now)
{
	if (strlen(member) > UPDATE_MEMBER_MAX) return -1;
	long k = update_fanin_find(f, member);
	update_fanin_eng *e;
	if (k < 0) {
		if (f->n == UPDATE_FANIN_MAX) return -1;
		k = (long)f->n++;
		e = &f->e[k];
		memset(e, 0, sizeof *e);
		snprintf(e->member, sizeof e->member, "%s", member);
		e->gen = gen, e->held = held, e->staged = staged, e->failed = failed;
		mark(f, e, now, true); /* the head learns of it at once */
	} else {
		e = &f->e[k];
		bool fresh = e->gen != gen || e->gone;
		bool word = e->held != held || e->staged != staged || e->failed != failed;
		/* a failure aborts the update: it does not wait for the others */
		bool urgent = fresh || (failed && failed != e->failed);
		e->gen = gen, e->held = held, e->staged = staged, e->failed = failed;
		e->gone = false;
		if (fresh) e->expect = 0;
		if (fresh || word) mark(f, e, now, urgent);
	}
	e->waiting = true;
	e->wait_since = e->last_seen = now;
	return k;
}

void update_fanin_gone(update_fanin *f, size_t i, double now)
{
	if (i >= f->n || f->e[i].gone) return;
	f->e[i].gone = true;
	f->e[i].waiting = false;
	f->e[i].expect = 0;
	mark(f, &f->e[i], now, true);
}

/* An engine told to receive whose word has not come (nor its exit). */
static bool awaited(const update_fanin_eng *e)
{
	return e->expect && !e->gone && e->staged != e->expect && e->failed != e->expect && e->held < e->expect;
}

double update_fanin_due(const update_fanin *f, double now)
{
	if (!f->n && !f->in_flight) return -1;
	if (f->urgent) return now;
	bool dirty = false, wait = false;
	for (size_t i = 0; i < f->n; i++) {
		dirty |= f->e[i].dirty;
		wait |= awaited(&f->e[i]);
	}
	if (dirty) return wait ? f->first_dirty + UPDATE_FANIN_FLUSH_S : now;
	if (!f->in_flight) return f->n ? now : -1; /* the node's long poll */
	return f->sent_at + UPDATE_FANIN_IDLE_S + UPDATE_FANIN_FLUSH_S; /* unanswered: the head was lost */
}

void update_fanin_sent(update_fanin *f, double now)
{
	size_t j = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (f->e[i].gone) continue; /* said once: forgotten */
		f->e[i].dirty = false;
		if (j != i) f->e[j] = f->e[i];
		j++;
	}
	f->n = j;
	f->urgent = false;
	f->in_flight = true;
	f->sent_at = now;
	f->reports++;
}

void update_fanin_answered(update_fanin *f)
{
	f->in_flight = false;
}

void update_fanin_told(update_fanin *f, size_t i, uint64_t receive)
{
	if (i >= f->n) return;
	if (receive) f->e[i].expect = receive;
	f->e[i].waiting = false;
}

size_t update_fanin_expire(update_fanin *f, double now, size_t *out, size_t cap)
{
	size_t n = 0, j = 0;
	for (size_t i = 0; i < f->n; i++) {
		update_fanin_eng *e = &f->e[i];
		if (!e->waiting && !e->dirty && now - e->last_seen > UPDATE_FANIN_FORGET_S) continue;
		if (j != i) f->e[j] = *e;
		j++;
	}
	f->n = j;
	for (size_t i = 0; i < f->n && n < cap; i++)
		if (f->e[i].waiting && now - f->e[i].wait_since >= UPDATE_FANIN_HOLD_S) {
			f->e[i].waiting = false;
			out[n++] = i;
		}
	return n;
}
