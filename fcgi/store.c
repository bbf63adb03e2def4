#include "store.h"
#include "apimetrics.h"
#include "buf.h"
#include "log.h"
#include "rerror.h"
#include "sentinel.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define RETRY_AFTER_FAILED_CONNECT_MS 100
/* After Redis let a command time out (paused, overloaded, a host that
 * dropped off the network) this worker answers REDIS_UNAVAILABLE at once for
 * this long instead of blocking every request for command_timeout: a pool
 * of N workers stays able to answer (503 fast, /healthz) while Redis hangs. */
#define RETRY_AFTER_TIMEOUT_MS 1000
/* A connection idle at least this long is checked (one MSG_PEEK recv)
 * before it is used again; a busy one is not (see store.h, "Liveness"). */
#define PROBE_AFTER_IDLE_MS 1000
/* A kept connection checks maxmemory-policy again this often: an operator
 * switching Redis to an evicting policy is noticed within this time, not
 * only at the next connect (one CONFIG GET per worker per interval). */
#define POLICY_RECHECK_MS 5000
/* The largest batch kept for a resend; larger ones are never resent. */
#define BATCH_COPY_MAX 65536
/* The largest command of store_append_argv: far above any body a worker
 * takes (api.max_body_bytes); the bound only keeps a bug finite. */
#define ARGV_CMD_MAX ((size_t)1 << 30)

static struct {
	struct sentinel_conf where;  /* redis.url, or the sentinels (sentinel.h) */
	int next_sentinel;          /* the sentinel asked first */
	int64_t connect_timeout_ms;
	int64_t command_timeout_ms;
	int ready;
	redisContext *ctx;
	int64_t next_try_ms;        /* monotonic: no connect attempt before this */
	size_t pending;             /* appended, not yet collected */
	int64_t last_warn_ms;
	int64_t last_used_ms;       /* monotonic: last reply read (or connect) */
	int64_t policy_checked_ms;  /* monotonic: last maxmemory-policy check */
	int config_warned;          /* CONFIG refused: warned once */
	/* The batch being built, for one resend on a fresh connection. */
	struct buf batch;           /* the formatted commands */
	int batch_readonly;         /* every command is a read (store_readonly_cmd) */
	int batch_resendable;       /* this batch may be sent twice anyway */
	int next_resendable;        /* store_next_batch_resendable() was called */
	int batch_reused;           /* sent on a connection older than the batch */
	struct buf argv_cmd;        /* store_append_argv's command, reused */
} st;

int store_init(const struct sbx_conf *c, struct sbx_err *e)
{
	store_release();
	if (sentinel_conf_init(c, &st.where, e) < 0)
		return -1;
	st.connect_timeout_ms = c->redis.connect_timeout_ms;
	st.command_timeout_ms = c->redis.command_timeout_ms;
	st.next_try_ms = 0;
	buf_init(&st.batch, BATCH_COPY_MAX);
	buf_init(&st.argv_cmd, ARGV_CMD_MAX);
	st.ready = 1;
	return 0;
}

static void drop(void)
{
	if (st.ctx)
		redisFree(st.ctx);
	st.ctx = NULL;
	st.pending = 0;
}

void store_release(void)
{
	drop();
	buf_release(&st.batch);
	buf_release(&st.argv_cmd);
}

/* Does the server keep every key (maxmemory-policy noeviction)? 1 yes,
 * 0 no (e says which policy), -1 transport error. A server that refuses
 * CONFIG (renamed in production) is trusted, with a warning. */
static int policy_ok(redisContext *c, struct sbx_err *e)
{
	redisReply *r = redisCommand(c, "CONFIG GET maxmemory-policy");
	int ok;

	if (!r)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: %s", c->errstr);
	if (r->type == REDIS_REPLY_ERROR) {
		if (!st.config_warned)
			log_warn("redis refuses CONFIG GET (%s): cannot check maxmemory-policy", r->str);
		st.config_warned = 1;
		freeReplyObject(r);
		return 1;
	}
	ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	     r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "noeviction") == 0;
	if (!ok)
		err_set(e, SBX_E_REDIS_UNAVAILABLE,
			"redis runs with maxmemory-policy '%s'; sbx needs 'noeviction'",
			(r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			 r->element[1]->type == REDIS_REPLY_STRING) ? r->element[1]->str : "?");
	freeReplyObject(r);
	return ok;
}

