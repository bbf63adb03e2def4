#include "sentinel.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

int sentinel_conf_init(const struct sbx_conf *c, struct sentinel_conf *out, struct sbx_err *e)
{
	memset(out, 0, sizeof(*out));
	if (redisurl_parse_list(c->redis.sentinels, out->s, SENTINEL_MAX, &out->n, e) < 0)
		return -1;
	if (out->n == 0)
		return redisurl_parse(c->redis.url, &out->direct, e);
	if (!c->redis.master_name[0])
		return err_set(e, SBX_E_VALIDATION, "redis.master_name is required with redis.sentinels");
	for (const char *p = c->redis.master_name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '_' || *p == '-'))
			return err_set(e, SBX_E_VALIDATION,
				       "redis.master_name must be of [A-Za-z0-9._-]");
	snprintf(out->master, sizeof(out->master), "%s", c->redis.master_name);
	return 0;
}

/* host and port strings into a TCP address; 0 or -1. */
static int addr_of(const char *host, size_t hlen, const char *port, struct redisurl *out)
{
	char url[300];
	struct sbx_err e;
	int n;

	if (hlen == 0 || hlen > 255 || memchr(host, '\0', hlen))
		return -1;
	n = memchr(host, ':', hlen) ? snprintf(url, sizeof(url), "redis://[%.*s]:%s", (int)hlen, host, port)
				    : snprintf(url, sizeof(url), "redis://%.*s:%s", (int)hlen, host, port);
	if (n < 0 || (size_t)n >= sizeof(url))
		return -1;
	return redisurl_parse(url, out, &e);
}

int sentinel_parse_master(const redisReply *r, struct redisurl *out)
{
	char port[8];

	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_NIL)
		return 0;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[1]->len == 0 || r->element[1]->len >= sizeof(port))
		return -1;
	memcpy(port, r->element[1]->str, r->element[1]->len + 1);
	return addr_of(r->element[0]->str, r->element[0]->len, port, out) < 0 ? -1 : 1;
}

int sentinel_parse_role(const redisReply *r)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    r->element[0]->type != REDIS_REPLY_STRING)
		return -1;
	return strcmp(r->element[0]->str, "master") == 0;
}

int sentinel_parse_switch(const redisReply *r, const char *master, struct redisurl *out)
{
	const char *f[5], *msg;
	size_t l[5], mlen = strlen(master);
	char port[8];

	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		return -1;
	for (size_t i = 0; i < 3; i++)
		if (r->element[i]->type != REDIS_REPLY_STRING)
			return -1;
	if (strcmp(r->element[0]->str, "message") != 0 ||
	    strcmp(r->element[1]->str, "+switch-master") != 0)
		return 0;
	msg = r->element[2]->str;
	for (int i = 0; i < 5; i++) {
		l[i] = strcspn(msg, " ");
		if (l[i] == 0)
			return -1;
		f[i] = msg;
		msg += l[i];
		if (i < 4 && *msg++ != ' ')
			return -1;
	}
	if (*msg)
		return -1;
	if (l[0] != mlen || memcmp(f[0], master, mlen) != 0)
		return 0;
	if (l[4] >= sizeof(port))
		return -1;
	memcpy(port, f[4], l[4]);
	port[l[4]] = '\0';
	return addr_of(f[3], l[3], port, out) < 0 ? -1 : 1;
}

int sentinel_reply_demoted(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
}

const char *sentinel_addr_str(const struct redisurl *u, char *out, size_t outsz)
{
	if (u->is_unix)
		snprintf(out, outsz, "unix:%s", u->path);
	else if (strchr(u->host, ':'))
		snprintf(out, outsz, "[%s]:%d", u->host, u->port);
	else
		snprintf(out, outsz, "%s:%d", u->host, u->port);
	return out;
}

static struct timeval tv_ms(int64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)((ms % 1000) * 1000) };
	return tv;
}

/* A blocking connection to u with the timeouts, CLOEXEC; NULL with e. */
static redisContext *open_ctx(const struct redisurl *u, int64_t connect_ms, int64_t command_ms,
			      struct sbx_err *e)
{
	redisContext *c;
	char a[300];

	c = u->is_unix ? redisConnectUnixWithTimeout(u->path, tv_ms(connect_ms))
		       : redisConnectWithTimeout(u->host, u->port, tv_ms(connect_ms));
	if (!c) {
		err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: cannot allocate a context");
		return NULL;
	}
	if (c->err) {
		err_set(e, SBX_E_REDIS_UNAVAILABLE, "cannot connect to redis at %s: %s",
			sentinel_addr_str(u, a, sizeof(a)), c->errstr);
		redisFree(c);
		return NULL;
	}
	/* hiredis sets no CLOEXEC: sandbox processes must never inherit it. */
	if (util_set_cloexec(c->fd) < 0 || redisSetTimeout(c, tv_ms(command_ms)) != REDIS_OK) {
		err_set(e, SBX_E_REDIS_UNAVAILABLE, "cannot configure the redis socket");
		redisFree(c);
		return NULL;
	}
	return c;
}

int sentinel_resolve(const struct sentinel_conf *sc, int64_t timeout_ms, int *next,
		     struct redisurl *out, struct sbx_err *e)
{
	char a[300];

	err_set(e, SBX_E_REDIS_UNAVAILABLE, "no sentinel is configured");
	for (int k = 0; k < sc->n; k++) {
		int i = (*next + k) % sc->n, rc;
		redisContext *c = open_ctx(&sc->s[i], timeout_ms, timeout_ms, e);
		redisReply *r;

		if (!c)
			continue;
		r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", sc->master);
		rc = sentinel_parse_master(r, out);
		if (rc <= 0)
			err_set(e, SBX_E_REDIS_UNAVAILABLE, "sentinel %s %s master '%s'",
				sentinel_addr_str(&sc->s[i], a, sizeof(a)),
				!r ? "did not answer for" : rc == 0 ? "does not know" : "gave no address of",
				sc->master);
		if (r)
			freeReplyObject(r);
		redisFree(c);
		if (rc > 0) {
			*next = i;
			return 0;
		}
	}
	*next = sc->n ? (*next + 1) % sc->n : 0;
	return -1;
}

redisContext *sentinel_connect(const struct sentinel_conf *sc, int64_t connect_ms,
			       int64_t command_ms, int *next, struct redisurl *at,
			       struct sbx_err *e)
{
	struct redisurl addr;
	redisContext *c;
	redisReply *r;
	char a[300];
	int role;

	if (sc->n == 0) {
		if (at)
			*at = sc->direct;
		return open_ctx(&sc->direct, connect_ms, command_ms, e);
	}
	if (sentinel_resolve(sc, connect_ms, next, &addr, e) < 0)
		return NULL;
	c = open_ctx(&addr, connect_ms, command_ms, e);
	if (!c)
		return NULL;
	r = redisCommand(c, "ROLE");
	role = sentinel_parse_role(r);
	if (r)
		freeReplyObject(r);
	if (role != 1) {
		err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis at %s (named by the sentinels) is %s",
			sentinel_addr_str(&addr, a, sizeof(a)),
			!r ? "not answering" : role == 0 ? "not the master (yet)" : "not answering ROLE");
		redisFree(c);
		/* Ask another sentinel next time: this one may be behind. */
		*next = (*next + 1) % sc->n;
		return NULL;
	}
	if (at)
		*at = addr;
	return c;
}
