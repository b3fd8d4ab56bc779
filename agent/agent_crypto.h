/* agent/agent_crypto: the keyring and AES-GCM sealing of gossip and control.
 *
 * As in memberlist's security.go: AES-GCM with a 12-byte random nonce and a
 * 16-byte tag; the primary key (keys[0]) seals, every key is tried to open,
 * so a cluster rotates keys with no downtime (install everywhere, use
 * everywhere, remove the old one).  Keys of 16, 24 or 32 bytes select
 * AES-128/192/256; skein's tools make 32-byte keys.  The associated data
 * binds a sealed blob to its channel (gossip UDP, gossip stream, control), so
 * one cannot be replayed as the other.
 *
 *   sealed := version (1) | nonce (12) | ciphertext | tag (16)
 *
 * Keys never reach a log: they are named by a fingerprint (the first 8 bytes
 * of their SHA-256, in hex). */
#ifndef AGENT_CRYPTO_H
#define AGENT_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	CRYPTO_VERSION = 1,
	CRYPTO_NONCE = 12,
	CRYPTO_TAG = 16,
	CRYPTO_OVERHEAD = 1 + CRYPTO_NONCE + CRYPTO_TAG,
	KEYRING_MAX = 16,
	FINGERPRINT_LEN = 16, /* hex chars */
};

typedef struct {
	uint8_t key[32];
	uint8_t len;
} agent_key;

typedef struct {
	agent_key keys[KEYRING_MAX]; /* keys[0] is the primary */
	int n;
} agent_keyring;

/* Decodes base64 text (surrounding white space ignored) into a key of 16, 24
 * or 32 bytes.  -1 with a message otherwise. */
int agent_key_decode(const char *b64, agent_key *k, char *err, size_t errlen);
/* Base64 of the key into out (at least 48 bytes). */
void agent_key_encode(const agent_key *k, char *out, size_t cap);
/* Reads a key file (base64 text); -1 with a message. */
int agent_key_read_file(const char *path, agent_key *k, char *err, size_t errlen);
/* Reads a file of keys, one base64 key a line ('#' comments), into kr
 * (replaced only on success); -1 with a message. */
int agent_keyring_read_file(const char *path, agent_keyring *kr, char *err, size_t errlen);
/* true when the key file at path grants group or others any access (its
 * mode in *mode): the caller warns, the key may have leaked. */
bool agent_key_file_loose(const char *path, unsigned *mode);
/* Warns (one line) when the key file at path is open to group/others. */
void agent_warn_loose_key(const char *path, const char *what);
/* A fresh random 32-byte key. */
int agent_key_generate(agent_key *k);
void agent_key_fingerprint(const agent_key *k, char out[FINGERPRINT_LEN + 1]);

/* Returns the index of the key, or -1. `which` may be a key in base64 or a
 * fingerprint (a unique prefix of at least 6 hex chars). */
int agent_keyring_find(const agent_keyring *kr, const char *which);
int agent_keyring_add(agent_keyring *kr, const agent_key *k, char *err, size_t errlen);
int agent_keyring_use(agent_keyring *kr, int idx);
int agent_keyring_remove(agent_keyring *kr, int idx, char *err, size_t errlen);

/* Seals n bytes into out (n + CRYPTO_OVERHEAD bytes).  -1 on failure. */
int agent_seal(const agent_keyring *kr, const char *aad, const uint8_t *in, size_t n,
	       uint8_t *out);
/* The same with one given key (an answer goes back under the key its
 * request came with, even if the keyring changed in between). */
int agent_seal_key(const agent_key *k, const char *aad, const uint8_t *in, size_t n, uint8_t *out);
/* Replaces the malloc'd *buf (*len bytes) by a sealed, malloc'd copy.  On
 * failure frees *buf, sets it to NULL and returns -1. */
int agent_seal_replace(const agent_key *k, const char *aad, uint8_t **buf, size_t *len);
/* Opens a sealed blob into out (n - CRYPTO_OVERHEAD bytes); returns the
 * index of the key that opened it, or -1 (forged, corrupt, or no key). */
int agent_open(const agent_keyring *kr, const char *aad, const uint8_t *in, size_t n,
	       uint8_t *out, size_t *outlen);

#endif
