#include "lifecycle.h"
#include "apimetrics.h"
#include "rkeys.h"
#include "agentc.h"
#include "ceilings.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "placement.h"
#include "preview.h"
#include "scripts.h"
#include "snapstore.h"
#include "spec.h"
#include "store.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Rounds of re-reading a record that another worker changed meanwhile. */
#define LC_ATTEMPTS 6
/* How long a call waits for another one's sleep of the same sandbox to
 * finish (state stopping), and how often it looks. */
#define LC_TRANSITION_WAIT_MS 5000
#define LC_TRANSITION_POLL_MS 20

/* jansson's own cleanup helper (json_auto_t) under our naming. */
#define auto_json __attribute__((cleanup(json_decrefp)))

/* ---- body validation --------------------------------------------------- */

static const struct jsonv_field spec_fields[] = {
	{ "labels", JV_OBJECT, 0 },
	{ "sleepAfter", JV_INTEGER | JV_STRING, 0 },
	{ "keepAlive", JV_BOOL, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "image", JV_STRING, 0 },
	{ "resources", JV_OBJECT, 0 },
	{ "network", JV_STRING, 0 },
	{ "fromSnapshot", JV_STRING, 0 },
	{ "persist", JV_OBJECT, 0 },
	{ NULL, 0, 0 },
};

