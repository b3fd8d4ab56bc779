/* agent/agent_ctl: the control endpoint.
 *
 * A ZeroMQ ROUTER socket driven from the libev loop.  ZMQ_FD is
 * edge-triggered: after every wake-up and after every send we read
 * ZMQ_EVENTS and drain until nothing is left (CZMQ's rule, kept in this one
 * file).  Requests are protobuf (proto/control.proto), sealed with the
 * keyring when the agent has one; a plaintext request to such an agent is
 * refused with a clear error, in plaintext, so the CLI can show it. */
#include "agent/agent.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "agent/agent_rpc.h"
#include "common/sk_buf.h"
#include "common/sk_log.h"
#include "proto/control.pb-c.h"
#include "proto/gossip.pb-c.h"

void agent_reply_fail(agent_reply *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof r->error, fmt, ap);
	va_end(ap);
	r->code = code;
}
#define fail agent_reply_fail
typedef agent_reply reply;

/* ---- member metadata ---- */

typedef struct {
	uint32_t gpus;
	char rpc[64];
	Skein__Gossip__NodeMeta *pb;
} meta_view;

static void meta_read(const mbr_member_info *mi, meta_view *v)
{
	memset(v, 0, sizeof *v);
	if (!mi->meta_len) return;
	v->pb = skein__gossip__node_meta__unpack(NULL, mi->meta_len, mi->meta);
	if (!v->pb) return;
	v->gpus = v->pb->gpus;
	if (v->pb->rpc && (v->pb->rpc->ip.len == 4 || v->pb->rpc->ip.len == 16)) {
		mbr_addr a = { .len = (uint8_t)v->pb->rpc->ip.len, .port = (uint16_t)v->pb->rpc->port };
		memcpy(a.ip, v->pb->rpc->ip.data, a.len);
		mbr_addr_format(&a, v->rpc, sizeof v->rpc);
	}
}

static void meta_done(meta_view *v)
{
	if (v->pb) skein__gossip__node_meta__free_unpacked(v->pb, NULL);
	v->pb = NULL;
}

/* ---- commands ---- */

static int by_name(const void *x, const void *y)
{
	return strcmp(((const mbr_member_info *)x)->name, ((const mbr_member_info *)y)->name);
}

