/*
 * /v1/sandboxes — the control calls of the sandbox lifecycle:
 * PUT/GET/PATCH/DELETE /v1/sandboxes/{id}, GET /v1/sandboxes (list),
 * POST /v1/sandboxes/{id}/restart and /sleep. The work is in lifecycle.c;
 * this file maps requests to it and records to answers.
 */
#include "api.h"
#include "rkeys.h"
#include "codec.h"
#include "ids.h"
#include "lifecycle.h"
#include "log.h"
#include "recview.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define LIST_LIMIT_DEFAULT 50
#define LIST_LIMIT_MAX 100
#define LIST_LABELS_MAX 8
#define LIST_BATCH 100
#define LIST_SCAN_MAX 2000    /* index entries looked at per page, at most */

/* Answer status with the record rec (hash fields; stolen). */
static int respond_with(struct http_req *r, int status, json_t *rec, struct sbx_err *e)
{
	json_t *out = lifecycle_record_json(rec);

	json_decref(rec);
	if (!out)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	http_respond_json(r, status, out);
	json_decref(out);
	return 0;
}

/* The largest record view answered (labels and pending are bounded by the
 * body limit, far below). */
#define VIEW_MAX (16u << 20)

/* Answer status with the current record of tenant/id, rendered straight
 * from its Redis reply (recview.h) into a buffer each worker keeps. */
static int respond_record(struct http_req *r, int status, const char *id, struct sbx_err *e)
{
	static struct buf view = { .max = VIEW_MAX };
	int rc = recview_load(r->tenant, id, &view, e);

	if (rc < 0)
		return -1;
	if (rc == 0)
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	http_respond_json_text(r, status, view.data, view.len);
	return 0;
}

/* Read and validate the body into s. 0 or -1 with e. */
static int read_spec(struct http_req *r, struct lc_spec *s, struct sbx_err *e)
{
	json_t *body = http_read_json(r, e);
	int rc;

	if (!body)
		return -1;
	rc = lifecycle_parse_spec(body, r->conf, s, e);
	json_decref(body);
	return rc;
}

int api_sandboxes_put(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	struct lc_spec s;
	json_t *view = NULL;
	int created = 0, rc;

	if (read_spec(r, &s, e) < 0)
		return -1;
	rc = lifecycle_put(r->conf, r->tenant, id, &s, &created, &view, e);
	lifecycle_spec_release(&s);
	if (rc < 0)
		return -1;
	return respond_with(r, created ? 201 : 200, view, e);
}

int api_sandboxes_get(struct http_req *r, struct sbx_err *e)
{
	return respond_record(r, 200, router_cap(&r->match, "id"), e);
}

int api_sandboxes_patch(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	struct lc_spec s;
	int rc;

	if (read_spec(r, &s, e) < 0)
		return -1;
	if (s.has & (LC_HAS_FROM_SNAPSHOT | LC_HAS_PERSIST)) {
		lifecycle_spec_release(&s);
		return err_set(e, SBX_E_VALIDATION,
			       "fromSnapshot and persist are for PUT, when it creates the sandbox");
	}
	rc = lifecycle_update(r->tenant, id, &s, e);
	lifecycle_spec_release(&s);
	if (rc < 0)
		return -1;
	return respond_record(r, 200, id, e);
}

int api_sandboxes_delete(struct http_req *r, struct sbx_err *e)
{
	/* Idempotent: a sandbox that does not exist for this tenant (never
	 * created, already gone, or another tenant's) is a 204 that does nothing. */
	if (lifecycle_destroy(r->tenant, router_cap(&r->match, "id"), e) < 0)
		return -1;
	http_respond_json(r, 204, NULL);
	return 0;
}

int api_sandboxes_restart(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");

	if (lifecycle_restart(r->tenant, id, e) < 0)
		return -1;
	return respond_record(r, 200, id, e);
}

int api_sandboxes_sleep(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");

	if (lifecycle_sleep(r->tenant, id, e) < 0)
		return -1;
	return respond_record(r, 200, id, e);
}

/* ---- listing -------------------------------------------------------------- */

struct list_query {
	char tenant[64];
	char state[16];
	char cursor[64];
	int64_t limit;
	int nlabels;
	struct {
		char key[RKEYS_MAX];
		char value[256];
	} label[LIST_LABELS_MAX];
};

