/*
 * spawn.h — starting a sandbox: clone() into new namespaces, run the
 * planned mounts, pivot_root, drop privileges and exec sbx-init as PID 1.
 *
 * Two-phase: the caller plans and allocates everything (struct spawn_plan);
 * after clone the child only makes syscalls. It waits for the parent to
 * place it in its cgroup, reports a failing step over a CLOEXEC socket
 * ("mount /proc: Operation not permitted") and closes every fd but init's
 * socket (fd INITPROTO_FD) and /dev/null on 0-2 before the exec.
 *
 * Also the one way the agent runs a program on the host (spawn_host: nft,
 * tunnel tools, probes), in the manner of git's run-command.c: everything
 * is prepared before the fork, signals are blocked across it, the child
 * closes every fd but 0-2, and an exec failure comes back as the child's
 * errno over a CLOEXEC pipe.
 */
#ifndef SBX_SPAWN_H
#define SBX_SPAWN_H

#include "err.h"
#include "mounts.h"

#include <linux/filter.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

/* A block of fds the builds' clones keep: the clone of init shares the
 * agent's fd table, and its own table is a copy of only the fds below this
 * block's end, where the parent put the plan's fds (a group of slots it
 * holds for the spawn). Without it the clone copied the agent's whole
 * table — two fds for every live sandbox — and then closed each one, a
 * cost that grew with the sandboxes already there. */
#define SPAWN_GROUPS    16     /* spawns at once (more wait): above the build threads */
#define SPAWN_GROUP_FDS 8      /* a plan's fds: sync, init, its socket, two namespaces, mounts */

struct spawn_fds {
	int base;                      /* /dev/null; groups from base + 1; -1: not reserved */
	unsigned busy;                 /* groups in use, a bit each */
	pthread_mutex_t lock;
	pthread_cond_t freed;
};

/* Reserve the block: SPAWN_GROUPS * SPAWN_GROUP_FDS + 1 contiguous fds
 * (O_CLOEXEC, on /dev/null). 0 or -1 with e. */
int spawn_fds_init(struct spawn_fds *f, struct sbx_err *e);
void spawn_fds_release(struct spawn_fds *f);

struct spawn_plan {
	struct spawn_fds *fds;         /* the block its fds are moved into for the clone */
	struct mnt_plan *mounts;       /* its MNT_ATTACH fds are renumbered during the call */
	const char *root;              /* directory to pivot into */
	const char *hostname;
	int userns_fd;                 /* >= 0: join this user namespace last */
	int netns_fd;                  /* >= 0: join this network namespace; -1: a new one */
	const struct sock_fprog *seccomp;
	uint64_t caps_keep;
	int caps_last;
	int init_exe_fd;               /* O_PATH fd of the sbx-init binary */
	int init_sock;                 /* the sandbox's end of the init socket */
	/* Or NULL: called with the attach arg when the setup failed, after the
	 * child was sent SIGKILL and before it is reaped: a child in a frozen
	 * cgroup (the fence) dies only once thawed. */
	void (*thaw)(void *arg);
};

/* Called in the parent with the child's host pid before the child starts
 * building: put it into its cgroup. 0 or -1 with e filled. */
typedef int (*spawn_attach_fn)(void *arg, pid_t pid, struct sbx_err *e);

/* Start the sandbox. Returns the host pid of its init and a pidfd in
 * *pidfd (O_CLOEXEC), or -1 with e filled (the child is killed and reaped). */
pid_t spawn_sandbox(const struct spawn_plan *sp, spawn_attach_fn attach, void *arg, int *pidfd,
		    struct sbx_err *e);

/* A new user namespace owned by host uid/gid base, mapping its ids
 * inside..inside+65535 (uids and gids) to host ids base..base+65535: an
 * O_CLOEXEC fd of it (the caller's), or -1 with e filled. Costs one
 * short-lived child. inside 0: a sandbox's namespace; inside = the image
 * owner: the idmap of its image (mnt_open_idmapped). */
int spawn_userns(uid_t inside, uid_t base, struct sbx_err *e);

/* Reap a child through its pidfd (blocking when wait is set). */
void spawn_reap(int pidfd, int wait);

#define SPAWN_HOST_PGROUP    1u   /* the child leads a process group of its own */
#define SPAWN_HOST_PDEATHSIG 2u   /* SIGKILL to the child when the agent dies */

/* A program to run on the host. Every pointer is borrowed for the call. */
struct spawn_host_cmd {
	const char *path;            /* absolute path, no PATH search */
	char *const *argv;
	char *const *envp;           /* NULL: the caller's environ */
	int in, out, err;            /* the child's fds 0, 1, 2; -1: /dev/null */
	unsigned flags;              /* SPAWN_HOST_* */
	/* Instead of an exec: run fn(arg) in the child and exit with its
	 * value. After fork: async-signal-safe calls only. */
	int (*fn)(void *arg);
	void *arg;
	/* Run in the child once fds 0-2 are in place, before the exec (the
	 * caller's fds are still open; async-signal-safe calls only): 0, or
	 * -1 with errno, which then fails the spawn with that errno. For
	 * confinement: joining cgroups, dropping privileges. */
	int (*pre_exec)(const void *arg);
	const void *pre_arg;
};

/* Start cmd with every signal at its default and unblocked (SIGPIPE too)
 * and no fd but 0-2. The child's pid, its pidfd (O_CLOEXEC, the caller's)
 * in *pidfd; or -1 with e filled (the exec's errno, ENOENT for a missing
 * program; the child is reaped). Returns once the exec has happened (or
 * fn has started). */
pid_t spawn_host(const struct spawn_host_cmd *cmd, int *pidfd, struct sbx_err *e);

/* Wait for a spawn_host child through its pidfd (which stays open): its
 * exit code, 128 + the signal that killed it, or -1 with e filled. */
int spawn_host_wait(int pidfd, struct sbx_err *e);

#endif
