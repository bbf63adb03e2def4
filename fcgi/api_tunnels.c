/*
 * Tunnels (control) and the tunnel-host decision:
 *
 *   POST   /v1/sandboxes/{id}/tunnels/{port} -> {id, port, url, provider, generation, createdAt}
 *   GET    /v1/sandboxes/{id}/tunnels        -> {tunnels:[…]} (Redis only)
 *   DELETE /v1/sandboxes/{id}/tunnels/{port} -> 204 (idempotent)
 *
 * One tunnel per (sandbox, port) and container: the record lives in
 * sbx:sb:{tenant/id}:tunnels until the container restarts (its generation
 * is then dead: deleted when seen) or the tunnel is deleted. Concurrent
 * POSTs share one tunnel: the first takes a short-lived claim key (SET NX
 * PX) in the sandbox's hash tag and makes it; the others poll for its
 * record. A live record whose forwarder is gone (the agent answers with
 * another address) is evicted and made again.
 *
 * Provider "builtin" (the only one so far): the URL is a host of our own
 * nginx, "t-<16 random [a-z0-9]>.<preview domain>", routed like a preview
 * (/_sbx_preview -> api_tunnels_route) to the agent's forwarder.
 */
#include "api.h"
#include "ids.h"
#include "jsonv.h"
#include "lifecycle.h"
#include "log.h"
#include "preview.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLAIM_TTL_MS 15000
#define WAIT_MS 15000
#define POLL_MS 20
#define OWNER_ATTEMPTS 4

/* KEYS tunnels-hash claim; ARGV port generation incarnation nonce ttl max.
 * {1, record} live record; {2, deadId} claimed by us; {0, deadId} someone
 * else is making it; {-1} too many tunnels. A dead record is deleted and
 * its tunnel id handed back for the index cleanup. */
static const char lua_claim[] =
	"local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
	"local dead = ''\n"
	"if v then\n"
	"  local ok, t = pcall(cjson.decode, v)\n"
	"  if ok and type(t) == 'table' and t.generation == tonumber(ARGV[2])\n"
	"     and t.incarnation == ARGV[3] then return {1, v} end\n"
	"  redis.call('HDEL', KEYS[1], ARGV[1])\n"
	"  if ok and type(t) == 'table' and type(t.id) == 'string' then dead = t.id end\n"
	"elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then\n"
	"  return {-1, dead}\n"
	"end\n"
	"if redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[5]) then return {2, dead} end\n"
	"return {0, dead}\n";

/* KEYS tunnels-hash claim; ARGV port nonce record: store the record when
 * the claim is still ours. 1 stored, 0 lost the claim. */
static const char lua_commit[] =
	"if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end\n"
	"redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])\n"
	"redis.call('DEL', KEYS[2])\n"
	"return 1\n";

/* HDEL field ARGV[1] of KEYS[1] when it still holds ARGV[2]. */
static const char lua_hcad[] =
	"if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then\n"
	"  return redis.call('HDEL', KEYS[1], ARGV[1])\n"
	"end\n"
	"return 0\n";

static json_t *reply_json(const redisReply *r)
{
	if (!r || r->type != REDIS_REPLY_STRING)
		return NULL;
	return json_loadb(r->str, r->len, 0, NULL);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* The client's view of a record: new reference or NULL. */
static json_t *tunnel_view(const json_t *rec)
{
	return json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "id", json_object_get(rec, "id"),
			 "port", json_object_get(rec, "port"), "url", json_object_get(rec, "url"),
			 "provider", json_object_get(rec, "provider"), "generation",
			 json_object_get(rec, "generation"), "createdAt",
			 json_object_get(rec, "createdAt"));
}

static void index_key(char *out, size_t n, const char *tid)
{
	snprintf(out, n, "sbx:tunnel:%s", tid);
}

static void index_value(char *out, size_t n, const char *tenant, const char *id, int port)
{
	snprintf(out, n, "%s/%s/%d", tenant, id, port);
}

/* Forget a dead or deleted tunnel: the hash field (when it still holds
 * value; NULL: already gone) and its index key. Best effort. */
