/* jobs/job_codec: the plain C job model <-> proto/jobs.proto messages.
 *
 * The spec (job_spec), the layout (job_layout), the job record (job_rec),
 * the head's orders (job_assignment) and the agents' reports (job_report)
 * cross into and out of protobuf here and nowhere else: this is the one
 * file of jobs/ and agent/ that includes jobs.pb-c.h; callers see the
 * generated types as opaque pointers at most.  Decoding copies every field
 * out (bounded by the C fields) so nothing points into the unpacked
 * message. */
#ifndef JOB_CODEC_H
#define JOB_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/job_model.h"
#include "jobs/job_order.h"
#include "jobs/job_spec.h"

struct Skein__Jobs__JobSpec;
struct Skein__Jobs__Job;

/* The spec as a JobSpec (pointers into s: keep s alive while pb is used);
 * and back, checking every string against its field (decode does not
 * validate the rules: job_spec_validate does). */
void job_spec_to_pb(const job_spec *s, struct Skein__Jobs__JobSpec *pb);
int job_spec_from_pb(job_spec *s, const struct Skein__Jobs__JobSpec *pb, char *err, size_t errlen);

/* A packed JobSpec (skeinctl job submit's payload): 0, -2 when the bytes
 * do not unpack, -1 with err when a string does not fit its field. */
int job_codec_spec_unpack(job_spec *s, const uint8_t *data, size_t len, char *err, size_t errlen);
/* ... and packed (*out malloc'd); -1 when memory runs out. */
int job_codec_spec_pack(const job_spec *s, uint8_t **out, size_t *len);

/* A packed Job into a record (r is overwritten; job_rec_free it): -1 when
 * the bytes do not unpack, carry no spec, a spec string does not fit its
 * field, or memory runs out.  The rules are job_state's to check. */
int job_codec_decode(job_rec *r, const uint8_t *data, size_t len);
/* A record packed (*out malloc'd); -1 when memory runs out. */
int job_codec_encode(const job_rec *r, uint8_t **out, size_t *len);
/* The update of record `old`: this state and reason (NULL: ""), layout L
 * (NULL: old's), version + 1 (the compare-and-set job_state checks). */
int job_codec_update(const job_rec *old, const char *state, const char *reason, const job_layout *L,
		     uint8_t **out, size_t *len);
/* A Drain entry (proto/jobs.proto): -1 when it does not unpack or its node
 * name is empty or longer than JOB_NODE_MAX. */
int job_codec_drain_decode(const uint8_t *data, size_t len, char node[JOB_NODE_MAX + 1], bool *on, uint64_t *since_ms);
int job_codec_drain_encode(const char *node, bool on, uint64_t since_ms, uint8_t **out, size_t *len);
/* The head's orders to one agent (an Assignment), packed (*out malloc'd);
 * -1 when memory runs out. */
int job_codec_assignment_encode(const job_assignment *as, uint8_t **out, size_t *len);
/* ... and back into *as (job_assignment_free it): -1 with err when the
 * bytes do not unpack or a field breaks its bound (job_order.h). */
int job_codec_assignment_decode(job_assignment *as, const uint8_t *data, size_t len, char *err, size_t errlen);
void job_assignment_free(job_assignment *as);   /* a decoded one; safe twice */
/* An agent's report, packed (*out malloc'd); -1 when memory runs out. */
int job_codec_report_encode(const job_report *r, uint8_t **out, size_t *len);
/* ... and back into *r (job_report_free it): -1 with err as above. */
int job_codec_report_decode(job_report *r, const uint8_t *data, size_t len, char *err, size_t errlen);
void job_report_free(job_report *r);            /* frees its members; safe twice */

/* A generated Job packed as it is (tests and tools build raw records). */
int job_codec_pack(const struct Skein__Jobs__Job *j, uint8_t **out, size_t *len);

#endif
