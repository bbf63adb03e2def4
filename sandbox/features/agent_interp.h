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

/* An event of a streamed run, offered typed to a view of the request
 * (agent_call_offer, type AGENT_INTERP_EVENT) before the run frames
 * it: its name (stdout, stderr, result, error, end) and data. A view that
 * takes it appends its own frames to out, the run's event buffer. */
#define AGENT_INTERP_EVENT "interp-event"
struct agent_interp_event {
	const char *name;
	const json_t *data;
	struct buf *out;
};

/* A context, typed: what the native JSON and a view's are rendered from. */
struct agent_interp_info {
	const char *id, *language, *cwd;
	int64_t created_at;          /* wall ms */
	int64_t count;               /* runs so far */
	int busy, running;
};

/* The typed result of the context calls, offered to a view of the
 * request (agent_call_offer, type AGENT_INTERP_RESULT) before the call
 * answers in its own JSON. All borrowed for the offer. */
#define AGENT_INTERP_RESULT "context"
enum agent_interp_op {
	AGENT_INTERP_CREATED,        /* ctxs[0] */
	AGENT_INTERP_LISTED,         /* ctxs[0..nctxs) */
	AGENT_INTERP_GOT,            /* ctxs[0] */
	AGENT_INTERP_DELETED,        /* id */
};
struct agent_interp_result {
	enum agent_interp_op op;
	const struct agent_interp_info *ctxs;
	size_t nctxs;
	const char *id;
};

#endif