static const struct jsonv_field persist_fields[] = {
	{ "paths", JV_ARRAY, 1 },
	{ "intervalS", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

#define PERSIST_PATHS_MAX 16
#define PERSIST_INTERVAL_MIN_S 10
#define PERSIST_INTERVAL_MAX_S 86400

/* persist {paths, intervalS?}: 1-16 absolute paths below /, none with
 * "." or ".." parts (the agent normalises them further); intervalS, the
 * background saves' period, 10-86400. A canonical copy into s, or -1
 * with e. */
static int parse_persist(const json_t *v, struct lc_spec *s, struct sbx_err *e)
{
	const json_t *paths = json_object_get(v, "paths"), *p;
	int64_t interval = 0;
	size_t i;

	if (jsonv_check(v, persist_fields, "persist", e) < 0)
		return -1;
	if (json_object_get(v, "intervalS") &&
	    jsonv_int(v, "intervalS", PERSIST_INTERVAL_MIN_S, PERSIST_INTERVAL_MAX_S, &interval,
		      e) < 0)
		return err_set(e, SBX_E_VALIDATION, "persist.intervalS must be %d-%d (seconds)",
			       PERSIST_INTERVAL_MIN_S, PERSIST_INTERVAL_MAX_S);
	if (json_array_size(paths) == 0 || json_array_size(paths) > PERSIST_PATHS_MAX)
		return err_set(e, SBX_E_VALIDATION, "persist.paths must hold 1-%d paths",
			       PERSIST_PATHS_MAX);
	json_array_foreach(paths, i, p) {
		const char *x = json_string_value(p);

		if (!x || x[0] != '/' || !x[1] || strlen(x) > 4096 || strstr(x, "/../") ||
		    strstr(x, "/./") || strstr(x, "//") ||
		    (strlen(x) >= 3 && strcmp(x + strlen(x) - 3, "/..") == 0) ||
		    (strlen(x) >= 2 && strcmp(x + strlen(x) - 2, "/.") == 0))
			return err_set(e, SBX_E_VALIDATION,
				       "persist.paths holds absolute directories below /");
	}
	s->persist = interval ? json_pack("{s:O, s:I}", "paths", paths, "intervalS",
					  (json_int_t)interval)
			      : json_pack("{s:O}", "paths", paths);
	if (!s->persist)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	s->has |= LC_HAS_PERSIST;
	return 0;
}

json_t *lifecycle_resources_json(int64_t memory_mib, int64_t cpus_milli, int64_t pids,
				 int64_t disk_mib)
{
	json_t *cpus = cpus_milli % 1000 == 0 ? json_integer(cpus_milli / 1000)
					      : json_real((double)cpus_milli / 1000.0);

	return json_pack("{s:I,s:o,s:I,s:I}", "memoryMiB", (json_int_t)memory_mib, "cpus", cpus,
			 "pids", (json_int_t)pids, "diskMiB", (json_int_t)disk_mib);
}

/* resources: the shared rules (spec.c), then the operator ceilings. */
static int parse_resources(const json_t *res, const struct sbx_conf *c, struct lc_spec *s,
			   struct sbx_err *e)
{
	struct spec_resources r;

	spec_resources_default(c, &r);
	if (spec_resources(res, &r, e) < 0 ||
	    ceilings_check_sandbox(c, r.memory_mib, r.cpus_milli, r.pids, r.disk_mib, e) < 0)
		return -1;
	s->resources = lifecycle_resources_json(r.memory_mib, r.cpus_milli, r.pids, r.disk_mib);
	if (!s->resources)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	s->has |= LC_HAS_RESOURCES;
	return 0;
}

int lifecycle_parse_spec(const json_t *body, const struct sbx_conf *c, struct lc_spec *s,
			 struct sbx_err *e)
{
	json_t *v;

	memset(s, 0, sizeof(*s));
	if (jsonv_check(body, spec_fields, "the body", e) < 0)
		goto fail;
	if ((v = json_object_get(body, "labels"))) {
		if (spec_labels(v, e) < 0)
			goto fail;
		s->labels = json_deep_copy(v);
		s->has |= LC_HAS_LABELS;
	}
	if ((v = json_object_get(body, "env"))) {
		if (spec_env(v, 0, e) < 0)
			goto fail;
		s->env = json_deep_copy(v);
		s->has |= LC_HAS_ENV;
	}
	if ((v = json_object_get(body, "image"))) {
		if (spec_image(v, e) < 0)
			goto fail;
		snprintf(s->image, sizeof(s->image), "%s", json_string_value(v));
		s->has |= LC_HAS_IMAGE;
	}
	if ((v = json_object_get(body, "network"))) {
		if (spec_network(v, NULL, e) < 0)
			goto fail;
		snprintf(s->network, sizeof(s->network), "%s", json_string_value(v));
		s->has |= LC_HAS_NETWORK;
	}
	if ((v = json_object_get(body, "resources")) && parse_resources(v, c, s, e) < 0)
		goto fail;
	if ((v = json_object_get(body, "sleepAfter"))) {
		if (spec_sleep_after(v, &s->sleep_after_ms, e) < 0)
			goto fail;
		s->has |= LC_HAS_SLEEP_AFTER;
	}
	if ((v = json_object_get(body, "keepAlive"))) {
		s->keep_alive = json_is_true(v);
		s->has |= LC_HAS_KEEP_ALIVE;
	}
	if ((v = json_object_get(body, "fromSnapshot"))) {
		if (!snapstore_id_valid(json_string_value(v))) {
			err_set(e, SBX_E_VALIDATION, "fromSnapshot must be a snapshot id (sn-…)");
			goto fail;
		}
		snprintf(s->from_snapshot, sizeof(s->from_snapshot), "%s", json_string_value(v));
		s->has |= LC_HAS_FROM_SNAPSHOT;
	}
	if ((v = json_object_get(body, "persist")) && parse_persist(v, s, e) < 0)
		goto fail;
	if (((s->has & LC_HAS_LABELS) && !s->labels) || ((s->has & LC_HAS_ENV) && !s->env)) {
		err_set(e, SBX_E_INTERNAL, "out of memory");
		goto fail;
	}
	return 0;
fail:
	lifecycle_spec_release(s);
	return -1;
}

void lifecycle_spec_release(struct lc_spec *s)
{
	json_decref(s->labels);
	json_decref(s->env);
	json_decref(s->resources);
	json_decref(s->persist);
	s->labels = s->env = s->resources = s->persist = NULL;
	s->has = 0;
}

/* ---- pure record logic --------------------------------------------------- */

json_t *lifecycle_pending_merge(const json_t *applied, const json_t *pending,
				const struct lc_spec *s)
{
	json_t *out = json_is_object(pending) ? json_deep_copy(pending) : json_object();
	struct {
		unsigned bit;
		const char *name;
		json_t *val;
	} f[] = {
		{ LC_HAS_LABELS, "labels", s->labels ? json_incref(s->labels) : NULL },
		{ LC_HAS_RESOURCES, "resources", s->resources ? json_incref(s->resources) : NULL },
		{ LC_HAS_ENV, "env", s->env ? json_incref(s->env) : NULL },
		{ LC_HAS_IMAGE, "image", (s->has & LC_HAS_IMAGE) ? json_string(s->image) : NULL },
		{ LC_HAS_NETWORK, "network", (s->has & LC_HAS_NETWORK) ? json_string(s->network) : NULL },
	};

	for (size_t i = 0; i < ARRAY_SIZE(f); i++) {
		if (out && (s->has & f[i].bit) && f[i].val) {
			if (json_equal(f[i].val, json_object_get(applied, f[i].name)))
				json_object_del(out, f[i].name);
			else
				json_object_set(out, f[i].name, f[i].val);
		}
		json_decref(f[i].val);
	}
	return out;
}

static const char *fstr(const json_t *rec, const char *name)
{
	return json_string_value(json_object_get(rec, name));
}

static int64_t fint(const json_t *rec, const char *name, int64_t def)
{
	const char *v = fstr(rec, name);
	int64_t n;

	return v && util_parse_i64(v, INT64_MIN, INT64_MAX, &n) == 0 ? n : def;
}

/* A JSON field of the record parsed (an empty object when absent or bad). */
static json_t *fjson(const json_t *rec, const char *name)
{
	const char *v = fstr(rec, name);
	json_t *j = v && *v ? json_loads(v, JSON_REJECT_DUPLICATES, NULL) : NULL;

	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return j ? j : json_object();
}

static json_t *str_or_null(const char *v)
{
	return v && *v && ids_valid_utf8(v, strlen(v)) ? json_string(v) : json_null();
}

void lifecycle_pending_view(json_t *pending)
{
	json_t *penv = json_object_get(pending, "env");

	/* env may hold secrets: only the names of pending variables are shown. */
	if (penv) {
		json_t *names = json_array();
		const char *k;
		json_t *v;
		json_object_foreach(penv, k, v)
			json_array_append_new(names, json_string(k));
		json_object_set_new(pending, "env", names ? names : json_null());
	}
}

json_t *lifecycle_record_json(const json_t *f)
{
	json_t *o = json_object(), *pending = fjson(f, "pending");
	const char *keep = fstr(f, "keepAlive");

	if (!o || !pending) {
		json_decref(o);
		json_decref(pending);
		return NULL;
	}
	lifecycle_pending_view(pending);
	json_object_set_new(o, "id", str_or_null(fstr(f, "id")));
	json_object_set_new(o, "state", str_or_null(fstr(f, "state")));
	json_object_set_new(o, "node", str_or_null(fstr(f, "node")));
	json_object_set_new(o, "generation", json_integer(fint(f, "generation", 0)));
	json_object_set_new(o, "epoch", json_integer(fint(f, "epoch", 0)));
	json_object_set_new(o, "labels", fjson(f, "labels"));
	json_object_set_new(o, "pending", pending);
	json_object_set_new(o, "sleepAfter", json_integer(fint(f, "sleepAfter", 0)));
	json_object_set_new(o, "keepAlive", json_boolean(keep && strcmp(keep, "1") == 0));
	json_object_set_new(o, "resources", fjson(f, "resources"));
	json_object_set_new(o, "network", str_or_null(fstr(f, "network")));
	json_object_set_new(o, "image", str_or_null(fstr(f, "image")));
	json_object_set_new(o, "createdAt", str_or_null(fstr(f, "createdAt")));
	json_object_set_new(o, "startedAt", str_or_null(fstr(f, "startedAt")));
	json_object_set_new(o, "lastActiveAt", str_or_null(fstr(f, "lastActiveAt")));
	if (fstr(f, "restoreFrom") && *fstr(f, "restoreFrom"))
		json_object_set_new(o, "restoreFrom", json_string(fstr(f, "restoreFrom")));
	if (fstr(f, "persist") && *fstr(f, "persist"))
		json_object_set_new(o, "persist", fjson(f, "persist"));
	if (fint(f, "persistedAt", 0) > 0) {
		char when[32];

		util_iso8601(fint(f, "persistedAt", 0), when);
		json_object_set_new(o, "persistedAt", json_string(when));
		/* the persist script makes each save the restoreFrom */
		json_object_set_new(o, "persistedSnapshot", str_or_null(fstr(f, "restoreFrom")));
		json_object_set_new(o, "persistedAgeS",
				    json_integer(util_wall_ms() > fint(f, "persistedAt", 0)
							 ? (util_wall_ms() - fint(f, "persistedAt", 0)) / 1000
							 : 0));
	}
	return o;
}

/* ---- Redis helpers --------------------------------------------------------- */

/* Run a script that changes the record of tenant/id together with its
 * index entries: KEYS the record and the tenant's set (quota and listing).
 * New reply or NULL with e. */
static redisReply *run_indexed(enum rscript_id script, const char *tenant, const char *id,
			       int nargs, const char **args, struct sbx_err *e)
{
	char key[RKEYS_MAX], tkey[RKEYS_MAX];

	rkeys_sandbox(key, tenant, id);
	rkeys_tenant(tkey, tenant, "sandboxes");
	return scripts_run(script, 2, (const char *[]){ key, tkey }, nargs, args, e);
}

json_t *lifecycle_hash_json(const redisReply *r)
{
	json_t *o;

	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
		return NULL;
	o = json_object();
	if (!o)
		return NULL;
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const redisReply *k = r->element[i], *v = r->element[i + 1];
		if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
		    strlen(v->str) == v->len && ids_valid_utf8(v->str, v->len))
			json_object_set_new(o, k->str, json_stringn_nocheck(v->str, v->len));
	}
	if (!fstr(o, "state") || !fstr(o, "epoch")) {
		json_decref(o);   /* a partial hash is no sandbox */
		return NULL;
	}
	return o;
}

