/*
 * agent_terminals.h — interactive terminals of a sandbox: a process on a
 * pty of the sandbox's own devpts, its output kept in a replay ring and
 * carried to any number of WebSocket viewers.
 */
#ifndef SBX_AGENT_TERMINALS_H
#define SBX_AGENT_TERMINALS_H

#include "call.h"
#include "httpd.h"
#include "module.h"

#define TERM_MAX 64                 /* terminals of a sandbox (running or exited) */
#define TERM_RING (64 * 1024)       /* output replayed to a viewer that attaches */
#define TERM_VIEWERS_MAX 8          /* viewers of one terminal */
#define TERM_TICKET_TTL_S 60        /* a ticket's life */

/* The terminals' module: a gone container's terminals go with it (their
 * viewers get a close frame). */
extern const struct agent_module agent_term_module;

/* The terminal routes (calls, call.h): POST …/terminals (AGENT_CALL_JSON
 * with agent_term_create_fields), GET …/terminals, DELETE …/terminals/{t},
 * GET …/terminals/{t}/ws (the WebSocket), POST …/terminals/{t}/ticket. */
extern const struct jsonv_field agent_term_create_fields[];
int agent_term_create(struct agent_call *c, struct sbx_err *e);
int agent_term_list(struct agent_call *c, struct sbx_err *e);
int agent_term_delete(struct agent_call *c, struct sbx_err *e);
int agent_term_ws(struct agent_call *c, struct sbx_err *e);
int agent_term_ticket(struct agent_call *c, struct sbx_err *e);

/* The Cloudflare SDK's PTY (GET /ws/pty?sessionId=&cols=&rows=&shell=):
 * attach to the terminal named after the session, made when it is not
 * there yet (agent_compat.c maps the request to it). */
int agent_term_cf_pty(struct agent_call *c, struct sbx_err *e);

/* A JSON control message of a viewer (pure, unit-tested): 1 and *cols,
 * *rows for a valid {"type":"resize","cols":c,"rows":r}; 0 for any other
 * type; -1 with e for bad JSON or bad sizes. */
int agent_term_control(const char *text, size_t n, int *cols, int *rows, struct sbx_err *e);

#endif
