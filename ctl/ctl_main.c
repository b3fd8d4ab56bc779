/* ctl/ctl_main.c: skeinctl, the operator's CLI.
 *
 * Thin: it sends the command to an agent's control endpoint and prints the
 * answer, already formatted by the agent.  Cluster-wide commands (keyring)
 * ask the local agent for every live member's control endpoint and call them
 * all in parallel, like serf's key queries.
 * Exit codes: 0 ok, 1 error (one line on stderr), 2 usage error. */
#include <stdio.h>
#include <sys/random.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sk_time.h"
#include "agent/agent_crypto.h"
#include "agent/agent_rpc.h"
#include "jobs/job_codec.h"
#include "jobs/job_spec.h"

/* The packaged data dir's socket (deploy/), else the TCP default. */
static const char DEFAULT_SOCKET[] = "/var/lib/skein/control.sock";
static const char *g_rpc = "127.0.0.1:7373";
static int g_timeout_ms = 5000;
static agent_keyring g_kr;
static agent_rpc_cred g_cred = { .kr = &g_kr, .operator_key = false, .sender = "" };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: skeinctl [--rpc IP:PORT|unix:PATH] [--key-file FILE | --operator-key-file FILE]\n"
		"                [--node NAME] [--timeout MS] COMMAND [ARGS]\n\n"
		"Talks to a skeind's control endpoint: --rpc, else $SKEIN_RPC, else the Unix socket\n"
		"unix:/var/lib/skein/control.sock when it exists, else 127.0.0.1:7373.  On the Unix\n"
		"socket root, skeind's user and its --operator-group need no key.  Over TCP an agent\n"
		"with keys wants one: an operator key (--operator-key-file, $SKEIN_OPERATOR_KEY_FILE),\n"
		"or the cluster key (--key-file, $SKEIN_KEY_FILE or $SKEIN_KEY); never on argv.\n"
		"A sealed request names the agent it is for: the address it reached, or --node NAME\n"
		"(needed behind a load balancer or NAT, where the agent sees another address).\n\n"
		"commands:\n"
		"  members [--status GLOB] [--tag KEY=GLOB] [--format text|json]\n"
		"                         the members this agent knows: name, address, status, GPUs, tags\n"
		"  info [--format text|json]\n"
		"                         this agent: name, address, profile, counters of packets and drops\n"
		"  join HOST:PORT         ask the agent to join another agent's cluster\n"
		"  leave                  make the agent leave the cluster gracefully and exit\n"
		"  health                 exit 0 when the agent is up and has a cluster (liveness probe)\n"
		"  ready                  exit 0 when the agent knows a head (readiness probe)\n"
		"  keyring list [--format text|json]\n"
		"  keyring install KEY | use KEY | remove KEY\n"
		"                         cluster-wide key rotation; KEY is '-' (read stdin), @FILE,\n"
		"                         a fingerprint (use, remove), or base64 (visible in ps: avoid)\n"
		"  keygen                 print a new random 32-byte key in base64\n"
		"  head [--format text|json]\n"
		"                         the head, its term, and the voters with their last contact\n"
		"  head handover [NAME]   hand the head to voter NAME (default: the one with the most of\n"
		"                         the log) at once, e.g. before restarting the head's node; a\n"
		"                         head that leaves (SIGTERM, skeinctl leave) does this itself;\n"
		"                         `head transfer` is its old name, kept\n"
		"  state put KEY VALUE | get KEY [--stale] | del KEY | list [--stale] [--format text|json]\n"
		"                         the replicated cluster state; writes go through the head and\n"
		"                         return once a majority of voters has them; reads wait for a head\n"
		"                         that has applied an entry of its term; --stale reads this\n"
		"                         agent's own replica (said on stderr)\n"
		"  state bench N          N sequential puts; prints the commit latency (p50, p99, max)\n"
		"  voters add NAME | remove NAME\n"
		"                         change the voter set, one voter at a time\n"
		"  job submit FLAGS | --file job.yaml [FLAGS] [--wait]\n"
		"                         --wait: until every member runs (exit 0) or the job fails\n"
		"                         or --timeout passes (exit 1)\n"
		"                         submit an RL job with Miles's flags (--actor-num-nodes,\n"
		"                         --actor-num-gpus-per-node, --rollout-num-gpus,\n"
		"                         --rollout-num-gpus-per-engine, --num-gpus-per-node, --colocate,\n"
		"                         --update-weight-transfer-mode, --update-weight-buffer-size,\n"
		"                         --update-weight-disk-dir) and --name, --trainer-cmd CMD,\n"
		"                         --rollout-cmd CMD, --max-restarts N, --restart-backoff MIN:MAX,\n"
		"                         --stop-grace D, --update-weight-timeout D (60s: no progress for\n"
		"                         this long aborts an update; at least 1s), --update-on-engine-loss\n"
		"                         drop|abort (drop); a submit retried after a head failover finds\n"
		"                         the job it made (a random token; SKEIN_SUBMIT_TOKEN sets your own)\n"
		"                         --rollout-engine skein|sglang|vllm, --rollout-engine-layout FILE,\n"
		"                         --pause-generation-mode abort|retract|in_place: stock engines\n"
		"                         behind skein's sidecar (docs/engines.md)\n"
		"  job list | status [JOB] | stop JOB | delete JOB [--format text|json]\n"
		"                         delete forgets a stopped, failed or completed job\n"
		"  placement [JOB] [--format text|json]\n"
		"                         every member: role, node, GPUs, pid, state, restarts\n"
		"  updates [JOB [VERSION]] [--last N] [--format text|json]   (old name, kept: transfers)\n"
		"                         weight updates, newest first: version, mode, state (preparing,\n"
		"                         moving, committed, aborted) and why, bytes, timings (Miles's\n"
		"                         perf/update_weights_*), each engine's part (docs/updates.md)\n"
		"  logs MEMBER [--follow] a member's stdout and stderr, from the agent that runs it\n"		"  engines JOB [--ready] [--format text|json]\n"
		"                         a stock engine job's engines and their state (starting, syncing,\n"
		"                         updating, dirty, ready: serving the latest committed version)\n"
		"  status [--format text|json]\n"
		"                         the cluster at a glance: members by status, drained nodes, the\n"
		"                         head and its term, jobs with their state and members running\n"
		"  drain NODE [--deadline S]\n"
		"                         nothing new is placed on NODE; its trainer ranks move (one\n"
		"                         trainer group restart), its engines one at a time; a head\n"
		"                         there hands over first; waits until nothing runs there, or\n"
		"                         exits 1 after S seconds saying why (the node stays drained)\n"
		"  drain status NODE [--format text|json] | undrain NODE\n"
		"  debug drop --in P --out P\n"
		"                         drop that fraction of gossip datagrams (skeind --enable-debug)\n"
		"  debug order TERM [FROM]\n"
		"                         a no-op order as head FROM (default: the head known) of TERM\n"
		"                         would send it, through the fence a real order meets\n\n"
		"exit codes: 0 ok, 1 error, 2 usage error\n");
}

