/* raft/raft_async: a raft_storage that runs another one on a thread.
 *
 * etcd's way of keeping the disk off the event loop: raft's storage calls
 * only copy their work into a queue (they never touch the disk), and one
 * thread takes everything queued at once, does it in order on the wrapped
 * synchronous storage, syncs once for the whole batch (one fdatasync for
 * all its appends), and publishes the number of the last call done.  It
 * then calls notify (skeind: ev_async_send), and the loop hands the number
 * to raft with raft_async_deliver; raft releases what waited for it.  While
 * the thread writes, the loop keeps answering (gossip probes, heartbeats)
 * and queues the next batch.
 *
 * A failed call is published the same way; the calls after it are dropped
 * (raft stops the node, which exits; a restart recovers from the disk).
 * The wrapped storage is touched by the thread only, except for load, which
 * raft_new calls before there is anything to do.  Unlike etcd, the queue
 * has no bound of its own: raft refuses proposals past RAFT_BEHIND_MAX
 * calls not yet durable. */
#include "common/sk_time.h"
#include "raft/raft_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { OP_APPEND, OP_TRUNCATE, OP_HARD, OP_SNAP } op_kind;

/* One queued storage call with a copy of everything it needs. */
typedef struct aop {
	op_kind kind;
	uint64_t seq;
	raft_entry *ents;
	size_t n;
	uint64_t arg;             /* truncate from, the term, compact up to */
	char vote[RAFT_NAME_MAX + 1];
	raft_snap_meta meta;
	uint8_t *data;            /* the entries' payloads in one block, or the snapshot */
	size_t len;
	struct aop *next;
} aop;

struct raft_async {
	raft_storage st;          /* what raft calls (async) */
	raft_storage *inner;
	void (*notify)(void *ctx);
	void *nctx;
	pthread_t thread;
	pthread_mutex_t mu;       /* everything below */
	pthread_cond_t cv;
	aop *head, *tail;
	uint64_t queued;          /* calls numbered so far */
	uint64_t done;            /* calls durable */
	bool failed, stop;
	char err[RAFT_ERR_MAX];
	raft_async_stats stats;
};

static void op_free(aop *o)
{
	free(o->ents);
	free(o->data);
	free(o);
}

/* Queues o (numbered), or fails for lack of memory. */
static int enqueue(raft_async *a, aop *o, char *err, size_t errlen)
{
	if (!o) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_mutex_lock(&a->mu);
	o->seq = ++a->queued;
	if (a->tail) a->tail->next = o;
	else a->head = o;
	a->tail = o;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return 0;
}

static aop *op_new(op_kind kind, size_t nents, size_t bytes)
{
	aop *o = calloc(1, sizeof *o);
	if (!o) return NULL;
	o->kind = kind;
	o->ents = nents ? calloc(nents, sizeof *o->ents) : NULL;
	o->data = malloc(bytes ? bytes : 1);
	if ((nents && !o->ents) || !o->data) {
		op_free(o);
		return NULL;
	}
	o->n = nents;
	o->len = bytes;
	return o;
}

static int a_load(void *ctx, raft_loaded *out, char *err, size_t errlen)
{
	raft_async *a = ctx;
	return a->inner->load(a->inner->ctx, out, err, errlen);
}

static int a_save_hard(void *ctx, uint64_t term, const char *vote, char *err, size_t errlen)
{
	aop *o = op_new(OP_HARD, 0, 0);
	if (o) {
		o->arg = term;
		snprintf(o->vote, sizeof o->vote, "%s", vote);
	}
	return enqueue(ctx, o, err, errlen);
}

static int a_append(void *ctx, const raft_entry *e, size_t n, char *err, size_t errlen)
{
	size_t bytes = 0;
	for (size_t i = 0; i < n; i++) bytes += e[i].len;
	aop *o = op_new(OP_APPEND, n, bytes);
	if (o) {
		size_t off = 0;
		for (size_t i = 0; i < n; i++) {
			o->ents[i] = e[i];
			o->ents[i].data = o->data + off;
			if (e[i].len) memcpy(o->data + off, e[i].data, e[i].len);
			off += e[i].len;
		}
	}
	return enqueue(ctx, o, err, errlen);
}

static int a_truncate(void *ctx, uint64_t from, char *err, size_t errlen)
{
	aop *o = op_new(OP_TRUNCATE, 0, 0);
	if (o) o->arg = from;
	return enqueue(ctx, o, err, errlen);
}

