/* Unit tests of the tunnel providers' pure parts (sandbox/tunnel*.c). */
#include "tunnel.h"
#include "unit.h"

TEST(tunnel_cf_url_from_the_box_line)
{
	char url[TUNNEL_URL_MAX];

	CHECK_INT(tunnel_cf_line_url("2024-05-01T10:00:00Z INF |  https://seasonal-deck-organisms-sf.trycloudflare.com"
				     "                 |", url, sizeof(url)), 1);
	CHECK_STR(url, "https://seasonal-deck-organisms-sf.trycloudflare.com");
	CHECK_INT(tunnel_cf_line_url("https://a1-b2.trycloudflare.com", url, sizeof(url)), 1);
	CHECK_STR(url, "https://a1-b2.trycloudflare.com");
}

TEST(tunnel_cf_url_ignores_other_urls)
{
	char url[TUNNEL_URL_MAX] = "";

	/* The service endpoint in an error message is not a tunnel. */
	CHECK_INT(tunnel_cf_line_url("ERR failed to request quick Tunnel: Post "
				     "\"https://api.trycloudflare.com/tunnel\": dial tcp", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("INF Requesting new quick Tunnel on trycloudflare.com...", url,
				     sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("see https://developers.cloudflare.com/x", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("https://x.trycloudflare.com.evil.example", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("https://x.trycloudflare.com/path", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("https://a.b.trycloudflare.com", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("https://-x.trycloudflare.com", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("http://x.trycloudflare.com", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("https://.trycloudflare.com", url, sizeof(url)), 0);
	CHECK_INT(tunnel_cf_line_url("https://", url, sizeof(url)), 0);
	/* The second URL of a line counts when the first does not. */
	CHECK_INT(tunnel_cf_line_url("https://api.trycloudflare.com https://ok-1.trycloudflare.com |", url,
				     sizeof(url)), 1);
	CHECK_STR(url, "https://ok-1.trycloudflare.com");
	/* Too small a buffer: not found rather than cut. */
	CHECK_INT(tunnel_cf_line_url("https://ok-1.trycloudflare.com", url, 10), 0);
}

TEST(tunnel_cf_ready_line)
{
	CHECK(tunnel_cf_line_ready("2024-05-01T10:00:01Z INF Registered tunnel connection connIndex=0 "
				   "connection=abc event=0 ip=198.41.200.13 location=fra protocol=quic"));
	CHECK(!tunnel_cf_line_ready("INF Starting tunnel tunnelID=abc"));
	CHECK(!tunnel_cf_line_ready(""));
}

TEST(tunnel_provider_table)
{
	CHECK(tunnel_provider_find("cloudflared") == &tunnel_cloudflared);
	CHECK(tunnel_provider_find("builtin") == NULL);   /* nothing runs for it on the agent */
	CHECK(tunnel_provider_find("") == NULL);
	CHECK(tunnel_provider_find(NULL) == NULL);
}

TEST(tunnel_which_resolves)
{
	char out[512];

	CHECK_INT(tunnel_which("sh", out, sizeof(out)), 0);
	CHECK(out[0] == '/');
	CHECK_INT(tunnel_which("/bin/sh", out, sizeof(out)), 0);
	CHECK_STR(out, "/bin/sh");
	CHECK_INT(tunnel_which("sbx-no-such-program-x", out, sizeof(out)), -1);
	CHECK_INT(tunnel_which("/nonexistent/cloudflared", out, sizeof(out)), -1);
	CHECK_INT(tunnel_which("relative/cloudflared", out, sizeof(out)), -1);
	CHECK_INT(tunnel_which("/etc", out, sizeof(out)), -1);   /* a directory */
	CHECK_INT(tunnel_which("", out, sizeof(out)), -1);
}
