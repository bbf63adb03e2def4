/*
 * sbx-init — PID 1 of every sandbox. Statically linked, libc only.
 *
 * It talks to sbx-agent over the SOCK_SEQPACKET socket on fd INITPROTO_FD
 * (initproto.h). SPAWN hands the message to a keeper, which becomes the
 * child subreaper of the new process's tree and starts the process in its
 * own session with the three passed fds as stdio (a terminal on stdin
 * becomes its controlling terminal); the keeper reports STARTED or FAILED
 * and the process's EXITED, and reaps everything of its tree until nothing
 * is left; then it tells init, which reports GONE. A keeper whose tree
 * ended on its own waits up to KEEPER_IDLE_MS for the next SPAWN (at most
 * one waits; init forks one when none does), so commands in a row cost no
 * fork of a keeper each; AHEAD has one forked to wait the same way
 * before the first command, which then pays no fork either. A keeper
 * whose tree was killed, or that is not kept, exits, and GONE follows its
 * exit: after GONE of a killed tree no process of it, keeper included, is
 * left.
 * SIGNAL signals the process, or every process of its tree (the keeper's
 * descendants: also what called setsid() or lost its parent); a SIGKILL of
 * a tree is repeated until the tree is empty. Init reaps every child
 * (orphans of a killed keeper too). When the agent's end closes, it kills
 * everything and exits. Its stdio is /dev/null; it never prints.
 */
#include "initproto.h"
#include "sigdfl.h"
#include "util.h"
#include "vmchild.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define KILL_ROUNDS 8          /* scans per SIGKILL of a tree */
#define KEEPER_CH_FD 4         /* in a keeper: its channel to init (3 is the agent's socket) */
#define KEEPER_IDLE_MS 250     /* a keeper waits this long for the next SPAWN */
#define NOTE_NUDGE_MS 100      /* waiting for a keeper's note: SIGCONT it this often */
#define NOTE_WAIT_MS 10000     /* and give up after this long */
#define KILL_RETRY_MS 50       /* then again this often until it is empty */

extern char **environ;

struct proc {
	int64_t handle;
	pid_t keeper;          /* the subreaper of the tree */
	pid_t pid;             /* the process itself */
	int ch;                /* init's end of the keeper's channel; -1 once it closed */
	int killing;           /* SIGKILLed: kill again until its tree is empty */
};

/* What a keeper tells init over its channel (SOCK_SEQPACKET): the pid, then
 * how the start went (both while init waits in do_spawn); later, once its
 * tree is empty, one more note (pid 0, err 0): it waits for the next SPAWN. */
struct keeper_note {
	int32_t pid;
	int32_t err;
};

/* A keeper whose tree is empty, waiting for a SPAWN (pid 0: none). */
struct idle_keeper {
	pid_t pid;
	int ch;
	int64_t until;         /* CLOCK_MONOTONIC ms: then it is sent away */
};

static struct proc *procs;
static size_t nprocs, capprocs;
static struct pollfd *pfds;    /* agent socket, signalfd, then each keeper's channel */
static struct idle_keeper idle = { 0, -1, 0 };
static int sock = INITPROTO_FD;
static int sigfd = -1;

static void send_msg(uint32_t type, int64_t handle, int32_t a, int32_t b)
{
	char buf[64];
	ssize_t n = initproto_encode(buf, sizeof(buf), type, handle, a, b);

	if (n > 0)
		(void)initproto_send(sock, buf, (size_t)n, NULL, 0, 0);
}

/* Room for one more record (and its poll slot). 0 or -1. */
static int reserve(void)
{
	if (nprocs == capprocs) {
		size_t nc = capprocs ? capprocs * 2 : 16;
		struct proc *np = realloc(procs, nc * sizeof(*np));
		struct pollfd *npf;

		if (!np)
			return -1;
		procs = np;
		npf = realloc(pfds, (nc + 2) * sizeof(*npf));
		if (!npf)
			return -1;
		pfds = npf;
		capprocs = nc;
	}
	return 0;
}

static void track(int64_t handle, pid_t keeper, pid_t pid, int ch)
{
	procs[nprocs].handle = handle;
	procs[nprocs].keeper = keeper;
	procs[nprocs].pid = pid;
	procs[nprocs].ch = ch;
	procs[nprocs].killing = 0;
	nprocs++;
}

