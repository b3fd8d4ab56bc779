/* tests/unit/xfer_disk_hostile_test.c: the disk-delta folder as hostile
 * input (issue 23 item 2).  Another user (uid 65534, made by a forked child
 * with setresuid; the planting is done as root where uid switching is not
 * possible) plants links and FIFOs in a 1777 and in a 0777 folder; the
 * sender, receiver, drop, gc and atomic write run as root.  A root 0700
 * folder and a 0600 file elsewhere must stay as they were, and nothing may
 * hang on a FIFO. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/update/update.h"
#include "transfer/core/xfer_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ATTACKER_UID = 65534 };

typedef struct {
	char *base;            /* t_tmpdir(): holds everything below */
	char victim[600];      /* root 0700 folder with a 0600 file and a subfolder */
	char vfile[700];       /* a root 0600 file elsewhere */
	char dir[600];         /* the disk folder, 1777 or 0777 */
	tmodel tr, en;
	sk_rng r;
} hrig;

static void put(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	T_CHECK(fd >= 0);
	T_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
	close(fd);
	T_EQ(chmod(path, mode), 0);
}

static void hrig_open(hrig *g, mode_t dir_mode)
{
	sk_rng_seed(&g->r, t_seed());
	g->base = t_tmpdir();
	T_EQ(chmod(g->base, 0755), 0);
	snprintf(g->victim, sizeof g->victim, "%s/victim", g->base);
	T_EQ(mkdir(g->victim, 0700), 0);
	char p[800];
	snprintf(p, sizeof p, "%s/secret", g->victim);
	put(p, "SECRET\n", 0600);
	snprintf(p, sizeof p, "%s/sub", g->victim);
	T_EQ(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/sub/deep", g->victim);
	put(p, "DEEP\n", 0600);
	snprintf(g->vfile, sizeof g->vfile, "%s/shadow600", g->base);
	put(g->vfile, "KEEP\n", 0600);
	snprintf(g->dir, sizeof g->dir, "%s/pub", g->base);
	T_EQ(mkdir(g->dir, 0755), 0);
	T_EQ(chmod(g->dir, dir_mode), 0);
	tm_make(&g->tr, &g->r, 500, 1);
	tm_make(&g->en, &g->r, 500, 0);
}

static void hrig_close(hrig *g)
{
	tm_free(&g->tr);
	tm_free(&g->en);
	t_rmdir(g->base);
}

static void expect_text(const char *path, const char *want, mode_t mode)
{
	char buf[64] = "";
	struct stat st;
	if (lstat(path, &st) != 0) T_FAIL("%s is gone (seed %llu)", path, (unsigned long long)t_seed());
	T_CHECK(S_ISREG(st.st_mode));
	T_EQ(st.st_mode & 07777, mode);
	int fd = open(path, O_RDONLY);
	T_CHECK(fd >= 0);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	T_CHECK(n >= 0);
	buf[n] = 0;
	T_STREQ(buf, want);
}

/* The victim folder and file are exactly as made. */
static void victim_intact(const hrig *g)
{
	char p[800];
	struct stat st;
	T_EQ(lstat(g->victim, &st), 0);
	T_CHECK(S_ISDIR(st.st_mode));
	T_EQ(st.st_mode & 07777, 0700);
	snprintf(p, sizeof p, "%s/secret", g->victim);
	expect_text(p, "SECRET\n", 0600);
	snprintf(p, sizeof p, "%s/sub/deep", g->victim);
	expect_text(p, "DEEP\n", 0600);
	expect_text(g->vfile, "KEEP\n", 0600);
}

/* Runs fn(arg) in a child as ATTACKER_UID (as root when that fails); the
 * child's failures fail the test. */
static void as_attacker(void (*fn)(const hrig *, const void *), const hrig *g, const void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	T_CHECK(pid >= 0);
	if (pid == 0) {
		if (setresgid(ATTACKER_UID, ATTACKER_UID, ATTACKER_UID) != 0 ||
		    setresuid(ATTACKER_UID, ATTACKER_UID, ATTACKER_UID) != 0)
			fprintf(stderr, "# uid switching unavailable (%s): planting as uid %u\n", strerror(errno),
				(unsigned)getuid());
		fn(g, arg);
		_exit(0);
	}
	T_EQ(t_wait_child(pid, 10000), 0);
}

static void must(int rc, const char *what)
{
	if (rc != 0) {
		fprintf(stderr, "attacker: %s: %s\n", what, strerror(errno));
		_exit(1);
	}
}

/* name in the folder -> target (a relative name under the folder). */
typedef struct {
	const char *name;
	const char *target;
} link_arg;

static void plant_link(const hrig *g, const void *arg)
{
	const link_arg *a = arg;
	char p[800];
	snprintf(p, sizeof p, "%s/%s", g->dir, a->name);
	must(symlink(a->target, p), "symlink");
}

/* e NULL: a failure fails the test. */
static xfer_endpoint *open_end(hrig *g, int role, const char *rid, int gc, xfer_err *e)
{
	xfer_config c;
	xfer_config_init(&c);
	c.path = "disk-delta";
	c.disk.dir = g->dir;
	c.disk.full_every = 1; /* every version full: gc may remove the older ones */
	c.disk.gc = gc;
	c.role = role;
	c.disk.receiver_id = rid;
	xfer_endpoint *ep = NULL;
	xfer_err mine;
	if (xfer_open(&ep, &c, role == XFER_SENDER ? g->tr.m : g->en.m, e ? e : &mine) == 0) return ep;
	if (!e) T_FAIL("open %s: %s", g->dir, mine.msg);
	return NULL;
}

/* Links planted where the sender's temporary folder, a version to drop and
 * a version to collect go: each is unlinked, never followed. */
static void links_removed_not_followed(mode_t mode)
{
	hrig g;
	hrig_open(&g, mode);
	xfer_endpoint *snd = open_end(&g, XFER_SENDER, NULL, 0, NULL);
	T_CHECK(snd);
	/* disk_send clears its temporary name before it makes it */
	char tmpname[64];
	snprintf(tmpname, sizeof tmpname, ".tmp.weight_v000001.%d", (int)getpid());
	link_arg tl = { tmpname, g.victim };
	as_attacker(plant_link, &g, &tl);
	xfer_err e;
	int rc = xfer_send(snd, 1, &e);
	victim_intact(&g); /* first: what the attack did matters more than the error */
	if (rc != 0) T_FAIL("send v1: %s", e.msg);
	/* a version the coordinator drops (an aborted update) */
	link_arg dl = { "weight_v000005", g.victim };
	as_attacker(plant_link, &g, &dl);
	rc = snd->ops->drop(snd, 5, &e);
	victim_intact(&g);
	if (rc != 0) T_FAIL("drop v5: %s", e.msg);
	struct stat st;
	char p[800];
	snprintf(p, sizeof p, "%s/weight_v000005", g.dir);
	T_EQ(lstat(p, &st), -1);
	/* gc of old versions: v2 is a link, v3 is full, so v2 goes */
	T_XOK(xfer_send(snd, 3, err_)); /* v3 full (full_every 1) */
	link_arg gl = { "weight_v000002", g.victim };
	as_attacker(plant_link, &g, &gl);
	int deleted = 0;
	T_XOK(xfer_disk_gc(g.dir, 1, &deleted, err_));
	victim_intact(&g);
	snprintf(p, sizeof p, "%s/weight_v000002", g.dir);
	T_EQ(lstat(p, &st), -1);
	/* the receiver still gets v3 */
	xfer_endpoint *rcv = open_end(&g, XFER_RECEIVER, "engine-0", 0, NULL);
	T_CHECK(rcv);
	uint64_t got = 0;
	T_XOK(xfer_receive(rcv, 0, &got, err_));
	T_EQ(got, 3);
	T_CHECK(tm_equal(&g.tr, &g.en));
	xfer_close(&rcv);
	xfer_close(&snd);
	victim_intact(&g);
	hrig_close(&g);
}

T_TEST(xfer_disk_hostile_links_sticky_1777) { links_removed_not_followed(01777); }
T_TEST(xfer_disk_hostile_links_open_0777) { links_removed_not_followed(0777); }

/* receivers/ as a link to the victim folder, and a receivers/ folder of the
 * attacker's with a link under the receiver's temporary name: the record is
 * refused or written beside, never through the link. */
static void plant_receivers_dir(const hrig *g, const void *arg)
{
	const char *rid = arg;
	char p[800];
	snprintf(p, sizeof p, "%s/receivers", g->dir);
	must(mkdir(p, 0777), "mkdir receivers");
	must(chmod(p, 0777), "chmod receivers");
	/* the receiver writes .tmp.<id>.<its pid> then renames it */
	snprintf(p, sizeof p, "%s/receivers/.tmp.%s.%d", g->dir, rid, (int)getppid());
	must(symlink(g->vfile, p), "symlink tmp");
	/* and the record itself a link: renamed over, never written through */
	snprintf(p, sizeof p, "%s/receivers/%s", g->dir, rid);
	must(symlink(g->vfile, p), "symlink record");
}

static void receivers_links(mode_t mode)
{
	hrig g;
	hrig_open(&g, mode);
	xfer_endpoint *snd = open_end(&g, XFER_SENDER, NULL, 0, NULL);
	T_CHECK(snd);
	T_XOK(xfer_send(snd, 1, err_));
	link_arg rl = { "receivers", g.victim };
	as_attacker(plant_link, &g, &rl);
	xfer_endpoint *rcv = open_end(&g, XFER_RECEIVER, "secret", 0, NULL);
	T_CHECK(rcv);
	xfer_err e;
	int rc = xfer_receive(rcv, 0, NULL, &e);
	victim_intact(&g);
	T_EQ(rc, -1);
	T_CHECK(strstr(e.msg, "receivers"));
	xfer_close(&rcv);
	/* the attacker's own receivers/ with a link under our temporary name */
	char p[800];
	snprintf(p, sizeof p, "%s/receivers", g.dir);
	T_EQ(unlink(p), 0);
	as_attacker(plant_receivers_dir, &g, "engine-1");
	rcv = open_end(&g, XFER_RECEIVER, "engine-1", 0, NULL);
	T_CHECK(rcv);
	uint64_t got = 0;
	T_XOK(xfer_receive(rcv, 0, &got, err_));
	T_EQ(got, 1);
	victim_intact(&g);
	/* the record is a file of ours, renamed over the attacker's link */
	char *txt = NULL;
	size_t len;
	snprintf(p, sizeof p, "%s/receivers/engine-1", g.dir);
	T_XOK(xfer_read_file(p, &txt, &len, err_));
	T_CHECK(!strncmp(txt, "version 1\n", 10));
	free(txt);
	xfer_close(&rcv);
	xfer_close(&snd);
	hrig_close(&g);
}

T_TEST(xfer_disk_hostile_receivers_sticky_1777) { receivers_links(01777); }
T_TEST(xfer_disk_hostile_receivers_open_0777) { receivers_links(0777); }

/* The same on the path kernels without openat2 take (O_NOFOLLOW per name). */
T_TEST(xfer_disk_hostile_without_openat2)
{
	xfer_hooks.no_openat2 = 1;
	links_removed_not_followed(0777);
	receivers_links(0777);
	xfer_hooks.no_openat2 = 0;
}

/* The beneath-open itself: a link on the way or at the end, and a name
 * climbing out, are refused with and without openat2. */
T_TEST(xfer_disk_hostile_open_beneath)
{
	hrig g;
	hrig_open(&g, 0755);
	char p[800];
	snprintf(p, sizeof p, "%s/real", g.dir);
	T_EQ(mkdir(p, 0755), 0);
	snprintf(p, sizeof p, "%s/real/f", g.dir);
	put(p, "x", 0644);
	snprintf(p, sizeof p, "%s/lnk", g.dir);
	T_EQ(symlink(g.victim, p), 0);
	snprintf(p, sizeof p, "%s/real/lf", g.dir);
	T_EQ(symlink(g.vfile, p), 0);
	int dfd = open(g.dir, O_RDONLY | O_DIRECTORY);
	T_CHECK(dfd >= 0);
	for (int mode = 0; mode < 2; mode++) {
		xfer_hooks.no_openat2 = mode;
		int fd = xfer_open_beneath(dfd, "real/f", O_RDONLY, 0);
		T_CHECK(fd >= 0);
		close(fd);
		T_EQ(xfer_open_beneath(dfd, "lnk/secret", O_RDONLY, 0), -1);
		T_CHECK(errno == ELOOP || errno == ENOTDIR); /* the walk: O_DIRECTORY | O_NOFOLLOW on a link */
		T_EQ(xfer_open_beneath(dfd, "real/lf", O_RDONLY, 0), -1);
		T_EQ(errno, ELOOP);
		T_EQ(xfer_open_beneath(dfd, "real/../../shadow600", O_RDONLY, 0), -1);
		T_EQ(xfer_open_beneath(dfd, "../shadow600", O_RDONLY, 0), -1);
	}
	xfer_hooks.no_openat2 = 0;
	close(dfd);
	victim_intact(&g);
	hrig_close(&g);
}

/* FIFOs where an index and a receiver's record are read: errors or
 * skipped, never a hang (the test's time limit would catch one). */
static void plant_fifos(const hrig *g, const void *arg)
{
	char p[800];
	(void)arg;
	snprintf(p, sizeof p, "%s/weight_v000002", g->dir);
	must(mkdir(p, 0777), "mkdir v2");
	snprintf(p, sizeof p, "%s/weight_v000002/index", g->dir);
	must(mkfifo(p, 0666), "mkfifo index");
	snprintf(p, sizeof p, "%s/receivers", g->dir);
	must(mkdir(p, 0777), "mkdir receivers");
	snprintf(p, sizeof p, "%s/receivers/engine-9", g->dir);
	must(mkfifo(p, 0666), "mkfifo receiver");
}

T_TEST_TIMEOUT(xfer_disk_hostile_fifos_do_not_hang, 20)
{
	hrig g;
	hrig_open(&g, 0777);
	xfer_endpoint *snd = open_end(&g, XFER_SENDER, NULL, 0, NULL);
	T_CHECK(snd);
	T_XOK(xfer_send(snd, 1, err_));
	as_attacker(plant_fifos, &g, NULL);
	xfer_endpoint *rcv = open_end(&g, XFER_RECEIVER, NULL, 0, NULL);
	T_CHECK(rcv);
	xfer_err e;
	T_EQ(xfer_receive(rcv, 0, NULL, &e), -1);
	T_CHECK(strstr(e.msg, "not a regular file"));
	int deleted = 0;
	T_XOK(xfer_disk_gc(g.dir, 1, &deleted, err_));
	xfer_close(&rcv);
	xfer_close(&snd);
	hrig_close(&g);
}

/* The folder itself a link: refused at open, by sender and receiver. */
T_TEST(xfer_disk_hostile_folder_is_a_link)
{
	hrig g;
	hrig_open(&g, 0777);
	char p[800];
	snprintf(p, sizeof p, "%s/pub", g.base);
	T_EQ(rmdir(p), 0);
	T_EQ(symlink(g.victim, p), 0);
	xfer_err e;
	T_CHECK(!open_end(&g, XFER_RECEIVER, NULL, 0, &e));
	T_CHECK(strstr(e.msg, "symbolic link"));
	T_CHECK(!open_end(&g, XFER_SENDER, NULL, 0, &e));
	victim_intact(&g);
	/* a receiver id of ".." (a slash already becomes "-") */
	T_EQ(unlink(p), 0);
	T_EQ(mkdir(p, 0755), 0);
	T_CHECK(!open_end(&g, XFER_RECEIVER, "..", 0, &e));
	T_CHECK(strstr(e.msg, "receiver id"));
	victim_intact(&g);
	hrig_close(&g);
}
