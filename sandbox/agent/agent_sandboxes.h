/*
 * agent_sandboxes.h — the sandbox table's control routes, called by sbx-api
 * (/agent/v1/sandboxes[/{tenant}/{id}[/stop]]), in the handler contract of
 * call.h. The table itself is in agent.h.
 */
#ifndef SBX_AGENT_SANDBOXES_H
#define SBX_AGENT_SANDBOXES_H

#include "call.h"

/* PUT: start (or confirm) the container of a generation at an epoch;
 * body agent_sandbox_put_fields. 201 started, 200 already running. */
extern const struct jsonv_field agent_sandbox_put_fields[];
int agent_sandbox_put(struct agent_call *c, struct sbx_err *e);
/* PATCH: sleepAfter / keepAlive (agent_sandbox_patch_fields). */
extern const struct jsonv_field agent_sandbox_patch_fields[];
int agent_sandbox_patch(struct agent_call *c, struct sbx_err *e);
int agent_sandbox_get(struct agent_call *c, struct sbx_err *e);
int agent_sandbox_list(struct agent_call *c, struct sbx_err *e);
/* POST …/stop: stop the container, keep the entry. */
int agent_sandbox_stop(struct agent_call *c, struct sbx_err *e);
/* The control routes' JSON of sb (new reference). */
json_t *agent_sb_json(const struct agent_sb *sb);

/* DELETE: destroy and forget; 204 also when absent. */
int agent_sandbox_delete(struct agent_call *c, struct sbx_err *e);

#endif
