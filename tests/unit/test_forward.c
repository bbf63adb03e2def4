/* Unit tests of the forwarders' pure part (sandbox/agent/forward.c). */
#include "forward.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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

/* One thread makes the whole batch of sockets in the namespace (the
 * forwarders keep FWD_SPARE of them instead of a thread per connection). */
TEST(forward_sockets_in_netns_makes_a_batch)
{
	int fds[FWD_SPARE], ns, n;

	CHECK_INT(fwd_sockets_in_netns(-1, fds, FWD_SPARE), -1);
	CHECK_INT(errno, EBADF);
	ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	CHECK(ns >= 0);
	if (geteuid() != 0) {   /* setns needs CAP_SYS_ADMIN, even into our own */
		close(ns);
		return;
	}
	n = fwd_sockets_in_netns(ns, fds, FWD_SPARE);
	CHECK_INT(n, FWD_SPARE);
	for (int i = 0; i < n && i < FWD_SPARE; i++) {
		CHECK(fcntl(fds[i], F_GETFL) & O_NONBLOCK);
		CHECK(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
		close(fds[i]);
	}
	CHECK_INT(fwd_sockets_in_netns(ns, fds, 0), -1);
	close(ns);
}

static enum fwd_rs feed(const char *s, int head_request)
{
	struct fwd_resp rs;
	enum fwd_rs st = FWD_RS_STATUS;

	fwd_resp_init(&rs, head_request);
	/* One byte at a time: every split point of the answer is seen. */
	for (size_t i = 0; s[i]; i++)
		st = fwd_resp_feed(&rs, s + i, 1);
	return st;
}

/* Answers and the state they leave the parser in: complete ones, partial
 * ones, and whatever it cannot be sure of (RAW: never reused). */
static const struct {
	const char *answer;
	int head_request;
	enum fwd_rs want;
} resp_cases[] = {
	{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, FWD_RS_DONE },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no", 0, FWD_RS_BODY },
	{ "HTTP/1.1 200 OK\r\ncontent-length:0\r\n\r\n", 0, FWD_RS_DONE },
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	  "2\r\nok\r\na;x=y\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n", 0, FWD_RS_DONE },
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n", 0, FWD_RS_CHUNK_SIZE },
	{ "HTTP/1.1 204 No Content\r\n\r\n", 0, FWD_RS_DONE },
	{ "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", 0, FWD_RS_DONE },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 1, FWD_RS_DONE },
	{ "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", 0, FWD_RS_DONE },
	/* No length (until EOF), HTTP/1.0, 1xx, close, both lengths, bytes after. */
	{ "HTTP/1.1 200 OK\r\n\r\nabc", 0, FWD_RS_RAW },
	{ "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, FWD_RS_RAW },
	{ "HTTP/1.1 101 Switching Protocols\r\n\r\n", 0, FWD_RS_RAW },
	{ "HTTP/1.1 100 Continue\r\n\r\n", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, FWD_RS_RAW },
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n", 0, FWD_RS_RAW },
	{ "garbage\r\n\r\n", 0, FWD_RS_RAW },
};

TEST(forward_resp_follows_the_framing)
{
	for (size_t i = 0; i < sizeof(resp_cases) / sizeof(resp_cases[0]); i++) {
		enum fwd_rs got = feed(resp_cases[i].answer, resp_cases[i].head_request);

		if (got != resp_cases[i].want)
			fprintf(stderr, "case %zu: %s\n", i, resp_cases[i].answer);
		CHECK_INT(got, resp_cases[i].want);
	}
}

TEST(forward_resp_long_lines)
{
	char buf[600];
	int n;

	/* A long header line that says nothing about the framing is skipped. */
	n = snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\nX-Long: %0400d\r\nContent-Length: 0\r\n\r\n", 0);
	CHECK(n > 0 && (size_t)n < sizeof(buf));
	CHECK_INT(feed(buf, 0), FWD_RS_DONE);
	/* A long framing header, or a long status line, is not followed. */
	n = snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\nContent-Length: %0400d\r\n\r\n", 0);
	CHECK(n > 0 && (size_t)n < sizeof(buf));
	CHECK_INT(feed(buf, 0), FWD_RS_RAW);
	n = snprintf(buf, sizeof(buf), "HTTP/1.1 200 %0400d\r\nContent-Length: 0\r\n\r\n", 0);
	CHECK(n > 0 && (size_t)n < sizeof(buf));
	CHECK_INT(feed(buf, 0), FWD_RS_RAW);
}

/* fwd_resp_take stops at the end of the answer: what follows (an app's
 * unasked bytes) is left for the caller, never relayed as part of it. */
TEST(forward_resp_take_stops_at_the_end)
{
	static const char two[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
	static const char raw[] = "HTTP/1.1 200 OK\r\n\r\nuntil EOF";
	struct fwd_resp rs;

	fwd_resp_init(&rs, 0);
	CHECK_INT(fwd_resp_take(&rs, two, strlen(two)), strlen(two) - strlen("HTTP/1.1 200 OK\r\n"));
	CHECK_INT(rs.state, FWD_RS_DONE);
	CHECK_INT(fwd_resp_take(&rs, "x", 1), 0);
	/* Unframed: everything is the answer's. */
	fwd_resp_init(&rs, 0);
	CHECK_INT(fwd_resp_take(&rs, raw, strlen(raw)), strlen(raw));
	CHECK_INT(rs.state, FWD_RS_RAW);
}

TEST(forward_target_parse)
{
	char key[AGENT_KEY_MAX];
	int64_t gen;
	int port;

	CHECK_INT(fwd_target_parse("dev/sb-1/7/8080", key, &gen, &port), 0);
	CHECK_STR(key, "dev.sb-1");
	CHECK_INT(gen, 7);
	CHECK_INT(port, 8080);
	/* Every part must be there and well formed; nothing may follow. */
	static const char *const bad[] = {
		"", "dev/sb-1/7", "dev/sb-1/7/", "dev/sb-1//80", "dev/sb-1/x/80", "dev/sb-1/7/0",
		"dev/sb-1/7/65536", "dev/sb-1/7/80/x", "dev/SB/7/80", "/sb-1/7/80", "dev/../7/80",
		"dev/sb-1/-7/80", "dev/sb-1/7/+80",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_INT(fwd_target_parse(bad[i], key, &gen, &port), -1);
}
