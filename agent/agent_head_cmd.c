/* agent/agent_head_cmd: the head's control commands: head [transfer],
 * state put/get/del/list, voters add/remove, and the dispatch of raft's
 * messages to agent_head.c.
 *
 * Split from agent_head.c so that the election wiring and what operators
 * ask of it are read apart.  These handlers only call into agent_head.c's
 * interface (agent.h, agent_head_int.h): a request that must be served by
 * the head is forwarded, a write is proposed and answered once it commits,
 * and every call into raft is followed by agent_head_pump. */
#include "agent/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_head_int.h"
#include "common/sk_log.h"
#include "common/sk_text.h"
#include "common/sk_time.h"
#include "proto/control.pb-c.h"
#include "raft/raft.h"
#include "raft/raft_kv.h"

static void cmd_head(agent *a, const Skein__Control__Request *q, agent_reply *r)
{
	char head[RAFT_NAME_MAX + 1];
	uint64_t term;
	agent_head_known(a, head, sizeof head, &term, NULL, 0);
	bool json = !strcmp(q->format, "json");
	bool leader = agent_head_is_head(a);
	const raft_voters *v = agent_head_raft(a) ? raft_get_voters(agent_head_raft(a)) : NULL;
	uint64_t now = sk_boot_ms();   /* raft's clock */
	if (json) {
		sk_buf_printf(&r->body, "{\"head\":");
		if (head[0]) sk_buf_json_str(&r->body, head);
		else sk_buf_printf(&r->body, "null");
		sk_buf_printf(&r->body, ",\"term\":%llu,\"voters\":[", (unsigned long long)term);
	} else {
		char shown[4 * sizeof head];
		sk_buf_printf(&r->body, "head: %s\nterm: %llu\n", head[0] ? sk_text_escape(head, shown, sizeof shown) : "(none)",
			      (unsigned long long)term);
		if (v && v->n) sk_buf_printf(&r->body, "%-24s %-10s %s\n", "VOTER", "STATE", "LAST_CONTACT_MS");
	}
	for (size_t i = 0; v && i < v->n; i++) {
		const char *st;
		int64_t lc = leader ? raft_last_contact_ms(agent_head_raft(a), v->names[i], now) : -1;
		mbr_member_info mi;
		bool known = !strcmp(v->names[i], a->opts.name) || mbr_lookup(a->mbr, v->names[i], &mi) == 0;
		if (!strcmp(v->names[i], head)) st = "leader";
		else if (known && strcmp(v->names[i], a->opts.name) && (mi.status == MBR_DEAD || mi.status == MBR_LEFT))
			st = "failed";
		else if (leader && (lc < 0 || lc > (int64_t)raft_get_config(agent_head_raft(a))->heartbeat_timeout_ms))
			st = "unreachable";
		else st = "follower";
		if (json) {
			sk_buf_printf(&r->body, "%s{\"name\":", i ? "," : "");
			sk_buf_json_str(&r->body, v->names[i]);
			sk_buf_printf(&r->body, ",\"state\":\"%s\",\"last_contact_ms\":%lld}", st, (long long)lc);
		} else {
			char shown[4 * RAFT_NAME_MAX + 1];
			sk_buf_printf(&r->body, "%-24s %-10s %lld\n", sk_text_escape(v->names[i], shown, sizeof shown), st,
				      (long long)lc);
		}
	}
	const char *stg = leader ? raft_staging(agent_head_raft(a)) : NULL;
	if (json) {
		sk_buf_printf(&r->body, "],\"catching_up\":");
		if (stg) sk_buf_json_str(&r->body, stg);
		else sk_buf_printf(&r->body, "null");
		sk_buf_printf(&r->body, "}\n");
	} else if (stg) {
		sk_buf_printf(&r->body, "(catching up before it joins the voters: %s)\n", stg);
	}
}

static void cmd_state(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const char *op = q->n_args ? q->args[0] : "";
	bool stale = q->n_args >= 1 && !strcmp(q->args[q->n_args - 1], "--stale");
	size_t nargs = q->n_args - (stale ? 1 : 0);
	if (!strcmp(op, "put") ? nargs != 3 : !strcmp(op, "get") || !strcmp(op, "del") ? nargs != 2 :
	    !strcmp(op, "list") ? nargs != 1 : 1) {
		agent_reply_fail(r, 2, "usage: skeinctl state put KEY VALUE | get KEY [--stale] | del KEY | list [--stale]");
		return;
	}
	bool read = !strcmp(op, "get") || !strcmp(op, "list");
	/* --stale: this agent's replica, possibly behind (Consul's stale reads) */
	if (!(read && stale && agent_head_raft(a)) && !agent_head_is_head(a)) {
		agent_head_forward(a, q, c, r);
		return;
	}
	/* A new head's lease holds from its election, before its no-op
	 * applies: its state may still miss a write its predecessor already
	 * acknowledged.  skeinctl retries on "retry" until --timeout. */
	if (read && !stale && !agent_head_ready(a)) {
		agent_reply_fail(r, 1, "not ready, retry: the new head (term %llu) has not applied an entry of its term yet",
				 (unsigned long long)raft_term(agent_head_raft(a)));
		return;
	}
		char err[300];
	const char *key = nargs >= 2 ? q->args[1] : "";
	if (!strcmp(op, "get")) {
		const uint8_t *v;
		size_t vl;
		if (raft_kv_get(agent_head_kv(a), key, strlen(key), &v, &vl) < 0) {
			agent_reply_fail(r, 1, "no such key: %s", key);
			return;
		}
		sk_buf_add(&r->body, v, vl);
		sk_buf_add(&r->body, "\n", 1);
	} else if (!strcmp(op, "list")) {
		raft_kv_item *it;
		size_t n = raft_kv_list(agent_head_kv(a), &it);
		if (n == (size_t)-1) { agent_reply_fail(r, 1, "out of memory"); return; }
		bool json = !strcmp(q->format, "json");
		if (json) sk_buf_printf(&r->body, "{%s\"state\":{", stale ? "\"stale\":true," : "");
		for (size_t i = 0; i < n; i++) {
			char *k = strndup((const char *)it[i].key, it[i].klen);
			char *v = strndup((const char *)it[i].val, it[i].vlen);
			if (json) {
				if (i) sk_buf_add(&r->body, ",", 1);
				sk_buf_json_str(&r->body, k ? k : "");
				sk_buf_add(&r->body, ":", 1);
				sk_buf_json_str(&r->body, v ? v : "");
			} else {
				sk_buf_printf(&r->body, "%s\t%s\n", k ? k : "", v ? v : "");
			}
			free(k);
			free(v);
		}
		if (json) sk_buf_printf(&r->body, "}}\n");
		free(it);
	} else {
		uint8_t type, *data;
		size_t len;
		int rc = !strcmp(op, "put")
			? raft_kv_encode_put(key, strlen(key), q->args[2], strlen(q->args[2]), &type, &data, &len, err, sizeof err)
			: raft_kv_encode_del(key, strlen(key), &type, &data, &len, err, sizeof err);
		if (rc < 0) { agent_reply_fail(r, 2, "%s", err); return; }
		agent_head_propose(a, c, r, type, data, len, NULL, NULL);
	}
}