int lifecycle_load(const char *tenant, const char *id, json_t **rec, struct sbx_err *e)
{
	auto_reply redisReply *r = store_command(e, "HGETALL %s", RK_SANDBOX(tenant, id));

	*rec = NULL;
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: HGETALL gave no array");
	*rec = lifecycle_hash_json(r);
	return 0;
}

static void now_iso(char out[32])
{
	util_iso8601(util_wall_ms(), out);
}

/* Append the event XADD (collected by the caller's batch). */
static int append_event(const char *type, const char *tenant, const char *id, const char *node,
			const char *generation, const char *epoch, struct sbx_err *e)
{
	apimetrics_event(type);
	return store_append(e,
			    RKEYS_XADD_EVENT "type %s tenant %s id %s node %s generation %s epoch %s",
			    type, tenant, id, node ? node : "", generation ? generation : "",
			    epoch ? epoch : "");
}

/* Run a batch of n appended commands; failures are logged, not returned
 * (indexes and events follow the record, which is already written). */
static void flush_batch(size_t n, const char *what)
{
	redisReply *reps[64];
	struct sbx_err e = { 0 };

	if (n == 0)
		return;
	if (n > ARRAY_SIZE(reps) || store_collect(reps, n, STORE_RAW_ERRORS, &e) < 0) {
		log_warn("%s: %s", what, e.msg);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (reps[i]->type == REDIS_REPLY_ERROR)
			log_warn("%s: %.200s", what, reps[i]->str);
	store_free_replies(reps, n);
}

/* ---- the agent --------------------------------------------------------------- */

static int agent_path(char *out, size_t n, const char *tenant, const char *id, const char *tail)
{
	int w = snprintf(out, n, "/agent/v1/sandboxes/%s/%s%s", tenant, id, tail);
	return w < 0 || (size_t)w >= n ? -1 : 0;
}

static int agent_code_is(const struct agentc_reply *rep, const char *code)
{
	const char *c = json_string_value(json_object_get(json_object_get(rep->body, "error"), "code"));
	return c && strcmp(c, code) == 0;
}

/* The agent's create/start body from the record. New reference. */
static json_t *start_body(const json_t *rec)
{
	const char *keep = fstr(rec, "keepAlive");
	const char *from = fstr(rec, "restoreFrom"), *persist = fstr(rec, "persist");

	return json_pack("{s:I,s:I,s:s,s:s,s:o,s:o,s:o,s:I,s:b,s:s*,s:o*}",
			 "generation", (json_int_t)fint(rec, "generation", 1),
			 "epoch", (json_int_t)fint(rec, "epoch", 0),
			 "image", fstr(rec, "image") ? fstr(rec, "image") : "default",
			 "network", fstr(rec, "network") ? fstr(rec, "network") : "none",
			 "resources", fjson(rec, "resources"),
			 "env", fjson(rec, "env"),
			 "labels", fjson(rec, "labels"),
			 "sleepAfter", (json_int_t)fint(rec, "sleepAfter", 600000),
			 "keepAlive", keep && strcmp(keep, "1") == 0,
			 "restoreFrom", from && *from ? from : NULL,
			 "persist", persist && *persist ? fjson(rec, "persist") : NULL);
}

/* Tell the agent at address to run the record's generation. 0 running,
 * 1 the agent knows a newer epoch (re-read), -1 with e. */
static int agent_start(const char *tenant, const char *id, const json_t *rec,
		       const char *address, struct sbx_err *e)
{
	char path[256];
	int64_t epoch = fint(rec, "epoch", 0);
	auto_json json_t *body = start_body(rec);

	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	if (agent_path(path, sizeof(path), tenant, id, "") < 0)
		return err_set(e, SBX_E_INTERNAL, "agent path too long");
	for (int round = 0; round < 2; round++) {
		struct agentc_reply rep = { 0 };

		if (agentc_call_timeout("PUT", address, path, body, epoch,
					agentc_pull_timeout_ms(fstr(rec, "image")), &rep, e) < 0)
			return -1;
		if (rep.status == 200 || rep.status == 201) {
			agentc_reply_release(&rep);
			return 0;
		}
		if (rep.status == 409 && agent_code_is(&rep, "STALE_EPOCH")) {
			agentc_reply_release(&rep);
			return 1;
		}
		if (rep.status == 409 && round == 0) {
			/* A leftover of a newer generation (Redis lost the record):
			 * the record is the truth, so clear the leftover and start. */
			struct agentc_reply del = { 0 };
			agentc_reply_release(&rep);
			if (agentc_call("DELETE", address, path, NULL, epoch, &del, e) < 0)
				return -1;
			agentc_reply_release(&del);
			continue;
		}
		agentc_error(address, &rep, "start it", e);
		agentc_reply_release(&rep);
		return -1;
	}
	return err_set(e, SBX_E_NODE_UNAVAILABLE, "the node of the sandbox refused to start it");
}

/* Best-effort DELETE on an agent (errors logged). 1 when it answered
 * STALE_EPOCH, else 0. */
static int agent_delete(const char *tenant, const char *id, const char *address, int64_t epoch)
{
	struct agentc_reply rep = { 0 };
	struct sbx_err e = { 0 };
	char path[256];
	int stale = 0;

	if (agent_path(path, sizeof(path), tenant, id, "") < 0)
		return 0;
	if (agentc_call("DELETE", address, path, NULL, epoch, &rep, &e) < 0) {
		log_info("delete of %s/%s on %s: %s", tenant, id, address, e.msg);
		return 0;
	}
	stale = rep.status == 409 && agent_code_is(&rep, "STALE_EPOCH");
	if (rep.status != 204 && rep.status != 200 && rep.status != 404)
		log_info("delete of %s/%s on %s answered %ld", tenant, id, address, rep.status);
	agentc_reply_release(&rep);
	return stale;
}

/* ---- scripts ------------------------------------------------------------------ */

/* set_state CAS: 1 done, 0 the epoch moved on, -1 with e (gone: SANDBOX_NOT_FOUND). */
static int set_state(const char *tenant, const char *id, const char *epoch, const char *state,
		     int started, struct sbx_err *e)
{
	char key[RKEYS_MAX], now[32];
	const char *args[6] = { epoch, state, "lastActiveAt", now, "startedAt", now };
	auto_reply redisReply *r = NULL;

	rkeys_sandbox(key, tenant, id);
	now_iso(now);
	r = scripts_run(RSCRIPT_SET_STATE, 1, (const char *[]){ key }, started ? 6 : 4, args, e);
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_INTEGER)
		return err_set(e, SBX_E_INTERNAL, "set_state: unexpected reply");
	if (r->integer < 0)
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	return (int)r->integer;
}

