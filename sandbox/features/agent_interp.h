/*
 * agent_interp.h — code contexts: a long-lived Python or JavaScript/
 * TypeScript interpreter per context inside a sandbox, whose state persists
 * between the runs of code in it, answering with rich results.
 */
#ifndef SBX_AGENT_INTERP_H
#define SBX_AGENT_INTERP_H

#include "call.h"
#include "module.h"

/* The contexts' module: a gone container's contexts go with it. */
extern const struct agent_module agent_interp_module;

/* The context routes (calls, see call.h): POST …/contexts (AGENT_CALL_JSON
 * with agent_interp_create_fields), GET …/contexts, GET and DELETE
 * …/contexts/{context}, POST …/contexts/{context}/run (agent_interp_run_fields)
 * and POST …/run (agent_interp_run_default_fields: a per-language default
 * context). */
extern const struct jsonv_field agent_interp_create_fields[];
extern const struct jsonv_field agent_interp_run_fields[];
extern const struct jsonv_field agent_interp_run_default_fields[];
int agent_interp_create(struct agent_call *c, struct sbx_err *e);
int agent_interp_list(struct agent_call *c, struct sbx_err *e);
int agent_interp_get(struct agent_call *c, struct sbx_err *e);
int agent_interp_delete(struct agent_call *c, struct sbx_err *e);
int agent_interp_run(struct agent_call *c, struct sbx_err *e);
int agent_interp_run_default(struct agent_call *c, struct sbx_err *e);

#endif
