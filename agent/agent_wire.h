/* agent/agent_wire: the control channel's transport.
 *
 * Its names are agent_wire_* (issue 26): wire_* belongs to the frame codec
 * it uses, proto/wire_frame.h.
 *
 * Every message is one frame, a 4-byte big-endian length then that many
 * bytes, over TCP (operators elsewhere, and other agents) or a Unix socket
 * (operators on this node).  A client sends a request frame and reads one
 * answer frame; agents keep a connection per peer and send one-way frames.
 *
 * This replaces ZeroMQ on the control endpoint.  ZeroMQ's ROUTER accepts
 * and buffers for any peer before the application sees a byte: no cap on
 * connections per source, no idle timeout for a peer that finished its
 * greeting, a whole frame allocated from its header.  Here everything a
 * connection can hold is bounded before its first request authenticates:
 *
 *   - connections: untrusted ones (no authenticated request yet) capped per
 *     source address and in total; at a cap the oldest untrusted idle one
 *     is shed, so a flood of idle sockets cannot lock real clients out;
 *   - time: an untrusted connection must deliver a whole frame within
 *     WIRE_FIRST_FRAME_MS; any connection idle for WIRE_IDLE_MS is closed;
 *   - bytes: a frame over its cap is refused at its header; a frame's buffer
 *     grows only as bytes arrive; half-received frames of untrusted
 *     connections share one budget, and the largest goes when it is spent;
 *   - fds: one reserve descriptor lets accept() drain on EMFILE instead of
 *     spinning on a listening socket that stays readable.
 *
 * The owner (agent_ctl.c) authenticates each request and marks the
 * connection trusted (agent_wire_trust).  Connections are named by an agent_wire_id that
 * is never reused, so an answer for a connection that went away is dropped. */
#ifndef AGENT_WIRE_H
#define AGENT_WIRE_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
	WIRE_FRAME_MAX = 8 << 20,        /* a request: a Raft snapshot chunk (4 MiB) is the biggest */
	WIRE_ANSWER_MAX = 64 << 20,      /* an answer read from another agent (logs can be long) */
	WIRE_UNTRUSTED_PER_SOURCE = 32,
	WIRE_UNTRUSTED_MAX = 256,
	WIRE_CONNS_MAX = 4096,           /* every connection, trusted and outbound too */
	WIRE_UNTRUSTED_BYTES = 32 << 20, /* half-received frames of untrusted connections */
	WIRE_OUT_MAX = 32 << 20,         /* queued, unsent bytes per connection */
	WIRE_FIRST_FRAME_MS = 5000,
	WIRE_IDLE_MS = 120000,
};

typedef uint64_t agent_wire_id;            /* 0 = none */

typedef enum { WIRE_TCP, WIRE_UNIX } agent_wire_transport;

/* What the transport knows of an inbound connection's peer. */
typedef struct {
	agent_wire_transport transport;
	char addr[64];                   /* "IP:PORT", or "unix" */
	char local[64];                  /* the address it reached us at (getsockname): what a
					  * client names as the recipient of its request */
	bool cred;                       /* uid/gid/pid valid (Unix socket, SO_PEERCRED) */
	uid_t uid;
	gid_t gid;
	pid_t pid;
	gid_t groups[32];                /* supplementary groups (SO_PEERGROUPS) */
	int ngroups;
} agent_wire_peer;

typedef struct {
	uint64_t accepted, refused_cap, shed_idle, shed_bytes, timeouts, oversize, emfile, errors;
} agent_wire_stats;

typedef struct agent_wire agent_wire;

/* A frame arrived on an inbound connection: a request.  `data` is the
 * callee's to free. */
typedef void (*agent_wire_request_fn)(void *ctx, agent_wire_id id, const agent_wire_peer *p, uint8_t *data, size_t len);
/* A frame arrived on an outbound call (agent_wire_call), or it failed (data NULL,
 * `why` says how).  The connection is closed after this returns. */
typedef void (*agent_wire_answer_fn)(void *ctx, void *cookie, uint8_t *data, size_t len, const char *why);

agent_wire *agent_wire_new(struct ev_loop *loop, void *ctx, agent_wire_request_fn on_request,
			   agent_wire_answer_fn on_answer);
void agent_wire_free(agent_wire *w);
/* Listens on "IP:PORT" (TCP) or a Unix socket path; -1 with a message. */
int agent_wire_listen_tcp(agent_wire *w, const char *addr, char *err, size_t errlen);
int agent_wire_listen_unix(agent_wire *w, const char *path, mode_t mode, gid_t group, char *err, size_t errlen);

/* Queues one frame on a connection (an answer, or a one-way message on a
 * peer connection); -1 when the connection is gone or its queue is full. */
int agent_wire_send(agent_wire *w, agent_wire_id id, const uint8_t *data, size_t len);
/* Marks an inbound connection as authenticated: it leaves the untrusted
 * caps, budgets and first-frame deadline. */
void agent_wire_trust(agent_wire *w, agent_wire_id id);
void agent_wire_close(agent_wire *w, agent_wire_id id);
bool agent_wire_alive(agent_wire *w, agent_wire_id id);

/* An outbound connection to "IP:PORT" kept for one-way frames (frames sent
 * while it connects are queued); 0 when it cannot even start. */
agent_wire_id agent_wire_connect(agent_wire *w, const char *addr);
/* An outbound request: sends `data` to `addr`, hands the answer (or the
 * failure) to on_answer with `cookie`, then closes. */
agent_wire_id agent_wire_call(agent_wire *w, const char *addr, const uint8_t *data, size_t len, void *cookie);

const agent_wire_stats *agent_wire_get_stats(const agent_wire *w);
int agent_wire_count(const agent_wire *w, bool untrusted_only);

/* "IP:PORT" (v4, or [v6]:port) into a sockaddr; -1 when it is not one. */
struct sockaddr_storage;
int agent_wire_parse_addr(const char *addr, struct sockaddr_storage *ss, unsigned *sslen);

#endif
