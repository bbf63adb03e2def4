/*
 * files_worker.c — the helper processes of the Files API (files_worker.h).
 *
 * The agent is not single-threaded when it forks: the runtime's build
 * threads, the registry's heartbeat, background work and image pulls
 * (bgwork.h) run beside the loop, and the child has only the forking
 * thread, with every lock another one held at the fork still held. It
 * may allocate (glibc's fork() holds the allocator's locks across the
 * fork, so the child's heap is whole); it must take no other lock those
 * threads use (the runtime's and the registry's state). It runs the
 * handler's own code on a copy of the agent's memory, after
 * rt_helper_enter() made it the sandbox's root.
 */
#include "files_worker.h"
#include "agent_lifecycle.h"
#include "agent_sse.h"
#include "buf.h"
#include "call.h"
#include "jsonv.h"
#include "log.h"
#include "runtime.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* The container went away under a call: like any data call whose sandbox
 * changed since sbx-api routed it (call.h), a 503 the client retries. */
#define FW_GONE "the sandbox was stopped (sleep, restart or delete) during the file call"
#define FW_BUF (FW_REC_MAX + sizeof(struct fw_result) + 16)
#define FW_PEND_MAX (2 * 1024 * 1024)   /* upload bytes held while the helper catches up
					 * (a compat view feeds up to 1 MiB at once) */

struct fw_call {
	struct fw_call *next;
	struct agent *a;
	struct httpd_req *r;       /* NULL once the request is over */
	struct fw_spec spec;
	char key[AGENT_KEY_MAX];
	int64_t run;
	struct agent_stream live;
	pid_t pid;
	int pidfd, chan;
	struct event *ev_read, *ev_write, *ev_reap;
	int reaped, wstatus;
	int gone;                  /* the container went away */
	int answered;              /* r has its answer (or the call handed r on) */
	int have_head;
	struct fw_result head;
	struct buf body;           /* FW_COLLECT / FW_UPLOAD: the JSON text */
	size_t counted;            /* bytes of body counted in collect_bytes */
	char *rec;                 /* FW_STREAM: the record being sent */
	size_t rec_len, rec_off;
	struct buf pend;           /* FW_UPLOAD: body bytes not yet sent */
	int body_end, end_sent, paused;
	int ended;                 /* FW_EVENTS: the closing `error` event is out */
	/* FW_EVENTS with a view (view_read) */
	struct buf frames;         /* the helper's text short of a whole frame */
	struct buf vout;           /* frames for the client, from vout_off */
	size_t vout_off;
	int vend;                  /* stream_read's end (-1, -2) once it came */
};

static struct fw_call *calls;
static unsigned ncalls;
static unsigned nevents;           /* of ncalls, FW_EVENTS streams */
static size_t collect_bytes;

/* --- records (both sides) --- */

int fw_send(int chan, char type, const void *data, size_t len)
{
	char rec[FW_BUF];

	if (len > sizeof(rec) - 1) {
		errno = EMSGSIZE;
		return -1;
	}
	rec[0] = type;
	if (len)
		memcpy(rec + 1, data, len);
	for (;;) {
		if (send(chan, rec, len + 1, MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return -1;
	}
}

int fw_send_err(int chan, const struct sbx_err *e)
{
	struct fw_result res;

	memset(&res, 0, sizeof(res));
	res.code = e->code ? (int32_t)e->code : SBX_E_INTERNAL;
	snprintf(res.msg, sizeof(res.msg), "%s", e->msg);
	return fw_send(chan, 'R', &res, sizeof(res));
}

int fw_send_head(int chan, int status)
{
	struct fw_result res;

	memset(&res, 0, sizeof(res));
	res.status = status;
	return fw_send(chan, 'R', &res, sizeof(res));
}

int fw_send_json(int chan, int status, json_t *body)
{
	char *text = NULL;
	size_t n = 0;
	int rc = 0;

	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		json_decref(body);
		if (!text) {
			struct sbx_err e;

			err_sys(&e, ENOMEM, "answer");
			return fw_send_err(chan, &e);
		}
		n = strlen(text);
	}
	if (fw_send_head(chan, status) < 0)
		rc = -1;
	for (size_t off = 0; rc == 0 && off < n; off += FW_REC_MAX)
		rc = fw_send(chan, 'D', text + off, n - off < FW_REC_MAX ? n - off : FW_REC_MAX);
	free(text);
	return rc < 0 ? -1 : fw_send(chan, 'E', NULL, 0);
}

int fw_send_fd(int chan, int fd, uint64_t size)
{
	char rec[1 + sizeof(struct fw_result)];
	struct fw_result res;
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = rec, .iov_len = sizeof(rec) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.space,
			     .msg_controllen = sizeof(u.space) };
	struct cmsghdr *c;

	memset(&res, 0, sizeof(res));
	res.status = 200;
	res.size = size;
	rec[0] = 'F';
	memcpy(rec + 1, &res, sizeof(res));
	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(chan, &mh, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* One record; an fd that came with it into *fd (else -1). */
static ssize_t recv_rec(int chan, char *buf, size_t max, int *fd)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = max };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.space,
			     .msg_controllen = sizeof(u.space) };
	ssize_t n;

	*fd = -1;
	/* ECONNRESET: the peer closed with records of ours unread; it is
	 * reported once, before the records the peer sent (read them next) */
	do
		n = recvmsg(chan, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && (errno == EINTR || errno == ECONNRESET));
	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	if (mh.msg_flags & MSG_TRUNC) {
		errno = EMSGSIZE;
		return -1;
	}
	return n;
}

