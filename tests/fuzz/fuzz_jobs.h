/* tests/fuzz/fuzz_jobs.h: for the job spec targets. */
#ifndef FUZZ_JOBS_H
#define FUZZ_JOBS_H

#include "tests/fuzz/fuzz.h"

#include "jobs/job_codec.h"
#include "jobs/job_spec.h"
#include "proto/jobs.pb-c.h"

/* The packed protobuf of a spec (malloc'd): two specs are the same when
 * these bytes are. */
static inline uint8_t *fuzz_spec_packed(const job_spec *s, size_t *len)
{
	Skein__Jobs__JobSpec pb;
	job_spec_to_pb(s, &pb);
	*len = skein__jobs__job_spec__get_packed_size(&pb);
	uint8_t *b = malloc(*len + 1);
	if (!b) abort();
	skein__jobs__job_spec__pack(&pb, b);
	return b;
}

/* A valid spec must unpack, decode and validate to the same bytes again. */
static inline void fuzz_spec_roundtrip(const job_spec *s)
{
	char err[512];
	size_t len, tlen;
	uint8_t *buf = fuzz_spec_packed(s, &len);
	Skein__Jobs__JobSpec *pb = skein__jobs__job_spec__unpack(NULL, len, buf);
	FUZZ_CHECK(pb);
	job_spec t;
	FUZZ_CHECK(job_spec_from_pb(&t, pb, err, sizeof err) == 0);
	FUZZ_CHECK(job_spec_validate(&t, err, sizeof err) == 0);
	skein__jobs__job_spec__free_unpacked(pb, NULL);
	uint8_t *tb = fuzz_spec_packed(&t, &tlen);
	FUZZ_CHECK(tlen == len && !memcmp(tb, buf, len));
	free(tb);
	free(buf);
}

/* After a parse that returned rc: a failure leaves the spec as it was
 * (before: its packed bytes then), a success that validates round-trips. */
static inline void fuzz_spec_after(job_spec *s, int rc, const uint8_t *before, size_t blen)
{
	char err[512];
	size_t la;
	if (rc != 0) {
		uint8_t *after = fuzz_spec_packed(s, &la);
		FUZZ_CHECK(la == blen && !memcmp(after, before, la));
		free(after);
	} else if (job_spec_validate(s, err, sizeof err) == 0) {
		fuzz_spec_roundtrip(s);
	}
}

#endif
