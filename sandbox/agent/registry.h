/*
 * registry.h — the agent's entry in the Redis node registry.
 *
 * One asynchronous hiredis connection on the agent's event loop. On every
 * (re)connect it writes sbx:node:{name} (name, address, capacity, capacityBy, load,
 * sandboxes, memoryMiB, cpusMilli, version, startedAt, lastHeartbeat), SADD sbx:nodes and the
 * liveness key sbx:node:{name}:alive (PX cluster.node_ttl); every
 * cluster.heartbeat it refreshes the alive key and the changing fields.
 * When Redis is down it reconnects with back-off; the agent keeps running.
 *
 * The lease does not depend on the loop: once the loop has announced the
 * node, a heartbeat thread with a connection of its own SETs the alive key
 * every heartbeat too, while the loop ran at all within
 * REGISTRY_STALL_TTLS node_ttls (a long loop turn keeps the lease; a dead
 * loop loses it). The thread also probes the agent's HTTP server (a
 * connection to agent.listen that MHD must accept and read within a
 * second) and writes the node's state into its hash: "up", or "degraded"
 * when REGISTRY_PROBE_FAILS probes in a row got no answer or the loop has
 * not run for two heartbeats and a probe's time. Placement skips degraded
 * nodes.
 */
#ifndef SBX_REGISTRY_H
#define SBX_REGISTRY_H

#include "conf.h"
#include "err.h"

#include <event2/event.h>
#include <hiredis/async.h>
#include <sys/types.h>

struct registry;

/* Current numbers for the heartbeat: running sandboxes, load (permille
 * of capacity), the sandboxes the node takes now (capacity.h) and the
 * name of the limit that sets that (static). */
struct registry_stats {
	long long sandboxes, load, capacity;
	const char *capacity_by;
};
typedef void (*registry_stats_fn)(void *arg, struct registry_stats *out);

/* New heap object (registry_free); starts connecting at once. NULL with e
 * filled when redis.url is invalid. */
struct registry *registry_new(struct event_base *base, const struct sbx_conf *conf,
			      const char *version, registry_stats_fn stats, void *arg,
			      struct sbx_err *e);

/* The first step of a clean shutdown: stop the heartbeat and DEL the
 * alive key (the node is down for placement at once, state "down" in its
 * hash); the connection stays for the last updates. */
void registry_leave(struct registry *reg);

/* Deregister: DEL the alive key, set the node's hash to state down with no
 * sandboxes (the entry and its sbx:nodes membership stay: /v1/nodes shows
 * the node down, not gone), add node.down, waiting at most timeout_ms for
 * Redis; then done(arg) runs on the loop. Without a connection done runs
 * at once (from the loop). */
void registry_shutdown(struct registry *reg, int timeout_ms, void (*done)(void *arg), void *arg);

/* Where the agent's other Redis connections go (its event streams): the
 * primary this registry connected to last — redis.url, or the one the
 * sentinels named. Borrowed from reg; NULL before the first connect. */
struct redisurl;
const struct redisurl *registry_redis_addr(const struct registry *reg);

/* 1 while the connection is up and registered and Redis takes writes
 * (its last answer to the alive SET was no refusal, rerror.h). */
int registry_connected(const struct registry *reg);

/* Does this node hold its lease: was its alive key set less than
 * cluster.node_ttl ago (counted from when the SET was sent)? A node that
 * lost it (stopped, cut off, Redis gone) may have been replaced: it must not
 * start work until it has it back and its fencing sweep has run. */
int registry_lease_valid(const struct registry *reg);

/* The lease as the registry and the fence keeper (keeper.h) share it, in
 * a MAP_SHARED page made by registry_new (so a process forked after it
 * sees every update). Read and written with __atomic builtins only. */
struct registry_lease {
	int64_t until;     /* monotonic ms: our alive key surely exists until then */
	int64_t serial;    /* grows each time the lease is regained after a gap */
};
const struct registry_lease *registry_lease(const struct registry *reg);

/* Changes whenever the lease lapsed and was regained: work begun at one
 * serial and ending at another (or while the lease is not valid) spanned
 * a time when this node may have been replaced, and must not report
 * success. */
int64_t registry_lease_serial(const struct registry *reg);

/* The alive key was SET at monotonic time sent (ms) and acknowledged:
 * extend l to sent + ttl_ms, and count a gap when sent is at or after the
 * old end. Pure; thread-safe. */
void registry_lease_extend(struct registry_lease *l, int64_t sent, int64_t ttl_ms);

/* Called on the loop after every (re)connect, BEFORE the node is announced
 * (its entry and alive key written); first is 1 for the first connection of
 * this process. The hook must call registry_announce() once it has queued
 * what Redis must see first — commands on one connection run in order, so
 * a restarted agent can mark its old sandboxes lost before anyone may route
 * to it. Without a hook the registry announces at once. */
typedef void (*registry_connect_fn)(void *arg, int first);
void registry_on_connect(struct registry *reg, registry_connect_fn fn, void *arg);

/* Write the node entry and the alive key, then keep them fresh every
 * heartbeat. Idempotent per connection. */
void registry_announce(struct registry *reg);

/* The answer to registry_command: reply is NULL when the connection went
 * away before Redis answered (then only release what arg holds). The
 * reply belongs to hiredis: do not keep it past the call. */
struct redisReply;
typedef void (*registry_reply_fn)(void *arg, struct redisReply *reply);

/* Send one command (hiredis format; printf-checked, so %s and %lld only, no %b) on the registry's
 * connection. 0: queued, fn runs exactly once later (fn may be NULL);
 * -1: not connected, fn never runs. */
int registry_command(struct registry *reg, registry_reply_fn fn, void *arg, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* An asynchronous Redis connection to u on base, close-on-exec, ac->data
 * set to data, with the two callbacks: the context, or NULL with e
 * (REDIS_UNAVAILABLE when it cannot be started, INTERNAL when it cannot
 * be attached to base). The registry's connections and the event streams'. */
redisAsyncContext *registry_async_connect(struct event_base *base, const struct redisurl *u,
					  void *data, redisConnectCallback *on_connect,
					  redisDisconnectCallback *on_disconnect, struct sbx_err *e);

void registry_free(struct registry *reg);

#define REGISTRY_STALL_TTLS 3
#define REGISTRY_PROBE_FAILS 2

/* Pure rules of the heartbeat thread (unit-tested): the node's state from
 * the probe and how long the loop has not run; whether it may still SET
 * the alive key; whether n bytes read from the probe are an answer. */
const char *registry_node_state(int probes_failed, int64_t loop_idle_ms, int64_t heartbeat_ms);
int registry_loop_may_hold_lease(int64_t loop_idle_ms, int64_t node_ttl_ms);
int registry_probe_answered(const char *buf, ssize_t n);

#endif