static struct proc *find_handle(int64_t handle)
{
	for (size_t i = 0; i < nprocs; i++)
		if (procs[i].handle == handle)
			return &procs[i];
	return NULL;
}

static void untrack(struct proc *p)
{
	*p = procs[--nprocs];
}

/* In the keeper's child, which shares the keeper's memory until its exec
 * (proc_child): become the process that was asked for. Syscalls only, the
 * credential calls raw, no PR_SET_DUMPABLE (it would make the shared
 * keeper dumpable; the exec sets the process's own). Never returns. */
static void child_exec(const struct initproto_msg *m, const int *fds, int errpipe)
{
	sigset_t none;
	int err;

	/* Every disposition is already the default (init reset them all at
	 * its start and neither it nor the keeper changes one); the keeper's
	 * blocked signals are all that is left to undo. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	/* fds[] are all >= 3 (init keeps 0-2 open on /dev/null). */
	if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0)
		goto fail;
	/* A terminal as stdin (the slave of a pty the agent opened in this
	 * sandbox's devpts) becomes the controlling terminal of the new
	 * session: job control, ^C and SIGWINCH reach its foreground group. */
	if (isatty(0) && ioctl(0, TIOCSCTTY, 0) < 0)
		goto fail;
	syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
	/* The ids last, after everything that needs root; chdir and exec as
	 * the user. Dropping from uid 0 clears every capability. */
	if (m->uid >= 0 && (syscall(SYS_setgroups, 0, NULL) < 0 ||
			    syscall(SYS_setgid, (gid_t)m->gid) < 0 ||
			    syscall(SYS_setuid, (uid_t)m->uid) < 0))
		goto fail;
	if (chdir(m->cwd) < 0)
		goto fail;
	environ = m->env;
	execvpe(m->argv[0], m->argv, m->env);
fail:
	err = errno;
	(void)!write(errpipe, &err, sizeof(err));
	_exit(127);
}

/* Parent pid, process group and state letter of pid from /proc (pgrp may
 * be NULL). 0, or -1 when gone. */
static int proc_stat(pid_t pid, pid_t *ppid, pid_t *pgrp, char *state)
{
	char path[32], buf[512];
	const char *rp;
	char *end;
	long pp, pg;
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid) >= (int)sizeof(path))
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || !rp[2] || rp[3] != ' ')
		return -1;
	*state = rp[2];
	errno = 0;
	pp = strtol(rp + 4, &end, 10);
	pg = strtol(end, NULL, 10);
	if (errno || pp < 0 || pg < 0)
		return -1;
	*ppid = (pid_t)pp;
	if (pgrp)
		*pgrp = (pid_t)pg;
	return 0;
}

struct pnode {
	pid_t pid, ppid, pgrp;
	char state;
	int mark;
};

static int pnode_cmp(const void *a, const void *b)
{
	const struct pnode *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Send sig to every live descendant of keeper (not to keeper itself).
 * Returns how many were signalled, or -1 when /proc cannot be read. */
static int signal_descendants(pid_t keeper, int sig)
{
	struct pnode *v = NULL, key;
	size_t n = 0, cap = 0;
	struct dirent *d;
	int changed, count = 0;
	DIR *dir = opendir("/proc");

	if (!dir)
		return -1;
	while ((d = readdir(dir))) {
		char *end;
		long pid;

		if (d->d_name[0] < '0' || d->d_name[0] > '9')
			continue;
		pid = strtol(d->d_name, &end, 10);
		if (*end || pid <= 1)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 128;
			struct pnode *nv = realloc(v, nc * sizeof(*nv));

			if (!nv)
				break;
			v = nv;
			cap = nc;
		}
		v[n].pid = (pid_t)pid;
		v[n].mark = 0;
		if (proc_stat(v[n].pid, &v[n].ppid, &v[n].pgrp, &v[n].state) == 0)
			n++;
	}
	closedir(dir);
	if (n)
		qsort(v, n, sizeof(*v), pnode_cmp);
	/* Mark the keeper's children, then their children, until no change. */
	do {
		changed = 0;
		for (size_t i = 0; i < n; i++) {
			struct pnode *parent;

			if (v[i].mark)
				continue;
			if (v[i].ppid == keeper) {
				v[i].mark = changed = 1;
				continue;
			}
			key.pid = v[i].ppid;
			parent = bsearch(&key, v, n, sizeof(*v), pnode_cmp);
			if (parent && parent->mark)
				v[i].mark = changed = 1;
		}
	} while (changed);
	/* A SIGKILL goes to the groups led by the tree's processes first: a
	 * group kill is atomic against fork (a fork bomb in one group ends at
	 * once). Their members are all of the tree: every session in it was
	 * made by one of its processes. Other signals reach each process once. */
	if (sig == SIGKILL)
		for (size_t i = 0; i < n; i++)
			if (v[i].mark && v[i].pgrp == v[i].pid && v[i].pid > 1)
				kill(-v[i].pid, SIGKILL);
	for (size_t i = 0; i < n; i++)
		if (v[i].mark && v[i].state != 'Z' && kill(v[i].pid, sig) == 0)
			count++;
	free(v);
	return count;
}

