#include "agent_metrics.h"
#include "forward.h"
#include "log.h"
#include "registry.h"
#include "rkeys.h"
#include "util.h"

#include <dirent.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define METRICS_MAX_CONNS 64
#define PLACED_EVERY 5        /* heartbeats between two counts of the node's set */

static const double latency_bounds[] = { METRICS_REQUEST_BOUNDS };
static const double redis_bounds[] = { METRICS_REDIS_BOUNDS };
/* The loop's lag: a probe timer every LAG_EVERY_MS records how late it
 * ran, so a stall of the loop (a callback that blocks) shows as lag. */
#define LAG_EVERY_MS 10
static const double lag_bounds[] = { 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1 };

static const char *const versions[] = { AGENT_VERSION };
static const char *const components[] = { "agent" };
/* The types this tier writes to sbx:events (docs/REDIS.md), then "other". */
static const char *const event_types[] = { "crashed", "slept", "fenced", "lost", "reset",
					   "other" };
static const char *const states[] = { "running", "stopped", "dead" };
enum { ST_RUNNING, ST_STOPPED, ST_DEAD };
static const char *const exec_modes[] = { "json", "sse" };
static const char *const pull_results[] = { "ok", "failed" };
static const char *const snap_ops[] = { "create", "import", "persist", "restore", "export" };
static const char *const snap_results[] = { "ok", "failed" };
static const char *const snap_directions[] = { "written", "read" };

static struct metrics_routes routes;

#define NO_DIM { NULL, NULL, 0 }
#define NO_DIMS { NO_DIM, NO_DIM }
#define DIM(name, values) { name, values, ARRAY_SIZE(values) }
#define GAUGE(n, h) { n, h, METRICS_GAUGE, NO_DIMS, NULL, 0, 0 }

