/*
 * child_io.c — a child's three fds on the event loop (child_io.h).
 *
 * Reads go through one stack chunk of CHILD_IO_CHUNK bytes straight to
 * on_data; nothing is buffered here. The write queue is a struct buf
 * bounded at wmax, written when the fd is writable and released when
 * empty, so an idle child costs no queue memory.
 */
#include "child_io.h"
#include "buf.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct child_io {
	struct event_base *base;
	const struct child_io_ops *ops;
	void *arg;
	int fd[3];                 /* stdin, stdout, stderr; -1 when closed */
	struct event *ev[3];
	struct buf q;              /* stdin bytes from q_off on wait */
	size_t q_off;
	int closing;               /* close stdin once q is written */
	int paused;
	int burst;
	int busy;                  /* callbacks running */
	int dead;                  /* child_io_free ran inside a callback */
};

static void free_event(struct event **ev)
{
	if (*ev) {
		event_free(*ev);
		*ev = NULL;
	}
}

/* Close fd k, unless another slot holds the same fd (a PTY master). */
static void close_slot(struct child_io *io, int k)
{
	int fd = io->fd[k], shared = 0;

	free_event(&io->ev[k]);
	if (fd < 0)
		return;
	io->fd[k] = -1;
	for (int j = 0; j < 3; j++)
		shared |= io->fd[j] == fd;
	if (!shared)
		close(fd);
}

/* Callbacks run between enter and leave; leave frees a child_io freed
 * meanwhile and then returns 1: the caller must not touch it again. */
static void enter(struct child_io *io)
{
	io->busy++;
}

static int leave(struct child_io *io)
{
	if (--io->busy == 0 && io->dead) {
		free(io);
		return 1;
	}
	return io->dead;
}

static void read_cb(evutil_socket_t fd, short what, void *arg);
static void write_cb(evutil_socket_t fd, short what, void *arg);

struct child_io *child_io_new(struct event_base *base, const int fds[3], size_t wmax,
			      const struct child_io_ops *ops, void *arg)
{
	struct child_io *io = calloc(1, sizeof(*io));

	for (int k = 0; k < 3 && io; k++)
		io->fd[k] = fds[k];
	if (!io)
		goto fail;
	io->base = base;
	io->ops = ops;
	io->arg = arg;
	io->paused = 1;
	io->burst = 1;
	buf_init(&io->q, wmax);
	for (int k = 0; k < 3; k++) {
		if (io->fd[k] < 0)
			continue;
		if (util_set_nonblock(io->fd[k]) < 0)
			goto fail;
		io->ev[k] = event_new(base, io->fd[k], k ? EV_READ | EV_PERSIST : EV_WRITE | EV_PERSIST,
				      k ? read_cb : write_cb, io);
		if (!io->ev[k])
			goto fail;
	}
	return io;
fail:
	if (io) {
		child_io_free(io);
		return NULL;
	}
	for (int k = 0; k < 3; k++) {
		int dup = 0;

		for (int j = 0; j < k; j++)
			dup |= fds[j] == fds[k];
		if (fds[k] >= 0 && !dup)
			close(fds[k]);
	}
	return NULL;
}

void child_io_free(struct child_io *io)
{
	if (!io || io->dead)
		return;
	for (int k = 0; k < 3; k++)
		close_slot(io, k);
	buf_release(&io->q);
	if (io->busy)
		io->dead = 1;
	else
		free(io);
}

void child_io_pause(struct child_io *io, int on)
{
	io->paused = !!on;
	for (int k = 1; k < 3; k++) {
		if (!io->ev[k])
			continue;
		if (on)
			event_del(io->ev[k]);
		else
			event_add(io->ev[k], NULL);
	}
}

int child_io_paused(const struct child_io *io)
{
	return io->paused;
}

void child_io_set_burst(struct child_io *io, int reads)
{
	io->burst = reads > 0 ? reads : 1;
}

int child_io_output_open(const struct child_io *io, int i)
{
	return i >= 0 && i < 2 && io->fd[i + 1] >= 0;
}

void child_io_close_output(struct child_io *io, int i)
{
	for (int k = 0; k < 2; k++)
		if (i < 0 || i == k)
			close_slot(io, k + 1);
}

/* Read once from stream i: bytes read (> 0), 0 for nothing now, -1 at end
 * of file, -2 when a callback freed io. */
static ssize_t read_once(struct child_io *io, int i)
{
	char chunk[CHILD_IO_CHUNK];
	ssize_t n = read(io->fd[i + 1], chunk, sizeof(chunk));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	enter(io);
	if (n <= 0) {
		/* end of file, or an error (EIO: a PTY whose other side is gone) */
		close_slot(io, i + 1);
		if (io->ops->on_eof)
			io->ops->on_eof(io->arg, i);
		return leave(io) ? -2 : -1;
	}
	io->ops->on_data(io->arg, i, chunk, (size_t)n);
	return leave(io) ? -2 : n;
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct child_io *io = arg;
	int i = io->fd[2] == fd && io->fd[1] != fd;

	for (int k = 0; k < io->burst && io->fd[i + 1] >= 0 && !io->paused; k++)
		if (read_once(io, i) <= 0)
			break;
}

size_t child_io_drain(struct child_io *io, int i, size_t max)
{
	size_t taken = 0;

	for (int k = 0; k < 2; k++) {
		if (i >= 0 && i != k)
			continue;
		while (io->fd[k + 1] >= 0 && taken < max) {
			ssize_t n = read_once(io, k);

			if (n == -2)
				return taken;
			if (n <= 0)
				break;
			taken += (size_t)n;
		}
	}
	return taken;
}

size_t child_io_queued(const struct child_io *io)
{
	return io->q.len - io->q_off;
}

size_t child_io_room(const struct child_io *io)
{
	return io->q.max - child_io_queued(io);
}

int child_io_stdin_open(const struct child_io *io)
{
	return io->fd[0] >= 0 && !io->closing;
}

int child_io_write(struct child_io *io, const void *data, size_t n)
{
	if (!child_io_stdin_open(io)) {
		errno = EPIPE;
		return -1;
	}
	if (n > child_io_room(io)) {
		errno = E2BIG;
		return -1;
	}
	if (n == 0)
		return 0;
	if (io->q_off) {
		memmove(io->q.data, io->q.data + io->q_off, child_io_queued(io));
		io->q.len -= io->q_off;
		io->q_off = 0;
	}
	if (buf_add(&io->q, data, n) < 0)
		return -1;   /* ENOMEM, or E2BIG */
	event_add(io->ev[0], NULL);
	return 0;
}

/* The queue is done with (written, or dropped): release it and tell. */
static void queue_done(struct child_io *io, int broken)
{
	buf_release(&io->q);
	io->q_off = 0;
	if (io->ev[0])
		event_del(io->ev[0]);
	if (io->closing || broken)
		close_slot(io, 0);
	if (io->ops->on_drained) {
		enter(io);
		io->ops->on_drained(io->arg);
		leave(io);
	}
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct child_io *io = arg;

	while (io->q_off < io->q.len) {
		ssize_t n = write(io->fd[0], io->q.data + io->q_off, io->q.len - io->q_off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			/* EPIPE: the child closed its stdin; what is queued is dropped */
			queue_done(io, 1);
			return;
		}
		io->q_off += (size_t)n;
	}
	queue_done(io, 0);
}

void child_io_close_stdin(struct child_io *io, int discard)
{
	if (io->fd[0] < 0)
		return;
	io->closing = 1;
	if (discard || child_io_queued(io) == 0) {
		buf_release(&io->q);
		io->q_off = 0;
		close_slot(io, 0);
	}
}
