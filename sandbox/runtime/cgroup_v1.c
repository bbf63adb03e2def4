/*
 * cgroup_v1.c — the cgroup v1 backend: one directory per sandbox in each
 * of the memory, pids and cpu hierarchies, and in freezer when mounted.
 */
#include "cgroup.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { V1_MEMORY, V1_PIDS, V1_CPU, V1_FREEZER };

static int v1_create(struct cg *cg, const char *key, const struct cg_limits *l, struct sbx_err *e)
{
	char mem[32], quota[32], period[32], pids[32];

	if (cg_mem_bytes(l->memory_mib, mem, sizeof(mem)) < 0 ||
	    cg_v1_cpu_quota(l->cpus_milli, quota, sizeof(quota), period, sizeof(period)) < 0 ||
	    snprintf(pids, sizeof(pids), "%lld", (long long)l->pids) >= (int)sizeof(pids))
		return err_set(e, SBX_E_VALIDATION, "invalid resource limits");
	for (int i = 0; i < cg->nroots; i++) {
		char p[PATH_MAX];

		if (cg_path(p, sizeof(p), cg->base[i], key, NULL) < 0)
			return err_set(e, SBX_E_INTERNAL, "cgroup path too long");
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return err_sys(e, errno, "cannot create cgroup '%s'", key);
	}
	if (cg_set(cg->base[V1_MEMORY], key, "memory.limit_in_bytes", mem, 0, e) < 0 ||
	    cg_set(cg->base[V1_MEMORY], key, "memory.memsw.limit_in_bytes", mem, 1, e) < 0 ||
	    cg_set(cg->base[V1_MEMORY], key, "memory.swappiness", "0", 1, e) < 0 ||
	    cg_set(cg->base[V1_PIDS], key, "pids.max", pids, 0, e) < 0 ||
	    cg_set(cg->base[V1_CPU], key, "cpu.cfs_period_us", period, 0, e) < 0 ||
	    cg_set(cg->base[V1_CPU], key, "cpu.cfs_quota_us", quota, 0, e) < 0)
		return -1;
	return 0;
}

static int v1_attach(struct cg *cg, const char *key, pid_t pid, struct sbx_err *e)
{
	char v[32];

	util_xsnprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < cg->nroots; i++)
		if (cg_set(cg->base[i], key, "cgroup.procs", v, 0, e) < 0)
			return -1;
	return 0;
}

static int64_t v1_memory_bytes(struct cg *cg, const char *key)
{
	char p[PATH_MAX];

	if (cg_path(p, sizeof(p), cg->base[V1_MEMORY], key, "memory.usage_in_bytes") < 0)
		return -1;
	return cg_read_i64(p);
}

static int64_t v1_oom_kills(struct cg *cg, const char *key)
{
	char p[PATH_MAX];

	if (cg_path(p, sizeof(p), cg->base[V1_MEMORY], key, "memory.oom_control") < 0)
		return -1;
	return cg_read_keyed(p, "oom_kill");
}

static int v1_destroy(struct cg *cg, const char *key)
{
	static const int order[CG_MAX_ROOTS] = { V1_PIDS, V1_MEMORY, V1_CPU, V1_FREEZER };
	int rc = 0;

	cg_kill_thaw(cg, key);
	/* pids holds every process of the sandbox: kill from there first. */
	for (int i = 0; i < cg->nroots; i++) {
		char dir[PATH_MAX], procs[PATH_MAX];

		if (cg_path(dir, sizeof(dir), cg->base[order[i]], key, NULL) < 0 ||
		    cg_path(procs, sizeof(procs), dir, "cgroup.procs", NULL) < 0)
			return -1;
		(void)cg_kill_procs(procs);
		if (cg_rmdir(dir) < 0)
			rc = -1;
	}
	return rc;
}

static int v1_freeze(struct cg *cg, const char *key, int frozen, struct sbx_err *e)
{
	if (cg->freezer < 0)
		return err_set(e, SBX_E_INTERNAL, "this host has no cgroup freezer");
	return cg_set(cg->base[cg->freezer], key, "freezer.state", frozen ? "FROZEN" : "THAWED", 0, e);
}

/* freezer.state: THAWED, FREEZING (on its way, or a child is frozen) or FROZEN. */
static int v1_frozen(struct cg *cg, const char *key)
{
	char p[PATH_MAX];
	auto_free char *state = NULL;

	if (cg->freezer < 0 ||
	    cg_path(p, sizeof(p), cg->base[cg->freezer], key, "freezer.state") < 0 ||
	    !(state = util_read_file(p, 64, NULL)))
		return -1;
	return strncmp(state, "THAWED", 6) != 0;
}

const struct cg_ops cg_v1_ops = {
	.name = "v1",
	.create = v1_create,
	.attach = v1_attach,
	.memory_bytes = v1_memory_bytes,
	.oom_kills = v1_oom_kills,
	.destroy = v1_destroy,
	.freeze = v1_freeze,
	.frozen = v1_frozen,
};
