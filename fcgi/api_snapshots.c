/*
 * Snapshots (control): their records in Redis, written by the agent that
 * made the archive (sandbox/features/agent_snapshots.c).
 *
 *   GET    /v1/snapshots?sandbox=&name=&limit=&cursor=  -> {snapshots:[…], cursor?}
 *   GET    /v1/snapshots/{sid}                          -> the record
 *   DELETE /v1/snapshots/{sid}                          -> 204 (the archive is removed)
 *
 * A tenant sees only its own: another tenant's snapshot is 404.
 */
#include "api.h"
#include "ids.h"
#include "log.h"
#include "rkeys.h"
#include "router.h"
#include "scripts.h"
#include "snapstore.h"
#include "store.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#define SNAP_LIST_DEFAULT 100
#define SNAP_LIST_MAX 1000

/* The record of hgetall as the API's JSON (NULL for none). */
static json_t *record_json(const redisReply *h)
{
	const char *kv[32];
	size_t n = 0;

	if (!h || h->type != REDIS_REPLY_ARRAY || h->elements == 0)
		return NULL;
	for (size_t i = 0; i < h->elements && n < ARRAY_SIZE(kv); i++) {
		if (h->element[i]->type != REDIS_REPLY_STRING)
			return NULL;
		kv[n++] = h->element[i]->str;
	}
	return snapstore_record_json(n, kv);
}

static int sid_arg(const struct http_req *r, const char **sid, struct sbx_err *e)
{
	*sid = router_cap(&r->match, "sid");
	if (!*sid || !snapstore_id_valid(*sid))
		return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "no such snapshot");
	return 0;
}

int api_snapshots_get(struct http_req *r, struct sbx_err *e)
{
	const char *sid;
	redisReply *h;
	json_t *rec;

	if (sid_arg(r, &sid, e) < 0)
		return -1;
	h = store_command(e, "HGETALL %s", RK_SNAPSHOT(r->tenant, sid));
	if (!h)
		return -1;
	rec = record_json(h);
	freeReplyObject(h);
	if (!rec)
		return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "no snapshot '%s'", sid);
	http_respond_json(r, 200, rec);
	json_decref(rec);
	return 0;
}

int api_snapshots_list(struct http_req *r, struct sbx_err *e)
{
	char sandbox[64] = "", name[80] = "", lim[16] = "", cur[16] = "";
	int64_t limit = SNAP_LIST_DEFAULT, offset = 0;
	redisReply *ids, *recs[SNAP_LIST_MAX];
	json_t *arr, *body;
	size_t n = 0, i;

	if (http_query_get(r->query, "sandbox", sandbox, sizeof(sandbox), e) < 0 ||
	    http_query_get(r->query, "name", name, sizeof(name), e) < 0 ||
	    http_query_get(r->query, "limit", lim, sizeof(lim), e) < 0 ||
	    http_query_get(r->query, "cursor", cur, sizeof(cur), e) < 0)
		return -1;
	if (lim[0] && util_parse_i64(lim, 1, SNAP_LIST_MAX, &limit) < 0)
		return err_set(e, SBX_E_VALIDATION, "limit must be 1-%d", SNAP_LIST_MAX);
	if (cur[0] && util_parse_i64(cur, 0, INT32_MAX, &offset) < 0)
		return err_set(e, SBX_E_VALIDATION, "invalid cursor");
	ids = store_command(e, "ZRANGE %s %lld %lld", RK_TENANT(r->tenant, "snapshots"),
			    (long long)offset, (long long)(offset + SNAP_LIST_MAX - 1));
	if (!ids)
		return -1;
	if (ids->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(ids);
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: ZRANGE gave no array");
	}
	for (i = 0; i < ids->elements; i++) {
		const char *sid = ids->element[i]->type == REDIS_REPLY_STRING ? ids->element[i]->str : "";

		if (store_append(e, "HGETALL %s", RK_SNAPSHOT(r->tenant, snapstore_id_valid(sid) ? sid : "-")) < 0)
			break;
		n++;
	}
	if (n < ids->elements || (n && store_collect(recs, n, 0, e) < 0)) {
		freeReplyObject(ids);
		return -1;
	}
	arr = json_array();
	for (i = 0; arr && i < n && (int64_t)json_array_size(arr) < limit; i++) {
		json_t *rec = record_json(recs[i]);
		const char *s = json_string_value(json_object_get(rec, "sandbox"));
		const char *nm = json_string_value(json_object_get(rec, "name"));

		if (rec && (!sandbox[0] || (s && strcmp(s, sandbox) == 0)) &&
		    (!name[0] || (nm && strcmp(nm, name) == 0)))
			json_array_append_new(arr, rec);
		else
			json_decref(rec);
	}
	store_free_replies(recs, n);
	body = arr ? json_pack("{s:o}", "snapshots", arr) : NULL;
	if (body && i < ids->elements) {
		char next[24];

		util_xsnprintf(next, sizeof(next), "%lld", (long long)(offset + (int64_t)i));
		json_object_set_new(body, "cursor", json_string(next));
	}
	freeReplyObject(ids);
	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	http_respond_json(r, 200, body);
	json_decref(body);
	return 0;
}

int api_snapshots_delete(struct http_req *r, struct sbx_err *e)
{
	char kbytes[RKEYS_MAX], krec[RKEYS_MAX], kidx[RKEYS_MAX];
	const char *keys[3] = { kbytes, krec, kidx }, *sid;
	struct snapstore st;
	struct sbx_err fe;
	redisReply *rep;

	if (sid_arg(r, &sid, e) < 0)
		return -1;
	rkeys_tenant(kbytes, r->tenant, "snapbytes");
	rkeys_snapshot(krec, r->tenant, sid);
	rkeys_tenant(kidx, r->tenant, "snapshots");
	rep = scripts_run(RSCRIPT_SNAPSHOT_DEL, 3, keys, 1, &sid, e);
	if (!rep)
		return -1;
	if (rep->type != REDIS_REPLY_STRING) {
		freeReplyObject(rep);
		return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "no snapshot '%s'", sid);
	}
	/* the record is gone: an archive left behind is only disk, never seen */
	if (snapstore_init(&st, r->conf, &fe) < 0 || snapstore_remove(&st, rep->str, &fe) < 0)
		log_warn("snapshot %s/%s: the archive stays: %s", r->tenant, sid, fe.msg);
	freeReplyObject(rep);
	http_respond_json(r, 204, NULL);
	return 0;
}