static struct metrics_family families[AM_COUNT] = {
	[AM_BUILD] = { "sbx_build_info", "Version of this sbx component (always 1).", METRICS_GAUGE,
		       { DIM("component", components), DIM("version", versions) }, NULL, 0, 0 },
	[AM_REQUESTS] = { "sbx_agent_requests_total",
			  "Agent requests answered, by route of the route table and HTTP status.",
			  METRICS_COUNTER, NO_DIMS, NULL, 0, 1 },
	[AM_REQUEST_SECONDS] = { "sbx_agent_request_duration_seconds",
				 "Time from a request's headers to the end of its answer "
				 "(streams: their whole life).",
				 METRICS_HISTOGRAM, NO_DIMS,
				 latency_bounds, ARRAY_SIZE(latency_bounds), 1 },
	[AM_REDIS_SECONDS] = { "sbx_agent_redis_duration_seconds",
			       "Round trip of one Redis command of the agent's loop.",
			       METRICS_HISTOGRAM, NO_DIMS, redis_bounds, ARRAY_SIZE(redis_bounds), 0 },
	[AM_REDIS_ERRORS] = { "sbx_agent_redis_errors_total",
			      "Redis commands of the loop that failed: dropped with the "
			      "connection (connection) or answered with an error (reply).",
			      METRICS_COUNTER, NO_DIMS, NULL, 0, 0 },
	[AM_REDIS_CONNECTED] = GAUGE("sbx_agent_redis_connected",
				     "1 while the loop's Redis connection is up."),
	[AM_LEASE_VALID] = GAUGE("sbx_agent_lease_valid",
				 "1 while this node holds its lease (its alive key is fresh)."),
	[AM_EVENTS] = { "sbx_sandbox_events_total",
			"Lifecycle events written to sbx:events, by type (each tier counts its own).",
			METRICS_COUNTER, { DIM("event", event_types), NO_DIM }, NULL, 0, 0 },
	[AM_SANDBOXES] = { "sbx_agent_sandboxes",
			   "Sandboxes this agent holds: running, stopped (slept here, no "
			   "container), dead (init died, being released).",
			   METRICS_GAUGE, { DIM("state", states), NO_DIM }, NULL, 0, 0 },
	[AM_PLACED] = GAUGE("sbx_agent_sandboxes_placed",
			    "Sandboxes Redis places on this node, running or sleeping "
			    "(SCARD of its node set, every 5 heartbeats)."),
	[AM_CAPACITY] = GAUGE("sbx_agent_capacity", "Sandboxes this node takes now: agent.capacity or less (fds, pids, uid ranges)."),
	[AM_POOL] = GAUGE("sbx_agent_warm_pool_sandboxes", "Warm pool sandboxes built and ready."),
	[AM_POOL_TARGET] = GAUGE("sbx_agent_warm_pool_target",
				 "Warm pool size the agent keeps (agent.warm_pool)."),
	[AM_EXECS] = { "sbx_agent_execs_total", "Commands run by the exec route, by answer mode.",
		       METRICS_COUNTER, { DIM("mode", exec_modes), NO_DIM }, NULL, 0, 0 },
	[AM_STREAMS] = { "sbx_agent_streams_total",
			 "Live streams begun (streamed answers, uploads, forwarded connections).",
			 METRICS_COUNTER, NO_DIMS, NULL, 0, 0 },
	[AM_STREAMS_OPEN] = GAUGE("sbx_agent_streams_open", "Live streams open now."),
	[AM_FORWARDERS] = GAUGE("sbx_agent_forwarders",
				"Port forwarders open (the ends of previews and tunnels)."),
	[AM_FORWARD_CONNS] = GAUGE("sbx_agent_forward_connections",
				   "Preview and tunnel connections being relayed."),
	[AM_TUNNEL_PROCS] = GAUGE("sbx_agent_tunnel_processes",
				  "Tunnel processes (cloudflared) running on this node."),
	[AM_OOM_KILLS] = { "sbx_agent_oom_kills_total",
			   "Processes the kernel killed for a sandbox's memory limit.",
			   METRICS_COUNTER, NO_DIMS, NULL, 0, 0 },
	[AM_IMAGE_PULLS] = { "sbx_agent_image_pulls_total",
			     "Registry image pulls ended (one per image however many creates waited), by result.",
			     METRICS_COUNTER, { DIM("result", pull_results), NO_DIM }, NULL, 0, 0 },
	[AM_IMAGE_PULL_BYTES] = { "sbx_agent_image_pull_bytes_total",
				  "Bytes received from registries by image pulls (manifests, "
				  "configs, layers).", METRICS_COUNTER, NO_DIMS, NULL, 0, 0 },
	[AM_SNAPSHOTS] = { "sbx_agent_snapshots_total",
			   "Snapshot calls ended, by op (create, import, persist: a save "
			   "before a stop, restore, export) and result.",
			   METRICS_COUNTER, { DIM("op", snap_ops), DIM("result", snap_results) },
			   NULL, 0, 0 },
	[AM_SNAPSHOT_BYTES] = { "sbx_agent_snapshot_bytes_total",
				"Archive bytes of snapshots written to the store (create, import, "
				"persist) and read from it (restore, export).", METRICS_COUNTER,
				{ DIM("direction", snap_directions), NO_DIM }, NULL, 0, 0 },
	[AM_RSS] = GAUGE("process_resident_memory_bytes", "Resident memory of the agent process."),
	[AM_FDS] = GAUGE("process_open_fds", "Open file descriptors of the agent process."),
	[AM_BIG_BODIES] = GAUGE("sbx_agent_big_bodies_bytes",
				"Bytes of /cf request bodies buffered now, against "
				"agent.big_bodies_node_bytes."),
	[AM_LOOP_LAG] = { "sbx_agent_loop_lag_seconds",
			  "How late the event loop ran a timer due every 10 ms: a callback "
			  "blocking the loop for d shows as a lag up to d.",
			  METRICS_HISTOGRAM, NO_DIMS, lag_bounds, ARRAY_SIZE(lag_bounds), 0 },
};

static struct metrics *registry;
static struct httpd *listener;
static struct event *placed_ev;
static struct event *lag_ev;
static int64_t lag_due_us;

/* Arm the probe LAG_EVERY_MS from now. */
static void lag_arm(void)
{
	struct timeval tv = { 0, LAG_EVERY_MS * 1000 };

	lag_due_us = metrics_now_us() + LAG_EVERY_MS * 1000;
	if (event_add(lag_ev, &tv) < 0)
		log_warn("metrics: cannot re-arm the loop's lag probe");
}

