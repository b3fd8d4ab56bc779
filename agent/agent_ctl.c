/* agent/agent_ctl: the control endpoints and the node's own commands.
 *
 * Two endpoints share one transport (agent_wire.c): the Unix socket
 * (--control-socket, 0600 or 0660 with --operator-group; the peer's uid and
 * groups checked with SO_PEERCRED) for operators on this node, and TCP
 * (--rpc) for other agents and remote operators.  Every request is
 * authenticated first (handle_one: which key sealed it, its recipient,
 * time and nonce), then its command checked against the role that gives
 * (agent_auth.h), and only then decoded further or dispatched.  A refusal
 * is answered in plaintext with a one-line reason, so the CLI can show it,
 * and counted in `info`.  docs/security.md has the whole model. */
#include "agent/agent.h"
#include "agent/agent_update.h"

#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_rpc.h"
#include "common/sk_glob.h"
#include "common/sk_time.h"
#include "common/sk_text.h"
#include "common/sk_buf.h"
#include "common/sk_file.h"
#include "common/sk_log.h"
#include "proto/control.pb-c.h"
#include "jobs/job_model.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "proto/gossip.pb-c.h"

#define fail agent_reply_fail
typedef agent_reply reply;

enum { CTL_PAYLOAD_MAX = 2 << 20 }; /* a job spec, an order, a report: Raft alone rides bigger */

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
	/* globs, not regcomp: a client's pattern must cost the agent little
	 * (common/sk_glob.h says why) */
	const char *st_pat = NULL, *tag_pat = NULL;
	char why[96];
	char tag_key[128] = "";
	for (size_t i = 0; i < q->n_args; i++) {
		const char *arg = q->args[i];
		const char *val = i + 1 < q->n_args ? q->args[i + 1] : NULL;
		if (!strcmp(arg, "--status") && val && !st_pat) {
			if (sk_glob_check(val, why, sizeof why) != 0) {
				fail(r, 2, "--status: bad pattern (a glob: * ? [a-z]): %s", why);
				return;
			}
			st_pat = val;
			i++;
		} else if (!strcmp(arg, "--tag") && val && !tag_pat) {
			const char *eq = strchr(val, '=');
			if (!eq || eq == val || (size_t)(eq - val) >= sizeof tag_key) {
				fail(r, 2, "--tag: expected KEY=GLOB, got '%.*s'", 128, val);
				return;
			}
			memcpy(tag_key, val, (size_t)(eq - val));
			tag_key[eq - val] = 0;
			if (sk_glob_check(eq + 1, why, sizeof why) != 0) {
				fail(r, 2, "--tag: bad pattern (a glob: * ? [a-z]): %s", why);
				return;
			}
			tag_pat = eq + 1;
			i++;
		} else {
			fail(r, 2, "members: unknown argument '%s'", arg);
			return;
		}
	}
	size_t n = mbr_members(a->mbr, NULL, 0);
	mbr_member_info *mi = calloc(n, sizeof *mi);
	if (!mi) { fail(r, 1, "out of memory"); return; }
	mbr_members(a->mbr, mi, n);
	qsort(mi, n, sizeof *mi, by_name);
	bool json = !strcmp(q->format, "json");
	if (json) sk_buf_printf(&r->body, "{\"members\":[");
	else sk_buf_printf(&r->body, "%-24s %-22s %-8s %-5s %-8s %s\n", "NAME", "ADDRESS", "STATUS", "GPUS", "DRAIN", "TAGS");
	int shown = 0;
	for (size_t i = 0; i < n; i++) {
		const char *st = mbr_status_str(mi[i].status);
		if (st_pat && !sk_glob_match(st_pat, st)) continue;
		meta_view mv;
		meta_read(&mi[i], &mv);
		if (tag_pat) {
			bool match = false;
			for (size_t t = 0; mv.pb && t < mv.pb->n_tags; t++)
				if (!strcmp(mv.pb->tags[t]->key, tag_key) &&
				    sk_glob_match(tag_pat, mv.pb->tags[t]->value))
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
			sk_buf_printf(&r->body, "},\"generation\":%llu,\"incarnation\":%u,\"drained\":%s}",
				      (unsigned long long)mi[i].generation, mi[i].incarnation,
				      agent_jobs_drained(a, mi[i].name) ? "true" : "false");
		} else {
			/* names and tags come from other agents: escaped, never raw */
			sk_buf tags;
			sk_buf_init(&tags);
			for (size_t t = 0; mv.pb && t < mv.pb->n_tags; t++) {
				if (t) sk_buf_add(&tags, ",", 1);
				sk_buf_text(&tags, mv.pb->tags[t]->key);
				sk_buf_add(&tags, "=", 1);
				sk_buf_text(&tags, mv.pb->tags[t]->value);
			}
			char name[4 * MBR_NAME_MAX + 1];
			sk_buf_printf(&r->body, "%-24s %-22s %-8s %-5u %-8s %s\n",
				      sk_text_escape(mi[i].name, name, sizeof name), addr, st, mv.gpus,
				      agent_jobs_drained(a, mi[i].name) ? "drained" : "-", sk_buf_str(&tags));
			sk_buf_free(&tags);
		}
		shown++;
		meta_done(&mv);
	}
	if (json) sk_buf_printf(&r->body, "]}\n");
	free(mi);
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

