/* bin/skein-sim: the command-line front end of the simulator (tests/sim/sim.h).
 *
 * Runs N nodes of the real membership code on a fake clock and network,
 * injects the faults asked for, and prints one JSON object (or key: value
 * lines) with what happened, so scripts and benchmarks can drive it:
 *
 *   skein-sim --nodes 1000 --seed 7 --profile fast --duration 60 --loss 0.1 --kill 3
 *
 * Kills, pauses, restarts and leaves happen 1 s after the cluster converges
 * (every node lists all N alive), or at duration/2 if it never does; the
 * victims are distinct nodes other than node 0, drawn from the seed.
 * --text-every prints a membership table as the run goes (make demo).
 * `skein-sim coord ...` runs the head's update coordinator at scale
 * instead (tests/sim/sim_coord.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sk_rng.h"
#include "tests/sim/sim.h"

static const char usage[] =
	"usage: skein-sim [options]\n"
	"Simulates N skein membership agents (SWIM + Lifeguard, the real code) on a\n"
	"fake clock and network, deterministically from a seed; prints one JSON object.\n"
	"\n"
	"  --nodes N               cluster size (default 100, at most 20000)\n"
	"  --seed S                run seed (default 1); same seed, same run\n"
	"  --profile NAME          lan | fast | wan | local (default lan)\n"
	"  --duration SECONDS      simulated seconds (default 60)\n"
	"  --loss P                UDP loss probability, 0 <= P < 1 (default 0)\n"
	"  --latency-ms X          one-way latency (default 0.5)\n"
	"  --jitter-ms X           uniform jitter +- X, at most the latency (default 0.2)\n"
	"  --join-spread-ms X      node i starts at i*X (default min(10, 10000/N))\n"
	"  --kill K                kill K nodes 1 s after convergence\n"
	"  --pause K:SECONDS       pause K nodes (SIGSTOP) for SECONDS, same time\n"
	"  --restart K[:SECONDS]   kill K nodes and start them again SECONDS later\n"
	"                          (default 1) with a new generation\n"
	"  --leave K               K nodes leave gracefully, same time\n"
	"  --partition F:START:END cut a fraction F of the nodes from the rest, both\n"
	"                          ways, from START to END simulated seconds\n"
	"  --set KEY=VALUE         override a membership setting (repeatable), e.g.\n"
	"                          --set probe_interval_ms=500; see membership/mbr.h\n"
	"  --format json|text      output format (default json)\n"
	"  --text-every SECONDS    print a membership table every SECONDS and each\n"
	"                          fault as it happens, then the result\n"
	"  --config                print the membership settings in force (after\n"
	"                          --profile and --set) as key=value lines, and exit\n"
	"  --verbose               print each fault and completion on stderr\n"
	"  --trace I               with --verbose: also every event about node nI\n"
	"  --help                  this text\n"
	"\n"
	"Output: converge_s (every node lists all N alive), detect_s {p50,p99,max,\n"
	"count,undetected} (kill until every survivor marks it failed), rejoin_s\n"
	"(restart until alive everywhere), leave_s, heal_s (partition end until all\n"
	"alive everywhere), false_failures, resurrections, bytes_per_node_s, wall_s,\n"
	"cpu_s, node_s_per_wall_s, packets, suspicions, refutes, digest (equal runs,\n"
	"equal digests).  Exit 0; 2 on a bad flag.\n";

typedef struct {
	sim_params p;
	double duration;
	uint32_t kill, pause, restart, leave;
	double pause_s, restart_s;
	double part_frac, part_start, part_end;
	bool json, verbose, dump_config;
	double text_every;
	int64_t trace;
	double next_print;
	sim_t *sim;
	bool converged;
	sim_stats at_conv; /* stats at convergence, for the steady-state rates */
} cli;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "skein-sim: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static double num(const char *flag, const char *v, double lo, double hi)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= lo && d <= hi)) die("%s: bad value '%s'", flag, v);
	return d;
}

static uint32_t whole(const char *flag, const char *v, uint64_t hi)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x > hi) die("%s: bad value '%s'", flag, v);
	return (uint32_t)x;
}

/* "K:SECONDS" (seconds optional when def >= 0). */
static void count_secs(const char *flag, const char *v, uint32_t *k, double *secs, double def)
{
	char buf[64];
	snprintf(buf, sizeof buf, "%s", v);
	char *colon = strchr(buf, ':');
	if (!colon && def < 0) die("%s: expected K:SECONDS, got '%s'", flag, v);
	if (colon) *colon = 0;
	*k = whole(flag, buf, SIM_MAX_NODES);
	*secs = colon ? num(flag, colon + 1, 0, 1e6) : def;
}