ssize_t fw_recv(int chan, char *buf, size_t max)
{
	int fd;
	ssize_t n = recv_rec(chan, buf, max, &fd);

	if (fd >= 0)
		close(fd);
	return n;
}

/* --- the child --- */

/* In the child: become the sandbox's helper, run fn, exit. Never returns. */
static void child_main(struct rt_sandbox *rsb, const struct rt_helper *h, int chan, int proc,
		       const struct fw_spec *spec)
{
	struct fw_env env = { 3, 4, 5, spec->xfd > 0 ? 6 : -1 };
	sigset_t none;
	int fds[4] = { -1, -1, -1, -1 };
	int nfd = spec->xfd > 0 ? 4 : 3;
	/* opened on demand from /proc: before the helper leaves the host's ids */
	int root = rt_root_fd(rsb);

	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (rt_helper_enter(rsb, h) < 0) {
		struct sbx_err e;

		if (errno == ENOENT || errno == ENODEV)   /* its cgroup is gone: it stopped */
			err_set(&e, SBX_E_NODE_UNAVAILABLE, FW_GONE);
		else
			err_sys(&e, errno, "cannot enter the sandbox");
		fw_send_err(chan, &e);
		_exit(125);
	}
	alarm(spec->timeout_s);
	/* a reader that stops reading (or an uploader that stops sending)
	 * holds its helper for FW_IDLE_TIMEOUT_S at most */
	{
		struct timeval tv = { .tv_sec = FW_IDLE_TIMEOUT_S };

		if (setsockopt(chan, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
		    setsockopt(chan, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
			_exit(125);
	}
	/* the fds on 3, 4, 5 (6: xfd) and nothing else but stdio */
	fds[0] = fcntl(root, F_DUPFD_CLOEXEC, 64);
	fds[1] = fcntl(chan, F_DUPFD_CLOEXEC, 64);
	fds[2] = fcntl(proc, F_DUPFD_CLOEXEC, 64);
	if (nfd == 4)
		fds[3] = fcntl(spec->xfd, F_DUPFD_CLOEXEC, 64);
	for (int i = 0; i < nfd; i++)
		if (fds[i] < 0 || dup2(fds[i], 3 + i) < 0)
			_exit(125);
	if (syscall(SYS_close_range, 3 + nfd, ~0U, 0) < 0)
		_exit(125);
	_exit(spec->fn(spec->arg, &env) & 0x7f);
}

/* --- the agent --- */

static void call_free(struct fw_call *c)
{
	struct fw_call **pp;

	for (pp = &calls; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			ncalls--;
			nevents -= !!(c->spec.flags & FW_EVENTS);
			break;
		}
	}
	if (c->ev_read)
		event_free(c->ev_read);
	if (c->ev_write)
		event_free(c->ev_write);
	if (c->ev_reap)
		event_free(c->ev_reap);
	if (c->chan >= 0)
		close(c->chan);
	if (c->pidfd >= 0)
		close(c->pidfd);
	collect_bytes -= c->counted;
	if (c->spec.ctx_free)
		c->spec.ctx_free(c->spec.ctx);
	buf_release(&c->body);
	buf_release(&c->pend);
	buf_release(&c->frames);
	buf_release(&c->vout);
	free(c->rec);
	free(c);
}

static void reap(struct fw_call *c, int block)
{
	siginfo_t si;

	if (c->reaped)
		return;
	memset(&si, 0, sizeof(si));
	while (waitid((idtype_t)P_PIDFD, (id_t)c->pidfd, &si, WEXITED | (block ? 0 : WNOHANG)) < 0) {
		if (errno != EINTR) {
			c->reaped = 1;   /* not ours to wait for any more */
			return;
		}
	}
	if (si.si_pid == 0)
		return;
	c->reaped = 1;
	c->wstatus = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
	if (c->ev_reap)
		event_del(c->ev_reap);
}

static void kill_helper(struct fw_call *c)
{
	if (!c->reaped)
		syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
	struct fw_call *c = arg;

	reap(c, 0);
	if (c->reaped && !c->r)
		call_free(c);
}

static void answer_err(struct fw_call *c, const struct sbx_err *e)
{
	if (c->answered || !c->r)
		return;
	c->answered = 1;
	agent_call_reply_err(c->r, e);
}

/* Why the helper ended (its channel closed) without a complete answer. */
static void failure_err(struct fw_call *c, struct sbx_err *e)
{
	reap(c, 1);
	if (c->gone && c->a->shutting_down)
		err_set(e, SBX_E_NODE_UNAVAILABLE, "the node is shutting down");
	else if (c->gone)
		err_set(e, SBX_E_NODE_UNAVAILABLE, FW_GONE);
	else if (c->wstatus == 128 + SIGALRM)
		err_set(e, SBX_E_NO_CAPACITY, "the file call took longer than %u s", c->spec.timeout_s);
	else if (c->wstatus == 128 + SIGKILL && c->spec.mode == FW_UPLOAD)
		err_set(e, SBX_E_FILE_TOO_LARGE,
			"the upload does not fit in the sandbox's memory limit");
	else if (c->wstatus == 128 + SIGKILL)
		err_set(e, SBX_E_NO_CAPACITY, "the file call ran out of the sandbox's memory");
	else
		err_set(e, SBX_E_INTERNAL, "file helper of '%s' ended with status %d", c->key,
			c->wstatus);
}

static void helper_failed(struct fw_call *c)
{
	struct sbx_err e;

	if (c->answered || !c->r)
		return;
	failure_err(c, &e);
	answer_err(c, &e);
}

/* A complete JSON answer (FW_COLLECT / FW_UPLOAD). */
static void answer_json(struct fw_call *c)
{
	struct sbx_err e;
	json_t *body;

	if (c->answered || !c->r)
		return;
	/* A node that lost its lease meanwhile may have been replaced: what the
	 * helper did belongs to a copy that is frozen and maybe gone (fencing,
	 * docs/ARCHITECTURE.md), never an answer of success. */
	if (!agent_stream_lease_held(c->a, &c->live)) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE, "this node lost its lease during the file call");
		answer_err(c, &e);
		return;
	}
	if (c->spec.on_json) {
		body = c->body.len ? json_loadb(c->body.data, c->body.len, 0, NULL) : NULL;
		if (c->body.len && !body) {
			err_set(&e, SBX_E_INTERNAL, "file helper of '%s' sent bad JSON", c->key);
			answer_err(c, &e);
			return;
		}
		c->answered = 1;
		c->spec.on_json(c->r, c->head.status, body, c->spec.ctx);
		return;
	}
	if (c->head.status == 204 && !c->body.len) {
		c->answered = 1;
		if (!agent_call_offer(c->r, AGENT_FILES_RESULT,
					&(struct agent_files_result){ 204, NULL }))
			httpd_reply_empty(c->r, 204);
		return;
	}
	if (!agent_call_viewed(c->r)) {
		/* the helper's text is what httpd_reply_json would send: no parse */
		c->answered = 1;
		httpd_reply_bytes(c->r, c->head.status, "application/json",
				  c->body.data ? c->body.data : "", c->body.len);
		return;
	}
	body = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0, NULL);
	if (!body) {
		err_set(&e, SBX_E_INTERNAL, "file helper of '%s' sent bad JSON", c->key);
		answer_err(c, &e);
		return;
	}
	c->answered = 1;
	if (c->head.status >= 400) {
		/* the helper's error as the struct it was made from */
		json_t *err = json_object_get(body, "error");
		const char *code = json_string_value(json_object_get(err, "code"));
		const char *msg = json_string_value(json_object_get(err, "message"));

		err_set(&e, code ? err_from_name(code) : SBX_E_INTERNAL, "%s", msg ? msg : "file helper error");
		if (e.code == SBX_E_NONE)
			e.code = SBX_E_INTERNAL;
		agent_call_reply_err_details(c->r, &e, json_object_get(err, "details"));
		json_decref(body);
		return;
	}
	if (agent_call_offer(c->r, AGENT_FILES_RESULT,
			       &(struct agent_files_result){ c->head.status, body })) {
		json_decref(body);
		return;
	}
	httpd_reply_json(c->r, c->head.status, body);
}

