/* agent/agent: skeind's internals, shared by its files.
 *
 *   agent_main.c   start-up, data directory, signals, joining, the gossip
 *                  metadata, and the delivery of deferred events (below)
 *   agent_pump.c   the membership pump, leaving, the keyring file
 *   agent_net.c    the gossip sockets: UDP, and TCP streams on the same port
 *   agent_net_util.c  addresses and unsealing, for agent_net.c and agent_tcp.c
 *   agent_ctl.c    the control endpoints (TCP and Unix socket): who may ask what,
 *                  the dispatch to each command family, the node's own commands,
 *                  and forwards that must follow a new head (served here once
 *                  this agent is the head)
 *   agent_reply.c  answering a request: agent_reply_fail, agent_ctl_send (a
 *                  deferred answer), agent_ctl_cred
 *   agent_wire.c   the control channel's bounded framed transport
 *   agent_auth.c   roles, command classes, the replay cache
 *   agent_tcp.c    the gossip TCP streams, bounded in memory, fds and time
 *   agent_rpc.c    one request/response to a control endpoint (skeinctl, fan-out)
 *   agent_crypto.c keyring and AES-GCM
 *   agent_opts.c   flags, environment, config file
 *   agent_gpu.c    counting GPUs at run time
 *   agent_head.c   the head election (raft/) wired in: storage thread, pump,
 *                  bootstrap, voter replacement, forwards to the head, the
 *                  order fence (agent_head_order_ok)
 *   agent_head_cmd.c  the head's commands: head [transfer], state, voters
 *   agent_state.c  the replicated state machine: key-value map + jobs, its
 *                  snapshot ("SKSM"); pure, it calls nothing back
 *   agent_peer.c   messages to other agents by name (one connection each),
 *                  forwarded requests and their answers
 *   agent_jobs.c   jobs: placement and orders (head), supervision (every agent)
 *   agent_jobs_cmd.c  the jobs family's dispatch: orders, reports, and
 *                  skeinctl's job, placement, logs and status commands
 *   agent_drain.c  skeinctl drain / undrain, and the head's moves off drained nodes
 *   agent_jobs_base.c  what the jobs family shares (reports, ports, orders)
 *   agent_sup.c    the member processes of this node
 *   agent_metrics.c, agent_http.c  GET /metrics (--metrics); it only reads
 *   agent_stats.c  what head, jobs and weight updates count for the metrics
 *   agent_update.c     coordinated weight updates: the head's coordinator and
 *                  `skeinctl transfers`; agent_update_gate.c checks a member's requests
 *
 * One libev loop runs everything.  The membership logic (membership/mbr.h)
 * gets time from sk_mono_ms (common/sk_time.h) and packets from the sockets; after every
 * call into it, agent_pump() sends what it produced and logs its events, and
 * re-arms the timer at its next deadline (the sockets raise pump_due instead).
 *
 * Calls go one way, down this list (a file calls those below it, never one
 * above):
 *
 *   agent_main.c                      opens and closes everything; delivers events
 *   agent_ctl.c                       dispatch (and forwards taken over)
 *   agent_metrics.c                   the page: reads, never called by what it reads
 *   agent_pump.c                      membership pump, leave, keyring file
 *   agent_net.c, then agent_tcp.c     gossip sockets
 *   agent_head_cmd.c, agent_jobs_cmd.c   command families
 *   agent_jobs.c                      placement, orders, supervision
 *   agent_drain.c                     drain / undrain, the head's moves
 *   agent_update.c, agent_update_gate.c       weight updates (reads jobs' reports)
 *   agent_jobs_base.c                 the jobs family's shared helpers
 *   agent_head.c                      election and replicated state
 *   agent_peer.c                      messages to other agents, forwards
 *   agent_stats.c, agent_net_util.c, agent_reply.c, agent_wire.c,
 *   agent_state.c, agent_sup.c, ...   leaves
 *
 * A lower layer tells a higher one of an event by raising one of the
 * zero-delay timers below (agent_defer); agent_main.c delivers it on the
 * next loop iteration, never from inside the work that raised it:
 *   members_changed  membership changed (agent_pump) -> head and jobs
 *   head_changed     the head or term this voter publishes changed (agent_head.c)
 *                    -> the gossip metadata (agent_update_meta)
 *   state_changed    committed job entries were applied (agent_head.c) -> jobs
 *   update_changed       committed weight-update entries (agent_head.c) -> agent_update.c
 *   pump_due         packets were handed to membership (agent_net.c,
 *                    agent_tcp.c) -> agent_pump (agent_pump.c), which
 *                    delivers it sooner: at the end of the same iteration,
 *                    after every socket callback, before the next poll
 * and ends the loop with agent_exit.  The calls between these files have no
 * circle (the link's symbols, checked by tests/agent/layers_test.sh). */
