/* jobs/job_codec: the plain C job model <-> proto/jobs.proto records.
 *
 * The spec (job_spec) and the layout (job_layout) cross into and out of
 * protobuf here and nowhere else in jobs/; callers pass the generated
 * records as opaque pointers.  Decoding checks lengths and never trusts a
 * count from the record beyond what the spec sizes. */
#ifndef JOB_CODEC_H
#define JOB_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/job_model.h"
#include "jobs/job_spec.h"

struct Skein__Jobs__JobSpec;
struct Skein__Jobs__Job;

/* The spec as a JobSpec (pointers into s: keep s alive while pb is used);
 * and back, checking every string against its field (decode does not
 * validate the rules: job_spec_validate does). */
void job_spec_to_pb(const job_spec *s, struct Skein__Jobs__JobSpec *pb);
int job_spec_from_pb(job_spec *s, const struct Skein__Jobs__JobSpec *pb, char *err, size_t errlen);

/* The layout of record j, sized for its spec s (extra slots or engines in
 * the record are ignored, missing ones read unplaced / 0); -1 when memory
 * runs out.  A record without a layout gives an empty one. */
int job_codec_layout(job_layout *L, const struct Skein__Jobs__Job *j, const job_spec *s);
/* Whether record j has a placement (a layout with slots). */
bool job_codec_placed(const struct Skein__Jobs__Job *j);
/* Packs the update of record `old`: this state and reason, layout L (NULL:
 * old's), version + 1 (the compare-and-set job_state checks).  *out is
 * malloc'd; -1 when memory runs out. */
int job_codec_update(const struct Skein__Jobs__Job *old, const char *state, const char *reason, const job_layout *L,
		     uint8_t **out, size_t *len);

#endif
