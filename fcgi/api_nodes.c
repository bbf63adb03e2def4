/*
 * /v1/nodes — admin: the node registry with liveness (GET /v1/nodes), a
 * node's sandboxes (GET /v1/nodes/{node}/sandboxes) and drain
 * (POST /v1/nodes/{node}/drain: placement skips a node while its
 * sbx:node:{node}:drain key exists; with migrate its sandboxes are put
 * to sleep, so their next call wakes them on another node).
 */
#include "api.h"
#include "jsonv.h"
#include "lifecycle.h"
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

/* One node object from its hash, alive and drain flags; new reference or NULL. */
static json_t *node_json(const char *name, const redisReply *h, int alive, int drained)
{
	const char *addr = store_hash_get(h, "address");
	const char *version = store_hash_get(h, "version");
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
	json_object_set_new(o, "version", version && ids_valid_utf8(version, strlen(version)) ?
				  json_string(version) : json_null());
	json_object_set_new(o, "drained", json_boolean(drained));
	if (hb && util_parse_i64(hb, 0, INT64_MAX / 2, &ms) == 0) {
		char iso[32];
		util_iso8601(ms, iso);
		json_object_set_new(o, "lastHeartbeat", json_string(iso));
	} else {
		json_object_set_new(o, "lastHeartbeat", json_null());
	}
	return o;
}

/* The replies that describe one node, queued by append_node(). */
#define NODE_REPLIES 3

static int append_node(const char *name, struct sbx_err *e)
{
	if (store_append(e, "HGETALL %s", RK_NODE(name, NULL)) < 0 ||
	    store_append(e, "EXISTS %s", RK_NODE(name, "alive")) < 0 ||
	    store_append(e, "EXISTS %s", RK_NODE(name, "drain")) < 0)
		return -1;
	return 0;
}

static int flag_of(const redisReply *r)
{
	return r->type == REDIS_REPLY_INTEGER && r->integer > 0;
}

/* The node object of append_node()'s replies; new reference or NULL. */
static json_t *node_of(const char *name, redisReply **rep)
{
	return node_json(name, rep[0], flag_of(rep[1]), flag_of(rep[2]));
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
	reps = calloc(NODE_REPLIES * members->elements + 1, sizeof(*reps));
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
		if (append_node(names[i], e) < 0)
			return -1;
	}
	if (n && store_collect(reps, NODE_REPLIES * n, 0, e) < 0)
		return -1;

	body = json_object();
	arr = json_array();
	if (!body || !arr) {
		json_decref(body);
		json_decref(arr);
		store_free_replies(reps, NODE_REPLIES * n);
		return err_set(e, SBX_E_INTERNAL, "out of memory listing nodes");
	}
	json_object_set_new(body, "nodes", arr);
	for (size_t i = 0; i < n; i++) {
		json_t *o = node_of(names[i], reps + NODE_REPLIES * i);
		if (o)
			json_array_append_new(arr, o);
	}
	store_free_replies(reps, NODE_REPLIES * n);
	rc = http_respond_json(r, 200, body);
	json_decref(body);
	(void)rc;
	return 0;
}

/* The node of the path: valid and registered (its hash exists). Borrowed,
 * or NULL with e. */
static const char *path_node(const struct http_req *r, struct sbx_err *e)
{
	const char *node = router_cap(&r->match, "node");
	auto_reply redisReply *rep = NULL;

	if (!node || !ids_valid_node(node)) {
		err_set(e, SBX_E_VALIDATION, "node must be 1-63 of [a-z0-9-], not starting or ending with '-'");
		return NULL;
	}
	rep = store_command(e, "EXISTS %s", RK_NODE(node, NULL));
	if (!rep)
		return NULL;
	if (!flag_of(rep)) {
		err_set(e, SBX_E_ROUTE_NOT_FOUND, "node '%s' is not registered", node);
		return NULL;
	}
	return node;
}