#ifndef AGENT_H
#define AGENT_H

#include <ev.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "agent/agent_auth.h"
#include "agent/agent_crypto.h"
#include "agent/agent_opts.h"
#include "agent/agent_rpc.h"
#include "agent/agent_wire.h"
#include "common/sk_buf.h"
#include "common/sk_rng.h"
#include "membership/mbr.h"

typedef struct agent_tcp agent_tcp;
typedef struct agent_head agent_head;
typedef struct agent_peers agent_peers;
typedef struct agent_jobs agent_jobs;
typedef struct agent_metrics agent_metrics;
typedef struct agent_stats agent_stats;
typedef struct agent_update agent_update;

/* Who asked a control request, so that the answer can be sent later (a
 * write answered once committed, a request forwarded to the head), and
 * what it proved about itself (agent_auth.h). */
typedef struct {
	agent_wire_id conn;              /* where the answer goes; 0: nobody waits */
	agent_role role;
	bool remote;               /* over TCP, not the local Unix socket */
	bool sealed;               /* answer sealed with `key` (the request's key) */
	bool operator_key;         /* ... an operator key: the operator answer's associated data */
	agent_key key;
	bool has_nonce;
	uint8_t nonce[AUTH_NONCE]; /* echoed in the answer */
	char sender[MBR_NAME_MAX + 1]; /* the sending agent, as its sealed request says */
	int pid;                   /* Unix socket: the connecting process (SO_PEERCRED), else 0 */
} agent_client;

typedef struct {
	int code;                  /* 0 ok, 1 error, 2 usage error */
	char error[512];
	sk_buf body;
	bool deferred;             /* the handler answers later with agent_ctl_send */
} agent_reply;

typedef struct {
	uint64_t udp_in, udp_out, tcp_in, tcp_out, bytes_in, bytes_out;
	uint64_t drop_auth;        /* failed authentication (wrong key, forged, plaintext) */
	uint64_t drop_plain;       /* encrypted packet while we have no key */
	uint64_t drop_keyless;     /* gossip in or out, orders out: no key and no --insecure */
	uint64_t drop_debug_in, drop_debug_out;
	uint64_t drop_oversize;    /* stream or datagram over the limit */
	uint64_t drop_send;        /* the OS refused a send */
	uint64_t tcp_timeouts, tcp_refused;
	/* gossip TCP limits (agent_tcp.c), each drop by its reason */
	/* inbound connection closed to let a new one in (at the cap, in total or
	 * per source): one quiet or silent, else the oldest */
	uint64_t tcp_in_shed_idle, tcp_in_shed_busy;
	uint64_t tcp_in_budget;        /* half-received stream dropped: inbound byte budget spent */
	uint64_t tcp_in_first_byte_timeouts, tcp_in_idle_timeouts;
	uint64_t drop_stream_type;     /* stream over its message type's cap, or not gossip */
	uint64_t tcp_out_shed;         /* our stream dropped to fit the outbound budget */
	uint64_t tcp_accept_no_fd;     /* accept failed for want of fds (EMFILE/ENFILE): the
				* connection closed through the reserve fd, or the listener rested */
	uint64_t ctl_requests, ctl_rejected;
	uint64_t wv_passes;            /* passes over an open update's participants (after a report or a membership change) */
	uint64_t ctl_auth_failed;      /* sealed with no key of ours, or plaintext where a key is needed */
	uint64_t ctl_refused_role;     /* authenticated, but not allowed that command */
	uint64_t ctl_refused_replay;   /* a nonce seen before, or the replay cache full */
	uint64_t ctl_refused_skew;     /* time outside the window */
	uint64_t ctl_refused_recipient;/* addressed to another agent */
	uint64_t ctl_refused_order;    /* an order not from the head we know, at its term */
} agent_counters;