static void cmd_members(agent *a, const Skein__Control__Request *q, reply *r)
{
	regex_t st_re, tag_re;
	bool has_st = false, has_tag = false;
	char tag_key[128] = "";
	for (size_t i = 0; i < q->n_args; i++) {
		const char *arg = q->args[i];
		const char *val = i + 1 < q->n_args ? q->args[i + 1] : NULL;
		if (!strcmp(arg, "--status") && val && !has_st) {
			if (regcomp(&st_re, val, REG_EXTENDED | REG_NOSUB) != 0) {
				fail(r, 2, "--status: bad regular expression '%s'", val);
				goto out;
			}
			has_st = true;
			i++;
		} else if (!strcmp(arg, "--tag") && val && !has_tag) {
			const char *eq = strchr(val, '=');
			if (!eq || eq == val || (size_t)(eq - val) >= sizeof tag_key) {
				fail(r, 2, "--tag: expected KEY=REGEX, got '%s'", val);
				goto out;
			}
			memcpy(tag_key, val, (size_t)(eq - val));
			tag_key[eq - val] = 0;
			if (regcomp(&tag_re, eq + 1, REG_EXTENDED | REG_NOSUB) != 0) {
				fail(r, 2, "--tag: bad regular expression '%s'", eq + 1);
				goto out;
			}
			has_tag = true;
			i++;
		} else {
			fail(r, 2, "members: unknown argument '%s'", arg);
			goto out;
		}
	}
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(n, sizeof *mi);
	if (!mi) { fail(r, 1, "out of memory"); goto out; }
	mbr_members(a->mbr, mi, n);
	qsort(mi, n, sizeof *mi, by_name);
	bool json = !strcmp(q->format, "json");
	if (json) sk_buf_printf(&r->body, "{\"members\":[");
	else sk_buf_printf(&r->body, "%-24s %-22s %-8s %-5s %s\n", "NAME", "ADDRESS", "STATUS", "GPUS", "TAGS");
	int shown = 0;
	for (size_t i = 0; i < n; i++) {
		const char *st = mbr_status_str(mi[i].status);
		if (has_st && regexec(&st_re, st, 0, NULL, 0) != 0) continue;
		meta_view mv;
		meta_read(&mi[i], &mv);
		if (has_tag) {
			bool match = false;
			for (size_t t = 0; mv.pb && t < mv.pb->n_tags; t++)
				if (!strcmp(mv.pb->tags[t]->key, tag_key) &&
				    regexec(&tag_re, mv.pb->tags[t]->value, 0, NULL, 0) == 0)
					match = true;
			if (!match) { meta_done(&mv); continue; }
		}
		char addr[64], host[64];
		mbr_addr_format(&mi[i].addr, addr, sizeof addr);
		snprintf(host, sizeof host, "%s", addr);
		char *colon = strrchr(host, ':');
		if (colon) *colon = 0;
		if (host[0] == '[') { memmove(host, host + 1, strlen(host)); host[strlen(host) - 1] = 0; }
		if (json) {
			sk_buf_printf(&r->body, "%s{\"name\":", shown ? "," : "");
			sk_buf_json_str(&r->body, mi[i].name);
			sk_buf_printf(&r->body, ",\"addr\":");
			sk_buf_json_str(&r->body, host);
			sk_buf_printf(&r->body, ",\"port\":%u,\"status\":\"%s\",\"gpus\":%u,\"tags\":{",
				      mi[i].addr.port, st, mv.gpus);
			for (size_t t = 0; mv.pb && t < mv.pb->n_tags; t++) {
				if (t) sk_buf_add(&r->body, ",", 1);
				sk_buf_json_str(&r->body, mv.pb->tags[t]->key);
				sk_buf_add(&r->body, ":", 1);
				sk_buf_json_str(&r->body, mv.pb->tags[t]->value);
			}
			sk_buf_printf(&r->body, "},\"generation\":%llu,\"incarnation\":%u}",
				      (unsigned long long)mi[i].generation, mi[i].incarnation);
		} else {
			sk_buf tags;
			sk_buf_init(&tags);
			for (size_t t = 0; mv.pb && t < mv.pb->n_tags; t++)
				sk_buf_printf(&tags, "%s%s=%s", t ? "," : "", mv.pb->tags[t]->key, mv.pb->tags[t]->value);
			sk_buf_printf(&r->body, "%-24s %-22s %-8s %-5u %s\n", mi[i].name, addr, st, mv.gpus,
				      sk_buf_str(&tags));
			sk_buf_free(&tags);
		}
		shown++;
		meta_done(&mv);
	}
	if (json) sk_buf_printf(&r->body, "]}\n");
	free(mi);
out:
	if (has_st) regfree(&st_re);
	if (has_tag) regfree(&tag_re);
}

/* Name, address and control endpoint of every live member, for skeinctl's
 * cluster-wide commands: "name status rpc" per line. */
static void cmd_peers(agent *a, reply *r)
{
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(n, sizeof *mi);
	if (!mi) { fail(r, 1, "out of memory"); return; }
	mbr_members(a->mbr, mi, n);
	for (size_t i = 0; i < n; i++) {
		meta_view mv;
		meta_read(&mi[i], &mv);
		sk_buf_printf(&r->body, "%s %s %s\n", mi[i].name, mbr_status_str(mi[i].status),
			      mv.rpc[0] ? mv.rpc : "-");
		meta_done(&mv);
	}
	free(mi);
}

