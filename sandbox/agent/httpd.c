#include "httpd.h"
#include "route.h"
#include "buf.h"
#include "jsonv.h"
#include "log.h"
#include "metrics.h"
#include "tcplisten.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_EXTRA_HEADERS 8
/* How often a file answer checks that its file still holds the bytes it
 * announced (see watch_file). */
#define FILE_CHECK_MS 200

struct httpd {
	struct event_base *base;
	struct MHD_Daemon *mhd;
	struct event *epoll_ev;    /* MHD's epoll fd readable */
	struct event *timer_ev;    /* MHD_get_timeout / kick */
	const struct httpd_route *routes;
	size_t nroutes;
	void *ctx;
	char secret[256];
	struct httpd_req *reqs;    /* every live request (for shutdown) */
	int stopping;
	int rerun;                 /* run MHD again at once (set while it runs) */
	unsigned max_conns;        /* data requests beyond this get 503 */
	unsigned nconns;           /* open client connections (MHD's count) */
	int at_limit;              /* past max_conns (logged once) */
	int at_hard_limit;         /* MHD's own limit: it stopped accepting */
	uint64_t big_budget;       /* HTTPD_ROUTE_BIG_BODY bodies buffered at once, */
	uint64_t big_held;         /* and how many bytes they hold now */
	int open;                  /* no node secret asked (httpd_new with secret NULL) */
	httpd_observe_fn observe;  /* told of every finished request, or NULL */
	struct httpd_upgrade *upgrades; /* upgraded connections still open */
};

struct httpd_upgrade {
	struct httpd *h;
	struct httpd_upgrade *prev, *next;
	struct MHD_UpgradeResponseHandle *urh;  /* NULL until the 101 is out */
	httpd_upgrade_fn fn;
	void *arg;
	void (*abort)(void *);
	void *abort_arg;
};

struct httpd_req {
	struct httpd *h;
	struct MHD_Connection *conn;
	struct httpd_req *prev, *next;
	const struct httpd_route *route;
	char method[16];
	char *path;
	char *raw;                 /* the request target as sent (not decoded) */
	char *tail;                /* raw rest matched by a trailing "{*}", or NULL */
	char params[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
	struct buf body;
	int64_t started_ms;
	int64_t started_us;        /* metrics_now_us() at the request's start */
	int dispatched;            /* the handler ran */
	int too_large;             /* body exceeded the bound (2: the node's budget) */
	uint64_t big_held;         /* bytes of h->big_held that are this body's */
	int suspended;
	int deferred;
	int replied;               /* an answer exists (queued or pending) */
	int peer_gone;
	int headers_done;          /* the first access callback ran */
	int status;
	struct MHD_Response *resp; /* pending, not yet queued */
	char *hdr_name[MAX_EXTRA_HEADERS];
	char *hdr_value[MAX_EXTRA_HEADERS];
	int nhdr;
	httpd_read_fn read;
	void *read_arg;
	httpd_close_fn close_fn;
	void *close_arg;
	httpd_body_fn sink;        /* streamed request body (HTTPD_ROUTE_STREAM_BODY) */
	void *sink_arg;
	int sink_done;             /* the sink refused more, or saw the end */
	int body_paused;           /* the sink asked for a pause (HTTPD_BODY_PAUSE) */
	const char *feed;          /* httpd_feed_body: the body being fed, */
	size_t feed_len, feed_off; /* its length and how much the sink took */
	struct event *peer_ev;     /* watches the client socket while suspended */
	struct event *file_ev;     /* a file answer: checks the file's size */
	int file_fd;               /* borrowed: MHD owns it with the answer */
	uint64_t file_end;         /* offset + length announced */
	/* the opaque slot (httpd_set_slot) */
	const void *slot_tag;
	void *slot_arg;
	void (*slot_free)(void *arg);
	struct httpd_upgrade *upgrade; /* an upgrade answer not yet carried out */
};

static void httpd_run(struct httpd *h);

/* Run MHD soon: from outside MHD_run on the next loop turn, from inside it
 * right after it returns (httpd_run re-arms the timer last). */
static void kick(struct httpd *h)
{
	h->rerun = 1;
	if (h->timer_ev)
		event_active(h->timer_ev, EV_TIMEOUT, 1);
}

/* --- pure helpers --- */

int httpd_parse_listen(const char *addr, char *host, size_t hostsz, int *port)
{
	return tcplisten_parse(addr, host, hostsz, port);
}

int httpd_match_tail(const char *pattern, const char *path, char params[][HTTPD_PARAM_MAX],
		     size_t *tail_off)
{
	struct route_caps caps;
	int n = 0;

	if (!route_fit(pattern, path, &caps))
		return -1;
	for (int i = 0; i < caps.n; i++) {
		if (caps.cap[i].name[caps.cap[i].name_len] == '*') {   /* the tail: the last one */
			if (!tail_off)
				return -1;
			*tail_off = (size_t)(caps.cap[i].value - path);
			return n;
		}
		if (caps.cap[i].len >= HTTPD_PARAM_MAX || n >= HTTPD_MAX_PARAMS)
			return -1;
		memcpy(params[n], caps.cap[i].value, caps.cap[i].len);
		params[n++][caps.cap[i].len] = '\0';
	}
	return n;
}

int httpd_match(const char *pattern, const char *path, char params[][HTTPD_PARAM_MAX])
{
	return httpd_match_tail(pattern, path, params, NULL);
}

int httpd_secret_equal(const char *given, const char *secret)
{
	size_t gl = strlen(given), sl = strlen(secret);
	unsigned char diff = (unsigned char)(gl != sl);

	for (size_t i = 0; i < sl; i++) {
		unsigned char g = i < gl ? (unsigned char)given[i] : 0;
		diff |= (unsigned char)(g ^ (unsigned char)secret[i]);
	}
	return sl > 0 && diff == 0;
}

/* --- accessors --- */

void *httpd_ctx(const struct httpd_req *r)
{
	return r->h->ctx;
}

const char *httpd_method(const struct httpd_req *r)
{
	return r->method;
}

const void *httpd_route_data(const struct httpd_req *r)
{
	return r->route ? r->route->data : NULL;
}

const char *httpd_param(const struct httpd_req *r, int i)
{
	return i >= 0 && i < HTTPD_MAX_PARAMS ? r->params[i] : "";
}

const char *httpd_header(const struct httpd_req *r, const char *name)
{
	return r->conn ? MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name) : NULL;
}

