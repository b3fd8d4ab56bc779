/* tests/unit/xfer_nccl_test.c: the broadcast paths between two processes,
 * a root (sender) and a receiver, over the stand-in CUDA runtime and NCCL
 * of tests/fakecuda/ (make test names them in SKEIN_FAKE_CUDART and
 * SKEIN_FAKE_NCCL): round trips, then what the receiver's undo journal is
 * for: a corrupted byte in the last bucket detected and undone, xfer_rollback
 * after a verified version, a root killed between buckets.  After each
 * failure the receiver's tensors must hold the previous version bit for bit.
 *
 * Contents are a function of (seed, tensor, version): each version changes
 * about 1 byte in 64 of the last, so the journal holds a small part.
 * Tensors are allocated and read through the loaded CUDA runtime, so with
 * SKEIN_NCCL_TEST_REAL_CUDA=1 (the GPU host: the real runtime and driver,
 * fake NCCL, both processes on one GPU) the device journal and the GPU
 * kernels run the same scenario. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/xfer_int.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NT = 6, BUCKET = 64 << 10 };

static const int64_t g_count[NT] = { 1001, 4097 * 3, 7, 65537, 17, 40000 };
static const xfer_dtype g_dt[NT] = { XFER_F32, XFER_BF16, XFER_U8, XFER_I64, XFER_F16, XFER_BF16 };

typedef struct {
	xfer_manifest *m;
	unsigned char *p[NT];
	uint64_t n[NT];
} nmodel;

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

static void nm_make(nmodel *nm)
{
	const xfer_cuda_api *cu = cuda();
	nm->m = xfer_manifest_new();
	for (int i = 0; i < NT; i++) {
		char name[32];
		snprintf(name, sizeof name, "w%d.%s", i, xfer_dtype_name(g_dt[i]));
		nm->n[i] = (uint64_t)g_count[i] * xfer_dtype_size(g_dt[i]);
		void *p = NULL;
		T_EQ(cu->Malloc(&p, nm->n[i]), 0);
		T_EQ(cu->Memset(p, 0, nm->n[i]), 0);
		nm->p[i] = p;
		int64_t shape[1] = { g_count[i] };
		T_XOK(xfer_manifest_add(nm->m, name, g_dt[i], 1, shape, nm->p[i], XFER_MEM_CUDA, err_));
	}
}

static void nm_free(nmodel *nm)
{
	xfer_manifest_free(&nm->m);
	for (int i = 0; i < NT; i++) cuda()->Free(nm->p[i]);
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
	for (int i = 0; i < NT; i++) {
		unsigned char *h = malloc(nm->n[i]);
		content(seed, i, v, h, nm->n[i]);
		T_EQ(cuda()->Memcpy(nm->p[i], h, nm->n[i], XFER_CUDA_H2D), 0);
		free(h);
	}
}

static void expect_version(const nmodel *nm, uint64_t seed, uint64_t v, const char *when)
{
	for (int i = 0; i < NT; i++) {
		unsigned char *want = malloc(nm->n[i]), *have = malloc(nm->n[i]);
		content(seed, i, v, want, nm->n[i]);
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

static void config(xfer_config *c, const char *path, xfer_role role, const unsigned char *id)
{
	xfer_config_init(c);
	c->path = path;
	c->role = role;
	c->bucket_bytes = BUCKET;
	c->timeout_ms = 20000;
	memcpy(c->nccl.id, id, XFER_NCCL_ID_BYTES);
	c->nccl.nranks = 2;
	c->nccl.rank = role == XFER_SENDER ? 0 : 1;
	c->nccl.root = 0;
}

/* The root: versions 1..4 (3 with one byte wrong in its last bucket), then
 * 5, killed after its first bucket. */
static void root(const char *path, const unsigned char *id, uint64_t seed)
{
	nmodel nm;
	nm_make(&nm);
	xfer_config c;
	config(&c, path, XFER_SENDER, id);
	xfer_endpoint *ep = NULL;
	xfer_err e = { 0 };
	if (xfer_open(&ep, &c, nm.m, &e) != 0) {
		fprintf(stderr, "root: %s\n", e.msg);
		_exit(1);
	}
	for (uint64_t v = 1; v <= 5; v++) {
		set_version(&nm, seed, v);
		xfer_hooks.corrupt_version = v == 3 ? 3 : 0;
		xfer_hooks.die_after_bucket = v == 5 ? 1 : 0;
		if (xfer_send(ep, v, &e) != 0) {
			fprintf(stderr, "root: version %llu: %s\n", (unsigned long long)v, e.msg);
			_exit(1);
		}
	}
	_exit(0);
}

