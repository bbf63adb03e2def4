#include "unit.h"

#include "buf.h"
#include "conf.h"
#include "err.h"
#include "ids.h"
#include "jsonv.h"
#include "rerror.h"
#include "route.h"
#include "tcplisten.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

TEST(ids_sandbox)
{
	CHECK(ids_valid_sandbox("a"));
	CHECK(ids_valid_sandbox("my-box-1"));
	CHECK(!ids_valid_sandbox(""));
	CHECK(!ids_valid_sandbox("-a"));
	CHECK(!ids_valid_sandbox("a-"));
	CHECK(!ids_valid_sandbox("A"));
	CHECK(!ids_valid_sandbox("a{b"));
	CHECK(!ids_valid_sandbox("a}b"));
	CHECK(!ids_valid_sandbox(".."));
	CHECK(!ids_valid_sandbox("a/b"));
	CHECK(ids_valid_sandbox("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));  /* 63 */
	CHECK(!ids_valid_sandbox("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")); /* 64 */
}

TEST(ids_utf8)
{
	CHECK(ids_valid_utf8("h\xc3\xa9llo", 6));
	CHECK(!ids_valid_utf8("\xc3", 1));
	CHECK(!ids_valid_utf8("\xc0\xaf", 2));         /* overlong '/' */
	CHECK(!ids_valid_utf8("\xed\xa0\x80", 3));     /* surrogate */
	CHECK(!ids_valid_utf8("a\0b", 3));
}

TEST(err_mapping)
{
	struct sbx_err e;

	CHECK_INT(err_set(&e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' not found", "x"), -1);
	CHECK_INT(err_status(e.code), 404);
	CHECK_STR(err_name(e.code), "SANDBOX_NOT_FOUND");
	CHECK_STR(e.msg, "sandbox 'x' not found");
	err_prefix(&e, "lookup");
	CHECK_STR(e.msg, "lookup: sandbox 'x' not found");
	err_sys(&e, ENOENT, "cannot open '%s'", "/secret/host/path");
	CHECK_INT(err_status(e.code), 500);
	CHECK_STR(err_public_message(&e), "internal error");
	CHECK_INT(err_from_name("QUOTA_EXCEEDED"), SBX_E_QUOTA_EXCEEDED);
	CHECK_INT(err_status(SBX_E_QUOTA_EXCEEDED), 429);
	CHECK_INT(err_from_name("NOPE"), SBX_E_NONE);
	for (int i = 1; i < SBX_E__COUNT; i++)
		CHECK(err_status((enum sbx_ecode)i) >= 400);
}

TEST(buf_bounded)
{
	struct buf b;

	buf_init(&b, 8);
	CHECK_INT(buf_adds(&b, "12345"), 0);
	CHECK_INT(buf_printf(&b, "%d", 678), 0);
	CHECK_STR(b.data, "12345678");
	CHECK_INT(buf_adds(&b, "9"), -1);
	CHECK_STR(b.data, "12345678");
	buf_release(&b);
}

TEST(conf_parse_and_bounds)
{
	struct sbx_conf c;
	struct sbx_err e;

	conf_defaults(&c);
	CHECK_INT(c.api.workers, 4);
	CHECK_INT(conf_parse(&c, "t", "[api]\nworkers = 8 # comment\n[agent]\nuserns=off\n", &e), 0);
	CHECK_INT(c.api.workers, 8);
	CHECK_STR(c.agent.userns, "off");
	CHECK_INT(conf_parse(&c, "t", "[api]\nworkers = 0\n", &e), -1);
	CHECK(strstr(e.msg, "t:2") != NULL);
	CHECK_INT(conf_parse(&c, "t", "[api]\nworkerz = 2\n", &e), -1);
	CHECK(strstr(e.msg, "unknown key") != NULL);
	CHECK_INT(conf_parse(&c, "t", "[nope]\n", &e), -1);
	CHECK_INT(conf_parse(&c, "t", "workers = 2\n", &e), -1);
	CHECK_INT(conf_parse(&c, "t", "[api]\nworkers=2\nworkers=3\n", &e), -1);
	CHECK_INT(conf_parse(&c, "t", "[agent]\nuserns = maybe\n", &e), -1);
	CHECK_INT(conf_parse(&c, "t", "[cluster]\nnode_ttl = 3s\n", &e), 0);
	CHECK_INT(c.cluster.node_ttl_ms, 3000);
	CHECK_INT(conf_override(&c, "agent.name=agent-2", &e), 0);
	CHECK_STR(c.agent.name, "agent-2");
	CHECK_INT(conf_override(&c, "agent.nam=agent-2", &e), -1);
	CHECK_INT(conf_override(&c, "garbage", &e), -1);
	CHECK_INT(conf_override(&c, "agent.name=a#b", &e), -1);
	CHECK_INT(conf_override(&c, "agent.name= padded", &e), -1);
}

/* Every numeric key (snapshots.s3_part_mib, api.workers, ...) takes its
 * bounds and refuses one past each, by a message that names the key. */
TEST(conf_every_numeric_key_refuses_past_its_bounds)
{
	struct sbx_conf c;
	struct sbx_err e;
	char *text = NULL, section[64] = "";
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	unsigned checked = 0;

	CHECK(out != NULL);
	conf_defaults(&c);
	conf_print(&c, out);
	CHECK_INT(fclose(out), 0);
	for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		char key[64], value[64], a[200];
		int64_t lo, hi;

		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (sscanf(line, "[%63[a-z_]]", section) == 1)
			continue;
		if (sscanf(line, "%63[a-z0-9_] = %63s", key, value) != 2 ||
		    conf_bounds(section, key, &lo, &hi) < 0)
			continue;
		const char *unit = strstr(value, "ms") ? "ms" : "";
		const int64_t ok[] = { lo, hi }, bad[] = { lo - 1, hi + 1 };

		for (int i = 0; i < 2; i++) {
			CHECK(snprintf(a, sizeof a, "%s.%s=%lld%s", section, key,
				       (long long)ok[i], unit) < (int)sizeof a);
			CHECK_INT(conf_override(&c, a, &e), 0);
			if (bad[i] < 0 && !*unit)
				continue;    /* "-1" is not a number the parser takes */
			CHECK(snprintf(a, sizeof a, "%s.%s=%lld%s", section, key,
				       (long long)bad[i], unit) < (int)sizeof a);
			CHECK_INT(conf_override(&c, a, &e), -1);
			CHECK(strstr(e.msg, key) != NULL);
		}
		checked++;
	}
	free(text);
	CHECK(checked > 40);
	conf_defaults(&c);
	CHECK_INT(conf_override(&c, "snapshots.s3_part_mib=4", &e), -1);
	CHECK_INT(conf_override(&c, "snapshots.s3_part_mib=5121", &e), -1);
	CHECK_INT(conf_override(&c, "snapshots.s3_part_mib=5", &e), 0);
	CHECK_INT(c.snapshots.s3_part_mib, 5);
}

TEST(conf_durations)
{
	int64_t ms;

	CHECK_INT(conf_parse_duration("30s", &ms), 0);
	CHECK_INT(ms, 30000);
	CHECK_INT(conf_parse_duration("10m", &ms), 0);
	CHECK_INT(ms, 600000);
	CHECK_INT(conf_parse_duration("1h", &ms), 0);
	CHECK_INT(ms, 3600000);
	CHECK_INT(conf_parse_duration("250", &ms), 0);
	CHECK_INT(ms, 250);
	CHECK_INT(conf_parse_duration("-1s", &ms), -1);
	CHECK_INT(conf_parse_duration("1d", &ms), -1);
	CHECK_INT(conf_parse_duration("", &ms), -1);
	CHECK_INT(conf_parse_duration("99999999999999999999h", &ms), -1);
}

#define PARSE(text) jsonv_parse(text, strlen(text), &e)

TEST(jsonv_strict)
{
	static const struct jsonv_field spec[] = {
		{ "command", JV_STRING, 1 },
		{ "timeoutMs", JV_INTEGER, 0 },
		{ NULL, 0, 0 },
	};
	struct sbx_err e;
	json_t *v;

	v = PARSE("{\"command\":\"ls\",\"timeoutMs\":5}");
	CHECK(v != NULL);
	CHECK_INT(jsonv_check(v, spec, "the body", &e), 0);
	json_decref(v);
	CHECK(PARSE("{\"a\":1,\"a\":2}") == NULL);
	CHECK(PARSE("[1]") == NULL);
	CHECK(PARSE("{\"a\":\"\\u0000\"}") == NULL);
	CHECK(PARSE("{\"a\":\"\xff\"}") == NULL);
	CHECK(PARSE("{} x") == NULL);
	v = PARSE("{\"command\":\"ls\",\"bogus\":1}");
	CHECK_INT(jsonv_check(v, spec, "the body", &e), -1);
	CHECK(strstr(e.msg, "unknown field 'bogus'") != NULL);
	json_decref(v);
	v = PARSE("{\"timeoutMs\":\"5\"}");
	CHECK_INT(jsonv_check(v, spec, "the body", &e), -1);
	json_decref(v);
	v = jsonv_parse("", 0, &e);
	CHECK(json_is_object(v));
	CHECK_INT(jsonv_check(v, spec, "the body", &e), -1); /* command required */
	json_decref(v);
}

/* JSON routes take JSON, no type, or curl -d's form type; else 415. */
TEST(jsonv_media_types)
{
	struct sbx_err e = { 0 };

	CHECK_INT(jsonv_media_type(NULL, &e), 0);
	CHECK_INT(jsonv_media_type("", &e), 0);
	CHECK_INT(jsonv_media_type("application/json", &e), 0);
	CHECK_INT(jsonv_media_type(" Application/JSON; charset=utf-8", &e), 0);
	CHECK_INT(jsonv_media_type("application/x-www-form-urlencoded", &e), 0);
	CHECK_INT(jsonv_media_type("text/plain", &e), -1);
	CHECK_INT(err_status(e.code), 415);
	CHECK_INT(jsonv_media_type("application/jsonx", &e), -1);
	CHECK_INT(jsonv_media_type("application/json-seq", &e), -1);
	CHECK_INT(jsonv_media_type("; charset=utf-8", &e), -1);
}

/* A refused write, also from inside a script, is Redis unavailable; a bad
 * command or a script's own error is not. */
TEST(rerror_refusals)
{
	CHECK_INT(rerror_unavailable("NOREPLICAS Not enough good replicas to write."), 1);
	CHECK_INT(rerror_unavailable("NOREPLICAS Not enough good replicas to write. script: "
				     "67ed14c1, on @user_script:1."), 1);
	CHECK_INT(rerror_unavailable("READONLY You can't write against a read only replica."), 1);
	CHECK_INT(rerror_unavailable("MISCONF Redis is configured to save RDB snapshots"), 1);
	CHECK_INT(rerror_unavailable("OOM command not allowed when used memory > 'maxmemory'."), 1);
	CHECK_INT(rerror_unavailable("ERR Error running script (call to f_x): @user_script:3"), 0);
	CHECK_INT(rerror_unavailable("WRONGTYPE Operation against a key"), 0);
	CHECK_INT(rerror_unavailable("OOMX"), 0);
	CHECK_INT(rerror_unavailable(NULL), 0);
}

TEST(route_allow_list)
{
	char allow[16] = "";

	route_allow_add(allow, sizeof(allow), "GET");
	route_allow_add(allow, sizeof(allow), "PUT");
	route_allow_add(allow, sizeof(allow), "GET");
	CHECK(strcmp(allow, "GET, PUT") == 0);
	route_allow_add(allow, sizeof(allow), "DELETE");   /* does not fit */
	CHECK(strcmp(allow, "GET, PUT") == 0);
}

/* Both tiers build the Cloudflare SDK's error shape from err.c: the same
 * code names (INTERNAL is INTERNAL_ERROR to the SDK, in either tier). */
TEST(cf_error_shape)
{
	json_t *b;

	CHECK_STR(err_cf_code("INTERNAL"), "INTERNAL_ERROR");
	CHECK_STR(err_cf_code(NULL), "INTERNAL_ERROR");
	CHECK_STR(err_cf_code("NOT_REGULAR_FILE"), "FILESYSTEM_ERROR");
	CHECK_STR(err_cf_code("FILE_NOT_FOUND"), "FILE_NOT_FOUND");
	b = err_cf_body("INTERNAL_ERROR", NULL, 500, NULL);
	CHECK(b != NULL);
	CHECK_STR(json_string_value(json_object_get(b, "code")), "INTERNAL_ERROR");
	CHECK_STR(json_string_value(json_object_get(b, "message")), "internal error");
	CHECK_INT(json_integer_value(json_object_get(b, "httpStatus")), 500);
	CHECK(json_is_object(json_object_get(b, "context")));
	CHECK(json_string_length(json_object_get(b, "timestamp")) >= 20);
	json_decref(b);
}

/* The agent's compat errors are built from the error struct: its status,
 * the SDK's code name, the public message (an internal one is hidden). */
TEST(cf_error_of_struct)
{
	struct sbx_err e;
	json_t *b;

	err_set(&e, SBX_E_INTERNAL, "secret detail of %s", "the host");
	b = err_cf_error(&e, NULL, json_pack("{s:s}", "path", "/x"));
	CHECK(b != NULL);
	CHECK_STR(json_string_value(json_object_get(b, "code")), "INTERNAL_ERROR");
	CHECK_STR(json_string_value(json_object_get(b, "message")), "internal error");
	CHECK_INT(json_integer_value(json_object_get(b, "httpStatus")), 500);
	CHECK_STR(json_string_value(json_object_get(json_object_get(b, "context"), "path")), "/x");
	json_decref(b);
	err_set(&e, SBX_E_CONFLICT, "session 'a' exists");
	b = err_cf_error(&e, "SESSION_ALREADY_EXISTS", NULL);
	CHECK(b != NULL);
	CHECK_STR(json_string_value(json_object_get(b, "code")), "SESSION_ALREADY_EXISTS");
	CHECK_STR(json_string_value(json_object_get(b, "message")), "session 'a' exists");
	CHECK_INT(json_integer_value(json_object_get(b, "httpStatus")), 409);
	json_decref(b);
}

TEST(common_tcplisten_sockaddr)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	socklen_t len = 0;

	CHECK_INT(tcplisten_sockaddr("127.0.0.1", 7070, &ss, &len), 0);
	CHECK_INT(ss.ss_family, AF_INET);
	CHECK_INT((int)len, (int)sizeof(*in4));
	CHECK_INT(ntohs(in4->sin_port), 7070);
	CHECK(in4->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	CHECK_INT(tcplisten_sockaddr("::1", 0, &ss, &len), 0);
	CHECK_INT(ss.ss_family, AF_INET6);
	CHECK_INT((int)len, (int)sizeof(*in6));
	CHECK_INT(ntohs(in6->sin6_port), 0);
	CHECK(IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr));
	CHECK_INT(tcplisten_sockaddr("localhost", 80, &ss, &len), -1);
	CHECK_INT(tcplisten_sockaddr("[::1]", 80, &ss, &len), -1);
	CHECK_INT(tcplisten_sockaddr("", 80, &ss, &len), -1);
}

TEST(common_util_open_in_root)
{
	char dir[] = "/tmp/sbx-unit-root-XXXXXX", path[64];
	int root, fd;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/f", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/abs", dir);
	CHECK_INT(symlink("/f", path), 0);        /* absolute: resolves in the root */
	snprintf(path, sizeof(path), "%s/up", dir);
	CHECK_INT(symlink("../../../etc/passwd", path), 0);
	root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);

	fd = util_open_in_root(root, "f", O_RDONLY, 0, 0);
	CHECK(fd >= 0);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	fd = util_open_in_root(root, "abs", O_RDONLY, 0, 0);
	CHECK(fd >= 0);
	close(fd);
	errno = 0;
	CHECK_INT(util_open_in_root(root, "up", O_RDONLY, 0, 0), -1);
	CHECK_INT(errno, ENOENT);                 /* clamped to the root, not /etc */
	errno = 0;
	CHECK_INT(util_open_in_root(root, "abs", O_RDONLY, 0, RESOLVE_NO_SYMLINKS), -1);
	CHECK_INT(errno, ELOOP);
	fd = util_open_in_root(root, "new", O_WRONLY | O_CREAT | O_EXCL, 0640, 0);
	CHECK(fd >= 0);
	close(fd);

	close(root);
	for (const char *n = "f\0abs\0up\0new\0"; *n; n += strlen(n) + 1) {
		snprintf(path, sizeof(path), "%s/%s", dir, n);
		unlink(path);
	}
	rmdir(dir);
}
