/* tests/sim/sim: a deterministic many-node simulator of membership/mbr.
 *
 * Runs N instances of the real membership logic (membership/mbr.h) in one
 * process, on a fake clock and a fake network, the way tarantool's SWIM
 * tests run on src/lib/fakesys, with what those lack: per-packet latency and
 * jitter, random UDP loss, one-way cuts, paused processes.
 *
 *   clock    microseconds; one event heap (common/sk_heap.h, ties broken by
 *            insertion order), so a run is a pure function of its seed and
 *            its parameters.  The membership code sees milliseconds, offset
 *            by SIM_EPOCH_MS so that 0 never appears as a time.
 *   nodes    node i is "n<i>" at 127.x.y.z:7946 (x.y.z = i + 1), generation
 *            1 + restarts, seed sk_mix64 of the run seed, i and generation.
 *            Node i starts at i * join_spread and joins node 0 (or, when
 *            node 0 is down, any live node), again every join_retry until it
 *            knows someone.
 *   network  UDP: latency + uniform jitter, loss.  Streams: reliable, three
 *            one-way latencies (handshake and data), never lost, and need
 *            both directions open (the handshake).  Both are
 *            cut by partitions (checked at send and at delivery) and vanish
 *            to and from killed nodes.  Node i sits in group 0..7; a block
 *            (from, to) drops every packet from one group to the other.
 *   paused   a paused node (SIGSTOP) does not tick; packets to it queue and
 *            are fed to it in order when it resumes, before its first tick,
 *            as a process that reads its socket backlog on waking.
 *   metrics  every membership event updates an N x N byte matrix of views
 *            (observer x member) and per-member counters, so "everyone lists
 *            all N alive" and "every survivor marks the victim failed" are
 *            O(1) per event.
 *
 * False failure (sim_stats.false_failures): a FAILED event at observer o
 * about x, for x's current generation, where x is running (not paused,
 * killed, leaving or gone), x's group has no blocked link in either
 * direction, and none of those held within the window W before the event:
 *   W = suspicion max (mbr_suspicion_bounds at o) + probe interval
 *       + retransmit_mult * ceil(log10(N+1)) gossip intervals
 * (the time a legitimate accusation can take to form, plus the time its news
 * keeps being retransmitted).  A cut anywhere around x's group counts, not
 * only between o and x: the side that lost x declares it dead and that news
 * rightly spreads to everyone.
 *
 * Resurrection (sim_stats.resurrections): a JOIN, ALIVE or UPDATE event
 * about a member that left or was killed, for its generation at that time,
 * after every live node had marked it left or failed. */
#ifndef SIM_H
#define SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "membership/mbr.h"

#define SIM_MS 1000ull
#define SIM_SEC 1000000ull
#define SIM_NEVER UINT64_MAX

enum {
	SIM_GROUPS = 8,
	SIM_PORT = 7946,
	SIM_MAX_NODES = 20000, /* the view matrix is N*N bytes: 400 MB at this size */
	SIM_EPOCH_MS = 1000000, /* membership time = this + simulated ms */
};

/* What observer o lists for member x (sim_view). */
typedef enum {
	SIM_V_NONE = 0, /* unknown, or reaped */
	SIM_V_ALIVE,
	SIM_V_SUSPECT,
	SIM_V_FAILED,
	SIM_V_LEFT,
	SIM_V_STALE, /* any status, about an older generation than x's current one */
	SIM_V__COUNT
} sim_view_code;

typedef enum {
	SIM_N_NEW = 0, /* not started yet */
	SIM_N_UP,
	SIM_N_PAUSED,
	SIM_N_LEAVING, /* mbr_leave called, still ticking until mbr_leave_done */
	SIM_N_DOWN,    /* killed (a restart starts it again) */
	SIM_N_GONE,    /* left */
} sim_node_state;

typedef struct {
	uint32_t nodes;
	uint64_t seed;
	char profile[16];
	mbr_config cfg;           /* from the profile; change fields freely */
	uint64_t latency_us;      /* one-way base latency: 500 us */
	uint64_t jitter_us;       /* +- uniform: 200 us */
	double loss;              /* UDP loss probability: 0 */
	uint64_t join_spread_us;  /* node i starts at i * this: min(10 ms, 10 s / N) */
	uint64_t join_retry_us;   /* join again while alone: 1 s */
	uint64_t leave_max_us;    /* a leaving node ticks at most this long: 5 s */
} sim_params;

/* Defaults for N nodes, a seed and a profile ("lan", "fast", ...). */
int sim_params_init(sim_params *p, uint32_t nodes, uint64_t seed, const char *profile,
		    char *err, size_t errlen);

typedef enum { SIM_R_KILL, SIM_R_RESTART, SIM_R_LEAVE, SIM_R_PAUSE } sim_rec_kind;

/* One scheduled fault and when the cluster had taken it in. */
typedef struct {
	sim_rec_kind kind;
	uint32_t node;
	uint64_t at_us;   /* killed, restarted (started again), left, paused */
	uint64_t done_us; /* KILL: every live node that knows it lists it failed
	                     (one that joined later may never hear of it); LEAVE:
	                     the same with left; RESTART: every live node lists
	                     it alive with its new generation; PAUSE: resumed.
	                     SIM_NEVER: not yet. */
} sim_record;

