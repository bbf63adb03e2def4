/*
 * netns.h — networking of sandboxes, at the level of links, addresses and
 * routes. Mode "none": a fresh network namespace with only lo, brought up by
 * the child (no veth, no cost on the host). Mode "egress" (egress.h) builds
 * on the small rtnetlink client below: requests go over a NETLINK_ROUTE
 * socket to the network namespace the socket was created in, so a socket
 * opened while the agent is in a sandbox's namespace (setns) configures
 * that namespace.
 *
 * Every function returns 0 (or the value named) or -1 with errno set (the
 * kernel's answer for a refused request).
 */
#ifndef SBX_NETNS_H
#define SBX_NETNS_H

#include <stdint.h>

/* Bring lo up in the current network namespace. Child-safe; 0 or -1 with errno. */
int netns_lo_up(void);

/* A new network namespace (lo down, nothing else), made by a short-lived
 * thread so that the caller's own namespace never changes: an O_CLOEXEC
 * fd of it, or -1 with errno. */
int netns_new(void);

/* An rtnetlink socket of the network namespace current when it was opened. */
struct netns_nl {
	int fd;
	uint32_t seq;
};

int netns_nl_open(struct netns_nl *nl);
void netns_nl_close(struct netns_nl *nl);

/* Create a veth pair, both ends down: host_name in the socket's namespace,
 * peer_name in the namespace of peer_netns_fd. mtu > 0 sets both MTUs. */
int netns_veth_create(struct netns_nl *nl, const char *host_name, const char *peer_name,
		      int peer_netns_fd, int mtu);

/* Index of the link called name (> 0), or -1 (ENODEV when there is none). */
int netns_link_index(struct netns_nl *nl, const char *name);

/* Set a link administratively up. */
int netns_link_up(struct netns_nl *nl, int ifindex);

/* Delete the link called name (a veth takes its peer along). */
int netns_link_del(struct netns_nl *nl, const char *name);

/* Add the IPv4 address addr/prefix (network byte order) to a link. */
int netns_addr_add4(struct netns_nl *nl, int ifindex, uint32_t addr, int prefix);

/* Add the IPv4 default route via gw (network byte order) over a link. */
int netns_route_default4(struct netns_nl *nl, int ifindex, uint32_t gw);

/* Call fn with the name of every link whose name starts with prefix. The
 * names are collected first, so fn may change links. 0, or -1. */
typedef void (*netns_link_fn)(void *arg, const char *name);
int netns_link_each(struct netns_nl *nl, const char *prefix, netns_link_fn fn, void *arg);

#endif
