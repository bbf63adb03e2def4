/*
 * lifecycle.h — the life of a sandbox as sbx-api runs it: create, update,
 * make sure it runs (wake, re-place), restart, sleep, destroy.
 *
 * The truth is the record sbx:sb:{tenant/id} in Redis (docs/REDIS.md); every
 * change of it is a Lua script (scripts.h) that compares the epoch (fencing
 * token) it read, so concurrent workers never undo each other. The agents
 * are told with libcurl (agentc.h) and refuse a lower epoch than they saw.
 * The tenant indexes (quota and listing set, label sets, node sets) change
 * in the same script as the record (create, start, destroy), so no
 * interleaving of calls separates them; the reconciler (reconcile.h)
 * repairs what something else broke. Listings re-check the record, so a
 * stale index entry never shows a wrong sandbox.
 */
#ifndef SBX_LIFECYCLE_H
#define SBX_LIFECYCLE_H

#include "conf.h"
#include "err.h"
#include "imgref.h"
#include "ids.h"
#include "spec.h"

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdint.h>

/* The rules of a spec are shared with the agent (sandbox/common/spec.h). */
#define LC_LABELS_MAX SPEC_LABELS_MAX
#define LC_ENV_MAX SPEC_ENV_MAX
#define LC_ENV_KEY_MAX SPEC_ENV_KEY_MAX
#define LC_ENV_VALUE_MAX SPEC_ENV_VALUE_MAX
#define LC_SLEEP_MIN_MS SPEC_SLEEP_MIN_MS
#define LC_SLEEP_MAX_MS SPEC_SLEEP_MAX_MS

enum lc_has {
	LC_HAS_LABELS = 1 << 0,
	LC_HAS_ENV = 1 << 1,
	LC_HAS_RESOURCES = 1 << 2,
	LC_HAS_IMAGE = 1 << 3,
	LC_HAS_NETWORK = 1 << 4,
	LC_HAS_SLEEP_AFTER = 1 << 5,
	LC_HAS_KEEP_ALIVE = 1 << 6,
	LC_HAS_FROM_SNAPSHOT = 1 << 7,   /* create only: PATCH refuses it */
	LC_HAS_PERSIST = 1 << 8,         /* likewise */
	LC_HAS_CONTAINER = LC_HAS_LABELS | LC_HAS_ENV | LC_HAS_RESOURCES | LC_HAS_IMAGE | LC_HAS_NETWORK,
};

/* A validated PUT/PATCH body. The json members are new references
 * (lifecycle_spec_release), in canonical form. */
struct lc_spec {
	unsigned has;             /* enum lc_has */
	json_t *labels;           /* {str:str} */
	json_t *env;              /* {str:str} */
	json_t *resources;        /* {memoryMiB, cpus, pids, diskMiB}, omitted members from config */
	char image[IMGREF_MAX];   /* a local name or a registry reference (imgref.h) */
	char network[8];          /* "none" | "egress" */
	int64_t sleep_after_ms;
	int keep_alive;
	char from_snapshot[24];   /* a snapshot id (snapstore.h) */
	json_t *persist;          /* {paths: [abs path…]} */
};

/* Who serves a sandbox right now (the answer of /_sbx_route). */
struct lc_owner {
	char node[64];
	char address[128];
	int64_t epoch;
	int64_t generation;
};

/* Validate a body into s (fields absent from the body are not in s->has).
 * 0, or -1 with e = VALIDATION. */
int lifecycle_parse_spec(const json_t *body, const struct sbx_conf *c, struct lc_spec *s,
			 struct sbx_err *e);
void lifecycle_spec_release(struct lc_spec *s);

/* The resources object of the sizes given; new reference. */
json_t *lifecycle_resources_json(int64_t memory_mib, int64_t cpus_milli, int64_t pids,
				 int64_t disk_mib);

/* pending after a change s: every container field of s that differs from
 * applied ({labels, resources, env, image, network}) is set, one equal to
 * applied is dropped. New reference. */
json_t *lifecycle_pending_merge(const json_t *applied, const json_t *pending,
				const struct lc_spec *s);

/* The client's view of a record given as an object of its hash fields
 * (strings); env is never shown, pending env only by its names. New
 * reference, NULL when out of memory. */
json_t *lifecycle_record_json(const json_t *fields);

/* The client's view of a record's pending object, in place: its env (which
 * may hold secrets) becomes the array of the variables' names. */
void lifecycle_pending_view(json_t *pending);

/* The fields of an HGETALL reply of a record as an object of strings; NULL
 * when the reply holds no (complete) record. New reference. */
json_t *lifecycle_hash_json(const redisReply *r);

/* Read the record of tenant/id: 0 with *rec a new reference to the object
 * of its hash fields, or NULL when there is none; -1 with e. */
int lifecycle_load(const char *tenant, const char *id, json_t **rec, struct sbx_err *e);

/* Get-or-create and make sure it runs (PUT). *created 1 when this call made
 * it; *view the record to answer with (new reference): the record now, or
 * the record as this call saw it run when a DELETE won meanwhile — never
 * nothing. -1 with e: QUOTA_EXCEEDED, NO_CAPACITY, NODE_UNAVAILABLE, …
 * (never SANDBOX_NOT_FOUND). */
int lifecycle_put(const struct sbx_conf *c, const char *tenant, const char *id,
		  const struct lc_spec *s, int *created, json_t **view, struct sbx_err *e);

/* Apply s to an existing sandbox (PATCH): settings at once, container fields
 * to pending. Never starts anything. -1 with e (SANDBOX_NOT_FOUND, …). */
int lifecycle_update(const char *tenant, const char *id, const struct lc_spec *s,
		     struct sbx_err *e);

/* Make sure the sandbox runs on a live node (wake, re-place) and say where.
 * -1 with e: SANDBOX_NOT_FOUND, NO_CAPACITY, NODE_UNAVAILABLE, … */
int lifecycle_ensure_running(const char *tenant, const char *id, struct lc_owner *o,
			     struct sbx_err *e);

/* A new container: new generation, pending applied. -1 with e. */
int lifecycle_restart(const char *tenant, const char *id, struct sbx_err *e);

/* Stop the container now: state stopping while its node stops it (a data
 * call routed meanwhile waits for that, then wakes it), then sleeping.
 * -1 with e. */
int lifecycle_sleep(const char *tenant, const char *id, struct sbx_err *e);

/* Destroy (idempotent: 0 also when there is nothing). -1 with e. */
int lifecycle_destroy(const char *tenant, const char *id, struct sbx_err *e);

/* Bring the index entries of tenant/id in step with its record, in one
 * script: a record gets each entry it lacks (tenant's set, label sets, node
 * set), a missing record loses its member of the tenant's set. *changed:
 * entries added, or -1 when a member without a record was removed. 0 or -1
 * with e. */
int lifecycle_repair_index(const char *tenant, const char *id, long long *changed,
			   struct sbx_err *e);

#endif
