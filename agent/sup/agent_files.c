/* agent/agent_files: see agent_files.h. */
#include "agent/sup/agent_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Ours: owned by our effective uid.  A mode with group/other bits is fixed. */
static int own_fd(int fd, mode_t want, const char *name, char *why, size_t wl)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		snprintf(why, wl, "%s: %s", name, strerror(errno));
		return -1;
	}
	if (st.st_uid != geteuid()) {
		snprintf(why, wl, "%s is owned by uid %u, not by us (uid %u): refused", name, (unsigned)st.st_uid,
			 (unsigned)geteuid());
		return -1;
	}
	if ((st.st_mode & 07777) != want && fchmod(fd, want) != 0) {
		snprintf(why, wl, "%s: cannot set mode %o: %s", name, (unsigned)want, strerror(errno));
		return -1;
	}
	return 0;
}

int agent_dir_open_at(int dirfd, const char *name, bool create, char *why, size_t wl)
{
	if (create && mkdirat(dirfd, name, 0700) != 0 && errno != EEXIST) {
		snprintf(why, wl, "cannot create %s: %s", name, strerror(errno));
		return -1;
	}
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		struct stat st;
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			snprintf(why, wl, "%s is a symbolic link: refused", name);
		else
			snprintf(why, wl, "%s: %s", name, strerror(e));
		errno = e;
		return -1;
	}
	if (own_fd(fd, 0700, name, why, wl) != 0) {
		close(fd);
		errno = EPERM;
		return -1;
	}
	return fd;
}

int agent_dir_open(const char *path, bool create, char *why, size_t wl)
{
	char p[PATH_MAX];
	if (!path[0] || (size_t)snprintf(p, sizeof p, "%s", path) >= sizeof p) {
		snprintf(why, wl, "folder path empty or too long");
		return -1;
	}
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/') p[--n] = 0;
	for (char *s = p + 1; create && *s; s++) {
		if (*s != '/') continue;
		*s = 0;
		if (mkdir(p, 0700) != 0 && errno != EEXIST) {
			snprintf(why, wl, "cannot create %s: %s", p, strerror(errno));
			return -1;
		}
		*s = '/';
	}
	return agent_dir_open_at(AT_FDCWD, p, create, why, wl);
}

int agent_file_open_at(int dirfd, const char *name, int flags, char *why, size_t wl)
{
	int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
	if (fd < 0) {
		snprintf(why, wl, errno == ELOOP ? "%s is a symbolic link: refused" : "%s: %s", name, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, wl, "%s is not a regular file: refused", name);
		close(fd);
		return -1;
	}
	/* O_NONBLOCK only so that a FIFO planted there cannot block the open */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	if ((flags & O_ACCMODE) != O_RDONLY && own_fd(fd, 0600, name, why, wl) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A folder nobody but us (or root) could have put anything in. */
static bool trusted_parent(const char *path, bool must_be_ours)
{
	struct stat st;
	if (!path || path[0] != '/' || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
	if (must_be_ours) return st.st_uid == geteuid() && (st.st_mode & 077) == 0;
	return (st.st_uid == geteuid() || st.st_uid == 0) && (st.st_mode & 022) == 0;
}

static int use_dir(const char *path, char *out, size_t cap, char *why, size_t wl)
{
	int fd = agent_dir_open(path, true, why, wl);
	if (fd < 0) return -1;
	close(fd);
	if ((size_t)snprintf(out, cap, "%s", path) >= cap) {
		snprintf(why, wl, "%s: path too long", path);
		return -1;
	}
	return 0;
}

int agent_run_dir_pick(const char *name, const char *data_dir, char *out, size_t cap, char *why, size_t wl)
{
	if (data_dir && data_dir[0]) {
		/* the operator's choice (a hostPath, a link to a disk): created 0700 when
		 * missing, otherwise taken as it is; what we create in it is checked */
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%s", data_dir);
		for (char *s = p + 1; *s; s++) {
			if (*s != '/') continue;
			*s = 0;
			mkdir(p, 0700);
			*s = '/';
		}
		struct stat st;
		int e = 0;
		if (mkdir(p, 0700) != 0 && errno != EEXIST) e = errno;
		else if (stat(p, &st) != 0) e = errno;
		else if (!S_ISDIR(st.st_mode)) e = ENOTDIR;
		if (e) {
			snprintf(why, wl, "cannot create data directory %s: %s", data_dir, strerror(e));
			return -1;
		}
		if ((size_t)snprintf(out, cap, "%s", data_dir) >= cap) {
			snprintf(why, wl, "--data-dir: path too long");
			return -1;
		}
		return 0;
	}
	char safe[64], path[PATH_MAX];
	size_t k = 0;
	for (const char *c = name; *c && k < sizeof safe - 1; c++)
		safe[k++] = ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
			     *c == '_' || *c == '.' || *c == '-') ? *c : '_';
	safe[k] = 0;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (trusted_parent(xdg, true) && (size_t)snprintf(path, sizeof path, "%s/skeind-%s", xdg, safe) < sizeof path)
		return use_dir(path, out, cap, why, wl);
	if (geteuid() == 0 && trusted_parent("/run", false)) {
		snprintf(path, sizeof path, "/run/skeind-%s", safe);
		return use_dir(path, out, cap, why, wl);
	}
	/* a shared /tmp: a folder of a fixed name could be someone else's, a fresh one cannot */
	const char *tmp = getenv("TMPDIR");
	if (!tmp || tmp[0] != '/') tmp = "/tmp";
	if ((size_t)snprintf(path, sizeof path, "%s/skeind-%s.XXXXXX", tmp, safe) >= sizeof path || !mkdtemp(path)) {
		snprintf(why, wl, "cannot create a private folder in %s: %s", tmp, strerror(errno));
		return -1;
	}
	return use_dir(path, out, cap, why, wl);
}
