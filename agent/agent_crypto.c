/* agent/agent_crypto: see agent_crypto.h. */
#include "agent/agent_crypto.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sk_log.h"

int agent_key_decode(const char *b64, agent_key *k, char *err, size_t errlen)
{
	char clean[128];
	size_t n = 0;
	for (const char *p = b64; *p; p++) {
		if (isspace((unsigned char)*p)) continue;
		if (n + 1 >= sizeof clean) { snprintf(err, errlen, "key is too long"); return -1; }
		clean[n++] = *p;
	}
	clean[n] = 0;
	if (n == 0 || n % 4) { snprintf(err, errlen, "key is not base64 of 16, 24 or 32 bytes"); return -1; }
	uint8_t out[96];
	int len = EVP_DecodeBlock(out, (const unsigned char *)clean, (int)n);
	if (len < 0) { snprintf(err, errlen, "key is not valid base64"); return -1; }
	/* EVP_DecodeBlock counts padding as zero bytes; take them off. */
	if (n >= 1 && clean[n - 1] == '=') len--;
	if (n >= 2 && clean[n - 2] == '=') len--;
	if (len != 16 && len != 24 && len != 32) {
		snprintf(err, errlen, "key must decode to 16, 24 or 32 bytes, not %d", len);
		return -1;
	}
	memcpy(k->key, out, (size_t)len);
	k->len = (uint8_t)len;
	return 0;
}

void agent_key_encode(const agent_key *k, char *out, size_t cap)
{
	char tmp[64];
	EVP_EncodeBlock((unsigned char *)tmp, k->key, k->len);
	snprintf(out, cap, "%s", tmp);
}

int agent_key_read_file(const char *path, agent_key *k, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) { snprintf(err, errlen, "cannot read key file %s: %m", path); return -1; }
	char buf[256];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char why[160];
	if (agent_key_decode(buf, k, why, sizeof why) < 0) {
		snprintf(err, errlen, "key file %s: %s", path, why);
		return -1;
	}
	return 0;
}

int agent_key_generate(agent_key *k)
{
	k->len = 32;
	return RAND_bytes(k->key, 32) == 1 ? 0 : -1;
}

void agent_key_fingerprint(const agent_key *k, char out[FINGERPRINT_LEN + 1])
{
	uint8_t h[SHA256_DIGEST_LENGTH];
	SHA256(k->key, k->len, h);
	for (int i = 0; i < FINGERPRINT_LEN / 2; i++) sprintf(out + 2 * i, "%02x", h[i]);
	out[FINGERPRINT_LEN] = 0;
}

int agent_keyring_find(const agent_keyring *kr, const char *which)
{
	agent_key k;
	char err[8];
	if (agent_key_decode(which, &k, err, sizeof err) == 0) {
		for (int i = 0; i < kr->n; i++)
			if (kr->keys[i].len == k.len && memcmp(kr->keys[i].key, k.key, k.len) == 0) return i;
		return -1;
	}
	size_t wl = strlen(which);
	if (wl < 6 || wl > FINGERPRINT_LEN) return -1;
	int found = -1;
	for (int i = 0; i < kr->n; i++) {
		char fp[FINGERPRINT_LEN + 1];
		agent_key_fingerprint(&kr->keys[i], fp);
		if (strncmp(fp, which, wl) == 0) {
			if (found >= 0) return -1; /* ambiguous */
			found = i;
		}
	}
	return found;
}

int agent_keyring_add(agent_keyring *kr, const agent_key *k, char *err, size_t errlen)
{
	for (int i = 0; i < kr->n; i++)
		if (kr->keys[i].len == k->len && memcmp(kr->keys[i].key, k->key, k->len) == 0) return 0;
	if (kr->n >= KEYRING_MAX) {
		snprintf(err, errlen, "keyring is full (%d keys): remove one first", KEYRING_MAX);
		return -1;
	}
	kr->keys[kr->n++] = *k;
	return 0;
}

int agent_keyring_use(agent_keyring *kr, int idx)
{
	if (idx < 0 || idx >= kr->n) return -1;
	agent_key t = kr->keys[0];
	kr->keys[0] = kr->keys[idx];
	kr->keys[idx] = t;
	return 0;
}

int agent_keyring_remove(agent_keyring *kr, int idx, char *err, size_t errlen)
{
	if (idx < 0 || idx >= kr->n) { snprintf(err, errlen, "no such key"); return -1; }
	if (idx == 0) {
		snprintf(err, errlen, "cannot remove the primary key: use another key first");
		return -1;
	}
	memmove(&kr->keys[idx], &kr->keys[idx + 1], (size_t)(kr->n - idx - 1) * sizeof kr->keys[0]);
	kr->n--;
	return 0;
}

static const EVP_CIPHER *cipher_for(size_t len)
{
	return len == 16 ? EVP_aes_128_gcm() : len == 24 ? EVP_aes_192_gcm() : EVP_aes_256_gcm();
}

