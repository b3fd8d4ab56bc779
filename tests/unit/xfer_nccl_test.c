/* tests/unit/xfer_nccl_test.c: the broadcast paths between two processes,
 * a root (sender) and a receiver, over the stand-in CUDA runtime and NCCL
 * of tests/fakecuda/ (make test names them in SKEIN_FAKE_CUDART and
 * SKEIN_FAKE_NCCL): round trips, then what each bucket's sums and the
 * receiver's undo journal are for: a corrupted byte in the last bucket
 * detected at that bucket and undone, xfer_rollback after a verified
 * version, a root killed while a bucket moves.  After each failure the
 * receiver's tensors must hold the previous version bit for bit.  Twice: a
 * few tensors in 4 buckets, and 40 tensors in small buckets (many buckets,
 * each with its sums).  Then the header: a root of the previous format
 * (every sum in its header) and a root with other buckets are refused.
 *
 * Contents are a function of (seed, tensor, version): each version changes
 * about 1 byte in 64 of the last, so the journal holds a small part.
 * Tensors are allocated and read through the loaded CUDA runtime, so with
 * SKEIN_NCCL_TEST_REAL_CUDA=1 (the GPU host: the real runtime and driver,
 * fake NCCL, both processes on one GPU) the device journal and the GPU
 * kernels run the same scenario.
 *
 * nccl_overlap_timing times a root's versions with bucket b+1 hashed while
 * b moves against everything hashed first (xfer_hooks.nccl_hash_first), in
 * the same run: SKEIN_NCCL_TEST_BENCH_BYTES (default 8 MiB: a check that
 * both orders deliver), SKEIN_NCCL_TEST_BENCH_CPU=1 for CPU threads even
 * where the kernels load.  Its RESULT lines are the root's figures. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/core/xfer_hash.h"
#include "transfer/update/update.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NT_MAX = 48, FEW = 6, MANY = 40 };

typedef struct {
	int nt;
	int64_t count[NT_MAX];
	xfer_dtype dt[NT_MAX];
	uint64_t bucket;
} nspec;

typedef struct {
	const nspec *sp;
	xfer_manifest *m;
	unsigned char *p[NT_MAX];
	uint64_t n[NT_MAX];
} nmodel;

/* 6 tensors in 64 KiB buckets (two travel alone): 4 buckets. */
static nspec spec_few(void)
{
	static const int64_t count[FEW] = { 1001, 4097 * 3, 7, 65537, 17, 40000 };
	static const xfer_dtype dt[FEW] = { XFER_F32, XFER_BF16, XFER_U8, XFER_I64, XFER_F16, XFER_BF16 };
	nspec s = { .nt = FEW, .bucket = 64 << 10 };
	memcpy(s.count, count, sizeof count);
	memcpy(s.dt, dt, sizeof dt);
	return s;
}

/* 40 tensors of 1..24000 bytes in 8 KiB buckets: tens of buckets. */
static nspec spec_many(void)
{
	static const xfer_dtype dt[5] = { XFER_F32, XFER_BF16, XFER_U8, XFER_I64, XFER_F16 };
	nspec s = { .nt = MANY, .bucket = 8 << 10 };
	for (int i = 0; i < MANY; i++) {
		s.dt[i] = dt[i % 5];
		s.count[i] = 1 + (int64_t)((unsigned)i * 7919u % 3000u);
	}
	return s;
}

static void fake_env(void)
{
	const char *cu = getenv("SKEIN_FAKE_CUDART"), *nc = getenv("SKEIN_FAKE_NCCL");
	const char *real = getenv("SKEIN_NCCL_TEST_REAL_CUDA");
	int fake_cu = !(real && !strcmp(real, "1"));
	if ((fake_cu && !cu) || !nc)
		T_FAIL("SKEIN_FAKE_CUDART and SKEIN_FAKE_NCCL must name the stand-ins (make test sets them)");
	if (fake_cu) {
		setenv("SKEIN_CUDART_LIB", cu, 1);
		setenv("SKEIN_CUDA_LIB", cu, 1);
	}
	setenv("SKEIN_NCCL_LIB", nc, 1);
}

static const xfer_cuda_api *cuda(void)
{
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) T_FAIL("CUDA runtime: %s", why);
	return cu;
}

