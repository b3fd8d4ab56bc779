/* membership/mbr_config: profiles, overrides and addresses.
 *
 * lan, wan and local are hashicorp/memberlist's DefaultLANConfig,
 * DefaultWANConfig and DefaultLocalConfig (docs/reference.md, Gossip), plus serf's
 * reconnect and reap times.  fast is ours: one GPU fabric or one data-centre
 * row, where round trips are well under a millisecond and a dead node should
 * be known everywhere in a second or two. */
#include "membership/mbr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000u
#define HOUR (3600u * SEC)

static const mbr_config profile_lan = {
	.probe_interval_ms = 1 * SEC,       /* memberlist LAN ProbeInterval */
	.probe_timeout_ms = 500,            /* memberlist LAN ProbeTimeout */
	.indirect_checks = 3,               /* memberlist IndirectChecks */
	.suspicion_mult = 4,                /* memberlist LAN SuspicionMult */
	.suspicion_max_mult = 6,            /* memberlist SuspicionMaxTimeoutMult */
	.retransmit_mult = 4,               /* memberlist LAN RetransmitMult */
	.gossip_interval_ms = 200,          /* memberlist LAN GossipInterval */
	.gossip_nodes = 3,                  /* memberlist GossipNodes */
	.gossip_to_dead_ms = 30 * SEC,      /* memberlist LAN GossipToTheDeadTime */
	.pushpull_interval_ms = 30 * SEC,   /* memberlist LAN PushPullInterval */
	.reconnect_interval_ms = 30 * SEC,  /* serf ReconnectInterval */
	.reconnect_timeout_ms = 24 * HOUR,  /* serf ReconnectTimeout */
	.awareness_max = 8,                 /* memberlist AwarenessMaxMultiplier */
	.dead_reclaim_ms = 30 * SEC,        /* memberlist leaves it 0 (never); a rebuilt
	                                       pod with a new address must get its name back */
	.reap_ms = 24 * HOUR,               /* serf TombstoneTimeout / ReconnectTimeout */
	.udp_budget = 1400,                 /* memberlist UDPBufferSize */
	.tcp_fallback = true,               /* memberlist DisableTcpPings = false */
};

static const mbr_config profile_wan = {
	.probe_interval_ms = 5 * SEC, .probe_timeout_ms = 3 * SEC, .indirect_checks = 3,
	.suspicion_mult = 6, .suspicion_max_mult = 6, .retransmit_mult = 4,
	.gossip_interval_ms = 500, .gossip_nodes = 4, .gossip_to_dead_ms = 60 * SEC,
	.pushpull_interval_ms = 60 * SEC, .reconnect_interval_ms = 30 * SEC,
	.reconnect_timeout_ms = 24 * HOUR, .awareness_max = 8, .dead_reclaim_ms = 60 * SEC,
	.reap_ms = 24 * HOUR, .udp_budget = 1400, .tcp_fallback = true,
};

static const mbr_config profile_local = {
	.probe_interval_ms = 1 * SEC, .probe_timeout_ms = 200, .indirect_checks = 1,
	.suspicion_mult = 3, .suspicion_max_mult = 6, .retransmit_mult = 2,
	.gossip_interval_ms = 100, .gossip_nodes = 3, .gossip_to_dead_ms = 15 * SEC,
	.pushpull_interval_ms = 15 * SEC, .reconnect_interval_ms = 10 * SEC,
	.reconnect_timeout_ms = 24 * HOUR, .awareness_max = 8, .dead_reclaim_ms = 15 * SEC,
	.reap_ms = 24 * HOUR, .udp_budget = 1400, .tcp_fallback = true,
};

static const mbr_config profile_fast = {
	/* 5 probes a second: first detection ~1.58 periods (SWIM) = ~0.3 s. */
	.probe_interval_ms = 200,
	/* Fabric round trips are tens of microseconds; 100 ms leaves room for a
	 * busy agent and is still half a period, as in memberlist's LAN ratio. */
	.probe_timeout_ms = 100,
	.indirect_checks = 3,
	/* min = 3 x max(1, log10 N) x 200 ms: 0.6 s at 10 nodes, 1.2 s at 100,
	 * 1.8 s at 1000; k = mult - 2 = 1 confirmation brings it to min. */
	.suspicion_mult = 3,
	/* max = 3 x min: an unconfirmed lone accuser waits 1.8-5.4 s, long
	 * enough for the suspect to refute through 10% loss. */
	.suspicion_max_mult = 3,
	/* memberlist LAN's 4 x ceil(log10(N+1)) sends per update: with 50 ms
	 * rounds and fanout 3 news reaches 1000 nodes in well under a second. */
	.retransmit_mult = 4,
	.gossip_interval_ms = 50,
	.gossip_nodes = 3,
	.gossip_to_dead_ms = 15 * SEC,      /* memberlist Local */
	/* A third of memberlist Local's 15 s: gossip may miss a node now and
	 * then (each update is sent a bounded number of times); the full-state
	 * exchange repairs that within seconds.  ~40 bytes a member each way. */
	.pushpull_interval_ms = 5 * SEC,
	.reconnect_interval_ms = 5 * SEC,   /* heal a cut within seconds, not serf's 30 */
	.reconnect_timeout_ms = 24 * HOUR,
	.awareness_max = 8,
	.dead_reclaim_ms = 5 * SEC,
	.reap_ms = 24 * HOUR,
	.udp_budget = 1400,
	.tcp_fallback = true,
};

