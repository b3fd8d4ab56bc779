/* transfer/core/xfer_io.c: file helpers for the disk path and the journal.
 *
 * Every write loops until done and retries EINTR; every small file is
 * published atomically (temporary name, fsync, rename, fsync of the folder),
 * so a reader sees the old file or the new one, never a torn one.
 *
 * The disk-delta folder is hostile input (issue 23): other users may write
 * it and plant links or FIFOs, while we run as root.  So everything under it
 * goes through a kept folder descriptor: names are opened beneath it with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or, on kernels without
 * openat2, one component at a time with O_NOFOLLOW; files are created with
 * O_CREAT | O_EXCL | O_NOFOLLOW; trees are removed by unlinkat over fstatat'd
 * entries, never crossing a link or a mount; reads open with O_NONBLOCK and
 * insist on a regular file, so a FIFO cannot hang the reader. */
#include "transfer/core/xfer_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int xfer_write_all(int fd, const void *p, size_t n, xfer_err *err)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
		if (w < 0) {
			if (errno == EINTR) continue;
			return xfer_fail_errno(err, XFER_EIO, "write");
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int xfer_read_all(int fd, void *p, size_t n, xfer_err *err)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n > (1u << 30) ? (1u << 30) : n);
		if (r < 0) {
			if (errno == EINTR) continue;
			return xfer_fail_errno(err, XFER_EIO, "read");
		}
		if (r == 0) return xfer_fail(err, XFER_EFORMAT, "short read: %zu bytes missing", n);
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

enum {
	RMTREE_DEPTH_MAX = 16, /* our trees are two levels deep; more is someone else's */
};

/* One component: not empty, not "." or "..", no '/'. */
static int name_ok(const char *n, size_t len)
{
	if (len == 0 || len > 255) return 0;
	if (n[0] == '.' && (len == 1 || (len == 2 && n[1] == '.'))) return 0;
	return memchr(n, '/', len) == NULL;
}

int xfer_name_ok(const char *name) { return name && name_ok(name, strlen(name)); }

/* The fallback without openat2: each folder on the way with O_NOFOLLOW |
 * O_DIRECTORY, the last one with O_NOFOLLOW. */
static int open_walk(int dirfd, const char *rel, int flags, mode_t mode)
{
	int cur = dirfd;
	const char *p = rel;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		char part[256];
		if (!name_ok(p, len)) {
			if (cur != dirfd) close(cur);
			errno = EXDEV;
			return -1;
		}
		memcpy(part, p, len);
		part[len] = 0;
		int fd = slash ? openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			       : openat(cur, part, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		int e = errno;
		if (cur != dirfd) close(cur);
		if (fd < 0) {
			errno = e;
			return -1;
		}
		if (!slash) return fd;
		cur = fd;
		p = slash + 1;
	}
}

int xfer_open_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
	static int no_openat2; /* set once: the kernel said ENOSYS */
	if (!__atomic_load_n(&no_openat2, __ATOMIC_RELAXED) && !xfer_hooks.no_openat2) {
		struct open_how how = { .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
					.mode = (flags & O_CREAT) ? mode : 0,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
		long fd;
		do fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
		while (fd < 0 && errno == EAGAIN); /* a rename raced the lookup */
		if (fd >= 0 || errno != ENOSYS) return (int)fd;
		__atomic_store_n(&no_openat2, 1, __ATOMIC_RELAXED);
	}
	return open_walk(dirfd, rel, flags, mode);
}

int xfer_dir_open(const char *path, int create, xfer_err *err)
{
	if (create && mkdir(path, 0755) != 0 && errno != EEXIST)
		return xfer_fail_errno(err, XFER_EIO, "create folder %s", path);
	/* the folder itself must not be a link: a user who could write its
	 * parent would otherwise point it anywhere */
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ELOOP || errno == ENOTDIR)
			return xfer_fail(err, XFER_EIO, "folder %s: not a directory (a symbolic link is refused)", path);
		return xfer_fail_errno(err, XFER_EIO, "folder %s", path);
	}
	return fd;
}

/* Reads the whole regular file open at fd (closed here) of at most max
 * bytes, NUL-terminated; name says which in errors.  A FIFO or device in
 * place of the file fails the check (the callers open with O_NONBLOCK, so
 * the open itself never hangs). */
