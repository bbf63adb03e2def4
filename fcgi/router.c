#include "router.h"
#include "route.h"
#include "codec.h"
#include "api.h"
#include "apimetrics.h"
#include "auth.h"
#include "http.h"
#include "ids.h"
#include "log.h"
#include "util.h"

#include <string.h>

const struct route router_routes[] = {
	{ "GET", "/healthz", api_health_get, 0 },
	{ "GET", "/v1/nodes", api_nodes_list, ROUTE_AUTH | ROUTE_ADMIN },
	{ "POST", "/v1/nodes/{node}/drain", api_nodes_drain, ROUTE_AUTH | ROUTE_ADMIN },
	{ "GET", "/v1/nodes/{node}/sandboxes", api_nodes_sandboxes, ROUTE_AUTH | ROUTE_ADMIN },
	{ "POST", "/v1/images/pull", api_images_pull, ROUTE_AUTH | ROUTE_ADMIN },
	{ "GET", "/v1/images", api_images_list, ROUTE_AUTH | ROUTE_ADMIN },
	{ "DELETE", "/v1/images/{ref*}", api_images_delete, ROUTE_AUTH | ROUTE_ADMIN },
	{ "GET", "/v1/tenants/{tenant}/limits", api_tenants_limits_get, ROUTE_AUTH | ROUTE_ADMIN },
	{ "PUT", "/v1/tenants/{tenant}/limits", api_tenants_limits_put, ROUTE_AUTH | ROUTE_ADMIN },
	{ "GET", "/v1/sandboxes", api_sandboxes_list, ROUTE_AUTH },
	{ "PUT", "/v1/sandboxes/{id}", api_sandboxes_put, ROUTE_AUTH | ROUTE_CREATE },
	{ "GET", "/v1/sandboxes/{id}", api_sandboxes_get, ROUTE_AUTH },
	{ "PATCH", "/v1/sandboxes/{id}", api_sandboxes_patch, ROUTE_AUTH },
	{ "DELETE", "/v1/sandboxes/{id}", api_sandboxes_delete, ROUTE_AUTH },
	{ "POST", "/v1/sandboxes/{id}/restart", api_sandboxes_restart, ROUTE_AUTH },
	{ "POST", "/v1/sandboxes/{id}/sleep", api_sandboxes_sleep, ROUTE_AUTH },
	{ "GET", "/v1/sandboxes/{id}/ports", api_ports_list, ROUTE_AUTH },
	{ "POST", "/v1/sandboxes/{id}/ports/{port}", api_ports_expose, ROUTE_AUTH },
	{ "DELETE", "/v1/sandboxes/{id}/ports/{port}", api_ports_delete, ROUTE_AUTH },
	{ "GET", "/v1/sandboxes/{id}/tunnels", api_tunnels_list, ROUTE_AUTH },
	{ "POST", "/v1/sandboxes/{id}/tunnels/{port}", api_tunnels_create, ROUTE_AUTH },
	{ "DELETE", "/v1/sandboxes/{id}/tunnels/{port}", api_tunnels_delete, ROUTE_AUTH },
	{ "GET", "/v1/snapshots", api_snapshots_list, ROUTE_AUTH },
	{ "GET", "/v1/snapshots/{sid}", api_snapshots_get, ROUTE_AUTH },
	{ "DELETE", "/v1/snapshots/{sid}", api_snapshots_delete, ROUTE_AUTH },
	{ "*", "/_sbx_preview", api_ports_preview, ROUTE_INTERNAL | ROUTE_AUTHREQ },
	{ "*", "/_sbx_route", api_route_decide, ROUTE_INTERNAL | ROUTE_AUTHREQ },
	{ "*", "/_sbx_error", api_route_error, ROUTE_INTERNAL },
	{ "*", "/_sbx_events", api_events_decide, ROUTE_INTERNAL | ROUTE_AUTHREQ },
};
const size_t router_nroutes = ARRAY_SIZE(router_routes);

