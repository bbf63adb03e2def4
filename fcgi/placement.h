/*
 * placement.h — which node takes a sandbox.
 *
 * Among the live nodes with room (running < capacity) pick two at random
 * and take the less loaded one ("power of two choices"); load is the number
 * of sandboxes placed on the node (sbx:node:{name}:sandboxes). The choice is
 * a pure function over fetched data (placement_choose) so it is unit-tested;
 * placement_pick() fetches the registry from Redis and chooses.
 *
 * Room also means memory and cpus: a node that reports memoryMiB/cpusMilli
 * (agent.memory_mib, agent.cpus_milli) takes a sandbox only while the
 * limits committed there plus the new one's stay within them. Committed is
 * what the records that run there (starting or running; a sleeping
 * sandbox commits nothing) hold: the record scripts keep it summed per
 * node in sbx:node:{name}:committed (rscripts.h), and the reconciler
 * rebuilds a sum that drifted, so placement reads one hash per node in the
 * registry's pipelined round trip, whatever the number of sandboxes there.
 * Two placements at the same moment may both see the same room: the sums
 * are a placement rule, not a reservation.
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
	int64_t memory_mib;     /* memory limits it may commit (0: not counted) */
	int64_t cpus_milli;     /* cpu limits it may commit (0: not counted) */
	int64_t memory_committed;   /* by its running sandboxes (placement_pick,
				     * placement_room_for) */
	int64_t cpus_committed;
	int degraded;           /* its heartbeat says its HTTP server does not answer */
	int drained;            /* sbx:node:{name}:drain exists (POST /v1/nodes/{n}/drain) */
};

/* The size of the sandbox being placed, and its registry image. */
struct placement_need {
	int64_t memory_mib;
	int64_t cpus_milli;
	const char *image;      /* canonical reference (imgref_format) or NULL: placement
				 * prefers the nodes whose sbx:node:{n}:images holds it */
	const char *avoid;      /* a node that has just answered NO_CAPACITY, or NULL */
};

/* 1 when n can take one more sandbox: alive, not degraded, not drained,
 * an address, running < capacity. */
int placement_has_room(const struct placement_node *n);

/* placement_has_room, and need fits in the memory and cpus the node has
 * not committed (need NULL: the count only). */
int placement_fits(const struct placement_node *n, const struct placement_need *need);

/* Index into nodes[0..n) of the chosen node, or -1 when none has room.
 * r1, r2 are random numbers (the two choices). */
int placement_choose(const struct placement_node *nodes, size_t n, uint32_t r1, uint32_t r2);

/* placement_choose among the nodes need fits (placement_fits). */
int placement_choose_fit(const struct placement_node *nodes, size_t n,
			 const struct placement_need *need, uint32_t r1, uint32_t r2);

/* Read one node's registration and liveness into out. 0 or -1 with e. */
int placement_fetch_node(const char *name, struct placement_node *out, struct sbx_err *e);

/* 1 when n (as placement_fetch_node filled it) has room for need, its
 * committed sums read now (one HMGET); 0 when not, or when they cannot be
 * read (logged: the caller then picks another node). */
int placement_room_for(struct placement_node *n, const struct placement_need *need);

/* Fetch the registry and choose a node need fits (among the nodes that
 * hold need->image first, when one of them fits); 0 with out filled, or -1
 * with e = NO_CAPACITY (no live node with room) or REDIS_UNAVAILABLE. */
int placement_pick(const struct placement_need *need, struct placement_node *out,
		   struct sbx_err *e);

#endif