static void nm_make(nmodel *nm, const nspec *sp)
{
	const xfer_cuda_api *cu = cuda();
	nm->sp = sp;
	nm->m = xfer_manifest_new();
	for (int i = 0; i < sp->nt; i++) {
		char name[32];
		snprintf(name, sizeof name, "w%d.%s", i, xfer_dtype_name(sp->dt[i]));
		nm->n[i] = (uint64_t)sp->count[i] * xfer_dtype_size(sp->dt[i]);
		void *p = NULL;
		T_EQ(cu->Malloc(&p, nm->n[i]), 0);
		T_EQ(cu->Memset(p, 0, nm->n[i]), 0);
		nm->p[i] = p;
		int64_t shape[1] = { sp->count[i] };
		T_XOK(xfer_manifest_add(nm->m, name, sp->dt[i], 1, shape, nm->p[i], XFER_MEM_CUDA, err_));
	}
}

static void nm_free(nmodel *nm)
{
	xfer_manifest_free(&nm->m);
	for (int i = 0; i < nm->sp->nt; i++) cuda()->Free(nm->p[i]);
}

/* Version v's bytes of tensor i into out. */
static void content(uint64_t seed, int i, uint64_t v, unsigned char *out, uint64_t n)
{
	sk_rng r;
	sk_rng_seed(&r, seed * 131 + (uint64_t)i);
	for (uint64_t j = 0; j < n; j++) {
		out[j] = (unsigned char)sk_rng_next(&r);
		if (((j * 2654435761u) ^ (v * 40503u)) % 64 == 0) out[j] ^= (unsigned char)(v * 31 + 1);
	}
}

static void set_version(const nmodel *nm, uint64_t seed, uint64_t v)
{
	for (int i = 0; i < nm->sp->nt; i++) {
		unsigned char *h = malloc(nm->n[i]);
		content(seed, i, v, h, nm->n[i]);
		T_EQ(cuda()->Memcpy(nm->p[i], h, nm->n[i], XFER_CUDA_H2D), 0);
		free(h);
	}
}

/* v 0: every byte zero (nothing landed yet). */
static void expect_version(const nmodel *nm, uint64_t seed, uint64_t v, const char *when)
{
	for (int i = 0; i < nm->sp->nt; i++) {
		unsigned char *want = calloc(1, nm->n[i]), *have = malloc(nm->n[i]);
		if (v) content(seed, i, v, want, nm->n[i]);
		T_EQ(cuda()->Memcpy(have, nm->p[i], nm->n[i], XFER_CUDA_D2H), 0);
		for (uint64_t j = 0; j < nm->n[i]; j++)
			if (have[j] != want[j])
				T_FAIL("%s: tensor %d byte %llu is 0x%02x, version %llu has 0x%02x (seed %llu)", when, i,
				       (unsigned long long)j, have[j], (unsigned long long)v, want[j],
				       (unsigned long long)seed);
		free(want);
		free(have);
	}
}

/* The receiver's root (transfer/core/xfer_root.c) of version v is the one of
 * v's tree sums computed here from what v holds: what the root rank's done
 * declares to the head. */
static void expect_root(const xfer_endpoint *ep, const nmodel *nm, uint64_t seed, uint64_t v)
{
	xfer_sum sums[NT_MAX];
	unsigned char dg[16], want[16];
	for (int i = 0; i < nm->sp->nt; i++) {
		unsigned char *h = malloc(nm->n[i] + 1);
		content(seed, i, v, h, nm->n[i]);
		sums[i] = xfer_tree_checksum(h, nm->n[i], 1);
		free(h);
	}
	T_XOK(xfer_manifest_digest(nm->m, dg, err_));
	T_XOK(xfer_root_of(dg, XFER_SUM_TREE, sums, (size_t)nm->sp->nt, want, err_));
	T_EQ(ep->root_version, v);
	T_CHECK(!memcmp(ep->root, want, 16));
}

static void config(xfer_config *c, const char *path, xfer_role role, const unsigned char *id, uint64_t bucket)
{
	xfer_config_init(c);
	c->path = path;
	c->role = role;
	c->bucket_bytes = bucket;
	c->timeout_ms = 20000;
	memcpy(c->nccl.id, id, XFER_NCCL_ID_BYTES);
	c->nccl.nranks = 2;
	c->nccl.rank = role == XFER_SENDER ? 0 : 1;
	c->nccl.root = 0;
}

/* Each second of a version counted once: data, hash and journal are
 * disjoint parts of its wall time. */
