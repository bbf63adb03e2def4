/*
 * agent_sessions.h — sessions: a long-lived shell per session id inside a
 * sandbox, whose cwd and env persist between the commands run in it.
 */
#ifndef SBX_AGENT_SESSIONS_H
#define SBX_AGENT_SESSIONS_H

#include "agent_exec.h"
#include "module.h"

/* The sessions' module: a gone container's sessions go with it. */
extern const struct agent_module agent_sess_module;

/* Run the exec body (already validated by exec; c, timeout and stdin from
 * it) in session sid of sb. Answers r in every case. */
void agent_sess_exec(struct httpd_req *r, struct agent_sb *sb, const char *sid,
		     const struct agent_cmd *c, int64_t timeout_ms, const char *stdin_data,
		     size_t stdin_len);
void agent_h_session_create(struct httpd_req *r);
void agent_h_session_list(struct httpd_req *r);
void agent_h_session_delete(struct httpd_req *r);

#endif
