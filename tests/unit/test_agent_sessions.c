/* Unit tests of the session marker scanner (agent_sess_scan_feed in
 * sandbox/features/agent_sessions.c). */
#include "agent_sessions.h"
#include "buf.h"
#include "unit.h"

#include <stdlib.h>

static const char mark[] = "0123456789abcdef0123456789abcdef";

static void collect(void *arg, const char *data, size_t n)
{
	buf_add(arg, data, n);
}

/* Feed text in pieces of step bytes; what came out goes to got. */
static void feed(struct agent_sess_scan *sc, const char *text, size_t len, size_t step,
		 struct buf *got)
{
	for (size_t off = 0; off < len; off += step) {
		size_t n = len - off < step ? len - off : step;

		agent_sess_scan_feed(sc, mark, text + off, n, collect, got);
	}
}

TEST(sess_scan_finds_the_marker_split_anywhere)
{
	char text[256];
	int n = snprintf(text, sizeof(text), "out\nmore\001%s 42\nafter", mark);

	CHECK(n > 0);
	for (size_t step = 1; step <= (size_t)n; step++) {
		struct agent_sess_scan sc = { 0 };
		struct buf got;

		buf_init(&got, 4096);
		feed(&sc, text, (size_t)n, step, &got);
		CHECK(sc.done);
		CHECK_INT(sc.rc, 42);
		CHECK_STR(got.data ? got.data : "", "out\nmore");
		buf_release(&got);
	}
}

TEST(sess_scan_passes_look_alikes_through)
{
	struct agent_sess_scan sc = { 0 };
	struct buf got;
	char text[256];
	/* a different marker, a prefix of ours, then ours without a newline yet */
	int n = snprintf(text, sizeof(text), "\001ffff 1\n\001%.10s|x\001%s 7", mark, mark);
	size_t passed = strlen("\001ffff 1\n") + 1 + 10 + 2;  /* all but our marker */

	buf_init(&got, 4096);
	agent_sess_scan_feed(&sc, mark, text, (size_t)n, collect, &got);
	CHECK(!sc.done);
	CHECK_INT(got.len, passed);
	agent_sess_scan_feed(&sc, mark, "\nlater", 6, collect, &got);
	CHECK(sc.done);
	CHECK_INT(sc.rc, 7);
	CHECK_INT(got.len, passed);
	/* once done, everything is dropped */
	agent_sess_scan_feed(&sc, mark, "background", 10, collect, &got);
	CHECK_INT(got.len, passed);
	buf_release(&got);
}

TEST(sess_scan_output_without_newline_stays_exact)
{
	struct agent_sess_scan sc = { 0 };
	struct buf got;
	char text[128];
	int n = snprintf(text, sizeof(text), "abc\001%s 0\n", mark);

	buf_init(&got, 4096);
	agent_sess_scan_feed(&sc, mark, text, (size_t)n, collect, &got);
	CHECK(sc.done);
	CHECK_INT(sc.rc, 0);
	CHECK_STR(got.data, "abc");
	buf_release(&got);
}

TEST(sess_scan_large_feeds_and_bad_status)
{
	struct agent_sess_scan sc = { 0 };
	size_t big = 100000;
	char *text = malloc(big + 64);
	struct buf got;
	int n;

	CHECK(text != NULL);
	if (!text)
		return;
	memset(text, 'z', big);
	n = snprintf(text + big, 64, "\001%s 999\n", mark);
	buf_init(&got, 1 << 20);
	/* one feed larger than a read chunk */
	agent_sess_scan_feed(&sc, mark, text, big + (size_t)n, collect, &got);
	CHECK(sc.done);
	CHECK_INT(sc.rc, 1);           /* out of 0..255: unreadable */
	CHECK_INT(got.len, big);
	buf_release(&got);
	free(text);
}
