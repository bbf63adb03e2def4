/*
 * idrange.h — the host uid/gid ranges of sandboxes: agent.uid_ranges
 * disjoint blocks of IDRANGE_SIZE ids from agent.uid_base, one per
 * sandbox with a user namespace (its root is the block's first id), so
 * that per-user kernel limits (inotify instances, RLIMIT_NPROC, keyrings)
 * are per sandbox.
 *
 * Several agents may share a host (and uid_base): a block taken is also
 * held as an open-file-description lock on the byte at offset <first id>
 * of <lock_dir>/ranges until it is put back (or the agent dies), and a
 * block another holder locks is skipped. One fd holds every lock, so the
 * agent's fds do not grow with its sandboxes. Processes that outlive
 * their agent hold no lock: the /proc scan of idrange_reserve_live finds
 * them at the next start.
 */
#ifndef SBX_IDRANGE_H
#define SBX_IDRANGE_H

#include "err.h"

#include <stdint.h>
#include <sys/types.h>

#define IDRANGE_SIZE 65536u

struct idrange {
	uint32_t base;
	unsigned count;
	unsigned next;           /* where the next search starts */
	unsigned char *state;    /* per block: IDRANGE_FREE, _TAKEN, _LIVE */
	int lock_fd;             /* <lock_dir>/ranges (opened at the first lock), or -1 */
	unsigned char *locked;   /* per block: its byte is locked by lock_fd */
	const char *proc;        /* "/proc" (a test points it elsewhere) */
	char lock_dir[256];      /* "": no locks */
};

#define IDRANGE_FREE  0
#define IDRANGE_TAKEN 1
#define IDRANGE_LIVE  2      /* held by processes of an earlier run */

/* count blocks from base; base + count * IDRANGE_SIZE must stay below
 * 2^32 - 1. lock_dir (created) holds the host-wide locks, NULL for none.
 * 0 or -1 with e filled. Release with idrange_release (drops every lock). */
int idrange_init(struct idrange *r, int64_t base, int64_t count, const char *lock_dir,
		 struct sbx_err *e);
void idrange_release(struct idrange *r);

/* Mark every block a process under r->proc runs in (real, effective or
 * saved uid) as IDRANGE_LIVE: leftovers of an earlier agent that outlived
 * its cleanup, or another agent's sandboxes with the same ranges. Returns
 * how many blocks are marked. */
unsigned idrange_reserve_live(struct idrange *r);

/* Take a free block no other holder locks: the host id its root maps to,
 * or -1 with e filled (SBX_E_NO_CAPACITY) when none is left. When only IDRANGE_LIVE blocks
 * remain, the /proc scan runs again and frees those no process holds. */
int64_t idrange_get(struct idrange *r, struct sbx_err *e);

/* Give back the block starting at id (from idrange_get); other ids are
 * ignored. */
void idrange_put(struct idrange *r, uint32_t id);

#endif
