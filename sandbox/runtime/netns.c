/*
 * netns.c — see netns.h. The rtnetlink client builds each request in one
 * fixed buffer on the stack (struct nl_msg), sends it with NLM_F_ACK and
 * reads until the kernel's answer of that sequence number.
 */
#include "netns.h"
#include "donepipe.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define NL_MSG_MAX 1024
#define NL_RECV_MAX 32768
#define NL_NAMES_MAX 4096

int netns_lo_up(void)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int rc, err;

	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	err = errno;
	close(fd);
	errno = err;
	return rc;
}

struct netns_made {
	int fd;
	int err;
};

static void *netns_new_thread(void *arg)
{
	struct netns_made *m = arg;

	if (unshare(CLONE_NEWNET) < 0) {
		m->err = errno;
		return NULL;
	}
	m->fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (m->fd < 0)
		m->err = errno;
	return NULL;
}

int netns_new(void)
{
	struct netns_made m = { -1, 0 };
	pthread_t t;
	int rc = donepipe_thread_start(&t, netns_new_thread, &m);

	if (rc != 0) {
		errno = rc;
		return -1;
	}
	pthread_join(t, NULL);
	if (m.fd < 0)
		errno = m.err;
	return m.fd;
}

/* ---- message building ----------------------------------------------------- */

struct nl_msg {
	union {
		struct nlmsghdr h;
		char buf[NL_MSG_MAX];
	};
};

/* Start a request of type with flags and a fixed header of hdrlen bytes;
 * returns the (zeroed) fixed header. */
static void *msg_init(struct nl_msg *m, uint16_t type, uint16_t flags, size_t hdrlen)
{
	memset(m, 0, sizeof(*m));
	m->h.nlmsg_len = (uint32_t)NLMSG_LENGTH(hdrlen);
	m->h.nlmsg_type = type;
	m->h.nlmsg_flags = (uint16_t)(NLM_F_REQUEST | flags);
	return NLMSG_DATA(&m->h);
}

/* Append an attribute; NULL when the buffer is full (the request is then
 * refused by msg_send with EMSGSIZE). */
static struct rtattr *msg_put(struct nl_msg *m, uint16_t type, const void *data, size_t len)
{
	size_t at = NLMSG_ALIGN(m->h.nlmsg_len);
	struct rtattr *a;

	if (at + RTA_SPACE(len) > sizeof(m->buf) || m->h.nlmsg_len == 0) {
		m->h.nlmsg_len = 0;
		return NULL;
	}
	a = (struct rtattr *)(m->buf + at);
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	m->h.nlmsg_len = (uint32_t)(at + RTA_ALIGN(a->rta_len));
	return a;
}

static struct rtattr *msg_put_str(struct nl_msg *m, uint16_t type, const char *s)
{
	return msg_put(m, type, s, strlen(s) + 1);
}

static struct rtattr *msg_put_u32(struct nl_msg *m, uint16_t type, uint32_t v)
{
	return msg_put(m, type, &v, sizeof(v));
}

/* A nested attribute: open with msg_nest, close with msg_nest_end. */
static struct rtattr *msg_nest(struct nl_msg *m, uint16_t type)
{
	return msg_put(m, type, NULL, 0);
}

static void msg_nest_end(struct nl_msg *m, struct rtattr *nest)
{
	if (nest && m->h.nlmsg_len)
		nest->rta_len = (unsigned short)((char *)&m->h + m->h.nlmsg_len - (char *)nest);
}

/* Raw bytes inside the message (a nested ifinfomsg of a veth peer). */
static void *msg_reserve(struct nl_msg *m, size_t len)
{
	size_t at = NLMSG_ALIGN(m->h.nlmsg_len);

	if (at + NLMSG_ALIGN(len) > sizeof(m->buf) || m->h.nlmsg_len == 0) {
		m->h.nlmsg_len = 0;
		return NULL;
	}
	m->h.nlmsg_len = (uint32_t)(at + NLMSG_ALIGN(len));
	return m->buf + at;
}

