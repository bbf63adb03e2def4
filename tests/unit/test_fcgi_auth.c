/* API key shape and generation. */
#include "unit.h"
#include "auth.h"

TEST(fcgi_auth_key_shape)
{
	char k[AUTH_KEY_LEN + 1], name[RKEYS_MAX];
	struct sbx_err e;

	CHECK_INT(auth_key_generate(k, &e), 0);
	CHECK_INT((long long)strlen(k), AUTH_KEY_LEN);
	CHECK(auth_key_valid_shape(k));
	CHECK(auth_key_valid_shape("sbx_0123456789abcdef0123456789abcdef01234567"));
	CHECK(!auth_key_valid_shape("sbx_0123456789ABCDEF0123456789abcdef01234567"));
	CHECK(!auth_key_valid_shape("sbx_0123456789abcdef0123456789abcdef0123456"));
	CHECK(!auth_key_valid_shape("sbx_0123456789abcdef0123456789abcdef012345678"));
	CHECK(!auth_key_valid_shape("abc_0123456789abcdef0123456789abcdef01234567"));
	CHECK(!auth_key_valid_shape(""));
	CHECK(!auth_key_valid_shape(NULL));
	auth_key_redis_name("sbx_0123456789abcdef0123456789abcdef01234567", name);
	CHECK(strncmp(name, "sbx:apikey:", 11) == 0);
	CHECK_INT((long long)strlen(name), 11 + 64);
}
