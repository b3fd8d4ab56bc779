/* membership/mbr: SWIM + Lifeguard, as logic with no I/O.
 *
 * What it follows (hashicorp/memberlist, docs/reference.md, Gossip):
 *  - one probe per interval, targets from a shuffled list reshuffled at each
 *    wrap, new members inserted at a random place;
 *  - no ack within probe_timeout: k indirect probes through helpers that
 *    answer with a nack at 80% of the timeout when the target is silent, and
 *    a TCP ping (a stream output) in parallel;
 *  - a failed probe raises a suspicion; the suspicion timer starts at max and
 *    shrinks towards min with independent confirmations (log-scaled), both
 *    scaled with log10 N;
 *  - Lifeguard's local health: +1 per missed nack, failed probe without
 *    helpers, or refutation of ourselves; -1 per acked probe; the probe
 *    interval is multiplied by (health + 1), capped;
 *  - buddy system: a ping to a suspect carries the suspicion, so it refutes
 *    at once;
 *  - every accepted change is queued once (newer replaces older) and
 *    piggybacked on pings, acks and gossip, fewest-sent first, up to
 *    retransmit_mult x ceil(log10(N+1)) times;
 *  - push-pull of the full state over a stream, interval scaled past 32 nodes;
 *  - a graceful leave is a Dead message sent by the node itself: status left.
 * Where it differs:
 *  - (generation, incarnation) orders updates, as tarantool SWIM does: the
 *    generation is persisted by the caller, so a restarted node is always
 *    newer than its old self and never has to out-count its old incarnation;
 *  - serf's reconnect: every reconnect_interval one failed member gets a
 *    push-pull, so partitions heal without an operator;
 *  - failed and left members are kept (reap_ms) rather than forgotten at
 *    gossip_to_dead_ms, so the reconnect has someone to try and a left node
 *    is not resurrected by stale gossip;
 *  - a stall of the caller (SIGSTOP, a long GC-like pause) is seen as a
 *    jump of the clock: the suspicion timers are pushed back by the gap and
 *    the probe in flight is dropped without blame, so a node waking up reads
 *    its backlog before it accuses anyone (the "paused process wakes and
 *    accuses everyone" complaint).
 * All output goes to queues (mbr_pop_out, mbr_pop_event); nothing calls back
 * into the caller while a packet is being handled. */
#include "common/sk_text.h"
#include "membership/mbr_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_rng.h"
#include "proto/wire_frame.h"

enum {
	/* Events and outputs the caller has not drained after this many are
	 * dropped and counted: a caller that stops draining must not make the
	 * logic grow without bound. */
	MBR_QUEUE_CAP = 1 << 20,
	/* Relays (indirect probes we run for others) in flight at once. */
	MBR_RELAY_CAP = 1024,
};

typedef struct {
	uint32_t seq;        /* of our ping to the target */
	uint32_t orig_seq;   /* of the requester's probe */
	mbr_addr orig;
	bool nack;
	bool nacked;
	uint64_t nack_at, expire_at;
} relay;

typedef struct {
	bool active;
	bool acked;
	bool indirect_sent;
	uint32_t seq;
	uint32_t expected_nacks, nacks;
	uint64_t timeout_at, deadline;
	char target[MBR_NAME_MAX + 1];
} probe;

struct mbr {
	mbr_config cfg;
	sk_rng rng;
	mbr_member *self;
	mbr_table table;
	mbr_member **plist;      /* every member but us, in probe order */
	size_t plen, pcap, pidx;
	mbr_bcq bcq;
	size_t nalive;           /* alive + suspect, ourselves included */

	probe pr;
	relay *relays;
	size_t nrelays;
	mbr_member **suspects;   /* members with a running suspicion timer */
	size_t nsuspects, csuspects;

	uint32_t seq;
	uint32_t health;
	bool leaving;
	uint64_t last_now;
	uint64_t next_probe, next_gossip, next_pushpull, next_reconnect;

	mbr_out *outs;
	size_t out_head, out_len, out_cap;
	mbr_event *evs;
	size_t ev_head, ev_len, ev_cap;
	mbr_stats stats;
};

/* ---------------------------------------------------------------- helpers */

static int vcmp(uint64_t g1, uint32_t i1, uint64_t g2, uint32_t i2)
{
	if (g1 != g2) return g1 < g2 ? -1 : 1;
	if (i1 != i2) return i1 < i2 ? -1 : 1;
	return 0;
}

static uint64_t log10_ceil(size_t n)
{
	uint64_t d = 0;
	for (size_t v = 1; v < n; v *= 10) d++;
	return d;
}

static uint32_t retransmit_limit(const mbr_t *m)
{
	uint64_t l = m->cfg.retransmit_mult * log10_ceil(m->nalive + 1);
	if (l < 1) l = 1;
	return l > MBR_MAX_TX ? MBR_MAX_TX : (uint32_t)l;
}

void mbr_suspicion_bounds(const mbr_t *m, uint64_t *min_ms, uint64_t *max_ms)
{
	double n = (double)m->nalive;
	double scale = n > 1 ? log10(n) : 1;
	if (scale < 1) scale = 1;
	uint64_t min = (uint64_t)(m->cfg.suspicion_mult * scale * m->cfg.probe_interval_ms);
	*min_ms = min;
	*max_ms = min * m->cfg.suspicion_max_mult;
}

static uint64_t scaled_interval(const mbr_t *m)
{
	return (uint64_t)m->cfg.probe_interval_ms * (m->health + 1);
}

static uint64_t pushpull_interval(const mbr_t *m)
{
	/* memberlist pushPullScale: unscaled to 32 nodes, then
	 * x (ceil(log2 N - 5) + 1). */
	uint64_t iv = m->cfg.pushpull_interval_ms;
	if (m->nalive <= 32) return iv;
	double mult = ceil(log2((double)m->nalive) - 5) + 1;
	return (uint64_t)(iv * mult);
}

