/* tests/fuzz/fuzz_wv: the replicated table of weight updates
 * (jobs/update_state.c, jobs/update_codec.c), as a voter meets its bytes: a
 * UPDATE_ENTRY_PUT from the log and a snapshot's section.
 *
 * The input is (1) decoded as an Update: one that decodes passes the field
 * rules and round-trips through the encoder byte for byte; (2) applied to a
 * table holding an open and a committed update: refused, the table is
 * byte for byte as it was; applied, the record reads back as decoded and
 * the table's snapshot restores to the same bytes; (3) restored as a
 * snapshot over that table: refused, nothing changed; restored, it
 * serializes and restores again to the same bytes. */
#include "tests/fuzz/fuzz.h"

#include "jobs/update_state.h"
#include "tests/unit/update_fixture.h"

static uint8_t *base;      /* the starting table's snapshot */
static size_t base_len;

static void base_put(update_state *s, const char *job, uint64_t v, const char *state, const char *eng)
{
	update_rec u;
	update_engine e[2];
	update_fixture(&u, e, 2, job, v, state, eng);
	uint8_t *b;
	size_t n;
	FUZZ_CHECK(update_rec_encode(&u, &b, &n) == 0);
	FUZZ_CHECK(update_state_apply(s, b, n) == 0);
	free(b);
}

static update_state *fresh(void)
{
	char err[200];
	if (!base) {
		update_state *s = update_state_new();
		base_put(s, "j", 1, "preparing", "pending");
		base_put(s, "j", 1, "committed", "verified");
		base_put(s, "j", 2, "preparing", "pending");
		base_put(s, "k", 1, "preparing", "pending");
		base_put(s, "k", 1, "aborted", "failed");
		FUZZ_CHECK(update_state_serialize(s, &base, &base_len) == 0);
		update_state_free(&s);
	}
	update_state *s = update_state_new();
	FUZZ_CHECK(s && update_state_restore(s, base, base_len, err, sizeof err) == 0);
	return s;
}

static bool same_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
	return na == nb && (na == 0 || !memcmp(a, b, na));
}

/* s's snapshot restores into a new table with the same bytes. */
static void snapshot_stable(const update_state *s)
{
	uint8_t *a, *b;
	size_t na, nb;
	char err[200];
	FUZZ_CHECK(update_state_serialize(s, &a, &na) == 0);
	update_state *t = update_state_new();
	FUZZ_CHECK(update_state_restore(t, a, na, err, sizeof err) == 0);
	FUZZ_CHECK(update_state_serialize(t, &b, &nb) == 0);
	FUZZ_CHECK(same_bytes(a, na, b, nb));
	free(a);
	free(b);
	update_state_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[200];
	update_rec u;
	uint8_t *enc = NULL, *enc2 = NULL, *before, *after;
	size_t nenc = 0, nenc2, nb, na;
	/* (1) decode */
	bool decoded = update_rec_decode(&u, data, size, err, sizeof err) == 0;
	if (decoded) {
		update_rec d;
		FUZZ_CHECK(update_rec_check(&u, err, sizeof err) == 0);
		FUZZ_CHECK(u.reason && (u.nengines == 0 || u.engines));
		FUZZ_CHECK(update_rec_encode(&u, &enc, &nenc) == 0);
		FUZZ_CHECK(update_rec_decode(&d, enc, nenc, err, sizeof err) == 0);
		FUZZ_CHECK(update_rec_encode(&d, &enc2, &nenc2) == 0);
		FUZZ_CHECK(same_bytes(enc, nenc, enc2, nenc2));
		free(enc2);
		update_rec_free(&d);
	}
	/* (2) apply */
	update_state *s = fresh();
	FUZZ_CHECK(update_state_serialize(s, &before, &nb) == 0);
	int rc = update_state_apply(s, data, size);
	FUZZ_CHECK(rc == 0 || rc == -1);
	FUZZ_CHECK(rc == -1 || decoded);
	if (rc < 0) {
		FUZZ_CHECK(update_state_serialize(s, &after, &na) == 0);
		FUZZ_CHECK(same_bytes(before, nb, after, na));
		FUZZ_CHECK(update_state_refused(s) == 1);
		free(after);
	} else {
		const update_rec *got = update_state_get(s, u.job, u.version);
		FUZZ_CHECK(got && update_rec_encode(got, &enc2, &nenc2) == 0);
		FUZZ_CHECK(same_bytes(enc, nenc, enc2, nenc2));
		free(enc2);
		FUZZ_CHECK(update_state_max_version(s, u.job) >= u.version);
		FUZZ_CHECK(update_state_committed(s, "j") >= 1);
		snapshot_stable(s);
	}
	update_state_free(&s);
	/* (3) restore */
	s = fresh();
	err[0] = 0;
	if (update_state_restore(s, data, size, err, sizeof err) == 0) {
		snapshot_stable(s);
	} else {
		FUZZ_CHECK(err[0]);
		FUZZ_CHECK(update_state_serialize(s, &after, &na) == 0);
		FUZZ_CHECK(same_bytes(before, nb, after, na));
		free(after);
	}
	update_state_free(&s);
	free(before);
	free(enc);
	if (decoded) update_rec_free(&u);
	return 0;
}
