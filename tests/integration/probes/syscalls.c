/*
 * syscalls.c — the seccomp prober of test_runtime.py, run inside a sandbox.
 *
 * Arguments: cases "name=nr[,arg]..." (up to six decimal or 0x arguments),
 * plus the words "int80" (getpid through the 32-bit entry, int 0x80) and
 * "x32" (getpid with the x32 bit). Each numbered case is one raw syscall(2)
 * in this process; a clone that succeeds exits at once in the child. Each
 * word runs in a forked child. Prints one line per case, all at once:
 *   name errno   (0: the call succeeded)
 *   word signal  (the signal that ended the child; 0: it exited)
 * Built static by the test (cc -static), so it runs in any image.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int in_child(int word)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		long r;

		if (word == 0) {
			/* 20 is getpid in the i386 table */
			__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
		} else {
			r = syscall(0x40000000L | SYS_getpid);
		}
		_exit(r >= 0 ? 0 : 1);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char *name = argv[i], *p = strchr(name, '=');
		long a[7] = { 0 };
		int n = 0;
		long r;

		if (!p) {
			int word = strcmp(name, "int80") == 0 ? 0 : strcmp(name, "x32") == 0 ? 1 : -1;

			if (word < 0) {
				fprintf(stderr, "unknown case '%s'\n", name);
				return 2;
			}
			printf("%s %d\n", name, in_child(word));
			continue;
		}
		*p++ = '\0';
		while (n < 7 && *p) {
			char *end;

			a[n++] = strtol(p, &end, 0);
			p = *end == ',' ? end + 1 : end;
		}
		errno = 0;
		r = syscall(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
		if (a[0] == SYS_clone && r == 0)
			_exit(0);   /* the child of a clone the filter let through */
		if (a[0] == SYS_clone && r > 0)
			waitpid((pid_t)r, NULL, __WALL);
		printf("%s %d\n", name, r >= 0 ? 0 : errno);
	}
	return fflush(stdout) == 0 ? 0 : 1;
}
