#include "agent_events.h"
#include "buf.h"
#include "codec.h"
#include "evfilter.h"
#include "ids.h"
#include "log.h"
#include "redisurl.h"
#include "registry.h"
#include "rkeys.h"
#include "util.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Past this much unsent output the stream stops reading Redis until the
 * client has taken it (a slow client never makes the agent buffer more). */
#define OUT_HIGH (256 * 1024)
#define OUT_MAX (4 * 1024 * 1024)

struct ev_stream {
	struct httpd_req *r;            /* NULL once the request is over */
	redisAsyncContext *ac;          /* NULL once gone */
	struct buf out;
	size_t off;                     /* bytes of out already sent */
	struct evfilter f;
	char scope[64];
	char last[EVFILTER_ID_MAX];     /* stream id to read after */
	int reading;                    /* a command is in flight */
	int want_read;                  /* read again once out drained */
	int ended;                      /* nothing more: end after out */
	int64_t sent_ms;                /* when bytes were last queued (monotonic) */
	int resumed;                    /* from the client's Last-Event-ID */
};

static int streams_open;

int agent_events_open(void)
{
	return streams_open;
}

static void stream_end(struct ev_stream *s, const char *why)
{
	json_t *o;
	char *text;

	if (s->ended)
		return;
	s->ended = 1;
	o = json_pack("{s:{s:s,s:s,s:{}}}", "error", "code", "REDIS_UNAVAILABLE", "message", why,
		      "details");
	text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (text)
		(void)buf_printf(&s->out, "event: error\ndata: %s\n\n", text);
	free(text);
	json_decref(o);
	if (s->r)
		httpd_stream_wake(s->r);
}

/* The entry [id, [field, value, …]] as one SSE event when it passes the
 * stream's scope and filters; its id becomes the stream's last either way. */
static void render_entry(struct ev_stream *s, const redisReply *entry)
{
	const redisReply *id, *kv;
	const char *type = NULL, *tenant = NULL, *sid = NULL, *node = NULL;
	json_t *o;
	char *text;

	if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2)
		return;
	id = entry->element[0];
	kv = entry->element[1];
	if (id->type != REDIS_REPLY_STRING || !evfilter_id_valid(id->str))
		return;
	memcpy(s->last, id->str, strlen(id->str) + 1);
	if (kv->type != REDIS_REPLY_ARRAY)
		return;
	o = json_object();
	if (!o)
		return;
	for (size_t i = 0; i + 1 < kv->elements; i += 2) {
		const redisReply *k = kv->element[i], *v = kv->element[i + 1];

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
		    !codec_utf8_valid(k->str, k->len) || !codec_utf8_valid(v->str, v->len))
			continue;
		json_object_set_new(o, k->str, json_stringn(v->str, v->len));
	}
	type = json_string_value(json_object_get(o, "type"));
	tenant = json_string_value(json_object_get(o, "tenant"));
	sid = json_string_value(json_object_get(o, "id"));
	node = json_string_value(json_object_get(o, "node"));
	if (evfilter_match(&s->f, s->scope, type, tenant, sid, node)) {
		json_object_set_new(o, "eventId", json_string(id->str));
		text = json_dumps(o, JSON_COMPACT);
		/* The SSE event name is the type when it is a plain token. */
		if (text && buf_printf(&s->out, "id: %s\nevent: %s\ndata: %s\n\n", id->str,
				       type && ids_valid_name(type) ? type : "message", text) < 0)
			stream_end(s, "the client reads too slowly");
		free(text);
	}
	json_decref(o);
}

static void read_more(struct ev_stream *s);

