/*
 * /_sbx_route and /_sbx_error — the data-path decision behind nginx
 * auth_request, and the rendering of its refusals.
 *
 * /_sbx_route answers 200 with X-Sbx-Agent / X-Sbx-Epoch / X-Sbx-Generation
 * / X-Sbx-Tenant, or refuses with 403 + X-Sbx-Status / X-Sbx-Code /
 * X-Sbx-Message (http_respond_error under HTTP_F_AUTHREQ; a rate limit
 * refusal adds X-Sbx-Rate, ratelimit.h); nginx sends the refusal to
 * /_sbx_error, which renders the JSON error with the real status (and the
 * rate limit's headers).
 *
 * nginx caches an allowed answer until the end of the wall-clock second it
 * was made in (X-Accel-Expires: @<unix s>; conf/nginx.conf, fastcgi_cache
 * sbx_route); "X-Accel-Expires: 0" (tickets, rate-limited tenants) never.
 */
#include "agentc.h"
#include "api.h"
#include "auth.h"
#include "ids.h"
#include "lifecycle.h"
#include "log.h"
#include "rkeys.h"
#include "store.h"
#include "util.h"

#include <string.h>

#define ROUTE_PREFIX "/v1/sandboxes/"

/* The sandbox id of an original data-path URI ("/v1/sandboxes/{id}/…"). */
static int original_id(const char *uri, char *id, size_t idsz, struct sbx_err *e)
{
	const char *p;
	size_t len;

	if (!uri || uri[0] != '/')
		return err_set(e, SBX_E_INTERNAL, "/_sbx_route without a usable SBX_ORIGINAL_URI");
	if (http_path_bad_segment(uri))
		return err_set(e, SBX_E_VALIDATION,
			       "the path must not contain empty, '.' or '..' segments");
	/* nginx matched the decoded URI ("/v1/%73andboxes/…" too): the raw
	 * one the agent gets must spell the route plainly. */
	if (strncmp(uri, ROUTE_PREFIX, strlen(ROUTE_PREFIX)) != 0)
		return err_set(e, SBX_E_VALIDATION,
			       "the path must start with '" ROUTE_PREFIX "' written without escapes");
	p = uri + strlen(ROUTE_PREFIX);
	len = strcspn(p, "/?");
	/* Taken literally, never decoded: the agent sees the same raw bytes. */
	if (len == 0 || len >= idsz)
		return err_set(e, SBX_E_VALIDATION,
			       "sandbox id must be 1-63 of [a-z0-9-], not starting or ending with '-'");
	memcpy(id, p, len);
	id[len] = '\0';
	if (!ids_valid_sandbox(id))
		return err_set(e, SBX_E_VALIDATION,
			       "sandbox id must be 1-63 of [a-z0-9-], not starting or ending with '-'");
	return 0;
}

#define TICKET_LEN 35   /* "tk_" + 32 hex: agent_terminals.c makes them */

/* The ?ticket= of uri when it has one: 1 (out filled), 0 none, -1 (401). */
static int uri_ticket(const char *uri, char *out, size_t outsz, struct sbx_err *e)
{
	const char *q = uri ? strchr(uri, '?') : NULL;
	struct sbx_err qe;
	int rc;

	if (!q)
		return 0;
	rc = http_query_get(q + 1, "ticket", out, outsz, &qe);
	if (rc == 0)
		return 0;
	if (rc < 0 || strlen(out) != TICKET_LEN || strncmp(out, "tk_", 3) != 0 ||
	    strspn(out + 3, "0123456789abcdef") != TICKET_LEN - 3)
		return err_set(e, SBX_E_UNAUTHORIZED, "invalid ticket");
	return 1;
}

/* Authenticate r by the single-use ticket of a terminal's WebSocket (a
 * browser cannot send the API key there): "GET /v1/sandboxes/{id}/
 * terminals/{t}/ws?ticket=…" only. The ticket is taken from Redis
 * (GETDEL: used once, whatever follows) and must name this tenant's
 * sandbox id and terminal t; its tenant becomes r's. 0 or -1 (401). */
