/* common/sk_rng: a seeded generator per instance (xoshiro256**, seeded by
 * splitmix64).  Nothing in skein calls rand(): every random choice comes from
 * an sk_rng whose seed the caller chose, so a run can be replayed. */
#ifndef SK_RNG_H
#define SK_RNG_H

#include <stdint.h>

typedef struct { uint64_t s[4]; } sk_rng;

void sk_rng_seed(sk_rng *r, uint64_t seed);
uint64_t sk_rng_next(sk_rng *r);
/* Uniform in [0, n); n > 0. */
uint64_t sk_rng_below(sk_rng *r, uint64_t n);
/* Uniform in [0, 1). */
double sk_rng_unit(sk_rng *r);
/* splitmix64 step: also a good 64-bit mixer for deriving child seeds. */
uint64_t sk_mix64(uint64_t x);

#endif