#define MAX_SEGS 16

/* Decode a request path segment by segment into out ("/a/b", each segment
 * decoded, none holding '/', '{' or '}'): 0, -1 with e (400), or 1 when
 * the path cannot match any pattern (too many segments). */
static int decode_path(const char *path, char *out, size_t outsz, struct sbx_err *e)
{
	const char *p = path;
	size_t o = 0;
	int n = 0;

	if (*p != '/')
		return 1;
	p++;
	for (;;) {
		size_t len = strcspn(p, "/");
		char seg[ROUTER_CAP_MAX];
		long d;

		if (n == MAX_SEGS)
			return 1;
		d = codec_pct_decode(p, len, seg, sizeof(seg), 0);
		if (d < 0)
			return err_set(e, SBX_E_VALIDATION,
				       "path segment %d is malformed (bad escape, NUL or longer than %d bytes)",
				       n + 1, ROUTER_CAP_MAX - 1);
		if (strpbrk(seg, "/{}"))
			return err_set(e, SBX_E_VALIDATION,
				       "path segment %d must not contain '/', '{' or '}'", n + 1);
		if (o + 1 + (size_t)d >= outsz)
			return 1;
		out[o++] = '/';
		memcpy(out + o, seg, (size_t)d);
		o += (size_t)d;
		n++;
		p += len;
		if (!*p)
			break;
		p++;
	}
	out[o] = '\0';
	return 0;
}

/* Does pattern fit the decoded path (route.h)? Fills captures into m when
 * it does. */
static int pattern_fits(const char *pattern, const char *decoded, struct router_match *m)
{
	struct route_caps caps;

	if (!route_fit(pattern, decoded, &caps) || caps.n > ROUTER_MAX_CAPS)
		return 0;
	/* a rest capture ({name*}) spans segments: it may not fit one */
	for (int i = 0; i < caps.n; i++)
		if (caps.cap[i].len >= ROUTER_CAP_MAX)
			return 0;
	if (!m)
		return 1;
	for (int i = 0; i < caps.n; i++) {
		size_t nl = caps.cap[i].name_len < sizeof(m->cap[i].name) - 1
				    ? caps.cap[i].name_len : sizeof(m->cap[i].name) - 1;

		memcpy(m->cap[i].name, caps.cap[i].name, nl);
		m->cap[i].name[nl] = '\0';
		memcpy(m->cap[i].value, caps.cap[i].value, caps.cap[i].len);   /* checked above */
		m->cap[i].value[caps.cap[i].len] = '\0';
	}
	m->ncap = caps.n;
	return 1;
}

int router_match(const struct route *table, size_t n, const char *method, const char *path,
		 struct router_match *m, struct sbx_err *e)
{
	char decoded[ROUTER_PATH_MAX];
	int rc, path_known = 0;

	memset(m, 0, sizeof(*m));
	rc = decode_path(path, decoded, sizeof(decoded), e);
	if (rc < 0)
		return -1;
	if (rc > 0)
		return err_set(e, SBX_E_ROUTE_NOT_FOUND, "no route for this path");
	for (size_t i = 0; i < n; i++) {
		const struct route *rt = &table[i];
		if (!pattern_fits(rt->pattern, decoded, NULL))
			continue;
		path_known = 1;
		if (strcmp(rt->method, "*") != 0 && strcmp(rt->method, method) != 0 &&
		    !(strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0)) {
			route_allow_add(m->allow, sizeof(m->allow), rt->method);
			continue;
		}
		pattern_fits(rt->pattern, decoded, m);
		m->route = rt;
		m->allow[0] = '\0';
		for (int c = 0; c < m->ncap; c++)
			if (strcmp(m->cap[c].name, "id") == 0 && !ids_valid_sandbox(m->cap[c].value))
				return err_set(e, SBX_E_VALIDATION,
					       "sandbox id must be 1-63 of [a-z0-9-], not starting or ending with '-'");
		return 0;
	}
	if (path_known)
		return err_set(e, SBX_E_METHOD_NOT_ALLOWED, "method %.16s is not allowed here (allowed: %s)",
			       method, m->allow);
	return err_set(e, SBX_E_ROUTE_NOT_FOUND, "no route for this path");
}

