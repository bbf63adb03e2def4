#include "auth.h"
#include "rkeys.h"
#include "http.h"
#include "ids.h"
#include "keycache.h"
#include "log.h"
#include "ratelimit.h"
#include "router.h"
#include "sha256.h"
#include "store.h"
#include "util.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

int auth_key_valid_shape(const char *key)
{
	if (!key || strlen(key) != AUTH_KEY_LEN || memcmp(key, "sbx_", 4) != 0)
		return 0;
	for (const char *p = key + 4; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

int auth_key_generate(char out[AUTH_KEY_LEN + 1], struct sbx_err *e)
{
	unsigned char raw[20];

	if (util_random(raw, sizeof(raw)) < 0)
		return err_sys(e, errno, "cannot read random bytes");
	memcpy(out, "sbx_", 4);
	util_hex(raw, sizeof(raw), out + 4);
	return 0;
}

void auth_key_redis_name(const char *key, char out[RKEYS_MAX])
{
	char hex[2 * SHA256_DIGEST_LEN + 1];

	sha256_hex(key, strlen(key), hex);
	rkeys_apikey(out, hex);
}

int auth_key_create(const char *tenant, int admin, char out[AUTH_KEY_LEN + 1], struct sbx_err *e)
{
	char name[RKEYS_MAX], now[32];
	redisReply *r;

	if (!ids_valid_tenant(tenant))
		return err_set(e, SBX_E_VALIDATION,
			       "tenant must be 1-63 of [a-z0-9-], not starting or ending with '-'");
	if (auth_key_generate(out, e) < 0)
		return -1;
	auth_key_redis_name(out, name);
	util_iso8601(util_wall_ms(), now);
	r = store_command(e, "HSET %s tenant %s admin %s createdAt %s", name, tenant,
			  admin ? "1" : "0", now);
	if (!r)
		return -1;
	freeReplyObject(r);
	return 0;
}

/* The per-worker cache of key checks (keycache.h); set up on first use. */
static struct keycache key_cache;
static int key_cache_ready;

/* "Sbx-Tenant: T": an admin key acts on tenant T's sandboxes (r->tenant
 * becomes T); a tenant key may only name its own tenant. */
static int act_as(struct http_req *r, struct sbx_err *e)
{
	const char *t = http_param(r, "HTTP_SBX_TENANT");

	if (!t || !*t || strcmp(t, r->tenant) == 0)
		return 0;
	if (!ids_valid_tenant(t))
		return err_set(e, SBX_E_VALIDATION,
			       "Sbx-Tenant must be 1-63 of [a-z0-9-], not starting or ending with '-'");
	if (!r->admin)
		return err_set(e, SBX_E_FORBIDDEN, "acting on another tenant (Sbx-Tenant) needs an admin key");
	snprintf(r->tenant, sizeof(r->tenant), "%s", t);
	return 0;
}

int auth_request(struct http_req *r, struct sbx_err *e)
{
	const char *h = http_param(r, "HTTP_AUTHORIZATION");
	const char *key;
	char name[RKEYS_MAX], hexd[2 * SHA256_DIGEST_LEN + 1];
	uint8_t digest[SHA256_DIGEST_LEN];
	struct sha256_ctx sc;
	struct keycache_entry hit;
	int64_t now;
	struct ratelimit_auth ra;
	int create, rc;

	if (!h || !*h)
		return err_set(e, SBX_E_UNAUTHORIZED, "missing Authorization header");
	if (strncasecmp(h, "Bearer ", 7) != 0)
		return err_set(e, SBX_E_UNAUTHORIZED, "the Authorization header must be 'Bearer <key>'");
	key = h + 7;
	while (*key == ' ')
		key++;
	if (!auth_key_valid_shape(key))
		return err_set(e, SBX_E_UNAUTHORIZED, "invalid API key");
	/* The lookup is by digest: no comparison of secret bytes happens here. */
	sha256_init(&sc);
	sha256_update(&sc, key, AUTH_KEY_LEN);
	sha256_final(&sc, digest);
	if (!key_cache_ready || key_cache.ttl_ms != r->conf->api.key_cache_ms) {
		keycache_init(&key_cache, r->conf->api.key_cache_ms);
		key_cache_ready = 1;
	}
	now = util_now_ms();
	util_hex(digest, sizeof(digest), hexd);
	rkeys_apikey(name, hexd);
	create = r->match.route && (r->match.route->flags & ROUTE_CREATE);
	if (keycache_get(&key_cache, digest, now, &hit)) {
		if (!hit.valid)
			return err_set(e, SBX_E_UNAUTHORIZED, "invalid API key");
		if (hit.unlimited) {
			/* No limit applied to the tenant a moment ago: no round trip. */
			memcpy(r->tenant, hit.tenant, sizeof(r->tenant));
			r->admin = hit.admin;
			r->authed = 1;
			return act_as(r, e);
		}
		rc = ratelimit_auth_check(r->conf, name, hit.tenant, hit.admin, create, &ra, e);
		if (rc == 0 && !ra.limited)
			keycache_set_unlimited(&key_cache, digest, 1);
	} else {
		/* One round trip checks the key and counts the call. */
		rc = ratelimit_auth_check(r->conf, name, NULL, 0, create, &ra, e);
		if (rc == 0 && ra.found && !ids_valid_tenant(ra.tenant)) {
			log_warn("api key record %.24s… holds an invalid tenant (request %s)", name,
				 r->request_id);
			ra.found = 0;
		}
		if (rc == 0) {   /* Redis trouble is never cached */
			keycache_put(&key_cache, digest, ra.found, ra.tenant, ra.admin, now);
			keycache_set_unlimited(&key_cache, digest, !ra.limited);
		}
	}
	if (rc < 0)
		return -1;
	if (!ra.found)
		return err_set(e, SBX_E_UNAUTHORIZED, "invalid API key");
	snprintf(r->tenant, sizeof(r->tenant), "%s", ra.tenant);
	r->admin = ra.admin;
	r->authed = 1;
	r->rate = ra.rate;
	if (ra.rate.retry_s > 0)
		return err_set(e, SBX_E_RATE_LIMITED,
			       "tenant '%s' is over its %s rate limit (%lld at once); retry in %lld s",
			       ra.tenant, create ? "create or request" : "request",
			       (long long)ra.rate.limit, (long long)ra.rate.retry_s);
	return act_as(r, e);
}
