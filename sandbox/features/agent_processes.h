/*
 * agent_processes.h — background processes of a sandbox: start, list,
 * logs (kept in a bounded ring), stdin, kill, wait.
 */
#ifndef SBX_AGENT_PROCESSES_H
#define SBX_AGENT_PROCESSES_H

#include "httpd.h"
#include "module.h"

/* The processes' module: a gone container's process records go with it. */
extern const struct agent_module agent_proc_module;

void agent_h_proc_start(struct httpd_req *r);
void agent_h_proc_list(struct httpd_req *r);
void agent_h_proc_get(struct httpd_req *r);
void agent_h_proc_logs(struct httpd_req *r);
void agent_h_proc_stdin(struct httpd_req *r);
void agent_h_proc_kill(struct httpd_req *r);
void agent_h_proc_kill_all(struct httpd_req *r);
void agent_h_proc_wait(struct httpd_req *r);

#endif