static int stats_partition(const xfer_stats *st)
{
	return st->data_seconds >= 0 && st->hash_seconds >= 0 && st->journal_seconds >= 0 &&
	       st->data_seconds + st->hash_seconds + st->journal_seconds <= st->seconds + 1e-6;
}

static void root_open(xfer_endpoint **ep, nmodel *nm, const nspec *sp, const char *path, const unsigned char *id,
		      uint64_t bucket)
{
	nm_make(nm, sp);
	xfer_config c;
	config(&c, path, XFER_SENDER, id, bucket);
	xfer_err e = { 0 };
	if (xfer_open(ep, &c, nm->m, &e) != 0) {
		fprintf(stderr, "root: %s\n", e.msg);
		_exit(1);
	}
}

/* The root: versions 1..4 (3 with one byte wrong in its last bucket), then
 * 5, killed while its second bucket moves (the receiver may still take
 * that one whole when the stand-in posted it before the root died). */
static void root(const char *path, const unsigned char *id, uint64_t seed, const nspec *sp)
{
	nmodel nm;
	xfer_endpoint *ep = NULL;
	root_open(&ep, &nm, sp, path, id, sp->bucket);
	xfer_err e = { 0 };
	for (uint64_t v = 1; v <= 5; v++) {
		set_version(&nm, seed, v);
		xfer_hooks.corrupt_version = v == 3 ? 3 : 0;
		xfer_hooks.die_after_bucket = v == 5 ? 1 : 0;
		if (xfer_send(ep, v, &e) != 0) {
			fprintf(stderr, "root: version %llu: %s\n", (unsigned long long)v, e.msg);
			_exit(1);
		}
		xfer_stats st = xfer_endpoint_stats(ep);
		if (!stats_partition(&st) || st.hash_seconds <= 0) {
			fprintf(stderr, "root: version %llu: seconds %g, data %g + hash %g\n", (unsigned long long)v,
				st.seconds, st.data_seconds, st.hash_seconds);
			_exit(4);
		}
	}
	_exit(0);
}

static void receive_fails(xfer_endpoint *ep, xfer_code code, const char *what, const char *also, const char *not)
{
	uint64_t v = 0;
	xfer_err e = { 0 };
	if (xfer_receive(ep, 20000, &v, &e) == 0) T_FAIL("%s: received version %llu", what, (unsigned long long)v);
	if (e.code != code) T_FAIL("%s: %s (%s), want %s", what, e.msg, xfer_code_name(e.code), xfer_code_name(code));
	if (!strstr(e.msg, "previous version was put back")) T_FAIL("%s: no undo said: %s", what, e.msg);
	if (also && !strstr(e.msg, also)) T_FAIL("%s: \"%s\" does not say \"%s\"", what, e.msg, also);
	if (not && strstr(e.msg, not)) T_FAIL("%s: \"%s\" says \"%s\"", what, e.msg, not);
}

static void unlink_fake_memory(pid_t pid)
{
	/* the stand-in's "device memory" of a root that died holding it */
	for (unsigned k = 0; k < 256; k++) {
		char name[64];
		snprintf(name, sizeof name, "/skein-fakecu-%d-%u", (int)pid, k);
		shm_unlink(name);
	}
}

/* The receiver's end of a two-process test: the root's exit status, then
 * everything freed (the root's stand-in memory too). */
static void finish(pid_t pid, int want, xfer_endpoint **ep, nmodel *nm)
{
	int status = 0;
	T_EQ(waitpid(pid, &status, 0), pid);
	T_CHECK(WIFEXITED(status));
	T_EQ(WEXITSTATUS(status), want);
	xfer_close(ep);
	nm_free(nm);
	unlink_fake_memory(pid);
}

