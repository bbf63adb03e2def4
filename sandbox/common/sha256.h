/*
 * sha256.h — SHA-256 (FIPS 180-4): API keys stored as digests (fcgi), image blobs
 * verified by digest (sandbox/runtime/oci.c).
 */
#ifndef SBX_SHA256_H
#define SBX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32

struct sha256_ctx {
	uint32_t h[8];
	uint64_t total;        /* bytes hashed so far */
	uint8_t block[64];
	size_t used;           /* bytes waiting in block */
};

void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *data, size_t n);
void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_DIGEST_LEN]);

/* One-shot digest of n bytes as 64 lowercase hex chars + NUL into out. */
void sha256_hex(const void *data, size_t n, char out[2 * SHA256_DIGEST_LEN + 1]);

#endif