static int read_whole(int fd, const char *name, size_t max, char **out, size_t *len, xfer_err *err)
{
	char *buf = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0) { xfer_fail_errno(err, XFER_EIO, "stat %s", name); goto err; }
	if (!S_ISREG(st.st_mode)) { xfer_fail(err, XFER_EFORMAT, "%s: not a regular file", name); goto err; }
	if ((uint64_t)st.st_size > max) {
		xfer_fail(err, XFER_EFORMAT, "%s: %lld bytes, more than %zu", name, (long long)st.st_size, max);
		goto err;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) { xfer_fail(err, XFER_ENOMEM, "read %s: out of memory", name); goto err; }
	if (xfer_read_all(fd, buf, (size_t)st.st_size, err) != 0) {
		xfer_err_prefix(err, "%s", name);
		goto err;
	}
	buf[st.st_size] = 0;
	close(fd);
	*out = buf;
	*len = (size_t)st.st_size;
	return 0;
err:
	free(buf);
	close(fd);
	return -1;
}

int xfer_read_file_at(int dirfd, const char *rel, size_t max, char **out, size_t *len, xfer_err *err)
{
	int fd = xfer_open_beneath(dirfd, rel, O_RDONLY | O_NONBLOCK, 0);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "open %s", rel);
	return read_whole(fd, rel, max, out, len, err);
}

int xfer_read_file(const char *path, char **out, size_t *len, xfer_err *err)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "open %s", path);
	return read_whole(fd, path, SIZE_MAX, out, len, err);
}

int xfer_fsync_dir(const char *dir, xfer_err *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "open folder %s", dir);
	int rc = fsync(fd);
	close(fd);
	if (rc != 0) return xfer_fail_errno(err, XFER_EIO, "fsync folder %s", dir);
	return 0;
}

int xfer_write_file_atomic_at(int dirfd, const char *name, const void *p, size_t n, xfer_err *err)
{
	char tmp[300];
	if (!xfer_name_ok(name)) return xfer_fail(err, XFER_EINVAL, "file name \"%.80s\" is not one plain name", name);
	snprintf(tmp, sizeof tmp, ".tmp.%s.%d", name, (int)getpid());
	/* O_EXCL | O_NOFOLLOW: never write through what someone planted under
	 * our temporary name; a leftover (ours or not) is unlinked, not followed */
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 && errno == EEXIST && xfer_rmtree_at(dirfd, tmp) == 0)
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "create %s", tmp);
	if (xfer_write_all(fd, p, n, err) != 0) goto err;
	if (fsync(fd) != 0) { xfer_fail_errno(err, XFER_EIO, "fsync %s", tmp); goto err; }
	close(fd);
	fd = -1;
	/* renameat replaces a link at name, never what it points to */
	if (renameat(dirfd, tmp, dirfd, name) != 0) { xfer_fail_errno(err, XFER_EIO, "rename %s", tmp); goto err; }
	if (fsync(dirfd) != 0) return xfer_fail_errno(err, XFER_EIO, "fsync folder of %s", name);
	return 0;
err:
	if (fd >= 0) close(fd);
	unlinkat(dirfd, tmp, 0);
	return -1;
}

int xfer_write_file_atomic(const char *dir, const char *name, const void *p, size_t n,
			   xfer_err *err)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) return xfer_fail_errno(err, XFER_EIO, "open folder %s", dir);
	int rc = xfer_write_file_atomic_at(dfd, name, p, n, err);
	if (rc != 0) xfer_err_prefix(err, "%s", dir);
	close(dfd);
	return rc;
}

static int rmtree_at(int dirfd, const char *name, dev_t dev, int depth)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
	/* a link, FIFO or file: the name goes, whatever it points to stays */
	if (!S_ISDIR(st.st_mode)) return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	if (st.st_dev != dev || depth >= RMTREE_DEPTH_MAX) {
		errno = st.st_dev != dev ? EXDEV : ELOOP; /* a mount point, or deeper than anything we make */
		return -1;
	}
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) return -1;
	struct stat st2;
	if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino) {
		close(fd); /* swapped between the stat and the open */
		errno = EAGAIN;
		return -1;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
		if (rmtree_at(fd, e->d_name, dev, depth + 1) != 0) rc = -1;
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) rc = -1;
	return rc;
}

int xfer_rmtree_at(int dirfd, const char *name)
{
	struct stat st;
	if (!xfer_name_ok(name)) {
		errno = EINVAL;
		return -1;
	}
	if (fstat(dirfd, &st) != 0) return -1;
	return rmtree_at(dirfd, name, st.st_dev, 0);
}

int xfer_rmtree(const char *path)
{
	/* the parent by path (the caller's), the rest by descriptor */
	char parent[4096], whole[4096];
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/') n--; /* "dir/" is dir */
	if (n >= sizeof whole) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(whole, path, n);
	whole[n] = 0;
	path = whole;
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	if (slash == path) snprintf(parent, sizeof parent, "/");
	else if (slash) snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
	else snprintf(parent, sizeof parent, ".");
	int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) return errno == ENOENT ? 0 : -1;
	int rc = xfer_rmtree_at(dfd, base);
	close(dfd);
	return rc;
}
