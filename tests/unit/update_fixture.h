/* tests/unit/update_fixture.h: a valid weight update record for the tests of
 * jobs/update_state (unit tests, agent_state's, the fuzz target and its
 * corpus). */
#ifndef UPDATE_FIXTURE_H
#define UPDATE_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "jobs/update_state.h"

/* u: (job, v) with base v-1, mode disk-delta, sender "<job>/trainer-0" on
 * n1, this state; nengines of e ("<job>/engine-<i>" on n<i+2>) in eng_state;
 * no reason. */
static inline void update_fixture(update_rec *u, update_engine *e, size_t nengines, const char *job, uint64_t v,
			      const char *state, const char *eng_state)
{
	memset(u, 0, sizeof *u);
	snprintf(u->job, sizeof u->job, "%s", job);
	u->version = v;
	u->base_version = v - 1;
	snprintf(u->mode, sizeof u->mode, "disk-delta");
	snprintf(u->sender, sizeof u->sender, "%s/trainer-0", job);
	snprintf(u->sender_node, sizeof u->sender_node, "n1");
	snprintf(u->state, sizeof u->state, "%s", state);
	snprintf(u->cause, sizeof u->cause, "%s", strcmp(state, "aborted") ? "" : "timeout"); /* an abort names its cause */
	for (size_t i = 0; i < nengines; i++) {
		memset(&e[i], 0, sizeof e[i]);
		snprintf(e[i].member, sizeof e[i].member, "%s/engine-%zu", job, i);
		snprintf(e[i].node, sizeof e[i].node, "n%zu", i + 2);
		snprintf(e[i].state, sizeof e[i].state, "%s", eng_state);
	}
	u->engines = nengines ? e : NULL;
	u->nengines = nengines;
}

#endif
