/* agent/agent_main: skeind.  Start-up (settings, data directory, keyring,
 * sockets), joining, signals, the gossip metadata, and the delivery of the
 * deferred events the layers below raise (agent.h).  The pump, leaving and
 * saving the keyring are in agent_pump.c, below the control endpoints. */
#include "agent/agent.h"
#include "agent/agent_update.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/sup/agent_files.h"
#include "agent/agent_metrics.h"
#include "common/sk_time.h"
#include "common/sk_file.h"
#include "common/sk_log.h"
#include "proto/gossip.pb-c.h"

/* Join retries back off from 1 s to this (a seed may start later). */
static const double JOIN_BACKOFF_MAX_S = 10.0;

/* ---- data directory ---- */

static int mkdirs(const char *dir)
{
	char p[OPTS_STR];
	snprintf(p, sizeof p, "%s", dir);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/') continue;
		*s = 0;
		if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
		*s = '/';
	}
	return mkdir(p, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* The generation goes up by one on every start, so a restarted agent is
 * always newer than its old self.  Without a data directory, the wall
 * clock in milliseconds stands in (monotonic enough across restarts). */
static int next_generation(agent *a, char *err, size_t errlen)
{
	if (!a->opts.data_dir[0]) {
		a->generation = sk_wall_ms(); /* rises across restarts, as a stored count would */
		return 0;
	}
	if (mkdirs(a->opts.data_dir) < 0) {
		snprintf(err, errlen, "cannot create data directory %s: %m", a->opts.data_dir);
		return -1;
	}
	char path[600];
	snprintf(path, sizeof path, "%s/generation", a->opts.data_dir);
	unsigned long long g = 0;
	FILE *f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%llu", &g) != 1) {
			fclose(f);
			snprintf(err, errlen, "%s is corrupt: expected a number (remove it to start over)", path);
			return -1;
		}
		fclose(f);
	}
	a->generation = g + 1;
	char buf[32];
	int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)a->generation);
	return sk_file_write_atomic(a->opts.data_dir, "generation", buf, (size_t)n, 0600, true, err, errlen);
}

static int load_keys(agent *a, char *err, size_t errlen)
{
	agent_key given;
	bool have_given = false;
	const char *env_key = getenv("SKEIN_KEY");
	if (a->opts.key_file[0]) {
		if (agent_key_read_file(a->opts.key_file, &given, err, errlen) < 0) return -1;
		agent_warn_loose_key(a->opts.key_file, "--key-file");
		have_given = true;
	} else if (env_key && *env_key) {
		char why[160];
		if (agent_key_decode(env_key, &given, why, sizeof why) < 0) {
			snprintf(err, errlen, "SKEIN_KEY: %s", why);
			return -1;
		}
		have_given = true;
	}
	if (a->opts.data_dir[0]) {
		char path[600], line[256];
		snprintf(path, sizeof path, "%s/keyring", a->opts.data_dir);
		FILE *f = fopen(path, "r");
		if (f) {
			agent_warn_loose_key(path, "the keyring");
			int lineno = 0;
			while (fgets(line, sizeof line, f)) {
				lineno++;
				agent_key k;
				char why[160];
				if (line[0] == '\n') continue;
				if (agent_key_decode(line, &k, why, sizeof why) < 0 ||
				    agent_keyring_add(&a->kr, &k, why, sizeof why) < 0) {
					snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
					fclose(f);
					return -1;
				}
			}
			fclose(f);
		}
	}
	/* The rule: a data dir's keyring, once it holds a key, wins.  The key
	 * given (--key-file, SKEIN_KEY) only seeds a fresh data dir (or is the
	 * whole keyring without one).  The keyring reflects the rotations done
	 * since (skeinctl keyring install/use/remove); re-adding a given key it
	 * lacks would bring a removed key back at every restart. */
	if (have_given && a->kr.n) {
		char fp[FINGERPRINT_LEN + 1];
		agent_key_fingerprint(&given, fp);
		if (agent_keyring_find(&a->kr, fp) < 0) {
			SK_WARN("agent", "the given key %s is not in the keyring of %s (removed by a rotation?): not used; "
				"the data dir's keyring wins (remove %s/keyring to start again from the given key)", fp,
				a->opts.data_dir, a->opts.data_dir);
		}
		return 0;
	}
	if (have_given && agent_keyring_add(&a->kr, &given, err, errlen) < 0) return -1;
	if (a->kr.n) return agent_save_keyring(a, err, errlen);
	return 0;
}