static int die(int code, const char *fmt, const char *arg)
{
	fprintf(stderr, "skeinctl: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	return code;
}

static int load_key(const char *key_file, const char *op_file)
{
	agent_key k;
	char err[300];
	const char *env = getenv("SKEIN_KEY");
	if (!op_file || !*op_file) op_file = getenv("SKEIN_OPERATOR_KEY_FILE");
	if (op_file && *op_file) {
		if (key_file && *key_file) return die(2, "give --key-file or --operator-key-file, not both%s", "");
		if (agent_key_read_file(op_file, &k, err, sizeof err) < 0) return die(1, "%s", err);
		g_cred.operator_key = true;
		agent_keyring_add(&g_kr, &k, err, sizeof err);
		return 0;
	}
	if (!key_file || !*key_file) key_file = getenv("SKEIN_KEY_FILE");
	if (key_file && *key_file) {
		if (agent_key_read_file(key_file, &k, err, sizeof err) < 0) return die(1, "%s", err);
	} else if (env && *env) {
		if (agent_key_decode(env, &k, err, sizeof err) < 0) return die(1, "SKEIN_KEY: %s", err);
	} else {
		return 0;
	}
	agent_keyring_add(&g_kr, &k, err, sizeof err);
	return 0;
}


/* One call to the agent; prints the body or the error; returns the exit code.
 * A head-only request that meets an election ("no head elected yet", "the
 * head stepped down") is retried until --timeout: operators and scripts see
 * a failover as a short delay, not an error. */
static int call_payload(const char *cmd, char **args, int nargs, const char *format, const uint8_t *payload,
			size_t plen, bool quiet, char *keep, size_t keepcap)
{
	agent_rpc c = { .endpoint = g_rpc, .cmd = cmd, .args = (const char *const *)args,
			.nargs = nargs, .format = format, .payload = payload, .payload_len = plen };
	bool head_only = !strcmp(cmd, "state") || !strcmp(cmd, "voters") || !strcmp(cmd, "head") ||
			 !strcmp(cmd, "job") || !strcmp(cmd, "placement") || !strcmp(cmd, "drain") ||
			 !strcmp(cmd, "undrain") || !strcmp(cmd, "status") || !strcmp(cmd, "transfers");
	long long deadline = (long long)sk_mono_us() + (long long)g_timeout_ms * 1000;
	for (;;) {
		long long left_ms = (deadline - (long long)sk_mono_us()) / 1000;
		agent_rpc_run(&c, 1, &g_cred, left_ms > 0 ? (int)left_ms : 1);
		if (!head_only || !c.answered || c.code != 1 || !strstr(c.error, "retry")) break;
		if ((long long)sk_mono_us() + 50000 >= deadline) break;
		agent_rpc_free(&c, 1);
		struct timespec ts = { 0, 50 * 1000000 };
		nanosleep(&ts, NULL);
	}
	int code;
	if (!c.answered) {
		fprintf(stderr, "skeinctl: %s\n", c.error);
		code = 1;
	} else if (c.code != 0) {
		fprintf(stderr, "skeinctl: %s\n", c.error[0] ? c.error : "failed");
		code = c.code == 2 ? 2 : 1;
	} else {
		if (c.body && !quiet) fputs(c.body, stdout);
		if (keep) snprintf(keep, keepcap, "%s", c.body ? c.body : "");
		code = 0;
	}
	agent_rpc_free(&c, 1);
	return code;
}

static int call(const char *cmd, char **args, int nargs, const char *format)
{
	return call_payload(cmd, args, nargs, format, NULL, 0, false, NULL, 0);
}

/* job submit: the flags are read here (the YAML file is on this machine),
 * checked, and sent as a JobSpec; the head checks them again. */
/* --wait: until every member runs (0), the job fails or stops (1), or
 * --timeout (1), asking the head's placement every 200 ms. */
static int wait_running(const char *name, long long deadline)
{
	static char body[1 << 20];
	char *st[] = { "status", (char *)name };
	for (;;) {
		if (call_payload("job", st, 2, "json", NULL, 0, true, body, sizeof body) == 0) {
			char want[160];
			snprintf(want, sizeof want, "{\"job\":{\"name\":\"%s\",\"state\":\"", name);
			const char *js = strstr(body, want);
			const char *state = js ? js + strlen(want) : "";
			if (!strncmp(state, "failed", 6) || !strncmp(state, "stopped", 7) || !strncmp(state, "completed", 9)) {
				fprintf(stderr, "skeinctl: job %s is %.*s\n", name, (int)strcspn(state, "\""), state);
				return 1;
			}
			size_t members = 0, running = 0;
			for (const char *p = body; (p = strstr(p, "\"member\":")); p++) members++;
			for (const char *p = body; (p = strstr(p, "\"state\":\"running\",\"restarts\"")); p++) running++;
			if (!strncmp(state, "running", 7) && members && running == members) {
				printf("job %s: %zu members running\n", name, members);
				return 0;
			}
		}
		if ((long long)sk_mono_us() >= deadline) {
			fprintf(stderr, "skeinctl: job %s: not every member running within --timeout\n", name);
			return 1;
		}
		struct timespec ts = { 0, 200 * 1000000 };
		nanosleep(&ts, NULL);
	}
}

/* drain NODE [--deadline S]: asks the head, then waits until nothing runs
 * on NODE (0), printing each new reason it waits; past the deadline, exit 1
 * with the last reason (the node stays drained: undrain gives it back). */
static int cmd_drain(char **args, int nargs, const char *format)
{
	double deadline_s = -1;
	char *node = NULL;
	for (int i = 0; i < nargs; i++) {
		if (!strcmp(args[i], "--deadline") && i + 1 < nargs) {
			char *end;
			deadline_s = strtod(args[++i], &end);
			if (*end || end == args[i] || deadline_s < 0) return die(2, "--deadline: expected seconds, got '%s'", args[i]);
		} else if (!node && args[i][0] != '-') {
			node = args[i];
		} else {
			return die(2, "usage: skeinctl drain NODE [--deadline S] | drain status NODE%s", "");
		}
	}
	if (!node) return die(2, "usage: skeinctl drain NODE [--deadline S] | drain status NODE%s", "");
	if (!strcmp(node, "status")) return die(2, "usage: skeinctl drain status NODE%s", "");
	int rc = call("drain", &node, 1, "text");
	if (rc) return rc;
	long long end = deadline_s < 0 ? -1 : (long long)sk_mono_us() + (long long)(deadline_s * 1e6);
	static char body[1 << 16], last[1 << 16];
	char *st[] = { "status", node };
	for (;;) {
		if (call_payload("drain", st, 2, "text", NULL, 0, true, body, sizeof body) == 0) {
			if (strstr(body, ": drained, nothing runs there")) {
				fputs(body, stdout);
				return 0;
			}
			if (strcmp(body, last)) {
				fputs(body, stdout);
				fflush(stdout);
				snprintf(last, sizeof last, "%s", body);
			}
		}
		if (end >= 0 && (long long)sk_mono_us() >= end) {
			last[strcspn(last, "\n")] = 0;
			fprintf(stderr, "skeinctl: drain of %s not complete within --deadline %g s: %s\n", node, deadline_s,
				last[0] ? last : "no answer");
			return 1;
		}
		struct timespec ts = { 0, 100 * 1000000 };
		nanosleep(&ts, NULL);
	}
	(void)format;
}

static int cmd_job_submit(char **args, int nargs, const char *format)
{
	static job_spec s;
	char err[400];
	bool wait = false;
	for (int i = 0; i < nargs; i++) {
		if (strcmp(args[i], "--wait")) continue;
		wait = true;
		memmove(&args[i], &args[i + 1], (size_t)(nargs - i - 1) * sizeof *args);
		nargs--;
		i--;
	}
	job_spec_defaults(&s);
	if (job_spec_parse_args(&s, nargs, args, err, sizeof err) < 0 || job_spec_validate(&s, err, sizeof err) < 0)
		return die(2, "job submit: %s", err);
	/* the head refuses it as well; saying so here costs no round trip */
	if (job_disk_dir_check(s.disk_dir, NULL, err, sizeof err) < 0) return die(2, "job submit: %s", err);
	size_t len;
	uint8_t *buf;
	if (job_codec_spec_pack(&s, &buf, &len) < 0) return die(1, "out of memory%s", "");
	/* a token of this submission: when skeinctl retries (a head failover
	 * between the commit and the answer), the head finds the job the first
	 * try created instead of creating a second one */
	uint64_t tok[2] = { 0, 0 };
	if (getrandom(tok, sizeof tok, 0) != (ssize_t)sizeof tok) tok[0] = (uint64_t)(long long)sk_mono_us() ^ ((uint64_t)getpid() << 32);
	char token[65];
	snprintf(token, sizeof token, "%016llx%016llx", (unsigned long long)tok[0], (unsigned long long)tok[1]);
	const char *given = getenv("SKEIN_SUBMIT_TOKEN"); /* a caller's own idempotency key */
	if (given && *given) {
		if (strlen(given) > 64) return die(2, "SKEIN_SUBMIT_TOKEN: at most 64 bytes%s", "");
		snprintf(token, sizeof token, "%s", given);
	}
	char *sub[] = { "submit", token };
	char body[256];
	long long deadline = (long long)sk_mono_us() + (long long)g_timeout_ms * 1000;
	int rc = call_payload("job", sub, 2, format, buf, len, false, body, sizeof body);
	free(buf);
	char name[JOB_NAME_MAX + 1];
	if (rc || !wait || sscanf(body, "job %63s submitted", name) != 1) return rc;
	return wait_running(name, deadline);
}

/* A string or number field of a flat JSON object written by json.dump
 * (the sidecar's state, docs/engines.md): "" when absent. */
static void json_field(const char *obj, const char *key, char *out, size_t cap)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\": ", key);
	const char *p = strstr(obj, pat);
	out[0] = 0;
	if (!p || !cap) return;
	p += strlen(pat);
	size_t n = 0;
	if (*p == '"') {
		for (p++; *p && *p != '"' && n + 1 < cap; p++) out[n++] = *p;
	} else {
		for (; *p && *p != ',' && *p != '}' && n + 1 < cap; p++) out[n++] = *p;
	}
	out[n] = 0;
}