static void scenario(const char *path, const nspec *sp)
{
	fake_env();
	uint64_t seed = t_seed();
	unsigned char id[XFER_NCCL_ID_BYTES];
	T_XOK(xfer_nccl_unique_id(id, err_));
	pid_t pid = fork();
	T_CHECK(pid >= 0);
	if (pid == 0) root(path, id, seed, sp);
	nmodel nm;
	nm_make(&nm, sp);
	xfer_config c;
	config(&c, path, XFER_RECEIVER, id, sp->bucket);
	xfer_endpoint *ep = NULL;
	T_XOK(xfer_open(&ep, &c, nm.m, err_));
	size_t nb = ep->nbuckets;
	T_CHECK(nb >= 2);
	uint64_t v = 0;
	/* 1: nothing to keep, lands in place, each bucket checked; 2: through the journal */
	T_XOK(xfer_receive(ep, 20000, &v, err_));
	T_EQ(v, 1);
	expect_version(&nm, seed, 1, "version 1");
	expect_root(ep, &nm, seed, 1);
	xfer_err e = { 0 };
	T_EQ(xfer_rollback(ep, &e), -1); /* the first version has no journal */
	T_EQ(e.code, XFER_EUNAVAIL);
	T_XOK(xfer_receive(ep, 20000, &v, err_));
	T_EQ(v, 2);
	expect_version(&nm, seed, 2, "version 2");
	expect_root(ep, &nm, seed, 2);
	xfer_stats st = xfer_endpoint_stats(ep);
	printf("  %s v2: %llu bytes in %zu buckets, %.4f s: data %.4f, hash %.4f, journal %.4f (%llu bytes, device peak "
	       "%llu); note: %s\n",
	       path, (unsigned long long)xfer_manifest_bytes(nm.m), nb, st.seconds, st.data_seconds, st.hash_seconds,
	       st.journal_seconds, (unsigned long long)st.journal_bytes, (unsigned long long)st.device_journal_peak,
	       xfer_endpoint_note(ep));
	T_CHECK(st.journal_bytes > 0);
	T_CHECK(st.journal_bytes < xfer_manifest_bytes(nm.m)); /* a part changed, a part journaled */
	T_CHECK(stats_partition(&st));
	/* 3: one byte wrong in the last bucket: detected at that bucket, 2 back */
	char at[64];
	snprintf(at, sizeof at, "bucket %zu of %zu,", nb - 1, nb);
	receive_fails(ep, XFER_ECHECKSUM, "version 3 (corrupted)", at, NULL);
	expect_version(&nm, seed, 2, "after version 3 failed");
	/* 4 verified, then rolled back to 2 */
	T_XOK(xfer_receive(ep, 20000, &v, err_));
	T_EQ(v, 4);
	expect_version(&nm, seed, 4, "version 4");
	T_XOK(xfer_rollback(ep, err_));
	expect_version(&nm, seed, 2, "after the rollback of version 4");
	T_EQ(xfer_endpoint_stats(ep).version, 2);
	T_EQ(xfer_rollback(ep, &e), -1); /* one undo per journal */
	/* 5: the root dies while its second bucket moves */
	receive_fails(ep, XFER_EPEER, "version 5 (root killed)", "bucket ", "bucket 0 of");
	expect_version(&nm, seed, 2, "after the root died");
	finish(pid, 3, &ep, &nm);
}

T_TEST(nccl_broadcast_undo) { nspec sp = spec_few(); scenario("broadcast", &sp); }
T_TEST(nccl_broadcast_packed_undo) { nspec sp = spec_few(); scenario("broadcast_packed", &sp); }
T_TEST(nccl_broadcast_many_buckets) { nspec sp = spec_many(); scenario("broadcast", &sp); }
T_TEST(nccl_broadcast_packed_many_buckets) { nspec sp = spec_many(); scenario("broadcast_packed", &sp); }

/* A root of the previous libskein (NCCL header format 2): the manifest
 * digest seeded 2, version 1, every tensor's tree sum after it, then its
 * buckets.  Spoken here through the stand-in's calls directly; it exits 0
 * once the receiver took the header. */
typedef struct { char b[XFER_NCCL_ID_BYTES]; } raw_id;

static void old_root(const unsigned char *id, const nspec *sp)
{
	int (*init)(void **, int, raw_id, int, void *);
	int (*bc)(const void *, void *, size_t, int, int, void *, void *);
	int (*async_err)(void *, int *);
	*(void **)&init = dlsym(RTLD_DEFAULT, "ncclCommInitRankConfig");
	*(void **)&bc = dlsym(RTLD_DEFAULT, "ncclBroadcast");
	*(void **)&async_err = dlsym(RTLD_DEFAULT, "ncclCommGetAsyncError");
	if (!init || !bc || !async_err) _exit(10);
	nmodel nm;
	nm_make(&nm, sp);
	size_t dlen;
	char *desc = xfer_manifest_describe(nm.m, &dlen);
	size_t head = 16 + (size_t)sp->nt * sizeof(xfer_sum);
	unsigned char *h = calloc(1, head); /* its sums: any, it is refused before */
	uint64_t digest = XXH3_64bits_withSeed(desc, dlen, 2), v = 1;
	memcpy(h, &digest, 8);
	memcpy(h + 8, &v, 8);
	raw_id rid;
	memcpy(rid.b, id, sizeof rid.b);
	void *comm = NULL, *dh = NULL;
	if (init(&comm, 2, rid, 0, NULL) != 0 || cuda()->Malloc(&dh, head) != 0 ||
	    cuda()->Memcpy(dh, h, head, XFER_CUDA_H2D) != 0 || bc(dh, dh, head, 0, 0, comm, NULL) != 0)
		_exit(11);
	for (int i = 0; i < 20000; i++) {
		int as = 0;
		if (async_err(comm, &as) != 0) _exit(12);
		if (as == 0) _exit(0);
		if (as != 7 /* ncclInProgress */) _exit(13);
		usleep(1000);
	}
	_exit(14);
}

