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

int tcplisten_open(const char *addr, int backlog, struct sbx_err *e)
{
	char host[128];
	int port, one = 1;
	struct sockaddr_storage ss;
	socklen_t sl;
	auto_close int fd = -1;

	memset(&ss, 0, sizeof(ss));
	if (tcplisten_parse(addr, host, sizeof(host), &port) < 0)
		return err_set(e, SBX_E_VALIDATION, "'%.200s' is not host:port", addr);
	if (strchr(host, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return err_set(e, SBX_E_VALIDATION, "bad address '%s'", host);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return err_set(e, SBX_E_VALIDATION, "bad address '%s' (numeric only)",
				       host);
		sl = sizeof(*a);
	}
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
