/*
 * httpd.h — the agent's HTTP server: libmicrohttpd in external epoll mode,
 * driven from the agent's libevent loop.
 *
 * Routes are data (struct httpd_route); every request must carry the node
 * secret (X-Sbx-Node-Secret), else 401. A handler runs once the request
 * body is complete (JSON bodies are bounded by HTTPD_MAX_JSON_BODY) and
 * answers with one of the httpd_reply_* calls — at once, or later after
 * httpd_defer() (the connection is suspended meanwhile). Streaming answers
 * (SSE) pull bytes through a read callback; a stream with nothing to send
 * is suspended until its producer calls httpd_stream_wake().
 *
 * Lifetime: a struct httpd_req is owned by httpd. It stays valid until its
 * close callback (httpd_on_close) has run; after that, never touch it.
 */
#ifndef SBX_HTTPD_H
#define SBX_HTTPD_H

#include "err.h"

#include <event2/event.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HTTPD_MAX_JSON_BODY (1024 * 1024)
#define HTTPD_MAX_PARAMS 4
#define HTTPD_PARAM_MAX 128
/* Idle timeout of a connection (MHD restarts it on every byte; suspended
 * connections do not time out). Long enough for 1 h streams behind nginx. */
#define HTTPD_CONN_TIMEOUT_S 3700
/* Client connections beyond max_conns (agent.max_connections): requests
 * on them get 503 NODE_UNAVAILABLE at once, except the control routes
 * ("/agent/...", sbx-api's calls) and HTTPD_HEALTH_PATH, which keep
 * answering on up to HTTPD_RESERVED_CONNS more. Past those, MHD stops
 * accepting: new connections wait in the listen backlog. Reaching either
 * mark is logged once, and so is falling back below it. */
#define HTTPD_RESERVED_CONNS 32
/* GET: 200 {"status":"ok","connections":n,"maxConnections":m}, answered
 * by the server itself (node secret required, like every route). */
#define HTTPD_HEALTH_PATH "/agent/v1/health"

struct httpd;
struct httpd_req;

typedef void (*httpd_handler_fn)(struct httpd_req *r);

struct httpd_route {
	const char *method;        /* "GET", "PUT", ... */
	/* The syntax of route.h: "/agent/v1/sandboxes/{tenant}/{id}", whose
	 * captures are params 0, 1, … in order. A pattern ending in
	 * "{name*}" (the rest of the path, maybe empty) is matched against the
	 * raw target as sent and its tail kept undecoded for the handler
	 * (httpd_tail); such a route's other params are raw too. */
	const char *pattern;
	httpd_handler_fn fn;
	unsigned flags;            /* HTTPD_ROUTE_* */
	const void *data;          /* the handler's own, from the row (httpd_route_data) */
};

/* The handler runs as soon as the headers are in (the body is not
 * buffered and not bounded) and either answers at once or registers a
 * body sink with httpd_body_sink(). */
#define HTTPD_ROUTE_STREAM_BODY 0x1u
/* The body is buffered up to HTTPD_MAX_BIG_BODY (not HTTPD_MAX_JSON_BODY),
 * and a larger one is not refused here: the handler runs without it and
 * answers in its own shape (httpd_body_too_large). */
#define HTTPD_ROUTE_BIG_BODY 0x2u
#define HTTPD_MAX_BIG_BODY (48 * 1024 * 1024)
/* 1 when r's body was over its route's bound (and dropped); 2 when it
 * was dropped because the bodies of HTTPD_ROUTE_BIG_BODY routes buffered
 * at once reached the budget of httpd_set_big_body_budget. */
int httpd_body_too_large(const struct httpd_req *r);
/* The bytes of HTTPD_ROUTE_BIG_BODY bodies h buffers at once (default 0:
 * no such body is buffered). */
void httpd_set_big_body_budget(struct httpd *h, uint64_t bytes);
/* The bytes of such bodies h holds now (received, not yet released). */
uint64_t httpd_big_body_held(const struct httpd *h);

