/* jobs/wv_codec: weight update records (wv_update) <-> proto/weights.proto.
 *
 * The one file that sees weights.pb-c.h for the replicated table, as
 * job_codec.c is for jobs.  It copies strings into the record's fixed
 * fields (one too long is an error, never cut) and checks nothing else:
 * the rules are wv_state.c's.  Internal to jobs/ (wv_state.c and its tests). */
#ifndef WV_CODEC_H
#define WV_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/wv_state.h"

/* A job's versions as a snapshot carries them (JobVersions). */
typedef struct {
	char job[JOB_NAME_MAX + 1];
	uint64_t max_version, committed;
} wv_jobver;

int wv_codec_encode(const wv_update *u, uint8_t **out, size_t *len);
/* u overwritten (wv_update_free it; freed on error): reason never NULL. */
int wv_codec_decode(wv_update *u, const uint8_t *d, size_t n, char *err, size_t errlen);

/* A Snapshot of nu records and nj jobs' versions (*out malloc'd). */
int wv_codec_snapshot_encode(const wv_update *const *u, size_t nu, const wv_jobver *jv, size_t nj, uint8_t **out,
			     size_t *len);
/* ... and back: *u (nu records, each to wv_update_free, then free(*u)) and
 * *jv (nj) malloc'd; on error nothing is left allocated. */
int wv_codec_snapshot_decode(const uint8_t *d, size_t n, wv_update **u, size_t *nu, wv_jobver **jv, size_t *nj,
			     char *err, size_t errlen);

#endif
