/* agent/agent_metrics: `skeind --metrics IP:PORT`, GET /metrics in the
 * Prometheus text format (0.0.4), served by agent_http.c on the agent's loop.
 *
 * Off by default and read-only: the page only reads counters the agent keeps
 * anyway (agent_counters, mbr_get_stats, raft_get_stats, agent_wire_get_stats, the
 * supervisor's members, the replicated job records).  Names follow
 * Prometheus's conventions: `skein_` prefix, base units (seconds, bytes),
 * `_total` for counters, few labels with bounded values (a status, a reason,
 * a direction; never a member or job name, so 100 agents give 100 times one
 * agent's series, not more).  The process_* family is the one every
 * Prometheus client library exports.  docs/metrics.md lists every name.
 *
 * What the layers count as they go (agent_stats.h, read here, never called
 * from there):
 *   - the head's commit latency, propose -> applied on the head, in a
 *     histogram (agent_head.c);
 *   - head changes this voter saw (agent_head.c);
 *   - member restarts made by this agent (agent_jobs.c);
 *   - weight updates this head finished (agent_update.c, when a final record
 *     applies): per mode, histograms of Miles's perf/update_weights_*
 *     figures, byte counters, outcomes; aborts by a short fixed cause. */
#include "agent/agent_metrics.h"

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent_http.h"
#include "agent/agent_stats.h"
#include "common/sk_time.h"
#include "common/sk_log.h"
#include "jobs/job_state.h"
#include "proto/wire_frame.h"
#include "raft/raft.h"

struct agent_metrics {
	agent_http *http;
	double render_s;          /* the last page's build time */
	double start_wall;
};

/* ---------------------------------------------------------------- exposition */

