/*
 * /_sbx_events — the decision behind nginx auth_request for GET /v1/events.
 *
 * The worker authenticates the key, validates the filters and Last-Event-ID,
 * and names an up agent to serve the stream: 200 with X-Sbx-Agent and
 * X-Sbx-Tenant (the scope: "*" for an admin key, else the key's tenant), or
 * the usual 403 refusal (api_route.c). nginx then proxies the stream to that
 * agent (agent_events.c), which reads sbx:events itself: no worker is held
 * for the life of the stream.
 */
#include "agentc.h"
#include "api.h"
#include "auth.h"
#include "evfilter.h"
#include "ids.h"
#include "rkeys.h"
#include "store.h"
#include "util.h"

#include <string.h>

#define EVENTS_PATH "/v1/events"
#define EVENTS_NODES_MAX 1024

/* The query of the original URI, which must be EVENTS_PATH spelled plainly. */
static const char *original_query(const char *uri, struct sbx_err *e)
{
	size_t n = strlen(EVENTS_PATH);

	if (!uri || strncmp(uri, EVENTS_PATH, n) != 0 || (uri[n] != '\0' && uri[n] != '?')) {
		err_set(e, SBX_E_VALIDATION, "the path must be '" EVENTS_PATH "' written without escapes");
		return NULL;
	}
	return uri[n] == '?' ? uri + n + 1 : "";
}

/* Pick an up node with a usable address at random; its address into addr
 * (128 bytes). 0, or -1 with e (503 NODE_UNAVAILABLE when none is up). */
static int pick_agent(char addr[128], struct sbx_err *e)
{
	auto_reply redisReply *members = NULL;
	redisReply *reps[2 * 64];
	const char *names[64];
	size_t n = 0, up = 0;
	uint32_t rnd = 0;

	members = store_command(e, "SRANDMEMBER " RKEYS_NODES " 64");
	if (!members)
		return -1;
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: " RKEYS_NODES " is not a set");
	for (size_t i = 0; i < members->elements && n < ARRAY_SIZE(names); i++) {
		const redisReply *m = members->element[i];

		if (m->type != REDIS_REPLY_STRING || !ids_valid_node(m->str))
			continue;
		if (store_append(e, "EXISTS %s", RK_NODE(m->str, "alive")) < 0 ||
		    store_append(e, "HMGET %s address state", RK_NODE(m->str, NULL)) < 0)
			return -1;
		names[n++] = m->str;
	}
	if (n && store_collect(reps, 2 * n, 0, e) < 0)
		return -1;
	(void)util_random(&rnd, sizeof(rnd));
	/* Reservoir of one over the nodes that can serve: each equally likely. */
	for (size_t i = 0; i < n; i++) {
		const redisReply *alive = reps[2 * i], *h = reps[2 * i + 1];
		const char *a, *st;

		if (alive->type != REDIS_REPLY_INTEGER || alive->integer <= 0 ||
		    h->type != REDIS_REPLY_ARRAY || h->elements != 2 ||
		    h->element[0]->type != REDIS_REPLY_STRING)
			continue;
		a = h->element[0]->str;
		st = h->element[1]->type == REDIS_REPLY_STRING ? h->element[1]->str : "up";
		if (strcmp(st, "degraded") == 0 || strlen(a) >= 128 || !agentc_address_ok(a))
			continue;
		up++;
		if (up == 1 || rnd % up == 0)
			memcpy(addr, a, strlen(a) + 1);
		rnd = rnd * 1103515245u + 12345u;
	}
	store_free_replies(reps, 2 * n);
	if (!up)
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "no node is up to serve the event stream");
	return 0;
}

int api_events_decide(struct http_req *r, struct sbx_err *e)
{
	const char *query, *last, *method = http_param(r, "SBX_ORIGINAL_METHOD");
	struct evfilter f;
	char addr[128];

	if (method && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return err_set(e, SBX_E_METHOD_NOT_ALLOWED, "GET is the only method of /v1/events");
	if (auth_request(r, e) < 0)
		return -1;
	query = original_query(http_param(r, "SBX_ORIGINAL_URI"), e);
	if (!query || evfilter_parse_query(&f, query, e) < 0)
		return -1;
	if (!r->admin && f.tenant[0] && strcmp(f.tenant, r->tenant) != 0)
		return err_set(e, SBX_E_FORBIDDEN, "the events of another tenant need an admin key");
	last = http_param(r, "HTTP_LAST_EVENT_ID");
	if (last && *last && !evfilter_id_valid(last))
		return err_set(e, SBX_E_VALIDATION,
			       "Last-Event-ID must be a stream id '<ms>-<seq>' of a previous event");
	if (pick_agent(addr, e) < 0)
		return -1;
	if (http_add_header(r, "X-Sbx-Agent", addr) < 0 ||
	    http_add_header(r, "X-Sbx-Tenant", r->admin ? EVFILTER_SCOPE_ALL : r->tenant) < 0)
		return err_set(e, SBX_E_INTERNAL, "cannot add the route headers");
	http_respond_json(r, 200, NULL);
	return 0;
}