static void parse(cli *c, int argc, char **argv)
{
	uint32_t nodes = 100;
	uint64_t seed = 1;
	const char *profile = "lan";
	double lat = -1, jit = -1, loss = 0, spread = -1;
	const char *sets[64];
	int nsets = 0;
	const char *format = "json";
	c->duration = 60;
	c->trace = -1;
	c->restart_s = 1;
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i];
		if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
			fputs(usage, stdout);
			exit(0);
		}
		if (!strcmp(f, "--verbose") || !strcmp(f, "--config")) {
			if (f[2] == 'v') c->verbose = true;
			else c->dump_config = true;
			continue;
		}
		if (strncmp(f, "--", 2) != 0) die("unexpected argument '%s' (try --help)", f);
		if (i + 1 >= argc) die("%s needs a value", f);
		const char *v = argv[++i];
		if (!strcmp(f, "--nodes")) nodes = whole(f, v, SIM_MAX_NODES);
		else if (!strcmp(f, "--seed")) {
			char *end;
			errno = 0;
			seed = strtoull(v, &end, 0);
			if (errno || end == v || *end || v[0] == '-') die("%s: bad value '%s'", f, v);
		} else if (!strcmp(f, "--profile")) profile = v;
		else if (!strcmp(f, "--duration")) c->duration = num(f, v, 0.001, 1e6);
		else if (!strcmp(f, "--loss")) loss = num(f, v, 0, 0.999999);
		else if (!strcmp(f, "--latency-ms")) lat = num(f, v, 0, 1e5);
		else if (!strcmp(f, "--jitter-ms")) jit = num(f, v, 0, 1e5);
		else if (!strcmp(f, "--join-spread-ms")) spread = num(f, v, 0, 1e6);
		else if (!strcmp(f, "--kill")) c->kill = whole(f, v, SIM_MAX_NODES);
		else if (!strcmp(f, "--leave")) c->leave = whole(f, v, SIM_MAX_NODES);
		else if (!strcmp(f, "--pause")) count_secs(f, v, &c->pause, &c->pause_s, -1);
		else if (!strcmp(f, "--restart")) count_secs(f, v, &c->restart, &c->restart_s, 1);
		else if (!strcmp(f, "--partition")) {
			char buf[96], *a, *b;
			snprintf(buf, sizeof buf, "%s", v);
			if (!(a = strchr(buf, ':')) || !(b = strchr(a + 1, ':')))
				die("%s: expected FRACTION:START:END, got '%s'", f, v);
			*a++ = 0;
			*b++ = 0;
			c->part_frac = num(f, buf, 0.000001, 0.999999);
			c->part_start = num(f, a, 0, 1e6);
			c->part_end = num(f, b, 0, 1e6);
			if (c->part_end <= c->part_start) die("%s: END must be after START in '%s'", f, v);
		} else if (!strcmp(f, "--set")) {
			if (nsets == 64) die("%s: too many settings", f);
			sets[nsets++] = v;
		} else if (!strcmp(f, "--format")) format = v;
		else if (!strcmp(f, "--text-every")) c->text_every = num(f, v, 0.001, 1e6);
		else if (!strcmp(f, "--trace")) c->trace = whole(f, v, SIM_MAX_NODES - 1);
		else die("unknown flag '%s' (try --help)", f);
	}
	if (strcmp(format, "json") && strcmp(format, "text")) die("--format: expected json or text, got '%s'", format);
	c->json = !strcmp(format, "json");
	char err[256];
	if (sim_params_init(&c->p, nodes, seed, profile, err, sizeof err) < 0) die("%s", err);
	for (int i = 0; i < nsets; i++) {
		char kv[256];
		snprintf(kv, sizeof kv, "%s", sets[i]);
		char *eq = strchr(kv, '=');
		if (!eq) die("--set: expected KEY=VALUE, got '%s'", sets[i]);
		*eq = 0;
		if (mbr_config_set(&c->p.cfg, kv, eq + 1, err, sizeof err) < 0) die("--set: %s", err);
	}
	if (mbr_config_check(&c->p.cfg, err, sizeof err) < 0) die("--set: %s", err);
	if (lat >= 0) c->p.latency_us = (uint64_t)llround(lat * 1000);
	if (jit >= 0) c->p.jitter_us = (uint64_t)llround(jit * 1000);
	else if (c->p.jitter_us > c->p.latency_us) c->p.jitter_us = c->p.latency_us;
	if (c->p.jitter_us > c->p.latency_us) die("--jitter-ms must not exceed the latency");
	if (spread >= 0) c->p.join_spread_us = (uint64_t)llround(spread * 1000);
	c->p.loss = loss;
	if ((uint64_t)c->kill + c->pause + c->restart + c->leave > nodes - 1)
		die("--kill, --pause, --restart and --leave need distinct nodes other than n0: at most %u in all", nodes - 1);
}

