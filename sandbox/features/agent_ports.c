/*
 * agent_ports.c — the agent's control routes for port forwarders (called by
 * sbx-api when a port is exposed or a tunnel is made; forward.h):
 *
 *   PUT    /agent/v1/sandboxes/{tenant}/{id}/forwards/{port}   body {generation}?
 *          -> 200 {port, address, generation, created}
 *   DELETE /agent/v1/sandboxes/{tenant}/{id}/forwards/{port}   -> 204 (idempotent)
 *   GET    /agent/v1/sandboxes/{tenant}/{id}/forwards          -> {forwards:[…], connections}
 *          (connections: open forwarded connections against their caps,
 *          of the sandbox, its tenant and the node: fwd_counts_json)
 *
 * PUT and DELETE carry X-Sbx-Epoch and are fenced like every control call.
 * A PUT naming a generation other than the running container's is a 409
 * CONFLICT: the caller's view of the sandbox is out of date.
 */
#include "agent_ports.h"
#include "forward.h"
#include "jsonv.h"
#include "util.h"

#include <string.h>

static const struct jsonv_field put_fields[] = {
	{ "generation", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

/* Key, port and fencing of PUT/DELETE. 0 or -1 with e. */
static int fw_head(struct httpd_req *r, char *key, size_t keysz, int *port, struct sbx_err *e)
{
	int64_t p;

	if (agent_path_key(r, key, keysz, e) < 0)
		return -1;
	if (util_parse_i64(httpd_param(r, 2), 1, 65535, &p) < 0)
		return err_set(e, SBX_E_INVALID_PORT, "port must be 1-65535");
	*port = (int)p;
	return agent_fence_request(r, key, e);
}

void agent_h_forward_put(struct httpd_req *r)
{
	struct agent *a = httpd_ctx(r);
	struct sbx_err e = { 0 };
	char key[AGENT_KEY_MAX], address[80];
	int64_t generation = -1;
	struct agent_sb *sb;
	const char *data;
	json_t *body;
	size_t len;
	int port, created;

	if (a->shutting_down) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE, "this node is shutting down");
		goto fail;
	}
	if (fw_head(r, key, sizeof(key), &port, &e) < 0)
		goto fail;
	data = httpd_body(r, &len);
	body = jsonv_parse(data, len, &e);
	if (!body)
		goto fail;
	if (jsonv_check(body, put_fields, "the body", &e) < 0 ||
	    jsonv_int(body, "generation", 0, INT64_MAX, &generation, &e) < 0) {
		json_decref(body);
		goto fail;
	}
	json_decref(body);
	sb = agent_sb_running(a, key, httpd_param(r, 1), generation, &e);
	if (!sb)
		goto fail;
	if (fwd_open(a, sb, port, 0, address, sizeof(address), &created, &e) < 0)
		goto fail;
	sb->last_active_at = util_wall_ms();
	httpd_reply_json(r, 200, json_pack("{s:i, s:s, s:I, s:b}", "port", port, "address", address,
					   "generation", (json_int_t)sb->generation, "created",
					   created));
	return;
fail:
	httpd_reply_err(r, &e);
}

void agent_h_forward_delete(struct httpd_req *r)
{
	struct agent *a = httpd_ctx(r);
	struct sbx_err e = { 0 };
	char key[AGENT_KEY_MAX];
	int port;

	if (fw_head(r, key, sizeof(key), &port, &e) < 0) {
		httpd_reply_err(r, &e);
		return;
	}
	fwd_close(a, key, port);
	httpd_reply_empty(r, 204);
}

void agent_h_forward_list(struct httpd_req *r)
{
	struct agent *a = httpd_ctx(r);
	struct sbx_err e = { 0 };
	char key[AGENT_KEY_MAX];
	json_t *arr;

	if (agent_path_key(r, key, sizeof(key), &e) < 0) {
		httpd_reply_err(r, &e);
		return;
	}
	arr = fwd_list_json(a, key);
	httpd_reply_json(r, 200, arr ? json_pack("{s:o, s:o*}", "forwards", arr, "connections",
						 fwd_counts_json(a, key, httpd_param(r, 0)))
				     : NULL);
}
