/*
 * egress.c — see egress.h. Links, addresses and routes go through netns.h
 * (rtnetlink, no iproute2 at run time); the filter is one nftables table per
 * node, loaded atomically with `nft -f -` at start and deleted at exit. Its
 * rules match every sandbox veth by the name prefix "sbx", so they need no
 * change per sandbox and also cover sandboxes of other agents on the host.
 */
#include "egress.h"
#include "log.h"
#include "netns.h"
#include "spawn.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define EGRESS_LOCK_ROOT "/run/sbx/egress"
#define EGRESS_PREFIX "sbx"
#define EGRESS_MAX_SLOTS (1u << 20)   /* five hex digits in the link name */
#define EGRESS_RULESET_MAX 4096

struct egress {
	char table[64];
	char tag[8];               /* 4 hex digits: hash of the subnet */
	char prefix[16];           /* "sbx" + tag: this subnet's links */
	uint32_t net;              /* host byte order */
	int prefix_len;
	uint32_t slots, cursor;
	int mtu;
	int self_ns;               /* the agent's own network namespace */
	int lock_dir;
	struct netns_nl nl;        /* rtnetlink of the host namespace */
	char nft[32];
};

/* Private, shared, link-local (cloud metadata), loopback, "this network",
 * multicast and reserved IPv4 ranges: never reachable from a sandbox. */
static const char *const blocked4[] = {
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
};

int egress_parse_subnet(const char *s, uint32_t *net, int *prefix)
{
	char ip[INET_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	struct in_addr a;
	int64_t n;
	uint32_t h, mask;

	if (!slash || (size_t)(slash - s) >= sizeof(ip))
		return -1;
	memcpy(ip, s, (size_t)(slash - s));
	ip[slash - s] = '\0';
	if (inet_pton(AF_INET, ip, &a) != 1 || util_parse_i64(slash + 1, 8, 28, &n) < 0)
		return -1;
	h = ntohl(a.s_addr);
	mask = ~0u << (32 - n);
	if (h & ~mask)
		return -1;
	*net = a.s_addr;
	*prefix = (int)n;
	return 0;
}

int egress_ruleset(const char *table, const char *subnet, const char *iface, char *out, size_t size)
{
	char set[256] = "", only_iface[160] = "";
	size_t used = 0;
	int n;

	for (size_t i = 0; i < ARRAY_SIZE(blocked4); i++) {
		n = snprintf(set + used, sizeof(set) - used, "%s%s", i ? ", " : "", blocked4[i]);
		if (n < 0 || (size_t)n >= sizeof(set) - used)
			return -1;
		used += (size_t)n;
	}
	if (iface[0]) {
		n = snprintf(only_iface, sizeof(only_iface), "\t\tiifname \"sbx*\" oifname != \"%s\" drop\n", iface);
		if (n < 0 || (size_t)n >= sizeof(only_iface))
			return -1;
	}
	/* "table; delete table; table {…}" in one transaction: replaces a table
	 * left by an earlier run atomically and never fails when there is none */
	n = snprintf(out, size,
		"table inet %1$s\n"
		"delete table inet %1$s\n"
		"table inet %1$s {\n"
		"\tset blocked4 {\n"
		"\t\ttype ipv4_addr\n"
		"\t\tflags interval\n"
		"\t\telements = { %2$s }\n"
		"\t}\n"
		"\tchain input {\n"
		"\t\ttype filter hook input priority -10; policy accept;\n"
		"\t\tiifname \"sbx*\" drop\n"
		"\t}\n"
		"\tchain forward {\n"
		"\t\ttype filter hook forward priority -10; policy accept;\n"
		"\t\tiifname \"sbx*\" meta nfproto ipv6 drop\n"
		"\t\toifname \"sbx*\" meta nfproto ipv6 drop\n"
		"\t\tiifname \"sbx*\" oifname \"sbx*\" drop\n"
		"\t\tiifname \"sbx*\" ip saddr != %3$s drop\n"
		"\t\tiifname \"sbx*\" ip daddr %3$s drop\n"
		"\t\tiifname \"sbx*\" ip daddr @blocked4 drop\n"
		"%4$s"
		"\t\toifname \"sbx*\" ct state established,related accept\n"
		"\t\toifname \"sbx*\" drop\n"
		"\t}\n"
		"\tchain postrouting {\n"
		"\t\ttype nat hook postrouting priority 100; policy accept;\n"
		"\t\tip saddr %3$s oifname != \"sbx*\" masquerade\n"
		"\t}\n"
		"}\n",
		table, set, subnet, only_iface);
	if (n < 0 || (size_t)n >= size)
		return -1;
	return 0;
}

/* Run `nft -f -` with text on its stdin; 0 when it exited 0. Blocking: only
 * at agent start and exit. */
static int run_nft(const char *nft, const char *text, struct sbx_err *e)
{
	static char *const env[] = { (char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	static char *const argv[] = { (char *)"nft", (char *)"-f", (char *)"-", NULL };
	struct spawn_host_cmd cmd = { .path = nft, .argv = argv, .envp = env, .out = 1, .err = 2 };
	int p[2], pidfd, rc;

	if (pipe2(p, O_CLOEXEC) < 0)
		return err_sys(e, errno, "pipe");
	cmd.in = p[0];
	rc = spawn_host(&cmd, &pidfd, e) < 0 ? -1 : 0;
	close(p[0]);
	if (rc == 0)
		(void)util_write_all(p[1], text, strlen(text));   /* EPIPE: nft's status says why */
	close(p[1]);
	if (rc < 0)
		return -1;
	rc = spawn_host_wait(pidfd, e);
	close(pidfd);
	if (rc < 0)
		return -1;
	if (rc != 0)
		return err_set(e, SBX_E_INTERNAL, "'%s -f -' failed (status %d; see the agent's stderr)",
			       nft, rc);
	return 0;
}

/* 16 bits of FNV-1a: short, stable tags for names. */
static unsigned hash16(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return (unsigned)((h ^ (h >> 16)) & 0xffff);
}

static int write_sysctl(const char *path, const char *value)
{
	auto_close int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	return util_write_all(fd, value, strlen(value));
}

/* MTU of iface, or of the link of the default route, or 1500. */
static int host_mtu(const char *iface)
{
	char dev[IFNAMSIZ] = "";
	struct ifreq ifr;
	auto_close int fd = -1;

	if (iface[0]) {
		snprintf(dev, sizeof(dev), "%s", iface);
	} else {
		auto_fclose FILE *f = fopen("/proc/net/route", "re");
		char line[256], name[IFNAMSIZ + 1];
		unsigned dst;

		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "%16s %x", name, &dst) == 2 && dst == 0 && strlen(name) < IFNAMSIZ) {
				memcpy(dev, name, strlen(name) + 1);
				break;
			}
	}
	if (!dev[0])
		return 1500;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, dev, strlen(dev) + 1);
	if (fd < 0 || ioctl(fd, SIOCGIFMTU, &ifr) < 0 || ifr.ifr_mtu < 576)
		return iface[0] ? -1 : 1500;
	return ifr.ifr_mtu;
}

