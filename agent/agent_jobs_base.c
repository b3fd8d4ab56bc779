/* agent/agent_jobs_base: what the jobs family shares, below all of it:
 * the head's view of each node's reports, proposals in flight, MASTER_PORT
 * choice, member ids and one member's order as the head builds it.  Called
 * by agent_jobs.c (placement, orders, supervision), agent_drain.c,
 * agent_jobs_cmd.c and agent_update.c; it calls only the head and membership. */
#include "agent/agent.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/agent_jobs_int.h"
#include "common/sk_time.h"
#include "common/sk_log.h"
#include "proto/gossip.pb-c.h"

static void ip_str(const mbr_addr *ad, char *out, size_t cap)
{
	if (!inet_ntop(ad->len == 4 ? AF_INET : AF_INET6, ad->ip, out, (socklen_t)cap)) snprintf(out, cap, "?");
}


/* A reconcile round and orders in `after` seconds (sooner if one is due sooner). */
void aj_kick_in(agent *a, double after)
{
	agent_jobs *J = a->jobs;
	if (!J || J->closing) return;
	if (ev_is_active(&J->kick)) {
		if (ev_timer_remaining(a->loop, &J->kick) <= after) return;
		ev_timer_stop(a->loop, &J->kick);
	}
	ev_timer_set(&J->kick, after, 0.0);
	ev_timer_start(a->loop, &J->kick);
}

const job_report *aj_report_of(agent *a, const char *node)
{
	agent_jobs *J = a->jobs;
	for (size_t i = 0; i < J->nreports; i++)
		if (!strcmp(J->reports[i].node, node)) return &J->reports[i];
	return NULL;
}

bool aj_node_reported(agent *a, const char *node)
{
	return aj_report_of(a, node) != NULL;
}

/* The state of member `id` as its node last reported it (NULL if none). */
const job_member_status *aj_status_of(agent *a, const char *node, const char *id)
{
	const job_report *r = aj_report_of(a, node);
	for (size_t i = 0; r && i < r->n; i++)
		if (!strcmp(r->members[i].id, id)) return &r->members[i];
	return NULL;
}

void aj_inflight_add(agent *a, const char *job, uint64_t index)
{
	agent_jobs *J = a->jobs;
	if (agent_head_applied(a) >= index) return; /* committed already (one voter) */
	inflight *p = realloc(J->infl, (J->ninfl + 1) * sizeof *p);
	if (!p) return;
	J->infl = p;
	snprintf(p[J->ninfl].job, sizeof p[J->ninfl].job, "%s", job);
	p[J->ninfl].index = index;
	p[J->ninfl].since = sk_mono_s();
	J->ninfl++;
}

void aj_propose_update(agent *a, const job_rec *old, const char *state, const char *reason,
			   const job_layout *L, const char *why)
{
	uint8_t *data;
	size_t len;
	/* with one voter the entry commits inside the propose and `old` is freed */
	char name[JOB_NAME_MAX + 1];
	snprintf(name, sizeof name, "%s", old->spec.name);
	if (job_codec_update(old, state, reason, L, &data, &len) < 0) return;
	agent_reply r = { 0 };
	sk_buf_init(&r.body);
	uint64_t index;
	if (agent_head_propose(a, NULL, &r, JOB_ENTRY_UPDATE, data, len, NULL, &index) == 0) {
		aj_inflight_add(a, name, index);
		SK_INFO("jobs", "job %s: %s", name, why);
	} else {
		SK_WARN("jobs", "job %s: update not proposed: %s", name, r.error);
	}
	sk_buf_free(&r.body);
}

/* A port free on this node now (for MASTER_PORT), 0 when none.  Drawn from
 * 20000-32767, below Linux's ephemeral range (32768+), where an outgoing
 * connection of any process could take it before rank 0 binds it; bound on
 * the wildcard address, as rank 0 will (the advertised one may be a NAT's). */
