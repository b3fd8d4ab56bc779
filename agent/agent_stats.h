/* agent/agent_stats: figures that the head (agent_head.c), the jobs
 * (agent_jobs.c) and the weight updates (agent_update.c) count as they go, for
 * agent_metrics.c to read at scrape time.  A leaf: the layers write here and
 * metrics only reads, so metrics is never called by the layers it reads.
 * Every hook is a no-op on NULL (agent.stats is set while metrics is open). */
#ifndef AGENT_STATS_H
#define AGENT_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "agent/sup/agent_sup.h"
#include "jobs/update_state.h"
#include "membership/mbr.h"

enum {
	AGENT_STATS_NBUCKETS = 12,     /* agent_stats_commit_s */
	AGENT_STATS_UBUCKETS = 14,     /* agent_stats_update_s */
	AGENT_STATS_DBUCKETS = 7,      /* agent_stats_density */
	AGENT_STATS_NMODES = 5,        /* agent_stats_modes */
	AGENT_STATS_NCAUSES = UPDATE_NCAUSES, /* jobs/update_state.h's update_causes */
	AGENT_STATS_PROPOSED_MAX = 256,/* proposals awaiting their commit, at most */
};
/* Histogram bounds: commit latency (s), a weight update's times (s), a
 * disk-delta's density (fraction). */
extern const double agent_stats_commit_s[AGENT_STATS_NBUCKETS];
extern const double agent_stats_update_s[AGENT_STATS_UBUCKETS];
extern const double agent_stats_density[AGENT_STATS_DBUCKETS];
/* --update-weight-transfer-mode's values (an abort's causes: update_causes) */
extern const char *const agent_stats_modes[AGENT_STATS_NMODES];

typedef struct {
	uint64_t b[AGENT_STATS_UBUCKETS > AGENT_STATS_DBUCKETS ? AGENT_STATS_UBUCKETS : AGENT_STATS_DBUCKETS], count;
	double sum;
} agent_stats_histo;

typedef struct {
	agent_stats_histo update, impl, density;
	/* committed updates' data path split: the slowest participant's moving,
	 * hashing and journaling, the sender's hashing */
	agent_stats_histo eng_data, eng_hash, eng_journal, sender_hash;
	uint64_t bytes, wire_bytes, committed, aborted;
} agent_stats_mode;

typedef struct {
	uint64_t index, t_ns;
} agent_stats_prop;

typedef struct agent_stats {
	/* proposals in index order, a ring */
	agent_stats_prop prop[AGENT_STATS_PROPOSED_MAX];
	size_t ptail, pn;
	uint64_t buckets[AGENT_STATS_NBUCKETS], count; /* commit latency, propose -> applied on the head */
	double sum;
	char head[MBR_NAME_MAX + 1];
	uint64_t head_term;
	uint64_t head_changes;
	uint64_t member_restarts, member_failures;
	agent_stats_mode modes[AGENT_STATS_NMODES];
	uint64_t aborts[AGENT_STATS_NCAUSES];
} agent_stats;

agent_stats *agent_stats_new(void);      /* NULL when memory ran out */
void agent_stats_free(agent_stats **s);  /* sets *s to NULL; safe twice */

void agent_stats_proposed(agent_stats *s, uint64_t index);   /* the head proposed this entry */
void agent_stats_applied(agent_stats *s, uint64_t index);    /* ... and this one was applied */
void agent_stats_head_seen(agent_stats *s, const char *leader, uint64_t term);
void agent_stats_member_event(agent_stats *s, const sup_status *st);
/* A weight update this head finished (agent_update.c): its final record,
 * committed or aborted (then its cause is one of update_causes), and its
 * update_seconds as measured to the final record's commit. */
void agent_stats_transfer(agent_stats *s, const update_rec *rec, double update_s);

#endif
