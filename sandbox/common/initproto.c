/*
 * initproto.c — encoding, decoding and fd passing of the agent <-> sbx-init
 * protocol (see initproto.h). libc only: linked into the static sbx-init.
 */
#include "initproto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SPAWN_FIXED (sizeof(struct initproto_hdr) + 2 * sizeof(uint32_t))
#define FIXED_LEN   (sizeof(struct initproto_hdr) + 2 * sizeof(int32_t))
#define SPAWN_AS_FIXED (SPAWN_FIXED + 2 * sizeof(uint32_t))

static int put_str(char *buf, size_t cap, size_t *off, const char *s)
{
	size_t n = strlen(s) + 1;

	if (n > cap - *off) {
		errno = E2BIG;
		return -1;
	}
	memcpy(buf + *off, s, n);
	*off += n;
	return 0;
}

ssize_t initproto_encode_spawn(void *buf, size_t cap, int64_t handle, const char *cwd,
			       char *const *argv, char *const *env)
{
	return initproto_encode_spawn_as(buf, cap, handle, -1, -1, cwd, argv, env);
}

ssize_t initproto_encode_spawn_as(void *buf, size_t cap, int64_t handle, int64_t uid, int64_t gid,
				  const char *cwd, char *const *argv, char *const *env)
{
	struct initproto_hdr h;
	uint32_t argc = 0, envc = 0;
	size_t off = uid >= 0 ? SPAWN_AS_FIXED : SPAWN_FIXED;
	char *p = buf;

	if (!argv || !argv[0] || !cwd || uid >= (int64_t)UINT32_MAX ||
	    (uid >= 0 && (gid < 0 || gid >= (int64_t)UINT32_MAX))) {
		errno = EINVAL;
		return -1;
	}
	if (cap > INITPROTO_MAX)
		cap = INITPROTO_MAX;
	if (cap < off) {
		errno = E2BIG;
		return -1;
	}
	if (put_str(p, cap, &off, cwd) < 0)
		return -1;
	for (; argv[argc]; argc++)
		if (argc >= INITPROTO_MAX_ARGS || put_str(p, cap, &off, argv[argc]) < 0)
			goto too_big;
	for (; env && env[envc]; envc++)
		if (argc + envc >= INITPROTO_MAX_ARGS || put_str(p, cap, &off, env[envc]) < 0)
			goto too_big;
	h.type = uid >= 0 ? INITPROTO_SPAWN_AS : INITPROTO_SPAWN;
	h.len = (uint32_t)off;
	h.handle = handle;
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), &argc, sizeof(argc));
	memcpy(p + sizeof(h) + sizeof(argc), &envc, sizeof(envc));
	if (uid >= 0) {
		uint32_t ids[2] = { (uint32_t)uid, (uint32_t)gid };

		memcpy(p + SPAWN_FIXED, ids, sizeof(ids));
	}
	return (ssize_t)off;
too_big:
	errno = E2BIG;
	return -1;
}

ssize_t initproto_encode(void *buf, size_t cap, uint32_t type, int64_t handle, int32_t a, int32_t b)
{
	struct initproto_hdr h;
	char *p = buf;

	if (type != INITPROTO_SIGNAL && type != INITPROTO_STARTED && type != INITPROTO_FAILED &&
	    type != INITPROTO_EXITED && type != INITPROTO_GONE && type != INITPROTO_AHEAD) {
		errno = EINVAL;
		return -1;
	}
	if (cap < FIXED_LEN) {
		errno = E2BIG;
		return -1;
	}
	h.type = type;
	h.len = FIXED_LEN;
	h.handle = handle;
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), &a, sizeof(a));
	memcpy(p + sizeof(h) + sizeof(a), &b, sizeof(b));
	return FIXED_LEN;
}

/* Split the packed strings of a SPAWN (as_user: a SPAWN_AS, with its ids)
 * into cwd/argv/env. */
