/* agent/sup/agent_sup.c: the member processes of this node (contract in
 * agent_sup.h).
 *
 * One sup_member per id, kept sorted by id.  Each embeds three watchers: a
 * child watcher on its group leader, a start timer (start delay, restart
 * backoff) and a stop timer (SIGKILL at the end of the grace, then a short
 * poll until the group is empty).  Its life:
 *
 *   PENDING/STARTING --timer--> RUNNING --exit--> RESTARTING | FAILED | STOPPED
 *
 * and a stop (order removed, generation changed, sup_stop_prefix, sup_free)
 * runs beside it: TERM the group, KILL after the grace, and once the leader
 * is reaped and kill(-pgid, 0) finds nobody, do what the stop was for
 * (`then`: start the new generation, forget, fail).
 *
 * Where it differs from a plain fork/exec supervisor:
 *   - the agent makes itself a child subreaper, so a member's orphans are
 *     re-parented to it and reaped by libev's SIGCHLD handler; otherwise
 *     zombies under a container init that never reaps would keep a group
 *     "alive" (there is still a cap on that wait after SIGKILL);
 *   - events are queued and delivered from a zero timer, so sup_set and
 *     sup_stop_prefix never call out while the agent is handling an order
 *     (STYLE: no callbacks in the middle of handling a request), and events
 *     keep their order. */
#include "common/sk_time.h"
#include "agent/sup/agent_sup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/sup/agent_cgroup.h"
#include "agent/sup/agent_files.h"
#include "common/sk_log.h"

enum {
	SUP_QUICK_RUN_MS = 30000,  /* a run at least this long resets the backoff exponent */
	SUP_GONE_POLL_MS = 10,     /* leader reaped, group not empty yet: how often to look */
	SUP_GONE_CAP_MS = 2000,    /* after SIGKILL, stop waiting (zombies nobody reaps) */
	SUP_FREE_REAP_MS = 500,    /* sup_free: wait for the groups after the final SIGKILL */
	SUP_FREE_TICK_MS = 10,     /* sup_free: how often its bounded loop looks */
	SUP_STATE_MAX_LINES = 4096, /* a longer state file is garbage: stop reading */
	SUP_JOB_MAX = 64,          /* sizeof sup_status.job */
	SUP_CLOSE_MAX = 65536,     /* fds closed one by one where close_range is missing */
	SUP_MARK_HEX = 32,         /* the agent run's mark: 128 random bits */
	SUP_ENVIRON_MAX = 1 << 20, /* the most of a /proc/PID/environ read when looking for the mark */
	SUP_CLEAN_ROUNDS = 5,      /* restart clean-up: passes until no marked process is left */
	SUP_TRACK_MS = 1000,       /* without a cgroup: how often the members' descendants are walked */
	SUP_KNOWN_MAX = 4096,      /* descendants remembered per member (more are still killed when seen) */
};

/* Set in every member's environment: the processes a member leaves behind
 * keep it (as long as they do not clear their environment), so an agent
 * restarted after a crash finds them all, not only the group leaders. */
#define SUP_MARK_VAR "SKEIN_SUP_MARK"
/* Set to the member's id: an orphan re-parented to the agent (its parent
 * exited) is known by it, where no cgroup holds the member. */
#define SUP_MEMBER_VAR "SKEIN_SUP_MEMBER"

typedef struct {
	pid_t pid;
	unsigned long long stt;  /* /proc starttime: pid + starttime is one process */
} sup_known;

typedef enum { SUP_THEN_NONE, SUP_THEN_START, SUP_THEN_FORGET, SUP_THEN_FAIL } sup_then;

typedef struct sup_member {
	sup *s;
	sup_spec spec;           /* cmd and env owned (copied) */
	sup_status st;
	bool bad;                /* invalid id or spec: never started */
	bool seen;               /* sup_set bookkeeping */
	pid_t pgid;              /* group of the running leader, or of one being stopped */
	char cg[PATH_MAX];       /* its cgroup ("" when none: the process group alone) */
	unsigned long long starttime; /* leader's /proc starttime, for the state file */
	uint32_t local;          /* local restarts in this generation */
	uint32_t quick;          /* consecutive quick exits: the backoff exponent */
	bool stopping, killed;
	sup_known *kn;           /* without a cgroup: descendants seen (sup_track), also outside its group */
	size_t nkn;
	sup_then then;
	uint64_t kill_at;        /* stopping: SIGKILL deadline, then when it was sent */
	char why[128];           /* reason for a SUP_THEN_FAIL stop */
	uint64_t noted_gen;      /* same-gen spec change logged for this gen + 1 */
	ev_child cw;
	ev_timer start_w, stop_w;
} sup_member;

struct sup {
	struct ev_loop *loop;
	char *log_dir, *state_file;
	char *cg_root;           /* the agent's cgroup folder (agent_cgroup.h), NULL when none */
	char mark[SUP_MARK_HEX + 1];
	sup_event_fn cb;
	void *ud;
	sup_member **m;          /* sorted by st.id */
	size_t n, cap;
	sup_status *evq;         /* events waiting for evq_w */
	size_t nevq, capevq;
	ev_timer evq_w;
	ev_timer track_w;        /* sup_track, while a member runs without a cgroup */
	bool freeing;
};

static const char *const state_names[] = { "pending", "starting", "running", "restarting", "failed", "stopped" };

const char *sup_state_str(sup_state s)
{
	return (unsigned)s < sizeof state_names / sizeof state_names[0] ? state_names[s] : "unknown";
}


static void sup_errf(char *err, size_t errlen, const char *fmt, const char *arg)
{
	if (err && errlen) snprintf(err, errlen, fmt, arg);
}

/* ---- ids, paths, /proc ---- */

/* "<job>/<member>": [A-Za-z0-9_.-] and exactly one '/', neither part empty,
 * "." or ".." (the parts become a directory and a file name under log_dir). */
static int sup_check_id(const char *id, char *why, size_t wl)
{
	size_t len = strnlen(id, SUP_ID_MAX);
	if (len == 0 || len == SUP_ID_MAX) {
		snprintf(why, wl, "bad id: %s", len ? "too long" : "empty");
		return -1;
	}
	const char *slash = NULL;
	for (size_t i = 0; i < len; i++) {
		char c = id[i];
		if (c == '/') {
			if (slash) {
				snprintf(why, wl, "bad id: more than one '/'");
				return -1;
			}
			slash = id + i;
		} else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
			     c == '.' || c == '-')) {
			snprintf(why, wl, "bad id: character 0x%02x not allowed", (unsigned char)c);
			return -1;
		}
	}
	if (!slash) {
		snprintf(why, wl, "bad id: no '/' between job and member");
		return -1;
	}
	size_t jl = (size_t)(slash - id);
	const char *mem = slash + 1;
	if (jl == 0 || jl >= SUP_JOB_MAX || !*mem || (jl == 1 && id[0] == '.') || (jl == 2 && !strncmp(id, "..", 2)) ||
	    !strcmp(mem, ".") || !strcmp(mem, "..")) {
		snprintf(why, wl, "bad id: job or member part empty, too long, '.' or '..'");
		return -1;
	}
	return 0;
}

/* Opens <log_dir>/<job>/<member>.log, each step checked (agent_files.h: ours,
 * no link, 0700 folders, 0600 file); `create` makes what is missing.  -1
 * with why (a bad id, a link, not ours, ...). */
