/* tests/t_main.c: runs the tests registered with T_TEST, each in a forked
 * child with an alarm, and prints one line per test and a summary line
 * "# N passed, M failed" that tests/run.sh adds up.  Arguments filter tests
 * by substring. */
#include "tests/t.h"

#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { T_MAX = 512 };
static struct { const char *name; t_fn fn; int timeout; } g_tests[T_MAX];
static int g_ntests;
static uint64_t g_seed;

void t_register(const char *name, t_fn fn, int timeout_s)
{
	if (g_ntests < T_MAX) {
		g_tests[g_ntests].name = name;
		g_tests[g_ntests].fn = fn;
		g_tests[g_ntests].timeout = timeout_s;
		g_ntests++;
	}
}

uint64_t t_seed(void) { return g_seed; }

void t_fail_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stdout, "  %s:%d: ", file, line);
	vfprintf(stdout, fmt, ap);
	fprintf(stdout, " (replay: TEST_SEED=%" PRIu64 ")\n", g_seed);
	va_end(ap);
	fflush(stdout);
	_exit(1);
}

int main(int argc, char **argv)
{
	const char *s = getenv("TEST_SEED");
	g_seed = s && *s ? strtoull(s, NULL, 0) : 20261129;
	int passed = 0, failed = 0;
	for (int i = 0; i < g_ntests; i++) {
		int want = argc < 2;
		for (int a = 1; a < argc; a++)
			if (strstr(g_tests[i].name, argv[a])) want = 1;
		if (!want) continue;
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			alarm((unsigned)g_tests[i].timeout);
			g_tests[i].fn();
			fflush(stdout);
			_exit(0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			passed++;
			printf("ok   %s (%.0f ms)\n", g_tests[i].name, ms);
		} else {
			failed++;
			if (WIFSIGNALED(st))
				printf("  killed by signal %d%s (replay: TEST_SEED=%" PRIu64 ")\n",
				       WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (timeout)" : "", g_seed);
			printf("FAIL %s (%.0f ms)\n", g_tests[i].name, ms);
		}
		fflush(stdout);
	}
	printf("# %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
