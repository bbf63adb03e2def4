/*
 * sigdfl.c — see sigdfl.h.
 */
#include "sigdfl.h"

#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sigaction on x86_64 (not glibc's). */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

void sigdfl_all(void)
{
	struct ksigaction dfl = { .handler = SIG_DFL };

	for (int sig = 1; sig <= 64; sig++)
		(void)syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
}
