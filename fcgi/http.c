#include "http.h"
#include "codec.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HEADERS_MAX 8192
#define HEADER_VALUE_MAX 512

static const char *http_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 507: return "Insufficient Storage";
	}
	return "Unknown";
}

const char *http_param(const struct http_req *r, const char *name)
{
	if (!r->fcgx)
		return NULL;
	return FCGX_GetParam(name, r->fcgx->envp);
}

/* Keep a client's request id for logs only if it is of the safe shape. */
static void take_request_id(struct http_req *r)
{
	const char *id = http_param(r, "HTTP_X_REQUEST_ID");
	size_t n;

	snprintf(r->request_id, sizeof(r->request_id), "-");
	if (!id)
		return;
	n = strlen(id);
	if (n == 0 || n > 128)
		return;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return;
	}
	memcpy(r->request_id, id, n + 1);
}

int http_req_init(struct http_req *r, FCGX_Request *fcgx, const struct sbx_conf *conf,
		  struct sbx_err *e)
{
	const char *doc, *internal;
	size_t n;

	memset(r, 0, sizeof(*r));
	r->fcgx = fcgx;
	r->conf = conf;
	r->started_ms = util_now_ms();
	buf_init(&r->headers, HEADERS_MAX);
	take_request_id(r);
	r->method = http_param(r, "REQUEST_METHOD");
	if (!r->method || !*r->method)
		r->method = "GET";
	r->query = http_param(r, "QUERY_STRING");
	if (!r->query)
		r->query = "";

	/* The client's raw URI, as it came (nginx's DOCUMENT_URI is decoded and
	 * normalized: "%61bc" would be "abc", "zz/../abc" just "abc"). An
	 * internal location names its own path in DOCUMENT_URI while
	 * REQUEST_URI stays the client's. */
	internal = http_param(r, "SBX_INTERNAL");
	doc = internal && strcmp(internal, "1") == 0 ? NULL : http_param(r, "REQUEST_URI");
	if (!doc || !*doc)
		doc = http_param(r, "DOCUMENT_URI");
	if (doc && *doc) {
		n = strcspn(doc, "?");
		if (n >= sizeof(r->path))
			return err_set(e, SBX_E_VALIDATION, "the request path is too long");
		memcpy(r->path, doc, n);
		r->path[n] = '\0';
	} else {
		const char *sn = http_param(r, "SCRIPT_NAME"), *pi = http_param(r, "PATH_INFO");
		int w = snprintf(r->path, sizeof(r->path), "%s%s", sn ? sn : "", pi ? pi : "");
		if (w < 0 || (size_t)w >= sizeof(r->path))
			return err_set(e, SBX_E_VALIDATION, "the request path is too long");
		r->path[strcspn(r->path, "?")] = '\0';
	}
	if (r->path[0] != '/')
		return err_set(e, SBX_E_ROUTE_NOT_FOUND, "no route for this path");
	return 0;
}

void http_req_release(struct http_req *r)
{
	buf_release(&r->headers);
}

int http_content_length(const struct http_req *r, int64_t *len, struct sbx_err *e)
{
	const char *cl = http_param(r, "CONTENT_LENGTH");
	int64_t v;

	*len = 0;
	if (!cl || !*cl)
		return 0;
	for (const char *p = cl; *p; p++)
		if (*p < '0' || *p > '9')
			return err_set(e, SBX_E_VALIDATION, "malformed Content-Length");
	if (strlen(cl) > 18 || util_parse_i64(cl, 0, INT64_MAX, &v) < 0)
		return err_set(e, SBX_E_PAYLOAD_TOO_LARGE, "the body is larger than %lld bytes",
			       (long long)r->conf->api.max_body_bytes);
	if (v > r->conf->api.max_body_bytes)
		return err_set(e, SBX_E_PAYLOAD_TOO_LARGE, "the body is larger than %lld bytes",
			       (long long)r->conf->api.max_body_bytes);
	*len = v;
	return 0;
}

static char *http_read_body(struct http_req *r, size_t *len, struct sbx_err *e)
{
	auto_free char *body = NULL;
	int64_t want;
	size_t got = 0;

	if (http_content_length(r, &want, e) < 0)
		return NULL;
	body = malloc((size_t)want + 1);
	if (!body) {
		err_sys(e, ENOMEM, "cannot allocate the request body");
		return NULL;
	}
	while (got < (size_t)want) {
		size_t chunk = (size_t)want - got > (1 << 20) ? (1 << 20) : (size_t)want - got;
		int n = FCGX_GetStr(body + got, (int)chunk, r->fcgx->in);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != (size_t)want) {
		err_set(e, SBX_E_VALIDATION, "the body is shorter than its Content-Length");
		return NULL;
	}
	body[got] = '\0';
	*len = got;
	return steal_ptr(&body);
}

