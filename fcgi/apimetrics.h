/*
 * apimetrics.h — the metrics of sbx-api (metrics.h): what its workers
 * count, summed by the master, which serves them on api.metrics_listen.
 *
 * The master calls apimetrics_init before it forks anything: the registry
 * is one MAP_SHARED mapping with a slot per worker slot of the master and
 * one of its own (APIMETRICS_MASTER_SLOT); a worker takes its slot with
 * apimetrics_use right after the fork. Labels are bounded: a route is its
 * row of the route table ("PUT /v1/sandboxes/{id}", "none" when no row
 * matched), a status one of metrics_status_dim, an event one of the
 * lifecycle event types.
 */
#ifndef SBX_APIMETRICS_H
#define SBX_APIMETRICS_H

#include "err.h"
#include "metrics.h"
#include "router.h"

#include <stdint.h>

enum apimetrics_family {
	APIM_BUILD,
	APIM_REQUESTS,
	APIM_REQUEST_SECONDS,
	APIM_IN_FLIGHT,
	APIM_REDIS_SECONDS,
	APIM_REDIS_ERRORS,
	APIM_EVENTS,
	APIM_WORKERS,
	APIM_WORKER_EXITS,
	APIM_COUNT
};

/* Make the registry for nslots slots; the calling process takes the last
 * one (the master's). 0 or -1 with e. */
int apimetrics_init(unsigned nslots, struct sbx_err *e);
/* This process writes into slot from now on (a worker, after fork). */
void apimetrics_use(unsigned slot);
/* The registry (borrowed; NULL before apimetrics_init). */
struct metrics *apimetrics_registry(void);

/* One request answered: its route row (NULL: none matched), the status
 * sent and when it began (metrics_now_us). */
void apimetrics_request(const struct route *rt, int status, int64_t started_us);
/* One Redis round trip that began at started_us, and how it ended. */
void apimetrics_redis(int64_t started_us, enum metrics_redis_error how);
/* One event of type (sbx:events) written by this tier. */
void apimetrics_event(const char *type);

#endif
