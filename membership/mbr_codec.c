/* membership/mbr_codec: see mbr_codec.h. */
#include "membership/mbr_codec.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_text.h"
#include "proto/gossip.pb-c.h"

typedef Skein__Gossip__Addr PbAddr;

static void addr_to_pb(const mbr_addr *a, PbAddr *pb)
{
	skein__gossip__addr__init(pb);
	pb->ip.data = (uint8_t *)a->ip;
	pb->ip.len = a->len;
	pb->port = a->port;
}

int mbr_codec_encode_msg(const mbr_msg *m, uint8_t **out, size_t *len)
{
	Skein__Gossip__Msg msg = SKEIN__GOSSIP__MSG__INIT;
	Skein__Gossip__Ping ping = SKEIN__GOSSIP__PING__INIT;
	Skein__Gossip__IndirectPing ind = SKEIN__GOSSIP__INDIRECT_PING__INIT;
	Skein__Gossip__Ack ack = SKEIN__GOSSIP__ACK__INIT;
	Skein__Gossip__Nack nack = SKEIN__GOSSIP__NACK__INIT;
	Skein__Gossip__Alive alive = SKEIN__GOSSIP__ALIVE__INIT;
	Skein__Gossip__Suspect sus = SKEIN__GOSSIP__SUSPECT__INIT;
	Skein__Gossip__Dead dead = SKEIN__GOSSIP__DEAD__INIT;
	Skein__Gossip__PushPull pp = SKEIN__GOSSIP__PUSH_PULL__INIT;
	PbAddr a1, a2;
	Skein__Gossip__MemberState *states = NULL, **sptr = NULL;
	PbAddr *saddr = NULL;
	int rc = -1;

	switch (m->type) {
	case MBR_MSG_PING:
		ping.seq = m->seq;
		ping.target = (char *)m->name;
		ping.source = (char *)m->from;
		addr_to_pb(&m->src_addr, &a1);
		ping.source_addr = &a1;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_PING;
		msg.ping = &ping;
		break;
	case MBR_MSG_INDIRECT:
		ind.seq = m->seq;
		ind.target = (char *)m->name;
		addr_to_pb(&m->addr, &a1);
		ind.target_addr = &a1;
		ind.nack = m->nack;
		ind.source = (char *)m->from;
		addr_to_pb(&m->src_addr, &a2);
		ind.source_addr = &a2;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_INDIRECT_PING;
		msg.indirect_ping = &ind;
		break;
	case MBR_MSG_ACK:
		ack.seq = m->seq;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_ACK;
		msg.ack = &ack;
		break;
	case MBR_MSG_NACK:
		nack.seq = m->seq;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_NACK;
		msg.nack = &nack;
		break;
	case MBR_MSG_ALIVE:
		alive.name = (char *)m->name;
		addr_to_pb(&m->addr, &a1);
		alive.addr = &a1;
		alive.generation = m->gen;
		alive.incarnation = m->inc;
		alive.meta.data = (uint8_t *)m->meta;
		alive.meta.len = m->meta_len;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_ALIVE;
		msg.alive = &alive;
		break;
	case MBR_MSG_SUSPECT:
		sus.name = (char *)m->name;
		sus.generation = m->gen;
		sus.incarnation = m->inc;
		sus.from = (char *)m->from;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_SUSPECT;
		msg.suspect = &sus;
		break;
	case MBR_MSG_DEAD:
		dead.name = (char *)m->name;
		dead.generation = m->gen;
		dead.incarnation = m->inc;
		dead.from = (char *)m->from;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_DEAD;
		msg.dead = &dead;
		break;
	case MBR_MSG_PUSHPULL:
		pp.join = m->join;
		pp.reply = m->reply;
		pp.source = (char *)m->from;
		addr_to_pb(&m->src_addr, &a1);
		pp.source_addr = &a1;
		if (m->nstates) {
			states = calloc(m->nstates, sizeof *states);
			sptr = calloc(m->nstates, sizeof *sptr);
			saddr = calloc(m->nstates, sizeof *saddr);
			if (!states || !sptr || !saddr) goto out;
			for (size_t i = 0; i < m->nstates; i++) {
				const mbr_wire_state *s = &m->states[i];
				skein__gossip__member_state__init(&states[i]);
				states[i].name = (char *)s->name;
				addr_to_pb(&s->addr, &saddr[i]);
				states[i].addr = &saddr[i];
				states[i].generation = s->gen;
				states[i].incarnation = s->inc;
				states[i].status = (Skein__Gossip__Status)s->status;
				states[i].meta.data = (uint8_t *)s->meta;
				states[i].meta.len = s->meta_len;
				sptr[i] = &states[i];
			}
		}
		pp.n_members = m->nstates;
		pp.members = sptr;
		msg.body_case = SKEIN__GOSSIP__MSG__BODY_PUSH_PULL;
		msg.push_pull = &pp;
		break;
	default:
		return -1;
	}

	size_t n = skein__gossip__msg__get_packed_size(&msg);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf) goto out;
	skein__gossip__msg__pack(&msg, buf);
	*out = buf;
	*len = n;
	rc = 0;
