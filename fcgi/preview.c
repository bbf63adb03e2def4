/*
 * preview.c — see preview.h.
 */
#include "preview.h"
#include "rkeys.h"
#include "agentc.h"
#include "ids.h"
#include "log.h"
#include "scripts.h"
#include "sha256.h"
#include "store.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int preview_parse_port(const char *s, int *port, struct sbx_err *e)
{
	int64_t v;
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 5 || s[0] == '0' || strspn(s, "0123456789") != n ||
	    util_parse_i64(s, PREVIEW_PORT_MIN, PREVIEW_PORT_MAX, &v) < 0)
		return err_set(e, SBX_E_INVALID_PORT, "port must be a number in %d-%d",
			       PREVIEW_PORT_MIN, PREVIEW_PORT_MAX);
	*port = (int)v;
	return 0;
}

int preview_host_label(const char *host, const char *domain, char *label, size_t n)
{
	size_t hl, dl, ll;

	if (!host || !domain || !*domain)
		return -1;
	hl = strlen(host);
	dl = strlen(domain);
	if (hl < dl + 2 || host[hl - dl - 1] != '.' || strcasecmp(host + hl - dl, domain) != 0)
		return -1;
	ll = hl - dl - 1;
	if (ll >= n || memchr(host, '.', ll))
		return -1;
	memcpy(label, host, ll);
	label[ll] = '\0';
	return 0;
}

int preview_parse_label(const char *label, int *port, char id[64], char token[PREVIEW_TOKEN_MAX + 1])
{
	const char *first = strchr(label, '-'), *last = strrchr(label, '-');
	char num[8];
	size_t pl, il, tl;
	struct sbx_err e;

	if (!first || first == last)
		return -1;
	pl = (size_t)(first - label);
	il = (size_t)(last - first - 1);
	tl = strlen(last + 1);
	if (pl == 0 || pl >= sizeof(num) || il == 0 || il >= 64 || tl == 0 || tl > PREVIEW_TOKEN_MAX)
		return -1;
	memcpy(num, label, pl);
	num[pl] = '\0';
	if (preview_parse_port(num, port, &e) < 0)
		return -1;
	memcpy(id, first + 1, il);
	id[il] = '\0';
	memcpy(token, last + 1, tl + 1);
	if (!ids_valid_sandbox(id) || !ids_valid_token(token))
		return -1;
	return 0;
}

int preview_tunnel_label(const char *label, char id[PREVIEW_TUNNEL_ID_LEN + 1])
{
	if (strncmp(label, "t-", 2) != 0 || strlen(label + 2) != PREVIEW_TUNNEL_ID_LEN ||
	    strspn(label + 2, "abcdefghijklmnopqrstuvwxyz0123456789") != PREVIEW_TUNNEL_ID_LEN)
		return 0;
	memcpy(id, label + 2, PREVIEW_TUNNEL_ID_LEN + 1);
	return 1;
}

int preview_url(const struct sbx_conf *c, const char *label, char *out, size_t n,
		struct sbx_err *e)
{
	const char *u = c->api.public_url, *sep = strstr(u, "://"), *hp, *end, *colon, *bracket;
	char scheme[8], port[8] = "";
	size_t sl, pl;
	int w;

	if (!sep || (sl = (size_t)(sep - u)) == 0 || sl >= sizeof(scheme))
		return err_set(e, SBX_E_INTERNAL, "api.public_url '%s' has no scheme", u);
	memcpy(scheme, u, sl);
	scheme[sl] = '\0';
	for (size_t i = 0; i < sl; i++)
		scheme[i] = (char)tolower((unsigned char)scheme[i]);
	if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
		return err_set(e, SBX_E_INTERNAL, "api.public_url '%s' is not http(s)", u);
	hp = sep + 3;
	end = hp + strcspn(hp, "/?#");
	bracket = memchr(hp, ']', (size_t)(end - hp));
	colon = NULL;
	for (const char *p = bracket ? bracket : hp; p < end; p++)
		if (*p == ':')
			colon = p;
	if (colon) {
		pl = (size_t)(end - colon - 1);
		if (pl == 0 || pl >= sizeof(port) || strspn(colon + 1, "0123456789") < pl)
			return err_set(e, SBX_E_INTERNAL, "api.public_url '%s' has a bad port", u);
		memcpy(port, colon + 1, pl);
		port[pl] = '\0';
		if ((strcmp(scheme, "http") == 0 && strcmp(port, "80") == 0) ||
		    (strcmp(scheme, "https") == 0 && strcmp(port, "443") == 0))
			port[0] = '\0';
	}
	w = snprintf(out, n, "%s://%s.%s%s%s", scheme, label, c->api.preview_domain,
		     port[0] ? ":" : "", port);
	if (w < 0 || (size_t)w >= n)
		return err_set(e, SBX_E_INTERNAL, "preview url too long");
	return 0;
}