/* ---- text mode ---- */

static void on_note(void *ctx, uint64_t now, const char *msg)
{
	FILE *f = ctx;
	fprintf(f, "%9.3f s  %s\n", (double)now / SIM_SEC, msg);
}

/* One line: what one running node lists (n0 while it runs), what all
 * running nodes list together (observer x member pairs), and whether every
 * running node lists every running node alive. */
static void print_table(cli *c)
{
	sim_t *s = c->sim;
	uint32_t obs = 0, n = sim_nodes(s);
	while (obs < n && sim_state(s, obs) != SIM_N_UP) obs++;
	static bool header;
	if (!header) {
		printf("%9s %6s | %-30s | %-38s | %s\n", "time", "live", "one node lists",
		       "all nodes list (observer x member)", "all live seen alive");
		printf("%9s %6s | %6s %5s %5s %5s %5s | %9s %8s %8s %8s |\n", "", "", "node", "alive",
		       "susp", "fail", "left", "alive", "susp", "fail", "left");
		header = true;
	}
	char who[16] = "-";
	uint32_t a = 0, sp = 0, fl = 0, lf = 0;
	if (obs < n) {
		snprintf(who, sizeof who, "n%u", obs);
		a = sim_count(s, obs, SIM_V_ALIVE);
		sp = sim_count(s, obs, SIM_V_SUSPECT);
		fl = sim_count(s, obs, SIM_V_FAILED);
		lf = sim_count(s, obs, SIM_V_LEFT);
	}
	printf("%7.1f s %6u | %6s %5u %5u %5u %5u | %9" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64
	       " | %s\n",
	       (double)sim_now(s) / SIM_SEC, sim_live(s), who, a, sp, fl, lf, sim_total(s, SIM_V_ALIVE),
	       sim_total(s, SIM_V_SUSPECT), sim_total(s, SIM_V_FAILED), sim_total(s, SIM_V_LEFT),
	       sim_all_alive(s) ? "yes" : "no");
	fflush(stdout);
}

/* Runs to `target` (us), printing the table on the way; with until_conv,
 * stops at convergence and returns 1. */
static int run_to(cli *c, uint64_t target, bool until_conv)
{
	for (;;) {
		uint64_t next = target;
		if (c->text_every > 0) {
			uint64_t np = (uint64_t)llround(c->next_print * SIM_SEC);
			if (np < next) next = np;
		}
		if (until_conv) {
			if (sim_run_until_converged(c->sim, next) == 0) return 1;
		} else if (sim_run_until(c->sim, next) < 0) {
			fprintf(stderr, "skein-sim: out of memory\n");
			exit(1);
		}
		if (c->text_every > 0 && sim_now(c->sim) >= (uint64_t)llround(c->next_print * SIM_SEC)) {
			print_table(c);
			c->next_print += c->text_every;
		}
		if (sim_now(c->sim) >= target) return 0;
	}
}

/* ---- output ---- */

static void print_secs(const char *key, uint64_t v, bool json, const char *sep)
{
	if (json) {
		if (v == SIM_NEVER) printf("\"%s\":null%s", key, sep);
		else printf("\"%s\":%.3f%s", key, (double)v / SIM_SEC, sep);
	} else {
		if (v == SIM_NEVER) printf("%s: never\n", key);
		else printf("%s: %.3f\n", key, (double)v / SIM_SEC);
	}
}

/* The distribution of one kind of record; in JSON also every value, in
 * the order of the faults (null: not done), when there are at most 1000. */