/* A streamed request body, chunk by chunk as it arrives; called once more
 * with (NULL, 0) at its end, where the handler must answer (or defer).
 * Return -1 to refuse the rest (it is read and dropped; the handler has
 * answered or answers at the end). A body cut short never reaches the end
 * call: the request's close callback runs with failed = 1 instead. */
typedef int (*httpd_body_fn)(void *arg, const char *data, size_t len);
void httpd_body_sink(struct httpd_req *r, httpd_body_fn fn, void *arg);
/* A sink that returns HTTPD_BODY_PAUSE has taken the chunk but wants no
 * more for now: the connection is suspended (nothing more is read from the
 * client) until httpd_body_resume(). */
#define HTTPD_BODY_PAUSE 1
void httpd_body_resume(struct httpd_req *r);

/* Start listening on listen ("host:port", numeric host) with the routes
 * (borrowed; static storage), serving up to max_conns client connections
 * (see HTTPD_RESERVED_CONNS). ctx is handed to handlers by httpd_ctx().
 * secret NULL makes an open listener (agent.metrics_listen): no request
 * needs the node secret, and the server answers nothing itself (no health
 * route, no connection-limit 503). New heap object (httpd_free) or NULL
 * with e filled. */
struct httpd *httpd_new(struct event_base *base, const char *addr, const char *secret,
			const struct httpd_route *routes, size_t nroutes, void *ctx,
			unsigned max_conns, struct sbx_err *e);
/* Close every connection (close callbacks run) and free. */
void httpd_free(struct httpd *h);

/* fn is told of every request of h once it is over: the route that matched
 * (NULL: none), the status sent, seconds since its headers began. */
typedef void (*httpd_observe_fn)(const struct httpd_route *route, int status, double seconds);
void httpd_observe(struct httpd *h, httpd_observe_fn fn);

/* Parse "host:port" / "[v6]:port" (numeric) into host and port; 0 or -1. */
int httpd_parse_listen(const char *addr, char *host, size_t hostsz, int *port);

/* Match path against pattern; fills params (HTTPD_MAX_PARAMS segments of
 * at most HTTPD_PARAM_MAX-1 bytes) and returns their count, or -1. */
int httpd_match(const char *pattern, const char *path, char params[][HTTPD_PARAM_MAX]);
/* The same, also for a pattern ending in "{name*}": *tail_off is then the
 * offset in path where the tail starts. */
int httpd_match_tail(const char *pattern, const char *path, char params[][HTTPD_PARAM_MAX],
		     size_t *tail_off);

/* Constant-time (for a given secret length) comparison; 1 when equal. */
int httpd_secret_equal(const char *given, const char *secret);

/* --- request accessors (borrowed; valid while the request lives) --- */
void *httpd_ctx(const struct httpd_req *r);
const char *httpd_method(const struct httpd_req *r);
const char *httpd_param(const struct httpd_req *r, int i);
const char *httpd_header(const struct httpd_req *r, const char *name);
const char *httpd_query(const struct httpd_req *r, const char *name);
const char *httpd_body(const struct httpd_req *r, size_t *len);
/* The raw (still percent-encoded) tail of a "{*}" route; "" otherwise. */
const char *httpd_tail(const struct httpd_req *r);
/* The data of the route that matched r (struct httpd_route.data). */
const void *httpd_route_data(const struct httpd_req *r);

/* --- answers: exactly one per request --- */
/* JSON body (stolen reference) with status. */
void httpd_reply_json(struct httpd_req *r, int status, json_t *body);
/* The JSON error of e: {"error":{code,message,details:{}}} with err_status(). */
void httpd_reply_err(struct httpd_req *r, const struct sbx_err *e);
/* The one renderer of the agent's errors: {"error":{code, message,
 * details}} with details (an object, borrowed; NULL: {}). The calls
 * answer through agent_call_reply_err (call.h), which offers a view the
 * error typed first. */
void httpd_reply_err_details(struct httpd_req *r, const struct sbx_err *e, const json_t *details);
/* Log e with r's method, path and request id when it is an internal error
 * (as httpd_reply_err_details does). */
