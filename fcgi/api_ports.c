/*
 * Ports and preview URLs (control) and the preview-host decision:
 *
 *   POST   /v1/sandboxes/{id}/ports/{port}  {token?} -> {port, url, token}
 *   GET    /v1/sandboxes/{id}/ports          -> {ports:[{port, url, token}]}
 *   DELETE /v1/sandboxes/{id}/ports/{port}  -> 204 (idempotent)
 *   /_sbx_preview (INTERNAL, auth_request)  -> 200 + X-Sbx-Forward (and,
 *                                              when the node has a preview
 *                                              gateway, X-Sbx-Gateway and
 *                                              X-Sbx-Target), or a refusal
 *                                              (404 INVALID_TOKEN,
 *                                              410 STALE_PREVIEW_URL)
 *
 * A token is durable: it is kept per (sandbox, port) across restarts and
 * reused when the port is exposed again; the activation (generation and
 * forwarder address) is renewed on every expose. Records: preview.h.
 */
#include "api.h"
#include "rkeys.h"
#include "ids.h"
#include "jsonv.h"
#include "lifecycle.h"
#include "log.h"
#include "preview.h"
#include "scripts.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define EXPOSE_ATTEMPTS 3

static const struct jsonv_field expose_fields[] = {
	{ "token", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

/* The URL of an exposed port. */
static int port_url(const struct http_req *r, int port, const char *id, const char *token,
		    char *out, size_t n, struct sbx_err *e)
{
	char label[PREVIEW_LABEL_MAX];
	int w = snprintf(label, sizeof(label), "%d-%s-%s", port, id, token);

	if (w < 0 || (size_t)w >= sizeof(label))
		return err_set(e, SBX_E_INTERNAL, "preview label too long");
	return preview_url(r->conf, label, out, n, e);
}

/* The expose body: the token asked for into token ("" when none). */
static int expose_body(struct http_req *r, char token[PREVIEW_TOKEN_MAX + 1], struct sbx_err *e)
{
	json_t *body = http_read_json(r, e);
	const char *t;
	int rc = 0;

	token[0] = '\0';
	if (!body)
		return -1;
	if (jsonv_check(body, expose_fields, "the body", e) < 0) {
		rc = -1;
	} else if ((t = json_string_value(json_object_get(body, "token")))) {
		if (!ids_valid_token(t))
			rc = err_set(e, SBX_E_VALIDATION, "'token' must be 1-16 of [a-z0-9_]");
		else
			snprintf(token, PREVIEW_TOKEN_MAX + 1, "%s", t);
	}
	json_decref(body);
	return rc;
}

/* One try of an expose. 0 done (answered), 1 try again, -1 with e. */
static int expose_once(struct http_req *r, const char *id, int port, const char *asked,
		       struct sbx_err *e)
{
	char token[PREVIEW_TOKEN_MAX + 1], key[RKEYS_MAX], oldkey[RKEYS_MAX] = "", addr[PREVIEW_ADDR_MAX];
	char gateway[PREVIEW_ADDR_MAX];
	char url[512], now[32], pstr[8];
	const char *created, *old_token;
	struct lc_owner o;
	struct preview_sb s;
	redisReply *rep[3] = { NULL, NULL, NULL }, *cl;
	json_t *old = NULL, *rec, *out;
	int old_live_inc, exists, rc;
	const char *keys[1], *args[2];
	auto_free char *text = NULL;
	long long nports;

	if (lifecycle_ensure_running(r->tenant, id, &o, e) < 0)
		return -1;
	util_xsnprintf(pstr, sizeof(pstr), "%d", port);
	if (preview_sb_append(r->tenant, id, e) < 0 ||
	    store_append(e, "HGET %s %d", RK_SANDBOX_SUB(r->tenant, id, "ports"), port) < 0 ||
	    store_append(e, "HLEN %s", RK_SANDBOX_SUB(r->tenant, id, "ports")) < 0 ||
	    store_collect(rep, 3, 0, e) < 0)
		return -1;
	rc = preview_sb_from_reply(rep[0], &s);
	old = preview_reply_json(rep[1]);
	exists = rep[1]->type == REDIS_REPLY_STRING;
	nports = rep[2]->type == REDIS_REPLY_INTEGER ? rep[2]->integer : 0;
	store_free_replies(rep, 3);
	if (rc != 0) {
		json_decref(old);
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	}
	if (s.generation != o.generation) {
		json_decref(old);
		return 1;
	}
	if (!exists && nports >= PREVIEW_MAX_PORTS) {
		json_decref(old);
		return err_set(e, SBX_E_CONFLICT, "sandbox '%s' already exposes %d ports", id,
			       PREVIEW_MAX_PORTS);
	}
	old_token = json_string_value(json_object_get(old, "token"));
	{
		const char *inc = json_string_value(json_object_get(old, "incarnation"));
		old_live_inc = old_token && ids_valid_token(old_token) && inc &&
			       strcmp(inc, s.incarnation) == 0;
	}
	if (asked[0])
		snprintf(token, sizeof(token), "%s", asked);
	else if (old_live_inc)
		snprintf(token, sizeof(token), "%s", old_token);
	else if (preview_random_id(token, PREVIEW_TOKEN_MAX, e) < 0) {
		json_decref(old);
		return -1;
	}
	if (old_token && ids_valid_token(old_token) && strcmp(old_token, token) != 0)
		preview_index_key(port, id, old_token, oldkey);
	created = old_live_inc ? json_string_value(json_object_get(old, "createdAt")) : NULL;
	util_iso8601(util_wall_ms(), now);

	/* The host name is ours, or another tenant's sandbox of the same id holds it. */
	if (preview_index_key(port, id, token, key) < 0) {
		json_decref(old);
		return err_set(e, SBX_E_INTERNAL, "preview key too long");
	}
	keys[0] = key;
	args[0] = r->tenant;
	cl = scripts_run(RSCRIPT_PREVIEW_CLAIM, 1, keys, 1, args, e);
	if (!cl) {
		json_decref(old);
		return -1;
	}
	rc = cl->type == REDIS_REPLY_INTEGER && cl->integer == 1;
	freeReplyObject(cl);
	if (!rc) {
		json_decref(old);
		return err_set(e, SBX_E_CONFLICT, "token '%s' is taken for this port and id", token);
	}

	if (preview_forward_open(r->tenant, id, &o, port, addr, gateway, e) < 0) {
		json_decref(old);
		return e->code == SBX_E_CONFLICT ? 1 : -1;
	}
	rec = json_pack("{s:s, s:I, s:s, s:s, s:s, s:s}", "token", token, "generation",
			(json_int_t)o.generation, "incarnation", s.incarnation, "forward", addr,
			"createdAt", created ? created : now, "activatedAt", now);
	if (rec && gateway[0] && json_object_set_new(rec, "gateway", json_string(gateway)) < 0) {
		json_decref(rec);
		rec = NULL;
	}
	json_decref(old);
	text = rec ? jsonv_dump(rec) : NULL;
	json_decref(rec);
	if (!text)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	cl = store_command(e, "HSET %s %d %s", RK_SANDBOX_SUB(r->tenant, id, "ports"), port, text);
	if (!cl)
		return -1;
	freeReplyObject(cl);
	if (oldkey[0])
		preview_cad(oldkey, r->tenant);
	if (port_url(r, port, id, token, url, sizeof(url), e) < 0)
		return -1;
	log_info("preview %s/%s port %d exposed (generation %lld, forward %s)", r->tenant, id, port,
		 (long long)o.generation, addr);
	out = json_pack("{s:i, s:s, s:s}", "port", port, "url", url, "token", token);
	if (!out)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	http_respond_json(r, 200, out);
	json_decref(out);
	return 0;
}

int api_ports_expose(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	char token[PREVIEW_TOKEN_MAX + 1];
	int port;

	if (preview_parse_port(router_cap(&r->match, "port"), &port, e) < 0 ||
	    expose_body(r, token, e) < 0)
		return -1;
	for (int i = 0; i < EXPOSE_ATTEMPTS; i++) {
		int rc = expose_once(r, id, port, token, e);
		if (rc <= 0)
			return rc;
		err_clear(e);
	}
	return err_set(e, SBX_E_CONFLICT, "sandbox '%s' keeps changing; try again", id);
}

/* An item of the ports list: the live record of a port, with its URL. */
static json_t *port_item(const char *field, const json_t *v, const char *raw,
			 const struct preview_sb *s, void *ctx, int *port)
{
	const struct http_req *r = ctx;
	const char *tok = json_string_value(json_object_get(v, "token"));
	struct sbx_err e = { 0 };
	char url[512];

	(void)raw;
	if (!v || !tok || !preview_record_live(v, s) || preview_parse_port(field, port, &e) < 0 ||
	    port_url(r, *port, router_cap(&r->match, "id"), tok, url, sizeof(url), &e) < 0)
		return NULL;
	return json_pack("{s:i, s:s, s:s}", "port", *port, "url", url, "token", tok);
}

int api_ports_list(struct http_req *r, struct sbx_err *e)
{
	json_t *out = preview_list(r->tenant, router_cap(&r->match, "id"), "ports", port_item, r, e);

	if (!out)
		return -1;
	http_respond_json(r, 200, out);
	json_decref(out);
	return 0;
}

int api_ports_delete(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	char key[RKEYS_MAX], *val = NULL;
	json_t *v;
	int port, rc;

	if (preview_parse_port(router_cap(&r->match, "port"), &port, e) < 0 ||
	    preview_record_get(r->tenant, id, "ports", port, &val, e) < 0)
		return -1;
	if (val) {
		const char *tok;

		v = json_loads(val, 0, NULL);
		tok = json_string_value(json_object_get(v, "token"));
		rc = preview_record_del(r->tenant, id, "ports", port, val, e);
		if (tok && ids_valid_token(tok) && preview_index_key(port, id, tok, key) == 0)
			preview_cad(key, r->tenant);
		json_decref(v);
		free(val);
		if (rc < 0)
			return -1;
		preview_forward_release(r->tenant, id, port);
		log_info("preview %s/%s port %d revoked", r->tenant, id, port);
	}
	http_respond_json(r, 204, NULL);
	return 0;
}

/* Where a preview request goes: the port's forwarder and, when its node
 * has one, the node's gateway and the target naming the container and
 * port there ("<tenant>/<id>/<generation>/<port>", forward.h). */
struct preview_dest {
	char forward[PREVIEW_ADDR_MAX];
	char gateway[PREVIEW_ADDR_MAX];   /* "" when none */
	char target[PREVIEW_LABEL_MAX + 64];
};

/* The preview host's decision. 0 with d filled, or -1 with e. */
static int preview_decide(const char *label, struct preview_dest *d, struct sbx_err *e)
{
	char id[64], token[PREVIEW_TOKEN_MAX + 1], key[RKEYS_MAX], tenant[64];
	redisReply *rep[2] = { NULL, NULL }, *t;
	struct preview_sb s;
	json_t *v;
	const char *tok, *fwd, *gw;
	int port, rc;

	if (preview_parse_label(label, &port, id, token) < 0 ||
	    preview_index_key(port, id, token, key) < 0)
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown preview URL");
	t = store_command(e, "GET %s", key);
	if (!t)
		return -1;
	rc = t->type == REDIS_REPLY_STRING && t->len < sizeof(tenant);
	if (rc)
		snprintf(tenant, sizeof(tenant), "%s", t->str);
	freeReplyObject(t);
	if (!rc || !ids_valid_tenant(tenant))
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown preview URL");
	if (store_append(e, "HGET %s %d", RK_SANDBOX_SUB(tenant, id, "ports"), port) < 0 ||
	    preview_sb_append(tenant, id, e) < 0 || store_collect(rep, 2, 0, e) < 0)
		return -1;
	v = preview_reply_json(rep[0]);
	rc = preview_sb_from_reply(rep[1], &s);
	store_free_replies(rep, 2);
	tok = json_string_value(json_object_get(v, "token"));
	fwd = json_string_value(json_object_get(v, "forward"));
	/* Revoked, replaced, or the sandbox (of that incarnation) is gone. */
	if (!tok || !preview_const_equal(token, tok) || rc != 0 ||
	    !json_is_string(json_object_get(v, "incarnation")) ||
	    strcmp(json_string_value(json_object_get(v, "incarnation")), s.incarnation) != 0) {
		json_decref(v);
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown preview URL");
	}
	if (!preview_record_live(v, &s) || strcmp(s.state, "running") != 0) {
		json_decref(v);
		return err_set(e, SBX_E_STALE_PREVIEW_URL,
			       "port %d is not exposed in the sandbox's current run; expose it again",
			       port);
	}
	if (!fwd || !preview_address_ok(fwd)) {
		json_decref(v);
		return err_set(e, SBX_E_INTERNAL, "preview record %s/%s port %d has a bad forward",
			       tenant, id, port);
	}
	snprintf(d->forward, sizeof(d->forward), "%s", fwd);
	gw = json_string_value(json_object_get(v, "gateway"));
	d->gateway[0] = d->target[0] = '\0';
	if (gw && preview_address_ok(gw)) {
		snprintf(d->gateway, sizeof(d->gateway), "%s", gw);
		util_xsnprintf(d->target, sizeof(d->target), "%s/%s/%lld/%d", tenant, id,
			       (long long)s.generation, port);
	}
	json_decref(v);
	return 0;
}

int api_ports_preview(struct http_req *r, struct sbx_err *e)
{
	char label[PREVIEW_LABEL_MAX], tid[PREVIEW_TUNNEL_ID_LEN + 1];
	const char *host = http_param(r, "SBX_PREVIEW_HOST");
	struct preview_dest d = { "", "", "" };

	if (preview_host_label(host, r->conf->api.preview_domain, label, sizeof(label)) < 0)
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown preview URL");
	if (preview_tunnel_label(label, tid)) {
		if (api_tunnels_route(tid, d.forward, e) < 0)
			return -1;
	} else if (preview_decide(label, &d, e) < 0) {
		return -1;
	}
	/* nginx sends bodiless requests to the gateway (kept connections),
	 * the others to the forwarder (conf/nginx.conf). */
	if (http_add_header(r, "X-Sbx-Forward", d.forward) < 0 ||
	    (d.gateway[0] && (http_add_header(r, "X-Sbx-Gateway", d.gateway) < 0 ||
			      http_add_header(r, "X-Sbx-Target", d.target) < 0)))
		return err_set(e, SBX_E_INTERNAL, "cannot add the forward header");
	http_respond_json(r, 200, NULL);
	return 0;
}
