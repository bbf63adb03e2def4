/* Unit tests of the agent's pure helpers: UTF-8, base64, SSE framing, env, fencing. */
#include "agent.h"
#include "agent_sse.h"
#include "buf.h"
#include "redisurl.h"
#include "unit.h"
#include "util.h"

#include <stdlib.h>

TEST(agent_utf8_valid_cases)
{
	CHECK_INT(codec_utf8_valid("hello", 5), 1);
	CHECK_INT(codec_utf8_valid("a\0b", 3), 1);                 /* NUL is a character */
	CHECK_INT(codec_utf8_valid("\xe2\x82\xac", 3), 1);         /* € */
	CHECK_INT(codec_utf8_valid("\xf0\x9f\x98\x80", 4), 1);     /* emoji */
	CHECK_INT(codec_utf8_valid("\xff", 1), 0);
	CHECK_INT(codec_utf8_valid("\xc0\x80", 2), 0);             /* overlong */
	CHECK_INT(codec_utf8_valid("\xed\xa0\x80", 3), 0);         /* surrogate */
	CHECK_INT(codec_utf8_valid("\xf4\x90\x80\x80", 4), 0);     /* > U+10FFFF */
	CHECK_INT(codec_utf8_valid("\xe2\x82", 2), 0);             /* truncated */
}

TEST(agent_utf8_complete_len_cases)
{
	CHECK_INT(codec_utf8_complete_len("abc", 3), 3);
	CHECK_INT(codec_utf8_complete_len("ab\xe2\x82", 4), 2);
	CHECK_INT(codec_utf8_complete_len("ab\xe2", 3), 2);
	CHECK_INT(codec_utf8_complete_len("ab\xe2\x82\xac", 5), 5);
	CHECK_INT(codec_utf8_complete_len("ab\xf0\x9f\x98", 5), 2);
	CHECK_INT(codec_utf8_complete_len("ab\xff", 3), 3);         /* invalid: not held back */
	CHECK_INT(codec_utf8_complete_len("ab\xed\xa0", 4), 4);     /* can never be valid */
	CHECK_INT(codec_utf8_complete_len("", 0), 0);
}

TEST(agent_utf8_fix_replaces)
{
	struct buf b;

	buf_init(&b, 1024);
	CHECK_INT(codec_utf8_fix("a\xff" "b\xe2\x82\xac", 6, &b), 0);
	CHECK_STR(b.data, "a\xef\xbf\xbd" "b\xe2\x82\xac");
	buf_reset(&b);
	CHECK_INT(codec_utf8_fix("ok\xe2\x82", 4, &b), 0);
	CHECK_STR(b.data, "ok\xef\xbf\xbd\xef\xbf\xbd");
	buf_release(&b);
}

