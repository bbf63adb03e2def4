/*
 * egress.c — see egress.h. Links, addresses and routes go through netns.h
 * (rtnetlink, no iproute2 at run time); the filter is one nftables table per
 * agent, loaded atomically with `nft -f -` at start and deleted at exit. Its
 * rules match this agent's veths by their name prefix "sbx<tag>" (tag: a hash
 * of the subnet), so they need no change per sandbox, and agents of another
 * subnet on the same host keep their own rules.
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
#define EGRESS_RULESET_MAX 16384

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

/* Destinations no egress sandbox reaches: the IANA IPv4 and IPv6
 * Special-Purpose Address Registries (RFC 6890 and later), multicast, and
 * the metadata and platform addresses of cloud providers (some lie inside a
 * range above; the set merges them). One row per entry of the table in
 * docs/SECURITY.md ("Blocked destinations"). */
static const struct {
	int family;                /* 4 or 6 */
	const char *cidr;
} blocked[] = {
	{ 4, "0.0.0.0/8" },            /* "this network" */
	{ 4, "10.0.0.0/8" },           /* private */
	{ 4, "100.64.0.0/10" },        /* shared address space (carrier-grade NAT) */
	{ 4, "127.0.0.0/8" },          /* loopback */
	{ 4, "169.254.0.0/16" },       /* link-local */
	{ 4, "172.16.0.0/12" },        /* private */
	{ 4, "192.0.0.0/24" },         /* IETF protocol assignments */
	{ 4, "192.0.2.0/24" },         /* documentation (TEST-NET-1) */
	{ 4, "192.31.196.0/24" },      /* AS112-v4 */
	{ 4, "192.52.193.0/24" },      /* AMT */
	{ 4, "192.88.99.0/24" },       /* deprecated 6to4 relay anycast */
	{ 4, "192.168.0.0/16" },       /* private */
	{ 4, "192.175.48.0/24" },      /* direct delegation AS112 service */
	{ 4, "198.18.0.0/15" },        /* benchmarking */
	{ 4, "198.51.100.0/24" },      /* documentation (TEST-NET-2) */
	{ 4, "203.0.113.0/24" },       /* documentation (TEST-NET-3) */
	{ 4, "224.0.0.0/4" },          /* multicast */
	{ 4, "240.0.0.0/4" },          /* reserved, limited broadcast */
	{ 4, "169.254.169.254/32" },   /* instance metadata: AWS, GCP, Azure, OCI, OpenStack, DigitalOcean */
	{ 4, "168.63.129.16/32" },     /* Azure platform (WireServer, DNS, health probes) */
	{ 4, "100.100.100.200/32" },   /* Alibaba Cloud metadata */
	{ 4, "161.26.0.0/16" },        /* IBM Cloud service network (DNS, NTP, metadata) */
	{ 6, "::/128" },               /* unspecified */
	{ 6, "::1/128" },              /* loopback */
	{ 6, "::ffff:0:0/96" },        /* IPv4-mapped */
	{ 6, "64:ff9b::/96" },         /* IPv4-IPv6 translation (NAT64 reaches private IPv4) */
	{ 6, "64:ff9b:1::/48" },       /* local-use IPv4-IPv6 translation */
	{ 6, "100::/64" },             /* discard-only */
	{ 6, "100:0:0:1::/64" },       /* dummy prefix */
	{ 6, "2001::/23" },            /* IETF protocol assignments (Teredo, ORCHID, …) */
	{ 6, "2001:db8::/32" },        /* documentation */
	{ 6, "2002::/16" },            /* 6to4 */
	{ 6, "3fff::/20" },            /* documentation */
	{ 6, "5f00::/16" },            /* segment routing (SRv6) SIDs */
	{ 6, "fc00::/7" },             /* unique-local */
	{ 6, "fe80::/10" },            /* link-local */
	{ 6, "fec0::/10" },            /* deprecated site-local */
	{ 6, "ff00::/8" },             /* multicast */
	{ 6, "fd00:ec2::254/128" },    /* AWS instance metadata over IPv6 */
	{ 6, "fd00:ec2::23/128" },     /* AWS DNS resolver over IPv6 */
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

int egress_parse_allow(const char *s, char *out, size_t size)
{
	size_t used = 0;

	out[0] = '\0';
	while (*s) {
		char item[INET_ADDRSTRLEN + 4], ip[INET_ADDRSTRLEN];
		size_t len = strcspn(s, ",");
		const char *slash;
		struct in_addr a;
		int64_t bits = 32;
		int n;

		while (len && (*s == ' ' || *s == '\t'))
			s++, len--;
		while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
			len--;
		if (len == 0 || len >= sizeof(item))
			return -1;
		memcpy(item, s, len);
		item[len] = '\0';
		slash = strchr(item, '/');
		n = slash ? (int)(slash - item) : (int)len;
		if (n >= (int)sizeof(ip))
			return -1;
		memcpy(ip, item, (size_t)n);
		ip[n] = '\0';
		if (inet_pton(AF_INET, ip, &a) != 1 || (slash && util_parse_i64(slash + 1, 0, 32, &bits) < 0))
			return -1;
		if (bits < 32 && (ntohl(a.s_addr) & ~(bits ? ~0u << (32 - bits) : 0u)))
			return -1;   /* host bits set */
		n = snprintf(out + used, size - used, "%s%s/%d", used ? ", " : "", ip, (int)bits);
		if (n < 0 || (size_t)n >= size - used)
			return -1;
		used += (size_t)n;
		s += strcspn(s, ",");
		if (*s == ',' && !*++s)
			return -1;   /* trailing comma */
	}
	return 0;
}

/* The elements of blocked[] of one family, comma-separated, into out. */
static int blocked_list(int family, char *out, size_t size)
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(blocked); i++) {
		int n;

		if (blocked[i].family != family)
			continue;
		n = snprintf(out + used, size - used, "%s%s", used ? ", " : "", blocked[i].cidr);
		if (n < 0 || (size_t)n >= size - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

int egress_ruleset(const struct egress_rules *r, char *out, size_t size)
{
	char set4[1024], set6[1024], allow[CONF_STR_MAX + 64] = "";
	char only_iface[160] = "", conns[256] = "", conn_set[128] = "", rate[512] = "", rate_sets[256] = "";
	const char *L = r->links;
	int n;

	if (blocked_list(4, set4, sizeof(set4)) < 0 || blocked_list(6, set6, sizeof(set6)) < 0)
		return -1;
	if (r->allow[0]) {
		n = snprintf(allow, sizeof(allow), "\t\telements = { %s }\n", r->allow);
		if (n < 0 || (size_t)n >= sizeof(allow))
			return -1;
	}
	if (r->iface[0]) {
		n = snprintf(only_iface, sizeof(only_iface), "\t\tiifname \"%s*\" oifname != \"%s\" drop\n", L,
			     r->iface);
		if (n < 0 || (size_t)n >= sizeof(only_iface))
			return -1;
	}
	/* per sandbox address: tracked connections, then bytes per second each way */
	if (r->conn_max > 0) {
		n = snprintf(conn_set, sizeof(conn_set),
			     "\tset conns4 {\n\t\ttype ipv4_addr\n\t\tsize 65535\n\t\tflags dynamic\n\t}\n");
		if (n < 0 || (size_t)n >= sizeof(conn_set))
			return -1;
		n = snprintf(conns, sizeof(conns),
			     "\t\tiifname \"%s*\" ct state new add @conns4 { ip saddr ct count over %lld } "
			     "counter reject with icmpx type admin-prohibited\n",
			     L, (long long)r->conn_max);
		if (n < 0 || (size_t)n >= sizeof(conns))
			return -1;
	}
	if (r->rate_mbit > 0) {
		long long kbytes = (long long)r->rate_mbit * 125, burst = kbytes / 10 > 64 ? kbytes / 10 : 64;

		n = snprintf(rate_sets, sizeof(rate_sets),
			     "\tset rate_out4 {\n\t\ttype ipv4_addr\n\t\tsize 65535\n\t\tflags dynamic,timeout\n\t\ttimeout 1m\n\t}\n"
			     "\tset rate_in4 {\n\t\ttype ipv4_addr\n\t\tsize 65535\n\t\tflags dynamic,timeout\n\t\ttimeout 1m\n\t}\n");
		if (n < 0 || (size_t)n >= sizeof(rate_sets))
			return -1;
		n = snprintf(rate, sizeof(rate),
			     "\t\tiifname \"%1$s*\" update @rate_out4 { ip saddr limit rate over %2$lld kbytes/second burst %3$lld kbytes } counter drop\n"
			     "\t\toifname \"%1$s*\" update @rate_in4 { ip daddr limit rate over %2$lld kbytes/second burst %3$lld kbytes } counter drop\n",
			     L, kbytes, burst);
		if (n < 0 || (size_t)n >= sizeof(rate))
			return -1;
	}
	/* "table; delete table; table {…}" in one transaction: replaces a table
	 * left by an earlier run atomically and never fails when there is none.
	 * Every rule names this agent's links only ("<links>*"): agents of other
	 * subnets on the host have tables of their own. */
	n = snprintf(out, size,
		"table inet %1$s\n"
		"delete table inet %1$s\n"
		"table inet %1$s {\n"
		"\tset blocked4 {\n"
		"\t\ttype ipv4_addr\n"
		"\t\tflags interval\n"
		"\t\tauto-merge\n"
		"\t\telements = { %2$s }\n"
		"\t}\n"
		"\tset blocked6 {\n"
		"\t\ttype ipv6_addr\n"
		"\t\tflags interval\n"
		"\t\tauto-merge\n"
		"\t\telements = { %3$s }\n"
		"\t}\n"
		"\tset allowed4 {\n"
		"\t\ttype ipv4_addr\n"
		"\t\tflags interval\n"
		"%4$s"
		"\t}\n"
		"%5$s%6$s"
		"\tchain input {\n"
		"\t\ttype filter hook input priority -10; policy accept;\n"
		"\t\tiifname \"%7$s*\" drop\n"
		"\t}\n"
		"\tchain forward {\n"
		"\t\ttype filter hook forward priority -10; policy accept;\n"
		"\t\tiifname \"%7$s*\" meta nfproto ipv6 drop\n"
		"\t\toifname \"%7$s*\" meta nfproto ipv6 drop\n"
		"\t\tiifname \"%7$s*\" oifname \"sbx*\" drop\n"
		"\t\tiifname \"%7$s*\" ip saddr != %8$s drop\n"
		"\t\tiifname \"%7$s*\" ip daddr %8$s drop\n"
		"\t\tiifname \"%7$s*\" ip daddr @blocked4 ip daddr != @allowed4 drop\n"
		"\t\tiifname \"%7$s*\" ip6 daddr @blocked6 drop\n"
		"%9$s%10$s%11$s"
		"\t\toifname \"%7$s*\" ct state established,related accept\n"
		"\t\toifname \"%7$s*\" drop\n"
		"\t}\n"
		"\tchain postrouting {\n"
		"\t\ttype nat hook postrouting priority 100; policy accept;\n"
		"\t\tip saddr %8$s oifname != \"sbx*\" masquerade\n"
		"\t}\n"
		"}\n",
		r->table, set4, set6, allow, conn_set, rate_sets, L, r->subnet, only_iface, conns, rate);
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
	char allow[CONF_STR_MAX + 64];
	struct egress_rules spec;
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
	if (egress_parse_allow(conf->agent.egress_allow, allow, sizeof(allow)) < 0) {
		err_set(e, SBX_E_INTERNAL, "agent.egress_allow '%s' is not a comma-separated list of IPv4 CIDRs",
			conf->agent.egress_allow);
		goto fail;
	}
	spec.table = eg->table;
	spec.subnet = conf->agent.egress_subnet;
	spec.links = eg->prefix;
	spec.iface = conf->agent.egress_interface;
	spec.allow = allow;
	spec.conn_max = conf->agent.egress_conn_max;
	spec.rate_mbit = conf->agent.egress_rate_mbit;
	rules = malloc(EGRESS_RULESET_MAX);
	if (!rules || egress_ruleset(&spec, rules, EGRESS_RULESET_MAX) < 0) {
		err_set(e, SBX_E_INTERNAL, "cannot build the nftables ruleset");
		goto fail;
	}
	if (run_nft(eg->nft, rules, e) < 0) {
		err_prefix(e, "cannot load nftables table '%s'", eg->table);
		goto fail;
	}
	if (netns_link_each(&eg->nl, eg->prefix, remove_stale, eg) < 0)
		log_warn("egress: cannot list links: %s", strerror(errno));
	log_info("egress: subnet %s, links %s*, mtu %d, nftables table inet %s, %lld connections "
		 "and %lld Mbit/s per sandbox (0: no limit)",
		 conf->agent.egress_subnet, eg->prefix, eg->mtu, eg->table,
		 (long long)conf->agent.egress_conn_max, (long long)conf->agent.egress_rate_mbit);
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