static struct agent_sb *call_sandbox(struct fw_call *c)
{
	struct agent_sb *sb = agent_sb_find(c->a, c->key);

	if (!sb || sb->run != c->run || !agent_sb_container(sb))
		return NULL;
	return sb;
}

static ssize_t stream_read(void *arg, char *out, size_t max);
static ssize_t view_read(void *arg, char *out, size_t max);

/* The head ('R' / 'F') arrived. */
static void on_head(struct fw_call *c, const char *rec, size_t n, int fd)
{
	struct sbx_err e;
	struct agent_sb *sb;

	if (n != 1 + sizeof(c->head)) {
		if (fd >= 0)
			close(fd);
		err_set(&e, SBX_E_INTERNAL, "file helper of '%s' sent a bad head", c->key);
		answer_err(c, &e);
		kill_helper(c);
		return;
	}
	memcpy(&c->head, rec + 1, sizeof(c->head));
	c->head.msg[sizeof(c->head.msg) - 1] = '\0';
	c->have_head = 1;
	if (c->head.status == 0) {
		if (fd >= 0)
			close(fd);
		if (c->head.code <= SBX_E_NONE || c->head.code >= SBX_E__COUNT)
			c->head.code = SBX_E_INTERNAL;
		err_set(&e, (enum sbx_ecode)c->head.code, "%s", c->head.msg);
		answer_err(c, &e);
		return;
	}
	if (c->spec.mode == FW_FD) {
		sb = call_sandbox(c);
		if (rec[0] != 'F' || fd < 0 || !sb) {
			if (fd >= 0)
				close(fd);
			if (!sb)
				err_set(&e, SBX_E_NODE_UNAVAILABLE, FW_GONE);
			else
				err_set(&e, SBX_E_INTERNAL, "file helper of '%s' sent no file", c->key);
			answer_err(c, &e);
			return;
		}
		c->answered = 1;
		c->spec.on_fd(c->r, sb, fd, c->head.size, c->spec.fd_arg);
		return;
	}
	if (fd >= 0)
		close(fd);
	if (c->spec.mode == FW_STREAM) {
		int view = (c->spec.flags & FW_EVENTS) && agent_call_viewed(c->r);

		c->answered = 1;
		event_del(c->ev_read);
		if (c->spec.flags & FW_EVENTS)
			httpd_add_header(c->r, "Cache-Control", "no-store");
		httpd_reply_stream(c->r, c->head.status, c->spec.content_type,
				   view ? view_read : stream_read, c);
	}
}

