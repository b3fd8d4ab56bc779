/* common/sk_buf: a growable byte buffer with printf and JSON-string append.
 * Out of memory sets `oom` and later appends do nothing, so a caller checks
 * once at the end instead of after every call. */
#ifndef SK_BUF_H
#define SK_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
	char *p;
	size_t len, cap;
	bool oom;
} sk_buf;

void sk_buf_init(sk_buf *b);
void sk_buf_free(sk_buf *b);
void sk_buf_add(sk_buf *b, const void *data, size_t n);
void sk_buf_printf(sk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string, quotes included: always valid JSON (invalid
 * UTF-8 as \ufffd, control characters as \u00XX; see sk_text.h). */
void sk_buf_json_str(sk_buf *b, const char *s);
/* NUL-terminated contents ("" when empty); valid until the next append. */
const char *sk_buf_str(sk_buf *b);

#endif