/* The start script: a new container of the record on node. 1 done, 0 the
 * record moved on, -1 with e. */
static int start_new(const char *tenant, const char *id, const json_t *rec, const char *node,
		     const char *event, struct sbx_err *e)
{
	char key[RKEYS_MAX], now[32];
	auto_reply redisReply *r = NULL;

	rkeys_sandbox(key, tenant, id);
	now_iso(now);
	r = scripts_run(RSCRIPT_START, 1, (const char *[]){ key }, 4,
			(const char *[]){ fstr(rec, "epoch"), node, "1", now }, e);
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
		return err_set(e, SBX_E_INTERNAL, "start: unexpected reply");
	if (r->element[0]->type == REDIS_REPLY_INTEGER) {
		if (r->element[0]->integer == -1)
			return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
		return 0;
	}
	if (r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING)
		return err_set(e, SBX_E_INTERNAL, "start: unexpected reply");
	/* The script moved the label and node sets with the record. */
	if (append_event(event, tenant, id, node, r->element[1]->str, r->element[0]->str, e) == 0)
		flush_batch(1, "event after a start");
	return 1;
}

static int is_state(const json_t *rec, const char *s)
{
	const char *v = fstr(rec, "state");
	return v && strcmp(v, s) == 0;
}

/* The node named by the record (alive 0 when it names none). */
static int record_node(const json_t *rec, struct placement_node *pn, struct sbx_err *e)
{
	const char *node = fstr(rec, "node");

	memset(pn, 0, sizeof(*pn));
	if (!node || !ids_valid_node(node))
		return 0;
	return placement_fetch_node(node, pn, e);
}

/* The record of a sandbox that must exist: 0 with *rec (new reference),
 * -1 with e (SANDBOX_NOT_FOUND when there is none). */
static int load_existing(const char *tenant, const char *id, json_t **rec, struct sbx_err *e)
{
	if (lifecycle_load(tenant, id, rec, e) < 0)
		return -1;
	if (!*rec)
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	return 0;
}

/* load_existing, and the node its record names (record_node). */
static int load_with_node(const char *tenant, const char *id, json_t **rec,
			  struct placement_node *pn, struct sbx_err *e)
{
	if (load_existing(tenant, id, rec, e) < 0)
		return -1;
	return record_node(*rec, pn, e);
}

/* ---- operations ------------------------------------------------------------------ */

/* The fast path of every data call: a running sandbox on a live node, read
 * with the few fields it needs (never env, which may be large). 1 with o
 * filled, 0 when the slow path must decide, -1 with e. */
