/*
 * /v1/images — admin: registry images on the nodes (docs/API.md "Images").
 *   POST   /v1/images/pull {ref, nodes?}  pre-pull on the named (or every
 *          live) node, one after the other: {results:[{node, image|error}]}
 *   GET    /v1/images                     {nodes:[{node, images, pulling}]}
 *   DELETE /v1/images/{ref*}              forget ref on every live node and
 *          remove the layers no other image uses: {results:[...]}
 * Each node's answer is its agent's (/agent/v1/images, agent_images.h).
 */
#include "api.h"
#include "agentc.h"
#include "buf.h"
#include "codec.h"
#include "http.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "placement.h"
#include "rkeys.h"
#include "spec.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define IMAGE_NODES_MAX 256

/* The live nodes with an address, at most max, into out; their count or -1. */
static int live_nodes(struct placement_node *out, size_t max, struct sbx_err *e)
{
	auto_reply redisReply *members = store_command(e, "SMEMBERS " RKEYS_NODES);
	size_t n = 0;

	if (!members)
		return -1;
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: SMEMBERS " RKEYS_NODES " is not an array");
	for (size_t i = 0; i < members->elements && n < max; i++) {
		const redisReply *m = members->element[i];

		if (m->type != REDIS_REPLY_STRING || !ids_valid_node(m->str))
			continue;
		if (placement_fetch_node(m->str, &out[n], e) < 0)
			return -1;
		if (out[n].alive && agentc_address_ok(out[n].address))
			n++;
	}
	return (int)n;
}

/* One node's answer as {node, key: body} or {node, error:{code,message}}. */
static json_t *node_result(const char *node, const char *address, const struct agentc_reply *rep,
			   int call_rc, const struct sbx_err *ce, const char *key)
{
	struct sbx_err e = { 0 };

	if (call_rc == 0 && rep->status >= 200 && rep->status < 300)
		return json_pack("{s:s, s:O?}", "node", node, key, rep->body);
	if (call_rc < 0)
		e = *ce;
	else
		agentc_error(address, rep, "answer", &e);
	return json_pack("{s:s, s:{s:s, s:s}}", "node", node, "error", "code", err_name(e.code),
			 "message", err_public_message(&e));
}

static int wanted(const json_t *names, const char *node)
{
	size_t i;
	json_t *v;

	if (!names)
		return 1;
	json_array_foreach(names, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), node) == 0)
			return 1;
	return 0;
}

static const struct jsonv_field pull_fields[] = {
	{ "ref", JV_STRING, 1 },
	{ "nodes", JV_ARRAY, 0 },
	{ NULL, 0, 0 },
};

/* Send method path (with body) to every live node names allows; answer
 * {results:[node_result...]}. */
static int fan_out(struct http_req *r, const char *method, const char *path, const json_t *body,
		   const json_t *names, const char *key, int64_t timeout_ms, struct sbx_err *e)
{
	auto_free struct placement_node *nodes = calloc(IMAGE_NODES_MAX, sizeof(*nodes));
	json_t *results = json_array(), *out;
	int n;

	if (!nodes || !results) {
		json_decref(results);
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	}
	if ((n = live_nodes(nodes, IMAGE_NODES_MAX, e)) < 0) {
		json_decref(results);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		struct agentc_reply rep = { 0 };
		struct sbx_err ce = { 0 };
		int rc;

		if (!wanted(names, nodes[i].name))
			continue;
		rc = agentc_call_timeout(method, nodes[i].address, path, body, -1, timeout_ms, &rep, &ce);
		json_array_append_new(results, node_result(nodes[i].name, nodes[i].address, &rep, rc, &ce, key));
		agentc_reply_release(&rep);
	}
	out = json_pack("{s:o}", "results", results);
	http_respond_json(r, 200, out);
	json_decref(out);
	return 0;
}

int api_images_pull(struct http_req *r, struct sbx_err *e)
{
	json_auto_t *body = http_read_json(r, e);
	json_auto_t *agent_body = NULL;
	const json_t *names;
	const char *ref;

	if (!body || jsonv_check(body, pull_fields, "the body", e) < 0 ||
	    spec_image(json_object_get(body, "ref"), e) < 0)
		return -1;
	ref = json_string_value(json_object_get(body, "ref"));
	names = json_object_get(body, "nodes");
	agent_body = json_pack("{s:s}", "ref", ref);
	if (!agent_body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	return fan_out(r, "POST", "/agent/v1/images/pull", agent_body, names, "image",
		       agentc_pull_timeout_ms(ref), e);
}

int api_images_list(struct http_req *r, struct sbx_err *e)
{
	return fan_out(r, "GET", "/agent/v1/images", NULL, NULL, "store", agentc_pull_timeout_ms(NULL), e);
}

int api_images_delete(struct http_req *r, struct sbx_err *e)
{
	const char *ref = router_cap(&r->match, "ref");
	json_auto_t *v = NULL;
	struct buf path;
	int rc;

	if (!ref || !*ref)
		return err_set(e, SBX_E_VALIDATION, "an image reference is required");
	if (!(v = json_string(ref)) || spec_image(v, e) < 0)
		return v ? -1 : err_set(e, SBX_E_VALIDATION, "the image reference must be UTF-8");
	buf_init(&path, 2048);
	if (buf_adds(&path, "/agent/v1/images?ref=") < 0 || codec_pct_encode(ref, strlen(ref), &path) < 0) {
		buf_release(&path);
		return err_set(e, SBX_E_VALIDATION, "image reference too long");
	}
	rc = fan_out(r, "DELETE", path.data, NULL, NULL, "deleted", agentc_pull_timeout_ms(NULL), e);
	buf_release(&path);
	return rc;
}