static void health_delta(mbr_t *m, int d)
{
	int64_t h = (int64_t)m->health + d;
	if (h < 0) h = 0;
	if (h > (int64_t)m->cfg.awareness_max - 1) h = m->cfg.awareness_max - 1;
	m->health = (uint32_t)h;
}

/* ---------------------------------------------------------------- outputs */

/* The output and event queues: arrays with a moving head.  fifo_room makes
 * space for one more element at the tail; fifo_popped frees an array that
 * has just been drained, so a burst (a join brings one event per member)
 * does not stay allocated per node (the simulator holds 10,000 nodes). */
static bool fifo_room(void **v, size_t elem, size_t *head, size_t len, size_t *cap)
{
	if (*head + len < *cap) return true;
	if (*head) {
		memmove(*v, (char *)*v + *head * elem, len * elem);
		*head = 0;
	}
	if (len < *cap) return true;
	size_t ncap = *cap ? *cap * 2 : 16;
	void *n = realloc(*v, ncap * elem);
	if (!n) return false;
	*v = n;
	*cap = ncap;
	return true;
}

static void fifo_popped(void **v, size_t *head, size_t len, size_t *cap)
{
	if (len) return;
	*head = 0;
	if (*cap > 64) {
		free(*v);
		*v = NULL;
		*cap = 0;
	}
}

static void push_out(mbr_t *m, const mbr_addr *to, bool stream, uint8_t *data, size_t len)
{
	if (m->out_len >= MBR_QUEUE_CAP ||
	    !fifo_room((void **)&m->outs, sizeof *m->outs, &m->out_head, m->out_len, &m->out_cap)) {
		m->stats.queue_overflow++;
		free(data);
		return;
	}
	mbr_out *o = &m->outs[m->out_head + m->out_len++];
	o->to = *to;
	o->stream = stream;
	o->data = data;
	o->len = len;
	if (stream) m->stats.stream_sent++;
	else m->stats.udp_sent++;
	m->stats.bytes_sent += len;
}

int mbr_pop_out(mbr_t *m, mbr_out *out)
{
	if (!m->out_len) return 0;
	*out = m->outs[m->out_head++];
	m->out_len--;
	fifo_popped((void **)&m->outs, &m->out_head, m->out_len, &m->out_cap);
	return 1;
}

static void emit(mbr_t *m, uint64_t now, mbr_event_type type, const mbr_member *mem,
		 const char *reason)
{
	if (m->ev_len >= MBR_QUEUE_CAP ||
	    !fifo_room((void **)&m->evs, sizeof *m->evs, &m->ev_head, m->ev_len, &m->ev_cap)) {
		m->stats.queue_overflow++;
		return;
	}
	mbr_event *e = &m->evs[m->ev_head + m->ev_len++];
	e->type = type;
	e->status = (mbr_status)mem->status;
	snprintf(e->name, sizeof e->name, "%s", mem->name);
	e->addr = mem->addr;
	e->generation = mem->gen;
	e->incarnation = mem->inc;
	e->at_ms = now;
	snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
}

int mbr_pop_event(mbr_t *m, mbr_event *ev)
{
	if (!m->ev_len) return 0;
	*ev = m->evs[m->ev_head++];
	m->ev_len--;
	fifo_popped((void **)&m->evs, &m->ev_head, m->ev_len, &m->ev_cap);
	return 1;
}

/* Sends one message; UDP packets carry queued updates in the space left
 * (memberlist piggybacks on every UDP message).  `first` (may be NULL) is an
 * extra blob put right after the message: the buddy-system suspicion. */
static void send_msg(mbr_t *m, const mbr_addr *to, bool stream, const mbr_msg *msg,
		     const uint8_t *first, size_t first_len, const mbr_member *skip)
{
	uint8_t *blob;
	size_t len;
	if (mbr_codec_encode_msg(msg, &blob, &len) < 0) return;
	mbr_pkt pkt;
	size_t budget = stream ? WIRE_HDR_LEN + WIRE_STREAM_MAX : m->cfg.udp_budget;
	if (mbr_pkt_init(&pkt, stream ? WIRE_HDR_LEN + mbr_codec_blob_cost(len) : budget) < 0 ||
	    mbr_pkt_add(&pkt, blob, len) < 0 || pkt.len > budget) {
		free(blob);
		mbr_pkt_free(&pkt);
		return;
	}
	free(blob);
	if (first && pkt.len + mbr_codec_blob_cost(first_len) <= budget)
		mbr_pkt_add(&pkt, first, first_len);
	if (!stream) mbr_bcq_fill(&m->bcq, &pkt, budget, retransmit_limit(m), skip);
	mbr_pkt_finish(&pkt, stream ? WIRE_F_STREAM : 0);
	push_out(m, to, stream, pkt.buf, pkt.len);
}

/* ---------------------------------------------------------------- broadcasts */

static void queue_update(mbr_t *m, mbr_member *mem, mbr_msg_type type, const char *from)
{
	mbr_msg msg = { .type = type, .name = mem->name, .from = from, .addr = mem->addr,
			.gen = mem->gen, .inc = mem->inc, .meta = mem->meta,
			.meta_len = mem->meta_len };
	uint8_t *blob;
	size_t len;
	if (mbr_codec_encode_msg(&msg, &blob, &len) < 0) return;
	mbr_bcq_push(&m->bcq, mem, blob, len);
}

/* ---------------------------------------------------------------- members */

static void suspects_remove(mbr_t *m, mbr_member *mem)
{
	if (!mem->susp) return;
	free(mem->susp);
	mem->susp = NULL;
	for (size_t i = 0; i < m->nsuspects; i++) {
		if (m->suspects[i] == mem) {
			m->suspects[i] = m->suspects[--m->nsuspects];
			return;
		}
	}
}

