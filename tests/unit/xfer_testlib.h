/* tests/unit/xfer_testlib.h: helpers shared by the xfer_*_test.c files.
 *
 * A "model" is a set of host tensors of every dtype and odd sizes, plus one
 * larger than the bucket the test uses; step() changes a fraction of the
 * elements the way an RL update does (a few scattered elements per tensor,
 * low bits only, sometimes more).  Everything is drawn from a seeded sk_rng.
 * Temporary folders are made with mkdtemp and removed by the test. */
#ifndef XFER_TESTLIB_H
#define XFER_TESTLIB_H

#include "common/sk_rng.h"
#include "tests/t.h"
#include "transfer/include/skein_xfer.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	size_t n;
	unsigned char **p;
	uint64_t *bytes;
	xfer_manifest *m;
} tmodel;

#define T_XOK(call)                                                                 \
	do {                                                                        \
		xfer_err t_e_ = { 0 };                                              \
		xfer_err *err_ = &t_e_;                                             \
		if ((call) != 0) T_FAIL("%s: %s (%s)", #call, t_e_.msg, xfer_code_name(t_e_.code)); \
		(void)err_;                                                         \
	} while (0)

static inline void tm_fill(sk_rng *r, unsigned char *p, uint64_t n)
{
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t x = sk_rng_next(r);
		memcpy(p + i, &x, 8);
	}
	for (; i < n; i++) p[i] = (unsigned char)sk_rng_next(r);
}

/* Tensors of every dtype with odd element counts, then `big` bytes of bf16
 * (0: none).  Same seed, same shapes; contents random. */
static inline void tm_make(tmodel *t, sk_rng *r, uint64_t big, int fill)
{
	static const int64_t counts[] = { 1, 3, 17, 1001, 4097, 0, 65537, 7 };
	memset(t, 0, sizeof *t);
	t->m = xfer_manifest_new();
	size_t cap = XFER_DTYPE_COUNT * 2 + 2;
	t->p = calloc(cap, sizeof *t->p);
	t->bytes = calloc(cap, sizeof *t->bytes);
	for (int d = 0; d < XFER_DTYPE_COUNT; d++) {
		for (int k = 0; k < 2; k++) {
			int64_t shape[2] = { counts[(d + k * 3) % 8], k ? 3 : 1 };
			char name[64];
			snprintf(name, sizeof name, "layers.%d.%s.w%d", d, xfer_dtype_name((xfer_dtype)d), k);
			uint64_t nb = (uint64_t)(shape[0] * shape[1]) * xfer_dtype_size((xfer_dtype)d);
			t->p[t->n] = malloc(nb + 1);
			if (fill) tm_fill(r, t->p[t->n], nb);
			else memset(t->p[t->n], 0xA5, nb);
			t->bytes[t->n] = nb;
			xfer_err e;
			if (xfer_manifest_add(t->m, name, (xfer_dtype)d, 2, shape, t->p[t->n], XFER_MEM_HOST, &e) != 0)
				T_FAIL("manifest_add: %s", e.msg);
			t->n++;
		}
	}
	if (big) {
		int64_t shape[1] = { (int64_t)(big / 2) };
		t->p[t->n] = malloc(big);
		if (fill) tm_fill(r, t->p[t->n], big);
		else memset(t->p[t->n], 0xA5, big);
		t->bytes[t->n] = big;
		xfer_err e;
		if (xfer_manifest_add(t->m, "embed.big", XFER_BF16, 1, shape, t->p[t->n], XFER_MEM_HOST, &e) != 0)
			T_FAIL("manifest_add: %s", e.msg);
		t->n++;
	}
}

static inline void tm_free(tmodel *t)
{
	for (size_t i = 0; i < t->n; i++) free(t->p[i]);
	free(t->p);
	free(t->bytes);
	xfer_manifest_free(&t->m);
}

/* Changes about frac of the elements of every tensor (frac 1: all bytes). */
static inline void tm_step(tmodel *t, sk_rng *r, double frac)
{
	for (size_t i = 0; i < t->n; i++) {
		const xfer_tensor *x = xfer_manifest_tensor(t->m, i);
		size_t esz = xfer_dtype_size(x->dtype), nel = x->nbytes / esz;
		if (frac >= 1.0) {
			for (size_t b = 0; b < x->nbytes; b++) t->p[i][b] ^= (unsigned char)(1 + sk_rng_below(r, 255));
			continue;
		}
		size_t k = (size_t)(nel * frac + sk_rng_unit(r));
		for (size_t c = 0; c < k && nel; c++) {
			size_t e = sk_rng_below(r, nel);
			t->p[i][e * esz] ^= (unsigned char)(1 + sk_rng_below(r, 3));
			if (sk_rng_below(r, 8) == 0) t->p[i][e * esz + esz - 1] ^= 0x80;
		}
	}
}

static inline int tm_equal(const tmodel *a, const tmodel *b)
{
	if (a->n != b->n) return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->bytes[i] != b->bytes[i] || memcmp(a->p[i], b->p[i], a->bytes[i]) != 0) return 0;
	return 1;
}

static inline void tm_copy(tmodel *dst, const tmodel *src)
{
	for (size_t i = 0; i < src->n; i++) memcpy(dst->p[i], src->p[i], src->bytes[i]);
}

static inline char *t_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char *d = malloc(512);
	snprintf(d, 512, "%s/skein-xfer-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(d)) T_FAIL("mkdtemp %s", d);
	return d;
}

static inline void t_rmdir(char *d)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	if (system(cmd) != 0) T_FAIL("cannot remove %s", d);
	free(d);
}

/* Waits for pid up to ms; kills it (SIGKILL) and fails when it is late. */
static inline int t_wait_child(pid_t pid, int ms)
{
	for (int waited = 0;; waited += 5) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (waited >= ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			T_FAIL("child %d still running after %d ms", (int)pid, ms);
		}
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

#endif