static void cmd_info(agent *a, const Skein__Control__Request *q, reply *r)
{
	const mbr_stats *s = mbr_get_stats(a->mbr);
	const agent_counters *c = &a->cnt;
	char addr[64];
	mbr_addr_format(&a->adv, addr, sizeof addr);
	uint64_t wire_drops = 0, rc[6], tg[4];
	for (int i = 0; i < 8; i++) wire_drops += s->drop[i];
	agent_head_counters(a, rc);
	agent_tcp_gauges(a, tg);
	struct { const char *k; unsigned long long v; } ctr[] = {
		{ "udp_sent", c->udp_out }, { "udp_received", c->udp_in },
		{ "tcp_sent", c->tcp_out }, { "tcp_received", c->tcp_in },
		{ "bytes_sent", c->bytes_out }, { "bytes_received", c->bytes_in },
		{ "dropped_auth", c->drop_auth }, { "dropped_encrypted_without_key", c->drop_plain },
		{ "dropped_malformed", wire_drops }, { "dropped_not_for_us", s->drop_not_for_us },
		{ "dropped_unknown_seq", s->drop_unknown_seq }, { "dropped_name_conflict", s->drop_conflict },
		{ "dropped_oversize", c->drop_oversize }, { "dropped_send_error", c->drop_send },
		{ "dropped_debug_in", c->drop_debug_in }, { "dropped_debug_out", c->drop_debug_out },
		{ "tcp_timeouts", c->tcp_timeouts }, { "tcp_refused", c->tcp_refused },
		{ "tcp_in_open", tg[0] }, { "tcp_in_open_one_source", tg[3] }, { "tcp_out_open", tg[1] },
		{ "tcp_in_buffered_bytes", tg[2] },
		{ "tcp_in_shed_idle", c->tcp_in_shed_idle }, { "tcp_in_shed_busy", c->tcp_in_shed_busy },
		{ "tcp_in_dropped_budget", c->tcp_in_budget },
		{ "tcp_in_first_byte_timeouts", c->tcp_in_first_byte_timeouts },
		{ "tcp_in_idle_timeouts", c->tcp_in_idle_timeouts }, { "dropped_stream_type", c->drop_stream_type },
		{ "tcp_out_shed", c->tcp_out_shed }, { "tcp_accept_no_fd", c->tcp_accept_no_fd },
		{ "probes", s->probes }, { "probe_failures", s->probe_fails },
		{ "indirect_probes", s->indirect_probes }, { "tcp_pings", s->tcp_pings },
		{ "suspicions_raised", s->suspects_raised }, { "refutations", s->refutes },
		{ "failures_declared", s->dead_declared }, { "push_pulls", s->pushpulls },
		{ "time_jumps", s->time_jumps }, { "control_requests", c->ctl_requests },
		{ "control_rejected", c->ctl_rejected },
		{ "raft_sent", rc[0] }, { "raft_received", rc[1] }, { "raft_send_dropped", rc[2] },
		{ "raft_elections", rc[3] }, { "raft_lease_stepdowns", rc[4] }, { "raft_received_dropped", rc[5] },
	};
	size_t nctr = sizeof ctr / sizeof ctr[0];
	if (!strcmp(q->format, "json")) {
		sk_buf_printf(&r->body, "{\"name\":");
		sk_buf_json_str(&r->body, a->opts.name);
		sk_buf_printf(&r->body, ",\"addr\":\"%s\",\"rpc\":\"%s\",\"profile\":\"%s\",\"generation\":%llu,"
			      "\"incarnation\":%u,\"gpus\":%d,\"gpu_source\":",
			      addr, a->rpc_bound, a->opts.profile, (unsigned long long)a->generation,
			      0u, a->gpus);
		sk_buf_json_str(&r->body, a->gpu_source);
		sk_buf_printf(&r->body, ",\"encrypted\":%s,\"keys\":%d,\"members\":%zu,\"alive\":%zu,\"health\":%u,"
			      "\"uptime_ms\":%llu,\"counters\":{",
			      a->kr.n ? "true" : "false", a->kr.n, mbr_member_count(a->mbr),
			      mbr_count(a->mbr, MBR_ALIVE), mbr_health(a->mbr),
			      (unsigned long long)(agent_now_ms() - a->started_ms));
		for (size_t i = 0; i < nctr; i++)
			sk_buf_printf(&r->body, "%s\"%s\":%llu", i ? "," : "", ctr[i].k, ctr[i].v);
		sk_buf_printf(&r->body, "}}\n");
		return;
	}
	sk_buf_printf(&r->body,
		      "name: %s\naddress: %s\nrpc: %s\nprofile: %s\ngeneration: %llu\ngpus: %d (%s)\n"
		      "encrypted: %s (%d keys)\nmembers: %zu (%zu alive)\nhealth: %u\nuptime_ms: %llu\n",
		      a->opts.name, addr, a->rpc_bound, a->opts.profile, (unsigned long long)a->generation,
		      a->gpus, a->gpu_source, a->kr.n ? "yes" : "no", a->kr.n, mbr_member_count(a->mbr),
		      mbr_count(a->mbr, MBR_ALIVE), mbr_health(a->mbr),
		      (unsigned long long)(agent_now_ms() - a->started_ms));
	for (size_t i = 0; i < nctr; i++) sk_buf_printf(&r->body, "%s: %llu\n", ctr[i].k, ctr[i].v);
}

