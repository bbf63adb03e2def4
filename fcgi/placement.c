#include "placement.h"
#include "agentc.h"
#include "ids.h"
#include "log.h"
#include "store.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define PLACEMENT_NODES_MAX 1024

int placement_has_room(const struct placement_node *n)
{
	return n->alive && agentc_address_ok(n->address) && n->running < n->capacity;
}

int placement_choose(const struct placement_node *nodes, size_t n, uint32_t r1, uint32_t r2)
{
	size_t cand[PLACEMENT_NODES_MAX], m = 0, i, j;

	for (size_t k = 0; k < n && m < PLACEMENT_NODES_MAX; k++)
		if (placement_has_room(&nodes[k]))
			cand[m++] = k;
	if (m == 0)
		return -1;
	if (m == 1)
		return (int)cand[0];
	i = r1 % m;
	j = r2 % (m - 1);
	if (j >= i)
		j++;
	return (int)(nodes[cand[j]].load < nodes[cand[i]].load ? cand[j] : cand[i]);
}

static int64_t int_of(const redisReply *r, int64_t def)
{
	int64_t v;

	if (r && r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r && r->type == REDIS_REPLY_STRING && util_parse_i64(r->str, 0, INT64_MAX, &v) == 0)
		return v;
	return def;
}

/* Queue the three commands that describe one node. */
static int append_node(const char *name, struct sbx_err *e)
{
	if (store_append(e, "EXISTS sbx:node:{%s}:alive", name) < 0 ||
	    store_append(e, "HMGET sbx:node:{%s} address capacity sandboxes", name) < 0 ||
	    store_append(e, "SCARD sbx:node:{%s}:sandboxes", name) < 0)
		return -1;
	return 0;
}

/* Fill out from the three replies of append_node(). */
static void parse_node(const char *name, redisReply **rep, struct placement_node *out)
{
	const redisReply *h = rep[1];

	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->alive = rep[0]->type == REDIS_REPLY_INTEGER && rep[0]->integer > 0;
	if (h->type == REDIS_REPLY_ARRAY && h->elements == 3) {
		if (h->element[0]->type == REDIS_REPLY_STRING &&
		    (size_t)h->element[0]->len < sizeof(out->address))
			snprintf(out->address, sizeof(out->address), "%s", h->element[0]->str);
		out->capacity = int_of(h->element[1], 0);
		out->running = int_of(h->element[2], 0);
	}
	out->load = int_of(rep[2], 0);
}

int placement_fetch_node(const char *name, struct placement_node *out, struct sbx_err *e)
{
	redisReply *rep[3] = { NULL, NULL, NULL };

	if (!ids_valid_node(name))
		return err_set(e, SBX_E_INTERNAL, "invalid node name");
	if (append_node(name, e) < 0 || store_collect(rep, 3, 0, e) < 0)
		return -1;
	parse_node(name, rep, out);
	store_free_replies(rep, 3);
	return 0;
}

int placement_pick(struct placement_node *out, struct sbx_err *e)
{
	auto_reply redisReply *members = NULL;
	auto_free struct placement_node *nodes = NULL;
	auto_free redisReply **reps = NULL;
	const char *names[PLACEMENT_NODES_MAX];
	uint32_t rnd[2] = { 0, 0 };
	size_t n = 0;
	int k;

	members = store_command(e, "SMEMBERS sbx:nodes");
	if (!members)
		return -1;
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: sbx:nodes is not a set");
	for (size_t i = 0; i < members->elements && n < PLACEMENT_NODES_MAX; i++) {
		const redisReply *m = members->element[i];
		if (m->type == REDIS_REPLY_STRING && ids_valid_node(m->str))
			names[n++] = m->str;
	}
	if (n == 0)
		return err_set(e, SBX_E_NO_CAPACITY, "no node is registered");
	nodes = calloc(n, sizeof(*nodes));
	reps = calloc(3 * n, sizeof(*reps));
	if (!nodes || !reps)
		return err_set(e, SBX_E_INTERNAL, "out of memory placing a sandbox");
	for (size_t i = 0; i < n; i++)
		if (append_node(names[i], e) < 0)
			return -1;
	if (store_collect(reps, 3 * n, 0, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		parse_node(names[i], reps + 3 * i, &nodes[i]);
	store_free_replies(reps, 3 * n);
	if (util_random(rnd, sizeof(rnd)) < 0) {
		rnd[0] = (uint32_t)util_now_ms();
		rnd[1] = rnd[0] >> 7;
	}
	k = placement_choose(nodes, n, rnd[0], rnd[1]);
	if (k < 0)
		return err_set(e, SBX_E_NO_CAPACITY, "no live node has room for another sandbox");
	*out = nodes[k];
	return 0;
}
