/*
 * ratelimit.h — per-tenant rate limits of sbx-api, counted in Redis.
 *
 * Every authenticated call (control and data path) passes one GCRA bucket
 * per tenant ("requests": api.requests_per_second with a burst of
 * api.requests_burst), and a create (PUT /v1/sandboxes/{id}) also a second
 * one ("creates": api.creates_per_minute, a minute's worth at once); each
 * overridable per tenant in sbx:tenant:{t}:limits (admin API). The buckets
 * live in Redis, so the limit holds for the whole cluster whichever worker
 * of whichever host answers. The check is the auth_rate script
 * (rscripts.h), which also reads the API key record when the worker's key
 * cache has no answer: a call pays one Redis round trip for its key check
 * and its rate limit together, never more. A tenant the script found
 * without any limit is remembered so in the key cache (api.key_cache):
 * its calls with a cached key make no round trip at all, and a limit set
 * for it applies within that time.
 *
 * A call over a limit is 429 RATE_LIMITED with Retry-After; every call a
 * limit applies to carries RateLimit-Limit / -Remaining / -Reset (whole
 * seconds) of the bucket closest to refusing.
 */
#ifndef SBX_RATELIMIT_H
#define SBX_RATELIMIT_H

#include "conf.h"
#include "err.h"

#include <stdint.h>

/* The decision for one call; set 0: no limit applies (no headers). */
struct ratelimit_state {
	int set;
	int64_t limit;        /* the bucket's burst */
	int64_t remaining;    /* calls left at once */
	int64_t reset_s;      /* seconds until the bucket is full again */
	int64_t retry_s;      /* refused: seconds until one call passes; else 0 */
};

/* What the auth_rate script found. */
struct ratelimit_auth {
	int found;            /* the key exists (tenant and admin filled) */
	char tenant[64];
	int admin;
	int limited;          /* some limit applies to the tenant's calls */
	struct ratelimit_state rate;
};

/* Check the key record name (sbx:apikey:<sha256>) and the limits of its
 * tenant in one script call. tenant: what the worker's key cache knows
 * (then admin is taken as given and the record is not read), or NULL.
 * create: the call is a create. 0 with out filled (out->rate.retry_s > 0:
 * refused), or -1 with e (REDIS_UNAVAILABLE). */
int ratelimit_auth_check(const struct sbx_conf *c, const char *name, const char *tenant,
			 int admin, int create, struct ratelimit_auth *out, struct sbx_err *e);

/* The RateLimit-* headers of s (and Retry-After when refused) as header
 * lines "Name: value\r\n" into out. Pure. 0, or -1 when they do not fit. */
int ratelimit_format_headers(const struct ratelimit_state *s, char *out, size_t outsz);

/* s as one relay value "limit remaining reset retry" (the X-Sbx-Rate
 * header of a data-path refusal, which nginx hands to /_sbx_error) and
 * back. Pure. format: 0 or -1; parse: 0, or -1 when v is malformed. */
int ratelimit_relay_format(const struct ratelimit_state *s, char *out, size_t outsz);
int ratelimit_relay_parse(const char *v, struct ratelimit_state *s);

#endif
