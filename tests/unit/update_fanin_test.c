/* tests/unit/update_fanin_test: jobs/update_fanin, an agent speaking for its
 * engines' waits to the head (issue 25, item 2), on a fake clock.
 *
 * A new engine or a failure is reported at once; "staged" words wait for
 * the node's other participants (at most FLUSH_S); an idle node's report is
 * its long poll, so it reports at most once per IDLE_S; a lost head's
 * report goes again; a gone engine is said once; engines' own waits are
 * answered idle after HOLD_S, forgotten after FORGET_S; bad input. */
#include "tests/t.h"

#include <stdio.h>
#include <string.h>

#include "jobs/update_fanin.h"

/* n engines j/engine-<i>, each waiting at t, the first report sent and
 * answered with "receive v" for all of them. */
static void node(update_fanin *f, size_t n, double t, uint64_t v)
{
	update_fanin_init(f);
	T_EQ(update_fanin_due(f, t), -1);
	for (size_t i = 0; i < n; i++) {
		char m[32];
		snprintf(m, sizeof m, "j/engine-%zu", i);
		T_EQ(update_fanin_wait(f, m, 1, v - 1, 0, 0, t), (long)i);
	}
	T_CHECK(update_fanin_due(f, t) <= t); /* new engines: at once */
	update_fanin_sent(f, t);
	T_CHECK(update_fanin_due(f, t) > t);
	update_fanin_answered(f);
	for (size_t i = 0; i < n; i++) update_fanin_told(f, i, v);
}

T_TEST(staged_words_go_in_one_report)
{
	update_fanin f;
	node(&f, 8, 100, 5);
	update_fanin_sent(&f, 100); /* the long poll */
	uint64_t r0 = f.reports;
	for (size_t i = 0; i < 7; i++) {
		char m[32];
		snprintf(m, sizeof m, "j/engine-%zu", i);
		update_fanin_wait(&f, m, 1, 4, 5, 0, 100.01 + i * 0.01);
		T_CHECK(update_fanin_due(&f, 100.1) > 100.1); /* engine-7 has not said */
	}
	T_EQ(update_fanin_due(&f, 100.1), 100.01 + UPDATE_FANIN_FLUSH_S);
	update_fanin_wait(&f, "j/engine-7", 1, 4, 5, 0, 100.1);
	T_CHECK(update_fanin_due(&f, 100.1) <= 100.1); /* every word in: now */
	update_fanin_sent(&f, 100.1);
	T_EQ(f.reports, r0 + 1);
}

T_TEST(a_slow_engine_holds_the_others_at_most_flush)
{
	update_fanin f;
	node(&f, 4, 100, 5);
	update_fanin_wait(&f, "j/engine-0", 1, 4, 5, 0, 100.2);
	T_EQ(update_fanin_due(&f, 100.2), 100.2 + UPDATE_FANIN_FLUSH_S);
	T_CHECK(update_fanin_due(&f, 100.2 + UPDATE_FANIN_FLUSH_S) <= 100.2 + UPDATE_FANIN_FLUSH_S);
}

T_TEST(a_failure_goes_at_once)
{
	update_fanin f;
	node(&f, 4, 100, 5);
	update_fanin_sent(&f, 100);
	update_fanin_wait(&f, "j/engine-2", 1, 4, 0, 5, 100.05);
	T_CHECK(update_fanin_due(&f, 100.05) <= 100.05);
}

T_TEST(a_gone_engine_is_said_once_and_no_longer_awaited)
{
	update_fanin f;
	node(&f, 2, 100, 5);
	update_fanin_sent(&f, 100);
	update_fanin_wait(&f, "j/engine-0", 1, 4, 5, 0, 100.05);
	update_fanin_gone(&f, 1, 100.06);
	T_CHECK(update_fanin_due(&f, 100.06) <= 100.06);
	T_EQ(f.e[1].gone, 1);
	update_fanin_sent(&f, 100.06);
	T_EQ(f.n, 1);
	T_EQ(update_fanin_find(&f, "j/engine-1"), -1);
	/* a new process of it: known again, reported at once */
	T_EQ(update_fanin_wait(&f, "j/engine-1", 2, 0, 0, 0, 101), 1);
	T_CHECK(update_fanin_due(&f, 101) <= 101);
}

