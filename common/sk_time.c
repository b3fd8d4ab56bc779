/* common/sk_time: see sk_time.h. */
#include "common/sk_time.h"

#include <time.h>

static uint64_t ns_of(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t sk_mono_ms(void) { return ns_of(CLOCK_MONOTONIC) / 1000000u; }
static uint64_t suspended_ms;   /* sk_time_sim_suspend */
uint64_t sk_boot_ms(void) { return ns_of(CLOCK_BOOTTIME) / 1000000u + suspended_ms; }
void sk_time_sim_suspend(uint64_t ms) { suspended_ms += ms; }
uint64_t sk_mono_us(void) { return ns_of(CLOCK_MONOTONIC) / 1000u; }
double sk_mono_s(void) { return (double)ns_of(CLOCK_MONOTONIC) / 1e9; }
static int64_t wall_step_ms;

uint64_t sk_wall_ms(void) { return (uint64_t)((int64_t)(ns_of(CLOCK_REALTIME) / 1000000u) + wall_step_ms); }
void sk_time_step_wall(int64_t ms) { wall_step_ms += ms; }