static void set_status(mbr_t *m, mbr_member *mem, mbr_status st, uint64_t now)
{
	bool was_live = mem->status == MBR_ALIVE || mem->status == MBR_SUSPECT;
	bool is_live = st == MBR_ALIVE || st == MBR_SUSPECT;
	if (was_live && !is_live) m->nalive--;
	if (!was_live && is_live) m->nalive++;
	if (st != MBR_SUSPECT) suspects_remove(m, mem);
	mem->status = (uint8_t)st;
	mem->since_ms = now;
}

static int set_meta(mbr_member *mem, const uint8_t *meta, size_t len)
{
	if (len == mem->meta_len && (len == 0 || memcmp(mem->meta, meta, len) == 0)) return 0;
	uint8_t *n = NULL;
	if (len) {
		n = malloc(len);
		if (!n) return 0;
		memcpy(n, meta, len);
	}
	free(mem->meta);
	mem->meta = n;
	mem->meta_len = (uint16_t)len;
	return 1;
}

static mbr_member *member_new(const char *name)
{
	size_t n = strlen(name);
	mbr_member *mem = calloc(1, sizeof *mem + n + 1);
	if (mem) memcpy(mem->name, name, n + 1);
	return mem;
}

static void member_free(mbr_member *mem)
{
	free(mem->meta);
	free(mem->susp);
	free(mem->bc_blob);
	free(mem);
}

static mbr_member *member_add(mbr_t *m, const char *name, const mbr_addr *addr, uint64_t now)
{
	if (m->plen == m->pcap) {
		size_t ncap = m->pcap ? m->pcap * 2 : 16;
		mbr_member **n = realloc(m->plist, ncap * sizeof *n);
		if (!n) return NULL;
		m->plist = n;
		m->pcap = ncap;
	}
	mbr_member *mem = member_new(name);
	if (!mem) return NULL;
	if (mbr_table_put(&m->table, mem) < 0) { free(mem); return NULL; }
	mem->addr = *addr;
	mem->status = MBR_DEAD; /* set_status below counts it in */
	mem->since_ms = now;
	/* Insert at a random place of the probe list (memberlist: so that a new
	 * member is not probed by everyone at once). */
	size_t j = m->plen ? (size_t)sk_rng_below(&m->rng, m->plen + 1) : 0;
	if (j < m->plen) {
		m->plist[m->plen] = m->plist[j];
		m->plist[m->plen]->plist_pos = (uint32_t)m->plen;
	}
	m->plist[j] = mem;
	mem->plist_pos = (uint32_t)j;
	m->plen++;
	return mem;
}

/* Shuffles the probe list and forgets members failed or left long ago. */
static void plist_wrap(mbr_t *m, uint64_t now)
{
	size_t w = 0;
	for (size_t i = 0; i < m->plen; i++) {
		mbr_member *mem = m->plist[i];
		if ((mem->status == MBR_DEAD || mem->status == MBR_LEFT) &&
		    now - mem->since_ms >= m->cfg.reap_ms) {
			emit(m, now, MBR_EV_REAP, mem, NULL);
			mbr_bcq_remove(&m->bcq, mem);
			mbr_table_del(&m->table, mem->name);
			member_free(mem);
			continue;
		}
		m->plist[w++] = mem;
	}
	m->plen = w;
	for (size_t i = m->plen; i > 1; i--) {
		size_t j = (size_t)sk_rng_below(&m->rng, i);
		mbr_member *t = m->plist[i - 1];
		m->plist[i - 1] = m->plist[j];
		m->plist[j] = t;
	}
	for (size_t i = 0; i < m->plen; i++) m->plist[i]->plist_pos = (uint32_t)i;
	m->pidx = 0;
}

/* Picks up to want distinct random members that pass ok(); returns how many. */
static size_t pick_random(mbr_t *m, mbr_member **out, size_t want, uint64_t now,
			  bool (*ok)(const mbr_t *, const mbr_member *, uint64_t, const void *),
			  const void *arg)
{
	size_t got = 0;
	if (!m->plen) return 0;
	for (size_t tries = 0; tries < 3 * m->plen + 8 && got < want; tries++) {
		mbr_member *c = m->plist[sk_rng_below(&m->rng, m->plen)];
		if (!ok(m, c, now, arg)) continue;
		bool dup = false;
		for (size_t i = 0; i < got; i++) dup |= out[i] == c;
		if (!dup) out[got++] = c;
	}
	return got;
}

static bool is_alive_not(const mbr_t *m, const mbr_member *c, uint64_t now, const void *arg)
{
	(void)m; (void)now;
	return c->status == MBR_ALIVE && c != (const mbr_member *)arg;
}

static bool is_gossip_target(const mbr_t *m, const mbr_member *c, uint64_t now, const void *arg)
{
	(void)arg;
	if (c->status == MBR_ALIVE || c->status == MBR_SUSPECT) return true;
	/* memberlist gossips to the dead for a while, so a node wrongly
	 * declared dead hears it and refutes. */
	return c->status == MBR_DEAD && now - c->since_ms < m->cfg.gossip_to_dead_ms;
}

static bool is_reconnect_target(const mbr_t *m, const mbr_member *c, uint64_t now, const void *arg)
{
	(void)arg;
	return c->status == MBR_DEAD && now - c->since_ms < m->cfg.reconnect_timeout_ms;
}

/* ---------------------------------------------------------------- state changes */

static void refute(mbr_t *m, uint32_t accused_inc, uint64_t now)
{
	mbr_member *s = m->self;
	if (accused_inc >= s->inc) s->inc = accused_inc + 1;
	else s->inc++;
	m->stats.refutes++;
	health_delta(m, +1);
	queue_update(m, s, MBR_MSG_ALIVE, NULL);
	(void)now;
}

/* An accusation older than our current incarnation still reaches us: some
 * node missed our refutation (gossip sends each update a bounded number of
 * times).  Send it again; it rides our next ack or gossip, often straight
 * back to the accuser, whose buddy-system ping brought the stale news. */
