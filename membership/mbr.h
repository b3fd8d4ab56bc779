/* membership/mbr: SWIM + Lifeguard gossip membership as pure logic.
 *
 * Follows hashicorp/memberlist (probe, indirect probe with nacks, suspicion
 * with independent confirmations, local health, dissemination queue,
 * push-pull) with tarantool SWIM's persistent generation, serf's reconnect to
 * failed members and serf's "left" status.  See membership/mbr.c for the
 * design notes and where we differ.
 *
 * The logic never reads a clock, touches a socket or calls rand():
 *   inputs   mbr_tick(now), mbr_recv(now, bytes), mbr_join/leave/set_meta
 *   outputs  mbr_pop_out() (frames to send, UDP or stream), mbr_pop_event()
 * Time is in milliseconds on any monotonic clock the caller likes; randomness
 * comes from the seed in mbr_self.  The agent feeds it from libev and real
 * sockets, the simulator from a fake clock and a fake network.
 *
 * Stream outputs (push-pull, fallback ping) are one-way messages: the reply,
 * if any, is a new stream message to the sender's advertised address. */
#ifndef MBR_H
#define MBR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/wire_frame.h"

enum {
	MBR_NAME_MAX = 128,     /* bytes of a node name, without the NUL */
	MBR_META_MAX = 512,     /* memberlist's MetaMaxSize */
	MBR_REASON_MAX = 200,
};

typedef struct mbr mbr_t;

/* ---- addresses ---- */
typedef struct {
	uint8_t ip[16]; /* IPv4 in the first 4 bytes when len == 4 */
	uint8_t len;    /* 4 or 16; 0 = unset */
	uint16_t port;
} mbr_addr;

/* Parses "1.2.3.4:7946" or "[::1]:7946" (numeric only); 0 or -1. */
int mbr_addr_parse(const char *s, mbr_addr *out);
/* "1.2.3.4:7946" / "[::1]:7946"; buf needs 64 bytes. Returns buf. */
char *mbr_addr_format(const mbr_addr *a, char *buf, size_t cap);
bool mbr_addr_eq(const mbr_addr *a, const mbr_addr *b);

/* ---- status ---- */
typedef enum { MBR_ALIVE = 0, MBR_SUSPECT, MBR_DEAD, MBR_LEFT } mbr_status;
/* "alive", "suspect", "failed", "left" (DEAD is shown as failed, as serf does). */
const char *mbr_status_str(mbr_status s);

/* ---- configuration ---- */
typedef struct {
	uint32_t probe_interval_ms;   /* one probe per interval (scaled by local health) */
	uint32_t probe_timeout_ms;    /* direct ack wait before indirect probes */
	uint32_t indirect_checks;     /* k helpers asked to probe */
	uint32_t suspicion_mult;      /* min suspicion = mult * max(1,log10 N) * interval */
	uint32_t suspicion_max_mult;  /* max suspicion = this * min */
	uint32_t retransmit_mult;     /* retransmits = mult * ceil(log10(N+1)) */
	uint32_t gossip_interval_ms;
	uint32_t gossip_nodes;        /* fanout */
	uint32_t gossip_to_dead_ms;   /* keep gossiping to the dead this long */
	uint32_t pushpull_interval_ms;/* 0 = off; scaled up past 32 nodes */
	uint32_t reconnect_interval_ms;/* try one failed member this often; 0 = off */
	uint32_t reconnect_timeout_ms;/* give a failed member up after this long */
	uint32_t awareness_max;       /* Lifeguard's cap on the health multiplier */
	uint32_t dead_reclaim_ms;     /* a failed name may be claimed from a new address after this */
	uint32_t reap_ms;             /* forget failed/left members after this */
	uint32_t udp_budget;          /* bytes per UDP packet */
	bool tcp_fallback;            /* TCP ping in parallel with the indirect probes */
} mbr_config;

/* Fills c with a named profile: "lan", "wan", "local" (memberlist's three)
 * or "fast" (one GPU fabric).  Returns -1 on an unknown name. */
int mbr_config_profile(mbr_config *c, const char *profile);
/* Overrides one field by name ("probe_interval_ms", ...); -1 with a message
 * in err on an unknown key or a bad value. */
int mbr_config_set(mbr_config *c, const char *key, const char *value, char *err, size_t errlen);
/* Checks the values make sense together; -1 with a message otherwise. */
int mbr_config_check(const mbr_config *c, char *err, size_t errlen);
/* Lists the overridable keys, one per line "key=value", into f (a FILE *). */
void mbr_config_dump(const mbr_config *c, void *file);

/* ---- lifecycle ---- */
typedef struct {
	const char *name;
	mbr_addr addr;          /* the advertised address: UDP and TCP on one port */
	uint64_t generation;    /* larger on every restart (the agent persists it) */
	const uint8_t *meta;    /* opaque, at most MBR_META_MAX bytes */
	size_t meta_len;
	uint64_t seed;          /* for every random choice this node makes */
} mbr_self;

mbr_t *mbr_new(const mbr_config *cfg, const mbr_self *self, uint64_t now_ms,
	       char *err, size_t errlen);
/* Frees everything, including undrained outputs and events; *m = NULL. */
void mbr_destroy(mbr_t **m);