/* Signal the whole tree of p, each process once; a SIGKILL is repeated
 * while it finds any (and later, see rekill). */
static void signal_tree(struct proc *p, int sig)
{
	for (int round = 0; round < KILL_ROUNDS; round++) {
		int n = signal_descendants(p->keeper, sig);

		if (n < 0)
			kill(-p->pid, sig);   /* no /proc: the group at least */
		if (n <= 0 || sig != SIGKILL)
			break;
	}
	if (sig == SIGKILL)
		p->killing = 1;
}

/* In the keeper: one note for init. 0, or -1 when init is gone. */
static int keeper_note(pid_t pid, int err)
{
	struct keeper_note kn = { .pid = pid, .err = err };

	return send(KEEPER_CH_FD, &kn, sizeof(kn), MSG_NOSIGNAL) == (ssize_t)sizeof(kn) ? 0 : -1;
}

/* What the keeper's child needs (it reads it in the keeper's memory). */
struct proc_start {
	const struct initproto_msg *m;
	const int *fds;
	const int *ep, *gp;        /* error pipe, go pipe */
};

static int proc_child(void *arg)
{
	const struct proc_start *ps = arg;
	char go;
	ssize_t n;

	close(ps->ep[0]);
	close(ps->gp[1]);
	close(KEEPER_CH_FD);
	setsid();
	/* wait until init knows the pid; the keeper gone: do not run */
	do
		n = read(ps->gp[0], &go, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(127);
	close(ps->gp[0]);
	child_exec(ps->m, ps->fds, ps->ep[1]);
	return 127;
}

/* In a keeper: start the process of m, report it, reap its tree until
 * nothing is left. Returns once the tree is empty; exits when the process
 * did not start. Init learns the pid before the process runs anything of
 * its own, so that a keeper killed from inside the sandbox never leaves a
 * process init does not know of. */
static void keeper_run(const struct initproto_msg *m, const int *fds)
{
	int ep[2] = { -1, -1 }, gp[2] = { -1, -1 }, err = 0, st;
	/* read by the child until its exec */
	const struct proc_start ps = { m, fds, ep, gp };
	struct vm_child vc = { 0 };
	pid_t pid, w;
	ssize_t n;

	if (pipe2(ep, O_CLOEXEC) < 0 || pipe2(gp, O_CLOEXEC) < 0 ||
	    (pid = (pid_t)vm_child_start(&vc, SIGCHLD, proc_child, (void *)&ps, NULL)) < 0) {
		err = errno;
		send_msg(INITPROTO_FAILED, m->handle, err, 0);
		keeper_note(0, err);
		_exit(0);
	}
	close(ep[1]);
	close(gp[0]);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	keeper_note(pid, 0);
	(void)!write(gp[1], "g", 1);
	close(gp[1]);
	do
		n = read(ep[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(ep[0]);
	if (n == (ssize_t)sizeof(err)) {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		err = err > 0 ? err : EIO;
		send_msg(INITPROTO_FAILED, m->handle, err, 0);
		keeper_note(pid, err);
		_exit(0);
	}
	/* exec'd: the child no longer runs on that stack */
	vm_child_end(&vc);
	/* STARTED goes first so that EXITED, sent from here too, follows it. */
	send_msg(INITPROTO_STARTED, m->handle, pid, 0);
	keeper_note(pid, 0);
	for (;;) {
		w = waitpid(-1, &st, 0);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			break;   /* ECHILD: the tree is empty */
		}
		if (w == pid)
			send_msg(INITPROTO_EXITED, m->handle, pid, st);
	}
}

/* A forked keeper: run each SPAWN init hands it, one at a time, until init
 * closes its channel. Never returns. */
static void keeper_main(int ch)
{
	static char buf[INITPROTO_MAX];
	static const int unblocked[] = { SIGCHLD, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT,
					 SIGTRAP, SIGSYS };
	sigset_t keep_off;

	/* Only the agent's socket and the channel stay open: no other
	 * keeper's channel (init alone must hold those to end them), no
	 * signalfd, no fds of the SPAWN at hand (they come with the channel). */
	if (dup2(ch, KEEPER_CH_FD) < 0)
		_exit(1);
	syscall(SYS_close_range, (unsigned)KEEPER_CH_FD + 1, ~0U, 0U);
	/* A kill of the tree spares the keeper; a kill of everything from
	 * inside the sandbox is noticed by init (reap). Blocked, not ignored:
	 * one call instead of one per signal, and its child has only the mask
	 * to undo (a blocked signal stays pending, never delivered, and a
	 * child starts with none pending). Faults and SIGCHLD keep their
	 * default action. */
	sigfillset(&keep_off);
	for (size_t i = 0; i < sizeof(unblocked) / sizeof(unblocked[0]); i++)
		sigdelset(&keep_off, unblocked[i]);
	sigprocmask(SIG_SETMASK, &keep_off, NULL);
	prctl(PR_SET_NAME, "sbx-keeper");
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	for (;;) {
		struct initproto_msg m;
		int fds[3], nfds = 0;
		ssize_t n = initproto_recv(KEEPER_CH_FD, buf, sizeof(buf), fds, &nfds, 0);

		/* init validated the message and its fds before it came here */
		if (n <= 0 || nfds != 3 || initproto_decode(buf, (size_t)n, &m) < 0)
			_exit(0);
		keeper_run(&m, fds);
		free(m.argv);
		environ = NULL;   /* the child pointed it at m's env */
		if (keeper_note(0, 0) < 0)
			_exit(0);
	}
}

/* Read one keeper note. 0, or -1 when the keeper died first. */
static int read_note(int fd, pid_t keeper, struct keeper_note *kn)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	int waited = 0, r;
	ssize_t n;

	/* A keeper stopped from inside the sandbox would keep init waiting
	 * here, deaf to the agent: wake it while waiting, and give up on one
	 * that does not answer at all. */
	while ((r = poll(&pf, 1, NOTE_NUDGE_MS)) <= 0) {
		if (r < 0 && errno != EINTR)
			return -1;
		if (r == 0 && (waited += NOTE_NUDGE_MS) >= NOTE_WAIT_MS)
			return -1;
		kill(keeper, SIGCONT);
	}
	do
		n = read(fd, kn, sizeof(*kn));
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(*kn) ? 0 : -1;
}

/* A keeper for the next SPAWN: the one waiting, or a new fork. Its pid,
 * and init's end of its channel in *ch; -1 with errno. */
static pid_t keeper_take(int *ch)
{
	int sp[2];
	pid_t pid;

	if (idle.pid > 0) {
		pid = idle.pid;
		*ch = idle.ch;
		idle = (struct idle_keeper){ 0, -1, 0 };
		return pid;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sp[0]);
		keeper_main(sp[1]);
	}
	close(sp[1]);
	if (pid < 0) {
		int err = errno;

		close(sp[0]);
		errno = err;
		return -1;
	}
	*ch = sp[0];
	return pid;
}

