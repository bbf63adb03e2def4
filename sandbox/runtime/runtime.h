/*
 * runtime.h — the sandbox runtime inside sbx-agent: builds, runs and tears
 * down sandboxes with Linux primitives, and spawns processes in them
 * through their sbx-init. Everything runs on the agent's one event loop,
 * except the work of rt_create_async, which runs on the runtime's build
 * threads (several builds at once) and is handed back to the loop.
 *
 * Ownership: struct rt and struct rt_sandbox belong to the runtime; callers
 * hold borrowed pointers valid until rt_destroy() of that sandbox (or until
 * the on_exit callback for a process has returned).
 */
#ifndef SBX_RUNTIME_H
#define SBX_RUNTIME_H

#include "conf.h"
#include "err.h"

#include <event2/event.h>
#include <stdint.h>
#include <sys/types.h>

struct rt;
struct rt_sandbox;

struct rt_limits {
	int64_t memory_mib;
	int64_t cpus_milli;    /* 1000 = one CPU */
	int64_t pids;
	int64_t disk_mib;      /* bound of the writable upper layer */
};

enum rt_network { RT_NET_NONE, RT_NET_EGRESS };

struct rt_spec {
	const char *key;       /* "<tenant>.<id>": unique on the node, a valid file name */
	const char *hostname;  /* the sandbox id */
	const char *image;     /* image name, default "default" */
	const char *layers;    /* or NULL: a registry image's layers under
				* <images_dir>/layers, ':'-joined, top first (oci.h) */
	const char *workdir;   /* or NULL: the image's WorkingDir, the cwd of a process
				* asked to run in "/workspace" (the default) */
	uint32_t uid, gid;     /* the image's User: the ids (inside the user namespace)
				* every process runs as, and the owner of /workspace;
				* 0, 0 = root; each below IDRANGE_SIZE */
	enum rt_network network;
	struct rt_limits limits;
	char *const *env;      /* NULL-terminated "K=V" base environment of every process */
	int after_gone;        /* rt_create_async: while the key's last container is
				* still dying (rt_key_dying), wait for it to be gone and
				* build then, instead of refusing (a restart) */
};

/* The runtime; new heap object (rt_free). Cleans up leftovers (cgroups,
 * processes) of an earlier agent run of the same node name. */
struct rt *rt_new(struct event_base *base, const struct sbx_conf *conf, struct sbx_err *e);
void rt_free(struct rt *rt);  /* destroys every sandbox */

/* Called when a sandbox's init dies on its own (crash, OOM of init, killed
 * from outside): the sandbox is then stopped and only rt_destroy is valid. */
typedef void (*rt_sandbox_died_cb)(void *arg, struct rt_sandbox *sb);
void rt_set_died_cb(struct rt *rt, rt_sandbox_died_cb cb, void *arg);

/* Build and start a sandbox: namespaces, rootfs, cgroup, init running.
 * Returns a borrowed pointer or NULL with e filled (NO_CAPACITY, VALIDATION
 * for an unknown image, INTERNAL). */
struct rt_sandbox *rt_create(struct rt *rt, const struct rt_spec *spec, struct sbx_err *e);

/* rt_create off the loop: the build's work (user namespace, cgroups, the
 * clone of init and its mount work, the network) runs on one of the
 * runtime's build threads, two per CPU, several builds at once; then
 * done(arg, sb, e) runs on the loop with what rt_create would have
 * returned: a borrowed sb, or NULL and e. pooled: a warm pool member, as
 * rt_create_pooled. The spec is read during the call only. While it runs
 * the build holds its key (a create of it is a CONFLICT; once the build is
 * cancelled, NODE_UNAVAILABLE until it is torn down: a retry succeeds) and
 * counts against agent.capacity. Returns the build, valid until done has
 * run or it was cancelled; or NULL with e filled when refused at once
 * (VALIDATION, CONFLICT, NODE_UNAVAILABLE, NO_CAPACITY), and then done
 * never runs. */
struct rt_build;
typedef void (*rt_built_cb)(void *arg, struct rt_sandbox *sb, const struct sbx_err *e);
struct rt_build *rt_create_async(struct rt *rt, const struct rt_spec *spec, int pooled,
				 rt_built_cb done, void *arg, struct sbx_err *e);
/* Give a build up: its done never runs and whatever it built is
 * destroyed. 1 when it had not started (nothing of it is left now); 0
 * when it runs: gone(arg) (may be NULL) then runs on the loop once it is
 * over and nothing of it is left on the host. */
int rt_build_cancel(struct rt_build *b, void (*gone)(void *arg), void *arg);
/* Builds under way that count as sandboxes (not pooled ones). */
unsigned rt_building(const struct rt *rt);

/* Kill everything in the sandbox and free it, without waiting: sb is
 * invalid on return and in-flight process callbacks have fired with an
 * error. The container then dies off the loop's back: its init's pidfd is
 * watched, and once it is reaped its network, cgroups and id range are
 * released (nothing of it is left on the host then). Until that its key
 * stays taken (rt_key_dying: a start of it is NODE_UNAVAILABLE) and it
 * counts against agent.capacity. rt_free waits for every dying one. */
