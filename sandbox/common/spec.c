/* spec.c — see spec.h. */
#include "spec.h"
#include "imgref.h"

#include <math.h>
#include <string.h>

static const struct jsonv_field resource_fields[] = {
	{ "memoryMiB", JV_INTEGER, 0 },
	{ "cpus", JV_NUMBER, 0 },
	{ "pids", JV_INTEGER, 0 },
	{ "diskMiB", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

int spec_labels(const json_t *labels, struct sbx_err *e)
{
	const char *k;
	json_t *v;

	if (jsonv_string_map(labels, "labels", SPEC_LABELS_MAX, SPEC_LABEL_KEY_MAX,
			     SPEC_LABEL_VALUE_MAX, 0, e) < 0)
		return -1;
	json_object_foreach((json_t *)labels, k, v) {
		if (!ids_valid_label_key(k))
			return err_set(e, SBX_E_VALIDATION,
				       "label key '%.64s' must be 1-63 printable ASCII without '{', '}', ':', ',' or space",
				       k);
		if (!ids_valid_label_value(json_string_value(v)))
			return err_set(e, SBX_E_VALIDATION,
				       "label '%.64s' must have a value of 0-255 printable ASCII without '{', '}' or ','",
				       k);
	}
	return 0;
}

int spec_env(const json_t *env, int allow_null, struct sbx_err *e)
{
	const char *k;
	json_t *v;

	if (jsonv_string_map(env, "env", SPEC_ENV_MAX, SPEC_ENV_KEY_MAX, SPEC_ENV_VALUE_MAX,
			     allow_null, e) < 0)
		return -1;
	json_object_foreach((json_t *)env, k, v) {
		if (!ids_valid_env_name(k))
			return err_set(e, SBX_E_VALIDATION,
				       "env name '%.64s' must match [A-Za-z_][A-Za-z0-9_]* (at most %d bytes)",
				       k, SPEC_ENV_KEY_MAX);
		if (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v))
			return err_set(e, SBX_E_VALIDATION, "env '%.64s' must not contain NUL", k);
	}
	return 0;
}

int spec_image(const json_t *image, struct sbx_err *e)
{
	struct imgref r;

	const char *s = json_string_value(image);

	/* a bare name is a local image's (agent_image_is_remote) */
	if (s && !strpbrk(s, ":/@")) {
		if (!ids_valid_image(s))
			return err_set(e, SBX_E_VALIDATION,
				       "'image' must be a local image name [a-z0-9][a-z0-9._-]{0,62} or a "
				       "registry reference [registry/]repo[:tag][@digest]");
		return 0;
	}
	return imgref_parse(s, "docker.io", 1, &r, e);
}

int spec_network(const json_t *network, int *egress, struct sbx_err *e)
{
	const char *n = json_string_value(network);
	int eg = n && strcmp(n, "egress") == 0;

	if (!n || (!eg && strcmp(n, "none") != 0))
		return err_set(e, SBX_E_VALIDATION, "'network' must be \"none\" or \"egress\"");
	if (egress)
		*egress = eg;
	return 0;
}

int spec_milli(const json_t *obj, const char *name, const char *where, int64_t lo, int64_t hi,
	       int64_t *out, struct sbx_err *e)
{
	const json_t *v = json_object_get(obj, name);
	double d;

	if (!v)
		return 0;
	d = json_number_value(v);
	if (!json_is_number(v) || !(d > 0) || !isfinite(d) || d * 1000.0 + 0.5 < (double)lo ||
	    d * 1000.0 + 0.5 >= (double)hi + 1)
		return err_set(e, SBX_E_VALIDATION, "field '%s' in %s must be between %g and %g",
			       name, where, (double)lo / 1000.0, (double)hi / 1000.0);
	*out = (int64_t)(d * 1000.0 + 0.5);
	return 0;
}

/* The bounds of sandbox.<key> in the config table (the limits of sbx.conf). */
static void bounds(const char *key, int64_t *min, int64_t *max)
{
	if (conf_bounds("sandbox", key, min, max) < 0) {
		*min = 1;
		*max = INT64_MAX;
	}
}

void spec_resources_default(const struct sbx_conf *c, struct spec_resources *out)
{
	out->memory_mib = c->sandbox.memory_mib;
	out->cpus_milli = c->sandbox.cpus_milli;
	out->pids = c->sandbox.pids;
	out->disk_mib = c->sandbox.disk_mib;
}

int spec_resources(const json_t *res, struct spec_resources *out, struct sbx_err *e)
{
	int64_t lo, hi;

	if (jsonv_check(res, resource_fields, "'resources'", e) < 0)
		return -1;
	bounds("memory_mib", &lo, &hi);
	if (jsonv_int(res, "memoryMiB", lo, hi, &out->memory_mib, e) < 0)
		return -1;
	bounds("pids", &lo, &hi);
	if (jsonv_int(res, "pids", lo, hi, &out->pids, e) < 0)
		return -1;
	bounds("disk_mib", &lo, &hi);
	if (jsonv_int(res, "diskMiB", lo, hi, &out->disk_mib, e) < 0)
		return -1;
	bounds("cpus_milli", &lo, &hi);
	return spec_milli(res, "cpus", "'resources'", lo, hi, &out->cpus_milli, e);
}

int spec_sleep_after(const json_t *v, int64_t *ms, struct sbx_err *e)
{
	int64_t m;

	if (json_is_integer(v))
		m = json_integer_value(v);
	else if (!json_is_string(v) || conf_parse_duration(json_string_value(v), &m) < 0)
		return err_set(e, SBX_E_VALIDATION,
			       "'sleepAfter' must be milliseconds or a duration like \"30s\", \"10m\", \"1h\"");
	if (m < SPEC_SLEEP_MIN_MS || m > SPEC_SLEEP_MAX_MS)
		return err_set(e, SBX_E_VALIDATION, "'sleepAfter' must be between 1s and 30 days");
	*ms = m;
	return 0;
}
