/*
 * fuzz_jsonv — the strict JSON input of both tiers (sandbox/common/jsonv.c).
 * Input: a request body.
 *
 * Invariants: a body parses only to an object; what parses dumps compactly
 * and parses back equal; a refusal is VALIDATION (400); jsonv_check,
 * jsonv_string_map and jsonv_int agree with what they promise.
 */
#include "fuzz.h"

#include "err.h"
#include "jsonv.h"

static const struct jsonv_field fields[] = {
	{ "name", JV_STRING, 1 },
	{ "count", JV_INTEGER, 0 },
	{ "ratio", JV_NUMBER, 0 },
	{ "on", JV_BOOL, 0 },
	{ "labels", JV_OBJECT | JV_NULL, 0 },
	{ "argv", JV_ARRAY | JV_STRING, 0 },
	{ NULL, 0, 0 },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_err e;
	json_t *v, *back, *labels;
	char *text;
	int64_t n = 12345;

	err_clear(&e);
	v = jsonv_parse((const char *)data, size, &e);
	if (!v) {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
		FUZZ_ASSERT(size > 0);
		return 0;
	}
	FUZZ_ASSERT(json_is_object(v));
	FUZZ_ASSERT(size > 0 || json_object_size(v) == 0);

	text = jsonv_dump(v);
	FUZZ_ASSERT(text);
	err_clear(&e);
	back = jsonv_parse(text, strlen(text), &e);
	FUZZ_ASSERT(back && json_equal(v, back));
	json_decref(back);
	free(text);

	err_clear(&e);
	if (jsonv_check(v, fields, "the body", &e) == 0) {
		const char *key;
		json_t *val;
		FUZZ_ASSERT(json_is_string(json_object_get(v, "name")));
		json_object_foreach(v, key, val) {
			const struct jsonv_field *f = fields;
			while (f->name && strcmp(f->name, key) != 0)
				f++;
			FUZZ_ASSERT(f->name);
		}
	} else {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
	}

	err_clear(&e);
	if (jsonv_int(v, "count", -5, 1000, &n, &e) == 0) {
		json_t *c = json_object_get(v, "count");
		FUZZ_ASSERT(!c || (json_is_integer(c) && n == json_integer_value(c) && n >= -5 && n <= 1000));
		FUZZ_ASSERT(c || n == 12345);
	}

	labels = json_object_get(v, "labels");
	err_clear(&e);
	if (labels && jsonv_string_map(labels, "labels", 8, 16, 32, 1, &e) == 0) {
		const char *key;
		json_t *val;
		FUZZ_ASSERT(json_object_size(labels) <= 8);
		json_object_foreach(labels, key, val) {
			FUZZ_ASSERT(*key && strlen(key) <= 16);
			FUZZ_ASSERT(json_is_null(val) || (json_is_string(val) && json_string_length(val) <= 32));
		}
	}
	json_decref(v);
	return 0;
}