out:
	free(states);
	free(sptr);
	free(saddr);
	return rc;
}

static size_t varint_len(size_t v)
{
	size_t n = 1;
	while (v >= 0x80) { v >>= 7; n++; }
	return n;
}

size_t mbr_codec_blob_cost(size_t len) { return 1 + varint_len(len) + len; }

/* A packet is the frame header, then blobs as Packet field 1 (0x0a, varint
 * length); a blob is a Msg whose only field is the oneof: its first byte is
 * the body's tag, (field << 3) | 2. */
mbr_peek mbr_peek_stream(const uint8_t *b, size_t n)
{
	if (n >= 2 && ((unsigned)b[0] << 8 | b[1]) != WIRE_MAGIC) return MBR_PEEK_BAD;
	if (n >= 3 && (b[2] < WIRE_VERSION_MIN || b[2] > WIRE_VERSION)) return MBR_PEEK_BAD;
	size_t i = WIRE_HDR_LEN;
	if (n <= i) return n == WIRE_HDR_LEN && !b[4] && !b[5] && !b[6] && !b[7] ? MBR_PEEK_OTHER : MBR_PEEK_MORE;
	if (b[i++] != 0x0a) return MBR_PEEK_BAD;
	for (int k = 0;; k++) {
		if (i >= n) return MBR_PEEK_MORE;
		if (k == 5) return MBR_PEEK_BAD;
		if (!(b[i++] & 0x80)) break;
	}
	if (i >= n) return MBR_PEEK_MORE;
	return b[i] == (SKEIN__GOSSIP__MSG__BODY_PUSH_PULL << 3 | 2) ? MBR_PEEK_PUSHPULL : MBR_PEEK_OTHER;
}

int mbr_pkt_init(mbr_pkt *p, size_t cap)
{
	if (cap < WIRE_HDR_LEN) cap = WIRE_HDR_LEN;
	p->buf = malloc(cap);
	p->len = WIRE_HDR_LEN;
	p->cap = p->buf ? cap : 0;
	p->nmsgs = 0;
	return p->buf ? 0 : -1;
}

int mbr_pkt_add(mbr_pkt *p, const uint8_t *blob, size_t len)
{
	size_t need = p->len + mbr_codec_blob_cost(len);
	if (need > p->cap) {
		size_t ncap = p->cap * 2 > need ? p->cap * 2 : need;
		uint8_t *nb = realloc(p->buf, ncap);
		if (!nb) return -1;
		p->buf = nb;
		p->cap = ncap;
	}
	p->buf[p->len++] = 0x0a; /* field 1 (msgs), wire type 2 */
	size_t v = len;
	while (v >= 0x80) { p->buf[p->len++] = (uint8_t)(v | 0x80); v >>= 7; }
	p->buf[p->len++] = (uint8_t)v;
	memcpy(p->buf + p->len, blob, len);
	p->len += len;
	p->nmsgs++;
	return 0;
}

void mbr_pkt_finish(mbr_pkt *p, uint8_t flags)
{
	wire_frame_header(p->buf, flags, p->len - WIRE_HDR_LEN);
}