/* AHEAD: fork a keeper to wait for the next SPAWN, unless one waits. The
 * agent sends it once the sandbox is built, so the fork is done while the
 * answer to the create travels back and the first command finds its
 * keeper ready. */
static void keeper_ahead(void)
{
	int ch;
	pid_t pid;

	if (idle.pid > 0 || (pid = keeper_take(&ch)) < 0)
		return;
	idle = (struct idle_keeper){ pid, ch, util_now_ms() + KEEPER_IDLE_MS };
}

/* SPAWN m (raw: its len bytes as received) with its fds: a keeper runs it. */
static void do_spawn(const struct initproto_msg *m, const void *raw, size_t len, const int *fds,
		     int nfds)
{
	struct keeper_note kn = { 0, EIO }, res = { 0, EIO };
	pid_t keeper;
	int ch = -1;

	if (nfds != 3) {
		send_msg(INITPROTO_FAILED, m->handle, EBADF, 0);
		return;
	}
	if (find_handle(m->handle)) {
		send_msg(INITPROTO_FAILED, m->handle, EEXIST, 0);
		return;
	}
	if (reserve() < 0) {
		send_msg(INITPROTO_FAILED, m->handle, ENOMEM, 0);
		return;
	}
	/* a waiting keeper killed meanwhile: its channel fails, fork one */
	for (int tries = 0; tries < 2; tries++) {
		keeper = keeper_take(&ch);
		if (keeper < 0 || initproto_send(ch, raw, len, fds, 3, 0) == 0)
			break;
		close(ch);
		kill(keeper, SIGKILL);
		keeper = -1;
		errno = EIO;
	}
	if (keeper < 0) {
		send_msg(INITPROTO_FAILED, m->handle, errno, 0);
		return;
	}
	/* Wait until the process runs (or not), so that a SIGNAL that follows
	 * this SPAWN finds it. The keeper has sent STARTED or FAILED. */
	if (read_note(ch, keeper, &kn) < 0) {
		/* the keeper died (or hung) before it cloned: nothing runs,
		 * nothing was said */
		close(ch);
		kill(keeper, SIGKILL);
		send_msg(INITPROTO_FAILED, m->handle, EIO, 0);
		return;
	}
	if (kn.err) {
		/* FAILED is sent; the keeper has no tree */
		close(ch);
		kill(keeper, SIGKILL);
		return;
	}
	if (read_note(ch, keeper, &res) < 0) {
		/* the keeper was killed (or hung) while the process started:
		 * end both */
		close(ch);
		kill(keeper, SIGKILL);
		kill(-kn.pid, SIGKILL);
		send_msg(INITPROTO_EXITED, m->handle, kn.pid, SIGKILL);
		send_msg(INITPROTO_GONE, m->handle, keeper, SIGKILL);
		return;
	}
	if (res.err) {
		close(ch);
		kill(keeper, SIGKILL);
		return;
	}
	track(m->handle, keeper, kn.pid, ch);
}