static void xread_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct ev_stream *s = privdata;
	const redisReply *rep = reply;

	s->reading = 0;
	if (!s->r || s->ended)
		return;
	if (!rep || rep->type == REDIS_REPLY_ERROR) {
		if (rep)
			log_warn("events: redis refused XREAD: %.200s", rep->str);
		stream_end(s, "the event stream lost redis; reconnect with Last-Event-ID");
		return;
	}
	if (rep->type == REDIS_REPLY_NIL) {
		s->sent_ms = 0;   /* BLOCK timed out: the stream is idle */
	} else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
		   rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2 &&
		   rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
		const redisReply *entries = rep->element[0]->element[1];

		for (size_t i = 0; i < entries->elements && !s->ended; i++)
			render_entry(s, entries->element[i]);
	}
	/* Idle, or only entries the filters drop: a comment keeps nginx and
	 * the client from taking the stream for dead. */
	if (s->out.len > s->off)
		s->sent_ms = util_now_ms();
	else if (util_now_ms() - s->sent_ms >= AGENT_EVENTS_KEEPALIVE_MS &&
		 buf_adds(&s->out, ": keepalive\n\n") == 0)
		s->sent_ms = util_now_ms();
	if (s->out.len - s->off < OUT_HIGH)
		read_more(s);
	else
		s->want_read = 1;
	httpd_stream_wake(s->r);
}

/* The first answer of a stream. A new stream asked for the newest entry
 * (XREVRANGE … COUNT 1) and starts after it. A resumed one asked for the
 * client's Last-Event-ID entry (XRANGE id id): trimming (MAXLEN) drops the
 * oldest entries first, so while it is there everything after it is too;
 * when it is gone (trimmed, or Redis lost data), entries after it may be
 * lost, and a `gap` event says so before the rest. */
static void start_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct ev_stream *s = privdata;
	const redisReply *rep = reply, *newest;

	s->reading = 0;
	if (!s->r || s->ended)
		return;
	if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		stream_end(s, "the event stream cannot reach redis; reconnect");
		return;
	}
	if (s->resumed) {
		if (rep->elements == 0)
			(void)buf_printf(&s->out, "event: gap\ndata: {\"after\":\"%s\"}\n\n", s->last);
	} else {
		newest = rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
				 rep->element[0]->elements == 2 ? rep->element[0]->element[0] : NULL;
		if (newest && newest->type == REDIS_REPLY_STRING && evfilter_id_valid(newest->str))
			memcpy(s->last, newest->str, strlen(newest->str) + 1);
		else
			memcpy(s->last, "0-0", 4);
	}
	read_more(s);
	httpd_stream_wake(s->r);
}

static void read_more(struct ev_stream *s)
{
	s->want_read = 0;
	if (!s->ac || s->reading || s->ended)
		return;
	if (redisAsyncCommand(s->ac, xread_cb, s, "XREAD COUNT %d BLOCK %d STREAMS %s %s",
			      AGENT_EVENTS_BATCH, AGENT_EVENTS_KEEPALIVE_MS, RKEYS_EVENTS,
			      s->last) != REDIS_OK) {
		stream_end(s, "the event stream lost redis; reconnect with Last-Event-ID");
		return;
	}
	s->reading = 1;
}

static ssize_t stream_read(void *arg, char *dst, size_t max)
{
	struct ev_stream *s = arg;
	size_t avail = s->out.len - s->off, n = avail < max ? avail : max;

	if (n) {
		memcpy(dst, s->out.data + s->off, n);
		s->off += n;
		if (s->off == s->out.len) {
			buf_reset(&s->out);
			s->off = 0;
		}
		if (s->want_read && s->out.len - s->off < OUT_HIGH)
			read_more(s);
		return (ssize_t)n;
	}
	return s->ended ? -1 : 0;
}

static void connect_cb(const redisAsyncContext *ac, int status)
{
	struct ev_stream *s = ac->data;

	if (!s || status == REDIS_OK)
		return;
	s->ac = NULL;   /* hiredis frees it after this callback */
	log_warn("events: cannot connect to redis: %s", ac->errstr);
	stream_end(s, "the event stream cannot reach redis; reconnect");
}

static void disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct ev_stream *s = ac->data;

	if (!s)
		return;
	s->ac = NULL;
	stream_end(s, "the event stream lost redis; reconnect with Last-Event-ID");
}