static void stale_accusation(mbr_t *m)
{
	if (!m->self->bc_blob) queue_update(m, m->self, MBR_MSG_ALIVE, NULL);
}

/* A suspicion or a death notice about ourselves: refute it when it is about
 * our current incarnation, re-send the refutation when it is older. */
static void accused(mbr_t *m, uint64_t gen, uint32_t inc, uint64_t now)
{
	if (m->leaving) return;
	if (vcmp(gen, inc, m->self->gen, m->self->inc) < 0) stale_accusation(m);
	else refute(m, inc, now);
}

/* The member a suspicion or death notice is about; NULL when it is about
 * us (handled here: refuted) or about a member we do not know (ignored,
 * as memberlist does). */
static mbr_member *accusation_target(mbr_t *m, const char *name, uint64_t gen, uint32_t inc,
				     uint64_t now)
{
	if (strcmp(name, m->self->name) == 0) {
		accused(m, gen, inc, now);
		return NULL;
	}
	return mbr_table_get(&m->table, name);
}

static void handle_alive(mbr_t *m, const char *name, const mbr_addr *addr, uint64_t gen,
			 uint32_t inc, const uint8_t *meta, size_t meta_len, uint64_t now)
{
	char a1[64], a2[64];
	if (strcmp(name, m->self->name) == 0) {
		if (!mbr_addr_eq(addr, &m->self->addr)) {
			char why[MBR_REASON_MAX];
			snprintf(why, sizeof why, "another node at %s claims our name %s",
				 mbr_addr_format(addr, a1, sizeof a1), name);
			m->stats.drop_conflict++;
			emit(m, now, MBR_EV_CONFLICT, m->self, why);
			return;
		}
		/* Someone holds a newer view of us than we do (our own old
		 * refutation echoing after a restart with the same generation):
		 * go past it. */
		if (!m->leaving && vcmp(gen, inc, m->self->gen, m->self->inc) > 0 && gen == m->self->gen)
			refute(m, inc, now);
		return;
	}
	mbr_member *mem = mbr_table_get(&m->table, name);
	if (!mem) {
		mem = member_add(m, name, addr, now);
		if (!mem) return;
		mem->gen = gen;
		mem->inc = inc;
		set_meta(mem, meta, meta_len);
		set_status(m, mem, MBR_ALIVE, now);
		emit(m, now, MBR_EV_JOIN, mem, NULL);
		queue_update(m, mem, MBR_MSG_ALIVE, NULL);
		return;
	}
	if (vcmp(gen, inc, mem->gen, mem->inc) <= 0) return;
	if (!mbr_addr_eq(addr, &mem->addr)) {
		bool reclaim = mem->status == MBR_LEFT ||
			       (mem->status == MBR_DEAD && now - mem->since_ms >= m->cfg.dead_reclaim_ms);
		if (!reclaim) {
			char why[MBR_REASON_MAX];
			snprintf(why, sizeof why, "name %s claimed from %s but held by %s member at %s",
				 name, mbr_addr_format(addr, a1, sizeof a1),
				 mbr_status_str((mbr_status)mem->status),
				 mbr_addr_format(&mem->addr, a2, sizeof a2));
			m->stats.drop_conflict++;
			emit(m, now, MBR_EV_CONFLICT, mem, why);
			return;
		}
		mem->addr = *addr;
	}
	mbr_status prev = (mbr_status)mem->status;
	bool newgen = gen != mem->gen;
	mem->gen = gen;
	mem->inc = inc;
	int meta_changed = set_meta(mem, meta, meta_len);
	set_status(m, mem, MBR_ALIVE, now);
	if (prev != MBR_ALIVE) emit(m, now, MBR_EV_ALIVE, mem, NULL);
	else if (meta_changed || newgen) emit(m, now, MBR_EV_UPDATE, mem, NULL);
	queue_update(m, mem, MBR_MSG_ALIVE, NULL);
}

static uint64_t suspicion_deadline(const mbr_suspicion *s)
{
	uint64_t t;
	if (s->k < 1 || s->n >= s->k) {
		t = s->n >= s->k && s->k >= 1 ? s->min_ms : (s->k < 1 ? s->min_ms : s->max_ms);
	} else {
		double frac = log((double)s->n + 1.0) / log((double)s->k + 1.0);
		double raw = (double)s->max_ms - frac * (double)(s->max_ms - s->min_ms);
		t = raw < (double)s->min_ms ? s->min_ms : (uint64_t)raw;
	}
	return s->start_ms + t;
}

static void handle_suspect(mbr_t *m, const char *name, uint64_t gen, uint32_t inc,
			   const char *from, uint64_t now)
{
	mbr_member *mem = accusation_target(m, name, gen, inc, now);
	if (!mem) return;
	if (vcmp(gen, inc, mem->gen, mem->inc) < 0) return;
	if (mem->status == MBR_SUSPECT && gen == mem->gen && inc == mem->inc) {
		mbr_suspicion *s = mem->susp;
		if (!s) return;
		uint64_t h = mbr_name_hash(from);
		size_t seen = s->n + 1 < 8 ? s->n + 1 : 8;
		for (size_t i = 0; i < seen; i++)
			if (s->seen[i] == h) return;
		if (s->n >= s->k) return;
		s->n++;
		if (s->n < 8) s->seen[s->n] = h;
		/* A new independent confirmation travels on (memberlist does). */
		queue_update(m, mem, MBR_MSG_SUSPECT, from);
		return;
	}
	if (mem->status == MBR_DEAD || mem->status == MBR_LEFT) {
		if (vcmp(gen, inc, mem->gen, mem->inc) <= 0) return;
	}
	/* A suspicion about a newer incarnation (or of an alive member). */
	mem->gen = gen;
	mem->inc = inc;
	mbr_suspicion *s = mem->susp ? mem->susp : calloc(1, sizeof *s);
	if (!s) return;
	memset(s, 0, sizeof *s);
	s->start_ms = now;
	mbr_suspicion_bounds(m, &s->min_ms, &s->max_ms);
	/* memberlist: k = mult - 2, and 0 when too few nodes could confirm. */
	int k = (int)m->cfg.suspicion_mult - 2;
	if ((int)m->nalive - 2 < k) k = 0;
	s->k = k > 0 ? (uint32_t)k : 0;
	s->seen[0] = mbr_name_hash(from);
	bool fresh = mem->susp == NULL;
	set_status(m, mem, MBR_SUSPECT, now);
	mem->susp = s;
	if (fresh) {
		if (m->nsuspects == m->csuspects) {
			size_t ncap = m->csuspects ? m->csuspects * 2 : 16;
			mbr_member **n = realloc(m->suspects, ncap * sizeof *n);
			if (!n) { free(s); mem->susp = NULL; return; }
			m->suspects = n;
			m->csuspects = ncap;
		}
		m->suspects[m->nsuspects++] = mem;
	}
	emit(m, now, MBR_EV_SUSPECT, mem, NULL);
	queue_update(m, mem, MBR_MSG_SUSPECT, from);
}

