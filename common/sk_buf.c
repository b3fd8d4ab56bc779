/* common/sk_buf: see sk_buf.h. */
#include "common/sk_buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sk_text.h"

void sk_buf_init(sk_buf *b) { memset(b, 0, sizeof *b); }

void sk_buf_free(sk_buf *b)
{
	free(b->p);
	sk_buf_init(b);
}

static bool reserve(sk_buf *b, size_t extra)
{
	if (b->oom) return false;
	if (b->len + extra + 1 <= b->cap) return true;
	size_t ncap = b->cap ? b->cap : 256;
	while (ncap < b->len + extra + 1) ncap *= 2;
	char *np = realloc(b->p, ncap);
	if (!np) { b->oom = true; return false; }
	b->p = np;
	b->cap = ncap;
	return true;
}

void sk_buf_add(sk_buf *b, const void *data, size_t n)
{
	if (!n) return; /* data may be NULL then (an empty buffer's) */
	if (!reserve(b, n)) return;
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
}

void sk_buf_printf(sk_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(b, (size_t)n)) return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* Invalid UTF-8 (a tag or name from another agent may hold anything)
 * becomes U+FFFD, one per bad byte; control characters, C1 included,
 * become \u00XX: the output is always valid JSON and safe on a terminal. */
void sk_buf_json_str(sk_buf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	sk_buf_add(b, "\"", 1);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = sk_utf8_next(p + i, n - i, &cp);
		if (!k) {
			sk_buf_add(b, "\\ufffd", 6);
			i++;
			continue;
		}
		if (cp == '"' || cp == '\\') {
			char e[2] = { '\\', (char)cp };
			sk_buf_add(b, e, 2);
		} else if (sk_text_is_control(cp)) {
			sk_buf_printf(b, "\\u%04x", (unsigned)cp);
		} else {
			sk_buf_add(b, p + i, k);
		}
		i += k;
	}
	sk_buf_add(b, "\"", 1);
}

const char *sk_buf_str(sk_buf *b) { return b->p ? b->p : ""; }
