/* jobs/job_codec: the one file of jobs/ and agent/ that sees
 * proto/jobs.pb-c.h (see job_codec.h).
 *
 * protobuf-c's string fields are char *; packing only reads them, so the
 * encoders point into the caller's C structs instead of copying.  The
 * decoders copy out, bounded by the C fields: a string that does not fit
 * is an error (a spec) or cut (a node name longer than membership allows
 * cannot be placed anyway, and job_state refuses such records). */
#include "jobs/job_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/job_state.h"
#include "proto/jobs.pb-c.h"

static void codec_err(char *err, size_t errlen, const char *what, size_t n, size_t cap)
{
	if (err && errlen) snprintf(err, errlen, "--%s: %zu bytes is longer than the limit of %zu", what, n, cap);
}

void job_spec_to_pb(const job_spec *s, struct Skein__Jobs__JobSpec *pb)
{
	skein__jobs__job_spec__init(pb);
	/* protobuf-c's string fields are char *; packing only reads them */
	pb->name = (char *)s->name;
	pb->actor_num_nodes = s->actor_num_nodes;
	pb->actor_num_gpus_per_node = s->actor_num_gpus_per_node;
	pb->rollout_num_gpus = s->rollout_num_gpus;
	pb->rollout_num_gpus_per_engine = s->rollout_num_gpus_per_engine;
	pb->num_gpus_per_node = s->num_gpus_per_node;
	pb->colocate = s->colocate;
	pb->transfer_mode = (char *)s->transfer_mode;
	pb->buffer_size = s->buffer_size;
	pb->disk_dir = (char *)s->disk_dir;
	pb->trainer_cmd = (char *)s->trainer_cmd;
	pb->rollout_cmd = (char *)s->rollout_cmd;
	pb->max_restarts = s->max_restarts;
	pb->backoff_min_ms = s->backoff_min_ms;
	pb->backoff_max_ms = s->backoff_max_ms;
	pb->stop_grace_ms = s->stop_grace_ms;
	pb->update_timeout_ms = s->update_timeout_ms;
	pb->on_engine_loss = (char *)s->on_engine_loss;
	pb->rollout_engine = (char *)s->rollout_engine;
	pb->pause_mode = (char *)s->pause_mode;
	pb->engine_layout = (char *)s->engine_layout;
}

static int job_pb_str(char *dst, size_t cap, const char *src, const char *flag, char *err, size_t errlen)
{
	size_t n = src ? strlen(src) : 0;
	if (n >= cap) {
		codec_err(err, errlen, flag, n, cap - 1);
		return -1;
	}
	if (n) memcpy(dst, src, n);
	dst[n] = 0;
	return 0;
}