/* ---- metadata ---- */

static int agent_update_meta(agent *a)
{
	Skein__Gossip__NodeMeta m = SKEIN__GOSSIP__NODE_META__INIT;
	Skein__Gossip__Tag tags[OPTS_LIST_MAX], *tp[OPTS_LIST_MAX];
	char kv[OPTS_LIST_MAX][OPTS_STR];
	Skein__Gossip__Addr rpc = SKEIN__GOSSIP__ADDR__INIT;
	mbr_addr ra;
	m.gpus = (uint32_t)a->gpus;
	for (int i = 0; i < a->opts.ntag; i++) {
		skein__gossip__tag__init(&tags[i]);
		snprintf(kv[i], sizeof kv[i], "%s", a->opts.tag[i]);
		char *eq = strchr(kv[i], '=');
		if (!eq || eq == kv[i]) {
			SK_ERROR("agent", "tag '%s' is not KEY=VALUE", a->opts.tag[i]);
			return -1;
		}
		*eq = 0;
		tags[i].key = kv[i];
		tags[i].value = eq + 1;
		tp[i] = &tags[i];
	}
	m.n_tags = (size_t)a->opts.ntag;
	m.tags = tp;
	m.head_eligible = a->opts.head_eligible;
	const char *head = "";
	uint64_t term = 0;
	if (a->head) agent_head_published(a, &head, &term);
	m.head = (char *)head;
	m.term = term;
	if (mbr_addr_parse(a->rpc_advertised[0] ? a->rpc_advertised : a->opts.rpc, &ra) == 0) {
		rpc.ip.data = ra.ip;
		rpc.ip.len = ra.len;
		rpc.port = ra.port;
		m.rpc = &rpc;
	}
	uint8_t buf[MBR_META_MAX];
	size_t n = skein__gossip__node_meta__get_packed_size(&m);
	if (n > MBR_META_MAX) {
		SK_ERROR("agent", "node metadata is %zu bytes, more than %d: use fewer or shorter tags", n, MBR_META_MAX);
		return -1;
	}
	skein__gossip__node_meta__pack(&m, buf);
	if (!a->mbr) return 0;
	int rc = mbr_set_meta(a->mbr, sk_mono_ms(), buf, n);
	agent_pump(a);
	return rc;
}

/* Deferred delivery of membership changes (agent_pump queues it): changes
 * that come while the head or the jobs handle this one queue the next. */
static void members_changed_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)loop; (void)revents;
	if (!a->head) return;
	agent_head_members_changed(a);
	agent_jobs_members_changed(a);
	agent_update_members_changed(a);
}

/* The head or term this voter publishes changed (agent_head.c). */
static void head_changed_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop; (void)revents;
	agent_update_meta(t->data);
}

/* Committed job entries were applied (agent_head.c). */
static void update_changed_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop; (void)revents;
	agent_update_state_changed(t->data);
}

static void state_changed_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop; (void)revents;
	agent_jobs_state_changed(t->data);
}

/* ---- joining ---- */

/* Seeds given by name resolve in the background (glibc's getaddrinfo_a):
 * a slow or dead DNS server must not stall the event loop, which also runs
 * the gossip and the supervisor.  Numeric addresses need no lookup. */
typedef struct {
	struct gaicb cb;
	struct addrinfo hints;
	char host[OPTS_STR], port[16];
	bool active;
} join_dns;
static join_dns g_dns[OPTS_LIST_MAX];

/* Splits "host:port" or "[v6]:port"; -1 when malformed. */
static int split_seed(const char *seed, char *host, size_t hcap, char *port, size_t pcap)
{
	char buf[OPTS_STR], *h = buf, *p;
	snprintf(buf, sizeof buf, "%s", seed);
	if (h[0] == '[') {
		char *close_br = strchr(h, ']');
		if (!close_br || close_br[1] != ':') return -1;
		*close_br = 0;
		p = close_br + 2;
		h++;
	} else {
		p = strrchr(h, ':');
		if (!p) return -1;
		*p++ = 0;
	}
	snprintf(host, hcap, "%s", h);
	snprintf(port, pcap, "%s", p);
	return 0;
}

