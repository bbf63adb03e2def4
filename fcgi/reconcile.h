/*
 * reconcile.h — the periodic repair of the tenant indexes of Redis.
 *
 * Records and their index entries (the tenant's set that counts the quota
 * and serves listings, the label sets, the node sets) change together in
 * the lifecycle scripts, so no interleaving of API calls separates them.
 * What else can (an operator's redis-cli, a restore, data written by an
 * older sbx-api) is found and repaired here: a record without its index
 * entries gets them, an index entry without its record (or naming a label
 * or node the record no longer has) goes; then each node's committed sums
 * (sbx:node:{n}:committed, what placement reads) are compared with the
 * records of its set and rebuilt where they differ, and the sums of a node
 * without a set go. Each repair is one script that re-reads the record
 * (the rebuild: every record of the node), so a pass racing with API calls
 * never undoes them.
 *
 * The master of sbx-api forks a short-lived child every
 * api.reconcile_interval (reconcile_run); one pass per interval runs in
 * the whole cluster (the lock sbx:reconcile, docs/REDIS.md).
 */
#ifndef SBX_RECONCILE_H
#define SBX_RECONCILE_H

#include "conf.h"
#include "err.h"

struct reconcile_stats {
	long long records;    /* records looked at */
	long long entries;    /* index entries looked at */
	long long added;      /* index entries a record lacked, added */
	long long removed;    /* index entries without their record, removed */
	long long sums;       /* nodes whose committed sums were rebuilt */
};

/* One pass over every record and index key (SCAN, never KEYS). 0 with st
 * filled, -1 with e (REDIS_UNAVAILABLE, …). */
int reconcile_pass(struct reconcile_stats *st, struct sbx_err *e);

/* The body of the master's reconciler child: connect with c, take the
 * cluster-wide lock for one interval, run a pass, log what it repaired.
 * Returns the exit status. */
int reconcile_run(const struct sbx_conf *c);

#endif
