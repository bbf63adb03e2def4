/*
 * agent_processes.h — background processes of a sandbox: start, list,
 * logs (kept in a bounded ring), stdin, kill, wait.
 */
#ifndef SBX_AGENT_PROCESSES_H
#define SBX_AGENT_PROCESSES_H

#include "call.h"
#include "httpd.h"
#include "module.h"

/* The processes' module: a gone container's process records go with it. */
extern const struct agent_module agent_proc_module;

/* The process routes (calls, see call.h): POST …/processes (AGENT_CALL_JSON
 * with agent_proc_start_fields), GET and DELETE …/processes, GET and DELETE
 * …/processes/{process}, its GET …/logs, POST …/stdin, GET …/wait. */
extern const struct jsonv_field agent_proc_start_fields[];
int agent_proc_start(struct agent_call *c, struct sbx_err *e);
int agent_proc_list(struct agent_call *c, struct sbx_err *e);
int agent_proc_get(struct agent_call *c, struct sbx_err *e);
int agent_proc_logs(struct agent_call *c, struct sbx_err *e);
int agent_proc_stdin(struct agent_call *c, struct sbx_err *e);
int agent_proc_kill(struct agent_call *c, struct sbx_err *e);
int agent_proc_kill_all(struct agent_call *c, struct sbx_err *e);
int agent_proc_wait(struct agent_call *c, struct sbx_err *e);

#endif
