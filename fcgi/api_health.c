/* GET /healthz — no auth: the process is up and Redis takes a write (a
 * Redis that answers PING but refuses writes — NOREPLICAS, READONLY,
 * MISCONF, OOM — or that started evicting is 503 REDIS_UNAVAILABLE, as
 * every other call is then). */
#include "api.h"
#include "rkeys.h"
#include "store.h"

/* How long the probe key lives: it only ever has to exist for its SET. */
#define HEALTH_PROBE_TTL_MS 10000

int api_health_get(struct http_req *r, struct sbx_err *e)
{
	auto_reply redisReply *rep = store_command(e, "SET " RKEYS_HEALTH " 1 PX %d",
						   HEALTH_PROBE_TTL_MS);
	json_t *body;
	int rc;

	if (!rep)
		return -1;
	body = json_pack("{s:s,s:s}", "status", "ok", "redis", "ok");
	rc = http_respond_json(r, 200, body);
	json_decref(body);
	(void)rc;
	return 0;
}