/* Disk folders others can write (issue 23 item 2): this node's latest note
 * on its members' folder, and on the head every active job's folder as it
 * looks from here.  JSON: ,"disk_warnings":[...]. */
static void info_disk_warnings(agent *a, reply *r, bool json)
{
	const char *note = agent_jobs_disk_note(a);
	const job_state *js = agent_head_jobs(a);
	if (json) sk_buf_printf(&r->body, ",\"disk_warnings\":[");
	bool any = false;
	for (size_t i = 0; i <= (js ? job_state_count(js) : 0); i++) {
		char w[400] = "";
		if (i == 0) {
			snprintf(w, sizeof w, "%s", note);
		} else {
			const job_rec *j = job_state_at(js, i - 1);
			bool refused;
			const char *dw = job_rec_active(j) ? agent_jobs_disk_judge(a, j->spec.disk_dir, &refused) : "";
			if (!dw[0]) continue;
			snprintf(w, sizeof w, "job %s: %s", j->spec.name, dw);
			if (!strcmp(w, note)) continue; /* said already */
		}
		if (!w[0]) continue;
		if (json) {
			if (any) sk_buf_add(&r->body, ",", 1);
			sk_buf_json_str(&r->body, w);
		} else {
			sk_buf_printf(&r->body, "WARNING: ");
			sk_buf_text(&r->body, w);
			sk_buf_add(&r->body, "\n", 1);
		}
		any = true;
	}
	if (json) sk_buf_add(&r->body, "]", 1);
}

