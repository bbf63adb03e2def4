/* recview: the record view rendered from an HMGET reply is, byte for byte,
 * the jansson view (lifecycle_record_json of lifecycle_hash_json). */
#include "unit.h"
#include "jsonv.h"
#include "lifecycle.h"
#include "recview.h"
#include "util.h"

#include <stdlib.h>

/* A hash as field/value pairs; a NULL value is a field the hash lacks. */
struct pair {
	const char *k, *v;
	size_t vlen;   /* 0: strlen(v) */
};

static redisReply *str_reply(const char *s, size_t n)
{
	redisReply *r = calloc(1, sizeof(*r));

	r->type = REDIS_REPLY_STRING;
	r->str = malloc(n + 1);
	memcpy(r->str, s, n);
	r->str[n] = '\0';
	r->len = n;
	return r;
}

static redisReply *array_reply(size_t n)
{
	redisReply *r = calloc(1, sizeof(*r));

	r->type = REDIS_REPLY_ARRAY;
	r->elements = n;
	r->element = calloc(n ? n : 1, sizeof(*r->element));
	return r;
}

static size_t vlen(const struct pair *p)
{
	return p->vlen ? p->vlen : strlen(p->v);
}

/* The HGETALL reply of the hash (pairs with a value, in order). */
static redisReply *hgetall_of(const struct pair *h, size_t n)
{
	size_t m = 0, j = 0;
	redisReply *r;

	for (size_t i = 0; i < n; i++)
		m += h[i].v != NULL;
	r = array_reply(2 * m);
	for (size_t i = 0; i < n; i++) {
		if (!h[i].v)
			continue;
		r->element[j++] = str_reply(h[i].k, strlen(h[i].k));
		r->element[j++] = str_reply(h[i].v, vlen(&h[i]));
	}
	return r;
}

/* The HMGET reply of recview_fields over the hash. */
static redisReply *hmget_of(const struct pair *h, size_t n)
{
	redisReply *r = array_reply(RECVIEW_NFIELDS);

	for (size_t f = 0; f < RECVIEW_NFIELDS; f++) {
		redisReply *v = NULL;

		for (size_t i = 0; i < n; i++)
			if (h[i].v && strcmp(h[i].k, recview_fields[f]) == 0)
				v = str_reply(h[i].v, vlen(&h[i]));
		if (!v) {
			v = calloc(1, sizeof(*v));
			v->type = REDIS_REPLY_NIL;
		}
		r->element[f] = v;
	}
	return r;
}

/* 1 when both renderings agree (both "no record" counts); the view is
 * rendered twice, the second time from the canonical-text cache. */
static int same_view(const struct pair *h, size_t n, int *had_record)
{
	redisReply *all = hgetall_of(h, n), *some = hmget_of(h, n);
	json_t *fields = lifecycle_hash_json(all), *view = fields ? lifecycle_record_json(fields) : NULL;
	char *want = view ? jsonv_dump(view) : NULL;
	struct buf out;
	int rc, ok;

	buf_init(&out, 1 << 20);
	rc = recview_render(some, &out);
	ok = want ? rc == 1 && strcmp(out.data, want) == 0 : rc == 0;
	if (!ok)
		fprintf(stderr, "  want %s\n  got  %s (rc %d)\n", want ? want : "(none)",
			out.data ? out.data : "", rc);
	if (ok && want) {
		rc = recview_render(some, &out);
		ok = rc == 1 && strcmp(out.data, want) == 0;
	}
	*had_record = want != NULL;
	buf_release(&out);
	free(want);
	json_decref(view);
	json_decref(fields);
	freeReplyObject(all);
	freeReplyObject(some);
	return ok;
}

#define BASE(labels, pending, resources)                                                   \
	{ "id", "box-1", 0 }, { "tenant", "dev", 0 }, { "state", "running", 0 },           \
	{ "node", "agent-1", 0 }, { "epoch", "1795944313391", 0 }, { "generation", "3", 0 }, \
	{ "sleepAfter", "600000", 0 }, { "keepAlive", "0", 0 }, { "labels", labels, 0 },     \
	{ "resources", resources, 0 }, { "network", "none", 0 }, { "image", "default", 0 },  \
	{ "env", "{\"TOKEN\":\"secret\"}", 0 }, { "pending", pending, 0 },                   \
	{ "createdAt", "2026-12-01T15:27:08.486Z", 0 }, { "startedAt", "2026-12-01T15:27:08.501Z", 0 }, \
	{ "lastActiveAt", "2026-12-01T15:27:08.501Z", 0 }

