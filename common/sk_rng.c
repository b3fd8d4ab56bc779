/* common/sk_rng: see sk_rng.h. */
#include "common/sk_rng.h"

uint64_t sk_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

void sk_rng_seed(sk_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		seed = sk_mix64(seed);
		r->s[i] = seed;
	}
	if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sk_rng_next(sk_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

uint64_t sk_rng_below(sk_rng *r, uint64_t n)
{
	/* Lemire's multiply-shift; the bias is below 2^-32 for the sizes we use. */
	return (uint64_t)(((unsigned __int128)sk_rng_next(r) * n) >> 64);
}

double sk_rng_unit(sk_rng *r) { return (double)(sk_rng_next(r) >> 11) * 0x1.0p-53; }
