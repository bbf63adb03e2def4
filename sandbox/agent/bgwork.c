/* Slow blocking work on threads, ended on the loop (bgwork.h). */
#include "bgwork.h"
#include "agent.h"
#include "donepipe.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BGWORK_RELEASE_WAIT_MS 10000

struct bgjob {
	bgwork_fn fn;
	bgwork_done_fn done;
	void *arg;
	pthread_t thread;
	struct donepipe *ended;
};

struct agent_bg {
	struct donepipe ended;   /* job threads -> the loop: struct bgjob pointers */
	struct event *ev;
	unsigned running;
};

static void *job_main(void *arg)
{
	struct bgjob *j = arg;

	j->fn(j->arg);
	if (donepipe_post(j->ended, j) < 0)
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

static void job_ended(void *j, void *bg)
{
	job_end(bg, j, 1);
}

static void job_dropped(void *j, void *bg)
{
	job_end(bg, j, 0);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	donepipe_drain(&((struct agent_bg *)arg)->ended, job_ended, arg);
}

int bgwork_init(struct agent *a, struct sbx_err *e)
{
	struct agent_bg *bg = calloc(1, sizeof(*bg));

	if (!bg)
		return err_sys(e, ENOMEM, "background work");
	if (donepipe_init(&bg->ended, e) < 0) {
		free(bg);
		return -1;
	}
	bg->ev = event_new(a->base, donepipe_fd(&bg->ended), EV_READ | EV_PERSIST, on_done, bg);
	if (!bg->ev || event_add(bg->ev, NULL) < 0) {
		if (bg->ev)
			event_free(bg->ev);
		donepipe_release(&bg->ended);
		free(bg);
		return err_sys(e, ENOMEM, "background work event");
	}
	a->bg = bg;
	return 0;
}

unsigned bgwork_wait(struct agent *a, int timeout_ms)
{
	struct agent_bg *bg = a->bg;

	if (!bg)
		return 0;
	if (bg->running > 0 && donepipe_wait(&bg->ended, timeout_ms))
		donepipe_drain(&bg->ended, job_ended, bg);
	return bg->running;
}

void bgwork_release(struct agent *a)
{
	struct agent_bg *bg = a->bg;
	int64_t until = util_now_ms() + BGWORK_RELEASE_WAIT_MS;

	if (!bg)
		return;
	while (bg->running > 0 && util_now_ms() < until)
		if (donepipe_wait(&bg->ended, 100))
			donepipe_drain(&bg->ended, job_dropped, bg);
	if (bg->running > 0) {
		/* their threads still write into the pipe: it stays open */
		log_warn("%u background jobs still running at exit", bg->running);
		return;
	}
	event_free(bg->ev);
	donepipe_release(&bg->ended);
	free(bg);
	a->bg = NULL;
}

int bgwork_run(struct agent *a, bgwork_fn fn, bgwork_done_fn done, void *arg,
	       struct sbx_err *e)
{
	struct agent_bg *bg = a->bg;
	struct bgjob *j;
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
	j->ended = &bg->ended;
	rc = donepipe_thread_start(&j->thread, job_main, j);
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
