/* tests/unit/jobs_spec_test: jobs/job_spec (flags, YAML, rules, protobuf).
 *
 * Checks the defaults, every flag in both spellings, YAML files (and that
 * flags after --file override them), every rule's message naming its flag,
 * the size and duration parsers at their edges, a protobuf round trip, and
 * that malformed YAML and random garbage end in an error, never a crash or
 * a partly changed spec.  Temporary files go under /tmp (mkstemp). */
#include "tests/t.h"

#include <unistd.h>

#include "common/sk_rng.h"
#include "jobs/job_codec.h"
#include "jobs/job_spec.h"
#include "proto/jobs.pb-c.h"

#define ARGS(...) ((char *[]){__VA_ARGS__})
#define NARGS(...) ((int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)))
/* parse a list of flags into s; returns parse_args's result */
#define PARSE(s, err, ...) job_spec_parse_args((s), NARGS(__VA_ARGS__), ARGS(__VA_ARGS__), (err), sizeof(err))

#define T_HAS(hay, needle)                                                        \
	do {                                                                      \
		const char *h_ = (hay), *n_ = (needle);                           \
		if (!strstr(h_, n_)) T_FAIL("'%s' does not contain '%s'", h_, n_); \
	} while (0)

/* A temporary file holding `text`; the path goes into path[64]. */
static void tmp_write(char *path, const char *text, size_t len)
{
	snprintf(path, 64, "/tmp/skein-jobspec-XXXXXX");
	int fd = mkstemp(path);
	T_CHECK(fd >= 0);
	T_EQ(write(fd, text, len), (long long)len);
	close(fd);
}

static int yaml_text(job_spec *s, const char *text, char *err, size_t errlen)
{
	char path[64];
	tmp_write(path, text, strlen(text));
	int rc = job_spec_parse_yaml(s, path, err, errlen);
	unlink(path);
	return rc;
}

/* A spec that passes validate(): the worked example, split. */
static void good_spec(job_spec *s)
{
	job_spec_defaults(s);
	s->rollout_num_gpus = 8;
	s->rollout_num_gpus_per_engine = 2;
	snprintf(s->trainer_cmd, sizeof s->trainer_cmd, "python train.py");
	snprintf(s->rollout_cmd, sizeof s->rollout_cmd, "python -m sglang.launch_server");
}

T_TEST(defaults)
{
	job_spec s;
	job_spec_defaults(&s);
	T_STREQ(s.name, "");
	T_EQ(s.actor_num_nodes, 1);
	T_EQ(s.actor_num_gpus_per_node, 8);
	T_EQ(s.rollout_num_gpus, 0);
	T_EQ(s.rollout_num_gpus_per_engine, 1);
	T_EQ(s.num_gpus_per_node, 8);
	T_CHECK(!s.colocate);
	T_STREQ(s.transfer_mode, "broadcast");
	T_EQ(s.buffer_size, 512ull << 20);
	T_STREQ(s.disk_dir, "");
	T_EQ(s.max_restarts, 10);
	T_EQ(s.backoff_min_ms, 1000);
	T_EQ(s.backoff_max_ms, 30000);
	T_EQ(s.stop_grace_ms, 5000);
	T_EQ(s.update_timeout_ms, 60000);
	T_STREQ(s.on_engine_loss, "drop");
	T_EQ(job_spec_trainer_ranks(&s), 8);
	T_EQ(job_spec_engines(&s), 0);
	T_EQ(job_spec_slots(&s), 8);
}

T_TEST(every_flag)
{
	job_spec s;
	char err[256] = "";
	job_spec_defaults(&s);
	int rc = PARSE(&s, err, "--name", "grpo-7b", "--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
		       "--rollout-num-gpus", "12", "--rollout-num-gpus-per-engine", "3", "--num-gpus-per-node", "16",
		       "--update-weight-transfer-mode", "disk-delta", "--update-weight-buffer-size", "1GiB",
		       "--update-weight-disk-dir", "/shared/w", "--trainer-cmd", "python train.py --lr 1e-6",
		       "--rollout-cmd", "sglang serve", "--max-restarts", "3", "--restart-backoff", "250ms:1m",
		       "--stop-grace", "1.5s", "--colocate", "--update-weight-timeout", "2m",
		       "--update-on-engine-loss", "abort");
	if (rc != 0) T_FAIL("%s", err);
	T_STREQ(s.name, "grpo-7b");
	T_EQ(s.actor_num_nodes, 2);
	T_EQ(s.actor_num_gpus_per_node, 4);
	T_EQ(s.rollout_num_gpus, 12);
	T_EQ(s.rollout_num_gpus_per_engine, 3);
	T_EQ(s.num_gpus_per_node, 16);
	T_CHECK(s.colocate);
	T_STREQ(s.transfer_mode, "disk-delta");
	T_EQ(s.buffer_size, 1ull << 30);
	T_STREQ(s.disk_dir, "/shared/w");
	T_STREQ(s.trainer_cmd, "python train.py --lr 1e-6");
	T_STREQ(s.rollout_cmd, "sglang serve");
	T_EQ(s.max_restarts, 3);
	T_EQ(s.backoff_min_ms, 250);
	T_EQ(s.backoff_max_ms, 60000);
	T_EQ(s.stop_grace_ms, 1500);
	T_EQ(s.update_timeout_ms, 120000);
	T_STREQ(s.on_engine_loss, "abort");
}

/* --update-weight-timeout and --update-on-engine-loss (#13): parsed as a
 * duration and a word, in both spellings and from YAML; the rules refuse a
 * timeout under 1s and a policy other than drop or abort, naming the flag. */