static int decode_spawn(const char *p, size_t len, int as_user, struct initproto_msg *m)
{
	size_t fixed = as_user ? SPAWN_AS_FIXED : SPAWN_FIXED;
	uint32_t argc, envc, ids[2];
	const char *s, *end = p + len;
	char **v;
	size_t i, n;

	if (len < fixed)
		goto bad;
	memcpy(&argc, p + sizeof(struct initproto_hdr), sizeof(argc));
	memcpy(&envc, p + sizeof(struct initproto_hdr) + sizeof(argc), sizeof(envc));
	if (argc < 1 || argc > INITPROTO_MAX_ARGS || envc > INITPROTO_MAX_ARGS ||
	    argc + envc > INITPROTO_MAX_ARGS)
		goto bad;
	m->uid = m->gid = -1;
	if (as_user) {
		memcpy(ids, p + SPAWN_FIXED, sizeof(ids));
		if (ids[0] == UINT32_MAX || ids[1] == UINT32_MAX)
			goto bad;
		m->uid = ids[0];
		m->gid = ids[1];
	}
	n = (size_t)argc + envc + 2;
	v = calloc(n, sizeof(*v));
	if (!v) {
		errno = ENOMEM;
		return -1;
	}
	s = p + fixed;
	for (i = 0; i < (size_t)argc + envc + 1; i++) {
		const char *nul = memchr(s, '\0', (size_t)(end - s));

		if (!nul) {
			free(v);
			goto bad;
		}
		if (i == 0)
			m->cwd = s;
		else if (i <= argc)
			v[i - 1] = (char *)s;
		else
			v[i] = (char *)s;   /* env starts at v[argc + 1] */
		s = nul + 1;
	}
	if (s != end) {
		free(v);
		goto bad;
	}
	v[argc] = NULL;
	v[n - 1] = NULL;
	m->argv = v;
	m->env = v + argc + 1;
	return 0;
bad:
	errno = EBADMSG;
	return -1;
}

int initproto_decode(const void *buf, size_t len, struct initproto_msg *m)
{
	struct initproto_hdr h;
	const char *p = buf;
	int32_t a, b;

	memset(m, 0, sizeof(*m));
	if (len < sizeof(h) || len > INITPROTO_MAX)
		goto bad;
	memcpy(&h, p, sizeof(h));
	if (h.len != len)
		goto bad;
	m->type = h.type;
	m->handle = h.handle;
	if (h.type == INITPROTO_SPAWN || h.type == INITPROTO_SPAWN_AS) {
		m->type = INITPROTO_SPAWN;
		return decode_spawn(p, len, h.type == INITPROTO_SPAWN_AS, m);
	}
	if (((h.type < INITPROTO_SIGNAL || h.type > INITPROTO_GONE) && h.type != INITPROTO_AHEAD) ||
	    len != FIXED_LEN)
		goto bad;
	memcpy(&a, p + sizeof(h), sizeof(a));
	memcpy(&b, p + sizeof(h) + sizeof(a), sizeof(b));
	switch (h.type) {
	case INITPROTO_SIGNAL:
		if (a < 1 || a > 64 || (b != 0 && b != 1))
			goto bad;
		m->value = a;
		m->tree = b;
		break;
	case INITPROTO_STARTED:
		if (a < 1)
			goto bad;
		m->pid = a;
		break;
	case INITPROTO_FAILED:
		if (a < 1)
			goto bad;
		m->value = a;
		break;
	case INITPROTO_AHEAD:
		if (a != 0 || b != 0 || h.handle != 0)
			goto bad;
		break;
	default: /* EXITED, GONE */
		if (a < 1)
			goto bad;
		m->pid = a;
		m->value = b;
		break;
	}
	return 0;
bad:
	errno = EBADMSG;
	return -1;
}

int initproto_send(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags)
{
	union {
		char raw[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds < 0 || nfds > 3) {
		errno = EINVAL;
		return -1;
	}
	if (nfds > 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.raw;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if ((size_t)n != len) {
		errno = EMSGSIZE;
		return -1;
	}
	return 0;
}

ssize_t initproto_recv(int sock, void *buf, size_t cap, int *fds, int *nfds, int flags)
{
	union {
		char raw[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.raw,
			     .msg_controllen = sizeof(ctl.raw) };
	struct cmsghdr *c;
	ssize_t n;
	int got = 0, bad = 0;

	*nfds = 0;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k, cnt;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < cnt; k++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
			if (got < 3)
				fds[got++] = fd;
			else
				close(fd);
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		bad = 1;
	if (bad) {
		while (got > 0)
			close(fds[--got]);
		errno = EMSGSIZE;
		return -1;
	}
	*nfds = got;
	return n;
}
