/*
 * keeper.c — the fence keeper process (keeper.h).
 */
#include "keeper.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

/* The serial at which the last keeper froze (0: it did not, or thawed
 * since; a frozen keeper always held a lease, whose serial is at least
 * 1), on a page shared with the agent (MAP_SHARED, made before the first
 * fork): a keeper started again after its predecessor died thaws on an
 * extension in time as that one would have. Written before the freeze,
 * so a keeper killed in the middle of one is not forgotten. */
static void keeper_main(const struct registry_lease *lease, struct rt *rt, pid_t agent,
			int64_t *note)
{
	int64_t froze_serial = __atomic_load_n(note, __ATOMIC_ACQUIRE);
	int frozen = froze_serial != 0;

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
			__atomic_store_n(note, serial, __ATOMIC_RELEASE);
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
			__atomic_store_n(note, 0, __ATOMIC_RELEASE);
			break;
		default:
			if (frozen && serial != froze_serial) {
				frozen = 0;     /* after a gap the agent's sweep thaws */
				__atomic_store_n(note, 0, __ATOMIC_RELEASE);
			}
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

static pid_t keeper_start(const struct registry_lease *lease, struct rt *rt,
			  int64_t *note, struct sbx_err *e)
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
	keeper_main(lease, rt, agent, note);
	_exit(0);
}

struct keeper {
	struct event_base *base;
	const struct registry_lease *lease;
	struct rt *rt;
	int64_t *note;              /* keeper_main's, shared with every keeper it starts */
	pid_t pid;
	int pidfd;
	struct event *exit_ev;      /* the pidfd turns readable when the keeper dies */
	struct event *restart_ev;
};

static void keeper_exited(evutil_socket_t fd, short what, void *arg);

/* Start the keeper process and watch its pidfd. 0 or -1 with e. A restart
 * forks while the heartbeat thread runs: the child needs only malloc
 * (fork-safe in glibc), syscalls and log.c (plain write(2)). */
static int keeper_spawn(struct keeper *k, struct sbx_err *e)
{
	k->pid = keeper_start(k->lease, k->rt, k->note, e);
	if (k->pid < 0)
		return -1;
	k->pidfd = (int)syscall(SYS_pidfd_open, k->pid, 0);
	if (k->pidfd < 0) {
		err_sys(e, errno, "cannot watch the fence keeper");
		kill(k->pid, SIGKILL);
		waitpid(k->pid, NULL, 0);
		return -1;
	}
	util_set_cloexec(k->pidfd);
	k->exit_ev = event_new(k->base, k->pidfd, EV_READ, keeper_exited, k);
	if (!k->exit_ev || event_add(k->exit_ev, NULL) < 0)
		return err_sys(e, ENOMEM, "cannot watch the fence keeper");
	return 0;
}

static void keeper_reap(struct keeper *k)
{
	if (k->exit_ev) {
		event_free(k->exit_ev);
		k->exit_ev = NULL;
	}
	if (k->pidfd >= 0) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		while (waitid((idtype_t)P_PIDFD, (id_t)k->pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
		close(k->pidfd);
		k->pidfd = -1;
	}
	k->pid = -1;
}

static void keeper_restart(evutil_socket_t fd, short what, void *arg)
{
	struct keeper *k = arg;
	struct sbx_err e = { 0 };
	struct timeval again = { 1, 0 };

	if (keeper_spawn(k, &e) < 0) {
		log_error("fence keeper: %s; trying again", e.msg);
		keeper_reap(k);
		evtimer_add(k->restart_ev, &again);
		return;
	}
	log_info("fence keeper started again (pid %d)", (int)k->pid);
}

static void keeper_exited(evutil_socket_t fd, short what, void *arg)
{
	struct keeper *k = arg;
	struct timeval later = { 1, 0 };

	log_error("fence keeper (pid %d) died: this node's sandboxes are not fenced until it is "
		  "back", (int)k->pid);
	keeper_reap(k);
	evtimer_add(k->restart_ev, &later);
}

struct keeper *keeper_new(struct event_base *base, const struct registry_lease *lease,
			  struct rt *rt, struct sbx_err *e)
{
	struct keeper *k = calloc(1, sizeof(*k));

	if (!k) {
		err_sys(e, ENOMEM, "fence keeper");
		return NULL;
	}
	k->base = base;
	k->lease = lease;
	k->rt = rt;
	k->pid = -1;
	k->pidfd = -1;
	k->note = mmap(NULL, sizeof(*k->note), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	if (k->note == MAP_FAILED) {
		k->note = NULL;
		err_sys(e, errno, "fence keeper: cannot map its note");
		keeper_free(k);
		return NULL;
	}
	k->restart_ev = evtimer_new(base, keeper_restart, k);
	if (!k->restart_ev || keeper_spawn(k, e) < 0) {
		keeper_free(k);
		return NULL;
	}
	return k;
}

void keeper_free(struct keeper *k)
{
	if (!k)
		return;
	if (k->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
	keeper_reap(k);
	if (k->restart_ev)
		event_free(k->restart_ev);
	if (k->note)
		munmap(k->note, sizeof(*k->note));
	free(k);
}
