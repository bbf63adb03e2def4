/* Query-string parsing and percent-decoding of sbx-api requests. */
#include "unit.h"
#include "codec.h"
#include "http.h"

TEST(fcgi_http_pct_decode)
{
	char out[16];

	CHECK_INT(codec_pct_decode("a%20b", 5, out, sizeof(out), 0), 3);
	CHECK_STR(out, "a b");
	CHECK_INT(codec_pct_decode("a+b", 3, out, sizeof(out), 0), 3);
	CHECK_STR(out, "a+b");
	CHECK_INT(codec_pct_decode("a+b", 3, out, sizeof(out), 1), 3);
	CHECK_STR(out, "a b");
	CHECK_INT(codec_pct_decode("%41%6a", 6, out, sizeof(out), 0), 2);
	CHECK_STR(out, "Aj");
	CHECK_INT(codec_pct_decode("%", 1, out, sizeof(out), 0), CODEC_PCT_BAD);
	CHECK_INT(codec_pct_decode("%4", 2, out, sizeof(out), 0), CODEC_PCT_BAD);
	CHECK_INT(codec_pct_decode("%g0", 3, out, sizeof(out), 0), CODEC_PCT_BAD);
	CHECK_INT(codec_pct_decode("%00", 3, out, sizeof(out), 0), CODEC_PCT_NUL);
	CHECK_INT(codec_pct_decode("0123456789abcdef", 16, out, sizeof(out), 0), CODEC_PCT_ROOM); /* no room for NUL */
	CHECK_INT(codec_pct_decode("", 0, out, sizeof(out), 0), 0);
	CHECK_STR(out, "");
}

TEST(fcgi_http_query_get)
{
	char v[64];
	struct sbx_err e;

	CHECK_INT(http_query_get("label=env:prod&state=running&limit=10", "state", v, sizeof(v), &e), 1);
	CHECK_STR(v, "running");
	CHECK_INT(http_query_get("label=env%3Aprod", "label", v, sizeof(v), &e), 1);
	CHECK_STR(v, "env:prod");
	CHECK_INT(http_query_get("a=1&b=x+y", "b", v, sizeof(v), &e), 1);
	CHECK_STR(v, "x y");
	CHECK_INT(http_query_get("a=1", "b", v, sizeof(v), &e), 0);
	CHECK_INT(http_query_get("", "b", v, sizeof(v), &e), 0);
	CHECK_INT(http_query_get(NULL, "b", v, sizeof(v), &e), 0);
	CHECK_INT(http_query_get("recursive&hidden=1", "recursive", v, sizeof(v), &e), 1);
	CHECK_STR(v, "");
	CHECK_INT(http_query_get("a=1&&b=2&", "b", v, sizeof(v), &e), 1);
	CHECK_STR(v, "2");
	CHECK_INT(http_query_get("a=1&a=2", "a", v, sizeof(v), &e), 1);
	CHECK_STR(v, "1");
	CHECK_INT(http_query_get("%61=3", "a", v, sizeof(v), &e), 1);   /* encoded name */
	CHECK_STR(v, "3");
}

TEST(fcgi_http_query_invalid)
{
	char v[8];
	struct sbx_err e;

	CHECK_INT(http_query_get("a=%zz", "a", v, sizeof(v), &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(http_query_get("a=%00", "a", v, sizeof(v), &e), -1);
	CHECK_INT(http_query_get("b=%zz&a=1", "a", v, sizeof(v), &e), -1);   /* anywhere in the query */
	CHECK_INT(http_query_get("a=1&b=%00", "a", v, sizeof(v), &e), -1);
	CHECK_INT(http_query_get("a=123456789", "a", v, sizeof(v), &e), -1); /* too long for out */
	CHECK_INT(e.code, SBX_E_VALIDATION);
}

TEST(fcgi_http_path_bad_segment)
{
	CHECK_INT(http_path_bad_segment("/v1/sandboxes/a/exec"), 0);
	CHECK_INT(http_path_bad_segment("/v1/sandboxes/a/exec/"), 0);   /* a trailing '/' is no segment */
	CHECK_INT(http_path_bad_segment("/v1/sandboxes?x=//"), 0);      /* the query does not count */
	CHECK_INT(http_path_bad_segment("/v1/sandboxes/a/files/a.b"), 0);
	CHECK_INT(http_path_bad_segment("//v1/sandboxes/a/exec"), 1);
	CHECK_INT(http_path_bad_segment("/v1//sandboxes/a/exec"), 1);
	CHECK_INT(http_path_bad_segment("/v1/sandboxes//a"), 1);
	CHECK_INT(http_path_bad_segment("//v1/sandboxes?limit=1"), 1);
	CHECK_INT(http_path_bad_segment("/v1/./sandboxes"), 1);
	CHECK_INT(http_path_bad_segment("/v1/sandboxes/a/%2e%2e/b/exec"), 1);
	CHECK_INT(http_path_bad_segment("/v1/sandboxes/.."), 1);
}
