/* The per-worker API key cache (expiry, refusals, bound, off), the
 * read-only command list of the store's resend, and its RESP formatter. */
#include "unit.h"
#include "keycache.h"
#include "sha256.h"
#include "store.h"

static struct keycache kc;   /* large: not on the stack */

static void digest_of(const char *s, uint8_t d[SHA256_DIGEST_LEN])
{
	struct sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, s, strlen(s));
	sha256_final(&c, d);
}

TEST(fcgi_keycache_expiry)
{
	uint8_t a[SHA256_DIGEST_LEN], b[SHA256_DIGEST_LEN];
	struct keycache_entry hit;

	digest_of("key-a", a);
	digest_of("key-b", b);
	keycache_init(&kc, 1000);
	CHECK_INT(keycache_get(&kc, a, 5000, &hit), 0);
	keycache_put(&kc, a, 1, "dev", 1, 5000);
	CHECK_INT(keycache_get(&kc, a, 5000, &hit), 1);
	CHECK_STR(hit.tenant, "dev");
	CHECK_INT(hit.valid, 1);
	CHECK_INT(hit.admin, 1);
	CHECK_INT(keycache_get(&kc, a, 5999, &hit), 1);
	CHECK_INT(keycache_get(&kc, a, 6000, &hit), 0);   /* exactly one ttl later: gone */
	CHECK_INT(keycache_get(&kc, b, 5500, &hit), 0);   /* another digest */
	/* An entry from "the future" (more than one ttl ahead) is never used. */
	CHECK_INT(keycache_get(&kc, a, 3000, &hit), 0);

	/* A refusal is remembered for the same ttl, no longer. */
	keycache_put(&kc, b, 0, NULL, 1, 10000);
	CHECK_INT(keycache_get(&kc, b, 10500, &hit), 1);
	CHECK_INT(hit.valid, 0);
	CHECK_INT(hit.admin, 0);
	CHECK_STR(hit.tenant, "");
	CHECK_INT(keycache_get(&kc, b, 11000, &hit), 0);

	/* A newer check replaces the older one. */
	keycache_put(&kc, a, 1, "dev", 0, 20000);
	keycache_put(&kc, a, 0, NULL, 0, 20100);
	CHECK_INT(keycache_get(&kc, a, 20200, &hit), 1);
	CHECK_INT(hit.valid, 0);
}

TEST(fcgi_keycache_off_and_bad_input)
{
	uint8_t a[SHA256_DIGEST_LEN];
	struct keycache_entry hit;
	char long_tenant[100];

	digest_of("key-a", a);
	keycache_init(&kc, 0);
	keycache_put(&kc, a, 1, "dev", 0, 100);
	CHECK_INT(keycache_get(&kc, a, 100, &hit), 0);
	keycache_init(&kc, -5);
	CHECK_INT((long long)kc.ttl_ms, 0);

	keycache_init(&kc, 1000);
	memset(long_tenant, 'x', sizeof(long_tenant) - 1);
	long_tenant[sizeof(long_tenant) - 1] = '\0';
	keycache_put(&kc, a, 1, long_tenant, 0, 100);   /* does not fit: not stored */
	CHECK_INT(keycache_get(&kc, a, 100, &hit), 0);
	keycache_put(&kc, a, 1, NULL, 0, 100);          /* valid without tenant: not stored */
	CHECK_INT(keycache_get(&kc, a, 100, &hit), 0);
}

TEST(fcgi_keycache_bounded)
{
	char s[32];
	uint8_t d[SHA256_DIGEST_LEN];
	struct keycache_entry hit;
	int live = 0;

	keycache_init(&kc, 1000);
	/* Far more keys than slots: the table never grows, and the most
	 * recent key is always found. */
	for (int i = 0; i < 20 * KEYCACHE_SLOTS; i++) {
		snprintf(s, sizeof(s), "key-%d", i);
		digest_of(s, d);
		keycache_put(&kc, d, 1, "t", 0, 100);
		CHECK_INT(keycache_get(&kc, d, 101, &hit), 1);
	}
	for (int i = 0; i < 20 * KEYCACHE_SLOTS; i++) {
		snprintf(s, sizeof(s), "key-%d", i);
		digest_of(s, d);
		live += keycache_get(&kc, d, 101, &hit);
	}
	CHECK(live <= KEYCACHE_SLOTS);
	CHECK(live > KEYCACHE_SLOTS / 2);
	CHECK_INT((long long)sizeof(kc.slot) / (long long)sizeof(kc.slot[0]), KEYCACHE_SLOTS);
}

