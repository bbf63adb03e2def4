/*
 * Tunnels (control) and the tunnel-host decision:
 *
 *   POST   /v1/sandboxes/{id}/tunnels/{port} {provider?} -> {id, port, url, provider, generation, createdAt}
 *   GET    /v1/sandboxes/{id}/tunnels        -> {tunnels:[…]} (Redis only)
 *   DELETE /v1/sandboxes/{id}/tunnels/{port} -> 204 (idempotent)
 *
 * One tunnel per (sandbox, port) and container: the record lives in
 * sbx:sb:{tenant/id}:tunnels until the container restarts (its generation
 * is then dead: deleted when seen) or the tunnel is deleted. Concurrent
 * POSTs share one tunnel: the first takes a short-lived claim key (SET NX
 * PX) in the sandbox's hash tag and makes it; the others poll for its
 * record. A live record whose provider says it no longer serves (the
 * forwarder was re-made, the tunnel process is gone) is evicted and made
 * again.
 *
 * Providers (struct tunnel_kind, chosen by the body's "provider" or
 * api.tunnel_provider):
 *   builtin      the URL is a host of our own nginx, "t-<16 random
 *                [a-z0-9]>.<preview domain>", routed like a preview
 *                (/_sbx_preview -> api_tunnels_route) to the agent's
 *                forwarder. Nothing runs for it.
 *   cloudflared  the owning agent runs `cloudflared tunnel --url` for the
 *                forwarder (sandbox/tunnel.h) and hands back its
 *                *.trycloudflare.com URL; the agent evicts the record when
 *                that process dies.
 */
#include "agentc.h"
#include "apimetrics.h"
#include "rkeys.h"
#include "api.h"
#include "ids.h"
#include "jsonv.h"
#include "lifecycle.h"
#include "log.h"
#include "preview.h"
#include "scripts.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLAIM_TTL_MS 15000         /* builtin; process providers add their start time */
#define WAIT_MS 15000
#define POLL_MS 20
#define OWNER_ATTEMPTS 4

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

static void index_value(char *out, size_t n, const char *tenant, const char *id, int port)
{
	snprintf(out, n, "%s/%s/%d", tenant, id, port);
}

/* Forget a dead or deleted tunnel: the hash field (when it still holds
 * value; NULL: already gone) and its index key. Best effort. */
