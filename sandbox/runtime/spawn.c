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

/* The child's own fd table, first thing: a copy of only the fds below
 * the block's end (the rest stay the agent's, never copied), then every
 * fd above 2 but its group [lo, lo + SPAWN_GROUP_FDS) closed: the other
 * groups are other builds' (a copy of their sockets held here would keep
 * their end of stream from coming). */
static void own_fds(int lo, int end, int sync)
{
	if (syscall(SYS_close_range, (unsigned)end, ~0U, CLOSE_RANGE_UNSHARE) < 0)
		child_fail(sync, "unshare the fd table", errno);
	if (lo > 3)
		(void)syscall(SYS_close_range, 3U, (unsigned)lo - 1, 0U);
	if (lo + SPAWN_GROUP_FDS < end)
		(void)syscall(SYS_close_range, (unsigned)(lo + SPAWN_GROUP_FDS), (unsigned)end - 1, 0U);
}

static __attribute__((noreturn)) void child_main(const struct spawn_plan *sp, int sync, int lo,
						  int end)
{
	static char *const init_argv[] = { (char *)"sbx-init", NULL };
	static char *const init_env[] = {
		(char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL
	};
	const struct mnt_op *failed = NULL;
	char go;
	int exe, sock, devnull;

	own_fds(lo, end, sync);
	if (write(sync, "F", 1) != 1)
		_exit(1);
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

/* ---- the fd block ---------------------------------------------------- */

#define SPAWN_BLOCK_FDS (1 + SPAWN_GROUPS * SPAWN_GROUP_FDS)

int spawn_fds_init(struct spawn_fds *f, struct sbx_err *e)
{
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC), base = 3, n = 0;

	f->base = -1;
	f->busy = 0;
	if (null < 0)
		return err_sys(e, errno, "cannot open /dev/null");
	/* the lowest run of free fds: a taken one (another thread may open
	 * meanwhile) starts the run again above it */
	while (n < SPAWN_BLOCK_FDS) {
		int fd = fcntl(null, F_DUPFD_CLOEXEC, base + n);

		if (fd < 0) {
			int err = errno;

			if (n)
				(void)syscall(SYS_close_range, (unsigned)base, (unsigned)(base + n - 1), 0U);
			close(null);
			return err_sys(e, err, "cannot reserve %d fds for builds", SPAWN_BLOCK_FDS);
		}
		if (fd == base + n) {
			n++;
			continue;
		}
		if (n)
			(void)syscall(SYS_close_range, (unsigned)base, (unsigned)(base + n - 1), 0U);
		base = fd;
		n = 1;
	}
	close(null);
	f->base = base;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->freed, NULL);
	return 0;
}

void spawn_fds_release(struct spawn_fds *f)
{
	if (f->base < 0)
		return;
	(void)syscall(SYS_close_range, (unsigned)f->base, (unsigned)(f->base + SPAWN_BLOCK_FDS - 1), 0U);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->freed);
	f->base = -1;
}

/* A free group of the block (waits for one): its first fd. */
static int group_take(struct spawn_fds *f)
{
	int g = 0;

	pthread_mutex_lock(&f->lock);
	while (f->busy == (1u << SPAWN_GROUPS) - 1)
		pthread_cond_wait(&f->freed, &f->lock);
	while (f->busy & (1u << g))
		g++;
	f->busy |= 1u << g;
	pthread_mutex_unlock(&f->lock);
	return f->base + 1 + g * SPAWN_GROUP_FDS;
}

/* Back to /dev/null, which drops the group's references; free it. */
static void group_put(struct spawn_fds *f, int lo)
{
	int g = (lo - f->base - 1) / SPAWN_GROUP_FDS;

	for (int i = 0; i < SPAWN_GROUP_FDS; i++)
		(void)dup3(f->base, lo + i, O_CLOEXEC);
	pthread_mutex_lock(&f->lock);
	f->busy &= ~(1u << g);
	pthread_cond_signal(&f->freed);
	pthread_mutex_unlock(&f->lock);
}

/* *fd (if >= 0) into the group's next slot: *fd becomes its number. */
static int group_move(int lo, int *used, int *fd)
{
	if (*fd < 0)
		return 0;
	if (*used == SPAWN_GROUP_FDS) {
		errno = EMFILE;
		return -1;
	}
	if (dup3(*fd, lo + *used, O_CLOEXEC) < 0)
		return -1;
	*fd = lo + (*used)++;
	return 0;
}

/* One message from the child within the setup's time: its length (0:
 * the CLOEXEC end closed, so it exec'd or died), or -1 with errno. */
static ssize_t child_says(int sync, struct child_report *r)
{
	struct pollfd p = { .fd = sync, .events = POLLIN };
	int err = wait_readable(&p, 1, SPAWN_TIMEOUT_MS);
	ssize_t n;

	if (err) {
		errno = err;
		return -1;
	}
	memset(r, 0, sizeof(*r));
	n = read(sync, r, sizeof(*r));
	if (n == (ssize_t)sizeof(*r))
		r->step[sizeof(r->step) - 1] = '\0';
	return n;
}

