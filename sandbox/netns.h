/*
 * netns.h — networking of sandboxes. Mode "none": a fresh network
 * namespace with only lo, brought up by the child (no veth, no cost on the
 * host). Mode "egress" is not available yet: rt_create refuses it.
 */
#ifndef SBX_NETNS_H
#define SBX_NETNS_H

/* Bring lo up in the current network namespace. Child-safe; 0 or -1 with errno. */
int netns_lo_up(void);

#endif