static void tunnel_forget(const char *tenant, const char *id, int port, const char *value,
			  const char *tid, const char *why)
{
	char key[RKEYS_MAX], val[192];
	struct sbx_err e = { 0 };
	redisReply *r;

	if (value)
		(void)preview_record_del(tenant, id, "tunnels", port, value, &e);
	if (tid && *tid && strlen(tid) == PREVIEW_TUNNEL_ID_LEN) {
		rkeys_tunnel(key, tid);
		index_value(val, sizeof(val), tenant, id, port);
		preview_cad(key, val);
		apimetrics_event("tunnel-down");
		r = store_command(&e, RKEYS_XADD_EVENT "type tunnel-down tenant %s id %s "
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

/* --- providers --- */

/* What a provider made for a claimed port. */
struct tunnel_made {
	char url[512];
	char upstream[PREVIEW_ADDR_MAX];   /* the forwarder, host:port */
	char tid[PREVIEW_TUNNEL_ID_LEN + 1];
	int indexed;                       /* sbx:tunnel:<tid> written */
};

struct tunnel_kind {
	const char *name;
	/* Make the tunnel of a claimed port of the sandbox at o. 0 with m
	 * filled, or -1 with e (CONFLICT: the sandbox moved on; try again). */
	int (*make)(struct http_req *r, const char *id, int port, const struct lc_owner *o,
		    struct tunnel_made *m, struct sbx_err *e);
	/* Does the live record rec still serve? 0 yes, 1 no (evict and make
	 * again), -1 with e. */
	int (*check)(struct http_req *r, const char *id, int port, const struct lc_owner *o,
		     const json_t *rec, struct sbx_err *e);
	/* Stop what serves a deleted record (best effort). */
	void (*stop)(const char *tenant, const char *id, int port);
	/* Extra claim time for make, beyond CLAIM_TTL_MS. */
	int64_t (*make_ms)(const struct sbx_conf *c);
};

static int builtin_make(struct http_req *r, const char *id, int port, const struct lc_owner *o,
			struct tunnel_made *m, struct sbx_err *e)
{
	char label[PREVIEW_LABEL_MAX], key[RKEYS_MAX], val[192];
	redisReply *rep;

	if (preview_forward_open(r->tenant, id, o, port, m->upstream, NULL, e) < 0 ||
	    preview_random_id(m->tid, PREVIEW_TUNNEL_ID_LEN, e) < 0)
		return -1;
	snprintf(label, sizeof(label), "t-%s", m->tid);
	if (preview_url(r->conf, label, m->url, sizeof(m->url), e) < 0)
		return -1;
	rkeys_tunnel(key, m->tid);
	index_value(val, sizeof(val), r->tenant, id, port);
	rep = store_command(e, "SET %s %s", key, val);
	if (!rep)
		return -1;
	freeReplyObject(rep);
	m->indexed = 1;
	return 0;
}

/* The forwarder must still be the one recorded. */
static int builtin_check(struct http_req *r, const char *id, int port, const struct lc_owner *o,
			 const json_t *rec, struct sbx_err *e)
{
	char addr[PREVIEW_ADDR_MAX];
	const char *fwd = json_string_value(json_object_get(rec, "forward"));

	if (preview_forward_open(r->tenant, id, o, port, addr, NULL, e) < 0)
		return e->code == SBX_E_CONFLICT ? 1 : -1;
	return fwd && strcmp(fwd, addr) == 0 ? 0 : 1;
}

static void builtin_stop(const char *tenant, const char *id, int port)
{
	preview_forward_release(tenant, id, port);
}

static int64_t builtin_make_ms(const struct sbx_conf *c)
{
	return 0;
}

static int agent_tunnel_path(char *out, size_t n, const char *tenant, const char *id, int port)
{
	int w = snprintf(out, n, "/agent/v1/sandboxes/%s/%s/tunnels/%d", tenant, id, port);
	return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* An error answer of the agent as ours: its 400s (provider not available)
 * and 503s carry a message for the client; 404/409 mean the container
 * moved on (CONFLICT: try again). */
static int agent_error(const struct agentc_reply *rep, const char *what, struct sbx_err *e)
{
	json_t *err = json_object_get(rep->body, "error");
	const char *msg = json_string_value(json_object_get(err, "message"));
	const char *code = json_string_value(json_object_get(err, "code"));
	enum sbx_ecode c = code ? err_from_name(code) : SBX_E_NONE;

	/* The node's caps on tunnel processes reach the client as they are. */
	if ((c == SBX_E_QUOTA_EXCEEDED || c == SBX_E_NO_CAPACITY) && rep->status == err_status(c) &&
	    msg)
		return err_set(e, c, "%s", msg);
	if (rep->status == 404 || rep->status == 409)
		return err_set(e, SBX_E_CONFLICT, "the sandbox changed while its tunnel was made");
	if (rep->status == 400 && msg)
		return err_set(e, SBX_E_VALIDATION, "%s", msg);
	if (rep->status == 503 && msg)
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "%s", msg);
	return err_set(e, SBX_E_NODE_UNAVAILABLE, "the node cannot %s (status %ld)", what,
		       rep->status);
}

static int64_t cloudflared_make_ms(const struct sbx_conf *c)
{
	return c->agent.tunnel_timeout_ms + c->api.agent_timeout_ms;
}

static int cloudflared_make(struct http_req *r, const char *id, int port,
			    const struct lc_owner *o, struct tunnel_made *m, struct sbx_err *e)
{
	char path[256];
	struct agentc_reply rep;
	const char *url, *up;
	json_t *body;
	int rc;

	if (agent_tunnel_path(path, sizeof(path), r->tenant, id, port) < 0)
		return err_set(e, SBX_E_INTERNAL, "tunnel path too long");
	/* The record's own id (events, logs); no host index: Cloudflare
	 * serves the URL, not our nginx. */
	if (preview_random_id(m->tid, PREVIEW_TUNNEL_ID_LEN, e) < 0)
		return -1;
	body = json_pack("{s:s, s:I}", "provider", "cloudflared", "generation",
			 (json_int_t)o->generation);
	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	rc = agentc_call_timeout("PUT", o->address, path, body, o->epoch,
				 cloudflared_make_ms(r->conf), &rep, e);
	json_decref(body);
	if (rc < 0)
		return -1;
	url = json_string_value(json_object_get(rep.body, "url"));
	up = json_string_value(json_object_get(rep.body, "upstream"));
	if (rep.status != 200) {
		rc = agent_error(&rep, "start a cloudflared tunnel", e);
		agentc_reply_release(&rep);
		return rc;
	}
	if (!url || strncmp(url, "https://", 8) != 0 || strlen(url) >= sizeof(m->url) || !up ||
	    !preview_address_ok(up)) {
		agentc_reply_release(&rep);
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "the node answered a bad tunnel");
	}
	snprintf(m->url, sizeof(m->url), "%s", url);
	snprintf(m->upstream, sizeof(m->upstream), "%s", up);
	agentc_reply_release(&rep);
	return 0;
}

/* The agent must still run a process for the port, with this URL. */
static int cloudflared_check(struct http_req *r, const char *id, int port,
			     const struct lc_owner *o, const json_t *rec, struct sbx_err *e)
{
	const char *want = json_string_value(json_object_get(rec, "url")), *got;
	struct agentc_reply rep;
	char path[256];
	int rc;

	if (agent_tunnel_path(path, sizeof(path), r->tenant, id, port) < 0)
		return err_set(e, SBX_E_INTERNAL, "tunnel path too long");
	if (agentc_call("GET", o->address, path, NULL, -1, &rep, e) < 0)
		return -1;
	got = json_string_value(json_object_get(rep.body, "url"));
	rc = rep.status == 200 && want && got && strcmp(want, got) == 0 ? 0 : 1;
	if (rep.status != 200 && rep.status != 404)
		rc = agent_error(&rep, "check a cloudflared tunnel", e);
	agentc_reply_release(&rep);
	return rc;
}

/* The agent of s (when up) into addr. 0 or -1. */
static int owner_address(const struct preview_sb *s, char addr[PREVIEW_ADDR_MAX])
{
	struct sbx_err e = { 0 };
	redisReply *r[2] = { NULL, NULL };
	int ok;

	if (!s->node[0] || !ids_valid_node(s->node) ||
	    store_append(&e, "EXISTS %s", RK_NODE(s->node, "alive")) < 0 ||
	    store_append(&e, "HGET %s address", RK_NODE(s->node, NULL)) < 0 || store_collect(r, 2, 0, &e) < 0)
		return -1;
	ok = r[0]->type == REDIS_REPLY_INTEGER && r[0]->integer > 0 &&
	     r[1]->type == REDIS_REPLY_STRING && preview_address_ok(r[1]->str);
	if (ok)
		snprintf(addr, PREVIEW_ADDR_MAX, "%s", r[1]->str);
	store_free_replies(r, 2);
	return ok ? 0 : -1;
}

static void cloudflared_stop(const char *tenant, const char *id, int port)
{
	struct sbx_err e = { 0 };
	char addr[PREVIEW_ADDR_MAX], path[256];
	struct agentc_reply rep;
	struct preview_sb s;

	if (preview_sb_load(tenant, id, &s, &e) == 0 && owner_address(&s, addr) == 0 &&
	    agent_tunnel_path(path, sizeof(path), tenant, id, port) == 0 &&
	    agentc_call("DELETE", addr, path, NULL, s.epoch, &rep, &e) == 0)
		agentc_reply_release(&rep);
	preview_forward_release(tenant, id, port);
}

static const struct tunnel_kind kinds[] = {
	{ "builtin", builtin_make, builtin_check, builtin_stop, builtin_make_ms },
	{ "cloudflared", cloudflared_make, cloudflared_check, cloudflared_stop, cloudflared_make_ms },
};

static const struct tunnel_kind *kind_find(const char *name)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(kinds); i++)
		if (strcmp(kinds[i].name, name) == 0)
			return &kinds[i];
	return NULL;
}

