/* agent/agent_opts: see agent_opts.h. */
#include "agent/agent_opts.h"

#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sk_text.h"

typedef enum { T_STR, T_BOOL, T_LIST } otype;

typedef struct {
	const char *flag;   /* without the leading -- */
	otype t;
	size_t off;         /* of the char[] / bool / char*[] */
	size_t cap;         /* T_STR: buffer size */
	size_t count_off;   /* T_LIST: offset of the int count */
	const char *arg, *help;
} opt;

#define S(f, field, arg, help) { f, T_STR, offsetof(agent_opts, field), sizeof(((agent_opts *)0)->field), 0, arg, help }
#define L(f, field, arg, help) { f, T_LIST, offsetof(agent_opts, field), 0, offsetof(agent_opts, n##field), arg, help }
static const opt table[] = {
	S("name", name, "NAME", "node name, unique in the cluster (default: host name)"),
	S("bind", bind, "IP:PORT", "gossip address, UDP and TCP (default 0.0.0.0:7946)"),
	S("advertise", advertise, "IP:PORT", "address others reach us at (default: --bind, or the first non-loopback IP)"),
	L("join", join, "HOST:PORT", "a seed to join; repeatable; retried until one answers; a name resolves to all its addresses"),
	S("rpc", rpc, "IP:PORT", "control endpoint (TCP) for other agents and remote operators (default 127.0.0.1:7373)"),
	S("control-socket", control_socket, "PATH",
	  "Unix socket for operators on this node, skeinctl's default (default <data-dir>/control.sock)"),
	S("operator-key-file", operator_key_file, "FILE",
	  "operator keys (base64, one a line) whose holders may steer this agent over TCP; SIGHUP re-reads"),
	S("operator-read-key-file", operator_read_key_file, "FILE",
	  "operator keys whose holders may only look (members, info, job list, logs) over TCP"),
	S("operator-group", operator_group, "GROUP", "this group may use the control socket too (mode 0660)"),
	{ "insecure", T_BOOL, offsetof(agent_opts, insecure), 0, 0, NULL,
	  "accept every command from anyone, and --join without a key: tests and demos on one machine only" },
	S("data-dir", data_dir, "DIR", "keeps the generation and the keyring across restarts"),
	S("profile", profile, "lan|fast", "gossip timing: lan (memberlist's LAN numbers) or fast (one GPU fabric)"),
	S("gpus", gpus, "N|auto", "GPUs this node offers; auto counts them through NVML or CUDA (0 without)"),
	L("tag", tag, "K=V", "a tag in this node's metadata; repeatable"),
	S("key-file", key_file, "FILE", "base64 key (16, 24 or 32 bytes) that encrypts gossip and control; also SKEIN_KEY"),
	S("log-level", log_level, "LEVEL", "debug, info, warn or error (default info)"),
	S("log-format", log_format, "text|json", "log lines as text or JSON (default text)"),
	S("config", config, "FILE", "read settings from FILE (key = value lines, same names as the flags)"),
	{ "enable-debug", T_BOOL, offsetof(agent_opts, enable_debug), 0, 0, NULL,
	  "allow debug commands (skeinctl debug drop) for chaos tests" },
	{ "head-eligible", T_BOOL, offsetof(agent_opts, head_eligible), 0, 0, NULL,
	  "this agent may be a voter and the head (Raft over the control channel)" },
	S("bootstrap-expect", bootstrap_expect, "N",
	  "elect no head until N head-eligible agents are visible, then fix them as the voters (like Consul)"),
	S("voter-replace-after", voter_replace_after, "SECONDS",
	  "the head replaces a voter failed this long by an eligible alive agent (0 = never, the default)"),
	S("member-fence-after", member_fence_after, "SECONDS",
	  "stop this node's members when no head has given it orders for this long (a node cut off while the "
	  "others place its members elsewhere); 0 = never, the default"),
	S("metrics", metrics, "IP:PORT", "serve Prometheus metrics (GET /metrics, read-only) there; off by default"),
	L("set", set, "KEY=VALUE", "override one gossip parameter (skeind --set probe_interval_ms=500); repeatable"),
};
#undef S
#undef L
enum { NOPT = sizeof table / sizeof table[0] };

