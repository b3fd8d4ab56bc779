/* tests/fuzz/fuzz.h: what the libFuzzer targets share.
 *
 * A target checks properties, not only "no crash": FUZZ_CHECK aborts with
 * the failed condition, so libFuzzer keeps the input as a crash. */
#ifndef FUZZ_H
#define FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c)                                                             \
	do {                                                                      \
		if (!(c)) {                                                       \
			fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, \
				__LINE__, #c);                                    \
			abort();                                                  \
		}                                                                 \
	} while (0)

/* A NUL-terminated, malloc'd copy of the input. */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s) abort();
	if (size) memcpy(s, data, size);
	s[size] = 0;
	return s;
}

#endif
