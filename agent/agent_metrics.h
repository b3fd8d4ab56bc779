/* agent/agent_metrics: the Prometheus page of skeind (--metrics IP:PORT);
 * see agent_metrics.c for what it holds and docs/metrics.md for the names. */
#ifndef AGENT_METRICS_H
#define AGENT_METRICS_H

#include "agent/agent.h"

/* Serves GET /metrics when --metrics is set; -1 with a message when it
 * cannot listen. */
int agent_metrics_open(agent *a, char *err, size_t errlen);
void agent_metrics_close(agent *a);
/* The whole page into b; -1 when memory ran out. */
int agent_metrics_render(agent *a, sk_buf *b);

#endif