int preview_random_id(char *out, size_t n, struct sbx_err *e)
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char rnd[64];
	size_t got = 0;

	while (got < n) {
		if (util_random(rnd, sizeof(rnd)) < 0)
			return err_sys(e, errno, "getrandom");
		/* 252 = 7 * 36: rejecting the rest keeps every character equally likely. */
		for (size_t i = 0; i < sizeof(rnd) && got < n; i++)
			if (rnd[i] < 252)
				out[got++] = alphabet[rnd[i] % 36];
	}
	out[n] = '\0';
	return 0;
}

int preview_const_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;

	for (size_t i = 0; i < lb; i++)
		d |= (unsigned char)((i < la ? a[i] : 0) ^ b[i]);
	return d == 0;
}

int preview_address_ok(const char *a)
{
	return agentc_address_ok(a);
}

int preview_index_key(int port, const char *id, const char *token, char out[RKEYS_MAX])
{
	char label[PREVIEW_LABEL_MAX], hex[2 * SHA256_DIGEST_LEN + 1];
	int w = snprintf(label, sizeof(label), "%d-%s-%s", port, id, token);

	if (w < 0 || (size_t)w >= sizeof(label))
		return -1;
	sha256_hex(label, (size_t)w, hex);
	rkeys_preview(out, hex);
	return 0;
}

void preview_cad(const char *key, const char *value)
{
	struct sbx_err e = { 0 };
	const char *keys[1] = { key }, *args[1] = { value };
	redisReply *r = scripts_run(RSCRIPT_CAD, 1, keys, 1, args, &e);

	if (r)
		freeReplyObject(r);
}

/* --- the sandbox --- */

int preview_sb_append(const char *tenant, const char *id, struct sbx_err *e)
{
	return store_append(e, "HMGET %s state node createdAt generation epoch",
			    RK_SANDBOX(tenant, id));
}

static const char *elem(const redisReply *r, size_t i)
{
	if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING)
		return NULL;
	return r->element[i]->str;
}

int preview_sb_from_reply(const redisReply *r, struct preview_sb *s)
{
	const char *state, *node, *created, *gen, *epoch;

	memset(s, 0, sizeof(*s));
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return 1;
	state = elem(r, 0);
	node = elem(r, 1);
	created = elem(r, 2);
	gen = elem(r, 3);
	epoch = elem(r, 4);
	if (!state || strcmp(state, "destroyed") == 0 || !gen ||
	    util_parse_i64(gen, 0, INT64_MAX, &s->generation) < 0)
		return 1;
	if (!epoch || util_parse_i64(epoch, 0, INT64_MAX, &s->epoch) < 0)
		s->epoch = 0;
	snprintf(s->state, sizeof(s->state), "%s", state);
	snprintf(s->node, sizeof(s->node), "%s", node ? node : "");
	snprintf(s->incarnation, sizeof(s->incarnation), "%s", created ? created : "");
	return 0;
}

int preview_sb_load(const char *tenant, const char *id, struct preview_sb *s, struct sbx_err *e)
{
	redisReply *r[1] = { NULL };
	int rc;

	if (preview_sb_append(tenant, id, e) < 0 || store_collect(r, 1, 0, e) < 0)
		return -1;
	rc = preview_sb_from_reply(r[0], s);
	store_free_replies(r, 1);
	return rc;
}

int preview_record_live(const json_t *rec, const struct preview_sb *s)
{
	json_t *g = json_object_get(rec, "generation");
	const char *inc = json_string_value(json_object_get(rec, "incarnation"));

	return json_is_integer(g) && json_integer_value(g) == s->generation && inc &&
	       strcmp(inc, s->incarnation) == 0;
}

/* --- the agent's forwarder --- */

static int forward_path(char *out, size_t n, const char *tenant, const char *id, int port)
{
	int w = snprintf(out, n, "/agent/v1/sandboxes/%s/%s/forwards/%d", tenant, id, port);
	return w < 0 || (size_t)w >= n ? -1 : 0;
}