static int sup_log_open(const sup *s, const char *id, int flags, bool create, char *why, size_t wl)
{
	if (!s->log_dir) {
		snprintf(why, wl, "no log folder");
		return -1;
	}
	if (sup_check_id(id, why, wl) != 0) return -1;
	const char *slash = strchr(id, '/');
	char job[SUP_ID_MAX], file[SUP_ID_MAX + 8];
	snprintf(job, sizeof job, "%.*s", (int)(slash - id), id);
	snprintf(file, sizeof file, "%s.log", slash + 1);
	int fd = -1, dfd = agent_dir_open(s->log_dir, create, why, wl);
	int jfd = dfd < 0 ? -1 : agent_dir_open_at(dfd, job, create, why, wl);
	if (jfd >= 0) fd = agent_file_open_at(jfd, file, flags, why, wl);
	if (jfd >= 0) close(jfd);
	if (dfd >= 0) close(dfd);
	return fd;
}

/* ---- descendants without a cgroup ----
 *
 * A process group does not hold what a member starts with setsid (or
 * setpgid), and an orphan is re-parented to the agent (a subreaper, see
 * above), out of its member's tree.  Without a cgroup the agent therefore
 * walks /proc: a member's processes are its group, the descendants it saw
 * before (sup_known: pid + starttime), the agent's children that carry the
 * member's SKEIN_SUP_MEMBER, and everything below any of these.  The walk
 * runs at every signal (stop, exit) and every SUP_TRACK_MS while such a
 * member runs, so a child that leaves the tree later is still known; the
 * known ones go into the state file, for a restarted agent's clean-up.
 * What escapes is a process that leaves the tree, and clears its
 * environment, between two walks. */

typedef struct {
	pid_t pid, ppid, pgid;
	unsigned long long stt;
} sup_proc;

/* Fields 4, 5 and 22 of /proc/<pid>/stat; -1 when the process is gone. */
static int sup_proc_read(pid_t pid, sup_proc *pr)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return -1;
	buf[n] = '\0';
	char *p = strrchr(buf, ')'); /* comm may hold spaces and ')' */
	if (!p) return -1;
	p++;
	pr->pid = pid;
	for (int field = 3; field <= 22; field++) {
		while (*p == ' ') p++;
		if (!*p) return -1;
		if (field == 4) pr->ppid = (pid_t)strtol(p, NULL, 10);
		if (field == 5) pr->pgid = (pid_t)strtol(p, NULL, 10);
		if (field == 22) {
			pr->stt = strtoull(p, NULL, 10);
			return 0;
		}
		while (*p && *p != ' ') p++;
	}
	return -1;
}

/* Field 22 of /proc/<pid>/stat (its start time); -1 when the process is gone. */
static int sup_starttime(pid_t pid, unsigned long long *out)
{
	sup_proc pr;
	if (sup_proc_read(pid, &pr) != 0) return -1;
	*out = pr.stt;
	return 0;
}

static int sup_proc_cmp(const void *x, const void *y)
{
	pid_t a = ((const sup_proc *)x)->pid, b = ((const sup_proc *)y)->pid;
	return (a > b) - (a < b);
}

/* Every process but init and the agent, sorted by pid; NULL when /proc
 * cannot be read (or no memory). */
static sup_proc *sup_procs(size_t *n)
{
	*n = 0;
	DIR *d = opendir("/proc");
	if (!d) return NULL;
	size_t cap = 256;
	sup_proc *ps = malloc(cap * sizeof *ps);
	struct dirent *e;
	while (ps && (e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 1 || pid == (long)getpid()) continue;
		if (*n == cap) {
			sup_proc *np = realloc(ps, cap * 2 * sizeof *np);
			if (!np) { free(ps); ps = NULL; break; }
			ps = np;
			cap *= 2;
		}
		if (sup_proc_read((pid_t)pid, &ps[*n]) == 0) (*n)++;
	}
	closedir(d);
	if (ps) qsort(ps, *n, sizeof *ps, sup_proc_cmp);
	return ps;
}

static long sup_proc_find(const sup_proc *ps, size_t n, pid_t pid)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ps[mid].pid < pid) lo = mid + 1;
		else hi = mid;
	}
	return lo < n && ps[lo].pid == pid ? (long)lo : -1;
}

/* in[i] set for the seeds: adds every descendant of a seed. */
static void sup_proc_close(const sup_proc *ps, size_t n, bool *in)
{
	for (bool more = true; more;) {
		more = false;
		for (size_t i = 0; i < n; i++) {
			if (in[i]) continue;
			long p = sup_proc_find(ps, n, ps[i].ppid);
			if (p >= 0 && in[p]) in[i] = more = true;
		}
	}
}

/* Whether process pid's environment holds exactly `kv`. */
static bool sup_env_has(pid_t pid, const char *kv, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return false;
	size_t n = 0, kl = strlen(kv);
	ssize_t r;
	while (n < cap && (r = read(fd, buf + n, cap - n)) > 0) n += (size_t)r;
	close(fd);
	for (size_t off = 0; off < n;) { /* NUL-separated KEY=VALUE */
		size_t len = strnlen(buf + off, n - off);
		if (len == kl && !memcmp(buf + off, kv, kl)) return true;
		off += len + 1;
	}
	return false;
}

/* Whether pid leads one of the agent's members (not an orphan). */
static bool sup_is_leader(const sup *s, pid_t pid)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->m[i]->st.pid == pid) return true;
	return false;
}

/* in[]: member m's processes in the snapshot (see above). */
static void sup_member_tree(const sup_member *m, const sup_proc *ps, size_t n, bool *in, char *envbuf)
{
	char kv[sizeof SUP_MEMBER_VAR + SUP_ID_MAX + 1];
	snprintf(kv, sizeof kv, "%s=%s", SUP_MEMBER_VAR, m->st.id);
	pid_t self = getpid();
	for (size_t i = 0; i < n; i++) {
		in[i] = (m->pgid > 1 && ps[i].pgid == m->pgid) || (m->st.pid && ps[i].pid == m->st.pid);
		for (size_t k = 0; k < m->nkn && !in[i]; k++)
			in[i] = m->kn[k].pid == ps[i].pid && m->kn[k].stt == ps[i].stt;
		if (!in[i] && ps[i].ppid == self && !sup_is_leader(m->s, ps[i].pid))
			in[i] = sup_env_has(ps[i].pid, kv, envbuf, SUP_ENVIRON_MAX);
	}
	sup_proc_close(ps, n, in);
}

/* m's processes in the snapshot ps: remembered (true when that changed
 * what m knew) and sent sig (0: none).  false, nothing done, without
 * memory. */
static bool sup_member_walk_in(sup_member *m, const sup_proc *ps, size_t n, int sig, bool *in, char *envbuf)
{
	sup_known *kn = malloc((n ? n : 1) * sizeof *kn);
	bool changed = false;
	if (kn) {
		sup_member_tree(m, ps, n, in, envbuf);
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			if (!in[i]) continue;
			if (sig) kill(ps[i].pid, sig);
			if (k < SUP_KNOWN_MAX) kn[k++] = (sup_known){ ps[i].pid, ps[i].stt };
		}
		changed = k != m->nkn;
		for (size_t j = 0; j < k && !changed; j++) changed = kn[j].pid != m->kn[j].pid || kn[j].stt != m->kn[j].stt;
		free(m->kn);
		m->kn = kn;
		m->nkn = k;
	}
	return changed;
}

/* sup_member_walk_in over a fresh snapshot. */
static bool sup_member_walk(sup_member *m, int sig)
{
	size_t n;
	sup_proc *ps = sup_procs(&n);
	bool *in = ps ? calloc(n ? n : 1, sizeof *in) : NULL;
	char *envbuf = in ? malloc(SUP_ENVIRON_MAX) : NULL;
	bool changed = envbuf && sup_member_walk_in(m, ps, n, sig, in, envbuf);
	free(envbuf);
	free(in);
	free(ps);
	return changed;
}