/* engines JOB [--ready]: every engine member of the job (from the head's
 * placement), each one's state from the agent that runs it (engine MEMBER:
 * its sidecar's file).  An engine whose sidecar has written nothing yet, or
 * does not run, is listed starting or gone, never ready. */
static int cmd_engines(char **args, int nargs, const char *format)
{
	const char *job = NULL;
	bool ready = false;
	for (int i = 0; i < nargs; i++) {
		if (!strcmp(args[i], "--ready")) ready = true;
		else if (!job && args[i][0] != '-') job = args[i];
		else return die(2, "usage: skeinctl engines JOB [--ready] [--format text|json]%s", "");
	}
	if (!job || !job_name_ok(job)) return die(2, "usage: skeinctl engines JOB [--ready] [--format text|json]%s", "");
	static char body[1 << 20];
	char *pa[] = { (char *)job };
	int rc = call_payload("placement", pa, 1, "json", NULL, 0, true, body, sizeof body);
	if (rc) return rc;
	bool json = !strcmp(format, "json");
	char pat[JOB_NAME_MAX + 32];
	snprintf(pat, sizeof pat, "\"member\":\"%s/engine-", job);
	if (json) printf("{\"engines\":[");
	else printf("%-24s %-7s %-10s %-9s %8s %8s  %s\n", "MEMBER", "ENGINE", "NODE", "STATE", "VERSION", "PID", "URL");
	int shown = 0;
	for (const char *p = strstr(body, pat); p; p = strstr(p + 1, pat)) {
		char id[JOB_NAME_MAX + 32];
		const char *b = p + strlen("\"member\":\"");
		const char *e = strchr(b, '"');
		if (!e || (size_t)(e - b) >= sizeof id) continue;
		snprintf(id, sizeof id, "%.*s", (int)(e - b), b);
		const char *a1[] = { id };
		agent_rpc c = { .endpoint = g_rpc, .cmd = "engine", .args = a1, .nargs = 1, .format = "text" };
		agent_rpc_run(&c, 1, &g_cred, g_timeout_ms);
		char state[16] = "starting", f[7][256] = { "", "", "", "", "0", "0", "0" };
		static const char *const keys[] = { "engine", "node", "url", "state", "weight_version", "pid", "since_ms" };
		bool have = c.answered && !c.code && c.body;
		if (have) {
			for (int k = 0; k < 7; k++) json_field(c.body, keys[k], f[k], sizeof f[k]);
			char live[8];
			json_field(c.body, "live", live, sizeof live);
			snprintf(state, sizeof state, "%s", strcmp(live, "true") ? "gone" : f[3]);
		}
		if (!ready || !strcmp(state, "ready")) {
			if (json) {
				printf("%s{\"member\":\"%s\",\"engine\":\"%s\",\"node\":\"%s\",\"url\":\"%s\",\"pid\":%s,"
				       "\"state\":\"%s\",\"weight_version\":%s,\"since_ms\":%s", shown ? "," : "", id, f[0], f[1],
				       f[2], f[5][0] ? f[5] : "0", state, f[4][0] ? f[4] : "0", f[6][0] ? f[6] : "0");
				/* the last apply's split (docs/engines.md), when there was one */
				static const char *const fig[] = { "pause_s", "apply_s", "continue_s", "idle_s", "step_s",
								   "commit_to_ready_s", "applies", "failures", "restarts" };
				for (int k = 0; k < 9; k++) {
					char v[64];
					if (have) json_field(c.body, fig[k], v, sizeof v);
					if (have && v[0]) printf(",\"%s\":%s", fig[k], v);
				}
				printf("}");
			} else {
				printf("%-24s %-7s %-10s %-9s %8s %8s  %s\n", id, f[0][0] ? f[0] : "-", f[1][0] ? f[1] : "-", state,
				       f[4], f[5], f[2][0] ? f[2] : "-");
			}
			shown++;
		}
		agent_rpc_free(&c, 1);
	}
	if (json) printf("]}\n");
	return 0;
}

