/* common/sk_time: the one clock seam.
 *
 * Every deadline, lease, backoff and timeout is on the monotonic clock
 * (sk_mono_*): an NTP step, a suspended VM's catch-up or an operator's
 * `date -s` moves the wall clock, and a deadline computed from it would
 * fire at once (a healthy node fenced, its members stopped) or never.  The
 * wall clock (sk_wall_ms) is for what people and other hosts read: log
 * lines, displayed times, the time stamp of a sealed request.
 *
 * The pure cores (membership/, raft/) take `now` as an argument; the agent
 * feeds them sk_mono_ms(), the simulator and the unit tests a fake clock.
 * libev's ev_now() is the wall clock: not used for deadlines (its relative
 * timers are monotonic and fine). */
#ifndef SK_TIME_H
#define SK_TIME_H

#include <stdint.h>

uint64_t sk_mono_ms(void);
uint64_t sk_mono_us(void);
double sk_mono_s(void);
uint64_t sk_wall_ms(void);
/* Moves this process's wall clock by ms (skeind --enable-debug's `debug
 * clock-step`, for the test that steps it): what an NTP step does. */
void sk_time_step_wall(int64_t ms);

#endif
