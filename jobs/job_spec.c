/* jobs/job_spec: Miles's job flags, a YAML file of the same keys, the rules.
 *
 * One table of keys drives both readers: a flag `--actor-num-nodes` and a
 * YAML key `actor-num-nodes` (or `actor_num_nodes`) set the same field
 * through the same value parser, so the two cannot drift apart.  Both
 * readers work on a copy and write the caller's spec only on success: a bad
 * flag or file leaves it as it was.
 *
 * The YAML reader uses libyaml's event API and accepts exactly one document
 * holding one flat mapping of scalars; anything else (lists, nested maps,
 * aliases, a second document) is an error with the file, line and key, since
 * a job file is typed by people and silence would hide their mistakes.
 *
 * Values never truncate: a string longer than its field is an error.
 * Differences from Miles: we also check that an engine fits in a node
 * (slime #1931) and that colocated engines do not straddle trainer nodes. */
#include "jobs/job_spec.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>


typedef enum { K_STR, K_U32, K_I32, K_BOOL, K_SIZE, K_DUR, K_BACKOFF, K_FILE } job_key_type;

typedef struct {
	const char *name;       /* the flag without its dashes */
	job_key_type type;
	size_t off, size;       /* the field in job_spec */
} job_key;

#define JOB_FIELD(f) offsetof(job_spec, f), sizeof(((job_spec *)0)->f)

static const job_key job_keys[] = {
	{"name", K_STR, JOB_FIELD(name)},
	{"actor-num-nodes", K_U32, JOB_FIELD(actor_num_nodes)},
	{"actor-num-gpus-per-node", K_U32, JOB_FIELD(actor_num_gpus_per_node)},
	{"rollout-num-gpus", K_U32, JOB_FIELD(rollout_num_gpus)},
	{"rollout-num-gpus-per-engine", K_U32, JOB_FIELD(rollout_num_gpus_per_engine)},
	{"num-gpus-per-node", K_U32, JOB_FIELD(num_gpus_per_node)},
	{"colocate", K_BOOL, JOB_FIELD(colocate)},
	{"update-weight-transfer-mode", K_STR, JOB_FIELD(transfer_mode)},
	{"update-weight-buffer-size", K_SIZE, JOB_FIELD(buffer_size)},
	{"update-weight-disk-dir", K_STR, JOB_FIELD(disk_dir)},
	{"trainer-cmd", K_STR, JOB_FIELD(trainer_cmd)},
	{"rollout-cmd", K_STR, JOB_FIELD(rollout_cmd)},
	{"max-restarts", K_I32, JOB_FIELD(max_restarts)},
	{"restart-backoff", K_BACKOFF, 0, 0},
	{"stop-grace", K_DUR, JOB_FIELD(stop_grace_ms)},
	{"update-weight-timeout", K_DUR, JOB_FIELD(update_timeout_ms)},
	{"update-on-engine-loss", K_STR, JOB_FIELD(on_engine_loss)},
	{"rollout-engine", K_STR, JOB_FIELD(rollout_engine)},
	{"pause-generation-mode", K_STR, JOB_FIELD(pause_mode)},
	{"rollout-engine-layout", K_STR, JOB_FIELD(engine_layout)},
	{"file", K_FILE, 0, 0},
};
enum { JOB_NKEYS = sizeof job_keys / sizeof job_keys[0] };
/* the YAML reader marks keys seen in one uint32_t */
_Static_assert(JOB_NKEYS <= 32, "job_yaml_doc's `seen` bitmask holds 32 keys");

static const char *const job_modes[] = {"broadcast", "broadcast_packed", "p2p", "disk-delta", "colocated"};
static const char *const job_losses[] = {"drop", "abort"};   /* --update-on-engine-loss */
static const char *const job_engines[] = {"skein", "sglang", "vllm"};          /* --rollout-engine */
static const char *const job_pauses[] = {"abort", "retract", "in_place"};      /* --pause-generation-mode */

enum {
	JOB_SHOW_MAX = 48,  /* bytes of a bad value quoted back in an error */
	JOB_FRAC_MAX = 9,   /* decimals a duration may carry (keeps the math in 64 bits) */
};

