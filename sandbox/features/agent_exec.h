/*
 * agent_exec.h — the one way the agent runs commands and answers for them,
 * shared by exec (agent_exec.c), sessions (agent_sessions.c) and
 * background processes (agent_processes.c).
 *
 *  - agent_spawn_piped(): spawn a process with three fresh pipes.
 *  - struct agent_exec: the answer to one command — JSON when it ends, or an
 *    event stream while it runs (start, stdout/stderr, exit | error), with
 *    keep-alives, a timeout and client-disconnect handling. Its output
 *    comes either from the pipes of a process it spawned itself (plain
 *    exec) or is pushed in by a source (a session's shell, a process's
 *    log) through agent_exec_output() / agent_exec_exited().
 *
 * Lifetime of a pushed agent_exec: the source holds it from
 * agent_exec_new() until it calls agent_exec_exited() or agent_exec_fail()
 * — exactly once; the object may be freed inside that call. When the
 * client goes away or the timeout fires first, the exec asks its source to
 * stop through src->cancel (the source then ends it as above, maybe from
 * inside cancel).
 */
#ifndef SBX_AGENT_EXEC_H
#define SBX_AGENT_EXEC_H

#include "agent.h"
#include "call.h"
#include "module.h"

#define AGENT_EXEC_MAX_PATH 4096

/* Counts the commands of agent_exec_run per container (at most
 * agent.max_execs_per_sandbox at once: 429 QUOTA_EXCEEDED beyond). */
extern const struct agent_module agent_exec_module;

struct agent_exec;

/* A parsed command: "command" (run by /bin/sh -c) or "argv", "cwd", "env". */
struct agent_cmd {
	char **argv;           /* heap, NULL-terminated; strings borrowed from the body */
	const char *command;   /* the "command" string, or NULL (argv given) */
	char cwd[AGENT_EXEC_MAX_PATH + 16]; /* absolute; /workspace by default */
	int cwd_given;
	const json_t *env;     /* borrowed; values string or null (unset) */
};

/* Parse command/argv/cwd/env of body into c (fields not checked here: the
 * caller runs jsonv_check with its own table first). 0 or -1 (400);
 * agent_cmd_release() in both cases. */
int agent_cmd_parse(json_t *body, struct agent_cmd *c, struct sbx_err *e);
void agent_cmd_release(struct agent_cmd *c);

/* Spawn ps (its fds are ignored) in rsb with three new pipes; io receives
 * our ends: io[0] writes the process's stdin, io[1]/io[2] read its stdout
 * and stderr — all O_CLOEXEC, blocking until child_io_new takes them (the
 * caller hands them to it, or closes them).
 * Returns the rt handle (> 0) or -1 with e filled (io all -1). */
int64_t agent_spawn_piped(struct rt_sandbox *rsb, const struct rt_proc_spec *ps, int io[3],
			  rt_started_cb on_started, rt_exited_cb on_exited, void *arg,
			  struct sbx_err *e);

/* The id of a new record (a process, a terminal): the body's "id" (1-64
 * of [A-Za-z0-9_.-]), or prefix + "-" + 12 random hex digits. 0 or -1
 * with e (400). */
int agent_new_id(const json_t *body, const char *prefix, char *id, size_t idsz, struct sbx_err *e);

/* A pushed source of output. */
struct agent_exec_src {
	/* Stop (on = 1) or resume (0) pushing: the client is slow. May be NULL. */
	void (*pause)(void *arg, int on);
	/* The client went away (timed_out = 0) or the timeout fired (1): stop
	 * the command, then end the exec (agent_exec_exited). */
	void (*cancel)(void *arg, int timed_out);
};

/* A new answer for request r about sandbox sb: an event stream (stream,
 * the call's agent_call_sse) or JSON once it ends (argv0 and cwd are used
 * in messages). src NULL: the exec runs its own process (agent_exec.c
 * only). NULL on allocation failure. */
