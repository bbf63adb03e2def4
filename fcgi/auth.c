#include "auth.h"
#include "http.h"
#include "ids.h"
#include "log.h"
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

void auth_key_redis_name(const char *key, char out[80])
{
	char hex[2 * SHA256_DIGEST_LEN + 1];

	sha256_hex(key, strlen(key), hex);
	snprintf(out, 80, "sbx:apikey:%s", hex);
}

int auth_key_create(const char *tenant, int admin, char out[AUTH_KEY_LEN + 1], struct sbx_err *e)
{
	char name[80], now[32];
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

int auth_request(struct http_req *r, struct sbx_err *e)
{
	const char *h = http_param(r, "HTTP_AUTHORIZATION");
	const char *key, *tenant, *admin;
	char name[80];
	auto_reply redisReply *rep = NULL;

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
	auth_key_redis_name(key, name);
	rep = store_command(e, "HGETALL %s", name);
	if (!rep)
		return -1;
	tenant = store_hash_get(rep, "tenant");
	admin = store_hash_get(rep, "admin");
	if (!tenant)
		return err_set(e, SBX_E_UNAUTHORIZED, "invalid API key");
	if (!ids_valid_tenant(tenant)) {
		log_warn("api key record %.24s… holds an invalid tenant (request %s)", name, r->request_id);
		return err_set(e, SBX_E_UNAUTHORIZED, "invalid API key");
	}
	snprintf(r->tenant, sizeof(r->tenant), "%s", tenant);
	r->admin = admin && strcmp(admin, "1") == 0;
	r->authed = 1;
	return 0;
}
