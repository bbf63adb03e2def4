/*
 * vmchild.h — a child that shares its parent's memory (clone CLONE_VM), on
 * a stack of its own with a guard page below it.
 *
 * No copy of the parent's page tables, which are most of what a fork
 * costs and grow with the parent (the agent's with every live sandbox), so
 * the clone costs the same on a full host as on an empty one. The agent
 * uses it for a sandbox's init and its user-namespace helper, sbx-init's
 * keepers for every command.
 *
 * The child runs until its exec or its exit; its stack must outlive both,
 * so vm_child_end comes only after the parent knows the child exec'd (a
 * CLOEXEC end closed) or has reaped it. The child shares the calling
 * thread's TLS too: it writes that thread's errno, so the parent reads
 * errno only of calls it makes while no child runs, or takes it from a
 * return value. The child starts with every signal blocked (no handler of
 * the parent runs on its stack); it sets the mask it wants itself.
 */
#ifndef SBX_VMCHILD_H
#define SBX_VMCHILD_H

#include <stddef.h>

#define VM_CHILD_STACK (256 * 1024)

struct vm_child {
	char *map;                     /* the mapping: a guard page, then the stack */
	size_t size;
};

/* Start fn(arg) in a child of clone(CLONE_VM | flags); with CLONE_PIDFD in
 * flags its pidfd goes to *pidfd. The child's pid, or -1 with errno and
 * nothing held. */
long vm_child_start(struct vm_child *vc, unsigned long flags, int (*fn)(void *), void *arg,
		    int *pidfd);

/* Release the child's stack: it has exec'd or been reaped. */
void vm_child_end(struct vm_child *vc);

#endif
