/* transfer/xfer_io.c: file helpers for the disk path and the journal.
 *
 * Every write loops until done and retries EINTR; every small file is
 * published atomically (temporary name, fsync, rename, fsync of the folder),
 * so a reader sees the old file or the new one, never a torn one. */
#include "transfer/xfer_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int xfer_read_file(const char *path, char **out, size_t *len, xfer_err *err)
{
	char *buf = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "open %s", path);
	struct stat st;
	if (fstat(fd, &st) != 0) { xfer_fail_errno(err, XFER_EIO, "stat %s", path); goto err; }
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) { xfer_fail(err, XFER_ENOMEM, "read %s: out of memory", path); goto err; }
	if (xfer_read_all(fd, buf, (size_t)st.st_size, err) != 0) {
		xfer_err_prefix(err, "%s", path);
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

int xfer_fsync_dir(const char *dir, xfer_err *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "open folder %s", dir);
	int rc = fsync(fd);
	close(fd);
	if (rc != 0) return xfer_fail_errno(err, XFER_EIO, "fsync folder %s", dir);
	return 0;
}

int xfer_write_file_atomic(const char *dir, const char *name, const void *p, size_t n,
			   xfer_err *err)
{
	char tmp[4096], dst[4096];
	snprintf(tmp, sizeof tmp, "%s/.tmp.%s.%d", dir, name, (int)getpid());
	snprintf(dst, sizeof dst, "%s/%s", dir, name);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) return xfer_fail_errno(err, XFER_EIO, "create %s", tmp);
	if (xfer_write_all(fd, p, n, err) != 0) goto err;
	if (fsync(fd) != 0) { xfer_fail_errno(err, XFER_EIO, "fsync %s", tmp); goto err; }
	close(fd);
	fd = -1;
	if (rename(tmp, dst) != 0) { xfer_fail_errno(err, XFER_EIO, "rename %s", tmp); goto err; }
	return xfer_fsync_dir(dir, err);
err:
	if (fd >= 0) close(fd);
	unlink(tmp);
	return -1;
}

int xfer_rmtree(const char *path)
{
	DIR *d = opendir(path);
	if (!d) return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
		char sub[4096];
		snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
		if (xfer_rmtree(sub) != 0) rc = -1;
	}
	closedir(d);
	if (rmdir(path) != 0) rc = -1;
	return rc;
}