const char *httpd_query(const struct httpd_req *r, const char *name)
{
	return r->conn ? MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name) : NULL;
}

const char *httpd_tail(const struct httpd_req *r)
{
	return r->tail ? r->tail : "";
}

const char *httpd_body(const struct httpd_req *r, size_t *len)
{
	*len = r->body.len;
	return r->body.data ? r->body.data : "";
}

static const char *httpd_request_id(const struct httpd_req *r)
{
	const char *id = httpd_header(r, "X-Request-Id");
	return id ? id : "-";
}

static int httpd_client_fd(const struct httpd_req *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

/* --- suspension with peer-close detection --- */

static void peer_cb(evutil_socket_t fd, short what, void *arg);

static void suspend_req(struct httpd_req *r)
{
	int fd;

	if (r->suspended)
		return;
	MHD_suspend_connection(r->conn);
	r->suspended = 1;
	fd = httpd_client_fd(r);
	if (fd >= 0) {
		if (!r->peer_ev)
			r->peer_ev = event_new(r->h->base, fd, EV_READ, peer_cb, r);
		if (r->peer_ev)
			event_add(r->peer_ev, NULL);
	}
}

static void resume_req(struct httpd_req *r)
{
	if (!r->suspended)
		return;
	if (r->peer_ev)
		event_del(r->peer_ev);
	r->suspended = 0;
	r->body_paused = 0;
	MHD_resume_connection(r->conn);
	kick(r->h);
}

/* The client socket became readable while we had nothing to send: either
 * the client closed it (end the request so the owner cleans up) or it sent
 * more bytes (pipelining; stop watching until the next suspension). */
static void peer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct httpd_req *r = arg;
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
		return;
	r->peer_gone = 1;
	if (!r->replied) {
		/* A deferred request: queue something so MHD notices the close. */
		r->replied = 1;
		r->status = 499; /* nginx: client closed the request */
		r->resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	}
	resume_req(r);
}

/* --- the opaque slot --- */

void httpd_set_slot(struct httpd_req *r, const void *tag, void *arg, void (*free_fn)(void *arg))
{
	if (r->slot_free)
		r->slot_free(r->slot_arg);
	r->slot_tag = tag;
	r->slot_arg = arg;
	r->slot_free = free_fn;
}

const void *httpd_slot(const struct httpd_req *r, void **arg)
{
	*arg = r->slot_arg;
	return r->slot_tag;
}

int httpd_body_too_large(const struct httpd_req *r)
{
	return r->too_large;
}

void httpd_set_big_body_budget(struct httpd *h, uint64_t bytes)
{
	h->big_budget = bytes;
}

uint64_t httpd_big_body_held(const struct httpd *h)
{
	return h->big_held;
}