static void job_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void job_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen) return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* A user's value quoted back on one line: shortened, control bytes as '?'. */
static const char *job_show(const char *v, size_t len, char *buf, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 4 < cap; i++) {
		if (n >= JOB_SHOW_MAX) {
			memcpy(buf + n, "...", 3);
			n += 3;
			break;
		}
		unsigned char c = (unsigned char)v[i];
		buf[n++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	buf[n] = 0;
	return buf;
}

void job_spec_defaults(job_spec *s)
{
	memset(s, 0, sizeof *s);
	s->actor_num_nodes = 1;
	s->actor_num_gpus_per_node = 8;
	s->rollout_num_gpus = 0;
	s->rollout_num_gpus_per_engine = 1;
	s->num_gpus_per_node = 8;
	s->colocate = false;
	snprintf(s->transfer_mode, sizeof s->transfer_mode, "broadcast");
	s->buffer_size = 512ull << 20;
	s->max_restarts = 10;
	s->backoff_min_ms = 1000;
	s->backoff_max_ms = 30000;
	s->stop_grace_ms = 5000;
	s->update_timeout_ms = JOB_UPDATE_TIMEOUT_MS;
	snprintf(s->on_engine_loss, sizeof s->on_engine_loss, "%s", JOB_ENGINE_LOSS_DEFAULT);
	snprintf(s->rollout_engine, sizeof s->rollout_engine, "skein");
	snprintf(s->pause_mode, sizeof s->pause_mode, "retract");
}

/* ---- value parsers ---- */

static int job_parse_u64(const char **p, uint64_t *out)
{
	const char *q = *p;
	uint64_t v = 0;
	if (!isdigit((unsigned char)*q)) return -1;
	for (; isdigit((unsigned char)*q); q++) {
		unsigned d = (unsigned)(*q - '0');
		if (v > (UINT64_MAX - d) / 10) return -1;
		v = v * 10 + d;
	}
	*p = q;
	*out = v;
	return 0;
}

static int job_parse_u32(const char *v, uint32_t *out)
{
	uint64_t x;
	if (job_parse_u64(&v, &x) != 0 || *v || x > UINT32_MAX) return -1;
	*out = (uint32_t)x;
	return 0;
}

static int job_parse_i32(const char *v, int32_t *out)
{
	bool neg = *v == '-';
	uint64_t x;
	if (neg) v++;
	if (job_parse_u64(&v, &x) != 0 || *v) return -1;
	if (neg ? x > (uint64_t)INT32_MAX + 1 : x > INT32_MAX) return -1;
	*out = neg ? (int32_t)(-(int64_t)x) : (int32_t)x;
	return 0;
}

static int job_parse_bool(const char *v, bool *out)
{
	if (!strcasecmp(v, "true") || !strcasecmp(v, "yes")) *out = true;
	else if (!strcasecmp(v, "false") || !strcasecmp(v, "no")) *out = false;
	else return -1;
	return 0;
}

int job_parse_size(const char *v, uint64_t *out)
{
	static const struct { const char *sfx; uint64_t mul; } units[] = {
		{"", 1}, {"b", 1},
		{"k", 1000ull}, {"kb", 1000ull}, {"kib", 1ull << 10},
		{"m", 1000000ull}, {"mb", 1000000ull}, {"mib", 1ull << 20},
		{"g", 1000000000ull}, {"gb", 1000000000ull}, {"gib", 1ull << 30},
		{"t", 1000000000000ull}, {"tb", 1000000000000ull}, {"tib", 1ull << 40},
	};
	uint64_t x;
	if (!v || !out || job_parse_u64(&v, &x) != 0) return -1;
	if (*v == ' ' && !*(v += strspn(v, " "))) return -1;  /* "512 MiB" but not "512 " */
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcasecmp(v, units[i].sfx) != 0) continue;
		if (x > UINT64_MAX / units[i].mul) return -1;
		*out = x * units[i].mul;
		return 0;
	}
	return -1;
}

int job_parse_duration_ms(const char *v, uint32_t *out)
{
	static const struct { const char *sfx; uint64_t ms; } units[] = {
		{"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"min", 60000}, {"h", 3600000},
	};
	uint64_t ip, frac = 0, scale = 1;
	if (!v || !out || job_parse_u64(&v, &ip) != 0) return -1;
	if (*v == '.') {
		v++;
		if (!isdigit((unsigned char)*v)) return -1;
		for (int nd = 0; isdigit((unsigned char)*v); v++, nd++) {
			if (nd == JOB_FRAC_MAX) return -1;
			frac = frac * 10 + (uint64_t)(*v - '0');
			scale *= 10;
		}
	}
	if (*v == ' ' && !*(v += strspn(v, " "))) return -1;
	if (ip > UINT32_MAX) return -1;  /* even in ms it would not fit */
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcasecmp(v, units[i].sfx) != 0) continue;
		/* ip < 2^32 and unit < 2^22, frac < 10^9: no 64-bit overflow */
		uint64_t f = frac * units[i].ms;
		if (f % scale) return -1;  /* finer than a millisecond */
		uint64_t ms = ip * units[i].ms + f / scale;
		if (ms > UINT32_MAX) return -1;
		*out = (uint32_t)ms;
		return 0;
	}
	return -1;
}

