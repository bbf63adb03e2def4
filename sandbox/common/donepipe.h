/*
 * donepipe.h — threads hand finished work back to an event loop's thread.
 *
 * A worker thread posts a pointer (donepipe_post); the loop watches
 * donepipe_fd() and, when it is readable, drains what was posted
 * (donepipe_drain): every pointer exactly once, each thread's in the
 * order it posted them. A post is one write of a pointer, which a pipe
 * takes whole (below PIPE_BUF), so posts of many threads never mix.
 *
 * A full pipe (64 KiB by default: 8192 posts the loop has not read yet)
 * blocks the posting thread until the loop reads: a post is never lost,
 * never fails for want of room. The loop's own thread therefore never
 * posts (it would wait for itself). The read end is non-blocking.
 *
 * No event library here: the loop's owner registers the fd with its loop.
 */
#ifndef SBX_DONEPIPE_H
#define SBX_DONEPIPE_H

#include "err.h"

#include <pthread.h>
#include <stddef.h>

struct donepipe {
	int fd[2];
};

/* Open the pipe (close-on-exec): 0, or -1 with e. On failure dp is still
 * safe to release. */
int donepipe_init(struct donepipe *dp, struct sbx_err *e);
/* Close both ends (idempotent). Only once no thread can post any more. */
void donepipe_release(struct donepipe *dp);

/* The end the loop watches for reading. */
static inline int donepipe_fd(const struct donepipe *dp)
{
	return dp->fd[0];
}

/* Any thread but the loop's: hand p to the loop; waits while the pipe is
 * full. 0, or -1 with errno (the pipe was released). */
int donepipe_post(struct donepipe *dp, void *p);

/* The loop: fn(p, arg) for every pointer posted and not drained yet, until
 * the pipe is empty (fn may be called for posts made meanwhile). The
 * number of pointers handed to fn. */
size_t donepipe_drain(struct donepipe *dp, void (*fn)(void *p, void *arg), void *arg);

/* The loop, when it is not running (shutdown): wait up to timeout_ms for
 * a post to drain. 1 when there is one, else 0. */
int donepipe_wait(struct donepipe *dp, int timeout_ms);

/* Start a worker thread fn(arg) with every signal blocked: signals stay
 * with the loop's thread. pthread_create's result (0, or an errno). */
int donepipe_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
