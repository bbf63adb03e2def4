/*
 * http.h — one FastCGI request of sbx-api: what came in, what goes out.
 *
 * A struct http_req wraps a libfcgi FCGX_Request (borrowed). The path is
 * the client's raw REQUEST_URI (for an internal location, SBX_INTERNAL=1:
 * DOCUMENT_URI; else SCRIPT_NAME + PATH_INFO) without its query; the
 * body is read only on demand and bounded by api.max_body_bytes. Responses
 * carry "Status:", Content-Type and Cache-Control: no-store; error
 * responses come from exactly one function, http_respond_error().
 */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include "buf.h"
#include "conf.h"
#include "err.h"
#include "ratelimit.h"
#include "router.h"

#include <fcgiapp.h>
#include <jansson.h>
#include <stdint.h>

/* Longest X-Sbx-Message relayed through nginx (and accepted by /_sbx_error). */
#define HTTP_RELAY_MESSAGE_MAX 200

enum http_flags {
	HTTP_F_AUTHREQ = 1 << 0,   /* errors become 403 + X-Sbx-Status/-Code/-Message */
	HTTP_F_CF_SHAPE = 1 << 1,  /* errors in the Cloudflare SDK's shape (…/cf/… routes) */
};

struct http_req {
	FCGX_Request *fcgx;              /* borrowed */
	const struct sbx_conf *conf;     /* borrowed */
	const char *method;              /* REQUEST_METHOD, never NULL */
	char path[ROUTER_PATH_MAX];      /* raw (undecoded) path without the query */
	const char *query;               /* raw query string, "" when none */
	char request_id[129];            /* X-Request-Id (sanitized) or "-" */
	unsigned flags;
	int responded;
	int status;                      /* the status sent, for the access log */
	int64_t started_ms;
	struct buf headers;              /* extra response header lines */
	struct router_match match;
	/* filled by auth_request() */
	int authed;
	int admin;
	char tenant[64];
	/* the tenant's rate limit, set by auth_request(): its RateLimit-*
	 * headers (and Retry-After on a 429) go out with the answer */
	struct ratelimit_state rate;
};

/* Prepare r for an accepted request (no I/O). -1 with e when the path is
 * unusable (too long, missing). Release with http_req_release(). */
int http_req_init(struct http_req *r, FCGX_Request *fcgx, const struct sbx_conf *conf,
		  struct sbx_err *e);
void http_req_release(struct http_req *r);

/* A FastCGI param (e.g. "HTTP_AUTHORIZATION"); borrowed, NULL when absent. */
const char *http_param(const struct http_req *r, const char *name);

/* Check CONTENT_LENGTH: 0 with *len (0 when absent), -1 with 400 when
 * malformed or 413 when above api.max_body_bytes. Reads nothing. */
int http_content_length(const struct http_req *r, int64_t *len, struct sbx_err *e);

/* Read the body and parse it as a JSON object ({} when empty); new reference. */
json_t *http_read_json(struct http_req *r, struct sbx_err *e);

/* Add a response header; name and value must be header-safe (no CR/LF/NUL).
 * 0 or -1. */
int http_add_header(struct http_req *r, const char *name, const char *value);

/* Send status + JSON body (NULL: no body). 0 or -1 when the client is gone. */
int http_respond_json(struct http_req *r, int status, const json_t *body);

/* Send status + a JSON body already rendered (len bytes of json; borrowed).
 * 0 or -1 when the client is gone. */
int http_respond_json_text(struct http_req *r, int status, const char *json, size_t len);

/* The one mapping of an error to a response: status from err_status(), code
 * from err_name(), message from err_public_message(); INTERNAL details are
 * logged with the request id. 503 adds Retry-After: 1. Under HTTP_F_AUTHREQ
 * the answer is a 403 carrying X-Sbx-Status / X-Sbx-Code / X-Sbx-Message. */
void http_respond_error(struct http_req *r, const struct sbx_err *e);

/* 1 when the raw path of uri (before '?') has an empty segment before its
 * end ("//v1/…", "/v1//…") or a '.' / '..' one (also percent-encoded).
 * nginx routes by the normalized URI while the raw one travels on (to an
 * agent, in logs): such a path is refused (400) so both name one thing. */
int http_path_bad_segment(const char *uri);

/* Find name in a raw query string "a=1&b=x%20y" and decode its value into
 * out. 1 found, 0 absent, -1 with e (400) when the query or value is
 * invalid or too long. A name without '=' has the value "". */
int http_query_get(const char *query, const char *name, char *out, size_t outsz,
		   struct sbx_err *e);

#endif