static void receive_fails(xfer_endpoint *ep, xfer_code code, const char *what)
{
	uint64_t v = 0;
	xfer_err e = { 0 };
	if (xfer_receive(ep, 20000, &v, &e) == 0) T_FAIL("%s: received version %llu", what, (unsigned long long)v);
	if (e.code != code) T_FAIL("%s: %s (%s), want %s", what, e.msg, xfer_code_name(e.code), xfer_code_name(code));
	if (!strstr(e.msg, "previous version was put back")) T_FAIL("%s: no undo said: %s", what, e.msg);
}

static void scenario(const char *path)
{
	fake_env();
	uint64_t seed = t_seed();
	unsigned char id[XFER_NCCL_ID_BYTES];
	T_XOK(xfer_nccl_unique_id(id, err_));
	pid_t pid = fork();
	T_CHECK(pid >= 0);
	if (pid == 0) root(path, id, seed);
	nmodel nm;
	nm_make(&nm);
	xfer_config c;
	config(&c, path, XFER_RECEIVER, id);
	xfer_endpoint *ep = NULL;
	T_XOK(xfer_open(&ep, &c, nm.m, err_));
	uint64_t v = 0;
	/* 1: nothing to keep, lands in place; 2: through the journal */
	T_XOK(xfer_receive(ep, 20000, &v, err_));
	T_EQ(v, 1);
	expect_version(&nm, seed, 1, "version 1");
	xfer_err e = { 0 };
	T_EQ(xfer_rollback(ep, &e), -1); /* the first version has no journal */
	T_EQ(e.code, XFER_EUNAVAIL);
	T_XOK(xfer_receive(ep, 20000, &v, err_));
	T_EQ(v, 2);
	expect_version(&nm, seed, 2, "version 2");
	xfer_stats st = xfer_endpoint_stats(ep);
	printf("  %s v2: %llu bytes, journal %llu bytes (device peak %llu), journal %.4f s, hash %.4f s, note: %s\n", path,
	       (unsigned long long)xfer_manifest_bytes(nm.m), (unsigned long long)st.journal_bytes,
	       (unsigned long long)st.device_journal_peak, st.journal_seconds, st.hash_seconds, xfer_endpoint_note(ep));
	T_CHECK(st.journal_bytes > 0);
	T_CHECK(st.journal_bytes < xfer_manifest_bytes(nm.m)); /* a part changed, a part journaled */
	/* 3: one byte wrong in the last bucket: detected, 2 back */
	receive_fails(ep, XFER_ECHECKSUM, "version 3 (corrupted)");
	expect_version(&nm, seed, 2, "after version 3 failed");
	/* 4 verified, then rolled back to 2 */
	T_XOK(xfer_receive(ep, 20000, &v, err_));
	T_EQ(v, 4);
	expect_version(&nm, seed, 4, "version 4");
	T_XOK(xfer_rollback(ep, err_));
	expect_version(&nm, seed, 2, "after the rollback of version 4");
	T_EQ(xfer_endpoint_stats(ep).version, 2);
	T_EQ(xfer_rollback(ep, &e), -1); /* one undo per journal */
	/* 5: the root dies after its first bucket */
	receive_fails(ep, XFER_EPEER, "version 5 (root killed)");
	expect_version(&nm, seed, 2, "after the root died");
	int status = 0;
	T_EQ(waitpid(pid, &status, 0), pid);
	T_CHECK(WIFEXITED(status));
	T_EQ(WEXITSTATUS(status), 3);
	xfer_close(&ep);
	nm_free(&nm);
	/* the stand-in's "device memory" of the root, which died holding it */
	for (unsigned k = 0; k < 64; k++) {
		char name[64];
		snprintf(name, sizeof name, "/skein-fakecu-%d-%u", (int)pid, k);
		shm_unlink(name);
	}
}

T_TEST(nccl_broadcast_undo) { scenario("broadcast"); }
T_TEST(nccl_broadcast_packed_undo) { scenario("broadcast_packed"); }