/* A keeper's channel is readable: its tree is empty, or the channel closed
 * (the keeper died). A tree that ended on its own is GONE now and its
 * keeper waits for the next SPAWN, unless one already does. Otherwise the
 * channel is closed: the keeper reads its end and exits, and reap reports
 * GONE once it has. */
static void on_keeper(struct proc *p)
{
	struct keeper_note kn;
	ssize_t n;

	do
		n = recv(p->ch, &kn, sizeof(kn), MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return;
	if (n == (ssize_t)sizeof(kn) && !p->killing && idle.pid == 0) {
		send_msg(INITPROTO_GONE, p->handle, p->keeper, 0);
		idle = (struct idle_keeper){ p->keeper, p->ch, util_now_ms() + KEEPER_IDLE_MS };
		untrack(p);
		return;
	}
	close(p->ch);
	p->ch = -1;
}

/* Send the waiting keeper away once its time is up. The poll timeout
 * until then (ms), or -1 when none waits. */
static int idle_expire(void)
{
	int64_t left;

	if (idle.pid == 0)
		return -1;
	left = idle.until - util_now_ms();
	if (left > 0)
		return (int)left;
	/* it has no tree: nothing to wait for */
	kill(idle.pid, SIGKILL);
	close(idle.ch);
	idle = (struct idle_keeper){ 0, -1, 0 };
	return -1;
}

static void do_signal(const struct initproto_msg *m)
{
	struct proc *p = find_handle(m->handle);
	pid_t ppid;
	char state;

	if (!p)
		return;
	if (m->tree)
		signal_tree(p, m->value);
	else if (proc_stat(p->pid, &ppid, NULL, &state) == 0 && ppid == p->keeper && state != 'Z')
		kill(p->pid, m->value);
}

/* Is pid a keeper init knows (one with a tree, or the waiting one)? */
static int known_keeper(pid_t pid)
{
	if (pid == idle.pid)
		return 1;
	for (size_t i = 0; i < nprocs; i++)
		if (procs[i].keeper == pid)
			return 1;
	return 0;
}

/* Reap every child that has exited: a keeper ends its tree. A keeper that
 * did not exit on its own (killed from inside the sandbox) may not have
 * reported the process: report it killed, and kill its group. A keeper
 * stopped from inside (SIGSTOP cannot be blocked) goes on at once: stopped,
 * it would never reap its tree nor report it, nor take the next SPAWN. */
static void reap(void)
{
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG | WUNTRACED);

		if (pid <= 0)
			return;
		if (WIFSTOPPED(st)) {
			if (known_keeper(pid))
				kill(pid, SIGCONT);
			continue;
		}
		if (pid == idle.pid) {   /* killed while it waited */
			close(idle.ch);
			idle = (struct idle_keeper){ 0, -1, 0 };
			continue;
		}
		for (size_t i = 0; i < nprocs; i++) {
			if (procs[i].keeper == pid) {
				struct proc p = procs[i];

				untrack(&procs[i]);
				if (p.ch >= 0)
					close(p.ch);
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
					kill(-p.pid, SIGKILL);
					send_msg(INITPROTO_EXITED, p.handle, p.pid, SIGKILL);
				}
				send_msg(INITPROTO_GONE, p.handle, pid, st);
				break;
			}
		}
	}
}

