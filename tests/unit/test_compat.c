/* Unit tests of agent_compat.c's pure helpers: base64 decoding and the
 * percent-encoding of SDK paths into files-route tails. */
#include "agent_compat.h"
#include "codec.h"
#include "agent_sse.h"
#include "buf.h"
#include "fspath.h"
#include "unit.h"

static int decodes_to(const char *b64, const char *want, size_t wantlen)
{
	struct buf out;
	int ok;

	buf_init(&out, 1024);
	ok = codec_base64_decode(b64, strlen(b64), &out) == 0 && out.len == wantlen &&
	     (wantlen == 0 || memcmp(out.data, want, wantlen) == 0);
	buf_release(&out);
	return ok;
}

static int rejects(const char *b64)
{
	struct buf out;
	int rc;

	buf_init(&out, 1024);
	rc = codec_base64_decode(b64, strlen(b64), &out);
	buf_release(&out);
	return rc < 0;
}

TEST(compat_base64_decode_cases)
{
	CHECK(decodes_to("", "", 0));
	CHECK(decodes_to("aGVsbG8K", "hello\n", 6));
	CHECK(decodes_to("YQ==", "a", 1));
	CHECK(decodes_to("YWI=", "ab", 2));
	CHECK(decodes_to("YQ", "a", 1));          /* padding is optional */
	CHECK(decodes_to("AAH6/w==", "\x00\x01\xfa\xff", 4));
	CHECK(rejects("Y"));                      /* one char cannot encode a byte */
	CHECK(rejects("YQ=x"));
	CHECK(rejects("Y Q="));
	CHECK(rejects("YQ==="));
	CHECK(rejects("a-b_"));                   /* url-safe alphabet is not base64 */
}

TEST(compat_base64_roundtrip)
{
	unsigned char bytes[256];
	struct buf enc, dec;

	for (int i = 0; i < 256; i++)
		bytes[i] = (unsigned char)(255 - i);
	for (size_t n = 0; n <= sizeof(bytes); n += 37) {
		buf_init(&enc, 4096);
		buf_init(&dec, 4096);
		CHECK_INT(codec_base64_encode(bytes, n, &enc), 0);
		CHECK_INT(codec_base64_decode(enc.data ? enc.data : "", enc.len, &dec), 0);
		CHECK_INT(dec.len, n);
		CHECK(n == 0 || memcmp(dec.data, bytes, n) == 0);
		buf_release(&enc);
		buf_release(&dec);
	}
}

TEST(compat_path_encoding_roundtrips_through_fspath)
{
	const char *paths[] = { "/workspace/a b/ü.txt", "rel/x%41.txt", "/etc/hosts", "a?b#c" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct buf tail;
		struct fspath fp;
		struct sbx_err e;
		char decoded[FSPATH_MAX + 16];

		buf_init(&tail, 4 * FSPATH_MAX);
		CHECK_INT(codec_pct_encode(paths[i], strlen(paths[i]), &tail), 0);
		CHECK_INT(buf_add(&tail, "", 1), 0);
		CHECK(strpbrk(tail.data, "/ ?#") == NULL);
		CHECK_INT(fspath_decode(tail.data, tail.len - 1, decoded, sizeof(decoded), &e), 0);
		CHECK_STR(decoded, paths[i]);
		CHECK_INT(fspath_from_url(tail.data, &fp, &e), 0);
		buf_release(&tail);
	}
}