static void print_dist(sim_t *s, const char *key, sim_rec_kind kind, bool json)
{
	sim_dist dd, *d = &dd;
	sim_dist_of(s, kind, d);
	if (json) {
		printf("\"%s\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"count\":%u,\"undetected\":%u", key,
		       d->p50, d->p99, d->max, d->count, d->undone);
		if (d->count <= 1000) {
			const sim_record *r;
			size_t n = sim_records(s, &r);
			const char *sep = "";
			printf(",\"values\":[");
			for (size_t i = 0; i < n; i++) {
				if (r[i].kind != kind) continue;
				if (r[i].done_us == SIM_NEVER) printf("%snull", sep);
				else printf("%s%.3f", sep, (double)(r[i].done_us - r[i].at_us) / SIM_SEC);
				sep = ",";
			}
			printf("]");
		}
		printf("},");
	} else
		printf("%s: p50 %.3f p99 %.3f max %.3f count %u undetected %u\n", key, d->p50, d->p99,
		       d->max, d->count, d->undone);
}

static void report(cli *c, double wall, double cpu)
{
	sim_t *s = c->sim;
	sim_stats st;
	sim_get_stats(s, &st);
	uint64_t heal = SIM_NEVER;
	uint64_t pend = (uint64_t)llround(c->part_end * SIM_SEC);
	if (c->part_frac > 0 && st.all_alive_since_us != SIM_NEVER && sim_now(s) >= pend)
		heal = st.all_alive_since_us > pend ? st.all_alive_since_us - pend : 0;
	double bps = st.live_node_s > 0 ? (double)st.bytes_sent / st.live_node_s : 0;
	double steady_ns = st.live_node_s - c->at_conv.live_node_s;
	double steady = c->converged && steady_ns > 0
				? (double)(st.bytes_sent - c->at_conv.bytes_sent) / steady_ns : -1;
	double steady_stream = steady >= 0
				       ? (double)(st.stream_bytes - c->at_conv.stream_bytes) / steady_ns : -1;
	double speed = wall > 0 ? st.live_node_s / wall : 0;
	bool j = c->json;
	if (j)
		printf("{\"nodes\":%u,\"seed\":%" PRIu64 ",\"profile\":\"%s\",\"sim_seconds\":%.3f,"
		       "\"loss\":%g,\"latency_ms\":%g,\"jitter_ms\":%g,",
		       c->p.nodes, c->p.seed, c->p.profile, (double)sim_now(s) / SIM_SEC, c->p.loss,
		       (double)c->p.latency_us / 1000, (double)c->p.jitter_us / 1000);
	else
		printf("nodes: %u\nseed: %" PRIu64 "\nprofile: %s\nsim_seconds: %.3f\nloss: %g\n",
		       c->p.nodes, c->p.seed, c->p.profile, (double)sim_now(s) / SIM_SEC, c->p.loss);
	print_secs("converge_s", st.converge_us, j, ",");
	print_dist(s, "detect_s", SIM_R_KILL, j);
	print_dist(s, "rejoin_s", SIM_R_RESTART, j);
	print_dist(s, "leave_s", SIM_R_LEAVE, j);
	if (c->part_frac > 0) print_secs("heal_s", heal, j, ",");
	if (j) {
		printf("\"false_failures\":%" PRIu64 ",\"resurrections\":%" PRIu64
		       ",\"bytes_per_node_s\":%.1f,",
		       st.false_failures, st.resurrections, bps);
		if (steady >= 0)
			printf("\"bytes_per_node_s_steady\":%.1f,\"stream_bytes_per_node_s_steady\":%.1f,",
			       steady, steady_stream);
		else
			printf("\"bytes_per_node_s_steady\":null,\"stream_bytes_per_node_s_steady\":null,");
		printf("\"wall_s\":%.3f,\"cpu_s\":%.3f,\"node_s_per_wall_s\":%.0f,\"live_node_s\":%.1f,"
		       "\"live_end\":%u,\"stream_bytes\":%" PRIu64 ",",
		       wall, cpu, speed, st.live_node_s, sim_live(s), st.stream_bytes);
		printf("\"packets\":{\"udp_sent\":%" PRIu64 ",\"udp_lost\":%" PRIu64 ",\"stream_sent\":%" PRIu64
		       ",\"cut\":%" PRIu64 ",\"to_down\":%" PRIu64 ",\"queued_paused\":%" PRIu64
		       ",\"bad_dest\":%" PRIu64 ",\"delivered\":%" PRIu64 "},",
		       st.udp_sent, st.udp_lost, st.stream_sent, st.cut, st.to_down, st.queued_paused,
		       st.bad_dest, st.deliveries);
		printf("\"suspicions\":%" PRIu64 ",\"refutes\":%" PRIu64 ",\"dead_declared\":%" PRIu64
		       ",\"probes\":%" PRIu64 ",\"probe_fails\":%" PRIu64 ",\"pushpulls\":%" PRIu64
		       ",\"reconnects\":%" PRIu64 ",\"events\":%" PRIu64 ",\"dropped_frames\":%" PRIu64
		       ",\"queue_overflow\":%" PRIu64 ",\"ticks\":%" PRIu64 ",\"digest\":\"%016" PRIx64 "\"}\n",
		       st.suspects_raised, st.refutes, st.dead_declared, st.probes, st.probe_fails,
		       st.pushpulls, st.reconnects, st.ev_total, st.decode_drops, st.queue_overflow,
		       st.ticks, st.digest);
	} else {
		if (steady >= 0) printf("bytes_per_node_s_steady: %.1f\n", steady);
		printf("false_failures: %" PRIu64 "\nresurrections: %" PRIu64 "\nbytes_per_node_s: %.1f\n"
		       "wall_s: %.3f\ncpu_s: %.3f\nnode_s_per_wall_s: %.0f\nudp_sent: %" PRIu64 "\nudp_lost: %" PRIu64
		       "\nstream_sent: %" PRIu64 "\nsuspicions: %" PRIu64 "\nrefutes: %" PRIu64
		       "\ndead_declared: %" PRIu64 "\ndigest: %016" PRIx64 "\n",
		       st.false_failures, st.resurrections, bps, wall, cpu, speed, st.udp_sent, st.udp_lost,
		       st.stream_sent, st.suspects_raised, st.refutes, st.dead_declared, st.digest);
	}
}

