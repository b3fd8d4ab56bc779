/* tests/fuzz/fuzz_seal: opening a sealed blob (agent/agent_crypto.c
 * agent_open), the first thing an agent does with a control request or a
 * gossip packet when it holds a key.
 *
 * With a fixed keyring of three keys (AES-128, -192, -256): the input as
 * it comes must not open (a forgery; nothing is written past the output's
 * size); the input sealed under each key opens to itself with that key's
 * index; the same seal with one byte flipped (chosen by the input) or
 * opened under another channel's associated data does not open. */
#include "tests/fuzz/fuzz.h"

#include "agent/agent_crypto.h"
#include "agent/agent_rpc.h"

#define AAD_REQ AGENT_RPC_AAD_REQ
#define AAD_RESP AGENT_RPC_AAD_RESP

static const agent_keyring *ring(void)
{
	static agent_keyring kr;
	if (kr.n) return &kr;
	static const uint8_t lens[3] = { 32, 16, 24 };
	for (int i = 0; i < 3; i++) {
		agent_key k = { .len = lens[i] };
		for (int b = 0; b < k.len; b++) k.key[b] = (uint8_t)(i * 37 + b);
		char err[100];
		if (agent_keyring_add(&kr, &k, err, sizeof err) != 0) abort();
	}
	return &kr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const agent_keyring *kr = ring();
	size_t outlen = 0;
	/* exactly the size agent_open may write: n - CRYPTO_OVERHEAD */
	uint8_t *out = malloc(size > CRYPTO_OVERHEAD ? size - CRYPTO_OVERHEAD : 1);
	if (!out) abort();
	FUZZ_CHECK(agent_open(kr, AAD_REQ, data, size, out, &outlen) < 0);
	free(out);

	uint8_t *sealed = malloc(size + CRYPTO_OVERHEAD), *plain = malloc(size + 1);
	if (!sealed || !plain) abort();
	for (int i = 0; i < kr->n; i++) {
		FUZZ_CHECK(agent_seal_key(&kr->keys[i], AAD_REQ, data, size, sealed) == 0);
		FUZZ_CHECK(agent_open(kr, AAD_REQ, sealed, size + CRYPTO_OVERHEAD, plain, &outlen) == i);
		FUZZ_CHECK(outlen == size && (!size || !memcmp(plain, data, size)));
		FUZZ_CHECK(agent_open(kr, AAD_RESP, sealed, size + CRYPTO_OVERHEAD, plain, &outlen) < 0);
		size_t at = size ? (data[0] * 257u + size) % (size + CRYPTO_OVERHEAD) : 0;
		sealed[at] ^= (uint8_t)(1u << (size % 8));
		FUZZ_CHECK(agent_open(kr, AAD_REQ, sealed, size + CRYPTO_OVERHEAD, plain, &outlen) < 0);
	}
	free(sealed);
	free(plain);
	return 0;
}