/* Drop r's buffered body and its share of the big-body budget. */
static void body_drop(struct httpd_req *r)
{
	r->h->big_held -= r->big_held;
	r->big_held = 0;
	buf_release(&r->body);
}

/* Buffer n more bytes of r's body: 0, or -1 (r->too_large set). */
static int body_add(struct httpd_req *r, const char *data, size_t n)
{
	int big = r->route && (r->route->flags & HTTPD_ROUTE_BIG_BODY);

	if (big && r->h->big_held + n > r->h->big_budget) {
		r->too_large = 2;
		body_drop(r);
		return -1;
	}
	if (buf_add(&r->body, data, n) < 0) {
		r->too_large = 1;
		body_drop(r);
		return -1;
	}
	if (big) {
		r->big_held += n;
		r->h->big_held += n;
	}
	return 0;
}

#define FEED_CHUNK (64 * 1024)

/* Feed the rest of r->feed in chunks until the sink pauses, refuses or
 * has it all (then its end). */
static void feed_step(struct httpd_req *r)
{
	while (r->feed_off < r->feed_len) {
		size_t n = r->feed_len - r->feed_off;
		int rc;

		if (n > FEED_CHUNK)
			n = FEED_CHUNK;
		if (r->replied)
			return;
		rc = r->sink(r->sink_arg, r->feed + r->feed_off, n);
		r->feed_off += n;
		if (rc < 0) {
			r->feed = NULL;   /* refused: the sink has answered or will */
			return;
		}
		if (rc == HTTPD_BODY_PAUSE) {
			/* the rest comes on httpd_body_resume: the answer later */
			r->body_paused = 1;
			r->deferred = 1;
			return;
		}
	}
	r->feed = NULL;
	if (!r->replied)
		r->sink(r->sink_arg, NULL, 0);
}

void httpd_feed_body(struct httpd_req *r, const char *data, size_t len)
{
	if (!r->sink || r->sink_done || r->replied)
		return;
	r->sink_done = 1;
	r->feed = data;
	r->feed_len = len;
	r->feed_off = 0;
	feed_step(r);
}

/* --- answers --- */

int httpd_add_header(struct httpd_req *r, const char *name, const char *value)
{
	if (r->nhdr >= MAX_EXTRA_HEADERS)
		return -1;
	r->hdr_name[r->nhdr] = strdup(name);
	r->hdr_value[r->nhdr] = strdup(value);
	if (!r->hdr_name[r->nhdr] || !r->hdr_value[r->nhdr]) {
		free(r->hdr_name[r->nhdr]);
		free(r->hdr_value[r->nhdr]);
		return -1;
	}
	r->nhdr++;
	return 0;
}

/* Take resp as the answer of r: it is queued by the access handler (now,
 * or after the connection is resumed). */
static void set_answer(struct httpd_req *r, int status, struct MHD_Response *resp)
{
	if (r->replied) {
		if (resp)
			MHD_destroy_response(resp);
		return;
	}
	if (!resp) {
		log_error("cannot create a response for %s %s", r->method, r->path);
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		status = 500;
		if (!resp)
			return;
	}
	for (int i = 0; i < r->nhdr; i++)
		MHD_add_response_header(resp, r->hdr_name[i], r->hdr_value[i]);
	r->replied = 1;
	r->status = status;
	r->resp = resp;
	if (r->suspended)
		resume_req(r);
}

