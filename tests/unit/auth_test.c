/* tests/unit/auth_test: the control channel's roles, replay cache and sealed
 * envelope (agent/agent_auth, agent/agent_rpc's pack and open). */
#include "tests/t.h"

#include "agent/agent_auth.h"
#include "agent/agent_rpc.h"
#include "common/sk_time.h"
#include "common/sk_rng.h"
#include "proto/control.pb-c.h"

static agent_role needs(const char *cmd, const char *a0)
{
	const char *args[1] = { a0 };
	return agent_auth_needs(cmd, args, a0 ? 1 : 0, false);
}

T_TEST(auth_command_classes)
{
	T_EQ(needs("members", NULL), ROLE_LOOK);
	T_EQ(needs("logs", "j/trainer-0"), ROLE_READ);
	T_EQ(needs("head", NULL), ROLE_LOOK);
	T_EQ(needs("head", "transfer"), ROLE_WRITE);
	T_EQ(needs("state", "get"), ROLE_READ);
	T_EQ(needs("state", "put"), ROLE_WRITE);
	T_EQ(needs("job", "status"), ROLE_LOOK);
	T_EQ(needs("job", "submit"), ROLE_WRITE);
	T_EQ(needs("keyring", "list"), ROLE_LOOK);
	T_EQ(needs("keyring", "install"), ROLE_WRITE);
	T_EQ(needs("leave", NULL), ROLE_WRITE);
	T_EQ(needs("no-such-command", NULL), ROLE_WRITE);
	T_EQ(needs("raft", NULL), ROLE_AGENT);
	T_EQ(needs("assign", NULL), ROLE_AGENT);
	T_EQ(needs("report", NULL), ROLE_AGENT);
	const char *args[1] = { "get" };
	T_EQ(agent_auth_needs("state", args, 1, true), ROLE_AGENT); /* forwarded: agents only */
}

T_TEST(auth_replay_cache_remembers_within_expiry)
{
	agent_replay *rc = agent_replay_new();
	T_CHECK(rc);
	sk_rng r;
	sk_rng_seed(&r, t_seed());
	enum { N = 20000 };
	static uint8_t nonces[N][AUTH_NONCE];
	for (int i = 0; i < N; i++)
		for (int b = 0; b < AUTH_NONCE; b++) nonces[i][b] = (uint8_t)sk_rng_next(&r);
	for (int i = 0; i < N; i++) T_EQ(agent_replay_check(rc, nonces[i], 1000, 31000), 0);
	for (int i = 0; i < N; i += 97) T_EQ(agent_replay_check(rc, nonces[i], 2000, 32000), 1);
	/* past their expiry they are forgotten: the table does not grow for ever */
	uint8_t fresh[AUTH_NONCE] = { 1, 2, 3 };
	for (int i = 0; i < 4 * N; i++) {
		memcpy(fresh + 8, &i, sizeof i);
		T_EQ(agent_replay_check(rc, fresh, 40000 + (uint64_t)i, 40000 + (uint64_t)i + 100), 0);
	}
	T_CHECK(agent_replay_size(rc) < 2 * N);
	T_EQ(agent_replay_check(rc, nonces[0], 100000, 130000), 0); /* expired: new again */
	agent_replay_free(rc);
}

T_TEST(auth_envelope_sealed_and_bound)
{
	agent_keyring kr = { 0 }, other = { 0 };
	agent_key k;
	char err[128];
	T_EQ(agent_key_generate(&k), 0);
	T_EQ(agent_keyring_add(&kr, &k, err, sizeof err), 0);
	T_EQ(agent_key_generate(&k), 0);
	T_EQ(agent_keyring_add(&other, &k, err, sizeof err), 0);
	agent_rpc_cred cred = { .kr = &kr, .operator_key = true, .sender = "n1" };
	Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
	q.cmd = "state";
	uint8_t nonce[AUTH_NONCE], nonce2[AUTH_NONCE];
	size_t len, len2;
	uint8_t *a = agent_req_pack(&q, &cred, "n2", nonce, &len);
	uint8_t *b = agent_req_pack(&q, &cred, "n2", nonce2, &len2);
	T_CHECK(a && b);
	T_CHECK(memcmp(nonce, nonce2, AUTH_NONCE) != 0); /* never the same nonce twice */
	/* an operator key's seal does not open as the cluster key's (other AAD) */
	uint8_t plain[512];
	size_t pl;
	T_CHECK(agent_open(&kr, AGENT_RPC_AAD_REQ, a, len, plain, &pl) < 0);
	T_EQ(agent_open(&kr, AGENT_RPC_AAD_OP_REQ, a, len, plain, &pl), 0);
	Skein__Control__Request *got = skein__control__request__unpack(NULL, pl, plain);
	T_CHECK(got && !strcmp(got->recipient, "n2") && !strcmp(got->sender, "n1"));
	T_CHECK(got->nonce.len == AUTH_NONCE && !memcmp(got->nonce.data, nonce, AUTH_NONCE));
	uint64_t now = sk_wall_ms();
	T_CHECK(got->time_ms <= now && got->time_ms + 5000 > now);
	skein__control__request__free_unpacked(got, NULL);
	/* an answer must carry its request's nonce, under the same key */
	Skein__Control__Response resp = SKEIN__CONTROL__RESPONSE__INIT;
	resp.body = "ok";
	resp.error = "";
	resp.nonce.data = nonce;
	resp.nonce.len = AUTH_NONCE;
	uint8_t packed[256], sealed[256 + CRYPTO_OVERHEAD];
	size_t n = skein__control__response__pack(&resp, packed);
	T_EQ(agent_seal_key(&kr.keys[0], AGENT_RPC_AAD_OP_RESP, packed, n, sealed), 0);
	Skein__Control__Response *r = agent_resp_open(sealed, n + CRYPTO_OVERHEAD, &cred, nonce, err, sizeof err);
	T_CHECK(r && !strcmp(r->body, "ok"));
	skein__control__response__free_unpacked(r, NULL);
	T_CHECK(!agent_resp_open(sealed, n + CRYPTO_OVERHEAD, &cred, nonce2, err, sizeof err));
	T_CHECK(strstr(err, "another request"));
	agent_rpc_cred wrong = { .kr = &other, .operator_key = true };
	T_CHECK(!agent_resp_open(sealed, n + CRYPTO_OVERHEAD, &wrong, nonce, err, sizeof err));
	free(a);
	free(b);
}