static bool sup_known_alive(const sup_member *m)
{
	for (size_t k = 0; k < m->nkn; k++) {
		unsigned long long stt;
		if (sup_starttime(m->kn[k].pid, &stt) == 0 && stt == m->kn[k].stt) return true;
	}
	return false;
}

static void sup_known_clear(sup_member *m)
{
	free(m->kn);
	m->kn = NULL;
	m->nkn = 0;
}

static bool sup_group_alive(pid_t pgid)
{
	return pgid > 1 && (kill(-pgid, 0) == 0 || errno == EPERM);
}

/* Never kill(0) or kill(-1): a pgid of 0 would be our own group. */
static void sup_kill_group(pid_t pgid, int sig)
{
	if (pgid > 1) kill(-pgid, sig);
}

/* Anything of the member left: its group, or its cgroup (which also holds
 * what left the group with setsid). */
static bool sup_member_alive(const sup_member *m)
{
	return sup_group_alive(m->pgid) || (m->cg[0] ? agent_cg_populated(m->cg) : sup_known_alive(m));
}

static void sup_state_write(sup *s);

static void sup_member_kill(sup_member *m, int sig)
{
	sup_kill_group(m->pgid, sig);
	if (m->cg[0]) agent_cg_signal(m->cg, sig);
	else if (sup_member_walk(m, sig)) sup_state_write(m->s);
}

/* Every process whose environment holds SKEIN_SUP_MARK=mark gets SIGKILL;
 * how many were found. */
static int sup_kill_marked(const char *mark)
{
	char want[sizeof SUP_MARK_VAR + SUP_MARK_HEX + 2];
	int wl = snprintf(want, sizeof want, "%s=%s", SUP_MARK_VAR, mark);
	DIR *d = opendir("/proc");
	char *buf = malloc(SUP_ENVIRON_MAX);
	int found = 0;
	struct dirent *e;
	while (d && buf && (e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 1 || pid == (long)getpid()) continue;
		char path[64];
		snprintf(path, sizeof path, "/proc/%ld/environ", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) continue;
		size_t n = 0;
		ssize_t r;
		while (n < SUP_ENVIRON_MAX && (r = read(fd, buf + n, SUP_ENVIRON_MAX - n)) > 0) n += (size_t)r;
		close(fd);
		for (size_t off = 0; off < n;) { /* NUL-separated KEY=VALUE */
			size_t len = strnlen(buf + off, n - off);
			if (len == (size_t)wl && !memcmp(buf + off, want, (size_t)wl)) {
				if (kill((pid_t)pid, SIGKILL) == 0) found++;
				break;
			}
			off += len + 1;
		}
	}
	if (d) closedir(d);
	free(buf);
	return found;
}

/* ---- state file ---- */

/* One line per running leader; tmp + rename so a crash leaves the old file
 * or the new one.  No fsync: the file only matters while the machine stays
 * up (a reboot takes the groups with it). */
static void sup_state_write(sup *s)
{
	if (!s->state_file) return;
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", s->state_file) >= sizeof tmp) return;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		if (fd >= 0) close(fd);
		SK_WARN("sup", "state file %s: %s", tmp, strerror(errno));
		return;
	}
	fprintf(f, "mark %s\n", s->mark);
	if (s->cg_root) fprintf(f, "cgroup %s\n", s->cg_root);
	for (size_t i = 0; i < s->n; i++) {
		const sup_member *m = s->m[i];
		if (m->st.pid) fprintf(f, "%d %llu %s\n", (int)m->pgid, m->starttime, m->st.id);
		for (size_t k = 0; k < m->nkn; k++) /* descendants seen without a cgroup */
			fprintf(f, "d %d %llu %s\n", (int)m->kn[k].pid, m->kn[k].stt, m->st.id);
	}
	bool bad = ferror(f) != 0;
	if (fclose(f) != 0) bad = true;
	if (bad || rename(tmp, s->state_file) != 0) {
		SK_WARN("sup", "state file %s: %s", s->state_file, strerror(errno));
		unlink(tmp);
	}
}

/* Parses "pgid starttime id"; -1 on anything else. */
static int sup_state_parse(char *line, long long *pg, unsigned long long *stt, char **id)
{
	char *e;
	errno = 0;
	*pg = strtoll(line, &e, 10);
	if (e == line || *e != ' ' || errno) return -1;
	char *p = e + 1;
	if (*p < '0' || *p > '9') return -1;
	*stt = strtoull(p, &e, 10);
	if (e == p || *e != ' ' || errno) return -1;
	*id = e + 1;
	(*id)[strcspn(*id, "\n")] = '\0';
	return 0;
}

/* Kills the groups a previous agent left running: a pgid whose leader still
 * has the recorded start time is the same process (pid + starttime is
 * unique), anything else is gone or someone else's. */
static void sup_state_cleanup(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		if (errno != ENOENT) SK_WARN("sup", "state file %s: %s", path, strerror(errno));
		return;
	}
	char line[PATH_MAX + 16], mark[SUP_MARK_HEX + 1] = "", cg[PATH_MAX] = "";
	int lines = 0, bad = 0;
	sup_known seen[SUP_KNOWN_MAX];
	size_t nseen = 0;
	while (fgets(line, sizeof line, f)) {
		if (++lines > SUP_STATE_MAX_LINES) {
			SK_WARN("sup", "state file %s: more than %d lines, the rest ignored", path, SUP_STATE_MAX_LINES);
			break;
		}
		size_t len = strlen(line);
		if (len && line[len - 1] != '\n' && !feof(f)) { /* overlong: skip the rest of it */
			int c;
			while ((c = fgetc(f)) != EOF && c != '\n') {}
			bad++;
			continue;
		}
		if (!strncmp(line, "mark ", 5)) {
			line[strcspn(line, "\n")] = 0;
			if (strlen(line + 5) == SUP_MARK_HEX && strspn(line + 5, "0123456789abcdef") == SUP_MARK_HEX)
				snprintf(mark, sizeof mark, "%s", line + 5);
			continue;
		}
		if (!strncmp(line, "cgroup ", 7)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(cg, sizeof cg, "%s", line + 7);
			continue;
		}
		long long pg;
		unsigned long long stt, now;
		char *id;
		if (!strncmp(line, "d ", 2)) { /* a descendant the previous agent saw: still that process? */
			if (sup_state_parse(line + 2, &pg, &stt, &id) != 0 || pg <= 1 || pg > INT_MAX || pg == getpid()) {
				bad++;
				continue;
			}
			if (nseen < SUP_KNOWN_MAX && sup_starttime((pid_t)pg, &now) == 0 && now == stt)
				seen[nseen++] = (sup_known){ (pid_t)pg, stt };
			continue;
		}
		if (sup_state_parse(line, &pg, &stt, &id) != 0 || pg <= 1 || pg > INT_MAX || pg == getpid() ||
		    pg == getpgrp()) {
			bad++;
			continue;
		}
		if (sup_starttime((pid_t)pg, &now) != 0 || now != stt) continue; /* gone, or the pid was reused */
		if (getpgid((pid_t)pg) == (pid_t)pg)
			kill(-(pid_t)pg, SIGKILL);
		else
			kill((pid_t)pg, SIGKILL); /* it left its group: the leader at least */
		SK_WARN("sup", "killed process group %lld of %.*s left by a previous agent", pg, SUP_ID_MAX, id);
	}
	if (bad) SK_WARN("sup", "state file %s: %d unreadable lines ignored", path, bad);
	fclose(f);
	/* the descendants it saw, wherever they went since, and all below them */
	size_t np;
	sup_proc *ps = nseen ? sup_procs(&np) : NULL;
	bool *in = ps ? calloc(np ? np : 1, sizeof *in) : NULL;
	if (in) {
		for (size_t k = 0; k < nseen; k++) {
			long i = sup_proc_find(ps, np, seen[k].pid);
			if (i >= 0 && ps[i].stt == seen[k].stt) in[i] = true;
		}
		sup_proc_close(ps, np, in);
		int killed = 0;
		for (size_t i = 0; i < np; i++)
			if (in[i] && ps[i].pid != getpgrp() && kill(ps[i].pid, SIGKILL) == 0) killed++;
		if (killed) SK_WARN("sup", "killed %d descendants of members left by a previous agent", killed);
	}
	free(in);
	free(ps);
	/* what the leaders left: the previous agent's cgroup, whole, and every
	 * process carrying its mark (a group whose leader is gone, a setsid) */
	if (cg[0] && agent_cg_path_ok(cg)) {
		int n = agent_cg_signal(cg, SIGKILL);
		uint64_t until = sk_mono_ms() + SUP_GONE_CAP_MS;
		while (agent_cg_populated(cg) && sk_mono_ms() < until) usleep(SUP_GONE_POLL_MS * 1000);
		if (n) SK_WARN("sup", "killed what a previous agent left in cgroup %s", cg);
		if (agent_cg_remove(cg) != 0) SK_WARN("sup", "cgroup %s of a previous agent not removed: %s", cg, strerror(errno));
	} else if (cg[0] && access(cg, F_OK) == 0) { /* (a folder never made is no news) */
		SK_WARN("sup", "state file %s: '%s' is not a cgroup of ours: ignored", path, cg);
	}
	int total = 0;
	for (int round = 0; mark[0] && round < SUP_CLEAN_ROUNDS; round++) {
		int n = sup_kill_marked(mark); /* again: one may have forked while we looked */
		total += n;
		if (!n) break;
	}
	if (total) SK_WARN("sup", "killed %d processes left by members of a previous agent", total);
}

