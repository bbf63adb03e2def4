/* Threads -> the loop, one pointer at a time (donepipe.h). */
#include "donepipe.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

int donepipe_init(struct donepipe *dp, struct sbx_err *e)
{
	dp->fd[0] = dp->fd[1] = -1;
	if (pipe2(dp->fd, O_CLOEXEC) < 0)
		return err_sys(e, errno, "cannot open a pipe");
	if (util_set_nonblock(dp->fd[0]) < 0) {
		int saved = errno;

		donepipe_release(dp);
		return err_sys(e, saved, "cannot set up a pipe");
	}
	return 0;
}

void donepipe_release(struct donepipe *dp)
{
	for (int i = 0; i < 2; i++) {
		if (dp->fd[i] >= 0)
			close(dp->fd[i]);
		dp->fd[i] = -1;
	}
}

int donepipe_post(struct donepipe *dp, void *p)
{
	/* sizeof(p) <= PIPE_BUF: the write is atomic, whole or not at all */
	return util_write_all(dp->fd[1], &p, sizeof(p));
}

size_t donepipe_drain(struct donepipe *dp, void (*fn)(void *p, void *arg), void *arg)
{
	void *batch[64];
	size_t handed = 0;

	for (;;) {
		/* every write is one whole pointer and every read asks for
		 * whole pointers, so what the pipe holds, and what a read
		 * returns, is whole pointers too */
		ssize_t n = read(dp->fd[0], batch, sizeof(batch));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return handed;
		for (size_t i = 0; i < (size_t)n / sizeof(batch[0]); i++)
			fn(batch[i], arg);
		handed += (size_t)n / sizeof(batch[0]);
	}
}

int donepipe_wait(struct donepipe *dp, int timeout_ms)
{
	struct pollfd p = { .fd = dp->fd[0], .events = POLLIN };

	return poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN);
}

int donepipe_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}
