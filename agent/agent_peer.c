/* agent/agent_peer: messages to other agents by name, and forwarded requests.
 *
 * Every agent keeps one control connection (agent_wire.c) per agent it
 * writes to, to the endpoint that agent advertises in its gossip metadata,
 * and reconnects when the address changes or the connection breaks.  Raft
 * messages (agent_head.c) and the head's orders and the agents' reports
 * (agent_jobs.c) go through agent_peer_send: one-way, sealed, addressed to
 * the recipient by name (agent_rpc.c); sends never block, a message that
 * cannot go is counted and dropped, and its sender retries.
 *
 * Forwards: a request that must be served elsewhere (by the head, or by a
 * named agent) is packed once, sent sealed to its target, and the answer
 * relayed to the client (agent_ctl.c hands answers in through
 * agent_peer_answer).  The caller says where to: this file does not know
 * the election.  agent_ctl.c calls agent_peer_follow when the head it
 * knows changes, and takes back the forwards this agent must serve once it
 * is the head (agent_peer_take).  Calls go one way: ctl, head and jobs ->
 * peer -> reply and wire. */
#include "agent/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_rpc.h"
#include "proto/control.pb-c.h"
#include "proto/gossip.pb-c.h"

enum {
	PEERS_MAX = 8192,         /* voters, and every agent the head gives orders to */
	FORWARDS_MAX = 256,
};
static const double FORWARD_TIMEOUT_S = 5.0;

typedef struct {
	char name[MBR_NAME_MAX + 1];
	char rpc[64];
	agent_wire_id conn;
} peer;

typedef struct fwd {
	agent *a;
	agent_wire_id conn;             /* the call in flight; 0 when it failed (sent again) */
	uint8_t *req;             /* the packed request, unsealed, to send again to a new head */
	size_t reqlen;
	uint8_t nonce[AUTH_NONCE];/* of the copy in flight: its answer must carry it */
	char target[MBR_NAME_MAX + 1];
	bool to_node;             /* sent to a named agent, not the head: never follows the head */
	ev_timer t;
	agent_client client;
	struct fwd *next;
} fwd;

struct agent_peers {
	peer *peers;
	int npeers, peers_cap;
	fwd *fwds;
	int nfwds;
	uint64_t drop_send;       /* messages that could not go (no endpoint, queue full) */
};

/* ---------------------------------------------------------------- gossip view */

Skein__Gossip__NodeMeta *agent_peer_meta(const mbr_member_info *mi)
{
	if (!mi->meta_len) return NULL;
	return skein__gossip__node_meta__unpack(NULL, mi->meta_len, mi->meta);
}

static void rpc_str(const Skein__Gossip__NodeMeta *m, char *out, size_t cap)
{
	out[0] = 0;
	if (!m || !m->rpc || (m->rpc->ip.len != 4 && m->rpc->ip.len != 16)) return;
	mbr_addr ad = { .len = (uint8_t)m->rpc->ip.len, .port = (uint16_t)m->rpc->port };
	memcpy(ad.ip, m->rpc->ip.data, ad.len);
	mbr_addr_format(&ad, out, cap);
}

void agent_peer_rpc(agent *a, const char *name, char *out, size_t cap)
{
	mbr_member_info mi;
	out[0] = 0;
	if (!strcmp(name, a->opts.name)) {
		snprintf(out, cap, "%s", a->rpc_bound);
		return;
	}
	if (mbr_lookup(a->mbr, name, &mi) < 0) return;
	Skein__Gossip__NodeMeta *m = agent_peer_meta(&mi);
	rpc_str(m, out, cap);
	if (m) skein__gossip__node_meta__free_unpacked(m, NULL);
}

/* ---------------------------------------------------------------- sending */