bool job_name_ok(const char *name)
{
	if (!name || !isalnum((unsigned char)name[0])) return false;
	size_t n = 0;
	for (; name[n]; n++) {
		unsigned char c = (unsigned char)name[n];
		if (n >= JOB_NAME_MAX) return false;
		if (!(c < 0x80 && (isalnum(c) || c == '_' || c == '.' || c == '-'))) return false;
	}
	return true;
}

/* ---- the key table ---- */

/* Flags and YAML keys match with '-' and '_' as the same character. */
static const job_key *job_key_find(const char *name, size_t len)
{
	for (size_t i = 0; i < JOB_NKEYS; i++) {
		const char *k = job_keys[i].name;
		size_t j = 0;
		for (; j < len && k[j]; j++) {
			char c = name[j] == '_' ? '-' : name[j];
			if (c != k[j]) break;
		}
		if (j == len && !k[j]) return &job_keys[i];
	}
	return NULL;
}

static int job_yaml_load(job_spec *s, const char *path, char *err, size_t errlen);

/* Sets one key from its text.  On error `msg` says what is wrong with the
 * value; the caller prefixes where it came from (flag or file:line). */
static int job_key_set(job_spec *s, const job_key *k, const char *v, size_t len, char *msg, size_t msglen)
{
	char shown[JOB_SHOW_MAX + 8];
	void *f = (char *)s + k->off;
	if (memchr(v, 0, len)) {
		job_err(msg, msglen, "the value contains a NUL byte");
		return -1;
	}
	job_show(v, len, shown, sizeof shown);
	switch (k->type) {
	case K_STR:
		if (len >= k->size) {
			job_err(msg, msglen, "%zu bytes is longer than the limit of %zu", len, k->size - 1);
			return -1;
		}
		memcpy(f, v, len);
		((char *)f)[len] = 0;
		return 0;
	case K_U32:
		if (job_parse_u32(v, f) != 0) {
			job_err(msg, msglen, "expected a whole number up to %u, got '%s'", UINT32_MAX, shown);
			return -1;
		}
		return 0;
	case K_I32:
		if (job_parse_i32(v, f) != 0) {
			job_err(msg, msglen, "expected a whole number, got '%s'", shown);
			return -1;
		}
		return 0;
	case K_BOOL:
		if (job_parse_bool(v, f) != 0) {
			job_err(msg, msglen, "expected true or false, got '%s'", shown);
			return -1;
		}
		return 0;
	case K_SIZE:
		if (job_parse_size(v, f) != 0) {
			job_err(msg, msglen, "expected a size such as 512MiB, 1G or 4096, got '%s'", shown);
			return -1;
		}
		return 0;
	case K_DUR:
		if (job_parse_duration_ms(v, f) != 0) {
			job_err(msg, msglen, "expected a duration such as 250ms, 5s or 2m, got '%s'", shown);
			return -1;
		}
		return 0;
	case K_BACKOFF: {
		const char *colon = strchr(v, ':');
		char a[32];
		uint32_t lo, hi;
		size_t alen = colon ? (size_t)(colon - v) : 0;
		if (!colon || alen >= sizeof a || strchr(colon + 1, ':')) {
			job_err(msg, msglen, "expected MIN:MAX such as 1s:30s, got '%s'", shown);
			return -1;
		}
		memcpy(a, v, alen);
		a[alen] = 0;
		if (job_parse_duration_ms(a, &lo) != 0 || job_parse_duration_ms(colon + 1, &hi) != 0) {
			job_err(msg, msglen, "expected MIN:MAX durations such as 1s:30s, got '%s'", shown);
			return -1;
		}
		s->backoff_min_ms = lo;
		s->backoff_max_ms = hi;
		return 0;
	}
	case K_FILE:
		/* the YAML reader names the file and line; the caller adds --file */
		return job_yaml_load(s, v, msg, msglen);
	}
	return -1;
}

