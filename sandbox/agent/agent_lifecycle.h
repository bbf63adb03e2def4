/*
 * agent_lifecycle.h — the life of a node's sandboxes between calls: live
 * streams keep a sandbox awake, the sleep timer stops idle ones, the
 * fencing sweep compares every local copy with its record and destroys
 * what this node no longer owns, a lapsed lease fails the calls that spanned
 * it, and an init that died is reported as a crash.
 */
#ifndef SBX_AGENT_LIFECYCLE_H
#define SBX_AGENT_LIFECYCLE_H

#include "agent.h"

/* rt's died callback: mark the sandbox stopped (container released later). */
void agent_sb_died(void *arg, struct rt_sandbox *rsb);

/* Live streams: begin when a streaming answer (or any long request) starts
 * on sb, end when it is over (also records activity). Background processes
 * are not streams: they never keep a sandbox awake. */
void agent_sb_stream_begin(struct agent_sb *sb, struct agent_stream *st);
void agent_sb_stream_end(struct agent *a, struct agent_stream *st);

/* May the call of stream st report success? 1 while this node held its
 * lease without a gap since the stream began; 0 when the lease lapsed
 * meanwhile (the node may have been replaced, its sandbox re-placed and
 * this copy frozen): then the call must end with 503 NODE_UNAVAILABLE
 * (or an SSE error event), never with its result. */
int agent_stream_lease_held(const struct agent *a, const struct agent_stream *st);

/* Start the sleep timer and the fencing sweep; hooks the registry's
 * connect callback. NULL with e filled. */
struct agent_lc *agent_lc_new(struct agent *a, struct registry *reg, struct sbx_err *e);
void agent_lc_free(struct agent_lc *lc);

/* What the fencing sweep does with a local sandbox, given its record
 * (rec_node / rec_state NULL and rec_epoch -1 when the record is gone). */
enum agent_lc_action {
	AGENT_LC_KEEP,          /* nothing to do */
	AGENT_LC_RAISE_FENCE,   /* a start meant for us is in progress: keep, fence at rec_epoch */
	AGENT_LC_DESTROY,       /* not ours any more: destroy and forget the local copy */
	AGENT_LC_DESTROY_CAS,   /* ours at a newer epoch but running elsewhere in time: destroy,
				 * and set the record (at rec_epoch) to sleeping */
	AGENT_LC_STOP,          /* the record says sleeping at our epoch: stop the container */
	AGENT_LC_REPORT,        /* the record says running but we are stopped: report it */
	AGENT_LC_RESET,         /* the record on this node is OLDER than our epoch and says
				 * running/starting: Redis lost writes (failover, restore).
				 * Destroy our copy and set the record (at rec_epoch) to
				 * sleeping, so the next call starts it with a fresh epoch */
};
enum agent_lc_action agent_lc_decide(const char *me, int64_t epoch, int running,
				     const char *rec_node, int64_t rec_epoch,
				     const char *rec_state);

/* The container of sb stopped by itself (init died) or for inactivity:
 * compare-and-set the record to sleeping with an event of type why
 * ("crashed", "slept"). */
void agent_lc_report_stopped(struct agent *a, const struct agent_sb *sb, const char *why);

/* A clean shutdown: compare-and-set the record of every running sandbox
 * of this node to sleeping (event "slept"), so that no record names a node
 * that stopped and the next call wakes it elsewhere. done(arg) runs once,
 * when Redis has answered every update (or dropped the connection); at
 * once when there is none to send. */
void agent_lc_sleep_all(struct agent *a, void (*done)(void *arg), void *arg);

#endif
