/* tests/fuzz/fuzz_envelope: what an agent does with a control request and
 * skeinctl with an answer before trusting either (agent/agent_rpc.c,
 * agent/agent_auth.c, docs/security.md).
 *
 * The input is read as an answer, plaintext and sealed under a fixed
 * operator key: a sealed one opens only when it carries the request's
 * nonce, and never under the cluster key's associated data.  It is also
 * read as a request whose command and arguments go to agent_auth_needs
 * (every command has a role; forwarded ones are agent-only), and its first
 * bytes as nonces for the replay cache (a nonce is new once, then seen
 * until it expires). */
#include "tests/fuzz/fuzz.h"

#include "agent/agent_auth.h"
#include "agent/agent_rpc.h"
#include "proto/control.pb-c.h"

static agent_keyring *ring(void)
{
	static agent_keyring kr;
	if (kr.n) return &kr;
	agent_key k = { .len = 32 };
	for (int b = 0; b < 32; b++) k.key[b] = (uint8_t)(b * 7 + 1);
	char err[100];
	if (agent_keyring_add(&kr, &k, err, sizeof err) != 0) abort();
	return &kr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	agent_keyring *kr = ring();
	agent_rpc_cred op = { .kr = kr, .operator_key = true }, plain = { .kr = NULL };
	uint8_t nonce[AUTH_NONCE] = { 0 };
	memcpy(nonce, data, size < AUTH_NONCE ? size : AUTH_NONCE);
	char why[256];

	/* as an answer, plaintext */
	Skein__Control__Response *r = agent_resp_open(data, size, &plain, nonce, why, sizeof why);
	if (r) skein__control__response__free_unpacked(r, NULL);
	/* sealed under the operator key: opens only with the nonce it carries */
	uint8_t *sealed = malloc(size + CRYPTO_OVERHEAD);
	if (!sealed) abort();
	FUZZ_CHECK(agent_seal_key(&kr->keys[0], AGENT_RPC_AAD_OP_RESP, data, size, sealed) == 0);
	r = agent_resp_open(sealed, size + CRYPTO_OVERHEAD, &op, nonce, why, sizeof why);
	if (r) {
		FUZZ_CHECK(r->nonce.len == AUTH_NONCE && !memcmp(r->nonce.data, nonce, AUTH_NONCE));
		skein__control__response__free_unpacked(r, NULL);
	}
	agent_rpc_cred cluster = { .kr = kr, .operator_key = false };
	FUZZ_CHECK(!agent_resp_open(sealed, size + CRYPTO_OVERHEAD, &cluster, nonce, why, sizeof why));
	free(sealed);

	/* as a request: every command gets a role; forwarded means agent */
	Skein__Control__Request *q = skein__control__request__unpack(NULL, size, data);
	if (q) {
		agent_role need = agent_auth_needs(q->cmd, (const char *const *)q->args, q->n_args, q->forwarded);
		FUZZ_CHECK(need >= ROLE_LOOK && need <= ROLE_AGENT);
		if (q->forwarded) FUZZ_CHECK(need == ROLE_AGENT);
		skein__control__request__free_unpacked(q, NULL);
	}

	/* nonces from the input: new once, then seen until they expire */
	static agent_replay *rc;
	static uint64_t now = 1000;
	if (!rc && !(rc = agent_replay_new())) abort();
	now += 7;
	for (size_t off = 0; off + AUTH_NONCE <= size && off < 64 * AUTH_NONCE; off += AUTH_NONCE) {
		int first = agent_replay_check(rc, data + off, now, now + 30000);
		FUZZ_CHECK(first >= 0);
		if (first == 0) FUZZ_CHECK(agent_replay_check(rc, data + off, now, now + 30000) == 1);
	}
	return 0;
}
