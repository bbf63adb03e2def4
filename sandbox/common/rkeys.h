/*
 * rkeys.h — every Redis key of sbx, spelled in this file only (both tiers
 * build their keys here; docs/REDIS.md describes them).
 *
 * All keys of one sandbox share the hash tag {tenant/id}, of one tenant
 * {tenant}, of one node {node}. A builder writes the key into out
 * (RKEYS_MAX bytes) and returns out. Every name that reaches a builder has
 * been validated and is bounded (ids.h), so a key longer than RKEYS_MAX is
 * a bug: it is logged and the process aborts rather than use a truncated
 * key, which would name another key.
 *
 * The RK_* macros build into a buffer of the enclosing expression, for
 * use as an argument: store_command(e, "HGETALL %s", RK_SANDBOX(t, id)).
 */
#ifndef SBX_RKEYS_H
#define SBX_RKEYS_H

#include <stddef.h>

#define RKEYS_MAX 512

#define RKEYS_NODES "sbx:nodes"       /* set of node names */
#define RKEYS_EVENTS "sbx:events"     /* the event stream */
#define RKEYS_RECONCILE "sbx:reconcile" /* the reconciler's lock */
#define RKEYS_HEALTH "sbx:health"     /* /healthz's write probe */
/* The head of every event command: "XADD sbx:events MAXLEN ~ 10000 * ". */
#define RKEYS_XADD_EVENT "XADD " RKEYS_EVENTS " MAXLEN ~ 10000 * "

/* sbx:sb:{tenant/id} — the sandbox record (a hash). */
char *rkeys_sandbox(char out[RKEYS_MAX], const char *tenant, const char *id);
/* The same from the "tenant/id" members of the node sets. */
char *rkeys_sandbox_ref(char out[RKEYS_MAX], const char *tenant_slash_id);
/* sbx:sb:{tenant/id}:<sub> — its ports / tunnels hashes. */
char *rkeys_sandbox_sub(char out[RKEYS_MAX], const char *tenant, const char *id,
			const char *sub);
/* sbx:sb:{tenant/id}:tunnels:claim:<port> — a tunnel being made. */
char *rkeys_tunnel_claim(char out[RKEYS_MAX], const char *tenant, const char *id, int port);
/* sbx:tenant:{tenant}:<sub> — sandboxes (zset), limits, usage (hashes). */
char *rkeys_tenant(char out[RKEYS_MAX], const char *tenant, const char *sub);
/* sbx:tenant:{tenant}:label:<key>=<value> — the label index (zset). */
char *rkeys_tenant_label(char out[RKEYS_MAX], const char *tenant, const char *key,
			 const char *value);
/* sbx:node:{node}, or sbx:node:{node}:<sub> (alive, sandboxes, committed)
 * when sub. */
char *rkeys_node(char out[RKEYS_MAX], const char *node, const char *sub);
/* sbx:apikey:<sha256 hex>, sbx:preview:<sha256 hex>, sbx:tunnel:<id>. */
char *rkeys_apikey(char out[RKEYS_MAX], const char *hex);
char *rkeys_preview(char out[RKEYS_MAX], const char *hex);
char *rkeys_tunnel(char out[RKEYS_MAX], const char *tid);
/* sbx:ticket:<ticket> — a terminal's WebSocket ticket (tk_ + 32 hex). */
char *rkeys_ticket(char out[RKEYS_MAX], const char *ticket);

/* sbx:snap:{tenant}:<sid> — a snapshot's record (a hash); its tenant's
 * index is rkeys_tenant(t, "snapshots") (a zset by creation time). */
char *rkeys_snapshot(char out[RKEYS_MAX], const char *tenant, const char *sid);

#define RK_BUF ((char[RKEYS_MAX]){ 0 })
#define RK_SANDBOX(t, id) rkeys_sandbox(RK_BUF, (t), (id))
#define RK_SANDBOX_SUB(t, id, sub) rkeys_sandbox_sub(RK_BUF, (t), (id), (sub))
#define RK_TENANT(t, sub) rkeys_tenant(RK_BUF, (t), (sub))
#define RK_NODE(n, sub) rkeys_node(RK_BUF, (n), (sub))
#define RK_SNAPSHOT(t, sid) rkeys_snapshot(RK_BUF, (t), (sid))

/* SCAN patterns of the key families the reconciler walks, and the parts
 * around the names in them. */
#define RKEYS_SCAN_SANDBOXES "sbx:sb:{*}"
#define RKEYS_SCAN_TENANT_SETS "sbx:tenant:{*}:sandboxes"
#define RKEYS_SCAN_LABEL_SETS "sbx:tenant:{*}:label:*"
#define RKEYS_SCAN_NODE_SETS "sbx:node:{*}:sandboxes"
#define RKEYS_SCAN_NODE_COMMITTED "sbx:node:{*}:committed"
#define RKEYS_SANDBOX_HEAD "sbx:sb:{"
#define RKEYS_TENANT_HEAD "sbx:tenant:{"
#define RKEYS_NODE_HEAD "sbx:node:{"
/* The rest of the index keys the lifecycle scripts build from a record's
 * own fields (rscripts.c): RKEYS_TENANT_HEAD tenant RKEYS_LABEL_MID "k=v",
 * RKEYS_NODE_HEAD node RKEYS_SANDBOXES_TAIL, RKEYS_NODE_HEAD node
 * RKEYS_COMMITTED_TAIL, RKEYS_TENANT_HEAD tenant RKEYS_USAGE_TAIL
 * (test_rkeys compares them with the builders). */
#define RKEYS_LABEL_MID "}:label:"
#define RKEYS_SANDBOXES_TAIL "}:sandboxes"
#define RKEYS_COMMITTED_TAIL "}:committed"
#define RKEYS_USAGE_TAIL "}:usage"
/* The keys of the auth_rate script, built from the tenant of an API key. */
#define RKEYS_LIMITS_TAIL "}:limits"
#define RKEYS_RATE_REQUESTS_TAIL "}:rate:requests"
#define RKEYS_RATE_CREATES_TAIL "}:rate:creates"

#endif