static void cmd_join(agent *a, const Skein__Control__Request *q, reply *r)
{
	if (q->n_args != 1) { fail(r, 2, "usage: skeinctl join HOST:PORT"); return; }
	mbr_addr seed;
	if (mbr_addr_parse(q->args[0], &seed) < 0) {
		fail(r, 2, "join: expected IP:PORT, got '%s'", q->args[0]);
		return;
	}
	mbr_join(a->mbr, agent_now_ms(), &seed);
	agent_pump(a);
	sk_buf_printf(&r->body, "join request sent to %s\n", q->args[0]);
}

static void cmd_health(agent *a, reply *r)
{
	size_t alive = mbr_count(a->mbr, MBR_ALIVE);
	bool lone_ok = a->opts.njoin == 0;
	if (a->leaving) { fail(r, 1, "unhealthy: leaving the cluster"); return; }
	if (alive < 2 && !lone_ok) {
		fail(r, 1, "unhealthy: no cluster yet (no other alive member; joining %d seed(s))", a->opts.njoin);
		return;
	}
	sk_buf_printf(&r->body, "ok: %zu alive members\n", alive);
}

static void cmd_keyring(agent *a, const Skein__Control__Request *q, reply *r)
{
	if (q->n_args < 1) { fail(r, 2, "usage: skeinctl keyring list|install KEY|use KEY|remove KEY"); return; }
	const char *op = q->args[0];
	char err[256], fp[FINGERPRINT_LEN + 1];
	if (!strcmp(op, "list")) {
		if (!strcmp(q->format, "json")) {
			sk_buf_printf(&r->body, "{\"node\":");
			sk_buf_json_str(&r->body, a->opts.name);
			sk_buf_printf(&r->body, ",\"keys\":[");
			for (int i = 0; i < a->kr.n; i++) {
				agent_key_fingerprint(&a->kr.keys[i], fp);
				sk_buf_printf(&r->body, "%s{\"fingerprint\":\"%s\",\"primary\":%s}", i ? "," : "", fp,
					      i == 0 ? "true" : "false");
			}
			sk_buf_printf(&r->body, "]}\n");
		} else {
			for (int i = 0; i < a->kr.n; i++) {
				agent_key_fingerprint(&a->kr.keys[i], fp);
				sk_buf_printf(&r->body, "%s %s%s\n", a->opts.name, fp, i == 0 ? " (primary)" : "");
			}
		}
		return;
	}
	if (q->n_args != 2) { fail(r, 2, "usage: skeinctl keyring %s KEY", op); return; }
	if (a->kr.n == 0) {
		fail(r, 1, "this agent runs without encryption: start it with --key-file to use a keyring");
		return;
	}
	agent_keyring next = a->kr;
	if (!strcmp(op, "install")) {
		agent_key k;
		if (agent_key_decode(q->args[1], &k, err, sizeof err) < 0) { fail(r, 2, "install: %s", err); return; }
		if (agent_keyring_add(&next, &k, err, sizeof err) < 0) { fail(r, 1, "install: %s", err); return; }
		agent_key_fingerprint(&k, fp);
	} else if (!strcmp(op, "use") || !strcmp(op, "remove")) {
		int idx = agent_keyring_find(&next, q->args[1]);
		if (idx < 0) { fail(r, 1, "%s: no such key in the keyring (give the key or its fingerprint)", op); return; }
		agent_key_fingerprint(&next.keys[idx], fp);
		if (!strcmp(op, "use")) agent_keyring_use(&next, idx);
		else if (agent_keyring_remove(&next, idx, err, sizeof err) < 0) { fail(r, 1, "remove: %s", err); return; }
	} else {
		fail(r, 2, "keyring: unknown operation '%s' (list, install, use, remove)", op);
		return;
	}
	agent_keyring prev = a->kr;
	a->kr = next;
	if (agent_save_keyring(a, err, sizeof err) < 0) {
		a->kr = prev;
		fail(r, 1, "keyring not changed: %s", err);
		return;
	}
	SK_INFO("agent", "keyring: %s %s (%d keys)", op, fp, a->kr.n);
	sk_buf_printf(&r->body, "%s %s %s\n", a->opts.name, op, fp);
}

