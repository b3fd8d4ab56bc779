/* tests/unit/wv_coord_test: jobs/wv_coord, the rules of one open update
 * (docs/updates.md, "The transaction"), on a fake clock.
 *
 * One test per rule: commit once every participant verified and the
 * sender is done (never before the begin applied, never twice); drop or
 * abort on a lost participant; a participant's failure aborts; the
 * sender's done can fail a verified engine; the root cross-check; the
 * sender's failure, loss and a newer begin; the watchdog (only the
 * sender's heartbeat and verdicts are progress); an adopted update's
 * clocks; the final and measured records' timings. */
#include "tests/t.h"

#include <stdlib.h>

#include "jobs/wv_coord.h"
#include "tests/unit/wv_fixture.h"

static const wv_timings T0 = { 0 };

/* c: job "j" v5, n engines pending (j/engine-<i> on n<i+2>), begun at
 * t=100 s with mode and a 10 s watchdog; root (16 bytes of 0xaa) when
 * with_root. */
static void start(wv_coord *c, size_t n, const char *mode, bool drop, bool with_root)
{
	wv_engine *e = calloc(n ? n : 1, sizeof *e);
	wv_update u, r;
	T_CHECK(e);
	wv_fixture(&u, e, n, "j", 5, "preparing", "pending");
	snprintf(u.mode, sizeof u.mode, "%s", mode);
	u.started_ms = 1700000000000ull;
	if (with_root) memset(u.root, 0xaa, WV_DIGEST_LEN), u.has_root = true;
	T_EQ(wv_update_copy(&r, &u), 0);
	free(e);
	T_EQ(wv_coord_start(c, &r, 100.0, 10000, drop, false), 0);
	T_EQ(r.engines == NULL, 1); /* moved */
	wv_coord_begun(c, 100.5);
}

/* The sender's done (ok), then the settle its caller makes. */
static bool done_ok(wv_coord *c, double now, const uint8_t *root)
{
	bool fin = wv_coord_done(c, now, true, "", root, 1.25, 4096, 0.5, (wv_timings){ 0.5, 0.25, 0, 0 });
	return wv_coord_settle(c, now) || fin;
}

T_TEST(commits_once_all_verified_and_done)
{
	char err[256];
	wv_coord c;
	start(&c, 3, "disk-delta", true, false);
	T_EQ(c.rec.prepare_seconds * 1000, 500);
	T_EQ(wv_coord_pending(&c), 3);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0.25, T0, NULL));
	T_CHECK(!wv_coord_staged(&c, 1, 102, 0.25, T0, NULL));
	T_CHECK(!done_ok(&c, 103, NULL)); /* engine 2 still pending */
	T_EQ(wv_coord_pending(&c), 1);
	T_CHECK(wv_coord_staged(&c, 2, 104, 0.5, T0, NULL));
	T_STREQ(c.final_state, "committed");
	T_STREQ(c.final_cause, "");
	/* once: nothing after the verdict changes it */
	T_CHECK(!wv_coord_failed(&c, 2, 105, 0, T0, "late"));
	T_CHECK(!wv_coord_tick(&c, 1000));
	T_CHECK(!wv_coord_sender_lost(&c, 106, "its node failed"));
	T_STREQ(c.final_state, "committed");
	wv_update f;
	T_EQ(wv_coord_final(&c, 104.25, 1700000004250ull, &f), 0);
	T_STREQ(f.state, "committed");
	T_EQ(f.update_seconds * 1000, 4250);   /* from the begin at 100 */
	T_EQ(f.commit_seconds * 1000, 250);    /* from the last word at 104 */
	T_EQ(f.finished_ms, 1700000004250ull);
	T_EQ(f.wire_bytes, 4096);
	T_EQ(f.implementation_seconds * 100, 125);
	T_EQ(f.sender_t.data * 2, 1);
	T_EQ(f.engines[2].seconds * 2, 1);
	T_CHECK(!f.measured);
	T_EQ(wv_update_check(&f, err, sizeof err), 0);
	/* the amendment, once applied: measured to the commit */
	wv_update m;
	T_EQ(wv_coord_measured(&c, &f, 105, 1700000005000ull, &m), 0);
	T_CHECK(m.measured);
	T_EQ(m.update_seconds, 5);
	T_EQ(m.commit_seconds, 1);
	wv_update unused;
	T_EQ(wv_coord_measured(&c, &m, 106, 1700000006000ull, &unused), 1); /* measured already */
	wv_update_free(&m);
	wv_update_free(&f);
	wv_coord_free(&c);
	wv_coord_free(&c); /* safe twice */
}