static void on_data(struct fw_call *c, const char *data, size_t n)
{
	struct sbx_err e;

	if (c->answered)
		return;
	if (collect_bytes + n > FW_COLLECT_NODE_MAX) {
		err_set(&e, SBX_E_NO_CAPACITY, "too many file answers in flight on this node");
	} else if (buf_add(&c->body, data, n) == 0) {
		c->counted += n;
		collect_bytes += n;
		return;
	} else {
		err_set(&e, SBX_E_FILE_TOO_LARGE, "the answer is larger than %d bytes", FW_COLLECT_MAX);
	}
	answer_err(c, &e);
	kill_helper(c);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct fw_call *c = arg;
	char rec[FW_BUF];

	if (c->spec.mode == FW_STREAM && c->have_head) {
		event_del(c->ev_read);
		if (c->r)
			httpd_stream_wake(c->r);
		return;
	}
	for (int i = 0; i < 64; i++) {
		int rfd;
		ssize_t n = recv_rec(c->chan, rec, sizeof(rec), &rfd);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			if (rfd >= 0)
				close(rfd);
			event_del(c->ev_read);
			helper_failed(c);
			return;
		}
		if (!c->have_head) {
			if (rec[0] == 'R' || rec[0] == 'F') {
				on_head(c, rec, (size_t)n, rfd);
			} else {
				if (rfd >= 0)
					close(rfd);
				kill_helper(c);
			}
			if (c->spec.mode == FW_STREAM && c->have_head)
				return;
			continue;
		}
		if (rfd >= 0)
			close(rfd);
		if (rec[0] == 'D')
			on_data(c, rec + 1, (size_t)n - 1);
		else if (rec[0] == 'E')
			answer_json(c);
	}
}

