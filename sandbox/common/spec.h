/*
 * spec.h — the rules of a sandbox's spec (labels, env, image, network,
 * resources, sleepAfter), one home for both tiers: sbx-api checks a client's
 * body with them (fcgi/lifecycle.c, then the operator ceilings of
 * fcgi/ceilings.c on top), the agent re-checks the body the API sends it
 * (sandbox/agent/agent_sandboxes.c) with the very same ranges.
 *
 * Pure functions over jansson and the config table (conf.c): no I/O. Each
 * takes a value whose JSON type the caller's jsonv field table has already
 * checked, returns 0, or -1 with e = VALIDATION and a message naming the
 * field.
 */
#ifndef SBX_SPEC_H
#define SBX_SPEC_H

#include "conf.h"
#include "err.h"
#include "ids.h"
#include "jsonv.h"

#include <jansson.h>
#include <stdint.h>

#define SPEC_LABELS_MAX 64
#define SPEC_LABEL_KEY_MAX 63
#define SPEC_LABEL_VALUE_MAX 255
#define SPEC_ENV_MAX 256
#define SPEC_ENV_KEY_MAX IDS_ENV_NAME_MAX
#define SPEC_ENV_VALUE_MAX 32768
/* The bounds of sandbox.sleep_after in the config table (a test compares). */
#define SPEC_SLEEP_MIN_MS 1000
#define SPEC_SLEEP_MAX_MS 2592000000LL   /* 30 days */

/* The sizes of a sandbox; cpus in thousandths of a CPU. */
struct spec_resources {
	int64_t memory_mib;
	int64_t cpus_milli;
	int64_t pids;
	int64_t disk_mib;
};

/* labels: at most SPEC_LABELS_MAX string members, keys ids_valid_label_key,
 * values ids_valid_label_value. */
int spec_labels(const json_t *labels, struct sbx_err *e);

/* env: at most SPEC_ENV_MAX members named ids_valid_env_name, string values
 * without NUL (null values too when allow_null: an exec's "unset"). */
int spec_env(const json_t *env, int allow_null, struct sbx_err *e);

/* image: a local image name (ids_valid_image) or a registry reference
 * (imgref.h): the one image-name rule of both tiers. */
int spec_image(const json_t *image, struct sbx_err *e);

/* network: "none" or "egress"; *egress set to 1 for "egress" (may be NULL). */
int spec_network(const json_t *network, int *egress, struct sbx_err *e);

/* resources {memoryMiB, cpus, pids, diskMiB}: no other member, each within
 * the bounds of its sandbox.* key in the config table. Members absent keep
 * out's values (the caller fills the defaults). */
int spec_resources(const json_t *res, struct spec_resources *out, struct sbx_err *e);

/* out from the defaults of c (sandbox.memory_mib, …). */
void spec_resources_default(const struct sbx_conf *c, struct spec_resources *out);

/* sleepAfter: integer milliseconds or a duration string ("30s", "10m"),
 * within SPEC_SLEEP_MIN_MS..SPEC_SLEEP_MAX_MS, into *ms. */
int spec_sleep_after(const json_t *v, int64_t *ms, struct sbx_err *e);

/* A number of CPUs (field name of obj, in where for messages) as
 * thousandths within lo..hi thousandths (absent: *out unchanged). */
int spec_milli(const json_t *obj, const char *name, const char *where, int64_t lo, int64_t hi,
	       int64_t *out, struct sbx_err *e);

#endif