T_TEST(no_commit_before_the_begin_applied)
{
	wv_coord c;
	wv_engine e[1];
	wv_update u, r;
	wv_fixture(&u, e, 1, "j", 2, "preparing", "pending");
	T_EQ(wv_update_copy(&r, &u), 0);
	T_EQ(wv_coord_start(&c, &r, 0, 0, true, false), 0);
	T_CHECK(!done_ok(&c, 1, NULL));
	T_CHECK(!wv_coord_staged(&c, 0, 2, 0, T0, NULL));
	T_CHECK(!c.final);
	wv_coord_begun(&c, 3);
	T_CHECK(wv_coord_settle(&c, 3));
	T_STREQ(c.final_state, "committed");
	wv_coord_free(&c);
}

T_TEST(a_lost_participant_is_dropped_in_drop_mode)
{
	wv_coord c;
	start(&c, 2, "p2p-tcp", true, false);
	T_CHECK(!wv_coord_lose(&c, 1, 101, "its node failed", false, false));
	T_STREQ(c.rec.engines[1].state, "dropped");
	T_STREQ(c.rec.engines[1].reason, "its node failed");
	T_CHECK(!wv_coord_lose(&c, 1, 101, "again", false, false)); /* once */
	T_STREQ(c.rec.engines[1].reason, "its node failed");
	T_CHECK(!done_ok(&c, 102, NULL));
	T_CHECK(wv_coord_staged(&c, 0, 103, 0, T0, NULL));
	T_STREQ(c.final_state, "committed");
	wv_coord_free(&c);
	/* every participant lost: it commits without any (the sender done) */
	start(&c, 1, "p2p-tcp", true, false);
	T_CHECK(!done_ok(&c, 101, NULL));
	T_CHECK(wv_coord_lose(&c, 0, 102, "its process exited (exited)", false, false));
	T_STREQ(c.final_state, "committed");
	wv_coord_free(&c);
}

T_TEST(a_lost_participant_aborts_in_abort_mode)
{
	wv_coord c;
	start(&c, 2, "disk-delta", false, false);
	T_CHECK(wv_coord_lose(&c, 0, 101, "its process exited (exited)", false, false));
	T_STREQ(c.final_state, "aborted");
	T_STREQ(c.final_cause, "member_lost");
	T_STREQ(c.final_reason, "j/engine-0 on n2: its process exited (exited)");
	T_STREQ(c.rec.engines[0].state, "failed");
	wv_coord_free(&c);
}

T_TEST(a_participants_failure_aborts)
{
	wv_coord c;
	start(&c, 3, "disk-delta", true, false);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, NULL));
	T_CHECK(wv_coord_failed(&c, 2, 102, 0.75, T0, "checksum mismatch in tensor w"));
	T_STREQ(c.final_state, "aborted");
	T_STREQ(c.final_cause, "engine");
	T_STREQ(c.final_reason, "j/engine-2 on n4: checksum mismatch in tensor w");
	T_EQ(c.rec.engines[2].seconds * 4, 3);
	wv_coord_free(&c);
	/* no reason given: "failed" */
	start(&c, 1, "disk-delta", true, false);
	T_CHECK(wv_coord_failed(&c, 0, 101, 0, T0, ""));
	T_STREQ(c.final_reason, "j/engine-0 on n2: failed");
	wv_coord_free(&c);
}

T_TEST(the_senders_done_fails_a_verified_engine)
{
	wv_coord c;
	start(&c, 2, "p2p-tcp", true, false);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, NULL));
	T_CHECK(!done_ok(&c, 102, NULL));
	/* not served by the sender, though it says it verified: a fault */
	T_CHECK(!wv_coord_lose(&c, 0, 102, "not reached", false, false)); /* not by the sender: verified holds */
	T_STREQ(c.rec.engines[0].state, "verified");
	T_CHECK(wv_coord_lose(&c, 0, 102, "checksum mismatch", true, true));
	T_STREQ(c.final_state, "aborted");
	T_STREQ(c.final_cause, "engine");
	wv_coord_free(&c);
	/* unreachable (no fault), drop mode: dropped, even over verified */
	start(&c, 2, "p2p-tcp", true, false);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, NULL));
	T_CHECK(!done_ok(&c, 102, NULL));
	T_CHECK(!wv_coord_lose(&c, 0, 102, "the sender could not reach it: refused", false, true));
	T_STREQ(c.rec.engines[0].state, "dropped");
	T_CHECK(wv_coord_staged(&c, 1, 103, 0, T0, NULL));
	T_STREQ(c.final_state, "committed");
	wv_coord_free(&c);
}

