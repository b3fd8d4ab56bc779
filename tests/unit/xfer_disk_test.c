/* tests/unit/xfer_disk_test.c: the disk-delta path end to end in one
 * process: a sender and receivers on one temporary folder. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_int.h"

#include <fcntl.h>
#include <sys/stat.h>

typedef struct {
	char *dir;
	tmodel tr, en;          /* trainer (sender) and engine (receiver) weights */
	xfer_endpoint *snd, *rcv;
	sk_rng r;
} rig;

static void rig_open_sum(rig *g, int enc, int zstd, int full_every, uint64_t bucket, xfer_sum_kind sum)
{
	sk_rng_seed(&g->r, t_seed() ^ (uint64_t)(enc * 7 + zstd * 13 + full_every));
	g->dir = t_tmpdir();
	tm_make(&g->tr, &g->r, 3000, 1);
	tm_make(&g->en, &g->r, 3000, 0);
	xfer_config c;
	xfer_config_init(&c);
	c.path = "disk-delta";
	c.bucket_bytes = bucket;
	c.disk.dir = g->dir;
	c.disk.encoding = (xfer_encoding)enc;
	c.disk.zstd_level = zstd;
	c.disk.full_every = full_every;
	c.checksum = sum;
	c.role = XFER_SENDER;
	T_XOK(xfer_open(&g->snd, &c, g->tr.m, err_));
	c.role = XFER_RECEIVER;
	c.disk.receiver_id = "engine-0";
	T_XOK(xfer_open(&g->rcv, &c, g->en.m, err_));
}

static void rig_open(rig *g, int enc, int zstd, int full_every, uint64_t bucket)
{
	rig_open_sum(g, enc, zstd, full_every, bucket, XFER_SUM_XXH3_128);
}

static void rig_close(rig *g)
{
	xfer_close(&g->snd);
	xfer_close(&g->rcv);
	tm_free(&g->tr);
	tm_free(&g->en);
	t_rmdir(g->dir);
}

/* dir/rel into path; returns its size. */
static long file_at(const char *dir, const char *rel, char *path, size_t n)
{
	struct stat st;
	snprintf(path, n, "%s/%s", dir, rel);
	T_EQ(stat(path, &st), 0);
	return (long)st.st_size;
}

