/* Slow blocking work on threads, ended on the loop (bgwork.h). */
#include "bgwork.h"
#include "agent.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BGWORK_RELEASE_WAIT_MS 10000

struct bgjob {
	bgwork_fn fn;
	bgwork_done_fn done;
	void *arg;
	pthread_t thread;
	int notify_fd;
};

struct agent_bg {
	int pipe[2];
	struct event *ev;
	unsigned running;
};

static void *job_main(void *arg)
{
	struct bgjob *j = arg;

	j->fn(j->arg);
	if (util_write_all(j->notify_fd, &j, sizeof(j)) < 0)
		log_error("background work: cannot tell the loop: %s", strerror(errno));
	return NULL;
}

/* The job j has ended: join it; done when call_done. */
static void job_end(struct agent_bg *bg, struct bgjob *j, int call_done)
{
	pthread_join(j->thread, NULL);
	bg->running--;
	if (call_done)
		j->done(j->arg);
	free(j);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	struct agent_bg *bg = arg;
	struct bgjob *j;

	(void)what;
	while (read(fd, &j, sizeof(j)) == (ssize_t)sizeof(j))
		job_end(bg, j, 1);
}

int bgwork_init(struct agent *a, struct sbx_err *e)
{
	struct agent_bg *bg = calloc(1, sizeof(*bg));

	if (!bg)
		return err_sys(e, ENOMEM, "background work");
	if (pipe2(bg->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(bg);
		return err_sys(e, errno, "pipe");
	}
	bg->ev = event_new(a->base, bg->pipe[0], EV_READ | EV_PERSIST, on_done, bg);
	if (!bg->ev || event_add(bg->ev, NULL) < 0) {
		if (bg->ev)
			event_free(bg->ev);
		close(bg->pipe[0]);
		close(bg->pipe[1]);
		free(bg);
		return err_sys(e, ENOMEM, "background work event");
	}
	a->bg = bg;
	return 0;
}

void bgwork_release(struct agent *a)
{
	struct agent_bg *bg = a->bg;
	int64_t until = util_now_ms() + BGWORK_RELEASE_WAIT_MS;

	if (!bg)
		return;
	while (bg->running > 0 && util_now_ms() < until) {
		struct pollfd p = { .fd = bg->pipe[0], .events = POLLIN };
		struct bgjob *j;

		if (poll(&p, 1, 100) > 0 && read(bg->pipe[0], &j, sizeof(j)) == (ssize_t)sizeof(j))
			job_end(bg, j, 0);
	}
	if (bg->running > 0) {
		/* their threads still write into the pipe: it stays open */
		log_warn("%u background jobs still running at exit", bg->running);
		return;
	}
	event_free(bg->ev);
	close(bg->pipe[0]);
	close(bg->pipe[1]);
	free(bg);
	a->bg = NULL;
}

int bgwork_run(struct agent *a, bgwork_fn fn, bgwork_done_fn done, void *arg,
	       struct sbx_err *e)
{
	struct agent_bg *bg = a->bg;
	struct bgjob *j;
	sigset_t all, old;
	int rc;

	if (!bg)
		return err_set(e, SBX_E_INTERNAL, "background work is not set up");
	if (bg->running >= BGWORK_MAX)
		return err_set(e, SBX_E_NO_CAPACITY, "too much background work on this node; retry");
	j = calloc(1, sizeof(*j));
	if (!j)
		return err_sys(e, ENOMEM, "background work");
	j->fn = fn;
	j->done = done;
	j->arg = arg;
	j->notify_fd = bg->pipe[1];
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&j->thread, NULL, job_main, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		free(j);
		return err_set(e, SBX_E_NO_CAPACITY, "cannot start background work: %s",
			       strerror(rc));
	}
	bg->running++;
	return 0;
}

unsigned bgwork_running(const struct agent *a)
{
	return a->bg ? a->bg->running : 0;
}