uint32_t aj_free_port(agent *a)
{
	enum { LO = 20000, HI = 32768, TRIES = 32 };
	int fam = a->adv.len == 4 ? AF_INET : AF_INET6;
	for (int k = 0; k <= TRIES; k++) {
		int fd = socket(fam, SOCK_STREAM, 0);
		if (fd < 0) return 0;
		uint16_t want = k < TRIES ? (uint16_t)(LO + sk_rng_below(&a->rng, HI - LO)) : 0; /* last: any */
		struct sockaddr_storage ss = { 0 };
		socklen_t sl;
		if (fam == AF_INET) {
			((struct sockaddr_in *)&ss)->sin_family = AF_INET;
			((struct sockaddr_in *)&ss)->sin_port = htons(want);
			sl = sizeof(struct sockaddr_in);
		} else {
			((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
			((struct sockaddr_in6 *)&ss)->sin6_port = htons(want);
			sl = sizeof(struct sockaddr_in6);
		}
		uint32_t port = 0;
		if (bind(fd, (struct sockaddr *)&ss, sl) == 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
			port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
							     : ((struct sockaddr_in6 *)&ss)->sin6_port);
		close(fd);
		if (port) return port;
	}
	return 0;
}

/* A port to offer as MASTER_PORT on `node`: this agent's own, or the one the
 * node last reported, unless an active job already took it (two jobs placed
 * before the node's next report); 0 = wait for the next report. */
uint32_t aj_node_free_port(agent *a, const char *node, uint32_t old)
{
	uint32_t port;
	if (!strcmp(node, a->opts.name)) {
		port = aj_free_port(a);
	} else {
		const job_report *r = aj_report_of(a, node);
		port = r && r->free_port < 65536 ? r->free_port : 0;
	}
	const job_state *js = agent_head_jobs(a);
	for (size_t i = 0; port && js && i < job_state_count(js); i++) {
		const job_rec *j = job_state_at(js, i);
		if (j->layout.master_port == port && job_rec_placed(j) && !strcmp(j->layout.node[0], node) &&
		    (!strcmp(j->state, "running") || !strcmp(j->state, "pending")))
			port = 0;
	}
	return port == old ? 0 : port;
}

/* The address `node` advertises in gossip, as text ("" when unknown): where
 * its members can be reached (MASTER_ADDR, SKEIN_NODE_ADDR). */
static void node_addr(agent *a, const char *node, char *out, size_t cap)
{
	mbr_member_info mi;
	out[0] = 0;
	if (!node[0]) return;
	if (!strcmp(node, a->opts.name)) ip_str(&a->adv, out, cap);
	else if (mbr_lookup(a->mbr, node, &mi) == 0) ip_str(&mi.addr, out, cap);
}

void aj_master_of(agent *a, job_layout *L, const place_node *nodes, size_t n)
{
	char addr[64] = "";
	if (job_node_index(nodes, n, L->node[0]) >= 0) node_addr(a, L->node[0], addr, sizeof addr);
	if (strcmp(addr, L->master_addr)) {
		snprintf(L->master_addr, sizeof L->master_addr, "%s", addr);
		L->master_port = 0;
	}
}

/* A new trainer generation gets a new MASTER_PORT when rank 0's node offers
 * one: ranks of the old generation still around (a cut-off node) cannot
 * join the new world.  Keeps the old one otherwise. */
void aj_fresh_port(agent *a, job_layout *L)
{
	if (!L->node[0][0] || !L->master_port) return;
	uint32_t p = aj_node_free_port(a, L->node[0], L->master_port);
	if (p) L->master_port = p;
}

void aj_member_id(char *out, size_t cap, const char *job, bool trainer, uint32_t k)
{
	snprintf(out, cap, "%s/%s-%u", job, trainer ? "trainer" : "engine", k);
}

static void env_add(order_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void env_add(order_buf *b, const char *fmt, ...)
{
	if (b->o.nenv >= sizeof b->env / sizeof b->env[0] || b->used >= sizeof b->arena) return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->arena + b->used, sizeof b->arena - b->used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof b->arena - b->used) {
		/* never a cut value (a wrong folder that exists): the variable is left out */
		SK_ERROR("jobs", "%s: environment too long, a variable left out", b->o.id);
		b->arena[b->used] = 0;
		return;
	}
	b->env[b->o.nenv++] = b->arena + b->used;
	b->used += (size_t)n + 1;
}

static uint32_t backoff_ms(const job_spec *s, uint64_t restarts)
{
	if (!restarts || !s->backoff_min_ms) return 0;
	uint64_t d = s->backoff_min_ms;
	for (uint64_t k = 1; k < restarts && d < s->backoff_max_ms; k++) d *= 2;
	return (uint32_t)(d > s->backoff_max_ms ? s->backoff_max_ms : d);
}

void aj_gpu_list(char *out, size_t cap, const uint32_t *g, uint32_t n)
{
	size_t off = 0;
	out[0] = 0;
	for (uint32_t i = 0; i < n && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%u", i ? "," : "", g[i]);
}

/* The orders of one member (trainer rank or engine k) of job j; false when
 * it does not run now (not placed, or its trainer is incomplete). */
bool aj_build_order(agent *a, const job_rec *j, const job_spec *s, const job_layout *L, bool trainer, uint32_t k,
		    order_buf *b, char *node, size_t nodecap)
{
	uint32_t A = job_spec_trainer_ranks(s), E = job_spec_engines(s), tp = s->rollout_num_gpus_per_engine, ng;
	memset(&b->o, 0, sizeof b->o);
	b->used = 0;
	if (trainer) {
		if (!job_layout_trainer_placed(L, A)) return false;
		snprintf(node, nodecap, "%s", L->node[k]);
		b->o.gpus[0] = L->gpu[k];
		ng = 1;
	} else {
		uint32_t first = place_engine_slot(s, k);
		if (first > L->n || L->n - first < tp || !L->node[first][0]) return false;
		snprintf(node, nodecap, "%s", L->node[first]);
		for (ng = 0; ng < tp; ng++) b->o.gpus[ng] = L->gpu[first + ng];
	}
	aj_member_id(b->o.id, sizeof b->o.id, s->name, trainer, k);
	snprintf(b->o.job, sizeof b->o.job, "%s", j->spec.name);
	b->o.trainer = trainer;
	b->o.rank = trainer ? (int32_t)k : -1;
	b->o.engine = trainer ? -1 : (int32_t)k;
	b->o.ngpus = ng;
	b->o.cmd = trainer ? j->spec.trainer_cmd : j->spec.rollout_cmd; /* the committed record outlives the order; `s` may not */
	b->o.env = b->env;
	b->o.gen = trainer ? L->trainer_gen : L->engine_gen[k];
	b->o.restart_base = trainer ? (uint32_t)(L->trainer_gen - 1) : L->engine_restarts[k];
	b->o.local_restart = !trainer;
	b->o.max_restarts = s->max_restarts;
	b->o.backoff_min_ms = s->backoff_min_ms;
	b->o.backoff_max_ms = s->backoff_max_ms;
	b->o.start_delay_ms = trainer ? backoff_ms(s, L->trainer_failures) : 0;
	/* only the trainer's world needs the port; engines must not wait on it
	 * (a trainer unit pending would hold every engine) */
	b->o.hold = trainer && L->master_port == 0;
	b->o.stop_grace_ms = s->stop_grace_ms;
	char gl[JOB_GPUS_PER_NODE_MAX * 4];
	aj_gpu_list(gl, sizeof gl, b->o.gpus, ng);
	/* a trainer unit (actor-num-gpus-per-node ranks) sits on one node */
	uint32_t local_rank = trainer ? k % s->actor_num_gpus_per_node : 0;
	env_add(b, "RANK=%u", k);
	env_add(b, "WORLD_SIZE=%u", trainer ? A : E);
	env_add(b, "LOCAL_RANK=%u", local_rank);
	if (L->master_port) { /* an engine may start before the trainer's port is known */
		env_add(b, "MASTER_ADDR=%s", L->master_addr);
		env_add(b, "MASTER_PORT=%u", L->master_port);
	}
	env_add(b, "CUDA_VISIBLE_DEVICES=%s", gl);
	env_add(b, "SKEIN_JOB=%s", s->name);
	env_add(b, "SKEIN_ROLE=%s", trainer ? "trainer" : "rollout");
	env_add(b, "SKEIN_ENGINE_ID=%d", trainer ? -1 : (int)k);
	env_add(b, "SKEIN_BASE_GPU_ID=%u", b->o.gpus[0]);
	env_add(b, "SKEIN_TP_SIZE=%u", trainer ? 1 : tp);
	env_add(b, "SKEIN_MEMBER=%s", b->o.id);
	env_add(b, "SKEIN_GENERATION=%llu", (unsigned long long)b->o.gen);
	env_add(b, "SKEIN_NUM_ENGINES=%u", E);
	env_add(b, "SKEIN_TRAINER_RANKS=%u", A);
	env_add(b, "SKEIN_TRANSFER_MODE=%s", s->transfer_mode);
	env_add(b, "SKEIN_BUFFER_SIZE=%llu", (unsigned long long)s->buffer_size);
	if (s->disk_dir[0]) env_add(b, "SKEIN_DISK_DIR=%s", s->disk_dir);
	/* coordinated weight updates (#13): the job's policy, and where this
	 * node's engines listen for p2p (its gossip address, as MASTER_ADDR) */
	env_add(b, "SKEIN_UPDATE_TIMEOUT_MS=%u", s->update_timeout_ms);
	env_add(b, "SKEIN_ON_ENGINE_LOSS=%s", s->on_engine_loss);
	/* a stock engine (issue 24): its node's agent runs skein's sidecar,
	 * which starts the job's --rollout-cmd (agent_jobs.c) */
	if (!trainer && strcmp(s->rollout_engine, "skein")) {
		env_add(b, "SKEIN_ROLLOUT_ENGINE=%s", s->rollout_engine);
		env_add(b, "SKEIN_PAUSE_GENERATION_MODE=%s", s->pause_mode);
		env_add(b, "SKEIN_ENGINE_LAYOUT=%s", s->engine_layout);
		env_add(b, "SKEIN_NODE=%s", node);  /* for `skeinctl engines` */
	}
	char addr[64];
	node_addr(a, node, addr, sizeof addr);
	if (addr[0]) env_add(b, "SKEIN_NODE_ADDR=%s", addr);
	/* torchrun's variables, so a script written for torchrun runs unchanged:
	 * the trainer's node units are its groups; each engine is a group of one */
	uint32_t per = trainer ? s->actor_num_gpus_per_node : 1;
	env_add(b, "LOCAL_WORLD_SIZE=%u", per);
	env_add(b, "GROUP_RANK=%u", k / per);
	env_add(b, "GROUP_WORLD_SIZE=%u", (trainer ? A : E) / per);
	env_add(b, "ROLE_NAME=%s", trainer ? "trainer" : "rollout");
	env_add(b, "ROLE_RANK=%u", k);
	env_add(b, "ROLE_WORLD_SIZE=%u", trainer ? A : E);
	env_add(b, "TORCHELASTIC_RESTART_COUNT=%u", b->o.restart_base); /* trainer: restarts of the group */
	env_add(b, "TORCHELASTIC_MAX_RESTARTS=%d", s->max_restarts);
	env_add(b, "TORCHELASTIC_RUN_ID=%s", s->name);
	return true;
}

struct sup *agent_jobs_sup(agent *a)
{
	return a->jobs ? a->jobs->sup : NULL;
}