T_TEST(update_flags)
{
	job_spec s;
	char err[256] = "";
	good_spec(&s);
	T_EQ(PARSE(&s, err, "--update-weight-timeout=1s", "--update_on_engine_loss", "drop"), 0);
	T_EQ(s.update_timeout_ms, 1000);
	T_STREQ(s.on_engine_loss, "drop");
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(PARSE(&s, err, "--update-weight-timeout", "90", "--update-on-engine-loss=abort"), 0);
	T_EQ(s.update_timeout_ms, 90000); /* bare = seconds */
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(yaml_text(&s, "update-weight-timeout: 1500ms\nupdate_on_engine_loss: drop\n", err, sizeof err), 0);
	T_EQ(s.update_timeout_ms, 1500);
	T_STREQ(s.on_engine_loss, "drop");

	/* bad values at parse time: the spec stays as it was */
	job_spec before = s;
	const char *bad_parse[][2] = {
		{"--update-weight-timeout", "soon"}, {"--update-weight-timeout", "-5s"},
		{"--update-weight-timeout", "1.0001s"}, {"--update-weight-timeout", "5000000000"},
		{"--update-on-engine-loss", "abortabort"},
	};
	for (size_t i = 0; i < sizeof bad_parse / sizeof bad_parse[0]; i++) {
		char *argv[] = {(char *)bad_parse[i][0], (char *)bad_parse[i][1]};
		err[0] = 0;
		if (job_spec_parse_args(&s, 2, argv, err, sizeof err) != -1) T_FAIL("%s %s parsed", argv[0], argv[1]);
		T_HAS(err, bad_parse[i][0]);
		T_CHECK(memcmp(&s, &before, sizeof s) == 0);
	}
	T_EQ(yaml_text(&s, "update-weight-timeout: [1s]\n", err, sizeof err), -1);
	T_HAS(err, "update-weight-timeout: expected a single value");

	/* values that parse but break a rule */
	const char *bad_rule[][3] = {
		{"--update-weight-timeout", "999ms", "--update-weight-timeout: 999ms is less than the minimum of 1s"},
		{"--update-weight-timeout", "0", "--update-weight-timeout: 0ms"},
		{"--update-on-engine-loss", "ignore", "--update-on-engine-loss: unknown policy 'ignore' (drop, abort)"},
		{"--update-on-engine-loss", "", "--update-on-engine-loss: unknown policy ''"},
		{"--update-on-engine-loss", "DROP", "--update-on-engine-loss:"},
	};
	for (size_t i = 0; i < sizeof bad_rule / sizeof bad_rule[0]; i++) {
		good_spec(&s);
		char *argv[] = {(char *)bad_rule[i][0], (char *)bad_rule[i][1]};
		char flag[64];
		snprintf(flag, sizeof flag, "%s=%s", argv[0], argv[1]);
		char *one[] = {flag};
		if (job_spec_parse_args(&s, 1, one, err, sizeof err) != 0) T_FAIL("%s: %s", flag, err);
		err[0] = 0;
		if (job_spec_validate(&s, err, sizeof err) != -1) T_FAIL("%s validated", flag);
		T_HAS(err, bad_rule[i][2]);
	}
}

/* --rollout-engine, --pause-generation-mode, --rollout-engine-layout (issue
 * 24): defaults skein and retract; flags and YAML; a stock engine needs an
 * absolute layout path; unknown words refused naming the flag; the protobuf
 * round trip keeps them and an old spec decodes as the defaults. */
