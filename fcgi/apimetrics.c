#include "apimetrics.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#ifndef SBX_VERSION
#define SBX_VERSION "0.1.0"
#endif

static const double latency_bounds[] = { METRICS_REQUEST_BOUNDS };
static const double redis_bounds[] = { METRICS_REDIS_BOUNDS };

static const char *const versions[] = { SBX_VERSION };
static const char *const components[] = { "api" };
/* The types this tier writes to sbx:events (docs/REDIS.md), then "other". */
static const char *const event_types[] = { "created", "started", "restarted", "replaced",
					   "slept", "destroyed", "tunnel-up", "tunnel-down",
					   "other" };

static struct metrics_routes routes;

#define ROUTE_DIM { NULL, NULL, 0 }    /* set by apimetrics_init */

static struct metrics_family families[APIM_COUNT] = {
	[APIM_BUILD] = { "sbx_build_info", "Version of this sbx component (always 1).",
			 METRICS_GAUGE, { { "component", components, 1 }, { "version", versions, 1 } },
			 NULL, 0, 0 },
	[APIM_REQUESTS] = { "sbx_api_requests_total",
			    "API requests answered, by route of the route table and HTTP status.",
			    METRICS_COUNTER, { ROUTE_DIM, { NULL, NULL, 0 } }, NULL, 0, 1 },
	[APIM_REQUEST_SECONDS] = { "sbx_api_request_duration_seconds",
				   "Time from the request's arrival at a worker to its answer.",
				   METRICS_HISTOGRAM, { ROUTE_DIM, { NULL, NULL, 0 } },
				   latency_bounds, ARRAY_SIZE(latency_bounds), 1 },
	[APIM_IN_FLIGHT] = { "sbx_api_requests_in_flight", "Requests a worker is answering now.",
			     METRICS_GAUGE, { { NULL, NULL, 0 }, { NULL, NULL, 0 } }, NULL, 0, 0 },
	[APIM_REDIS_SECONDS] = { "sbx_api_redis_duration_seconds",
				 "Round trip of one Redis command or pipelined batch of the workers.",
				 METRICS_HISTOGRAM, { { NULL, NULL, 0 }, { NULL, NULL, 0 } },
				 redis_bounds, ARRAY_SIZE(redis_bounds), 0 },
	[APIM_REDIS_ERRORS] = { "sbx_api_redis_errors_total",
				"Redis round trips that failed: no connection, timeout or I/O "
				"error (connection), or an error reply (reply).",
				METRICS_COUNTER, { { NULL, NULL, 0 }, { NULL, NULL, 0 } }, NULL, 0, 0 },
	[APIM_EVENTS] = { "sbx_sandbox_events_total",
			  "Lifecycle events written to sbx:events, by type (each tier counts its own).",
			  METRICS_COUNTER, { { "event", event_types, ARRAY_SIZE(event_types) },
					     { NULL, NULL, 0 } }, NULL, 0, 0 },
	[APIM_WORKERS] = { "sbx_api_workers", "FastCGI worker processes alive.", METRICS_GAUGE,
			   { { NULL, NULL, 0 }, { NULL, NULL, 0 } }, NULL, 0, 0 },
	[APIM_WORKER_EXITS] = { "sbx_api_worker_exits_total",
				"Workers that died on their own (they are restarted).",
				METRICS_COUNTER, { { NULL, NULL, 0 }, { NULL, NULL, 0 } }, NULL, 0, 0 },
};

static struct metrics *registry;
static const struct route *table;
static unsigned nroutes;

int apimetrics_init(unsigned nslots, struct sbx_err *e)
{
	table = router_routes;
	nroutes = (unsigned)router_nroutes;
	for (unsigned i = 0; i < nroutes; i++)
		if (metrics_routes_add(&routes, table[i].method, table[i].pattern, e) < 0)
			return -1;
	families[APIM_REQUESTS].dim[0] = metrics_routes_dim(&routes);
	families[APIM_REQUESTS].dim[1] = metrics_status_dim;
	families[APIM_REQUEST_SECONDS].dim[0] = families[APIM_REQUESTS].dim[0];
	families[APIM_REDIS_ERRORS].dim[0] = metrics_redis_error_dim;
	registry = metrics_new(families, APIM_COUNT, nslots, e);
	if (!registry)
		return -1;
	metrics_use(registry, nslots - 1);
	metrics_gauge_set(APIM_BUILD, 0, 0, 1);
	return 0;
}

void apimetrics_use(unsigned slot)
{
	metrics_use(registry, slot);
}

struct metrics *apimetrics_registry(void)
{
	return registry;
}

void apimetrics_request(const struct route *rt, int status, int64_t started_us)
{
	unsigned i = rt && rt >= table && rt < table + nroutes ? (unsigned)(rt - table) : nroutes;

	metrics_count(APIM_REQUESTS, i, metrics_status_index(status), 1);
	metrics_observe(APIM_REQUEST_SECONDS, i, 0, (double)(metrics_now_us() - started_us) / 1e6);
}

void apimetrics_redis(int64_t started_us, enum metrics_redis_error how)
{
	metrics_observe(APIM_REDIS_SECONDS, 0, 0, (double)(metrics_now_us() - started_us) / 1e6);
	if (how != METRICS_REDIS_OK)
		metrics_count(APIM_REDIS_ERRORS, (unsigned)how, 0, 1);
}

void apimetrics_event(const char *type)
{
	metrics_count(APIM_EVENTS, metrics_index(&families[APIM_EVENTS].dim[0], type), 0, 1);
}
