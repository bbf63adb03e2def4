/*
 * egress.h — network mode "egress": a veth pair per sandbox (host side
 * "sbx<tag><slot>", sandbox side "eth0"), a /30 of agent.egress_subnet per
 * sandbox (gateway .1 on the host side, the sandbox .2 with the default
 * route), NAT out of the host, and an nftables table
 * `inet sbx_<node>_<4 hex digits of a hash of agent.state_dir>` that drops everything from sandboxes to the host itself, to other sandboxes, to
 * private, shared, link-local, loopback, multicast and reserved IPv4 ranges,
 * and all IPv6.
 *
 * Slots are allocated host-wide (agents on one host may share the subnet):
 * a slot is taken while its lock file in /run/sbx/egress/<tag>/ is flock'ed
 * by a live agent, so a crashed agent's slots free themselves.
 */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include "conf.h"
#include "err.h"

#include <net/if.h>
#include <stdint.h>

struct egress;

/* The network of one egress sandbox; zero it, then egress_attach. */
struct egress_link {
	int lock_fd;            /* the slot's lock; -1 when not attached */
	uint32_t slot;
	char ifname[IFNAMSIZ];  /* host side of the veth */
	uint32_t addr, gateway; /* network byte order */
};

/* Set up egress for this node: ip_forward, the nftables table (replacing a
 * left-over one), removal of left-over veths nobody holds. New heap object
 * (egress_free), or NULL with e filled (egress is then unavailable). */
struct egress *egress_new(const struct sbx_conf *conf, struct sbx_err *e);

/* Delete the nftables table and free eg. Links must be released first. */
void egress_free(struct egress *eg);

/* Give the network namespace netns_fd (nothing but lo yet) its eth0, address
 * and default route. 0, or -1 with e filled (NO_CAPACITY when the subnet is
 * full); on failure nothing is left behind. */
int egress_attach(struct egress *eg, int netns_fd, struct egress_link *link, struct sbx_err *e);

/* Free the slot; the veth goes with the sandbox's network namespace once
 * its last reference is closed (the kernel does it, within milliseconds).
 * Idempotent. */
void egress_release(struct egress *eg, struct egress_link *link);

/* Parse "a.b.c.d/n" (host bits zero, 8 <= n <= 28) into network byte order
 * net and prefix. 0, or -1. */
int egress_parse_subnet(const char *s, uint32_t *net, int *prefix);

/* The nftables ruleset of a node (table name, subnet, interface or ""),
 * into out. 0, or -1 when it does not fit. */
int egress_ruleset(const char *table, const char *subnet, const char *iface, char *out, size_t size);

#endif