void httpd_reply_bytes(struct httpd_req *r, int status, const char *content_type,
		       const void *data, size_t len)
{
	struct MHD_Response *resp;

	resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
	if (resp && content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	set_answer(r, status, resp);
}

void httpd_reply_json(struct httpd_req *r, int status, json_t *body)
{
	auto_free char *text = body ? jsonv_dump(body) : NULL;

	json_decref(body);
	if (!text) {
		static const char oom[] =
			"{\"error\":{\"code\":\"INTERNAL\",\"message\":\"internal error\",\"details\":{}}}\n";
		httpd_reply_bytes(r, 500, "application/json", oom, sizeof(oom) - 1);
		return;
	}
	httpd_reply_bytes(r, status, "application/json", text, strlen(text));
}

void httpd_reply_err(struct httpd_req *r, const struct sbx_err *e)
{
	httpd_reply_err_details(r, e, NULL);
}

void httpd_log_err(const struct httpd_req *r, const struct sbx_err *e)
{
	if (e->code == SBX_E_INTERNAL || e->code == SBX_E_NONE)
		log_error("%s %s [%s]: %s", r->method, r->path, httpd_request_id(r), e->msg);
}

void httpd_reply_err_details(struct httpd_req *r, const struct sbx_err *e, const json_t *details)
{
	json_t *body;

	httpd_log_err(r, e);
	/* a 503 is a transition or a full node: the client retries */
	if (err_status(e->code) == 503)
		httpd_add_header(r, "Retry-After", "1");
	body = json_pack("{s:{s:s, s:s, s:o}}", "error", "code", err_name(e->code), "message",
			 err_public_message(e), "details",
			 details ? json_deep_copy(details) : json_object());
	httpd_reply_json(r, err_status(e->code), body);
}

void httpd_reply_empty(struct httpd_req *r, int status)
{
	httpd_reply_bytes(r, status, NULL, "", 0);
}

void httpd_defer(struct httpd_req *r)
{
	r->deferred = 1;
}

void httpd_on_close(struct httpd_req *r, httpd_close_fn fn, void *arg)
{
	r->close_fn = fn;
	r->close_arg = arg;
}

/* End the answer of r (from its content reader) with an error: MHD closes
 * the connection. MHD 0.9.75 marks a connection closed there but frees it
 * (and closes its socket) only on a later pass over that connection. A
 * connection resumed from suspension is outside MHD's epoll set, so no
 * socket event brings that pass; of the idle connections, MHD visits on
 * every run only those with a timeout of their own (the others are sorted
 * by age, the oldest first, and the scan stops at the first live one).
 * Give the connection one and run MHD again at once, so its socket is
 * closed now and not never. */
static ssize_t stream_fail(struct httpd_req *r)
{
	MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)1);
	kick(r->h);
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct httpd_req *r = cls;
	ssize_t n;

	if (r->peer_gone || r->h->stopping)
		return stream_fail(r);
	n = r->read(r->read_arg, buf, max);
	if (n > 0)
		return n;
	if (n == -2)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (n < 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	suspend_req(r);
	return 0;
}

void httpd_reply_stream(struct httpd_req *r, int status, const char *content_type,
			httpd_read_fn read, void *arg)
{
	struct MHD_Response *resp;

	r->read = read;
	r->read_arg = arg;
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r, NULL);
	if (resp && content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	set_answer(r, status, resp);
}

/* MHD sent the 101: the socket is ours (until httpd_upgrade_close). */
static void upgrade_cb(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra,
		       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct httpd_upgrade *u = cls;
	struct httpd_req *r = con_cls;
	struct httpd *h = u->h;

	if (r && r->upgrade != u)
		r = NULL;
	if (r)
		r->upgrade = NULL;
	u->urh = urh;
	u->next = h->upgrades;
	if (h->upgrades)
		h->upgrades->prev = u;
	h->upgrades = u;
	/* MHD 0.9.75 closes the socket of an upgrade itself when the client
	 * sent bytes along with the request (tests/unit/test_ws_loop.c): an
	 * owner would hold a closed fd, soon another connection's. Such a
	 * client (one that did not wait for the 101; nginx does) is dropped. */
	if (!u->fn || extra_len) {
		if (extra_len)
			log_warn("httpd: upgrade of %s refused: the client sent %zu bytes before the 101",
				 r && r->path ? r->path : "?", extra_len);
		httpd_upgrade_close(u);
		return;
	}
	if (r)
		r->close_fn = NULL;   /* the request is over: u is what lives on */
	u->fn(u->arg, u, (int)sock, extra, extra_len);
}

void httpd_reply_upgrade(struct httpd_req *r, httpd_upgrade_fn fn, void *arg)
{
	struct httpd_upgrade *u;
	struct MHD_Response *resp = NULL;

	if (r->replied)
		return;
	u = calloc(1, sizeof(*u));

	if (u) {
		u->h = r->h;
		u->fn = fn;
		u->arg = arg;
		resp = MHD_create_response_for_upgrade(upgrade_cb, u);
		if (!resp)
			free(u);
		else
			r->upgrade = u;
	}
	set_answer(r, 101, resp);
}

void httpd_upgrade_on_abort(struct httpd_upgrade *u, void (*fn)(void *arg), void *arg)
{
	u->abort = fn;
	u->abort_arg = arg;
}

void httpd_upgrade_close(struct httpd_upgrade *u)
{
	struct httpd *h = u->h;

	if (u->prev)
		u->prev->next = u->next;
	else
		h->upgrades = u->next;
	if (u->next)
		u->next->prev = u->prev;
	MHD_upgrade_action(u->urh, MHD_UPGRADE_ACTION_CLOSE);
	free(u);
	kick(h);
}

/* The file of r's answer no longer holds the bytes announced? Then end the
 * answer: shut the client socket down, MHD sees the hang-up on its next
 * run and closes the connection (the client gets a short body). */