static void cmd_info(agent *a, const Skein__Control__Request *q, reply *r)
{
	const mbr_stats *s = mbr_get_stats(a->mbr);
	const agent_counters *c = &a->cnt;
	const agent_wire_stats *ws = agent_wire_get_stats(a->wire);
	char addr[64];
	mbr_addr_format(&a->adv, addr, sizeof addr);
	uint64_t wire_drops = 0, rc[6], tg[4];
	for (int i = 0; i < WIRE_ERR__COUNT; i++) wire_drops += s->drop[i];
	agent_head_counters(a, rc);
	agent_tcp_gauges(a, tg);
	struct { const char *k; unsigned long long v; } ctr[] = {
		{ "udp_sent", c->udp_out }, { "udp_received", c->udp_in },
		{ "tcp_sent", c->tcp_out }, { "tcp_received", c->tcp_in },
		{ "bytes_sent", c->bytes_out }, { "bytes_received", c->bytes_in },
		{ "dropped_auth", c->drop_auth }, { "dropped_encrypted_without_key", c->drop_plain },
		{ "dropped_keyless", c->drop_keyless },
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
		{ "control_rejected", c->ctl_rejected }, { "control_auth_failed", c->ctl_auth_failed },
		{ "update_participant_passes", c->wv_passes },
		{ "control_refused_role", c->ctl_refused_role }, { "control_refused_replay", c->ctl_refused_replay },
		{ "control_refused_clock_skew", c->ctl_refused_skew },
		{ "control_refused_recipient", c->ctl_refused_recipient },
		{ "control_refused_order", c->ctl_refused_order },
		{ "control_connections", (unsigned long long)agent_wire_count(a->wire, false) },
		{ "control_connections_untrusted", (unsigned long long)agent_wire_count(a->wire, true) },
		{ "control_accepted", ws->accepted }, { "control_shed_idle", ws->shed_idle },
		{ "control_shed_bytes", ws->shed_bytes }, { "control_refused_cap", ws->refused_cap },
		{ "control_timeouts", ws->timeouts }, { "control_oversize", ws->oversize },
		{ "control_fd_exhausted", ws->emfile },
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
		sk_buf_printf(&r->body, ",\"members_in\":\"%s\",\"control_socket\":", a->members_in ? a->members_in : "none");
		sk_buf_json_str(&r->body, a->control_socket);
		sk_buf_printf(&r->body, ",\"insecure\":%s,\"operator_keys\":%d,\"operator_read_keys\":%d",
			      a->opts.insecure ? "true" : "false", a->op_rw.n, a->op_ro.n);
		info_disk_warnings(a, r, true);
		sk_buf_printf(&r->body, ",\"encrypted\":%s,\"keys\":%d,\"members\":%zu,\"alive\":%zu,\"health\":%u,"
			      "\"uptime_ms\":%llu,\"counters\":{",
			      a->kr.n ? "true" : "false", a->kr.n, mbr_member_count(a->mbr),
			      mbr_count(a->mbr, MBR_ALIVE), mbr_health(a->mbr),
			      (unsigned long long)(sk_mono_ms() - a->started_ms));
		for (size_t i = 0; i < nctr; i++)
			sk_buf_printf(&r->body, "%s\"%s\":%llu", i ? "," : "", ctr[i].k, ctr[i].v);
		sk_buf_printf(&r->body, "}}\n");
		return;
	}
	if (a->opts.insecure)
		sk_buf_printf(&r->body, "WARNING: --insecure: anyone who reaches %s may run any command\n", a->rpc_bound);
	info_disk_warnings(a, r, false);
	sk_buf_printf(&r->body, "control socket: %s\noperator keys: %d (%d read-only)\nmembers in: %s\n", a->control_socket,
		      a->op_rw.n + a->op_ro.n, a->op_ro.n, a->members_in ? a->members_in : "none");
	sk_buf_printf(&r->body,
		      "name: %s\naddress: %s\nrpc: %s\nprofile: %s\ngeneration: %llu\ngpus: %d (%s)\n"
		      "encrypted: %s (%d keys)\nmembers: %zu (%zu alive)\nhealth: %u\nuptime_ms: %llu\n",
		      a->opts.name, addr, a->rpc_bound, a->opts.profile, (unsigned long long)a->generation,
		      a->gpus, a->gpu_source, a->kr.n ? "yes" : "no", a->kr.n, mbr_member_count(a->mbr),
		      mbr_count(a->mbr, MBR_ALIVE), mbr_health(a->mbr),
		      (unsigned long long)(sk_mono_ms() - a->started_ms));
	for (size_t i = 0; i < nctr; i++) sk_buf_printf(&r->body, "%s: %llu\n", ctr[i].k, ctr[i].v);
}