typedef struct agent {
	struct ev_loop *loop;
	agent_opts opts;
	/* skeind's private folder (agent_files.h): the data dir, or one of its own
	 * when none is given; member logs and state go there (and the default
	 * control socket).  Set in start-up before agent_ctl_open. */
	char run_dir[PATH_MAX];
	mbr_config mcfg;
	mbr_t *mbr;
	mbr_addr bind, adv;
	uint64_t generation;
	int gpus;
	char gpu_source[64];

	int udp_fd, tcp_fd;
	ev_io udp_w, tcp_w;
	agent_tcp *tcp;

	ev_timer mbr_timer;
	ev_timer pump_due;         /* deferred: packets were handed to membership (agent_pump.c) */
	ev_check pump_check;       /* agent_pump.c: delivers pump_due at the end of its iteration */
	ev_timer join_timer;
	double join_backoff;
	bool joined;
	ev_timer leave_timer;
	ev_signal sig_term, sig_int, sig_hup;
	bool leaving;
	double leave_started;
	int exit_code;             /* AGENT_EXIT_*: what main returns once the loop ends */

	agent_keyring kr;          /* n == 0: plaintext */
	agent_keyring op_rw, op_ro;/* operator keys (--operator-key-file, --operator-read-key-file) */
	gid_t operator_gid;        /* --operator-group, or (gid_t)-1 */

	agent_wire *wire;                /* the control endpoints and every control connection */
	agent_replay *replay;
	uint64_t replay_floor_ms;  /* wall ms: sealed requests stamped earlier are refused (agent_ctl.c) */
	uint64_t replay_saved_ms;  /* wall ms: the bound on accepted stamps persisted in the data dir */
	char rpc_bound[64];
	char rpc_advertised[64];   /* where other agents reach our control endpoint */
	char control_socket[256];  /* the Unix socket's path */

	sk_rng rng;                /* debug drops */
	double drop_in, drop_out;
	agent_counters cnt;
	uint64_t started_ms;
	const char *members_in;     /* "cgroup" or "process tree" (no cgroup v2), for info */

	agent_head *head;          /* every agent forwards; voters (--head-eligible) also elect */
	agent_peers *peers;        /* connections to other agents, forwards in flight */
	agent_jobs *jobs;
	agent_metrics *metrics;    /* --metrics (agent_metrics.c) */
	agent_stats *stats;        /* what head, jobs and wv count for it (agent_stats.h); NULL: not counted */
	agent_update *wv;              /* coordinated weight updates (agent_update.c) */
	/* Deferred events (see the top of this file), raised with agent_defer
	 * and delivered by agent_main.c on the next loop iteration. */
	ev_timer members_changed;  /* membership changed: head and jobs */
	ev_timer head_changed;     /* the head or term this voter publishes: gossip metadata */
	ev_timer state_changed;    /* committed job entries were applied: jobs */
	ev_timer follow_timer;     /* agent_ctl.c: forwards follow the head (every 100 ms) */
	ev_timer update_changed;       /* weight-update entries were applied (agent_head.c): wv */
} agent;

/* skeind's exit status (docs/agent.md, "Exit codes"): systemd's Restart=on-failure
 * restarts it on anything but 0. */
enum {
	AGENT_EXIT_OK = 0,        /* left the cluster on SIGTERM/SIGINT, or --help */
	AGENT_EXIT_ERROR = 1,     /* a runtime error: cannot bind, a state that cannot be trusted, ... */
	AGENT_EXIT_USAGE = 2,     /* a bad flag, setting or tag */
	AGENT_EXIT_STORAGE = 3,   /* the data dir cannot be read or written (disk full, I/O error) */
};

/* Raises a deferred event: w's callback runs on the next loop iteration
 * (once, however often it is raised before). */
/* No key and no --insecure: this agent is alone, so nothing travels in
 * plaintext: it takes no gossip (no stranger joins it), gossips to nobody
 * and sends no order or forward to another agent (docs/security.md). */
static inline bool agent_keyless_closed(const agent *a)
{
	return a->kr.n == 0 && !a->opts.insecure;
}

static inline void agent_defer(agent *a, ev_timer *w)
{
	if (ev_is_active(w)) return;
	ev_timer_set(w, 0.0, 0.0);
	ev_timer_start(a->loop, w);
}

/* Ends the loop at once; skeind exits with `code` (AGENT_EXIT_*), the first
 * cause given being the one reported. */
static inline void agent_exit(agent *a, int code)
{
	if (!a->exit_code) a->exit_code = code;
	ev_break(a->loop, EVBREAK_ALL);
}

