/* tests/unit/xfer_root_test.c: the root of a version's checksums
 * (transfer/core/xfer_root.c, issue 23): what it covers, and that a disk-delta
 * and a p2p-tcp receiver end up with the sender's root, and with another
 * one when a forged version that is consistent with itself is swapped in. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/update/update.h"
#include "transfer/core/xfer_hash.h"

#include <stdio.h>
#include <sys/stat.h>

T_TEST(xfer_root_covers_digest_kind_and_every_sum)
{
	unsigned char dg[16], r0[16], r1[16];
	xfer_sum s[3] = { { 1, 2 }, { 3, 4 }, { 5, 6 } };
	xfer_err e;
	memset(dg, 7, sizeof dg);
	T_EQ(xfer_root_of(dg, XFER_SUM_TREE, s, 3, r0, &e), 0);
	T_EQ(xfer_root_of(dg, XFER_SUM_TREE, s, 3, r1, &e), 0);
	T_CHECK(!memcmp(r0, r1, 16)); /* deterministic */
	T_EQ(xfer_root_of(dg, XFER_SUM_XXH3_128, s, 3, r1, &e), 0);
	T_CHECK(memcmp(r0, r1, 16)); /* the kind */
	dg[15] ^= 1;
	T_EQ(xfer_root_of(dg, XFER_SUM_TREE, s, 3, r1, &e), 0);
	T_CHECK(memcmp(r0, r1, 16)); /* the manifest */
	dg[15] ^= 1;
	for (size_t i = 0; i < 3; i++) {
		s[i].hi ^= 1;
		T_EQ(xfer_root_of(dg, XFER_SUM_TREE, s, 3, r1, &e), 0);
		T_CHECK(memcmp(r0, r1, 16)); /* each sum */
		s[i].hi ^= 1;
	}
	xfer_sum t = s[0];
	s[0] = s[1];
	s[1] = t;
	T_EQ(xfer_root_of(dg, XFER_SUM_TREE, s, 3, r1, &e), 0);
	T_CHECK(memcmp(r0, r1, 16)); /* the order */
	T_EQ(xfer_root_of(dg, XFER_SUM_TREE, s, 2, r1, &e), 0);
	T_CHECK(memcmp(r0, r1, 16)); /* the count */
}

static void open_disk(xfer_endpoint **ep, const char *dir, tmodel *t, xfer_role role, xfer_sum_kind k)
{
	xfer_config c;
	xfer_config_init(&c);
	c.path = "disk-delta";
	c.disk.dir = dir;
	c.disk.full_every = 4;
	c.checksum = k;
	c.role = role;
	T_XOK(xfer_open(ep, &c, t->m, err_));
}

/* The sender's root is the receiver's for full and delta versions, both sum
 * kinds; a forged version (another sender's, whole and self-consistent,
 * renamed into the folder in place of the trainer's) passes the path's own
 * checks, but its root is not the trainer's. */
T_TEST(xfer_root_disk_sender_receiver_and_forgery)
{
	for (int k = 0; k < 2; k++) {
		sk_rng r;
		sk_rng_seed(&r, t_seed() + (uint64_t)k);
		char *dir = t_tmpdir(), *fdir = t_tmpdir();
		tmodel tr, en, ev;
		tm_make(&tr, &r, 3000, 1);
		tm_make(&en, &r, 3000, 0);
		tm_make(&ev, &r, 3000, 1); /* the attacker's weights */
		xfer_endpoint *snd = NULL, *rcv = NULL, *bad = NULL;
		open_disk(&snd, dir, &tr, XFER_SENDER, (xfer_sum_kind)k);
		open_disk(&rcv, dir, &en, XFER_RECEIVER, (xfer_sum_kind)k);
		open_disk(&bad, fdir, &ev, XFER_SENDER, (xfer_sum_kind)k);
		for (uint64_t v = 1; v <= 3; v++) {
			if (v > 1) tm_step(&tr, &r, 0.05);
			T_XOK(xfer_send(snd, v, err_));
			uint64_t got = 0;
			T_XOK(xfer_receive(rcv, 0, &got, err_));
			T_EQ(got, v);
			T_EQ(snd->root_version, v);
			T_EQ(rcv->root_version, v);
			T_CHECK(!memcmp(snd->root, rcv->root, 16));
		}
		/* v4 by the trainer, then swapped for the attacker's v4 */
		tm_step(&tr, &r, 0.05);
		T_XOK(xfer_send(snd, 4, err_));
		T_XOK(xfer_send(bad, 4, err_));
		char a[4200], b[4200], cmd[9000];
		snprintf(a, sizeof a, "%s/weight_v000004", dir);
		snprintf(b, sizeof b, "%s/weight_v000004", fdir);
		snprintf(cmd, sizeof cmd, "rm -rf '%s' && mv '%s' '%s'", a, b, a);
		T_EQ(system(cmd), 0);
		uint64_t got = 0;
		T_XOK(xfer_receive(rcv, 0, &got, err_)); /* consistent with itself: the path takes it */
		T_EQ(got, 4);
		T_EQ(rcv->root_version, 4);
		T_CHECK(memcmp(snd->root, rcv->root, 16)); /* the root tells */
		xfer_close(&snd);
		xfer_close(&rcv);
		xfer_close(&bad);
		tm_free(&tr);
		tm_free(&en);
		tm_free(&ev);
		t_rmdir(dir);
		t_rmdir(fdir);
	}
}

