/*
 * rscripts.h — the text of every Lua script of sbx, for both tiers: sbx-api
 * runs them through fcgi/scripts.c (SCRIPT LOAD, EVALSHA, EVAL on
 * NOSCRIPT), sbx-agent sends its own with EVAL on its registry connection.
 * Every multi-step change of a record is one of these, never a
 * read-modify-write from C.
 *
 * The lifecycle scripts (create, start, destroy, repair, prune) change a
 * record together with its index entries (the tenant's set, label sets,
 * node set), which live under other hash tags; every script that changes a
 * record's node, state or resources (create, start, set_state, destroy,
 * agent_sleep, agent_lost) also moves what the record commits between the
 * nodes' sums (sbx:node:{n}:committed) in the same call: atomic on one Redis server,
 * not runnable on Redis Cluster (docs/DEPLOY.md). The others touch the keys
 * of one hash tag only. The keys a script builds itself from a record's
 * fields are spelled with the parts rkeys.h defines for them.
 *
 * Each id below carries its contract: KEYS, ARGV -> reply.
 */
#ifndef SBX_RSCRIPTS_H
#define SBX_RSCRIPTS_H

enum rscript_id {
	/* sbx-api. */
	/* KEYS record, tenant's set; ARGV tenant id node sleepAfter keepAlive
	 * labels resources network image env nowIso quota -> {1, epoch,
	 * generation} created with its index entries, {0, epoch, generation} it
	 * existed, {-1} the tenant's set holds quota others */
	RSCRIPT_CREATE,
	/* KEYS record; ARGV expectedEpoch node applyPending(0|1) nowIso ->
	 * {epoch, generation} (label and node sets follow the new labels and
	 * node), {-1} gone, {-2} moved on */
	RSCRIPT_START,
	/* KEYS record; ARGV expectedEpoch state [field value]... -> 1, 0 moved on, -1 gone */
	RSCRIPT_SET_STATE,
	/* KEYS record; ARGV expectedPending expectedGeneration pending sleepAfter
	 * keepAlive (empty: unchanged) -> 1, 0 changed meanwhile, -1 gone */
	RSCRIPT_UPDATE,
	/* KEYS record, tenant's set; ARGV expectedEpoch tenant id -> {1, node,
	 * generation} the record, every index entry and its usage entry (the
	 * tenant's totals) removed, {0} moved on, {-1} gone */
	RSCRIPT_DESTROY,
	/* KEYS record, tenant's set; ARGV tenant id: a record gets every index
	 * entry it lacks (-> the number added); without a record its member of
	 * the tenant's set and its usage entry go (-> -1 removed, 0 there was
	 * no member) */
	RSCRIPT_REPAIR,
	/* KEYS index record; ARGV kind(label|node) member value: remove member
	 * from the label set / node set unless the record holds the label
	 * "k=v" / names the node value -> 1 removed, 0 kept */
	RSCRIPT_PRUNE,
	/* KEYS node set, node's committed sums; ARGV node orphan(0|1): rebuild
	 * the sums (count, memoryMiB, cpusMilli) from the records of the set
	 * that run or start on node, the hash gone when none does; with orphan
	 * 1 only when the set does not exist -> 1 rewritten, 0 they were right */
	RSCRIPT_NODE_SUMS,
	/* KEYS key; ARGV value: DEL the string key when it still holds value ->
	 * 1 deleted, 0 not */
	RSCRIPT_CAD,
	/* KEYS hash; ARGV field value: HDEL the field when it still holds value
	 * -> 1 deleted, 0 not */
	RSCRIPT_HCAD,
	/* KEYS preview index; ARGV tenant: SET it unless it holds another
	 * tenant -> 1 ours, 0 taken */
	RSCRIPT_PREVIEW_CLAIM,
	/* KEYS tunnels-hash claim; ARGV port generation incarnation nonce ttl
	 * max -> {1, record} live record; {2, deadId} claimed by us; {0, deadId}
	 * someone else is making it; {-1} too many tunnels. A dead record is
	 * deleted and its tunnel id handed back for the index cleanup. */
	RSCRIPT_TUNNEL_CLAIM,
	/* KEYS tunnels-hash claim; ARGV port nonce record: store the record
	 * when the claim is still ours -> 1 stored, 0 lost the claim */
	RSCRIPT_TUNNEL_COMMIT,
	/* KEYS tenant's sandboxes zset, its usage hash; ARGV id memoryMiB
	 * cpusMilli limitMemory limitCpus resize(0|1) (id '': only sum). Drops
	 * usage of ids not in the zset, sums the others but id -> {status,
	 * usedMemory, usedCpus, zcard}; status 1 recorded, 2 summed, 0 id not
	 * in the zset, -2 memory or -3 cpus over the limit (a resize that does
	 * not grow is always recorded). */
	RSCRIPT_TENANT_USAGE,
	/* The key check and the tenant's rate limits of one API call (GCRA,
	 * one bucket per tenant and kind). KEYS apikey; ARGV tenant admin
	 * (tenant '': read both from the apikey hash) defaultRps defaultBurst
	 * defaultCreatesPerMinute create(0|1) -> {status, tenant, admin,
	 * limit, remaining, resetMs, retryMs, limited}: status 0 no such key, 1
	 * allowed (the buckets advanced), -1 refused (nothing written); limit
	 * 0: no limit applies to this call; limited 0: none to any call of the
	 * tenant. Overrides: the requestsPerSecond, requestsBurst and
	 * createsPerMinute fields of the tenant's limits hash. */
	RSCRIPT_AUTH_RATE,
	/* sbx-agent. KEYS record; ARGV node epoch lastActiveAt (ISO, or ""):
	 * set the record sleeping when it still names node at epoch and is
	 * running or starting (lastActiveAt only moves forward) -> 1 done, 0
	 * moved on, -1 no record. The caller adds the event: sbx:events is
	 * another hash slot. */
	RSCRIPT_AGENT_SLEEP,
	/* sbx-agent after a restart. KEYS record; ARGV node: the record names
	 * node and says running/starting but nothing runs there: set it
	 * sleeping -> {generation, epoch} done (the caller adds the "lost"
	 * event), 0 not ours / not running, -1 no record. */
	RSCRIPT_AGENT_LOST,
	/* sbx-agent, when a cloudflared process dies. KEYS tunnels-hash; ARGV
	 * port url: compare-and-delete on url -> {1, tunnel id} deleted, {0,
	 * ''} the record is another one (or gone). */
	RSCRIPT_TUNNEL_EVICT,
	/* sbx-agent, a snapshot made. KEYS snapbytes-counter record index;
	 * ARGV size quota-bytes created-ms sid field value…: within the quota,
	 * count it, write the record, index it -> {1, used before}; else
	 * {0, used} and nothing changes. */
	RSCRIPT_SNAPSHOT_ADD,
	/* sbx-api, DELETE /v1/snapshots/{sid}. KEYS snapbytes-counter record
	 * index; ARGV sid: -> its location (record gone, bytes uncounted), or
	 * false when there is no record. */
	RSCRIPT_SNAPSHOT_DEL,
	/* sbx-agent, a persisted sandbox saved before a stop. KEYS
	 * snapbytes-counter record index sandbox-record; ARGV size quota
	 * created-ms sid epoch sandbox-id field value…: while the sandbox's
	 * epoch is still epoch and within the quota (less the save it
	 * replaces), record it and make it the sandbox's restoreFrom; the
	 * previous save (name "persist", same sandbox) goes -> {1, its
	 * location or ''}; {0, ''} over the quota, {-1, ''} epoch moved. */
	RSCRIPT_SNAPSHOT_PERSIST,
	RSCRIPT__COUNT
};

/* The source of script id (static), NULL for an unknown id. */
const char *rscripts_source(enum rscript_id id);
/* Its short name for logs ("create", "agent_sleep", …), NULL likewise. */
const char *rscripts_name(enum rscript_id id);

#endif