static bool fence_ok(agent *a, uint64_t term, reply *r);

static void cmd_debug(agent *a, const Skein__Control__Request *q, reply *r)
{
	if (!a->opts.enable_debug) {
		fail(r, 1, "debug commands are off: start skeind with --enable-debug");
		return;
	}
	if (q->n_args == 2 && !strcmp(q->args[0], "order")) {
		/* An order as a head of that term would send it: tests the fence. */
		char *end;
		unsigned long long t = strtoull(q->args[1], &end, 10);
		if (*end || t == 0) { fail(r, 2, "debug order: expected a term above 0"); return; }
		if (fence_ok(a, t, r)) sk_buf_printf(&r->body, "order accepted at term %llu\n", t);
		return;
	}
	if (q->n_args < 1 || strcmp(q->args[0], "drop") != 0) {
		fail(r, 2, "usage: skeinctl debug drop --in P --out P | debug order TERM");
		return;
	}
	double in = a->drop_in, out = a->drop_out;
	for (size_t i = 1; i < q->n_args; i++) {
		double *dst = !strcmp(q->args[i], "--in") ? &in : !strcmp(q->args[i], "--out") ? &out : NULL;
		if (!dst || i + 1 >= q->n_args) { fail(r, 2, "debug drop: expected --in P and/or --out P"); return; }
		char *end;
		double v = strtod(q->args[++i], &end);
		if (*end || end == q->args[i] || v < 0 || v > 1) {
			fail(r, 2, "debug drop: %s wants a fraction between 0 and 1, got '%s'", q->args[i - 1], q->args[i]);
			return;
		}
		*dst = v;
	}
	a->drop_in = in;
	a->drop_out = out;
	SK_WARN("agent", "debug: dropping %.3f of incoming and %.3f of outgoing gossip datagrams", in, out);
	sk_buf_printf(&r->body, "dropping in=%.3f out=%.3f\n", in, out);
}

/* An order carries the term of the head that gave it: refuse one from an
 * older head than the newest we have seen (fencing). */
static bool fence_ok(agent *a, uint64_t term, reply *r)
{
	if (term == 0) return true;
	char head[MBR_NAME_MAX + 1];
	uint64_t known;
	agent_head_known(a, head, sizeof head, &known, NULL, 0); /* raises fence_newest */
	if (term < a->fence_newest) {
		fail(r, 1, "stale order: term %llu is older than the newest head term seen (%llu)",
		     (unsigned long long)term, (unsigned long long)a->fence_newest);
		return false;
	}
	a->fence_newest = term;
	return true;
}

static void dispatch(agent *a, const Skein__Control__Request *q, const agent_client *c, reply *r)
{
	const char *cmd = q->cmd;
	if (c->remote && !(!strcmp(cmd, "raft") || !strcmp(cmd, "head") || !strcmp(cmd, "state") ||
			   !strcmp(cmd, "voters") || !strcmp(cmd, "keyring") || !strcmp(cmd, "peers") ||
			   !strcmp(cmd, "members") || !strcmp(cmd, "info") || !strcmp(cmd, "health") ||
			   !strcmp(cmd, "job") || !strcmp(cmd, "placement") || !strcmp(cmd, "assign") ||
			   !strcmp(cmd, "report") || !strcmp(cmd, "logs"))) {
		fail(r, 1, "'%s' is only served on the local control endpoint (--rpc)", cmd);
		return;
	}
	if (!fence_ok(a, q->term, r)) return;
	if (agent_head_dispatch(a, q, c, r)) return;
	if (agent_jobs_dispatch(a, q, c, r)) return;
	if (!strcmp(cmd, "members")) cmd_members(a, q, r);
	else if (!strcmp(cmd, "peers")) cmd_peers(a, r);
	else if (!strcmp(cmd, "info")) cmd_info(a, q, r);
	else if (!strcmp(cmd, "join")) cmd_join(a, q, r);
	else if (!strcmp(cmd, "leave")) {
		agent_start_leave(a);
		sk_buf_printf(&r->body, "leaving the cluster\n");
	} else if (!strcmp(cmd, "health")) cmd_health(a, r);
	else if (!strcmp(cmd, "keyring")) cmd_keyring(a, q, r);
	else if (!strcmp(cmd, "debug")) cmd_debug(a, q, r);
	else fail(r, 2, "unknown command '%s'", cmd);
}