static void family(sk_buf *b, const char *name, const char *type, const char *help)
{
	sk_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void u64(sk_buf *b, const char *name, const char *labels, uint64_t v)
{
	sk_buf_printf(b, "%s%s%s%s %llu\n", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "",
		      (unsigned long long)v);
}

static void dbl(sk_buf *b, const char *name, const char *labels, double v)
{
	sk_buf_printf(b, "%s%s%s%s %.17g\n", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "", v);
}

/* One family with one unlabelled sample. */
static void one(sk_buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
	family(b, name, type, help);
	u64(b, name, NULL, v);
}

typedef struct {
	const char *label;
	uint64_t v;
} lv;

/* One family with one sample per label value; `key` is the label's name. */
static void labelled(sk_buf *b, const char *name, const char *type, const char *help, const char *key, const lv *v,
		     size_t n)
{
	family(b, name, type, help);
	for (size_t i = 0; i < n; i++) {
		char l[96];
		snprintf(l, sizeof l, "%s=\"%s\"", key, v[i].label);
		u64(b, name, l, v[i].v);
	}
}

static void membership(agent *a, sk_buf *b)
{
	const mbr_stats *s = mbr_get_stats(a->mbr);
	const agent_counters *c = &a->cnt;
	lv st[] = { { "alive", mbr_count(a->mbr, MBR_ALIVE) }, { "suspect", mbr_count(a->mbr, MBR_SUSPECT) },
		    { "dead", mbr_count(a->mbr, MBR_DEAD) }, { "left", mbr_count(a->mbr, MBR_LEFT) } };
	labelled(b, "skein_members", "gauge", "Members this agent knows (itself included), by gossip status.", "status",
		 st, 4);
	one(b, "skein_gossip_probes_total", "counter", "Direct probes sent.", s->probes);
	one(b, "skein_gossip_probe_failures_total", "counter", "Probes that got no ack, direct nor indirect.",
	    s->probe_fails);
	one(b, "skein_gossip_indirect_probes_total", "counter", "Indirect probes asked of other members.",
	    s->indirect_probes);
	one(b, "skein_gossip_suspicions_total", "counter", "Members this agent started suspecting.", s->suspects_raised);
	one(b, "skein_gossip_refutations_total", "counter", "Suspicions of this agent it refuted.", s->refutes);
	one(b, "skein_gossip_failures_declared_total", "counter", "Members this agent declared dead.", s->dead_declared);
	one(b, "skein_gossip_push_pulls_total", "counter", "Full state exchanges over TCP.", s->pushpulls);
	one(b, "skein_gossip_health_score", "gauge", "Lifeguard's local health score (0 = healthy).", mbr_health(a->mbr));
	family(b, "skein_gossip_packets_total", "counter", "Gossip messages, by transport and direction.");
	u64(b, "skein_gossip_packets_total", "transport=\"udp\",direction=\"in\"", c->udp_in);
	u64(b, "skein_gossip_packets_total", "transport=\"udp\",direction=\"out\"", c->udp_out);
	u64(b, "skein_gossip_packets_total", "transport=\"tcp\",direction=\"in\"", c->tcp_in);
	u64(b, "skein_gossip_packets_total", "transport=\"tcp\",direction=\"out\"", c->tcp_out);
	lv by[] = { { "in", c->bytes_in }, { "out", c->bytes_out } };
	labelled(b, "skein_gossip_bytes_total", "counter", "Gossip bytes on the wire (sealed), by direction.",
		 "direction", by, 2);
	lv dr[] = {
		{ "auth", c->drop_auth }, { "no_key", c->drop_plain }, { "keyless", c->drop_keyless }, { "oversize", c->drop_oversize },
		{ "send_error", c->drop_send }, { "debug", c->drop_debug_in + c->drop_debug_out },
		{ "short", s->drop[WIRE_ERR_SHORT] }, { "magic", s->drop[WIRE_ERR_MAGIC] },
		{ "version", s->drop[WIRE_ERR_VERSION] }, { "length", s->drop[WIRE_ERR_LENGTH] },
		{ "decode", s->drop[WIRE_ERR_DECODE] }, { "invalid", s->drop[WIRE_ERR_INVALID] },
		{ "not_for_us", s->drop_not_for_us }, { "unknown_seq", s->drop_unknown_seq },
		{ "name_conflict", s->drop_conflict }, { "queue_overflow", s->queue_overflow },
		{ "tcp_timeout", c->tcp_timeouts },
	};
	labelled(b, "skein_gossip_dropped_total", "counter", "Gossip messages dropped, by reason.", "reason", dr,
		 sizeof dr / sizeof dr[0]);
}

static void control(agent *a, sk_buf *b)
{
	const agent_counters *c = &a->cnt;
	const agent_wire_stats *ws = agent_wire_get_stats(a->wire);
	one(b, "skein_control_requests_total", "counter", "Control requests received (skeinctl, other agents).",
	    c->ctl_requests);
	lv rf[] = { { "malformed", c->ctl_rejected }, { "auth", c->ctl_auth_failed }, { "role", c->ctl_refused_role },
		    { "replay", c->ctl_refused_replay }, { "clock_skew", c->ctl_refused_skew },
		    { "recipient", c->ctl_refused_recipient }, { "order", c->ctl_refused_order } };
	labelled(b, "skein_control_refused_total", "counter", "Control requests refused, by reason.", "reason", rf,
		 sizeof rf / sizeof rf[0]);
	lv sh[] = { { "idle", ws->shed_idle }, { "bytes", ws->shed_bytes }, { "cap", ws->refused_cap },
		    { "timeout", ws->timeouts }, { "oversize", ws->oversize }, { "fd_exhausted", ws->emfile } };
	labelled(b, "skein_control_connections_closed_total", "counter",
		 "Control connections the transport closed or refused, by reason.", "reason", sh,
		 sizeof sh / sizeof sh[0]);
	one(b, "skein_control_connections", "gauge", "Open control connections.", (uint64_t)agent_wire_count(a->wire, false));
}

static uint64_t file_size(const char *dir, const char *name)
{
	char p[700];
	struct stat st;
	snprintf(p, sizeof p, "%s/raft/%s", dir, name);
	return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void head(agent *a, sk_buf *b)
{
	const agent_stats *m = a->stats;
	char name[MBR_NAME_MAX + 1];
	uint64_t term;
	agent_head_known(a, name, sizeof name, &term, NULL, 0);
	raft_t *r = agent_head_raft(a);
	one(b, "skein_head_known", "gauge", "1 when this agent knows a head (readiness).", name[0] ? 1 : 0);
	one(b, "skein_head_term", "gauge", "The term of the head this agent knows (0: none).", name[0] ? term : 0);
	one(b, "skein_head_is_head", "gauge", "1 when this agent is the head.", agent_head_is_head(a) ? 1 : 0);
	one(b, "skein_head_voter", "gauge", "1 when this agent is head-eligible (a Raft voter or candidate).",
	    r ? 1 : 0);
	if (!r) return; /* the rest exists on voters only */
	const raft_stats *s = raft_get_stats(r);
	one(b, "skein_head_leader_changes_total", "counter", "Changes of head (name or term) this voter saw.",
	    m->head_changes);
	family(b, "skein_head_commit_latency_seconds", "histogram",
	       "On the head: from proposing an entry to applying it (a majority stored it).");
	for (int i = 0; i < AGENT_STATS_NBUCKETS; i++) {
		char l[48];
		snprintf(l, sizeof l, "le=\"%g\"", agent_stats_commit_s[i]);
		u64(b, "skein_head_commit_latency_seconds_bucket", l, m->buckets[i]);
	}
	u64(b, "skein_head_commit_latency_seconds_bucket", "le=\"+Inf\"", m->count);
	dbl(b, "skein_head_commit_latency_seconds_sum", NULL, m->sum);
	u64(b, "skein_head_commit_latency_seconds_count", NULL, m->count);
	uint64_t last = raft_last_index(r), snap = raft_snapshot_index(r);
	one(b, "skein_head_log_entries", "gauge", "Log entries kept after the last snapshot.", last > snap ? last - snap : 0);
	one(b, "skein_head_commit_index", "gauge", "The highest log index known committed.", raft_commit_index(r));
	one(b, "skein_head_snapshot_index", "gauge", "The log index the latest snapshot covers.", snap);
	if (a->opts.data_dir[0]) {
		one(b, "skein_head_log_bytes", "gauge", "Size of the Raft log file.", file_size(a->opts.data_dir, "raft.log"));
		one(b, "skein_head_snapshot_bytes", "gauge", "Size of the latest snapshot file.",
		    file_size(a->opts.data_dir, "raft.snap"));
	}
	uint64_t rdrop = s->drop_stale_term + s->drop_not_voter + s->drop_bad_state;
	for (int i = 0; i < WIRE_ERR__COUNT; i++) rdrop += s->drop[i];
	uint64_t rc[6];
	agent_head_counters(a, rc);
	lv msg[] = { { "in", s->msgs_recv }, { "out", s->msgs_sent } };
	labelled(b, "skein_head_messages_total", "counter", "Raft messages, by direction.", "direction", msg, 2);
	lv md[] = { { "receive", rdrop }, { "send", rc[2] } };
	labelled(b, "skein_head_messages_dropped_total", "counter", "Raft messages dropped, by where.", "where", md, 2);
	one(b, "skein_head_elections_total", "counter", "Elections this voter started.", s->elections);
	one(b, "skein_head_leaderships_total", "counter", "Times this voter became the head.", s->leaderships);
	one(b, "skein_head_lease_stepdowns_total", "counter", "Times this head stepped down for want of a majority.",
	    s->stepdowns_lease);
	lv sn[] = { { "taken", s->snapshots_taken }, { "sent", s->snapshots_sent }, { "installed", s->snapshots_installed } };
	labelled(b, "skein_head_snapshots_total", "counter", "Snapshots, by what happened to them.", "op", sn, 3);
}

/* Stock engines (docs/engines.md) this agent runs, by the state their
 * sidecar last wrote beside the control socket (engines/JOB/K.json); a
 * member without a file from its running process counts as starting. */
static void engines(agent *a, sk_buf *b, const sup_status *st, size_t n)
{
	static const char *const ES[] = { "starting", "syncing", "updating", "dirty", "ready" };
	lv by[5];
	for (int i = 0; i < 5; i++) by[i] = (lv){ ES[i], 0 };
	char dir[sizeof a->control_socket];
	snprintf(dir, sizeof dir, "%s", a->control_socket);
	char *cut = strrchr(dir, '/');
	if (cut) *cut = 0;
	for (size_t i = 0; cut && i < n; i++) {
		const char *slash = strchr(st[i].id, '/');
		unsigned k;
		char tail;
		if (st[i].state != SUP_RUNNING || !slash || sscanf(slash + 1, "engine-%u%c", &k, &tail) != 1) continue;
		char path[sizeof dir + SUP_ID_MAX + 32], buf[4096];
		snprintf(path, sizeof path, "%s/engines/%.*s/%u.json", dir, (int)(slash - st[i].id), st[i].id, k);
		FILE *f = fopen(path, "r");
		if (!f) continue; /* an engine of our own (--rollout-engine skein) */
		size_t len = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[len] = 0;
		const char *sp = strstr(buf, "\"sidecar_pid\": "), *sv = strstr(buf, "\"state\": \"");
		int which = 0;
		if (sp && sv && strtol(sp + strlen("\"sidecar_pid\": "), NULL, 10) == (long)st[i].pid)
			for (int e = 0; e < 5; e++)
				if (!strncmp(sv + strlen("\"state\": \""), ES[e], strlen(ES[e]))) which = e;
		by[which].v++;
	}
	labelled(b, "skein_engines", "gauge",
		 "Stock engines (--rollout-engine sglang|vllm) this agent runs, by state; ready: serving the latest "
		 "committed version.", "state", by, 5);
}

static void jobs(agent *a, sk_buf *b)
{
	const agent_stats *m = a->stats;
	sup *sp = agent_jobs_sup(a);
	sup_status *st = NULL;
	size_t n = sp ? sup_list(sp, NULL, 0) : 0;
	if (n) st = calloc(n, sizeof *st);
	if (st) n = sup_list(sp, st, n);
	else n = 0;
	static const char *const NAMES[] = { "pending", "starting", "running", "restarting", "failed", "stopped" };
	lv by[6];
	for (int i = 0; i < 6; i++) by[i] = (lv){ NAMES[i], 0 };
	for (size_t i = 0; i < n; i++)
		if ((unsigned)st[i].state < 6) by[st[i].state].v++;
	engines(a, b, st, n);
	free(st);
	labelled(b, "skein_job_members", "gauge", "Job members (trainer ranks, engines) this agent runs, by state.",
		 "state", by, 6);
	one(b, "skein_job_member_restarts_total", "counter", "Member exits this agent answered with a restart.",
	    m->member_restarts);
	one(b, "skein_job_member_failures_total", "counter",
	    "Member exits this agent does not restart (trainer ranks, spent restart budgets).", m->member_failures);
	const job_state *js = agent_head_jobs(a);
	if (!js) return; /* the job records live on voters */
	static const char *const JS[] = { "pending", "running", "stopping", "stopped", "failed", "completed" };
	lv jb[6];
	for (int i = 0; i < 6; i++) jb[i] = (lv){ JS[i], 0 };
	for (size_t i = 0; i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		for (int k = 0; k < 6; k++)
			if (!strcmp(j->state, JS[k])) jb[k].v++;
	}
	labelled(b, "skein_jobs", "gauge", "Jobs in the replicated state (this voter's replica), by state.", "state",
		 jb, 6);
	one(b, "skein_job_entries_refused_total", "counter", "Committed job entries the state machine refused.",
	    job_state_refused(js));
}

static void histo_put(sk_buf *b, const char *name, const char *mode, const agent_stats_histo *h, const double *bounds, int n)
{
	char l[96], nm[96];
	snprintf(nm, sizeof nm, "%s_bucket", name);
	for (int i = 0; i < n; i++) {
		snprintf(l, sizeof l, "mode=\"%s\",le=\"%g\"", mode, bounds[i]);
		u64(b, nm, l, h->b[i]);
	}
	snprintf(l, sizeof l, "mode=\"%s\",le=\"+Inf\"", mode);
	u64(b, nm, l, h->count);
	snprintf(l, sizeof l, "mode=\"%s\"", mode);
	snprintf(nm, sizeof nm, "%s_sum", name);
	dbl(b, nm, l, h->sum);
	snprintf(nm, sizeof nm, "%s_count", name);
	u64(b, nm, l, h->count);
}

/* Weight updates this agent finished as the head (docs/metrics.md maps
 * them to the perf/update_weights_* names of Miles), named skein_update_*
 * (issue 26: "update" is the transaction).  With old set, the same under
 * the names of the last release (skein_transfer_*), kept for one release. */
static void updates(agent *a, sk_buf *b, bool old)
{
	const agent_stats *m = a->stats;
	if (!agent_head_raft(a)) return; /* updates are finished on voters */
	static const struct {
		const char *name, *old, *help;
		size_t off;
	} H[] = {
		{ "skein_update_seconds", "skein_transfer_update_seconds", "Weight updates committed: begin to commit on the head "
						   "(perf/update_weights_time).", offsetof(agent_stats_mode, update) },
		{ "skein_update_implementation_seconds", "skein_transfer_implementation_seconds", "Weight updates committed: the sender's data path "
							   "(perf/update_weights_implementation_time).",
		  offsetof(agent_stats_mode, impl) },
		{ "skein_update_density", "skein_transfer_density", "disk-delta updates committed: stored / total bytes "
					    "(perf/update_weights_density).", offsetof(agent_stats_mode, density) },
		{ "skein_update_engine_data_seconds", "skein_transfer_engine_data_seconds", "Weight updates committed: the slowest participant's "
							"moving of the bytes.", offsetof(agent_stats_mode, eng_data) },
		{ "skein_update_engine_hash_seconds", "skein_transfer_engine_hash_seconds", "Weight updates committed: the slowest participant's "
							"checksums.", offsetof(agent_stats_mode, eng_hash) },
		{ "skein_update_engine_journal_seconds", "skein_transfer_engine_journal_seconds", "Weight updates committed: the slowest participant's "
							   "undo journal.", offsetof(agent_stats_mode, eng_journal) },
		{ "skein_update_sender_hash_seconds", "skein_transfer_sender_hash_seconds", "Weight updates committed: the sender's checksums.",
		  offsetof(agent_stats_mode, sender_hash) },
	};
	char help[512];
	for (size_t h = 0; h < sizeof H / sizeof H[0]; h++) {
		const char *name = old ? H[h].old : H[h].name;
		snprintf(help, sizeof help, "%s%s%s", old ? "Deprecated: " : "", old ? H[h].name : "", old ? ", the same." : H[h].help);
		family(b, name, "histogram", help);
		for (int k = 0; k < AGENT_STATS_NMODES; k++) {
			const agent_stats_histo *hp = (const agent_stats_histo *)((const char *)&m->modes[k] + H[h].off);
			if (H[h].off == offsetof(agent_stats_mode, density))
				histo_put(b, name, agent_stats_modes[k], hp, agent_stats_density, AGENT_STATS_DBUCKETS);
			else
				histo_put(b, name, agent_stats_modes[k], hp, agent_stats_update_s, AGENT_STATS_UBUCKETS);
		}
	}
	static const struct {
		const char *name, *old, *help;
		size_t off;
	} C[] = {
		{ "skein_update_bytes_total", "skein_transfer_bytes_total", "Weight bytes of committed updates.", offsetof(agent_stats_mode, bytes) },
		{ "skein_update_wire_bytes_total", "skein_transfer_wire_bytes_total", "Bytes the data path moved for committed updates "
						     "(perf/update_weights_wire_bytes).", offsetof(agent_stats_mode, wire_bytes) },
		{ "skein_updates_committed_total", "skein_transfer_committed_total", "Weight updates committed.", offsetof(agent_stats_mode, committed) },
		{ "skein_updates_aborted_total", "skein_transfer_aborted_total", "Weight updates aborted.", offsetof(agent_stats_mode, aborted) },
	};
	for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
		lv v[AGENT_STATS_NMODES];
		for (int k = 0; k < AGENT_STATS_NMODES; k++)
			v[k] = (lv){ agent_stats_modes[k], *(const uint64_t *)((const char *)&m->modes[k] + C[c].off) };
		snprintf(help, sizeof help, "%s%s%s", old ? "Deprecated: " : "", old ? C[c].name : "", old ? ", the same." : C[c].help);
		labelled(b, old ? C[c].old : C[c].name, "counter", help, "mode", v, AGENT_STATS_NMODES);
	}
	lv ab[AGENT_STATS_NCAUSES];
	for (int k = 0; k < AGENT_STATS_NCAUSES; k++) ab[k] = (lv){ update_causes[k], m->aborts[k] };
	labelled(b, old ? "skein_transfer_aborts_total" : "skein_update_aborts_total", "counter",
		 old ? "Deprecated: skein_update_aborts_total, the same." : "Weight updates aborted, by cause.", "cause", ab,
		 AGENT_STATS_NCAUSES);
}

static void process(agent *a, sk_buf *b)
{
	agent_metrics *m = a->metrics;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	family(b, "process_cpu_seconds_total", "counter", "User and system CPU time spent by skeind.");
	dbl(b, "process_cpu_seconds_total", NULL,
	    (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	unsigned long vsz = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%lu %lu", &vsz, &rss) != 2) vsz = rss = 0;
		fclose(f);
	}
	long pg = sysconf(_SC_PAGESIZE);
	one(b, "process_resident_memory_bytes", "gauge", "Resident memory size.", (uint64_t)rss * (uint64_t)pg);
	one(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size.", (uint64_t)vsz * (uint64_t)pg);
	uint64_t fds = 0;
	DIR *d = opendir("/proc/self/fd");
	if (d) {
		for (struct dirent *e; (e = readdir(d));)
			if (e->d_name[0] != '.') fds++;
		closedir(d);
		fds--; /* the directory's own descriptor */
	}
	one(b, "process_open_fds", "gauge", "Open file descriptors.", fds);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		one(b, "process_max_fds", "gauge", "Limit of open file descriptors.", (uint64_t)rl.rlim_cur);
	family(b, "process_start_time_seconds", "gauge", "Start time of skeind, seconds since the epoch.");
	dbl(b, "process_start_time_seconds", NULL, m->start_wall);
}

int agent_metrics_render(agent *a, sk_buf *b)
{
	agent_metrics *m = a->metrics;
	uint64_t t0 = (sk_mono_us() * 1000u);
	membership(a, b);
	control(a, b);
	head(a, b);
	jobs(a, b);
	updates(a, b, false);
	updates(a, b, true); /* the old names, for one release */
	process(a, b);
	const agent_http_stats *hs = m->http ? agent_http_get_stats(m->http) : NULL;
	family(b, "skein_metrics_render_seconds", "gauge", "How long the previous /metrics page took to build.");
	dbl(b, "skein_metrics_render_seconds", NULL, m->render_s);
	if (hs) {
		one(b, "skein_metrics_requests_total", "counter", "HTTP requests to the metrics endpoint.", hs->requests);
		lv hb[] = { { "bad_request", hs->bad }, { "cap", hs->refused_cap }, { "timeout", hs->timeouts },
			    { "shed_idle", hs->shed_idle } };
		labelled(b, "skein_metrics_refused_total", "counter",
			 "Metrics endpoint requests refused or connections closed, by reason.", "reason", hb, 4);
	}
	m->render_s = (double)((sk_mono_us() * 1000u) - t0) / 1e9;
	return b->oom ? -1 : 0;
}

static int serve(void *ctx, const char *path, sk_buf *body, const char **ctype)
{
	agent *a = ctx;
	if (strcmp(path, "/metrics")) return 404;
	*ctype = "text/plain; version=0.0.4; charset=utf-8";
	return agent_metrics_render(a, body) == 0 ? 200 : 500;
}

/* ---------------------------------------------------------------- lifecycle */

int agent_metrics_open(agent *a, char *err, size_t errlen)
{
	agent_metrics *m = calloc(1, sizeof *m);
	if (!m) { snprintf(err, errlen, "out of memory"); return -1; }
	m->start_wall = (double)sk_wall_ms() / 1000.0 - (double)(sk_mono_ms() - a->started_ms) / 1000.0;
	a->metrics = m;
	a->stats = agent_stats_new();
	if (!a->stats) { snprintf(err, errlen, "out of memory"); return -1; }
	if (!a->opts.metrics[0]) return 0; /* off: only the hooks' bookkeeping, for skeinctl */
	m->http = agent_http_new(a->loop, a->opts.metrics, serve, a, err, errlen);
	if (!m->http) return -1;
	SK_INFO("metrics", "serving GET /metrics on %s", agent_http_addr(m->http));
	return 0;
}

void agent_metrics_close(agent *a)
{
	agent_metrics *m = a->metrics;
	if (!m) return;
	agent_http_free(&m->http);
	agent_stats_free(&a->stats);
	free(m);
	a->metrics = NULL;
}
