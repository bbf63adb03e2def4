/* Unit tests of the forwarders' pure part (sandbox/agent/forward.c). */
#include "forward.h"
#include "unit.h"

#include <string.h>

static int take(const char *in, char *out, size_t outsz, char *value, size_t vsz)
{
	size_t len = strlen(in);
	int n;

	snprintf(out, outsz, "%s", in);
	n = fwd_head_take(out, &len, "X-Sbx-Node-Secret", value, vsz);
	out[len] = '\0';
	return n;
}

TEST(forward_head_take_removes_the_secret_line)
{
	char head[512], v[64];

	CHECK_INT(take("GET / HTTP/1.1\r\nHost: a\r\nX-Sbx-Node-Secret:  s3 \r\nX-A: b\r\n\r\n", head,
		       sizeof(head), v, sizeof(v)), 1);
	CHECK_STR(v, "s3");
	CHECK_STR(head, "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\r\n");
	/* Any case; every copy goes, the first one's value counts. */
	CHECK_INT(take("GET / HTTP/1.1\r\nx-sbx-node-secret: one\r\nX-SBX-NODE-SECRET: two\r\n\r\n",
		       head, sizeof(head), v, sizeof(v)), 2);
	CHECK_STR(v, "one");
	CHECK_STR(head, "GET / HTTP/1.1\r\n\r\n");
}

TEST(forward_head_take_leaves_other_headers)
{
	char head[512], v[64];

	/* A longer name with the same start, a value that names it, the request line. */
	CHECK_INT(take("GET /X-Sbx-Node-Secret: HTTP/1.1\r\nX-Sbx-Node-Secrets: a\r\n"
		       "X-B: X-Sbx-Node-Secret: c\r\n\r\n", head, sizeof(head), v, sizeof(v)), 0);
	CHECK_STR(v, "");
	CHECK_STR(head, "GET /X-Sbx-Node-Secret: HTTP/1.1\r\nX-Sbx-Node-Secrets: a\r\n"
			"X-B: X-Sbx-Node-Secret: c\r\n\r\n");
	/* A value longer than the buffer is cut, not overflowed. */
	CHECK_INT(take("GET / HTTP/1.1\r\nX-Sbx-Node-Secret: 0123456789\r\n\r\n", head, sizeof(head), v,
		       4), 1);
	CHECK_STR(v, "012");
	/* No line end at all: nothing to take. */
	CHECK_INT(take("GET / HTTP/1.1", head, sizeof(head), v, sizeof(v)), 0);
}
