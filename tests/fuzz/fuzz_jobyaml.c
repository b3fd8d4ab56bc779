/* tests/fuzz/fuzz_jobyaml: the YAML job file reader (libyaml's event API,
 * jobs/job_spec.c), from memory.  A file that fails leaves the spec as it
 * was and the message names the file; one that parses and validates packs
 * and unpacks to the same spec. */
#include "tests/fuzz/fuzz_jobs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	job_spec s;
	char err[512] = "";
	size_t lb;
	job_spec_defaults(&s);
	uint8_t *before = fuzz_spec_packed(&s, &lb);
	int rc = job_spec_parse_yaml_buf(&s, "job.yaml", data, size, err, sizeof err);
	FUZZ_CHECK(rc == 0 || !strncmp(err, "job.yaml", 8));
	fuzz_spec_after(&s, rc, before, lb);
	free(before);
	return 0;
}
