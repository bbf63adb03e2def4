/*
 * fuzz_router — route matching of sbx-api (fcgi/router.c) against the real
 * route table. Input: "METHOD\npath".
 *
 * Invariants: a match has a route of that method (or "*", or GET for
 * HEAD), captures that are non-empty decoded segments without '/', '{',
 * '}' or NUL, a valid sandbox id in "id"; re-encoding the captures into the
 * pattern matches the same route with the same captures. A refusal is one
 * of 404 / 405 (with an Allow list) / 400.
 */
#include "fuzz.h"

#include "err.h"
#include "http.h"
#include "ids.h"
#include "router.h"

/* The pattern of rt with every capture replaced by its percent-encoded value. */
static int rebuild(const struct router_match *m, char *out, size_t n)
{
	const char *p = m->route->pattern;
	size_t o = 0;
	int c = 0;

	while (*p) {
		if (*p == '{') {
			const char *v = m->cap[c++].value;
			p = strchr(p, '}') + 1;
			for (; *v; v++) {
				/* a rest capture's '/' separates its segments */
				int w = *v == '/' ? snprintf(out + o, n - o, "/")
						  : snprintf(out + o, n - o, "%%%02x", (unsigned char)*v);
				if (w < 0 || (size_t)w >= n - o)
					return -1;
				o += (size_t)w;
			}
			continue;
		}
		if (o + 1 >= n)
			return -1;
		out[o++] = *p++;
	}
	out[o] = '\0';
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *method, *path;
	struct router_match m, m2;
	struct sbx_err e;
	char again[ROUTER_PATH_MAX * 3];

	fuzz_split(data, size, '\n', &method, &path);
	err_clear(&e);
	if (router_match(router_routes, router_nroutes, method, path, &m, &e) == 0) {
		const struct route *rt = m.route;
		const char *id = router_cap(&m, "id");

		FUZZ_ASSERT(rt);
		FUZZ_ASSERT(strcmp(rt->method, "*") == 0 || strcmp(rt->method, method) == 0 ||
			    (strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0));
		FUZZ_ASSERT(m.ncap >= 0 && m.ncap <= ROUTER_MAX_CAPS);
		for (int i = 0; i < m.ncap; i++) {
			char rest[40];

			/* only a rest capture ({name*}) may hold a '/' or be empty */
			snprintf(rest, sizeof(rest), "{%s*}", m.cap[i].name);
			FUZZ_ASSERT(!strpbrk(m.cap[i].value, "{}"));
			FUZZ_ASSERT(strstr(rt->pattern, rest) ||
				    (m.cap[i].value[0] && !strchr(m.cap[i].value, '/')));
			FUZZ_ASSERT(strlen(m.cap[i].value) < ROUTER_CAP_MAX);
		}
		if (strstr(rt->pattern, "{id}"))
			FUZZ_ASSERT(id && ids_valid_sandbox(id));
		else
			FUZZ_ASSERT(!id);
		if (rebuild(&m, again, sizeof(again)) == 0) {
			err_clear(&e);
			FUZZ_ASSERT(router_match(router_routes, router_nroutes, method, again, &m2, &e) == 0);
			FUZZ_ASSERT(m2.route == rt && m2.ncap == m.ncap);
			for (int i = 0; i < m.ncap; i++)
				FUZZ_ASSERT(strcmp(m.cap[i].value, m2.cap[i].value) == 0);
		}
	} else {
		FUZZ_ASSERT(e.code == SBX_E_ROUTE_NOT_FOUND || e.code == SBX_E_METHOD_NOT_ALLOWED ||
			    e.code == SBX_E_VALIDATION);
		if (e.code == SBX_E_METHOD_NOT_ALLOWED) {
			FUZZ_ASSERT(m.allow[0] != '\0');
			/* the answer's Allow header must be header-safe */
			for (const char *a = m.allow; *a; a++)
				FUZZ_ASSERT(*a >= 0x20 && *a < 0x7f);
		}
	}
	free(method);
	free(path);
	return 0;
}
