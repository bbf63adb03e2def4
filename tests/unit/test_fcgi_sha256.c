/* SHA-256 against the FIPS 180-4 / NIST example vectors. */
#include "unit.h"
#include "sha256.h"

#include <stdlib.h>

TEST(fcgi_sha256_vectors)
{
	char hex[65];

	sha256_hex("", 0, hex);
	CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sha256_hex("abc", 3, hex);
	CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
	CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		   112, hex);
	CHECK_STR(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(fcgi_sha256_million_a_incremental)
{
	struct sha256_ctx c;
	uint8_t d[32];
	char chunk[1001], hex[65];
	static const char digits[] = "0123456789abcdef";

	memset(chunk, 'a', sizeof(chunk));
	sha256_init(&c);
	for (int i = 0; i < 1000; i++)
		sha256_update(&c, chunk, i % 2 ? 999 : 1001);   /* odd split sizes */
	sha256_final(&c, d);
	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[d[i] >> 4];
		hex[2 * i + 1] = digits[d[i] & 15];
	}
	hex[64] = '\0';
	CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(fcgi_sha256_block_boundaries)
{
	/* 55, 56 and 64 bytes exercise the padding edge cases. */
	char hex[65];
	char a[64];

	memset(a, 'a', sizeof(a));
	sha256_hex(a, 55, hex);
	CHECK_STR(hex, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
	sha256_hex(a, 56, hex);
	CHECK_STR(hex, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
	sha256_hex(a, 64, hex);
	CHECK_STR(hex, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}
