/* Unit tests of the Redis key builders (sandbox/common/rkeys.c): the names
 * of docs/REDIS.md, with their hash tags. */
#include "unit.h"

#include "rkeys.h"

TEST(rkeys_names)
{
	char k[RKEYS_MAX];

	CHECK_STR(rkeys_sandbox(k, "dev", "box-1"), "sbx:sb:{dev/box-1}");
	CHECK_STR(rkeys_sandbox_ref(k, "dev/box-1"), "sbx:sb:{dev/box-1}");
	CHECK_STR(rkeys_sandbox_sub(k, "dev", "b", "tunnels"), "sbx:sb:{dev/b}:tunnels");
	CHECK_STR(rkeys_tunnel_claim(k, "dev", "b", 8080), "sbx:sb:{dev/b}:tunnels:claim:8080");
	CHECK_STR(rkeys_tenant(k, "dev", "sandboxes"), "sbx:tenant:{dev}:sandboxes");
	CHECK_STR(rkeys_tenant_label(k, "dev", "team", "a b"), "sbx:tenant:{dev}:label:team=a b");
	CHECK_STR(rkeys_node(k, "agent-1", NULL), "sbx:node:{agent-1}");
	CHECK_STR(rkeys_node(k, "agent-1", "alive"), "sbx:node:{agent-1}:alive");
	CHECK_STR(rkeys_apikey(k, "ab12"), "sbx:apikey:ab12");
	CHECK_STR(rkeys_preview(k, "cd34"), "sbx:preview:cd34");
	CHECK_STR(rkeys_tunnel(k, "t1"), "sbx:tunnel:t1");
	CHECK_STR(rkeys_ticket(k, "tk_00ff"), "sbx:ticket:tk_00ff");
	CHECK_STR(rkeys_snapshot(k, "t1", "sn-00ff00ff00ff00ff"), "sbx:snap:{t1}:sn-00ff00ff00ff00ff");
	CHECK_STR(RK_SANDBOX_SUB("t", "i", "ports"), "sbx:sb:{t/i}:ports");
	CHECK_STR(RKEYS_XADD_EVENT, "XADD sbx:events MAXLEN ~ 10000 * ");
}

/* The parts the Lua scripts build index keys from (rscripts.c) spell the
 * same keys as the builders. */
TEST(rkeys_script_parts_match_builders)
{
	char k[RKEYS_MAX];

	CHECK_STR(rkeys_node(k, "n1", "sandboxes"), RKEYS_NODE_HEAD "n1" RKEYS_SANDBOXES_TAIL);
	CHECK_STR(rkeys_node(k, "n1", "committed"), RKEYS_NODE_HEAD "n1" RKEYS_COMMITTED_TAIL);
	CHECK_STR(rkeys_tenant(k, "dev", "sandboxes"), RKEYS_TENANT_HEAD "dev" RKEYS_SANDBOXES_TAIL);
	CHECK_STR(rkeys_tenant(k, "dev", "usage"), RKEYS_TENANT_HEAD "dev" RKEYS_USAGE_TAIL);
	CHECK_STR(rkeys_tenant(k, "dev", "limits"), RKEYS_TENANT_HEAD "dev" RKEYS_LIMITS_TAIL);
	CHECK_STR(rkeys_tenant(k, "dev", "rate:requests"), RKEYS_TENANT_HEAD "dev" RKEYS_RATE_REQUESTS_TAIL);
	CHECK_STR(rkeys_tenant(k, "dev", "rate:creates"), RKEYS_TENANT_HEAD "dev" RKEYS_RATE_CREATES_TAIL);
	CHECK_STR(rkeys_tenant_label(k, "dev", "a", "b"), RKEYS_TENANT_HEAD "dev" RKEYS_LABEL_MID "a=b");
}

/* The longest valid names (63-byte tenant and id, a 63-byte label key and
 * a 255-byte value) fit: a truncated key would be another key. */
TEST(rkeys_longest_names_fit)
{
	char k[RKEYS_MAX], t[64], v[256];

	memset(t, 'a', 63);
	t[63] = '\0';
	memset(v, 'v', 255);
	v[255] = '\0';
	CHECK(strlen(rkeys_tenant_label(k, t, t, v)) == strlen("sbx:tenant:{}:label:=") + 63 * 2 + 255);
	CHECK(strlen(rkeys_tunnel_claim(k, t, t, 65535)) == strlen("sbx:sb:{/}:tunnels:claim:65535") + 126);
}
