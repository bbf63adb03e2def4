/*
 * pool.h — the warm pool of one agent: agent.warm_pool sandboxes of the
 * default spec (image "default", network "none", the [sandbox] disk_mib),
 * built ahead of time and refilled in the background on the agent's loop
 * (one build per loop turn; none within 50 ms of a claim, so that the
 * claimer's first command is not queued behind a build — a stream of
 * claims holds the refill back 250 ms at most).
 *
 * A create whose spec matches takes one (pool_claim): the runtime renames
 * it to the sandbox key (cgroups included) and writes the requested memory,
 * cpus and pids limits; the pool sets the hostname (setns into its UTS
 * namespace from a short-lived thread) and rewrites /etc/hosts. A pooled
 * sandbox has only ever run its init, so nothing of anyone carries over.
 *
 * Pool members are invisible to the API (not in the agent's table), are not
 * counted as the node's sandboxes or load, count against agent.capacity
 * (pool_make_room drops one for a fresh build), are checked every second
 * (a member whose init died is dropped and rebuilt) and are destroyed by
 * pool_drain / pool_free.
 */
#ifndef SBX_POOL_H
#define SBX_POOL_H

#include "conf.h"
#include "err.h"
#include "runtime.h"

#include <event2/event.h>

struct pool;

/* Counters of a pool, for logs and tests. */
struct pool_stats {
	unsigned size;        /* ready members now */
	unsigned target;      /* agent.warm_pool */
	unsigned long claims; /* creates served from the pool */
	unsigned long misses; /* matching creates that found it empty */
	unsigned long builds; /* members built */
	unsigned long failures; /* builds or claims that failed */
};

/* New pool of conf->agent.warm_pool members over rt; starts filling on
 * the next loop turn. NULL when the size is 0 (no pool: every pool_*
 * function accepts NULL) or on allocation failure (e filled). */
struct pool *pool_new(struct event_base *base, struct rt *rt, const struct sbx_conf *conf,
		      struct sbx_err *e);

/* Destroy every member and stop refilling for good (agent shutdown). */
void pool_drain(struct pool *p);

/* pool_drain + free. */
void pool_free(struct pool *p);

/* 1 when spec is the pool's spec (image, network, disk size); limits
 * other than the disk may differ. Pure. */
int pool_matches(const struct sbx_conf *conf, const struct rt_spec *spec);

/* A pooled sandbox handed over to spec (key, hostname, /etc/hosts, limits),
 * or NULL when the spec does not match, the pool is empty, or the hand-over
 * failed (the member is destroyed; the caller builds a fresh one). Borrowed
 * pointer as from rt_create(). */
struct rt_sandbox *pool_claim(struct pool *p, const struct rt_spec *spec);

/* Before a fresh build: when counted + pooled sandboxes fill the node's
 * capacity, drop one member so that the build fits. */
void pool_make_room(struct pool *p);

/* The /etc/hosts text of a sandbox named host (the same as the runtime
 * writes at build time) into out; -1 when it does not fit. Pure. */
int pool_hosts_text(char *out, size_t size, const char *host);

#endif
