/* agent/agent_cgroup: see agent_cgroup.h. */
#include "agent/sup/agent_cgroup.h"
#include "common/sk_text.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

enum { CG_DEPTH_MAX = 4 };  /* agent folder / member leaf, with room to spare */
#define CG_CGROUP2_MAGIC 0x63677270UL /* CGROUP2_SUPER_MAGIC, linux/magic.h */

/* The cgroup2 mount point whose root holds `rel` (our path in
 * /proc/self/cgroup); out gets mount point + the rest of rel. */
static int cg_resolve(const char *rel, char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f) return -1;
	char line[4096];
	int rc = -1;
	while (rc < 0 && fgets(line, sizeof line, f)) {
		/* id parent maj:min root mountpoint options... - fstype source superopts */
		char root[PATH_MAX], mnt[PATH_MAX], *dash = strstr(line, " - ");
		if (!dash || strncmp(dash + 3, "cgroup2 ", 8) != 0) continue;
		if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2) continue;
		if (strchr(root, '\\') || strchr(mnt, '\\')) continue; /* escaped spaces: not ours to guess */
		size_t rl = strcmp(root, "/") ? strlen(root) : 0;
		if (rl && (strncmp(rel, root, rl) || (rel[rl] && rel[rl] != '/'))) continue;
		if ((size_t)snprintf(out, cap, "%s%s", mnt, rel + rl) < cap) rc = 0;
	}
	fclose(f);
	if (rc == 0) {
		size_t n = strlen(out);
		while (n > 1 && out[n - 1] == '/') out[--n] = 0;
	}
	return rc;
}

/* Our cgroup v2 folder, when writable. */
static int cg_self(char *out, size_t cap, char *why, size_t wl)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f) {
		snprintf(why, wl, "no /proc/self/cgroup");
		return -1;
	}
	char line[PATH_MAX + 16], rel[PATH_MAX] = "";
	bool found = false;
	while (!found && fgets(line, sizeof line, f))
		if (!strncmp(line, "0::", 3)) {
			snprintf(rel, sizeof rel, "%s", line + 3);
			rel[strcspn(rel, "\n")] = 0;
			found = true;
		}
	fclose(f);
	if (!found || rel[0] != '/' || strstr(rel, "/..")) {
		snprintf(why, wl, "no cgroup v2 hierarchy for this process");
		return -1;
	}
	if (cg_resolve(rel, out, cap) != 0) {
		snprintf(why, wl, "cgroup2 is not mounted where this process can see its cgroup %s", rel);
		return -1;
	}
	char procs[PATH_MAX + 16];
	snprintf(procs, sizeof procs, "%s/cgroup.procs", out);
	if (access(out, W_OK) != 0 || access(procs, W_OK) != 0) {
		snprintf(why, wl, "cgroup %s is not writable by us (delegate it: systemd Delegate=yes)", out);
		return -1;
	}
	return 0;
}

static int cg_mkdir(const char *dir, char *why, size_t wl)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		snprintf(why, wl, "cannot create cgroup %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

int agent_cg_agent_dir(const char *name, const char *run_dir, char *out, size_t cap, char *why, size_t wl)
{
	char self[PATH_MAX];
	if (cg_self(self, sizeof self, why, wl) != 0) return -1;
	uint64_t h = sk_str_hash(run_dir); /* of the private folder: one agent, one folder */
	char safe[48];
	size_t k = 0;
	for (const char *c = name; *c && k < sizeof safe - 1; c++)
		safe[k++] = ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
			     *c == '_' || *c == '-') ? *c : '_';
	safe[k] = 0;
	if ((size_t)snprintf(out, cap, "%s/skeind-%s-%08llx", self, safe, (unsigned long long)(h & 0xffffffffULL)) >= cap) {
		snprintf(why, wl, "cgroup path too long");
		return -1;
	}
	return 0; /* made with the first member: an agent that runs none leaves nothing */
}