static void cmd_join(agent *a, const Skein__Control__Request *q, reply *r)
{
	if (q->n_args != 1) { fail(r, 2, "usage: skeinctl join HOST:PORT"); return; }
	if (agent_keyless_closed(a)) {
		fail(r, 1, "join: this agent has no key: it gossips with nobody in plaintext (give it --key-file; "
			   "--insecure allows it for tests on one machine)");
		return;
	}
	mbr_addr seed;
	if (mbr_addr_parse(q->args[0], &seed) < 0) {
		fail(r, 2, "join: expected IP:PORT, got '%s'", q->args[0]);
		return;
	}
	mbr_join(a->mbr, sk_mono_ms(), &seed);
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

static void cmd_debug(agent *a, const Skein__Control__Request *q, reply *r)
{
	if (!a->opts.enable_debug) {
		fail(r, 1, "debug commands are off: start skeind with --enable-debug");
		return;
	}
	if ((q->n_args == 2 || q->n_args == 3) && !strcmp(q->args[0], "order")) {
		/* An order as a head of that term would send it (from FROM, by default
		 * the head known here), through the fence a real one meets. */
		char *end, head[MBR_NAME_MAX + 1], why[300];
		uint64_t known;
		unsigned long long t = strtoull(q->args[1], &end, 10);
		if (*end || t == 0) { fail(r, 2, "debug order: expected a term above 0"); return; }
		agent_head_known(a, head, sizeof head, &known, NULL, 0);
		const char *from = q->n_args == 3 ? q->args[2] : head;
		if (!agent_head_order_ok(a, from, t, why, sizeof why)) fail(r, 1, "%s", why);
		else sk_buf_printf(&r->body, "order accepted at term %llu\n", t);
		return;
	}
	if (q->n_args == 2 && !strcmp(q->args[0], "clock-step")) {
		/* what an NTP step does to this process's wall clock: nothing that
		 * times anything may notice (common/sk_time.h) */
		char *end;
		long long secs = strtoll(q->args[1], &end, 10);
		if (*end || end == q->args[1] || secs < -86400 * 365 || secs > 86400 * 365) {
			fail(r, 2, "debug clock-step: expected seconds (+-1 year), got '%s'", q->args[1]);
			return;
		}
		sk_time_step_wall(secs * 1000);
		SK_WARN("agent", "debug: wall clock stepped by %lld s", secs);
		sk_buf_printf(&r->body, "wall clock stepped by %lld s\n", secs);
		return;
	}
	if (q->n_args < 1 || strcmp(q->args[0], "drop") != 0) {
		fail(r, 2, "usage: skeinctl debug drop --in P --out P | debug order TERM [FROM] | debug clock-step SECONDS");
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

static void dispatch(agent *a, const Skein__Control__Request *q, const agent_client *c, reply *r)
{
	const char *cmd = q->cmd;
	if (agent_head_dispatch(a, q, c, r)) return;
	if (agent_jobs_dispatch(a, q, c, r)) return;
	if (agent_update_dispatch(a, q, c, r)) return;
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

/* ---- forwards that follow the head ---- */

/* We became the head while a request waited on the old one: serve it here.
 * Its client is answered by the handler (now or once committed). */
static void take_over(agent *a, uint8_t *req, size_t len, const agent_client *c)
{
	Skein__Control__Request *q = skein__control__request__unpack(NULL, len, req);
	free(req);
	if (!q) return;
	reply r = { 0 };
	sk_buf_init(&r.body);
	dispatch(a, q, c, &r);
	if (!r.deferred) agent_ctl_send(a, c, r.code, r.error, sk_buf_str(&r.body));
	sk_buf_free(&r.body);
	skein__control__request__free_unpacked(q, NULL);
}

/* Every 100 ms: a forward waiting on a head that is no longer the head (it
 * died, or lost an election) is sent again to the new one (agent_peer.c),
 * or served here when the new head is us: a client's write does not wait
 * for a timeout to learn of a failover. */
static void follow_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	char head[MBR_NAME_MAX + 1], rpc[64];
	uint64_t term;
	(void)loop; (void)revents;
	if (!a->head) return;
	agent_head_known(a, head, sizeof head, &term, rpc, sizeof rpc);
	if (!head[0] || !rpc[0]) return;
	if (strcmp(head, a->opts.name)) {
		agent_peer_follow(a, head, rpc);
		return;
	}
	if (!agent_head_is_head(a)) return;
	uint8_t *req;
	size_t len;
	agent_client c;
	/* bounded by the forwards there are now: a handler cannot add to them
	 * (the head forwards to no head), but the loop need not trust that */
	for (int n = agent_peer_forwards(a); n > 0 && agent_peer_take(a, head, &req, &len, &c); n--)
		take_over(a, req, len, &c);
}

/* ---- authentication (agent_auth.h, docs/security.md) ---- */

/* May this peer of the Unix socket steer the agent?  root, our own user,
 * and members of --operator-group (the socket's mode says the same; this
 * holds even if someone loosened the mode). */
static bool local_allowed(agent *a, const agent_wire_peer *p)
{
	if (!p->cred) return false;
	if (p->uid == 0 || p->uid == geteuid()) return true;
	if (a->operator_gid == (gid_t)-1) return false;
	if (p->gid == a->operator_gid) return true;
	for (int i = 0; i < p->ngroups; i++)
		if (p->groups[i] == a->operator_gid) return true;
	return false;
}

/* Tries the cluster keyring, then the operator keys; sets the role and the
 * key the answer goes back under.  -1 when no key opens it. */
static int open_sealed(agent *a, agent_client *c, const uint8_t *data, size_t n, uint8_t *plain, size_t *mlen)
{
	struct { const agent_keyring *kr; const char *aad; agent_role role; bool op; } tries[] = {
		{ &a->kr, AGENT_RPC_AAD_REQ, ROLE_AGENT, false },
		{ &a->op_rw, AGENT_RPC_AAD_OP_REQ, ROLE_WRITE, true },
		{ &a->op_ro, AGENT_RPC_AAD_OP_REQ, ROLE_READ, true },
	};
	for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
		if (!tries[i].kr->n) continue;
		int ki = agent_open(tries[i].kr, tries[i].aad, data, n, plain, mlen);
		if (ki < 0) continue;
		c->role = tries[i].role;
		c->key = tries[i].kr->keys[ki];
		c->operator_key = tries[i].op;
		c->sealed = true;
		return 0;
	}
	return -1;
}

/* A request names its recipient: this agent's name, or the address the
 * client reached it at (what this end of the connection is bound to, so
 * 0.0.0.0 and several addresses work), or its Unix socket. */
static bool for_us(agent *a, const agent_wire_peer *p, const char *to)
{
	if (!to[0]) return false;
	if (!strcmp(to, a->opts.name) || !strcmp(to, a->rpc_advertised)) return true;
	if (p->transport == WIRE_TCP) return p->local[0] && !strcmp(to, p->local);
	return !strncmp(to, "unix:", 5); /* the kernel says the peer is on this node */
}

/* ---- replay across restarts ----
 *
 * The replay cache lives in memory, so a restarted agent has forgotten the
 * nonces it took.  What it cannot have taken is a request stamped after
 * its start: the floor refuses every stamp before max(start, saved bound).
 * A request the previous run took was stamped either before it arrived
 * (so before this start) or ahead of that run's clock (a client's clock up
 * to the window ahead): for those, the bound on ahead stamps is persisted
 * in the data dir before they are taken, REPLAY_SAVE_AHEAD_MS beyond the
 * stamp, so a client ahead of us costs a write a second at most (and,
 * after a restart, requests stamped before that bound are refused: a second
 * at most beyond how far ahead that client was, which NTP keeps small).
 * Assumes this agent's own clock does not step back across its restart. */
enum { REPLAY_SAVE_AHEAD_MS = 1000 };
#define REPLAY_FLOOR_FILE "replay-floor"

static void replay_floor_load(agent *a)
{
	a->replay_floor_ms = sk_wall_ms();
	a->replay_saved_ms = 0;
	if (!a->opts.data_dir[0]) return;
	char path[600];
	snprintf(path, sizeof path, "%s/%s", a->opts.data_dir, REPLAY_FLOOR_FILE);
	FILE *f = fopen(path, "re");
	if (!f) return;
	unsigned long long v;
	if (fscanf(f, "%llu", &v) == 1) {
		/* no stamp the previous run took lies further ahead than this,
		 * unless our clock stepped back: then do not lock everyone out */
		uint64_t most = a->replay_floor_ms + AUTH_WINDOW_MS + REPLAY_SAVE_AHEAD_MS;
		if (v > most) {
			SK_WARN("agent", "%s: %.0f s ahead of this clock (did it step back?): taken as %d s", path,
				(double)(v - a->replay_floor_ms) / 1000.0, (AUTH_WINDOW_MS + REPLAY_SAVE_AHEAD_MS) / 1000);
			v = most;
		}
		a->replay_saved_ms = v;
		if (v > a->replay_floor_ms) a->replay_floor_ms = v;
	} else {
		SK_WARN("agent", "%s: unreadable, ignored (requests stamped before this start are refused anyway)", path);
	}
	fclose(f);
}

/* Before a request stamped `t` ahead of our clock is taken: -1 when its
 * bound cannot be made durable (then it is refused). */
static int replay_floor_save(agent *a, uint64_t t, uint64_t now)
{
	if (t <= now || t < a->replay_saved_ms || !a->opts.data_dir[0]) return 0;
	uint64_t v = t + REPLAY_SAVE_AHEAD_MS;
	char buf[32], err[256];
	int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)v);
	if (sk_file_write_atomic(a->opts.data_dir, REPLAY_FLOOR_FILE, buf, (size_t)n, 0600, true, err, sizeof err) < 0) {
		SK_WARN("agent", "replay bound not saved: %s", err);
		return -1;
	}
	a->replay_saved_ms = v;
	return 0;
}