typedef struct {
	uint64_t converge_us;        /* first time every node listed all N alive */
	uint64_t all_alive_since_us; /* every live node lists every live node alive
	                                since then; SIM_NEVER when not now */
	uint64_t false_failures, resurrections;
	/* network */
	uint64_t udp_sent, udp_lost, stream_sent, cut, to_down, bad_dest, queued_paused;
	uint64_t bytes_sent, stream_bytes; /* all sent, and the stream part of it */
	double live_node_s;          /* integral over time of the live nodes */
	uint64_t deliveries, ticks, tick_spins, joins_sent;
	/* membership events seen */
	uint64_t ev_total, ev_join, ev_alive, ev_suspect, ev_failed, ev_left, ev_conflict,
		ev_foreign;
	/* summed over every instance, running or destroyed (mbr_get_stats) */
	uint64_t suspects_raised, refutes, dead_declared, probes, probe_fails, pushpulls,
		reconnects, decode_drops, queue_overflow;
	uint64_t digest; /* a hash of every membership event: equal runs, equal digests */
} sim_stats;

typedef struct sim sim_t;

sim_t *sim_new(const sim_params *p, char *err, size_t errlen);
/* Frees everything; *s = NULL; safe twice. */
void sim_destroy(sim_t **s);

/* Runs every event up to t_us, then sets the clock to t_us.  -1 when
 * memory ran out (the run is not to be trusted). */
int sim_run_until(sim_t *s, uint64_t t_us);
/* Runs until every node lists all N alive (then the clock stays at that
 * instant and it returns 0), or until limit_us (returns -1). */
int sim_run_until_converged(sim_t *s, uint64_t limit_us);
uint64_t sim_now(const sim_t *s);

/* Faults, at a simulated time (>= now).  Each returns 0, or -1 on a bad node
 * or group.  A fault that does not apply when its time comes (killing a node
 * already down) does nothing. */
int sim_kill(sim_t *s, uint64_t at_us, uint32_t node);
int sim_pause(sim_t *s, uint64_t at_us, uint32_t node, uint64_t for_us);
/* Kills the node at at_us (if it runs) and starts it again, generation + 1,
 * down_us later; it joins node 0 or a live node. */
int sim_restart(sim_t *s, uint64_t at_us, uint32_t node, uint64_t down_us);
int sim_leave(sim_t *s, uint64_t at_us, uint32_t node);
/* One-way: packets from group `from` to group `to` are dropped (on), or not. */
int sim_block(sim_t *s, uint64_t at_us, uint8_t from, uint8_t to, bool on);
/* Two-way cut between groups a and b from start_us to end_us. */
int sim_partition(sim_t *s, uint64_t start_us, uint64_t end_us, uint8_t a, uint8_t b);
/* Moves a node to a group (0..7) now. */
int sim_set_group(sim_t *s, uint32_t node, uint8_t group);

/* Optional: called for every fault, every completed record and every false
 * failure, with a one-line message (the CLI's text mode prints them). */
typedef void (*sim_note_fn)(void *ctx, uint64_t now_us, const char *msg);
void sim_set_note(sim_t *s, sim_note_fn fn, void *ctx);
/* Also sends every membership event about this member (any observer) to the
 * note callback; -1 turns it off. */
void sim_trace(sim_t *s, int64_t member);

/* ---- queries ---- */
uint32_t sim_nodes(const sim_t *s);
uint32_t sim_live(const sim_t *s);         /* up, paused or leaving */
sim_node_state sim_state(const sim_t *s, uint32_t node);
uint8_t sim_group(const sim_t *s, uint32_t node);
uint64_t sim_generation(const sim_t *s, uint32_t node);
sim_view_code sim_view(const sim_t *s, uint32_t observer, uint32_t member);
/* How many members observer o lists with the given code (O(N)). */
uint32_t sim_count(const sim_t *s, uint32_t observer, sim_view_code c);
/* Over every live observer: how many (observer, member) pairs have code c. */
uint64_t sim_total(const sim_t *s, sim_view_code c);
/* How many live observers other than x list x with code c (O(1)). */
uint32_t sim_column(const sim_t *s, uint32_t x, sim_view_code c);
/* Every live node lists every live node alive (current generation). */
bool sim_all_alive(const sim_t *s);
/* The running instance of a node; NULL when it is not running. */
mbr_t *sim_mbr(sim_t *s, uint32_t node);
void sim_addr(uint32_t node, mbr_addr *out);
size_t sim_records(const sim_t *s, const sim_record **out);
void sim_get_stats(const sim_t *s, sim_stats *out);

/* Seconds from at_us to done_us over the records of one kind. */
typedef struct {
	uint32_t count, undone;
	double p50, p99, max; /* over the done ones; 0 when none */
} sim_dist;
void sim_dist_of(const sim_t *s, sim_rec_kind kind, sim_dist *out);

#endif
