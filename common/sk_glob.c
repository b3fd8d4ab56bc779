/* common/sk_glob: see sk_glob.h. */
#include "common/sk_glob.h"

#include <stdio.h>
#include <string.h>

/* The set at p (just after '['): whether c is in it; *end set past ']'.
 * false with *end NULL when the set is not closed. */
static bool set_has(const char *p, unsigned char c, const char **end)
{
	bool neg = *p == '!' || *p == '^', in = false;
	if (neg) p++;
	bool first = true;
	while (*p && (first || *p != ']')) {
		first = false;
		unsigned char lo = (unsigned char)*p++;
		if (lo == '\\' && *p) lo = (unsigned char)*p++;
		unsigned char hi = lo;
		if (p[0] == '-' && p[1] && p[1] != ']') {
			p++;
			hi = (unsigned char)*p++;
			if (hi == '\\' && *p) hi = (unsigned char)*p++;
		}
		if (lo <= c && c <= hi) in = true;
	}
	if (*p != ']') { *end = NULL; return false; }
	*end = p + 1;
	return in != neg;
}

int sk_glob_check(const char *pattern, char *why, size_t whylen)
{
	size_t n = strlen(pattern);
	if (n > SK_GLOB_MAX) {
		snprintf(why, whylen, "pattern longer than %d bytes", SK_GLOB_MAX);
		return -1;
	}
	for (const char *p = pattern; *p;) {
		if (*p == '\\') {
			if (!p[1]) { snprintf(why, whylen, "pattern ends with a lone '\\'"); return -1; }
			p += 2;
		} else if (*p == '[') {
			const char *end;
			set_has(p + 1, 0, &end);
			if (!end) { snprintf(why, whylen, "'[' without its ']'"); return -1; }
			p = end;
		} else {
			p++;
		}
	}
	return 0;
}

bool sk_glob_match(const char *pattern, const char *s)
{
	const char *p = pattern, *star_p = NULL, *star_s = NULL;
	while (*s) {
		const char *next = NULL;
		if (*p == '*') {
			/* a run of stars is one star; remember where to resume */
			while (*p == '*') p++;
			if (!*p) return true;
			star_p = p;
			star_s = s;
			continue;
		}
		if (*p == '?') {
			next = p + 1;
		} else if (*p == '[') {
			const char *end;
			if (set_has(p + 1, (unsigned char)*s, &end)) next = end;
		} else if (*p == '\\' && p[1]) {
			if (p[1] == *s) next = p + 2;
		} else if (*p && *p == *s) {
			next = p + 1;
		}
		if (next) {
			p = next;
			s++;
		} else if (star_p) {
			/* the last star takes one more byte: earlier stars never need
			 * to, which is what keeps this O(len(p) * len(s)) */
			p = star_p;
			s = ++star_s;
		} else {
			return false;
		}
	}
	while (*p == '*') p++;
	return !*p;
}
