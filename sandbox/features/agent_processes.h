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

/* A process record, typed: what the native JSON record and a view's are
 * both rendered from. */
struct agent_proc_info {
	const char *id, *command;
	const char *status;          /* running, completed, failed, killed */
	int64_t pid;                 /* 0: none (yet) */
	int64_t started_at, ended_at;  /* wall ms; ended_at with exited */
	int exited, exit_code;
};

/* The typed result of the process calls, offered to a view of the
 * request (agent_call_offer, type AGENT_PROC_RESULT) before the call
 * answers in its own JSON. All borrowed for the offer. */
#define AGENT_PROC_RESULT "process"
enum agent_proc_op {
	AGENT_PROC_STARTED,          /* procs[0] */
	AGENT_PROC_LISTED,           /* procs[0..nprocs), oldest first */
	AGENT_PROC_GOT,              /* procs[0] */
	AGENT_PROC_KILLED,           /* procs[0]: the record once its tree is gone */
	AGENT_PROC_KILLED_ALL,       /* killed: how many were running */
	AGENT_PROC_LOGS,             /* out, out_len: the kept stdout and stderr, raw */
	AGENT_PROC_PORT_READY,       /* a wait met: port, http_status (0: a TCP wait) */
};
struct agent_proc_result {
	enum agent_proc_op op;
	const struct agent_proc_info *procs;
	size_t nprocs;
	int killed;
	const char *out[2];
	size_t out_len[2];
	int truncated, evicted;
	int port, http_status;
};

#endif