/* FW_EVENTS: the helper ended without its 'E': the `error` event that
 * ends the stream, as the reader's next bytes (it is one short event). */
static ssize_t end_event(struct fw_call *c, char *out, size_t max)
{
	struct sbx_err e;
	struct buf b;
	json_t *ev;
	char *text;
	ssize_t n = -2;

	c->ended = 1;
	failure_err(c, &e);
	if (e.code == SBX_E_INTERNAL)
		log_error("%s", e.msg);
	ev = json_pack("{s:s, s:s}", "code", err_name(e.code), "message", err_public_message(&e));
	text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	buf_init(&b, FW_BUF);
	if (text && agent_sse_event(&b, "error", text) == 0 && b.len <= max) {
		memcpy(out, b.data, b.len);
		n = (ssize_t)b.len;
	}
	free(text);
	buf_release(&b);
	return n;
}

/* FW_STREAM's reader: the 'D' records as they come; 'E' ends it; a helper
 * that dies first aborts the answer (FW_EVENTS: ends it with end_event). */
static ssize_t stream_read(void *arg, char *out, size_t max)
{
	struct fw_call *c = arg;
	int fd;

	while (c->rec_off >= c->rec_len) {
		ssize_t n = recv_rec(c->chan, c->rec, FW_BUF, &fd);

		if (fd >= 0)
			close(fd);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			event_add(c->ev_read, NULL);
			return 0;
		}
		if (n <= 0 && (c->spec.flags & FW_EVENTS))
			return c->ended ? -1 : end_event(c, out, max);
		if (n <= 0)
			return -2;
		if (c->rec[0] == 'E')
			return -1;
		if (c->rec[0] != 'D')
			return -2;
		c->rec_len = (size_t)n;
		c->rec_off = 1;
	}
	if (max > c->rec_len - c->rec_off)
		max = c->rec_len - c->rec_off;
	memcpy(out, c->rec + c->rec_off, max);
	c->rec_off += max;
	return (ssize_t)max;
}

/* One whole frame of the helper (text f[0..n), without its blank line):
 * an `event:` + `data:` frame offered to the view typed, else (declined,
 * a comment) the frame as it came into c->vout. */
static void view_frame(struct fw_call *c, const char *f, size_t n)
{
	char name[16] = "";
	const char *data = NULL;
	size_t dlen = 0;
	json_t *d = NULL;
	struct sbx_err e;

	for (size_t pos = 0; pos < n;) {
		const char *line = f + pos;
		const char *nl = memchr(line, '\n', n - pos);
		size_t len = nl ? (size_t)(nl - line) : n - pos;

		if (len > 7 && memcmp(line, "event: ", 7) == 0 && len - 7 < sizeof(name)) {
			memcpy(name, line + 7, len - 7);
			name[len - 7] = '\0';
		} else if (len > 6 && memcmp(line, "data: ", 6) == 0) {
			data = line + 6;
			dlen = len - 6;
		}
		pos += len + 1;
	}
	if (*name && data && !(d = jsonv_parse(data, dlen, &e)))
		log_error("file helper of '%s' sent a bad event: %s", c->key, e.msg);
	if (d && c->r) {
		struct agent_watch_event ev = { name, d, &c->vout };

		if (agent_call_offer(c->r, AGENT_WATCH_EVENT, &ev)) {
			json_decref(d);
			return;
		}
	}
	json_decref(d);
	if (buf_add(&c->vout, f, n) < 0 || buf_adds(&c->vout, "\n\n") < 0)
		log_error("file helper of '%s': an event was dropped (the client is behind)", c->key);
}