/* A chain (catch-up over several versions) with a forged version under it:
 * v1 (full) has one tensor rewritten, its index made consistent again; v2
 * and v3 change nothing, so that tensor is checked only against v1's own
 * sum along the way.  The chain's newest index (what the root covers) must
 * still hold it to the sender's sum. */
T_TEST(xfer_root_disk_chain_checks_the_newest_index)
{
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	char *dir = t_tmpdir();
	tmodel tr, en;
	tm_make(&tr, &r, 3000, 1);
	tm_make(&en, &r, 3000, 0);
	xfer_endpoint *snd = NULL, *rcv = NULL;
	open_disk(&snd, dir, &tr, XFER_SENDER, XFER_SUM_XXH3_128);
	open_disk(&rcv, dir, &en, XFER_RECEIVER, XFER_SUM_XXH3_128);
	for (uint64_t v = 1; v <= 3; v++) T_XOK(xfer_send(snd, v, err_)); /* v2, v3: nothing changed */
	char ipath[4200], dpath[4200];
	snprintf(ipath, sizeof ipath, "%s/weight_v000001/index", dir);
	snprintf(dpath, sizeof dpath, "%s/weight_v000001/data", dir);
	char *text;
	size_t len;
	T_XOK(xfer_read_file(ipath, &text, &len, err_));
	xfer_disk_index x;
	T_XOK(xfer_disk_index_parse(text, len, 1, ipath, &x, err_));
	free(text);
	size_t k = x.n - 1; /* the largest tensor: raw bytes in a full version */
	T_CHECK(x.full && x.t[k].stored == x.t[k].nbytes && x.t[k].nbytes > 0);
	unsigned char *b = malloc(x.t[k].stored);
	FILE *f = fopen(dpath, "r+b");
	T_CHECK(f != NULL);
	T_EQ(fseek(f, (long)x.t[k].offset, SEEK_SET), 0);
	T_EQ(fread(b, 1, x.t[k].stored, f), x.t[k].stored);
	b[0] ^= 0x55;
	T_EQ(fseek(f, (long)x.t[k].offset, SEEK_SET), 0);
	T_EQ(fwrite(b, 1, x.t[k].stored, f), x.t[k].stored);
	fclose(f);
	x.t[k].sum = xfer_checksum(b, x.t[k].stored);
	x.t[k].stored_sum = XXH3_64bits(b, x.t[k].stored);
	free(b);
	char *itxt = xfer_disk_index_format(&x, &len);
	T_CHECK(itxt != NULL);
	f = fopen(ipath, "wb");
	T_CHECK(f != NULL);
	T_EQ(fwrite(itxt, 1, len, f), len);
	fclose(f);
	free(itxt);
	xfer_disk_index_free(&x);
	uint64_t got = 0;
	xfer_err e = { 0 };
	T_EQ(xfer_receive(rcv, 0, &got, &e), -1);
	T_EQ(e.code, XFER_ECHECKSUM);
	T_CHECK(strstr(e.msg, "newest index") != NULL);
	xfer_close(&snd);
	xfer_close(&rcv);
	tm_free(&tr);
	tm_free(&en);
	t_rmdir(dir);
}