static void handle_dead(mbr_t *m, const char *name, uint64_t gen, uint32_t inc,
			const char *from, uint64_t now)
{
	mbr_member *mem = accusation_target(m, name, gen, inc, now);
	if (!mem) return;
	int c = vcmp(gen, inc, mem->gen, mem->inc);
	if (c < 0) return;
	bool left = strcmp(from, name) == 0;
	if (mem->status == MBR_LEFT) return;
	if (mem->status == MBR_DEAD && !(left && c >= 0)) return;
	mem->gen = gen;
	mem->inc = inc;
	set_status(m, mem, left ? MBR_LEFT : MBR_DEAD, now);
	emit(m, now, left ? MBR_EV_LEFT : MBR_EV_FAILED, mem, NULL);
	queue_update(m, mem, MBR_MSG_DEAD, from);
}

/* ---------------------------------------------------------------- push-pull */

static void send_pushpull(mbr_t *m, const mbr_addr *to, bool join, bool reply)
{
	size_t n = 1 + m->plen;
	mbr_wire_state *st = malloc(n * sizeof *st);
	if (!st) return;
	st[0] = (mbr_wire_state){ m->self->name, m->self->addr, m->self->gen, m->self->inc,
				  m->leaving ? MBR_LEFT : MBR_ALIVE, m->self->meta, m->self->meta_len };
	for (size_t i = 0; i < m->plen; i++) {
		const mbr_member *mem = m->plist[i];
		st[i + 1] = (mbr_wire_state){ mem->name, mem->addr, mem->gen, mem->inc,
					      (mbr_status)mem->status, mem->meta, mem->meta_len };
	}
	mbr_msg msg = { .type = MBR_MSG_PUSHPULL, .join = join, .reply = reply,
			.from = m->self->name, .src_addr = m->self->addr, .states = st, .nstates = n };
	send_msg(m, to, true, &msg, NULL, 0, NULL);
	free(st);
	m->stats.pushpulls++;
}

static void merge_state(mbr_t *m, const mbr_msg *msg, uint64_t now)
{
	for (size_t i = 0; i < msg->nstates; i++) {
		const mbr_wire_state *s = &msg->states[i];
		switch (s->status) {
		case MBR_ALIVE:
			handle_alive(m, s->name, &s->addr, s->gen, s->inc, s->meta, s->meta_len, now);
			break;
		case MBR_SUSPECT:
			/* Learn a member we did not know before suspecting it. */
			if (!mbr_table_get(&m->table, s->name))
				handle_alive(m, s->name, &s->addr, s->gen, s->inc, s->meta, s->meta_len, now);
			handle_suspect(m, s->name, s->gen, s->inc, msg->from, now);
			break;
		case MBR_DEAD:
			/* memberlist: a remote "dead" only makes us suspect, so one
			 * node's stale view cannot kill a member outright. */
			handle_suspect(m, s->name, s->gen, s->inc, msg->from, now);
			break;
		case MBR_LEFT:
			handle_dead(m, s->name, s->gen, s->inc, s->name, now);
			break;
		}
	}
}

/* ---------------------------------------------------------------- probing */

static void send_ping(mbr_t *m, mbr_member *target, uint32_t seq, bool stream)
{
	mbr_msg ping = { .type = MBR_MSG_PING, .seq = seq, .name = target->name,
			 .from = m->self->name, .src_addr = m->self->addr };
	uint8_t *buddy = NULL;
	size_t buddy_len = 0;
	if (target->status == MBR_SUSPECT && !stream) {
		/* Buddy system: tell the suspect it is suspected, first. */
		mbr_msg s = { .type = MBR_MSG_SUSPECT, .name = target->name, .from = m->self->name,
			      .gen = target->gen, .inc = target->inc };
		if (mbr_codec_encode_msg(&s, &buddy, &buddy_len) < 0) buddy = NULL;
	}
	send_msg(m, &target->addr, stream, &ping, buddy, buddy_len, target->status == MBR_SUSPECT ? target : NULL);
	free(buddy);
}

static void probe_start(mbr_t *m, uint64_t now)
{
	mbr_member *target = NULL;
	for (size_t tried = 0; tried <= m->plen; tried++) {
		if (m->pidx >= m->plen) plist_wrap(m, now);
		if (!m->plen) break;
		mbr_member *c = m->plist[m->pidx++];
		if (c->status == MBR_ALIVE || c->status == MBR_SUSPECT) { target = c; break; }
	}
	uint64_t iv = scaled_interval(m);
	m->next_probe = now + iv;
	if (!target) return;
	probe *p = &m->pr;
	memset(p, 0, sizeof *p);
	p->active = true;
	p->seq = ++m->seq;
	p->timeout_at = now + m->cfg.probe_timeout_ms;
	p->deadline = now + iv;
	snprintf(p->target, sizeof p->target, "%s", target->name);
	m->stats.probes++;
	send_ping(m, target, p->seq, false);
}

