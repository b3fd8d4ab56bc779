/* common/sk_text: see sk_text.h. */
#include "common/sk_text.h"

#include <stdio.h>
#include <string.h>

size_t sk_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (!n) return 0;
	unsigned char c = s[0];
	size_t len;
	uint32_t v, min;
	if (c < 0x80) { *cp = c; return 1; }
	if (c >= 0xc2 && c <= 0xdf) { len = 2; v = c & 0x1f; min = 0x80; }
	else if (c >= 0xe0 && c <= 0xef) { len = 3; v = c & 0x0f; min = 0x800; }
	else if (c >= 0xf0 && c <= 0xf4) { len = 4; v = c & 0x07; min = 0x10000; }
	else return 0; /* a continuation byte, 0xc0/0xc1 (overlong) or 0xf5.. */
	if (n < len) return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
	*cp = v;
	return len;
}

bool sk_text_is_control(uint32_t cp)
{
	return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f);
}

int sk_text_check(const char *s, size_t max, char *why, size_t wl)
{
	size_t n = strlen(s);
	if (n > max) {
		snprintf(why, wl, "longer than %zu bytes", max);
		return -1;
	}
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = sk_utf8_next(p + i, n - i, &cp);
		if (!k) {
			snprintf(why, wl, "byte %zu (0x%02x) is not valid UTF-8", i + 1, p[i]);
			return -1;
		}
		if (sk_text_is_control(cp)) {
			snprintf(why, wl, "byte %zu is a control character (U+%04X)", i + 1, (unsigned)cp);
			return -1;
		}
		i += k;
	}
	return 0;
}

void sk_buf_text(sk_buf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = sk_utf8_next(p + i, n - i, &cp);
		if (k && !sk_text_is_control(cp)) {
			sk_buf_add(b, p + i, k);
			i += k;
			continue;
		}
		if (!k) k = 1; /* one invalid byte at a time */
		for (size_t j = 0; j < k; j++) sk_buf_printf(b, "\\x%02x", p[i + j]);
		i += k;
	}
}

const char *sk_text_escape(const char *s, char *out, size_t cap)
{
	if (!cap) return out;
	sk_buf b;
	sk_buf_init(&b);
	sk_buf_text(&b, s);
	size_t len = b.len < cap - 1 ? b.len : cap - 1;
	/* never cut inside a character or an escape */
	while (len && len < b.len) {
		unsigned char c = (unsigned char)b.p[len];
		bool cont = (c & 0xc0) == 0x80;
		bool esc = len >= 1 && (b.p[len - 1] == '\\' || (len >= 2 && b.p[len - 2] == '\\' && b.p[len - 1] == 'x') ||
					(len >= 3 && b.p[len - 3] == '\\' && b.p[len - 2] == 'x'));
		if (!cont && !esc) break;
		len--;
	}
	if (b.oom) len = 0;
	memcpy(out, b.oom ? "" : sk_buf_str(&b), len);
	out[len] = 0;
	sk_buf_free(&b);
	return out;
}

bool sk_name_ok(const char *s, size_t max)
{
	if (!s || !*s) return false;
	size_t n = strnlen(s, max + 1);
	if (n > max) return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
	return true;
}

uint64_t sk_str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001b3ULL;
	return h;
}