static int join_addrs(agent *a, const struct addrinfo *res)
{
	int sent = 0;
	/* A name may stand for many agents (a headless Service): join all. */
	for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		mbr_addr seed = { 0 };
		if (ai->ai_family == AF_INET) {
			struct sockaddr_in *sa = (struct sockaddr_in *)ai->ai_addr;
			seed.len = 4;
			memcpy(seed.ip, &sa->sin_addr, 4);
			seed.port = ntohs(sa->sin_port);
		} else if (ai->ai_family == AF_INET6) {
			struct sockaddr_in6 *sa = (struct sockaddr_in6 *)ai->ai_addr;
			seed.len = 16;
			memcpy(seed.ip, &sa->sin6_addr, 16);
			seed.port = ntohs(sa->sin6_port);
		} else {
			continue;
		}
		if (mbr_addr_eq(&seed, &a->adv)) continue;
		mbr_join(a->mbr, sk_mono_ms(), &seed);
		sent++;
	}
	return sent;
}

/* One round: numeric seeds now, named ones once their lookup is done
 * (started here when none runs).  *pending counts lookups still running. */
static int join_once(agent *a, int *pending)
{
	int sent = 0;
	*pending = 0;
	for (int i = 0; i < a->opts.njoin && i < OPTS_LIST_MAX; i++) {
		join_dns *d = &g_dns[i];
		char host[OPTS_STR], port[16];
		if (split_seed(a->opts.join[i], host, sizeof host, port, sizeof port) < 0) continue;
		struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST }, *res;
		if (getaddrinfo(host, port, &hints, &res) == 0) {
			sent += join_addrs(a, res);
			freeaddrinfo(res);
			continue;
		}
		if (d->active) {
			int rc = gai_error(&d->cb);
			if (rc == EAI_INPROGRESS) { (*pending)++; continue; }
			d->active = false;
			if (rc == 0) sent += join_addrs(a, d->cb.ar_result);
			else SK_DEBUG("agent", "join: cannot resolve %s yet: %s", a->opts.join[i], gai_strerror(rc));
			if (d->cb.ar_result) freeaddrinfo(d->cb.ar_result);
			d->cb.ar_result = NULL;
			continue; /* a failed name is asked again next round, after the backoff */
		}
		/* start (or restart) the lookup; its answer is used on a later round */
		snprintf(d->host, sizeof d->host, "%s", host);
		snprintf(d->port, sizeof d->port, "%s", port);
		memset(&d->cb, 0, sizeof d->cb);
		d->hints = (struct addrinfo){ .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV };
		d->cb.ar_name = d->host;
		d->cb.ar_service = d->port;
		d->cb.ar_request = &d->hints;
		struct gaicb *list[1] = { &d->cb };
		if (getaddrinfo_a(GAI_NOWAIT, list, 1, NULL) == 0) {
			d->active = true;
			(*pending)++;
		}
	}
	agent_pump(a);
	return sent;
}

static void join_dns_cancel(void)
{
	for (int i = 0; i < OPTS_LIST_MAX; i++) {
		if (!g_dns[i].active) continue;
		/* a lookup still running keeps its memory: it ends with the process */
		if (gai_cancel(&g_dns[i].cb) == EAI_CANCELED || gai_error(&g_dns[i].cb) != EAI_INPROGRESS) {
			if (g_dns[i].cb.ar_result) freeaddrinfo(g_dns[i].cb.ar_result);
			g_dns[i].active = false;
		}
	}
}

static void join_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)revents;
	if (mbr_member_count(a->mbr) > 1 && mbr_count(a->mbr, MBR_ALIVE) > 1) {
		SK_INFO("agent", "joined: %zu members known", mbr_member_count(a->mbr));
		return;
	}
	int pending;
	join_once(a, &pending);
	if (pending) {
		/* a name being looked up: come back soon for its answer */
		ev_timer_set(t, 0.05, 0);
	} else {
		a->join_backoff = a->join_backoff * 2 > JOIN_BACKOFF_MAX_S ? JOIN_BACKOFF_MAX_S : a->join_backoff * 2;
		ev_timer_set(t, a->join_backoff, 0);
	}
	ev_timer_start(loop, t);
}

/* ---- leaving and signals ---- */