/* skeinctl head transfer [NAME]: hands the head to NAME (or the voter alive
 * the longest) without waiting out an election timeout. */
static void cmd_handover(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	if (q->n_args > 2) {
		agent_reply_fail(r, 2, "usage: skeinctl head transfer [NAME]");
		return;
	}
	if (!agent_head_is_head(a)) {
		agent_head_forward(a, q, c, r);
		return;
	}
	char err[300], to[RAFT_NAME_MAX + 1] = "", pick[RAFT_NAME_MAX + 1];
	uint64_t term = raft_term(agent_head_raft(a));
	const char *want = q->n_args == 2 ? q->args[1] : agent_head_handover_target(a, pick, sizeof pick);
	if (raft_transfer(agent_head_raft(a), sk_boot_ms(), want, to, sizeof to, err, sizeof err) != 0) {
		agent_reply_fail(r, 1, "head transfer: %s", err);
		return;
	}
	SK_INFO("head", "handing the head over to %s (asked by an operator)", to);
	agent_head_pump(a);
	sk_buf_printf(&r->body, "handing the head (term %llu) over to %s\n", (unsigned long long)term, to);
}

static void cmd_voters(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const char *op = q->n_args ? q->args[0] : "";
	if (!(((!strcmp(op, "add") || !strcmp(op, "remove")) && q->n_args == 2))) {
		agent_reply_fail(r, 2, "usage: skeinctl voters add NAME | remove NAME");
		return;
	}
	if (!agent_head_is_head(a)) {
		agent_head_forward(a, q, c, r);
		return;
	}
	char err[300];
	uint64_t now = sk_boot_ms();   /* raft's clock */
	const char *name = q->args[1];
	if (!strcmp(op, "add")) {
		mbr_member_info mi;
		if (strcmp(name, a->opts.name) && (mbr_lookup(a->mbr, name, &mi) < 0 || mi.status != MBR_ALIVE)) {
			agent_reply_fail(r, 1, "voters add: %s is not an alive member", name);
			return;
		}
	}
	int rc = !strcmp(op, "add") ? raft_voter_add(agent_head_raft(a), now, name, err, sizeof err)
				    : raft_voter_remove(agent_head_raft(a), now, name, err, sizeof err);
	if (rc < 0) {
		agent_reply_fail(r, 1, "voters %s %s: %s", op, name, err);
		return;
	}
	agent_head_pump(a);
	if (!strcmp(op, "add"))
		sk_buf_printf(&r->body, "%s catches up as a non-voter, then joins the voters (skeinctl head shows it)\n",
			      name);
	else
		sk_buf_printf(&r->body, "voter %s removal proposed (in effect once a majority has it)\n", name);
}

bool agent_head_dispatch(agent *a, const Skein__Control__Request *q, const agent_client *c, agent_reply *r)
{
	const char *cmd = q->cmd;
	if (!strcmp(cmd, "raft")) {
		/* one-way: no answer */
		r->deferred = true;
		agent_head_recv(a, q->payload.data, q->payload.len);
		return true;
	}
	if (!strcmp(cmd, "head")) {
		char head[RAFT_NAME_MAX + 1];
		uint64_t t;
		agent_head_known(a, head, sizeof head, &t, NULL, 0);
		/* "transfer": what skeinctl sends for `head handover` (and sent
		 * for `head transfer`); "handover" accepted as well */
		if (q->n_args >= 1 && (!strcmp(q->args[0], "transfer") || !strcmp(q->args[0], "handover"))) {
			cmd_handover(a, q, c, r);
			return true;
		}
		if (q->n_args) {
			agent_reply_fail(r, 2, "usage: skeinctl head [--format text|json] | head handover [NAME]");
			return true;
		}
		/* the head knows its voters' last contact: ask it */
		if (!agent_head_is_head(a) && !q->forwarded && head[0] && strcmp(head, a->opts.name)) agent_head_forward(a, q, c, r);
		else cmd_head(a, q, r);
		return true;
	}
	if (!strcmp(cmd, "state")) { cmd_state(a, q, c, r); return true; }
	if (!strcmp(cmd, "voters")) { cmd_voters(a, q, c, r); return true; }
	return false;
}

