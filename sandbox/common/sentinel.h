/*
 * sentinel.h — finding the Redis primary through Redis Sentinel, for both
 * tiers (sbx-api's synchronous store, the agent's asynchronous registry and
 * its heartbeat thread).
 *
 * With redis.sentinels set, redis.url is not used: a client asks the
 * sentinels in turn (SENTINEL get-master-addr-by-name redis.master_name),
 * connects to the address the first one that knows gives, and checks with
 * ROLE that it is the master before it sends anything else. It resolves
 * again whenever it connects: after any lost connection, a ROLE that is
 * not "master", a READONLY answer (a demoted primary), or — in the agent —
 * a +switch-master message of a sentinel it subscribes to. A failover thus
 * costs calls a 503 REDIS_UNAVAILABLE (with Retry-After) only until the
 * sentinels have promoted a replica.
 *
 * The parsing of the configuration and of the replies is pure (here, and
 * unit-tested); the synchronous calls are here too; the agent drives the
 * same steps on its loop (registry.c).
 */
#ifndef SBX_SENTINEL_H
#define SBX_SENTINEL_H

#include "conf.h"
#include "err.h"
#include "redisurl.h"

#include <hiredis/hiredis.h>
#include <stdint.h>

#define SENTINEL_MAX 8

/* Where Redis is: one address, or a set of sentinels and a master name. */
struct sentinel_conf {
	struct redisurl direct;            /* redis.url (unused with sentinels) */
	int n;                             /* sentinels; 0: use direct */
	struct redisurl s[SENTINEL_MAX];
	char master[CONF_STR_MAX];         /* redis.master_name */
};

/* The Redis part of c into out: redis.url, or redis.sentinels with
 * redis.master_name (required then: 1-255 of [A-Za-z0-9._-]). 0, or -1
 * with e = VALIDATION_FAILED naming the key. */
int sentinel_conf_init(const struct sbx_conf *c, struct sentinel_conf *out, struct sbx_err *e);

/* The reply of SENTINEL get-master-addr-by-name: [host, port] into out
 * (a TCP address). 1 found, 0 the sentinel does not know the name (nil),
 * -1 malformed (an error reply included). */
int sentinel_parse_master(const redisReply *r, struct redisurl *out);

/* The reply of ROLE: 1 when its first element is "master", 0 another
 * role, -1 malformed. */
int sentinel_parse_role(const redisReply *r);

/* A message of a subscription to +switch-master ["message",
 * "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"]:
 * 1 with out = the new address when it is about master, 0 another master
 * or another message, -1 malformed. */
int sentinel_parse_switch(const redisReply *r, const char *master, struct redisurl *out);

/* 1 when an error reply says the server no longer takes writes as the
 * primary (READONLY: a replica), so the client must resolve again. */
int sentinel_reply_demoted(const redisReply *r);

/* Ask the sentinels in turn, starting at *next (advanced past one that
 * failed, so a dead sentinel is not asked first every time), each with
 * connect and command timeouts of timeout_ms. 0 with out, or -1 with e =
 * REDIS_UNAVAILABLE. */
int sentinel_resolve(const struct sentinel_conf *sc, int64_t timeout_ms, int *next,
		     struct redisurl *out, struct sbx_err *e);

/* A blocking connection to Redis: sc->direct, or the primary the
 * sentinels name, checked with ROLE. CLOEXEC, with command_ms as its
 * timeout. New context (redisFree), or NULL with e = REDIS_UNAVAILABLE.
 * at (may be NULL) gets the address connected to. */
redisContext *sentinel_connect(const struct sentinel_conf *sc, int64_t connect_ms,
			       int64_t command_ms, int *next, struct redisurl *at,
			       struct sbx_err *e);

/* host:port (or the unix path) of u into out, for logs. */
const char *sentinel_addr_str(const struct redisurl *u, char *out, size_t outsz);

#endif
