/* call.c — see call.h. */
#include "call.h"
#include "ids.h"
#include "registry.h"
#include "util.h"

#include <string.h>

/* "<tenant>.<id>" of path params 0 and 1 into key. 0 or -1 (400). */
static int path_key(struct httpd_req *r, char *key, size_t keysz, struct sbx_err *e)
{
	const char *tenant = httpd_param(r, 0), *id = httpd_param(r, 1);

	if (!ids_valid_tenant(tenant))
		return err_set(e, SBX_E_VALIDATION, "invalid tenant name");
	if (!ids_valid_sandbox(id))
		return err_set(e, SBX_E_VALIDATION, "invalid sandbox id");
	if (agent_key(key, keysz, tenant, id) < 0)
		return err_set(e, SBX_E_VALIDATION, "tenant and id are too long");
	return 0;
}


/* Fence key at the request's X-Sbx-Epoch. 0 or -1 (400, 409 STALE_EPOCH). */
static int fence_request(struct httpd_req *r, const char *key, struct sbx_err *e)
{
	int64_t epoch;

	if (agent_parse_epoch(httpd_header(r, "X-Sbx-Epoch"), &epoch, e) < 0 ||
	    agent_fence(httpd_ctx(r), key, epoch, e) < 0)
		return -1;
	return 0;
}


static int data_head(struct agent_call *c, struct sbx_err *e)
{
	const char *tenant = httpd_header(c->r, "X-Sbx-Tenant");

	c->id = httpd_param(c->r, 0);
	if (!tenant || !ids_valid_tenant(tenant))
		return err_set(e, SBX_E_VALIDATION, "missing or invalid X-Sbx-Tenant");
	if (!ids_valid_sandbox(c->id) || agent_key(c->key, sizeof(c->key), tenant, c->id) < 0)
		return err_set(e, SBX_E_VALIDATION, "invalid sandbox id");
	if (agent_lease_check(c->a, e) < 0)
		return -1;
	/* sbx-api routed the call to the sandbox it saw: one that changed
	 * since is found again by a retry (or is a 404 then). */
	if (fence_request(c->r, c->key, e) < 0) {
		if (e->code == SBX_E_STALE_EPOCH)
			err_set(e, SBX_E_NODE_UNAVAILABLE,
				"sandbox '%s' was restarted or moved since this call was routed; retry",
				c->id);
		return -1;
	}
	c->sb = agent_sb_running(c->a, c->key, c->id, -1, e);
	if (!c->sb) {
		if (e->code == SBX_E_SANDBOX_NOT_FOUND)
			err_set(e, SBX_E_NODE_UNAVAILABLE,
				"sandbox '%s' stopped since this call was routed; retry", c->id);
		return -1;
	}
	c->sb->last_active_at = util_wall_ms();
	return 0;
}

static int control_head(struct agent_call *c, unsigned flags, struct sbx_err *e)
{
	if (path_key(c->r, c->key, sizeof(c->key), e) < 0)
		return -1;
	c->id = httpd_param(c->r, 1);
	if ((flags & AGENT_CALL_FENCED) && fence_request(c->r, c->key, e) < 0)
		return -1;
	c->sb = agent_sb_find(c->a, c->key);
	return 0;
}

static int json_body(struct agent_call *c, const struct jsonv_field *fields, struct sbx_err *e)
{
	static const struct jsonv_field none[] = { { NULL, 0, 0 } };
	size_t len;
	const char *data;

	if (c->args && c->args->body) {
		c->body = json_incref(c->args->body);
	} else {
		data = httpd_body(c->r, &len);
		if (len && jsonv_media_type(httpd_header(c->r, "Content-Type"), e) < 0)
			return -1;
		c->body = jsonv_parse(data, len, e);
		if (!c->body)
			return -1;
	}
	return jsonv_check(c->body, fields ? fields : none, "the body", e);
}

/* Resolve what spec's flags ask for into c. 0 or -1 with e. */
static int call_prepare(const struct agent_call_spec *spec, struct agent_call *c,
			struct sbx_err *e)
{
	int64_t port;

	if ((spec->flags & (AGENT_CALL_LIVE | AGENT_CALL_DATA)) && c->a->shutting_down)
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "this node is shutting down");
	if ((spec->flags & AGENT_CALL_DATA) && data_head(c, e) < 0)
		return -1;
	if ((spec->flags & AGENT_CALL_CONTROL) && control_head(c, spec->flags, e) < 0)
		return -1;
	if (spec->flags & AGENT_CALL_PORT) {
		if (util_parse_i64(httpd_param(c->r, 2), 1, 65535, &port) < 0)
			return err_set(e, SBX_E_INVALID_PORT, "port must be 1-65535");
		c->port = (int)port;
	}
	if ((spec->flags & AGENT_CALL_JSON) && json_body(c, spec->fields, e) < 0)
		return -1;
	return 0;
}

void agent_call_serve(struct httpd_req *r, const struct agent_call_spec *spec,
		      const struct agent_call_args *args)
{
	struct agent_call c = { .r = r, .a = httpd_ctx(r), .port = -1, .args = args };
	struct sbx_err e = { 0 };

	if (call_prepare(spec, &c, &e) < 0 || spec->fn(&c, &e) < 0)
		agent_call_reply_err(r, &e);
	json_decref(c.body);
}

void agent_call_run(struct httpd_req *r)
{
	agent_call_serve(r, httpd_route_data(r), NULL);
}

const char *agent_call_param(const struct agent_call *c, int i)
{
	if (c->args && i == 1)
		return c->args->ref ? c->args->ref : "";
	return httpd_param(c->r, i);
}

const char *agent_call_tail(const struct agent_call *c)
{
	if (c->args)
		return c->args->tail ? c->args->tail : "";
	return httpd_tail(c->r);
}

const char *agent_call_query(const struct agent_call *c, const char *name)
{
	if (!c->args)
		return httpd_query(c->r, name);
	for (size_t i = 0; i < AGENT_CALL_QUERY_MAX && c->args->query[i][0]; i++)
		if (strcmp(c->args->query[i][0], name) == 0)
			return c->args->query[i][1];
	return NULL;
}

const char *agent_call_header(const struct agent_call *c, const char *name)
{
	return c->args ? NULL : httpd_header(c->r, name);
}

int agent_call_sse(const struct agent_call *c)
{
	const char *acc = agent_call_header(c, "Accept");

	if (c->args)
		return c->args->sse;
	return acc && strstr(acc, "text/event-stream") != NULL;
}

/* --- views --- */

void agent_call_set_view(struct httpd_req *r, const struct agent_call_view *v, void *arg)
{
	httpd_set_slot(r, v, arg, v->free);
}

int agent_call_offer(struct httpd_req *r, const char *type, const void *result)
{
	void *arg;
	const struct agent_call_view *v = httpd_slot(r, &arg);

	if (!v || !v->typed)
		return 0;
	/* also once a stream answer has begun: its events come typed */
	return v->typed(arg, r, type, result) == 1;
}

int agent_call_viewed(const struct httpd_req *r)
{
	void *arg;

	return httpd_slot(r, &arg) != NULL;
}

void agent_call_reply_err_details(struct httpd_req *r, const struct sbx_err *e,
				  const json_t *details)
{
	struct agent_call_error ce = { e, details };

	if (agent_call_offer(r, AGENT_CALL_ERROR, &ce)) {
		httpd_log_err(r, e);
		return;
	}
	httpd_reply_err_details(r, e, details);
}

void agent_call_reply_err(struct httpd_req *r, const struct sbx_err *e)
{
	agent_call_reply_err_details(r, e, NULL);
}