static void sig_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	agent *a = w->data;
	(void)loop; (void)revents;
	if (w->signum == SIGHUP) {
		char err[512];
		if (agent_opts_reload(&a->opts, err, sizeof err) < 0) {
			SK_ERROR("agent", "reload failed, settings unchanged: %s", err);
			return;
		}
		sk_log_level lvl;
		if (sk_log_parse_level(a->opts.log_level, &lvl) == 0) sk_log_set_level(lvl);
		agent_update_meta(a);
		if (agent_ctl_load_operator_keys(a, err, sizeof err) < 0)
			SK_ERROR("agent", "operator keys not reloaded, the old ones stay: %s", err);
		SK_INFO("agent", "reloaded: %d tags, log level %s, %d operator keys (%d read-only)", a->opts.ntag,
			a->opts.log_level, a->op_rw.n + a->op_ro.n, a->op_ro.n);
		return;
	}
	if (a->leaving) {
		SK_WARN("agent", "second signal: exiting now");
		ev_break(a->loop, EVBREAK_ALL);
		return;
	}
	agent_start_leave(a);
}

/* ---- start-up ---- */

static int pick_advertise(agent *a, char *err, size_t errlen)
{
	if (a->opts.advertise[0]) {
		if (mbr_addr_parse(a->opts.advertise, &a->adv) < 0) {
			snprintf(err, errlen, "--advertise: expected IP:PORT, got '%s'", a->opts.advertise);
			return -1;
		}
		return 0;
	}
	a->adv = a->bind;
	bool any4 = a->bind.len == 4 && !memcmp(a->bind.ip, "\0\0\0\0", 4);
	if (!any4) return 0;
	/* 0.0.0.0: advertise the first non-loopback IPv4 address, as serf does. */
	struct ifaddrs *ifs, *i;
	a->adv.ip[0] = 127; a->adv.ip[1] = 0; a->adv.ip[2] = 0; a->adv.ip[3] = 1;
	if (getifaddrs(&ifs) != 0) return 0;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
		struct sockaddr_in *s = (struct sockaddr_in *)i->ifa_addr;
		uint8_t *ip = (uint8_t *)&s->sin_addr;
		if (ip[0] == 127) continue;
		memcpy(a->adv.ip, ip, 4);
		break;
	}
	freeifaddrs(ifs);
	return 0;
}

/* The soft fd limit up to the hard one (1,024 by default is soon spent by
 * connections; the budgets of agent_tcp.c scale with it). */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
	rlim_t was = rl.rlim_cur;
	rlim_t want = rl.rlim_max == RLIM_INFINITY ? 1 << 20 : rl.rlim_max; /* the kernel's nr_open default */
	if (rl.rlim_cur < want) {
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			SK_WARN("agent", "cannot raise the file descriptor limit from %llu: %m", (unsigned long long)was);
			return;
		}
	}
	SK_INFO("agent", "file descriptor limit: %llu (was %llu)", (unsigned long long)rl.rlim_cur,
		(unsigned long long)was);
}

/* The options past their parse, checked before anything is created: the
 * log, the membership profile and --set, the addresses, the GPUs.  -1 with
 * err set: a usage error. */