static peer *peer_get(agent *a, const char *name)
{
	agent_peers *h = a->peers;
	char rpc[64];
	agent_peer_rpc(a, name, rpc, sizeof rpc);
	if (!rpc[0]) return NULL;
	for (int i = 0; i < h->npeers; i++) {
		if (strcmp(h->peers[i].name, name)) continue;
		if (!strcmp(h->peers[i].rpc, rpc) && agent_wire_alive(a->wire, h->peers[i].conn)) return &h->peers[i];
		/* it moved (a restart on a new address), or the connection broke: reconnect */
		agent_wire_close(a->wire, h->peers[i].conn);
		h->peers[i] = h->peers[--h->npeers];
		break;
	}
	if (h->npeers == h->peers_cap) {
		int cap = h->peers_cap ? h->peers_cap * 2 : 16;
		peer *np = cap <= PEERS_MAX ? realloc(h->peers, (size_t)cap * sizeof *np) : NULL;
		if (!np) return NULL;
		h->peers = np;
		h->peers_cap = cap;
	}
	agent_wire_id conn = agent_wire_connect(a->wire, rpc);
	if (!conn) return NULL;
	peer *p = &h->peers[h->npeers++];
	snprintf(p->name, sizeof p->name, "%s", name);
	snprintf(p->rpc, sizeof p->rpc, "%s", rpc);
	p->conn = conn;
	return p;
}

void agent_peer_connect(agent *a, const char *name)
{
	if (strcmp(name, a->opts.name)) peer_get(a, name);
}

int agent_peer_send(agent *a, const char *to, const Skein__Control__Request *q)
{
	agent_peers *h = a->peers;
	if (agent_keyless_closed(a)) { a->cnt.drop_keyless++; return -1; } /* never an order in plaintext */
	peer *p = peer_get(a, to);
	if (!p) { h->drop_send++; return -1; }
	Skein__Control__Request oq = *q;
	oq.oneway = 1;
	agent_rpc_cred cred = agent_ctl_cred(a);
	uint8_t nonce[AUTH_NONCE];
	size_t len;
	uint8_t *buf = agent_req_pack(&oq, &cred, to, nonce, &len);
	int rc = buf ? agent_wire_send(a->wire, p->conn, buf, len) : -1;
	if (rc < 0) h->drop_send++;
	free(buf);
	return rc;
}

/* ---------------------------------------------------------------- forwarding */

static void fwd_free(fwd *f)
{
	agent *a = f->a;
	ev_timer_stop(a->loop, &f->t);
	agent_wire_close(a->wire, f->conn); /* its answer, if it comes, goes nowhere */
	for (fwd **p = &a->peers->fwds; *p; p = &(*p)->next) {
		if (*p == f) { *p = f->next; break; }
	}
	a->peers->nfwds--;
	free(f->req);
	free(f);
}

/* The answer to a forwarded request (agent_wire calls this through
 * agent_ctl.c), or why none came. */
void agent_peer_answer(agent *a, void *cookie, const uint8_t *data, size_t len, const char *why)
{
	fwd *f = cookie;
	(void)a;
	f->conn = 0; /* the transport closed it */
	if (!data) {
		/* a named agent is asked once; a request for the head goes again
		 * to whoever is the head on the next round (agent_peer_follow) */
		if (f->to_node) {
			char msg[300];
			snprintf(msg, sizeof msg, "%s did not answer: %s", f->target, why ? why : "connection lost");
			agent_ctl_send(f->a, &f->client, 1, msg, NULL);
			fwd_free(f);
		}
		return;
	}
	char err[256];
	agent_rpc_cred cred = agent_ctl_cred(f->a);
	Skein__Control__Response *r = agent_resp_open(data, len, &cred, f->nonce, err, sizeof err);
	if (r) agent_ctl_send_bin(f->a, &f->client, r->code, r->error, r->body, r->payload.data, r->payload.len);
	else agent_ctl_send(f->a, &f->client, 1, "the head's answer could not be read", NULL);
	if (r) skein__control__response__free_unpacked(r, NULL);
	fwd_free(f);
}

static void fwd_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	fwd *f = t->data;
	(void)loop; (void)revents;
	agent_ctl_send(f->a, &f->client, 1, "the head did not answer within 5 s", NULL);
	fwd_free(f);
}