/* agent_pump.c: the membership pump, leaving, the keyring file */
void agent_pump_init(agent *a);           /* the pump's watchers, before the sockets open */
void agent_pump(agent *a);
int agent_save_keyring(agent *a, char *err, size_t errlen);
void agent_start_leave(agent *a);

/* agent_net.c */
int agent_net_open(agent *a, char *err, size_t errlen);
void agent_net_close(agent *a);
void agent_net_send(agent *a, const mbr_out *o);

/* agent_net_util.c: shared by agent_net.c and agent_tcp.c */
void agent_net_to_sockaddr(const mbr_addr *a, struct sockaddr_storage *ss, socklen_t *sl);
void agent_net_from_sockaddr(const struct sockaddr_storage *ss, mbr_addr *a);
/* Opens (or passes through, without a keyring) a sealed payload; NULL when
 * it does not open (counted). */
const uint8_t *agent_net_unseal(agent *a, const char *aad, const uint8_t *in, size_t n,
				uint8_t *scratch, size_t *outlen);

/* agent_tcp.c */
int agent_tcp_open(agent *a, char *err, size_t errlen);
void agent_tcp_close(agent *a);
void agent_tcp_send(agent *a, const mbr_out *o);
/* Open inbound and outbound connections, bytes held by half-received
 * streams, the most inbound connections one source address holds. */
void agent_tcp_gauges(const agent *a, uint64_t g[4]);

/* agent_ctl.c */
int agent_ctl_open(agent *a, char *err, size_t errlen);
void agent_ctl_close(agent *a);
/* (Re)reads --operator-key-file and --operator-read-key-file; on error the
 * keys in use stay. */
int agent_ctl_load_operator_keys(agent *a, char *err, size_t errlen);

/* agent_reply.c */
/* How this agent seals what it sends to other agents. */
agent_rpc_cred agent_ctl_cred(agent *a);
/* Answers a request whose handler deferred its reply. */
void agent_ctl_send(agent *a, const agent_client *c, int code, const char *error, const char *body);
/* ... with a binary answer (Response.payload) as well. */
void agent_ctl_send_bin(agent *a, const agent_client *c, int code, const char *error, const char *body,
		       const uint8_t *payload, size_t plen);
