/*
 * fuzz_lifecycle — body validation of PUT/PATCH /v1/sandboxes/{id}
 * (fcgi/lifecycle.c lifecycle_parse_spec) and the pure record views
 * (lifecycle_record_json, lifecycle_pending_merge). Input: a request body.
 *
 * Invariants: an accepted body holds only valid labels (every key and
 * value, not just the first), valid env names without NUL, a valid image
 * and network, resources within the config's bounds and at or below the
 * operator's ceilings (sandbox.max_*), sleepAfter within its bounds; a
 * refusal is VALIDATION or LIMIT_EXCEEDED. The client view of a record built from the body's
 * string fields never shows pending env values.
 */
#include "fuzz.h"

#include "conf.h"
#include "err.h"
#include "ids.h"
#include "imgref.h"
#include "jsonv.h"
#include "lifecycle.h"

static struct sbx_conf conf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	conf_defaults(&conf);
	return 0;
}

static void check_bound(const json_t *res, const char *name, const char *key, int64_t ceiling)
{
	json_t *v = json_object_get(res, name);
	int64_t lo, hi;

	FUZZ_ASSERT(json_is_integer(v));
	FUZZ_ASSERT(conf_bounds("sandbox", key, &lo, &hi) == 0);
	FUZZ_ASSERT(json_integer_value(v) >= lo && json_integer_value(v) <= hi);
	FUZZ_ASSERT(json_integer_value(v) <= ceiling);
}

static void check_spec(const struct lc_spec *s)
{
	const char *k;
	json_t *v;

	if (s->has & LC_HAS_LABELS) {
		FUZZ_ASSERT(json_object_size(s->labels) <= LC_LABELS_MAX);
		json_object_foreach(s->labels, k, v) {
			FUZZ_ASSERT(ids_valid_label_key(k));
			FUZZ_ASSERT(json_is_string(v) && ids_valid_label_value(json_string_value(v)));
		}
	}
	if (s->has & LC_HAS_ENV) {
		FUZZ_ASSERT(json_object_size(s->env) <= LC_ENV_MAX);
		json_object_foreach(s->env, k, v) {
			size_t n = strlen(k);
			FUZZ_ASSERT(n > 0 && n <= LC_ENV_KEY_MAX && !(k[0] >= '0' && k[0] <= '9'));
			FUZZ_ASSERT(strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n);
			FUZZ_ASSERT(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v));
			FUZZ_ASSERT(json_string_length(v) <= LC_ENV_VALUE_MAX);
		}
	}
	if (s->has & LC_HAS_IMAGE) {
		/* a local image's name, or a registry reference that parses */
		struct imgref ref;
		struct sbx_err ie = { 0 };

		FUZZ_ASSERT(ids_valid_image(s->image) ||
			    imgref_parse(s->image, "docker.io", 1, &ref, &ie) == 0);
	}
	if (s->has & LC_HAS_NETWORK)
		FUZZ_ASSERT(strcmp(s->network, "none") == 0 || strcmp(s->network, "egress") == 0);
	if (s->has & LC_HAS_RESOURCES) {
		json_t *cpus = json_object_get(s->resources, "cpus");
		int64_t lo, hi;
		double milli;

		check_bound(s->resources, "memoryMiB", "memory_mib", conf.sandbox.max_memory_mib);
		check_bound(s->resources, "pids", "pids", conf.sandbox.max_pids);
		check_bound(s->resources, "diskMiB", "disk_mib", conf.sandbox.max_disk_mib);
		FUZZ_ASSERT(json_is_number(cpus));
		FUZZ_ASSERT(conf_bounds("sandbox", "cpus_milli", &lo, &hi) == 0);
		milli = json_number_value(cpus) * 1000.0;
		FUZZ_ASSERT(milli >= (double)lo - 0.5 && milli <= (double)hi + 0.5);
		FUZZ_ASSERT(milli <= (double)conf.sandbox.max_cpus_milli + 0.5);
	}
	if (s->has & LC_HAS_SLEEP_AFTER)
		FUZZ_ASSERT(s->sleep_after_ms >= LC_SLEEP_MIN_MS && s->sleep_after_ms <= LC_SLEEP_MAX_MS);
}

/* The body's string members as the hash fields of a record; new reference. */
static json_t *as_fields(const json_t *body)
{
	json_t *f = json_object(), *v;
	const char *k;

	json_object_foreach((json_t *)body, k, v)
		if (json_is_string(v))
			json_object_set(f, k, v);
	return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_err e;
	struct lc_spec s;
	json_t *body, *fields, *view, *merged;

	err_clear(&e);
	body = jsonv_parse((const char *)data, size, &e);
	if (!body)
		return 0;

	err_clear(&e);
	if (lifecycle_parse_spec(body, &conf, &s, &e) == 0) {
		check_spec(&s);
		merged = lifecycle_pending_merge(body, json_object_get(body, "pending"), &s);
		FUZZ_ASSERT(json_is_object(merged));
		json_decref(merged);
		lifecycle_spec_release(&s);
	} else {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION || e.code == SBX_E_LIMIT_EXCEEDED);
		FUZZ_ASSERT(s.labels == NULL && s.env == NULL && s.resources == NULL);
	}

	fields = as_fields(body);
	view = lifecycle_record_json(fields);
	FUZZ_ASSERT(view);
	{
		json_t *penv = json_object_get(json_object_get(view, "pending"), "env");
		char *text = jsonv_dump(view);
		size_t i;
		json_t *name;

		FUZZ_ASSERT(text);
		free(text);
		FUZZ_ASSERT(!json_object_get(view, "env"));
		if (penv) {
			FUZZ_ASSERT(json_is_array(penv));
			json_array_foreach(penv, i, name)
				FUZZ_ASSERT(json_is_string(name));
		}
	}
	json_decref(view);
	json_decref(fields);
	json_decref(body);
	return 0;
}