int preview_forward_open(const char *tenant, const char *id, const struct lc_owner *o, int port,
			 char addr[PREVIEW_ADDR_MAX], char *gateway, struct sbx_err *e)
{
	char path[256];
	struct agentc_reply rep;
	json_t *body;
	const char *a, *g;
	int rc;

	if (forward_path(path, sizeof(path), tenant, id, port) < 0)
		return err_set(e, SBX_E_INTERNAL, "forward path too long");
	body = json_pack("{s:I}", "generation", (json_int_t)o->generation);
	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	rc = agentc_call("PUT", o->address, path, body, o->epoch, &rep, e);
	json_decref(body);
	if (rc < 0)
		return -1;
	if (rep.status == 404 || rep.status == 409) {
		agentc_reply_release(&rep);
		return err_set(e, SBX_E_CONFLICT, "sandbox '%s' changed while its port was exposed; try again",
			       id);
	}
	a = json_string_value(json_object_get(rep.body, "address"));
	if (rep.status >= 400) {
		rc = agentc_error(o->address, &rep, "forward the port", e);
		agentc_reply_release(&rep);
		return rc;
	}
	if (rep.status != 200 || !a || !preview_address_ok(a)) {
		log_warn("agent %s: forward %s/%s port %d -> status %ld", o->address, tenant, id, port,
			 rep.status);
		agentc_reply_release(&rep);
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "the node of sandbox '%s' cannot forward port %d",
			       id, port);
	}
	snprintf(addr, PREVIEW_ADDR_MAX, "%s", a);
	if (gateway) {
		/* An agent without a gateway (or an older one) names none. */
		g = json_string_value(json_object_get(rep.body, "gateway"));
		snprintf(gateway, PREVIEW_ADDR_MAX, "%s", g && preview_address_ok(g) ? g : "");
	}
	agentc_reply_release(&rep);
	return 0;
}

/* The JSON of a hash field reply (a string), or NULL. New reference. */
json_t *preview_reply_json(const redisReply *r)
{
	if (!r || r->type != REDIS_REPLY_STRING)
		return NULL;
	return json_loadb(r->str, r->len, 0, NULL);
}

void preview_forward_release(const char *tenant, const char *id, int port)
{
	struct sbx_err e = { 0 };
	struct preview_sb s;
	redisReply *r[3] = { NULL, NULL, NULL };
	json_t *p = NULL, *t = NULL;
	char path[256];
	struct agentc_reply rep;
	int busy;

	if (preview_sb_append(tenant, id, &e) < 0 ||
	    store_append(&e, "HGET %s %d", RK_SANDBOX_SUB(tenant, id, "ports"), port) < 0 ||
	    store_append(&e, "HGET %s %d", RK_SANDBOX_SUB(tenant, id, "tunnels"), port) < 0 ||
	    store_collect(r, 3, 0, &e) < 0)
		return;
	if (preview_sb_from_reply(r[0], &s) != 0 || strcmp(s.state, "running") != 0 || !s.node[0] ||
	    !ids_valid_node(s.node)) {
		store_free_replies(r, 3);
		return;
	}
	p = preview_reply_json(r[1]);
	t = preview_reply_json(r[2]);
	busy = (p && preview_record_live(p, &s)) || (t && preview_record_live(t, &s));
	json_decref(p);
	json_decref(t);
	store_free_replies(r, 3);
	if (busy)
		return;
	if (store_append(&e, "EXISTS %s", RK_NODE(s.node, "alive")) < 0 ||
	    store_append(&e, "HGET %s address", RK_NODE(s.node, NULL)) < 0 || store_collect(r, 2, 0, &e) < 0)
		return;
	if (r[0]->type == REDIS_REPLY_INTEGER && r[0]->integer > 0 &&
	    r[1]->type == REDIS_REPLY_STRING && preview_address_ok(r[1]->str) &&
	    forward_path(path, sizeof(path), tenant, id, port) == 0 &&
	    agentc_call("DELETE", r[1]->str, path, NULL, s.epoch, &rep, &e) == 0)
		agentc_reply_release(&rep);
	store_free_replies(r, 2);
}

/* --- Redis --- */

struct list_item {
	int port;
	json_t *item;
};

static int item_cmp(const void *a, const void *b)
{
	return ((const struct list_item *)a)->port - ((const struct list_item *)b)->port;
}

