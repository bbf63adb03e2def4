/*
 * keeper.c — the fence keeper process (keeper.h).
 */
#include "keeper.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int keeper_decide(int64_t now, int64_t until, int64_t serial, int frozen, int64_t froze_serial)
{
	if (until <= 0)
		return 0;                       /* never held a lease: nothing runs yet */
	if (now >= until - KEEPER_MARGIN_MS)
		return 1;                       /* (again: sandboxes made meanwhile) */
	if (frozen && serial == froze_serial)
		return -1;                      /* extended in time: nobody took over */
	return 0;
}

static void keeper_main(const struct registry_lease *lease, struct rt *rt, pid_t agent)
{
	int frozen = 0;
	int64_t froze_serial = 0;

	for (;;) {
		struct timespec ts;
		int64_t nap;
		int64_t until = __atomic_load_n(&lease->until, __ATOMIC_ACQUIRE);
		int64_t serial = __atomic_load_n(&lease->serial, __ATOMIC_ACQUIRE);
		int64_t now = util_now_ms();
		int n;

		if (getppid() != agent)
			_exit(0);
		switch (keeper_decide(now, until, serial, frozen, froze_serial)) {
		case 1:
			n = rt_freeze_all(rt, 1);
			if (!frozen)
				log_warn("fence keeper: the lease ends in %lld ms: froze %d sandboxes",
					 (long long)(until - now), n);
			frozen = 1;
			froze_serial = serial;
			break;
		case -1:
			n = rt_freeze_all(rt, 0);
			log_info("fence keeper: the lease was extended in time: thawed %d sandboxes", n);
			frozen = 0;
			break;
		default:
			if (frozen && serial != froze_serial)
				frozen = 0;     /* after a gap the agent's sweep thaws */
			break;
		}
		/* The lease only grows: sleeping until its end as known now is
		 * safe. While frozen, look often (new cgroups, a thaw). */
		nap = frozen || until <= 0 ? KEEPER_POLL_MS : until - KEEPER_MARGIN_MS - util_now_ms();
		if (nap < KEEPER_POLL_MS / 5)
			nap = KEEPER_POLL_MS / 5;
		if (nap > 1000)
			nap = 1000;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)nap * 1000000L;
		if (nap >= 1000) {
			ts.tv_sec = 1;
			ts.tv_nsec = 0;
		}
		nanosleep(&ts, NULL);
	}
}

pid_t keeper_start(const struct registry_lease *lease, struct rt *rt, struct sbx_err *e)
{
	pid_t agent = getpid(), pid = fork();

	if (pid < 0)
		return err_sys(e, errno, "cannot start the fence keeper");
	if (pid > 0)
		return pid;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != agent)
		_exit(0);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	/* Nothing of the agent's: listeners, Redis, sandbox sockets. */
	syscall(SYS_close_range, 3U, ~0U, 0U);
	keeper_main(lease, rt, agent);
	_exit(0);
}
