/*
 * keycache.h — a small per-worker cache of API key checks.
 *
 * Maps the SHA-256 digest of a key to the result of its Redis lookup (the
 * tenant and admin flag, or "no such key") for ttl_ms. It caches only the
 * credential check, never an answer: records and node liveness are always
 * read fresh. A deleted key keeps working in a worker that checked it for
 * at most ttl_ms; a refused key is remembered no longer than that either.
 *
 * Bounded: a fixed table of KEYCACHE_SLOTS entries, direct-mapped by the
 * digest (a colliding key replaces the older entry). Pure: the caller
 * passes the time (monotonic ms), so expiry is unit-tested.
 */
#ifndef SBX_KEYCACHE_H
#define SBX_KEYCACHE_H

#include "sha256.h"

#include <stdint.h>

#define KEYCACHE_SLOTS 256

struct keycache_entry {
	uint8_t digest[SHA256_DIGEST_LEN];
	int64_t expires_ms;      /* monotonic; 0 = empty slot */
	int valid;               /* 0: Redis had no such key (a refusal) */
	int admin;
	int unlimited;           /* no rate limit applied to the tenant at the check */
	char tenant[64];
};

struct keycache {
	int64_t ttl_ms;          /* 0 = off: nothing is stored or found */
	struct keycache_entry slot[KEYCACHE_SLOTS];
};

/* Empty the cache and set its time to live (ms, 0 = off). */
void keycache_init(struct keycache *c, int64_t ttl_ms);

/* The live entry of digest at now: 1 with *out filled, 0 when absent or expired. */
int keycache_get(const struct keycache *c, const uint8_t digest[SHA256_DIGEST_LEN], int64_t now,
		 struct keycache_entry *out);

/* Remember a check made at now: valid with tenant/admin, or a refusal
 * (valid 0, tenant ignored). A tenant too long for the entry is not stored. */
void keycache_put(struct keycache *c, const uint8_t digest[SHA256_DIGEST_LEN], int valid,
		  const char *tenant, int admin, int64_t now);

/* Remember whether the tenant of digest's live entry had no rate limit
 * (ratelimit.h); nothing when there is no such entry. */
void keycache_set_unlimited(struct keycache *c, const uint8_t digest[SHA256_DIGEST_LEN],
			    int unlimited);

#endif
