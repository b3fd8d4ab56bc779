/* agent/agent_cgroup: members in cgroups of their own (cgroup v2).
 *
 * A process group is not a container: a member may setsid() out of it, and
 * when the leader is gone nothing names the rest.  A cgroup holds every
 * descendant, and cgroup.kill (Linux 5.14) kills them all at once.
 *
 * Layout: skeind stays where it was started (S = its cgroup, from
 * /proc/self/cgroup) and makes one folder per agent, S/skeind-NAME-HASH
 * (HASH of its private folder, so two agents of one host never share one),
 * with one leaf per member, .../m-JOB@MEMBER ('@' is not allowed in ids, and
 * the "m-" keeps names clear of cgroup.* and controller files).  No
 * controller is enabled anywhere: the v2 "no internal processes" rule only
 * concerns cgroups that distribute controllers, so skeind need not move
 * into a leaf of its own (as systemd asks of delegated services that do),
 * and a member can enter its leaf from S.  Under systemd this needs
 * Delegate=yes on the unit (deploy/systemd/skeind.service): systemd then
 * leaves the sub-tree to us, and still kills it whole when the unit stops.
 *
 * Used only where cgroup2 is mounted and S is writable by us; otherwise
 * (cgroup v1, a read-only /sys/fs/cgroup, no privilege) agent_sup falls
 * back to process groups alone. */
#ifndef AGENT_CGROUP_H
#define AGENT_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The per-agent folder S/skeind-NAME-HASH (made with the first member's);
 * -1 with why when cgroups cannot be used here. */
int agent_cg_agent_dir(const char *name, const char *run_dir, char *out, size_t cap, char *why, size_t wl);
/* The member's leaf under the agent folder, both created. */
int agent_cg_member_dir(const char *agent_dir, const char *id, char *out, size_t cap, char *why, size_t wl);
/* Opens dir/cgroup.procs for writing (close-on-exec), for agent_cg_enter. */
int agent_cg_procs_fd(const char *dir);
/* Writes pid into an open cgroup.procs: async-signal-safe (a forked child
 * moves itself before exec, so its children are born inside). */
int agent_cg_enter(int procs_fd, pid_t pid);
/* Anything left in dir or below it (cgroup.events "populated 1"). */
bool agent_cg_populated(const char *dir);
/* Sends sig to every process in dir and below; SIGKILL through cgroup.kill
 * where the kernel has it.  The number of processes signalled (cgroup.kill:
 * 1 when populated). */
int agent_cg_signal(const char *dir, int sig);
/* Removes dir and the empty folders below it; -1 when something is left. */
int agent_cg_remove(const char *dir);
/* A path that may be a folder agent_cg_agent_dir made: absolute, on a
 * cgroup2 mount, no "..", last part skeind-*.  For paths read back from a
 * state file. */
bool agent_cg_path_ok(const char *dir);

#endif
