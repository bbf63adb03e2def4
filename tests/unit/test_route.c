/* Unit tests of the shared route-pattern matcher (sandbox/common/route.c). */
#include "unit.h"

#include "route.h"

static int cap_is(const struct route_caps *c, int i, const char *name, const char *value)
{
	return i < c->n && c->cap[i].name_len == strlen(name) &&
	       memcmp(c->cap[i].name, name, c->cap[i].name_len) == 0 &&
	       c->cap[i].len == strlen(value) && memcmp(c->cap[i].value, value, c->cap[i].len) == 0;
}

TEST(route_fit_literals_and_captures)
{
	struct route_caps c;

	CHECK(route_fit("/healthz", "/healthz", &c) && c.n == 0);
	CHECK(!route_fit("/healthz", "/healthz/", &c));
	CHECK(!route_fit("/healthz", "/health", &c));
	CHECK(!route_fit("/healthz", "healthz", &c));
	CHECK(route_fit("/agent/v1/sandboxes/{tenant}/{id}/stop", "/agent/v1/sandboxes/dev/b1/stop", &c));
	CHECK(c.n == 2 && cap_is(&c, 0, "tenant", "dev") && cap_is(&c, 1, "id", "b1"));
	CHECK(!route_fit("/v1/sandboxes/{id}", "/v1/sandboxes/", &c));      /* empty capture */
	CHECK(!route_fit("/v1/sandboxes/{id}", "/v1/sandboxes/a/b", &c));
	CHECK(!route_fit("/v1/sandboxes/{id}/exec", "/v1/sandboxes//exec", &c));
	CHECK(route_fit("/v1/sandboxes/{id}", "/v1/sandboxes/a", NULL));
}

TEST(route_fit_tail)
{
	struct route_caps c;

	CHECK(route_fit("/v1/sandboxes/{id}/files/{path*}", "/v1/sandboxes/b/files/a/b%2Fc", &c));
	CHECK(c.n == 2 && cap_is(&c, 0, "id", "b") && cap_is(&c, 1, "path", "a/b%2Fc"));
	CHECK(route_fit("/v1/sandboxes/{id}/files/{path*}", "/v1/sandboxes/b/files/", &c));
	CHECK(cap_is(&c, 1, "path", ""));
	CHECK(!route_fit("/v1/sandboxes/{id}/files/{path*}", "/v1/sandboxes/b/files", &c));
	/* a tail capture is only valid as the last segment */
	CHECK(!route_fit("/a/{rest*}/b", "/a/x/b", &c));
	/* more captures than ROUTE_MAX_CAPS never match */
	CHECK(!route_fit("/{a}/{b}/{c}/{d}/{e}", "/1/2/3/4/5", &c));
}
