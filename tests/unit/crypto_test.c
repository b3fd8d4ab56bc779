/* tests/unit/crypto_test: the keyring and AES-GCM sealing (agent/agent_crypto)
 * and skeind's settings parser (agent/agent_opts). */
#include "tests/t.h"

#include <unistd.h>

#include "agent/agent_crypto.h"
#include "agent/agent_opts.h"

static agent_keyring ring_of(int n)
{
	agent_keyring kr = { 0 };
	char err[128];
	for (int i = 0; i < n; i++) {
		agent_key k;
		T_EQ(agent_key_generate(&k), 0);
		T_EQ(agent_keyring_add(&kr, &k, err, sizeof err), 0);
	}
	return kr;
}

T_TEST(seal_open_round_trip_and_tamper)
{
	agent_keyring kr = ring_of(1);
	const char msg[] = "gossip frame";
	uint8_t sealed[sizeof msg + CRYPTO_OVERHEAD], out[sizeof msg + CRYPTO_OVERHEAD];
	size_t n;
	T_EQ(agent_seal(&kr, "aad", (const uint8_t *)msg, sizeof msg, sealed), 0);
	T_EQ(agent_open(&kr, "aad", sealed, sizeof sealed, out, &n), 0);
	T_EQ(n, sizeof msg);
	T_CHECK(memcmp(out, msg, n) == 0);
	/* other channel (associated data) */
	T_EQ(agent_open(&kr, "other", sealed, sizeof sealed, out, &n), -1);
	/* every single bit flip is caught */
	for (size_t i = 0; i < sizeof sealed; i++) {
		for (int b = 0; b < 8; b++) {
			sealed[i] ^= (uint8_t)(1 << b);
			if (agent_open(&kr, "aad", sealed, sizeof sealed, out, &n) != -1) T_FAIL("flip %zu/%d accepted", i, b);
			sealed[i] ^= (uint8_t)(1 << b);
		}
	}
	/* truncated */
	for (size_t l = 0; l < sizeof sealed; l++)
		T_EQ(agent_open(&kr, "aad", sealed, l, out, &n), -1);
	/* nonces differ between two seals of the same bytes */
	uint8_t again[sizeof sealed];
	T_EQ(agent_seal(&kr, "aad", (const uint8_t *)msg, sizeof msg, again), 0);
	T_CHECK(memcmp(again + 1, sealed + 1, CRYPTO_NONCE) != 0);
}

T_TEST(rotation_keeps_old_packets_readable)
{
	agent_keyring a = ring_of(1), b;
	char err[128];
	agent_key k2;
	agent_key_generate(&k2);
	uint8_t sealed[64 + CRYPTO_OVERHEAD], out[64 + CRYPTO_OVERHEAD];
	uint8_t msg[64] = { 1, 2, 3 };
	size_t n;
	T_EQ(agent_seal(&a, "x", msg, sizeof msg, sealed), 0);
	b = a;
	T_EQ(agent_keyring_add(&b, &k2, err, sizeof err), 0);
	T_EQ(agent_keyring_add(&b, &k2, err, sizeof err), 0); /* twice: no duplicate */
	T_EQ(b.n, 2);
	T_EQ(agent_keyring_use(&b, 1), 0);
	/* the new primary seals; the old key still opens old packets */
	T_EQ(agent_open(&b, "x", sealed, sizeof sealed, out, &n), 1);
	T_EQ(agent_keyring_remove(&b, 0, err, sizeof err), -1);
	T_CHECK(strstr(err, "primary"));
	T_EQ(agent_keyring_remove(&b, 1, err, sizeof err), 0);
	T_EQ(agent_open(&b, "x", sealed, sizeof sealed, out, &n), -1);
	/* find by fingerprint prefix and by key */
	char fp[FINGERPRINT_LEN + 1], b64[64];
	agent_key_fingerprint(&k2, fp);
	T_EQ(agent_keyring_find(&b, fp), 0);
	fp[6] = 0;
	T_EQ(agent_keyring_find(&b, fp), 0);
	fp[5] = 0;
	T_EQ(agent_keyring_find(&b, fp), -1); /* too short to be trusted */
	agent_key_encode(&k2, b64, sizeof b64);
	T_EQ(agent_keyring_find(&b, b64), 0);
}

T_TEST(key_decoding_rules)
{
	agent_key k;
	char err[160];
	T_EQ(agent_key_decode("AAECAwQFBgcICQoLDA0ODw==", &k, err, sizeof err), 0); /* 16 bytes */
	T_EQ(k.len, 16);
	T_EQ(agent_key_decode("  AAECAwQFBgcICQoLDA0ODw==\n", &k, err, sizeof err), 0);
	T_EQ(agent_key_decode("AAECAwQFBgcICQ==", &k, err, sizeof err), -1); /* 10 bytes */
	T_CHECK(strstr(err, "16, 24 or 32"));
	T_EQ(agent_key_decode("not base64!!", &k, err, sizeof err), -1);
	T_EQ(agent_key_decode("", &k, err, sizeof err), -1);
	T_EQ(agent_key_read_file("/nonexistent/key", &k, err, sizeof err), -1);
	T_CHECK(strstr(err, "/nonexistent/key"));
}

T_TEST(opts_precedence_file_env_flags)
{
	char path[] = "/tmp/skein-opts-XXXXXX";
	int fd = mkstemp(path);
	T_CHECK(fd >= 0);
	const char *cfg = "name = fromfile\nprofile: lan\njoin = 127.0.0.1:1\njoin = 127.0.0.1:2\ntag = a=1\n";
	T_EQ(write(fd, cfg, strlen(cfg)), (long long)strlen(cfg));
	close(fd);
	setenv("SKEIN_PROFILE", "fast", 1);
	setenv("SKEIN_TAG", "b=2,c=3", 1);
	char *argv[] = { "skeind", "--config", path, "--name", "fromflag", "--enable-debug", NULL };
	agent_opts o;
	char err[256];
	T_EQ(agent_opts_parse(&o, 6, argv, err, sizeof err), 0);
	T_STREQ(o.name, "fromflag");          /* flag beats file */
	T_STREQ(o.profile, "fast");           /* env beats file */
	T_EQ(o.njoin, 2);                     /* file's list */
	T_EQ(o.ntag, 2);                      /* env's list replaces the file's */
	T_STREQ(o.tag[0], "b=2");
	T_CHECK(o.enable_debug);
	T_STREQ(o.rpc, "127.0.0.1:7373");     /* default */
	agent_opts_free(&o);
	char *bad[] = { "skeind", "--name", NULL };
	T_EQ(agent_opts_parse(&o, 2, bad, err, sizeof err), -1);
	T_CHECK(strstr(err, "--name needs a value"));
	agent_opts_free(&o);
	unsetenv("SKEIN_PROFILE");
	unsetenv("SKEIN_TAG");
	unlink(path);
}