T_TEST(the_root_cross_check)
{
	uint8_t good[WV_DIGEST_LEN], bad[WV_DIGEST_LEN];
	memset(good, 0xaa, sizeof good);
	memset(bad, 0xbb, sizeof bad);
	wv_coord c;
	/* every verified engine's root is the sender's: committed */
	start(&c, 2, "p2p-tcp", true, true);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, good));
	T_CHECK(!wv_coord_staged(&c, 1, 101, 0, T0, good));
	T_CHECK(done_ok(&c, 102, good));
	T_STREQ(c.final_state, "committed");
	wv_coord_free(&c);
	/* one verified against another root: aborted, a checksum fault */
	start(&c, 2, "p2p-tcp", true, true);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, good));
	T_CHECK(!wv_coord_staged(&c, 1, 101, 0, T0, bad));
	T_CHECK(done_ok(&c, 102, good));
	T_STREQ(c.final_state, "aborted");
	T_STREQ(c.final_cause, "engine");
	T_CHECK(strstr(c.final_reason, "j/engine-1 on n3: version 5: root mismatch: the checksums it verified against"));
	wv_coord_free(&c);
	/* a p2p engine that says no root when the sender declared one: refused */
	start(&c, 1, "p2p-tcp", true, true);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, NULL));
	T_CHECK(done_ok(&c, 102, NULL));
	T_STREQ(c.final_state, "aborted");
	T_CHECK(strstr(c.final_reason, "it verified against no root"));
	wv_coord_free(&c);
	/* NCCL and colocated engines check nothing and say none: fine */
	const char *modes[] = { "broadcast", "broadcast_packed", "colocated" };
	for (size_t i = 0; i < 3; i++) {
		start(&c, 1, modes[i], true, true);
		T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, NULL));
		T_CHECK(done_ok(&c, 102, NULL));
		T_STREQ(c.final_state, "committed");
		wv_coord_free(&c);
	}
	/* the root only at done: kept for the check and the final record */
	start(&c, 1, "p2p-tcp", true, false);
	T_CHECK(!wv_coord_staged(&c, 0, 101, 0, T0, bad));
	T_CHECK(done_ok(&c, 102, good));
	T_STREQ(c.final_state, "aborted");
	T_CHECK(c.rec.has_root);
	wv_coord_free(&c);
	/* the done's root is not its begin's: the sender's fault */
	start(&c, 1, "p2p-tcp", true, true);
	T_CHECK(done_ok(&c, 101, bad));
	T_STREQ(c.final_cause, "sender");
	T_STREQ(c.final_reason, "j/trainer-0 (sender) on n1: the root in its done differs from its begin's");
	wv_coord_free(&c);
}

T_TEST(the_sender_fails_dies_or_begins_anew)
{
	wv_coord c;
	start(&c, 1, "disk-delta", true, false);
	T_CHECK(wv_coord_done(&c, 101, false, "disk full", NULL, 0, 0, 0, T0));
	T_STREQ(c.final_cause, "sender");
	T_STREQ(c.final_reason, "j/trainer-0 (sender) on n1: disk full");
	wv_coord_free(&c);
	start(&c, 1, "disk-delta", true, false);
	T_CHECK(wv_coord_sender_lost(&c, 101, "its node failed"));
	T_STREQ(c.final_reason, "j/trainer-0 (sender) on n1: its node failed");
	wv_coord_free(&c);
	/* after its done the sender's part is over: its death changes nothing */
	start(&c, 1, "disk-delta", true, false);
	T_CHECK(!done_ok(&c, 101, NULL));
	T_CHECK(!wv_coord_sender_lost(&c, 102, "its process exited"));
	T_CHECK(wv_coord_staged(&c, 0, 103, 0, T0, NULL));
	T_STREQ(c.final_state, "committed");
	wv_coord_free(&c);
	start(&c, 1, "disk-delta", true, false);
	T_CHECK(wv_coord_superseded(&c, 101, "j/trainer-0: sender restarted or gave up (it began v6)"));
	T_STREQ(c.final_cause, "superseded");
	wv_coord_free(&c);
	/* a done said again does not count twice */
	start(&c, 1, "disk-delta", true, false);
	T_CHECK(!done_ok(&c, 101, NULL));
	T_CHECK(!wv_coord_done(&c, 102, false, "late", NULL, 0, 0, 0, T0));
	T_CHECK(!c.final);
	wv_coord_free(&c);
}

