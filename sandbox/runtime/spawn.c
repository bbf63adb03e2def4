/*
 * spawn.c — see spawn.h. The child side (child_main) makes syscalls only:
 * no allocation, no stdio, no locks; every string it uses was prepared by
 * the parent before clone().
 */
#include "spawn.h"
#include "caps.h"
#include "initproto.h"
#include "netns.h"
#include "sigdfl.h"
#include "util.h"
#include "vmchild.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define SPAWN_TIMEOUT_MS 10000

struct child_report {
	int err;
	char step[120];
};

static void child_fail(int sync, const char *step, int err)
{
	struct child_report r;
	size_t i;

	memset(&r, 0, sizeof(r));
	r.err = err;
	for (i = 0; step[i] && i < sizeof(r.step) - 1; i++)
		r.step[i] = step[i];
	(void)!write(sync, &r, sizeof(r));
	_exit(1);
}

/* The credential calls of a child of a raw clone() of the (threaded)
 * agent are raw syscalls: glibc's wrappers would signal every thread the
 * parent had and wait for them (setxid), and the child has none of them —
 * it hangs on a lock another thread held at the clone. */
static int raw_setgroups0(void)
{
	return (int)syscall(SYS_setgroups, 0, NULL);
}

/* Close every fd above 2 but the plan's: the agent's other threads may be
 * cloning at the same moment, and a copy of one of their sockets held here
 * would keep their end of stream (their child's exec) from coming. A plan
 * with more fds than fit is left as it is (they close at the exec). */
static void close_foreign(const struct spawn_plan *sp, int sync)
{
	int keep[24], n = 0;

	keep[n++] = sync;
	keep[n++] = sp->init_exe_fd;
	keep[n++] = sp->init_sock;
	keep[n++] = sp->userns_fd;
	keep[n++] = sp->netns_fd;
	for (size_t i = 0; i < sp->mounts->n; i++) {
		if (sp->mounts->ops[i].kind != MNT_ATTACH)
			continue;
		if (n == (int)(sizeof(keep) / sizeof(keep[0])))
			return;
		keep[n++] = sp->mounts->ops[i].fd;
	}
	for (int i = 1; i < n; i++)       /* insertion sort: no allocation here */
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	{
		unsigned from = 3;

		for (int i = 0; i < n; i++) {
			if (keep[i] < (int)from)
				continue;
			if ((unsigned)keep[i] > from)
				(void)syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0U);
			from = (unsigned)keep[i] + 1;
		}
		(void)syscall(SYS_close_range, from, ~0U, 0U);
	}
}