/* (Re)sends a forward to `head` at `rpc`, sealed and addressed to it. */
static int fwd_send(fwd *f, const char *head, const char *rpc)
{
	agent *a = f->a;
	agent_wire_close(a->wire, f->conn);
	f->conn = 0;
	snprintf(f->target, sizeof f->target, "%s", head);
	if (agent_keyless_closed(a)) { a->cnt.drop_keyless++; return -1; }
	Skein__Control__Request *q = skein__control__request__unpack(NULL, f->reqlen, f->req);
	if (!q) return -1;
	agent_rpc_cred cred = agent_ctl_cred(a);
	size_t len;
	uint8_t *buf = agent_req_pack(q, &cred, head, f->nonce, &len);
	/* the envelope's fields point into our buffers: detach before freeing */
	q->sender = q->recipient = NULL;
	q->nonce.data = NULL;
	q->nonce.len = 0;
	skein__control__request__free_unpacked(q, NULL);
	if (!buf) return -1;
	f->conn = agent_wire_call(a->wire, rpc, buf, len, f);
	free(buf);
	return f->conn ? 0 : -1;
}

static void forward_to(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r,
		       const char *head, const char *rpc, bool to_node)
{
	agent_peers *h = a->peers;
	if (h->nfwds >= FORWARDS_MAX) {
		agent_reply_fail(r, 1, "too many requests in flight to the head");
		return;
	}
	Skein__Control__Request fq = *q;
	fq.forwarded = 1;
	fq.oneway = 0;
	fq.sender = fq.recipient = (char *)"";
	fq.nonce.len = 0;
	fq.time_ms = 0;
	fwd *f = calloc(1, sizeof *f);
	if (f) {
		f->reqlen = skein__control__request__get_packed_size(&fq);
		f->req = malloc(f->reqlen ? f->reqlen : 1);
	}
	if (!f || !f->req) {
		if (f) free(f);
		agent_reply_fail(r, 1, "out of memory");
		return;
	}
	skein__control__request__pack(&fq, f->req);
	f->a = a;
	f->to_node = to_node;
	f->client = *c;
	ev_timer_init(&f->t, fwd_timeout_cb, FORWARD_TIMEOUT_S, 0);
	f->t.data = f;
	f->next = h->fwds;
	h->fwds = f;
	h->nfwds++;
	if (fwd_send(f, head, rpc) < 0) {
		agent_reply_fail(r, 1, "cannot reach the head %s at %s", head, rpc);
		f->client.conn = 0;
		fwd_free(f);
		return;
	}
	ev_timer_start(a->loop, &f->t);
	r->deferred = true;
}

void agent_peer_forward(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r,
			const char *head, const char *rpc)
{
	forward_to(a, q, c, r, head, rpc, false);
}

void agent_peer_forward_node(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r,
			     const char *node)
{
	char rpc[64];
	agent_peer_rpc(a, node, rpc, sizeof rpc);
	if (!rpc[0]) {
		agent_reply_fail(r, 1, "no control endpoint known for %s", node);
		return;
	}
	forward_to(a, q, c, r, node, rpc, true);
}

/* A forward for the head that waits on another agent than `head`. */
static bool fwd_stale(const fwd *f, const char *head)
{
	return !f->to_node && !(f->conn && !strcmp(f->target, head));
}

void agent_peer_follow(agent *a, const char *head, const char *rpc)
{
	for (fwd *f = a->peers->fwds; f; f = f->next)
		if (fwd_stale(f, head)) fwd_send(f, head, rpc);
}

int agent_peer_forwards(agent *a)
{
	return a->peers ? a->peers->nfwds : 0;
}

bool agent_peer_take(agent *a, const char *head, uint8_t **req, size_t *len, agent_client *c)
{
	for (fwd *f = a->peers->fwds; f; f = f->next) {
		if (!fwd_stale(f, head)) continue;
		*req = f->req;
		*len = f->reqlen;
		*c = f->client;
		f->req = NULL;
		fwd_free(f); /* its client is the taker's now */
		return true;
	}
	return false;
}

uint64_t agent_peer_drops(agent *a)
{
	return a->peers ? a->peers->drop_send : 0;
}

/* ---------------------------------------------------------------- lifecycle */

int agent_peer_open(agent *a, char *err, size_t errlen)
{
	a->peers = calloc(1, sizeof *a->peers);
	if (!a->peers) { snprintf(err, errlen, "out of memory"); return -1; }
	return 0;
}

void agent_peer_close(agent *a)
{
	agent_peers *h = a->peers;
	if (!h) return;
	while (h->fwds) fwd_free(h->fwds);
	for (int i = 0; i < h->npeers; i++) agent_wire_close(a->wire, h->peers[i].conn);
	free(h->peers);
	free(h);
	a->peers = NULL;
}