static void file_cb(evutil_socket_t unused, short what, void *arg)
{
	struct httpd_req *r = arg;
	struct stat st;
	int cfd;

	if (fstat(r->file_fd, &st) < 0 || (uint64_t)st.st_size >= r->file_end)
		return;
	log_warn("%s %s [%s]: the file shrank to %lld bytes, below the %llu announced: "
		 "ending the answer", r->method, r->path, httpd_request_id(r),
		 (long long)st.st_size, (unsigned long long)r->file_end);
	event_del(r->file_ev);
	cfd = httpd_client_fd(r);
	if (cfd >= 0)
		shutdown(cfd, SHUT_RDWR);
}

/* MHD sends a file answer with sendfile. When the file turns out shorter
 * than the Content-Length sent (truncated meanwhile), sendfile returns 0,
 * and MHD waits for the socket to become writable again: it already is, no
 * new event comes, and the answer would hang until the idle timeout. So
 * watch the file's size while the answer lives (fd stays MHD's). */
static void watch_file(struct httpd_req *r, int fd, uint64_t end)
{
	static const struct timeval every = { 0, FILE_CHECK_MS * 1000 };

	r->file_fd = fd;
	r->file_end = end;
	r->file_ev = event_new(r->h->base, -1, EV_PERSIST, file_cb, r);
	if (!r->file_ev || event_add(r->file_ev, &every) < 0)
		log_warn("%s %s: cannot watch the file of the answer", r->method, r->path);
}