/* ---- the socket ------------------------------------------------------------- */

int netns_nl_open(struct netns_nl *nl)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	nl->seq = 1;
	nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (nl->fd < 0)
		return -1;
	if (bind(nl->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = errno;

		close(nl->fd);
		nl->fd = -1;
		errno = err;
		return -1;
	}
	return 0;
}

void netns_nl_close(struct netns_nl *nl)
{
	if (nl->fd >= 0)
		close(nl->fd);
	nl->fd = -1;
}

static int msg_send(struct netns_nl *nl, struct nl_msg *m)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	ssize_t n;

	if (m->h.nlmsg_len == 0) {
		errno = EMSGSIZE;
		return -1;
	}
	m->h.nlmsg_seq = ++nl->seq;
	do
		n = sendto(nl->fd, m->buf, m->h.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if ((size_t)n != m->h.nlmsg_len) {
		errno = EIO;
		return -1;
	}
	return 0;
}

/* Read answers to the last request. For each message of our sequence that
 * is not an error or the end of a dump, call fn. Returns 0 when the kernel
 * acknowledged (or ended the dump, or answered once without an ack when
 * single is set), or -1 with errno = the kernel's error. */
typedef int (*reply_fn)(void *arg, const struct nlmsghdr *h);

static int msg_wait(struct netns_nl *nl, reply_fn fn, void *arg, int single)
{
	auto_free char *buf = malloc(NL_RECV_MAX);

	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		ssize_t n = recv(nl->fd, buf, NL_RECV_MAX, 0);
		struct nlmsghdr *h;
		size_t len;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EPROTO;
			return -1;
		}
		len = (size_t)n;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != nl->seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *er = NLMSG_DATA(h);

				if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*er))) {
					errno = EPROTO;
					return -1;
				}
				if (er->error == 0)
					return 0;
				errno = -er->error;
				return -1;
			}
			if (fn && fn(arg, h) < 0)
				return -1;
			if (single)
				return 0;
		}
	}
}

static int msg_call(struct netns_nl *nl, struct nl_msg *m)
{
	if (msg_send(nl, m) < 0)
		return -1;
	return msg_wait(nl, NULL, NULL, 0);
}

/* ---- requests ------------------------------------------------------------------- */

int netns_veth_create(struct netns_nl *nl, const char *host_name, const char *peer_name,
		      int peer_netns_fd, int mtu)
{
	struct nl_msg m;
	struct rtattr *info, *data, *peer;
	struct ifinfomsg *peer_ifi;

	(void)msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, sizeof(struct ifinfomsg));
	msg_put_str(&m, IFLA_IFNAME, host_name);
	if (mtu > 0)
		msg_put_u32(&m, IFLA_MTU, (uint32_t)mtu);
	info = msg_nest(&m, IFLA_LINKINFO);
	msg_put_str(&m, IFLA_INFO_KIND, "veth");
	data = msg_nest(&m, IFLA_INFO_DATA);
	peer = msg_nest(&m, VETH_INFO_PEER);
	peer_ifi = msg_reserve(&m, sizeof(struct ifinfomsg));
	if (peer_ifi)
		memset(peer_ifi, 0, sizeof(*peer_ifi));
	msg_put_str(&m, IFLA_IFNAME, peer_name);
	if (mtu > 0)
		msg_put_u32(&m, IFLA_MTU, (uint32_t)mtu);
	msg_put_u32(&m, IFLA_NET_NS_FD, (uint32_t)peer_netns_fd);
	msg_nest_end(&m, peer);
	msg_nest_end(&m, data);
	msg_nest_end(&m, info);
	return msg_call(nl, &m);
}

static int got_index(void *arg, const struct nlmsghdr *h)
{
	const struct ifinfomsg *ifi = NLMSG_DATA(h);

	if (h->nlmsg_type != RTM_NEWLINK || h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifi))) {
		errno = EPROTO;
		return -1;
	}
	*(int *)arg = ifi->ifi_index;
	return 0;
}