/* Open a connection with the timeouts (to the primary the sentinels name,
 * checked with ROLE, when there are sentinels); NULL with e
 * (REDIS_UNAVAILABLE). */
static redisContext *connect_now(struct sbx_err *e)
{
	return sentinel_connect(&st.where, st.connect_timeout_ms, st.command_timeout_ms,
				&st.next_sentinel, NULL, e);
}

int store_probe(struct sbx_err *e)
{
	redisContext *c;
	int ok;

	if (!st.ready)
		return err_set(e, SBX_E_INTERNAL, "store is not initialised");
	c = connect_now(e);
	if (!c)
		return -1;
	ok = policy_ok(c, e);
	redisFree(c);
	if (ok < 0)
		return -1;
	return ok ? 0 : -2;
}

/* Is an idle connection still open? A server that closed it (restart,
 * client kill, timeout) shows EOF; unread bytes mean it is out of step.
 * Checked before sending, so nothing is ever sent twice. Costs a syscall:
 * done only after PROBE_AFTER_IDLE_MS without use. */
static int conn_usable(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Did the last command on c fail by running into the socket timeout? */
static int timed_out(const redisContext *c)
{
	return c && c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Did the last command on c fail because the server closed or reset the
 * connection (as opposed to a timeout or a protocol error)? err_no: errno
 * right after the failing call. */
static int conn_lost(const redisContext *c, int err_no)
{
	return c && (c->err == REDIS_ERR_EOF ||
		     (c->err == REDIS_ERR_IO && (err_no == ECONNRESET || err_no == EPIPE)));
}

int store_readonly_cmd(const char *cmd, size_t len)
{
	static const char *const reads[] = {
		"GET", "MGET", "HGET", "HMGET", "HGETALL", "HEXISTS", "HLEN", "EXISTS", "TTL",
		"PTTL", "SCARD", "SISMEMBER", "SMEMBERS", "ZCARD", "ZSCORE", "ZRANGE",
		"ZRANGEBYLEX", "ZRANGEBYSCORE", "LRANGE", "LLEN", "XRANGE", "XLEN", "PING",
	};

	for (size_t i = 0; i < ARRAY_SIZE(reads); i++)
		if (strlen(reads[i]) == len && strncasecmp(reads[i], cmd, len) == 0)
			return 1;
	return 0;
}

static void warn_limited(const struct sbx_err *e, int64_t now)
{
	if (now - st.last_warn_ms >= 5000) {
		log_warn("%s", e->msg);
		st.last_warn_ms = now;
	}
}

/* The policy check of a kept connection, every POLICY_RECHECK_MS. 0 (still
 * noeviction, or not due), -1 with e (the connection is dropped; the next
 * connect checks again). */
static int recheck_policy(int64_t now, struct sbx_err *e)
{
	int ok;

	if (now - st.policy_checked_ms < POLICY_RECHECK_MS)
		return 0;
	ok = policy_ok(st.ctx, e);
	if (ok > 0) {
		st.policy_checked_ms = now;
		return 0;
	}
	st.next_try_ms = now + (ok < 0 && timed_out(st.ctx) ? RETRY_AFTER_TIMEOUT_MS
							     : RETRY_AFTER_FAILED_CONNECT_MS);
	drop();
	warn_limited(e, now);
	return -1;
}

void store_next_batch_resendable(int on)
{
	st.next_resendable = on;
}

/* Make sure a connection exists; respects the back-off after a failure.
 * 1 when it opened a new one, 0 when the one it had is kept, -1 with e. */
static int ensure(struct sbx_err *e)
{
	int64_t now = util_now_ms();
	int ok;

	if (st.ctx && (now - st.last_used_ms < PROBE_AFTER_IDLE_MS || conn_usable(st.ctx->fd)))
		return recheck_policy(now, e);
	drop();
	if (!st.ready)
		return err_set(e, SBX_E_INTERNAL, "store is not initialised");
	if (now < st.next_try_ms)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis is unavailable (retrying shortly)");
	st.next_try_ms = now + RETRY_AFTER_FAILED_CONNECT_MS;
	st.ctx = connect_now(e);
	if (!st.ctx)
		goto fail;
	ok = policy_ok(st.ctx, e);
	if (ok <= 0) {
		if (ok < 0 && timed_out(st.ctx))
			st.next_try_ms = now + RETRY_AFTER_TIMEOUT_MS;
		drop();
		goto fail;
	}
	st.next_try_ms = 0;
	st.last_used_ms = now;
	st.policy_checked_ms = now;
	return 1;
fail:
	warn_limited(e, now);
	return -1;
}

static int append_failed(struct sbx_err *e)
{
	err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: %s", st.ctx ? st.ctx->errstr : "no connection");
	drop();
	return -1;
}

/* Start a batch if none is open: connect if needed, reset the copy. */
static int batch_begin(struct sbx_err *e)
{
	int rc;

	if (st.pending)
		return st.ctx ? 0 : err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: batch dropped after an error");
	rc = ensure(e);
	if (rc < 0)
		return -1;
	buf_reset(&st.batch);
	st.batch_readonly = 1;
	st.batch_resendable = st.next_resendable;
	st.next_resendable = 0;
	st.batch_reused = rc == 0;
	return 0;
}

/* Queue one formatted command (len bytes, borrowed), keeping a copy
 * while the batch is read-only. 0 or -1 (batch dropped). */
static int batch_add(struct sbx_err *e, const char *cmd, long long len)
{
	size_t nlen;
	int rc;

	if (len < 0 || !cmd)
		return err_set(e, SBX_E_INTERNAL, "redis: cannot format a command");
	if (st.batch_readonly) {
		/* The command name is the first bulk string: "*N\r\n$L\r\nNAME\r\n". */
		const char *p = strchr(cmd, '$'), *name = p ? strchr(p, '\n') : NULL;
		nlen = name ? strcspn(name + 1, "\r") : 0;
		if (!name || !(st.batch_resendable || store_readonly_cmd(name + 1, nlen)) ||
		    buf_add(&st.batch, cmd, (size_t)len) < 0)
			st.batch_readonly = 0;
	}
	rc = redisAppendFormattedCommand(st.ctx, cmd, (size_t)len);
	if (rc != REDIS_OK)
		return append_failed(e);
	st.pending++;
	return 0;
}

static int append_v(struct sbx_err *e, const char *fmt, va_list ap)
{
	char *cmd = NULL;
	int len, rc;

	if (batch_begin(e) < 0)
		return -1;
	len = redisvFormatCommand(&cmd, fmt, ap);
	rc = batch_add(e, cmd, len);
	free(cmd);
	return rc;
}

int store_append(struct sbx_err *e, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = append_v(e, fmt, ap);
	va_end(ap);
	return rc;
}

/* Add "<mark><n>\r\n" to b: a RESP length line, without printf. */
static int resp_len(struct buf *b, char mark, size_t n)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	tmp[--i] = '\n';
	tmp[--i] = '\r';
	do
		tmp[--i] = (char)('0' + n % 10);
	while ((n /= 10) && i > 1);
	tmp[--i] = mark;
	return buf_add(b, tmp + i, sizeof(tmp) - i);
}

int store_format_argv(struct buf *b, int argc, const char **argv, const size_t *argvlen)
{
	buf_reset(b);
	if (argc < 1 || resp_len(b, '*', (size_t)argc) < 0)
		return -1;
	for (int i = 0; i < argc; i++)
		if (resp_len(b, '$', argvlen[i]) < 0 || buf_add(b, argv[i], argvlen[i]) < 0 ||
		    buf_add(b, "\r\n", 2) < 0)
			return -1;
	return 0;
}

int store_append_argv(struct sbx_err *e, int argc, const char **argv, const size_t *argvlen)
{
	struct buf *b = &st.argv_cmd;

	if (batch_begin(e) < 0)
		return -1;
	if (store_format_argv(b, argc, argv, argvlen) < 0)
		return batch_add(e, NULL, -1);
	return batch_add(e, b->data, (long long)b->len);
}

void store_free_replies(redisReply **replies, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (replies[i])
			freeReplyObject(replies[i]);
		replies[i] = NULL;
	}
}

