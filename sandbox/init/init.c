/*
 * sbx-init — PID 1 of every sandbox. Statically linked, libc only.
 *
 * It talks to sbx-agent over the SOCK_SEQPACKET socket on fd INITPROTO_FD
 * (initproto.h): SPAWN forks and execs a process in its own session with
 * the three passed fds as stdio; SIGNAL signals a process or its group.
 * It reaps every child (orphans too) and reports the exits of the processes
 * it started. When the agent's end closes, it kills everything and exits.
 * Its stdio is /dev/null; it never prints.
 */
#include "initproto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

struct proc {
	int64_t handle;
	pid_t pid;
};

static struct proc *procs;
static size_t nprocs, capprocs;
static int sock = INITPROTO_FD;

static void send_msg(uint32_t type, int64_t handle, int32_t a, int32_t b)
{
	char buf[64];
	ssize_t n = initproto_encode(buf, sizeof(buf), type, handle, a, b);

	if (n > 0)
		(void)initproto_send(sock, buf, (size_t)n, NULL, 0, 0);
}

static int track(int64_t handle, pid_t pid)
{
	if (nprocs == capprocs) {
		size_t nc = capprocs ? capprocs * 2 : 16;
		struct proc *np = realloc(procs, nc * sizeof(*np));

		if (!np)
			return -1;
		procs = np;
		capprocs = nc;
	}
	procs[nprocs].handle = handle;
	procs[nprocs].pid = pid;
	nprocs++;
	return 0;
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

/* In the forked child: become the process that was asked for. Never returns. */
static void child_exec(const struct initproto_msg *m, const int *fds, int errpipe)
{
	sigset_t none;
	int err;

	sigemptyset(&none);
	for (int s = 1; s < NSIG; s++) {
		if (s == SIGKILL || s == SIGSTOP)
			continue;
		signal(s, SIG_DFL);
	}
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_DUMPABLE, 1);
	setsid();
	/* fds[] are all >= 3 (init keeps 0-2 open on /dev/null). */
	if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0)
		goto fail;
	syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
	if (chdir(m->cwd) < 0)
		goto fail;
	environ = m->env;
	execvpe(m->argv[0], m->argv, m->env);
fail:
	err = errno;
	(void)!write(errpipe, &err, sizeof(err));
	_exit(127);
}

static void do_spawn(const struct initproto_msg *m, const int *fds, int nfds)
{
	int pp[2], err = 0;
	pid_t pid;
	ssize_t n;

	if (nfds != 3) {
		send_msg(INITPROTO_FAILED, m->handle, EBADF, 0);
		return;
	}
	if (find_handle(m->handle) || pipe2(pp, O_CLOEXEC) < 0) {
		send_msg(INITPROTO_FAILED, m->handle, find_handle(m->handle) ? EEXIST : errno, 0);
		return;
	}
	pid = fork();
	if (pid < 0) {
		err = errno;
		close(pp[0]);
		close(pp[1]);
		send_msg(INITPROTO_FAILED, m->handle, err, 0);
		return;
	}
	if (pid == 0) {
		close(pp[0]);
		child_exec(m, fds, pp[1]);
	}
	close(pp[1]);
	do
		n = read(pp[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(pp[0]);
	if (n == (ssize_t)sizeof(err)) {
		int st;

		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		send_msg(INITPROTO_FAILED, m->handle, err > 0 ? err : EIO, 0);
		return;
	}
	if (track(m->handle, pid) < 0) {
		kill(-pid, SIGKILL);
		send_msg(INITPROTO_FAILED, m->handle, ENOMEM, 0);
		return;
	}
	send_msg(INITPROTO_STARTED, m->handle, pid, 0);
}

static void do_signal(const struct initproto_msg *m)
{
	struct proc *p = find_handle(m->handle);

	if (!p)
		return;
	if (m->tree)
		kill(-p->pid, m->value);
	else
		kill(p->pid, m->value);
}

/* Reap every child that has exited; report the tracked ones. */
static void reap(void)
{
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);

		if (pid <= 0)
			return;
		for (size_t i = 0; i < nprocs; i++) {
			if (procs[i].pid == pid) {
				int64_t h = procs[i].handle;

				untrack(&procs[i]);
				send_msg(INITPROTO_EXITED, h, pid, st);
				break;
			}
		}
	}
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
			if (h.type == INITPROTO_SPAWN)
				send_msg(INITPROTO_FAILED, h.handle, EINVAL, 0);
		}
	} else if (m.type == INITPROTO_SPAWN) {
		do_spawn(&m, fds, nfds);
		free(m.argv);
	} else if (m.type == INITPROTO_SIGNAL) {
		do_signal(&m);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return 0;
}

int main(void)
{
	static char buf[INITPROTO_MAX];
	struct pollfd pfd[2];
	sigset_t set;
	int sfd;

	prctl(PR_SET_DUMPABLE, 0);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0 || fcntl(sock, F_SETFD, FD_CLOEXEC) < 0)
		return 1;
	pfd[0].fd = sock;
	pfd[0].events = POLLIN;
	pfd[1].fd = sfd;
	pfd[1].events = POLLIN;
	for (;;) {
		int r = poll(pfd, 2, -1);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) > 0)
				;
			reap();
		}
		if (pfd[0].revents & POLLIN) {
			if (on_socket(buf) < 0)
				break;
		} else if (pfd[0].revents & (POLLHUP | POLLERR)) {
			break;
		}
	}
	/* The agent is gone: nothing in this sandbox may outlive it. */
	kill(-1, SIGKILL);
	return 0;
}