void agent_reply_fail(agent_reply *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* agent_head.c: the head election (raft/) wired to the agent; -2 for a bad
 * flag (usage), -1 otherwise */
int agent_head_open(agent *a, char *err, size_t errlen);
void agent_head_close(agent *a);
/* After membership changed: bootstrap when enough voters are visible,
 * refresh the head seen in gossip, replace long-failed voters. */
void agent_head_members_changed(agent *a);
/* The head this agent believes in ("" when none) and its term. */
void agent_head_known(agent *a, char *name, size_t cap, uint64_t *term, char *rpc, size_t rpccap);
/* The fence: an order (the head's "assign", or skeinctl debug order) is
 * followed only when it comes from the head this agent knows (Raft, or
 * gossip sealed with the cluster key), at exactly that head's term; false
 * with the reason on one line otherwise. */
bool agent_head_order_ok(agent *a, const char *sender, uint64_t term, char *why, size_t whylen);
/* Consensus counters: messages sent, received, dropped at send, elections
 * started, lease step-downs, messages dropped on receipt. */
void agent_head_counters(agent *a, uint64_t c[6]);
/* What this voter publishes in gossip ("" and 0 for a non-voter). */
void agent_head_published(agent *a, const char **head, uint64_t *term);
/* agent_head_cmd.c: control commands of the head: "head", "state",
 * "voters", and "raft" (a peer voter's message). */
struct Skein__Control__Request;
bool agent_head_dispatch(agent *a, const struct Skein__Control__Request *q, const agent_client *c,
			 agent_reply *r);

/* The head-side helpers agent_jobs.c uses. */
struct job_state;
bool agent_head_is_head(agent *a);
void agent_head_leave(agent *a);          /* a leaving head hands over to another voter */
bool agent_head_handing_over(agent *a);   /* ... and the leave waits for that */
/* The head's node is drained: hand over (a no-op once under way); -1 with
 * the reason when no voter can take it. */
int agent_head_drained(agent *a, char *err, size_t errlen);
bool agent_head_ready(agent *a);                      /* head, and caught up with its own term */
const struct job_state *agent_head_jobs(agent *a);   /* NULL on a non-voter */
const struct update_state *agent_head_wv(agent *a);      /* the weight updates; NULL on a non-voter */
struct raft;
struct raft *agent_head_raft(agent *a);              /* NULL on a non-voter */
uint64_t agent_head_applied(agent *a);
uint64_t agent_head_term(agent *a);
/* Proposes an entry (takes `data`).  With a client, the client is answered
 * with `body` once it commits (or an error); without, *index says which
 * entry to wait for.  -1 with r filled when refused. */
int agent_head_propose(agent *a, const agent_client *c, agent_reply *r, uint8_t type, uint8_t *data, size_t len,
		       const char *body, uint64_t *index);
/* Forwards a request to the head it knows; the answer is relayed. */
void agent_head_forward(agent *a, const struct Skein__Control__Request *q, const agent_client *c, agent_reply *r);

/* agent_peer.c: messages to other agents by name, and forwarded requests */
int agent_peer_open(agent *a, char *err, size_t errlen);
void agent_peer_close(agent *a);
/* The control endpoint `name` advertises in gossip ("" when unknown). */
void agent_peer_rpc(agent *a, const char *name, char *out, size_t cap);
/* A member's gossip metadata, decoded (free it with node_meta__free_unpacked); NULL when absent or unreadable. */
struct Skein__Gossip__NodeMeta;
struct Skein__Gossip__NodeMeta *agent_peer_meta(const mbr_member_info *mi);
/* Opens (keeps) a connection to `name` ahead of need; not to ourselves. */
void agent_peer_connect(agent *a, const char *name);
/* One-way control message to an agent's control endpoint (sealed); -1 when
 * dropped (counted: agent_peer_drops). */
int agent_peer_send(agent *a, const char *to, const struct Skein__Control__Request *q);
uint64_t agent_peer_drops(agent *a);
/* Sends a request on to the head `head` at `rpc`, or to a named agent; the
 * answer is relayed to the client (r->deferred), or r says why not. */
void agent_peer_forward(agent *a, const struct Skein__Control__Request *q, const agent_client *c, agent_reply *r,
			const char *head, const char *rpc);
void agent_peer_forward_node(agent *a, const struct Skein__Control__Request *q, const agent_client *c,
			     agent_reply *r, const char *node);
/* The answer to a forwarded request (data NULL: none came, `why`). */
void agent_peer_answer(agent *a, void *cookie, const uint8_t *data, size_t len, const char *why);
/* The head became `head`: forwards waiting on another agent go to it
 * (agent_ctl.c calls it every 100 ms). */
void agent_peer_follow(agent *a, const char *head, const char *rpc);
/* Forwards in flight; one forward for the head not waiting on `head`, handed
 * over with its packed request (the caller frees it) and its client. */
int agent_peer_forwards(agent *a);
bool agent_peer_take(agent *a, const char *head, uint8_t **req, size_t *len, agent_client *c);

/* agent_jobs.c; open: -2 for a bad flag (usage), -1 otherwise */
int agent_jobs_open(agent *a, char *err, size_t errlen);
void agent_jobs_close(agent *a);
void agent_jobs_state_changed(agent *a);        /* committed job entries were applied */
void agent_jobs_members_changed(agent *a);      /* membership changed */
/* agent_jobs_cmd.c: the jobs family's control commands */
bool agent_jobs_dispatch(agent *a, const struct Skein__Control__Request *q, const agent_client *c, agent_reply *r);
/* agent_jobs_base.c */
struct sup;
struct sup *agent_jobs_sup(agent *a);               /* this node's member supervisor */
const char *agent_jobs_disk_note(agent *a);        /* "" or the latest disk folder refusal/warning here */
/* "" or why dir is refused (*refused set) or unsafe on this host, judged
 * at most every 30 s (jobs/job_spec.h job_disk_dir_check, _warning). */
const char *agent_jobs_disk_judge(agent *a, const char *dir, bool *refused);
/* agent_drain.c: whether `node` is drained, as the head's last order to this agent said. */
bool agent_jobs_drained(agent *a, const char *node);

/* agent_gpu.c: GPUs visible through NVML or the CUDA runtime, 0 without
 * them; `source` says which answered ("nvml", "cuda", "none: ..."). */
int agent_gpu_count(char *source, size_t cap);

#endif