static void tunnel_forget(const char *tenant, const char *id, int port, const char *value,
			  const char *tid, const char *why)
{
	char key[192], val[192], pstr[8];
	struct sbx_err e = { 0 };
	redisReply *r;

	if (value) {
		const char *keys[1] = { key }, *args[2] = { pstr, value };
		snprintf(key, sizeof(key), "sbx:sb:{%s/%s}:tunnels", tenant, id);
		snprintf(pstr, sizeof(pstr), "%d", port);
		r = preview_eval(lua_hcad, 1, keys, 2, args, &e);
		if (r)
			freeReplyObject(r);
	}
	if (tid && *tid && strlen(tid) == PREVIEW_TUNNEL_ID_LEN) {
		index_key(key, sizeof(key), tid);
		index_value(val, sizeof(val), tenant, id, port);
		preview_cad(key, val);
		r = store_command(&e, "XADD sbx:events MAXLEN ~ 10000 * type tunnel-down tenant %s id %s "
				      "port %d tunnel %s reason %s",
				  tenant, id, port, tid, why);
		if (r)
			freeReplyObject(r);
	}
}

/* Respond with the view of a record text. */
static int respond_record(struct http_req *r, const char *text, struct sbx_err *e)
{
	json_t *rec = json_loads(text, 0, NULL), *view = rec ? tunnel_view(rec) : NULL;

	json_decref(rec);
	if (!view)
		return err_set(e, SBX_E_INTERNAL, "bad tunnel record");
	http_respond_json(r, 200, view);
	json_decref(view);
	return 0;
}

/* The winner's part: forwarder, tunnel id, index, record. 0 answered, 1
 * try again, -1 with e. */
static int tunnel_make(struct http_req *r, const char *id, int port, const struct lc_owner *o,
		       const struct preview_sb *s, const char *claim, const char *nonce,
		       struct sbx_err *e)
{
	char addr[PREVIEW_ADDR_MAX], tid[PREVIEW_TUNNEL_ID_LEN + 1], label[PREVIEW_LABEL_MAX];
	char url[512], now[32], key[192], val[192], hkey[192], pstr[8];
	const char *keys[2], *args[3];
	auto_free char *text = NULL;
	redisReply *rep;
	json_t *rec;
	int stored;

	if (preview_forward_open(r->tenant, id, o, port, addr, e) < 0 ||
	    preview_random_id(tid, PREVIEW_TUNNEL_ID_LEN, e) < 0)
		goto release;
	snprintf(label, sizeof(label), "t-%s", tid);
	if (preview_url(r->conf, label, url, sizeof(url), e) < 0)
		goto release;
	index_key(key, sizeof(key), tid);
	index_value(val, sizeof(val), r->tenant, id, port);
	rep = store_command(e, "SET %s %s", key, val);
	if (!rep)
		goto release;
	freeReplyObject(rep);
	util_iso8601(util_wall_ms(), now);
	rec = json_pack("{s:s, s:i, s:s, s:s, s:I, s:s, s:s, s:s}", "id", tid, "port", port, "url",
			url, "provider", "builtin", "generation", (json_int_t)o->generation,
			"incarnation", s->incarnation, "forward", addr, "createdAt", now);
	text = rec ? jsonv_dump(rec) : NULL;
	json_decref(rec);
	if (!text) {
		err_set(e, SBX_E_INTERNAL, "out of memory");
		goto release;
	}
	snprintf(hkey, sizeof(hkey), "sbx:sb:{%s/%s}:tunnels", r->tenant, id);
	snprintf(pstr, sizeof(pstr), "%d", port);
	keys[0] = hkey;
	keys[1] = claim;
	args[0] = pstr;
	args[1] = nonce;
	args[2] = text;
	rep = preview_eval(lua_commit, 2, keys, 3, args, e);
	if (!rep) {
		preview_cad(key, val);
		return -1;
	}
	stored = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
	freeReplyObject(rep);
	if (!stored) {
		/* Our claim ran out and another caller made one meanwhile. */
		preview_cad(key, val);
		return 1;
	}
	rep = store_command(e, "XADD sbx:events MAXLEN ~ 10000 * type tunnel-up tenant %s id %s "
			       "port %d tunnel %s provider builtin generation %lld",
			   r->tenant, id, port, tid, (long long)o->generation);
	if (rep)
		freeReplyObject(rep);
	err_clear(e);
	log_info("tunnel %s for %s/%s port %d (generation %lld, forward %s)", tid, r->tenant, id, port,
		 (long long)o->generation, addr);
	return respond_record(r, text, e);
release:
	preview_cad(claim, nonce);
	return e->code == SBX_E_CONFLICT ? 1 : -1;
}

