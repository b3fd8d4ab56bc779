/* tests/unit/xfer_nccl_test.c: the broadcast paths between two processes,
 * a root (sender) and a receiver, over the stand-in CUDA runtime and NCCL
 * of tests/fakecuda/ (make test names them in SKEIN_FAKE_CUDART and
 * SKEIN_FAKE_NCCL): round trips, then what the receiver's undo journal is
 * for: a corrupted byte in the last bucket detected and undone, xfer_rollback
 * after a verified version, a root killed between buckets.  After each
 * failure the receiver's tensors must hold the previous version bit for bit.
 *
 * Contents are a function of (seed, tensor, version): each version changes
 * about 1 byte in 64 of the last, so the journal holds a small part. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/xfer_int.h"

#include <signal.h>
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
	if (!cu || !nc) T_FAIL("SKEIN_FAKE_CUDART and SKEIN_FAKE_NCCL must name the stand-ins (make test sets them)");
	setenv("SKEIN_CUDART_LIB", cu, 1);
	setenv("SKEIN_CUDA_LIB", cu, 1);
	setenv("SKEIN_NCCL_LIB", nc, 1);
}

/* The stand-in's "device memory" is host memory: plain buffers do. */
static void nm_make(nmodel *nm)
{
	nm->m = xfer_manifest_new();
	for (int i = 0; i < NT; i++) {
		char name[32];
		snprintf(name, sizeof name, "w%d.%s", i, xfer_dtype_name(g_dt[i]));
		nm->n[i] = (uint64_t)g_count[i] * xfer_dtype_size(g_dt[i]);
		nm->p[i] = calloc(1, nm->n[i]);
		T_CHECK(nm->p[i]);
		int64_t shape[1] = { g_count[i] };
		T_XOK(xfer_manifest_add(nm->m, name, g_dt[i], 1, shape, nm->p[i], XFER_MEM_CUDA, err_));
	}
}

static void nm_free(nmodel *nm)
{
	xfer_manifest_free(&nm->m);
	for (int i = 0; i < NT; i++) free(nm->p[i]);
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
	for (int i = 0; i < NT; i++) content(seed, i, v, nm->p[i], nm->n[i]);
}

static void expect_version(const nmodel *nm, uint64_t seed, uint64_t v, const char *when)
{
	for (int i = 0; i < NT; i++) {
		unsigned char *want = malloc(nm->n[i]);
		content(seed, i, v, want, nm->n[i]);
		for (uint64_t j = 0; j < nm->n[i]; j++)
			if (nm->p[i][j] != want[j])
				T_FAIL("%s: tensor %d byte %llu is 0x%02x, version %llu has 0x%02x (seed %llu)", when, i,
				       (unsigned long long)j, nm->p[i][j], (unsigned long long)v, want[j],
				       (unsigned long long)seed);
		free(want);
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
}

T_TEST(nccl_broadcast_undo) { scenario("broadcast"); }
T_TEST(nccl_broadcast_packed_undo) { scenario("broadcast_packed"); }
