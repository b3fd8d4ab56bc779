/* raft/raft_codec: see raft_codec.h.  Encoding builds protobuf-c structs
 * that point at the caller's memory (nothing copied); decoding unpacks,
 * validates, and hands out pointers into the unpacked message, freed by
 * raft_codec_free. */
#include "common/sk_text.h"
#include "raft/raft_codec.h"

#include <stdlib.h>
#include <string.h>

#include "proto/raft.pb-c.h"

bool raft_name_ok(const char *s)
{
	return sk_name_ok(s, RAFT_NAME_MAX);
}

int raft_codec_encode(const raft_msg *m, uint8_t **out, size_t *len)
{
	Skein__Raft__Msg msg = SKEIN__RAFT__MSG__INIT;
	Skein__Raft__VoteReq vreq = SKEIN__RAFT__VOTE_REQ__INIT;
	Skein__Raft__VoteResp vresp = SKEIN__RAFT__VOTE_RESP__INIT;
	Skein__Raft__AppendReq areq = SKEIN__RAFT__APPEND_REQ__INIT;
	Skein__Raft__AppendResp aresp = SKEIN__RAFT__APPEND_RESP__INIT;
	Skein__Raft__SnapReq sreq = SKEIN__RAFT__SNAP_REQ__INIT;
	Skein__Raft__SnapResp sresp = SKEIN__RAFT__SNAP_RESP__INIT;
	Skein__Raft__TimeoutNow tnow = SKEIN__RAFT__TIMEOUT_NOW__INIT;
	Skein__Raft__Entry *ents = NULL, **eptr = NULL;
	char *vnames[RAFT_VOTERS_MAX];
	int rc = -1;

	msg.term = m->term;
	msg.from = (char *)m->from;
	switch (m->type) {
	case RAFT_MSG_VOTE_REQ:
		vreq.prevote = m->prevote;
		vreq.last_index = m->last_index;
		vreq.last_term = m->last_term;
		vreq.transfer = m->transfer;
		msg.body_case = SKEIN__RAFT__MSG__BODY_VOTE_REQ;
		msg.vote_req = &vreq;
		break;
	case RAFT_MSG_VOTE_RESP:
		vresp.prevote = m->prevote;
		vresp.granted = m->granted;
		msg.body_case = SKEIN__RAFT__MSG__BODY_VOTE_RESP;
		msg.vote_resp = &vresp;
		break;
	case RAFT_MSG_APPEND_REQ:
		areq.prev_index = m->prev_index;
		areq.prev_term = m->prev_term;
		areq.commit = m->commit;
		areq.echo = m->echo;
		if (m->nentries) {
			ents = calloc(m->nentries, sizeof *ents);
			eptr = calloc(m->nentries, sizeof *eptr);
			if (!ents || !eptr) goto out;
			for (size_t i = 0; i < m->nentries; i++) {
				const raft_entry *e = &m->entries[i];
				skein__raft__entry__init(&ents[i]);
				ents[i].index = e->index;
				ents[i].term = e->term;
				ents[i].type = e->type;
				ents[i].data.data = (uint8_t *)e->data;
				ents[i].data.len = e->len;
				eptr[i] = &ents[i];
			}
		}
		areq.n_entries = m->nentries;
		areq.entries = eptr;
		msg.body_case = SKEIN__RAFT__MSG__BODY_APPEND_REQ;
		msg.append_req = &areq;
		break;
	case RAFT_MSG_APPEND_RESP:
		aresp.success = m->success;
		aresp.last_index = m->last_index;
		aresp.prev_index = m->prev_index;
		aresp.echo = m->echo;
		aresp.syncing = m->syncing;
		msg.body_case = SKEIN__RAFT__MSG__BODY_APPEND_RESP;
		msg.append_resp = &aresp;
		break;
	case RAFT_MSG_SNAP_REQ:
		sreq.last_index = m->snap->index;
		sreq.last_term = m->snap->term;
		for (size_t i = 0; i < m->snap->voters.n; i++)
			vnames[i] = (char *)m->snap->voters.names[i];
		sreq.n_voters = m->snap->voters.n;
		sreq.voters = vnames;
		sreq.data.data = (uint8_t *)m->data;
		sreq.data.len = m->len;
		sreq.echo = m->echo;
		sreq.offset = m->offset;
		sreq.total = m->total;
		msg.body_case = SKEIN__RAFT__MSG__BODY_SNAP_REQ;
		msg.snap_req = &sreq;
		break;
	case RAFT_MSG_SNAP_RESP:
		sresp.success = m->success;
		sresp.last_index = m->last_index;
		sresp.echo = m->echo;
		sresp.offset = m->offset;
		msg.body_case = SKEIN__RAFT__MSG__BODY_SNAP_RESP;
		msg.snap_resp = &sresp;
		break;
	case RAFT_MSG_TIMEOUT_NOW:
		msg.body_case = SKEIN__RAFT__MSG__BODY_TIMEOUT_NOW;
		msg.timeout_now = &tnow;
		break;
	default:
		goto out;
	}
	size_t plen = skein__raft__msg__get_packed_size(&msg);
	uint8_t *buf = malloc(WIRE_HDR_LEN + plen);
	if (!buf) goto out;
	wire_frame_header(buf, 0, plen);
	skein__raft__msg__pack(&msg, buf + WIRE_HDR_LEN);
	*out = buf;
	*len = WIRE_HDR_LEN + plen;
	rc = 0;
out:
	free(ents);
	free(eptr);
	return rc;
}

/* Index arithmetic stays far from overflow: 2^62 entries is never reached. */
#define IDX_OK(x) ((x) < ((uint64_t)1 << 62))