int mbr_config_profile(mbr_config *c, const char *profile)
{
	if (!profile || strcmp(profile, "lan") == 0) *c = profile_lan;
	else if (strcmp(profile, "fast") == 0) *c = profile_fast;
	else if (strcmp(profile, "wan") == 0) *c = profile_wan;
	else if (strcmp(profile, "local") == 0) *c = profile_local;
	else return -1;
	return 0;
}

typedef struct {
	const char *key;
	size_t off;
	bool is_bool;
} cfg_key;

#define K(f) { #f, offsetof(mbr_config, f), false }
static const cfg_key keys[] = {
	K(probe_interval_ms), K(probe_timeout_ms), K(indirect_checks), K(suspicion_mult),
	K(suspicion_max_mult), K(retransmit_mult), K(gossip_interval_ms), K(gossip_nodes),
	K(gossip_to_dead_ms), K(pushpull_interval_ms), K(reconnect_interval_ms),
	K(reconnect_timeout_ms), K(awareness_max), K(dead_reclaim_ms), K(reap_ms), K(udp_budget),
	{ "tcp_fallback", offsetof(mbr_config, tcp_fallback), true },
};
#undef K

int mbr_config_set(mbr_config *c, const char *key, const char *value, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		if (strcmp(keys[i].key, key) != 0) continue;
		if (keys[i].is_bool) {
			bool v;
			if (!strcmp(value, "true") || !strcmp(value, "1")) v = true;
			else if (!strcmp(value, "false") || !strcmp(value, "0")) v = false;
			else {
				snprintf(err, errlen, "%s: expected true or false, got '%s'", key, value);
				return -1;
			}
			*(bool *)((char *)c + keys[i].off) = v;
			return 0;
		}
		char *end;
		errno = 0;
		unsigned long long v = strtoull(value, &end, 10);
		if (errno || end == value || *end || value[0] == '-' || v > UINT32_MAX) {
			snprintf(err, errlen, "%s: expected a whole number, got '%s'", key, value);
			return -1;
		}
		*(uint32_t *)((char *)c + keys[i].off) = (uint32_t)v;
		return 0;
	}
	snprintf(err, errlen, "unknown membership setting '%s'", key);
	return -1;
}

int mbr_config_check(const mbr_config *c, char *err, size_t errlen)
{
	const char *why = NULL;
	if (c->probe_interval_ms < 10) why = "probe_interval_ms must be at least 10";
	else if (c->probe_timeout_ms == 0 || c->probe_timeout_ms >= c->probe_interval_ms)
		why = "probe_timeout_ms must be above 0 and below probe_interval_ms";
	else if (c->suspicion_mult < 1) why = "suspicion_mult must be at least 1";
	else if (c->suspicion_max_mult < 1) why = "suspicion_max_mult must be at least 1";
	else if (c->retransmit_mult < 1) why = "retransmit_mult must be at least 1";
	else if (c->gossip_interval_ms < 1) why = "gossip_interval_ms must be at least 1";
	else if (c->awareness_max < 1) why = "awareness_max must be at least 1";
	else if (c->udp_budget < 512 || c->udp_budget > 65000)
		why = "udp_budget must be between 512 and 65000";
	if (why) {
		snprintf(err, errlen, "%s", why);
		return -1;
	}
	return 0;
}

void mbr_config_dump(const mbr_config *c, void *file)
{
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		const char *p = (const char *)c + keys[i].off;
		if (keys[i].is_bool) fprintf(file, "%s=%s\n", keys[i].key, *(const bool *)p ? "true" : "false");
		else fprintf(file, "%s=%u\n", keys[i].key, *(const uint32_t *)p);
	}
}

/* ---- addresses ---- */

int mbr_addr_parse(const char *s, mbr_addr *out)
{
	char host[64];
	const char *colon;
	memset(out, 0, sizeof *out);
	if (!s) return -1;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof host) return -1;
		memcpy(host, s + 1, (size_t)(close - s - 1));
		host[close - s - 1] = 0;
		colon = close + 1;
		if (inet_pton(AF_INET6, host, out->ip) != 1) return -1;
		out->len = 16;
	} else {
		colon = strrchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = 0;
		if (inet_pton(AF_INET, host, out->ip) != 1) return -1;
		out->len = 4;
	}
	char *end;
	errno = 0;
	unsigned long p = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || p == 0 || p > 65535) return -1;
	out->port = (uint16_t)p;
	return 0;
}

char *mbr_addr_format(const mbr_addr *a, char *buf, size_t cap)
{
	char host[INET6_ADDRSTRLEN];
	if (a->len == 4) {
		inet_ntop(AF_INET, a->ip, host, sizeof host);
		snprintf(buf, cap, "%s:%u", host, a->port);
	} else if (a->len == 16) {
		inet_ntop(AF_INET6, a->ip, host, sizeof host);
		snprintf(buf, cap, "[%s]:%u", host, a->port);
	} else {
		snprintf(buf, cap, "(none)");
	}
	return buf;
}

bool mbr_addr_eq(const mbr_addr *a, const mbr_addr *b)
{
	return a->len == b->len && a->port == b->port && memcmp(a->ip, b->ip, a->len) == 0;
}

static const char *const status_names[] = { "alive", "suspect", "failed", "left" };
const char *mbr_status_str(mbr_status s) { return (unsigned)s < 4 ? status_names[s] : "unknown"; }

static const char *const event_names[] = { "join", "alive", "suspect", "failed",
					   "left", "update", "reap", "conflict" };
const char *mbr_event_str(mbr_event_type t) { return (unsigned)t < 8 ? event_names[t] : "unknown"; }
