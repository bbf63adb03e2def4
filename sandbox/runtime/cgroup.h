/*
 * cgroup.h — resource limits of sandboxes, behind one small interface with
 * a cgroup v1 backend (cgroup_v1.c) and a cgroup v2 backend (cgroup_v2.c).
 *
 * Layout: <controller root>/<agent.cgroup_parent>/<agent.name>/<key>. The
 * two parent levels never carry limits. cg_new() picks the backend the host
 * offers (pure v2 with memory+pids+cpu, else v1 hierarchies for memory,
 * pids and cpu, plus freezer when mounted) and kills and removes leftovers
 * of an earlier run.
 *
 * Freezing stops every process of a sandbox where it stands (v1
 * freezer.state, v2 cgroup.freeze): the agent's fence when its lease
 * lapses. A frozen v1 process does not die of SIGKILL until thawed, so
 * every destroy kills first and thaws after (cg_kill_thaw): nothing of a
 * frozen sandbox runs again.
 */
#ifndef SBX_CGROUP_H
#define SBX_CGROUP_H

#include "err.h"

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#define CG_MAX_ROOTS 4

struct cg_limits {
	int64_t memory_mib;
	int64_t cpus_milli;
	int64_t pids;
};

struct cg;

struct cg_ops {
	const char *name;  /* "v1" / "v2" */
	/* Create the sandbox's cgroup(s) and write the limits. */
	int (*create)(struct cg *cg, const char *key, const struct cg_limits *l, struct sbx_err *e);
	/* Move pid into the sandbox's cgroup(s). */
	int (*attach)(struct cg *cg, const char *key, pid_t pid, struct sbx_err *e);
	int64_t (*memory_bytes)(struct cg *cg, const char *key);   /* -1 if unknown */
	int64_t (*oom_kills)(struct cg *cg, const char *key);      /* -1 if unknown */
	/* Kill every process in it and remove it; 0 or -1 (still busy). */
	int (*destroy)(struct cg *cg, const char *key);
	/* Freeze (frozen 1) or thaw (0) every process in it. 0, or -1 with e
	 * (also when the host has no freezer). */
	int (*freeze)(struct cg *cg, const char *key, int frozen, struct sbx_err *e);
	/* 1 when frozen or freezing (as asked, whatever the kernel got to), 0
	 * when thawed, -1 when unknown (no freezer, no such cgroup). */
	int (*frozen)(struct cg *cg, const char *key);
};

struct cg {
	const struct cg_ops *ops;
	int nroots;
	/* Index in base of the hierarchy that freezes (v1 freezer, v2 the
	 * unified one), -1 when the host has none. */
	int freezer;
	/* <controller root>/<parent>/<node> for each hierarchy; for v1 in the
	 * order memory, pids, cpu, freezer. */
	char base[CG_MAX_ROOTS][PATH_MAX];
};

extern const struct cg_ops cg_v1_ops;
extern const struct cg_ops cg_v2_ops;

/* Pick the backend, create the parent levels, clean leftovers. New heap
 * object (cg_free), or NULL with e filled. */
struct cg *cg_new(const char *parent, const char *node, struct sbx_err *e);
/* Remove the node level (and the parent if unused) and free cg. */
void cg_free(struct cg *cg);

/* Shared helpers of the backends. */
/* "<dir>/<file>" into out; -1 when it does not fit. */
int cg_path(char *out, size_t size, const char *dir, const char *key, const char *file);
/* Write a short string to a control file; 0 or -1 with errno. */
int cg_write(const char *path, const char *value);
/* Write value to file of key's cgroup under dir: 0, or -1 with e (a file
 * that does not exist is fine when optional). */
int cg_set(const char *dir, const char *key, const char *file, const char *value, int optional,
	   struct sbx_err *e);
/* Read a control file's first number; -1 on error. */
int64_t cg_read_i64(const char *path);
/* Value of "name N" lines in a flat keyed file (memory.events, oom_control). */
int64_t cg_read_keyed(const char *path, const char *name);
/* SIGKILL every pid listed in procs_file until it is empty (bounded tries). */
int cg_kill_procs(const char *procs_file);
/* When the cgroup of key is frozen: SIGKILL every process in it, then thaw
 * it, so they die without running another instruction. No-op otherwise. */
void cg_kill_thaw(struct cg *cg, const char *key);
/* Freeze (1) or thaw (0) every sandbox cgroup of this node (each child of
 * the node level): how many it wrote, -1 when there is no freezer. */
int cg_freeze_all(struct cg *cg, int frozen);
/* rmdir with a few short retries while the kernel finishes exits. */
int cg_rmdir(const char *dir);

/* Pure value formatting (unit-tested). Each returns 0 or -1 (too small). */
int cg_v1_cpu_quota(int64_t cpus_milli, char *quota, size_t qsize, char *period, size_t psize);
int cg_v2_cpu_max(int64_t cpus_milli, char *out, size_t size);
int cg_mem_bytes(int64_t memory_mib, char *out, size_t size);

#endif