static int auth_ticket(struct http_req *r, const char *uri, const char *id, const char *ticket,
		       struct sbx_err *e)
{
	const char *method = http_param(r, "SBX_ORIGINAL_METHOD");
	const char *p = uri + strlen(ROUTE_PREFIX) + strlen(id);
	char want[ROUTER_CAP_MAX * 2 + 80], term[ROUTER_CAP_MAX];
	size_t tl;
	redisReply *rep;
	const char *slash;
	int ok;

	if (strncmp(p, "/terminals/", 11) != 0)
		return err_set(e, SBX_E_UNAUTHORIZED, "a ticket opens a terminal's WebSocket only");
	p += 11;
	tl = strcspn(p, "/?");
	if (tl == 0 || tl >= sizeof(term) || strncmp(p + tl, "/ws", 3) != 0 ||
	    (p[tl + 3] != '\0' && p[tl + 3] != '?') || !method || strcmp(method, "GET") != 0)
		return err_set(e, SBX_E_UNAUTHORIZED, "a ticket opens a terminal's WebSocket only");
	memcpy(term, p, tl);
	term[tl] = '\0';
	rep = store_command(e, "GETDEL %s", rkeys_ticket(RK_BUF, ticket));
	if (!rep)
		return -1;
	ok = rep->type == REDIS_REPLY_STRING && (slash = strchr(rep->str, '/')) &&
	     (size_t)(slash - rep->str) < sizeof(r->tenant);
	if (ok) {
		memcpy(r->tenant, rep->str, (size_t)(slash - rep->str));
		r->tenant[slash - rep->str] = '\0';
		ok = ids_valid_tenant(r->tenant) &&
		     snprintf(want, sizeof(want), "%s/%s/%s", r->tenant, id, term) < (int)sizeof(want) &&
		     strcmp(rep->str, want) == 0;
	}
	freeReplyObject(rep);
	if (!ok) {
		r->tenant[0] = '\0';
		return err_set(e, SBX_E_UNAUTHORIZED, "invalid, used or expired ticket");
	}
	r->admin = 0;
	r->authed = 1;
	return 0;
}

int api_route_decide(struct http_req *r, struct sbx_err *e)
{
	char id[ROUTER_CAP_MAX], num[32], ticket[64];
	const char *uri = http_param(r, "SBX_ORIGINAL_URI");
	const char *authz = http_param(r, "HTTP_AUTHORIZATION");
	struct lc_owner o;
	int has_ticket = 0;

	/* nginx's /_sbx_route_forget: an expired answer to cache in place of
	 * the caller's route (it is never served, so it needs no check). */
	if (http_param(r, "SBX_ROUTE_FORGET") && strcmp(http_param(r, "SBX_ROUTE_FORGET"), "1") == 0) {
		if (http_add_header(r, "X-Accel-Expires", "@1") < 0)
			return err_set(e, SBX_E_INTERNAL, "cannot add the route headers");
		http_respond_json(r, 200, NULL);
		return 0;
	}
	if (!authz || !*authz) {
		has_ticket = uri_ticket(uri, ticket, sizeof(ticket), e);
		if (has_ticket < 0)
			return -1;
	}
	if (has_ticket) {
		if (original_id(uri, id, sizeof(id), e) < 0 || auth_ticket(r, uri, id, ticket, e) < 0)
			return -1;
	} else if (auth_request(r, e) < 0 || original_id(uri, id, sizeof(id), e) < 0) {
		return -1;
	}
	/* Wakes a sleeping sandbox and re-places one whose node is gone. */
	if (lifecycle_ensure_running(r->tenant, id, &o, e) < 0)
		return -1;
	if (!agentc_address_ok(o.address))
		return err_set(e, SBX_E_INTERNAL, "node %s has a bad address", o.node);
	if (http_add_header(r, "X-Sbx-Agent", o.address) < 0 ||
	    http_add_header(r, "X-Sbx-Tenant", r->tenant) < 0)
		return err_set(e, SBX_E_INTERNAL, "cannot add the route headers");
	util_xsnprintf(num, sizeof(num), "%lld", (long long)o.epoch);
	if (http_add_header(r, "X-Sbx-Epoch", num) < 0)
		return err_set(e, SBX_E_INTERNAL, "cannot add the route headers");
	util_xsnprintf(num, sizeof(num), "%lld", (long long)o.generation);
	if (http_add_header(r, "X-Sbx-Generation", num) < 0)
		return err_set(e, SBX_E_INTERNAL, "cannot add the route headers");
	/* nginx may keep this decision (conf/nginx.conf, the sbx_route cache)
	 * until the end of the current wall-clock second ("@<unix s>": nginx
	 * counts whole seconds, so this is the shortest bound it knows), and
	 * not at all for a ticket (single use), a tenant with a rate limit
	 * (every call is counted here) or when key checks are not cached
	 * either (api.key_cache = 0: a deleted key stops at once). */
	if (has_ticket || r->rate.set || r->conf->api.key_cache_ms <= 0)
		util_xsnprintf(num, sizeof(num), "0");
	else
		util_xsnprintf(num, sizeof(num), "@%lld", (long long)(util_wall_ms() / 1000));
	if (http_add_header(r, "X-Accel-Expires", num) < 0)
		return err_set(e, SBX_E_INTERNAL, "cannot add the route headers");
	http_respond_json(r, 200, NULL);
	return 0;
}