static void lag_cb(evutil_socket_t fd, short what, void *arg)
{
	int64_t late = metrics_now_us() - lag_due_us;

	metrics_observe(AM_LOOP_LAG, 0, 0, late > 0 ? (double)late / 1e6 : 0.0);
	lag_arm();
}
static const struct httpd_route *table;
static unsigned nroutes;
static uint64_t oom_gone;   /* OOM kills of containers destroyed so far */

void agent_metrics_request(const struct httpd_route *route, int status, double seconds)
{
	unsigned i = route && route >= table && route < table + nroutes ?
		     (unsigned)(route - table) : nroutes;

	metrics_count(AM_REQUESTS, i, metrics_status_index(status), 1);
	metrics_observe(AM_REQUEST_SECONDS, i, 0, seconds);
}

void agent_metrics_redis(int64_t sent_us, enum metrics_redis_error how)
{
	metrics_observe(AM_REDIS_SECONDS, 0, 0, (double)(metrics_now_us() - sent_us) / 1e6);
	if (how != METRICS_REDIS_OK)
		metrics_count(AM_REDIS_ERRORS, (unsigned)how, 0, 1);
}

void agent_metrics_event(const char *type)
{
	metrics_count(AM_EVENTS, metrics_index(&families[AM_EVENTS].dim[0], type), 0, 1);
}

void agent_metrics_snapshot(enum agent_metrics_snap_op op, int ok, uint64_t bytes)
{
	metrics_count(AM_SNAPSHOTS, (unsigned)op, ok ? 0 : 1, 1);
	if (ok && bytes)
		metrics_count(AM_SNAPSHOT_BYTES, op == AM_SNAP_RESTORE || op == AM_SNAP_EXPORT, 0,
			      bytes);
}

void agent_metrics_pull_bytes(uint64_t n)
{
	metrics_count(AM_IMAGE_PULL_BYTES, 0, 0, n);
}

void agent_metrics_container_end(const struct rt_sandbox *rsb)
{
	int64_t n = rsb ? rt_oom_kills(rsb) : -1;

	if (n > 0)
		oom_gone += (uint64_t)n;
}

static int64_t count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int64_t n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1;   /* the directory's own fd */
}

static int64_t rss_bytes(void)
{
	auto_free char *text = util_read_file("/proc/self/statm", 4096, NULL);
	unsigned long long size, resident;

	if (!text || sscanf(text, "%llu %llu", &size, &resident) != 2)
		return -1;
	return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

/* The gauges of the node's state, read now. */
static void collect(struct agent *a)
{
	int64_t st[3] = { 0, 0, 0 }, open = 0, oom = (int64_t)oom_gone;
	const char *by;
	unsigned fwds = 0, conns = 0;

	for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next) {
		int s = !sb->rt ? ST_STOPPED : sb->dead ? ST_DEAD : ST_RUNNING;
		st[s]++;
		if (sb->rt) {
			int64_t k = rt_oom_kills(sb->rt);
			open += sb->streams;
			oom += k > 0 ? k : 0;
		}
	}
	for (int s = 0; s < 3; s++)
		metrics_gauge_set(AM_SANDBOXES, (unsigned)s, 0, st[s]);
	metrics_gauge_set(AM_STREAMS_OPEN, 0, 0, open);
	metrics_gauge_set(AM_OOM_KILLS, 0, 0, oom);
	metrics_gauge_set(AM_CAPACITY, 0, 0, capacity_now(&a->cap, st[ST_RUNNING], &by));
	metrics_gauge_set(AM_POOL, 0, 0, a->rt ? (int64_t)rt_pooled_count(a->rt) : 0);
	metrics_gauge_set(AM_POOL_TARGET, 0, 0, a->conf->agent.warm_pool);
	metrics_gauge_set(AM_REDIS_CONNECTED, 0, 0, a->reg && registry_connected(a->reg));
	metrics_gauge_set(AM_LEASE_VALID, 0, 0, a->reg && registry_lease_valid(a->reg));
	fwd_stats(&fwds, &conns);
	metrics_gauge_set(AM_FORWARDERS, 0, 0, fwds);
	metrics_gauge_set(AM_FORWARD_CONNS, 0, 0, conns);
	metrics_gauge_set(AM_RSS, 0, 0, rss_bytes());
	metrics_gauge_set(AM_FDS, 0, 0, count_fds());
	metrics_gauge_set(AM_BIG_BODIES, 0, 0,
			  a->httpd ? (int64_t)httpd_big_body_held(a->httpd) : 0);
}

