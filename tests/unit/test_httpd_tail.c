/* Unit tests of the "{path*}" tail patterns of sandbox/agent/httpd.c (the Files API routes). */
#include "unit.h"
#include "httpd.h"

TEST(httpd_tail_patterns)
{
	char params[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
	size_t off = 0;
	const char *pat = "/v1/sandboxes/{id}/files/{path*}";
	const char *p1 = "/v1/sandboxes/box1/files/a%2Fb/c%00";

	CHECK_INT(httpd_match_tail(pat, p1, params, &off), 1);
	CHECK_STR(params[0], "box1");
	CHECK_STR(p1 + off, "a%2Fb/c%00");
	CHECK_INT(httpd_match_tail(pat, "/v1/sandboxes/box1/files/", params, &off), 1);
	CHECK_INT(off, strlen("/v1/sandboxes/box1/files/"));
	CHECK_INT(httpd_match_tail(pat, "/v1/sandboxes/box1/files", params, &off), -1);
	CHECK_INT(httpd_match_tail(pat, "/v1/sandboxes/box1/dirs/x", params, &off), -1);
	/* without a tail pointer a "{path*}" pattern never matches */
	CHECK_INT(httpd_match(pat, p1, params), -1);
	CHECK_INT(httpd_match("/v1/sandboxes/{id}/exec", "/v1/sandboxes/b/exec", params), 1);
}