static int running_owner(const char *tenant, const char *id, struct lc_owner *o,
			 struct sbx_err *e)
{
	auto_reply redisReply *r = store_command(e, "HMGET %s state node epoch generation",
						  RK_SANDBOX(tenant, id));
	struct placement_node pn;

	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: HMGET gave no array");
	for (size_t i = 0; i < 4; i++)
		if (r->element[i]->type != REDIS_REPLY_STRING)
			return 0;
	if (strcmp(r->element[0]->str, "running") != 0 || !ids_valid_node(r->element[1]->str) ||
	    util_parse_i64(r->element[2]->str, 0, INT64_MAX, &o->epoch) < 0 ||
	    util_parse_i64(r->element[3]->str, 0, INT64_MAX, &o->generation) < 0)
		return 0;
	if (placement_fetch_node(r->element[1]->str, &pn, e) < 0)
		return -1;
	if (!pn.alive || !pn.address[0])
		return 0;
	snprintf(o->node, sizeof(o->node), "%s", pn.name);
	snprintf(o->address, sizeof(o->address), "%s", pn.address);
	return 1;
}

/* Wait, bounded, while another call puts tenant/id to sleep (state
 * stopping on a live node). 0 when it is no longer stopping at epoch (or
 * the wait is over: the caller takes over), -1 with e. */
static int wait_stopping(const char *tenant, const char *id, const char *epoch,
			 struct sbx_err *e)
{
	int64_t deadline = util_now_ms() + LC_TRANSITION_WAIT_MS;

	while (util_now_ms() < deadline) {
		auto_reply redisReply *r = NULL;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = LC_TRANSITION_POLL_MS * 1000000L };

		nanosleep(&ts, NULL);
		r = store_command(e, "HMGET %s state epoch", RK_SANDBOX(tenant, id));
		if (!r)
			return -1;
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
		    strcmp(r->element[0]->str, "stopping") != 0 || strcmp(r->element[1]->str, epoch) != 0)
			return 0;
	}
	log_info("sandbox %s/%s is still stopping after %d ms; starting it anyway", tenant, id,
		 LC_TRANSITION_WAIT_MS);
	return 0;
}

/* lifecycle_ensure_running; with seen, the record last read (new reference
 * or NULL) and never the fast path. */
static int ensure_running(const char *tenant, const char *id, struct lc_owner *o, json_t **seen,
			  struct sbx_err *e)
{
	int fast = seen ? 0 : running_owner(tenant, id, o, e);
	int waited = 0;

	if (fast != 0)
		return fast < 0 ? -1 : 0;
	for (int attempt = 0; attempt < LC_ATTEMPTS; attempt++) {
		auto_json json_t *rec = NULL;
		struct placement_node pn, target;
		struct placement_need need = { 0 };
		int rc;

		if (load_with_node(tenant, id, &rec, &pn, e) < 0)
			return -1;
		if (seen) {
			json_decref(*seen);
			*seen = json_incref(rec);
		}
		if (pn.alive && pn.address[0] && (is_state(rec, "running") || is_state(rec, "starting"))) {
			if (is_state(rec, "starting")) {
				rc = agent_start(tenant, id, rec, pn.address, e);
				if (rc < 0)
					return -1;
				if (rc > 0)
					continue;
				rc = set_state(tenant, id, fstr(rec, "epoch"), "running", 1, e);
				if (rc < 0) {
					if (e->code == SBX_E_SANDBOX_NOT_FOUND)
						agent_delete(tenant, id, pn.address, fint(rec, "epoch", 0));
					return -1;
				}
				if (rc == 0)
					continue;
			}
			snprintf(o->node, sizeof(o->node), "%s", pn.name);
			snprintf(o->address, sizeof(o->address), "%s", pn.address);
			o->epoch = fint(rec, "epoch", 0);
			o->generation = fint(rec, "generation", 0);
			return 0;
		}
		/* Being put to sleep by another call: let it finish, then wake it
		 * (once; a sleep that never finishes is taken over). */
		if (pn.alive && pn.address[0] && is_state(rec, "stopping") && !waited) {
			waited = 1;
			if (wait_stopping(tenant, id, fstr(rec, "epoch"), e) < 0)
				return -1;
			attempt--;
			continue;
		}
		/* Asleep, or its node is gone: a new container, where there is room. */
		ceilings_record_need(rec, &need);
		if (pn.alive && placement_room_for(&pn, &need))
			target = pn;
		else if (placement_pick(&need, &target, e) < 0)
			return -1;
		rc = start_new(tenant, id, rec, target.name,
			       pn.alive || !pn.name[0] || strcmp(pn.name, target.name) == 0 ? "started"
											   : "replaced",
			       e);
		if (rc < 0)
			return -1;
	}
	return err_set(e, SBX_E_NODE_UNAVAILABLE, "sandbox '%s' keeps changing; try again", id);
}

int lifecycle_ensure_running(const char *tenant, const char *id, struct lc_owner *o,
			     struct sbx_err *e)
{
	return ensure_running(tenant, id, o, NULL, e);
}

/* Settings at once, container fields to pending; CAS on pending+generation.
 * 0 done, -1 with e. */
static int update_record(const char *tenant, const char *id, const struct lc_spec *s,
			 struct sbx_err *e)
{
	char key[RKEYS_MAX], sleep_ms[32] = "";
	const char *keep = "";