/* A root of this libskein sending version 1 with bucket_bytes bucket
 * (the receiver's: sp->bucket, or other buckets). */
static void new_root(const unsigned char *id, uint64_t seed, const nspec *sp, uint64_t bucket)
{
	nmodel nm;
	xfer_endpoint *ep = NULL;
	root_open(&ep, &nm, sp, "broadcast", id, bucket);
	set_version(&nm, seed, 1);
	xfer_err e = { 0 };
	_exit(xfer_send(ep, 1, &e) != 0 ? 0 : 1); /* the receiver is gone */
}

enum { OTHER_BUCKETS, OLD_ROOT, OTHER_VERSION };

static void refused(int kind, xfer_code code, const char *says)
{
	fake_env();
	nspec sp = spec_few();
	uint64_t seed = t_seed();
	unsigned char id[XFER_NCCL_ID_BYTES];
	T_XOK(xfer_nccl_unique_id(id, err_));
	pid_t pid = fork();
	T_CHECK(pid >= 0);
	if (pid == 0) {
		if (kind == OLD_ROOT) old_root(id, &sp);
		new_root(id, seed, &sp, kind == OTHER_VERSION ? sp.bucket : sp.bucket / 8);
	}
	nmodel nm;
	nm_make(&nm, &sp);
	xfer_config c;
	config(&c, "broadcast", XFER_RECEIVER, id, sp.bucket);
	xfer_endpoint *ep = NULL;
	T_XOK(xfer_open(&ep, &c, nm.m, err_));
	if (kind == OTHER_VERSION) ep->target = 2; /* as a coordinated engine told to receive 2 */
	uint64_t v = 0;
	xfer_err e = { 0 };
	T_EQ(xfer_receive(ep, 20000, &v, &e), -1);
	printf("  refused: %s\n", e.msg);
	if (e.code != code || !strstr(e.msg, says))
		T_FAIL("%s (%s), want %s saying \"%s\"", e.msg, xfer_code_name(e.code), xfer_code_name(code), says);
	expect_version(&nm, seed, 0, "after the refusal");
	finish(pid, 0, &ep, &nm);
}

T_TEST(nccl_old_format_root_refused) { refused(OLD_ROOT, XFER_EFORMAT, "NCCL header format 2"); }
T_TEST(nccl_other_buckets_refused) { refused(OTHER_BUCKETS, XFER_EINVAL, "bucket_bytes"); }
/* the header's version is checked against the one told before any bucket
 * lands: the tensors keep what they held */
T_TEST(nccl_other_version_refused) { refused(OTHER_VERSION, XFER_EINVAL, "told to receive 2"); }

/* ---- the overlap, timed ---- */

enum { BENCH_TENSORS = 16, BENCH_BUCKETS = 8, BENCH_REPS = 3 };

static uint64_t bench_bytes(void)
{
	const char *b = getenv("SKEIN_NCCL_TEST_BENCH_BYTES");
	uint64_t n = b && *b ? strtoull(b, NULL, 10) : 8u << 20;
	return n < (1u << 20) ? 1u << 20 : n;
}

/* Either side's model (BENCH_TENSORS tensors in BENCH_BUCKETS buckets) and config. */
static void bench_setup(nmodel *nm, nspec *sp, xfer_config *c, const char *path, xfer_role role,
			const unsigned char *id, uint64_t bytes)
{
	sp->nt = BENCH_TENSORS;
	sp->bucket = bytes / BENCH_BUCKETS;
	for (int i = 0; i < BENCH_TENSORS; i++) {
		sp->dt[i] = XFER_BF16;
		sp->count[i] = (int64_t)(bytes / BENCH_TENSORS / 2);
	}
	nm_make(nm, sp);
	config(c, path, role, id, sp->bucket);
	c->timeout_ms = 120000;
}