void httpd_log_err(const struct httpd_req *r, const struct sbx_err *e);
/* No body (204, ...). */
void httpd_reply_empty(struct httpd_req *r, int status);
/* Raw bytes (copied) with a content type. */
void httpd_reply_bytes(struct httpd_req *r, int status, const char *content_type,
		       const void *data, size_t len);
/* Add a header to the answer that is about to be queued (call before the reply). */
int httpd_add_header(struct httpd_req *r, const char *name, const char *value);

/* The handler answers later: the connection is suspended until a reply. */
void httpd_defer(struct httpd_req *r);

/* Streaming answer. read fills up to max bytes of buf and returns the
 * count; 0 = nothing right now (the connection is suspended until
 * httpd_stream_wake); -1 = the end; -2 = the answer failed half-way (the
 * connection is closed without completing it, so the client sees a
 * truncated answer, never a short one that looks whole). */
typedef ssize_t (*httpd_read_fn)(void *arg, char *buf, size_t max);
void httpd_reply_stream(struct httpd_req *r, int status, const char *content_type,
			httpd_read_fn read, void *arg);
void httpd_stream_wake(struct httpd_req *r);

/* len bytes of the regular file fd from offset, with Content-Length; MHD
 * sends them as the socket takes them (sendfile where it can). fd is
 * stolen (closed when the answer is done, or at once on failure). */
void httpd_reply_fd(struct httpd_req *r, int status, const char *content_type, int fd,
		    uint64_t offset, uint64_t len);

/* Called once when the request is over (answer sent, or the client went
 * away: failed = 1). The request is freed right after it returns. */
typedef void (*httpd_close_fn)(void *arg, int failed);
void httpd_on_close(struct httpd_req *r, httpd_close_fn fn, void *arg);

/* --- upgrades (WebSocket: ws.h) --- */

struct httpd_upgrade;

/* The connection of r after its 101 answer went out: fd is the client
 * socket (borrowed: MHD closes it at httpd_upgrade_close), extra the bytes
 * read past the request (borrowed for the call). The request itself is
 * over; u lives until httpd_upgrade_close. */
typedef void (*httpd_upgrade_fn)(void *arg, struct httpd_upgrade *u, int fd, const char *extra,
				 size_t extra_len);

/* Answer 101 Switching Protocols (with the headers added before it) and
 * hand the connection to fn once the answer is out. When the client goes
 * away first, or sent bytes before it had the 101 (extra_len is then 0
 * for every fn that runs), fn never runs and the close callback of r runs
 * (failed or not); once fn has run, the close callback of r does not. */
void httpd_reply_upgrade(struct httpd_req *r, httpd_upgrade_fn fn, void *arg);

/* Called when the server stops while u is open: the owner ends its use of
 * the socket and calls httpd_upgrade_close (else the server closes it). */
void httpd_upgrade_on_abort(struct httpd_upgrade *u, void (*fn)(void *arg), void *arg);

/* The upgraded connection is done: its socket is closed, u is freed. */
void httpd_upgrade_close(struct httpd_upgrade *u);

/* --- the opaque slot: one per request, for the layer above (call.h's
 * view); httpd only frees it --- */

/* Put tag and arg in r's slot; free_fn(arg) (may be NULL) runs when the
 * slot is replaced and when r is freed (after its close callback). */
void httpd_set_slot(struct httpd_req *r, const void *tag, void *arg, void (*free_fn)(void *arg));
/* The slot's tag (NULL: empty) and its arg in *arg. */
const void *httpd_slot(const struct httpd_req *r, void **arg);

/* Feed data to the sink a HTTPD_ROUTE_STREAM_BODY handler registered
 * while it was called on a buffered request (a view's call), as the whole
 * body in chunks, then its end; a sink that pauses gets the rest when it
 * calls httpd_body_resume. data is borrowed and must live as long as r.
 * No-op without a sink. */
void httpd_feed_body(struct httpd_req *r, const char *data, size_t len);

#endif
