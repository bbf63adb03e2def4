/* Unit tests of sandbox/agent/fspath.c: path rules, Range, content types, modes. */
#include "unit.h"
#include "fspath.h"

#include <stdlib.h>

static int parse(const char *p, struct fspath *fp)
{
	struct sbx_err e;
	return fspath_parse(p, strlen(p), fp, &e);
}

TEST(fspath_normalises)
{
	struct fspath fp;

	CHECK_INT(parse("a/b.txt", &fp), 0);
	CHECK_STR(fp.rel, "workspace/a/b.txt");
	CHECK_STR(fp.abs, "/workspace/a/b.txt");
	CHECK_STR(fp.name, "b.txt");
	CHECK_INT(fp.parent_len, strlen("workspace/a"));
	CHECK_INT(parse("//etc/./hosts/", &fp), 0);
	CHECK_STR(fp.rel, "etc/hosts");
	CHECK_STR(fp.abs, "/etc/hosts");
	CHECK_INT(parse("/x", &fp), 0);
	CHECK_INT(fp.parent_len, 0);
	CHECK_STR(fp.name, "x");
	CHECK_INT(parse("/", &fp), 0);
	CHECK_STR(fp.rel, ".");
	CHECK_STR(fp.abs, "/");
	CHECK_STR(fp.name, "");
	CHECK_INT(parse("", &fp), 0);
	CHECK_STR(fp.abs, "/workspace");
	CHECK_INT(parse("a/.../b", &fp), 0);   /* "..." is a name */
}

TEST(fspath_refuses_hostile)
{
	struct fspath fp;
	struct sbx_err e;
	char *long_path = malloc(FSPATH_MAX + 2), name[FSPATH_NAME_MAX + 2];

	CHECK_INT(parse("..", &fp), -1);
	CHECK_INT(parse("/a/../../etc", &fp), -1);
	CHECK_INT(parse("a/..", &fp), -1);
	CHECK_INT(fspath_parse("a\0b", 3, &fp, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(parse("a\xff", &fp), -1);
	CHECK_INT(parse("\xc0\xaf", &fp), -1);
	memset(long_path, 'a', FSPATH_MAX + 1);
	long_path[FSPATH_MAX + 1] = '\0';
	CHECK_INT(parse(long_path, &fp), -1);
	free(long_path);
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	CHECK_INT(parse(name, &fp), -1);
	name[FSPATH_NAME_MAX] = '\0';
	CHECK_INT(parse(name, &fp), 0);
}

TEST(fspath_decodes_urls)
{
	struct fspath fp;
	struct sbx_err e;

	CHECK_INT(fspath_from_url("%2Fetc%2Fpasswd", &fp, &e), 0);
	CHECK_STR(fp.abs, "/etc/passwd");
	CHECK_INT(fspath_from_url("a%20b/c", &fp, &e), 0);
	CHECK_STR(fp.abs, "/workspace/a b/c");
	CHECK_INT(fspath_from_url("a%00b", &fp, &e), -1);
	CHECK_INT(fspath_from_url("a%2", &fp, &e), -1);
	CHECK_INT(fspath_from_url("a%zz", &fp, &e), -1);
	CHECK_INT(fspath_from_url("%2e%2e/x", &fp, &e), -1);
	CHECK_INT(fspath_from_url("a%2F..%2Fb", &fp, &e), -1);
	CHECK_INT(fspath_from_url("%ff", &fp, &e), -1);
}

TEST(fspath_ranges)
{
	uint64_t a = 0, b = 0;

	CHECK_INT(fspath_range(NULL, 10, &a, &b), 0);
	CHECK_INT(fspath_range("bytes=2-4", 10, &a, &b), 1);
	CHECK_INT(a, 2);
	CHECK_INT(b, 4);
	CHECK_INT(fspath_range("bytes=7-", 10, &a, &b), 1);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=-3", 10, &a, &b), 1);
	CHECK_INT(a, 7);
	CHECK_INT(fspath_range("bytes=-30", 10, &a, &b), 1);
	CHECK_INT(a, 0);
	CHECK_INT(fspath_range("bytes=5-100", 10, &a, &b), 1);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=10-", 10, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=-0", 10, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=0-", 0, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=4-2", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=x-2", 10, &a, &b), -1);
	CHECK_INT(fspath_range("items=1-2", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=1-2,4-5", 10, &a, &b), 0);
	/* A first position past any file is unsatisfiable, not malformed. */
	CHECK_INT(fspath_range("bytes=99999999999999999999-", 10, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=18446744073709551615-", 10, &a, &b), -2);
}

/* RFC 9110 14.1.2: positions have no digit bound; a last position past
 * the end is clamped, a suffix longer than the file is all of it. */
TEST(fspath_range_edges)
{
	uint64_t a = 7, b = 7;

	CHECK_INT(fspath_range("bytes=0-18446744073709551615", 10, &a, &b), 1);
	CHECK_INT(a, 0);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=3-18446744073709551616", 10, &a, &b), 1);
	CHECK_INT(a, 3);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=0-999999999999999999999999999999", 10, &a, &b), 1);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=-18446744073709551616", 10, &a, &b), 1);
	CHECK_INT(a, 0);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=-10", 10, &a, &b), 1);
	CHECK_INT(a, 0);
	CHECK_INT(fspath_range("bytes=-1", 10, &a, &b), 1);
	CHECK_INT(a, 9);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=9-", 10, &a, &b), 1);
	CHECK_INT(a, 9);
	CHECK_INT(b, 9);
	CHECK_INT(fspath_range("bytes=0-0", 10, &a, &b), 1);
	CHECK_INT(b, 0);
	/* The range unit is case-insensitive; spaces around the set are OWS. */
	CHECK_INT(fspath_range("Bytes=1-2", 10, &a, &b), 1);
	CHECK_INT(a, 1);
	CHECK_INT(fspath_range("bytes= 1-2 ", 10, &a, &b), 1);
	CHECK_INT(b, 2);
	/* Unsatisfiable: 416 with Content-Range: bytes * /size. */
	CHECK_INT(fspath_range("bytes=-5", 0, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=-18446744073709551616", 0, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=10-20", 10, &a, &b), -2);
	CHECK_INT(fspath_range("bytes=18446744073709551615-18446744073709551615", 10, &a, &b), -2);
	/* Malformed: ignored (200, the whole file). */
	CHECK_INT(fspath_range("bytes=", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=-", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=1-2-3", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=+1-2", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=1 -2", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes=99999999999999999999-5", 10, &a, &b), -1);
	CHECK_INT(fspath_range("bytes = 1-2", 10, &a, &b), -1);
}

TEST(fspath_mime_and_mode)
{
	unsigned m = 0;

	CHECK_STR(fspath_mime("a.PNG"), "image/png");
	CHECK_STR(fspath_mime("x.tar"), "application/x-tar");
	CHECK_STR(fspath_mime(".bashrc"), "application/octet-stream");
	CHECK_STR(fspath_mime("noext"), "application/octet-stream");
	CHECK_INT(fspath_mode("0644", &m), 0);
	CHECK_INT(m, 0644);
	CHECK_INT(fspath_mode("755", &m), 0);
	CHECK_INT(m, 0755);
	CHECK_INT(fspath_mode("4755", &m), -1);
	CHECK_INT(fspath_mode("0999", &m), -1);
	CHECK_INT(fspath_mode("", &m), -1);
}