/* The parent's half of the handshake; 0 when the child exec'd sbx-init.
 * Its group goes back (*lo = -1) once the child has a table of its own:
 * till then the group's fds are the child's too, and the child's end of
 * sync held there would keep the exec's end of stream from coming. */
static int parent_side(struct spawn_fds *f, int *lo, pid_t pid, int sync, spawn_attach_fn attach,
		       void *arg, struct sbx_err *e)
{
	struct child_report r;
	ssize_t n;

	if (attach(arg, pid, e) < 0)
		return -1;
	n = child_says(sync, &r);
	if (n != 1 || ((char *)&r)[0] != 'F')
		goto failed;
	group_put(f, *lo);
	*lo = -1;
	if (write(sync, "G", 1) != 1)
		return err_sys(e, errno, "cannot start the sandbox");
	n = child_says(sync, &r);
	if (n == 0)
		return 0;   /* CLOEXEC socket closed by the exec: init runs */
failed:
	if (n < 0)
		return err_sys(e, errno, "sandbox setup did not finish");
	if (n == (ssize_t)sizeof(r))
		return err_sys(e, r.err, "%s", r.step);
	return err_sys(e, EPROTO, "sandbox setup failed");
}

/* ---- sandboxes ---------------------------------------------------------- */

struct sandbox_child {
	const struct spawn_plan *sp;
	int sync, lo, end;
};

static int sandbox_child(void *arg)
{
	const struct sandbox_child *sc = arg;

	child_main(sc->sp, sc->sync, sc->lo, sc->end);
}

/* The plan's fds into the group at lo: csp is sp with their numbers there,
 * the mount plan's renumbered in place (attach[] keeps the originals). */
static int group_fill(const struct spawn_plan *sp, struct spawn_plan *csp, int lo, int *sync,
		      int attach[SPAWN_GROUP_FDS])
{
	int used = 0, na = 0;

	*csp = *sp;
	if (group_move(lo, &used, sync) < 0 || group_move(lo, &used, &csp->init_exe_fd) < 0 ||
	    group_move(lo, &used, &csp->init_sock) < 0 || group_move(lo, &used, &csp->userns_fd) < 0 ||
	    group_move(lo, &used, &csp->netns_fd) < 0)
		return -1;
	for (size_t i = 0; i < sp->mounts->n; i++) {
		struct mnt_op *op = &sp->mounts->ops[i];
		int own = op->fd;

		if (op->kind != MNT_ATTACH)
			continue;
		if (group_move(lo, &used, &op->fd) < 0)
			return -1;
		attach[na++] = own;
	}
	return 0;
}

/* Give the mount plan's renumbered fds (attach[], up to a -1) their own
 * numbers back. */
static void group_unfill(const struct spawn_plan *sp, const int attach[SPAWN_GROUP_FDS])
{
	int na = 0;

	for (size_t i = 0; i < sp->mounts->n && na < SPAWN_GROUP_FDS && attach[na] >= 0; i++)
		if (sp->mounts->ops[i].kind == MNT_ATTACH)
			sp->mounts->ops[i].fd = attach[na++];
}

pid_t spawn_sandbox(const struct spawn_plan *sp, spawn_attach_fn attach, void *arg, int *pidfd,
		    struct sbx_err *e)
{
	struct spawn_plan csp;
	struct sandbox_child sc = { .sp = &csp };
	struct vm_child vc;
	int sv[2], fd = -1, rc, attach_fds[SPAWN_GROUP_FDS];
	unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
			      CLONE_FILES | CLONE_PIDFD | SIGCHLD;
	long pid;

	*pidfd = -1;
	if (sp->netns_fd < 0)
		flags |= CLONE_NEWNET;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(e, errno, "socketpair");
	sc.sync = sv[1];
	sc.lo = group_take(sp->fds);
	sc.end = sp->fds->base + SPAWN_BLOCK_FDS;
	for (int i = 0; i < SPAWN_GROUP_FDS; i++)
		attach_fds[i] = -1;
	if (group_fill(sp, &csp, sc.lo, &sc.sync, attach_fds) < 0) {
		err_sys(e, errno, "cannot move the sandbox's fds for its clone");
		goto not_started;
	}
	pid = vm_child_start(&vc, flags, sandbox_child, &sc, &fd);
	if (pid < 0) {
		err_sys(e, errno, "clone");
		goto not_started;
	}
	close(sv[1]);   /* the child's is in the group (the table is shared until it copies) */
	rc = parent_side(sp->fds, &sc.lo, (pid_t)pid, sv[0], attach, arg, e);
	if (rc < 0) {
		syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
		if (sp->thaw)
			sp->thaw(arg);
		spawn_reap(fd, 1);
	}
	/* exec'd (its end closed at the exec, after its memory and fds were
	 * its own) or reaped: the stack and the group are free */
	vm_child_end(&vc);
	group_unfill(sp, attach_fds);
	if (sc.lo >= 0)
		group_put(sp->fds, sc.lo);
	close(sv[0]);
	if (rc < 0) {
		close(fd);
		return -1;
	}
	*pidfd = fd;
	return (pid_t)pid;
not_started:
	group_unfill(sp, attach_fds);
	group_put(sp->fds, sc.lo);
	close(sv[0]);
	close(sv[1]);
	return -1;
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