int job_spec_from_pb(job_spec *s, const struct Skein__Jobs__JobSpec *pb, char *err, size_t errlen)
{
	job_spec t;
	if (!s || !pb) {
		if (err && errlen) snprintf(err, errlen, "bad arguments");
		return -1;
	}
	memset(&t, 0, sizeof t);
	if (job_pb_str(t.name, sizeof t.name, pb->name, "name", err, errlen) != 0 ||
	    job_pb_str(t.transfer_mode, sizeof t.transfer_mode, pb->transfer_mode, "update-weight-transfer-mode", err,
		       errlen) != 0 ||
	    job_pb_str(t.disk_dir, sizeof t.disk_dir, pb->disk_dir, "update-weight-disk-dir", err, errlen) != 0 ||
	    job_pb_str(t.trainer_cmd, sizeof t.trainer_cmd, pb->trainer_cmd, "trainer-cmd", err, errlen) != 0 ||
	    job_pb_str(t.rollout_cmd, sizeof t.rollout_cmd, pb->rollout_cmd, "rollout-cmd", err, errlen) != 0 ||
	    job_pb_str(t.on_engine_loss, sizeof t.on_engine_loss, pb->on_engine_loss, "update-on-engine-loss", err,
		       errlen) != 0 ||
	    job_pb_str(t.rollout_engine, sizeof t.rollout_engine, pb->rollout_engine, "rollout-engine", err, errlen) != 0 ||
	    job_pb_str(t.pause_mode, sizeof t.pause_mode, pb->pause_mode, "pause-generation-mode", err, errlen) != 0 ||
	    job_pb_str(t.engine_layout, sizeof t.engine_layout, pb->engine_layout, "rollout-engine-layout", err,
		       errlen) != 0)
		return -1;
	t.actor_num_nodes = pb->actor_num_nodes;
	t.actor_num_gpus_per_node = pb->actor_num_gpus_per_node;
	t.rollout_num_gpus = pb->rollout_num_gpus;
	t.rollout_num_gpus_per_engine = pb->rollout_num_gpus_per_engine;
	t.num_gpus_per_node = pb->num_gpus_per_node;
	t.colocate = pb->colocate;
	t.buffer_size = pb->buffer_size;
	t.max_restarts = pb->max_restarts;
	t.backoff_min_ms = pb->backoff_min_ms;
	t.backoff_max_ms = pb->backoff_max_ms;
	t.stop_grace_ms = pb->stop_grace_ms;
	/* absent (a spec or record from before #13's fields): the defaults;
	 * 0 is below the minimum anyway, so nothing valid is lost */
	t.update_timeout_ms = pb->update_timeout_ms ? pb->update_timeout_ms : JOB_UPDATE_TIMEOUT_MS;
	if (!t.on_engine_loss[0]) snprintf(t.on_engine_loss, sizeof t.on_engine_loss, "%s", JOB_ENGINE_LOSS_DEFAULT);
	if (!t.rollout_engine[0]) snprintf(t.rollout_engine, sizeof t.rollout_engine, "skein");
	if (!t.pause_mode[0]) snprintf(t.pause_mode, sizeof t.pause_mode, "retract");
	*s = t;
	return 0;
}

/* Any message packed into *out (malloc'd); -1 when memory runs out. */
static int pb_pack(const ProtobufCMessage *m, uint8_t **out, size_t *len)
{
	*len = protobuf_c_message_get_packed_size(m);
	*out = malloc(*len ? *len : 1);
	if (!*out) return -1;
	protobuf_c_message_pack(m, *out);
	return 0;
}

static char *dup_str(const char *s)
{
	return strdup(s ? s : "");
}

/* The record's layout as it is: its slots, and as many engines as the
 * longer of its two engine lists (the shorter reads 0 past its end). */
static int layout_decode(job_layout *L, const Skein__Jobs__Layout *pl)
{
	size_t ne = pl->n_engine_gen > pl->n_engine_restarts ? pl->n_engine_gen : pl->n_engine_restarts;
	if (pl->n_slots > UINT32_MAX || ne > UINT32_MAX || job_layout_alloc(L, (uint32_t)pl->n_slots, (uint32_t)ne) < 0)
		return -1;
	for (uint32_t i = 0; i < L->n; i++) {
		snprintf(L->node[i], sizeof L->node[i], "%s", pl->slots[i]->node);
		L->gpu[i] = pl->slots[i]->gpu;
	}
	L->trainer_gen = pl->trainer_gen;
	L->trainer_failures = pl->trainer_failures;
	snprintf(L->master_addr, sizeof L->master_addr, "%s", pl->master_addr);
	L->master_port = pl->master_port;
	for (uint32_t e = 0; e < L->neng; e++) {
		L->engine_gen[e] = e < pl->n_engine_gen ? pl->engine_gen[e] : 0;
		L->engine_restarts[e] = e < pl->n_engine_restarts ? pl->engine_restarts[e] : 0;
	}
	return 0;
}