void agent_opts_defaults(agent_opts *o)
{
	memset(o, 0, sizeof *o);
	if (gethostname(o->name, sizeof o->name - 1) != 0 || !o->name[0]) snprintf(o->name, sizeof o->name, "skein");
	snprintf(o->bind, sizeof o->bind, "0.0.0.0:7946");
	snprintf(o->rpc, sizeof o->rpc, "127.0.0.1:7373");
	snprintf(o->profile, sizeof o->profile, "lan");
	snprintf(o->gpus, sizeof o->gpus, "auto");
	snprintf(o->log_level, sizeof o->log_level, "info");
	snprintf(o->log_format, sizeof o->log_format, "text");
	snprintf(o->bootstrap_expect, sizeof o->bootstrap_expect, "0");
	snprintf(o->voter_replace_after, sizeof o->voter_replace_after, "0");
	snprintf(o->member_fence_after, sizeof o->member_fence_after, "0");
}

static void list_clear(char **v, int *n)
{
	for (int i = 0; i < *n; i++) free(v[i]);
	*n = 0;
}

void agent_opts_free(agent_opts *o)
{
	list_clear(o->join, &o->njoin);
	list_clear(o->tag, &o->ntag);
	list_clear(o->set, &o->nset);
}

void agent_opts_usage(void)
{
	printf("usage: skeind --name NAME --bind IP:PORT [options]\n\n"
	       "skein's node agent: joins the cluster by gossip (SWIM + Lifeguard) and serves\n"
	       "skeinctl on its control endpoint.  Every flag can also be set in the config\n"
	       "file (same name) or as SKEIN_<NAME> in the environment (dashes as underscores,\n"
	       "lists comma-separated); flags win over the environment, which wins over the file.\n\n");
	for (int i = 0; i < NOPT; i++) {
		char left[64];
		snprintf(left, sizeof left, "--%s%s%s", table[i].flag, table[i].arg ? " " : "",
			 table[i].arg ? table[i].arg : "");
		printf("  %-26s %s\n", left, table[i].help);
	}
	printf("  %-26s %s\n", "--help", "this text");
	printf("\nSignals: SIGTERM/SIGINT leave the cluster gracefully and exit; SIGHUP reloads\n"
	       "tags and the log level from the config file and the environment.\n"
	       "Keys are read from --key-file, SKEIN_KEY_FILE or SKEIN_KEY, never from argv.\n");
}

static const opt *find(const char *flag)
{
	for (int i = 0; i < NOPT; i++)
		if (strcmp(table[i].flag, flag) == 0) return &table[i];
	return NULL;
}

static int set_value(agent_opts *o, const opt *p, const char *v, char *err, size_t errlen)
{
	char *base = (char *)o;
	switch (p->t) {
	case T_STR:
		if (strlen(v) >= p->cap) {
			snprintf(err, errlen, "--%s: value is too long", p->flag);
			return -1;
		}
		snprintf(base + p->off, p->cap, "%s", v);
		return 0;
	case T_BOOL:
		if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *(bool *)(base + p->off) = true;
		else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *(bool *)(base + p->off) = false;
		else {
			snprintf(err, errlen, "--%s: expected true or false, got '%s'", p->flag, v);
			return -1;
		}
		return 0;
	case T_LIST: {
		char **list = (char **)(base + p->off);
		int *n = (int *)(base + p->count_off);
		if (*n >= OPTS_LIST_MAX) {
			snprintf(err, errlen, "--%s: at most %d values", p->flag, OPTS_LIST_MAX);
			return -1;
		}
		list[(*n)++] = strdup(v);
		return 0;
	}
	}
	return -1;
}

/* One source's settings: which options it set, and their values. */
typedef struct {
	agent_opts v;
	bool set[NOPT];
} layer;

