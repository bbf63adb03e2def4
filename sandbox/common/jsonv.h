/*
 * jsonv.h — strict JSON input: parse a request body and check its fields.
 *
 * Bodies are objects; duplicate keys, invalid UTF-8, NUL characters and
 * trailing garbage are rejected by the parser; fields not in the spec are
 * rejected (API.md: unknown fields are a 400, never ignored).
 */
#ifndef SBX_JSONV_H
#define SBX_JSONV_H

#include "err.h"

#include <jansson.h>
#include <stdint.h>

enum jsonv_type {
	JV_STRING = 1 << 0,
	JV_INTEGER = 1 << 1,
	JV_NUMBER = 1 << 2,   /* integer or real */
	JV_BOOL = 1 << 3,
	JV_OBJECT = 1 << 4,
	JV_ARRAY = 1 << 5,
	JV_NULL = 1 << 6,
};

struct jsonv_field {
	const char *name;
	unsigned types;       /* mask of enum jsonv_type */
	int required;
};

/* Parse len bytes as a JSON object. An empty body (len 0) is {}.
 * Returns a new reference (json_decref) or NULL with e = VALIDATION_FAILED. */
json_t *jsonv_parse(const char *data, size_t len, struct sbx_err *e);

/* May a body of this Content-Type (NULL: none sent) be read as JSON? 0 for
 * none, application/json (any parameters, any case), and
 * application/x-www-form-urlencoded — curl -d's default, sent by clients
 * that did not name a type (API.md, "Conventions"); else -1 with e =
 * UNSUPPORTED_MEDIA_TYPE (415). Only asked for a non-empty body. */
int jsonv_media_type(const char *content_type, struct sbx_err *e);

/* Check obj against fields (terminated by a {NULL} entry): every key known,
 * of an allowed type, required ones present. 0 or -1 with e filled. */
int jsonv_check(const json_t *obj, const struct jsonv_field *fields, const char *where,
		struct sbx_err *e);

/* Check that obj is an object of string values (labels, env); null values
 * are allowed when allow_null. Keys and values are bounded by max_key /
 * max_value bytes and max_entries entries. 0 or -1. */
int jsonv_string_map(const json_t *obj, const char *what, size_t max_entries, size_t max_key,
		     size_t max_value, int allow_null, struct sbx_err *e);

/* An integer field in [min,max] (absent: *out unchanged). 0 or -1. */
int jsonv_int(const json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out,
	      struct sbx_err *e);

/* Serialize compactly; new heap string (free()). */
char *jsonv_dump(const json_t *v);

#endif