int job_codec_decode(job_rec *r, const uint8_t *data, size_t len)
{
	memset(r, 0, sizeof *r);
	Skein__Jobs__Job *j = skein__jobs__job__unpack(NULL, len, data);
	if (!j) return -1;
	int rc = -1;
	if (!j->spec || job_spec_from_pb(&r->spec, j->spec, NULL, 0) < 0) goto out;
	r->state = dup_str(j->state);
	r->reason = dup_str(j->reason);
	r->submit_token = dup_str(j->submit_token);
	if (!r->state || !r->reason || !r->submit_token) goto out;
	r->has_layout = j->layout != NULL;
	if (j->layout && layout_decode(&r->layout, j->layout) < 0) goto out;
	r->submitted_ms = j->submitted_ms;
	r->seq = j->seq;
	r->version = j->version;
	rc = 0;
out:
	skein__jobs__job__free_unpacked(j, NULL);
	if (rc < 0) job_rec_free(r);
	return rc;
}

/* Packs r with layout L (NULL: none) into *out. */
static int encode_with(const job_rec *r, const job_layout *L, uint8_t **out, size_t *len)
{
	Skein__Jobs__Job j = SKEIN__JOBS__JOB__INIT;
	Skein__Jobs__JobSpec sp;
	Skein__Jobs__Layout pl = SKEIN__JOBS__LAYOUT__INIT;
	Skein__Jobs__Slot *slots = NULL, **ptrs = NULL;
	job_spec_to_pb(&r->spec, &sp);
	j.spec = &sp;
	j.state = r->state;
	j.reason = r->reason;
	j.submitted_ms = r->submitted_ms;
	j.seq = r->seq;
	j.version = r->version;
	j.submit_token = r->submit_token;
	*out = NULL;
	if (L) {
		slots = calloc(L->n ? L->n : 1, sizeof *slots);
		ptrs = calloc(L->n ? L->n : 1, sizeof *ptrs);
		if (!slots || !ptrs) goto out;
		for (uint32_t i = 0; i < L->n; i++) {
			skein__jobs__slot__init(&slots[i]);
			slots[i].node = L->node[i];
			slots[i].gpu = L->gpu[i];
			ptrs[i] = &slots[i];
		}
		pl.n_slots = L->n;
		pl.slots = ptrs;
		pl.trainer_gen = L->trainer_gen;
		pl.master_addr = (char *)L->master_addr;
		pl.master_port = L->master_port;
		pl.n_engine_gen = L->neng;
		pl.engine_gen = L->engine_gen;
		pl.n_engine_restarts = L->neng;
		pl.engine_restarts = L->engine_restarts;
		pl.trainer_failures = L->trainer_failures;
		j.layout = &pl;
	}
	job_codec_pack(&j, out, len);
out:
	free(slots);
	free(ptrs);
	return *out ? 0 : -1;
}

int job_codec_encode(const job_rec *r, uint8_t **out, size_t *len)
{
	return encode_with(r, r->has_layout ? &r->layout : NULL, out, len);
}

int job_codec_update(const job_rec *old, const char *state, const char *reason, const job_layout *L,
		     uint8_t **out, size_t *len)
{
	job_rec u = *old; /* shallow: only read while packing */
	u.version = old->version + 1; /* compare-and-set against the record we read */
	u.state = (char *)state;
	u.reason = (char *)(reason ? reason : "");
	return encode_with(&u, L ? L : old->has_layout ? &old->layout : NULL, out, len);
}

int job_codec_pack(const Skein__Jobs__Job *j, uint8_t **out, size_t *len)
{
	return pb_pack(&j->base, out, len);
}

int job_codec_drain_decode(const uint8_t *data, size_t len, char node[JOB_NODE_MAX + 1], bool *on, uint64_t *since_ms)
{
	Skein__Jobs__Drain *d = skein__jobs__drain__unpack(NULL, len, data);
	int rc = -1;
	if (d && d->node[0] && strlen(d->node) <= JOB_NODE_MAX) {
		snprintf(node, JOB_NODE_MAX + 1, "%s", d->node);
		*on = d->on;
		*since_ms = d->since_ms;
		rc = 0;
	}
	if (d) skein__jobs__drain__free_unpacked(d, NULL);
	return rc;
}

