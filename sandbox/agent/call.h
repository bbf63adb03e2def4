/*
 * call.h — the agent's one handler contract.
 *
 * A route row names a struct agent_call_spec: the handler and what the
 * dispatcher resolves before calling it (its flags), and the JSON fields
 * of its body. The dispatcher (agent_call_run, the row's httpd handler)
 * checks the request as the flags say, fills a struct agent_call, and calls
 *
 *     int fn(struct agent_call *c, struct sbx_err *e);
 *
 * A handler answers through httpd_reply_*() (or takes the request over:
 * a stream, a deferred answer) and returns 0; or it returns -1 with e
 * filled and without having answered, and the dispatcher renders the error
 * — once, in one place, as sbx-api's router does.
 */
#ifndef SBX_CALL_H
#define SBX_CALL_H

#include "agent.h"
#include "jsonv.h"

enum agent_call_flags {
	/* /v1/sandboxes/{id}/…: the tenant from X-Sbx-Tenant, param 0 the
	 * id; refused while the node shuts down or its lease has lapsed; the
	 * epoch of X-Sbx-Epoch fenced; c->sb is the running sandbox and its
	 * activity is recorded. An older epoch or no running sandbox is 503
	 * NODE_UNAVAILABLE: it changed since sbx-api routed the call, and a
	 * retry is routed afresh. */
	AGENT_CALL_DATA = 1u << 0,
	/* /agent/v1/sandboxes/{tenant}/{id}/…: c->key from params 0 and 1;
	 * c->sb is the sandbox of that key on this node, or NULL. */
	AGENT_CALL_CONTROL = 1u << 1,
	/* With CONTROL: X-Sbx-Epoch is fenced against c->key. */
	AGENT_CALL_FENCED = 1u << 2,
	/* Refused (503) while the node shuts down. */
	AGENT_CALL_LIVE = 1u << 3,
	/* Param 2 is a port 1-65535 (c->port). */
	AGENT_CALL_PORT = 1u << 4,
	/* The body is a JSON object (empty = {}) checked against the spec's
	 * fields: c->body, borrowed for the call. */
	AGENT_CALL_JSON = 1u << 5,
};

/* What a view over the routes (agent_compat.c) passes a call instead of
 * what the request carries: the typed arguments of the call it maps its
 * own request to. */
#define AGENT_CALL_QUERY_MAX 6
struct agent_call_args {
	json_t *body;                /* AGENT_CALL_JSON: the body, checked against the fields */
	const char *tail;            /* a "{path*}" route's raw tail */
	const char *ref;             /* path param 1 (a session or process id) */
	/* The query: only these (name, value) pairs; the request's is hidden. */
	const char *query[AGENT_CALL_QUERY_MAX][2];
	/* An event stream is asked for (the Accept header of a request); no
	 * other header of the request reaches the call's own reading (Range). */
	int sse;
	/* The content of a call that streams its body (an upload), whole. */
	const char *content;
	size_t content_len;
};

struct agent_call {
	struct httpd_req *r;
	struct agent *a;
	const char *id;              /* the sandbox id of the path */
	char key[AGENT_KEY_MAX];     /* "<tenant>.<id>" */
	struct agent_sb *sb;         /* see the flags; borrowed */
	json_t *body;                /* AGENT_CALL_JSON; released after the call */
	int port;                    /* AGENT_CALL_PORT; else -1 */
	const struct agent_call_args *args; /* a view's; NULL: the request's own */
};

/* The inputs of a call: from its args when a view passed them, else from
 * the request (httpd_param, httpd_tail, httpd_query). All borrowed, valid
 * as long as the request. */
const char *agent_call_param(const struct agent_call *c, int i);
const char *agent_call_tail(const struct agent_call *c);
const char *agent_call_query(const struct agent_call *c, const char *name);
/* A header the call reads of its request (Range): NULL under a view. */
const char *agent_call_header(const struct agent_call *c, const char *name);
/* 1 when the answer is to be an event stream (Accept: text/event-stream). */
int agent_call_sse(const struct agent_call *c);

typedef int (*agent_call_fn)(struct agent_call *c, struct sbx_err *e);

struct agent_call_spec {
	agent_call_fn fn;
	unsigned flags;                      /* enum agent_call_flags */
	const struct jsonv_field *fields;    /* AGENT_CALL_JSON: NULL for {} only */
};

/* The httpd handler of every row that names a spec (the row's data). */
void agent_call_run(struct httpd_req *r);

/* Serve r with the call of spec, as a row naming it would, but with args
 * (borrowed for the call; NULL: the request's own) for its inputs: what a
 * view over the agent's routes (agent_compat.c) runs once it has mapped
 * its request to args. */
void agent_call_serve(struct httpd_req *r, const struct agent_call_spec *spec,
		      const struct agent_call_args *args);

/* A route row's handler and data for spec fields: { method, pattern,
 * AGENT_CALL(fn, flags, fields) } or with route flags after it. */
#define AGENT_CALL(fn_, flags_, fields_) \
	.fn = agent_call_run, .data = &(const struct agent_call_spec){ (fn_), (flags_), (fields_) }

/* A route row's handler and data for a named spec: { method, pattern,
 * AGENT_CALL_OF(spec) } (a spec also served by another view). */
#define AGENT_CALL_OF(spec_) .fn = agent_call_run, .data = &(spec_)

/* --- views: a translation layer (agent_compat.c) runs another route's
 * call (its typed arguments: struct agent_call_args) and answers from
 * that call's typed results; no answer of the call is read back. The view
 * sits in r's opaque slot (httpd_set_slot). --- */

/* A view on the answer of r; every hook may be NULL. */
struct agent_call_view {
	/* A typed result, handed over by a source before it answers (the
	 * source's own struct, named by type): return 1 when the view
	 * answered r from it, 0 to let the source answer as usual. */
	int (*typed)(void *arg, struct httpd_req *r, const char *type, const void *result);
	/* arg is freed with the request (after the close callback). */
	void (*free)(void *arg);
};
void agent_call_set_view(struct httpd_req *r, const struct agent_call_view *v, void *arg);
/* Offer r's view the typed result of its answer (or an event of a
 * stream answer that has begun): 1 when the view answered r (took the
 * event), 0 when the source answers (no view, no hook, declined). */
int agent_call_offer(struct httpd_req *r, const char *type, const void *result);
/* 1 when r has a view: the calls serving r hand it their results typed
 * (so a result it needs whole is collected, not streamed). */
int agent_call_viewed(const struct httpd_req *r);

/* A call's error: offered to r's view typed (AGENT_CALL_ERROR, struct
 * agent_call_error), so it builds its own shape from the struct, else
 * answered by httpd_reply_err_details. httpd's own refusals (no route,
 * a body too large, a handler that gave no answer) are not offered. */
#define AGENT_CALL_ERROR "error"
struct agent_call_error {
	const struct sbx_err *e;
	const json_t *details;      /* NULL: none */
};
void agent_call_reply_err(struct httpd_req *r, const struct sbx_err *e);
void agent_call_reply_err_details(struct httpd_req *r, const struct sbx_err *e,
				  const json_t *details);

#endif
