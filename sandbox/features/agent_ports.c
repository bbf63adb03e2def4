/*
 * agent_ports.c — the agent's control routes for port forwarders (called by
 * sbx-api when a port is exposed or a tunnel is made; forward.h):
 *
 *   PUT    /agent/v1/sandboxes/{tenant}/{id}/forwards/{port}   body {generation}?
 *          -> 200 {port, address, gateway, generation, created}
 *          (gateway: host:port of the node's preview gateway, "" when off)
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
#include "util.h"

const struct jsonv_field agent_forward_put_fields[] = {
	{ "generation", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

int agent_forward_put(struct agent_call *c, struct sbx_err *e)
{
	char address[80];
	int64_t generation = -1;
	struct agent_sb *sb;
	int created;

	if (jsonv_int(c->body, "generation", 0, INT64_MAX, &generation, e) < 0)
		return -1;
	sb = agent_sb_running(c->a, c->key, c->id, generation, e);
	if (!sb || fwd_open(c->a, sb, c->port, 0, address, sizeof(address), &created, e) < 0)
		return -1;
	sb->last_active_at = util_wall_ms();
	httpd_reply_json(c->r, 200,
			 json_pack("{s:i, s:s, s:s, s:I, s:b}", "port", c->port, "address", address,
				   "gateway", fwd_gateway_address(), "generation",
				   (json_int_t)sb->generation, "created", created));
	return 0;
}

int agent_forward_delete(struct agent_call *c, struct sbx_err *e)
{
	fwd_close(c->a, c->key, c->port);
	httpd_reply_empty(c->r, 204);
	return 0;
}

int agent_forward_list(struct agent_call *c, struct sbx_err *e)
{
	json_t *arr = fwd_list_json(c->a, c->key);

	httpd_reply_json(c->r, 200,
			 arr ? json_pack("{s:o, s:o*}", "forwards", arr, "connections",
					 fwd_counts_json(c->a, c->key, httpd_param(c->r, 0)))
			     : NULL);
	return 0;
}