static __attribute__((noreturn)) void child_main(const struct spawn_plan *sp, int sync)
{
	static char *const init_argv[] = { (char *)"sbx-init", NULL };
	static char *const init_env[] = {
		(char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL
	};
	const struct mnt_op *failed = NULL;
	char go;
	int exe, sock, devnull;

	close_foreign(sp, sync);
	/* wait until the parent has put us into our cgroup */
	if (read(sync, &go, 1) != 1)
		_exit(1);
	/* a network namespace made ahead (netns_new), before anything that
	 * sees the network: lo, sysfs */
	if (sp->netns_fd >= 0 && setns(sp->netns_fd, CLONE_NEWNET) < 0)
		child_fail(sync, "join the network namespace", errno);
	/* after joining the cgroup, so that /proc/self/cgroup shows "/" */
	if (unshare(CLONE_NEWCGROUP) < 0)
		child_fail(sync, "unshare cgroup namespace", errno);
	if (sethostname(sp->hostname, strlen(sp->hostname)) < 0)
		child_fail(sync, "sethostname", errno);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(sync, "make / private", errno);
	if (mnt_plan_run(sp->mounts, &failed) < 0)
		child_fail(sync, failed->what, errno);
	if (netns_lo_up() < 0)
		child_fail(sync, "bring lo up", errno);
	/* /proc is already mounted: a user namespace could not mount it after this */
	if (chdir(sp->root) < 0)
		child_fail(sync, "chdir to the new root", errno);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		child_fail(sync, "pivot_root", errno);
	if (umount2(".", MNT_DETACH) < 0)
		child_fail(sync, "detach the old root", errno);
	if (chdir("/") < 0)
		child_fail(sync, "chdir /", errno);

	/* fds: init's socket on INITPROTO_FD, /dev/null on 0-2, nothing else at exec */
	exe = fcntl(sp->init_exe_fd, F_DUPFD_CLOEXEC, 10);
	sock = fcntl(sp->init_sock, F_DUPFD_CLOEXEC, 10);
	sync = fcntl(sync, F_DUPFD_CLOEXEC, 10);
	if (exe < 0 || sock < 0 || sync < 0)
		_exit(1);
	if (dup2(sock, INITPROTO_FD) < 0)
		child_fail(sync, "dup2 init socket", errno);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		child_fail(sync, "open /dev/null", errno);
	if (dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
		child_fail(sync, "dup2 /dev/null", errno);
	if (syscall(SYS_close_range, INITPROTO_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		child_fail(sync, "close_range", errno);

	if (sp->userns_fd >= 0) {
		/* last namespace: every other one stays owned by the host's user
		 * namespace, so root in here cannot reconfigure them; its maps
		 * were written by spawn_userns */
		if (setns(sp->userns_fd, CLONE_NEWUSER) < 0)
			child_fail(sync, "join the user namespace", errno);
		if (syscall(SYS_setresgid, 0, 0, 0) < 0)
			child_fail(sync, "setresgid", errno);
		if (raw_setgroups0() < 0)
			child_fail(sync, "setgroups", errno);
		if (syscall(SYS_setresuid, 0, 0, 0) < 0)
			child_fail(sync, "setresuid", errno);
	} else if (raw_setgroups0() < 0) {
		child_fail(sync, "setgroups", errno);
	}
	/* after the credential change, which would reset it */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		child_fail(sync, "PR_SET_PDEATHSIG", errno);
	if (caps_apply(sp->caps_keep, sp->caps_last) < 0)
		child_fail(sync, "drop capabilities", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(sync, "PR_SET_NO_NEW_PRIVS", errno);
	/* seccomp last: the filter also applies to everything above otherwise */
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, sp->seccomp, 0, 0) < 0)
		child_fail(sync, "load seccomp filter", errno);
	syscall(SYS_execveat, exe, "", init_argv, init_env, AT_EMPTY_PATH);
	child_fail(sync, "exec sbx-init", errno);
	_exit(1);
}

/* Wait until one of fds is readable: 0, or an errno value (ETIMEDOUT).
 * Not errno itself: a vm_child may write it at any time. */
static int wait_readable(struct pollfd *p, int n, int ms)
{
	int64_t deadline = util_now_ms() + ms;

	for (;;) {
		int64_t left = deadline - util_now_ms();
		int r, err;

		if (left <= 0)
			return ETIMEDOUT;
		r = poll(p, (nfds_t)n, (int)left);
		err = errno;
		if (r > 0)
			return 0;
		if (r < 0 && err != EINTR)
			return err;
	}
}

static int write_map(pid_t pid, const char *file, uid_t inside, uid_t base, struct sbx_err *e)
{
	char path[64], map[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if (snprintf(map, sizeof(map), "%u %u 65536\n", (unsigned)inside, (unsigned)base) >=
	    (int)sizeof(map))
		return err_set(e, SBX_E_INTERNAL, "bad uid_base");
	{
		auto_close int fd = open(path, O_WRONLY | O_CLOEXEC);

		if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t)strlen(map))
			return err_sys(e, errno, "cannot write %s", file);
	}
	return 0;
}

struct userns_child {
	int sock;                      /* the helper's end */
	uid_t base;
	pid_t agent;                   /* getpid() of its parent */
};

/* The helper: it shares the agent's memory and fd table (it closes
 * nothing), becomes base, makes the namespace, reports 0 or its errno,
 * and stays in it until the parent, done with its maps, kills it. The
 * socket never ends for it (it holds both ends in the shared table), so
 * the agent's death ends it through PR_SET_PDEATHSIG, set after the
 * credential change that would clear it. */
static int userns_child(void *arg)
{
	const struct userns_child *uc = arg;
	int err = 0;
	char c;

	if (raw_setgroups0() < 0 || syscall(SYS_setresgid, uc->base, uc->base, uc->base) < 0 ||
	    syscall(SYS_setresuid, uc->base, uc->base, uc->base) < 0 || unshare(CLONE_NEWUSER) < 0 ||
	    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		err = errno ? errno : EPERM;
	else if (getppid() != uc->agent)
		_exit(1);                      /* the agent died before the prctl */
	if (write(uc->sock, &err, sizeof(err)) != (ssize_t)sizeof(err) || err)
		_exit(1);
	while (read(uc->sock, &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* The helper's report: 0 once its namespace exists, else an errno value
 * (the helper's own, or why it could not be heard). */
static int userns_report(int sock, int pidfd)
{
	struct pollfd p[2] = { { .fd = sock, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
	int err = wait_readable(p, 2, SPAWN_TIMEOUT_MS), got;
	ssize_t n;

	if (err)
		return err;
	if (!(p[0].revents & POLLIN))
		return ECHILD;                 /* the helper died without a word */
	do
		n = read(sock, &got, sizeof(got));
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(got))
		return EPROTO;
	return got;
}

int spawn_userns(uid_t inside, uid_t base, struct sbx_err *e)
{
	struct userns_child uc = { .base = base, .agent = getpid() };
	struct vm_child vc;
	int sv[2], ret = -1, pidfd = -1, err;
	char path[64];
	long pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(e, errno, "socketpair");
	/* The namespace's owner is its creator's euid, and the kernel charges
	 * per-user counts (inotify instances, nproc) of everything inside to
	 * that owner in the host's namespace: created as root, every sandbox
	 * would share root's counts. So the helper becomes base first. The
	 * namespace outlives it through the fd opened below. It shares the
	 * fd table (CLONE_FILES): no copy of the agent's fds, and so no end of
	 * stream at its exit; its pidfd says when it is gone. */
	uc.sock = sv[1];
	pid = vm_child_start(&vc, CLONE_FILES | CLONE_PIDFD | SIGCHLD, userns_child, &uc, &pidfd);
	if (pid < 0) {
		err_sys(e, errno, "cannot create a user namespace");
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	err = userns_report(sv[0], pidfd);
	util_xsnprintf(path, sizeof(path), "/proc/%ld/ns/user", pid);
	if (err) {
		err_sys(e, err, "cannot create a user namespace as uid %u", (unsigned)base);
	} else if (write_map((pid_t)pid, "uid_map", inside, base, e) == 0 &&
		   write_map((pid_t)pid, "gid_map", inside, base, e) == 0) {
		ret = open(path, O_RDONLY | O_CLOEXEC);
		if (ret < 0)
			err_sys(e, errno, "cannot open the new user namespace");
	}
	/* done with it either way */
	syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	spawn_reap(pidfd, 1);
	vm_child_end(&vc);
	close(pidfd);
	close(sv[0]);
	close(sv[1]);
	return ret;
}

void spawn_reap(int pidfd, int wait)
{
	siginfo_t si;

	if (pidfd < 0)
		return;
	memset(&si, 0, sizeof(si));
	while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | (wait ? 0 : WNOHANG)) < 0 &&
	       errno == EINTR)
		;
}

/* The parent's half of the handshake; 0 when the child exec'd sbx-init. */
static int parent_side(const struct spawn_plan *sp, pid_t pid, int sync, spawn_attach_fn attach,
		       void *arg, struct sbx_err *e)
{
	struct child_report r;
	ssize_t n;

	if (attach(arg, pid, e) < 0)
		return -1;
	if (write(sync, "G", 1) != 1)
		return err_sys(e, errno, "cannot start the sandbox");
	{
		struct pollfd p = { .fd = sync, .events = POLLIN };
		int err = wait_readable(&p, 1, SPAWN_TIMEOUT_MS);

		if (err)
			return err_sys(e, err, "sandbox setup did not finish");
	}
	memset(&r, 0, sizeof(r));
	n = read(sync, &r, sizeof(r));
	if (n == 0)
		return 0;   /* CLOEXEC socket closed by the exec: init runs */
	if (n == (ssize_t)sizeof(r)) {
		r.step[sizeof(r.step) - 1] = '\0';
		return err_sys(e, r.err, "%s", r.step);
	}
	return err_sys(e, n < 0 ? EIO : EPROTO, "sandbox setup failed");
}

struct sandbox_child {
	const struct spawn_plan *sp;
	int sync;
};

static int sandbox_child(void *arg)
{
	const struct sandbox_child *sc = arg;

	child_main(sc->sp, sc->sync);
}

pid_t spawn_sandbox(const struct spawn_plan *sp, spawn_attach_fn attach, void *arg, int *pidfd,
		    struct sbx_err *e)
{
	struct sandbox_child sc = { .sp = sp };
	struct vm_child vc;
	int sv[2], fd = -1, rc;
	unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
			      CLONE_PIDFD | SIGCHLD;
	long pid;

	*pidfd = -1;
	if (sp->netns_fd < 0)
		flags |= CLONE_NEWNET;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(e, errno, "socketpair");
	sc.sync = sv[1];
	pid = vm_child_start(&vc, flags, sandbox_child, &sc, &fd);
	if (pid < 0) {
		int err = errno;

		close(sv[0]);
		close(sv[1]);
		return err_sys(e, err, "clone");
	}
	close(sv[1]);
	rc = parent_side(sp, (pid_t)pid, sv[0], attach, arg, e);
	if (rc < 0) {
		syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
		if (sp->thaw)
			sp->thaw(arg);
		spawn_reap(fd, 1);
	}
	/* exec'd (its end closed at the exec, after its memory was its own)
	 * or reaped: the stack is free */
	vm_child_end(&vc);
	close(sv[0]);
	if (rc < 0) {
		close(fd);
		return -1;
	}
	*pidfd = fd;
	return (pid_t)pid;
}

/* ---- host programs ------------------------------------------------------ */

/* The child of spawn_host; rep is the write end of the report pipe. */
static __attribute__((noreturn)) void host_child(const struct spawn_host_cmd *cmd, pid_t parent,
						  int devnull, int rep, const sigset_t *old)
{
	const int src[3] = { cmd->in, cmd->out, cmd->err };
	int moved[3], err;

	sigdfl_all();
	if ((cmd->flags & SPAWN_HOST_PDEATHSIG) &&
	    (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent))
		goto fail;
	if ((cmd->flags & SPAWN_HOST_PGROUP) && setpgid(0, 0) < 0)
		goto fail;
	/* copies above 2 first, so that no source is overwritten by another's dup2 */
	for (int i = 0; i < 3; i++)
		if ((moved[i] = fcntl(src[i] >= 0 ? src[i] : devnull, F_DUPFD_CLOEXEC, 3)) < 0)
			goto fail;
	for (int i = 0; i < 3; i++)
		if (dup2(moved[i], i) < 0)
			goto fail;
	if (cmd->pre_exec && cmd->pre_exec(cmd->pre_arg) < 0)
		goto fail;
	/* every other fd closes at the exec; rep reports until then */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		struct rlimit rl;
		int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1048576 ? (int)rl.rlim_cur : 1048576;

		for (int fd = 3; fd < max; fd++)
			if (fd != rep)
				(void)close(fd);
	}
	if (cmd->fn) {
		close(rep);
		sigprocmask(SIG_SETMASK, old, NULL);
		_exit(cmd->fn(cmd->arg));
	}
	{
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
	}
	execve(cmd->path, cmd->argv, cmd->envp ? cmd->envp : environ);
fail:
	err = errno;
	(void)!write(rep, &err, sizeof(err));
	_exit(127);
}

pid_t spawn_host(const struct spawn_host_cmd *cmd, int *pidfd, struct sbx_err *e)
{
	auto_close int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	const char *what = cmd->fn ? "a host child" : cmd->path;
	pid_t parent = getpid();
	sigset_t all, old;
	int rep[2], fd = -1, child_err = 0, err;
	long pid;
	ssize_t n;

	*pidfd = -1;
	if (devnull < 0)
		return err_sys(e, errno, "cannot open /dev/null");
	if (pipe2(rep, O_CLOEXEC) < 0)
		return err_sys(e, errno, "pipe");
	/* no handler of ours may run in the child between fork and exec */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid = syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, NULL, &fd, NULL, NULL);
	if (pid == 0)
		host_child(cmd, parent, devnull, rep[1], &old);
	err = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(rep[1]);
	if (pid < 0) {
		close(rep[0]);
		return err_sys(e, err, "cannot start '%s'", what);
	}
	/* EOF when the exec succeeded (CLOEXEC), the child's errno if not */
	do
		n = read(rep[0], &child_err, sizeof(child_err));
	while (n < 0 && errno == EINTR);
	close(rep[0]);
	if (n != 0) {
		spawn_reap(fd, 1);
		close(fd);
		return err_sys(e, n == (ssize_t)sizeof(child_err) ? child_err : EPROTO,
			       "cannot run '%s'", what);
	}
	*pidfd = fd;
	return (pid_t)pid;
}

int spawn_host_wait(int pidfd, struct sbx_err *e)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0)
		if (errno != EINTR)
			return err_sys(e, errno, "waitid");
	if (si.si_code == CLD_EXITED)
		return si.si_status;
	return 128 + si.si_status;
}
