/* Unit tests of the fencing pieces: the lease's gap counting (registry.c),
 * the fence keeper's decisions (keeper.c) and the freeze operations of both
 * cgroup backends (cgroup_v1.c, cgroup_v2.c) on a directory tree that
 * stands in for the cgroup filesystem. */
#include "cgroup.h"
#include "keeper.h"
#include "registry.h"
#include "unit.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(agent_lease_extend_counts_gaps)
{
	struct registry_lease l = { 0, 0 };

	registry_lease_extend(&l, 1000, 3000);       /* the first lease is a gap */
	CHECK_INT(l.until, 4000);
	CHECK_INT(l.serial, 1);
	registry_lease_extend(&l, 1500, 3000);       /* in time: no gap */
	CHECK_INT(l.until, 4500);
	CHECK_INT(l.serial, 1);
	registry_lease_extend(&l, 1200, 3000);       /* a late reply never shortens it */
	CHECK_INT(l.until, 4500);
	CHECK_INT(l.serial, 1);
	registry_lease_extend(&l, 4500, 3000);       /* sent as it ran out: a gap */
	CHECK_INT(l.until, 7500);
	CHECK_INT(l.serial, 2);
	registry_lease_extend(&l, 9000, 3000);       /* after a pause */
	CHECK_INT(l.until, 12000);
	CHECK_INT(l.serial, 3);
}

TEST(agent_keeper_decide)
{
	/* never held a lease */
	CHECK_INT(keeper_decide(5000, 0, 0, 0, 0), 0);
	/* well inside the lease */
	CHECK_INT(keeper_decide(1000, 4000, 1, 0, 0), 0);
	/* within the margin of its end, and past it: freeze (again) */
	CHECK_INT(keeper_decide(4000 - KEEPER_MARGIN_MS, 4000, 1, 0, 0), 1);
	CHECK_INT(keeper_decide(9000, 4000, 1, 1, 1), 1);
	/* extended in time (same serial): thaw */
	CHECK_INT(keeper_decide(4000, 7000, 1, 1, 1), -1);
	/* regained after a gap: leave the thaw to the agent's sweep */
	CHECK_INT(keeper_decide(9000, 12000, 2, 1, 1), 0);
	CHECK_INT(keeper_decide(9000, 12000, 2, 0, 1), 0);
}

