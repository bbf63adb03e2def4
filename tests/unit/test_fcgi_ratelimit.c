/* The rate limit headers and their relay through nginx (fcgi/ratelimit.c). */
#include "unit.h"
#include "ratelimit.h"

TEST(fcgi_ratelimit_headers)
{
	struct ratelimit_state s = { .set = 1, .limit = 20, .remaining = 7, .reset_s = 3 };
	char out[160];

	CHECK_INT(ratelimit_format_headers(&s, out, sizeof(out)), 0);
	CHECK_STR(out, "RateLimit-Limit: 20\r\nRateLimit-Remaining: 7\r\nRateLimit-Reset: 3\r\n");
	s.remaining = 0;
	s.retry_s = 2;
	CHECK_INT(ratelimit_format_headers(&s, out, sizeof(out)), 0);
	CHECK_STR(out, "RateLimit-Limit: 20\r\nRateLimit-Remaining: 0\r\nRateLimit-Reset: 3\r\n"
		       "Retry-After: 2\r\n");
	CHECK_INT(ratelimit_format_headers(&s, out, 40), -1);
	s.set = 0;
	CHECK_INT(ratelimit_format_headers(&s, out, sizeof(out)), 0);
	CHECK_STR(out, "");
}

TEST(fcgi_ratelimit_relay)
{
	struct ratelimit_state s = { .set = 1, .limit = 5, .remaining = 0, .reset_s = 2, .retry_s = 1 };
	struct ratelimit_state back;
	char v[64];
	static const char *const bad[] = {
		"", "5", "5 0 2", "5 0 2 1 9", "5  0 2 1", "5 0 2 1 ", " 5 0 2 1", "5 0 x 1",
		"0 0 0 1", "-5 0 2 1", "99999999999999999999 0 2 1",
	};

	CHECK_INT(ratelimit_relay_format(&s, v, sizeof(v)), 0);
	CHECK_STR(v, "5 0 2 1");
	CHECK_INT(ratelimit_relay_parse(v, &back), 0);
	CHECK_INT(back.set, 1);
	CHECK_INT(back.limit, 5);
	CHECK_INT(back.remaining, 0);
	CHECK_INT(back.reset_s, 2);
	CHECK_INT(back.retry_s, 1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_INT(ratelimit_relay_parse(bad[i], &back), -1);
		CHECK_INT(back.set, 0);
	}
	CHECK_INT(ratelimit_relay_parse(NULL, &back), -1);
	CHECK_INT(ratelimit_relay_format(&s, v, 4), -1);
}