/* ---- inputs ---- */
/* Runs every timer due at now_ms. */
void mbr_tick(mbr_t *m, uint64_t now_ms);
/* The next instant mbr_tick has work; the caller may tick earlier. */
uint64_t mbr_next_deadline(const mbr_t *m);
/* One frame from the network.  Bad input is counted and dropped. */
void mbr_recv(mbr_t *m, uint64_t now_ms, const mbr_addr *from, const uint8_t *buf,
	      size_t len, bool stream);
/* Sends our full state to a seed over a stream (a join); the seed answers
 * with its state.  The caller retries until mbr_member_count() > 1. */
int mbr_join(mbr_t *m, uint64_t now_ms, const mbr_addr *seed);
/* Graceful leave: tells the cluster we left; stops probing.  The caller
 * keeps ticking a little (until mbr_leave_done) so the news spreads. */
void mbr_leave(mbr_t *m, uint64_t now_ms);
bool mbr_leave_done(const mbr_t *m);
/* New metadata for ourselves: bumps the incarnation and gossips it. */
int mbr_set_meta(mbr_t *m, uint64_t now_ms, const uint8_t *meta, size_t len);

/* ---- outputs ---- */
typedef struct {
	mbr_addr to;
	bool stream;      /* true: TCP; false: UDP */
	uint8_t *data;    /* a whole frame, malloc'd: the caller owns it and frees it */
	size_t len;
} mbr_out;
/* Takes the oldest output; returns 1, or 0 when there is none. */
int mbr_pop_out(mbr_t *m, mbr_out *out);

typedef enum {
	MBR_EV_JOIN,      /* a member we did not know (status alive or suspect) */
	MBR_EV_ALIVE,     /* back to alive from suspect, failed or left (e.g. a restart) */
	MBR_EV_SUSPECT,
	MBR_EV_FAILED,
	MBR_EV_LEFT,
	MBR_EV_UPDATE,    /* new metadata or generation while alive */
	MBR_EV_REAP,      /* a failed or left member forgotten */
	MBR_EV_CONFLICT,  /* a name claimed from a second address, refused */
} mbr_event_type;
const char *mbr_event_str(mbr_event_type t);

typedef struct {
	mbr_event_type type;
	mbr_status status;          /* the member's status after the event */
	char name[MBR_NAME_MAX + 1];
	mbr_addr addr;
	uint64_t generation;
	uint32_t incarnation;
	uint64_t at_ms;
	char reason[MBR_REASON_MAX]; /* for CONFLICT: who holds the name, and where */
} mbr_event;
int mbr_pop_event(mbr_t *m, mbr_event *ev);

/* ---- queries ---- */
typedef struct {
	const char *name;          /* valid until the next input call */
	mbr_addr addr;
	uint64_t generation;
	uint32_t incarnation;
	mbr_status status;
	uint64_t status_since_ms;
	const uint8_t *meta;
	size_t meta_len;
} mbr_member_info;

/* Members we know, ourselves included (first).  Returns how many there are;
 * fills at most cap entries. */
size_t mbr_members(const mbr_t *m, mbr_member_info *out, size_t cap);
int mbr_lookup(const mbr_t *m, const char *name, mbr_member_info *out);
/* Members in the given status, ourselves included. */
size_t mbr_count(const mbr_t *m, mbr_status s);
size_t mbr_member_count(const mbr_t *m);
/* Lifeguard's local health score, 0 = healthy. */
uint32_t mbr_health(const mbr_t *m);
/* The minimum and maximum suspicion timeouts at the current cluster size. */
void mbr_suspicion_bounds(const mbr_t *m, uint64_t *min_ms, uint64_t *max_ms);
const mbr_config *mbr_get_config(const mbr_t *m);

typedef struct {
	uint64_t udp_sent, udp_recv, stream_sent, stream_recv;
	uint64_t bytes_sent, bytes_recv;
	uint64_t drop[WIRE_ERR__COUNT]; /* by wire_err */
	uint64_t drop_not_for_us;   /* a ping for another name (stale address) */
	uint64_t drop_unknown_seq;  /* an ack or nack no probe waits for */
	uint64_t drop_conflict;     /* a name claimed from a second address */
	uint64_t probes, probe_fails, indirect_probes, tcp_pings;
	uint64_t nacks_sent, nacks_recv, missed_nacks;
	uint64_t suspects_raised, refutes, dead_declared;
	uint64_t pushpulls, reconnects, time_jumps;
	uint64_t queue_overflow;    /* outputs or events dropped: the caller did not drain */
} mbr_stats;
const mbr_stats *mbr_get_stats(const mbr_t *m);

/* ---- streams ---- */
/* What the first bytes of a stream frame say of its first message, so that
 * a transport can cap a stream by type before the whole of it is in:
 * MORE (too few bytes yet), PUSHPULL, OTHER (any other type, or an empty
 * packet), BAD (not a gossip frame). */
typedef enum { MBR_PEEK_MORE = 0, MBR_PEEK_PUSHPULL, MBR_PEEK_OTHER, MBR_PEEK_BAD } mbr_peek;
mbr_peek mbr_peek_stream(const uint8_t *frame, size_t n);

#endif
