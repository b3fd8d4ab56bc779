/* common/sk_text: text that came from elsewhere (a tag, a node name from
 * gossip, a job name) checked before it is accepted, and escaped before it
 * is printed.  UTF-8 is decoded strictly (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF); "control" means C0 (below 0x20), DEL
 * and C1 (U+0080..U+009F), which a terminal may act on. */
#ifndef SK_TEXT_H
#define SK_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sk_buf.h"

/* Decodes the code point at s (n bytes left): its length 1..4 and *cp, or 0
 * when the bytes there are not valid UTF-8. */
size_t sk_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
bool sk_text_is_control(uint32_t cp);
/* 0 when s is valid UTF-8 with no control character and at most max bytes;
 * otherwise -1 with the reason in why ("byte 3 is a control character"). */
int sk_text_check(const char *s, size_t max, char *why, size_t wl);
/* Appends s for a terminal: valid printable UTF-8 as it is, every control
 * character and every byte of invalid UTF-8 as \xNN. */
void sk_buf_text(sk_buf *b, const char *s);
/* The same into a fixed buffer (cut at a character boundary); returns out. */
const char *sk_text_escape(const char *s, char *out, size_t cap);
/* A node name as membership and Raft take it: 1 to max bytes, none of them
 * a control character (bytes below 0x20, and 0x7f).  Reads at most max + 1
 * bytes, so it is safe on a buffer that may lack its NUL. */
bool sk_name_ok(const char *s, size_t max);

/* FNV-1a of a NUL-terminated string: table keys and stable short names
 * (not a defence against chosen collisions). */
uint64_t sk_str_hash(const char *s);

#endif