/* ---- events ---- */

static void sup_emit(sup_member *m)
{
	sup *s = m->s;
	if (s->freeing || !s->cb) return;
	if (s->nevq == s->capevq) {
		size_t nc = s->capevq ? s->capevq * 2 : 16;
		sup_status *q = realloc(s->evq, nc * sizeof *q);
		if (!q) {
			SK_ERROR("sup", "out of memory: event for %s dropped", m->st.id);
			return;
		}
		s->evq = q;
		s->capevq = nc;
	}
	s->evq[s->nevq++] = m->st;
	if (!ev_is_active(&s->evq_w)) ev_timer_start(s->loop, &s->evq_w);
}

static void sup_evq_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	sup *s = w->data;
	/* the callback may call sup_set, which may append: read by index */
	for (size_t i = 0; i < s->nevq; i++) {
		sup_status st = s->evq[i];
		s->cb(s->ud, &st);
	}
	s->nevq = 0;
}

static void sup_set_state(sup_member *m, sup_state state, const char *reason)
{
	m->st.state = state;
	snprintf(m->st.reason, sizeof m->st.reason, "%s", reason ? reason : "");
	sup_emit(m);
}

/* ---- members ---- */

static void sup_spec_free(sup_spec *sp)
{
	free((char *)sp->cmd);
	for (size_t i = 0; i < sp->nenv; i++) free((char *)sp->env[i]);
	sp->cmd = NULL;
	sp->nenv = 0;
}

/* Copies src (strings included) into dst; -1 on out of memory. */
static int sup_spec_copy(sup_spec *dst, const sup_spec *src)
{
	*dst = *src;
	dst->cmd = NULL;
	dst->nenv = 0;
	memset(dst->env, 0, sizeof dst->env);
	if (src->cmd && !(dst->cmd = strdup(src->cmd))) return -1;
	size_t n = src->nenv < SUP_ENV_MAX ? src->nenv : SUP_ENV_MAX;
	for (size_t i = 0; i < n; i++) {
		if (!src->env[i]) continue;
		if (!(dst->env[dst->nenv] = strdup(src->env[i]))) return -1;
		dst->nenv++;
	}
	return 0;
}

static bool sup_spec_same(const sup_spec *a, const sup_spec *b)
{
	if (!a->cmd != !b->cmd || (a->cmd && strcmp(a->cmd, b->cmd))) return false;
	size_t nb = 0;
	for (size_t i = 0; i < b->nenv && i < SUP_ENV_MAX; i++)
		if (b->env[i]) {
			if (nb >= a->nenv || strcmp(a->env[nb], b->env[i])) return false;
			nb++;
		}
	return nb == a->nenv;
}

/* Checks what the spawn needs; fills why on a bad spec. */
static int sup_check_spec(const sup_spec *sp, char *why, size_t wl)
{
	if (sup_check_id(sp->id, why, wl) != 0) return -1;
	size_t jl = strcspn(sp->id, "/");
	if (sp->job[0] && (strnlen(sp->job, sizeof sp->job) != jl || strncmp(sp->job, sp->id, jl))) {
		snprintf(why, wl, "bad spec: job does not match the id");
		return -1;
	}
	if (!sp->cmd || !*sp->cmd) {
		snprintf(why, wl, "bad spec: no command");
		return -1;
	}
	if (sp->nenv > SUP_ENV_MAX) {
		snprintf(why, wl, "bad spec: more than %d environment entries", SUP_ENV_MAX);
		return -1;
	}
	for (size_t i = 0; i < sp->nenv; i++)
		if (!sp->env[i] || !strchr(sp->env[i], '=') || sp->env[i][0] == '=') {
			snprintf(why, wl, "bad spec: environment entry %zu is not KEY=VALUE", i);
			return -1;
		}
	return 0;
}