static void probe_indirect(mbr_t *m, uint64_t now)
{
	probe *p = &m->pr;
	p->indirect_sent = true;
	mbr_member *target = mbr_table_get(&m->table, p->target);
	if (!target || !(target->status == MBR_ALIVE || target->status == MBR_SUSPECT)) {
		p->active = false;
		return;
	}
	mbr_member *helpers[16];
	size_t want = m->cfg.indirect_checks < 16 ? m->cfg.indirect_checks : 16;
	size_t n = pick_random(m, helpers, want, now, is_alive_not, target);
	mbr_msg req = { .type = MBR_MSG_INDIRECT, .seq = p->seq, .name = target->name,
			.addr = target->addr, .nack = true, .from = m->self->name,
			.src_addr = m->self->addr };
	for (size_t i = 0; i < n; i++) send_msg(m, &helpers[i]->addr, false, &req, NULL, 0, NULL);
	p->expected_nacks = (uint32_t)n;
	m->stats.indirect_probes += n;
	if (m->cfg.tcp_fallback) {
		send_ping(m, target, p->seq, true);
		m->stats.tcp_pings++;
	}
}

static void probe_finish(mbr_t *m, uint64_t now)
{
	probe *p = &m->pr;
	p->active = false;
	if (p->acked) return;
	m->stats.probe_fails++;
	/* Lifeguard: a missing nack means we, not the target, may be the
	 * problem; with no helpers to ask, the failed probe itself counts. */
	if (p->expected_nacks) {
		uint32_t missed = p->expected_nacks > p->nacks ? p->expected_nacks - p->nacks : 0;
		m->stats.missed_nacks += missed;
		health_delta(m, (int)missed);
	} else {
		health_delta(m, +1);
	}
	mbr_member *target = mbr_table_get(&m->table, p->target);
	if (!target || (target->status != MBR_ALIVE && target->status != MBR_SUSPECT)) return;
	/* Already suspected by someone else: our own failed probe is an
	 * independent confirmation (memberlist's suspectNode does the same). */
	m->stats.suspects_raised++;
	handle_suspect(m, target->name, target->gen, target->inc, m->self->name, now);
}

static void handle_ack(mbr_t *m, uint32_t seq, uint64_t now)
{
	probe *p = &m->pr;
	if (p->active && !p->acked && seq == p->seq) {
		p->acked = true;
		p->active = false;
		health_delta(m, -1);
		return;
	}
	for (size_t i = 0; i < m->nrelays; i++) {
		relay *r = &m->relays[i];
		if (r->seq != seq) continue;
		mbr_msg ack = { .type = MBR_MSG_ACK, .seq = r->orig_seq };
		send_msg(m, &r->orig, false, &ack, NULL, 0, NULL);
		m->relays[i] = m->relays[--m->nrelays];
		return;
	}
	(void)now;
	m->stats.drop_unknown_seq++;
}

static void handle_nack(mbr_t *m, uint32_t seq)
{
	probe *p = &m->pr;
	if (p->active && seq == p->seq) {
		p->nacks++;
		m->stats.nacks_recv++;
		return;
	}
	m->stats.drop_unknown_seq++;
}

static void handle_indirect(mbr_t *m, const mbr_msg *msg, uint64_t now)
{
	if (m->nrelays >= MBR_RELAY_CAP) return;
	if (!m->relays) {
		m->relays = calloc(MBR_RELAY_CAP, sizeof *m->relays);
		if (!m->relays) return;
	}
	relay *r = &m->relays[m->nrelays++];
	r->seq = ++m->seq;
	r->orig_seq = msg->seq;
	r->orig = msg->src_addr;
	r->nack = msg->nack;
	r->nacked = false;
	/* Lifeguard: nack at 80% of the probe timeout, before the requester
	 * gives up on its indirect round. */
	r->nack_at = now + m->cfg.probe_timeout_ms * 8 / 10;
	r->expire_at = now + m->cfg.probe_timeout_ms;
	mbr_msg ping = { .type = MBR_MSG_PING, .seq = r->seq, .name = msg->name,
			 .from = m->self->name, .src_addr = m->self->addr };
	send_msg(m, &msg->addr, false, &ping, NULL, 0, NULL);
}

static void relays_tick(mbr_t *m, uint64_t now)
{
	for (size_t i = 0; i < m->nrelays;) {
		relay *r = &m->relays[i];
		if (r->nack && !r->nacked && now >= r->nack_at) {
			mbr_msg nack = { .type = MBR_MSG_NACK, .seq = r->orig_seq };
			send_msg(m, &r->orig, false, &nack, NULL, 0, NULL);
			r->nacked = true;
			m->stats.nacks_sent++;
		}
		if (now >= r->expire_at) {
			m->relays[i] = m->relays[--m->nrelays];
			continue;
		}
		i++;
	}
}

/* ---------------------------------------------------------------- timers */

/* A caller that stalled (SIGSTOP, swap) shows up as a jump of the clock. */
static void observe_time(mbr_t *m, uint64_t now)
{
	uint64_t thresh = 10ull * m->cfg.gossip_interval_ms;
	if (thresh < 2ull * m->cfg.probe_interval_ms) thresh = 2ull * m->cfg.probe_interval_ms;
	if (m->last_now && now > m->last_now + thresh) {
		uint64_t gap = now - m->last_now;
		m->stats.time_jumps++;
		for (size_t i = 0; i < m->nsuspects; i++) m->suspects[i]->susp->start_ms += gap;
		m->pr.active = false;   /* its ack may sit unread in our backlog */
		m->nrelays = 0;
		m->next_probe = now + m->cfg.probe_interval_ms;
	}
	if (now > m->last_now) m->last_now = now;
}