T_TEST(the_watchdog_counts_only_progress)
{
	char err[256];
	wv_coord c;
	start(&c, 2, "p2p-tcp", true, false); /* begun at 100, 10 s */
	T_CHECK(!wv_coord_tick(&c, 110.0));   /* exactly the timeout: not yet */
	wv_coord_progress(&c, 109);           /* the sender's heartbeat */
	T_CHECK(!wv_coord_tick(&c, 118.5));
	T_CHECK(!wv_coord_staged(&c, 0, 118.5, 0, T0, NULL)); /* a verdict is progress */
	T_CHECK(!wv_coord_tick(&c, 128.5));
	T_CHECK(wv_coord_tick(&c, 128.6));
	T_STREQ(c.final_cause, "timeout");
	T_STREQ(c.final_reason, "watchdog: no progress for 10.0 s; waiting for j/trainer-0 (sender) j/engine-1");
	wv_coord_free(&c);
	/* once the sender is done, its heartbeat is not progress */
	start(&c, 1, "p2p-tcp", true, false);
	T_CHECK(!done_ok(&c, 101, NULL));
	wv_coord_progress(&c, 110);
	T_CHECK(wv_coord_tick(&c, 111.5));
	T_STREQ(c.final_reason, "watchdog: no progress for 10.0 s; waiting for j/engine-0");
	wv_coord_free(&c);
	/* no watchdog configured */
	wv_engine e[1];
	wv_update u, r;
	wv_fixture(&u, e, 1, "j", 2, "preparing", "pending");
	T_EQ(wv_update_copy(&r, &u), 0);
	T_EQ(wv_coord_start(&c, &r, 0, 0, true, false), 0);
	T_CHECK(!wv_coord_tick(&c, 1e6));
	wv_coord_free(&c);
	/* many pending engines: the reason stays bounded */
	start(&c, 200, "p2p-tcp", true, false);
	T_CHECK(wv_coord_tick(&c, 200));
	T_LE(strlen(c.final_reason), WVC_REASON_MAX - 1);
	wv_update f;
	T_EQ(wv_coord_final(&c, 200, 1700000100000ull, &f), 0);
	T_EQ(wv_update_check(&f, err, sizeof err), 0);
	wv_update_free(&f);
	wv_coord_free(&c);
}

T_TEST(an_adopted_update_runs_from_the_takeover)
{
	wv_coord c;
	wv_engine e[2];
	wv_update u, r;
	wv_fixture(&u, e, 2, "j", 7, "preparing", "pending");
	u.started_ms = 1700000000000ull;
	T_EQ(wv_update_copy(&r, &u), 0);
	T_EQ(wv_coord_start(&c, &r, 500, 10000, true, true), 0);
	T_CHECK(c.begun);
	T_CHECK(!wv_coord_tick(&c, 510)); /* the watchdog from the takeover, not the old begin */
	T_EQ(wv_coord_since_begin(&c, 505, 1700000003000ull), 3); /* the wall clock both heads share */
	T_EQ(wv_coord_since_begin(&c, 505, 1600000000000ull), 0); /* never negative */
	T_CHECK(!done_ok(&c, 501, NULL));
	T_CHECK(!wv_coord_staged(&c, 0, 502, 0, T0, NULL));
	T_CHECK(wv_coord_lose(&c, 1, 503, "its node failed", false, false));
	T_STREQ(c.final_state, "committed");
	wv_update f;
	T_EQ(wv_coord_final(&c, 504, 1700000004000ull, &f), 0);
	T_EQ(f.update_seconds, 4);
	T_EQ(f.commit_seconds, 1);
	wv_update_free(&f);
	wv_coord_free(&c);
}

T_TEST(bad_indices_are_ignored)
{
	wv_coord c;
	start(&c, 1, "p2p-tcp", true, false);
	T_CHECK(!wv_coord_staged(&c, 1, 101, 0, T0, NULL));
	T_CHECK(!wv_coord_failed(&c, 5, 101, 0, T0, "x"));
	T_CHECK(!wv_coord_lose(&c, (size_t)-1, 101, "x", true, true));
	T_EQ(wv_coord_find(&c, "j/engine-0"), 0);
	T_EQ(wv_coord_find(&c, "j/engine-1"), -1);
	T_CHECK(!c.final);
	wv_coord_free(&c);
}