int agent_seal(const agent_keyring *kr, const char *aad, const uint8_t *in, size_t n, uint8_t *out)
{
	if (kr->n < 1) return -1;
	return agent_seal_key(&kr->keys[0], aad, in, n, out);
}

int agent_seal_key(const agent_key *k, const char *aad, const uint8_t *in, size_t n, uint8_t *out)
{
	if (n > INT32_MAX) return -1;
	int rc = -1, len;
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	if (!c) return -1;
	out[0] = CRYPTO_VERSION;
	uint8_t *nonce = out + 1, *ct = out + 1 + CRYPTO_NONCE;
	if (RAND_bytes(nonce, CRYPTO_NONCE) != 1) goto out;
	if (EVP_EncryptInit_ex(c, cipher_for(k->len), NULL, k->key, nonce) != 1) goto out;
	if (EVP_EncryptUpdate(c, NULL, &len, (const uint8_t *)aad, (int)strlen(aad)) != 1) goto out;
	if (n && EVP_EncryptUpdate(c, ct, &len, in, (int)n) != 1) goto out;
	if (EVP_EncryptFinal_ex(c, ct + n, &len) != 1) goto out;
	if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, CRYPTO_TAG, ct + n) != 1) goto out;
	rc = 0;
out:
	EVP_CIPHER_CTX_free(c);
	return rc;
}

int agent_seal_replace(const agent_key *k, const char *aad, uint8_t **buf, size_t *len)
{
	uint8_t *s = malloc(*len + CRYPTO_OVERHEAD);
	if (!s || agent_seal_key(k, aad, *buf, *len, s) < 0) {
		free(s);
		free(*buf);
		*buf = NULL;
		return -1;
	}
	free(*buf);
	*buf = s;
	*len += CRYPTO_OVERHEAD;
	return 0;
}

static int open_with(const agent_key *k, const char *aad, const uint8_t *in, size_t n, uint8_t *out)
{
	const uint8_t *nonce = in + 1, *ct = in + 1 + CRYPTO_NONCE;
	size_t ctlen = n - CRYPTO_OVERHEAD;
	int rc = -1, len;
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	if (!c) return -1;
	if (EVP_DecryptInit_ex(c, cipher_for(k->len), NULL, k->key, nonce) != 1) goto out;
	if (EVP_DecryptUpdate(c, NULL, &len, (const uint8_t *)aad, (int)strlen(aad)) != 1) goto out;
	if (ctlen && EVP_DecryptUpdate(c, out, &len, ct, (int)ctlen) != 1) goto out;
	if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, CRYPTO_TAG, (void *)(ct + ctlen)) != 1) goto out;
	if (EVP_DecryptFinal_ex(c, out + ctlen, &len) != 1) goto out;
	rc = 0;
out:
	EVP_CIPHER_CTX_free(c);
	return rc;
}

int agent_open(const agent_keyring *kr, const char *aad, const uint8_t *in, size_t n,
	       uint8_t *out, size_t *outlen)
{
	if (n < CRYPTO_OVERHEAD || n > INT32_MAX || in[0] != CRYPTO_VERSION) return -1;
	for (int i = 0; i < kr->n; i++) {
		if (open_with(&kr->keys[i], aad, in, n, out) == 0) {
			*outlen = n - CRYPTO_OVERHEAD;
			return i;
		}
	}
	return -1;
}

int agent_keyring_read_file(const char *path, agent_keyring *kr, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) { snprintf(err, errlen, "cannot read key file %s: %m", path); return -1; }
	agent_keyring next = { .n = 0 };
	char line[256];
	int lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		const char *p = line;
		while (isspace((unsigned char)*p)) p++;
		if (!*p || *p == '#') continue;
		agent_key k;
		char why[160];
		if (agent_key_decode(p, &k, why, sizeof why) < 0 || agent_keyring_add(&next, &k, why, sizeof why) < 0) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (!next.n) { snprintf(err, errlen, "key file %s holds no key", path); return -1; }
	*kr = next;
	return 0;
}

bool agent_key_file_loose(const char *path, unsigned *mode)
{
	struct stat st;
	if (stat(path, &st) != 0) return false;
	*mode = (unsigned)(st.st_mode & 07777);
	return (st.st_mode & 077) != 0;
}

/* A key others can read may have leaked: said at start, in one line (here,
 * not in agent_main.c, so that agent_ctl.c's operator keys need nothing from
 * the file nobody may call: layers_test.sh). */
void agent_warn_loose_key(const char *path, const char *what)
{
	unsigned mode;
	if (agent_key_file_loose(path, &mode))
		SK_WARN("agent", "%s %s is accessible to group/others (mode %04o): chmod 600 it, the key may have leaked",
			what, path, mode);
}
