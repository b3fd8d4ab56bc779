/* jobs/update_codec: weight update records (update_rec) <-> proto/weights.proto.
 *
 * The one file that sees weights.pb-c.h for the replicated table, as
 * job_codec.c is for jobs.  It copies strings into the record's fixed
 * fields (one too long is an error, never cut) and checks nothing else:
 * the rules are update_state.c's.  Internal to jobs/ (update_state.c and its tests). */
#ifndef UPDATE_CODEC_H
#define UPDATE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/update_state.h"

/* A job's versions as a snapshot carries them (JobVersions). */
typedef struct {
	char job[JOB_NAME_MAX + 1];
	uint64_t max_version, committed;
} update_jobver;

int update_codec_encode(const update_rec *u, uint8_t **out, size_t *len);
/* u overwritten (update_rec_free it; freed on error): reason never NULL. */
int update_codec_decode(update_rec *u, const uint8_t *d, size_t n, char *err, size_t errlen);

/* A Snapshot of nu records and nj jobs' versions (*out malloc'd). */
int update_codec_snapshot_encode(const update_rec *const *u, size_t nu, const update_jobver *jv, size_t nj, uint8_t **out,
			     size_t *len);
/* ... and back: *u (nu records, each to update_rec_free, then free(*u)) and
 * *jv (nj) malloc'd; on error nothing is left allocated. */
int update_codec_snapshot_decode(const uint8_t *d, size_t n, update_rec **u, size_t *nu, update_jobver **jv, size_t *nj,
			     char *err, size_t errlen);

#endif
