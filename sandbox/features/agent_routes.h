/*
 * agent_routes.h — the calls of the data routes (agent_routes.c), named so
 * that the compat view (agent_compat.c) serves a request with the very call
 * and flags of the native route it maps to.
 */
#ifndef SBX_AGENT_ROUTES_H
#define SBX_AGENT_ROUTES_H

#include "call.h"

extern const struct agent_call_spec agent_call_exec;
extern const struct agent_call_spec agent_call_session_create;
extern const struct agent_call_spec agent_call_session_list;
extern const struct agent_call_spec agent_call_session_delete;
extern const struct agent_call_spec agent_call_proc_start;
extern const struct agent_call_spec agent_call_proc_list;
extern const struct agent_call_spec agent_call_proc_kill_all;
extern const struct agent_call_spec agent_call_proc_get;
extern const struct agent_call_spec agent_call_proc_kill;
extern const struct agent_call_spec agent_call_proc_logs;
extern const struct agent_call_spec agent_call_proc_stdin;
extern const struct agent_call_spec agent_call_proc_wait;
extern const struct agent_call_spec agent_call_files_get;
extern const struct agent_call_spec agent_call_files_put;
extern const struct agent_call_spec agent_call_files_delete;
extern const struct agent_call_spec agent_call_dirs_get;
extern const struct agent_call_spec agent_call_dirs_put;
extern const struct agent_call_spec agent_call_stat_get;
extern const struct agent_call_spec agent_call_move;
extern const struct agent_call_spec agent_call_interp_create;
extern const struct agent_call_spec agent_call_interp_list;
extern const struct agent_call_spec agent_call_interp_delete;
extern const struct agent_call_spec agent_call_interp_run;
extern const struct agent_call_spec agent_call_term_create;
extern const struct agent_call_spec agent_call_term_list;
extern const struct agent_call_spec agent_call_term_delete;
extern const struct agent_call_spec agent_call_term_ws;
extern const struct agent_call_spec agent_call_term_ticket;
extern const struct agent_call_spec agent_call_term_cf_pty;
extern const struct agent_call_spec agent_call_watch;
extern const struct agent_call_spec agent_call_git_checkout;

#endif