static sup_member *sup_find(sup *s, const char *id, size_t *pos)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s->m[mid]->st.id, id);
		if (c == 0) {
			if (pos) *pos = mid;
			return s->m[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (pos) *pos = lo;
	return NULL;
}

static void sup_forget(sup_member *m)
{
	sup *s = m->s;
	size_t pos;
	if (sup_find(s, m->st.id, &pos) == m) {
		memmove(&s->m[pos], &s->m[pos + 1], (s->n - pos - 1) * sizeof *s->m);
		s->n--;
	}
	ev_child_stop(s->loop, &m->cw);
	ev_timer_stop(s->loop, &m->start_w);
	ev_timer_stop(s->loop, &m->stop_w);
	sup_spec_free(&m->spec);
	free(m->kn);
	free(m);
}

static void sup_child_cb(struct ev_loop *loop, ev_child *w, int revents);
static void sup_start_cb(struct ev_loop *loop, ev_timer *w, int revents);
static void sup_stop_cb(struct ev_loop *loop, ev_timer *w, int revents);

static sup_member *sup_member_new(sup *s, const sup_spec *sp)
{
	if (s->n == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 8;
		sup_member **a = realloc(s->m, nc * sizeof *a);
		if (!a) goto oom;
		s->m = a;
		s->cap = nc;
	}
	sup_member *m = calloc(1, sizeof *m);
	if (!m) goto oom;
	if (sup_spec_copy(&m->spec, sp) != 0) {
		sup_spec_free(&m->spec);
		free(m);
		goto oom;
	}
	m->s = s;
	snprintf(m->st.id, sizeof m->st.id, "%.*s", SUP_ID_MAX - 1, sp->id);
	snprintf(m->st.job, sizeof m->st.job, "%.*s", (int)strcspn(m->st.id, "/"), m->st.id);
	m->st.gen = sp->gen;
	m->st.restarts = sp->restart_base;
	ev_child_init(&m->cw, sup_child_cb, 0, 0);
	ev_timer_init(&m->start_w, sup_start_cb, 0, 0);
	ev_timer_init(&m->stop_w, sup_stop_cb, 0, 0);
	m->cw.data = m->start_w.data = m->stop_w.data = m;
	size_t pos;
	sup_find(s, m->st.id, &pos);
	memmove(&s->m[pos + 1], &s->m[pos], (s->n - pos) * sizeof *s->m);
	s->m[pos] = m;
	s->n++;
	return m;
oom:
	SK_ERROR("sup", "out of memory: member dropped");
	return NULL;
}

/* Arms the start (or restart) timer, or parks the member while held. */
static void sup_schedule(sup_member *m, uint32_t delay_ms, sup_state state, const char *reason)
{
	sup *s = m->s;
	ev_timer_stop(s->loop, &m->start_w);
	if (m->spec.hold) {
		sup_set_state(m, SUP_PENDING, "held");
		return;
	}
	ev_now_update(s->loop); /* the delay counts from now, not from the loop's cached time */
	ev_timer_set(&m->start_w, delay_ms / 1000.0, 0);
	ev_timer_start(s->loop, &m->start_w);
	sup_set_state(m, state, reason);
}

/* ---- spawn ---- */

static bool sup_key_eq(const char *a, const char *b)
{
	while (*a && *a != '=' && *a == *b) a++, b++;
	return (*a == '=' || !*a) && (*b == '=' || !*b);
}

/* What the agent holds and a member must not: the cluster key (SKEIN_KEY,
 * SKEIN_KEY_FILE), operator credentials.  Left out of the agent's
 * environment and of the order's. */
static const char *const sup_secret_prefix[] = { "SKEIN_KEY", "SKEIN_OPERATOR", "SKEIN_TOKEN", "SKEIN_SECRET" };

static bool sup_secret(const char *kv)
{
	for (size_t i = 0; i < sizeof sup_secret_prefix / sizeof sup_secret_prefix[0]; i++)
		if (!strncmp(kv, sup_secret_prefix[i], strlen(sup_secret_prefix[i]))) return true;
	return false;
}

/* environ + spec env (overriding same keys, a later entry winning) +
 * SKEIN_RESTART_COUNT, secrets left out; built before fork.  Points into
 * environ and the spec. */
static char **sup_build_env(const sup_member *m, char *rc, char *mark, char *member)
{
	extern char **environ;
	size_t ne = 0;
	while (environ[ne]) ne++;
	char **envp = calloc(ne + m->spec.nenv + 4, sizeof *envp);
	if (!envp) return NULL;
	size_t k = 0;
	for (size_t i = 0; i < ne; i++) {
		bool over = sup_key_eq(environ[i], rc) || sup_key_eq(environ[i], mark) || sup_key_eq(environ[i], member) ||
			    sup_secret(environ[i]);
		for (size_t j = 0; j < m->spec.nenv && !over; j++) over = sup_key_eq(environ[i], m->spec.env[j]);
		if (!over) envp[k++] = environ[i];
	}
	for (size_t j = 0; j < m->spec.nenv; j++) {
		bool later = sup_key_eq(m->spec.env[j], rc) || sup_key_eq(m->spec.env[j], mark) ||
			     sup_key_eq(m->spec.env[j], member) || sup_secret(m->spec.env[j]);
		for (size_t l = j + 1; l < m->spec.nenv && !later; l++) later = sup_key_eq(m->spec.env[j], m->spec.env[l]);
		if (!later) envp[k++] = (char *)m->spec.env[j];
	}
	envp[k++] = rc;
	envp[k++] = mark;
	envp[k++] = member;
	envp[k] = NULL;
	return envp;
}

/* Keeps fd above 2, so that dup2 onto 0..2 in the child always happens (and
 * clears close-on-exec) even when the agent was started with them closed. */
static int sup_fd_high(int fd)
{
	if (fd < 0 || fd > 2) return fd;
	int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd;
}

/* Between fork and exec: async-signal-safe calls only. */
static void __attribute__((noreturn)) sup_child(pid_t ppid, int nullfd, int logfd, int cgfd, int maxfd,
						 const struct sigaction *dfl, char *const argv[], char *const envp[])
{
	setpgid(0, 0);
	/* into the member's cgroup before exec: whatever it starts is born there
	 * (the parent writes the pid too and checks) */
	if (cgfd >= 0) agent_cg_enter(cgfd, getpid());
	/* the agent may have died before prctl: then nobody would kill us */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != ppid) _exit(127);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (dup2(nullfd, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0) _exit(127);
	/* the agent's sockets are not the member's business */
	if (close_range(3, ~0U, 0) != 0)
		for (int fd = 3; fd < maxfd; fd++) close(fd); /* kernel before 5.9 */
	execve("/bin/sh", argv, envp);
	static const char msg[] = "=== skein: cannot execute /bin/sh ===\n";
	ssize_t r = write(2, msg, sizeof msg - 1);
	(void)r;
	_exit(127);
}

static int sup_open_log(sup_member *m, uint32_t rc, char *why, size_t wl)
{
	sup *s = m->s;
	if (!s->log_dir) return open("/dev/null", O_WRONLY | O_CLOEXEC);
	char e[200];
	int fd = sup_log_open(s, m->st.id, O_WRONLY | O_APPEND | O_CREAT, true, e, sizeof e);
	if (fd < 0) {
		snprintf(why, wl, "cannot start: log of %s: %s", m->st.id, e);
		return -1;
	}
	char ts[32], line[128];
	time_t now = (time_t)(sk_wall_ms() / 1000); /* shown in the log: the wall clock */
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
	int n = snprintf(line, sizeof line, "=== skein: start gen %llu restart %u at %s ===\n",
			 (unsigned long long)m->spec.gen, rc, ts);
	if (write(fd, line, (size_t)n) != n) SK_WARN("sup", "log of %s: header not written", m->st.id);
	return fd;
}

static int sup_spawn(sup_member *m)
{
	sup *s = m->s;
	char why[sizeof m->st.reason] = "";
	uint32_t rc = m->spec.restart_base + m->local;
	char rcvar[48];
	snprintf(rcvar, sizeof rcvar, "SKEIN_RESTART_COUNT=%u", rc);
	int logfd = sup_fd_high(sup_open_log(m, rc, why, sizeof why));
	int nullfd = sup_fd_high(open("/dev/null", O_RDONLY | O_CLOEXEC));
	char markvar[sizeof SUP_MARK_VAR + SUP_MARK_HEX + 2];
	snprintf(markvar, sizeof markvar, "%s=%s", SUP_MARK_VAR, s->mark);
	char membervar[sizeof SUP_MEMBER_VAR + SUP_ID_MAX + 1];
	snprintf(membervar, sizeof membervar, "%s=%s", SUP_MEMBER_VAR, m->st.id);
	char **envp = sup_build_env(m, rcvar, markvar, membervar);
	int cgfd = -1;
	if (s->cg_root && !m->cg[0]) {
		char cwhy[300];
		if (agent_cg_member_dir(s->cg_root, m->st.id, m->cg, sizeof m->cg, cwhy, sizeof cwhy) != 0) {
			SK_WARN("sup", "%s: no cgroup of its own (%s): its process group only", m->st.id, cwhy);
			m->cg[0] = 0;
		}
	}
	if (m->cg[0] && (cgfd = agent_cg_procs_fd(m->cg)) < 0) {
		SK_WARN("sup", "%s: cgroup %s: %s: its process group only", m->st.id, m->cg, strerror(errno));
		m->cg[0] = 0;
	}
	pid_t pid = -1;
	if (logfd < 0 || nullfd < 0 || !envp) {
		if (!why[0]) snprintf(why, sizeof why, "cannot start: %s", envp ? strerror(errno) : "out of memory");
	} else {
		char *argv[] = { "sh", "-c", (char *)m->spec.cmd, NULL };
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		sigemptyset(&dfl.sa_mask);
		/* all blocked across fork: no agent (libev) handler may run in the child */
		sigset_t all, old;
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, &old);
		long maxfd = sysconf(_SC_OPEN_MAX);
		if (maxfd < 0 || maxfd > SUP_CLOSE_MAX) maxfd = SUP_CLOSE_MAX;
		pid_t ppid = getpid();
		pid = fork();
		if (pid == 0) sup_child(ppid, nullfd, logfd, cgfd, (int)maxfd, &dfl, argv, envp);
		int e = errno;
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (pid < 0) snprintf(why, sizeof why, "cannot start: fork: %s", strerror(e));
	}
	if (logfd >= 0) close(logfd);
	if (nullfd >= 0) close(nullfd);
	free(envp);
	if (pid < 0) {
		if (cgfd >= 0) close(cgfd);
		SK_WARN("sup", "%s: %s", m->st.id, why);
		m->st.pid = 0;
		sup_set_state(m, SUP_FAILED, why);
		return -1;
	}
	/* the child does the same: whichever runs first, the group exists before
	 * we ever signal it (EACCES once it has exec'd is harmless) */
	setpgid(pid, pid);
	if (cgfd >= 0 && agent_cg_enter(cgfd, pid) != 0 && errno != ESRCH) {
		SK_WARN("sup", "%s: cannot enter cgroup %s: %s: its process group only", m->st.id, m->cg, strerror(errno));
		agent_cg_remove(m->cg);
		m->cg[0] = 0;
	}
	if (cgfd >= 0) close(cgfd);
	m->pgid = pid;
	m->st.pid = pid;
	sup_known_clear(m);
	m->st.restarts = rc;
	m->st.started_ms = sk_mono_ms();
	if (sup_starttime(pid, &m->starttime) != 0) m->starttime = 0;
	ev_child_set(&m->cw, pid, 0);
	ev_child_start(s->loop, &m->cw);
	sup_state_write(s);
	SK_INFO("sup", "%s: started gen %llu pid %d restart %u", m->st.id, (unsigned long long)m->spec.gen, (int)pid, rc);
	sup_set_state(m, SUP_RUNNING, NULL);
	return 0;
}

