/*
 * scripts.h — the Lua scripts of sbx-api: the sandbox lifecycle and the
 * preview and tunnel records (every multi-step change of a record is one of
 * these, never a read-modify-write from C).
 *
 * The lifecycle scripts (create, start, destroy, repair, prune) change a
 * record together with its index entries (the tenant's set, label sets, node
 * set), which live under other hash tags: atomic on one Redis server, not
 * runnable on Redis Cluster (docs/DEPLOY.md). The others touch the keys of
 * one hash tag only. A script is loaded with SCRIPT LOAD the first time a process
 * needs it and called with EVALSHA; a NOSCRIPT answer (Redis restarted, or
 * another server) falls back to EVAL and forgets the digest, so the next
 * call loads it again.
 */
#ifndef SBX_SCRIPTS_H
#define SBX_SCRIPTS_H

#include "err.h"

#include <hiredis/hiredis.h>

enum script_id {
	/* KEYS record, tenant's set; ARGV tenant id node sleepAfter keepAlive
	 * labels resources network image env nowIso quota -> {1, epoch,
	 * generation} created with its index entries, {0, epoch, generation} it
	 * existed, {-1} the tenant's set holds quota others */
	SCRIPT_CREATE,
	/* KEYS record; ARGV expectedEpoch node applyPending(0|1) nowIso ->
	 * {epoch, generation} (label and node sets follow the new labels and
	 * node), {-1} gone, {-2} moved on */
	SCRIPT_START,
	/* KEYS record; ARGV expectedEpoch state [field value]... -> 1, 0 moved on, -1 gone */
	SCRIPT_SET_STATE,
	/* KEYS record; ARGV expectedPending expectedGeneration pending sleepAfter
	 * keepAlive (empty: unchanged) -> 1, 0 changed meanwhile, -1 gone */
	SCRIPT_UPDATE,
	/* KEYS record, tenant's set; ARGV expectedEpoch tenant id -> {1, node,
	 * generation} the record, every index entry and its usage entry (the
	 * tenant's totals) removed, {0} moved on, {-1} gone */
	SCRIPT_DESTROY,
	/* KEYS record, tenant's set; ARGV tenant id: a record gets every index
	 * entry it lacks (-> the number added); without a record its member of
	 * the tenant's set and its usage entry go (-> -1 removed, 0 there was
	 * no member) */
	SCRIPT_REPAIR,
	/* KEYS index record; ARGV kind(label|node) member value: remove member
	 * from the label set / node set unless the record holds the label
	 * "k=v" / names the node value -> 1 removed, 0 kept */
	SCRIPT_PRUNE,
	/* KEYS key; ARGV value: DEL the string key when it still holds value ->
	 * 1 deleted, 0 not */
	SCRIPT_CAD,
	/* KEYS hash; ARGV field value: HDEL the field when it still holds value
	 * -> 1 deleted, 0 not */
	SCRIPT_HCAD,
	/* KEYS preview index; ARGV tenant: SET it unless it holds another
	 * tenant -> 1 ours, 0 taken */
	SCRIPT_PREVIEW_CLAIM,
	/* KEYS tunnels-hash claim; ARGV port generation incarnation nonce ttl
	 * max -> {1, record} live record; {2, deadId} claimed by us; {0, deadId}
	 * someone else is making it; {-1} too many tunnels. A dead record is
	 * deleted and its tunnel id handed back for the index cleanup. */
	SCRIPT_TUNNEL_CLAIM,
	/* KEYS tunnels-hash claim; ARGV port nonce record: store the record
	 * when the claim is still ours -> 1 stored, 0 lost the claim */
	SCRIPT_TUNNEL_COMMIT,
	/* KEYS tenant's sandboxes zset, its usage hash; ARGV id memoryMiB
	 * cpusMilli limitMemory limitCpus resize(0|1) (id '': only sum). Drops
	 * usage of ids not in the zset, sums the others but id -> {status,
	 * usedMemory, usedCpus, zcard}; status 1 recorded, 2 summed, 0 id not
	 * in the zset, -2 memory or -3 cpus over the limit (a resize that does
	 * not grow is always recorded). */
	SCRIPT_TENANT_USAGE,
	SCRIPT__COUNT
};

/* The source of a script (for tests and operators). */
const char *scripts_source(enum script_id id);

/* Run script id with nkeys keys and nargs arguments. New reply
 * (freeReplyObject) or NULL with e: REDIS_UNAVAILABLE, or INTERNAL when the
 * script itself failed (its error is logged). */
redisReply *scripts_run(enum script_id id, int nkeys, const char **keys, int nargs,
			const char **args, struct sbx_err *e);

#endif