int job_spec_parse_args(job_spec *s, int argc, char **argv, char *err, size_t errlen)
{
	job_spec t;
	char msg[512], shown[JOB_SHOW_MAX + 8];
	if (!s || argc < 0 || (argc > 0 && !argv)) {
		job_err(err, errlen, "bad arguments");
		return -1;
	}
	t = *s;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!a) {
			job_err(err, errlen, "missing argument");
			return -1;
		}
		if (strncmp(a, "--", 2) != 0 || !a[2]) {
			job_err(err, errlen, "unexpected argument '%s' (flags start with --)",
				job_show(a, strlen(a), shown, sizeof shown));
			return -1;
		}
		const char *name = a + 2, *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const job_key *k = job_key_find(name, nlen);
		if (!k) {
			job_err(err, errlen, "unknown flag '--%s'", job_show(name, nlen, shown, sizeof shown));
			return -1;
		}
		const char *v;
		if (eq) {
			v = eq + 1;
		} else if (k->type == K_BOOL) {
			v = "true";  /* --colocate takes no value */
		} else if (i + 1 < argc && argv[i + 1] && strncmp(argv[i + 1], "--", 2) != 0) {
			v = argv[++i];
		} else {
			/* a value starting with -- must be written --flag=value */
			job_err(err, errlen, "--%s: missing value", k->name);
			return -1;
		}
		if (job_key_set(&t, k, v, strlen(v), msg, sizeof msg) != 0) {
			job_err(err, errlen, "--%s: %s", k->name, msg);
			return -1;
		}
	}
	*s = t;
	return 0;
}

/* ---- YAML ---- */

static const char *job_yaml_what(yaml_event_type_t t)
{
	switch (t) {
	case YAML_SEQUENCE_START_EVENT: return "a list";
	case YAML_MAPPING_START_EVENT: return "a nested mapping";
	case YAML_ALIAS_EVENT: return "an alias (*name)";
	case YAML_SCALAR_EVENT: return "a single value";
	default: return "something else";
	}
}

static int job_yaml_next(yaml_parser_t *p, yaml_event_t *ev, const char *path, char *err, size_t errlen)
{
	if (yaml_parser_parse(p, ev)) return 0;
	if (p->error == YAML_READER_ERROR)  /* bad bytes (not UTF-8, control characters) or a read error */
		job_err(err, errlen, "%s: cannot read at byte %zu: %s", path, p->problem_offset,
			p->problem ? p->problem : "read error");
	else
		job_err(err, errlen, "%s:%zu: not valid YAML: %s%s%s", path, p->problem_mark.line + 1,
			p->problem ? p->problem : "parse error", p->context ? " " : "", p->context ? p->context : "");
	return -1;
}

/* Frees the current event (when there is one) and reads the next. */
static int job_yaml_step(yaml_parser_t *p, yaml_event_t *ev, bool *have, const char *path, char *err, size_t errlen)
{
	if (*have) yaml_event_delete(ev);
	*have = job_yaml_next(p, ev, path, err, errlen) == 0;
	return *have ? 0 : -1;
}

/* Reads one flat mapping into s (which the caller has copied). */
static int job_yaml_doc(job_spec *s, yaml_parser_t *p, const char *path, char *err, size_t errlen)
{
	yaml_event_t ev;
	uint32_t seen = 0;
	char msg[512], shown[JOB_SHOW_MAX + 8];
	int rc = -1;
	bool have = false;

#define JOB_YAML_STEP() do { if (job_yaml_step(p, &ev, &have, path, err, errlen) != 0) goto out; } while (0)
	JOB_YAML_STEP();  /* stream start */
	JOB_YAML_STEP();
	if (ev.type == YAML_STREAM_END_EVENT) {
		job_err(err, errlen, "%s: empty file; expected a mapping of job keys such as 'actor-num-nodes: 1'", path);
		goto out;
	}
	if (ev.type != YAML_DOCUMENT_START_EVENT) goto bad_doc;
	JOB_YAML_STEP();
	if (ev.type != YAML_MAPPING_START_EVENT) goto bad_doc;
	for (;;) {
		JOB_YAML_STEP();
		if (ev.type == YAML_MAPPING_END_EVENT) break;
		size_t line = ev.start_mark.line + 1;
		if (ev.type != YAML_SCALAR_EVENT) {
			job_err(err, errlen, "%s:%zu: a key must be a plain name, got %s", path, line,
				job_yaml_what(ev.type));
			goto out;
		}
		const char *kname = (const char *)ev.data.scalar.value;
		size_t klen = ev.data.scalar.length;
		const job_key *k = job_key_find(kname, klen);
		job_show(kname, klen, shown, sizeof shown);
		if (k && k->type == K_FILE) {
			job_err(err, errlen, "%s:%zu: file: a job file cannot load another", path, line);
			goto out;
		}
		if (!k) {
			job_err(err, errlen, "%s:%zu: unknown key '%s'%s", path, line, shown,
				klen && kname[0] == '-' ? " (write keys without the leading dashes)" : "");
			goto out;
		}
		uint32_t bit = 1u << (k - job_keys);
		if (seen & bit) {
			job_err(err, errlen, "%s:%zu: %s: given twice", path, line, k->name);
			goto out;
		}
		seen |= bit;
		JOB_YAML_STEP();
		line = ev.start_mark.line + 1;
		if (ev.type != YAML_SCALAR_EVENT) {
			job_err(err, errlen, "%s:%zu: %s: expected a single value, got %s", path, line, k->name,
				job_yaml_what(ev.type));
			goto out;
		}
		if (job_key_set(s, k, (const char *)ev.data.scalar.value, ev.data.scalar.length, msg, sizeof msg) != 0) {
			job_err(err, errlen, "%s:%zu: %s: %s", path, line, k->name, msg);
			goto out;
		}
	}
	JOB_YAML_STEP();  /* document end */
	JOB_YAML_STEP();
	if (ev.type != YAML_STREAM_END_EVENT) {
		job_err(err, errlen, "%s:%zu: a job file holds one document; found another", path,
			ev.start_mark.line + 1);
		goto out;
	}
	rc = 0;
	goto out;
#undef JOB_YAML_STEP
bad_doc:
	job_err(err, errlen, "%s:%zu: expected a mapping of job keys such as 'actor-num-nodes: 1', got %s", path,
		ev.start_mark.line + 1, job_yaml_what(ev.type));
out:
	if (have) yaml_event_delete(&ev);
	return rc;
}

