/* agent/agent_auth: see agent_auth.h. */
#include "agent/agent_auth.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *agent_role_str(agent_role r)
{
	switch (r) {
	case ROLE_LOOK: return "look";
	case ROLE_READ: return "read";
	case ROLE_WRITE: return "write";
	case ROLE_AGENT: return "agent";
	default: return "none";
	}
}

static bool is(const char *s, const char *t) { return s && !strcmp(s, t); }

agent_role agent_auth_needs(const char *cmd, const char *const *args, size_t nargs, bool forwarded)
{
	const char *a0 = nargs ? args[0] : NULL;
	/* orders and messages between agents; a forwarded request was checked
	 * by the agent that forwarded it, which only another agent can be */
	if (forwarded || is(cmd, "raft") || is(cmd, "assign") || is(cmd, "report")) return ROLE_AGENT;
	if (is(cmd, "members") || is(cmd, "info") || is(cmd, "health") || is(cmd, "peers") ||
	    is(cmd, "placement") || is(cmd, "status"))
		return ROLE_LOOK;
	/* what members wrote and the state's values may hold secrets */
	if (is(cmd, "logs") || is(cmd, "transfers") || is(cmd, "engine")) return ROLE_READ;
	/* a member's part in a weight update: its node's socket, where the
	 * agent also checks which process asks (agent_update_gate.c) */
	if (is(cmd, "wv")) return is(a0, "outcome") ? ROLE_READ : ROLE_WRITE;
	if (is(cmd, "state")) return is(a0, "get") || is(a0, "list") ? ROLE_READ : ROLE_WRITE;
	if (is(cmd, "drain")) return is(a0, "status") ? ROLE_LOOK : ROLE_WRITE;
	if (is(cmd, "head")) return nargs == 0 ? ROLE_LOOK : ROLE_WRITE;
	if (is(cmd, "job")) return is(a0, "list") || is(a0, "status") ? ROLE_LOOK : ROLE_WRITE;
	if (is(cmd, "keyring")) return is(a0, "list") ? ROLE_LOOK : ROLE_WRITE;
	/* join, leave, voters, debug, and whatever is unknown (it gets its
	 * "unknown command" answer only from someone allowed to change things) */
	return ROLE_WRITE;
}

/* ---- replay cache: open addressing on the nonce, expired slots reused ---- */

typedef struct {
	uint8_t nonce[AUTH_NONCE];
	uint64_t expires;             /* 0 = empty */
} slot;

struct agent_replay {
	slot *t;
	size_t cap, n;
};

agent_replay *agent_replay_new(void)
{
	agent_replay *rc = calloc(1, sizeof *rc);
	if (!rc) return NULL;
	rc->cap = 1024;
	rc->t = calloc(rc->cap, sizeof *rc->t);
	if (!rc->t) { free(rc); return NULL; }
	return rc;
}

void agent_replay_free(agent_replay *rc)
{
	if (!rc) return;
	free(rc->t);
	free(rc);
}

size_t agent_replay_size(const agent_replay *rc) { return rc->n; }

static uint64_t h64(const uint8_t *n)
{
	uint64_t x; /* the nonce is random: its first bytes are a fine hash */
	memcpy(&x, n, 8);
	return x;
}

/* Rebuilds the table at `cap`, keeping only unexpired nonces. */
static int rehash(agent_replay *rc, size_t cap, uint64_t now)
{
	slot *t = calloc(cap, sizeof *t);
	if (!t) return -1;
	size_t n = 0;
	for (size_t i = 0; i < rc->cap; i++) {
		if (rc->t[i].expires <= now) continue;
		size_t j = h64(rc->t[i].nonce) & (cap - 1);
		while (t[j].expires) j = (j + 1) & (cap - 1);
		t[j] = rc->t[i];
		n++;
	}
	free(rc->t);
	rc->t = t;
	rc->cap = cap;
	rc->n = n;
	return 0;
}

int agent_replay_check(agent_replay *rc, const uint8_t nonce[AUTH_NONCE], uint64_t now, uint64_t expires)
{
	if (rc->n * 2 >= rc->cap) {
		/* drop the expired first; grow only if the live ones need it */
		size_t live = 0;
		for (size_t i = 0; i < rc->cap; i++) live += rc->t[i].expires > now;
		size_t cap = rc->cap;
		while (live * 2 >= cap / 2 && cap < (size_t)AUTH_REPLAY_MAX * 2) cap *= 2;
		if (live >= AUTH_REPLAY_MAX) return -1;
		if (rehash(rc, cap, now) < 0) return -1;
	}
	size_t j = h64(nonce) & (rc->cap - 1);
	for (; rc->t[j].expires; j = (j + 1) & (rc->cap - 1))
		if (!memcmp(rc->t[j].nonce, nonce, AUTH_NONCE) && rc->t[j].expires > now) return 1;
	memcpy(rc->t[j].nonce, nonce, AUTH_NONCE);
	rc->t[j].expires = expires;
	rc->n++;
	return 0;
}