static void flip_byte(const char *path, long off)
{
	int fd = open(path, O_RDWR);
	T_CHECK(fd >= 0);
	unsigned char c;
	T_EQ(pread(fd, &c, 1, off), 1);
	c ^= 0x10;
	T_EQ(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

/* All dtypes, odd sizes, a tensor larger than a bucket, zero / some / all
 * changed: every encoding with and without zstd. */
T_TEST(xfer_disk_roundtrip_all_encodings)
{
	for (int enc = 0; enc < 2; enc++)
		for (int z = 0; z < 2; z++) {
			rig g;
			rig_open(&g, enc, z, 4, 1024);
			double fracs[] = { 0.01, 0.0, 1.0, 0.03, 0.01, 0.2 };
			for (uint64_t v = 1; v <= 6; v++) {
				if (v > 1) tm_step(&g.tr, &g.r, fracs[v - 1]);
				T_XOK(xfer_send(g.snd, v, err_));
				uint64_t got = 0;
				T_XOK(xfer_receive(g.rcv, 0, &got, err_));
				T_EQ(got, v);
				if (!tm_equal(&g.tr, &g.en)) T_FAIL("enc %d zstd %d v%llu differs", enc, z, (unsigned long long)v);
			}
			xfer_stats st = xfer_endpoint_stats(g.snd);
			T_CHECK(st.bytes_moved > 0);
			xfer_err e;
			T_EQ(xfer_receive(g.rcv, 0, NULL, &e), -1);
			T_EQ(e.code, XFER_ENOVERSION);
			rig_close(&g);
		}
}

/* The next receive fails on a checksum naming what; the engine's weights
 * are what they were before it. */
static void receive_fails_keeps(rig *g, const char *what)
{
	tmodel keep;
	tm_make(&keep, &g->r, 3000, 0);
	tm_copy(&keep, &g->en);
	xfer_err e;
	T_EQ(xfer_receive(g->rcv, 0, NULL, &e), -1);
	T_EQ(e.code, XFER_ECHECKSUM);
	T_CHECK(strstr(e.msg, what) && strstr(e.msg, "corrupt"));
	T_CHECK(tm_equal(&keep, &g->en));
	tm_free(&keep);
}

/* The tree checksum in the index (format 2): full and delta versions, both
 * encodings; a corrupted delta is still caught, by the tree sum. */
T_TEST(xfer_disk_tree_checksum_index)
{
	for (int enc = 0; enc < 2; enc++) {
		rig g;
		rig_open_sum(&g, enc, 0, 3, 1024, XFER_SUM_TREE);
		for (uint64_t v = 1; v <= 4; v++) {
			if (v > 1) tm_step(&g.tr, &g.r, v == 3 ? 1.0 : 0.02);
			T_XOK(xfer_send(g.snd, v, err_));
			T_XOK(xfer_receive(g.rcv, 0, NULL, err_));
			T_CHECK(tm_equal(&g.tr, &g.en));
		}
		char path[600], *txt;
		size_t len;
		file_at(g.dir, "weight_v000004/index", path, sizeof path);
		T_XOK(xfer_read_file(path, &txt, &len, err_));
		static const char head[] = "skein-weights 2\nchecksum tree-xxh3-256k\n";
		T_CHECK(len > sizeof head && !strncmp(txt, head, sizeof head - 1));
		free(txt);
		tm_step(&g.tr, &g.r, 0.05);
		T_XOK(xfer_send(g.snd, 5, err_));
		flip_byte(path, file_at(g.dir, "weight_v000005/data", path, sizeof path) - 1);
		receive_fails_keeps(&g, "version 5");
		rig_close(&g);
	}
}

/* A corrupted delta file is detected; the receiver keeps the version it had. */
T_TEST(xfer_disk_corrupt_delta_keeps_old_version)
{
	for (int enc = 0; enc < 2; enc++) {
		rig g;
		rig_open(&g, enc, enc, 100, 1 << 20);
		T_XOK(xfer_send(g.snd, 1, err_));
		T_XOK(xfer_receive(g.rcv, 0, NULL, err_));
		tm_step(&g.tr, &g.r, 0.05);
		T_XOK(xfer_send(g.snd, 2, err_));
		tm_step(&g.tr, &g.r, 0.05);
		T_XOK(xfer_send(g.snd, 3, err_));
		/* corrupt the last stored byte of version 3 (the big tensor's delta) */
		char path[600];
		flip_byte(path, file_at(g.dir, "weight_v000003/data", path, sizeof path) - 1);
		receive_fails_keeps(&g, "version 3"); /* v1 intact although v2 had been applied */
		rig_close(&g);
	}
}

/* A damaged index (torn or truncated) and a version from another chain get
 * clear errors; so does a receiver that registered another dtype. */
T_TEST(xfer_disk_bad_inputs)
{
	rig g;
	rig_open(&g, 0, 0, 100, 1 << 20);
	T_XOK(xfer_send(g.snd, 1, err_));
	tm_step(&g.tr, &g.r, 0.01);
	T_XOK(xfer_send(g.snd, 2, err_));
	char path[600];
	T_EQ(truncate(path, file_at(g.dir, "weight_v000002/index", path, sizeof path) / 2), 0);
	xfer_err e;
	T_EQ(xfer_receive(g.rcv, 0, NULL, &e), -1);
	T_EQ(e.code, XFER_EFORMAT);
	T_CHECK(strstr(e.msg, "truncated") || strstr(e.msg, "checksum of the index"));
	/* remove v2; publish v2 from a second sender (another chain) as a delta
	 * on its own v1, then put the first chain's v1 back under it */
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "rm -rf %s/weight_v000002 && mv %s/weight_v000001 %s/keep_v1", g.dir, g.dir, g.dir);
	T_EQ(system(cmd), 0);
	xfer_config c;
	xfer_config_init(&c);
	c.disk.dir = g.dir;
	c.role = XFER_SENDER;
	c.disk.gc = 0;
	xfer_endpoint *other;
	T_XOK(xfer_open(&other, &c, g.tr.m, err_));
	T_XOK(xfer_send(other, 1, err_));
	tm_step(&g.tr, &g.r, 0.01);
	T_XOK(xfer_send(other, 2, err_));
	xfer_close(&other);
	snprintf(cmd, sizeof cmd, "rm -rf %s/weight_v000001 && mv %s/keep_v1 %s/weight_v000001", g.dir, g.dir, g.dir);
	T_EQ(system(cmd), 0);
	T_EQ(xfer_receive(g.rcv, 0, NULL, &e), -1);
	T_EQ(e.code, XFER_ECHAIN);
	T_CHECK(strstr(e.msg, "another chain"));
	/* a receiver that registered f32 where the sender has bf16 */
	xfer_manifest *m = xfer_manifest_new();
	for (size_t i = 0; i < g.tr.n; i++) {
		const xfer_tensor *t = xfer_manifest_tensor(g.tr.m, i);
		xfer_dtype dt = t->dtype == XFER_BF16 ? XFER_F16 : t->dtype;
		T_XOK(xfer_manifest_add(m, t->name, dt, t->ndim, t->shape, g.en.p[i], XFER_MEM_HOST, err_));
	}
	xfer_endpoint *bad;
	c.role = XFER_RECEIVER;
	T_XOK(xfer_open(&bad, &c, m, err_));
	T_EQ(xfer_receive(bad, 0, NULL, &e), -1);
	T_EQ(e.code, XFER_EMISMATCH);
	T_CHECK(strstr(e.msg, "dtype bf16") && strstr(e.msg, "registered f16"));
	xfer_close(&bad);
	xfer_manifest_free(&m);
	/* an endpoint without a folder */
	c.disk.dir = NULL;
	T_EQ(xfer_open(&bad, &c, g.en.m, &e), -1);
	T_CHECK(strstr(e.msg, "cfg.disk.dir"));
	rig_close(&g);
}

/* A receiver that joins late catches up through the chain (from the version
 * it holds) or from the newest full version; gc keeps what is needed. */
/* The sender publishes a new full version and its gc deletes the chain a
 * late receiver has just planned: the receiver plans again from the new
 * full version instead of failing. */
static rig *race_rig;
static int race_calls;
static void race_publish(void *arg)
{
	rig *g = race_rig;
	(void)arg;
	if (race_calls++) return;
	tm_step(&g->tr, &g->r, 0.02);
	T_XOK(xfer_send(g->snd, 8, err_));
	T_XOK(xfer_receive(g->rcv, 0, NULL, err_));
	tm_step(&g->tr, &g->r, 0.02);
	T_XOK(xfer_send(g->snd, 9, err_)); /* full; gc deletes v5..v8 */
}

T_TEST(xfer_disk_catch_up_survives_gc_race)
{
	rig g;
	rig_open(&g, 1, 1, 4, 4096); /* full at v1, v5, v9 */
	for (uint64_t v = 1; v <= 7; v++) {
		if (v > 1) tm_step(&g.tr, &g.r, 0.02);
		T_XOK(xfer_send(g.snd, v, err_));
		T_XOK(xfer_receive(g.rcv, 0, NULL, err_));
	}
	tmodel late;
	tm_make(&late, &g.r, 3000, 0);
	xfer_config c;
	xfer_config_init(&c);
	c.disk.dir = g.dir;
	c.role = XFER_RECEIVER;
	c.disk.receiver_id = "engine-late";
	xfer_endpoint *lr;
	T_XOK(xfer_open(&lr, &c, late.m, err_));
	race_rig = &g;
	race_calls = 0;
	xfer_hooks.disk_after_plan = race_publish;
	xfer_err e = { 0 };
	int rc = xfer_receive(lr, 0, NULL, &e);
	xfer_hooks.disk_after_plan = NULL;
	if (rc != 0) T_FAIL("catch-up across the gc: %s", e.msg);
	char path[600];
	snprintf(path, sizeof path, "%s/weight_v000005", g.dir);
	T_CHECK(access(path, F_OK) != 0); /* the planned chain really went */
	xfer_stats st = xfer_endpoint_stats(lr);
	T_EQ(st.version, 9);
	T_EQ(st.full_loaded, 1);
	T_CHECK(tm_equal(&g.tr, &late));
	xfer_close(&lr);
	tm_free(&late);
	rig_close(&g);
}

T_TEST(xfer_disk_late_receiver_catches_up)
{
	rig g;
	rig_open(&g, 1, 1, 4, 4096); /* full at v1, v5, v9 */
	T_XOK(xfer_send(g.snd, 1, err_));
	T_XOK(xfer_receive(g.rcv, 0, NULL, err_));
	for (uint64_t v = 2; v <= 4; v++) {
		tm_step(&g.tr, &g.r, 0.02);
		T_XOK(xfer_send(g.snd, v, err_));
	}
	/* through the chain: v1 -> v2 -> v3 -> v4 */
	T_XOK(xfer_receive(g.rcv, 0, NULL, err_));
	xfer_stats st = xfer_endpoint_stats(g.rcv);
	T_EQ(st.version, 4);
	T_EQ(st.versions_applied, 3);
	T_EQ(st.full_loaded, 0);
	T_CHECK(tm_equal(&g.tr, &g.en));
	for (uint64_t v = 5; v <= 7; v++) {
		tm_step(&g.tr, &g.r, 0.02);
		T_XOK(xfer_send(g.snd, v, err_));
	}
	/* gc: engine-0 holds v4, so v1..v4 (before the full v5, all applied) go */
	uint64_t latest;
	T_XOK(xfer_disk_latest(g.dir, &latest, err_));
	T_EQ(latest, 7);
	char path[600];
	snprintf(path, sizeof path, "%s/weight_v000003", g.dir);
	T_CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof path, "%s/weight_v000005", g.dir);
	T_CHECK(access(path, F_OK) == 0);
	/* a new receiver: from the newest full version v5 */
	tmodel late;
	tm_make(&late, &g.r, 3000, 0);
	xfer_config c;
	xfer_config_init(&c);
	c.disk.dir = g.dir;
	c.role = XFER_RECEIVER;
	c.disk.receiver_id = "engine-1";
	xfer_endpoint *lr;
	T_XOK(xfer_open(&lr, &c, late.m, err_));
	T_XOK(xfer_receive(lr, 0, NULL, err_));
	st = xfer_endpoint_stats(lr);
	T_EQ(st.full_loaded, 1);
	T_EQ(st.versions_applied, 3);
	T_CHECK(tm_equal(&g.tr, &late));
	/* engine-0 at v4: v4 -> v5 is a full, so it loads v5 and applies 6, 7 */
	T_XOK(xfer_receive(g.rcv, 0, NULL, err_));
	T_CHECK(tm_equal(&g.tr, &g.en));
	int deleted = 0;
	T_XOK(xfer_disk_gc(g.dir, 1, &deleted, err_));
	T_EQ(deleted, 0);
	xfer_close(&lr);
	tm_free(&late);
	rig_close(&g);
}