void store_replyp(redisReply **r)
{
	if (*r)
		freeReplyObject(*r);
}

/* Read n replies from the connection. 0, or -1 with e (replies freed,
 * *lost set when the server had closed or reset the connection). */
static int read_replies(redisReply **replies, size_t n, int *lost, struct sbx_err *e)
{
	*lost = 0;
	for (size_t i = 0; i < n; i++) {
		void *rep = NULL;
		if (redisGetReply(st.ctx, &rep) != REDIS_OK || !rep) {
			int err_no = errno;
			if (timed_out(st.ctx)) {
				err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis did not answer within %lld ms",
					(long long)st.command_timeout_ms);
				st.next_try_ms = util_now_ms() + RETRY_AFTER_TIMEOUT_MS;
			} else {
				*lost = conn_lost(st.ctx, err_no);
				err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: %s",
					st.ctx->errstr[0] ? st.ctx->errstr : "no reply");
			}
			store_free_replies(replies, i);
			return -1;
		}
		replies[i] = rep;
	}
	return 0;
}

static int collect(redisReply **replies, size_t n, unsigned flags, int *kind, struct sbx_err *e);

/* Every round trip of a worker is timed, and its failure counted, here. */
int store_collect(redisReply **replies, size_t n, unsigned flags, struct sbx_err *e)
{
	int64_t started_us = metrics_now_us();
	int kind = METRICS_REDIS_CONNECTION;
	int rc = collect(replies, n, flags, &kind, e);

	apimetrics_redis(started_us, rc == 0 ? METRICS_REDIS_OK : (enum metrics_redis_error)kind);
	return rc;
}

