/* egress.c: subnet parsing and the nftables ruleset text (pure logic). */
#include "egress.h"
#include "unit.h"

#include <arpa/inet.h>

TEST(egress_subnet_parse)
{
	uint32_t net = 0;
	int prefix = 0;

	CHECK_INT(egress_parse_subnet("10.88.0.0/16", &net, &prefix), 0);
	CHECK_INT(ntohl(net), 0x0a580000);
	CHECK_INT(prefix, 16);
	CHECK_INT(egress_parse_subnet("100.72.0.0/28", &net, &prefix), 0);
	CHECK_INT(egress_parse_subnet("10.88.0.1/16", &net, &prefix), -1);   /* host bits */
	CHECK_INT(egress_parse_subnet("10.88.0.0/29", &net, &prefix), -1);   /* < two /30s */
	CHECK_INT(egress_parse_subnet("10.0.0.0/7", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("10.88.0.0", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("10.88.0.0/", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("10.88.0.0/16x", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("10.88.0/16", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("fd00::/64", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("", &net, &prefix), -1);
	CHECK_INT(egress_parse_subnet("999.1.1.0/24", &net, &prefix), -1);
}

TEST(egress_ruleset_text)
{
	char out[4096];

	CHECK_INT(egress_ruleset("sbx_agent_1_abcd", "10.88.0.0/16", "", out, sizeof(out)), 0);
	/* replaces a left-over table atomically */
	CHECK(strstr(out, "table inet sbx_agent_1_abcd\ndelete table inet sbx_agent_1_abcd\n") == out);
	CHECK(strstr(out, "hook input priority -10; policy accept;\n\t\tiifname \"sbx*\" drop\n") != NULL);
	CHECK(strstr(out, "iifname \"sbx*\" oifname \"sbx*\" drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx*\" meta nfproto ipv6 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx*\" ip daddr 10.88.0.0/16 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx*\" ip saddr != 10.88.0.0/16 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx*\" ip daddr @blocked4 drop") != NULL);
	CHECK(strstr(out, "169.254.0.0/16") != NULL);
	CHECK(strstr(out, "100.64.0.0/10") != NULL);
	CHECK(strstr(out, "172.16.0.0/12") != NULL);
	CHECK(strstr(out, "ip saddr 10.88.0.0/16 oifname != \"sbx*\" masquerade") != NULL);
	CHECK(strstr(out, "oifname !=  \"") == NULL);
	CHECK(strstr(out, "oifname != \"eth0\" drop") == NULL);
	CHECK_INT(egress_ruleset("t", "10.88.0.0/16", "eth0", out, sizeof(out)), 0);
	CHECK(strstr(out, "iifname \"sbx*\" oifname != \"eth0\" drop") != NULL);
	CHECK_INT(egress_ruleset("t", "10.88.0.0/16", "", out, 100), -1);
}
