/* common/sk_glob: shell-style patterns for client input, at bounded cost.
 *
 * Syntax (a subset of fnmatch(3) without flags): `*` any run of bytes, `?`
 * one byte, `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) one byte of a set, `\x`
 * the byte x itself; everything else matches itself.  A pattern matches the
 * whole string.
 *
 * Why not regcomp: a client's regex like ((a{1,100}){1,100}){1,100} makes
 * glibc build an automaton of millions of states (gigabytes, seconds of the
 * agent's loop).  Here sk_glob_check refuses a pattern longer than
 * SK_GLOB_MAX or malformed, and sk_glob_match runs in O(len(pattern) *
 * len(string)) time with no allocation: one backtrack point (the last `*`)
 * is all it keeps. */
#ifndef SK_GLOB_H
#define SK_GLOB_H

#include <stdbool.h>
#include <stddef.h>

enum { SK_GLOB_MAX = 256 };

/* 0 when pattern is well formed; -1 with a one-line reason in why. */
int sk_glob_check(const char *pattern, char *why, size_t whylen);
/* Whether s matches the whole pattern (a checked one; an unchecked bad
 * pattern simply fails to match where it is bad). */
bool sk_glob_match(const char *pattern, const char *s);

#endif
