/* agent/agent_update_gate: who may speak for a member (docs/updates.md).
 *
 * A member reaches its agent on the Unix socket, which root and skeind's
 * user may use; what makes a request a member's is the process that sent
 * it.  The kernel says which (SO_PEERCRED, taken when the connection was
 * made); the request is a member's when that process is the member's
 * process or one of its descendants (a trainer script that runs python, a
 * launcher that forks workers).  The walk reads /proc/PID/stat upwards,
 * bounded in depth: a process whose parent exited is reparented to the
 * agent (a subreaper) or init, and the walk ends there. */
#include "agent/agent_update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/sup/agent_sup.h"

enum { GATE_DEPTH_MAX = 32 };

/* The parent of pid, or -1.  The command name in field 2 may hold spaces
 * and parentheses: the fields after it start after the last ')'. */
static int parent_of(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f) return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *rp = strrchr(buf, ')');
	char state;
	int ppid;
	if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2) return -1;
	return ppid;
}

int agent_update_gate_check(agent *a, const char *member, int pid, char *why, size_t whylen)
{
	sup *s = agent_jobs_sup(a);
	sup_status st;
	if (!s || sup_get(s, member, &st) != 0 || st.state != SUP_RUNNING || st.pid <= 0) {
		snprintf(why, whylen, "%s does not run on this node", member);
		return -1;
	}
	for (int p = pid, depth = 0; p > 1 && depth < GATE_DEPTH_MAX; depth++) {
		if (p == st.pid) return 0;
		p = parent_of(p);
	}
	snprintf(why, whylen, "process %d is not %s (pid %d) or one of its children", pid, member, (int)st.pid);
	return -1;
}