/* The kind of a record (records made before providers: builtin). */
static const struct tunnel_kind *kind_of(const json_t *rec)
{
	const struct tunnel_kind *k = kind_find(json_string_value(json_object_get(rec, "provider")));
	return k ? k : &kinds[0];
}

/* The winner's part: the provider's tunnel, then the record. 0 answered,
 * 1 try again, -1 with e. */
static int tunnel_make(struct http_req *r, const char *id, int port, const struct lc_owner *o,
		       const struct preview_sb *s, const struct tunnel_kind *k, const char *claim,
		       const char *nonce, struct sbx_err *e)
{
	char now[32], key[RKEYS_MAX], val[192], hkey[RKEYS_MAX], pstr[8];
	const char *keys[2], *args[3];
	struct tunnel_made m;
	auto_free char *text = NULL;
	redisReply *rep;
	json_t *rec;
	int stored;

	memset(&m, 0, sizeof(m));
	if (k->make(r, id, port, o, &m, e) < 0)
		goto release;
	rkeys_tunnel(key, m.tid);
	index_value(val, sizeof(val), r->tenant, id, port);
	util_iso8601(util_wall_ms(), now);
	rec = json_pack("{s:s, s:i, s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "id", m.tid, "port", port,
			"url", m.url, "provider", k->name, "generation", (json_int_t)o->generation,
			"incarnation", s->incarnation, "forward", m.upstream, "upstream",
			m.upstream, "createdAt", now);
	text = rec ? jsonv_dump(rec) : NULL;
	json_decref(rec);
	if (!text) {
		err_set(e, SBX_E_INTERNAL, "out of memory");
		goto undo;
	}
	rkeys_sandbox_sub(hkey, r->tenant, id, "tunnels");
	util_xsnprintf(pstr, sizeof(pstr), "%d", port);
	keys[0] = hkey;
	keys[1] = claim;
	args[0] = pstr;
	args[1] = nonce;
	args[2] = text;
	rep = scripts_run(RSCRIPT_TUNNEL_COMMIT, 2, keys, 3, args, e);
	if (!rep)
		goto undo;
	stored = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
	freeReplyObject(rep);
	if (!stored) {
		/* Our claim ran out and another caller made one meanwhile. */
		if (m.indexed)
			preview_cad(key, val);
		return 1;
	}
	apimetrics_event("tunnel-up");
	rep = store_command(e, RKEYS_XADD_EVENT "type tunnel-up tenant %s id %s "
			       "port %d tunnel %s provider %s generation %lld",
			   r->tenant, id, port, m.tid, k->name, (long long)o->generation);
	if (rep)
		freeReplyObject(rep);
	err_clear(e);
	log_info("tunnel %s (%s) for %s/%s port %d (generation %lld, upstream %s): %s", m.tid,
		 k->name, r->tenant, id, port, (long long)o->generation, m.upstream, m.url);
	return respond_record(r, text, e);
undo:
	if (m.indexed)
		preview_cad(key, val);
release:
	preview_cad(claim, nonce);
	return e->code == SBX_E_CONFLICT ? 1 : -1;
}