/* ---- the socket ---- */

void agent_ctl_send(agent *a, const agent_client *c, int code, const char *error, const char *body)
{
	Skein__Control__Response resp = SKEIN__CONTROL__RESPONSE__INIT;
	resp.code = code;
	resp.error = (char *)(error ? error : "");
	resp.body = (char *)(body ? body : "");
	size_t n = skein__control__response__get_packed_size(&resp);
	uint8_t *buf = malloc(n + CRYPTO_OVERHEAD);
	if (!buf) return;
	skein__control__response__pack(&resp, buf);
	size_t len = n;
	if (c->sealed && agent_seal_replace(&c->key, AGENT_RPC_AAD_RESP, &buf, &len) < 0) return;
	void *sock = c->sock ? c->sock : a->zrouter;
	zmq_send(sock, c->id, c->idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(sock, buf, len, ZMQ_DONTWAIT);
	free(buf);
}

static void handle_one(agent *a, agent_client *c, const uint8_t *data, size_t n)
{
	reply r = { 0 };
	sk_buf_init(&r.body);
	a->cnt.ctl_requests++;
	uint8_t *plain = NULL;
	const uint8_t *msg = data;
	size_t mlen = n;
	bool sealed = n > 0 && data[0] == CRYPTO_VERSION;
	c->sealed = false;
	if (a->kr.n && !sealed) {
		a->cnt.ctl_rejected++;
		fail(&r, 1, "this agent requires the cluster key: set SKEIN_KEY_FILE or pass --key-file");
		goto answer;
	}
	if (!a->kr.n && sealed) {
		a->cnt.ctl_rejected++;
		fail(&r, 1, "this agent runs without encryption: run skeinctl without a key");
		goto answer;
	}
	if (sealed) {
		int ki;
		plain = malloc(n);
		if (!plain || (ki = agent_open(&a->kr, AGENT_RPC_AAD_REQ, data, n, plain, &mlen)) < 0) {
			a->cnt.ctl_rejected++;
			fail(&r, 1, "request did not authenticate: wrong key");
			goto answer;
		}
		/* the answer goes back under the key the request came with */
		c->sealed = true;
		c->key = a->kr.keys[ki];
		msg = plain;
	}
	Skein__Control__Request *q = skein__control__request__unpack(NULL, mlen, msg);
	if (!q) {
		a->cnt.ctl_rejected++;
		fail(&r, 1, "malformed control request");
		goto answer;
	}
	dispatch(a, q, c, &r);
	skein__control__request__free_unpacked(q, NULL);
	if (r.body.oom) fail(&r, 1, "out of memory");
answer:
	if (!r.deferred) agent_ctl_send(a, c, r.code, r.error, sk_buf_str(&r.body));
	free(plain);
	sk_buf_free(&r.body);
}

/* The biggest request taken: a Raft AppendEntries or a snapshot of the
 * cluster state rides in one.  ZeroMQ drops a peer that sends more. */
enum { CTL_MSG_MAX = 64 << 20 };

/* Reads every whole request waiting on one socket (ZMQ_FD is
 * edge-triggered: drain until ZMQ_EVENTS says nothing is left). */
static void drain(agent *a, void *sock, bool remote)
{
	for (;;) {
		int ev = 0;
		size_t sz = sizeof ev;
		if (zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN)) return;
		zmq_msg_t id, part;
		zmq_msg_init(&id);
		if (zmq_msg_recv(&id, sock, ZMQ_DONTWAIT) < 0) { zmq_msg_close(&id); return; }
		/* [identity][empty][payload]; anything else is dropped whole */
		uint8_t *payload = NULL;
		size_t plen = 0;
		int frames = 0;
		bool more = zmq_msg_more(&id);
		while (more) {
			zmq_msg_init(&part);
			if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) { zmq_msg_close(&part); break; }
			frames++;
			if (frames == 2 && zmq_msg_size(&part) > 0 && zmq_msg_size(&part) <= CTL_MSG_MAX) {
				plen = zmq_msg_size(&part);
				payload = malloc(plen);
				if (payload) memcpy(payload, zmq_msg_data(&part), plen);
			}
			more = zmq_msg_more(&part);
			zmq_msg_close(&part);
		}
		if (frames == 2 && payload && zmq_msg_size(&id) <= sizeof(((agent_client *)0)->id)) {
			agent_client c = { .idlen = zmq_msg_size(&id), .sock = sock, .remote = remote };
			memcpy(c.id, zmq_msg_data(&id), c.idlen);
			handle_one(a, &c, payload, plen);
		} else {
			a->cnt.ctl_rejected++;
		}
		free(payload);
		zmq_msg_close(&id);
	}
}

