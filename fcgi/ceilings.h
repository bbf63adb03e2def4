/*
 * ceilings.h — the operator's resource ceilings, checked by sbx-api.
 *
 * Three layers, each refused with a stable code:
 *  - one sandbox: its memory, cpus, pids and disk stay at or below the
 *    sandbox.max_* keys (400 LIMIT_EXCEEDED, a message naming the field and
 *    the ceiling); the sbx.conf bounds are only what the file accepts.
 *  - one tenant: the count of its sandboxes (api.quota_sandboxes) and the
 *    sums of their memory and cpus (api.tenant_memory_mib,
 *    api.tenant_cpus_milli), each overridable per tenant in
 *    sbx:tenant:{t}:limits (admin API). The sums are kept in
 *    sbx:tenant:{t}:usage (id -> "memoryMiB cpusMilli") and checked and
 *    written by one Lua script, so concurrent creates never overshoot
 *    (429 QUOTA_EXCEEDED). Entries of ids no longer in the tenant's
 *    sandboxes set are dropped by that script: a destroy needs no hook.
 *  - one node: placement.h (memory and cpus committed by running sandboxes).
 *
 * Everything that touches Redis needs ceilings_init() first (the worker's
 * configuration, borrowed for the life of the process).
 */
#ifndef SBX_CEILINGS_H
#define SBX_CEILINGS_H

#include "conf.h"
#include "err.h"
#include "placement.h"

#include <jansson.h>
#include <stdint.h>

/* The limits of one tenant (config defaults or its overrides). */
struct ceilings_tenant {
	int64_t sandboxes;
	int64_t memory_mib;
	int64_t cpus_milli;
	/* rate limits (ratelimit.h); 0 = no limit */
	int64_t requests_per_second;
	int64_t requests_burst;
	int64_t creates_per_minute;
};

/* What a tenant holds: sandboxes in its set, and the sums of their usage. */
struct ceilings_usage {
	int64_t sandboxes;
	int64_t memory_mib;
	int64_t cpus_milli;
};

enum ceilings_field {
	CEILINGS_SANDBOXES = 1 << 0,
	CEILINGS_MEMORY = 1 << 1,
	CEILINGS_CPUS = 1 << 2,
	CEILINGS_RPS = 1 << 3,
	CEILINGS_BURST = 1 << 4,
	CEILINGS_CREATES = 1 << 5,
};

/* Remember the configuration (borrowed) for the Redis-side calls. */
void ceilings_init(const struct sbx_conf *c);

/* The configuration is consistent: every [sandbox] default at or below its
 * ceiling. 0 or -1 with e = VALIDATION (naming both keys). */
int ceilings_conf_check(const struct sbx_conf *c, struct sbx_err *e);

/* The sizes of one sandbox against the sandbox.max_* ceilings. 0, or -1
 * with e = LIMIT_EXCEEDED naming the first field above its ceiling. */
int ceilings_check_sandbox(const struct sbx_conf *c, int64_t memory_mib, int64_t cpus_milli,
			   int64_t pids, int64_t disk_mib, struct sbx_err *e);

/* memoryMiB and cpus of a resources object ({memoryMiB, cpus, ...}); a
 * missing or malformed member is 0. */
void ceilings_resources_need(const json_t *resources, struct placement_need *need);

/* What the next container of a record (an object of its hash fields, as
 * lifecycle_load gives) needs: its pending resources when there are some
 * (a start applies them), else its resources. */
void ceilings_record_need(const json_t *rec, struct placement_need *need);

/* Validate an admin PUT body {sandboxes?, memoryMiB?, cpus?,
 * requestsPerSecond?, requestsBurst?, createsPerMinute?} (null or absent:
 * no override; each held to the bounds of its config key). 0 with out and *set (enum ceilings_field) filled, or
 * -1 with e = VALIDATION. */
int ceilings_tenant_parse(const json_t *body, struct ceilings_tenant *out, unsigned *set,
			  struct sbx_err *e);

/* The rate limit of t named by bit (CEILINGS_RPS, _BURST, _CREATES), and
 * its JSON member ("requestsPerSecond", …); 0 / NULL for another bit. */
int64_t ceilings_rate_value(const struct ceilings_tenant *t, unsigned bit);
const char *ceilings_rate_member(unsigned bit);

/* The limits of tenant: its overrides over the config defaults; *overridden
 * (may be NULL) says which came from an override. 0 or -1 with e. */
int ceilings_tenant_load(const char *tenant, struct ceilings_tenant *out, unsigned *overridden,
			 struct sbx_err *e);

/* Replace the overrides of tenant with the fields of set (none: all
 * removed). 0 or -1 with e. */
int ceilings_tenant_store(const char *tenant, const struct ceilings_tenant *v, unsigned set,
			  struct sbx_err *e);

/* What tenant holds now. 0 or -1 with e. */
int ceilings_tenant_usage(const char *tenant, struct ceilings_usage *u, struct sbx_err *e);

/* Record that a new sandbox id (already in the tenant's sandboxes set)
 * holds need, when the tenant's sums with it stay within lim; atomic.
 * 0 recorded (or id is not in the set: nothing to hold), -1 with e =
 * QUOTA_EXCEEDED naming the total and the limit, or REDIS_UNAVAILABLE. */
int ceilings_tenant_reserve(const struct ceilings_tenant *lim, const char *tenant, const char *id,
			    const struct placement_need *need, struct sbx_err *e);

/* A change of the resources of an existing sandbox (rec: its hash fields)
 * to new_resources: it holds the larger of what runs and what is asked
 * until its next change; refused like ceilings_tenant_reserve. 0 or -1. */
int ceilings_tenant_resize(const char *tenant, const char *id, const json_t *rec,
			   const json_t *new_resources, struct sbx_err *e);

#endif
