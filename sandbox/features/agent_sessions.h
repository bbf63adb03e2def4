/*
 * agent_sessions.h — sessions: a long-lived shell per session id inside a
 * sandbox, whose cwd and env persist between the commands run in it.
 */
#ifndef SBX_AGENT_SESSIONS_H
#define SBX_AGENT_SESSIONS_H

#include "agent_exec.h"
#include "call.h"
#include "buf.h"
#include "module.h"

/* The sessions' module: a gone container's sessions go with it. */
extern const struct agent_module agent_sess_module;

/* Run the exec body (already validated by exec; c, timeout and stdin from
 * it) in session sid of sb, answered as a stream or not (agent_exec_new):
 * 0 once queued (r is answered when the command
 * ends), or -1 with e filled and r not answered. */
int agent_sess_exec(struct httpd_req *r, struct agent_sb *sb, int stream, const char *sid,
		    const struct agent_cmd *c, int64_t timeout_ms, const char *stdin_data,
		    size_t stdin_len, struct sbx_err *e);

/* Rewrite c, the command of a new background process started "in"
 * session sid of sb, to start from the session's state: its cwd (unless c
 * gives one) and env, then the cwd and exports its shell had after its
 * last command (each command leaves them in a state file under /tmp, mode
 * 0600), then c's own env. c->argv is replaced (its strings live in
 * *script, which the caller releases after the spawn; c->command, the text
 * shown, is kept). A session that does not exist adds nothing. 0 or -1
 * with e (413). */
int agent_sess_process_cmd(struct agent *a, struct agent_sb *sb, const char *sid,
			   struct agent_cmd *c, struct buf *script, struct sbx_err *e);

/* The session routes (calls, see call.h): POST (AGENT_CALL_JSON with
 * agent_session_create_fields), GET, DELETE …/sessions/{session}. */
extern const struct jsonv_field agent_session_create_fields[];
int agent_session_create(struct agent_call *c, struct sbx_err *e);
int agent_session_list(struct agent_call *c, struct sbx_err *e);
int agent_session_delete(struct agent_call *c, struct sbx_err *e);

/* The typed result of those calls, offered to a view of the request
 * (agent_call_offer, type AGENT_SESSION_RESULT) before the call answers
 * in its own JSON: the session created or deleted (id), or the ids of the
 * sandbox's sessions (list). All borrowed for the offer. */
#define AGENT_SESSION_RESULT "session"
enum agent_session_op { AGENT_SESSION_CREATED, AGENT_SESSION_LISTED, AGENT_SESSION_DELETED };
struct agent_session_result {
	enum agent_session_op op;
	const char *id;
	const char *const *ids;
	size_t nids;
};

/* The end-of-command marker scanner of one output stream of a shell: it
 * looks for the line "\001<mark> <status>\n" (mark: AGENT_SESS_MARK_LEN
 * hex chars), also split over any number of feeds. Bytes before it go to
 * out (possibly held back a while: a tail that may start the marker); the
 * line sets done and rc (its status, 0..255; 1 when unreadable) and is
 * eaten; anything after it, and every feed once done, is dropped. Zero
 * the struct to start. */
#define AGENT_SESS_MARK_LEN 32
struct agent_sess_scan {
	char hold[AGENT_SESS_MARK_LEN + 48];
	size_t nhold;
	int done;
	int rc;
};
void agent_sess_scan_feed(struct agent_sess_scan *sc, const char *mark, const char *data, size_t n,
			  void (*out)(void *arg, const char *data, size_t n), void *arg);

#endif