static void sup_start_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	sup_member *m = w->data;
	if (!m->stopping && !m->st.pid) sup_spawn(m);
}

/* ---- stop ---- */

/* The group is gone: do what the stop was for.  May free m. */
static void sup_stop_done(sup_member *m)
{
	sup *s = m->s;
	m->stopping = false;
	m->killed = false;
	m->pgid = 0;
	if (m->nkn) {
		sup_known_clear(m);
		sup_state_write(s);
	}
	if (m->cg[0] && agent_cg_remove(m->cg) == 0) m->cg[0] = 0;
	ev_timer_stop(s->loop, &m->stop_w);
	switch (m->then) {
	case SUP_THEN_START:
		sup_schedule(m, m->spec.start_delay_ms, SUP_STARTING, NULL);
		break;
	case SUP_THEN_FAIL:
		sup_set_state(m, SUP_FAILED, m->why);
		break;
	case SUP_THEN_FORGET:
		SK_INFO("sup", "%s: stopped and removed", m->st.id);
		sup_set_state(m, SUP_STOPPED, "removed from the order");
		sup_forget(m);
		break;
	case SUP_THEN_NONE:
		m->st.state = SUP_STOPPED;
		break;
	}
}

/* Advances a stop: SIGKILL when the grace is over; done once the leader is
 * reaped and the group empty.  May free m. */
static void sup_stop_step(sup_member *m)
{
	sup *s = m->s;
	uint64_t now = sk_mono_ms();
	ev_timer_stop(s->loop, &m->stop_w);
	if (!m->killed && now >= m->kill_at) {
		if (sup_member_alive(m)) {
			SK_INFO("sup", "%s: group %d still there after the grace: SIGKILL", m->st.id, (int)m->pgid);
			sup_member_kill(m, SIGKILL);
		}
		m->killed = true;
		m->kill_at = now;
	}
	uint64_t wait;
	if (m->st.pid) { /* its exit wakes us; until then only the KILL deadline matters */
		if (m->killed) return;
		wait = m->kill_at - now;
	} else if (!sup_member_alive(m)) {
		sup_stop_done(m);
		return;
	} else if (m->killed && now - m->kill_at >= SUP_GONE_CAP_MS) {
		SK_WARN("sup", "%s: group %d not empty %d ms after SIGKILL (unreaped zombies?): treated as gone",
			m->st.id, (int)m->pgid, SUP_GONE_CAP_MS);
		sup_stop_done(m);
		return;
	} else {
		wait = SUP_GONE_POLL_MS;
		if (!m->killed && m->kill_at - now < wait) wait = m->kill_at - now;
	}
	ev_timer_set(&m->stop_w, wait / 1000.0, 0);
	ev_timer_start(s->loop, &m->stop_w);
}

static void sup_stop_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	sup_stop_step(w->data);
}

/* TERM the group of a running member (or re-aim a stop under way). */
static void sup_stop(sup_member *m, sup_then then)
{
	ev_timer_stop(m->s->loop, &m->start_w);
	m->then = then;
	if (m->stopping) return;
	m->stopping = true;
	m->killed = false;
	m->kill_at = sk_mono_ms() + m->spec.stop_grace_ms;
	sup_member_kill(m, SIGTERM);
	sup_member_kill(m, SIGCONT); /* a stopped (SIGSTOP) group would hold the TERM until the KILL */
	sup_stop_step(m); /* the leader is not reaped yet: only arms the KILL timer */
}

/* ---- exit ---- */

static void sup_child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
	sup_member *m = w->data;
	sup *s = m->s;
	int status = w->rstatus;
	ev_child_stop(loop, w);
	m->st.pid = 0;
	m->st.exited_ms = sk_mono_ms();
	m->st.last_exit = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
	sup_state_write(s);
	if (m->stopping) {
		SK_INFO("sup", "%s: stopped (exit %d)", m->st.id, m->st.last_exit);
		sup_stop_step(m); /* may free m */
		return;
	}
	/* the leader is the member: what it leaves behind dies with it (without
	 * a cgroup, the walk also finds what left its group) */
	if (sup_member_alive(m) || !m->cg[0]) {
		SK_INFO("sup", "%s: killing what its group %d left behind", m->st.id, (int)m->pgid);
		sup_member_kill(m, SIGKILL);
	}
	m->pgid = 0;
	char what[48], why[sizeof m->st.reason];
	if (m->st.last_exit < 0)
		snprintf(what, sizeof what, "killed by signal %d", -m->st.last_exit);
	else
		snprintf(what, sizeof what, "exited with status %d", m->st.last_exit);
	uint64_t ran = m->st.exited_ms - m->st.started_ms;
	if (m->spec.local_restart) {
		if (m->spec.max_restarts >= 0 && m->local >= (uint32_t)m->spec.max_restarts) {
			snprintf(why, sizeof why, "exited %u times, max-restarts %d reached", m->local + 1,
				 m->spec.max_restarts);
			SK_WARN("sup", "%s: %s (last: %s)", m->st.id, why, what);
			sup_set_state(m, SUP_FAILED, why);
			return;
		}
		if (ran >= SUP_QUICK_RUN_MS) m->quick = 0;
		uint64_t backoff = (uint64_t)m->spec.backoff_min_ms << (m->quick < 32 ? m->quick : 32);
		if (backoff > m->spec.backoff_max_ms) backoff = m->spec.backoff_max_ms;
		if (backoff < m->spec.backoff_min_ms) backoff = m->spec.backoff_min_ms; /* max < min: min wins */
		if (ran < SUP_QUICK_RUN_MS && m->quick < 64) m->quick++;
		m->local++;
		snprintf(why, sizeof why, "%s; restart %u in %llu ms", what, m->local, (unsigned long long)backoff);
		SK_INFO("sup", "%s: %s", m->st.id, why);
		sup_schedule(m, (uint32_t)backoff, SUP_RESTARTING, why);
		return;
	}
	SK_INFO("sup", "%s: %s after %llu ms", m->st.id, what, (unsigned long long)ran);
	sup_set_state(m, m->st.last_exit == 0 ? SUP_STOPPED : SUP_FAILED, what);
}