T_TEST(an_idle_node_reports_at_most_once_per_idle_interval)
{
	update_fanin f;
	node(&f, 8, 0, 5);
	/* the engines' waits go on locally (each second); the head holds the
	 * node's report until IDLE_S, then answers it: over 60 s, 60/IDLE_S */
	double held_until = -1;
	uint64_t r0 = f.reports;
	for (int ms = 0; ms <= 60000; ms += 10) {
		double t = ms / 1e3;
		size_t out[UPDATE_FANIN_MAX];
		size_t k = update_fanin_expire(&f, t, out, UPDATE_FANIN_MAX);
		for (size_t i = 0; i < k; i++) T_EQ(f.e[out[i]].waiting, 0);
		if (ms % 1000 == 0)
			for (size_t i = 0; i < 8; i++) {
				char m[32];
				snprintf(m, sizeof m, "j/engine-%zu", i);
				if (!f.e[i].waiting) update_fanin_wait(&f, m, 1, 5, 0, 0, t);
			}
		if (f.in_flight && t >= held_until) update_fanin_answered(&f);
		double d = update_fanin_due(&f, t);
		if (d >= 0 && d <= t) {
			update_fanin_sent(&f, t);
			held_until = t + UPDATE_FANIN_IDLE_S;
		}
	}
	/* the first (held 4 -> 5: a word) then one per IDLE_S */
	T_LE(f.reports - r0, (uint64_t)(60 / UPDATE_FANIN_IDLE_S) + 2);
	T_EQ(f.n, 8);
}

T_TEST(an_unanswered_report_goes_again)
{
	update_fanin f;
	node(&f, 1, 0, 5);
	update_fanin_sent(&f, 10);
	T_EQ(update_fanin_due(&f, 10), 10 + UPDATE_FANIN_IDLE_S + UPDATE_FANIN_FLUSH_S);
}

T_TEST(waits_expire_and_silent_engines_are_forgotten)
{
	update_fanin f;
	node(&f, 2, 0, 5);
	size_t out[4];
	update_fanin_wait(&f, "j/engine-0", 1, 4, 0, 0, 1);
	update_fanin_wait(&f, "j/engine-1", 1, 4, 0, 0, 1.5);
	T_EQ(update_fanin_expire(&f, 2.2, out, 4), 1);
	T_EQ(out[0], 0);
	update_fanin_sent(&f, 2.2);
	T_EQ(update_fanin_expire(&f, 2.6, out, 4), 1);
	T_EQ(out[0], 1);
	update_fanin_wait(&f, "j/engine-1", 1, 4, 0, 0, 5);
	T_EQ(update_fanin_expire(&f, 12, out, 4), 1); /* engine-0 silent 11 s: forgotten */
	T_EQ(f.n, 1);
	T_STREQ(f.e[0].member, "j/engine-1");
}

T_TEST(bad_input)
{
	update_fanin f;
	update_fanin_init(&f);
	char big[UPDATE_MEMBER_MAX + 8];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = 0;
	T_EQ(update_fanin_wait(&f, big, 1, 0, 0, 0, 0), -1);
	for (int i = 0; i < UPDATE_FANIN_MAX; i++) {
		char m[32];
		snprintf(m, sizeof m, "j/engine-%d", i);
		T_EQ(update_fanin_wait(&f, m, 1, 0, 0, 0, 0), i);
	}
	T_EQ(update_fanin_wait(&f, "j/engine-999", 1, 0, 0, 0, 0), -1);
	update_fanin_gone(&f, 9999, 1);
	update_fanin_told(&f, 9999, 3);
	T_EQ(f.n, UPDATE_FANIN_MAX);
}