static void zmq_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent *a = w->data;
	(void)loop; (void)revents;
	drain(a, w == &a->zmq_w ? a->zrouter : a->zcluster, w != &a->zmq_w);
}

static void *router_open(agent *a, const char *addr, ev_io *w, char *err, size_t errlen)
{
	void *s = zmq_socket(a->zctx, ZMQ_ROUTER);
	if (!s) {
		snprintf(err, errlen, "cannot create a control socket: %s", zmq_strerror(zmq_errno()));
		return NULL;
	}
	int zero = 0;
	int64_t maxsz = CTL_MSG_MAX;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
	char ep[300];
	snprintf(ep, sizeof ep, "tcp://%s", addr);
	if (zmq_bind(s, ep) != 0) {
		snprintf(err, errlen, "cannot bind the control endpoint %s: %s", addr, zmq_strerror(zmq_errno()));
		zmq_close(s);
		return NULL;
	}
	int fd;
	size_t sz = sizeof fd;
	zmq_getsockopt(s, ZMQ_FD, &fd, &sz);
	ev_io_init(w, zmq_cb, fd, EV_READ);
	w->data = a;
	ev_io_start(a->loop, w);
	return s;
}

static bool is_loopback(const mbr_addr *x)
{
	return (x->len == 4 && x->ip[0] == 127) ||
	       (x->len == 16 && !memcmp(x->ip, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16));
}

/* Binds --rpc for skeinctl.  When that is a loopback address and the agent
 * gossips on another one, a second endpoint on the gossip IP, same port,
 * serves other agents (Raft between voters, requests forwarded to the head,
 * cluster-wide keyring changes); it refuses local-only commands. */
int agent_ctl_open(agent *a, char *err, size_t errlen)
{
	a->zctx = zmq_ctx_new();
	if (!a->zctx) {
		snprintf(err, errlen, "cannot create the ZeroMQ context");
		return -1;
	}
	a->zrouter = router_open(a, a->opts.rpc, &a->zmq_w, err, errlen);
	if (!a->zrouter) return -1;
	mbr_addr rpc;
	mbr_addr_parse(a->opts.rpc, &rpc);
	snprintf(a->rpc_bound, sizeof a->rpc_bound, "%s", a->opts.rpc);
	snprintf(a->rpc_advertised, sizeof a->rpc_advertised, "%s", a->opts.rpc);
	bool any = (rpc.len == 4 && !memcmp(rpc.ip, "\0\0\0\0", 4));
	if (any || (is_loopback(&rpc) && !is_loopback(&a->adv))) {
		mbr_addr c = a->adv;
		c.port = rpc.port;
		mbr_addr_format(&c, a->rpc_advertised, sizeof a->rpc_advertised);
	}
	if (!any && is_loopback(&rpc) && !is_loopback(&a->adv)) {
		a->zcluster = router_open(a, a->rpc_advertised, &a->zcluster_w, err, errlen);
		if (!a->zcluster) return -1;
	}
	drain(a, a->zrouter, false);
	if (a->zcluster) drain(a, a->zcluster, true);
	return 0;
}

void agent_ctl_close(agent *a)
{
	if (a->zcluster) {
		ev_io_stop(a->loop, &a->zcluster_w);
		zmq_close(a->zcluster);
		a->zcluster = NULL;
	}
	if (a->zrouter) {
		ev_io_stop(a->loop, &a->zmq_w);
		zmq_close(a->zrouter);
		a->zrouter = NULL;
	}
	if (a->zctx) {
		zmq_ctx_term(a->zctx);
		a->zctx = NULL;
	}
}
