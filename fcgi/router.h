/*
 * router.h — the one route table of sbx-api and its dispatcher.
 *
 * Routes are data: {method, pattern, handler, flags}. A pattern is in the
 * syntax of route.h, shared with the agent ("/v1/sandboxes/{id}"). Segments
 * are percent-decoded before they are compared; a decoded segment holding '/',
 * NUL, '{' or '}' is a 400. No pattern matching the path is a 404 NOT_FOUND,
 * a pattern matching with another method a 405 with an Allow header built
 * from the table. A capture named "id" is checked with ids_valid_sandbox().
 */
#ifndef SBX_ROUTER_H
#define SBX_ROUTER_H

#include "err.h"

#include <stddef.h>

struct http_req;

/* Handlers answer through http_respond_*() and return 0, or return -1 with e
 * filled and the dispatcher renders the error. */
typedef int (*route_fn)(struct http_req *r, struct sbx_err *e);

enum route_flags {
	ROUTE_AUTH = 1 << 0,      /* needs a valid API key */
	ROUTE_ADMIN = 1 << 1,     /* needs an admin key (implies AUTH) */
	ROUTE_INTERNAL = 1 << 2,  /* only through nginx internal locations (SBX_INTERNAL=1) */
	ROUTE_AUTHREQ = 1 << 3,   /* an auth_request subrequest: refusals are 403 + X-Sbx-* headers */
	ROUTE_CREATE = 1 << 4,    /* counts against the tenant's creates per minute (ratelimit.h) */
};

struct route {
	const char *method;       /* "GET", …, or "*" for any method */
	const char *pattern;
	route_fn fn;
	unsigned flags;
};

#define ROUTER_MAX_CAPS 4
#define ROUTER_CAP_MAX 256
#define ROUTER_PATH_MAX 2048

struct router_match {
	const struct route *route;
	int ncap;
	struct {
		char name[32];
		char value[ROUTER_CAP_MAX];
	} cap[ROUTER_MAX_CAPS];
	char allow[128];          /* filled on 405: "GET, PUT" */
};

/* Match method + path (no query) against table[0..n). Returns 0 with m filled,
 * or -1 with e = ROUTE_NOT_FOUND (404), METHOD_NOT_ALLOWED (405, m->allow
 * set) or VALIDATION (400). */
int router_match(const struct route *table, size_t n, const char *method, const char *path,
		 struct router_match *m, struct sbx_err *e);

/* A capture of the last match by name, or NULL (borrowed from m). */
const char *router_cap(const struct router_match *m, const char *name);

/* The table of sbx-api (router.c). */
extern const struct route router_routes[];
extern const size_t router_nroutes;

/* Route r, check flags and authentication, run the handler and make sure
 * exactly one response is sent. */
void router_dispatch(struct http_req *r);

#endif