/* FW_EVENTS' reader when r has a view: the helper's frames (stream_read's
 * bytes) cut at their blank lines, each through view_frame; then
 * stream_read's end. */
static ssize_t view_read(void *arg, char *out, size_t max)
{
	struct fw_call *c = arg;
	char tmp[FW_BUF];

	while (c->vout_off >= c->vout.len) {
		ssize_t n;
		size_t off = 0;
		const char *end;

		buf_reset(&c->vout);
		c->vout_off = 0;
		if (c->vend)
			return c->vend;
		n = stream_read(c, tmp, sizeof(tmp));
		if (n == 0)
			return 0;
		if (n < 0) {
			c->vend = (int)n;   /* a frame cut short is dropped */
			continue;
		}
		if (buf_add(&c->frames, tmp, (size_t)n) < 0) {
			log_error("file helper of '%s': a frame over %d bytes was dropped", c->key,
				  FW_VIEW_OUT_MAX);
			buf_reset(&c->frames);
			continue;
		}
		while ((end = memmem(c->frames.data + off, c->frames.len - off, "\n\n", 2))) {
			view_frame(c, c->frames.data + off, (size_t)(end - c->frames.data) - off);
			off = (size_t)(end - c->frames.data) + 2;
		}
		memmove(c->frames.data, c->frames.data + off, c->frames.len - off + 1);
		c->frames.len -= off;
	}
	if (max > c->vout.len - c->vout_off)
		max = c->vout.len - c->vout_off;
	memcpy(out, c->vout.data + c->vout_off, max);
	c->vout_off += max;
	return (ssize_t)max;
}

/* FW_UPLOAD: send what is pending; 1 while bytes are left (the socket is
 * full), 0 when all is out, -1 when the helper is gone. */
static int flush_pend(struct fw_call *c)
{
	size_t off = 0;
	int rc = 0;

	while (off < c->pend.len) {
		size_t n = c->pend.len - off < FW_REC_MAX ? c->pend.len - off : FW_REC_MAX;

		if (fw_send(c->chan, 'D', c->pend.data + off, n) < 0) {
			rc = errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
			break;
		}
		off += n;
	}
	if (off) {
		memmove(c->pend.data, c->pend.data + off, c->pend.len - off);
		c->pend.len -= off;
	}
	if (rc == 0 && c->body_end && !c->end_sent) {
		if (fw_send(c->chan, 'E', NULL, 0) == 0)
			c->end_sent = 1;
		else
			rc = errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
	}
	if (rc == 1)
		event_add(c->ev_write, NULL);
	return rc;
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct fw_call *c = arg;
	int rc = flush_pend(c);

	if (rc != 1 && c->paused && c->r) {
		c->paused = 0;
		httpd_body_resume(c->r);
	}
}

static int upload_sink(void *arg, const char *data, size_t len)
{
	struct fw_call *c = arg;
	int rc;

	if (c->answered)
		return -1;
	if (!data) {
		c->body_end = 1;
		httpd_defer(c->r);
		flush_pend(c);
		return 0;
	}
	if (buf_add(&c->pend, data, len) < 0)
		return -1;   /* cannot happen: a pause comes first */
	rc = flush_pend(c);
	if (rc < 0)
		return 0;    /* the helper is gone: its answer (or its end) tells why */
	if (rc == 1 && c->pend.len >= FW_REC_MAX) {
		c->paused = 1;
		return HTTPD_BODY_PAUSE;
	}
	return 0;
}

static void call_close(void *arg, int failed)
{
	struct fw_call *c = arg;

	(void)failed;
	c->r = NULL;
	agent_sb_stream_end(c->a, &c->live);
	kill_helper(c);
	reap(c, 0);
	if (c->reaped)
		call_free(c);
}

/* What starting a helper opened in the agent: the sandbox's namespaces,
 * the channel's ends still held (-1: none), /proc. */
static void setup_release(struct rt_helper *h, int sv[2], int proc)
{
	rt_helper_release(h);
	for (int i = 0; i < 2; i++)
		if (sv[i] >= 0)
			close(sv[i]);
	if (proc >= 0)
		close(proc);
}