void rt_destroy(struct rt *rt, struct rt_sandbox *sb);
/* 1 while a container of key is dying (rt_destroy), else 0. */
int rt_key_dying(const struct rt *rt, const char *key);
/* Dying containers that count against the capacity (not pooled ones). */
unsigned rt_dying_count(const struct rt *rt);
/* Run done(arg) on the loop once no container of key is dying: at once
 * (before it returns) when none is. */
void rt_after_gone(struct rt *rt, const char *key, void (*done)(void *arg), void *arg);

const char *rt_key(const struct rt_sandbox *sb);
pid_t rt_init_pid(const struct rt_sandbox *sb);       /* host pid of sbx-init */
/* At most this many idmap user namespaces (one per uid range) stay open
 * for the range's next sandbox; past it, one is made per create and
 * closed after. */
#define RT_IDMAP_KEEP 64

/* The sandbox's network namespace (for port forwarders) and an O_PATH fd
 * of its / (for openat2). An idle sandbox holds neither: each is opened
 * on demand and kept for the calling thread's next call (the same
 * sandbox's costs nothing). Borrowed until that thread's next call of the
 * same function, so use it at once (or dup it); -1 with errno when init
 * is gone. */
int rt_netns_fd(const struct rt_sandbox *sb);
int rt_root_fd(const struct rt_sandbox *sb);
int64_t rt_memory_bytes(const struct rt_sandbox *sb); /* current usage from the cgroup */
int64_t rt_oom_kills(const struct rt_sandbox *sb);    /* OOM kills so far */
/* Open (O_WRONLY | O_CLOEXEC) the cgroup.procs file of each of the
 * sandbox's cgroups (one per v1 hierarchy, at most max, RT_CGROUP_FDS is
 * enough): writing "0" to them moves the writer in, so a host process
 * started for the sandbox can join them between fork and exec and be
 * charged to its limits (and frozen with it: the freezer is one of them).
 * The number of fds (caller closes them), or -1 with e filled. */
#define RT_CGROUP_FDS 4   /* CG_MAX_ROOTS: memory, pids, cpu, freezer */
int rt_cgroup_procs_open(const struct rt_sandbox *sb, int *fds, int max, struct sbx_err *e);
unsigned rt_count(const struct rt *rt);
int rt_userns(const struct rt *rt);                   /* sandboxes get user namespaces */

/* Fencing (cgroup freezer): freeze (1) or thaw (0) the processes of sb;
 * 0 or -1 with e. rt_frozen: 1 frozen, 0 thawed, -1 unknown. A frozen
 * sandbox can still be destroyed: its processes die without running. */
int rt_freeze(struct rt_sandbox *sb, int frozen, struct sbx_err *e);
int rt_frozen(const struct rt_sandbox *sb);
/* Freeze or thaw every sandbox of this node, pooled ones too, from their
 * cgroups alone (the fence keeper runs this in its own process, where the
 * runtime's lists are a stale copy). How many, or -1 without a freezer. */
int rt_freeze_all(struct rt *rt, int frozen);
/* Thaw the sandboxes of the warm pool (they belong to no one). */
void rt_thaw_pooled(struct rt *rt);
/* Kill and thaw the containers being destroyed whose init still runs and
 * that are frozen: a destroy kills and thaws, but while the lease is out
 * the fence keeper freezes every container again, and a frozen process
 * never acts on its SIGKILL (its init would never be reaped). */
void rt_kill_thaw_dying(struct rt *rt);

/* ---- warm pool support (sandbox/pool.c builds on these) ----------------
 * A pooled sandbox is built like any other but is not counted by
 * rt_count() nor against capacity by rt_create(); rt_pooled_count() counts
 * it. rt_create_pooled refuses (NO_CAPACITY) when counted + pooled
 * sandboxes reach agent.capacity. */
struct rt_sandbox *rt_create_pooled(struct rt *rt, const struct rt_spec *spec, struct sbx_err *e);
unsigned rt_pooled_count(const struct rt *rt);

/* Hand the pooled sandbox sb over to key: its cgroups are renamed (the
 * runtime's state keyed by the sandbox key follows), the limits (memory,
 * cpus, pids; 0 = the default; disk_mib is ignored: the upper layer keeps
 * its size) are written, and it is counted like an rt_create()d sandbox.
 * Hostname and /etc/hosts are the caller's (pool.c). 0; or -1 with e
 * filled (VALIDATION, CONFLICT, NODE_UNAVAILABLE, NO_CAPACITY) and sb
 * unchanged, still pooled; or -2 with e filled when it failed half-way: then sb must be
 * destroyed with rt_destroy(). */
int rt_claim(struct rt *rt, struct rt_sandbox *sb, const char *key, const struct rt_limits *limits,
	     struct sbx_err *e);

/* Host uid (and gid) of the sandbox's root: with a user namespace the first
 * id of its own range (agent.uid_base + n * 65536, idrange.h), else 0. */
