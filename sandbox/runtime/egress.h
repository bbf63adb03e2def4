/*
 * egress.h — network mode "egress": a veth pair per sandbox (host side
 * "sbx<tag><slot>", sandbox side "eth0"), a /30 of agent.egress_subnet per
 * sandbox (gateway .1 on the host side, the sandbox .2 with the default
 * route), NAT out of the host, and an nftables table
 * `inet sbx_<node>_<4 hex digits of a hash of agent.state_dir>` that drops
 * everything from this agent's sandboxes to the host itself, to other
 * sandboxes, to the special-purpose ranges and cloud platform addresses
 * (agent.egress_allow excepted), and all IPv6, and limits each sandbox's
 * tracked connections and rate (agent.egress_conn_max, egress_rate_mbit).
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

/* What the nftables ruleset of an agent is made of. Strings are borrowed
 * and already validated (they go into nft's input as they are). */
struct egress_rules {
	const char *table;        /* nftables table name */
	const char *subnet;       /* agent.egress_subnet */
	const char *links;        /* this agent's link name prefix, "sbx<tag>" */
	const char *iface;        /* agent.egress_interface, or "" */
	const char *allow;        /* egress_parse_allow's output, or "" */
	int64_t conn_max;         /* tracked connections per sandbox; 0: no limit */
	int64_t rate_mbit;        /* Mbit/s per sandbox and direction; 0: no limit */
};

/* The ruleset text for r into out. 0, or -1 when it does not fit. */
int egress_ruleset(const struct egress_rules *r, char *out, size_t size);

/* Check agent.egress_allow ("a.b.c.d[/n], …", may be empty) and write it in
 * nft's syntax ("a.b.c.d/n, …") into out. 0, or -1 when an item is not an
 * IPv4 address or CIDR with zero host bits, or out is too small. */
int egress_parse_allow(const char *s, char *out, size_t size);

#endif
