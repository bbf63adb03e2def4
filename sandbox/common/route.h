/*
 * route.h — the one route-pattern syntax of sbx and its matcher, used by
 * sbx-api's router (fcgi/router.c) and the agent's HTTP server
 * (sandbox/agent/httpd.c).
 *
 * A pattern is an absolute path of '/'-separated segments, each one of:
 *   literal     matches itself
 *   {name}      one non-empty segment, captured
 *   {name*}     (last segment only) the rest of the path: maybe empty,
 *               slashes included, captured
 * The path is compared as given: decoding is each tier's own rule (sbx-api
 * matches decoded segments; the agent matches the decoded path, or for a
 * tail route the raw target, whose tail its handler decodes).
 */
#ifndef SBX_ROUTE_H
#define SBX_ROUTE_H

#include <stddef.h>

#define ROUTE_MAX_CAPS 4

struct route_caps {
	int n;
	struct {
		const char *name;    /* in the pattern, name_len bytes */
		size_t name_len;
		const char *value;   /* in the path, len bytes */
		size_t len;
	} cap[ROUTE_MAX_CAPS];
};

/* 1 when path fits pattern (caps, when not NULL, point into both), 0 when
 * it does not (also for a pattern with more than ROUTE_MAX_CAPS captures). */
int route_fit(const char *pattern, const char *path, struct route_caps *caps);

/* Add method to allow (size bytes), the value of a 405's Allow header
 * ("GET, PUT"), unless it is listed already or would not fit. */
void route_allow_add(char *allow, size_t size, const char *method);

#endif
