/* common/sk_file: see sk_file.h. */
#include "common/sk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR) continue;
		if (k <= 0) return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int sk_file_write_atomic(const char *dir, const char *name, const void *data, size_t len, mode_t mode,
			 bool fsync_on, char *err, size_t errlen)
{
	char path[4200], tmp[4210];
	if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
		snprintf(err, errlen, "path too long: %s/%s", dir, name);
		return -1;
	}
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0) { snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno)); return -1; }
	if (write_all(fd, data, len) != 0 || (fsync_on && fsync(fd) != 0)) {
		snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		snprintf(err, errlen, "cannot rename %s: %s", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (!fsync_on) return 0;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) != 0) {
		snprintf(err, errlen, "cannot sync folder %s: %s", dir, strerror(errno));
		if (dfd >= 0) close(dfd);
		return -1;
	}
	close(dfd);
	return 0;
}