static int parse_label(const char *v, struct list_query *q, struct sbx_err *e)
{
	const char *colon = strchr(v, ':');
	size_t klen;

	if (q->nlabels == LIST_LABELS_MAX)
		return err_set(e, SBX_E_VALIDATION, "at most %d label filters", LIST_LABELS_MAX);
	if (!colon)
		return err_set(e, SBX_E_VALIDATION, "label filter must be 'key:value'");
	klen = (size_t)(colon - v);
	if (klen == 0 || klen >= sizeof(q->label[0].key) ||
	    strlen(colon + 1) >= sizeof(q->label[0].value))
		return err_set(e, SBX_E_VALIDATION, "label filter key or value too long");
	memcpy(q->label[q->nlabels].key, v, klen);
	q->label[q->nlabels].key[klen] = '\0';
	snprintf(q->label[q->nlabels].value, sizeof(q->label[0].value), "%s", colon + 1);
	if (!ids_valid_label_key(q->label[q->nlabels].key) ||
	    !ids_valid_label_value(q->label[q->nlabels].value))
		return err_set(e, SBX_E_VALIDATION, "label filter '%.64s' is not a valid key:value", v);
	q->nlabels++;
	return 0;
}

/* Copy a validated (so short enough) value; truncation is impossible here
 * but checked anyway. */
static int set_str(char *dst, size_t n, const char *v, struct sbx_err *e)
{
	size_t len = strlen(v);

	if (len >= n)
		return err_set(e, SBX_E_VALIDATION, "query value too long");
	memcpy(dst, v, len + 1);
	return 0;
}

/* Parse the query string of a listing (every parameter known, bounded). */
static int parse_list_query(const struct http_req *r, struct list_query *q, struct sbx_err *e)
{
	const char *p = r->query;

	memset(q, 0, sizeof(*q));
	q->limit = LIST_LIMIT_DEFAULT;
	snprintf(q->tenant, sizeof(q->tenant), "%s", r->tenant);
	while (p && *p) {
		size_t len = strcspn(p, "&");
		const char *eq = memchr(p, '=', len);
		size_t nlen = eq ? (size_t)(eq - p) : len;
		char name[32], value[512];

		if (len == 0) {
			p++;
			continue;
		}
		if (nlen >= sizeof(name) || codec_pct_decode(p, nlen, name, sizeof(name), 1) < 0)
			return err_set(e, SBX_E_VALIDATION, "malformed query string");
		if (codec_pct_decode(eq ? eq + 1 : p + len, eq ? len - nlen - 1 : 0, value,
				    sizeof(value), 1) < 0)
			return err_set(e, SBX_E_VALIDATION, "query parameter '%.31s' is malformed or too long",
				       name);
		if (strcmp(name, "label") == 0) {
			if (parse_label(value, q, e) < 0)
				return -1;
		} else if (strcmp(name, "state") == 0) {
			if (strcmp(value, "starting") != 0 && strcmp(value, "running") != 0 &&
			    strcmp(value, "sleeping") != 0 && strcmp(value, "stopping") != 0)
				return err_set(e, SBX_E_VALIDATION,
					       "state must be starting, running, sleeping or stopping");
			if (set_str(q->state, sizeof(q->state), value, e) < 0)
				return -1;
		} else if (strcmp(name, "limit") == 0) {
			if (util_parse_i64(value, 1, LIST_LIMIT_MAX, &q->limit) < 0)
				return err_set(e, SBX_E_VALIDATION, "limit must be 1-%d", LIST_LIMIT_MAX);
		} else if (strcmp(name, "cursor") == 0) {
			if (!ids_valid_sandbox(value))
				return err_set(e, SBX_E_VALIDATION, "invalid cursor");
			if (set_str(q->cursor, sizeof(q->cursor), value, e) < 0)
				return -1;
		} else if (strcmp(name, "tenant") == 0) {
			if (!ids_valid_tenant(value))
				return err_set(e, SBX_E_VALIDATION, "invalid tenant");
			if (!r->admin && strcmp(value, r->tenant) != 0)
				return err_set(e, SBX_E_FORBIDDEN, "listing another tenant needs an admin key");
			if (set_str(q->tenant, sizeof(q->tenant), value, e) < 0)
				return -1;
		} else {
			return err_set(e, SBX_E_VALIDATION, "unknown query parameter '%.31s'", name);
		}
		p += len;
		if (*p == '&')
			p++;
	}
	return 0;
}