void httpd_reply_fd(struct httpd_req *r, int status, const char *content_type, int fd,
		    uint64_t offset, uint64_t len)
{
	struct MHD_Response *resp;

	/* MHD owns fd from here on (also when creating the response fails). */
	resp = MHD_create_response_from_fd_at_offset64(len, fd, offset);
	if (!resp)
		close(fd);
	else if (content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	set_answer(r, status, resp);
	if (resp && r->resp == resp && len > 0)
		watch_file(r, fd, offset + len);
}

void httpd_body_sink(struct httpd_req *r, httpd_body_fn fn, void *arg)
{
	r->sink = fn;
	r->sink_arg = arg;
}

void httpd_body_resume(struct httpd_req *r)
{
	if (r->body_paused && r->feed) {
		r->body_paused = 0;
		feed_step(r);
	} else if (r->body_paused) {
		resume_req(r);
	}
}

void httpd_stream_wake(struct httpd_req *r)
{
	if (r->read && r->suspended)
		resume_req(r);
}

/* --- MHD callbacks --- */

static void req_free(struct httpd_req *r)
{
	body_drop(r);
	if (r->prev)
		r->prev->next = r->next;
	else
		r->h->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	if (r->peer_ev)
		event_free(r->peer_ev);
	if (r->file_ev)
		event_free(r->file_ev);
	if (r->resp)
		MHD_destroy_response(r->resp);
	for (int i = 0; i < r->nhdr; i++) {
		free(r->hdr_name[i]);
		free(r->hdr_value[i]);
	}
	if (r->slot_free)
		r->slot_free(r->slot_arg);
	if (r->upgrade)
		r->upgrade->fn = NULL;   /* MHD may still call upgrade_cb: it closes the socket */
	buf_release(&r->body);
	free(r->path);
	free(r->raw);
	free(r->tail);
	free(r);
}

static void error_answer(struct httpd_req *r, enum sbx_ecode code, const char *msg)
{
	struct sbx_err e;

	err_set(&e, code, "%s", msg);
	httpd_reply_err(r, &e);
}

/* Route r: the matching route, or an error answer (404, or 405 with Allow
 * naming the methods of the routes whose path matched). */
static void route_req(struct httpd *h, struct httpd_req *r)
{
	int path_matched = 0;
	char allow[96] = "";

	for (size_t i = 0; i < h->nroutes; i++) {
		char params[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
		const char *pat = h->routes[i].pattern;
		size_t plen = strlen(pat), toff = 0;
		int tail = plen >= 3 && strcmp(pat + plen - 2, "*}") == 0;

		/* A route with a tail matches the raw target (up to '?'): the
		 * handler decodes the tail itself, so that %00 or %2F reach it
		 * as written instead of being cut or merged by the decoder. */
		if (tail) {
			auto_free char *raw = r->raw ? strndup(r->raw, strcspn(r->raw, "?")) : NULL;

			if (!raw || httpd_match_tail(pat, raw, params, &toff) < 0)
				continue;
			path_matched = 1;
			if (strcmp(h->routes[i].method, r->method) != 0) {
				route_allow_add(allow, sizeof(allow), h->routes[i].method);
				continue;
			}
			free(r->tail);
			r->tail = strdup(raw + toff);
			if (!r->tail)
				continue;
		} else {
			if (httpd_match(pat, r->path, params) < 0)
				continue;
			path_matched = 1;
			if (strcmp(h->routes[i].method, r->method) != 0) {
				route_allow_add(allow, sizeof(allow), h->routes[i].method);
				continue;
			}
		}
		r->route = &h->routes[i];
		memcpy(r->params, params, sizeof(params));
		return;
	}
	if (path_matched) {
		if (allow[0])
			httpd_add_header(r, "Allow", allow);
		error_answer(r, SBX_E_METHOD_NOT_ALLOWED, "method not allowed");
	} else
		error_answer(r, SBX_E_ROUTE_NOT_FOUND, "no such route");
}

/* Count client connections; log crossing either limit (once each way). */
static void conn_cb(void *cls, struct MHD_Connection *conn, void **socket_ctx,
		    enum MHD_ConnectionNotificationCode what)
{
	struct httpd *h = cls;
	unsigned hard = h->max_conns + HTTPD_RESERVED_CONNS;

	if (what == MHD_CONNECTION_NOTIFY_STARTED) {
		h->nconns++;
		if (!h->at_limit && h->nconns > h->max_conns) {
			h->at_limit = 1;
			log_warn("httpd: connection limit reached (%u open, agent.max_connections = %u): "
				 "data requests get 503 until some close", h->nconns, h->max_conns);
		}
		if (!h->at_hard_limit && h->nconns >= hard) {
			h->at_hard_limit = 1;
			log_warn("httpd: %u connections open, the reserve too: new connections wait "
				 "in the listen backlog", h->nconns);
		}
		return;
	}
	if (h->nconns > 0)
		h->nconns--;
	if (h->at_hard_limit && h->nconns < hard)
		h->at_hard_limit = 0;
	if (h->at_limit && h->nconns <= h->max_conns) {
		h->at_limit = 0;
		log_info("httpd: below the connection limit again (%u open)", h->nconns);
	}
}

/* What the server answers itself, before routing: its health (also at the
 * connection limit), and 503 for a data request past the limit. 1 when r
 * has its answer. */
static int own_answer(struct httpd *h, struct httpd_req *r)
{
	if (strcmp(r->path, HTTPD_HEALTH_PATH) == 0) {
		if (strcmp(r->method, "GET") != 0) {
			httpd_add_header(r, "Allow", "GET");
			error_answer(r, SBX_E_METHOD_NOT_ALLOWED, "method not allowed");
			return 1;
		}
		httpd_reply_json(r, 200, json_pack("{s:s, s:I, s:I}", "status", "ok", "connections",
						   (json_int_t)h->nconns, "maxConnections",
						   (json_int_t)h->max_conns));
		return 1;
	}
	if (h->nconns > h->max_conns && strncmp(r->path, "/agent/", 7) != 0) {
		error_answer(r, SBX_E_NODE_UNAVAILABLE, "the node is at its connection limit, retry");
		return 1;
	}
	return 0;
}

static enum MHD_Result queue_answer(struct httpd_req *r)
{
	struct MHD_Response *resp = r->resp;
	enum MHD_Result ret;

	r->resp = NULL;
	ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* A new request object, linked into h->reqs; raw is the target as sent. */
static struct httpd_req *req_new(struct httpd *h, const char *raw)
{
	struct httpd_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->h = h;
	r->started_ms = util_now_ms();
	r->started_us = metrics_now_us();
	r->raw = strdup(raw ? raw : "");
	buf_init(&r->body, HTTPD_MAX_JSON_BODY);
	r->next = h->reqs;
	if (h->reqs)
		h->reqs->prev = r;
	h->reqs = r;
	return r;
}

/* MHD hands us the request target before it decodes it: keep it. */
static void *uri_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
	return req_new(cls, uri);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct httpd *h = cls;
	struct httpd_req *r = *con_cls;

	if (!r) {
		r = req_new(h, url);
		if (!r)
			return MHD_NO;
		*con_cls = r;
	}
	if (!r->headers_done) {
		const char *secret, *clen;

		r->headers_done = 1;
		r->conn = conn;
		r->path = strdup(url);
		snprintf(r->method, sizeof(r->method), "%s", method);
		if (!r->path || !r->raw)
			return MHD_NO;
		secret = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Sbx-Node-Secret");
		if (!h->open && (!secret || !httpd_secret_equal(secret, h->secret))) {
			error_answer(r, SBX_E_UNAUTHORIZED, "missing or wrong node secret");
			return queue_answer(r);
		}
		clen = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		if (!h->open && own_answer(h, r)) {
			/* A body still to come is read and dropped first (see the
			 * 413 below for why). */
			if ((clen && strcmp(clen, "0") != 0) ||
			    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding")) {
				r->too_large = 1;
				return MHD_YES;
			}
			return queue_answer(r);
		}
		route_req(h, r);
		if (!r->replied && r->route && (r->route->flags & HTTPD_ROUTE_STREAM_BODY)) {
			/* Streamed body: the handler runs now and takes the body
			 * through its sink as it arrives. */
			r->dispatched = 1;
			r->route->fn(r);
			if (r->resp)
				return queue_answer(r);
			if (!r->sink && !r->deferred) {
				struct sbx_err e;
				err_set(&e, SBX_E_INTERNAL, "handler of %s %s gave no answer",
					r->method, r->path);
				httpd_reply_err(r, &e);
				return queue_answer(r);
			}
			return MHD_YES;
		}
		if (!r->replied && r->route && (r->route->flags & HTTPD_ROUTE_BIG_BODY))
			r->body.max = HTTPD_MAX_BIG_BODY;
		if (!r->replied && clen) {
			int64_t n;
			/* Too large: drop the body as it arrives and answer 413 once
			 * it is in. Answering now would make MHD close the connection
			 * while the proxy in front still sends the body: nginx then
			 * sees a reset instead of our answer (a 502, or its own HTML
			 * 413) depending on who wins the race. */
			if (util_parse_i64(clen, 0, INT64_MAX, &n) == 0 && (uint64_t)n > r->body.max)
				r->too_large = 1;
		}
		if (r->replied)
			return queue_answer(r);
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		if (r->sink) {
			/* After a refusal (or an answer) the rest is read and dropped:
			 * MHD can only queue the answer once the body is in. */
			int rc = 0;

			if (!r->sink_done && !r->replied)
				rc = r->sink(r->sink_arg, upload_data, *upload_data_size);
			if (rc < 0)
				r->sink_done = 1;
			if (rc == HTTPD_BODY_PAUSE && !r->replied) {
				*upload_data_size = 0;
				suspend_req(r);
				r->body_paused = 1;
				return MHD_YES;
			}
		} else if (!r->too_large) {
			body_add(r, upload_data, *upload_data_size);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->sink && !r->sink_done) {
		r->sink_done = 1;
		if (!r->replied)
			r->sink(r->sink_arg, NULL, 0);
		if (r->resp)
			return queue_answer(r);
		if (!r->replied && !r->deferred) {
			struct sbx_err e;
			err_set(&e, SBX_E_INTERNAL, "handler of %s %s gave no answer", r->method, r->path);
			httpd_reply_err(r, &e);
			return queue_answer(r);
		}
	}
	if (r->resp)
		return queue_answer(r);
	if (r->replied)
		return MHD_YES;
	if (!r->dispatched) {
		r->dispatched = 1;
		if (r->too_large && !(r->route->flags & HTTPD_ROUTE_BIG_BODY)) {
			error_answer(r, SBX_E_PAYLOAD_TOO_LARGE, "request body larger than 1 MiB");
			return queue_answer(r);
		}
		if (r->too_large)
			body_drop(r);
		r->route->fn(r);
		if (r->resp)
			return queue_answer(r);
		if (!r->deferred) {
			struct sbx_err e;
			err_set(&e, SBX_E_INTERNAL, "handler of %s %s gave no answer", r->method, r->path);
			httpd_reply_err(r, &e);
			return queue_answer(r);
		}
	}
	suspend_req(r);
	return MHD_YES;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct httpd_req *r = *con_cls;
	int failed = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;

	if (!r)
		return;
	*con_cls = NULL;
	log_info("%s %s %d%s %lldms [%s]", r->method, r->path ? r->path : "?", r->status,
		 failed ? " (aborted)" : "", (long long)(util_now_ms() - r->started_ms),
		 httpd_request_id(r));
	if (r->h->observe)
		r->h->observe(r->route, r->status, (double)(metrics_now_us() - r->started_us) / 1e6);
	if (r->close_fn) {
		httpd_close_fn fn = r->close_fn;
		r->close_fn = NULL;
		fn(r->close_arg, failed);
	}
	req_free(r);
}

__attribute__((format(printf, 2, 0)))
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	log_warn("httpd: %s", line);
}

/* --- the loop glue --- */

/* Run MHD once and re-arm the timer from MHD_get_timeout. */
static void httpd_run(struct httpd *h)
{
	MHD_UNSIGNED_LONG_LONG to;

	h->rerun = 0;
	MHD_run(h->mhd);
	event_del(h->timer_ev);
	if (h->rerun) {
		/* kick() from inside MHD_run: the event_del above undid it. */
		event_active(h->timer_ev, EV_TIMEOUT, 1);
	} else if (MHD_get_timeout(h->mhd, &to) == MHD_YES) {
		struct timeval tv = { (time_t)(to / 1000), (suseconds_t)((to % 1000) * 1000) };
		event_add(h->timer_ev, &tv);
	}
}

static void mhd_io_cb(evutil_socket_t fd, short what, void *arg)
{
	httpd_run(arg);
}

struct httpd *httpd_new(struct event_base *base, const char *addr, const char *secret,
			const struct httpd_route *routes, size_t nroutes, void *ctx,
			unsigned max_conns, struct sbx_err *e)
{
	struct httpd *h;
	const union MHD_DaemonInfo *info;
	int lfd;

	if (secret && (strlen(secret) == 0 || strlen(secret) >= sizeof(h->secret))) {
		err_set(e, SBX_E_VALIDATION, "cluster.secret must be set (1-255 bytes)");
		return NULL;
	}
	lfd = tcplisten_open(addr, 1024, e);
	if (lfd < 0)
		return NULL;
	h = calloc(1, sizeof(*h));
	if (!h) {
		close(lfd);
		err_sys(e, ENOMEM, "httpd");
		return NULL;
	}
	h->base = base;
	h->routes = routes;
	h->nroutes = nroutes;
	h->ctx = ctx;
	h->max_conns = max_conns;
	h->open = !secret;
	if (secret)
		memcpy(h->secret, secret, strlen(secret) + 1);
	h->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG, 0,
				  NULL, NULL, access_cb, h,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, h,
				  MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lfd,
				  MHD_OPTION_CONNECTION_LIMIT, max_conns + HTTPD_RESERVED_CONNS,
				  MHD_OPTION_NOTIFY_CONNECTION, conn_cb, h,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTPD_CONN_TIMEOUT_S,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
				  MHD_OPTION_NOTIFY_COMPLETED, completed_cb, h,
				  MHD_OPTION_URI_LOG_CALLBACK, uri_cb, h,
				  /* The agent ignores SIGPIPE; without saying so, MHD
				   * never uses sendfile for file answers. */
				  MHD_OPTION_SIGPIPE_HANDLED_BY_APP, (int)1,
				  MHD_OPTION_END);
	if (!h->mhd) {
		close(lfd);
		free(h);
		err_set(e, SBX_E_INTERNAL, "cannot start the HTTP server on '%s'", addr);
		return NULL;
	}
	info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	h->timer_ev = evtimer_new(base, mhd_io_cb, h);
	h->epoll_ev = info ? event_new(base, info->epoll_fd, EV_READ | EV_PERSIST, mhd_io_cb, h) : NULL;
	if (!h->timer_ev || !h->epoll_ev || event_add(h->epoll_ev, NULL) < 0) {
		err_set(e, SBX_E_INTERNAL, "cannot drive the HTTP server from the event loop");
		httpd_free(h);
		return NULL;
	}
	kick(h);
	return h;
}

void httpd_observe(struct httpd *h, httpd_observe_fn fn)
{
	h->observe = fn;
}

void httpd_free(struct httpd *h)
{
	if (!h)
		return;
	h->stopping = 1;
	/* Upgraded connections end first (MHD cannot stop with them open). */
	while (h->upgrades) {
		struct httpd_upgrade *u = h->upgrades;

		if (u->abort)
			u->abort(u->abort_arg);
		if (h->upgrades == u)
			httpd_upgrade_close(u);
	}
	if (h->mhd) {
		/* MHD refuses to stop with suspended connections: resume them all;
		 * stream readers then end with an error. */
		for (struct httpd_req *r = h->reqs; r; r = r->next) {
			if (!r->replied) {
				r->replied = 1;
				r->status = 503;
				r->resp = MHD_create_response_from_buffer(0, (void *)"",
									  MHD_RESPMEM_PERSISTENT);
			}
			if (r->suspended) {
				if (r->peer_ev)
					event_del(r->peer_ev);
				r->suspended = 0;
				MHD_resume_connection(r->conn);
			}
		}
		MHD_run(h->mhd);
		MHD_stop_daemon(h->mhd);
	}
	while (h->reqs)   /* requests MHD never reported complete */
		req_free(h->reqs);
	if (h->epoll_ev)
		event_free(h->epoll_ev);
	if (h->timer_ev)
		event_free(h->timer_ev);
	free(h);
}
