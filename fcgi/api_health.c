/* GET /healthz — no auth: the process is up and Redis answers PING. */
#include "api.h"
#include "store.h"

int api_health_get(struct http_req *r, struct sbx_err *e)
{
	auto_reply redisReply *rep = store_command(e, "PING");
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
