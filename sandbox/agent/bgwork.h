/*
 * bgwork.h — slow blocking work off the agent's event loop: an fsync, an
 * object store's upload or download, a helper waited for. The work runs
 * on a thread of its own (signals blocked: they stay with the loop's
 * thread); when it returns, the thread posts its job to the loop
 * (donepipe.h), and the loop joins it and calls its done callback.
 *
 * The work function must touch no state of the loop (no httpd request, no
 * sandbox entry, no registry): it gets its own copy of what it needs in
 * arg and leaves its results there for done. At most BGWORK_MAX jobs run
 * at once (else NO_CAPACITY).
 */
#ifndef SBX_BGWORK_H
#define SBX_BGWORK_H

#include "err.h"

struct agent;

#define BGWORK_MAX 32

/* On the job's thread. */
typedef void (*bgwork_fn)(void *arg);
/* On the loop, once fn has returned. */
typedef void (*bgwork_done_fn)(void *arg);

int bgwork_init(struct agent *a, struct sbx_err *e);
/* Wait (a bounded time) for the jobs still running; their done callbacks
 * are not called. */
void bgwork_release(struct agent *a);

/* At shutdown, before bgwork_release, for a module that must see its own
 * jobs end (their done callbacks called): wait up to timeout_ms for jobs
 * to end and end those that did. The jobs still running. */
unsigned bgwork_wait(struct agent *a, int timeout_ms);

/* Run fn(arg) on a thread, then done(arg) on the loop. 0, or -1 with e
 * (nothing started: the caller still owns arg). */
int bgwork_run(struct agent *a, bgwork_fn fn, bgwork_done_fn done, void *arg,
	       struct sbx_err *e);

/* Jobs running now. */
unsigned bgwork_running(const struct agent *a);

#endif
