/* agent/agent_metrics: the Prometheus page of skeind (--metrics IP:PORT);
 * see agent_metrics.c for what it holds and docs/metrics.md for the names. */
#ifndef AGENT_METRICS_H
#define AGENT_METRICS_H

#include "agent/agent.h"
#include "agent/agent_sup.h"

/* Serves GET /metrics when --metrics is set; -1 with a message when it
 * cannot listen. */
int agent_metrics_open(agent *a, char *err, size_t errlen);
void agent_metrics_close(agent *a);
/* The whole page into b; -1 when memory ran out. */
int agent_metrics_render(agent *a, sk_buf *b);

/* Hooks, each a no-op while metrics are closed. */
void agent_metrics_proposed(agent *a, uint64_t index);   /* the head proposed this entry */
void agent_metrics_applied(agent *a, uint64_t index);    /* ... and this one was applied */
void agent_metrics_head_seen(agent *a, const char *leader, uint64_t term);
void agent_metrics_member_event(agent *a, const sup_status *st);
/* A weight update this head finished (agent_wv.c): committed or aborted. */
void agent_metrics_transfer(agent *a, const char *mode, const char *state, const char *reason, double update_s,
			    double impl_s, double density, uint64_t bytes, uint64_t wire_bytes);

#endif