static void put_file(const char *dir, const char *name, const char *text)
{
	char p[1024];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* The file begins with text (cg_write does not truncate: a control file
 * takes the whole write, a regular file keeps what followed). */
static int file_is(const char *dir, const char *name, const char *text)
{
	char p[1024];
	auto_free char *got = NULL;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	got = util_read_file(p, 4096, NULL);
	return got && strncmp(got, text, strlen(text)) == 0;
}

TEST(rt_cgroup_freeze_ops)
{
	char root[] = "/tmp/sbx-unit-cg-XXXXXX", sb1[64], sb2[64];
	struct cg cg = { 0 };
	struct sbx_err e = { 0 };

	if (!mkdtemp(root)) {
		CHECK(0);
		return;
	}
	snprintf(sb1, sizeof(sb1), "%s/t.a", root);
	snprintf(sb2, sizeof(sb2), "%s/t.b", root);
	mkdir(sb1, 0700);
	mkdir(sb2, 0700);

	/* v1: freezer.state in the freezer hierarchy */
	cg.ops = &cg_v1_ops;
	cg.nroots = 4;
	cg.freezer = 3;
	snprintf(cg.base[3], sizeof(cg.base[3]), "%s", root);
	put_file(sb1, "freezer.state", "THAWED\n");
	put_file(sb2, "freezer.state", "THAWED\n");
	CHECK_INT(cg.ops->frozen(&cg, "t.a"), 0);
	CHECK_INT(cg.ops->freeze(&cg, "t.a", 1, &e), 0);
	CHECK(file_is(sb1, "freezer.state", "FROZEN"));
	CHECK_INT(cg.ops->frozen(&cg, "t.a"), 1);
	put_file(sb1, "freezer.state", "FREEZING\n");
	CHECK_INT(cg.ops->frozen(&cg, "t.a"), 1);
	CHECK_INT(cg.ops->freeze(&cg, "t.a", 0, &e), 0);
	CHECK(file_is(sb1, "freezer.state", "THAWED"));
	CHECK_INT(cg.ops->frozen(&cg, "t.nope"), -1);
	CHECK_INT(cg_freeze_all(&cg, 1), 2);
	CHECK(file_is(sb1, "freezer.state", "FROZEN") && file_is(sb2, "freezer.state", "FROZEN"));
	/* a frozen, empty cgroup is thawed by cg_kill_thaw */
	put_file(sb1, "cgroup.procs", "");
	cg_kill_thaw(&cg, "t.a");
	CHECK(file_is(sb1, "freezer.state", "THAWED"));
	/* no freezer on the host */
	cg.freezer = -1;
	CHECK_INT(cg.ops->freeze(&cg, "t.a", 1, &e), -1);
	CHECK_INT(cg.ops->frozen(&cg, "t.a"), -1);
	CHECK_INT(cg_freeze_all(&cg, 1), -1);

	/* v2: cgroup.freeze in the unified hierarchy */
	memset(&cg, 0, sizeof(cg));
	cg.ops = &cg_v2_ops;
	cg.nroots = 1;
	cg.freezer = 0;
	snprintf(cg.base[0], sizeof(cg.base[0]), "%s", root);
	put_file(sb1, "cgroup.freeze", "0\n");
	put_file(sb2, "cgroup.freeze", "0\n");
	CHECK_INT(cg.ops->frozen(&cg, "t.a"), 0);
	CHECK_INT(cg.ops->freeze(&cg, "t.a", 1, &e), 0);
	CHECK(file_is(sb1, "cgroup.freeze", "1"));
	CHECK_INT(cg.ops->frozen(&cg, "t.a"), 1);
	CHECK_INT(cg.ops->freeze(&cg, "t.a", 0, &e), 0);
	CHECK(file_is(sb1, "cgroup.freeze", "0"));
	CHECK_INT(cg_freeze_all(&cg, 1), 2);
	CHECK(file_is(sb2, "cgroup.freeze", "1"));

	for (const char *d = sb1; d; d = d == sb1 ? sb2 : NULL) {
		char p[128];
		static const char *const files[] = { "freezer.state", "cgroup.freeze", "cgroup.procs" };

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
			snprintf(p, sizeof(p), "%s/%s", d, files[i]);
			unlink(p);
		}
		rmdir(d);
	}
	rmdir(root);
}

TEST(agent_heartbeat_rules)
{
	CHECK_STR(registry_node_state(0, 0, 500), "up");
	CHECK_STR(registry_node_state(0, 1000, 500), "up");        /* within two beats */
	CHECK_STR(registry_node_state(1, 0, 500), "up");           /* one slow answer */
	CHECK_STR(registry_node_state(0, 5000, 500), "degraded");  /* the loop stands */
	CHECK_STR(registry_node_state(REGISTRY_PROBE_FAILS, 0, 500), "degraded"); /* no answers */
	/* a long loop turn keeps the lease, a dead loop loses it */
	CHECK_INT(registry_loop_may_hold_lease(2 * 3000, 3000), 1);
	CHECK_INT(registry_loop_may_hold_lease(REGISTRY_STALL_TTLS * 3000 + 1, 3000), 0);
	CHECK_INT(registry_probe_answered("", 0), 1);
	CHECK_INT(registry_probe_answered("HTTP/1.1 400", 12), 1);
	CHECK_INT(registry_probe_answered("garbage", 7), 0);
	CHECK_INT(registry_probe_answered("HTTP", 4), 0);
}