/* A live record: its forwarder must still be the one recorded, else it
 * is evicted. 0 answered, 1 evicted (make a new one), -1 with e. */
static int tunnel_check(struct http_req *r, const char *id, int port, const struct lc_owner *o,
			const char *text, struct sbx_err *e)
{
	char addr[PREVIEW_ADDR_MAX];
	json_t *rec = json_loads(text, 0, NULL);
	const char *fwd = json_string_value(json_object_get(rec, "forward"));
	const char *tid = json_string_value(json_object_get(rec, "id"));
	char tidc[PREVIEW_TUNNEL_ID_LEN + 1] = "";

	if (tid)
		snprintf(tidc, sizeof(tidc), "%s", tid);
	if (preview_forward_open(r->tenant, id, o, port, addr, e) < 0) {
		json_decref(rec);
		return e->code == SBX_E_CONFLICT ? 1 : -1;
	}
	if (fwd && strcmp(fwd, addr) == 0) {
		json_decref(rec);
		return respond_record(r, text, e);
	}
	json_decref(rec);
	log_info("tunnel %s of %s/%s port %d: its forwarder is gone; evicted", tidc, r->tenant, id,
		 port);
	tunnel_forget(r->tenant, id, port, text, tidc, "forwarder-gone");
	return 1;
}

int api_tunnels_create(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	char claim[192], hkey[192], nonce[33], pstr[8], gstr[24], maxs[8], ttls[16];
	int64_t deadline = util_now_ms() + WAIT_MS;
	int port, need_owner = 1, owner_tries = 0;
	struct lc_owner o;
	struct preview_sb s;
	json_t *body;

	if (preview_parse_port(router_cap(&r->match, "port"), &port, e) < 0)
		return -1;
	body = http_read_json(r, e);
	if (!body)
		return -1;
	if (json_object_size(body) != 0) {
		json_decref(body);
		return err_set(e, SBX_E_VALIDATION, "the body must be empty");
	}
	json_decref(body);
	snprintf(claim, sizeof(claim), "sbx:sb:{%s/%s}:tunnels:claim:%d", r->tenant, id, port);
	snprintf(hkey, sizeof(hkey), "sbx:sb:{%s/%s}:tunnels", r->tenant, id);
	snprintf(pstr, sizeof(pstr), "%d", port);
	snprintf(maxs, sizeof(maxs), "%d", PREVIEW_MAX_PORTS);
	snprintf(ttls, sizeof(ttls), "%d", CLAIM_TTL_MS);
	if (preview_random_id(nonce, 32, e) < 0)
		return -1;
	while (util_now_ms() < deadline) {
		const char *keys[2] = { hkey, claim }, *args[6];
		redisReply *rep;
		long long kind;
		int rc;

		if (need_owner) {
			if (++owner_tries > OWNER_ATTEMPTS)
				break;
			if (lifecycle_ensure_running(r->tenant, id, &o, e) < 0)
				return -1;
			rc = preview_sb_load(r->tenant, id, &s, e);
			if (rc < 0)
				return -1;
			if (rc > 0)
				return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
			if (s.generation != o.generation)
				continue;
			need_owner = 0;
		}
		snprintf(gstr, sizeof(gstr), "%lld", (long long)o.generation);
		args[0] = pstr;
		args[1] = gstr;
		args[2] = s.incarnation;
		args[3] = nonce;
		args[4] = ttls;
		args[5] = maxs;
		rep = preview_eval(lua_claim, 2, keys, 6, args, e);
		if (!rep)
			return -1;
		if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
		    rep->element[0]->type != REDIS_REPLY_INTEGER) {
			freeReplyObject(rep);
			return err_set(e, SBX_E_INTERNAL, "unexpected answer of the tunnel claim");
		}
		kind = rep->element[0]->integer;
		if (rep->element[1]->type == REDIS_REPLY_STRING && rep->element[1]->len > 0)
			tunnel_forget(r->tenant, id, port, NULL, rep->element[1]->str, "restarted");
		if (kind == -1) {
			freeReplyObject(rep);
			return err_set(e, SBX_E_CONFLICT, "sandbox '%s' already has %d tunnels", id,
				       PREVIEW_MAX_PORTS);
		}
		if (kind == 1) {
			char *text = rep->element[1]->type == REDIS_REPLY_STRING ? strdup(rep->element[1]->str)
										: NULL;
			freeReplyObject(rep);
			if (!text)
				return err_set(e, SBX_E_INTERNAL, "out of memory");
			rc = tunnel_check(r, id, port, &o, text, e);
			free(text);
			if (rc <= 0)
				return rc;
			err_clear(e);
			need_owner = 1;
			continue;
		}
		freeReplyObject(rep);
		if (kind == 2) {
			rc = tunnel_make(r, id, port, &o, &s, claim, nonce, e);
			if (rc <= 0)
				return rc;
			err_clear(e);
			need_owner = 1;
			continue;
		}
		sleep_ms(POLL_MS);
	}
	return err_set(e, SBX_E_NODE_UNAVAILABLE, "the tunnel of port %d is not ready; try again",
		       port);
}

