/* common/sk_time: the one clock seam.
 *
 * Every deadline, lease, backoff and timeout is on a monotonic clock
 * (sk_mono_*; raft's leases on sk_boot_ms, which also counts a suspend):
 * an NTP step, a suspended VM's catch-up or an operator's `date -s` moves
 * the wall clock, and a deadline computed from it would
 * fire at once (a healthy node fenced, its members stopped) or never.  The
 * wall clock (sk_wall_ms) is for what people and other hosts read: log
 * lines, displayed times, the time stamp of a sealed request.
 *
 * The pure cores (membership/, raft/) take `now` as an argument; the agent
 * feeds them sk_mono_ms() (raft: sk_boot_ms()), the simulator and the
 * unit tests a fake clock.
 * libev's ev_now() is the wall clock: not used for deadlines (its relative
 * timers are monotonic and fine). */
#ifndef SK_TIME_H
#define SK_TIME_H

#include <stdint.h>

uint64_t sk_mono_ms(void);
/* Monotonic and counting a system suspend (CLOCK_BOOTTIME): the clock of
 * leases (raft).  CLOCK_MONOTONIC stops while the host is suspended, so a
 * head suspended past its lease would wake believing the lease still
 * held while its voters, whose clocks ran on, had elected a successor. */
uint64_t sk_boot_ms(void);
/* For tests: makes sk_boot_ms jump ms ahead while sk_mono_ms does not, as
 * a suspend of ms does. */
void sk_time_sim_suspend(uint64_t ms);
uint64_t sk_mono_us(void);
double sk_mono_s(void);
uint64_t sk_wall_ms(void);
/* Moves this process's wall clock by ms (skeind --enable-debug's `debug
 * clock-step`, for the test that steps it): what an NTP step does. */
void sk_time_step_wall(int64_t ms);

#endif