/* Kill again what is left of the trees being killed. */
static void rekill(void)
{
	for (size_t i = 0; i < nprocs; i++)
		if (procs[i].killing)
			signal_descendants(procs[i].keeper, SIGKILL);
}

static int any_killing(void)
{
	for (size_t i = 0; i < nprocs; i++)
		if (procs[i].killing)
			return 1;
	return 0;
}

/* One message from the agent; 0, or -1 when the agent is gone. */
static int on_socket(char *buf)
{
	struct initproto_msg m;
	int fds[3], nfds = 0;
	ssize_t n = initproto_recv(sock, buf, INITPROTO_MAX, fds, &nfds, 0);

	if (n == 0)
		return -1;
	if (n < 0)
		return (errno == EMSGSIZE || errno == EAGAIN) ? 0 : -1;
	if (initproto_decode(buf, (size_t)n, &m) < 0) {
		struct initproto_hdr h;

		if ((size_t)n >= sizeof(h)) {
			memcpy(&h, buf, sizeof(h));
			if (h.type == INITPROTO_SPAWN || h.type == INITPROTO_SPAWN_AS)
				send_msg(INITPROTO_FAILED, h.handle, EINVAL, 0);
		}
	} else if (m.type == INITPROTO_SPAWN) {
		do_spawn(&m, buf, (size_t)n, fds, nfds);
		free(m.argv);
	} else if (m.type == INITPROTO_SIGNAL) {
		do_signal(&m);
	} else if (m.type == INITPROTO_AHEAD) {
		keeper_ahead();
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return 0;
}

int main(void)
{
	static char buf[INITPROTO_MAX];
	sigset_t set;

	prctl(PR_SET_DUMPABLE, 0);
	/* nothing of the agent's signal state: its ignored signals would reach
	 * every process here, and its build thread blocks them all */
	sigdfl_all();
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_SETMASK, &set, NULL);
	sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0 || fcntl(sock, F_SETFD, FD_CLOEXEC) < 0 || reserve() < 0)
		return 1;
	for (;;) {
		size_t nwatch = nprocs;
		int wait_ms = idle_expire(), r;

		pfds[0] = (struct pollfd){ .fd = sock, .events = POLLIN };
		pfds[1] = (struct pollfd){ .fd = sigfd, .events = POLLIN };
		for (size_t i = 0; i < nwatch; i++)
			pfds[2 + i] = (struct pollfd){ .fd = procs[i].ch, .events = POLLIN };
		if (any_killing() && (wait_ms < 0 || wait_ms > KILL_RETRY_MS))
			wait_ms = KILL_RETRY_MS;
		r = poll(pfds, nwatch + 2, wait_ms);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (any_killing())
			rekill();
		if (r == 0)
			continue;
		/* from the last: untrack moves the last record into the freed slot */
		for (size_t i = nwatch; i-- > 0;)
			if (pfds[2 + i].revents)
				on_keeper(&procs[i]);
		if (pfds[1].revents) {
			struct signalfd_siginfo si;

			while (read(sigfd, &si, sizeof(si)) > 0)
				;
			reap();
		}
		/* last: a SPAWN may grow pfds */
		if (pfds[0].revents & POLLIN) {
			if (on_socket(buf) < 0)
				break;
		} else if (pfds[0].revents & (POLLHUP | POLLERR)) {
			break;
		}
	}
	/* The agent is gone: nothing in this sandbox may outlive it. */
	kill(-1, SIGKILL);
	return 0;
}