void mbr_pkt_free(mbr_pkt *p)
{
	free(p->buf);
	p->buf = NULL;
	p->len = p->cap = 0;
}

/* ---- decoding ---- */

static bool addr_from_pb(const PbAddr *pb, mbr_addr *a)
{
	memset(a, 0, sizeof *a);
	if (!pb || (pb->ip.len != 4 && pb->ip.len != 16) || pb->port == 0 || pb->port > 65535)
		return false;
	memcpy(a->ip, pb->ip.data, pb->ip.len);
	a->len = (uint8_t)pb->ip.len;
	a->port = (uint16_t)pb->port;
	return true;
}

/* Converts one Msg; returns 1 ok, 0 unknown type (skip), -1 invalid. */
static int convert(const Skein__Gossip__Msg *pm, mbr_msg *m, mbr_wire_state **states)
{
	memset(m, 0, sizeof *m);
	switch (pm->body_case) {
	case SKEIN__GOSSIP__MSG__BODY_PING: {
		const Skein__Gossip__Ping *p = pm->ping;
		m->type = MBR_MSG_PING;
		m->seq = p->seq;
		m->name = p->target;
		m->from = p->source;
		if (!sk_name_ok(m->name, MBR_NAME_MAX) || !sk_name_ok(m->from, MBR_NAME_MAX) || !addr_from_pb(p->source_addr, &m->src_addr))
			return -1;
		return 1;
	}
	case SKEIN__GOSSIP__MSG__BODY_INDIRECT_PING: {
		const Skein__Gossip__IndirectPing *p = pm->indirect_ping;
		m->type = MBR_MSG_INDIRECT;
		m->seq = p->seq;
		m->name = p->target;
		m->from = p->source;
		m->nack = p->nack;
		if (!sk_name_ok(m->name, MBR_NAME_MAX) || !sk_name_ok(m->from, MBR_NAME_MAX) || !addr_from_pb(p->target_addr, &m->addr) ||
		    !addr_from_pb(p->source_addr, &m->src_addr))
			return -1;
		return 1;
	}
	case SKEIN__GOSSIP__MSG__BODY_ACK:
		m->type = MBR_MSG_ACK;
		m->seq = pm->ack->seq;
		return 1;
	case SKEIN__GOSSIP__MSG__BODY_NACK:
		m->type = MBR_MSG_NACK;
		m->seq = pm->nack->seq;
		return 1;
	case SKEIN__GOSSIP__MSG__BODY_ALIVE: {
		const Skein__Gossip__Alive *p = pm->alive;
		m->type = MBR_MSG_ALIVE;
		m->name = p->name;
		m->gen = p->generation;
		m->inc = p->incarnation;
		m->meta = p->meta.data;
		m->meta_len = p->meta.len;
		if (!sk_name_ok(m->name, MBR_NAME_MAX) || !addr_from_pb(p->addr, &m->addr) || m->meta_len > MBR_META_MAX)
			return -1;
		return 1;
	}
	case SKEIN__GOSSIP__MSG__BODY_SUSPECT:
	case SKEIN__GOSSIP__MSG__BODY_DEAD: {
		bool sus = pm->body_case == SKEIN__GOSSIP__MSG__BODY_SUSPECT;
		m->type = sus ? MBR_MSG_SUSPECT : MBR_MSG_DEAD;
		m->name = sus ? pm->suspect->name : pm->dead->name;
		m->gen = sus ? pm->suspect->generation : pm->dead->generation;
		m->inc = sus ? pm->suspect->incarnation : pm->dead->incarnation;
		m->from = sus ? pm->suspect->from : pm->dead->from;
		if (!sk_name_ok(m->name, MBR_NAME_MAX) || !sk_name_ok(m->from, MBR_NAME_MAX)) return -1;
		return 1;
	}
	case SKEIN__GOSSIP__MSG__BODY_PUSH_PULL: {
		const Skein__Gossip__PushPull *p = pm->push_pull;
		m->type = MBR_MSG_PUSHPULL;
		m->join = p->join;
		m->reply = p->reply;
		m->from = p->source;
		if (!sk_name_ok(m->from, MBR_NAME_MAX) || !addr_from_pb(p->source_addr, &m->src_addr)) return -1;
		if (p->n_members) {
			mbr_wire_state *st = calloc(p->n_members, sizeof *st);
			if (!st) return -1;
			*states = st;
			for (size_t i = 0; i < p->n_members; i++) {
				const Skein__Gossip__MemberState *s = p->members[i];
				st[i].name = s->name;
				st[i].gen = s->generation;
				st[i].inc = s->incarnation;
				st[i].meta = s->meta.data;
				st[i].meta_len = s->meta.len;
				if ((unsigned)s->status > SKEIN__GOSSIP__STATUS__STATUS_LEFT) return -1;
				st[i].status = (mbr_status)s->status;
				if (!sk_name_ok(st[i].name, MBR_NAME_MAX) || !addr_from_pb(s->addr, &st[i].addr) ||
				    st[i].meta_len > MBR_META_MAX)
					return -1;
			}
			m->states = st;
			m->nstates = p->n_members;
		}
		return 1;
	}
	default:
		return 0;
	}
}