static int check_opts(agent *a, char *err, size_t errlen)
{
	sk_log_level lvl;
	if (sk_log_parse_level(a->opts.log_level, &lvl) < 0) {
		snprintf(err, errlen, "--log-level: expected debug, info, warn or error, got '%s'", a->opts.log_level);
		return -1;
	}
	sk_log_set_level(lvl);
	if (!strcmp(a->opts.log_format, "json")) sk_log_set_format(SK_LOG_JSON);
	else if (strcmp(a->opts.log_format, "text")) {
		snprintf(err, errlen, "--log-format: expected text or json, got '%s'", a->opts.log_format);
		return -1;
	}
	sk_log_set_name(a->opts.name);
	if (strcmp(a->opts.profile, "lan") && strcmp(a->opts.profile, "fast")) {
		snprintf(err, errlen, "--profile: expected lan or fast, got '%s'", a->opts.profile);
		return -1;
	}
	mbr_config_profile(&a->mcfg, a->opts.profile);
	for (int i = 0; i < a->opts.nset; i++) {
		char kv[OPTS_STR], why[200];
		snprintf(kv, sizeof kv, "%s", a->opts.set[i]);
		char *eq = strchr(kv, '=');
		if (!eq) { snprintf(err, errlen, "--set: expected KEY=VALUE, got '%s'", kv); return -1; }
		*eq = 0;
		if (mbr_config_set(&a->mcfg, kv, eq + 1, why, sizeof why) < 0) {
			snprintf(err, errlen, "--set: %s", why);
			return -1;
		}
	}
	if (mbr_config_check(&a->mcfg, err, errlen) < 0) return -1;
	if (mbr_addr_parse(a->opts.bind, &a->bind) < 0) {
		snprintf(err, errlen, "--bind: expected IP:PORT, got '%s'", a->opts.bind);
		return -1;
	}
	if (pick_advertise(a, err, errlen) < 0) return -1;
	mbr_addr rpc;
	if (mbr_addr_parse(a->opts.rpc, &rpc) < 0) {
		snprintf(err, errlen, "--rpc: expected IP:PORT, got '%s'", a->opts.rpc);
		return -1;
	}
	struct sockaddr_storage mss;
	unsigned msl;
	if (a->opts.metrics[0] && agent_wire_parse_addr(a->opts.metrics, &mss, &msl) < 0) {
		snprintf(err, errlen, "--metrics: expected IP:PORT, got '%s'", a->opts.metrics);
		return -1;
	}
	if (!strcmp(a->opts.gpus, "auto")) {
		a->gpus = agent_gpu_count(a->gpu_source, sizeof a->gpu_source);
	} else {
		char *end;
		long g = strtol(a->opts.gpus, &end, 10);
		if (*end || end == a->opts.gpus || g < 0 || g > 1024) {
			snprintf(err, errlen, "--gpus: expected a number from 0 to 1024 or auto, got '%s'", a->opts.gpus);
			return -1;
		}
		a->gpus = (int)g;
		snprintf(a->gpu_source, sizeof a->gpu_source, "declared");
	}
	return 0;
}