static int job_yaml_load(job_spec *s, const char *path, char *err, size_t errlen)
{
	struct stat st;
	yaml_parser_t p;
	FILE *f = fopen(path, "rb");
	if (!f) {
		job_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		job_err(err, errlen, "%s: is a directory, not a job file", path);
		fclose(f);
		return -1;
	}
	if (!yaml_parser_initialize(&p)) {
		job_err(err, errlen, "%s: out of memory", path);
		fclose(f);
		return -1;
	}
	yaml_parser_set_input_file(&p, f);
	int rc = job_yaml_doc(s, &p, path, err, errlen);
	yaml_parser_delete(&p);
	fclose(f);
	return rc;
}

int job_spec_parse_yaml_buf(job_spec *s, const char *name, const uint8_t *buf, size_t len, char *err,
			    size_t errlen)
{
	yaml_parser_t p;
	if (!s || !name || (len && !buf)) {
		job_err(err, errlen, "bad arguments");
		return -1;
	}
	if (!yaml_parser_initialize(&p)) {
		job_err(err, errlen, "%s: out of memory", name);
		return -1;
	}
	yaml_parser_set_input_string(&p, len ? buf : (const uint8_t *)"", len);
	job_spec t = *s;
	int rc = job_yaml_doc(&t, &p, name, err, errlen);
	yaml_parser_delete(&p);
	if (rc == 0) *s = t;
	return rc;
}

int job_spec_parse_yaml(job_spec *s, const char *path, char *err, size_t errlen)
{
	if (!s || !path) {
		job_err(err, errlen, "bad arguments");
		return -1;
	}
	job_spec t = *s;
	if (job_yaml_load(&t, path, err, errlen) != 0) return -1;
	*s = t;
	return 0;
}

/* ---- the rules ---- */

static bool job_str_ok(const char *v, size_t cap) { return memchr(v, 0, cap) != NULL; }

/* Whether v is one of the n words of set. */
static bool job_str_in(const char *v, const char *const *set, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v, set[i])) return true;
	return false;
}

/* The GPUs a job asks for, trainer and engines (with --colocate the
 * engines' count is derived here). */