int netns_link_index(struct netns_nl *nl, const char *name)
{
	struct nl_msg m;
	int index = 0;

	(void)msg_init(&m, RTM_GETLINK, 0, sizeof(struct ifinfomsg));
	msg_put_str(&m, IFLA_IFNAME, name);
	if (msg_send(nl, &m) < 0 || msg_wait(nl, got_index, &index, 1) < 0)
		return -1;
	if (index <= 0) {
		errno = ENODEV;
		return -1;
	}
	return index;
}

int netns_link_up(struct netns_nl *nl, int ifindex)
{
	struct nl_msg m;
	struct ifinfomsg *ifi = msg_init(&m, RTM_NEWLINK, NLM_F_ACK, sizeof(*ifi));

	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	return msg_call(nl, &m);
}

int netns_link_del(struct netns_nl *nl, const char *name)
{
	struct nl_msg m;

	(void)msg_init(&m, RTM_DELLINK, NLM_F_ACK, sizeof(struct ifinfomsg));
	msg_put_str(&m, IFLA_IFNAME, name);
	return msg_call(nl, &m);
}

int netns_addr_add4(struct netns_nl *nl, int ifindex, uint32_t addr, int prefix)
{
	struct nl_msg m;
	struct ifaddrmsg *ifa = msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK,
					 sizeof(*ifa));

	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = (unsigned char)prefix;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = (unsigned)ifindex;
	msg_put(&m, IFA_LOCAL, &addr, sizeof(addr));
	msg_put(&m, IFA_ADDRESS, &addr, sizeof(addr));
	return msg_call(nl, &m);
}

int netns_route_default4(struct netns_nl *nl, int ifindex, uint32_t gw)
{
	struct nl_msg m;
	struct rtmsg *rt = msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK,
				    sizeof(*rt));

	rt->rtm_family = AF_INET;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_BOOT;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	msg_put(&m, RTA_GATEWAY, &gw, sizeof(gw));
	msg_put_u32(&m, RTA_OIF, (uint32_t)ifindex);
	return msg_call(nl, &m);
}

/* ---- listing ------------------------------------------------------------------------ */

struct names {
	const char *prefix;
	char buf[NL_NAMES_MAX];   /* NUL-separated */
	size_t used;
};

static int collect_name(void *arg, const struct nlmsghdr *h)
{
	struct names *nm = arg;
	const struct ifinfomsg *ifi = NLMSG_DATA(h);
	const struct rtattr *a;
	int len;

	if (h->nlmsg_type != RTM_NEWLINK || h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifi)))
		return 0;
	len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*ifi)));
	for (a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		const char *name = RTA_DATA(a);
		size_t n;

		if (a->rta_type != IFLA_IFNAME)
			continue;
		n = strnlen(name, RTA_PAYLOAD(a));
		if (n == 0 || n >= IFNAMSIZ || strncmp(name, nm->prefix, strlen(nm->prefix)) != 0)
			return 0;
		if (nm->used + n + 1 > sizeof(nm->buf))
			return 0;   /* the rest on a later pass */
		memcpy(nm->buf + nm->used, name, n);
		nm->buf[nm->used + n] = '\0';
		nm->used += n + 1;
		return 0;
	}
	return 0;
}

int netns_link_each(struct netns_nl *nl, const char *prefix, netns_link_fn fn, void *arg)
{
	auto_free struct names *nm = calloc(1, sizeof(*nm));
	struct nl_msg m;
	struct ifinfomsg *ifi;

	if (!nm) {
		errno = ENOMEM;
		return -1;
	}
	nm->prefix = prefix;
	ifi = msg_init(&m, RTM_GETLINK, NLM_F_DUMP, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	if (msg_send(nl, &m) < 0 || msg_wait(nl, collect_name, nm, 0) < 0)
		return -1;
	for (size_t at = 0; at < nm->used; at += strlen(nm->buf + at) + 1)
		fn(arg, nm->buf + at);
	return 0;
}
