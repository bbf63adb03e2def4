#include "placement.h"
#include "rkeys.h"
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
	return n->alive && !n->degraded && !n->drained && agentc_address_ok(n->address) &&
	       n->running < n->capacity;
}

int placement_fits(const struct placement_node *n, const struct placement_need *need)
{
	if (!placement_has_room(n))
		return 0;
	if (!need)
		return 1;
	if (need->avoid && strcmp(n->name, need->avoid) == 0)
		return 0;
	if (n->memory_mib > 0 && n->memory_committed + need->memory_mib > n->memory_mib)
		return 0;
	if (n->cpus_milli > 0 && n->cpus_committed + need->cpus_milli > n->cpus_milli)
		return 0;
	return 1;
}

int placement_choose(const struct placement_node *nodes, size_t n, uint32_t r1, uint32_t r2)
{
	return placement_choose_fit(nodes, n, NULL, r1, r2);
}

int placement_choose_fit(const struct placement_node *nodes, size_t n,
			 const struct placement_need *need, uint32_t r1, uint32_t r2)
{
	size_t cand[PLACEMENT_NODES_MAX], m = 0, i, j;

	for (size_t k = 0; k < n && m < PLACEMENT_NODES_MAX; k++)
		if (placement_fits(&nodes[k], need))
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

/* Queue the NODE_CMDS commands that describe one node, with sums
 * NODE_CMDS_SUMS in all (one more: what its sandboxes commit, the sums the
 * record scripts keep in sbx:node:{name}:committed), and with image one
 * more again: whether its image set holds image — all in the one pipelined
 * round trip of the registry read. */
#define NODE_CMDS 4
#define NODE_CMDS_SUMS 5
static int append_node(const char *name, int sums, const char *image, struct sbx_err *e)
{
	if (store_append(e, "EXISTS %s", RK_NODE(name, "alive")) < 0 ||
	    store_append(e, "EXISTS %s", RK_NODE(name, "drain")) < 0 ||
	    store_append(e, "HMGET %s address capacity sandboxes memoryMiB cpusMilli state",
			 RK_NODE(name, NULL)) < 0 ||
	    store_append(e, "SCARD %s", RK_NODE(name, "sandboxes")) < 0)
		return -1;
	if (sums && store_append(e, "HMGET %s memoryMiB cpusMilli", RK_NODE(name, "committed")) < 0)
		return -1;
	if (image && store_append(e, "SISMEMBER %s %s", RK_NODE(name, "images"), image) < 0)
		return -1;
	return 0;
}

/* Fill out from the replies of append_node(). */
static void parse_node(const char *name, redisReply **rep, struct placement_node *out)
{
	const redisReply *h = rep[2];

	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->alive = rep[0]->type == REDIS_REPLY_INTEGER && rep[0]->integer > 0;
	out->drained = rep[1]->type == REDIS_REPLY_INTEGER && rep[1]->integer > 0;
	if (h->type == REDIS_REPLY_ARRAY && h->elements == 6) {
		if (h->element[0]->type == REDIS_REPLY_STRING &&
		    (size_t)h->element[0]->len < sizeof(out->address))
			snprintf(out->address, sizeof(out->address), "%s", h->element[0]->str);
		out->capacity = int_of(h->element[1], 0);
		out->running = int_of(h->element[2], 0);
		out->memory_mib = int_of(h->element[3], 0);
		out->cpus_milli = int_of(h->element[4], 0);
		out->degraded = h->element[5]->type == REDIS_REPLY_STRING &&
				strcmp(h->element[5]->str, "degraded") == 0;
	}
	out->load = int_of(rep[3], 0);
}

/* The committed sums of n from the HMGET memoryMiB cpusMilli reply r (no
 * hash: nothing runs there). The sums may be negative after a hand edit
 * until the reconciler rebuilds them: they count as 0. */
static void parse_sums(struct placement_node *n, const redisReply *r)
{
	n->memory_committed = n->cpus_committed = 0;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
		return;
	n->memory_committed = int_of(r->element[0], 0);
	n->cpus_committed = int_of(r->element[1], 0);
}

int placement_fetch_node(const char *name, struct placement_node *out, struct sbx_err *e)
{
	redisReply *rep[NODE_CMDS] = { NULL };

	if (!ids_valid_node(name))
		return err_set(e, SBX_E_INTERNAL, "invalid node name");
	if (append_node(name, 0, NULL, e) < 0 || store_collect(rep, NODE_CMDS, 0, e) < 0)
		return -1;
	parse_node(name, rep, out);
	store_free_replies(rep, NODE_CMDS);
	return 0;
}

int placement_room_for(struct placement_node *n, const struct placement_need *need)
{
	struct sbx_err e = { 0 };
	auto_reply redisReply *r = NULL;

	if (!placement_has_room(n))
		return 0;
	r = store_command(&e, "HMGET %s memoryMiB cpusMilli", RK_NODE(n->name, "committed"));
	if (!r) {
		log_warn("cannot read what node '%s' commits: %s", n->name, e.msg);
		return 0;
	}
	parse_sums(n, r);
	return placement_fits(n, need);
}

/* Mark (drained |= 2) the nodes whose image set lacks the image (reps: the
 * SISMEMBER reply of each node, stride apart), unless none has it. */
static void prefer_image(struct placement_node *nodes, size_t n, redisReply **reps, size_t stride)
{
	int any = 0;

	for (size_t i = 0; i < n; i++)
		any |= reps[i * stride]->type == REDIS_REPLY_INTEGER && reps[i * stride]->integer == 1;
	for (size_t i = 0; any && i < n; i++)
		if (!(reps[i * stride]->type == REDIS_REPLY_INTEGER && reps[i * stride]->integer == 1))
			nodes[i].drained |= 2;
}

int placement_pick(const struct placement_need *need, struct placement_node *out,
		   struct sbx_err *e)
{
	auto_reply redisReply *members = NULL;
	auto_free struct placement_node *nodes = NULL;
	auto_free redisReply **reps = NULL;
	const char *names[PLACEMENT_NODES_MAX], *image;
	uint32_t rnd[2] = { 0, 0 };
	size_t n = 0, stride;
	int k = -1;

	members = store_command(e, "SMEMBERS " RKEYS_NODES);
	if (!members)
		return -1;
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: " RKEYS_NODES " is not a set");
	for (size_t i = 0; i < members->elements && n < PLACEMENT_NODES_MAX; i++) {
		const redisReply *m = members->element[i];
		if (m->type == REDIS_REPLY_STRING && ids_valid_node(m->str))
			names[n++] = m->str;
	}
	if (n == 0)
		return err_set(e, SBX_E_NO_CAPACITY, "no node is registered");
	image = need ? need->image : NULL;
	stride = NODE_CMDS_SUMS + (image ? 1 : 0);
	nodes = calloc(n, sizeof(*nodes));
	reps = calloc(stride * n, sizeof(*reps));
	if (!nodes || !reps)
		return err_set(e, SBX_E_INTERNAL, "out of memory placing a sandbox");
	for (size_t i = 0; i < n; i++)
		if (append_node(names[i], 1, image, e) < 0)
			return -1;
	if (store_collect(reps, stride * n, 0, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		parse_node(names[i], reps + stride * i, &nodes[i]);
		parse_sums(&nodes[i], reps[stride * i + NODE_CMDS]);
	}
	/* the nodes without the image sit out a first round (as if drained) */
	if (image)
		prefer_image(nodes, n, reps + NODE_CMDS_SUMS, stride);
	store_free_replies(reps, stride * n);
	if (util_random(rnd, sizeof(rnd)) < 0) {
		rnd[0] = (uint32_t)util_now_ms();
		rnd[1] = rnd[0] >> 7;
	}
	for (int round = 0; round < 2; round++) {
		k = placement_choose_fit(nodes, n, need, rnd[0], rnd[1]);
		if (k >= 0 || !image)
			break;
		for (size_t i = 0; i < n; i++)
			nodes[i].drained &= ~2;
	}
	if (k < 0 && need)
		return err_set(e, SBX_E_NO_CAPACITY,
			       "no live node has room for another sandbox of %lld MiB and %g cpus",
			       (long long)need->memory_mib, (double)need->cpus_milli / 1000.0);
	if (k < 0)
		return err_set(e, SBX_E_NO_CAPACITY, "no live node has room for another sandbox");
	*out = nodes[k];
	out->drained &= ~2;
	return 0;
}
