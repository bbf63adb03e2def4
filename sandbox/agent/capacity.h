/*
 * capacity.h — how many sandboxes this node takes: the smaller of the
 * operator's agent.capacity and what the host lets the agent hold, so that
 * a full node says so (503 NO_CAPACITY, and placement skips it through the
 * capacity of its registry entry) before a kernel limit turns a create
 * into an error of another kind.
 *
 * What bounds it, per idle sandbox: CAPACITY_FDS_PER_SANDBOX fds of the
 * agent (its pidfd and init socket) within RLIMIT_NOFILE, less the fds open
 * at start and a reserve: the agent's HTTP connections (agent.max_connections
 * and the reserved ones) in full, CAPACITY_FDS_SPARE for streams, execs and
 * forwarded connections (capped by agent.max_forward_conns*); one pid within kernel.pid_max and kernel.threads-max (host
 * wide: measured at each check); one uid range (with user namespaces); one
 * of each namespace within the smallest user.max_*_namespaces. The warm
 * pool's sandboxes count against all of these.
 */
#ifndef SBX_CAPACITY_H
#define SBX_CAPACITY_H

#include "conf.h"
#include "err.h"

#define CAPACITY_FDS_PER_SANDBOX 2
#define CAPACITY_FDS_SPARE 1024   /* execs, streams, spill files, forwarded conns */
#define CAPACITY_PIDS_SPARE 1024  /* the processes of commands in sandboxes */

/* What the host allows; -1 for a limit that does not apply. */
struct capacity_limits {
	long long configured;   /* agent.capacity */
	long long nofile;       /* RLIMIT_NOFILE (soft) now */
	long long fds_base;     /* fds open before the first sandbox */
	long long fds_reserve;  /* kept for everything but idle sandboxes */
	long long pids_free;    /* pids the host can still hand out, now */
	long long uid_ranges;   /* agent.uid_ranges with user namespaces */
	long long namespaces;   /* the smallest user.max_*_namespaces */
	long long warm_pool;    /* agent.warm_pool */
};

/* The sandboxes the node takes in all, with live of them running now, and
 * in *by the name of the limit that sets it ("agent.capacity", "nofile",
 * "pids", "uid_ranges", "namespaces"; static). Never below 0. */
long long capacity_of(const struct capacity_limits *l, long long live, const char **by);

/* The agent's view of its limits (capacity_init, then capacity_now). */
struct capacity {
	struct capacity_limits lim;
	long long nofile_hard;
};

/* Raise RLIMIT_NOFILE's soft limit to the hard one (logged); call first
 * thing at start, before any fd that matters is open. */
void capacity_raise_nofile(void);

/* Fill c from conf and the host once the agent is set up and holds no
 * sandbox yet (the fds open now are its base); userns: the runtime uses
 * user namespaces. */
void capacity_init(struct capacity *c, const struct sbx_conf *conf, int userns);

/* capacity_of with the limits read again now (RLIMIT_NOFILE may have
 * been changed with prlimit; pids are host wide). */
long long capacity_now(struct capacity *c, long long live, const char **by);

/* Turn an INTERNAL error whose errno says the host ran out of something
 * (EMFILE, ENFILE, ENOSPC, EAGAIN, ENOMEM, EUSERS, ENOBUFS) into
 * NO_CAPACITY with a message that names the resource (the original,
 * which may hold host paths, is logged). 1 when changed, else 0. */
int capacity_classify(struct sbx_err *e);

#endif