int fw_start(struct httpd_req *r, struct agent_sb *sb, const struct fw_spec *spec,
	     struct sbx_err *e)
{
	struct agent *a = httpd_ctx(r);
	struct rt_sandbox *rsb = agent_sb_container(sb);
	struct fw_call *c;
	struct rt_helper h = { .mnt_fd = -1, .user_fd = -1 };
	int sv[2] = { -1, -1 }, proc = -1;
	unsigned mine = 0;
	pid_t pid;

	if (!rsb)
		return err_set(e, SBX_E_NODE_UNAVAILABLE, FW_GONE);
	for (c = calls; c; c = c->next)   /* requests in progress of the same kind */
		mine += c->r && strcmp(c->key, sb->key) == 0 &&
			(c->spec.flags & FW_EVENTS) == (spec->flags & FW_EVENTS);
	if (spec->flags & FW_EVENTS) {
		if (mine >= FW_EVENTS_SANDBOX_MAX)
			return err_set(e, SBX_E_QUOTA_EXCEEDED,
				       "this sandbox has %d watches open already (the most there can be)",
				       FW_EVENTS_SANDBOX_MAX);
		if (nevents >= FW_EVENTS_NODE_MAX)
			return err_set(e, SBX_E_NO_CAPACITY, "too many watches open on this node");
	} else if (ncalls - nevents >= FW_NODE_MAX || mine >= FW_SANDBOX_MAX) {
		return err_set(e, SBX_E_NO_CAPACITY, "too many file calls in progress %s",
			       mine >= FW_SANDBOX_MAX ? "in this sandbox" : "on this node");
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return err_sys(e, ENOMEM, "file call");
	c->a = a;
	c->r = r;
	c->spec = *spec;
	c->pidfd = c->chan = -1;
	snprintf(c->key, sizeof(c->key), "%s", sb->key);
	c->run = sb->run;
	buf_init(&c->body, FW_COLLECT_MAX);
	buf_init(&c->pend, FW_PEND_MAX);
	buf_init(&c->frames, FW_VIEW_OUT_MAX);
	buf_init(&c->vout, FW_VIEW_OUT_MAX);
	if (spec->mode == FW_STREAM && !(c->rec = malloc(FW_BUF)))
		goto nomem;
	if (rt_helper_open(rsb, &h, e) < 0)
		goto fail;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
	    (proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		err_sys(e, errno, "file helper");
		goto fail;
	}
	/* the bytes in flight of a call: one socket buffer each way */
	for (int i = 0; i < 2; i++) {
		int sz = FW_SOCKBUF;

		if (setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)) < 0) {
			err_sys(e, errno, "file helper");
			goto fail;
		}
	}
	pid = fork();
	if (pid < 0) {
		if (errno == EAGAIN || errno == ENOMEM)
			err_set(e, SBX_E_NO_CAPACITY, "cannot start a file helper on this node");
		else
			err_sys(e, errno, "fork of a file helper");
		goto fail;
	}
	if (pid == 0) {
		close(sv[0]);
		child_main(rsb, &h, sv[1], proc, spec);
	}
	c->pid = pid;
	c->chan = sv[0];
	sv[0] = -1;
	close(sv[1]);
	sv[1] = -1;
	c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (c->pidfd < 0) {
		err_sys(e, errno, "pidfd of a file helper");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto fail;
	}
	c->ev_read = event_new(a->base, c->chan, EV_READ | EV_PERSIST, on_readable, c);
	c->ev_write = event_new(a->base, c->chan, EV_WRITE, on_writable, c);
	c->ev_reap = event_new(a->base, c->pidfd, EV_READ | EV_PERSIST, on_reap, c);
	if (util_set_nonblock(c->chan) < 0 || !c->ev_read || !c->ev_write || !c->ev_reap ||
	    event_add(c->ev_read, NULL) < 0 || event_add(c->ev_reap, NULL) < 0) {
		err_sys(e, ENOMEM, "file helper");
		kill_helper(c);
		reap(c, 1);
		goto fail;
	}
	rt_helper_release(&h);
	close(proc);
	c->next = calls;
	calls = c;
	ncalls++;
	nevents += !!(spec->flags & FW_EVENTS);
	agent_sb_stream_begin(sb, &c->live);
	httpd_on_close(r, call_close, c);
	if (spec->mode == FW_UPLOAD)
		httpd_body_sink(r, upload_sink, c);
	else
		httpd_defer(r);
	return 0;
