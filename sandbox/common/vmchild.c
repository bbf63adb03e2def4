/*
 * vmchild.c — see vmchild.h.
 */
#include "vmchild.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define STACK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define STACK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static void unmap(struct vm_child *vc)
{
	int err = errno;

	STACK_UNPOISON(vc->map, vc->size);
	munmap(vc->map, vc->size);
	vc->map = NULL;
	errno = err;
}

long vm_child_start(struct vm_child *vc, unsigned long flags, int (*fn)(void *), void *arg,
		    int *pidfd)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	sigset_t all, old;
	long pid;

	vc->size = VM_CHILD_STACK + page;
	vc->map = mmap(NULL, vc->size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (vc->map == MAP_FAILED) {
		vc->map = NULL;
		return -1;
	}
	if (mprotect(vc->map, page, PROT_NONE) < 0) {
		unmap(vc);
		return -1;
	}
	STACK_UNPOISON(vc->map, vc->size);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid = clone(fn, vc->map + vc->size, (int)(flags | CLONE_VM), arg, pidfd);
	sigprocmask(SIG_SETMASK, &old, NULL);   /* leaves clone's errno as it is */
	if (pid < 0)
		unmap(vc);
	return pid;
}

void vm_child_end(struct vm_child *vc)
{
	if (vc->map)
		unmap(vc);
}