/* A message nginx relayed: printable ASCII, capped; else a generic one. */
static const char *relayed_message(const char *m)
{
	size_t n;

	if (!m)
		return NULL;
	n = strlen(m);
	if (n == 0 || n > HTTP_RELAY_MESSAGE_MAX)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)m[i] < 0x20 || (unsigned char)m[i] > 0x7e)
			return NULL;
	return m;
}

/* "/v1/sandboxes/<id>/cf/…": the Cloudflare SDK's control-plane routes. */
static int is_cf_uri(const char *uri)
{
	static const char prefix[] = "/v1/sandboxes/";
	const char *p;

	if (strncmp(uri, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	p = strchr(uri + sizeof(prefix) - 1, '/');
	return p && (strncmp(p, "/cf/", 4) == 0 || strcmp(p, "/cf") == 0);
}

int api_route_error(struct http_req *r, struct sbx_err *e)
{
	const char *st = http_param(r, "SBX_ERROR_STATUS");
	const char *code = http_param(r, "SBX_ERROR_CODE");
	const char *msg = relayed_message(http_param(r, "SBX_ERROR_MESSAGE"));
	const char *uri = http_param(r, "SBX_ORIGINAL_URI");
	enum sbx_ecode c = code ? err_from_name(code) : SBX_E_NONE;
	int64_t status;

	/* A refusal of a Cloudflare SDK route speaks the SDK's error shape, so
	 * the SDK raises its own error classes (docs/COMPAT.md). */
	if (uri && is_cf_uri(uri))
		r->flags |= HTTP_F_CF_SHAPE;

	if (!st || util_parse_i64(st, 100, 599, &status) < 0 || c == SBX_E_NONE ||
	    c == SBX_E_INTERNAL || err_status(c) != status)
		return err_set(e, SBX_E_INTERNAL, "/_sbx_error with status '%.8s' code '%.40s'",
			       st ? st : "", code ? code : "");
	/* A rate limit refusal carries its headers (ratelimit.h) along. */
	if (c == SBX_E_RATE_LIMITED &&
	    ratelimit_relay_parse(http_param(r, "SBX_ERROR_RATE"), &r->rate) < 0)
		r->rate.set = 0;
	return err_set(e, c, "%s", msg ? msg : "request refused");
}