int job_codec_drain_encode(const char *node, bool on, uint64_t since_ms, uint8_t **out, size_t *len)
{
	Skein__Jobs__Drain d = SKEIN__JOBS__DRAIN__INIT;
	d.node = (char *)node;
	d.on = on;
	d.since_ms = since_ms;
	return pb_pack(&d.base, out, len);
}

int job_codec_spec_unpack(job_spec *s, const uint8_t *data, size_t len, char *err, size_t errlen)
{
	Skein__Jobs__JobSpec *pb = skein__jobs__job_spec__unpack(NULL, len, data);
	if (!pb) return -2;
	int rc = job_spec_from_pb(s, pb, err, errlen);
	skein__jobs__job_spec__free_unpacked(pb, NULL);
	return rc < 0 ? -1 : 0;
}

int job_codec_spec_pack(const job_spec *s, uint8_t **out, size_t *len)
{
	Skein__Jobs__JobSpec pb;
	job_spec_to_pb(s, &pb);
	return pb_pack(&pb.base, out, len);
}

/* ---------------------------------------------------------------- orders and reports */

static const char ROLE_TRAINER[] = "trainer", ROLE_ROLLOUT[] = "rollout";

int job_codec_assignment_encode(const job_assignment *as, uint8_t **out, size_t *len)
{
	Skein__Jobs__Assignment pa = SKEIN__JOBS__ASSIGNMENT__INIT;
	Skein__Jobs__MemberOrder *mo = calloc(as->n ? as->n : 1, sizeof *mo);
	Skein__Jobs__MemberOrder **ptrs = calloc(as->n ? as->n : 1, sizeof *ptrs);
	int rc = -1;
	*out = NULL;
	if (!mo || !ptrs) goto out;
	/* protobuf-c's fields are not const; packing only reads them */
	for (size_t i = 0; i < as->n; i++) {
		const job_order *o = as->members[i];
		Skein__Jobs__MemberOrder *m = &mo[i];
		skein__jobs__member_order__init(m);
		m->id = (char *)o->id;
		m->job = (char *)o->job;
		m->role = (char *)(o->trainer ? ROLE_TRAINER : ROLE_ROLLOUT);
		m->rank = o->rank;
		m->engine = o->engine;
		m->n_gpus = o->ngpus;
		m->gpus = (uint32_t *)o->gpus;
		m->cmd = (char *)(o->cmd ? o->cmd : "");
		m->n_env = o->nenv;
		m->env = (char **)o->env;
		m->gen = o->gen;
		m->restart_base = o->restart_base;
		m->local_restart = o->local_restart;
		m->max_restarts = o->max_restarts;
		m->backoff_min_ms = o->backoff_min_ms;
		m->backoff_max_ms = o->backoff_max_ms;
		m->start_delay_ms = o->start_delay_ms;
		m->hold = o->hold;
		m->stop_grace_ms = o->stop_grace_ms;
		ptrs[i] = m;
	}
	pa.n_members = as->n;
	pa.members = ptrs;
	pa.head = (char *)as->head;
	pa.n_drained = as->ndrained;
	pa.drained = (char **)as->drained;
	rc = pb_pack(&pa.base, out, len);
out:
	free(mo);
	free(ptrs);
	return rc;
}

/* Copies src into dst[cap]; false (with err naming `what`) when it is longer
 * than cap - 1 or, unless `empty_ok`, empty. */
static bool fits(char *dst, size_t cap, const char *src, bool empty_ok, const char *what, char *err, size_t errlen)
{
	size_t n = src ? strlen(src) : 0;
	if (n >= cap || (!n && !empty_ok)) {
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", what, n ? "longer than its limit" : "empty");
		return false;
	}
	memcpy(dst, src ? src : "", n + 1);
	return true;
}

/* The bytes member m's strings take once copied (cmd, env); 0 with err when
 * a field breaks its bound. */