struct tunnel_item {
	int port;
	json_t *view;
};

static int item_cmp(const void *a, const void *b)
{
	return ((const struct tunnel_item *)a)->port - ((const struct tunnel_item *)b)->port;
}

int api_tunnels_list(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	redisReply *rep[2] = { NULL, NULL };
	struct tunnel_item items[2 * PREVIEW_MAX_PORTS];
	struct preview_sb s;
	size_t n = 0;
	json_t *arr, *out;

	if (preview_sb_append(r->tenant, id, e) < 0 ||
	    store_append(e, "HGETALL sbx:sb:{%s/%s}:tunnels", r->tenant, id) < 0 ||
	    store_collect(rep, 2, 0, e) < 0)
		return -1;
	if (preview_sb_from_reply(rep[0], &s) != 0) {
		store_free_replies(rep, 2);
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	}
	for (size_t i = 0; rep[1]->type == REDIS_REPLY_ARRAY && i + 1 < rep[1]->elements; i += 2) {
		json_t *v = reply_json(rep[1]->element[i + 1]);
		int64_t port;

		if (util_parse_i64(rep[1]->element[i]->str, 1, 65535, &port) < 0) {
			json_decref(v);
			continue;
		}
		if (v && preview_record_live(v, &s)) {
			if (n < ARRAY_SIZE(items) && (items[n].view = tunnel_view(v))) {
				items[n].port = (int)port;
				n++;
			}
		} else {
			const char *tid = json_string_value(json_object_get(v, "id"));
			tunnel_forget(r->tenant, id, (int)port, rep[1]->element[i + 1]->str, tid,
				      "restarted");
		}
		json_decref(v);
	}
	store_free_replies(rep, 2);
	qsort(items, n, sizeof(items[0]), item_cmp);
	arr = json_array();
	for (size_t i = 0; i < n; i++) {
		if (arr)
			json_array_append(arr, items[i].view);
		json_decref(items[i].view);
	}
	out = arr ? json_pack("{s:o}", "tunnels", arr) : NULL;
	if (!out)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	http_respond_json(r, 200, out);
	json_decref(out);
	return 0;
}