const char *router_cap(const struct router_match *m, const char *name)
{
	for (int i = 0; i < m->ncap; i++)
		if (strcmp(m->cap[i].name, name) == 0)
			return m->cap[i].value;
	return NULL;
}

/* Route, check, run. Every way out sends exactly one response. */
static void dispatch(struct http_req *r, struct sbx_err *e)
{
	const struct route *rt;
	const char *internal, *uri;
	int64_t clen;

	/* r->path is the client's raw path (http_req_init); it must not hold
	 * empty or dot segments that nginx's normalized one has resolved. */
	internal = http_param(r, "SBX_INTERNAL");
	internal = internal && strcmp(internal, "1") == 0 ? internal : NULL;
	if (!internal && (uri = http_param(r, "REQUEST_URI")) && http_path_bad_segment(uri)) {
		err_set(e, SBX_E_VALIDATION, "the path must not contain empty, '.' or '..' segments");
		http_respond_error(r, e);
		return;
	}
	if (router_match(router_routes, router_nroutes, r->method, r->path, &r->match, e) < 0) {
		if (e->code == SBX_E_METHOD_NOT_ALLOWED)
			(void)http_add_header(r, "Allow", r->match.allow);
		http_respond_error(r, e);
		return;
	}
	rt = r->match.route;
	/* A route's path is written literally (API.md, "Ids"): "%61bc" must
	 * not name "abc", the way data routes refuse it too (api_route.c). */
	if (!internal && strchr(r->path, '%')) {
		err_set(e, SBX_E_VALIDATION,
			"the path must be written without percent escapes (ids appear literally)");
		http_respond_error(r, e);
		return;
	}
	if (rt->flags & ROUTE_INTERNAL) {
		if (!internal) {
			err_set(e, SBX_E_ROUTE_NOT_FOUND, "no route for this path");
			http_respond_error(r, e);
			return;
		}
	}
	if (rt->flags & ROUTE_AUTHREQ)
		r->flags |= HTTP_F_AUTHREQ;
	if (http_content_length(r, &clen, e) < 0) {
		http_respond_error(r, e);
		return;
	}
	if (rt->flags & (ROUTE_AUTH | ROUTE_ADMIN)) {
		if (auth_request(r, e) < 0) {
			http_respond_error(r, e);
			return;
		}
		if ((rt->flags & ROUTE_ADMIN) && !r->admin) {
			err_set(e, SBX_E_FORBIDDEN, "this call needs an admin key");
			http_respond_error(r, e);
			return;
		}
	}
	if (rt->fn(r, e) < 0) {
		if (e->code == SBX_E_NONE)
			err_set(e, SBX_E_INTERNAL, "handler failed without an error");
		http_respond_error(r, e);
		return;
	}
	if (!r->responded) {
		err_set(e, SBX_E_INTERNAL, "handler sent no response");
		http_respond_error(r, e);
	}
}

void router_dispatch(struct http_req *r)
{
	int64_t started_us = metrics_now_us();
	struct sbx_err e;

	err_clear(&e);
	metrics_gauge_add(APIM_IN_FLIGHT, 0, 0, 1);
	dispatch(r, &e);
	metrics_gauge_add(APIM_IN_FLIGHT, 0, 0, -1);
	apimetrics_request(r->match.route, r->status, started_us);
	if (r->status >= 500)
		log_warn("%s %s -> %d (%lld ms, request %s)", r->method, r->path, r->status,
			 (long long)(util_now_ms() - r->started_ms), r->request_id);
	else
		log_debug("%s %s -> %d (%lld ms, request %s)", r->method, r->path, r->status,
			  (long long)(util_now_ms() - r->started_ms), r->request_id);
}