static const struct jsonv_field drain_fields[] = {
	{ "drain", JV_BOOL, 0 },
	{ "migrate", JV_BOOL, 0 },
	{ "force", JV_BOOL, 0 },
	{ "cursor", JV_STRING, 0 },
	{ "limit", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

#define MIGRATE_LIMIT_DEFAULT 20
#define MIGRATE_LIMIT_MAX 100
#define MIGRATE_MEMBERS_MAX 100000

/* Why the sandbox of record rec (of node) is not moved: NULL to move it,
 * "" to leave it out of the answer (asleep already, or placed elsewhere). */
static const char *migrate_refusal(const char *node, const json_t *rec, int force)
{
	const char *on = json_string_value(json_object_get(rec, "node"));
	const char *state = json_string_value(json_object_get(rec, "state"));
	const char *persist = json_string_value(json_object_get(rec, "persist"));

	if (!on || strcmp(on, node) != 0 || !state || strcmp(state, "sleeping") == 0)
		return "";
	if (!(persist && *persist) && !force)
		return "no persist: a sleep would lose its files (force: true puts it to sleep anyway)";
	return NULL;
}

/* Move one sandbox (ref "tenant/id") of node away: put it to sleep when it
 * persists (its save goes with the stop) or force says so. Appends its id
 * to migrated or {id, reason} to skipped; a sandbox already asleep, gone,
 * or placed elsewhere is neither. */
static void migrate_one(const char *node, const char *ref, int force, json_t *migrated,
			json_t *skipped)
{
	char tenant[80], reason[320] = "";
	const char *slash = strchr(ref, '/'), *id, *why;
	struct sbx_err e = { 0 };
	json_t *rec = NULL;

	if (!slash || (size_t)(slash - ref) >= sizeof(tenant))
		return;
	memcpy(tenant, ref, (size_t)(slash - ref));
	tenant[slash - ref] = '\0';
	id = slash + 1;
	if (!ids_valid_tenant(tenant) || !ids_valid_sandbox(id))
		return;
	if (lifecycle_load(tenant, id, &rec, &e) < 0) {
		util_xsnprintf(reason, sizeof(reason), "%s", e.msg);
	} else if (rec) {
		why = migrate_refusal(node, rec, force);
		if (why)
			util_xsnprintf(reason, sizeof(reason), "%s", why);
		else if (lifecycle_sleep(tenant, id, &e) == 0)
			json_array_append_new(migrated, json_string(id));
		else if (e.code != SBX_E_SANDBOX_NOT_FOUND)
			util_xsnprintf(reason, sizeof(reason), "sleep failed: %s", e.msg);
	}
	json_decref(rec);
	if (reason[0])
		json_array_append_new(skipped, json_pack("{s:s,s:s}", "id", id, "reason", reason));
}

/* One page of migrate: the node's sandbox set (sbx:node:{node}:sandboxes)
 * in byte order, the first limit members after cursor moved away by
 * migrate_one. Fills o's migrated, skipped and, when members remain,
 * cursor (the last member handled). 0 or -1 with e. */
static int migrate_page(const char *node, const char *cursor, int64_t limit, int force, json_t *o,
			struct sbx_err *e)
{
	auto_reply redisReply *members = NULL;
	auto_free const char **refs = NULL;
	json_t *migrated = json_array(), *skipped = json_array();
	size_t n = 0, first = 0, done = 0;

	if (!migrated || !skipped) {
		json_decref(migrated);
		json_decref(skipped);
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	}
	json_object_set_new(o, "migrated", migrated);
	json_object_set_new(o, "skipped", skipped);
	members = store_command(e, "SMEMBERS %s", RK_NODE(node, "sandboxes"));
	if (!members)
		return -1;
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: SMEMBERS of a node is not an array");
	refs = calloc(members->elements + 1, sizeof(*refs));
	if (!refs)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	for (size_t i = 0; i < members->elements && n < MIGRATE_MEMBERS_MAX; i++) {
		const redisReply *m = members->element[i];

		if (m->type == REDIS_REPLY_STRING && !strpbrk(m->str, "{}"))
			refs[n++] = m->str;
	}
	qsort(refs, n, sizeof(*refs), cmp_str);
	while (cursor && first < n && strcmp(refs[first], cursor) <= 0)
		first++;
	for (size_t i = first; i < n && done < (size_t)limit; i++, done++)
		migrate_one(node, refs[i], force, migrated, skipped);
	if (first + done < n)
		json_object_set_new(o, "cursor", json_string(refs[first + done - 1]));
	return 0;
}

/* Set or clear the node's drain key and log it as an event, in one
 * MULTI; answer the node object as it is then. With migrate (drain only),
 * then move a page of its sandboxes away (migrate_page) and answer
 * {node, migrated, skipped, cursor?}. */
int api_nodes_drain(struct http_req *r, struct sbx_err *e)
{
	const char *node = path_node(r, e);
	redisReply *reps[NODE_REPLIES + 4] = { NULL };
	char cursor[256] = "";
	int64_t limit = MIGRATE_LIMIT_DEFAULT;
	json_t *body, *o, *v;
	int drain, migrate, force, paged;

	if (!node)
		return -1;
	body = http_read_json(r, e);
	if (!body)
		return -1;
	if (jsonv_check(body, drain_fields, "drain", e) < 0) {
		json_decref(body);
		return -1;
	}
	drain = !json_is_false(json_object_get(body, "drain"));
	migrate = json_is_true(json_object_get(body, "migrate"));
	force = json_is_true(json_object_get(body, "force"));
	paged = json_object_get(body, "force") || json_object_get(body, "cursor") ||
		json_object_get(body, "limit");
	if ((v = json_object_get(body, "limit")) &&
	    (json_integer_value(v) < 1 || json_integer_value(v) > MIGRATE_LIMIT_MAX)) {
		json_decref(body);
		return err_set(e, SBX_E_VALIDATION, "limit must be 1-%d", MIGRATE_LIMIT_MAX);
	}
	if (v)
		limit = json_integer_value(v);
	if ((v = json_object_get(body, "cursor")) &&
	    (!*json_string_value(v) || strlen(json_string_value(v)) >= sizeof(cursor))) {
		json_decref(body);
		return err_set(e, SBX_E_VALIDATION, "cursor is the cursor of the previous answer");
	}
	if (v)
		util_xsnprintf(cursor, sizeof(cursor), "%s", json_string_value(v));
	json_decref(body);
	if (!migrate && paged)
		return err_set(e, SBX_E_VALIDATION, "force, cursor and limit go with migrate: true");
	if (migrate && !drain)
		return err_set(e, SBX_E_VALIDATION, "migrate goes with drain: true");
	if (store_append(e, "MULTI") < 0 ||
	    (drain ? store_append(e, "SET %s 1", RK_NODE(node, "drain"))
		   : store_append(e, "DEL %s", RK_NODE(node, "drain"))) < 0 ||
	    store_append(e, RKEYS_XADD_EVENT "type %s node %s", drain ? "node.drain" : "node.undrain",
			 node) < 0 ||
	    store_append(e, "EXEC") < 0 || append_node(node, e) < 0)
		return -1;
	if (store_collect(reps, ARRAY_SIZE(reps), 0, e) < 0)
		return -1;
	o = migrate ? json_pack("{s:s}", "node", node) : node_of(node, reps + 4);
	store_free_replies(reps, ARRAY_SIZE(reps));
	if (!o)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	if (migrate && migrate_page(node, cursor[0] ? cursor : NULL, limit, force, o, e) < 0) {
		json_decref(o);
		return -1;
	}
	http_respond_json(r, 200, o);
	json_decref(o);
	return 0;
}

#define NODE_PAGE_DEFAULT 100
#define NODE_PAGE_MAX 500

/* A record of another tenant for an admin: the public record plus its
 * tenant. New reference or NULL. */
static json_t *admin_record(const redisReply *h)
{
	json_t *rec = lifecycle_hash_json(h), *o = NULL;
	const char *tenant = json_string_value(json_object_get(rec, "tenant"));

	if (rec && tenant && json_object_get(rec, "id"))
		o = lifecycle_record_json(rec);
	if (o)
		json_object_set_new(o, "tenant", json_string(tenant));
	json_decref(rec);
	return o;
}

/* One SSCAN page of the node's sandbox set, each member's record (with
 * its tenant) read in one pipeline; the SSCAN cursor is the page's. */
int api_nodes_sandboxes(struct http_req *r, struct sbx_err *e)
{
	const char *node = path_node(r, e);
	char cursor[24] = "0", num[24];
	int64_t limit = NODE_PAGE_DEFAULT, c;
	auto_reply redisReply *page = NULL;
	redisReply *recs[NODE_PAGE_MAX * 2];
	const redisReply *members, *next;
	size_t n = 0;
	json_t *arr, *body;
	int rc;

	if (!node)
		return -1;
	if ((rc = http_query_get(r->query, "cursor", num, sizeof(num), e)) < 0)
		return -1;
	if (rc) {
		if (util_parse_i64(num, 0, INT64_MAX, &c) < 0)
			return err_set(e, SBX_E_VALIDATION, "invalid cursor");
		util_xsnprintf(cursor, sizeof(cursor), "%lld", (long long)c);
	}
	if ((rc = http_query_get(r->query, "limit", num, sizeof(num), e)) < 0)
		return -1;
	if (rc && util_parse_i64(num, 1, NODE_PAGE_MAX, &limit) < 0)
		return err_set(e, SBX_E_VALIDATION, "limit must be 1-%d", NODE_PAGE_MAX);
	page = store_command(e, "SSCAN %s %s COUNT %lld", RK_NODE(node, "sandboxes"), cursor,
			     (long long)limit);
	if (!page)
		return -1;
	if (page->type != REDIS_REPLY_ARRAY || page->elements != 2 ||
	    page->element[0]->type != REDIS_REPLY_STRING || page->element[1]->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: SSCAN gave no cursor and page");
	next = page->element[0];
	members = page->element[1];
	/* SSCAN's COUNT is a hint: a page may hold more, never more than we read. */
	for (size_t i = 0; i < members->elements && n < ARRAY_SIZE(recs); i++, n++) {
		const redisReply *m = members->element[i];
		/* "tenant/id": never a brace, which would change the key's slot. */
		const char *ref = m->type == REDIS_REPLY_STRING && !strpbrk(m->str, "{}") ? m->str : "-";

		if (store_append(e, "HGETALL %s", rkeys_sandbox_ref(RK_BUF, ref)) < 0)
			return -1;
	}
	if (n && store_collect(recs, n, 0, e) < 0)
		return -1;
	arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		json_t *o = admin_record(recs[i]);
		const char *on = json_string_value(json_object_get(o, "node"));

		/* An entry whose record moved on is the reconciler's to prune. */
		if (o && on && strcmp(on, node) == 0)
			json_array_append_new(arr, o);
		else
			json_decref(o);
	}
	store_free_replies(recs, n);
	body = arr ? json_pack("{s:o}", "sandboxes", arr) : NULL;
	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	if (strcmp(next->str, "0") != 0)
		json_object_set_new(body, "cursor", json_string(next->str));
	http_respond_json(r, 200, body);
	json_decref(body);
	return 0;
}