T_TEST(rollout_engine_flags)
{
	job_spec s;
	char err[256] = "";
	good_spec(&s);
	T_STREQ(s.rollout_engine, "skein");
	T_STREQ(s.pause_mode, "retract");
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(PARSE(&s, err, "--rollout-engine", "sglang", "--pause-generation-mode=in_place"), 0);
	T_EQ(job_spec_validate(&s, err, sizeof err), -1);
	T_HAS(err, "--rollout-engine sglang needs --rollout-engine-layout");
	T_EQ(PARSE(&s, err, "--rollout-engine-layout", "/m/layout.json"), 0);
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(yaml_text(&s, "rollout-engine: vllm\npause-generation-mode: abort\n", err, sizeof err), 0);
	T_STREQ(s.rollout_engine, "vllm");
	T_STREQ(s.pause_mode, "abort");
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	const char *bad[][3] = {
		{"--rollout-engine", "trt", "--rollout-engine: unknown engine 'trt' (skein, sglang, vllm)"},
		{"--pause-generation-mode", "stop", "--pause-generation-mode: unknown mode 'stop'"},
		{"--rollout-engine-layout", "rel.json", "needs --rollout-engine-layout, an absolute path"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		good_spec(&s);
		char *argv[] = {"--rollout-engine", "sglang", "--rollout-engine-layout", "/l.json",
				(char *)bad[i][0], (char *)bad[i][1]};
		if (job_spec_parse_args(&s, 6, argv, err, sizeof err) != 0) T_FAIL("%s: %s", bad[i][0], err);
		err[0] = 0;
		if (job_spec_validate(&s, err, sizeof err) != -1) T_FAIL("%s %s validated", bad[i][0], bad[i][1]);
		T_HAS(err, bad[i][2]);
	}
	/* the round trip, and a spec from before these fields */
	good_spec(&s);
	T_EQ(PARSE(&s, err, "--rollout-engine", "vllm", "--rollout-engine-layout", "/l.json",
		   "--pause-generation-mode", "abort"), 0);
	Skein__Jobs__JobSpec pb;
	job_spec_to_pb(&s, &pb);
	job_spec back;
	if (job_spec_from_pb(&back, &pb, err, sizeof err) != 0) T_FAIL("%s", err);
	T_STREQ(back.rollout_engine, "vllm");
	T_STREQ(back.pause_mode, "abort");
	T_STREQ(back.engine_layout, "/l.json");
	pb.rollout_engine = pb.pause_mode = pb.engine_layout = "";
	if (job_spec_from_pb(&back, &pb, err, sizeof err) != 0) T_FAIL("%s", err);
	T_STREQ(back.rollout_engine, "skein");
	T_STREQ(back.pause_mode, "retract");
}

T_TEST(flag_equals_form)
{
	job_spec s;
	char err[256] = "";
	job_spec_defaults(&s);
	int rc = PARSE(&s, err, "--actor-num-nodes=3", "--name=a.b_c-d", "--trainer-cmd=--help",
		       "--colocate=false", "--update-weight-buffer-size=4096", "--rollout-cmd=", "--max-restarts=-1",
		       "--actor_num_gpus_per_node=2");
	if (rc != 0) T_FAIL("%s", err);
	T_EQ(s.actor_num_nodes, 3);
	T_STREQ(s.name, "a.b_c-d");
	T_STREQ(s.trainer_cmd, "--help");
	T_CHECK(!s.colocate);
	T_EQ(s.buffer_size, 4096);
	T_STREQ(s.rollout_cmd, "");
	T_EQ(s.max_restarts, -1);
	T_EQ(s.actor_num_gpus_per_node, 2);
	T_EQ(PARSE(&s, err, "--colocate=yes"), 0);
	T_CHECK(s.colocate);
	/* later flags win */
	T_EQ(PARSE(&s, err, "--actor-num-nodes", "5", "--actor-num-nodes=6"), 0);
	T_EQ(s.actor_num_nodes, 6);
	T_EQ(job_spec_parse_args(&s, 0, NULL, err, sizeof err), 0);
}

T_TEST(flag_errors_leave_spec_unchanged)
{
	job_spec s, before;
	char err[256];
	job_spec_defaults(&s);
	before = s;
	struct { int argc; char **argv; const char *want; } cases[] = {
		{NARGS("--bogus", "1"), ARGS("--bogus", "1"), "unknown flag '--bogus'"},
		{NARGS("--actor-num-nodes"), ARGS("--actor-num-nodes"), "--actor-num-nodes: missing value"},
		{NARGS("--name", "--colocate"), ARGS("--name", "--colocate"), "--name: missing value"},
		{NARGS("--actor-num-nodes", "x"), ARGS("--actor-num-nodes", "x"), "--actor-num-nodes: expected a whole number"},
		{NARGS("--actor-num-nodes", "4294967296"), ARGS("--actor-num-nodes", "4294967296"), "--actor-num-nodes:"},
		{NARGS("--actor-num-nodes", "-1"), ARGS("--actor-num-nodes", "-1"), "--actor-num-nodes"},
		{NARGS("--rollout-num-gpus", " 8"), ARGS("--rollout-num-gpus", " 8"), "--rollout-num-gpus:"},
		{NARGS("--max-restarts", "2147483648"), ARGS("--max-restarts", "2147483648"), "--max-restarts:"},
		{NARGS("--colocate=maybe"), ARGS("--colocate=maybe"), "--colocate: expected true or false"},
		{NARGS("--update-weight-buffer-size", "12XB"), ARGS("--update-weight-buffer-size", "12XB"),
		 "--update-weight-buffer-size:"},
		{NARGS("--stop-grace", "-1s"), ARGS("--stop-grace", "-1s"), "--stop-grace:"},
		{NARGS("--restart-backoff", "1s"), ARGS("--restart-backoff", "1s"), "--restart-backoff: expected MIN:MAX"},
		{NARGS("--restart-backoff", "1s:x"), ARGS("--restart-backoff", "1s:x"), "--restart-backoff:"},
		{NARGS("--restart-backoff", "1:2:3"), ARGS("--restart-backoff", "1:2:3"), "--restart-backoff:"},
		{NARGS("stray"), ARGS("stray"), "unexpected argument 'stray'"},
		{NARGS("--"), ARGS("--"), "unexpected argument"},
		{NARGS("--file", "/nonexistent/job.yaml"), ARGS("--file", "/nonexistent/job.yaml"),
		 "--file: /nonexistent/job.yaml: cannot open"},
		{NARGS("--file", "/tmp"), ARGS("--file", "/tmp"), "is a directory"},
		/* a good flag first: the error must still leave s untouched */
		{NARGS("--actor-num-nodes", "7", "--nope"), ARGS("--actor-num-nodes", "7", "--nope"), "unknown flag"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = 0;
		if (job_spec_parse_args(&s, cases[i].argc, cases[i].argv, err, sizeof err) != -1)
			T_FAIL("case %zu (%s) parsed", i, cases[i].argv[0]);
		T_HAS(err, cases[i].want);
		T_CHECK(!strchr(err, '\n'));
		T_CHECK(memcmp(&s, &before, sizeof s) == 0);
	}
}

static char big[JOB_CMD_MAX + 10];

static char *fill(size_t n, char first)
{
	memset(big, 'a', n);
	big[0] = first;
	big[n] = 0;
	return big;
}

T_TEST(overlong_values_are_errors)
{
	job_spec s;
	char err[256];
	static char flag[JOB_CMD_MAX + 40];
	job_spec_defaults(&s);
	T_EQ(PARSE(&s, err, "--trainer-cmd", fill(JOB_CMD_MAX, 'a')), -1);
	T_HAS(err, "--trainer-cmd: 4096 bytes is longer than the limit of 4095");
	T_EQ(PARSE(&s, err, "--trainer-cmd", fill(JOB_CMD_MAX - 1, 'a')), 0);
	T_EQ(strlen(s.trainer_cmd), JOB_CMD_MAX - 1);
	T_EQ(PARSE(&s, err, "--rollout-cmd", fill(JOB_CMD_MAX + 5, 'a')), -1);
	T_HAS(err, "--rollout-cmd:");
	T_EQ(PARSE(&s, err, "--name", fill(JOB_NAME_MAX + 1, 'a')), -1);
	T_HAS(err, "--name: 64 bytes");
	T_EQ(PARSE(&s, err, "--name", fill(JOB_NAME_MAX, 'a')), 0);
	T_EQ(PARSE(&s, err, "--update-weight-disk-dir", fill(JOB_DIR_MAX, '/')), -1);
	T_HAS(err, "--update-weight-disk-dir:");
	T_EQ(PARSE(&s, err, "--update-weight-transfer-mode", fill(32, 'a')), -1);
	T_HAS(err, "--update-weight-transfer-mode:");
	T_EQ(PARSE(&s, err, "--restart-backoff", fill(100, '1')), -1);
	T_HAS(err, "--restart-backoff:");
	/* a long bad value is shown shortened, on one line */
	snprintf(flag, sizeof flag, "--actor-num-nodes=");
	memset(flag + strlen(flag), '9', 3000);
	T_EQ(PARSE(&s, err, flag), -1);
	T_LE(strlen(err), 200);
	/* and the same through YAML */
	char *y = malloc(JOB_CMD_MAX + 64);
	snprintf(y, JOB_CMD_MAX + 64, "trainer-cmd: %s\n", fill(JOB_CMD_MAX, 'a'));
	T_EQ(yaml_text(&s, y, err, sizeof err), -1);
	T_HAS(err, ":1: trainer-cmd: 4096 bytes is longer than the limit of 4095");
	free(y);
}

T_TEST(yaml_file)
{
	job_spec s;
	char err[256] = "";
	job_spec_defaults(&s);
	int rc = yaml_text(&s,
			   "# the worked example\n"
			   "name: grpo\n"
			   "actor-num-nodes: 2\n"
			   "actor_num_gpus_per_node: 4\n"
			   "rollout-num-gpus: 8\n"
			   "rollout-num-gpus-per-engine: 2\n"
			   "num-gpus-per-node: 8\n"
			   "colocate: no\n"
			   "update-weight-transfer-mode: p2p\n"
			   "update-weight-buffer-size: 256MiB\n"
			   "update-weight-disk-dir: \"/shared/weights\"\n"
			   "trainer-cmd: |\n"
			   "  python train.py\n"
			   "  --lr 1e-6\n"
			   "rollout-cmd: 'sglang serve'\n"
			   "max-restarts: 4\n"
			   "restart-backoff: 2s:1m\n"
			   "stop-grace: 250ms\n",
			   err, sizeof err);
	if (rc != 0) T_FAIL("%s", err);
	T_STREQ(s.name, "grpo");
	T_EQ(s.actor_num_nodes, 2);
	T_EQ(s.actor_num_gpus_per_node, 4);
	T_EQ(s.rollout_num_gpus, 8);
	T_EQ(s.rollout_num_gpus_per_engine, 2);
	T_CHECK(!s.colocate);
	T_STREQ(s.transfer_mode, "p2p");
	T_EQ(s.buffer_size, 256ull << 20);
	T_STREQ(s.disk_dir, "/shared/weights");
	T_STREQ(s.trainer_cmd, "python train.py\n--lr 1e-6\n");
	T_STREQ(s.rollout_cmd, "sglang serve");
	T_EQ(s.max_restarts, 4);
	T_EQ(s.backoff_min_ms, 2000);
	T_EQ(s.backoff_max_ms, 60000);
	T_EQ(s.stop_grace_ms, 250);
	/* booleans and flow style */
	T_EQ(yaml_text(&s, "{colocate: true}", err, sizeof err), 0);
	T_CHECK(s.colocate);
	T_EQ(yaml_text(&s, "colocate: No\n", err, sizeof err), 0);
	T_CHECK(!s.colocate);
	T_EQ(yaml_text(&s, "colocate: YES\nname:\n", err, sizeof err), 0);
	T_CHECK(s.colocate);
	T_STREQ(s.name, "");
	T_EQ(yaml_text(&s, "---\nactor-num-nodes: \"9\"\n...\n", err, sizeof err), 0);
	T_EQ(s.actor_num_nodes, 9);
}

/* The reader from memory (the fuzz target's entry) behaves as from a file:
 * same values, errors named after the name given, the spec untouched on
 * failure. */
T_TEST(yaml_from_memory)
{
	job_spec s;
	char err[256];
	job_spec_defaults(&s);
	static const char ok[] = "actor-num-nodes: 3\ncolocate: true\n";
	T_EQ(job_spec_parse_yaml_buf(&s, "mem.yaml", (const uint8_t *)ok, sizeof ok - 1, err, sizeof err), 0);
	T_EQ(s.actor_num_nodes, 3);
	T_CHECK(s.colocate);
	static const char bad[] = "actor-num-nodes: 5\nnope: 1\n";
	T_EQ(job_spec_parse_yaml_buf(&s, "mem.yaml", (const uint8_t *)bad, sizeof bad - 1, err, sizeof err), -1);
	T_HAS(err, "mem.yaml:2: unknown key 'nope'");
	T_EQ(s.actor_num_nodes, 3);
	T_EQ(job_spec_parse_yaml_buf(&s, "mem.yaml", NULL, 0, err, sizeof err), -1);
	T_HAS(err, "mem.yaml: empty file");
}

T_TEST(yaml_then_flags_override_order)
{
	job_spec s;
	char err[256] = "", path[64];
	const char *y = "actor-num-nodes: 4\nrollout-num-gpus: 16\nname: from-file\n";
	tmp_write(path, y, strlen(y));
	job_spec_defaults(&s);
	/* before --file: the file wins; after: the flag wins */
	int rc = PARSE(&s, err, "--actor-num-nodes", "2", "--name", "early", "--file", path, "--rollout-num-gpus=4");
	if (rc != 0) T_FAIL("%s", err);
	T_EQ(s.actor_num_nodes, 4);
	T_STREQ(s.name, "from-file");
	T_EQ(s.rollout_num_gpus, 4);
	T_EQ(PARSE(&s, err, "--file=" "/nonexistent"), -1);
	unlink(path);
}

T_TEST(yaml_errors_name_key_and_line)
{
	job_spec s, before;
	char err[256];
	job_spec_defaults(&s);
	before = s;
	struct { const char *text, *want; } cases[] = {
		{"name: a\nbogus: 1\n", ":2: unknown key 'bogus'"},
		{"--name: a\n", "unknown key '--name' (write keys without the leading dashes)"},
		{"name: a\n\nactor-num-nodes: two\n", ":3: actor-num-nodes: expected a whole number up to 4294967295, got 'two'"},
		{"colocate: 1\n", ":1: colocate: expected true or false"},
		{"rollout-num-gpus: [1, 2]\n", ":1: rollout-num-gpus: expected a single value, got a list"},
		{"trainer-cmd:\n  a: b\n", ":2: trainer-cmd: expected a single value, got a nested mapping"},
		{"a: &x 1\nname: *x\n", ":1: unknown key 'a'"},
		{"name: &x a\nrollout-cmd: *x\n", ":2: rollout-cmd: expected a single value, got an alias"},
		{"- a\n- b\n", ":1: expected a mapping of job keys"},
		{"just a string\n", ":1: expected a mapping of job keys"},
		{"", "empty file"},
		{"# only a comment\n", "empty file"},
		{"name: a\n---\nname: b\n", ":2: a job file holds one document"},
		{"name: a\nname: b\n", ":2: name: given twice"},
		{"name: a\nname_x: b\n", "unknown key 'name_x'"},
		{"actor-num-nodes: 1\nactor_num_nodes: 2\n", ":2: actor-num-nodes: given twice"},
		{"file: other.yaml\n", ":1: file: a job file cannot load another"},
		{"name: \"unclosed\n", "not valid YAML"},
		{"name: [unclosed\n", ":1: name: expected a single value, got a list"},
		{"name: a\n  bad indent: b\n", "not valid YAML"},
		{"{a: 1}: 2\n", "a key must be a plain name"},
		{"stop-grace: 5 parsecs\n", ":1: stop-grace: expected a duration"},
		{"update-weight-buffer-size: -1\n", ":1: update-weight-buffer-size:"},
		{"max-restarts: 1.5\n", ":1: max-restarts:"},
		{"restart-backoff: 1s\n", ":1: restart-backoff:"},
		{"name: \"a\\0b\"\n", "NUL byte"},
		{"name: \"\\xff\\xfe\"\n", NULL}, /* valid YAML, a bad name for validate */
		{"name: a\x01" "b\n", "cannot read at byte"},
		{"name: \xc3\x28\n", "cannot read at byte"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = 0;
		char path[64];
		tmp_write(path, cases[i].text, strlen(cases[i].text));
		int rc = job_spec_parse_yaml(&s, path, err, sizeof err);
		unlink(path);
		if (!cases[i].want) {
			T_EQ(rc, 0);
			s = before;
			continue;
		}
		if (rc != -1) T_FAIL("case %zu parsed: %s", i, cases[i].text);
		T_HAS(err, cases[i].want);
		T_HAS(err, "/tmp/skein-jobspec-");
		T_CHECK(!strchr(err, '\n'));
		T_CHECK(memcmp(&s, &before, sizeof s) == 0);
	}
	T_EQ(job_spec_parse_yaml(&s, "/nonexistent/x.yaml", err, sizeof err), -1);
	T_HAS(err, "/nonexistent/x.yaml: cannot open");
	T_EQ(job_spec_parse_yaml(&s, "/tmp", err, sizeof err), -1);
	T_HAS(err, "/tmp: is a directory");
}

/* deploy/job-example.yaml parses, validates and is the worked example. */
T_TEST(example_job_file)
{
	job_spec s;
	char err[256] = "";
	const char *path = "deploy/job-example.yaml";
	if (access(path, R_OK) != 0) {
		printf("  skipped: run from the repository root to check %s\n", path);
		return;
	}
	job_spec_defaults(&s);
	if (job_spec_parse_yaml(&s, path, err, sizeof err) != 0) T_FAIL("%s", err);
	if (job_spec_validate(&s, err, sizeof err) != 0) T_FAIL("%s", err);
	T_STREQ(s.name, "grpo-7b");
	T_EQ(job_spec_trainer_ranks(&s), 8);
	T_EQ(job_spec_engines(&s), 4);
	T_EQ(job_spec_slots(&s), 16);
	T_CHECK(!s.colocate);
	T_STREQ(s.transfer_mode, "broadcast");
	T_EQ(s.buffer_size, 512ull << 20);
}

T_TEST(validate_ok_and_colocate_forcing)
{
	job_spec s;
	char err[256] = "";
	good_spec(&s);
	if (job_spec_validate(&s, err, sizeof err) != 0) T_FAIL("%s", err);
	T_EQ(job_spec_trainer_ranks(&s), 8);
	T_EQ(job_spec_engines(&s), 4);
	T_EQ(job_spec_slots(&s), 16);
	/* --colocate: the rollout GPUs become the actor's, as Miles does */
	good_spec(&s);
	s.colocate = true;
	s.actor_num_nodes = 2;
	s.rollout_num_gpus = 6;
	if (job_spec_validate(&s, err, sizeof err) != 0) T_FAIL("%s", err);
	T_EQ(s.rollout_num_gpus, 16);
	T_EQ(job_spec_engines(&s), 8);
	T_EQ(job_spec_slots(&s), 16);
	good_spec(&s);
	s.colocate = true;
	snprintf(s.transfer_mode, sizeof s.transfer_mode, "colocated");
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	/* a trainer without engines needs no rollout command */
	good_spec(&s);
	s.rollout_num_gpus = 0;
	s.rollout_cmd[0] = 0;
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	T_EQ(job_spec_slots(&s), 8);
	/* disk-delta with a folder; zero backoff; max restarts 0 */
	good_spec(&s);
	snprintf(s.transfer_mode, sizeof s.transfer_mode, "disk-delta");
	snprintf(s.disk_dir, sizeof s.disk_dir, "/shared/w");
	s.backoff_min_ms = s.backoff_max_ms = 0;
	s.max_restarts = 0;
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
	/* widest legal shapes */
	good_spec(&s);
	s.num_gpus_per_node = JOB_GPUS_PER_NODE_MAX;
	s.actor_num_gpus_per_node = 64;
	s.rollout_num_gpus_per_engine = 64;
	s.rollout_num_gpus = 128;
	s.actor_num_nodes = JOB_NODES_MAX;
	T_EQ(job_spec_validate(&s, err, sizeof err), 0);
}

typedef void (*spec_edit)(job_spec *s);

static void e_engine_multiple(job_spec *s) { s->rollout_num_gpus = 6; s->rollout_num_gpus_per_engine = 4; }
static void e_packed_colocate(job_spec *s)
{
	s->colocate = true;
	snprintf(s->transfer_mode, sizeof s->transfer_mode, "broadcast_packed");
}
static void e_disk_no_dir(job_spec *s) { snprintf(s->transfer_mode, sizeof s->transfer_mode, "disk-delta"); }
static void e_engine_wide(job_spec *s) { s->rollout_num_gpus_per_engine = 16; s->rollout_num_gpus = 16; }
static void e_actor_wide(job_spec *s) { s->actor_num_gpus_per_node = 16; }
static void e_zero_nodes(job_spec *s) { s->actor_num_nodes = 0; }
static void e_many_nodes(job_spec *s) { s->actor_num_nodes = JOB_NODES_MAX + 1; }
static void e_zero_gpus(job_spec *s) { s->actor_num_gpus_per_node = 0; }
static void e_zero_tp(job_spec *s) { s->rollout_num_gpus_per_engine = 0; }
static void e_no_trainer(job_spec *s) { s->trainer_cmd[0] = 0; }
static void e_no_rollout(job_spec *s) { s->rollout_cmd[0] = 0; }
static void e_no_rollout_colo(job_spec *s) { s->rollout_cmd[0] = 0; s->rollout_num_gpus = 0; s->colocate = true; }
static void e_mode(job_spec *s) { snprintf(s->transfer_mode, sizeof s->transfer_mode, "carrier-pigeon"); }
static void e_mode_empty(job_spec *s) { s->transfer_mode[0] = 0; }
static void e_name(job_spec *s) { snprintf(s->name, sizeof s->name, "-bad"); }
static void e_name2(job_spec *s) { snprintf(s->name, sizeof s->name, "a b"); }
static void e_backoff(job_spec *s) { s->backoff_min_ms = 30000; s->backoff_max_ms = 1000; }
static void e_colo_straddle(job_spec *s) { s->colocate = true; s->actor_num_gpus_per_node = 6; s->rollout_num_gpus_per_engine = 4; }
static void e_gpn_big(job_spec *s) { s->num_gpus_per_node = JOB_GPUS_PER_NODE_MAX + 1; }
static void e_gpn_zero(job_spec *s) { s->num_gpus_per_node = 0; }
static void e_ipc_split(job_spec *s) { snprintf(s->transfer_mode, sizeof s->transfer_mode, "colocated"); }
static void e_rel_dir(job_spec *s) { snprintf(s->disk_dir, sizeof s->disk_dir, "weights"); }
static void e_buffer(job_spec *s) { s->buffer_size = 0; }
static void e_restarts(job_spec *s) { s->max_restarts = -1; }
static void e_rollout_huge(job_spec *s) { s->rollout_num_gpus = 4000000; s->rollout_num_gpus_per_engine = 1; }
static void e_unterminated(job_spec *s) { memset(s->rollout_cmd, 'x', sizeof s->rollout_cmd); }

T_TEST(validate_errors_name_their_flag)
{
	struct { spec_edit edit; const char *want; } cases[] = {
		{e_engine_multiple, "--rollout-num-gpus: 6 is not a multiple of --rollout-num-gpus-per-engine 4"},
		{e_packed_colocate, "--update-weight-transfer-mode broadcast_packed cannot be used with --colocate"},
		{e_disk_no_dir, "--update-weight-transfer-mode disk-delta needs --update-weight-disk-dir"},
		{e_engine_wide, "--rollout-num-gpus-per-engine 16 is wider than a node (--num-gpus-per-node 8)"},
		{e_actor_wide, "--actor-num-gpus-per-node 16 is more than a node has (--num-gpus-per-node 8)"},
		{e_zero_nodes, "--actor-num-nodes: 0 is not between 1 and 4096"},
		{e_many_nodes, "--actor-num-nodes: 4097"},
		{e_zero_gpus, "--actor-num-gpus-per-node: must be at least 1"},
		{e_zero_tp, "--rollout-num-gpus-per-engine: must be at least 1"},
		{e_no_trainer, "--trainer-cmd: missing"},
		{e_no_rollout, "--rollout-cmd: missing, and the job has 8 rollout GPUs"},
		{e_no_rollout_colo, "--rollout-cmd: missing"},
		{e_mode, "--update-weight-transfer-mode: unknown mode 'carrier-pigeon'"},
		{e_mode_empty, "--update-weight-transfer-mode: unknown mode ''"},
		{e_name, "--name: '-bad' is not a valid job name"},
		{e_name2, "--name: 'a b'"},
		{e_backoff, "--restart-backoff: MIN 30000ms is more than MAX 1000ms"},
		{e_colo_straddle, "--rollout-num-gpus-per-engine 4 does not divide --actor-num-gpus-per-node 6"},
		{e_gpn_big, "--num-gpus-per-node: 65 is not between 1 and 64"},
		{e_gpn_zero, "--num-gpus-per-node: 0"},
		{e_ipc_split, "--update-weight-transfer-mode colocated needs --colocate"},
		{e_rel_dir, "--update-weight-disk-dir: 'weights' is not an absolute path"},
		{e_buffer, "--update-weight-buffer-size:"},
		{e_restarts, "--max-restarts: -1 is negative"},
		{e_rollout_huge, "--rollout-num-gpus: 4000000 is more than"},
		{e_unterminated, "not terminated"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		job_spec s;
		char err[256] = "";
		good_spec(&s);
		cases[i].edit(&s);
		if (job_spec_validate(&s, err, sizeof err) != -1) T_FAIL("case %zu (%s) passed", i, cases[i].want);
		T_HAS(err, cases[i].want);
	}
	/* the error fits a small buffer without overflow */
	job_spec s;
	char small[8];
	good_spec(&s);
	e_mode(&s);
	T_EQ(job_spec_validate(&s, small, sizeof small), -1);
	T_EQ(strlen(small), 7);
	T_EQ(job_spec_validate(&s, NULL, 0), -1);
}

T_TEST(job_names)
{
	char n63[64], n64[65];
	memset(n63, 'a', 63);
	n63[63] = 0;
	memset(n64, 'a', 64);
	n64[64] = 0;
	T_CHECK(job_name_ok("a"));
	T_CHECK(job_name_ok("7b-grpo_v1.2"));
	T_CHECK(job_name_ok(n63));
	T_CHECK(!job_name_ok(n64));
	T_CHECK(!job_name_ok(""));
	T_CHECK(!job_name_ok(NULL));
	T_CHECK(!job_name_ok("-a"));
	T_CHECK(!job_name_ok(".a"));
	T_CHECK(!job_name_ok("_a"));
	T_CHECK(!job_name_ok("a/b"));
	T_CHECK(!job_name_ok("a b"));
	T_CHECK(!job_name_ok("a\n"));
	T_CHECK(!job_name_ok("caf\xc3\xa9"));
}

T_TEST(sizes)
{
	struct { const char *v; uint64_t want; } ok[] = {
		{"0", 0}, {"1", 1}, {"4096", 4096}, {"512MiB", 512ull << 20}, {"512 MiB", 512ull << 20},
		{"1K", 1000}, {"1KB", 1000}, {"1k", 1000}, {"1KiB", 1024}, {"1kib", 1024}, {"2M", 2000000},
		{"2MB", 2000000}, {"3G", 3000000000ull}, {"3GiB", 3ull << 30}, {"1T", 1000000000000ull},
		{"1TiB", 1ull << 40}, {"7B", 7}, {"18446744073709551615", UINT64_MAX},
		{"16777215TiB", 16777215ull << 40},
	};
	const char *bad[] = {
		"", "MiB", "-1", "+1", " 1", "1 ", "1.5G", "1X", "1MiBs", "1iB", "0x10", "18446744073709551616",
		"16777216TiB", "99999999999999999999", "1e9", "1\n",
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		uint64_t v = 12345;
		if (job_parse_size(ok[i].v, &v) != 0) T_FAIL("'%s' refused", ok[i].v);
		if (v != ok[i].want) T_FAIL("'%s' -> %" PRIu64 ", want %" PRIu64, ok[i].v, v, ok[i].want);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 12345;
		if (job_parse_size(bad[i], &v) != -1) T_FAIL("'%s' accepted", bad[i]);
		T_EQ(v, 12345);
	}
	uint64_t v;
	T_EQ(job_parse_size(NULL, &v), -1);
}

T_TEST(durations)
{
	struct { const char *v; uint32_t want; } ok[] = {
		{"0", 0}, {"1", 1000}, {"250ms", 250}, {"1s", 1000}, {"1.5s", 1500}, {"0.001s", 1}, {"2m", 120000},
		{"1.5m", 90000}, {"2min", 120000}, {"1h", 3600000}, {"5 s", 5000}, {"4294967295ms", UINT32_MAX},
		{"4294967.295s", UINT32_MAX}, {"4294967s", 4294967000u}, {"0.5", 500}, {"10.000000000s", 10000},
	};
	const char *bad[] = {
		"", "s", "-1s", "-1", "+1s", "1.s", ".5s", "1..5s", "0.5ms", "0.0001s", "4294967296ms",
		"4294968s", "4294967.296s", "71583m", "1194h", "99999999999999999999s", "1d", "1 2s", "1s ",
		"1.0000000001s", "1sec", "ms", "abc", "1 ", " 1",
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		uint32_t v = 777;
		if (job_parse_duration_ms(ok[i].v, &v) != 0) T_FAIL("'%s' refused", ok[i].v);
		if (v != ok[i].want) T_FAIL("'%s' -> %u, want %u", ok[i].v, v, ok[i].want);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint32_t v = 777;
		if (job_parse_duration_ms(bad[i], &v) != -1) T_FAIL("'%s' accepted (%u)", bad[i], v);
		T_EQ(v, 777);
	}
	uint32_t v;
	T_EQ(job_parse_duration_ms(NULL, &v), -1);
}

T_TEST(protobuf_round_trip)
{
	job_spec s, back;
	char err[256] = "";
	good_spec(&s);
	snprintf(s.name, sizeof s.name, "grpo");
	s.actor_num_nodes = 3;
	s.colocate = true;
	s.buffer_size = (1ull << 40) + 7;
	snprintf(s.disk_dir, sizeof s.disk_dir, "/shared");
	s.max_restarts = -5; /* decode does not validate: the value survives */
	s.backoff_min_ms = 1;
	s.backoff_max_ms = UINT32_MAX;
	s.stop_grace_ms = 42;
	s.update_timeout_ms = UINT32_MAX;
	snprintf(s.on_engine_loss, sizeof s.on_engine_loss, "abort");
	memset(s.trainer_cmd, 'c', JOB_CMD_MAX - 1);
	s.trainer_cmd[JOB_CMD_MAX - 1] = 0;

	Skein__Jobs__JobSpec pb;
	job_spec_to_pb(&s, &pb);
	size_t len = skein__jobs__job_spec__get_packed_size(&pb);
	uint8_t *buf = malloc(len);
	T_EQ(skein__jobs__job_spec__pack(&pb, buf), len);
	Skein__Jobs__JobSpec *u = skein__jobs__job_spec__unpack(NULL, len, buf);
	T_CHECK(u);
	memset(&back, 0x5a, sizeof back);
	if (job_spec_from_pb(&back, u, err, sizeof err) != 0) T_FAIL("%s", err);
	skein__jobs__job_spec__free_unpacked(u, NULL);
	free(buf);
	T_STREQ(back.name, s.name);
	T_EQ(back.actor_num_nodes, 3);
	T_EQ(back.actor_num_gpus_per_node, s.actor_num_gpus_per_node);
	T_EQ(back.rollout_num_gpus, s.rollout_num_gpus);
	T_EQ(back.rollout_num_gpus_per_engine, s.rollout_num_gpus_per_engine);
	T_EQ(back.num_gpus_per_node, s.num_gpus_per_node);
	T_CHECK(back.colocate);
	T_STREQ(back.transfer_mode, s.transfer_mode);
	T_EQ(back.buffer_size, s.buffer_size);
	T_STREQ(back.disk_dir, s.disk_dir);
	T_STREQ(back.trainer_cmd, s.trainer_cmd);
	T_STREQ(back.rollout_cmd, s.rollout_cmd);
	T_EQ(back.max_restarts, -5);
	T_EQ(back.backoff_min_ms, 1);
	T_EQ(back.backoff_max_ms, UINT32_MAX);
	T_EQ(back.stop_grace_ms, 42);
	T_EQ(back.update_timeout_ms, UINT32_MAX);
	T_STREQ(back.on_engine_loss, "abort");

	/* an empty message decodes to empty strings and zeros, but for the
	 * update fields, which a spec from before them lacks: their defaults */
	u = skein__jobs__job_spec__unpack(NULL, 0, (const uint8_t *)"");
	T_CHECK(u);
	T_EQ(job_spec_from_pb(&back, u, err, sizeof err), 0);
	T_STREQ(back.name, "");
	T_EQ(back.actor_num_nodes, 0);
	T_EQ(back.update_timeout_ms, 60000);
	T_STREQ(back.on_engine_loss, "drop");
	T_EQ(job_spec_validate(&back, err, sizeof err), -1);
	skein__jobs__job_spec__free_unpacked(u, NULL);
}

T_TEST(protobuf_overlong_strings_refused)
{
	fill(JOB_CMD_MAX + 1, 'x');
	struct { size_t field; size_t len; const char *want; } cases[] = {
		{0, JOB_NAME_MAX + 1, "--name:"},
		{1, 32, "--update-weight-transfer-mode:"},
		{2, JOB_DIR_MAX, "--update-weight-disk-dir:"},
		{3, JOB_CMD_MAX, "--trainer-cmd:"},
		{4, JOB_CMD_MAX, "--rollout-cmd:"},
		{5, 8, "--update-on-engine-loss:"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		job_spec s, before;
		char err[256] = "";
		good_spec(&s);
		before = s;
		Skein__Jobs__JobSpec pb;
		job_spec_to_pb(&s, &pb);
		char *str = strndup(big, cases[i].len);
		char **f[] = {&pb.name, &pb.transfer_mode, &pb.disk_dir, &pb.trainer_cmd, &pb.rollout_cmd,
			      &pb.on_engine_loss};
		*f[cases[i].field] = str;
		/* through the wire, as the head receives it */
		size_t len = skein__jobs__job_spec__get_packed_size(&pb);
		uint8_t *buf = malloc(len);
		skein__jobs__job_spec__pack(&pb, buf);
		Skein__Jobs__JobSpec *u = skein__jobs__job_spec__unpack(NULL, len, buf);
		T_CHECK(u);
		T_EQ(job_spec_from_pb(&s, u, err, sizeof err), -1);
		T_HAS(err, cases[i].want);
		T_HAS(err, "longer than the limit");
		T_CHECK(memcmp(&s, &before, sizeof s) == 0);
		skein__jobs__job_spec__free_unpacked(u, NULL);
		free(buf);
		free(str);
		/* one byte shorter fits */
		str = strndup(big, cases[i].len - 1);
		job_spec_to_pb(&s, &pb);
		*f[cases[i].field] = str;
		if (job_spec_from_pb(&s, &pb, err, sizeof err) != 0) T_FAIL("case %zu: %s", i, err);
		free(str);
	}
}

/* Random bytes and mutated good files through the YAML reader, and random
 * argument lists through the flag reader: errors only, never a crash. */
T_TEST_TIMEOUT(garbage_never_crashes, 120)
{
	static const char *base =
		"name: grpo\nactor-num-nodes: 2\nrollout-num-gpus: 8\ncolocate: yes\n"
		"trainer-cmd: \"python train.py\"\nupdate-weight-buffer-size: 1GiB\nrestart-backoff: 1s:30s\n"
		"nested: {a: [1, 2]}\n";
	static const char *words[] = {
		"--name", "--colocate", "--actor-num-nodes", "--file", "/tmp", "--restart-backoff", "1s:",
		"--stop-grace=", "99999999999", "--update-weight-buffer-size", "1GiB", "-", "--", "x", "",
		"--rollout-num-gpus=8", ":", "--trainer-cmd", "--update-weight-timeout", "--update-on-engine-loss", "abort",
	};
	sk_rng r;
	uint64_t seed = t_seed();
	sk_rng_seed(&r, seed);
	size_t blen = strlen(base);
	char path[64];
	snprintf(path, sizeof path, "/tmp/skein-jobspec-XXXXXX");
	int fd = mkstemp(path);
	T_CHECK(fd >= 0);
	close(fd);
	for (int it = 0; it < 600; it++) {
		char buf[512];
		size_t len;
		if (it % 3 == 0) {
			len = sk_rng_below(&r, sizeof buf);
			for (size_t i = 0; i < len; i++) buf[i] = (char)sk_rng_below(&r, 256);
		} else {
			len = blen;
			memcpy(buf, base, len);
			for (int k = 0, nk = 1 + (int)sk_rng_below(&r, 6); k < nk; k++) {
				size_t at = sk_rng_below(&r, len);
				static const char sym[] = ":-[]{}&*!|>'\"#%@`,? \n\t\\0";
				buf[at] = it % 2 ? sym[sk_rng_below(&r, sizeof sym - 1)] : (char)sk_rng_below(&r, 256);
			}
		}
		FILE *f = fopen(path, "wb");
		T_CHECK(f);
		fwrite(buf, 1, len, f);
		fclose(f);
		job_spec s, before;
		char err[256];
		job_spec_defaults(&s);
		before = s;
		err[0] = 0;
		int rc = job_spec_parse_yaml(&s, path, err, sizeof err);
		if (rc != 0 && rc != -1) T_FAIL("iteration %d: rc %d", it, rc);
		if (rc == -1) {
			if (!err[0] || strchr(err, '\n')) T_FAIL("iteration %d: bad message '%s'", it, err);
			if (memcmp(&s, &before, sizeof s) != 0) T_FAIL("iteration %d: spec changed on error", it);
		}
		(void)job_spec_validate(&s, err, sizeof err);

		char *argv[8];
		int argc = (int)sk_rng_below(&r, 8);
		for (int k = 0; k < argc; k++) argv[k] = (char *)words[sk_rng_below(&r, sizeof words / sizeof words[0])];
		job_spec_defaults(&s);
		rc = job_spec_parse_args(&s, argc, argv, err, sizeof err);
		if (rc != 0 && rc != -1) T_FAIL("iteration %d: args rc %d", it, rc);
	}
	unlink(path);
}
