/* Unit tests of the threads -> loop pipe (sandbox/common/donepipe.c), with
 * real threads and a real pipe. */
#include "donepipe.h"
#include "unit.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

enum { THREADS = 8 };

struct poster {
	struct donepipe *dp;
	int *slots;           /* this thread's: it posts &slots[0 .. n-1] in order */
	int n;
	int failed;           /* posts that returned -1 */
	int *finished;        /* threads done, counted atomically */
};

static void *post_all(void *arg)
{
	struct poster *p = arg;

	for (int i = 0; i < p->n; i++)
		if (donepipe_post(p->dp, &p->slots[i]) < 0)
			p->failed++;
	__atomic_fetch_add(p->finished, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

struct tally {
	int *slots;
	int total;
	int *last;            /* per thread: the last index drained, for the order */
	int per;
	int out_of_order;
	size_t got;
};

static void count_one(void *p, void *arg)
{
	struct tally *t = arg;
	int at = (int)((int *)p - t->slots);
	int th = at / t->per;

	if (at < 0 || at >= t->total)
		return;
	t->slots[at]++;
	if (at % t->per <= t->last[th])
		t->out_of_order++;
	t->last[th] = at % t->per;
	t->got++;
}

/* THREADS threads post per pointers each while the loop (this thread)
 * drains; with hold, the loop first waits until the pipe is full. Every
 * pointer is drained exactly once, each thread's in its order, and no
 * post fails. */
static void run_posters(int *unit_failed, int per, int hold)
{
	struct donepipe dp;
	struct sbx_err e;
	pthread_t th[THREADS];
	struct poster ps[THREADS];
	int last[THREADS];
	int finished = 0, was_full = 0, cap = 0;
	struct tally t = { .total = THREADS * per, .last = last, .per = per };

	t.slots = calloc((size_t)t.total, sizeof(int));
	CHECK(t.slots != NULL);
	CHECK_INT(donepipe_init(&dp, &e), 0);
	if (hold) {
		/* the smallest pipe: a page, fewer pointers than are posted */
		cap = fcntl(dp.fd[1], F_SETPIPE_SZ, 4096);
		CHECK(cap > 0 && (size_t)cap / sizeof(void *) < (size_t)t.total);
	}
	for (int i = 0; i < THREADS; i++) {
		last[i] = -1;
		ps[i] = (struct poster){ &dp, t.slots + i * per, per, 0, &finished };
		CHECK_INT(donepipe_thread_start(&th[i], post_all, &ps[i]), 0);
	}
	while (hold && !was_full && __atomic_load_n(&finished, __ATOMIC_SEQ_CST) < THREADS) {
		int queued = 0;

		if (ioctl(dp.fd[0], FIONREAD, &queued) == 0 && queued >= cap)
			was_full = 1;
		else
			usleep(1000);
	}
	while (__atomic_load_n(&finished, __ATOMIC_SEQ_CST) < THREADS)
		if (donepipe_wait(&dp, 100))
			donepipe_drain(&dp, count_one, &t);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	donepipe_drain(&dp, count_one, &t);
	if (hold)
		CHECK(was_full);
	for (int i = 0; i < THREADS; i++)
		CHECK_INT(ps[i].failed, 0);
	CHECK_INT(t.got, t.total);
	CHECK_INT(t.out_of_order, 0);
	for (int i = 0; i < t.total; i++)
		if (t.slots[i] != 1) {
			CHECK_INT(t.slots[i], 1);
			break;
		}
	CHECK_INT(donepipe_drain(&dp, count_one, &t), 0);
	CHECK_INT(donepipe_wait(&dp, 0), 0);
	donepipe_release(&dp);
	free(t.slots);
}

TEST(donepipe_drains_every_post_of_many_threads_once)
{
	run_posters(unit_failed, 3000, 0);
}

TEST(donepipe_full_pipe_holds_the_poster_and_loses_nothing)
{
	run_posters(unit_failed, 300, 1);
}

static void *report_mask(void *arg)
{
	struct donepipe *dp = arg;
	sigset_t cur;
	static int blocked;

	pthread_sigmask(SIG_SETMASK, NULL, &cur);
	blocked = sigismember(&cur, SIGTERM) == 1 && sigismember(&cur, SIGINT) == 1 &&
		  sigismember(&cur, SIGCHLD) == 1;
	(void)donepipe_post(dp, &blocked);
	return NULL;
}

static void take(void *p, void *arg)
{
	*(int **)arg = p;
}

TEST(donepipe_thread_starts_with_signals_blocked_and_release_ends_posts)
{
	struct donepipe dp;
	struct sbx_err e;
	pthread_t t;
	sigset_t before, after;
	int *got = NULL;

	CHECK_INT(donepipe_init(&dp, &e), 0);
	pthread_sigmask(SIG_SETMASK, NULL, &before);
	CHECK_INT(donepipe_thread_start(&t, report_mask, &dp), 0);
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	/* the caller's mask is its own again */
	CHECK_INT(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
	pthread_join(t, NULL);
	CHECK_INT(donepipe_wait(&dp, 1000), 1);
	CHECK_INT(donepipe_drain(&dp, take, &got), 1);
	CHECK(got != NULL && *got == 1);
	donepipe_release(&dp);
	donepipe_release(&dp);   /* idempotent */
	CHECK_INT(donepipe_post(&dp, &dp), -1);
}