json_t *http_read_json(struct http_req *r, struct sbx_err *e)
{
	auto_free char *body = NULL;
	size_t len = 0;

	body = http_read_body(r, &len, e);
	if (!body)
		return NULL;
	if (len && jsonv_media_type(http_param(r, "CONTENT_TYPE"), e) < 0)
		return NULL;
	return jsonv_parse(body, len, e);
}

static int header_safe(const char *s, size_t max)
{
	size_t n = 0;

	for (; *s; s++, n++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f || n >= max)
			return 0;
	return 1;
}

int http_add_header(struct http_req *r, const char *name, const char *value)
{
	if (!header_safe(name, 64) || !*name || strchr(name, ':') || !header_safe(value, HEADER_VALUE_MAX))
		return -1;
	return buf_printf(&r->headers, "%s: %s\r\n", name, value);
}

/* Copy the string s into dst (room bytes, not terminated): its length, or
 * what fits. */
static size_t put_lit(char *dst, size_t room, const char *s)
{
	size_t n = strlen(s);

	if (n > room)
		n = room;
	memcpy(dst, s, n);
	return n;
}

/* Write the status line, our headers and the body; marks r responded. */
static int respond(struct http_req *r, int status, const char *ctype, const char *body, size_t len)
{
	FCGX_Stream *out = r->fcgx->out;
	char head[256];
	size_t hl;
	int rc = 0;

	if (r->responded) {
		log_error("second response for %s %s suppressed (request %s)", r->method, r->path,
			  r->request_id);
		return -1;
	}
	r->responded = 1;
	r->status = status;
	if (status < 100 || status > 999)
		status = 500;
	/* The fixed head without printf: this runs on every answer. */
	memcpy(head, "Status: ", 8);
	head[8] = (char)('0' + status / 100);
	head[9] = (char)('0' + status / 10 % 10);
	head[10] = (char)('0' + status % 10);
	head[11] = ' ';
	hl = 12;
	hl += put_lit(head + hl, sizeof(head) - hl, http_reason(status));
	hl += put_lit(head + hl, sizeof(head) - hl, "\r\nCache-Control: no-store\r\n");
	if (body) {
		hl += put_lit(head + hl, sizeof(head) - hl, "Content-Type: ");
		hl += put_lit(head + hl, sizeof(head) - hl, ctype);
		hl += put_lit(head + hl, sizeof(head) - hl, "\r\n");
	}
	if (FCGX_PutStr(head, (int)hl, out) < 0)
		rc = -1;
	if (r->headers.len && FCGX_PutStr(r->headers.data, (int)r->headers.len, out) < 0)
		rc = -1;
	if (r->rate.set && !(r->flags & HTTP_F_AUTHREQ)) {
		char lines[160];
		struct ratelimit_state rs = r->rate;

		if (status != 429)
			rs.retry_s = 0;
		if (ratelimit_format_headers(&rs, lines, sizeof(lines)) == 0 &&
		    FCGX_PutS(lines, out) < 0)
			rc = -1;
	}
	if (FCGX_PutS("\r\n", out) < 0)
		rc = -1;
	if (body && len && FCGX_PutStr(body, (int)len, out) < 0)
		rc = -1;
	return rc;
}

int http_respond_json_text(struct http_req *r, int status, const char *json, size_t len)
{
	return respond(r, status, "application/json", json, len);
}

int http_respond_json(struct http_req *r, int status, const json_t *body)
{
	auto_free char *text = NULL;

	if (!body)
		return respond(r, status, NULL, NULL, 0);
	text = jsonv_dump(body);
	if (!text) {
		struct sbx_err e;
		err_set(&e, SBX_E_INTERNAL, "cannot serialize a response");
		http_respond_error(r, &e);
		return -1;
	}
	return respond(r, status, "application/json", text, strlen(text));
}