static void gossip_tick(mbr_t *m, uint64_t now)
{
	if (!m->bcq.len) return;
	mbr_member *t[16];
	size_t want = m->cfg.gossip_nodes < 16 ? m->cfg.gossip_nodes : 16;
	size_t n = pick_random(m, t, want, now, is_gossip_target, NULL);
	for (size_t i = 0; i < n && m->bcq.len; i++) {
		mbr_pkt pkt;
		if (mbr_pkt_init(&pkt, m->cfg.udp_budget) < 0) return;
		if (mbr_bcq_fill(&m->bcq, &pkt, m->cfg.udp_budget, retransmit_limit(m), NULL) == 0) {
			mbr_pkt_free(&pkt);
			return;
		}
		mbr_pkt_finish(&pkt, 0);
		push_out(m, &t[i]->addr, false, pkt.buf, pkt.len);
	}
}

void mbr_tick(mbr_t *m, uint64_t now)
{
	observe_time(m, now);
	relays_tick(m, now);

	for (size_t i = 0; i < m->nsuspects;) {
		mbr_member *mem = m->suspects[i];
		if (now >= suspicion_deadline(mem->susp)) {
			m->stats.dead_declared++;
			handle_dead(m, mem->name, mem->gen, mem->inc, m->self->name, now);
			continue; /* handle_dead removed it from the list */
		}
		i++;
	}

	if (!m->leaving) {
		if (m->pr.active && !m->pr.acked && !m->pr.indirect_sent && now >= m->pr.timeout_at)
			probe_indirect(m, now);
		if (m->pr.active && now >= m->pr.deadline) probe_finish(m, now);
		if (!m->pr.active && now >= m->next_probe) probe_start(m, now);

		if (m->cfg.pushpull_interval_ms && now >= m->next_pushpull) {
			mbr_member *t;
			if (pick_random(m, &t, 1, now, is_alive_not, NULL))
				send_pushpull(m, &t->addr, false, false);
			m->next_pushpull = now + pushpull_interval(m);
		}
		if (m->cfg.reconnect_interval_ms && now >= m->next_reconnect) {
			/* serf: try with probability failed / alive, so the cluster
			 * as a whole spends about one attempt per failed member per
			 * interval, and a half-cut cluster tries from every node. */
			size_t nfailed = 0;
			for (size_t i = 0; i < m->plen; i++)
				nfailed += is_reconnect_target(m, m->plist[i], now, NULL);
			double prob = m->nalive ? (double)nfailed / (double)m->nalive : 1.0;
			mbr_member *t;
			if (nfailed && sk_rng_unit(&m->rng) < prob &&
			    pick_random(m, &t, 1, now, is_reconnect_target, NULL)) {
				m->stats.reconnects++;
				send_pushpull(m, &t->addr, false, false);
			}
			m->next_reconnect = now + m->cfg.reconnect_interval_ms;
		}
	}
	if (now >= m->next_gossip) {
		gossip_tick(m, now);
		m->next_gossip = now + m->cfg.gossip_interval_ms;
	}
}

uint64_t mbr_next_deadline(const mbr_t *m)
{
	uint64_t d = m->next_gossip;
#define MIN(x) do { if ((x) < d) d = (x); } while (0)
	if (!m->leaving) {
		if (m->pr.active) {
			if (!m->pr.acked && !m->pr.indirect_sent) MIN(m->pr.timeout_at);
			MIN(m->pr.deadline);
		} else {
			MIN(m->next_probe);
		}
		if (m->cfg.pushpull_interval_ms) MIN(m->next_pushpull);
		if (m->cfg.reconnect_interval_ms) MIN(m->next_reconnect);
	}
	for (size_t i = 0; i < m->nrelays; i++) {
		if (m->relays[i].nack && !m->relays[i].nacked) MIN(m->relays[i].nack_at);
		MIN(m->relays[i].expire_at);
	}
	for (size_t i = 0; i < m->nsuspects; i++) MIN(suspicion_deadline(m->suspects[i]->susp));
#undef MIN
	return d;
}

/* ---------------------------------------------------------------- input */

void mbr_recv(mbr_t *m, uint64_t now, const mbr_addr *from, const uint8_t *buf, size_t len,
	      bool stream)
{
	(void)from;
	observe_time(m, now);
	if (stream) m->stats.stream_recv++;
	else m->stats.udp_recv++;
	m->stats.bytes_recv += len;

	mbr_decoded d;
	wire_err e = mbr_codec_decode(buf, len, stream ? WIRE_STREAM_MAX : 65507, &d);
	if (e != WIRE_OK) {
		m->stats.drop[e < WIRE_ERR__COUNT ? e : WIRE_ERR_INVALID]++;
		return;
	}
	for (size_t i = 0; i < d.nmsgs; i++) {
		const mbr_msg *msg = &d.msgs[i];
		switch (msg->type) {
		case MBR_MSG_PING:
			if (strcmp(msg->name, m->self->name) != 0) {
				m->stats.drop_not_for_us++;
				break;
			}
			{
				mbr_msg ack = { .type = MBR_MSG_ACK, .seq = msg->seq };
				send_msg(m, &msg->src_addr, stream, &ack, NULL, 0, NULL);
			}
			break;
		case MBR_MSG_INDIRECT:
			handle_indirect(m, msg, now);
			break;
		case MBR_MSG_ACK:
			handle_ack(m, msg->seq, now);
			break;
		case MBR_MSG_NACK:
			handle_nack(m, msg->seq);
			break;
		case MBR_MSG_ALIVE:
			handle_alive(m, msg->name, &msg->addr, msg->gen, msg->inc, msg->meta,
				     msg->meta_len, now);
			break;
		case MBR_MSG_SUSPECT:
			handle_suspect(m, msg->name, msg->gen, msg->inc, msg->from, now);
			break;
		case MBR_MSG_DEAD:
			handle_dead(m, msg->name, msg->gen, msg->inc, msg->from, now);
			break;
		case MBR_MSG_PUSHPULL:
			if (!stream) {
				m->stats.drop[WIRE_ERR_INVALID]++;
				break;
			}
			merge_state(m, msg, now);
			if (!msg->reply) send_pushpull(m, &msg->src_addr, false, true);
			break;
		}
	}
	mbr_codec_free(&d);
}