/* Does a record (fields) pass the filters of q? */
static int list_match(const json_t *rec, const struct list_query *q)
{
	const char *tenant = json_string_value(json_object_get(rec, "tenant"));
	const char *state = json_string_value(json_object_get(rec, "state"));
	const char *labels_text = json_string_value(json_object_get(rec, "labels"));
	json_t *labels;
	int ok = 1;

	if (!tenant || strcmp(tenant, q->tenant) != 0)
		return 0;
	if (q->state[0] && (!state || strcmp(state, q->state) != 0))
		return 0;
	if (q->nlabels == 0)
		return 1;
	labels = labels_text ? json_loads(labels_text, 0, NULL) : NULL;
	for (int i = 0; ok && i < q->nlabels; i++) {
		const char *v = json_string_value(json_object_get(labels, q->label[i].key));
		ok = v && strcmp(v, q->label[i].value) == 0;
	}
	json_decref(labels);
	return ok;
}

int api_sandboxes_list(struct http_req *r, struct sbx_err *e)
{
	struct list_query q;
	char key[RKEYS_MAX], start[80], last_scanned[64] = "", last_returned[64] = "";
	json_t *arr, *body;
	int64_t count = 0;
	int scanned = 0, exhausted = 0, more = 0;

	if (parse_list_query(r, &q, e) < 0)
		return -1;
	if (q.nlabels)
		rkeys_tenant_label(key, q.tenant, q.label[0].key, q.label[0].value);
	else
		rkeys_tenant(key, q.tenant, "sandboxes");
	if (q.cursor[0])
		snprintf(start, sizeof(start), "(%s", q.cursor);
	else
		snprintf(start, sizeof(start), "-");
	arr = json_array();
	if (!arr)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	while (!more && !exhausted && scanned < LIST_SCAN_MAX) {
		redisReply *ids = store_command(e, "ZRANGEBYLEX %s %s + LIMIT 0 %d", key, start, LIST_BATCH);
		redisReply *recs[LIST_BATCH];
		size_t n = 0;

		if (!ids)
			goto fail;
		if (ids->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(ids);
			err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: ZRANGEBYLEX gave no array");
			goto fail;
		}
		if (ids->elements < LIST_BATCH)
			exhausted = 1;
		for (size_t i = 0; i < ids->elements; i++) {
			const char *m = ids->element[i]->str;
			if (ids->element[i]->type != REDIS_REPLY_STRING || !ids_valid_sandbox(m))
				m = "-";   /* never a valid id: an empty hash */
			if (store_append(e, "HGETALL %s", RK_SANDBOX(q.tenant, m)) < 0) {
				freeReplyObject(ids);
				goto fail;
			}
			n++;
		}
		if (n && store_collect(recs, n, 0, e) < 0) {
			freeReplyObject(ids);
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *rec;
			scanned++;
			if (more)
				continue;
			snprintf(last_scanned, sizeof(last_scanned), "%s", ids->element[i]->str);
			rec = lifecycle_hash_json(recs[i]);
			if (rec && list_match(rec, &q)) {
				if (count == q.limit) {
					more = 1;
				} else {
					json_t *o = lifecycle_record_json(rec);
					if (o)
						json_array_append_new(arr, o);
					snprintf(last_returned, sizeof(last_returned), "%s",
						 ids->element[i]->str);
					count++;
				}
			}
			json_decref(rec);
		}
		store_free_replies(recs, n);
		if (ids->elements)
			snprintf(start, sizeof(start), "(%s", ids->element[ids->elements - 1]->str);
		freeReplyObject(ids);
	}
	body = json_pack("{s:o}", "sandboxes", arr);
	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	if (more && last_returned[0])
		json_object_set_new(body, "cursor", json_string(last_returned));
	else if (!more && !exhausted && last_scanned[0])
		json_object_set_new(body, "cursor", json_string(last_scanned));
	http_respond_json(r, 200, body);
	json_decref(body);
	return 0;
fail:
	json_decref(arr);
	return -1;
}