TEST(agent_base64_vectors)
{
	static const struct { const char *in, *out; } v[] = {
		{ "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
		{ "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
	};
	struct buf b;

	for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
		buf_init(&b, 64);
		CHECK_INT(codec_base64_encode(v[i].in, strlen(v[i].in), &b), 0);
		CHECK_STR(b.data ? b.data : "", v[i].out);
		buf_release(&b);
	}
	buf_init(&b, 64);
	CHECK_INT(codec_base64_encode("\xff\xfe", 2, &b), 0);
	CHECK_STR(b.data, "//4=");
	buf_release(&b);
}

TEST(agent_sse_framing)
{
	struct buf b;

	buf_init(&b, 4096);
	CHECK_INT(agent_sse_event(&b, "start", "{\"pid\":7}"), 0);
	CHECK_STR(b.data, "event: start\ndata: {\"pid\":7}\n\n");
	buf_reset(&b);
	CHECK_INT(agent_sse_chunk(&b, "stdout", "hi\n\"x\"", 6), 0);
	CHECK_STR(b.data, "event: stdout\ndata: {\"data\":\"hi\\n\\\"x\\\"\"}\n\n");
	buf_reset(&b);
	CHECK_INT(agent_sse_chunk(&b, "stderr", "\xff\xfe", 2), 0);
	CHECK_STR(b.data, "event: stderr\ndata: {\"data\":\"//4=\",\"encoding\":\"base64\"}\n\n");
	buf_reset(&b);
	CHECK_INT(agent_sse_chunk(&b, "stdout", "a\0b", 3), 0);
	CHECK_STR(b.data, "event: stdout\ndata: {\"data\":\"a\\u0000b\"}\n\n");
	buf_release(&b);
}

TEST(agent_env_merge_overlay)
{
	char *base[] = { (char *)"PATH=/bin", (char *)"HOME=/root", (char *)"A=1", NULL };
	json_t *ov = json_pack("{s:s,s:n,s:s}", "A", "2", "HOME", "B", "3");
	char **env = agent_env_merge(base, ov);
	int n = 0;

	CHECK(env != NULL);
	for (char **p = env; p && *p; p++)
		n++;
	CHECK_INT(n, 3);
	if (env && n == 3) {
		CHECK_STR(env[0], "PATH=/bin");
		CHECK(strcmp(env[1], "A=2") == 0 || strcmp(env[2], "A=2") == 0);
		CHECK(strcmp(env[1], "B=3") == 0 || strcmp(env[2], "B=3") == 0);
	}
	agent_env_free(env);
	json_decref(ov);
}

TEST(agent_env_check_names)
{
	struct sbx_err e;
	json_t *ok = json_pack("{s:s,s:n}", "FOO_1", "x", "_B", NULL);
	json_t *bad = json_pack("{s:s}", "1A", "x");
	json_t *nul = json_pack("{s:s%}", "A", "a\0b", (size_t)3);

	CHECK_INT(agent_env_check(ok, 1, &e), 0);
	CHECK_INT(agent_env_check(ok, 0, &e), -1);
	CHECK_INT(agent_env_check(bad, 1, &e), -1);
	CHECK_INT(agent_env_check(nul, 1, &e), -1);
	json_decref(ok);
	json_decref(bad);
	json_decref(nul);
}

TEST(agent_fencing)
{
	struct agent a = { 0 };
	struct sbx_err e;

	CHECK_INT(agent_fence(&a, "dev.box", 5, &e), 0);
	CHECK_INT(agent_fence(&a, "dev.box", 5, &e), 0);
	CHECK_INT(agent_fence(&a, "dev.box", 4, &e), -1);
	CHECK_INT(e.code, SBX_E_STALE_EPOCH);
	CHECK_INT(agent_fence(&a, "dev.other", 1, &e), 0);
	CHECK_INT(agent_fence(&a, "dev.box", 9, &e), 0);
	CHECK_INT(agent_fence(&a, "dev.box", 5, &e), -1);
	while (a.fences) {
		struct agent_fence *f = a.fences;
		a.fences = f->next;
		free(f);
	}
}

TEST(agent_parse_epoch_header)
{
	struct sbx_err e;
	int64_t v = 0;

	CHECK_INT(agent_parse_epoch("12", &v, &e), 0);
	CHECK_INT(v, 12);
	CHECK_INT(agent_parse_epoch(NULL, &v, &e), -1);
	CHECK_INT(agent_parse_epoch("", &v, &e), -1);
	CHECK_INT(agent_parse_epoch("-1", &v, &e), -1);
	CHECK_INT(agent_parse_epoch("1x", &v, &e), -1);
}

TEST(agent_redisurl_parse)
{
	struct redisurl u;
	struct sbx_err e;

	CHECK_INT(redisurl_parse("redis://127.0.0.1:6380", &u, &e), 0);
	CHECK_STR(u.host, "127.0.0.1");
	CHECK_INT(u.port, 6380);
	CHECK_INT(u.is_unix, 0);
	CHECK_INT(redisurl_parse("redis://localhost", &u, &e), 0);
	CHECK_INT(u.port, 6379);
	CHECK_INT(redisurl_parse("redis://[::1]:7000/", &u, &e), 0);
	CHECK_STR(u.host, "::1");
	CHECK_INT(u.port, 7000);
	CHECK_INT(redisurl_parse("unix:/run/redis.sock", &u, &e), 0);
	CHECK_INT(u.is_unix, 1);
	CHECK_STR(u.path, "/run/redis.sock");
	CHECK_INT(redisurl_parse("unix:relative", &u, &e), -1);
	CHECK_INT(redisurl_parse("http://x:1", &u, &e), -1);
	CHECK_INT(redisurl_parse("redis://:6379", &u, &e), -1);
	CHECK_INT(redisurl_parse("redis://h:0", &u, &e), -1);
	CHECK_INT(redisurl_parse("redis://h:99999", &u, &e), -1);
	CHECK_INT(redisurl_parse("redis://h:12x", &u, &e), -1);
	CHECK_INT(redisurl_parse("redis://user@h:1", &u, &e), -1);
}