/* Every SUP_TRACK_MS: the descendants of the members that run without a
 * cgroup, remembered before they can leave the tree (see sup_member_walk). */
static void sup_track_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	sup *s = w->data;
	bool any = false, dirty = false;
	for (size_t i = 0; i < s->n && !any; i++) any = !s->m[i]->cg[0] && (s->m[i]->st.pid || s->m[i]->stopping);
	if (!any) return;
	size_t n; /* one snapshot for all of them */
	sup_proc *ps = sup_procs(&n);
	bool *in = ps ? calloc(n ? n : 1, sizeof *in) : NULL;
	char *envbuf = in ? malloc(SUP_ENVIRON_MAX) : NULL;
	for (size_t i = 0; envbuf && i < s->n; i++) {
		sup_member *m = s->m[i];
		if (!m->cg[0] && (m->st.pid || m->stopping) && sup_member_walk_in(m, ps, n, 0, in, envbuf)) dirty = true;
	}
	free(envbuf);
	free(in);
	free(ps);
	if (dirty) sup_state_write(s);
}

/* ---- public ---- */

sup *sup_new(struct ev_loop *loop, const char *log_dir, const char *state_file, sup_event_fn cb, void *ud,
	     char *err, size_t errlen)
{
	if (!loop || !ev_is_default_loop(loop)) {
		sup_errf(err, errlen, "%s", "sup needs the default libev loop (child watchers)");
		return NULL;
	}
	if (log_dir) {
		char why[300];
		int fd = agent_dir_open(log_dir, true, why, sizeof why);
		if (fd < 0) {
			sup_errf(err, errlen, "member log folder: %s", why);
			return NULL;
		}
		close(fd);
	}
	sup *s = calloc(1, sizeof *s);
	if (!s || (log_dir && !(s->log_dir = strdup(log_dir))) || (state_file && !(s->state_file = strdup(state_file)))) {
		if (s) free(s->log_dir);
		free(s);
		sup_errf(err, errlen, "%s", "out of memory");
		return NULL;
	}
	s->loop = loop;
	s->cb = cb;
	s->ud = ud;
	ev_timer_init(&s->evq_w, sup_evq_cb, 0, 0);
	s->evq_w.data = s;
	ev_timer_init(&s->track_w, sup_track_cb, SUP_TRACK_MS / 1000.0, SUP_TRACK_MS / 1000.0);
	s->track_w.data = s;
	ev_timer_start(loop, &s->track_w);
	ev_unref(loop); /* tracking alone does not keep the loop running */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		SK_WARN("sup", "cannot become a child subreaper (%s): orphans of members go to init", strerror(errno));
	uint8_t r[SUP_MARK_HEX / 2];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
		/* not secret, only unique: time and pid will do */
		uint64_t t = sk_mono_ms() ^ (uint64_t)getpid() << 40;
		for (size_t i = 0; i < sizeof r; i++) r[i] = (uint8_t)(t >> (i % 8 * 8)) ^ (uint8_t)i;
	}
	for (size_t i = 0; i < sizeof r; i++) snprintf(s->mark + 2 * i, 3, "%02x", r[i]);
	if (state_file) {
		sup_state_cleanup(state_file);
		sup_state_write(s);
	}
	return s;
}

void sup_set(sup *s, const sup_spec *specs, size_t n)
{
	for (size_t i = 0; i < s->n; i++) s->m[i]->seen = false;
	for (size_t i = 0; i < n; i++) {
		const sup_spec *sp = &specs[i];
		char id[SUP_ID_MAX], why[sizeof ((sup_status *)0)->reason] = "";
		snprintf(id, sizeof id, "%.*s", SUP_ID_MAX - 1, sp->id);
		sup_member *m = sup_find(s, id, NULL);
		if (m && m->seen) {
			SK_WARN("sup", "%s: listed twice in one order, the second ignored", id);
			continue;
		}
		bool bad = sup_check_spec(sp, why, sizeof why) != 0;
		if (!m) {
			if (!(m = sup_member_new(s, sp))) continue;
			m->seen = true;
			if ((m->bad = bad)) {
				SK_WARN("sup", "%s: %s", m->st.id, why);
				sup_set_state(m, SUP_FAILED, why);
			} else {
				sup_schedule(m, sp->start_delay_ms, SUP_STARTING, NULL);
			}
			continue;
		}
		m->seen = true;
		if (sp->gen < m->spec.gen) {
			/* an order older than what runs (a head that had not caught up):
			 * never go back a generation */
			SK_WARN("sup", "%s: order for gen %llu ignored, gen %llu is newer", id, (unsigned long long)sp->gen,
				(unsigned long long)m->spec.gen);
			continue;
		}
		if (sp->gen == m->spec.gen) {
			if (m->stopping && m->then == SUP_THEN_FORGET) {
				/* removed, then ordered again: the TERM is sent, start it anew once gone */
				m->then = SUP_THEN_START;
				continue;
			}
			/* not started yet in this generation (held, or waiting for its delay): take
			 * the newest command and environment, e.g. the MASTER_PORT a hold waited for */
			bool unstarted = (!m->st.pid && !m->stopping &&
					  (m->st.state == SUP_PENDING || m->st.state == SUP_STARTING)) ||
					 (m->stopping && m->then == SUP_THEN_START); /* its old process is still going */
			if (!m->bad && unstarted && !sup_spec_same(&m->spec, sp)) {
				sup_spec fresh;
				bool was_hold = m->spec.hold;
				if (sup_spec_copy(&fresh, sp) == 0) {
					sup_spec_free(&m->spec);
					m->spec = fresh;
					m->spec.hold = was_hold; /* applied below */
				} else {
					sup_spec_free(&fresh);
				}
			}
			if (!m->bad && !sup_spec_same(&m->spec, sp) && m->noted_gen != sp->gen + 1) {
				SK_DEBUG("sup", "%s: command or environment changed without a new gen %llu: ignored", id,
					 (unsigned long long)sp->gen);
				m->noted_gen = sp->gen + 1;
			}
			/* holding is not part of the member: a release starts it, a hold parks one not started */
			if (m->spec.hold != sp->hold && !m->bad) {
				m->spec.hold = sp->hold;
				if (!m->stopping && !m->st.pid &&
				    ((!sp->hold && m->st.state == SUP_PENDING) || (sp->hold && m->st.state == SUP_STARTING)))
					sup_schedule(m, m->spec.start_delay_ms, SUP_STARTING, NULL);
			}
			continue;
		}
		/* a new generation */
		sup_spec fresh;
		if (sup_spec_copy(&fresh, sp) != 0) {
			sup_spec_free(&fresh);
			SK_ERROR("sup", "%s: out of memory: new generation ignored", id);
			continue;
		}
		SK_INFO("sup", "%s: gen %llu -> %llu", id, (unsigned long long)m->spec.gen, (unsigned long long)sp->gen);
		sup_spec_free(&m->spec);
		m->spec = fresh;
		m->bad = bad;
		m->local = 0;
		m->quick = 0;
		m->st.gen = sp->gen;
		if (m->st.pid || m->stopping) {
			sup_stop(m, bad ? SUP_THEN_FAIL : SUP_THEN_START);
			snprintf(m->why, sizeof m->why, "%s", why);
			sup_set_state(m, SUP_PENDING, "waiting for the old process to exit");
		} else if (bad) {
			ev_timer_stop(s->loop, &m->start_w);
			sup_set_state(m, SUP_FAILED, why);
		} else {
			sup_schedule(m, sp->start_delay_ms, SUP_STARTING, NULL);
		}
	}
	for (size_t i = s->n; i-- > 0;) {
		sup_member *m = s->m[i];
		if (m->seen) continue;
		if (m->st.pid || m->stopping) {
			if (m->then != SUP_THEN_FORGET || !m->stopping) {
				SK_INFO("sup", "%s: no longer ordered: stopping pid %d", m->st.id, (int)m->st.pid);
				sup_stop(m, SUP_THEN_FORGET);
			}
		} else {
			sup_forget(m);
		}
	}
}

