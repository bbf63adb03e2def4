/*
 * agent_metrics.h — the metrics of sbx-agent (metrics.h), served on
 * agent.metrics_listen: GET /metrics in the Prometheus text format, on a
 * listener of its own without the node secret (an internal address, never
 * agent.listen, which keeps asking for the secret).
 *
 * Counters are counted where things happen (one line each); the state of
 * the node (sandboxes by state, open streams, the warm pool, forwarders,
 * OOM kills, the agent's memory and fds) is read when a scrape comes.
 * Labels are bounded: a route is its row of agent_routes ("none" when no
 * row matched), a status one of metrics_status_dim, a sandbox never
 * appears in a label.
 */
#ifndef SBX_AGENT_METRICS_H
#define SBX_AGENT_METRICS_H

#include "agent.h"
#include "httpd.h"
#include "metrics.h"

#include <stdint.h>

enum agent_metrics_family {
	AM_BUILD,
	AM_REQUESTS,
	AM_REQUEST_SECONDS,
	AM_REDIS_SECONDS,
	AM_REDIS_ERRORS,
	AM_REDIS_CONNECTED,
	AM_LEASE_VALID,
	AM_EVENTS,
	AM_SANDBOXES,
	AM_PLACED,
	AM_CAPACITY,
	AM_POOL,
	AM_POOL_TARGET,
	AM_EXECS,
	AM_STREAMS,
	AM_STREAMS_OPEN,
	AM_FORWARDERS,
	AM_FORWARD_CONNS,
	AM_TUNNEL_PROCS,
	AM_OOM_KILLS,
	AM_IMAGE_PULLS,
	AM_IMAGE_PULL_BYTES,
	AM_SNAPSHOTS,
	AM_SNAPSHOT_BYTES,
	AM_RSS,
	AM_FDS,
	AM_BIG_BODIES,
	AM_LOOP_LAG,
	AM_COUNT
};

/* The label values of AM_IMAGE_PULLS ("result"). */
enum agent_metrics_pull_result { AM_PULL_OK, AM_PULL_FAILED };

/* The label values of AM_SNAPSHOTS ("op"): what a snapshot call did. */
enum agent_metrics_snap_op { AM_SNAP_CREATE, AM_SNAP_IMPORT, AM_SNAP_PERSIST, AM_SNAP_RESTORE,
			     AM_SNAP_EXPORT };

/* The label values of AM_EXECS ("mode"). */
enum agent_metrics_exec_mode { AM_EXEC_JSON, AM_EXEC_SSE };

/* Make the registry and, unless agent.metrics_listen is empty, its
 * listener on a's loop. 0 or -1 with e. */
int agent_metrics_start(struct agent *a, struct sbx_err *e);
void agent_metrics_stop(void);

/* httpd's observer of the main listener (httpd_observe). */
void agent_metrics_request(const struct httpd_route *route, int status, double seconds);
/* One Redis command of the loop's connection, sent at sent_us, and how it
 * ended (a dropped command: METRICS_REDIS_CONNECTION). */
void agent_metrics_redis(int64_t sent_us, enum metrics_redis_error how);
/* One event of type written to sbx:events by this agent. */
void agent_metrics_event(const char *type);
/* The container rsb is about to be destroyed: its OOM kills stay counted. */
void agent_metrics_container_end(const struct rt_sandbox *rsb);

/* One snapshot call of op ended, ok or failed; bytes (ok only) of the
 * archive written to the store (create, import, persist) or read from it
 * (restore, export). */
void agent_metrics_snapshot(enum agent_metrics_snap_op op, int ok, uint64_t bytes);
/* n bytes received from a registry by an image pull. Safe from the pull
 * thread: relaxed atomic adds into the agent's one slot (metrics.h). */
void agent_metrics_pull_bytes(uint64_t n);

/* Render a's metrics into out (collects the node's state first). 0 or -1. */
int agent_metrics_render(struct agent *a, struct buf *out);

#endif