static int validate_gpus(job_spec *s, char *err, size_t errlen)
{
	if (s->num_gpus_per_node == 0 || s->num_gpus_per_node > JOB_GPUS_PER_NODE_MAX) {
		job_err(err, errlen, "--num-gpus-per-node: %u is not between 1 and %d", s->num_gpus_per_node,
			JOB_GPUS_PER_NODE_MAX);
		return -1;
	}
	if (s->actor_num_nodes == 0 || s->actor_num_nodes > JOB_NODES_MAX) {
		job_err(err, errlen, "--actor-num-nodes: %u is not between 1 and %d", s->actor_num_nodes,
			JOB_NODES_MAX);
		return -1;
	}
	if (s->actor_num_gpus_per_node == 0) {
		job_err(err, errlen, "--actor-num-gpus-per-node: must be at least 1");
		return -1;
	}
	if (s->actor_num_gpus_per_node > s->num_gpus_per_node) {
		job_err(err, errlen, "--actor-num-gpus-per-node %u is more than a node has (--num-gpus-per-node %u)",
			s->actor_num_gpus_per_node, s->num_gpus_per_node);
		return -1;
	}
	if (s->rollout_num_gpus_per_engine == 0) {
		job_err(err, errlen, "--rollout-num-gpus-per-engine: must be at least 1");
		return -1;
	}
	if (s->rollout_num_gpus_per_engine > s->num_gpus_per_node) {
		job_err(err, errlen, "--rollout-num-gpus-per-engine %u is wider than a node (--num-gpus-per-node %u)",
			s->rollout_num_gpus_per_engine, s->num_gpus_per_node);
		return -1;
	}
	if (s->colocate) {
		/* Miles: with --colocate the engines run on the actor's GPUs */
		s->rollout_num_gpus = s->actor_num_nodes * s->actor_num_gpus_per_node;
		if (s->actor_num_gpus_per_node % s->rollout_num_gpus_per_engine) {
			job_err(err, errlen,
				"--rollout-num-gpus-per-engine %u does not divide --actor-num-gpus-per-node %u: with --colocate an engine would straddle two nodes",
				s->rollout_num_gpus_per_engine, s->actor_num_gpus_per_node);
			return -1;
		}
	}
	if ((uint64_t)s->rollout_num_gpus > (uint64_t)JOB_NODES_MAX * JOB_GPUS_PER_NODE_MAX) {
		job_err(err, errlen, "--rollout-num-gpus: %u is more than %d", s->rollout_num_gpus,
			JOB_NODES_MAX * JOB_GPUS_PER_NODE_MAX);
		return -1;
	}
	if (s->rollout_num_gpus % s->rollout_num_gpus_per_engine) {
		job_err(err, errlen, "--rollout-num-gpus: %u is not a multiple of --rollout-num-gpus-per-engine %u",
			s->rollout_num_gpus, s->rollout_num_gpus_per_engine);
		return -1;
	}
	return 0;
}

