/* spawn.c: spawn_host, with real children of /bin/sh and /bin/grep. */
#include "spawn.h"
#include "unit.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run path with argv, stdout into a pipe; its output in out, exit code returned
 * (-1 when spawn_host failed, e filled). */
static int run(const char *path, char *const *argv, char *out, size_t size, struct sbx_err *e)
{
	struct spawn_host_cmd cmd = { .path = path, .argv = argv, .in = -1, .out = -1, .err = -1 };
	int p[2], pidfd, rc;
	size_t used = 0;
	ssize_t n;

	out[0] = '\0';
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	cmd.out = p[1];
	if (spawn_host(&cmd, &pidfd, e) < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	close(p[1]);
	while (used + 1 < size && (n = read(p[0], out + used, size - 1 - used)) > 0)
		used += (size_t)n;
	out[used] = '\0';
	close(p[0]);
	rc = spawn_host_wait(pidfd, e);
	close(pidfd);
	return rc;
}

static int exit_with(void *arg)
{
	return *(int *)arg;
}

TEST(spawn_host_exec_failure_is_the_errno)
{
	char *const argv[] = { (char *)"nope", NULL };
	char out[16];
	struct sbx_err e = { 0 };

	CHECK_INT(run("/nonexistent/sbx-no-such-program", argv, out, sizeof(out), &e), -1);
	CHECK_INT(e.sys_errno, ENOENT);
	CHECK(strstr(e.msg, "cannot run '/nonexistent/sbx-no-such-program'") != NULL);
	e = (struct sbx_err){ 0 };
	CHECK_INT(run("/etc", argv, out, sizeof(out), &e), -1);   /* a directory */
	CHECK_INT(e.sys_errno, EACCES);
}

TEST(spawn_host_closes_every_other_fd)
{
	/* an fd without CLOEXEC, as a library might leave one */
	int leak = fcntl(1, F_DUPFD, 40);
	char script[128], out[256];
	struct sbx_err e = { 0 };

	CHECK(leak >= 40);
	snprintf(script, sizeof(script), "test -e /proc/self/fd/%d && echo leaked; ls /proc/self/fd | wc -l", leak);
	{
		char *const argv[] = { (char *)"sh", (char *)"-c", script, NULL };

		/* 0, 1, 2 and the directory ls reads */
		CHECK_INT(run("/bin/sh", argv, out, sizeof(out), &e), 0);
		CHECK_STR(out, "4\n");
	}
	close(leak);
}

TEST(spawn_host_status_signals_and_fn)
{
	char *const code[] = { (char *)"sh", (char *)"-c", (char *)"echo hi; exit 3", NULL };
	char *const killed[] = { (char *)"sh", (char *)"-c", (char *)"kill -9 $$", NULL };
	char *const ign[] = { (char *)"grep", (char *)"^SigIgn", (char *)"/proc/self/status", NULL };
	struct spawn_host_cmd cmd = { .in = -1, .out = -1, .err = -1, .fn = exit_with };
	struct sigaction ign_pipe = { .sa_handler = SIG_IGN }, old;
	char out[128];
	struct sbx_err e = { 0 };
	int seven = 7, pidfd;

	CHECK_INT(run("/bin/sh", code, out, sizeof(out), &e), 3);
	CHECK_STR(out, "hi\n");
	CHECK_INT(run("/bin/sh", killed, out, sizeof(out), &e), 128 + SIGKILL);
	/* an ignored SIGPIPE (as in every long-running sbx process) is default again */
	sigaction(SIGPIPE, &ign_pipe, &old);
	CHECK_INT(run("/bin/grep", ign, out, sizeof(out), &e), 0);
	sigaction(SIGPIPE, &old, NULL);
	CHECK_STR(out, "SigIgn:\t0000000000000000\n");
	cmd.arg = &seven;
	CHECK(spawn_host(&cmd, &pidfd, &e) > 0);
	CHECK_INT(spawn_host_wait(pidfd, &e), 7);
	close(pidfd);
}

/* In a forked child: join user namespace fd and print its uid_map into
 * out (the first line). */
static int uid_map_of(int fd, char *out, size_t size)
{
	int p[2], st;
	pid_t pid;
	ssize_t n;

	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		auto_close int map = -1;
		char buf[128];

		if (setns(fd, CLONE_NEWUSER) < 0)
			_exit(2);
		map = open("/proc/self/uid_map", O_RDONLY);
		n = map < 0 ? -1 : read(map, buf, sizeof(buf));
		_exit(n > 0 && write(p[1], buf, (size_t)n) == n ? 0 : 3);
	}
	close(p[1]);
	n = read(p[0], out, size - 1);
	out[n > 0 ? n : 0] = '\0';
	close(p[0]);
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(spawn_userns_maps_and_reports_a_failed_helper)
{
	struct sbx_err e = { 0 };
	char map[128], words[3][16], dir[] = "/tmp/sbx-unit-chroot-XXXXXX";
	int fd, st;
	pid_t pid;

	/* the namespace maps 0 to its base, and outlives its helper */
	fd = spawn_userns(0, 300000, &e);
	CHECK(fd >= 0);
	CHECK_INT(uid_map_of(fd, map, sizeof(map)), 0);
	CHECK_INT(sscanf(map, "%15s %15s %15s", words[0], words[1], words[2]), 3);
	CHECK_STR(words[0], "0");
	CHECK_STR(words[1], "300000");
	CHECK_STR(words[2], "65536");
	close(fd);
	/* a caller that may not make one (unshare(CLONE_NEWUSER) fails in a
	 * chroot) gets the helper's errno back, not a hang */
	CHECK(mkdtemp(dir) != NULL);
	pid = fork();
	if (pid == 0) {
		if (chroot(dir) < 0 || chdir("/") < 0)
			_exit(2);
		e = (struct sbx_err){ 0 };
		fd = spawn_userns(0, 300000, &e);
		_exit(fd < 0 && e.sys_errno == EPERM ? 0 : 1);
	}
	CHECK(pid > 0);
	CHECK_INT(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
	rmdir(dir);
}