	if (!(s->has & (LC_HAS_CONTAINER | LC_HAS_SLEEP_AFTER | LC_HAS_KEEP_ALIVE)))
		return 0;
	rkeys_sandbox(key, tenant, id);
	if (s->has & LC_HAS_SLEEP_AFTER)
		util_xsnprintf(sleep_ms, sizeof(sleep_ms), "%lld", (long long)s->sleep_after_ms);
	if (s->has & LC_HAS_KEEP_ALIVE)
		keep = s->keep_alive ? "1" : "0";
	for (int attempt = 0; attempt < LC_ATTEMPTS; attempt++) {
		auto_json json_t *rec = NULL, *applied = NULL, *pending = NULL, *merged = NULL;
		auto_free char *text = NULL;
		auto_reply redisReply *r = NULL;
		const char *old_pending;
		struct placement_node pn;

		if (load_existing(tenant, id, &rec, e) < 0)
			return -1;
		if ((s->has & LC_HAS_RESOURCES) &&
		    ceilings_tenant_resize(tenant, id, rec, s->resources, e) < 0)
			return -1;
		old_pending = fstr(rec, "pending") ? fstr(rec, "pending") : "{}";
		applied = json_pack("{s:o,s:o,s:o,s:s,s:s}", "labels", fjson(rec, "labels"),
				    "resources", fjson(rec, "resources"), "env", fjson(rec, "env"),
				    "image", fstr(rec, "image") ? fstr(rec, "image") : "",
				    "network", fstr(rec, "network") ? fstr(rec, "network") : "");
		pending = fjson(rec, "pending");
		merged = applied && pending ? lifecycle_pending_merge(applied, pending, s) : NULL;
		text = merged ? json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		if (!text)
			return err_set(e, SBX_E_INTERNAL, "out of memory");
		r = scripts_run(RSCRIPT_UPDATE, 1, (const char *[]){ key }, 5,
				(const char *[]){ old_pending, fstr(rec, "generation") ? fstr(rec, "generation") : "",
						  text, sleep_ms, keep }, e);
		if (!r)
			return -1;
		if (r->type != REDIS_REPLY_INTEGER)
			return err_set(e, SBX_E_INTERNAL, "update: unexpected reply");
		if (r->integer < 0)
			return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
		if (r->integer == 0)
			continue;
		/* Settings apply at once: tell a running container's agent. */
		if ((s->has & (LC_HAS_SLEEP_AFTER | LC_HAS_KEEP_ALIVE)) && is_state(rec, "running") &&
		    record_node(rec, &pn, e) == 0 && pn.alive && pn.address[0]) {
			auto_json json_t *body = json_object();
			struct agentc_reply rep = { 0 };
			struct sbx_err ae = { 0 };
			char path[256];
			if (body && agent_path(path, sizeof(path), tenant, id, "") == 0) {
				if (s->has & LC_HAS_SLEEP_AFTER)
					json_object_set_new(body, "sleepAfter", json_integer(s->sleep_after_ms));
				if (s->has & LC_HAS_KEEP_ALIVE)
					json_object_set_new(body, "keepAlive", json_boolean(s->keep_alive));
				if (agentc_call("PATCH", pn.address, path, body, fint(rec, "epoch", 0),
						&rep, &ae) < 0)
					log_info("PATCH of %s/%s on %s: %s", tenant, id, pn.address, ae.msg);
				else if (rep.status >= 300)
					log_debug("PATCH of %s/%s on %s answered %ld", tenant, id,
						  pn.address, rep.status);
				agentc_reply_release(&rep);
			}
		}
		return 0;
	}
	return err_set(e, SBX_E_CONFLICT, "sandbox '%s' keeps changing; try again", id);
}

int lifecycle_update(const char *tenant, const char *id, const struct lc_spec *s,
		     struct sbx_err *e)
{
	auto_json json_t *rec = NULL;

	if (load_existing(tenant, id, &rec, e) < 0)
		return -1;
	return update_record(tenant, id, s, e);
}

/* Remove a sandbox whose record says epoch (CAS), with its index entries
 * (one script). 1 removed, 0 the record moved on, -1 with e (gone is 1). */
static int destroy_record(const char *tenant, const char *id, const char *epoch,
			  struct sbx_err *e)
{
	auto_reply redisReply *r = run_indexed(RSCRIPT_DESTROY, tenant, id, 3,
						(const char *[]){ epoch, tenant, id }, e);

	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER)
		return err_set(e, SBX_E_INTERNAL, "destroy: unexpected reply");
	if (r->element[0]->integer == 0)
		return 0;
	if (r->element[0]->integer == 1 && r->elements == 3 &&
	    r->element[1]->type == REDIS_REPLY_STRING && r->element[2]->type == REDIS_REPLY_STRING &&
	    append_event("destroyed", tenant, id, r->element[1]->str, r->element[2]->str, epoch, e) == 0)
		flush_batch(1, "event after a destroy");
	return 1;
}

int lifecycle_repair_index(const char *tenant, const char *id, long long *changed,
			   struct sbx_err *e)
{
	auto_reply redisReply *r = run_indexed(RSCRIPT_REPAIR, tenant, id, 2,
						(const char *[]){ tenant, id }, e);

	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_INTEGER)
		return err_set(e, SBX_E_INTERNAL, "repair: unexpected reply");
	*changed = r->integer;
	return 0;
}

int lifecycle_destroy(const char *tenant, const char *id, struct sbx_err *e)
{
	for (int attempt = 0; attempt < LC_ATTEMPTS; attempt++) {
		auto_json json_t *rec = NULL;
		struct placement_node pn;
		int rc;

		if (lifecycle_load(tenant, id, &rec, e) < 0)
			return -1;
		if (!rec) {
			/* Nothing (left) to destroy. An index entry without a record
			 * goes too — in the script that sees the record absent, so a
			 * create that just won keeps its entry. */
			long long changed;
			return lifecycle_repair_index(tenant, id, &changed, e);
		}
		if (record_node(rec, &pn, e) < 0)
			return -1;
		if (pn.alive && pn.address[0] &&
		    agent_delete(tenant, id, pn.address, fint(rec, "epoch", 0)) > 0)
			continue;
		rc = destroy_record(tenant, id, fstr(rec, "epoch"), e);
		if (rc < 0)
			return -1;
		if (rc > 0) {
			/* Tokens and tunnels die with the sandbox (their index keys
			 * live in other slots than the record). */
			preview_forget_sandbox(tenant, id);
			return 0;
		}
	}
	return err_set(e, SBX_E_CONFLICT, "sandbox '%s' keeps changing; try again", id);
}