/* Copy s into out as printable ASCII (others become '?'), at most outsz-1. */
static void printable(const char *s, char *out, size_t outsz)
{
	size_t i = 0;

	for (; s[i] && i + 1 < outsz; i++)
		out[i] = ((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f) ? s[i] : '?';
	out[i] = '\0';
}

void http_respond_error(struct http_req *r, const struct sbx_err *e)
{
	int status = err_status(e->code);
	const char *code = err_name(e->code);
	char msg[sizeof(e->msg)], num[64];
	json_t *body;
	auto_free char *text = NULL;

	if (e->code == SBX_E_INTERNAL || e->code == SBX_E_NONE)
		log_error("%s %s: %s (request %s)", r->method, r->path, e->msg[0] ? e->msg : "no message",
			  r->request_id);
	else if (status >= 500)
		log_warn("%s %s: %s: %s (request %s)", r->method, r->path, code, e->msg, r->request_id);
	printable(err_public_message(e), msg, sizeof(msg));
	if (r->responded)
		return;
	if (r->flags & HTTP_F_AUTHREQ) {
		buf_reset(&r->headers);
		msg[HTTP_RELAY_MESSAGE_MAX] = '\0';   /* what /_sbx_error accepts back */
		util_xsnprintf(num, sizeof(num), "%d", status);
		if (http_add_header(r, "X-Sbx-Status", num) < 0 ||
		    http_add_header(r, "X-Sbx-Code", code) < 0 ||
		    http_add_header(r, "X-Sbx-Message", msg) < 0)
			log_error("cannot add the refusal headers (request %s)", r->request_id);
		if (e->code == SBX_E_RATE_LIMITED && r->rate.set &&
		    (ratelimit_relay_format(&r->rate, num, sizeof(num)) < 0 ||
		     http_add_header(r, "X-Sbx-Rate", num) < 0))
			log_error("cannot add the rate limit header (request %s)", r->request_id);
		respond(r, 403, NULL, NULL, 0);
		return;
	}
	if (status == 503)
		(void)http_add_header(r, "Retry-After", "1");
	if (r->flags & HTTP_F_CF_SHAPE) {
		body = err_cf_body(err_cf_code(code), msg, status, NULL);
	} else {
		body = json_pack("{s:{s:s,s:s,s:{}}}", "error", "code", code, "message", msg,
				 "details");
	}
	if (body)
		text = jsonv_dump(body);
	json_decref(body);
	if (!text) {
		static const char fallback[] =
			"{\"error\":{\"code\":\"INTERNAL\",\"message\":\"internal error\",\"details\":{}}}";
		respond(r, 500, "application/json", fallback, sizeof(fallback) - 1);
		return;
	}
	respond(r, status, "application/json", text, strlen(text));
}

/* 1 when n bytes of s hold only well-formed escapes and no NUL. */
static int pct_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\0')
			return 0;
		if (s[i] != '%')
			continue;
		if (i + 2 >= n || !isxdigit((unsigned char)s[i + 1]) ||
		    !isxdigit((unsigned char)s[i + 2]) ||
		    (s[i + 1] == '0' && s[i + 2] == '0'))
			return 0;
		i += 2;
	}
	return 1;
}

int http_query_get(const char *query, const char *name, char *out, size_t outsz,
		   struct sbx_err *e)
{
	const char *p = query ? query : "";
	size_t nlen = strlen(name);
	int found = 0;
	char key[128];

	while (*p) {
		size_t plen = strcspn(p, "&");
		const char *eq = memchr(p, '=', plen);
		size_t klen = eq ? (size_t)(eq - p) : plen;

		if (plen == 0) {
			p++;
			continue;
		}
		if (codec_pct_decode(p, klen, key, sizeof(key), 1) < 0)
			return err_set(e, SBX_E_VALIDATION, "malformed query string");
		if (!found && strlen(key) == nlen && memcmp(key, name, nlen) == 0) {
			const char *v = eq ? eq + 1 : p + plen;
			size_t vlen = eq ? plen - klen - 1 : 0;
			if (codec_pct_decode(v, vlen, out, outsz, 1) < 0)
				return err_set(e, SBX_E_VALIDATION,
					       "query parameter '%s' is malformed or too long", name);
			found = 1;
		} else if (eq && !pct_valid(eq + 1, plen - klen - 1)) {
			return err_set(e, SBX_E_VALIDATION, "malformed query string");
		}
		p += plen;
		if (*p == '&')
			p++;
	}
	return found;
}

int http_path_bad_segment(const char *uri)
{
	size_t end = strcspn(uri, "?");
	const char *p = uri + 1;

	while (p < uri + end) {
		size_t len = strcspn(p, "/?");
		char seg[8];
		long d;

		if (len == 0 && p + len < uri + end)
			return 1;
		if (len <= 6) {   /* "%2e%2e" at most */
			d = codec_pct_decode(p, len, seg, sizeof(seg), 0);
			if (d > 0 && (strcmp(seg, ".") == 0 || strcmp(seg, "..") == 0))
				return 1;
		}
		p += len;
		if (*p == '/')
			p++;
		else
			break;
	}
	return 0;
}
