/*
 * placement.h — which node takes a sandbox.
 *
 * Among the live nodes with room (running < capacity) pick two at random
 * and take the less loaded one ("power of two choices"); load is the number
 * of sandboxes placed on the node (sbx:node:{name}:sandboxes). The choice is
 * a pure function over fetched data (placement_choose) so it is unit-tested;
 * placement_pick() fetches the registry from Redis and chooses.
 */
#ifndef SBX_PLACEMENT_H
#define SBX_PLACEMENT_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>

struct placement_node {
	char name[64];
	char address[128];      /* host:port of the agent */
	int alive;              /* sbx:node:{name}:alive exists */
	int64_t capacity;       /* from the node's registration */
	int64_t running;        /* the node's own count of running sandboxes */
	int64_t load;           /* sandboxes placed on the node (index size) */
};

/* 1 when n can take one more sandbox: alive, an address, running < capacity. */
int placement_has_room(const struct placement_node *n);

/* Index into nodes[0..n) of the chosen node, or -1 when none has room.
 * r1, r2 are random numbers (the two choices). */
int placement_choose(const struct placement_node *nodes, size_t n, uint32_t r1, uint32_t r2);

/* Read one node's registration and liveness into out. 0 or -1 with e. */
int placement_fetch_node(const char *name, struct placement_node *out, struct sbx_err *e);

/* Fetch the registry and choose; 0 with out filled, or -1 with e =
 * NO_CAPACITY (no live node with room) or REDIS_UNAVAILABLE. */
int placement_pick(struct placement_node *out, struct sbx_err *e);

#endif
