/*
 * agent_exec_route.c — the exec route, POST /v1/sandboxes/{id}/exec: the
 * body is checked here (its fields by the dispatcher, call.h), then the
 * command runs either in a session (agent_sessions.c) or as its own process
 * answered by the exec engine (agent_exec.c). Keeping the route apart from
 * the engine is what lets sessions build on the engine without an include
 * cycle.
 */
#include "agent.h"
#include "agent_metrics.h"
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

const struct jsonv_field agent_exec_fields[] = {
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

int agent_exec_post(struct agent_call *c, struct sbx_err *e)
{
	struct exec_plan plan = { 0 };
	const char *in;
	size_t in_len;
	int rc = 0;

	if (parse_exec(c->body, &plan, e) < 0) {
		agent_cmd_release(&plan.cmd);
		return -1;
	}
	metrics_count(AM_EXECS, agent_call_sse(c) ? AM_EXEC_SSE : AM_EXEC_JSON, 0, 1);
	in = plan.stdin_v ? json_string_value(plan.stdin_v) : NULL;
	in_len = plan.stdin_v ? json_string_length(plan.stdin_v) : 0;
	if (plan.session)
		rc = agent_sess_exec(c->r, c->sb, agent_call_sse(c), plan.session, &plan.cmd,
				     plan.timeout_ms, in, in_len, e);
	else
		agent_exec_run(c->r, c->sb, agent_call_sse(c), &plan.cmd, plan.timeout_ms, in,
			       in_len);
	agent_cmd_release(&plan.cmd);
	return rc;
}