/* "sbx" + tag + 5 hex digits: 12 bytes, below IFNAMSIZ. */
static int slot_name(const struct egress *eg, uint32_t slot, char *out, size_t size)
{
	int n = snprintf(out, size, "%s%05x", eg->prefix, (unsigned)slot);

	return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Take the lock of slot (non-blocking): its fd, or -1. */
static int slot_lock(struct egress *eg, uint32_t slot)
{
	char name[16];
	int fd;

	snprintf(name, sizeof(name), "%05x", (unsigned)slot);
	fd = openat(eg->lock_dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A link of our subnet whose slot nobody holds was left by a dead agent. */
static void remove_stale(void *arg, const char *name)
{
	struct egress *eg = arg;
	const char *hex = name + strlen(eg->prefix);
	char *end;
	unsigned long slot;
	int fd;

	if (strlen(hex) != 5)
		return;
	slot = strtoul(hex, &end, 16);
	if (*end || slot >= eg->slots)
		return;
	fd = slot_lock(eg, (uint32_t)slot);
	if (fd < 0)
		return;
	if (netns_link_del(&eg->nl, name) == 0)
		log_info("egress: removed left-over link '%s'", name);
	close(fd);
}

static void egress_close(struct egress *eg)
{
	netns_nl_close(&eg->nl);
	if (eg->self_ns >= 0)
		close(eg->self_ns);
	if (eg->lock_dir >= 0)
		close(eg->lock_dir);
	free(eg);
}

struct egress *egress_new(const struct sbx_conf *conf, struct sbx_err *e)
{
	static const char *const nfts[] = { "/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft" };
	struct egress *eg;
	char dir[PATH_MAX];
	auto_free char *rules = NULL;
	size_t n = 0;

	eg = calloc(1, sizeof(*eg));
	if (!eg)
		return err_sys(e, ENOMEM, "egress"), NULL;
	eg->self_ns = eg->lock_dir = eg->nl.fd = -1;
	if (egress_parse_subnet(conf->agent.egress_subnet, &eg->net, &eg->prefix_len) < 0) {
		err_set(e, SBX_E_INTERNAL, "agent.egress_subnet '%s' is not an IPv4 CIDR /8../28",
			conf->agent.egress_subnet);
		goto fail;
	}
	eg->net = ntohl(eg->net);
	eg->slots = 1u << (32 - eg->prefix_len - 2);
	if (eg->slots > EGRESS_MAX_SLOTS)
		eg->slots = EGRESS_MAX_SLOTS;
	snprintf(eg->tag, sizeof(eg->tag), "%04x", hash16(conf->agent.egress_subnet));
	snprintf(eg->prefix, sizeof(eg->prefix), EGRESS_PREFIX "%s", eg->tag);

	/* "sbx_<node>_<hash of state_dir>": nftables names take letters, digits
	 * and '_'; the hash keeps apart agents of one name on one host (dev
	 * stacks), so one of them exiting never drops another's table */
	memcpy(eg->table, "sbx_", 5);
	for (const char *p = conf->agent.name; *p && n < 40; p++, n++) {
		char c = *p;

		eg->table[4 + n] = ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				    (c >= '0' && c <= '9')) ? c : '_';
	}
	snprintf(eg->table + 4 + n, sizeof(eg->table) - 4 - n, "_%04x", hash16(conf->agent.state_dir));

	if (conf->agent.egress_interface[0] &&
	    (strlen(conf->agent.egress_interface) >= IFNAMSIZ ||
	     strspn(conf->agent.egress_interface, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
		     strlen(conf->agent.egress_interface))) {
		err_set(e, SBX_E_INTERNAL, "agent.egress_interface '%s' is not a link name",
			conf->agent.egress_interface);
		goto fail;
	}
	eg->mtu = host_mtu(conf->agent.egress_interface);
	if (eg->mtu < 0) {
		err_set(e, SBX_E_INTERNAL, "agent.egress_interface '%s' does not exist",
			conf->agent.egress_interface);
		goto fail;
	}
	for (size_t i = 0; i < ARRAY_SIZE(nfts) && !eg->nft[0]; i++)
		if (access(nfts[i], X_OK) == 0)
			snprintf(eg->nft, sizeof(eg->nft), "%s", nfts[i]);
	if (!eg->nft[0]) {
		err_set(e, SBX_E_INTERNAL, "the nft binary (package nftables) is not installed");
		goto fail;
	}
	eg->self_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (eg->self_ns < 0) {
		err_sys(e, errno, "cannot open the agent's network namespace");
		goto fail;
	}
	if (netns_nl_open(&eg->nl) < 0) {
		err_sys(e, errno, "cannot open an rtnetlink socket");
		goto fail;
	}
	if (snprintf(dir, sizeof(dir), "%s/%s", EGRESS_LOCK_ROOT, eg->tag) >= (int)sizeof(dir) ||
	    util_mkdir_p(dir, 0700) < 0 ||
	    (eg->lock_dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		err_sys(e, errno, "cannot create '%s'", dir);
		goto fail;
	}
	if (write_sysctl("/proc/sys/net/ipv4/ip_forward", "1\n") < 0) {
		err_sys(e, errno, "cannot set net.ipv4.ip_forward");
		goto fail;
	}
	rules = malloc(EGRESS_RULESET_MAX);
	if (!rules || egress_ruleset(eg->table, conf->agent.egress_subnet,
				     conf->agent.egress_interface, rules, EGRESS_RULESET_MAX) < 0) {
		err_set(e, SBX_E_INTERNAL, "cannot build the nftables ruleset");
		goto fail;
	}
	if (run_nft(eg->nft, rules, e) < 0) {
		err_prefix(e, "cannot load nftables table '%s'", eg->table);
		goto fail;
	}
	if (netns_link_each(&eg->nl, eg->prefix, remove_stale, eg) < 0)
		log_warn("egress: cannot list links: %s", strerror(errno));
	log_info("egress: subnet %s, links %s*, mtu %d, nftables table inet %s",
		 conf->agent.egress_subnet, eg->prefix, eg->mtu, eg->table);
	return eg;
fail:
	egress_close(eg);
	return NULL;
}

void egress_free(struct egress *eg)
{
	char cmd[128];
	struct sbx_err e = { 0 };

	if (!eg)
		return;
	if (snprintf(cmd, sizeof(cmd), "delete table inet %s\n", eg->table) < (int)sizeof(cmd) &&
	    run_nft(eg->nft, cmd, &e) < 0)
		log_warn("egress: %s", e.msg);
	egress_close(eg);
}

/* Back to the agent's own network namespace. Failing here would leave the
 * agent's later sockets in a sandbox: stop instead. */
static void return_home(struct egress *eg)
{
	if (setns(eg->self_ns, CLONE_NEWNET) < 0) {
		log_error("egress: cannot return to the agent's network namespace: %s", strerror(errno));
		abort();
	}
}

int egress_attach(struct egress *eg, int netns_fd, struct egress_link *link, struct sbx_err *e)
{
	struct netns_nl inner = { .fd = -1 };
	char path[96];
	uint32_t slot = 0, base;
	int fd = -1, hidx, iidx, created = 0, err;
	const char *step;

	link->lock_fd = -1;
	for (uint32_t i = 0; i < eg->slots && fd < 0; i++) {
		slot = (eg->cursor + i) % eg->slots;
		fd = slot_lock(eg, slot);
	}
	if (fd < 0)
		return err_set(e, SBX_E_NO_CAPACITY, "no free address in agent.egress_subnet");
	eg->cursor = (slot + 1) % eg->slots;
	if (slot_name(eg, slot, link->ifname, sizeof(link->ifname)) < 0) {
		close(fd);
		return err_set(e, SBX_E_INTERNAL, "egress: link name too long");
	}
	base = eg->net + slot * 4;
	link->slot = slot;
	link->gateway = htonl(base + 1);
	link->addr = htonl(base + 2);
	/* a link of this slot may outlive its sandbox while the kernel tears
	 * its namespace down; we hold the slot, so it is ours to remove */
	(void)netns_link_del(&eg->nl, link->ifname);

	step = "enter the sandbox's network namespace";
	if (setns(netns_fd, CLONE_NEWNET) < 0)
		goto fail;
	/* new links of the sandbox get no IPv6 (lo keeps ::1) */
	(void)write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1\n");
	err = netns_nl_open(&inner) < 0 ? errno : 0;
	return_home(eg);
	step = "open the sandbox's rtnetlink socket";
	if (err) {
		errno = err;
		goto fail;
	}
	step = "create the veth pair";
	if (netns_veth_create(&eg->nl, link->ifname, "eth0", netns_fd, eg->mtu) < 0)
		goto fail;
	created = 1;
	if (snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", link->ifname) <
	    (int)sizeof(path))
		(void)write_sysctl(path, "1\n");
	step = "configure the host side";
	if ((hidx = netns_link_index(&eg->nl, link->ifname)) < 0 ||
	    netns_addr_add4(&eg->nl, hidx, link->gateway, 30) < 0 || netns_link_up(&eg->nl, hidx) < 0)
		goto fail;
	step = "configure eth0";
	if ((iidx = netns_link_index(&inner, "eth0")) < 0 ||
	    netns_addr_add4(&inner, iidx, link->addr, 30) < 0 || netns_link_up(&inner, iidx) < 0 ||
	    netns_route_default4(&inner, iidx, link->gateway) < 0)
		goto fail;
	netns_nl_close(&inner);
	link->lock_fd = fd;
	return 0;
fail:
	err = errno;
	netns_nl_close(&inner);
	if (created)
		(void)netns_link_del(&eg->nl, link->ifname);
	close(fd);
	return err_sys(e, err, "egress: cannot %s", step);
}

/* The veth goes with the sandbox's network namespace: the kernel deletes it
 * when the namespace's last reference (init, the runtime's fd) is gone, off
 * the agent's loop. Deleting it here would cost ~30 ms of RCU waits on the
 * loop. A slot taken again before that happens is cleared by egress_attach. */
void egress_release(struct egress *eg, struct egress_link *link)
{
	(void)eg;
	if (link->lock_fd < 0)
		return;
	close(link->lock_fd);
	link->lock_fd = -1;
}