static size_t order_check(const Skein__Jobs__MemberOrder *m, job_order *o, char *err, size_t errlen)
{
	if (!fits(o->id, sizeof o->id, m->id, false, "member id", err, errlen) ||
	    !fits(o->job, sizeof o->job, m->job, true, "member job", err, errlen))
		return 0;
	if (strcmp(m->role, ROLE_TRAINER) && strcmp(m->role, ROLE_ROLLOUT)) {
		if (err && errlen) snprintf(err, errlen, "member %s: role is neither trainer nor rollout", o->id);
		return 0;
	}
	size_t cmd = strlen(m->cmd), env = 0;
	for (size_t e = 0; e < m->n_env; e++) env += strlen(m->env[e]) + 1;
	const char *bad = m->n_gpus > JOB_GPUS_PER_NODE_MAX ? "more GPUs than a node has"
			  : cmd >= JOB_CMD_MAX		    ? "command longer than its limit"
			  : m->n_env > JOB_ORDER_ENV_MAX    ? "more environment entries than the limit"
			  : env > JOB_ORDER_ENV_BYTES	    ? "environment longer than its limit"
							    : NULL;
	if (bad) {
		if (err && errlen) snprintf(err, errlen, "member %s: %s", o->id, bad);
		return 0;
	}
	return cmd + 1 + env;
}

/* Copies s into the block at *at; returns the copy. */
static const char *put_str(char **at, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = memcpy(*at, s, n);
	*at += n;
	return p;
}

int job_codec_assignment_decode(job_assignment *as, const uint8_t *data, size_t len, char *err, size_t errlen)
{
	memset(as, 0, sizeof *as);
	Skein__Jobs__Assignment *pa = skein__jobs__assignment__unpack(NULL, len, data);
	if (!pa) {
		if (err && errlen) snprintf(err, errlen, "not an Assignment");
		return -1;
	}
	int rc = -1;
	size_t n = pa->n_members, nd = pa->n_drained, nenv = 0, bytes = 0;
	job_order scratch;
	if (!fits(as->head, sizeof as->head, pa->head, true, "head", err, errlen)) goto out;
	if (nd > JOB_STATE_DRAINED_MAX) {
		if (err && errlen) snprintf(err, errlen, "more drained nodes than %d", JOB_STATE_DRAINED_MAX);
		goto out;
	}
	for (size_t i = 0; i < nd; i++) {
		size_t dn = strlen(pa->drained[i]);
		if (!dn || dn > JOB_NODE_MAX) {
			if (err && errlen) snprintf(err, errlen, "drained node %zu: empty or longer than its limit", i);
			goto out;
		}
		bytes += dn + 1;
	}
	for (size_t i = 0; i < n; i++) {
		size_t b = order_check(pa->members[i], &scratch, err, errlen);
		if (!b) goto out;
		bytes += b;
		nenv += pa->members[i]->n_env;
	}
	/* one block: the orders, then member, env and drained pointers, then
	 * the text (job_order's size keeps the pointers aligned) */
	char *mem = malloc(n * sizeof(job_order) + (n + nenv + nd) * sizeof(char *) + bytes + 1);
	if (!mem) {
		if (err && errlen) snprintf(err, errlen, "out of memory");
		goto out;
	}
	job_order *orders = (job_order *)mem;
	const job_order **mp = (const job_order **)(orders + n);
	const char **ep = (const char **)(mp + n), **dp = ep + nenv;
	char *text = (char *)(dp + nd);
	as->mem = mem;
	for (size_t i = 0; i < n; i++) {
		const Skein__Jobs__MemberOrder *m = pa->members[i];
		job_order *o = &orders[i];
		memset(o, 0, sizeof *o);
		order_check(m, o, NULL, 0); /* passed above: copies id and job */
		o->trainer = !strcmp(m->role, ROLE_TRAINER);
		o->rank = m->rank;
		o->engine = m->engine;
		o->ngpus = (uint32_t)m->n_gpus;
		if (m->n_gpus) memcpy(o->gpus, m->gpus, m->n_gpus * sizeof *o->gpus);
		o->cmd = put_str(&text, m->cmd);
		o->nenv = (uint32_t)m->n_env;
		o->env = ep;
		for (size_t e = 0; e < m->n_env; e++) *ep++ = put_str(&text, m->env[e]);
		o->gen = m->gen;
		o->restart_base = m->restart_base;
		o->local_restart = m->local_restart;
		o->max_restarts = m->max_restarts;
		o->backoff_min_ms = m->backoff_min_ms;
		o->backoff_max_ms = m->backoff_max_ms;
		o->start_delay_ms = m->start_delay_ms;
		o->hold = m->hold;
		o->stop_grace_ms = m->stop_grace_ms;
		mp[i] = o;
	}
	for (size_t i = 0; i < nd; i++) dp[i] = put_str(&text, pa->drained[i]);
	as->n = n;
	as->members = mp;
	as->ndrained = nd;
	as->drained = dp;
	rc = 0;
out:
	skein__jobs__assignment__free_unpacked(pa, NULL);
	if (rc < 0) job_assignment_free(as);
	return rc;
}