size_t sup_list(sup *s, sup_status *out, size_t cap)
{
	for (size_t i = 0; i < s->n && i < cap; i++) out[i] = s->m[i]->st;
	return s->n;
}

int sup_get(sup *s, const char *id, sup_status *out)
{
	sup_member *m = sup_find(s, id, NULL);
	if (!m) return -1;
	if (out) *out = m->st;
	return 0;
}

void sup_stop_prefix(sup *s, const char *prefix, const char *why)
{
	size_t pl = strlen(prefix);
	for (size_t i = 0; i < s->n; i++) {
		sup_member *m = s->m[i];
		if (strncmp(m->st.id, prefix, pl) != 0 || m->stopping || m->bad) continue;
		snprintf(m->why, sizeof m->why, "%s", why ? why : "stopped by the agent");
		if (m->st.pid) {
			SK_INFO("sup", "%s: stopping pid %d: %s", m->st.id, (int)m->st.pid, m->why);
			sup_stop(m, SUP_THEN_FAIL);
		} else if (m->st.state == SUP_STARTING || m->st.state == SUP_RESTARTING) {
			/* about to (re)start in the generation that failed: it waits too */
			ev_timer_stop(s->loop, &m->start_w);
			sup_set_state(m, SUP_FAILED, m->why);
		}
	}
}

int sup_log_read(sup *s, const char *id, uint64_t offset, size_t max, sk_buf *out, uint64_t *next, uint64_t *size)
{
	char why[200];
	int fd = sup_log_open(s, id, O_RDONLY, false, why, sizeof why);
	if (fd < 0) {
		if (errno != ENOENT) SK_WARN("sup", "log of %.*s not read: %s", SUP_ID_MAX, id, why);
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		close(fd);
		return -1;
	}
	uint64_t sz = (uint64_t)sb.st_size;
	if (offset > sz) offset = sz; /* truncated under the reader: it goes on from the end */
	uint64_t want = sz - offset < max ? sz - offset : max;
	char chunk[16384];
	while (want) {
		ssize_t r = pread(fd, chunk, want < sizeof chunk ? (size_t)want : sizeof chunk, (off_t)offset);
		if (r <= 0) break;
		sk_buf_add(out, chunk, (size_t)r);
		offset += (uint64_t)r;
		want -= (uint64_t)r;
	}
	close(fd);
	if (next) *next = offset;
	if (size) *size = sz;
	return 0;
}

static void sup_free_tick(struct ev_loop *loop, ev_timer *w, int revents) {}

/* Any member whose leader is unreaped or whose group is not empty yet. */
static bool sup_any(const sup *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->m[i]->st.pid || s->m[i]->stopping) return true;
	return false;
}

/* Runs the loop until `until` (ms) or nothing is left to wait for. */
static void sup_free_wait(sup *s, uint64_t until)
{
	ev_timer tick;
	ev_timer_init(&tick, sup_free_tick, SUP_FREE_TICK_MS / 1000.0, SUP_FREE_TICK_MS / 1000.0);
	ev_timer_start(s->loop, &tick);
	while (sup_any(s) && sk_mono_ms() < until) ev_run(s->loop, EVRUN_ONCE);
	ev_timer_stop(s->loop, &tick);
}

void sup_free(sup **ps, double max_wait_s)
{
	if (!ps || !*ps) return;
	sup *s = *ps;
	*ps = NULL;
	s->freeing = true;
	ev_timer_stop(s->loop, &s->evq_w);
	ev_ref(s->loop);
	ev_timer_stop(s->loop, &s->track_w);
	s->nevq = 0;
	for (size_t i = 0; i < s->n; i++) {
		sup_member *m = s->m[i];
		ev_timer_stop(s->loop, &m->start_w);
		if (m->st.pid || m->stopping) sup_stop(m, SUP_THEN_NONE);
	}
	if (max_wait_s < 0) max_wait_s = 0;
	sup_free_wait(s, sk_mono_ms() + (uint64_t)(max_wait_s * 1000));
	if (sup_any(s)) {
		for (size_t i = 0; i < s->n; i++) {
			sup_member *m = s->m[i];
			if (!m->stopping) continue;
			SK_WARN("sup", "%s: still running at shutdown: SIGKILL to group %d", m->st.id, (int)m->pgid);
			sup_member_kill(m, SIGKILL);
			m->killed = true;
			m->kill_at = sk_mono_ms();
		}
		sup_free_wait(s, sk_mono_ms() + SUP_FREE_REAP_MS);
	}
	for (size_t i = 0; i < s->n; i++) {
		sup_member *m = s->m[i];
		int st;
		if (m->st.pid && waitpid(m->st.pid, &st, WNOHANG) <= 0)
			SK_WARN("sup", "%s: pid %d not reaped at shutdown", m->st.id, (int)m->st.pid);
		ev_child_stop(s->loop, &m->cw);
		ev_timer_stop(s->loop, &m->start_w);
		ev_timer_stop(s->loop, &m->stop_w);
		if (m->cg[0]) agent_cg_remove(m->cg);
		sup_spec_free(&m->spec);
		free(m->kn);
		free(m);
	}
	if (s->cg_root && agent_cg_remove(s->cg_root) != 0)
		SK_WARN("sup", "cgroup %s not removed at shutdown: %s", s->cg_root, strerror(errno));
	if (s->state_file) {
		unlink(s->state_file);
		char tmp[PATH_MAX];
		if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", s->state_file) < sizeof tmp) unlink(tmp);
	}
	free(s->m);
	free(s->evq);
	free(s->log_dir);
	free(s->state_file);
	free(s->cg_root);
	free(s);
}

int sup_set_cgroup(sup *s, const char *dir)
{
	char *d = strdup(dir);
	if (!d) return -1;
	free(s->cg_root);
	s->cg_root = d;
	sup_state_write(s);
	return 0;
}
