#include "tcplisten.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tcplisten_parse(const char *addr, char *host, size_t hostsz, int *port)
{
	const char *colon;
	size_t hlen;
	int64_t p;

	if (!addr || !*addr)
		return -1;
	if (addr[0] == '[') {
		const char *rb = strchr(addr, ']');
		if (!rb || rb[1] != ':')
			return -1;
		hlen = (size_t)(rb - addr - 1);
		addr++;
		colon = rb + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
			return -1;
		hlen = (size_t)(colon - addr);
	}
	if (hlen == 0 || hlen >= hostsz)
		return -1;
	if (util_parse_i64(colon + 1, 1, 65535, &p) < 0)
		return -1;
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	*port = (int)p;
	return 0;
}

int tcplisten_sockaddr(const char *host, int port, struct sockaddr_storage *ss,
		       socklen_t *len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return 0;
	}
	memset(ss, 0, sizeof(*ss));
	return -1;
}

int tcplisten_open(const char *addr, int backlog, struct sbx_err *e)
{
	char host[128];
	int port, one = 1;
	struct sockaddr_storage ss;
	socklen_t sl;
	auto_close int fd = -1;

	if (tcplisten_parse(addr, host, sizeof(host), &port) < 0)
		return err_set(e, SBX_E_VALIDATION, "'%.200s' is not host:port", addr);
	if (tcplisten_sockaddr(host, port, &ss, &sl) < 0)
		return err_set(e, SBX_E_VALIDATION, strchr(host, ':') ? "bad address '%s'"
				: "bad address '%s' (numeric only)", host);
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_sys(e, errno, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
		return err_sys(e, errno, "cannot bind '%s'", addr);
	if (listen(fd, backlog) < 0)
		return err_sys(e, errno, "cannot listen on '%s'", addr);
	return steal_fd(&fd);
}
