/* redis.url parsing (sandbox/common/redisurl.c), used by sbx-api and sbx-agent. */
#include "unit.h"
#include "redisurl.h"

TEST(redisurl_ok)
{
	struct redisurl a;
	struct sbx_err e;

	CHECK_INT(redisurl_parse("redis://127.0.0.1:6379", &a, &e), 0);
	CHECK_INT(a.is_unix, 0);
	CHECK_STR(a.host, "127.0.0.1");
	CHECK_INT(a.port, 6379);
	CHECK_INT(redisurl_parse("redis://localhost", &a, &e), 0);
	CHECK_STR(a.host, "localhost");
	CHECK_INT(a.port, 6379);
	CHECK_INT(redisurl_parse("redis://[::1]:7000", &a, &e), 0);
	CHECK_STR(a.host, "::1");
	CHECK_INT(a.port, 7000);
	CHECK_INT(redisurl_parse("unix:/tmp/redis.sock", &a, &e), 0);
	CHECK_INT(a.is_unix, 1);
	CHECK_STR(a.path, "/tmp/redis.sock");
}

TEST(redisurl_bad)
{
	struct redisurl a;
	struct sbx_err e;
	static const char *bad[] = {
		"", "http://x:1", "redis://", "redis://:6379", "redis://h:0", "redis://h:65536",
		"redis://h:-1", "redis://h:12ab", "redis://h:", "redis://u:p@h:1", "redis://h:1/0",
		"redis://h h:1", "redis://[::1", "redis://[::1]x", "unix:", "unix:relative/path",
		"redis://h:1?x=y",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = redisurl_parse(bad[i], &a, &e);
		if (rc != -1)
			fprintf(stderr, "  accepted bad url '%s'\n", bad[i]);
		CHECK_INT(rc, -1);
		CHECK_INT(e.code, SBX_E_VALIDATION);
	}
	CHECK_INT(redisurl_parse(NULL, &a, &e), -1);
}
