/* agent/agent_stats: what the head, the jobs and the weight updates count
 * as they go (see agent_stats.h); agent_metrics.c renders it. */
#include "agent/agent_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_time.h"

/* Commit latency buckets, seconds: a commit on one fabric takes a
 * round-trip and an fsync (about 1-5 ms), 2.5 s is a head in trouble. */
const double agent_stats_commit_s[AGENT_STATS_NBUCKETS] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
							    0.25, 0.5, 1, 2.5 };
/* A weight update: milliseconds colocated, seconds for 100 GB across nodes. */
const double agent_stats_update_s[AGENT_STATS_UBUCKETS] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
							    30, 60, 120 };
const double agent_stats_density[AGENT_STATS_DBUCKETS] = { 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1 };
const char *const agent_stats_modes[AGENT_STATS_NMODES] = { "broadcast", "broadcast_packed", "p2p", "disk-delta",
							    "colocated" };

agent_stats *agent_stats_new(void)
{
	return calloc(1, sizeof(agent_stats));
}

void agent_stats_free(agent_stats **s)
{
	free(*s);
	*s = NULL;
}

void agent_stats_proposed(agent_stats *m, uint64_t index)
{
	if (!m) return;
	if (m->pn && m->prop[(m->ptail + m->pn - 1) % AGENT_STATS_PROPOSED_MAX].index >= index) m->pn = 0; /* a new term */
	if (m->pn == AGENT_STATS_PROPOSED_MAX) { m->ptail = (m->ptail + 1) % AGENT_STATS_PROPOSED_MAX; m->pn--; }
	m->prop[(m->ptail + m->pn) % AGENT_STATS_PROPOSED_MAX] = (agent_stats_prop){ index, (sk_mono_us() * 1000u) };
	m->pn++;
}

void agent_stats_applied(agent_stats *m, uint64_t index)
{
	if (!m) return;
	while (m->pn && m->prop[m->ptail].index <= index) {
		agent_stats_prop p = m->prop[m->ptail];
		m->ptail = (m->ptail + 1) % AGENT_STATS_PROPOSED_MAX;
		m->pn--;
		if (p.index != index) continue; /* lost to a new head, or never applied here */
		double s = (double)((sk_mono_us() * 1000u) - p.t_ns) / 1e9;
		for (int i = 0; i < AGENT_STATS_NBUCKETS; i++)
			if (s <= agent_stats_commit_s[i]) m->buckets[i]++;
		m->count++;
		m->sum += s;
	}
}

void agent_stats_head_seen(agent_stats *m, const char *leader, uint64_t term)
{
	if (!m || !leader || !leader[0]) return;
	if (term == m->head_term && !strcmp(leader, m->head)) return;
	if (m->head[0]) m->head_changes++; /* the first head seen is not a change */
	snprintf(m->head, sizeof m->head, "%s", leader);
	m->head_term = term;
}

void agent_stats_member_event(agent_stats *m, const sup_status *st)
{
	if (!m) return;
	if (st->state == SUP_RESTARTING) m->member_restarts++;
	else if (st->state == SUP_FAILED) m->member_failures++;
}

static void histo_add(agent_stats_histo *h, const double *bounds, int n, double v)
{
	for (int i = 0; i < n; i++)
		if (v <= bounds[i]) h->b[i]++;
	h->count++;
	h->sum += v;
}

void agent_stats_transfer(agent_stats *m, const update_rec *rec, double update_s)
{
	int k = 0;
	if (!m) return;
	while (k < AGENT_STATS_NMODES && strcmp(agent_stats_modes[k], rec->mode)) k++;
	if (k == AGENT_STATS_NMODES) return;
	agent_stats_mode *ms = &m->modes[k];
	if (!strcmp(rec->state, "committed")) {
		ms->committed++;
		histo_add(&ms->update, agent_stats_update_s, AGENT_STATS_UBUCKETS, update_s);
		histo_add(&ms->impl, agent_stats_update_s, AGENT_STATS_UBUCKETS, rec->implementation_seconds);
		if (!strcmp(rec->mode, "disk-delta"))
			histo_add(&ms->density, agent_stats_density, AGENT_STATS_DBUCKETS, rec->density);
		update_timings slow = update_rec_slowest(rec);
		histo_add(&ms->eng_data, agent_stats_update_s, AGENT_STATS_UBUCKETS, slow.data);
		histo_add(&ms->eng_hash, agent_stats_update_s, AGENT_STATS_UBUCKETS, slow.hash);
		histo_add(&ms->eng_journal, agent_stats_update_s, AGENT_STATS_UBUCKETS, slow.journal);
		histo_add(&ms->sender_hash, agent_stats_update_s, AGENT_STATS_UBUCKETS, rec->sender_t.hash);
		ms->bytes += rec->bytes;
		ms->wire_bytes += rec->wire_bytes;
	} else {
		ms->aborted++;
		int c = 0;
		while (c < UPDATE_NCAUSES && strcmp(update_causes[c], rec->cause)) c++;
		if (c < UPDATE_NCAUSES) m->aborts[c]++;
	}
}
