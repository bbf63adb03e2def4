/* Unit tests of the cgroup value formatting of both backends (sandbox/runtime/cgroup.c). */
#include "cgroup.h"
#include "unit.h"

TEST(rt_cgroup_values)
{
	char q[32], p[32], out[64];

	CHECK_INT(cg_mem_bytes(512, out, sizeof(out)), 0);
	CHECK_STR(out, "536870912");
	CHECK_INT(cg_mem_bytes(0, out, sizeof(out)), -1);
	CHECK_INT(cg_mem_bytes(512, out, 4), -1);

	CHECK_INT(cg_v1_cpu_quota(1000, q, sizeof(q), p, sizeof(p)), 0);
	CHECK_STR(q, "100000");
	CHECK_STR(p, "100000");
	CHECK_INT(cg_v1_cpu_quota(250, q, sizeof(q), p, sizeof(p)), 0);
	CHECK_STR(q, "25000");
	CHECK_INT(cg_v1_cpu_quota(5, q, sizeof(q), p, sizeof(p)), 0);
	CHECK_STR(q, "1000");   /* the kernel's minimum quota */
	CHECK_INT(cg_v1_cpu_quota(0, q, sizeof(q), p, sizeof(p)), -1);

	CHECK_INT(cg_v2_cpu_max(2500, out, sizeof(out)), 0);
	CHECK_STR(out, "250000 100000");
	CHECK_INT(cg_v2_cpu_max(1000, out, 5), -1);
}

TEST(rt_cgroup_paths)
{
	char out[64];

	CHECK_INT(cg_path(out, sizeof(out), "/sys/fs/cgroup/sbx/n1", "t.a", "memory.max"), 0);
	CHECK_STR(out, "/sys/fs/cgroup/sbx/n1/t.a/memory.max");
	CHECK_INT(cg_path(out, sizeof(out), "/sys/fs/cgroup/sbx/n1", "t.a", NULL), 0);
	CHECK_STR(out, "/sys/fs/cgroup/sbx/n1/t.a");
	CHECK_INT(cg_path(out, 10, "/sys/fs/cgroup/sbx/n1", "t.a", NULL), -1);
	CHECK_STR(cg_v1_ops.name, "v1");
	CHECK_STR(cg_v2_ops.name, "v2");
}