int agent_cg_member_dir(const char *agent_dir, const char *id, char *out, size_t cap, char *why, size_t wl)
{
	const char *slash = strchr(id, '/');
	if (!slash || (size_t)snprintf(out, cap, "%s/m-%.*s@%s", agent_dir, (int)(slash - id), id, slash + 1) >= cap) {
		snprintf(why, wl, "bad member id or cgroup path too long");
		return -1;
	}
	return cg_mkdir(agent_dir, why, wl) == 0 ? cg_mkdir(out, why, wl) : -1;
}

int agent_cg_procs_fd(const char *dir)
{
	char p[PATH_MAX + 16];
	if ((size_t)snprintf(p, sizeof p, "%s/cgroup.procs", dir) >= sizeof p) return -1;
	return open(p, O_WRONLY | O_CLOEXEC);
}

int agent_cg_enter(int procs_fd, pid_t pid)
{
	char buf[24], *p = buf + sizeof buf;
	unsigned long v = (unsigned long)pid;
	do { *--p = (char)('0' + v % 10); v /= 10; } while (v);
	size_t n = (size_t)(buf + sizeof buf - p);
	return write(procs_fd, p, n) == (ssize_t)n ? 0 : -1;
}

static int cg_read(const char *dir, const char *file, char *buf, size_t cap)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	ssize_t n = read(fd, buf, cap - 1);
	close(fd);
	if (n < 0) return -1;
	buf[n] = 0;
	return (int)n;
}

bool agent_cg_populated(const char *dir)
{
	char buf[256];
	if (cg_read(dir, "cgroup.events", buf, sizeof buf) < 0) return false;
	return strstr(buf, "populated 1") != NULL;
}

/* Signals the processes of dir (not below). */
static int cg_signal_procs(const char *dir, int sig)
{
	char p[PATH_MAX + 16];
	snprintf(p, sizeof p, "%s/cgroup.procs", dir);
	FILE *f = fopen(p, "re");
	if (!f) return 0;
	int n = 0;
	long pid;
	while (fscanf(f, "%ld", &pid) == 1)
		if (pid > 1 && pid != (long)getpid() && kill((pid_t)pid, sig) == 0) n++;
	fclose(f);
	return n;
}

static int cg_signal_tree(const char *dir, int sig, int depth)
{
	int n = cg_signal_procs(dir, sig);
	DIR *d = depth < CG_DEPTH_MAX ? opendir(dir) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
		char sub[PATH_MAX];
		if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) < sizeof sub)
			n += cg_signal_tree(sub, sig, depth + 1);
	}
	if (d) closedir(d);
	return n;
}

int agent_cg_signal(const char *dir, int sig)
{
	if (sig == SIGKILL) {
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s/cgroup.kill", dir);
		int fd = open(p, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0) {
			bool ok = write(fd, "1", 1) == 1;
			close(fd);
			if (ok) return agent_cg_populated(dir) ? 1 : 0;
		}
	}
	return cg_signal_tree(dir, sig, 0);
}

static int cg_remove_tree(const char *dir, int depth)
{
	DIR *d = depth < CG_DEPTH_MAX ? opendir(dir) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
		char sub[PATH_MAX];
		if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) < sizeof sub) cg_remove_tree(sub, depth + 1);
	}
	if (d) closedir(d);
	return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

int agent_cg_remove(const char *dir)
{
	return cg_remove_tree(dir, 0);
}

bool agent_cg_path_ok(const char *dir)
{
	if (dir[0] != '/' || strstr(dir, "/..") || strstr(dir, "/./")) return false;
	const char *base = strrchr(dir, '/');
	if (!base || strncmp(base + 1, "skeind-", 7)) return false;
	/* a folder of a cgroup2 file system, not a look-alike elsewhere */
	struct statfs fs;
	struct stat st;
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && statfs(dir, &fs) == 0 &&
	       (unsigned long)fs.f_type == CG_CGROUP2_MAGIC;
}
