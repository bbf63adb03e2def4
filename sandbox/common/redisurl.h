/*
 * redisurl.h — parse the redis.url config value: "redis://host[:port]"
 * (host may be a bracketed IPv6 literal, port defaults to 6379) or
 * "unix:/absolute/path". Shared by sbx-api and sbx-agent.
 */
#ifndef SBX_REDISURL_H
#define SBX_REDISURL_H

#include "err.h"

struct redisurl {
	int is_unix;          /* 1: path is set; 0: host and port are set */
	char host[256];
	int port;
	char path[108];       /* sizeof(sun_path) */
};

/* Parse s into u; 0, or -1 with e = VALIDATION_FAILED. */
int redisurl_parse(const char *s, struct redisurl *u, struct sbx_err *e);

/* Parse a redis.sentinels list "host:port,host:port" (hosts as in a URL,
 * IPv6 bracketed; the port is required; spaces around items ignored) into
 * out[0..max). *n is the count (0 for an empty list). 0, or -1 with e =
 * VALIDATION_FAILED (a bad item, more than max). */
int redisurl_parse_list(const char *s, struct redisurl *out, int max, int *n, struct sbx_err *e);

#endif
