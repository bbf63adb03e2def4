/*
 * worker.h — one FastCGI worker process of sbx-api.
 *
 * SIGTERM is blocked except while the worker waits for a connection
 * (ppoll), so a worker told to stop while idle exits at once, and one told
 * to stop in a request finishes it first. Redis and curl state is created
 * here, after fork, never in the master.
 */
#ifndef SBX_WORKER_H
#define SBX_WORKER_H

#include "conf.h"

#include <sys/types.h>

/* Serve requests on listen_fd until told to stop; returns the exit status. */
int worker_run(int listen_fd, const struct sbx_conf *conf, pid_t master);

#endif
