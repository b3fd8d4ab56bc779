/* transfer/core/xfer_err.c: libskein's error codes and messages, and its clock.
 *
 * Every function of libskein fails the same way: -1, with a code (xfer_code)
 * and a one-line message in the caller's xfer_err.  Its clock is the
 * monotonic one, read here only: timeouts and an update's timings must not
 * move with the wall clock.  libskein stands alone (trainers and engines
 * link it without the agent's common/), so it does not use sk_time.h. */
#include "transfer/core/xfer_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <time.h>

static const char *const code_names[] = {
	"ok", "invalid argument", "out of memory", "I/O error", "checksum mismatch",
	"timeout", "peer error", "unavailable", "chain error", "format error",
	"manifest mismatch", "aborted", "no new version",
};

const char *xfer_code_name(xfer_code c)
{
	if ((unsigned)c >= sizeof code_names / sizeof code_names[0]) return "unknown";
	return code_names[c];
}

static int vfail(xfer_err *err, xfer_code code, int with_errno, const char *fmt, va_list ap)
{
	int e = errno;
	if (!err) return -1;
	err->code = code;
	int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	if (with_errno && n >= 0 && (size_t)n < sizeof err->msg)
		snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", strerror(e));
	return -1;
}

int xfer_fail(xfer_err *err, xfer_code code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(err, code, 0, fmt, ap);
	va_end(ap);
	return -1;
}

int xfer_fail_errno(xfer_err *err, xfer_code code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(err, code, 1, fmt, ap);
	va_end(ap);
	return -1;
}

void xfer_err_prefix(xfer_err *err, const char *fmt, ...)
{
	if (!err) return;
	char pre[256], old[sizeof err->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof old);
	old[sizeof old - 1] = 0;
	size_t k = 0, cap = sizeof err->msg - 1;
	const char *parts[3] = { pre, ": ", old };
	for (int i = 0; i < 3; i++)
		for (const char *c = parts[i]; *c && k < cap; c++) err->msg[k++] = *c;
	err->msg[k] = 0;
}

double xfer_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
