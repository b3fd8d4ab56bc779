/* tests/fuzz/fuzz_jobflags: skeinctl job submit's flag parser.
 *
 * The input is an argv: arguments separated by NUL bytes.  --file is left
 * out (it opens a path: fuzz_jobyaml covers the YAML reader).  A spec that
 * parses and validates must pack and unpack to the same spec, and a failed
 * parse must leave the caller's spec as it was, with a message. */
#include "tests/fuzz/fuzz_jobs.h"

enum { ARGS_MAX = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strdup(data, size), *argv[ARGS_MAX];
	int argc = 0;
	for (size_t i = 0; i <= size && argc < ARGS_MAX;) {
		char *a = text + i;
		if (!strncmp(a, "--file", 6) && (a[6] == 0 || a[6] == '=')) goto out;
		argv[argc++] = a;
		i += strlen(a) + 1;
	}
	job_spec s;
	char err[512] = "";
	size_t lb;
	job_spec_defaults(&s);
	uint8_t *before = fuzz_spec_packed(&s, &lb);
	int rc = job_spec_parse_args(&s, argc, argv, err, sizeof err);
	FUZZ_CHECK(rc == 0 || err[0]);
	fuzz_spec_after(&s, rc, before, lb);
	free(before);
out:
	free(text);
	return 0;
}