struct agent_exec *agent_exec_new(struct agent *a, struct httpd_req *r, struct agent_sb *sb,
				  int stream, const char *argv0, const char *cwd,
				  const struct agent_exec_src *src, void *src_arg);

/* Take over the request: the stream answer starts now (200, headers) or
 * the JSON answer is deferred; close/keep-alive handling installed. */
void agent_exec_begin(struct agent_exec *x);

/* Arm the timeout (ms > 0) from now. */
void agent_exec_arm_timeout(struct agent_exec *x, int64_t ms);

/* An event of a stream exec (an exec, a process's log stream), offered
 * typed to a view of the request (agent_call_offer, type
 * AGENT_EXEC_EVENT) before the engine frames it: its name (start, stdout,
 * stderr, exit, error) and data (an object) or, for output, the bytes
 * (whole UTF-8 sequences, except at the end). A view that takes it
 * appends its own frames to out, the engine's event buffer (so the
 * engine's backpressure and end of stream hold as they are). */
#define AGENT_EXEC_EVENT "exec-event"
struct agent_exec_event {
	const char *name;
	const json_t *data;          /* NULL for output */
	const char *bytes;
	size_t len;
	struct buf *out;
};

/* The result of a JSON exec that has finished, offered to a filter of the
 * request (agent_call_offer, type AGENT_EXEC_RESULT) before the engine
 * answers with its own JSON. A filter that takes it answers with
 * agent_exec_reply_text (the output never has to be in memory whole). */
#define AGENT_EXEC_RESULT "exec"
struct agent_exec_result {
	struct agent_exec *x;
	int64_t exit_code;          /* 124 on a timeout */
	int timed_out, oom_killed;
	int truncated;              /* either stream was cut at its bound */
	int64_t duration_ms;
	int stderr_last;            /* the last byte of stderr kept, -1 when empty */
};

/* Answer x's request with 200, content_type, streamed: head, the stdout
 * kept as JSON string content (escaped, invalid UTF-8 as U+FFFD), mid,
 * stderr the same way, tail (the three are copied). */
/* The kept output of stream i (0 stdout, 1 stderr) of a finished exec,
 * appended to out (bounded by out's cap). 0, or -1 with e (too large for
 * out, a read error). */
struct buf;
int agent_exec_kept(const struct agent_exec *x, int i, struct buf *out, struct sbx_err *e);
void agent_exec_reply_text(struct agent_exec *x, const char *content_type, const char *head,
			   const char *mid, const char *tail);

/* The command text the start event of stream x names (copied), from the
 * source of pushed output (a process's log stream). */
void agent_exec_set_command(struct agent_exec *x, const char *command);

/* Push events: the process started, output of stream 0 (stdout) / 1
 * (stderr), the end. agent_exec_exited may free x. */
void agent_exec_started(struct agent_exec *x, pid_t pid);
void agent_exec_output(struct agent_exec *x, int which, const char *data, size_t n);
void agent_exec_exited(struct agent_exec *x, const struct rt_exit *ex);
/* End with an error answer instead (JSON error, or the SSE error event);
 * details: stolen JSON object or NULL. May free x. */
void agent_exec_fail(struct agent_exec *x, const struct sbx_err *e, json_t *details);

/* Run c (validated) as its own process in sb and answer r from the engine:
 * JSON when the command ends, or SSE while it runs. stdin_data is copied.
 * Answers r in every case. */
void agent_exec_run(struct httpd_req *r, struct agent_sb *sb, int stream, const struct agent_cmd *c,
		    int64_t timeout_ms, const char *stdin_data, size_t stdin_len);

/* The exec route (POST /v1/sandboxes/{id}/exec; agent_exec_route.c), a
 * call (call.h) of AGENT_CALL_DATA | AGENT_CALL_JSON with agent_exec_fields. */
extern const struct jsonv_field agent_exec_fields[];
int agent_exec_post(struct agent_call *c, struct sbx_err *e);

#endif