static int layer_set(layer *l, const opt *p, const char *v, char *err, size_t errlen)
{
	int i = (int)(p - table);
	if (p->t == T_LIST && !l->set[i]) {
		/* the first value of a list at this layer replaces lower layers */
		char **list = (char **)((char *)&l->v + p->off);
		list_clear(list, (int *)((char *)&l->v + p->count_off));
	}
	if (set_value(&l->v, p, v, err, errlen) < 0) return -1;
	l->set[i] = true;
	return 0;
}

static void layer_merge(agent_opts *dst, const layer *l, bool tags_and_level_only)
{
	for (int i = 0; i < NOPT; i++) {
		if (!l->set[i]) continue;
		const opt *p = &table[i];
		if (tags_and_level_only && strcmp(p->flag, "tag") && strcmp(p->flag, "log-level")) continue;
		const char *src = (const char *)&l->v;
		char *d = (char *)dst;
		if (p->t == T_STR) memcpy(d + p->off, src + p->off, p->cap);
		else if (p->t == T_BOOL) *(bool *)(d + p->off) = *(const bool *)(src + p->off);
		else {
			char **dl = (char **)(d + p->off);
			int *dn = (int *)(d + p->count_off);
			char *const *sl = (char *const *)(src + p->off);
			int sn = *(const int *)(src + p->count_off);
			list_clear(dl, dn);
			for (int k = 0; k < sn; k++) dl[(*dn)++] = strdup(sl[k]);
		}
	}
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s)) s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
	/* "quoted" values */
	if (e - s >= 2 && (*s == '"' || *s == '\'') && e[-1] == *s) {
		e[-1] = 0;
		s++;
	}
	return s;
}

static int read_file(layer *l, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "--config: cannot read %s: %m", path);
		return -1;
	}
	char line[1024];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		char *s = trim(line);
		if (!*s || *s == '#') continue;
		char *sep = strpbrk(s, "=:");
		if (!sep) {
			snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
			rc = -1;
			break;
		}
		*sep = 0;
		/* "key: value" and "key = value"; a value may hold ':' (IP:PORT). */
		char *key = trim(s), *val = trim(sep + 1);
		const opt *p = find(key);
		if (!p) {
			snprintf(err, errlen, "%s:%d: unknown setting '%s'", path, lineno, key);
			rc = -1;
			break;
		}
		if (!strcmp(key, "config")) continue;
		char why[200];
		if (layer_set(l, p, val, why, sizeof why) < 0) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
			rc = -1;
			break;
		}
	}
	fclose(f);
	return rc;
}

static int read_env(layer *l, char *err, size_t errlen)
{
	for (int i = 0; i < NOPT; i++) {
		const opt *p = &table[i];
		char var[64] = "SKEIN_";
		size_t k = strlen(var);
		for (const char *c = p->flag; *c && k < sizeof var - 1; c++)
			var[k++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
		var[k] = 0;
		const char *v = getenv(var);
		if (!v || !*v) continue;
		if (p->t != T_LIST) {
			if (layer_set(l, p, v, err, errlen) < 0) return -1;
			continue;
		}
		char *copy = strdup(v), *save = NULL;
		for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			char *t = trim(tok);
			if (*t && layer_set(l, p, t, err, errlen) < 0) { free(copy); return -1; }
		}
		free(copy);
	}
	return 0;
}

static layer g_cli; /* kept for SIGHUP: flags still win after a reload */

/* Tags travel in gossip and are printed by every agent: KEY=VALUE, the key
 * non-empty, both printable UTF-8 (no control characters) and bounded. */