json_t *preview_list(const char *tenant, const char *id, const char *kind, preview_item_fn *fn,
		     void *ctx, struct sbx_err *e)
{
	redisReply *rep[2] = { NULL, NULL };
	struct list_item items[2 * PREVIEW_MAX_PORTS];
	struct preview_sb s;
	size_t n = 0;
	json_t *arr, *out;

	if (preview_sb_append(tenant, id, e) < 0 ||
	    store_append(e, "HGETALL %s", RK_SANDBOX_SUB(tenant, id, kind)) < 0 ||
	    store_collect(rep, 2, 0, e) < 0)
		return NULL;
	if (preview_sb_from_reply(rep[0], &s) != 0) {
		store_free_replies(rep, 2);
		err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
		return NULL;
	}
	for (size_t i = 0; rep[1]->type == REDIS_REPLY_ARRAY && i + 1 < rep[1]->elements; i += 2) {
		json_t *v = preview_reply_json(rep[1]->element[i + 1]), *item;
		int port = 0;

		item = fn(rep[1]->element[i]->str, v, rep[1]->element[i + 1]->str, &s, ctx, &port);
		if (item && n < ARRAY_SIZE(items)) {
			items[n].port = port;
			items[n].item = item;
			n++;
		} else {
			json_decref(item);
		}
		json_decref(v);
	}
	store_free_replies(rep, 2);
	qsort(items, n, sizeof(items[0]), item_cmp);
	arr = json_array();
	for (size_t i = 0; i < n; i++) {
		if (arr)
			json_array_append(arr, items[i].item);
		json_decref(items[i].item);
	}
	out = arr ? json_pack("{s:o}", kind, arr) : NULL;
	if (!out)
		err_set(e, SBX_E_INTERNAL, "out of memory");
	return out;
}

int preview_record_get(const char *tenant, const char *id, const char *kind, int port, char **val,
		       struct sbx_err *e)
{
	redisReply *rep[2] = { NULL, NULL };
	struct preview_sb s;

	*val = NULL;
	if (preview_sb_append(tenant, id, e) < 0 ||
	    store_append(e, "HGET %s %d", RK_SANDBOX_SUB(tenant, id, kind), port) < 0 ||
	    store_collect(rep, 2, 0, e) < 0)
		return -1;
	if (preview_sb_from_reply(rep[0], &s) != 0) {
		store_free_replies(rep, 2);
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' does not exist", id);
	}
	if (rep[1]->type == REDIS_REPLY_STRING)
		*val = strdup(rep[1]->str);
	store_free_replies(rep, 2);
	return 0;
}

int preview_record_del(const char *tenant, const char *id, const char *kind, int port,
		       const char *value, struct sbx_err *e)
{
	char key[RKEYS_MAX], pstr[8];
	const char *keys[1] = { key }, *args[2] = { pstr, value };
	redisReply *r;

	rkeys_sandbox_sub(key, tenant, id, kind);
	util_xsnprintf(pstr, sizeof(pstr), "%d", port);
	r = scripts_run(RSCRIPT_HCAD, 1, keys, 2, args, e);
	if (!r)
		return -1;
	freeReplyObject(r);
	return 0;
}

void preview_forget_sandbox(const char *tenant, const char *id)
{
	struct sbx_err e = { 0 };
	redisReply *r[2] = { NULL, NULL };
	char key[RKEYS_MAX], val[192];

	if (store_append(&e, "HGETALL %s", RK_SANDBOX_SUB(tenant, id, "ports")) < 0 ||
	    store_append(&e, "HGETALL %s", RK_SANDBOX_SUB(tenant, id, "tunnels")) < 0 ||
	    store_collect(r, 2, 0, &e) < 0)
		return;
	for (size_t i = 0; r[0]->type == REDIS_REPLY_ARRAY && i + 1 < r[0]->elements; i += 2) {
		json_t *v = preview_reply_json(r[0]->element[i + 1]);
		const char *tok = json_string_value(json_object_get(v, "token"));
		int64_t port;

		if (tok && util_parse_i64(r[0]->element[i]->str, 1, 65535, &port) == 0 &&
		    preview_index_key((int)port, id, tok, key) == 0)
			preview_cad(key, tenant);
		json_decref(v);
	}
	for (size_t i = 0; r[1]->type == REDIS_REPLY_ARRAY && i + 1 < r[1]->elements; i += 2) {
		json_t *v = preview_reply_json(r[1]->element[i + 1]);
		const char *tid = json_string_value(json_object_get(v, "id"));
		if (tid && strlen(tid) == PREVIEW_TUNNEL_ID_LEN) {
			rkeys_tunnel(key, tid);
			snprintf(val, sizeof(val), "%s/%s/%s", tenant, id, r[1]->element[i]->str);
			preview_cad(key, val);
		}
		json_decref(v);
	}
	store_free_replies(r, 2);
	r[0] = store_command(&e, "DEL %s %s", RK_SANDBOX_SUB(tenant, id, "ports"),
			     RK_SANDBOX_SUB(tenant, id, "tunnels"));
	if (r[0])
		freeReplyObject(r[0]);
}