int agent_metrics_render(struct agent *a, struct buf *out)
{
	if (!registry)
		return -1;
	collect(a);
	return metrics_render(registry, NULL, out);
}

static void metrics_get(struct httpd_req *r)
{
	struct buf out;

	buf_init(&out, METRICS_MAX_TEXT);
	if (agent_metrics_render(httpd_ctx(r), &out) < 0) {
		struct sbx_err e;
		err_set(&e, SBX_E_INTERNAL, "cannot render the metrics");
		httpd_reply_err(r, &e);
	} else {
		httpd_reply_bytes(r, 200, METRICS_CONTENT_TYPE, out.data ? out.data : "", out.len);
	}
	buf_release(&out);
}

static const struct httpd_route metrics_routes[] = {
	{ "GET", "/metrics", metrics_get, 0, NULL },
};

static void placed_reply(void *arg, struct redisReply *reply)
{
	if (reply && reply->type == REDIS_REPLY_INTEGER)
		metrics_gauge_set(AM_PLACED, 0, 0, reply->integer);
}

/* Count the node's set now and then: the sleeping sandboxes of this node
 * are only in Redis. */
static void placed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent *a = arg;
	char key[RKEYS_MAX];

	if (a->reg && !a->shutting_down)
		registry_command(a->reg, placed_reply, NULL, "SCARD %s",
				 rkeys_node(key, a->conf->agent.name, "sandboxes"));
}

int agent_metrics_start(struct agent *a, struct sbx_err *e)
{
	int64_t ms = PLACED_EVERY * a->conf->cluster.heartbeat_ms;
	struct timeval every = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000) };

	table = agent_routes;
	nroutes = (unsigned)agent_routes_count;
	for (unsigned i = 0; i < nroutes; i++)
		if (metrics_routes_add(&routes, table[i].method, table[i].pattern, e) < 0)
			return -1;
	families[AM_REQUESTS].dim[0] = metrics_routes_dim(&routes);
	families[AM_REQUESTS].dim[1] = metrics_status_dim;
	families[AM_REQUEST_SECONDS].dim[0] = families[AM_REQUESTS].dim[0];
	families[AM_REDIS_ERRORS].dim[0] = metrics_redis_error_dim;
	registry = metrics_new(families, AM_COUNT, 1, e);
	if (!registry)
		return -1;
	metrics_use(registry, 0);
	metrics_gauge_set(AM_BUILD, 0, 0, 1);
	placed_ev = event_new(a->base, -1, EV_PERSIST, placed_cb, a);
	if (!placed_ev || event_add(placed_ev, &every) < 0)
		return err_set(e, SBX_E_INTERNAL, "metrics: cannot start the node set's timer");
	lag_ev = evtimer_new(a->base, lag_cb, NULL);
	if (!lag_ev)
		return err_set(e, SBX_E_INTERNAL, "metrics: cannot start the loop's lag probe");
	lag_arm();
	if (!a->conf->agent.metrics_listen[0])
		return 0;
	listener = httpd_new(a->base, a->conf->agent.metrics_listen, NULL, metrics_routes,
			     ARRAY_SIZE(metrics_routes), a, METRICS_MAX_CONNS, e);
	if (!listener) {
		err_prefix(e, "agent.metrics_listen");
		return -1;
	}
	return 0;
}

void agent_metrics_stop(void)
{
	if (placed_ev)
		event_free(placed_ev);
	placed_ev = NULL;
	if (lag_ev)
		event_free(lag_ev);
	lag_ev = NULL;
	httpd_free(listener);
	listener = NULL;
	metrics_free(registry);
	registry = NULL;
}