/* ---------------------------------------------------------------- lifecycle */

mbr_t *mbr_new(const mbr_config *cfg, const mbr_self *self, uint64_t now, char *err, size_t errlen)
{
	if (mbr_config_check(cfg, err, errlen) < 0) return NULL;
	if (!sk_name_ok(self->name, MBR_NAME_MAX)) {
		snprintf(err, errlen, "node name must be 1 to %d printable bytes", MBR_NAME_MAX);
		return NULL;
	}
	if (self->addr.len != 4 && self->addr.len != 16) {
		snprintf(err, errlen, "node address is not set");
		return NULL;
	}
	if (self->meta_len > MBR_META_MAX) {
		snprintf(err, errlen, "metadata is %zu bytes, more than the %d allowed",
			 self->meta_len, MBR_META_MAX);
		return NULL;
	}
	mbr_t *m = calloc(1, sizeof *m);
	if (!m) goto oom;
	m->cfg = *cfg;
	sk_rng_seed(&m->rng, self->seed);
	if (mbr_table_init(&m->table) < 0) goto oom;
	m->self = member_new(self->name);
	if (!m->self) goto oom;
	m->self->addr = self->addr;
	m->self->gen = self->generation;
	m->self->status = MBR_ALIVE;
	m->self->since_ms = now;
	if (self->meta_len) set_meta(m->self, self->meta, self->meta_len);
	m->nalive = 1;
	m->last_now = now;
	/* Spread the first timers over one period, so that nodes started
	 * together do not probe in lockstep. */
	m->next_probe = now + sk_rng_below(&m->rng, cfg->probe_interval_ms);
	m->next_gossip = now + sk_rng_below(&m->rng, cfg->gossip_interval_ms);
	m->next_pushpull = now + 1 + sk_rng_below(&m->rng, cfg->pushpull_interval_ms + 1);
	m->next_reconnect = now + 1 + sk_rng_below(&m->rng, cfg->reconnect_interval_ms + 1);
	queue_update(m, m->self, MBR_MSG_ALIVE, NULL);
	return m;
oom:
	snprintf(err, errlen, "out of memory");
	mbr_destroy(&m);
	return NULL;
}

void mbr_destroy(mbr_t **mp)
{
	mbr_t *m = mp ? *mp : NULL;
	if (!m) return;
	for (size_t i = 0; i < m->plen; i++) member_free(m->plist[i]);
	if (m->self) member_free(m->self);
	free(m->plist);
	mbr_table_free(&m->table);
	free(m->relays);
	free(m->suspects);
	for (size_t i = 0; i < m->out_len; i++) free(m->outs[m->out_head + i].data);
	free(m->outs);
	free(m->evs);
	free(m);
	*mp = NULL;
}

int mbr_join(mbr_t *m, uint64_t now, const mbr_addr *seed)
{
	observe_time(m, now);
	if (seed->len != 4 && seed->len != 16) return -1;
	send_pushpull(m, seed, true, false);
	return 0;
}

void mbr_leave(mbr_t *m, uint64_t now)
{
	if (m->leaving) return;
	m->leaving = true;
	m->pr.active = false;
	m->self->status = MBR_LEFT;
	m->self->since_ms = now;
	queue_update(m, m->self, MBR_MSG_DEAD, m->self->name);
	/* Gossip it now rather than at the next gossip tick. */
	m->next_gossip = now;
}

bool mbr_leave_done(const mbr_t *m)
{
	if (!m->leaving) return false;
	return m->self->bc_blob == NULL || m->nalive <= 1;
}

int mbr_set_meta(mbr_t *m, uint64_t now, const uint8_t *meta, size_t len)
{
	(void)now;
	if (len > MBR_META_MAX) return -1;
	if (!set_meta(m->self, meta, len)) return 0;
	m->self->inc++;
	queue_update(m, m->self, MBR_MSG_ALIVE, NULL);
	return 0;
}

/* ---------------------------------------------------------------- queries */

static void fill_info(const mbr_member *mem, mbr_member_info *o)
{
	o->name = mem->name;
	o->addr = mem->addr;
	o->generation = mem->gen;
	o->incarnation = mem->inc;
	o->status = (mbr_status)mem->status;
	o->status_since_ms = mem->since_ms;
	o->meta = mem->meta;
	o->meta_len = mem->meta_len;
}

size_t mbr_members(const mbr_t *m, mbr_member_info *out, size_t cap)
{
	if (cap > 0) fill_info(m->self, &out[0]);
	for (size_t i = 0; i < m->plen && i + 1 < cap; i++) fill_info(m->plist[i], &out[i + 1]);
	return m->plen + 1;
}

int mbr_lookup(const mbr_t *m, const char *name, mbr_member_info *out)
{
	const mbr_member *mem = strcmp(name, m->self->name) == 0 ? m->self : mbr_table_get(&m->table, name);
	if (!mem) return -1;
	fill_info(mem, out);
	return 0;
}

size_t mbr_count(const mbr_t *m, mbr_status s)
{
	size_t n = m->self->status == s;
	for (size_t i = 0; i < m->plen; i++) n += m->plist[i]->status == s;
	return n;
}

size_t mbr_member_count(const mbr_t *m) { return m->plen + 1; }
uint32_t mbr_health(const mbr_t *m) { return m->health; }
const mbr_config *mbr_get_config(const mbr_t *m) { return &m->cfg; }
const mbr_stats *mbr_get_stats(const mbr_t *m) { return &m->stats; }