int job_spec_validate(job_spec *s, char *err, size_t errlen)
{
	if (!s) {
		job_err(err, errlen, "bad arguments");
		return -1;
	}
	/* a spec built by hand or decoded elsewhere may hold unterminated text */
	if (!job_str_ok(s->name, sizeof s->name) || !job_str_ok(s->transfer_mode, sizeof s->transfer_mode) ||
	    !job_str_ok(s->disk_dir, sizeof s->disk_dir) || !job_str_ok(s->trainer_cmd, sizeof s->trainer_cmd) ||
	    !job_str_ok(s->rollout_cmd, sizeof s->rollout_cmd) ||
	    !job_str_ok(s->on_engine_loss, sizeof s->on_engine_loss) ||
	    !job_str_ok(s->rollout_engine, sizeof s->rollout_engine) || !job_str_ok(s->pause_mode, sizeof s->pause_mode) ||
	    !job_str_ok(s->engine_layout, sizeof s->engine_layout)) {
		job_err(err, errlen, "a text field is not terminated");
		return -1;
	}
	if (s->name[0] && !job_name_ok(s->name)) {
		job_err(err, errlen,
			"--name: '%s' is not a valid job name (up to %d of A-Z a-z 0-9 _ . -, starting with a letter or digit)",
			s->name, JOB_NAME_MAX);
		return -1;
	}
	if (validate_gpus(s, err, errlen) != 0) return -1;
	if (!job_str_in(s->transfer_mode, job_modes, sizeof job_modes / sizeof job_modes[0])) {
		job_err(err, errlen,
			"--update-weight-transfer-mode: unknown mode '%s' (broadcast, broadcast_packed, p2p, disk-delta, colocated)",
			s->transfer_mode);
		return -1;
	}
	if (s->colocate && !strcmp(s->transfer_mode, "broadcast_packed")) {
		job_err(err, errlen, "--update-weight-transfer-mode broadcast_packed cannot be used with --colocate");
		return -1;
	}
	if (!s->colocate && !strcmp(s->transfer_mode, "colocated")) {
		/* CUDA IPC needs trainer and engine on the same GPU */
		job_err(err, errlen, "--update-weight-transfer-mode colocated needs --colocate");
		return -1;
	}
	if (!strcmp(s->transfer_mode, "disk-delta") && !s->disk_dir[0]) {
		job_err(err, errlen, "--update-weight-transfer-mode disk-delta needs --update-weight-disk-dir");
		return -1;
	}
	if (s->disk_dir[0] && s->disk_dir[0] != '/') {
		/* every agent resolves it on its own host: relative means nothing */
		job_err(err, errlen, "--update-weight-disk-dir: '%s' is not an absolute path", s->disk_dir);
		return -1;
	}
	if (s->buffer_size == 0) {
		job_err(err, errlen, "--update-weight-buffer-size: must be at least 1 byte");
		return -1;
	}
	if (!s->trainer_cmd[0]) {
		job_err(err, errlen, "--trainer-cmd: missing (the command every trainer rank runs)");
		return -1;
	}
	if (s->rollout_num_gpus > 0 && !s->rollout_cmd[0]) {
		job_err(err, errlen, "--rollout-cmd: missing, and the job has %u rollout GPUs%s",
			s->rollout_num_gpus, s->colocate ? " (--colocate gives it the actor's)" : "");
		return -1;
	}
	if (s->max_restarts < 0) {
		job_err(err, errlen, "--max-restarts: %d is negative (0 = never restart)", s->max_restarts);
		return -1;
	}
	if (s->backoff_min_ms > s->backoff_max_ms) {
		job_err(err, errlen, "--restart-backoff: MIN %ums is more than MAX %ums", s->backoff_min_ms,
			s->backoff_max_ms);
		return -1;
	}
	if (s->update_timeout_ms < JOB_UPDATE_TIMEOUT_MIN_MS) {
		job_err(err, errlen, "--update-weight-timeout: %ums is less than the minimum of 1s", s->update_timeout_ms);
		return -1;
	}
	if (!job_str_in(s->on_engine_loss, job_losses, sizeof job_losses / sizeof job_losses[0])) {
		job_err(err, errlen, "--update-on-engine-loss: unknown policy '%s' (drop, abort)", s->on_engine_loss);
		return -1;
	}
	if (!job_str_in(s->rollout_engine, job_engines, sizeof job_engines / sizeof job_engines[0])) {
		job_err(err, errlen, "--rollout-engine: unknown engine '%s' (skein, sglang, vllm)", s->rollout_engine);
		return -1;
	}
	if (!job_str_in(s->pause_mode, job_pauses, sizeof job_pauses / sizeof job_pauses[0])) {
		job_err(err, errlen, "--pause-generation-mode: unknown mode '%s' (abort, retract, in_place)", s->pause_mode);
		return -1;
	}
	/* the sidecar allocates its copy from the layout before the first version */
	if (strcmp(s->rollout_engine, "skein") && s->rollout_num_gpus > 0 && s->engine_layout[0] != '/') {
		job_err(err, errlen, "--rollout-engine %s needs --rollout-engine-layout, an absolute path (the weights' "
			"names, shapes and dtypes as JSON)", s->rollout_engine);
		return -1;
	}
	return 0;
}

/* ---- the disk folder (issue 23 item 2) ---- */

int job_path_normalize(const char *in, char *out, size_t outlen)
{
	if (!in || in[0] != '/' || outlen < 2) return -1;
	size_t k = 0;
	out[k++] = '/';
	out[k] = 0;
	for (const char *p = in; *p;) {
		while (*p == '/') p++;
		const char *e = p;
		while (*e && *e != '/') e++;
		size_t len = (size_t)(e - p);
		if (len == 0 || (len == 1 && p[0] == '.')) {
			/* nothing */
		} else if (len == 2 && p[0] == '.' && p[1] == '.') {
			while (k > 1 && out[k - 1] != '/') k--; /* drop the last component */
			if (k > 1) k--;                          /* and its slash */
			out[k] = 0;
		} else {
			if (k + (k > 1) + len + 1 > outlen) return -1;
			if (k > 1) out[k++] = '/';
			memcpy(out + k, p, len);
			k += len;
			out[k] = 0;
		}
		p = e;
	}
	return 0;
}

/* Whether path is prefix or inside it (both normalized). */
static bool job_path_within(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);
	if (n == 1) return true; /* "/" */
	return !strncmp(path, prefix, n) && (path[n] == 0 || path[n] == '/');
}

/* Why a normalized path is refused, or NULL. */
static const char *job_dir_refused(const char *p, const char *data_dir)
{
	static const char *const sys[] = { "/etc", "/usr", "/bin", "/sbin", "/boot", "/proc", "/sys", "/dev",
					    "/var/lib/skein" };
	if (!strcmp(p, "/")) return "the root folder";
	for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++)
		if (job_path_within(p, sys[i])) return sys[i];
	if (!strncmp(p, "/lib", 4)) return "/lib*"; /* /lib /lib64 /libx32 ... */
	char dd[JOB_DIR_MAX];
	if (data_dir && data_dir[0] && job_path_normalize(data_dir, dd, sizeof dd) == 0 && job_path_within(p, dd))
		return "the agent's data dir";
	return NULL;
}