/* A live record: its provider must say it still serves, else it is
 * evicted. want: the provider the caller named (NULL: any). 0 answered,
 * 1 evicted (make a new one), -1 with e. */
static int tunnel_check(struct http_req *r, const char *id, int port, const struct lc_owner *o,
			const char *text, const struct tunnel_kind *want, struct sbx_err *e)
{
	json_t *rec = json_loads(text, 0, NULL);
	const struct tunnel_kind *k = kind_of(rec);
	const char *tid = json_string_value(json_object_get(rec, "id"));
	char tidc[PREVIEW_TUNNEL_ID_LEN + 1] = "";
	int rc;

	if (tid)
		snprintf(tidc, sizeof(tidc), "%s", tid);
	if (want && want != k) {
		json_decref(rec);
		return err_set(e, SBX_E_CONFLICT,
			       "port %d already has a '%s' tunnel; delete it to make a '%s' one", port,
			       k->name, want->name);
	}
	rc = k->check(r, id, port, o, rec, e);
	json_decref(rec);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return respond_record(r, text, e);
	err_clear(e);
	log_info("tunnel %s of %s/%s port %d: no longer served; evicted", tidc, r->tenant, id, port);
	tunnel_forget(r->tenant, id, port, text, tidc, k == &kinds[0] ? "forwarder-gone" : "process-gone");
	return 1;
}

/* The provider of a POST body: {} or {provider}. NULL with e (400). */
static const struct tunnel_kind *create_kind(struct http_req *r, int *explicit, struct sbx_err *e)
{
	static const struct jsonv_field fields[] = {
		{ "provider", JV_STRING, 0 },
		{ NULL, 0, 0 },
	};
	json_t *body = http_read_json(r, e), *p;
	const struct tunnel_kind *k;

	if (!body)
		return NULL;
	if (jsonv_check(body, fields, "the body", e) < 0) {
		json_decref(body);
		return NULL;
	}
	p = json_object_get(body, "provider");
	*explicit = p != NULL;
	k = kind_find(p ? json_string_value(p) : r->conf->api.tunnel_provider);
	if (!k)
		err_set(e, SBX_E_VALIDATION, "provider must be one of: builtin, cloudflared");
	json_decref(body);
	return k;
}

