/* tests/unit/jobs_disk_dir_test: --update-weight-disk-dir as hostile input
 * (issue 23 item 2): system folders and the agent's data dir are refused,
 * lexically and through links; folders others can write are warned about. */
#include "tests/t.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs/job_spec.h"

static void refused(const char *dir, const char *data_dir, const char *why)
{
	char err[300] = "";
	if (job_disk_dir_check(dir, data_dir, err, sizeof err) != -1) T_FAIL("%s was accepted", dir);
	if (!strstr(err, why) || !strstr(err, "--update-weight-disk-dir") || strchr(err, '\n'))
		T_FAIL("%s: \"%s\" does not name %s on one line", dir, err, why);
}

static void accepted(const char *dir, const char *data_dir)
{
	char err[300] = "";
	if (job_disk_dir_check(dir, data_dir, err, sizeof err) != 0) T_FAIL("%s was refused: %s", dir, err);
}

T_TEST(disk_dir_normalize)
{
	char out[64];
	const char *cases[][2] = { { "/", "/" }, { "//a//b/", "/a/b" }, { "/a/./b/.", "/a/b" },
				   { "/a/b/../c", "/a/c" }, { "/../..", "/" }, { "/a/../../etc", "/etc" } };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		T_EQ(job_path_normalize(cases[i][0], out, sizeof out), 0);
		T_STREQ(out, cases[i][1]);
	}
	T_EQ(job_path_normalize("relative", out, sizeof out), -1);
	T_EQ(job_path_normalize("/0123456789/0123456789/0123456789/0123456789/0123456789/0123456789", out, sizeof out), -1);
}

T_TEST(disk_dir_refused_system_and_data_dirs)
{
	refused("/", NULL, "root folder");
	refused("/etc", NULL, "/etc");
	refused("/etc/skein", NULL, "/etc");
	refused("/usr/lib/x", NULL, "/usr");
	refused("/bin", NULL, "/bin");
	refused("/sbin/x", NULL, "/sbin");
	refused("/lib", NULL, "/lib*");
	refused("/lib64/x", NULL, "/lib*");
	refused("/boot", NULL, "/boot");
	refused("/proc/1", NULL, "/proc");
	refused("/sys/fs", NULL, "/sys");
	refused("/dev/shm/w", NULL, "/dev");
	refused("/var/lib/skein/raft", NULL, "/var/lib/skein");
	refused("/srv/skein-data", "/srv/skein-data", "data dir");
	refused("/srv/skein-data/w", "/srv/skein-data/", "data dir");
	/* lexical tricks */
	refused("/tmp/../etc", NULL, "/etc");
	refused("//etc//", NULL, "/etc");
	refused("/./etc/./cron.d/..", NULL, "/etc");
	refused("/tmp/a/../../usr/x", NULL, "/usr");
	refused("/..", NULL, "root folder");
	accepted("/etc2", NULL);
	accepted("/usr2/w", NULL);
	accepted("/var/lib/skein2", NULL);
	accepted("/srv/weights", "/srv/skein-data");
	accepted("/srv/skein-data2", "/srv/skein-data");
	accepted("", NULL); /* no folder */
}

/* A link to /etc on the way is refused by realpath, also for a folder
 * that does not exist yet. */
T_TEST(disk_dir_refused_through_a_link)
{
	char base[] = "/tmp/skein-diskdir-XXXXXX", l[128], sub[160];
	T_CHECK(mkdtemp(base));
	snprintf(l, sizeof l, "%s/l", base);
	T_EQ(symlink("/etc", l), 0);
	refused(l, NULL, "resolves to /etc");
	snprintf(sub, sizeof sub, "%s/new/deeper", l);
	refused(sub, NULL, "/etc");
	snprintf(sub, sizeof sub, "%s/data", base);
	T_EQ(mkdir(sub, 0700), 0);
	snprintf(l, sizeof l, "%s/tothedata", base);
	T_EQ(symlink(sub, l), 0);
	refused(l, sub, "data dir");
	unlink(l);
	rmdir(sub);
	snprintf(l, sizeof l, "%s/l", base);
	unlink(l);
	accepted(base, NULL);
	rmdir(base);
}

static void warned(const char *dir, const char *what)
{
	char w[400] = "";
	if (job_disk_dir_warning(dir, (unsigned)geteuid(), w, sizeof w) != 1) T_FAIL("%s: no warning", dir);
	if (!strstr(w, what) || strchr(w, '\n')) T_FAIL("%s: \"%s\" does not say %s", dir, w, what);
}

static void quiet(const char *dir)
{
	char w[400] = "";
	if (job_disk_dir_warning(dir, (unsigned)geteuid(), w, sizeof w) != 0) T_FAIL("%s: unexpected warning \"%s\"", dir, w);
}

static void mk(const char *base, const char *rel, mode_t mode, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", base, rel);
	T_EQ(mkdir(out, 0700), 0);
	T_EQ(chmod(out, mode), 0);
}

T_TEST(disk_dir_warnings)
{
	if (geteuid() != 0) printf("# not root: the ownership case (chown) is left out\n");
	char base[] = "/tmp/skein-diskdir-XXXXXX", open_[128], below[160], sticky[128], safe[160], own[128], p[200];
	T_CHECK(mkdtemp(base));
	T_EQ(chmod(base, 0755), 0);
	mk(base, "open", 0777, open_, sizeof open_);
	warned(open_, "writable by other users");
	mk(open_, "w", 0755, below, sizeof below);
	warned(below, "not sticky");
	snprintf(p, sizeof p, "%s/notyet", open_);
	warned(p, "not sticky"); /* the sender would make it in a folder others can swap */
	mk(base, "sticky", 01777, sticky, sizeof sticky);
	warned(sticky, "writable by other users"); /* the folder itself: others plant files */
	mk(sticky, "w", 0755, safe, sizeof safe);
	quiet(safe); /* a 0755 folder in a sticky one, like /tmp/x */
	snprintf(p, sizeof p, "%s/notyet", base);
	quiet(p);
	if (geteuid() == 0) {
		mk(base, "theirs", 0755, own, sizeof own);
		T_EQ(chown(own, 65534, 65534), 0);
		warned(own, "owned by uid 65534");
		rmdir(own);
	}
	rmdir(safe);
	rmdir(sticky);
	rmdir(below);
	rmdir(open_);
	rmdir(base);
}