/* The root: BENCH_REPS rounds of (overlapped, hash-first); prints the
 * fastest of each. */
static void bench_root(const char *path, const unsigned char *id, uint64_t bytes)
{
	nspec sp;
	nmodel nm;
	xfer_config c;
	bench_setup(&nm, &sp, &c, path, XFER_SENDER, id, bytes);
	xfer_endpoint *ep = NULL;
	xfer_err e = { 0 };
	if (xfer_open(&ep, &c, nm.m, &e) != 0) {
		fprintf(stderr, "root: %s\n", e.msg);
		_exit(1);
	}
	xfer_stats best[2] = { { 0 }, { 0 } };
	uint64_t v = 0;
	for (int r = 0; r < BENCH_REPS; r++)
		for (int first = 0; first < 2; first++) {
			for (int i = 0; i < sp.nt; i++) cuda()->Memset(nm.p[i], (int)(v + (uint64_t)i), nm.n[i]);
			xfer_hooks.nccl_hash_first = first;
			if (xfer_send(ep, ++v, &e) != 0) {
				fprintf(stderr, "root: version %llu: %s\n", (unsigned long long)v, e.msg);
				_exit(1);
			}
			xfer_stats st = xfer_endpoint_stats(ep);
			if (!stats_partition(&st)) _exit(4);
			if (!r || st.seconds < best[first].seconds) best[first] = st;
		}
	for (int first = 0; first < 2; first++)
		printf("RESULT mode=nccl-root path=%s hashing=%s order=%s bytes=%llu buckets=%zu seconds=%.4f data=%.4f "
		       "hash=%.4f gbps=%.2f\n",
		       path, xfer_endpoint_note(ep)[0] ? "cpu" : "gpu", first ? "hash-first" : "overlapped",
		       (unsigned long long)bytes, ep->nbuckets, best[first].seconds, best[first].data_seconds,
		       best[first].hash_seconds, bytes / best[first].seconds / 1e9);
	fflush(stdout);
	_exit(0);
}

static void bench(const char *path)
{
	fake_env();
	if (getenv("SKEIN_NCCL_TEST_BENCH_CPU") && !strcmp(getenv("SKEIN_NCCL_TEST_BENCH_CPU"), "1"))
		xfer_hooks.nccl_cpu_hash = 1;
	uint64_t bytes = bench_bytes();
	unsigned char id[XFER_NCCL_ID_BYTES];
	T_XOK(xfer_nccl_unique_id(id, err_));
	fflush(stdout);
	pid_t pid = fork();
	T_CHECK(pid >= 0);
	if (pid == 0) bench_root(path, id, bytes);
	nspec sp;
	nmodel nm;
	xfer_config c;
	bench_setup(&nm, &sp, &c, path, XFER_RECEIVER, id, bytes);
	c.keep_previous = 0; /* the root's figures; this side checks each bucket only */
	xfer_endpoint *ep = NULL;
	T_XOK(xfer_open(&ep, &c, nm.m, err_));
	for (uint64_t want = 1; want <= 2 * BENCH_REPS; want++) {
		uint64_t v = 0;
		T_XOK(xfer_receive(ep, 120000, &v, err_));
		T_EQ(v, want);
		unsigned char b = 0;
		T_EQ(cuda()->Memcpy(&b, nm.p[3] + nm.n[3] - 1, 1, XFER_CUDA_D2H), 0);
		T_EQ(b, (unsigned char)(want - 1 + 3));
		xfer_stats st = xfer_endpoint_stats(ep);
		T_CHECK(stats_partition(&st));
		if (want == 2 * BENCH_REPS)
			printf("RESULT mode=nccl-receiver path=%s bytes=%llu seconds=%.4f data=%.4f hash=%.4f\n", path,
			       (unsigned long long)bytes, st.seconds, st.data_seconds, st.hash_seconds);
	}
	finish(pid, 0, &ep, &nm);
}

T_TEST_TIMEOUT(nccl_overlap_timing, 300) { bench("broadcast"); }
T_TEST_TIMEOUT(nccl_packed_overlap_timing, 300) { bench("broadcast_packed"); }