int lifecycle_restart(const char *tenant, const char *id, struct sbx_err *e)
{
	struct lc_owner o;

	for (int attempt = 0; attempt < LC_ATTEMPTS; attempt++) {
		auto_json json_t *rec = NULL;
		struct placement_node pn, target;
		struct placement_need need = { 0 };
		int rc;

		if (load_with_node(tenant, id, &rec, &pn, e) < 0)
			return -1;
		/* Its own node if alive (a running one already holds its slot). */
		ceilings_record_need(rec, &need);
		if (pn.alive && pn.address[0] &&
		    (is_state(rec, "running") || is_state(rec, "starting") ||
		     placement_room_for(&pn, &need)))
			target = pn;
		else if (placement_pick(&need, &target, e) < 0)
			return -1;
		rc = start_new(tenant, id, rec, target.name, "restarted", e);
		if (rc < 0)
			return -1;
		if (rc > 0)
			return lifecycle_ensure_running(tenant, id, &o, e);
	}
	return err_set(e, SBX_E_CONFLICT, "sandbox '%s' keeps changing; try again", id);
}

/* Ask the agent at address to stop the container of rec. 0 stopped (or
 * not there), 1 the agent knows a newer epoch, -1 with e. */
static int agent_stop(const char *tenant, const char *id, const json_t *rec, const char *address,
		      struct sbx_err *e)
{
	struct agentc_reply rep = { 0 };
	char path[256];
	int stale;

	if (agent_path(path, sizeof(path), tenant, id, "/stop") < 0)
		return err_set(e, SBX_E_INTERNAL, "agent path too long");
	if (agentc_call("POST", address, path, NULL, fint(rec, "epoch", 0), &rep, e) < 0)
		return -1;
	stale = rep.status == 409 && agent_code_is(&rep, "STALE_EPOCH");
	if (!stale && rep.status != 200 && rep.status != 204 && rep.status != 404) {
		agentc_error(address, &rep, "stop it", e);
		agentc_reply_release(&rep);
		return -1;
	}
	agentc_reply_release(&rep);
	return stale;
}

int lifecycle_sleep(const char *tenant, const char *id, struct sbx_err *e)
{
	for (int attempt = 0; attempt < LC_ATTEMPTS; attempt++) {
		auto_json json_t *rec = NULL;
		struct placement_node pn;
		int rc;

		if (load_existing(tenant, id, &rec, e) < 0)
			return -1;
		if (is_state(rec, "sleeping"))
			return 0;
		if (record_node(rec, &pn, e) < 0)
			return -1;
		if (pn.alive && pn.address[0]) {
			/* Stopping first: data calls routed from now on wait for
			 * the sleep instead of reaching a container that is going. */
			if (!is_state(rec, "stopping")) {
				rc = set_state(tenant, id, fstr(rec, "epoch"), "stopping", 0, e);
				if (rc < 0)
					return -1;
				if (rc == 0)
					continue;
			}
			rc = agent_stop(tenant, id, rec, pn.address, e);
			if (rc < 0) {
				/* The container may still run: say so again (the
				 * agent's sweep reports it if it stopped). */
				struct sbx_err re = { 0 };
				if (set_state(tenant, id, fstr(rec, "epoch"), "running", 0, &re) < 0)
					log_warn("sandbox %s/%s stays stopping: %s", tenant, id, re.msg);
				return -1;
			}
			if (rc > 0)
				continue;
		}
		rc = set_state(tenant, id, fstr(rec, "epoch"), "sleeping", 0, e);
		if (rc < 0)
			return -1;
		if (rc > 0) {
			if (append_event("slept", tenant, id, fstr(rec, "node"), fstr(rec, "generation"),
					 fstr(rec, "epoch"), e) == 0)
				flush_batch(1, "event");
			return 0;
		}
	}
	return err_set(e, SBX_E_CONFLICT, "sandbox '%s' keeps changing; try again", id);
}

/* The create script for a new sandbox on node: the record, its quota slot
 * (the tenant's set holds fewer than quota_sandboxes others) and its index
 * entries at once. 1 created, 0 it existed, -1 with e (QUOTA_EXCEEDED, …). */
static int create_record(const struct sbx_conf *c, const char *tenant, const char *id,
			 const struct lc_spec *s, const char *node, int64_t quota_sandboxes,
			 char epoch[32], struct sbx_err *e)
{
	char now[32], sleep_ms[32], quota[32];
	auto_free char *labels = NULL, *resources = NULL, *env = NULL, *persist = NULL;
	auto_json json_t *defres = NULL;
	auto_reply redisReply *r = NULL;

	defres = lifecycle_resources_json(c->sandbox.memory_mib, c->sandbox.cpus_milli,
					  c->sandbox.pids, c->sandbox.disk_mib);
	labels = s->labels ? json_dumps(s->labels, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}");
	env = s->env ? json_dumps(s->env, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}");
	resources = json_dumps(s->resources ? s->resources : defres, JSON_COMPACT | JSON_SORT_KEYS);
	persist = s->persist ? json_dumps(s->persist, JSON_COMPACT) : strdup("");
	if (!labels || !env || !resources || !persist)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	now_iso(now);
	snprintf(sleep_ms, sizeof(sleep_ms), "%lld",
		 (long long)((s->has & LC_HAS_SLEEP_AFTER) ? s->sleep_after_ms : c->sandbox.sleep_after_ms));
	util_xsnprintf(quota, sizeof(quota), "%lld", (long long)quota_sandboxes);
	if (s->has & LC_HAS_FROM_SNAPSHOT) {
		/* the snapshot is the tenant's, and there: else nothing is made */
		auto_reply redisReply *x = store_command(e, "HEXISTS %s id",
							 RK_SNAPSHOT(tenant, s->from_snapshot));

		if (!x)
			return -1;
		if (x->type != REDIS_REPLY_INTEGER || x->integer != 1)
			return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "no snapshot '%s'",
				       s->from_snapshot);
	}
	r = run_indexed(RSCRIPT_CREATE, tenant, id, 14,
			(const char *[]){ tenant, id, node, sleep_ms,
					  (s->has & LC_HAS_KEEP_ALIVE) && s->keep_alive ? "1" : "0",
					  labels, resources,
					  (s->has & LC_HAS_NETWORK) ? s->network : "none",
					  (s->has & LC_HAS_IMAGE) ? s->image : "default", env, now,
					  quota, s->from_snapshot, persist },
			e);
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING)
		return err_set(e, SBX_E_INTERNAL, "create: unexpected reply");
	if (r->element[0]->integer < 0)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "tenant '%s' has %lld sandboxes, its quota",
			       tenant, (long long)quota_sandboxes);
	if (r->element[0]->integer == 0)
		return 0;
	snprintf(epoch, 32, "%s", r->element[1]->str);
	if (append_event("created", tenant, id, node, "1", epoch, e) == 0)
		flush_batch(1, "event after a create");
	return 1;
}