TEST(fcgi_recview_same_as_jansson)
{
	static const char *const json_values[] = {
		"{}", "", "{\"team\":\"ml\",\"tier\":\"gold\"}", "{ \"a\" : 1 }", "[1,2]", "\"x\"",
		"{\"a\":1,\"a\":2}", "{\"u\":\"\\u00e9\\/\\u0001\\n\"}", "{\"f\":0.5,\"e\":1e3,\"n\":-0}",
		"{\"nested\":{\"x\":[true,false,null,{\"y\":\"z\"}]}}", "{broken", "{\"é\":\"ü\"}",
		"{\"env\":{\"TOKEN\":\"s3cret\",\"B\":\"2\"},\"image\":\"x\"}", "{\"env\":{}}",
		"{\"big\":123456789012345678901234567890}", "{\"ctl\":\"a\\u001fb\\u007f\"}",
	};
	int had;

	for (size_t i = 0; i < ARRAY_SIZE(json_values); i++) {
		const char *j = json_values[i];
		struct pair h[] = { BASE(j, j, j), { "persist", j, 0 }, { "restoreFrom", "snap-1", 0 },
				    { "persistedAt", "1795944313391", 0 } };

		CHECK(same_view(h, ARRAY_SIZE(h), &had));
		CHECK(had);
	}
	{
		/* the shape of a fresh record: empty optional fields */
		struct pair h[] = { BASE("{}", "{}", "{\"cpus\":1,\"diskMiB\":256,\"memoryMiB\":512,\"pids\":256}"),
				    { "restoreFrom", "", 0 }, { "persist", "", 0 } };
		CHECK(same_view(h, ARRAY_SIZE(h), &had));
		CHECK(had);
	}
	{
		/* strings to escape, non-ASCII, a bad integer, keepAlive on */
		struct pair h[] = { { "id", "q\"b\\s/\t\r\n\b\f\x01\x1f\x7f", 0 }, { "state", "", 0 },
				    { "epoch", "12x", 0 }, { "generation", "-5", 0 },
				    { "keepAlive", "1", 0 }, { "node", "nœud-ü", 0 },
				    { "sleepAfter", "99999999999999999999", 0 },
				    { "persistedAt", "-1", 0 } };
		CHECK(same_view(h, ARRAY_SIZE(h), &had));
		CHECK(had);
	}
	{
		/* invalid UTF-8 or a NUL in a value: that field counts as absent */
		struct pair h[] = { { "id", "a\xff", 0 }, { "state", "running", 0 }, { "epoch", "7", 0 },
				    { "image", "x\0y", 3 }, { "labels", "{\"a\":\"\xc3\"}", 0 },
				    { "network", "\xed\xa0\x80", 0 } };
		CHECK(same_view(h, ARRAY_SIZE(h), &had));
		CHECK(had);
	}
	{
		/* no record: no state, no epoch, an epoch that is no UTF-8, nothing */
		struct pair a[] = { { "id", "x", 0 }, { "epoch", "1", 0 } };
		struct pair b[] = { { "id", "x", 0 }, { "state", "running", 0 } };
		struct pair c[] = { { "state", "running", 0 }, { "epoch", "\xff", 0 } };

		CHECK(same_view(a, ARRAY_SIZE(a), &had) && !had);
		CHECK(same_view(b, ARRAY_SIZE(b), &had) && !had);
		CHECK(same_view(c, ARRAY_SIZE(c), &had) && !had);
		CHECK(same_view(c, 0, &had) && !had);
	}
}

TEST(fcgi_recview_env_never_shown)
{
	struct pair h[] = { BASE("{}", "{\"env\":{\"TOKEN\":\"s3cret\"}}", "{}") };
	redisReply *r = hmget_of(h, ARRAY_SIZE(h));
	struct buf out;

	buf_init(&out, 1 << 20);
	CHECK_INT(recview_render(r, &out), 1);
	CHECK(out.data && !strstr(out.data, "secret") && !strstr(out.data, "s3cret"));
	CHECK(out.data && strstr(out.data, "\"pending\":{\"env\":[\"TOKEN\"]}"));
	/* a view past the buffer's maximum is refused, not cut */
	buf_release(&out);
	buf_init(&out, 64);
	CHECK_INT(recview_render(r, &out), -1);
	buf_release(&out);
	freeReplyObject(r);
}