int api_tunnels_create(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	char claim[RKEYS_MAX], hkey[RKEYS_MAX], nonce[33], pstr[8], gstr[24], maxs[8], ttls[24];
	int64_t deadline, wait_ms = WAIT_MS, max_make = 0;
	int port, need_owner = 1, owner_tries = 0, explicit = 0;
	const struct tunnel_kind *k;
	struct lc_owner o;
	struct preview_sb s;

	if (preview_parse_port(router_cap(&r->match, "port"), &port, e) < 0)
		return -1;
	k = create_kind(r, &explicit, e);
	if (!k)
		return -1;
	/* Waiters may wait for the slowest provider's claim. */
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		if (kinds[i].make_ms(r->conf) > max_make)
			max_make = kinds[i].make_ms(r->conf);
	wait_ms += max_make;
	deadline = util_now_ms() + wait_ms;
	rkeys_tunnel_claim(claim, r->tenant, id, port);
	rkeys_sandbox_sub(hkey, r->tenant, id, "tunnels");
	util_xsnprintf(pstr, sizeof(pstr), "%d", port);
	util_xsnprintf(maxs, sizeof(maxs), "%d", PREVIEW_MAX_PORTS);
	util_xsnprintf(ttls, sizeof(ttls), "%lld", (long long)(CLAIM_TTL_MS + k->make_ms(r->conf)));
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
		util_xsnprintf(gstr, sizeof(gstr), "%lld", (long long)o.generation);
		args[0] = pstr;
		args[1] = gstr;
		args[2] = s.incarnation;
		args[3] = nonce;
		args[4] = ttls;
		args[5] = maxs;
		rep = scripts_run(RSCRIPT_TUNNEL_CLAIM, 2, keys, 6, args, e);
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
			rc = tunnel_check(r, id, port, &o, text, explicit ? k : NULL, e);
			free(text);
			if (rc <= 0)
				return rc;
			err_clear(e);
			need_owner = 1;
			continue;
		}
		freeReplyObject(rep);
		if (kind == 2) {
			rc = tunnel_make(r, id, port, &o, &s, k, claim, nonce, e);
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

/* An item of the tunnels list: the view of a live record; a dead one is
 * forgotten on the way. */
static json_t *tunnel_item(const char *field, const json_t *v, const char *raw,
			   const struct preview_sb *s, void *ctx, int *port)
{
	const struct http_req *r = ctx;
	const char *id = router_cap(&r->match, "id");
	int64_t p;

	if (util_parse_i64(field, 1, 65535, &p) < 0)
		return NULL;
	*port = (int)p;
	if (v && preview_record_live(v, s))
		return tunnel_view(v);
	tunnel_forget(r->tenant, id, *port, raw, json_string_value(json_object_get(v, "id")),
		      "restarted");
	return NULL;
}

int api_tunnels_list(struct http_req *r, struct sbx_err *e)
{
	json_t *out = preview_list(r->tenant, router_cap(&r->match, "id"), "tunnels", tunnel_item, r,
				   e);

	if (!out)
		return -1;
	http_respond_json(r, 200, out);
	json_decref(out);
	return 0;
}

int api_tunnels_delete(struct http_req *r, struct sbx_err *e)
{
	const char *id = router_cap(&r->match, "id");
	char *val = NULL;
	int port;

	if (preview_parse_port(router_cap(&r->match, "port"), &port, e) < 0 ||
	    preview_record_get(r->tenant, id, "tunnels", port, &val, e) < 0)
		return -1;
	if (val) {
		json_t *v = json_loads(val, 0, NULL);
		char tid[PREVIEW_TUNNEL_ID_LEN + 1] = "";
		const char *t = json_string_value(json_object_get(v, "id"));
		const struct tunnel_kind *k = kind_of(v);

		if (t)
			snprintf(tid, sizeof(tid), "%s", t);
		json_decref(v);
		tunnel_forget(r->tenant, id, port, val, tid, "deleted");
		free(val);
		k->stop(r->tenant, id, port);
		log_info("tunnel %s of %s/%s port %d deleted", tid, r->tenant, id, port);
	}
	http_respond_json(r, 204, NULL);
	return 0;
}

int api_tunnels_route(const char *tunnel_id, char *forward, struct sbx_err *e)
{
	char key[RKEYS_MAX], tenant[64], id[64], ref[192];
	redisReply *t, *rep[2] = { NULL, NULL };
	struct preview_sb s;
	const char *a, *b, *tid, *fwd;
	int64_t port;
	json_t *v;
	int rc;

	rkeys_tunnel(key, tunnel_id);
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
	if (store_append(e, "HGET %s %lld", RK_SANDBOX_SUB(tenant, id, "tunnels"), (long long)port) < 0 ||
	    preview_sb_append(tenant, id, e) < 0 || store_collect(rep, 2, 0, e) < 0)
		return -1;
	v = preview_reply_json(rep[0]);
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
