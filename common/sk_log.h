/* common/sk_log: leveled logging to stderr as text or JSON lines.
 *
 * One process-wide logger: level and format are set once at start (and on
 * SIGHUP by the agent).  Messages that carry peer-supplied strings go through
 * sk_log's own escaping, so a hostile name cannot forge log lines. */
#ifndef SK_LOG_H
#define SK_LOG_H

#include <stdarg.h>

typedef enum { SK_LOG_DEBUG = 0, SK_LOG_INFO, SK_LOG_WARN, SK_LOG_ERROR, SK_LOG_OFF } sk_log_level;
typedef enum { SK_LOG_TEXT = 0, SK_LOG_JSON } sk_log_format;

void sk_log_set_level(sk_log_level lvl);
sk_log_level sk_log_get_level(void);
void sk_log_set_format(sk_log_format fmt);
/* Name shown in every line (the agent's node name); NULL for none. */
void sk_log_set_name(const char *name);
/* Parses "debug|info|warn|error|off"; returns -1 on an unknown word. */
int sk_log_parse_level(const char *s, sk_log_level *out);

void sk_log(sk_log_level lvl, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define SK_DEBUG(mod, ...) \
	do { if (sk_log_get_level() <= SK_LOG_DEBUG) sk_log(SK_LOG_DEBUG, mod, __VA_ARGS__); } while (0)
#define SK_INFO(mod, ...) sk_log(SK_LOG_INFO, mod, __VA_ARGS__)
#define SK_WARN(mod, ...) sk_log(SK_LOG_WARN, mod, __VA_ARGS__)
#define SK_ERROR(mod, ...) sk_log(SK_LOG_ERROR, mod, __VA_ARGS__)

#endif
