/* The route table matcher: captures, 404, 405 + Allow, decoding rules. */
#include "unit.h"
#include "router.h"

static int h_get(struct http_req *r, struct sbx_err *e) { (void)r; (void)e; return 0; }
static int h_put(struct http_req *r, struct sbx_err *e) { (void)r; (void)e; return 0; }
static int h_del(struct http_req *r, struct sbx_err *e) { (void)r; (void)e; return 0; }

static const struct route table[] = {
	{ "GET", "/healthz", h_get, 0 },
	{ "GET", "/v1/sandboxes", h_get, ROUTE_AUTH },
	{ "GET", "/v1/sandboxes/{id}", h_get, ROUTE_AUTH },
	{ "PUT", "/v1/sandboxes/{id}", h_put, ROUTE_AUTH },
	{ "DELETE", "/v1/sandboxes/{id}", h_del, ROUTE_AUTH },
	{ "POST", "/v1/sandboxes/{id}/ports/{port}", h_put, ROUTE_AUTH },
	{ "DELETE", "/v1/sandboxes/{id}/ports/{port}", h_del, ROUTE_AUTH },
	{ "*", "/_sbx_route", h_get, ROUTE_INTERNAL },
};
#define N (sizeof(table) / sizeof(table[0]))

TEST(fcgi_router_match_literal_and_captures)
{
	struct router_match m;
	struct sbx_err e;

	CHECK_INT(router_match(table, N, "GET", "/healthz", &m, &e), 0);
	CHECK(m.route == &table[0]);
	CHECK_INT(m.ncap, 0);

	CHECK_INT(router_match(table, N, "PUT", "/v1/sandboxes/my-box", &m, &e), 0);
	CHECK(m.route == &table[3]);
	CHECK_STR(router_cap(&m, "id"), "my-box");

	CHECK_INT(router_match(table, N, "POST", "/v1/sandboxes/b1/ports/8080", &m, &e), 0);
	CHECK(m.route == &table[5]);
	CHECK_STR(router_cap(&m, "id"), "b1");
	CHECK_STR(router_cap(&m, "port"), "8080");
	CHECK(router_cap(&m, "nope") == NULL);

	CHECK_INT(router_match(table, N, "PATCH", "/_sbx_route", &m, &e), 0);
	CHECK(m.route == &table[7]);
}

TEST(fcgi_router_not_found)
{
	struct router_match m;
	struct sbx_err e;

	CHECK_INT(router_match(table, N, "GET", "/nope", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
	CHECK_INT(router_match(table, N, "GET", "/healthz/", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/a/b", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
	CHECK_INT(router_match(table, N, "GET", "/v1//sandboxes", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes//", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
	CHECK_INT(router_match(table, N, "GET", "", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
	CHECK_INT(router_match(table, N, "GET", "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_ROUTE_NOT_FOUND);
}

TEST(fcgi_router_405_allow)
{
	struct router_match m;
	struct sbx_err e;

	CHECK_INT(router_match(table, N, "POST", "/v1/sandboxes/box", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_METHOD_NOT_ALLOWED);
	CHECK_STR(m.allow, "GET, PUT, DELETE");
	CHECK_INT(router_match(table, N, "DELETE", "/healthz", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_METHOD_NOT_ALLOWED);
	CHECK_STR(m.allow, "GET");
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/x/ports/1", &m, &e), -1);
	CHECK_STR(m.allow, "POST, DELETE");
	/* a method name that is a prefix of a listed one is still listed once */
	CHECK_INT(router_match(table, N, "GE", "/v1/sandboxes/x", &m, &e), -1);
	CHECK_STR(m.allow, "GET, PUT, DELETE");
}

TEST(fcgi_router_id_validation)
{
	struct router_match m;
	struct sbx_err e;

	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/Bad", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK(strstr(e.msg, "[a-z0-9-]") != NULL);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/-x", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(router_match(table, N, "GET",
			       "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	/* another method on a bad id is still a 405 first (no route runs) */
	CHECK_INT(router_match(table, N, "POST", "/v1/sandboxes/Bad", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_METHOD_NOT_ALLOWED);
}

TEST(fcgi_router_percent_decoding)
{
	struct router_match m;
	struct sbx_err e;

	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/ab%2dc", &m, &e), 0);
	CHECK_STR(router_cap(&m, "id"), "ab-c");
	CHECK_INT(router_match(table, N, "GET", "/%68ealthz", &m, &e), 0);
	CHECK(m.route == &table[0]);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/a%2Fb", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/a%00b", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/%7Bx%7D", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/{x}", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/ab%2", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(router_match(table, N, "GET", "/v1/sandboxes/ab%zz", &m, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
}

TEST(fcgi_router_real_table_sane)
{
	/* Every pattern of the real table starts with '/' and every {capture}
	 * is closed; /healthz needs no key, /v1/nodes an admin key. */
	struct router_match m;
	struct sbx_err e;

	for (size_t i = 0; i < router_nroutes; i++) {
		const char *p = router_routes[i].pattern;
		CHECK(p[0] == '/');
		CHECK(router_routes[i].fn != NULL);
	}
	CHECK_INT(router_match(router_routes, router_nroutes, "GET", "/healthz", &m, &e), 0);
	CHECK_INT(m.route->flags & ROUTE_AUTH, 0);
	CHECK_INT(router_match(router_routes, router_nroutes, "GET", "/v1/nodes", &m, &e), 0);
	CHECK(m.route->flags & ROUTE_ADMIN);
	CHECK_INT(router_match(router_routes, router_nroutes, "POST", "/_sbx_route", &m, &e), 0);
	CHECK(m.route->flags & ROUTE_INTERNAL);
	CHECK(m.route->flags & ROUTE_AUTHREQ);
}

/* A rest capture spans segments, each shorter than ROUTER_CAP_MAX, but
 * together longer than one capture holds: no fit, and nothing overflows
 * (found by fuzz_router under UBSan). */
TEST(fcgi_router_rest_capture_longer_than_a_capture)
{
	struct router_match m;
	struct sbx_err e;
	char path[ROUTER_PATH_MAX];
	size_t o = (size_t)snprintf(path, sizeof(path), "/v1/images");

	for (int i = 0; i < 3; i++) {
		path[o++] = '/';
		memset(path + o, 'a', 120);
		o += 120;
	}
	path[o] = '\0';
	CHECK_INT(router_match(router_routes, router_nroutes, "DELETE", path, &m, &e), -1);
	CHECK_INT(router_match(router_routes, router_nroutes, "DELETE", "/v1/images/a/b:1", &m, &e), 0);
	CHECK_STR(router_cap(&m, "ref"), "a/b:1");
}