/* The sealed envelope: addressed to us, fresh, never seen.  false with r
 * filled (and counted) otherwise. */
static bool envelope_ok(agent *a, const agent_wire_peer *p, const Skein__Control__Request *q, reply *r)
{
	uint64_t now = sk_wall_ms();
	if (q->nonce.len != AUTH_NONCE) {
		a->cnt.ctl_rejected++;
		fail(r, 1, "request without a nonce (a skeinctl older than this agent?)");
		return false;
	}
	int64_t skew = (int64_t)(q->time_ms - now);
	if (skew > AUTH_WINDOW_MS || skew < -AUTH_WINDOW_MS) {
		a->cnt.ctl_refused_skew++;
		fail(r, 1, "request time is %+.1f s off this agent's clock, outside the %d s window: check the clocks (NTP)",
		     (double)skew / 1000.0, AUTH_WINDOW_MS / 1000);
		return false;
	}
	if (!for_us(a, p, q->recipient)) {
		a->cnt.ctl_refused_recipient++;
		fail(r, 1, "request addressed to '%s', not to this agent (%s at %s)", q->recipient, a->opts.name,
		     a->rpc_advertised);
		return false;
	}
	/* Raft alone skips the cache: it is built for duplicated and reordered
	 * messages, and its rate would fill the cache for nothing. */
	if (strcmp(q->cmd, "raft") != 0) {
		if (q->time_ms < a->replay_floor_ms) {
			a->cnt.ctl_refused_replay++;
			fail(r, 1, "request stamped %.1f s before this agent's (re)start: a replay of an older request, "
				   "or this client's clock is behind (check NTP, then retry)",
			     (double)(a->replay_floor_ms - q->time_ms) / 1000.0);
			return false;
		}
		if (replay_floor_save(a, q->time_ms, now) < 0) {
			a->cnt.ctl_refused_replay++;
			fail(r, 1, "this agent cannot save its replay bound in its data dir (disk full?): request refused");
			return false;
		}
		int rc = agent_replay_check(a->replay, q->nonce.data, now, q->time_ms + AUTH_WINDOW_MS);
		if (rc != 0) {
			a->cnt.ctl_refused_replay++;
			fail(r, 1, rc > 0 ? "replayed request: its nonce was seen in the last %d s"
					  : "too many requests in the last %d s to remember them all: retry",
			     AUTH_WINDOW_MS / 1000);
			return false;
		}
	}
	return true;
}

