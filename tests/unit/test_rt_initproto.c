/* Unit tests of the agent <-> sbx-init protocol (sandbox/common/initproto.c). */
#include "initproto.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TEST(rt_initproto_spawn_roundtrip)
{
	static char buf[INITPROTO_MAX];
	char a0[] = "ls", a1[] = "-l", a2[] = "", e0[] = "A=1", e1[] = "PATH=/usr/bin";
	char *argv[] = { a0, a1, a2, NULL };
	char *env[] = { e0, e1, NULL };
	struct initproto_msg m;
	ssize_t n = initproto_encode_spawn(buf, sizeof(buf), 42, "/workspace", argv, env);

	CHECK(n > 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.type, INITPROTO_SPAWN);
	CHECK_INT(m.handle, 42);
	CHECK_STR(m.cwd, "/workspace");
	CHECK_STR(m.argv[0], "ls");
	CHECK_STR(m.argv[1], "-l");
	CHECK_STR(m.argv[2], "");
	CHECK(m.argv[3] == NULL);
	CHECK_STR(m.env[0], "A=1");
	CHECK_STR(m.env[1], "PATH=/usr/bin");
	CHECK(m.env[2] == NULL);
	free(m.argv);

	/* no environment at all */
	n = initproto_encode_spawn(buf, sizeof(buf), 7, "/", argv, NULL);
	CHECK(n > 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK(m.env && m.env[0] == NULL);
	free(m.argv);
}

TEST(rt_initproto_fixed_roundtrip)
{
	char buf[64];
	struct initproto_msg m;
	ssize_t n;

	n = initproto_encode(buf, sizeof(buf), INITPROTO_EXITED, 9, 123, 0x0900);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.type, INITPROTO_EXITED);
	CHECK_INT(m.handle, 9);
	CHECK_INT(m.pid, 123);
	CHECK_INT(m.value, 0x0900);
	n = initproto_encode(buf, sizeof(buf), INITPROTO_SIGNAL, 3, 15, 1);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.value, 15);
	CHECK_INT(m.tree, 1);
	n = initproto_encode(buf, sizeof(buf), INITPROTO_FAILED, 4, ENOENT, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.value, ENOENT);
	n = initproto_encode(buf, sizeof(buf), INITPROTO_GONE, 5, 77, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.type, INITPROTO_GONE);
	CHECK_INT(m.handle, 5);
	CHECK_INT(m.pid, 77);
	CHECK_INT(m.value, 0);
	n = initproto_encode(buf, sizeof(buf), INITPROTO_GONE, 5, 0, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);   /* no keeper pid */
	n = initproto_encode(buf, sizeof(buf), INITPROTO_AHEAD, 0, 0, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.type, INITPROTO_AHEAD);
	CHECK_INT(m.handle, 0);
	/* an AHEAD carries nothing */
	n = initproto_encode(buf, sizeof(buf), INITPROTO_AHEAD, 0, 1, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	n = initproto_encode(buf, sizeof(buf), INITPROTO_AHEAD, 0, 0, 1);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	n = initproto_encode(buf, sizeof(buf), INITPROTO_AHEAD, 3, 0, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	/* types between SPAWN_AS and AHEAD, or past it, are unknown */
	n = initproto_encode(buf, sizeof(buf), INITPROTO_AHEAD, 0, 0, 0);
	memcpy(buf, &(uint32_t){ INITPROTO_AHEAD + 1 }, sizeof(uint32_t));
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	CHECK_INT(initproto_encode(buf, sizeof(buf), 99, 1, 1, 1), -1);
	CHECK_INT(initproto_encode(buf, 8, INITPROTO_STARTED, 1, 1, 0), -1);
}

TEST(rt_initproto_rejects_bad)
{
	static char buf[INITPROTO_MAX + 16];
	char a0[] = "echo", a1[] = "hello";
	char *argv[] = { a0, a1, NULL };
	struct initproto_msg m;
	ssize_t n = initproto_encode_spawn(buf, INITPROTO_MAX, 1, "/", argv, NULL);
	uint32_t v;

	CHECK(n > 0);
	/* every truncation is refused */
	for (ssize_t cut = 0; cut < n; cut++)
		CHECK_INT(initproto_decode(buf, (size_t)cut, &m), -1);
	/* a missing final NUL */
	buf[n - 1] = 'x';
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	buf[n - 1] = '\0';
	/* argc larger than the strings */
	v = 5;
	memcpy(buf + sizeof(struct initproto_hdr), &v, sizeof(v));
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	/* argc 0 */
	v = 0;
	memcpy(buf + sizeof(struct initproto_hdr), &v, sizeof(v));
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	/* oversized */
	CHECK_INT(initproto_decode(buf, INITPROTO_MAX + 1, &m), -1);
	/* fixed messages: wrong length, bad signal, bad pid */
	n = initproto_encode(buf, 64, INITPROTO_SIGNAL, 1, 99, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	n = initproto_encode(buf, 64, INITPROTO_STARTED, 1, 0, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
	n = initproto_encode(buf, 64, INITPROTO_STARTED, 1, 5, 0);
	CHECK_INT(initproto_decode(buf, (size_t)n - 1, &m), -1);
	/* encoding refuses what does not fit */
	{
		char *big = malloc(INITPROTO_MAX);
		char *bargv[] = { big, NULL };

		memset(big, 'a', INITPROTO_MAX - 1);
		big[INITPROTO_MAX - 1] = '\0';
		CHECK_INT(initproto_encode_spawn(buf, INITPROTO_MAX, 1, "/", bargv, NULL), -1);
		CHECK_INT(errno, E2BIG);
		free(big);
	}
	CHECK_INT(initproto_encode_spawn(buf, INITPROTO_MAX, 1, "/", (char *[]){ NULL }, NULL), -1);
}

TEST(rt_initproto_fd_passing)
{
	static char buf[INITPROTO_MAX];
	int sv[2], p[2], fds[3] = { -1, -1, -1 }, nfds = -1;
	char a0[] = "true";
	char *argv[] = { a0, NULL };
	ssize_t n;

	CHECK_INT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	CHECK_INT(pipe2(p, O_CLOEXEC), 0);
	n = initproto_encode_spawn(buf, sizeof(buf), 5, "/", argv, NULL);
	{
		int send_fds[3] = { p[0], p[1], p[1] };

		CHECK_INT(initproto_send(sv[0], buf, (size_t)n, send_fds, 3, 0), 0);
	}
	CHECK_INT(initproto_recv(sv[1], buf, sizeof(buf), fds, &nfds, 0), n);
	CHECK_INT(nfds, 3);
	CHECK(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	CHECK_INT(write(fds[2], "x", 1), 1);
	{
		char c = 0;

		CHECK_INT(read(p[0], &c, 1), 1);
		CHECK_INT(c, 'x');
	}
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	close(sv[0]);
	CHECK_INT(initproto_recv(sv[1], buf, sizeof(buf), fds, &nfds, 0), 0);
	close(sv[1]);
	close(p[0]);
	close(p[1]);
}

TEST(rt_initproto_spawn_as_user)
{
	static char buf[INITPROTO_MAX];
	char a0[] = "id", e0[] = "A=1";
	char *argv[] = { a0, NULL };
	char *env[] = { e0, NULL };
	struct initproto_msg m;
	struct initproto_hdr h;
	ssize_t n = initproto_encode_spawn_as(buf, sizeof(buf), 3, 1000, 100, "/w", argv, env);

	CHECK(n > 0);
	memcpy(&h, buf, sizeof(h));
	CHECK_INT(h.type, INITPROTO_SPAWN_AS);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.type, INITPROTO_SPAWN);
	CHECK_INT(m.uid, 1000);
	CHECK_INT(m.gid, 100);
	CHECK_STR(m.cwd, "/w");
	CHECK_STR(m.argv[0], "id");
	CHECK(m.argv[1] == NULL);
	CHECK_STR(m.env[0], "A=1");
	free(m.argv);

	/* uid -1: a plain SPAWN, which runs as root */
	n = initproto_encode_spawn_as(buf, sizeof(buf), 4, -1, -1, "/", argv, NULL);
	memcpy(&h, buf, sizeof(h));
	CHECK_INT(h.type, INITPROTO_SPAWN);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), 0);
	CHECK_INT(m.uid, -1);
	CHECK_INT(m.gid, -1);
	free(m.argv);

	/* a uid without a gid, ids out of range */
	CHECK_INT(initproto_encode_spawn_as(buf, sizeof(buf), 5, 0, -1, "/", argv, NULL), -1);
	CHECK_INT(initproto_encode_spawn_as(buf, sizeof(buf), 5, UINT32_MAX, 0, "/", argv, NULL), -1);

	/* a SPAWN_AS cut short of its ids, and one naming id -1 */
	n = initproto_encode_spawn_as(buf, sizeof(buf), 6, 1, 1, "/", argv, NULL);
	memcpy(&h, buf, sizeof(h));
	h.len = (uint32_t)(sizeof(h) + 12);
	memcpy(buf, &h, sizeof(h));
	CHECK_INT(initproto_decode(buf, sizeof(h) + 12, &m), -1);
	n = initproto_encode_spawn_as(buf, sizeof(buf), 6, 1, 1, "/", argv, NULL);
	memset(buf + sizeof(h) + 8, 0xff, 4);
	CHECK_INT(initproto_decode(buf, (size_t)n, &m), -1);
}