static int check_append(const Skein__Raft__AppendReq *p, raft_decoded *d)
{
	raft_msg *m = &d->msg;
	if (!IDX_OK(p->prev_index) || !IDX_OK(p->commit) || p->prev_term > m->term) return -1;
	if ((p->prev_index == 0) != (p->prev_term == 0)) return -1;
	if (p->n_entries > RAFT_MSG_ENTRIES_MAX) return -1;
	m->prev_index = p->prev_index;
	m->prev_term = p->prev_term;
	m->commit = p->commit;
	m->echo = p->echo;
	if (!p->n_entries) return 0;
	d->entries = calloc(p->n_entries, sizeof *d->entries);
	if (!d->entries) return -1;
	uint64_t last_term = p->prev_term;
	for (size_t i = 0; i < p->n_entries; i++) {
		const Skein__Raft__Entry *e = p->entries[i];
		/* contiguous, terms never decrease, none newer than the sender */
		if (e->index != p->prev_index + 1 + i || e->term < last_term || e->term > m->term ||
		    e->term == 0 || e->type > 255 || e->data.len > RAFT_ENTRY_MAX)
			return -1;
		last_term = e->term;
		d->entries[i] = (raft_entry){ e->index, e->term, (uint8_t)e->type, e->data.data, e->data.len };
	}
	m->entries = d->entries;
	m->nentries = p->n_entries;
	return 0;
}

static int check_snap(const Skein__Raft__SnapReq *p, raft_decoded *d)
{
	raft_msg *m = &d->msg;
	/* a sender from before chunks sends the whole snapshot and no total */
	uint64_t total = p->total == 0 && p->offset == 0 ? p->data.len : p->total;
	if (p->last_index == 0 || !IDX_OK(p->last_index) || p->last_term == 0 ||
	    p->last_term > m->term || total > RAFT_SNAPSHOT_MAX || p->offset > total ||
	    p->data.len > total - p->offset || (p->data.len == 0 && p->offset < total))
		return -1;
	if (p->n_voters == 0 || p->n_voters > RAFT_VOTERS_MAX) return -1;
	if (raft_voters_make(&d->snap.voters, (const char *const *)p->voters, p->n_voters, NULL, 0) != 0)
		return -1;
	d->snap.index = p->last_index;
	d->snap.term = p->last_term;
	m->snap = &d->snap;
	m->data = p->data.data;
	m->len = p->data.len;
	m->echo = p->echo;
	m->offset = p->offset;
	m->total = total;
	return 0;
}

static int check_msg(const Skein__Raft__Msg *p, raft_decoded *d)
{
	raft_msg *m = &d->msg;
	if (p->term == 0 || !IDX_OK(p->term) || !raft_name_ok(p->from)) return -1;
	m->term = p->term;
	m->from = p->from;
	switch (p->body_case) {
	case SKEIN__RAFT__MSG__BODY_VOTE_REQ:
		m->type = RAFT_MSG_VOTE_REQ;
		m->prevote = p->vote_req->prevote;
		m->last_index = p->vote_req->last_index;
		m->last_term = p->vote_req->last_term;
		m->transfer = p->vote_req->transfer;
		if (m->prevote && m->transfer) return -1;
		if (!IDX_OK(m->last_index) || m->last_term > m->term) return -1;
		return 0;
	case SKEIN__RAFT__MSG__BODY_VOTE_RESP:
		m->type = RAFT_MSG_VOTE_RESP;
		m->prevote = p->vote_resp->prevote;
		m->granted = p->vote_resp->granted;
		return 0;
	case SKEIN__RAFT__MSG__BODY_APPEND_REQ:
		m->type = RAFT_MSG_APPEND_REQ;
		return check_append(p->append_req, d);
	case SKEIN__RAFT__MSG__BODY_APPEND_RESP:
		m->type = RAFT_MSG_APPEND_RESP;
		m->success = p->append_resp->success;
		m->last_index = p->append_resp->last_index;
		m->prev_index = p->append_resp->prev_index;
		m->echo = p->append_resp->echo;
		m->syncing = p->append_resp->syncing;
		return IDX_OK(m->last_index) && IDX_OK(m->prev_index) ? 0 : -1;
	case SKEIN__RAFT__MSG__BODY_SNAP_REQ:
		m->type = RAFT_MSG_SNAP_REQ;
		return check_snap(p->snap_req, d);
	case SKEIN__RAFT__MSG__BODY_SNAP_RESP:
		m->type = RAFT_MSG_SNAP_RESP;
		m->success = p->snap_resp->success;
		m->last_index = p->snap_resp->last_index;
		m->echo = p->snap_resp->echo;
		m->offset = p->snap_resp->offset;
		return IDX_OK(m->last_index) && m->offset <= RAFT_SNAPSHOT_MAX ? 0 : -1;
	case SKEIN__RAFT__MSG__BODY_TIMEOUT_NOW:
		m->type = RAFT_MSG_TIMEOUT_NOW;
		return 0;
	default:
		return -1;
	}
}

wire_err raft_codec_decode(const uint8_t *buf, size_t len, raft_decoded *d)
{
	memset(d, 0, sizeof *d);
	wire_frame f;
	wire_err e = wire_frame_parse(buf, len, RAFT_MSG_MAX, &f);
	if (e != WIRE_OK) return e;
	Skein__Raft__Msg *p = skein__raft__msg__unpack(NULL, f.len, f.payload);
	if (!p) return WIRE_ERR_DECODE;
	d->priv = p;
	if (check_msg(p, d) != 0) {
		raft_codec_free(d);
		return WIRE_ERR_INVALID;
	}
	return WIRE_OK;
}

void raft_codec_free(raft_decoded *d)
{
	if (d->priv) skein__raft__msg__free_unpacked(d->priv, NULL);
	free(d->entries);
	memset(d, 0, sizeof *d);
}
