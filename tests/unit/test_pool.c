/*
 * test_pool.c — the pure parts of the warm pool (sandbox/runtime/pool.h): which
 * specs it serves and the /etc/hosts text it writes at a claim.
 */
#include "pool.h"
#include "unit.h"

static struct sbx_conf pool_conf(void)
{
	struct sbx_conf c;

	conf_defaults(&c);
	return c;
}

TEST(pool_matches_default_spec_only)
{
	struct sbx_conf c = pool_conf();
	struct rt_spec s = { .key = "t.a", .hostname = "a", .image = "default" };

	CHECK_INT(pool_matches(&c, &s), 1);
	s.image = NULL;
	CHECK_INT(pool_matches(&c, &s), 1);
	s.image = "";
	CHECK_INT(pool_matches(&c, &s), 1);
	s.image = "debian";
	CHECK_INT(pool_matches(&c, &s), 0);
	s.image = "default";
	s.network = RT_NET_EGRESS;
	CHECK_INT(pool_matches(&c, &s), 0);
	s.network = RT_NET_NONE;
	/* memory, cpus and pids are set at the claim: any value matches */
	s.limits.memory_mib = 64;
	s.limits.cpus_milli = 250;
	s.limits.pids = 16;
	CHECK_INT(pool_matches(&c, &s), 1);
	/* the disk (tmpfs upper) cannot change: only the configured default */
	s.limits.disk_mib = c.sandbox.disk_mib;
	CHECK_INT(pool_matches(&c, &s), 1);
	s.limits.disk_mib = c.sandbox.disk_mib + 1;
	CHECK_INT(pool_matches(&c, &s), 0);
	s.limits.disk_mib = 0;
	CHECK_INT(pool_matches(&c, &s), 1);
}

TEST(pool_hosts_text_names_the_sandbox)
{
	char buf[256], small[16];

	CHECK_INT(pool_hosts_text(buf, sizeof(buf), "box-1"), 0);
	CHECK_STR(buf, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
		       "127.0.1.1\tbox-1\n");
	CHECK_INT(pool_hosts_text(small, sizeof(small), "box-1"), -1);
}

TEST(pool_off_by_default)
{
	struct sbx_conf c = pool_conf();
	struct sbx_err e = { 0 };

	CHECK_INT(c.agent.warm_pool, 0);
	CHECK(pool_new(NULL, NULL, &c, &e) == NULL);
	CHECK_INT(e.code, 0);
	/* every pool function accepts the NULL of "no pool" */
	pool_drain(NULL);
	pool_make_room(NULL);
	CHECK(pool_claim(NULL, NULL) == NULL);
	pool_free(NULL);
	CHECK_INT(conf_override(&c, "agent.warm_pool=1001", &e), -1);
	CHECK_INT(conf_override(&c, "agent.warm_pool=16", &e), 0);
	CHECK_INT(c.agent.warm_pool, 16);
}
