/* agent/agent_auth: who may do what on the control channel (docs/security.md).
 *
 * A request's role comes from how it arrived:
 *   AGENT  sealed with the cluster key (another agent; or an operator who
 *          holds the cluster key, which grants everything), or anything
 *          when the agent runs --insecure;
 *   WRITE  sealed with an operator key (--operator-key-file), or on the
 *          Unix socket from root, skeind's own user or --operator-group;
 *   READ   sealed with a read-only operator key;
 *   LOOK   plaintext on TCP to an agent that has no key at all (a laptop):
 *          the cluster's shape (members, head, placement, job list), not
 *          what members wrote (logs) nor the state's values;
 *   NONE   refused.
 * Each command needs a role (agent_auth_needs): agent-only orders (raft,
 * assign, report, anything forwarded) need AGENT; what changes the cluster
 * or the node needs WRITE; the rest READ.
 *
 * A sealed request also carries its sender, its recipient, the sender's
 * wall-clock time and a random 16-byte nonce (proto/control.proto), all
 * under the seal: the receiver refuses one addressed to someone else, one
 * whose time is off by more than the window, and one whose nonce it saw
 * within the window (the replay cache). */
#ifndef AGENT_AUTH_H
#define AGENT_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { ROLE_NONE = 0, ROLE_LOOK, ROLE_READ, ROLE_WRITE, ROLE_AGENT } agent_role;

enum {
	AUTH_NONCE = 16,
	AUTH_WINDOW_MS = 30000,         /* clocks may differ this much; replays are remembered this long */
	AUTH_REPLAY_MAX = 1 << 18,      /* live nonces remembered (the table: 12 MiB at most) */
};

const char *agent_role_str(agent_role r);

/* The role command `cmd` with `args` needs. */
agent_role agent_auth_needs(const char *cmd, const char *const *args, size_t nargs, bool forwarded);

/* The replay cache: nonces seen within the window. */
typedef struct agent_replay agent_replay;
agent_replay *agent_replay_new(void);
void agent_replay_free(agent_replay *rc);
/* 0 when the nonce is new (and now remembered until expires_ms), 1 when it
 * was seen, -1 when the cache is full of unexpired nonces. */
int agent_replay_check(agent_replay *rc, const uint8_t nonce[AUTH_NONCE], uint64_t now_ms, uint64_t expires_ms);
size_t agent_replay_size(const agent_replay *rc);

#endif
