/* tests/t.h: the unit-test harness.
 *
 * A test is `T_TEST(name) { ... }`; it registers itself at load time.  The
 * runner (tests/t_main.c) forks each test into its own process with a time
 * limit, so a crash or a hang fails that test alone.  Checks print both values
 * and the seed of the run (TEST_SEED=... replays it). */
#ifndef T_H
#define T_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*t_fn)(void);
void t_register(const char *name, t_fn fn, int timeout_s);
/* The seed of this run: TEST_SEED from the environment, or a fixed default. */
uint64_t t_seed(void);
void t_fail_at(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));

#define T_TEST_TIMEOUT(name, secs)                                            \
	static void t_fn_##name(void);                                        \
	__attribute__((constructor)) static void t_reg_##name(void)           \
	{                                                                     \
		t_register(#name, t_fn_##name, secs);                         \
	}                                                                     \
	static void t_fn_##name(void)
#define T_TEST(name) T_TEST_TIMEOUT(name, 60)

#define T_FAIL(...) t_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define T_CHECK(c)                                                            \
	do { if (!(c)) T_FAIL("check failed: %s", #c); } while (0)
#define T_EQ(a, b)                                                            \
	do {                                                                  \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);       \
		if (t_a_ != t_b_)                                             \
			T_FAIL("%s == %s: %lld != %lld", #a, #b, t_a_, t_b_); \
	} while (0)
#define T_LE(a, b)                                                            \
	do {                                                                  \
		double t_a_ = (double)(a), t_b_ = (double)(b);                \
		if (!(t_a_ <= t_b_))                                          \
			T_FAIL("%s <= %s: %g > %g", #a, #b, t_a_, t_b_);      \
	} while (0)
#define T_STREQ(a, b)                                                         \
	do {                                                                  \
		const char *t_a_ = (a), *t_b_ = (b);                          \
		if (!t_a_ || !t_b_ || strcmp(t_a_, t_b_) != 0)                \
			T_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b,          \
			       t_a_ ? t_a_ : "(null)", t_b_ ? t_b_ : "(null)");\
	} while (0)

#endif
