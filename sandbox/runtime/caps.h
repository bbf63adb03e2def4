/*
 * caps.h — the capability set of sandbox processes: roughly Docker's
 * default minus NET_RAW, MKNOD and AUDIT_WRITE. Applied in the child of a
 * spawn (syscalls only): bounding set, ambient set, then capset.
 */
#ifndef SBX_CAPS_H
#define SBX_CAPS_H

#include <stdint.h>

/* Bit mask of the capabilities sandbox processes keep. */
uint64_t caps_keep_mask(void);

/* Highest capability number of the running kernel (parent, at startup). */
int caps_last_cap(void);

/* Drop everything outside keep from the bounding set, clear the ambient
 * set and set effective = permitted = inheritable = keep. Child-safe.
 * 0, or -1 with errno. */
int caps_apply(uint64_t keep, int last_cap);

#endif