static int collect(redisReply **replies, size_t n, unsigned flags, int *kind, struct sbx_err *e)
{
	size_t i;
	int lost;

	for (i = 0; i < n; i++)
		replies[i] = NULL;
	if (!st.ctx || st.pending != n) {
		drop();
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: %zu replies expected, %zu queued", n,
			       st.pending);
	}
	if (read_replies(replies, n, &lost, e) < 0) {
		/* A kept connection the server had closed while this worker was
		 * busy (no probe then): a read-only batch is sent once more on a
		 * fresh connection. Reads only, so a resend changes nothing. */
		int resend = lost && st.batch_readonly && st.batch_reused && st.batch.len;

		drop();
		if (!resend)
			return -1;
		log_info("redis connection lost (%s); resending %zu read(s) on a new one", e->msg, n);
		if (ensure(e) < 0)
			return -1;
		if (redisAppendFormattedCommand(st.ctx, st.batch.data, st.batch.len) != REDIS_OK) {
			append_failed(e);
			return -1;
		}
		st.pending = n;
		if (read_replies(replies, n, &lost, e) < 0) {
			drop();
			return -1;
		}
	}
	st.pending = 0;
	st.last_used_ms = util_now_ms();
	for (i = 0; i < n; i++) {
		/* A demoted primary (a failover): the next command connects to
		 * the one the sentinels name now. */
		if (sentinel_reply_demoted(replies[i])) {
			log_warn("redis answered %.100s: reconnecting", replies[i]->str);
			drop();
			break;
		}
	}
	if (!(flags & STORE_RAW_ERRORS)) {
		for (i = 0; i < n; i++) {
			if (replies[i]->type == REDIS_REPLY_ERROR) {
				*kind = METRICS_REDIS_REPLY;
				err_set(e, SBX_E_REDIS_UNAVAILABLE, "%s: %.200s",
					rerror_unavailable(replies[i]->str) ? "redis refuses writes"
									    : "redis error",
					replies[i]->str);
				store_free_replies(replies, n);
				return -1;
			}
		}
	}
	return 0;
}

redisReply *store_command(struct sbx_err *e, const char *fmt, ...)
{
	redisReply *r = NULL;
	va_list ap;
	int rc;

	if (st.pending) {
		drop();
		err_set(e, SBX_E_INTERNAL, "store_command with %zu commands queued", st.pending);
		return NULL;
	}
	va_start(ap, fmt);
	rc = append_v(e, fmt, ap);
	va_end(ap);
	if (rc < 0)
		return NULL;
	if (store_collect(&r, 1, 0, e) < 0)
		return NULL;
	return r;
}

const char *store_hash_get(const redisReply *h, const char *field)
{
	if (!h || h->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < h->elements; i += 2) {
		const redisReply *k = h->element[i], *v = h->element[i + 1];
		if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
		    strcmp(k->str, field) == 0)
			return v->str;
	}
	return NULL;
}