/* logs MEMBER [--follow]: the agent running the member serves its log file
 * in pieces ("NEXT SIZE NODE" then the bytes); --follow polls for more. */
static int cmd_logs(char **args, int nargs)
{
	bool follow = false;
	const char *id = NULL;
	for (int i = 0; i < nargs; i++) {
		if (!strcmp(args[i], "--follow") || !strcmp(args[i], "-f")) follow = true;
		else if (!id) id = args[i];
		else return die(2, "usage: skeinctl logs MEMBER [--follow]%s", "");
	}
	if (!id) return die(2, "usage: skeinctl logs MEMBER [--follow]  (MEMBER as in skeinctl placement: JOB/trainer-0)%s", "");
	unsigned long long off = 0;
	bool warned = false;
	for (;;) {
		char offs[32];
		snprintf(offs, sizeof offs, "%llu", off);
		const char *a3[] = { id, offs, "262144" };
		agent_rpc c = { .endpoint = g_rpc, .cmd = "logs", .args = a3, .nargs = 3, .format = "text" };
		agent_rpc_run(&c, 1, &g_cred, g_timeout_ms);
		unsigned long long next = off, size = 0;
		if (!c.answered || c.code) {
			if (!follow) {
				fprintf(stderr, "skeinctl: %s\n", c.error[0] ? c.error : "failed");
				agent_rpc_free(&c, 1);
				return 1;
			}
			if (!warned) fprintf(stderr, "skeinctl: %s (still following)\n", c.error);
			warned = true;
		} else if (c.body) {
			char *nl = strchr(c.body, '\n');
			if (!nl || sscanf(c.body, "%llu %llu", &next, &size) != 2) {
				agent_rpc_free(&c, 1);
				return die(1, "logs: unreadable answer%s", "");
			}
			fputs(nl + 1, stdout);
			fflush(stdout);
			warned = false;
			if (size < off) next = 0; /* a new file (the member moved or was restarted elsewhere) */
		}
		agent_rpc_free(&c, 1);
		bool more = next < size;
		off = next;
		if (!more && !follow) return 0;
		if (!more) {
			struct timespec ts = { 0, 300 * 1000000 };
			nanosleep(&ts, NULL);
		}
	}
}