/* Shuffles idx[0..n) with the run's rng. */
static void shuffle(uint32_t *idx, uint32_t n, sk_rng *r)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t k = (uint32_t)sk_rng_below(r, i);
		uint32_t t = idx[i - 1];
		idx[i - 1] = idx[k];
		idx[k] = t;
	}
}

/* The only clock reads: how long the run took, in wall and CPU seconds. */
static double clock_s(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int sim_coord_main(int argc, char **argv); /* tests/sim/sim_coord.c */

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "coord")) return sim_coord_main(argc - 1, argv + 1);
	cli c = { 0 };
	parse(&c, argc, argv);
	if (c.dump_config) {
		mbr_config_dump(&c.p.cfg, stdout);
		return 0;
	}
	char err[256];
	c.sim = sim_new(&c.p, err, sizeof err);
	if (!c.sim) {
		fprintf(stderr, "skein-sim: %s\n", err);
		return 2;
	}
	sim_t *s = c.sim;
	uint32_t n = c.p.nodes;
	if (c.text_every > 0) sim_set_note(s, on_note, stdout);
	else if (c.verbose) sim_set_note(s, on_note, stderr);
	sim_trace(s, c.trace);
	sk_rng r;
	sk_rng_seed(&r, sk_mix64(c.p.seed ^ 0xc11ULL));
	uint32_t *idx = malloc((size_t)n * sizeof *idx);
	if (!idx) return 1;
	if (c.part_frac > 0) {
		for (uint32_t i = 0; i < n; i++) idx[i] = i;
		shuffle(idx, n, &r);
		uint32_t cut = (uint32_t)floor(c.part_frac * n);
		for (uint32_t i = 0; i < cut; i++) sim_set_group(s, idx[i], 1);
		sim_partition(s, (uint64_t)llround(c.part_start * SIM_SEC),
			      (uint64_t)llround(c.part_end * SIM_SEC), 0, 1);
	}
	uint64_t end = (uint64_t)llround(c.duration * SIM_SEC);
	c.next_print = c.text_every;
	double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	uint64_t act = end / 2;
	if (run_to(&c, end / 2, true)) {
		act = sim_now(s) + SIM_SEC;
		c.converged = true;
		sim_get_stats(s, &c.at_conv);
	}
	for (uint32_t i = 0; i + 1 < n; i++) idx[i] = i + 1;
	shuffle(idx, n - 1, &r);
	uint32_t k = 0;
	for (uint32_t i = 0; i < c.kill; i++) sim_kill(s, act, idx[k++]);
	for (uint32_t i = 0; i < c.pause; i++)
		sim_pause(s, act, idx[k++], (uint64_t)llround(c.pause_s * SIM_SEC));
	for (uint32_t i = 0; i < c.restart; i++)
		sim_restart(s, act, idx[k++], (uint64_t)llround(c.restart_s * SIM_SEC));
	for (uint32_t i = 0; i < c.leave; i++) sim_leave(s, act, idx[k++]);
	run_to(&c, end, false);
	double wall = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	report(&c, wall, cpu);
	free(idx);
	sim_destroy(&c.sim);
	return 0;
}
