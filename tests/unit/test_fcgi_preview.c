/* Preview URLs and tunnels: ports, host labels, URLs, tokens (fcgi/preview.c). */
#include "unit.h"
#include "conf.h"
#include "preview.h"

TEST(fcgi_preview_parse_port)
{
	struct sbx_err e;
	int port = 0;

	CHECK_INT(preview_parse_port("8000", &port, &e), 0);
	CHECK_INT(port, 8000);
	CHECK_INT(preview_parse_port("1024", &port, &e), 0);
	CHECK_INT(preview_parse_port("65535", &port, &e), 0);
	CHECK_INT(port, 65535);
	const char *bad[] = { "", "80", "1023", "65536", "70000", "abc", "08000", "-1", "+8000",
			      "8000 ", "123456", NULL };
	for (int i = 0; bad[i]; i++) {
		CHECK_INT(preview_parse_port(bad[i], &port, &e), -1);
		CHECK_INT(e.code, SBX_E_INVALID_PORT);
	}
	CHECK_INT(preview_parse_port(NULL, &port, &e), -1);
}

TEST(fcgi_preview_host_label)
{
	char label[PREVIEW_LABEL_MAX];

	CHECK_INT(preview_host_label("8000-box-tok.preview.localhost", "preview.localhost", label,
				     sizeof(label)), 0);
	CHECK_STR(label, "8000-box-tok");
	CHECK_INT(preview_host_label("a.PREVIEW.localhost", "preview.localhost", label, sizeof(label)), 0);
	CHECK_STR(label, "a");
	CHECK_INT(preview_host_label("preview.localhost", "preview.localhost", label, sizeof(label)), -1);
	CHECK_INT(preview_host_label(".preview.localhost", "preview.localhost", label, sizeof(label)), -1);
	CHECK_INT(preview_host_label("a.b.preview.localhost", "preview.localhost", label, sizeof(label)), -1);
	CHECK_INT(preview_host_label("a.xpreview.localhost", "preview.localhost", label, sizeof(label)), -1);
	CHECK_INT(preview_host_label("a.example.com", "preview.localhost", label, sizeof(label)), -1);
	CHECK_INT(preview_host_label(NULL, "preview.localhost", label, sizeof(label)), -1);
}

TEST(fcgi_preview_parse_label)
{
	char id[64], token[PREVIEW_TOKEN_MAX + 1];
	int port = 0;

	CHECK_INT(preview_parse_label("8000-my-box-abc_1", &port, id, token), 0);
	CHECK_INT(port, 8000);
	CHECK_STR(id, "my-box");
	CHECK_STR(token, "abc_1");
	CHECK_INT(preview_parse_label("3000-b-t", &port, id, token), 0);
	CHECK_STR(id, "b");
	const char *bad[] = { "8000-box", "8000--tok", "80-box-tok", "x-box-tok", "8000-box-",
			      "-box-tok", "8000-Box-tok", "8000-box-TOK",
			      "8000-box-aaaaaaaaaaaaaaaaa", "8000-box--tok", "08000-box-tok", NULL };
	for (int i = 0; bad[i]; i++)
		CHECK_INT(preview_parse_label(bad[i], &port, id, token), -1);
}

TEST(fcgi_preview_tunnel_label)
{
	char tid[PREVIEW_TUNNEL_ID_LEN + 1];

	CHECK_INT(preview_tunnel_label("t-0123456789abcdef", tid), 1);
	CHECK_STR(tid, "0123456789abcdef");
	CHECK_INT(preview_tunnel_label("t-0123456789abcde", tid), 0);
	CHECK_INT(preview_tunnel_label("t-0123456789abcdefg", tid), 0);
	CHECK_INT(preview_tunnel_label("t-0123456789ABCDEF", tid), 0);
	CHECK_INT(preview_tunnel_label("8000-t-abc", tid), 0);
}

TEST(fcgi_preview_url)
{
	struct sbx_conf c;
	struct sbx_err e;
	char url[256];

	conf_defaults(&c);
	snprintf(c.api.public_url, sizeof(c.api.public_url), "http://127.0.0.1:8080");
	CHECK_INT(preview_url(&c, "8000-b-t", url, sizeof(url), &e), 0);
	CHECK_STR(url, "http://8000-b-t.preview.localhost:8080");
	snprintf(c.api.public_url, sizeof(c.api.public_url), "HTTPS://api.example.com/");
	snprintf(c.api.preview_domain, sizeof(c.api.preview_domain), "p.example.com");
	CHECK_INT(preview_url(&c, "t-x", url, sizeof(url), &e), 0);
	CHECK_STR(url, "https://t-x.p.example.com");
	snprintf(c.api.public_url, sizeof(c.api.public_url), "https://[::1]:443");
	CHECK_INT(preview_url(&c, "t-x", url, sizeof(url), &e), 0);
	CHECK_STR(url, "https://t-x.p.example.com");
	snprintf(c.api.public_url, sizeof(c.api.public_url), "http://h:80x");
	CHECK_INT(preview_url(&c, "t-x", url, sizeof(url), &e), -1);
	snprintf(c.api.public_url, sizeof(c.api.public_url), "ftp://h");
	CHECK_INT(preview_url(&c, "t-x", url, sizeof(url), &e), -1);
	CHECK_INT(preview_url(&c, "t-x", url, 8, &e), -1);
}

TEST(fcgi_preview_tokens)
{
	struct sbx_err e;
	char a[17], b[17], key[RKEYS_MAX], key2[RKEYS_MAX];

	CHECK_INT(preview_random_id(a, 16, &e), 0);
	CHECK_INT(preview_random_id(b, 16, &e), 0);
	CHECK_INT((int)strlen(a), 16);
	CHECK_INT((int)strspn(a, "abcdefghijklmnopqrstuvwxyz0123456789"), 16);
	CHECK(strcmp(a, b) != 0);
	CHECK_INT(preview_const_equal("abc", "abc"), 1);
	CHECK_INT(preview_const_equal("abc", "abd"), 0);
	CHECK_INT(preview_const_equal("ab", "abc"), 0);
	CHECK_INT(preview_const_equal("abcd", "abc"), 0);
	CHECK_INT(preview_const_equal("", ""), 1);
	CHECK_INT(preview_index_key(8000, "box", "tok", key), 0);
	CHECK_INT(preview_index_key(8001, "box", "tok", key2), 0);
	CHECK(strncmp(key, "sbx:preview:", 12) == 0 && strlen(key) == 12 + 64);
	CHECK(strcmp(key, key2) != 0);
	CHECK_INT(preview_address_ok("127.0.0.1:4000"), 1);
	CHECK_INT(preview_address_ok("[::1]:4000"), 1);
	CHECK_INT(preview_address_ok("127.0.0.1"), 0);
	CHECK_INT(preview_address_ok("a b:1"), 0);
	CHECK_INT(preview_address_ok("x:1/evil"), 0);
}