TEST(fcgi_store_readonly_cmd)
{
	CHECK(store_readonly_cmd("HGETALL", 7));
	CHECK(store_readonly_cmd("hmget", 5));
	CHECK(store_readonly_cmd("EXISTS", 6));
	CHECK(store_readonly_cmd("PING", 4));
	CHECK(!store_readonly_cmd("HSET", 4));
	CHECK(!store_readonly_cmd("INCR", 4));
	CHECK(!store_readonly_cmd("EVAL", 4));
	CHECK(!store_readonly_cmd("GETSET", 6));
	CHECK(!store_readonly_cmd("GETDEL", 6));
	CHECK(!store_readonly_cmd("HGETALLX", 8));
	CHECK(store_readonly_cmd("HGETALL", 4) == store_readonly_cmd("HGET", 4));
	CHECK(!store_readonly_cmd("", 0));
}

TEST(fcgi_keycache_unlimited)
{
	uint8_t a[SHA256_DIGEST_LEN], b[SHA256_DIGEST_LEN];
	struct keycache_entry hit;

	digest_of("key-u", a);
	digest_of("key-v", b);
	keycache_init(&kc, 1000);
	keycache_set_unlimited(&kc, a, 1);          /* no entry: nothing */
	CHECK_INT(keycache_get(&kc, a, 100, &hit), 0);
	keycache_put(&kc, a, 1, "dev", 0, 100);
	CHECK_INT(keycache_get(&kc, a, 100, &hit), 1);
	CHECK_INT(hit.unlimited, 0);                /* a new entry is checked */
	keycache_set_unlimited(&kc, a, 1);
	CHECK_INT(keycache_get(&kc, a, 500, &hit), 1);
	CHECK_INT(hit.unlimited, 1);
	keycache_set_unlimited(&kc, b, 0);          /* another digest: untouched */
	CHECK_INT(keycache_get(&kc, a, 500, &hit), 1);
	CHECK_INT(hit.unlimited, 1);
	keycache_put(&kc, a, 1, "dev", 0, 600);     /* a new check forgets it */
	CHECK_INT(keycache_get(&kc, a, 600, &hit), 1);
	CHECK_INT(hit.unlimited, 0);
	keycache_put(&kc, b, 0, NULL, 0, 600);      /* a refusal is never unlimited */
	keycache_set_unlimited(&kc, b, 1);
	CHECK_INT(keycache_get(&kc, b, 600, &hit), 1);
	CHECK_INT(hit.unlimited, 0);
}

/* store_format_argv makes byte for byte what hiredis' formatter makes. */
TEST(fcgi_store_format_argv_is_hiredis)
{
	static char big[100000];
	const char *bin = "a\0b\r\n";
	struct {
		int argc;
		const char *argv[4];
		size_t lens[4];
	} cases[] = {
		{ 1, { "PING" }, { 4 } },
		{ 3, { "HMGET", "sbx:sb:{t}:x", "" }, { 5, 12, 0 } },
		{ 3, { "SET", "k", bin }, { 3, 1, 6 } },
		{ 2, { "ECHO", big }, { 4, sizeof(big) } },
	};
	struct buf b;

	memset(big, 'x', sizeof(big));
	buf_init(&b, 1 << 20);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *want = NULL;
		long long n = redisFormatCommandArgv(&want, cases[i].argc, cases[i].argv, cases[i].lens);

		CHECK(n > 0);
		CHECK_INT(store_format_argv(&b, cases[i].argc, cases[i].argv, cases[i].lens), 0);
		CHECK_INT((long long)b.len, n);
		CHECK(memcmp(b.data, want, (size_t)n) == 0);
		free(want);
	}
	CHECK_INT(store_format_argv(&b, 0, NULL, NULL), -1);
	buf_release(&b);
	buf_init(&b, 64);   /* a bound reached is a failure, not a cut command */
	CHECK_INT(store_format_argv(&b, 2, cases[3].argv, cases[3].lens), -1);
	buf_release(&b);
}
