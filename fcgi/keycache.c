#include "keycache.h"

#include <string.h>

void keycache_init(struct keycache *c, int64_t ttl_ms)
{
	memset(c, 0, sizeof(*c));
	c->ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
}

/* The slot of a digest: its first bytes are uniformly random already. */
static size_t slot_of(const uint8_t d[SHA256_DIGEST_LEN])
{
	uint32_t h = (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;

	return h % KEYCACHE_SLOTS;
}

int keycache_get(const struct keycache *c, const uint8_t digest[SHA256_DIGEST_LEN], int64_t now,
		 struct keycache_entry *out)
{
	const struct keycache_entry *s;

	if (c->ttl_ms <= 0)
		return 0;
	s = &c->slot[slot_of(digest)];
	/* Also refuse an entry further in the future than one ttl: the clock
	 * is monotonic, but an entry must never outlive its ttl whatever happens. */
	if (s->expires_ms == 0 || now >= s->expires_ms || s->expires_ms - now > c->ttl_ms ||
	    memcmp(s->digest, digest, SHA256_DIGEST_LEN) != 0)
		return 0;
	*out = *s;
	return 1;
}

void keycache_put(struct keycache *c, const uint8_t digest[SHA256_DIGEST_LEN], int valid,
		  const char *tenant, int admin, int64_t now)
{
	struct keycache_entry *s;
	size_t n = valid && tenant ? strlen(tenant) : 0;

	if (c->ttl_ms <= 0 || (valid && (!tenant || n >= sizeof(s->tenant))))
		return;
	s = &c->slot[slot_of(digest)];
	memset(s, 0, sizeof(*s));
	memcpy(s->digest, digest, SHA256_DIGEST_LEN);
	s->valid = valid ? 1 : 0;
	s->admin = valid && admin ? 1 : 0;
	if (valid)
		memcpy(s->tenant, tenant, n + 1);
	s->expires_ms = now + c->ttl_ms;
	if (s->expires_ms <= 0)
		s->expires_ms = 1;   /* 0 means empty */
}

void keycache_set_unlimited(struct keycache *c, const uint8_t digest[SHA256_DIGEST_LEN],
			    int unlimited)
{
	struct keycache_entry *s = &c->slot[slot_of(digest)];

	if (c->ttl_ms > 0 && s->expires_ms && s->valid &&
	    memcmp(s->digest, digest, SHA256_DIGEST_LEN) == 0)
		s->unlimited = unlimited ? 1 : 0;
}
