/* seccomp_filter.c: the built filter, loaded into a forked child that tries
 * one socket() per case and reports the errno (0: the socket opened). */
#include "seccomp_filter.h"
#include "unit.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* socket(family, type, protocol) under the filter, the raw 64-bit family
 * register as given: the errno, 0 when it opened, -1 when the child died. */
static int try_socket(const struct sec_filter *f, unsigned long family, int type, int protocol)
{
	int st;
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		long fd;

		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &f->prog, 0, 0) < 0)
			_exit(255);
		fd = syscall(SYS_socket, family, (unsigned long)type, (unsigned long)protocol);
		_exit(fd >= 0 ? 0 : errno);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) == 255)
		return -1;
	return WEXITSTATUS(st);
}

TEST(seccomp_address_families)
{
	struct sec_filter f;
	struct sbx_err e = { 0 };

	CHECK_INT(sec_build(&f, &e), 0);
	CHECK(f.prog.len > 0 && f.prog.len <= 4096);
	CHECK_INT(try_socket(&f, AF_UNIX, SOCK_STREAM, 0), 0);
	CHECK_INT(try_socket(&f, AF_INET, SOCK_DGRAM, 0), 0);
	CHECK_INT(try_socket(&f, AF_INET6, SOCK_STREAM, 0), 0);
	CHECK_INT(try_socket(&f, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE), 0);
	CHECK_INT(try_socket(&f, AF_NETLINK, SOCK_DGRAM, NETLINK_SOCK_DIAG), 0);
	/* families and netlink protocols this kernel has are refused by the filter */
	CHECK_INT(try_socket(&f, AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, AF_PACKET, SOCK_DGRAM, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, AF_XDP, SOCK_RAW, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, AF_ALG, SOCK_SEQPACKET, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, AF_KEY, SOCK_RAW, 2), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, AF_NETLINK, SOCK_RAW, NETLINK_AUDIT), EPROTONOSUPPORT);
	CHECK_INT(try_socket(&f, AF_NETLINK, SOCK_DGRAM, NETLINK_GENERIC), EPROTONOSUPPORT);
	CHECK_INT(try_socket(&f, AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER), EPROTONOSUPPORT);
	CHECK_INT(try_socket(&f, AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT), EPROTONOSUPPORT);
	/* the kernel reads the low 32 bits: junk in the high half changes nothing */
	CHECK_INT(try_socket(&f, (1UL << 32) | AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, (1UL << 40) | AF_PACKET, SOCK_DGRAM, 0), EAFNOSUPPORT);
	/* values no kernel has yet, and negative ones */
	CHECK_INT(try_socket(&f, 63, SOCK_STREAM, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, 1000, SOCK_STREAM, 0), EAFNOSUPPORT);
	CHECK_INT(try_socket(&f, 0xffffffffUL, SOCK_STREAM, 0), EAFNOSUPPORT);
	/* raw sockets of an allowed family stay refused */
	CHECK_INT(try_socket(&f, AF_INET, SOCK_RAW, 1), EPERM);
	sec_release(&f);
}