static const char *needs_what(agent_role need)
{
	return need == ROLE_AGENT ? "is for agents only (the cluster key)"
	       : need == ROLE_WRITE ? "changes the cluster: it needs an operator key (--operator-key-file), the "
				      "cluster key, or this node's control socket"
				    : "needs a read key (--operator-read-key-file) or better, or this node's control socket";
}

static void handle_one(agent *a, agent_wire_id id, const agent_wire_peer *p, uint8_t *data, size_t n)
{
	reply r = { 0 };
	sk_buf_init(&r.body);
	agent_client c = { .conn = id, .remote = p->transport == WIRE_TCP, .pid = p->cred ? (int)p->pid : 0 };
	a->cnt.ctl_requests++;
	uint8_t *plain = NULL;
	const uint8_t *msg = data;
	size_t mlen = n;
	bool sealed = n > 0 && data[0] == CRYPTO_VERSION;
	Skein__Control__Request *q = NULL;
	if (!c.remote && !local_allowed(a, p)) {
		a->cnt.ctl_auth_failed++;
		fail(&r, 1, "uid %u may not use this control socket (root, skeind's user and --operator-group may)",
		     (unsigned)p->uid);
		goto answer;
	}
	if (sealed) {
		plain = malloc(n);
		if (!plain || open_sealed(a, &c, data, n, plain, &mlen) < 0) {
			a->cnt.ctl_auth_failed++;
			fail(&r, 1, "request did not authenticate: wrong key (neither the cluster key nor an operator key "
				    "of this agent)");
			goto answer;
		}
		msg = plain;
	}
	q = skein__control__request__unpack(NULL, mlen, msg);
	if (!q) {
		a->cnt.ctl_rejected++;
		fail(&r, 1, "malformed control request");
		goto answer;
	}
	if (q->nonce.len == AUTH_NONCE) {
		c.has_nonce = true;
		memcpy(c.nonce, q->nonce.data, AUTH_NONCE);
	}
	if (q->oneway) c.conn = 0; /* nobody reads an answer */
	if (sealed) {
		if (!envelope_ok(a, p, q, &r)) goto answer;
		if (c.role == ROLE_AGENT) snprintf(c.sender, sizeof c.sender, "%s", q->sender);
		if (!c.remote && c.role < ROLE_WRITE) c.role = ROLE_WRITE;
	} else if (!c.remote) {
		c.role = ROLE_WRITE;
	} else if (a->opts.insecure) {
		c.role = ROLE_AGENT;
	} else if (a->kr.n || a->op_rw.n || a->op_ro.n) {
		a->cnt.ctl_auth_failed++;
		fail(&r, 1, "this agent requires the cluster key or an operator key (SKEIN_KEY_FILE or "
			    "SKEIN_OPERATOR_KEY_FILE), or its control socket on its node");
		goto answer;
	} else {
		c.role = ROLE_LOOK; /* a lone agent without keys: look, do not touch or read */
	}
	if (a->opts.insecure) {
		c.role = ROLE_AGENT;
		if (!c.sender[0]) snprintf(c.sender, sizeof c.sender, "%s", q->sender);
	}
	agent_role need = agent_auth_needs(q->cmd, (const char *const *)q->args, q->n_args, q->forwarded);
	if (c.role < need) {
		a->cnt.ctl_refused_role++;
		fail(&r, 1, "'%s%s%s' %s", q->cmd, q->n_args ? " " : "", q->n_args ? q->args[0] : "", needs_what(need));
		goto answer;
	}
	if (c.sealed || c.role >= ROLE_WRITE) agent_wire_trust(a->wire, id);
	if (strcmp(q->cmd, "raft") && q->payload.len > CTL_PAYLOAD_MAX) {
		a->cnt.ctl_rejected++;
		fail(&r, 1, "'%s' payload of %zu bytes is over the %d MiB limit", q->cmd, q->payload.len,
		     CTL_PAYLOAD_MAX >> 20);
		goto answer;
	}
	dispatch(a, q, &c, &r);
	if (r.body.oom) fail(&r, 1, "out of memory");
answer:
	if (r.code && !r.deferred) SK_DEBUG("agent", "control request from %s refused: %s", p->addr, r.error);
	if (!r.deferred) agent_ctl_send(a, &c, r.code, r.error, sk_buf_str(&r.body));
	if (q) skein__control__request__free_unpacked(q, NULL);
	free(plain);
	sk_buf_free(&r.body);
}

