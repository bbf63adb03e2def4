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

static const struct egress_rules defaults = {
	.table = "sbx_agent_1_abcd", .subnet = "10.88.0.0/16", .links = "sbx1a2b", .iface = "",
	.allow = "", .conn_max = 0, .rate_mbit = 0,
};

TEST(egress_ruleset_text)
{
	char out[16384];
	struct egress_rules r = defaults;

	CHECK_INT(egress_ruleset(&r, out, sizeof(out)), 0);
	/* replaces a left-over table atomically */
	CHECK(strstr(out, "table inet sbx_agent_1_abcd\ndelete table inet sbx_agent_1_abcd\n") == out);
	CHECK(strstr(out, "hook input priority -10; policy accept;\n\t\tiifname \"sbx1a2b*\" drop\n") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" oifname \"sbx*\" drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" meta nfproto ipv6 drop") != NULL);
	CHECK(strstr(out, "oifname \"sbx1a2b*\" meta nfproto ipv6 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" ip daddr 10.88.0.0/16 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" ip saddr != 10.88.0.0/16 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" ip daddr @blocked4 ip daddr != @allowed4 drop") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" ip6 daddr @blocked6 drop") != NULL);
	CHECK(strstr(out, "oifname \"sbx1a2b*\" ct state established,related accept\n"
			  "\t\toifname \"sbx1a2b*\" drop\n") != NULL);
	CHECK(strstr(out, "ip saddr 10.88.0.0/16 oifname != \"sbx*\" masquerade") != NULL);
	CHECK(strstr(out, "oifname !=  \"") == NULL);
	CHECK(strstr(out, "oifname != \"eth0\" drop") == NULL);
	CHECK(strstr(out, "ct count") == NULL);
	CHECK(strstr(out, "limit rate") == NULL);
	CHECK(strstr(out, "elements = { }") == NULL);   /* an empty allowed4 has no elements line */
	r.iface = "eth0";
	CHECK_INT(egress_ruleset(&r, out, sizeof(out)), 0);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" oifname != \"eth0\" drop") != NULL);
	CHECK_INT(egress_ruleset(&r, out, 100), -1);
}

/* Two agents of two subnets: no rule of one names the other's links. */
TEST(egress_ruleset_is_the_agents_own)
{
	char a[16384], b[16384];
	struct egress_rules ra = defaults, rb = defaults;

	rb.table = "sbx_agent_2_beef";
	rb.subnet = "10.87.0.0/16";
	rb.links = "sbx9c3d";
	CHECK_INT(egress_ruleset(&ra, a, sizeof(a)), 0);
	CHECK_INT(egress_ruleset(&rb, b, sizeof(b)), 0);
	CHECK(strstr(a, "sbx9c3d") == NULL && strstr(b, "sbx1a2b") == NULL);
	CHECK(strstr(a, "sbx_agent_2_beef") == NULL && strstr(b, "sbx_agent_1_abcd") == NULL);
	/* the only match on any sandbox link: where a packet goes, never where it comes from */
	for (const char *p = a; (p = strstr(p, "\"sbx*\"")) != NULL; p++)
		CHECK(strncmp(p - 8, "oifname ", 8) == 0 || strncmp(p - 11, "oifname != ", 11) == 0);
	CHECK(strstr(a, "iifname \"sbx*\"") == NULL);
}

/* Each of cidrs[] is an element of the set text (elements comma-separated). */
static void all_in(const char *set, const char *const *cidrs, size_t n, int *unit_failed)
{
	char want[64];

	for (size_t i = 0; i < n; i++) {
		snprintf(want, sizeof(want), " %s,", cidrs[i]);
		if (!strstr(set, want))
			snprintf(want, sizeof(want), " %s ", cidrs[i]);
		if (!strstr(set, want))
			fprintf(stderr, "  not blocked: %s\n", cidrs[i]);
		CHECK(strstr(set, want) != NULL);
	}
}

/* Every IANA special-purpose range (v4, v6), multicast, and the cloud
 * platform addresses are in the sets. */
TEST(egress_ruleset_blocks_special_ranges)
{
	static const char *const v4[] = {
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
		"192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"169.254.169.254/32", "168.63.129.16/32", "100.100.100.200/32", "161.26.0.0/16",
	};
	static const char *const v6[] = {
		"::/128", "::1/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64",
		"100:0:0:1::/64", "2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20", "5f00::/16",
		"fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "fd00:ec2::254/128", "fd00:ec2::23/128",
	};
	char out[16384], *s4, *s6, *end4, *end6;
	struct egress_rules r = defaults;

	CHECK_INT(egress_ruleset(&r, out, sizeof(out)), 0);
	s4 = strstr(out, "set blocked4 {");
	s6 = strstr(out, "set blocked6 {");
	CHECK(s4 && s6);
	if (!s4 || !s6)
		return;
	end4 = strchr(strstr(s4, "elements = {"), '}');
	end6 = strchr(strstr(s6, "elements = {"), '}');
	*end4 = *end6 = '\0';
	all_in(s4, v4, sizeof(v4) / sizeof(v4[0]), unit_failed);
	all_in(s6, v6, sizeof(v6) / sizeof(v6[0]), unit_failed);
}

TEST(egress_ruleset_limits)
{
	char out[16384];
	struct egress_rules r = defaults;

	r.conn_max = 8;
	r.rate_mbit = 200;
	r.allow = "198.51.100.1/32, 10.1.0.0/16";
	CHECK_INT(egress_ruleset(&r, out, sizeof(out)), 0);
	CHECK(strstr(out, "\tset conns4 {\n\t\ttype ipv4_addr\n\t\tsize 65535\n\t\tflags dynamic\n\t}\n") != NULL);
	CHECK(strstr(out, "iifname \"sbx1a2b*\" ct state new add @conns4 { ip saddr ct count over 8 } "
			  "counter reject with icmpx type admin-prohibited\n") != NULL);
	/* 200 Mbit/s = 25000 kbytes/s, a tenth of it as burst */
	CHECK(strstr(out, "iifname \"sbx1a2b*\" update @rate_out4 { ip saddr limit rate over 25000 "
			  "kbytes/second burst 2500 kbytes } counter drop\n") != NULL);
	CHECK(strstr(out, "oifname \"sbx1a2b*\" update @rate_in4 { ip daddr limit rate over 25000 "
			  "kbytes/second burst 2500 kbytes } counter drop\n") != NULL);
	/* the limits come before the accept of established traffic */
	CHECK(strstr(out, "update @rate_in4") < strstr(out, "ct state established,related accept"));
	CHECK(strstr(out, "elements = { 198.51.100.1/32, 10.1.0.0/16 }") != NULL);
}

TEST(egress_allow_parse)
{
	char out[256];

	CHECK_INT(egress_parse_allow("", out, sizeof(out)), 0);
	CHECK_STR(out, "");
	CHECK_INT(egress_parse_allow("198.51.100.1", out, sizeof(out)), 0);
	CHECK_STR(out, "198.51.100.1/32");
	CHECK_INT(egress_parse_allow(" 10.1.0.0/16 ,192.168.5.5/32", out, sizeof(out)), 0);
	CHECK_STR(out, "10.1.0.0/16, 192.168.5.5/32");
	CHECK_INT(egress_parse_allow("10.1.0.1/16", out, sizeof(out)), -1);   /* host bits */
	CHECK_INT(egress_parse_allow("10.1.0.0/33", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow("10.1.0.0/", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow("fd00::/8", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow("1.2.3.4,", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow(",1.2.3.4", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow("1.2.3.4 } drop", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow("1.2.3.4;flush ruleset", out, sizeof(out)), -1);
	CHECK_INT(egress_parse_allow("1.2.3.4, 5.6.7.8", out, 10), -1);
}
