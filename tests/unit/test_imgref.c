/* Unit tests of image references (sandbox/common/imgref.c). */
#include "unit.h"

#include "imgref.h"

#include <string.h>

static int parse(const char *s, struct imgref *r)
{
	struct sbx_err e = { 0 };
	int rc = imgref_parse(s, "docker.io", 1, r, &e);

	if (rc < 0 && e.code != SBX_E_VALIDATION)
		return -2;
	return rc;
}

TEST(imgref_defaults_and_library_rule)
{
	struct imgref r;
	struct sbx_err e = { 0 };
	char buf[IMGREF_MAX];

	CHECK_INT(parse("python:3.12", &r), 0);
	CHECK_STR(r.registry, "docker.io");
	CHECK_STR(r.host, "registry-1.docker.io");
	CHECK_STR(r.repo, "library/python");
	CHECK_STR(r.tag, "3.12");
	CHECK_INT(r.loopback, 0);
	CHECK_INT(parse("busybox", &r), 0);
	CHECK_STR(r.tag, "latest");
	CHECK_INT(imgref_format(&r, buf, sizeof(buf)), 0);
	CHECK_STR(buf, "docker.io/library/busybox:latest");
	CHECK_INT(parse("user/app", &r), 0);
	CHECK_STR(r.repo, "user/app");
	/* the rule is configurable, and only docker.io's */
	CHECK_INT(imgref_parse("python", "docker.io", 0, &r, &e), 0);
	CHECK_STR(r.repo, "python");
	CHECK_INT(imgref_parse("python", "ghcr.io", 1, &r, &e), 0);
	CHECK_STR(r.registry, "ghcr.io");
	CHECK_STR(r.repo, "python");
}

TEST(imgref_registries_tags_digests)
{
	struct imgref r;
	const char *dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char s[300];

	CHECK_INT(parse("localhost:5000/a/b-c:v1.0", &r), 0);
	CHECK_STR(r.registry, "localhost:5000");
	CHECK_STR(r.repo, "a/b-c");
	CHECK_STR(r.tag, "v1.0");
	CHECK_INT(r.loopback, 1);
	CHECK_INT(parse("localhost/x", &r), 0);
	CHECK_INT(r.loopback, 1);
	CHECK_INT(parse("127.0.0.1:41000/x", &r), 0);
	CHECK_INT(r.loopback, 1);
	CHECK_INT(parse("[::1]:5000/x", &r), 0);
	CHECK_INT(r.loopback, 1);
	CHECK_INT(parse("127.example.com/x", &r), 0);
	CHECK_INT(r.loopback, 0);
	CHECK_INT(parse("ghcr.io/o/r", &r), 0);
	CHECK_INT(r.loopback, 0);
	snprintf(s, sizeof(s), "ghcr.io/o/r@%s", dg);
	CHECK_INT(parse(s, &r), 0);
	CHECK_STR(r.tag, "");
	CHECK_STR(r.digest, dg);
	snprintf(s, sizeof(s), "r:t@%s", dg);
	CHECK_INT(parse(s, &r), 0);
	CHECK_STR(r.tag, "t");
	CHECK_INT(parse("default", &r), 0);
	CHECK_INT(parse("debian-12.1_py", &r), 0);
	CHECK_INT(parse("a__b", &r), 0);
}

TEST(imgref_refuses_bad_references)
{
	struct imgref r;
	const char *bad[] = {
		"", "A", "../x", ".x", "a/../b", "a//b", "a/", "/a", "a:", "a:-x", "a@sha256:12",
		"a@md5:0123456789abcdef0123456789abcdef", "a..b", "a_-b", "a___b", "x y",
		"localhost:99999/a", "local host/a", "a:b:c", "Host.io:/a", "[zz]/a", "a\n",
		"ghcr.io/A/b", "-a",
	};
	char longname[600];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = parse(bad[i], &r);

		if (rc != -1)
			fprintf(stderr, "accepted '%s'\n", bad[i]);
		CHECK_INT(rc, -1);
	}
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_INT(parse(longname, &r), -1);
	CHECK(imgref_valid_digest("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	CHECK(!imgref_valid_digest("sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
}
