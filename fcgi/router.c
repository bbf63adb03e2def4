#include "router.h"
#include "codec.h"
#include "api.h"
#include "auth.h"
#include "http.h"
#include "ids.h"
#include "log.h"
#include "util.h"

#include <string.h>

const struct route router_routes[] = {
	{ "GET", "/healthz", api_health_get, 0 },
	{ "GET", "/v1/nodes", api_nodes_list, ROUTE_AUTH | ROUTE_ADMIN },
	{ "GET", "/v1/tenants/{tenant}/limits", api_tenants_limits_get, ROUTE_AUTH | ROUTE_ADMIN },
	{ "PUT", "/v1/tenants/{tenant}/limits", api_tenants_limits_put, ROUTE_AUTH | ROUTE_ADMIN },
	{ "GET", "/v1/sandboxes", api_sandboxes_list, ROUTE_AUTH },
	{ "PUT", "/v1/sandboxes/{id}", api_sandboxes_put, ROUTE_AUTH },
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
	{ "*", "/_sbx_preview", api_ports_preview, ROUTE_INTERNAL | ROUTE_AUTHREQ },
	{ "*", "/_sbx_route", api_route_decide, ROUTE_INTERNAL | ROUTE_AUTHREQ },
	{ "*", "/_sbx_error", api_route_error, ROUTE_INTERNAL },
};
const size_t router_nroutes = ARRAY_SIZE(router_routes);

#define MAX_SEGS 16

struct segs {
	int n;
	char v[MAX_SEGS][ROUTER_CAP_MAX];
};

/* Split and decode a request path. 0, -1 with e (400), or 1 when the path
 * cannot match any pattern (too many segments, empty segments). */
static int split_path(const char *path, struct segs *s, struct sbx_err *e)
{
	const char *p = path;

	s->n = 0;
	if (*p != '/')
		return 1;
	p++;
	for (;;) {
		size_t len = strcspn(p, "/");
		long d;

		if (s->n == MAX_SEGS)
			return 1;
		d = codec_pct_decode(p, len, s->v[s->n], sizeof(s->v[s->n]), 0);
		if (d < 0)
			return err_set(e, SBX_E_VALIDATION,
				       "path segment %d is malformed (bad escape, NUL or longer than %d bytes)",
				       s->n + 1, ROUTER_CAP_MAX - 1);
		if (strpbrk(s->v[s->n], "/{}"))
			return err_set(e, SBX_E_VALIDATION,
				       "path segment %d must not contain '/', '{' or '}'", s->n + 1);
		s->n++;
		p += len;
		if (!*p)
			break;
		p++;
	}
	return 0;
}

/* Does pattern fit the segments? Fills captures into m when it does. */
static int pattern_fits(const char *pattern, const struct segs *s, struct router_match *m)
{
	const char *p = pattern + 1;
	int i = 0, ncap = 0;

	for (;;) {
		size_t len = strcspn(p, "/");

		if (i >= s->n)
			return 0;
		if (len >= 2 && p[0] == '{' && p[len - 1] == '}') {
			if (s->v[i][0] == '\0' || ncap >= ROUTER_MAX_CAPS)
				return 0;
			if (m) {
				size_t nl = len - 2 < sizeof(m->cap[0].name) - 1 ? len - 2 : sizeof(m->cap[0].name) - 1;
				memcpy(m->cap[ncap].name, p + 1, nl);
				m->cap[ncap].name[nl] = '\0';
				snprintf(m->cap[ncap].value, sizeof(m->cap[ncap].value), "%s", s->v[i]);
			}
			ncap++;
		} else if (strlen(s->v[i]) != len || memcmp(s->v[i], p, len) != 0) {
			return 0;
		}
		i++;
		p += len;
		if (!*p)
			break;
		p++;
	}
	if (i != s->n)
		return 0;
	if (m)
		m->ncap = ncap;
	return 1;
}

static void allow_add(char *allow, size_t size, const char *method)
{
	size_t len = strlen(allow), mlen = strlen(method);
	const char *p = allow;

	while ((p = strstr(p, method))) {  /* already listed? */
		if ((p == allow || p[-1] == ' ') && (p[mlen] == ',' || p[mlen] == '\0'))
			return;
		p += mlen;
	}
	if (len + mlen + 3 > size)
		return;
	if (len)
		memcpy(allow + len, ", ", 2), len += 2;
	memcpy(allow + len, method, mlen + 1);
}

int router_match(const struct route *table, size_t n, const char *method, const char *path,
		 struct router_match *m, struct sbx_err *e)
{
	struct segs s;
	int rc, path_known = 0;

	memset(m, 0, sizeof(*m));
	rc = split_path(path, &s, e);
	if (rc < 0)
		return -1;
	if (rc > 0)
		return err_set(e, SBX_E_ROUTE_NOT_FOUND, "no route for this path");
	for (size_t i = 0; i < n; i++) {
		const struct route *rt = &table[i];
		if (!pattern_fits(rt->pattern, &s, NULL))
			continue;
		path_known = 1;
		if (strcmp(rt->method, "*") != 0 && strcmp(rt->method, method) != 0 &&
		    !(strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0)) {
			allow_add(m->allow, sizeof(m->allow), rt->method);
			continue;
		}
		pattern_fits(rt->pattern, &s, m);
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

	/* nginx gives the normalized path; the raw one (the client's, also in
	 * the subrequests nginx makes for it) must not differ in segments. */
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
	struct sbx_err e;

	err_clear(&e);
	dispatch(r, &e);
	if (r->status >= 500)
		log_warn("%s %s -> %d (%lld ms, request %s)", r->method, r->path, r->status,
			 (long long)(util_now_ms() - r->started_ms), r->request_id);
	else
		log_debug("%s %s -> %d (%lld ms, request %s)", r->method, r->path, r->status,
			  (long long)(util_now_ms() - r->started_ms), r->request_id);
}
