/* common/sk_log: see sk_log.h. */
#include "common/sk_log.h"
#include "common/sk_time.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static sk_log_level g_level = SK_LOG_INFO;
static sk_log_format g_format = SK_LOG_TEXT;
static char g_name[128];

static const char *const level_names[] = { "debug", "info", "warn", "error", "off" };

void sk_log_set_level(sk_log_level lvl) { g_level = lvl; }
sk_log_level sk_log_get_level(void) { return g_level; }
void sk_log_set_format(sk_log_format fmt) { g_format = fmt; }

void sk_log_set_name(const char *name)
{
	if (!name) { g_name[0] = 0; return; }
	snprintf(g_name, sizeof g_name, "%s", name);
}

int sk_log_parse_level(const char *s, sk_log_level *out)
{
	for (int i = 0; i <= SK_LOG_OFF; i++) {
		if (strcmp(s, level_names[i]) == 0) { *out = (sk_log_level)i; return 0; }
	}
	return -1;
}

/* Copies src into dst, escaping what would break a line or a JSON string. */
static void escape(char *dst, size_t cap, const char *src, int json)
{
	size_t o = 0;
	for (; *src && o + 7 < cap; src++) {
		unsigned char c = (unsigned char)*src;
		if (c == '\n') { dst[o++] = '\\'; dst[o++] = 'n'; }
		else if (json && (c == '"' || c == '\\')) { dst[o++] = '\\'; dst[o++] = (char)c; }
		else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", c);
		else dst[o++] = (char)c;
	}
	dst[o] = 0;
}

void sk_log(sk_log_level lvl, const char *module, const char *fmt, ...)
{
	if (lvl < g_level || lvl >= SK_LOG_OFF) return;
	char msg[1024], esc[2048], ts[96];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);

	struct tm tm;
	uint64_t wall = sk_wall_ms();
	time_t sec = (time_t)(wall / 1000);
	gmtime_r(&sec, &tm);
	snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall % 1000));

	if (g_format == SK_LOG_JSON) {
		escape(esc, sizeof esc, msg, 1);
		fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"%s\"%s%s%s,\"msg\":\"%s\"}\n",
			ts, level_names[lvl], module, g_name[0] ? ",\"node\":\"" : "", g_name,
			g_name[0] ? "\"" : "", esc);
	} else {
		escape(esc, sizeof esc, msg, 0);
		fprintf(stderr, "%s %-5s %s%s%s: %s\n", ts, level_names[lvl], g_name,
			g_name[0] ? " " : "", module, esc);
	}
}
