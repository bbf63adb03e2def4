/*
 * master.h — the prefork master of sbx-api.
 *
 * Opens the FastCGI listener, checks Redis once, forks api.workers workers
 * and keeps that many alive (respawn with back-off when they die young).
 * SIGHUP re-reads the config (kept when invalid), starts a fresh set of
 * workers and then stops the old ones; SIGTERM/SIGINT stop everything
 * within a bounded wait. Every api.reconcile_interval it forks one
 * short-lived reconciler child (reconcile.h): the master itself never
 * holds a Redis connection.
 */
#ifndef SBX_MASTER_H
#define SBX_MASTER_H

#include "conf.h"

struct master_opts {
	const char *conf_path;         /* NULL: defaults only */
	const char *const *overrides;  /* "-o" assignments, applied after the file */
	int noverrides;
};

/* Load defaults + file + overrides into c. 0 or -1 with e. */
int master_load_conf(const struct master_opts *o, struct sbx_conf *c, struct sbx_err *e);

/* Run until stopped; returns the process exit status. */
int master_run(const struct master_opts *o, struct sbx_conf *c);

#endif