static int tags_check(const agent_opts *o, char *err, size_t errlen)
{
	for (int i = 0; i < o->ntag; i++) {
		const char *kv = o->tag[i], *eq = strchr(kv, '=');
		char why[96], key[OPTS_TAG_KEY_MAX + 1];
		char shown[80];
		sk_text_escape(kv, shown, sizeof shown);
		if (!eq || eq == kv) {
			snprintf(err, errlen, "--tag '%s': expected KEY=VALUE", shown);
			return -1;
		}
		size_t kl = (size_t)(eq - kv);
		if (kl > OPTS_TAG_KEY_MAX) {
			snprintf(err, errlen, "--tag '%s': key longer than %d bytes", shown, OPTS_TAG_KEY_MAX);
			return -1;
		}
		memcpy(key, kv, kl);
		key[kl] = 0;
		const char *part = "key";
		if (sk_text_check(key, OPTS_TAG_KEY_MAX, why, sizeof why) < 0 ||
		    (part = "value", sk_text_check(eq + 1, OPTS_TAG_VALUE_MAX, why, sizeof why) < 0)) {
			snprintf(err, errlen, "--tag '%s': %s: %s (printable UTF-8, key up to %d, value up to %d bytes)",
				 shown, part, why, OPTS_TAG_KEY_MAX, OPTS_TAG_VALUE_MAX);
			return -1;
		}
	}
	return 0;
}

static int build(agent_opts *o, bool reload, char *err, size_t errlen)
{
	layer file = { 0 }, env = { 0 };
	int rc = -1;
	const char *cfg = g_cli.set[(int)(find("config") - table)] ? g_cli.v.config : getenv("SKEIN_CONFIG");
	if (cfg && *cfg && read_file(&file, cfg, err, errlen) < 0) goto out;
	if (read_env(&env, err, errlen) < 0) goto out;
	/* a reload that fails keeps the tags and level in force */
	char *old_tag[OPTS_LIST_MAX], old_level[sizeof o->log_level];
	int old_ntag = 0;
	if (!reload) {
		agent_opts_defaults(o);
	} else {
		memcpy(old_tag, o->tag, sizeof old_tag);
		old_ntag = o->ntag;
		memcpy(old_level, o->log_level, sizeof old_level);
		/* what the sources no longer say goes back to the default */
		o->ntag = 0;
		snprintf(o->log_level, sizeof o->log_level, "info");
	}
	layer_merge(o, &file, reload);
	layer_merge(o, &env, reload);
	layer_merge(o, &g_cli, reload);
	if (tags_check(o, err, errlen) < 0) {
		if (reload) {
			list_clear(o->tag, &o->ntag);
			memcpy(o->tag, old_tag, sizeof old_tag);
			o->ntag = old_ntag;
			memcpy(o->log_level, old_level, sizeof old_level);
		}
		goto out;
	}
	if (reload) list_clear(old_tag, &old_ntag);
	if (cfg && *cfg) snprintf(o->config, sizeof o->config, "%s", cfg);
	rc = 0;
out:
	agent_opts_free(&file.v);
	agent_opts_free(&env.v);
	return rc;
}

int agent_opts_parse(agent_opts *o, int argc, char **argv, char *err, size_t errlen)
{
	agent_opts_free(&g_cli.v);
	memset(&g_cli, 0, sizeof g_cli);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			agent_opts_usage();
			return 1;
		}
		if (strncmp(a, "--", 2) != 0) {
			snprintf(err, errlen, "unexpected argument '%s' (flags start with --)", a);
			return -1;
		}
		char flag[64];
		const char *eq = strchr(a + 2, '=');
		size_t fl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (fl >= sizeof flag) fl = sizeof flag - 1;
		memcpy(flag, a + 2, fl);
		flag[fl] = 0;
		const opt *p = find(flag);
		if (!p) {
			snprintf(err, errlen, "unknown flag --%s (see skeind --help)", flag);
			return -1;
		}
		const char *v;
		if (eq) v = eq + 1;
		else if (p->t == T_BOOL) v = "true";
		else if (i + 1 < argc) v = argv[++i];
		else {
			snprintf(err, errlen, "--%s needs a value (%s)", flag, p->arg);
			return -1;
		}
		if (layer_set(&g_cli, p, v, err, errlen) < 0) return -1;
	}
	return build(o, false, err, errlen);
}

int agent_opts_reload(agent_opts *o, char *err, size_t errlen)
{
	return build(o, true, err, errlen);
}
