/*
 * agent_exec_route.c — the exec route, POST /v1/sandboxes/{id}/exec: the
 * body is checked here, then the command runs either in a session
 * (agent_sessions.c) or as its own process answered by the exec engine
 * (agent_exec.c). Keeping the route apart from the engine is what lets
 * sessions build on the engine without an include cycle.
 */
#include "agent.h"
#include "call.h"
#include "agent_exec.h"
#include "agent_sessions.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct jsonv_field exec_fields[] = {
	{ "command", JV_STRING, 0 },
	{ "argv", JV_ARRAY, 0 },
	{ "cwd", JV_STRING, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "timeoutMs", JV_INTEGER, 0 },
	{ "stdin", JV_STRING, 0 },
	{ "session", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

struct exec_plan {
	struct agent_cmd cmd;
	int64_t timeout_ms;
	const json_t *stdin_v;
	const char *session;
};

/* Validate an exec body into p. 0 or -1 (400). */
static int parse_exec(json_t *body, struct exec_plan *p, struct sbx_err *e)
{
	json_t *v;

	if (jsonv_check(body, exec_fields, "the body", e) < 0)
		return -1;
	if ((v = json_object_get(body, "session"))) {
		p->session = json_string_value(v);
		if (!ids_valid_name(p->session))
			return err_set(e, SBX_E_VALIDATION,
				       "'session' must be 1-64 of [A-Za-z0-9_.-]");
	}
	if (agent_cmd_parse(body, &p->cmd, e) < 0)
		return -1;
	p->timeout_ms = 0;
	if (jsonv_int(body, "timeoutMs", 1, 86400000, &p->timeout_ms, e) < 0)
		return -1;
	p->stdin_v = json_object_get(body, "stdin");
	return 0;
}

void agent_h_exec(struct httpd_req *r)
{
	struct sbx_err e = { 0 };
	struct exec_plan plan = { 0 };
	struct agent_sb *sb;
	json_t *body = NULL;
	const char *data, *in;
	size_t len, in_len;

	sb = agent_data_sandbox(r, &e);
	if (!sb) {
		httpd_reply_err(r, &e);
		return;
	}
	data = httpd_body(r, &len);
	body = jsonv_parse(data, len, &e);
	if (!body || parse_exec(body, &plan, &e) < 0) {
		agent_cmd_release(&plan.cmd);
		json_decref(body);
		httpd_reply_err(r, &e);
		return;
	}
	in = plan.stdin_v ? json_string_value(plan.stdin_v) : NULL;
	in_len = plan.stdin_v ? json_string_length(plan.stdin_v) : 0;
	if (plan.session)
		agent_sess_exec(r, sb, plan.session, &plan.cmd, plan.timeout_ms, in, in_len);
	else
		agent_exec_run(r, sb, &plan.cmd, plan.timeout_ms, in, in_len);
	agent_cmd_release(&plan.cmd);
	json_decref(body);
}