uid_t rt_host_uid(const struct rt_sandbox *sb);
/* Host uid that owns id 0 of image files on disk (agent.uid_base with a
 * user namespace, else 0): what a pulled layer is unpacked as (oci.h). */
uid_t rt_image_owner(const struct rt *rt);

/* 1 while the sandbox's init runs (0 after it died or rt_destroy). */
int rt_alive(const struct rt_sandbox *sb);

/* ---- helpers that act for a sandbox (the Files API) ---------------------
 * A helper is a fresh single-threaded child of the agent that does file
 * work for the sandbox with the sandbox's own rights. rt_helper_open runs
 * in the agent before the fork and opens what the child needs (O_CLOEXEC):
 * the sandbox's mount and user namespaces and its cgroup.procs files
 * (rt_cgroup_procs_open); 0 or -1 with e (NODE_UNAVAILABLE when it is not
 * running). rt_helper_enter runs in the child after the fork: it joins the
 * sandbox's cgroups (its memory, pids and CPU are charged to the sandbox;
 * oom_score_adj 1000 makes it the first victim of the sandbox's OOM), its
 * mount namespace (the kernel then refuses to unlink, rename or rename
 * over any of the sandbox's mount points: EBUSY), and its user namespace
 * as uid/gid 0 there (host rt_host_uid()), with no supplementary groups,
 * the sandbox's capability set and no_new_privs. 0, or -1 with errno: the
 * child must then _exit. rt_helper_release closes the fds (in the agent). */
struct rt_helper {
	int mnt_fd;
	int user_fd;               /* -1 without a user namespace */
	int cg_fds[RT_CGROUP_FDS];
	int ncg;
};
int rt_helper_open(const struct rt_sandbox *sb, struct rt_helper *h, struct sbx_err *e);
int rt_helper_enter(const struct rt_sandbox *sb, const struct rt_helper *h);
void rt_helper_release(struct rt_helper *h);

/* A process to spawn in a sandbox. The fds are the process's stdin, stdout
 * and stderr; the runtime passes them to init and closes its copies — in
 * every case, also when rt_spawn fails (an fd given twice is closed once). */
struct rt_proc_spec {
	char *const *argv;     /* argv[0] is looked up in PATH when it has no '/' */
	char *const *env;      /* NULL-terminated "K=V", complete (already merged) */
	const char *cwd;       /* absolute path inside the sandbox */
	int stdin_fd, stdout_fd, stderr_fd;
};

/* Outcome of a process: exit code (0–255), or the killing signal. */
struct rt_exit {
	int exit_code;         /* 128+signal when killed by a signal */
	int signal;            /* 0 when it exited */
	int start_errno;       /* non-zero when it could not start (exit_code 127 or 126) */
	int sandbox_gone;      /* the sandbox died or was destroyed first */
};

typedef void (*rt_started_cb)(void *arg, pid_t pid);
typedef void (*rt_exited_cb)(void *arg, const struct rt_exit *ex);
typedef void (*rt_gone_cb)(void *arg);

/* Spawn a process in its own process group. on_started fires once with the
 * pid inside the sandbox; on_exited fires exactly once (also when the start
 * failed, or the sandbox is destroyed). Returns a handle > 0, or -1.
 *
 * The handle names the process's tree — everything it started, also what
 * called setsid() or outlived its parent — and stays valid after the
 * process exited, for as long as any process of the tree is left. */
int64_t rt_spawn(struct rt_sandbox *sb, const struct rt_proc_spec *ps, rt_started_cb on_started,
		 rt_exited_cb on_exited, void *arg, struct sbx_err *e);

/* Ask the sandbox's init for a keeper forked ahead of the next command
 * (initproto.h: AHEAD), so that it pays no fork of one. A hint: the
 * runtime sends it itself once a sandbox (not a pool member) is built;
 * for a claimed pool member, the caller sends it once its answer is out
 * (sent before, the fork of a long-idle init delays that answer). */
void rt_ahead(struct rt_sandbox *sb);

/* Send sig to every process of the tree of handle (tree = 1; a SIGKILL is
 * repeated by init until the tree is empty), or only to the process while
 * it runs (tree = 0). 0, or -1 when it is unknown or gone. */
int rt_signal(struct rt_sandbox *sb, int64_t handle, int sig, int tree);

/* Kill the tree of handle, whether or not the process itself still runs:
 * sig to every process of it now and, unless sig is SIGKILL, SIGKILL to
 * every one left after grace_ms (at once when grace_ms <= 0). gone (may be
 * NULL) fires with the spawn's arg once no process of the tree is left,
 * or the sandbox went (after on_exited). 0, or -1 when the tree is gone
 * already (gone does not fire). */
int rt_kill(struct rt_sandbox *sb, int64_t handle, int sig, int64_t grace_ms, rt_gone_cb gone);

/* Forget the callbacks of a handle (the caller is going away); the process
 * keeps running unless it was signalled. */
void rt_detach(struct rt_sandbox *sb, int64_t handle);

#endif