static int setup(agent *a, int argc, char **argv, int *exit_code)
{
	char err[600];
	*exit_code = AGENT_EXIT_USAGE;
	int pr = agent_opts_parse(&a->opts, argc, argv, err, sizeof err);
	if (pr == 1) { *exit_code = AGENT_EXIT_OK; return -1; }
	if (pr < 0) goto usage;
	if (check_opts(a, err, sizeof err) < 0) goto usage;
	/* validate the tags before anything is created (a->mbr is still NULL) */
	if (agent_update_meta(a) < 0) { *exit_code = AGENT_EXIT_USAGE; return -1; }

	/* the data dir: what fails here is storage (disk full, I/O error, a
	 * corrupt file), which a restart by the service manager may cure */
	*exit_code = AGENT_EXIT_STORAGE;
	if (agent_run_dir_pick(a->opts.name, a->opts.data_dir, a->run_dir, sizeof a->run_dir, err, sizeof err) < 0)
		goto fatal;
	if (next_generation(a, err, sizeof err) < 0) goto fatal;
	if (load_keys(a, err, sizeof err) < 0) goto fatal;
	*exit_code = AGENT_EXIT_ERROR;
	/* A cluster without a key lets anyone who reaches a port run commands
	 * as root on every node: refused unless the operator says --insecure. */
	if (!a->kr.n && !a->opts.insecure && (a->opts.njoin > 0 || atoi(a->opts.bootstrap_expect) > 1)) {
		snprintf(err, sizeof err, "a cluster needs a key (--key-file or SKEIN_KEY; `skeinctl keygen` makes one): "
					  "without one, anyone who reaches its ports runs commands as root; --insecure "
					  "allows it for tests on one machine");
		*exit_code = AGENT_EXIT_USAGE;
		goto usage;
	}
	if (a->opts.insecure)
		SK_WARN("agent", "--insecure: every command is accepted from anyone who reaches the control endpoint");
	else if (!a->kr.n)
		SK_WARN("agent", "no key: a lone agent (no gossip in or out, no member joins it) whose TCP control is read-only "
			"(set --key-file)");

	mbr_self self = { .name = a->opts.name, .addr = a->adv, .generation = a->generation,
			  .seed = a->generation ^ (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL };
	a->mbr = mbr_new(&a->mcfg, &self, sk_mono_ms(), err, sizeof err);
	if (!a->mbr) { *exit_code = AGENT_EXIT_USAGE; goto usage; }
	sk_rng_seed(&a->rng, self.seed ^ 0x5eed);
	a->started_ms = sk_mono_ms();

	a->loop = ev_default_loop(EVFLAG_AUTO);
	agent_pump_init(a);
	ev_init(&a->members_changed, members_changed_cb);
	ev_init(&a->head_changed, head_changed_cb);
	ev_init(&a->state_changed, state_changed_cb);
	ev_init(&a->update_changed, update_changed_cb);
	a->members_changed.data = a->head_changed.data = a->state_changed.data = a->update_changed.data = a;
	raise_nofile(); /* after every usage check: their error stays the only line */
	if (agent_net_open(a, err, sizeof err) < 0) goto fatal;
	if (agent_ctl_open(a, err, sizeof err) < 0) goto fatal;
	if (agent_peer_open(a, err, sizeof err) < 0) goto fatal;
	int orc = agent_head_open(a, err, sizeof err);
	if (orc < 0) {
		/* raft storage opened and read here */
		if (orc == -2) *exit_code = AGENT_EXIT_USAGE;
		else if (a->opts.head_eligible && a->opts.data_dir[0]) *exit_code = AGENT_EXIT_STORAGE;
		goto fatal;
	}
	if ((orc = agent_jobs_open(a, err, sizeof err)) < 0) {
		*exit_code = orc == -2 ? AGENT_EXIT_USAGE : AGENT_EXIT_ERROR;
		goto fatal;
	}
	if (agent_metrics_open(a, err, sizeof err) < 0) goto fatal;
	if (agent_update_open(a, err, sizeof err) < 0) goto fatal;
	if (agent_update_meta(a) < 0) goto fatal;

	signal(SIGPIPE, SIG_IGN);
	ev_signal_init(&a->sig_term, sig_cb, SIGTERM);
	ev_signal_init(&a->sig_int, sig_cb, SIGINT);
	ev_signal_init(&a->sig_hup, sig_cb, SIGHUP);
	a->sig_term.data = a->sig_int.data = a->sig_hup.data = a;
	ev_signal_start(a->loop, &a->sig_term);
	ev_signal_start(a->loop, &a->sig_int);
	ev_signal_start(a->loop, &a->sig_hup);

	char addr[64];
	SK_INFO("agent", "skeind %s started: gossip %s (advertised %s), control %s and unix:%s, profile %s, "
			 "generation %llu, %d GPUs (%s)",
		a->opts.name, a->opts.bind, mbr_addr_format(&a->adv, addr, sizeof addr), a->rpc_bound,
		a->control_socket, a->opts.profile, (unsigned long long)a->generation, a->gpus, a->gpu_source);

	ev_timer_init(&a->join_timer, join_timer_cb, 0.0, 0);
	a->join_timer.data = a;
	a->join_backoff = 0.5;
	if (a->opts.njoin) ev_timer_start(a->loop, &a->join_timer);
	agent_pump(a);
	return 0;
usage:
	fprintf(stderr, "skeind: %s\n", err);
	return -1;
fatal:
	SK_ERROR("agent", "%s", err);
	fprintf(stderr, "skeind: %s\n", err);
	return -1;
}

static void teardown(agent *a)
{
	if (a->loop) {
		/* nothing delivered while closing */
		ev_timer_stop(a->loop, &a->members_changed);
		ev_timer_stop(a->loop, &a->head_changed);
		ev_timer_stop(a->loop, &a->state_changed);
		ev_timer_stop(a->loop, &a->update_changed);
		agent_metrics_close(a);
		agent_update_close(a);
		agent_jobs_close(a);
		agent_head_close(a);
		agent_peer_close(a);
		agent_ctl_close(a);
		agent_net_close(a);
	}
	join_dns_cancel();
	mbr_destroy(&a->mbr);
	agent_opts_free(&a->opts);
}

int main(int argc, char **argv)
{
	static agent a;
	a.udp_fd = a.tcp_fd = -1;
	int code;
	if (setup(&a, argc, argv, &code) < 0) {
		teardown(&a);
		return code;
	}
	ev_run(a.loop, 0);
	teardown(&a);
	return a.exit_code;
}