/* Takes --format out of args; returns -1 on a bad value. */
static int take_format(char **args, int *nargs, const char **format)
{
	for (int i = 0; i < *nargs; i++) {
		if (strcmp(args[i], "--format") != 0) continue;
		if (i + 1 >= *nargs) return -1;
		const char *f = args[i + 1];
		if (strcmp(f, "text") && strcmp(f, "json")) return -1;
		*format = f;
		memmove(&args[i], &args[i + 2], (size_t)(*nargs - i - 2) * sizeof *args);
		*nargs -= 2;
		i--;
	}
	return 0;
}

static int read_key_arg(const char *arg, char *out, size_t cap)
{
	if (!strcmp(arg, "-") || arg[0] == '@') {
		FILE *f = !strcmp(arg, "-") ? stdin : fopen(arg + 1, "r");
		if (!f) return die(1, "cannot read key from %s", arg + 1);
		size_t n = fread(out, 1, cap - 1, f);
		out[n] = 0;
		if (f != stdin) fclose(f);
	} else {
		snprintf(out, cap, "%s", arg);
	}
	return 0;
}

static int cmd_keyring(char **args, int nargs, const char *format)
{
	if (nargs < 1) return die(2, "usage: skeinctl keyring list|install KEY|use KEY|remove KEY%s", "");
	const char *op = args[0];
	char key[512] = "";
	if (strcmp(op, "list") != 0) {
		if (nargs != 2) return die(2, "usage: skeinctl keyring %s KEY", op);
		if (strcmp(op, "install") && strcmp(op, "use") && strcmp(op, "remove"))
			return die(2, "keyring: unknown operation '%s' (list, install, use, remove)", op);
		if (read_key_arg(args[1], key, sizeof key)) return 1;
		char *e = key + strlen(key);
		while (e > key && (e[-1] == '\n' || e[-1] == ' ')) *--e = 0;
	} else if (nargs != 1) {
		return die(2, "usage: skeinctl keyring list [--format text|json]%s", "");
	}
	/* every live member's control endpoint */
	agent_rpc peers = { .endpoint = g_rpc, .cmd = "peers", .format = "text" };
	agent_rpc_run(&peers, 1, &g_cred, g_timeout_ms);
	if (!peers.answered || peers.code) {
		fprintf(stderr, "skeinctl: %s\n", peers.error);
		agent_rpc_free(&peers, 1);
		return 1;
	}
	agent_rpc *calls = NULL;
	char **names = NULL;
	int n = 0;
	const char *kargs[2] = { op, key };
	for (char *save = NULL, *line = strtok_r(peers.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[200], status[32], rpc[100];
		if (sscanf(line, "%199s %31s %99s", name, status, rpc) != 3) continue;
		if (strcmp(status, "alive") && strcmp(status, "suspect")) continue;
		if (!strcmp(rpc, "-")) continue;
		calls = realloc(calls, (size_t)(n + 1) * sizeof *calls);
		names = realloc(names, (size_t)(n + 1) * sizeof *names);
		memset(&calls[n], 0, sizeof calls[n]);
		calls[n].endpoint = strdup(rpc);
		calls[n].cmd = "keyring";
		calls[n].args = kargs;
		calls[n].nargs = strcmp(op, "list") ? 2 : 1;
		calls[n].format = "text";
		calls[n].local_only = true;
		names[n] = strdup(name);
		calls[n].recipient = names[n];
		n++;
	}
	agent_rpc_free(&peers, 1);
	agent_rpc_run(calls, n, &g_cred, g_timeout_ms);
	int failed = 0;
	bool json = !strcmp(format, "json");
	if (!strcmp(op, "list")) {
		/* fingerprint -> on how many nodes, primary on how many */
		struct { char fp[FINGERPRINT_LEN + 1]; int installed, primary; } keys[64];
		int nk = 0;
		for (int i = 0; i < n; i++) {
			if (!calls[i].answered || calls[i].code) { failed++; continue; }
			for (char *save = NULL, *l = strtok_r(calls[i].body, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
				char node[200], fp[64];
				if (sscanf(l, "%199s %63s", node, fp) != 2) continue;
				int k = 0;
				while (k < nk && strcmp(keys[k].fp, fp)) k++;
				if (k == nk && nk < 64) {
					snprintf(keys[nk].fp, sizeof keys[nk].fp, "%s", fp);
					keys[nk].installed = keys[nk].primary = 0;
					nk++;
				}
				if (k < nk) {
					keys[k].installed++;
					if (strstr(l, "(primary)")) keys[k].primary++;
				}
			}
		}
		if (json) {
			printf("{\"nodes\":%d,\"answered\":%d,\"keys\":[", n, n - failed);
			for (int k = 0; k < nk; k++)
				printf("%s{\"fingerprint\":\"%s\",\"installed\":%d,\"primary\":%d}", k ? "," : "",
				       keys[k].fp, keys[k].installed, keys[k].primary);
			printf("]}\n");
		} else {
			printf("%-18s %-10s %s\n", "FINGERPRINT", "INSTALLED", "PRIMARY");
			for (int k = 0; k < nk; k++)
				printf("%-18s %d/%-8d %d/%d\n", keys[k].fp, keys[k].installed, n - failed, keys[k].primary,
				       n - failed);
		}
	} else {
		for (int i = 0; i < n; i++) {
			if (calls[i].answered && !calls[i].code) {
				if (!json) printf("%s: ok\n", names[i]);
			} else {
				failed++;
				printf("%s: FAILED: %s\n", names[i], calls[i].error);
			}
		}
		if (json) printf("{\"nodes\":%d,\"failed\":%d}\n", n, failed);
	}
	for (int i = 0; i < n; i++) {
		free((char *)calls[i].endpoint);
		free(names[i]);
	}
	agent_rpc_free(calls, n);
	free(calls);
	free(names);
	if (failed) {
		fprintf(stderr, "skeinctl: keyring %s failed on %d of %d agents\n", op, failed, n);
		return 1;
	}
	return 0;
}


static int cmp_ll(const void *x, const void *y)
{
	long long a = *(const long long *)x, b = *(const long long *)y;
	return a < b ? -1 : a > b;
}

/* N puts one after the other, each answered once committed: the latency of
 * a write as a client sees it (connection, forward to the head if needed,
 * replication to a majority, fsync). */
static int cmd_state_bench(const char *count)
{
	char *end;
	long n = strtol(count, &end, 10);
	if (*end || n < 1 || n > 100000) return die(2, "state bench: expected a count from 1 to 100000, got '%s'", count);
	long long *lat = malloc((size_t)n * sizeof *lat);
	if (!lat) return die(1, "out of memory%s", "");
	int failed = 0;
	for (long i = 0; i < n; i++) {
		char key[64], val[32];
		snprintf(key, sizeof key, "bench/%ld", i);
		snprintf(val, sizeof val, "%ld", i);
		const char *args[] = { "put", key, val };
		agent_rpc c = { .endpoint = g_rpc, .cmd = "state", .args = args, .nargs = 3, .format = "text" };
		long long t0 = (long long)sk_mono_us();
		agent_rpc_run(&c, 1, &g_cred, g_timeout_ms);
		lat[i] = (long long)sk_mono_us() - t0;
		if (!c.answered || c.code) {
			failed++;
			if (failed == 1) fprintf(stderr, "skeinctl: write %ld failed: %s\n", i, c.error);
		}
		agent_rpc_free(&c, 1);
	}
	qsort(lat, (size_t)n, sizeof *lat, cmp_ll);
	printf("writes %ld failed %d p50_ms %.3f p99_ms %.3f max_ms %.3f\n", n, failed, lat[n / 2] / 1000.0,
	       lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1000.0, lat[n - 1] / 1000.0);
	free(lat);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *env_rpc = getenv("SKEIN_RPC");
	const char *key_file = NULL, *op_file = NULL;
	static char default_sock[sizeof DEFAULT_SOCKET + 8];
	if (env_rpc && *env_rpc) {
		g_rpc = env_rpc;
	} else if (access(DEFAULT_SOCKET, F_OK) == 0) {
		snprintf(default_sock, sizeof default_sock, "unix:%s", DEFAULT_SOCKET);
		g_rpc = default_sock;
	}
	int i = 1;
	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--help")) { usage(stdout); return 0; }
		if (i + 1 >= argc) return die(2, "%s needs a value (see skeinctl --help)", argv[i]);
		if (!strcmp(argv[i], "--rpc")) g_rpc = argv[++i];
		else if (!strcmp(argv[i], "--key-file")) key_file = argv[++i];
		else if (!strcmp(argv[i], "--operator-key-file")) op_file = argv[++i];
		else if (!strcmp(argv[i], "--node")) g_cred.recipient = argv[++i];
		else if (!strcmp(argv[i], "--timeout")) {
			char *end;
			long t = strtol(argv[++i], &end, 10);
			if (*end || t <= 0 || t > 600000) return die(2, "--timeout: expected milliseconds, got '%s'", argv[i]);
			g_timeout_ms = (int)t;
		} else {
			return die(2, "unknown flag %s (see skeinctl --help)", argv[i]);
		}
	}
	if (i >= argc) { usage(stderr); return 2; }
	int lk = load_key(key_file, op_file);
	if (lk) return lk;
	const char *cmd = argv[i++];
	char **args = argv + i;
	int nargs = argc - i;
	/* One vocabulary (issue 26): an "update" is the transaction, "handover"
	 * Raft's leadership move.  The old words stay aliases, and the wire
	 * keeps them, so that agents of the last release understand. */
	if (!strcmp(cmd, "updates")) cmd = "transfers";
	static char wire_transfer[] = "transfer";
	if (!strcmp(cmd, "head") && nargs >= 1 && !strcmp(args[0], "handover")) args[0] = wire_transfer;
	const char *format = "text";
	if (take_format(args, &nargs, &format) < 0) return die(2, "--format: expected text or json%s", "");

	if (!strcmp(cmd, "help") || !strcmp(cmd, "-h")) { usage(stdout); return 0; }
	if (!strcmp(cmd, "keygen")) {
		agent_key k;
		char b64[64];
		if (nargs || agent_key_generate(&k) < 0) return die(2, "usage: skeinctl keygen%s", "");
		agent_key_encode(&k, b64, sizeof b64);
		printf("%s\n", b64);
		return 0;
	}
	if (!strcmp(cmd, "keyring")) return cmd_keyring(args, nargs, format);
	if (!strcmp(cmd, "state") && nargs == 2 && !strcmp(args[0], "bench")) return cmd_state_bench(args[1]);
	if (!strcmp(cmd, "state") && nargs >= 2 && !strcmp(args[nargs - 1], "--stale") &&
	    (!strcmp(args[0], "get") || !strcmp(args[0], "list"))) {
		/* said on stderr: stdout stays the value, as scripts read it */
		int rc = call(cmd, args, nargs, format);
		if (rc == 0) fprintf(stderr, "skeinctl: stale read: this agent's own replica, maybe behind the head\n");
		return rc;
	}
	if (!strcmp(cmd, "head") || !strcmp(cmd, "state") || !strcmp(cmd, "voters"))
		return call(cmd, args, nargs, format);
	if (!strcmp(cmd, "members") || !strcmp(cmd, "info") || !strcmp(cmd, "debug"))
		return call(cmd, args, nargs, format);
	if (!strcmp(cmd, "job")) {
		if (nargs >= 1 && !strcmp(args[0], "submit")) return cmd_job_submit(args + 1, nargs - 1, format);
		return call(cmd, args, nargs, format);
	}
	if (!strcmp(cmd, "placement") || !strcmp(cmd, "transfers")) return call(cmd, args, nargs, format);
	if (!strcmp(cmd, "status")) {
		if (nargs) return die(2, "usage: skeinctl status [--format text|json]%s", "");
		return call(cmd, args, nargs, format);
	}
	if (!strcmp(cmd, "drain")) {
		if (nargs >= 1 && !strcmp(args[0], "status")) {
			if (nargs != 2) return die(2, "usage: skeinctl drain status NODE%s", "");
			return call(cmd, args, nargs, format);
		}
		return cmd_drain(args, nargs, format);
	}
	if (!strcmp(cmd, "undrain")) {
		if (nargs != 1) return die(2, "usage: skeinctl undrain NODE%s", "");
		return call(cmd, args, nargs, format);
	}
	if (!strcmp(cmd, "logs")) return cmd_logs(args, nargs);
	if (!strcmp(cmd, "engines")) return cmd_engines(args, nargs, format);
	if (!strcmp(cmd, "join")) {
		if (nargs != 1) return die(2, "usage: skeinctl join HOST:PORT%s", "");
		return call(cmd, args, nargs, format);
	}
	if (!strcmp(cmd, "ready")) {
		/* a readiness probe: the agent answers and knows a head */
		static char body[1 << 16];
		if (nargs) return die(2, "ready takes no arguments%s", "");
		int rc = call_payload("head", NULL, 0, "text", NULL, 0, true, body, sizeof body);
		if (rc) return rc;
		if (strncmp(body, "head: ", 6) || !strncmp(body, "head: (none)", 12)) {
			fprintf(stderr, "skeinctl: not ready: this agent knows no head\n");
			return 1;
		}
		printf("ready: %.*s\n", (int)strcspn(body, "\n"), body);
		return 0;
	}
	if (!strcmp(cmd, "leave") || !strcmp(cmd, "health")) {
		if (nargs) return die(2, "%s takes no arguments", cmd);
		return call(cmd, args, nargs, format);
	}
	return die(2, "unknown command '%s' (see skeinctl --help)", cmd);
}
