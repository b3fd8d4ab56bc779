/* tests/unit/glob_test.c: common/sk_glob, the patterns of `members
 * --status/--tag`: syntax, refusals, and bounded time on hostile input. */
#include "tests/t.h"

#include <string.h>
#include <time.h>

#include "common/sk_glob.h"

static bool m(const char *p, const char *s) { return sk_glob_match(p, s); }

T_TEST(glob_basics)
{
	T_CHECK(m("alive", "alive"));
	T_CHECK(!m("alive", "alive2"));
	T_CHECK(!m("ali", "alive"));
	T_CHECK(m("*", ""));
	T_CHECK(m("*", "anything"));
	T_CHECK(m("a*", "alive"));
	T_CHECK(m("*e", "alive"));
	T_CHECK(m("a*i*e", "alive"));
	T_CHECK(!m("a*x*e", "alive"));
	T_CHECK(m("?live", "alive"));
	T_CHECK(!m("?", ""));
	T_CHECK(m("[as]uspect", "suspect"));
	T_CHECK(m("[!d]*", "alive"));
	T_CHECK(!m("[!a]*", "alive"));
	T_CHECK(m("[^a]*", "dead"));
	T_CHECK(m("h100-[0-9]", "h100-7"));
	T_CHECK(!m("h100-[0-9]", "h100-x"));
	T_CHECK(m("[]]", "]"));
	T_CHECK(m("a\\*", "a*"));
	T_CHECK(!m("a\\*", "ab"));
	T_CHECK(m("alive|dead", "alive|dead")); /* no alternation: literal */
	T_CHECK(!m("**a**b", "xxaxxbxx"));
	T_CHECK(m("**a**b**", "xxaxxb"));
}

T_TEST(glob_refusals)
{
	char why[128];
	T_EQ(sk_glob_check("a*b?[c-d]\\*", why, sizeof why), 0);
	T_EQ(sk_glob_check("[abc", why, sizeof why), -1);
	T_CHECK(strstr(why, "']'") != NULL);
	T_EQ(sk_glob_check("abc\\", why, sizeof why), -1);
	char big[SK_GLOB_MAX + 2];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = 0;
	T_EQ(sk_glob_check(big, why, sizeof why), -1);
	T_EQ(sk_glob_check("((a{1,100}){1,100}){1,100}", why, sizeof why), 0); /* a literal here */
	T_CHECK(!m("((a{1,100}){1,100}){1,100}", "aaaa"));
}

/* The worst case of a star matcher: many stars and a near-miss subject.
 * Quadratic at most: 256 x 64 KiB in well under a second. */
T_TEST(glob_hostile_is_fast)
{
	char p[SK_GLOB_MAX + 1], s[65536 + 1];
	for (int i = 0; i < SK_GLOB_MAX; i++) p[i] = i % 2 ? 'a' : '*';
	p[SK_GLOB_MAX - 1] = 'b';
	p[SK_GLOB_MAX] = 0;
	memset(s, 'a', sizeof s - 1);
	s[sizeof s - 1] = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	T_CHECK(!m(p, s));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	T_LE(ms, 1000.0);
}