static void on_request(void *ctx, agent_wire_id id, const agent_wire_peer *p, uint8_t *data, size_t len)
{
	handle_one(ctx, id, p, data, len);
	free(data);
}

static void on_answer(void *ctx, void *cookie, uint8_t *data, size_t len, const char *why)
{
	agent_peer_answer(ctx, cookie, data, len, why);
	free(data);
}

/* ---- opening ---- */

static bool is_loopback(const mbr_addr *x)
{
	return (x->len == 4 && x->ip[0] == 127) ||
	       (x->len == 16 && !memcmp(x->ip, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16));
}

/* Reads the operator key files (start-up and SIGHUP). */
int agent_ctl_load_operator_keys(agent *a, char *err, size_t errlen)
{
	agent_keyring rw = { .n = 0 }, ro = { .n = 0 };
	if (a->opts.operator_key_file[0] && agent_keyring_read_file(a->opts.operator_key_file, &rw, err, errlen) < 0)
		return -1;
	if (a->opts.operator_read_key_file[0] &&
	    agent_keyring_read_file(a->opts.operator_read_key_file, &ro, err, errlen) < 0)
		return -1;
	if (a->opts.operator_key_file[0]) agent_warn_loose_key(a->opts.operator_key_file, "--operator-key-file");
	if (a->opts.operator_read_key_file[0])
		agent_warn_loose_key(a->opts.operator_read_key_file, "--operator-read-key-file");
	a->op_rw = rw;
	a->op_ro = ro;
	return 0;
}