/* The record as a caller saw it run: the fields of rec with the state,
 * node, epoch and generation of owner o. New reference, NULL when out of
 * memory. */
static json_t *running_view(const json_t *rec, const struct lc_owner *o)
{
	json_t *v = json_deep_copy(rec);
	char num[32];

	if (!v)
		return NULL;
	json_object_set_new(v, "state", json_string("running"));
	json_object_set_new(v, "node", json_string(o->node));
	util_xsnprintf(num, sizeof(num), "%lld", (long long)o->epoch);
	json_object_set_new(v, "epoch", json_string(num));
	util_xsnprintf(num, sizeof(num), "%lld", (long long)o->generation);
	json_object_set_new(v, "generation", json_string(num));
	return v;
}

/* The canonical reference of s's registry image into buf (for placement
 * to prefer the nodes that hold it), or NULL for a local image. */
static const char *placement_image(const struct sbx_conf *c, const struct lc_spec *s, char *buf,
				   size_t size)
{
	struct imgref ref;

	if (!(s->has & LC_HAS_IMAGE) || !strpbrk(s->image, ":/@") ||
	    imgref_parse(s->image, c->images.default_registry, (int)c->images.library_prefix, &ref,
			 NULL) < 0 ||
	    imgref_format(&ref, buf, size) < 0)
		return NULL;
	return buf;
}

int lifecycle_put(const struct sbx_conf *c, const char *tenant, const char *id,
		  const struct lc_spec *s, int *created, json_t **view, struct sbx_err *e)
{
	struct lc_owner o;
	char full[128] = "";   /* a node that answered NO_CAPACITY: placed elsewhere */

	*created = 0;
	*view = NULL;
	for (int attempt = 0; attempt < LC_ATTEMPTS; attempt++) {
		auto_json json_t *rec = NULL, *seen = NULL, *now = NULL;
		struct placement_node target;
		struct placement_need need = { 0 };
		struct ceilings_tenant lim;
		char epoch[32], canon[IMGREF_MAX];
		int rc;

		if (lifecycle_load(tenant, id, &rec, e) < 0)
			return -1;
		if (rec) {
			if (update_record(tenant, id, s, e) < 0 ||
			    ensure_running(tenant, id, &o, NULL, e) < 0) {
				if (e->code == SBX_E_SANDBOX_NOT_FOUND)
					continue;   /* destroyed meanwhile: create it again */
				return -1;
			}
		} else {
			if (ceilings_tenant_load(tenant, &lim, NULL, e) < 0)
				return -1;
			need.memory_mib = c->sandbox.memory_mib;
			need.cpus_milli = c->sandbox.cpus_milli;
			if (s->resources)
				ceilings_resources_need(s->resources, &need);
			need.image = placement_image(c, s, canon, sizeof(canon));
			need.avoid = full[0] ? full : NULL;
			if (placement_pick(&need, &target, e) < 0)
				return -1;
			rc = create_record(c, tenant, id, s, target.name, lim.sandboxes, epoch, e);
			if (rc < 0)
				return -1;
			if (rc == 0)
				continue;   /* another call created it first: take the existing path */
			/* A member of the tenant's set now: its memory and cpus count
			 * against the tenant's sums, or it goes again. */
			if (ceilings_tenant_reserve(&lim, tenant, id, &need, e) < 0) {
				struct sbx_err de = { 0 };
				if (lifecycle_destroy(tenant, id, &de) < 0)
					log_warn("cannot remove %s/%s: %s", tenant, id, de.msg);
				return -1;
			}
			if (ensure_running(tenant, id, &o, &seen, e) < 0) {
				struct sbx_err de = { 0 };
				int64_t ep = 0;

				if (e->code == SBX_E_SANDBOX_NOT_FOUND)
					continue;   /* a DELETE won meanwhile: create it again */
				/* Leave nothing half-created behind. */
				log_warn("first start of %s/%s failed (%s); removing it", tenant, id, e->msg);
				(void)util_parse_i64(epoch, 0, INT64_MAX, &ep);
				agent_delete(tenant, id, target.address, ep);
				if (destroy_record(tenant, id, epoch, &de) < 0)
					log_warn("cannot remove %s/%s: %s", tenant, id, de.msg);
				/* a node full before its registry entry says so: once
				 * more on another (placement answers NO_CAPACITY
				 * when none has room) */
				if (e->code == SBX_E_NO_CAPACITY && !full[0] && de.code == SBX_E_NONE) {
					snprintf(full, sizeof(full), "%s", target.name);
					continue;
				}
				return -1;
			}
			*created = 1;
		}
		/* The answer is the record now; when a DELETE has won since, the
		 * record as this call saw it run (the PUT happened first): for a
		 * new one the last the start read, else the one read above. */
		if (lifecycle_load(tenant, id, &now, e) < 0)
			return -1;
		*view = now ? steal_ptr(&now) : running_view(seen ? seen : rec, &o);
		if (!*view)
			return err_set(e, SBX_E_INTERNAL, "out of memory");
		return 0;
	}
	return err_set(e, SBX_E_CONFLICT, "sandbox '%s' keeps changing; try again", id);
}
