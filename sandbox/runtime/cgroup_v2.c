/*
 * cgroup_v2.c — the cgroup v2 backend: one directory per sandbox in the
 * unified hierarchy (controllers enabled on the parents by cg_new()).
 */
#include "cgroup.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static int v2_create(struct cg *cg, const char *key, const struct cg_limits *l, struct sbx_err *e)
{
	char mem[32], cpu[64], pids[32], p[PATH_MAX];

	if (cg_mem_bytes(l->memory_mib, mem, sizeof(mem)) < 0 ||
	    cg_v2_cpu_max(l->cpus_milli, cpu, sizeof(cpu)) < 0 ||
	    snprintf(pids, sizeof(pids), "%lld", (long long)l->pids) >= (int)sizeof(pids))
		return err_set(e, SBX_E_VALIDATION, "invalid resource limits");
	if (cg_path(p, sizeof(p), cg->base[0], key, NULL) < 0)
		return err_set(e, SBX_E_INTERNAL, "cgroup path too long");
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return err_sys(e, errno, "cannot create cgroup '%s'", key);
	if (cg_set(cg->base[0], key, "memory.max", mem, 0, e) < 0 ||
	    cg_set(cg->base[0], key, "memory.swap.max", "0", 1, e) < 0 ||
	    cg_set(cg->base[0], key, "pids.max", pids, 0, e) < 0 ||
	    cg_set(cg->base[0], key, "cpu.max", cpu, 0, e) < 0)
		return -1;
	return 0;
}

static int v2_attach(struct cg *cg, const char *key, pid_t pid, struct sbx_err *e)
{
	char v[32];

	util_xsnprintf(v, sizeof(v), "%d", (int)pid);
	return cg_set(cg->base[0], key, "cgroup.procs", v, 0, e);
}

static int64_t v2_memory_bytes(struct cg *cg, const char *key)
{
	char p[PATH_MAX];

	if (cg_path(p, sizeof(p), cg->base[0], key, "memory.current") < 0)
		return -1;
	return cg_read_i64(p);
}

static int64_t v2_oom_kills(struct cg *cg, const char *key)
{
	char p[PATH_MAX];

	if (cg_path(p, sizeof(p), cg->base[0], key, "memory.events") < 0)
		return -1;
	return cg_read_keyed(p, "oom_kill");
}

static int v2_destroy(struct cg *cg, const char *key)
{
	char dir[PATH_MAX], killf[PATH_MAX], procs[PATH_MAX];

	if (cg_path(dir, sizeof(dir), cg->base[0], key, NULL) < 0 ||
	    cg_path(killf, sizeof(killf), dir, "cgroup.kill", NULL) < 0 ||
	    cg_path(procs, sizeof(procs), dir, "cgroup.procs", NULL) < 0)
		return -1;
	/* cgroup.kill (5.14+) kills frozen processes too; the loop covers
	 * older kernels, which need the thaw first. */
	(void)cg_write(killf, "1");
	cg_kill_thaw(cg, key);
	(void)cg_kill_procs(procs);
	return cg_rmdir(dir);
}

static int v2_freeze(struct cg *cg, const char *key, int frozen, struct sbx_err *e)
{
	return cg_set(cg->base[0], key, "cgroup.freeze", frozen ? "1" : "0", 0, e);
}

/* cgroup.freeze holds what was asked (cgroup.events says whether it is done). */
static int v2_frozen(struct cg *cg, const char *key)
{
	char p[PATH_MAX];
	int64_t v;

	if (cg_path(p, sizeof(p), cg->base[0], key, "cgroup.freeze") < 0)
		return -1;
	v = cg_read_i64(p);
	return v < 0 ? -1 : v != 0;
}

const struct cg_ops cg_v2_ops = {
	.name = "v2",
	.create = v2_create,
	.attach = v2_attach,
	.memory_bytes = v2_memory_bytes,
	.oom_kills = v2_oom_kills,
	.destroy = v2_destroy,
	.freeze = v2_freeze,
	.frozen = v2_frozen,
};