static void stream_close(void *arg, int failed)
{
	struct ev_stream *s = arg;
	redisAsyncContext *ac = s->ac;

	s->r = NULL;
	s->ac = NULL;
	streams_open--;
	if (ac) {
		ac->data = NULL;
		redisAsyncFree(ac);   /* pending callbacks run with no reply and see s->r NULL */
	}
	buf_release(&s->out);
	free(s);
}

/* A new Redis connection for s on base; 0 or -1 with e. */
static int stream_connect(struct ev_stream *s, const struct agent *a, struct sbx_err *e)
{
	const struct redisurl *known = a->reg ? registry_redis_addr(a->reg) : NULL;
	struct event_base *base = a->base;
	struct redisurl url;
	redisAsyncContext *ac;

	/* The primary the registry reached (with redis.sentinels, redis.url
	 * is not where Redis is). */
	if (known)
		url = *known;
	else if (redisurl_parse(a->conf->redis.url, &url, e) < 0)
		return -1;
	ac = registry_async_connect(base, &url, s, connect_cb, disconnect_cb, e);
	if (!ac)
		return e->code == SBX_E_REDIS_UNAVAILABLE
			       ? err_set(e, SBX_E_REDIS_UNAVAILABLE, "the event stream cannot reach redis")
			       : err_set(e, SBX_E_INTERNAL,
					 "cannot attach the event stream's redis connection");
	s->ac = ac;
	return 0;
}

/* Scope, filters and start of c into s; 0 or -1 with e (400). */
static int stream_parse(const struct agent_call *c, struct ev_stream *s, struct sbx_err *e)
{
	static const char *const names[] = { "tenant", "sandbox", "node", "type" };
	const char *scope = agent_call_header(c, "X-Sbx-Tenant");
	const char *last = agent_call_header(c, "Last-Event-ID");

	if (!scope || (strcmp(scope, EVFILTER_SCOPE_ALL) != 0 && !ids_valid_tenant(scope)))
		return err_set(e, SBX_E_VALIDATION, "the event stream needs its scope (X-Sbx-Tenant)");
	memcpy(s->scope, scope, strlen(scope) + 1);
	evfilter_init(&s->f);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const char *v = agent_call_query(c, names[i]);

		if (v && evfilter_add(&s->f, names[i], v, e) < 0)
			return -1;
	}
	if (last && *last) {
		if (!evfilter_id_valid(last))
			return err_set(e, SBX_E_VALIDATION,
				       "Last-Event-ID must be a stream id '<ms>-<seq>' of a previous event");
		memcpy(s->last, last, strlen(last) + 1);
	}
	return 0;
}

int agent_events_get(struct agent_call *c, struct sbx_err *e)
{
	const struct sbx_conf *conf = c->a->conf;
	struct ev_stream *s;

	if (streams_open >= conf->agent.event_streams)
		return err_set(e, SBX_E_NO_CAPACITY, "this node serves its maximum of %lld event streams",
			       (long long)conf->agent.event_streams);
	s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	buf_init(&s->out, OUT_MAX);
	if (stream_parse(c, s, e) < 0 || stream_connect(s, c->a, e) < 0) {
		buf_release(&s->out);
		free(s);
		return -1;
	}
	/* Resumed: first whether the stream still holds the client's entry;
	 * else from the newest entry. */
	s->resumed = s->last[0] != '\0';
	if ((s->resumed ? redisAsyncCommand(s->ac, start_cb, s, "XRANGE %s %s %s", RKEYS_EVENTS,
					    s->last, s->last)
			: redisAsyncCommand(s->ac, start_cb, s, "XREVRANGE %s + - COUNT 1",
					    RKEYS_EVENTS)) == REDIS_OK)
		s->reading = 1;
	else
		stream_end(s, "the event stream cannot reach redis; reconnect");
	/* The client knows the stream is open before the first event. */
	(void)buf_adds(&s->out, "retry: 1000\n: events\n\n");
	s->r = c->r;
	s->sent_ms = util_now_ms();
	streams_open++;
	httpd_on_close(c->r, stream_close, s);
	(void)httpd_add_header(c->r, "Cache-Control", "no-store");
	httpd_reply_stream(c->r, 200, "text/event-stream", stream_read, s);
	return 0;
}