int api_tunnels_delete(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	redisReply *rep[2] = { NULL, NULL };
	struct preview_sb s;
	char *val = NULL;
	int port;

	if (preview_parse_port(router_cap(&r->match, "port"), &port, e) < 0)
		return -1;
	if (preview_sb_append(r->tenant, id, e) < 0 ||
	    store_append(e, "HGET sbx:sb:{%s/%s}:tunnels %d", r->tenant, id, port) < 0 ||
	    store_collect(rep, 2, 0, e) < 0)
		return -1;
	if (preview_sb_from_reply(rep[0], &s) != 0) {
		store_free_replies(rep, 2);
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	}
	if (rep[1]->type == REDIS_REPLY_STRING)
		val = strdup(rep[1]->str);
	store_free_replies(rep, 2);
	if (val) {
		json_t *v = json_loads(val, 0, NULL);
		char tid[PREVIEW_TUNNEL_ID_LEN + 1] = "";
		const char *t = json_string_value(json_object_get(v, "id"));

		if (t)
			snprintf(tid, sizeof(tid), "%s", t);
		json_decref(v);
		tunnel_forget(r->tenant, id, port, val, tid, "deleted");
		free(val);
		preview_forward_release(r->tenant, id, port);
		log_info("tunnel %s of %s/%s port %d deleted", tid, r->tenant, id, port);
	}
	http_respond_json(r, 204, NULL);
	return 0;
}

int api_tunnels_route(const char *tunnel_id, char *forward, struct sbx_err *e)
{
	char key[192], tenant[64], id[64], ref[192];
	redisReply *t, *rep[2] = { NULL, NULL };
	struct preview_sb s;
	const char *a, *b, *tid, *fwd;
	int64_t port;
	json_t *v;
	int rc;

	index_key(key, sizeof(key), tunnel_id);
	t = store_command(e, "GET %s", key);
	if (!t)
		return -1;
	rc = t->type == REDIS_REPLY_STRING && t->len < sizeof(ref);
	if (rc)
		snprintf(ref, sizeof(ref), "%s", t->str);
	freeReplyObject(t);
	if (!rc)
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown tunnel");
	/* "tenant/id/port" */
	a = strchr(ref, '/');
	b = a ? strchr(a + 1, '/') : NULL;
	if (!a || !b || (size_t)(a - ref) >= sizeof(tenant) || (size_t)(b - a - 1) >= sizeof(id))
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown tunnel");
	memcpy(tenant, ref, (size_t)(a - ref));
	tenant[a - ref] = '\0';
	memcpy(id, a + 1, (size_t)(b - a - 1));
	id[b - a - 1] = '\0';
	if (!ids_valid_tenant(tenant) || !ids_valid_sandbox(id) ||
	    util_parse_i64(b + 1, 1, 65535, &port) < 0)
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown tunnel");
	if (store_append(e, "HGET sbx:sb:{%s/%s}:tunnels %lld", tenant, id, (long long)port) < 0 ||
	    preview_sb_append(tenant, id, e) < 0 || store_collect(rep, 2, 0, e) < 0)
		return -1;
	v = reply_json(rep[0]);
	rc = preview_sb_from_reply(rep[1], &s);
	tid = json_string_value(json_object_get(v, "id"));
	fwd = json_string_value(json_object_get(v, "forward"));
	if (!tid || !preview_const_equal(tunnel_id, tid)) {
		json_decref(v);
		store_free_replies(rep, 2);
		return err_set(e, SBX_E_INVALID_TOKEN, "unknown tunnel");
	}
	if (rc != 0 || !preview_record_live(v, &s)) {
		/* Dead: the container it was made for is gone. */
		tunnel_forget(tenant, id, (int)port, rep[0]->str, tunnel_id, "restarted");
		json_decref(v);
		store_free_replies(rep, 2);
		return err_set(e, SBX_E_INVALID_TOKEN, "this tunnel is gone");
	}
	store_free_replies(rep, 2);
	if (strcmp(s.state, "running") != 0) {
		json_decref(v);
		return err_set(e, SBX_E_STALE_PREVIEW_URL, "the sandbox of this tunnel is not running");
	}
	if (!fwd || !preview_address_ok(fwd)) {
		json_decref(v);
		return err_set(e, SBX_E_INTERNAL, "tunnel record %s has a bad forward", tunnel_id);
	}
	snprintf(forward, PREVIEW_ADDR_MAX, "%s", fwd);
	json_decref(v);
	return 0;
}