/* realpath of dir, or of its nearest existing parent with the rest added
 * back; -1 when nothing of it resolves. */
static int job_dir_resolve(const char *norm, char *out, size_t outlen)
{
	char head[JOB_DIR_MAX], rp[PATH_MAX];
	snprintf(head, sizeof head, "%s", norm);
	for (;;) {
		if (realpath(head, rp)) {
			/* rest starts with '/', except after "/" itself */
			const char *rest = norm + strlen(head);
			if (!strcmp(rp, "/") && *rest == '/') rest++;
			return snprintf(out, outlen, "%s%s", rp, rest) < (int)outlen ? 0 : -1;
		}
		char *slash = strrchr(head, '/');
		if (!slash || slash == head) {
			if (!strcmp(head, "/")) return -1;
			snprintf(head, sizeof head, "/");
			continue;
		}
		*slash = 0;
	}
}

int job_disk_dir_check(const char *dir, const char *data_dir, char *err, size_t errlen)
{
	char norm[JOB_DIR_MAX], real[PATH_MAX + JOB_DIR_MAX];
	if (!dir || !dir[0]) return 0;
	if (job_path_normalize(dir, norm, sizeof norm) != 0) {
		job_err(err, errlen, "--update-weight-disk-dir: '%s' is not an absolute path", dir);
		return -1;
	}
	const char *why = job_dir_refused(norm, data_dir);
	if (why) {
		job_err(err, errlen, "--update-weight-disk-dir %s: refused, it is %s%s (the agents write and remove there as root)",
			dir, strcmp(why, "the root folder") && strcmp(why, "the agent's data dir") ? "inside " : "", why);
		return -1;
	}
	if (job_dir_resolve(norm, real, sizeof real) == 0 && (why = job_dir_refused(real, data_dir))) {
		job_err(err, errlen, "--update-weight-disk-dir %s: refused, it resolves to %s, %s%s", dir, real,
			strcmp(why, "the root folder") && strcmp(why, "the agent's data dir") ? "inside " : "", why);
		return -1;
	}
	return 0;
}

int job_disk_dir_warning(const char *dir, unsigned uid, char *out, size_t outlen)
{
	char norm[JOB_DIR_MAX], real[PATH_MAX + JOB_DIR_MAX];
	if (out && outlen) out[0] = 0;
	if (!dir || !dir[0] || job_path_normalize(dir, norm, sizeof norm) != 0) return 0;
	if (job_dir_resolve(norm, real, sizeof real) != 0) return 0;
	/* from the folder (or the part of it that exists) up to / */
	bool self = true;
	for (;;) {
		struct stat st;
		if (stat(real, &st) == 0) {
			bool others = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
			if (st.st_uid != uid && st.st_uid != 0) {
				snprintf(out, outlen, "disk folder %s: %s is owned by uid %u: that user can replace it", dir,
					 real, (unsigned)st.st_uid);
				return 1;
			}
			if (others && self) {
				snprintf(out, outlen, "disk folder %s: %s is writable by other users (mode %04o): they can plant files there",
					 dir, real, (unsigned)(st.st_mode & 07777));
				return 1;
			}
			if (others && !(st.st_mode & S_ISVTX)) {
				snprintf(out, outlen, "disk folder %s: its parent %s is writable by other users and not sticky (mode %04o): they can swap the folder",
					 dir, real, (unsigned)(st.st_mode & 07777));
				return 1;
			}
		}
		self = false; /* a folder not made yet: the first one found is a parent */
		if (!strcmp(real, "/")) return 0;
		char *slash = strrchr(real, '/');
		if (slash == real) slash[1] = 0;
		else *slash = 0;
	}
}

uint32_t job_spec_trainer_ranks(const job_spec *s) { return s->actor_num_nodes * s->actor_num_gpus_per_node; }

uint32_t job_spec_engines(const job_spec *s)
{
	return s->rollout_num_gpus_per_engine ? s->rollout_num_gpus / s->rollout_num_gpus_per_engine : 0;
}

uint32_t job_spec_slots(const job_spec *s)
{
	uint32_t a = job_spec_trainer_ranks(s), r = s->rollout_num_gpus;
	if (s->colocate) return a > r ? a : r;
	return a + r;
}

