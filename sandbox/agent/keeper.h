/*
 * keeper.h — the fence keeper: a small process forked from sbx-agent that
 * freezes this node's sandboxes (cgroup freezer) once the node's lease
 * lapses, whatever the agent itself is doing. An agent that is stopped
 * (SIGSTOP, a debugger, a swapped-out host) or cut off cannot fence
 * itself; the keeper shares only the lease page (registry.h) and the
 * cgroup paths with it, so it acts while the agent cannot.
 *
 * Freezing starts KEEPER_MARGIN_MS before the lease's end (the alive key
 * in Redis lives at least until then, so nobody can have been placed in
 * our stead yet). When the lease is extended without a gap (its serial did
 * not change), the keeper thaws again: nobody could have taken over
 * (a keeper started again in the meantime too: keeper.c's note). After
 * a gap, thawing is the agent's: its fencing sweep destroys what it no
 * longer owns and thaws the rest (agent_lifecycle.c).
 */
#ifndef SBX_KEEPER_H
#define SBX_KEEPER_H

#include "err.h"
#include "registry.h"
#include "runtime.h"

#include <event2/event.h>
#include <sys/types.h>

#define KEEPER_MARGIN_MS 200
#define KEEPER_POLL_MS 50   /* while frozen or before the first lease; else it
			     * sleeps until the lease's end as known (at most 1 s) */

/* What the keeper does at monotonic time now, given the lease and what it
 * did last (frozen, at serial froze_serial): 1 freeze, -1 thaw, 0 nothing.
 * Pure (unit-tested). */
int keeper_decide(int64_t now, int64_t until, int64_t serial, int frozen, int64_t froze_serial);

/* Start the keeper and watch it from the loop: should it die, it is
 * reaped, logged and started again (at most once a second), and the new
 * one knows whether the dead one had frozen the sandboxes (it thaws them
 * if the lease is extended in time). It dies with the agent
 * (PR_SET_PDEATHSIG) and keeps no fd of it. New heap
 * object (keeper_free, which stops the keeper), or NULL with e. Call it
 * before any thread exists: the first fork is then the plain kind. */
struct keeper;
struct keeper *keeper_new(struct event_base *base, const struct registry_lease *lease,
			  struct rt *rt, struct sbx_err *e);
void keeper_free(struct keeper *k);

#endif
