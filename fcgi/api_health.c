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
	static const char body[] = "{\"status\":\"ok\",\"redis\":\"ok\"}";

	if (!rep)
		return -1;
	http_respond_json_text(r, 200, body, sizeof(body) - 1);
	return 0;
}