void job_assignment_free(job_assignment *as)
{
	if (!as) return;
	free(as->mem);
	memset(as, 0, sizeof *as);
}

int job_codec_report_encode(const job_report *r, uint8_t **out, size_t *len)
{
	Skein__Jobs__Report pr = SKEIN__JOBS__REPORT__INIT;
	Skein__Jobs__MemberStatus *ms = calloc(r->n ? r->n : 1, sizeof *ms);
	Skein__Jobs__MemberStatus **ptrs = calloc(r->n ? r->n : 1, sizeof *ptrs);
	int rc = -1;
	*out = NULL;
	if (!ms || !ptrs) goto out;
	for (size_t i = 0; i < r->n; i++) {
		const job_member_status *m = &r->members[i];
		skein__jobs__member_status__init(&ms[i]);
		ms[i].id = (char *)m->id;
		ms[i].job = (char *)m->job;
		ms[i].gen = m->gen;
		ms[i].pid = m->pid;
		ms[i].state = (char *)m->state;
		ms[i].restarts = m->restarts;
		ms[i].last_exit = m->last_exit;
		ms[i].reason = (char *)m->reason;
		ptrs[i] = &ms[i];
	}
	pr.node = (char *)r->node;
	pr.n_members = r->n;
	pr.members = ptrs;
	pr.free_port = r->free_port;
	rc = pb_pack(&pr.base, out, len);
out:
	free(ms);
	free(ptrs);
	return rc;
}

int job_codec_report_decode(job_report *r, const uint8_t *data, size_t len, char *err, size_t errlen)
{
	memset(r, 0, sizeof *r);
	Skein__Jobs__Report *pr = skein__jobs__report__unpack(NULL, len, data);
	if (!pr) {
		if (err && errlen) snprintf(err, errlen, "not a Report");
		return -1;
	}
	int rc = -1;
	if (!fits(r->node, sizeof r->node, pr->node, true, "node", err, errlen)) goto out;
	r->free_port = pr->free_port;
	r->members = calloc(pr->n_members ? pr->n_members : 1, sizeof *r->members);
	if (!r->members) {
		if (err && errlen) snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < pr->n_members; i++) {
		const Skein__Jobs__MemberStatus *p = pr->members[i];
		job_member_status *m = &r->members[i];
		if (!fits(m->id, sizeof m->id, p->id, false, "member id", err, errlen) ||
		    !fits(m->job, sizeof m->job, p->job, true, "member job", err, errlen) ||
		    !fits(m->state, sizeof m->state, p->state, true, "member state", err, errlen))
			goto out;
		snprintf(m->reason, sizeof m->reason, "%s", p->reason); /* display text: cut */
		m->gen = p->gen;
		m->pid = p->pid;
		m->restarts = p->restarts;
		m->last_exit = p->last_exit;
		r->n++;
	}
	rc = 0;
out:
	skein__jobs__report__free_unpacked(pr, NULL);
	if (rc < 0) job_report_free(r);
	return rc;
}

void job_report_free(job_report *r)
{
	if (!r) return;
	free(r->members);
	memset(r, 0, sizeof *r);
}