/* --control-socket, else control.sock in the data dir or, without one, in
 * the private folder agent_run_dir_pick made (agent_files.c). */
static int socket_path(agent *a, char *err, size_t errlen)
{
	const char *given = a->opts.control_socket;
	int n = given[0] ? snprintf(a->control_socket, sizeof a->control_socket, "%s", given)
			 : snprintf(a->control_socket, sizeof a->control_socket, "%s/control.sock", a->run_dir);
	if (n >= (int)sizeof a->control_socket) {
		snprintf(err, errlen, "the control socket path is too long: give a shorter --control-socket");
		return -1;
	}
	return 0;
}

/* Binds --rpc (TCP) and the Unix socket.  When --rpc is a loopback address
 * and the agent gossips on another one, TCP is also bound on the gossip IP,
 * same port, so other agents reach us (that address is what we advertise). */
int agent_ctl_open(agent *a, char *err, size_t errlen)
{
	a->replay = agent_replay_new();
	replay_floor_load(a);
	a->wire = agent_wire_new(a->loop, a, on_request, on_answer);
	if (!a->replay || !a->wire) { snprintf(err, errlen, "out of memory"); return -1; }
	ev_timer_init(&a->follow_timer, follow_cb, 0.1, 0.1);
	a->follow_timer.data = a;
	ev_timer_start(a->loop, &a->follow_timer);
	a->operator_gid = (gid_t)-1;
	if (a->opts.operator_group[0]) {
		struct group *g = getgrnam(a->opts.operator_group);
		if (!g) { snprintf(err, errlen, "--operator-group: no group '%s'", a->opts.operator_group); return -1; }
		a->operator_gid = g->gr_gid;
	}
	if (agent_ctl_load_operator_keys(a, err, errlen) < 0) return -1;
	if (agent_wire_listen_tcp(a->wire, a->opts.rpc, err, errlen) < 0) return -1;
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
	if (!any && is_loopback(&rpc) && !is_loopback(&a->adv) &&
	    agent_wire_listen_tcp(a->wire, a->rpc_advertised, err, errlen) < 0)
		return -1;
	if (socket_path(a, err, errlen) < 0) return -1;
	mode_t mode = a->operator_gid != (gid_t)-1 ? 0660 : 0600;
	return agent_wire_listen_unix(a->wire, a->control_socket, mode, a->operator_gid, err, errlen);
}

void agent_ctl_close(agent *a)
{
	if (a->loop) ev_timer_stop(a->loop, &a->follow_timer);
	agent_wire_free(a->wire);
	a->wire = NULL;
	agent_replay_free(a->replay);
	a->replay = NULL;
}
