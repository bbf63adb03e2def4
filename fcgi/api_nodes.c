/* GET /v1/nodes — admin: the node registry with liveness. */
#include "api.h"
#include "rkeys.h"
#include "ids.h"
#include "log.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define NODES_MAX 4096

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A numeric hash field as JSON: integer, real, or null when absent/bad. */
static json_t *number_field(const redisReply *h, const char *name)
{
	const char *v = store_hash_get(h, name);
	int64_t i;
	char *end;
	double d;

	if (!v)
		return json_null();
	if (util_parse_i64(v, INT64_MIN, INT64_MAX, &i) == 0)
		return json_integer(i);
	d = strtod(v, &end);
	if (end != v && *end == '\0')
		return json_real(d);
	return json_null();
}

/* One node object from its hash and alive flag; new reference or NULL. */
static json_t *node_json(const char *name, const redisReply *h, int alive)
{
	const char *addr = store_hash_get(h, "address");
	const char *hb = store_hash_get(h, "lastHeartbeat");
	json_t *o = json_object();
	int64_t ms;

	if (!o)
		return NULL;
	json_object_set_new(o, "name", json_string(name));
	json_object_set_new(o, "address", addr && ids_valid_utf8(addr, strlen(addr)) ? json_string(addr) : json_null());
	{
		const char *st = store_hash_get(h, "state");

		json_object_set_new(o, "state", json_string(!alive ? "down" :
							    st && strcmp(st, "degraded") == 0 ? "degraded" : "up"));
	}
	json_object_set_new(o, "capacity", number_field(h, "capacity"));
	json_object_set_new(o, "load", number_field(h, "load"));
	json_object_set_new(o, "sandboxes", number_field(h, "sandboxes"));
	json_object_set_new(o, "memoryMiB", number_field(h, "memoryMiB"));
	json_object_set_new(o, "cpusMilli", number_field(h, "cpusMilli"));
	if (hb && util_parse_i64(hb, 0, INT64_MAX / 2, &ms) == 0) {
		char iso[32];
		util_iso8601(ms, iso);
		json_object_set_new(o, "lastHeartbeat", json_string(iso));
	} else {
		json_object_set_new(o, "lastHeartbeat", json_null());
	}
	return o;
}

int api_nodes_list(struct http_req *r, struct sbx_err *e)
{
	auto_reply redisReply *members = NULL;
	auto_free const char **names = NULL;
	auto_free redisReply **reps = NULL;
	size_t n = 0;
	json_t *body, *arr;
	int rc;

	members = store_command(e, "SMEMBERS " RKEYS_NODES);
	if (!members)
		return -1;
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: SMEMBERS " RKEYS_NODES " is not an array");
	names = calloc(members->elements + 1, sizeof(*names));
	reps = calloc(2 * members->elements + 1, sizeof(*reps));
	if (!names || !reps)
		return err_set(e, SBX_E_INTERNAL, "out of memory listing nodes");
	for (size_t i = 0; i < members->elements && n < NODES_MAX; i++) {
		const redisReply *m = members->element[i];
		if (m->type != REDIS_REPLY_STRING || !ids_valid_node(m->str)) {
			log_warn(RKEYS_NODES " holds an invalid node name; skipped");
			continue;
		}
		names[n++] = m->str;
	}
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (store_append(e, "HGETALL %s", RK_NODE(names[i], NULL)) < 0 ||
		    store_append(e, "EXISTS %s", RK_NODE(names[i], "alive")) < 0)
			return -1;
	}
	if (n && store_collect(reps, 2 * n, 0, e) < 0)
		return -1;

	body = json_object();
	arr = json_array();
	if (!body || !arr) {
		json_decref(body);
		json_decref(arr);
		store_free_replies(reps, 2 * n);
		return err_set(e, SBX_E_INTERNAL, "out of memory listing nodes");
	}
	json_object_set_new(body, "nodes", arr);
	for (size_t i = 0; i < n; i++) {
		int alive = reps[2 * i + 1]->type == REDIS_REPLY_INTEGER && reps[2 * i + 1]->integer > 0;
		json_t *o = node_json(names[i], reps[2 * i], alive);
		if (o)
			json_array_append_new(arr, o);
	}
	store_free_replies(reps, 2 * n);
	rc = http_respond_json(r, 200, body);
	json_decref(body);
	(void)rc;
	return 0;
}