/* protobuf-c allocates every string and sub-message of a decoded packet
 * separately; a push-pull of N members is ~5N mallocs.  A bump arena makes
 * that one or two, freed at once (half the simulator's time went there). */
typedef struct arena_chunk {
	struct arena_chunk *next;
	size_t used, cap;
	max_align_t data[];
} arena_chunk;

typedef struct {
	ProtobufCAllocator pa;
	arena_chunk *head;
} arena;

static void *arena_alloc(void *ctx, size_t n)
{
	arena *ar = ctx;
	n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	arena_chunk *c = ar->head;
	if (!c || c->cap - c->used < n) {
		size_t cap = c ? c->cap * 2 : 16384;
		if (cap < n) cap = n;
		arena_chunk *nc = malloc(sizeof *nc + cap);
		if (!nc) return NULL;
		nc->next = c;
		nc->used = 0;
		nc->cap = cap;
		ar->head = c = nc;
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	return p;
}

static void arena_free_one(void *ctx, void *p) { (void)ctx; (void)p; }

static void arena_release(arena *ar)
{
	for (arena_chunk *c = ar->head, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(ar);
}

wire_err mbr_codec_decode(const uint8_t *buf, size_t len, size_t max, mbr_decoded *d)
{
	memset(d, 0, sizeof *d);
	wire_frame f;
	wire_err e = wire_frame_parse(buf, len, max, &f);
	if (e != WIRE_OK) return e;
	arena *ar = calloc(1, sizeof *ar);
	if (!ar) return WIRE_ERR_DECODE;
	ar->pa.alloc = arena_alloc;
	ar->pa.free = arena_free_one;
	ar->pa.allocator_data = ar;
	Skein__Gossip__Packet *pkt = skein__gossip__packet__unpack(&ar->pa, f.len, f.payload);
	if (!pkt) {
		arena_release(ar);
		return WIRE_ERR_DECODE;
	}
	d->priv = ar;
	if (pkt->n_msgs == 0) goto invalid;
	d->msgs = calloc(pkt->n_msgs, sizeof *d->msgs);
	if (!d->msgs) goto invalid;
	for (size_t i = 0; i < pkt->n_msgs; i++) {
		mbr_wire_state *st = NULL;
		int r = convert(pkt->msgs[i], &d->msgs[d->nmsgs], &st);
		if (st) {
			/* At most one push-pull per packet: its states are ours to free. */
			if (d->states) { free(st); goto invalid; }
			d->states = st;
		}
		if (r < 0) goto invalid;
		if (r == 0) d->skipped++;
		else d->nmsgs++;
	}
	return WIRE_OK;
invalid:
	mbr_codec_free(d);
	return WIRE_ERR_INVALID;
}

void mbr_codec_free(mbr_decoded *d)
{
	if (d->priv) arena_release(d->priv);
	free(d->msgs);
	free(d->states);
	memset(d, 0, sizeof *d);
}
