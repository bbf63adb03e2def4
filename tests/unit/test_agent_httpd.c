/* Unit tests of the agent's HTTP plumbing: routes, listen addresses, secrets. */
#include "agent.h"
#include "httpd.h"
#include "unit.h"

TEST(agent_httpd_match)
{
	char p[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];

	CHECK_INT(httpd_match("/agent/v1/sandboxes", "/agent/v1/sandboxes", p), 0);
	CHECK_INT(httpd_match("/agent/v1/sandboxes", "/agent/v1/sandboxes/", p), -1);
	CHECK_INT(httpd_match("/agent/v1/sandboxes/{tenant}/{id}", "/agent/v1/sandboxes/dev/box1", p), 2);
	CHECK_STR(p[0], "dev");
	CHECK_STR(p[1], "box1");
	CHECK_INT(httpd_match("/agent/v1/sandboxes/{tenant}/{id}", "/agent/v1/sandboxes/dev/box1/stop", p), -1);
	CHECK_INT(httpd_match("/agent/v1/sandboxes/{tenant}/{id}", "/agent/v1/sandboxes/dev/", p), -1);
	CHECK_INT(httpd_match("/agent/v1/sandboxes/{tenant}/{id}", "/agent/v1/sandboxes//box1", p), -1);
	CHECK_INT(httpd_match("/v1/sandboxes/{id}/exec", "/v1/sandboxes/abc/exec", p), 1);
	CHECK_STR(p[0], "abc");
	CHECK_INT(httpd_match("/v1/sandboxes/{id}/exec", "/v1/sandboxes/abc/execx", p), -1);
	CHECK_INT(httpd_match("/v1/sandboxes/{id}/exec", "/v1/sandboxes/abc/exe", p), -1);
	CHECK_INT(httpd_match("/v1/sandboxes/{id}/exec", "", p), -1);
}

TEST(agent_httpd_match_long_segment)
{
	char p[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
	char path[400];

	memset(path, 'a', sizeof(path));
	memcpy(path, "/v1/sandboxes/", 14);
	memcpy(path + 300, "/exec", 6);
	CHECK_INT(httpd_match("/v1/sandboxes/{id}/exec", path, p), -1);
}

TEST(agent_routes_table)
{
	char p[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
	int found = 0;

	CHECK(agent_routes_count >= 6);
	for (size_t i = 0; i < agent_routes_count; i++) {
		CHECK(agent_routes[i].fn != NULL);
		CHECK(agent_routes[i].pattern[0] == '/');
		if (httpd_match(agent_routes[i].pattern, "/agent/v1/sandboxes/t/x/stop", p) >= 0 &&
		    strcmp(agent_routes[i].method, "POST") == 0)
			found++;
	}
	CHECK_INT(found, 1);
}

TEST(agent_httpd_parse_listen)
{
	char host[64];
	int port = 0;

	CHECK_INT(httpd_parse_listen("127.0.0.1:7070", host, sizeof(host), &port), 0);
	CHECK_STR(host, "127.0.0.1");
	CHECK_INT(port, 7070);
	CHECK_INT(httpd_parse_listen("[::1]:80", host, sizeof(host), &port), 0);
	CHECK_STR(host, "::1");
	CHECK_INT(port, 80);
	CHECK_INT(httpd_parse_listen("127.0.0.1", host, sizeof(host), &port), -1);
	CHECK_INT(httpd_parse_listen("127.0.0.1:0", host, sizeof(host), &port), -1);
	CHECK_INT(httpd_parse_listen("127.0.0.1:65536", host, sizeof(host), &port), -1);
	CHECK_INT(httpd_parse_listen(":80", host, sizeof(host), &port), -1);
	CHECK_INT(httpd_parse_listen("::1:80", host, sizeof(host), &port), -1);
	CHECK_INT(httpd_parse_listen("", host, sizeof(host), &port), -1);
}

TEST(agent_httpd_secret_equal)
{
	CHECK_INT(httpd_secret_equal("s3cret", "s3cret"), 1);
	CHECK_INT(httpd_secret_equal("s3cre", "s3cret"), 0);
	CHECK_INT(httpd_secret_equal("s3cretX", "s3cret"), 0);
	CHECK_INT(httpd_secret_equal("S3cret", "s3cret"), 0);
	CHECK_INT(httpd_secret_equal("", "s3cret"), 0);
	CHECK_INT(httpd_secret_equal("", ""), 0); /* an empty secret never matches */
}
