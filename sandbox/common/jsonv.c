#include "jsonv.h"
#include "util.h"

#include <string.h>
#include <strings.h>

json_t *jsonv_parse(const char *data, size_t len, struct sbx_err *e)
{
	json_error_t jerr;
	json_t *v;

	if (len == 0)
		return json_object();
	v = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!v) {
		err_set(e, SBX_E_VALIDATION, "malformed JSON at byte %d: %s", jerr.position, jerr.text);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		err_set(e, SBX_E_VALIDATION, "the body must be a JSON object");
		return NULL;
	}
	return v;
}

int jsonv_media_type(const char *content_type, struct sbx_err *e)
{
	static const char *const accepted[] = { "application/json",
						"application/x-www-form-urlencoded" };
	const char *p = content_type;
	size_t n;

	if (!p)
		return 0;
	p += strspn(p, " \t");
	n = strcspn(p, "; \t");
	if (n == 0 && !p[n])
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(accepted); i++)
		if (strlen(accepted[i]) == n && strncasecmp(p, accepted[i], n) == 0)
			return 0;
	return err_set(e, SBX_E_UNSUPPORTED_MEDIA_TYPE,
		       "the body must be application/json, not '%.*s'", (int)(n < 64 ? n : 64), p);
}

static unsigned type_bit(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_STRING: return JV_STRING;
	case JSON_INTEGER: return JV_INTEGER | JV_NUMBER;
	case JSON_REAL: return JV_NUMBER;
	case JSON_TRUE:
	case JSON_FALSE: return JV_BOOL;
	case JSON_OBJECT: return JV_OBJECT;
	case JSON_ARRAY: return JV_ARRAY;
	case JSON_NULL: return JV_NULL;
	}
	return 0;
}

static const char *type_words(unsigned types)
{
	if (types & JV_STRING)
		return (types & JV_ARRAY) ? "a string or an array" : "a string";
	if (types & JV_INTEGER)
		return "an integer";
	if (types & JV_NUMBER)
		return "a number";
	if (types & JV_BOOL)
		return "a boolean";
	if (types & JV_OBJECT)
		return "an object";
	if (types & JV_ARRAY)
		return "an array";
	return "null";
}

int jsonv_check(const json_t *obj, const struct jsonv_field *fields, const char *where,
		struct sbx_err *e)
{
	const char *key;
	json_t *val;

	if (!json_is_object(obj))
		return err_set(e, SBX_E_VALIDATION, "%s must be an object", where);
	json_object_foreach((json_t *)obj, key, val) {
		const struct jsonv_field *f = fields;
		while (f->name && strcmp(f->name, key) != 0)
			f++;
		if (!f->name)
			return err_set(e, SBX_E_VALIDATION, "unknown field '%.64s' in %s", key, where);
		if (!(type_bit(val) & f->types))
			return err_set(e, SBX_E_VALIDATION, "field '%s' in %s must be %s", key, where,
				       type_words(f->types));
	}
	for (const struct jsonv_field *f = fields; f->name; f++)
		if (f->required && !json_object_get(obj, f->name))
			return err_set(e, SBX_E_VALIDATION, "field '%s' is required in %s", f->name,
				       where);
	return 0;
}

int jsonv_string_map(const json_t *obj, const char *what, size_t max_entries, size_t max_key,
		     size_t max_value, int allow_null, struct sbx_err *e)
{
	const char *key;
	json_t *val;

	if (!json_is_object(obj))
		return err_set(e, SBX_E_VALIDATION, "'%s' must be an object of strings", what);
	if (json_object_size(obj) > max_entries)
		return err_set(e, SBX_E_VALIDATION, "'%s' has more than %zu entries", what, max_entries);
	json_object_foreach((json_t *)obj, key, val) {
		if (strlen(key) == 0 || strlen(key) > max_key)
			return err_set(e, SBX_E_VALIDATION, "a key of '%s' is empty or longer than %zu bytes",
				       what, max_key);
		if (json_is_null(val) && allow_null)
			continue;
		if (!json_is_string(val))
			return err_set(e, SBX_E_VALIDATION, "'%s.%.64s' must be a string", what, key);
		if (json_string_length(val) > max_value)
			return err_set(e, SBX_E_VALIDATION, "'%s.%.64s' is longer than %zu bytes", what,
				       key, max_value);
	}
	return 0;
}

int jsonv_int(const json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out,
	      struct sbx_err *e)
{
	json_t *v = json_object_get(obj, name);
	json_int_t n;

	if (!v)
		return 0;
	if (!json_is_integer(v))
		return err_set(e, SBX_E_VALIDATION, "field '%s' must be an integer", name);
	n = json_integer_value(v);
	if (n < min || n > max)
		return err_set(e, SBX_E_VALIDATION, "field '%s' must be between %lld and %lld", name,
			       (long long)min, (long long)max);
	*out = n;
	return 0;
}

char *jsonv_dump(const json_t *v)
{
	return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}