static int a_save_snapshot(void *ctx, const raft_snap_meta *meta, const uint8_t *data, size_t len,
			   uint64_t upto, char *err, size_t errlen)
{
	aop *o = op_new(OP_SNAP, 0, len);
	if (o) {
		o->meta = *meta;
		if (len) memcpy(o->data, data, len);
		o->arg = upto;
	}
	return enqueue(ctx, o, err, errlen);
}

static int run_op(raft_storage *s, const aop *o, char *err, size_t errlen)
{
	switch (o->kind) {
	case OP_APPEND: return s->append(s->ctx, o->ents, o->n, err, errlen);
	case OP_TRUNCATE: return s->truncate(s->ctx, o->arg, err, errlen);
	case OP_HARD: return s->save_hard(s->ctx, o->arg, o->vote, err, errlen);
	case OP_SNAP: return s->save_snapshot(s->ctx, &o->meta, o->data, o->len, o->arg, err, errlen);
	}
	return -1;
}

/* The storage thread: one batch at a time, until stopped and drained. */
static void *run(void *arg)
{
	raft_async *a = arg;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		while (!a->head && !a->stop) pthread_cond_wait(&a->cv, &a->mu);
		if (!a->head) break;
		aop *batch = a->head;
		a->head = a->tail = NULL;
		bool skip = a->failed;
		pthread_mutex_unlock(&a->mu);

		char err[RAFT_ERR_MAX] = "";
		int rc = 0;
		uint64_t last = 0, n = 0, t0 = sk_mono_ms();
		for (aop *o = batch; o && !skip && rc == 0; o = o->next) {
			rc = run_op(a->inner, o, err, sizeof err);
			last = o->seq;
			n++;
		}
		if (!skip && rc == 0 && a->inner->sync) rc = a->inner->sync(a->inner->ctx, err, sizeof err);
		uint64_t took = sk_mono_ms() - t0;
		while (batch) {
			aop *nx = batch->next;
			op_free(batch);
			batch = nx;
		}

		pthread_mutex_lock(&a->mu);
		if (skip) continue;
		if (rc != 0) {
			a->failed = true;
			snprintf(a->err, sizeof a->err, "%s", err);
		} else {
			a->done = last;
			a->stats.batches++;
			a->stats.calls += n;
			if (n > a->stats.max_batch) a->stats.max_batch = n;
			if (took > a->stats.max_batch_ms) a->stats.max_batch_ms = took;
		}
		pthread_mutex_unlock(&a->mu);
		a->notify(a->nctx);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

raft_async *raft_async_new(raft_storage *inner, void (*notify)(void *ctx), void *ctx, char *err, size_t errlen)
{
	raft_async *a = calloc(1, sizeof *a);
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->inner = inner;
	a->notify = notify;
	a->nctx = ctx;
	a->st = (raft_storage){ .ctx = a, .async = true, .load = a_load, .save_hard = a_save_hard,
				.append = a_append, .truncate = a_truncate, .save_snapshot = a_save_snapshot };
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	if (pthread_create(&a->thread, NULL, run, a) != 0) {
		snprintf(err, errlen, "cannot start the storage thread");
		pthread_cond_destroy(&a->cv);
		pthread_mutex_destroy(&a->mu);
		free(a);
		return NULL;
	}
	return a;
}

raft_storage *raft_async_storage(raft_async *a) { return &a->st; }

void raft_async_deliver(raft_async *a, raft_t *r, uint64_t now_ms)
{
	char err[RAFT_ERR_MAX];
	pthread_mutex_lock(&a->mu);
	uint64_t done = a->done;
	bool failed = a->failed;
	snprintf(err, sizeof err, "%s", a->err);
	pthread_mutex_unlock(&a->mu);
	if (done) raft_storage_done(r, now_ms, done);
	if (failed) raft_storage_failed(r, err);
}

void raft_async_get_stats(raft_async *a, raft_async_stats *st)
{
	pthread_mutex_lock(&a->mu);
	*st = a->stats;
	st->queued = a->queued;
	st->done = a->done;
	pthread_mutex_unlock(&a->mu);
}

void raft_async_free(raft_async **ap)
{
	raft_async *a = *ap;
	if (!a) return;
	pthread_mutex_lock(&a->mu);
	a->stop = true;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->thread, NULL); /* it finishes what is queued first */
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a);
	*ap = NULL;
}