nomem:
	err_sys(e, ENOMEM, "file call");
fail:
	setup_release(&h, sv, proc);
	ncalls++;   /* call_free counts it out */
	nevents += !!(spec->flags & FW_EVENTS);
	c->next = calls;
	calls = c;
	call_free(c);
	return -1;
}

int fw_fork(struct agent_sb *sb, const struct fw_spec *spec, struct fw_child *ch,
	    struct sbx_err *e)
{
	struct rt_sandbox *rsb = agent_sb_container(sb);
	struct rt_helper h = { .mnt_fd = -1, .user_fd = -1 };
	int sv[2] = { -1, -1 }, proc = -1, rc = -1;
	pid_t pid;

	ch->pid = -1;
	ch->chan = -1;
	snprintf(ch->key, sizeof(ch->key), "%s", sb->key);
	if (!rsb)
		return err_set(e, SBX_E_NODE_UNAVAILABLE, FW_GONE);
	if (rt_helper_open(rsb, &h, e) < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
	    (proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		err_sys(e, errno, "helper");
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		err_sys(e, errno, "fork of a helper");
		goto out;
	}
	if (pid == 0) {
		close(sv[0]);
		child_main(rsb, &h, sv[1], proc, spec);
	}
	ch->pid = pid;
	ch->chan = steal_fd(&sv[0]);
	rc = 0;
out:
	setup_release(&h, sv, proc);
	return rc;
}

int fw_wait(struct fw_child *ch, json_t **answer, struct sbx_err *e)
{
	int status = 0, rc = -1, ended = 0;
	struct fw_result head;
	struct buf body;
	char *rec = malloc(FW_BUF);

	*answer = NULL;
	memset(&head, 0, sizeof(head));
	buf_init(&body, FW_COLLECT_MAX);
	for (;;) {
		int fd = -1;
		ssize_t n = rec ? recv_rec(ch->chan, rec, FW_BUF, &fd) : 0;

		if (fd >= 0)
			close(fd);
		if (n <= 0)
			break;
		if (rec[0] == 'R' && (size_t)n == 1 + sizeof(head)) {
			memcpy(&head, rec + 1, sizeof(head));
			head.msg[sizeof(head.msg) - 1] = '\0';
		} else if (rec[0] == 'D' && buf_add(&body, rec + 1, (size_t)n - 1) < 0) {
			break;
		} else if (rec[0] == 'E') {
			ended = 1;
			break;
		}
	}
	close(ch->chan);
	ch->chan = -1;
	kill(ch->pid, SIGKILL);   /* done with it: a helper that lingers goes */
	while (waitpid(ch->pid, &status, 0) < 0 && errno == EINTR)
		;
	ch->pid = -1;
	if (head.status == 0 && head.code > SBX_E_NONE && head.code < SBX_E__COUNT) {
		err_set(e, (enum sbx_ecode)head.code, "%s", head.msg);
	} else if (!ended || head.status == 0) {
		err_set(e, SBX_E_INTERNAL, "helper of '%s' ended without an answer", ch->key);
	} else {
		*answer = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
		rc = *answer ? 0 : err_set(e, SBX_E_INTERNAL, "helper of '%s' sent bad JSON", ch->key);
	}
	free(rec);
	buf_release(&body);
	return rc;
}

int fw_run(struct agent_sb *sb, const struct fw_spec *spec, json_t **answer, struct sbx_err *e)
{
	struct fw_child ch;

	*answer = NULL;
	if (fw_fork(sb, spec, &ch, e) < 0)
		return -1;
	return fw_wait(&ch, answer, e);
}

/* The container of sb is gone: its helpers die with it (they are in its
 * cgroups, which rt_destroy emptied) and their requests answer so. */
static void fw_container_gone(struct agent *a, struct agent_sb *sb)
{
	(void)a;
	for (struct fw_call *c = calls; c; c = c->next) {
		if (strcmp(c->key, sb->key) == 0 && c->run == sb->run) {
			c->gone = 1;
			kill_helper(c);
		}
	}
}

const struct agent_module fw_module = {
	.name = "files",
	.container_gone = fw_container_gone,
};
