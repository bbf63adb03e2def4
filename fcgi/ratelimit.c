#include "ratelimit.h"
#include "scripts.h"
#include "store.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#define RATELIMIT_MAX 1000000000000LL  /* far above any value the script gives */

/* An integer element of a script reply, or -1. */
static int64_t int_at(const redisReply *r, size_t i)
{
	return r->element[i]->type == REDIS_REPLY_INTEGER ? r->element[i]->integer : -1;
}

int ratelimit_auth_check(const struct sbx_conf *c, const char *name, const char *tenant,
			 int admin, int create, struct ratelimit_auth *out, struct sbx_err *e)
{
	char rps[24], burst[24], cpm[24];
	auto_reply redisReply *r = NULL;
	const redisReply *t;
	int64_t status;

	memset(out, 0, sizeof(*out));
	util_xsnprintf(rps, sizeof(rps), "%lld", (long long)c->api.requests_per_second);
	util_xsnprintf(burst, sizeof(burst), "%lld", (long long)c->api.requests_burst);
	util_xsnprintf(cpm, sizeof(cpm), "%lld", (long long)c->api.creates_per_minute);
	/* Counting a call twice is harmless: after a lost connection the
	 * check is resent on a fresh one like the key lookup it replaces. */
	store_next_batch_resendable(1);
	r = scripts_run(RSCRIPT_AUTH_RATE, 1, (const char *[]){ name }, 6,
			(const char *[]){ tenant ? tenant : "", admin ? "1" : "0", rps, burst, cpm,
					  create ? "1" : "0" }, e);
	store_next_batch_resendable(0);
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 8 ||
	    r->element[1]->type != REDIS_REPLY_STRING || r->element[2]->type != REDIS_REPLY_STRING)
		return err_set(e, SBX_E_INTERNAL, "auth_rate: unexpected reply");
	for (size_t i = 3; i < 8; i++)
		if (int_at(r, i) < 0 || int_at(r, i) > RATELIMIT_MAX)
			return err_set(e, SBX_E_INTERNAL, "auth_rate: unexpected reply");
	status = int_at(r, 0);
	if (r->element[0]->type != REDIS_REPLY_INTEGER || status < -1 || status > 1)
		return err_set(e, SBX_E_INTERNAL, "auth_rate: unexpected reply");
	if (status == 0)
		return 0;
	t = r->element[1];
	if (t->len == 0 || t->len >= sizeof(out->tenant))
		return err_set(e, SBX_E_INTERNAL, "auth_rate: unexpected tenant");
	out->found = 1;
	memcpy(out->tenant, t->str, t->len + 1);
	out->admin = strcmp(r->element[2]->str, "1") == 0;
	out->limited = int_at(r, 7) != 0;
	if (int_at(r, 3) == 0)
		return 0;
	out->rate.set = 1;
	out->rate.limit = int_at(r, 3);
	out->rate.remaining = int_at(r, 4);
	/* The script gives milliseconds; headers speak whole seconds, rounded up. */
	out->rate.reset_s = (int_at(r, 5) + 999) / 1000;
	out->rate.retry_s = status < 0 ? (int_at(r, 6) + 999) / 1000 : 0;
	if (status < 0 && out->rate.retry_s < 1)
		out->rate.retry_s = 1;
	return 0;
}

int ratelimit_format_headers(const struct ratelimit_state *s, char *out, size_t outsz)
{
	int n;

	if (!s->set) {
		if (outsz)
			out[0] = '\0';
		return 0;
	}
	n = snprintf(out, outsz, "RateLimit-Limit: %lld\r\nRateLimit-Remaining: %lld\r\n"
		     "RateLimit-Reset: %lld\r\n", (long long)s->limit, (long long)s->remaining,
		     (long long)s->reset_s);
	if (n < 0 || (size_t)n >= outsz)
		return -1;
	if (s->retry_s > 0) {
		int m = snprintf(out + n, outsz - (size_t)n, "Retry-After: %lld\r\n",
				 (long long)s->retry_s);
		if (m < 0 || (size_t)m >= outsz - (size_t)n)
			return -1;
	}
	return 0;
}

int ratelimit_relay_format(const struct ratelimit_state *s, char *out, size_t outsz)
{
	int n = snprintf(out, outsz, "%lld %lld %lld %lld", (long long)s->limit,
			 (long long)s->remaining, (long long)s->reset_s, (long long)s->retry_s);

	return n < 0 || (size_t)n >= outsz ? -1 : 0;
}

int ratelimit_relay_parse(const char *v, struct ratelimit_state *s)
{
	int64_t *dst[] = { &s->limit, &s->remaining, &s->reset_s, &s->retry_s };
	const char *p = v;

	memset(s, 0, sizeof(*s));
	if (!v)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(dst); i++) {
		char num[24];
		size_t len = strcspn(p, " ");

		if (len == 0 || len >= sizeof(num) || (i + 1 < ARRAY_SIZE(dst)) != (p[len] == ' '))
			return -1;
		memcpy(num, p, len);
		num[len] = '\0';
		if (util_parse_i64(num, 0, RATELIMIT_MAX, dst[i]) < 0)
			return -1;
		p += len + (p[len] == ' ');
	}
	if (s->limit < 1) {
		memset(s, 0, sizeof(*s));
		return -1;
	}
	s->set = 1;
	return 0;
}
