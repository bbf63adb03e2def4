/*
 * child_io.h — the I/O of one child process on the agent's event loop: its
 * stdin (a bounded write queue, then EOF) and its stdout and stderr (read
 * in bounded chunks, delivered to a callback; reading can be paused for
 * backpressure). The three fds are non-blocking pipe ends, or one PTY
 * master given as both stdin and stdout (stderr -1): an fd given twice is
 * closed once, and EIO of a PTY master reads as end of file.
 *
 * Ownership: the child_io owns its fds from child_io_new() on (also when
 * it fails) until child_io_free(). Callbacks may call child_io_free() on
 * their own child_io: it is then freed once the callback has returned.
 */
#ifndef SBX_CHILD_IO_H
#define SBX_CHILD_IO_H

#include <event2/event.h>
#include <stddef.h>

#define CHILD_IO_CHUNK (16 * 1024)  /* the largest piece on_data gets */

struct child_io;

struct child_io_ops {
	/* n bytes (1..CHILD_IO_CHUNK) of output stream i (0 stdout, 1 stderr). */
	void (*on_data)(void *arg, int i, const char *data, size_t n);
	/* Stream i ended (end of file or a read error); its fd is closed.
	 * May be NULL. */
	void (*on_eof)(void *arg, int i);
	/* The write queue was written out (or dropped: the child closed its
	 * stdin) after it held bytes. May be NULL. */
	void (*on_drained)(void *arg);
};

/* A child's I/O over fds[0] (stdin, we write), fds[1] and fds[2] (stdout and
 * stderr, we read); any may be -1. The fds are set non-blocking. At most
 * wmax bytes wait in the write queue. Reading starts paused (see
 * child_io_pause). NULL on allocation failure, the fds closed. */
struct child_io *child_io_new(struct event_base *base, const int fds[3], size_t wmax,
			      const struct child_io_ops *ops, void *arg);

/* Close every fd and free (later, when called from a callback). NULL is fine. */
void child_io_free(struct child_io *io);

/* Stop (on = 1) or go on (0) reading both outputs. */
void child_io_pause(struct child_io *io, int on);
int child_io_paused(const struct child_io *io);

/* Reads per wakeup and stream (default 1): more drains a fast writer with
 * fewer loop turns, 1 keeps each chunk waiting for backpressure. */
void child_io_set_burst(struct child_io *io, int reads);

/* Read what stream i (or both, i = -1) holds now, paused or not: up to max
 * bytes in all, delivered to on_data (on_eof at the end). Returns the
 * bytes read. For the last output of a child that has exited. */
size_t child_io_drain(struct child_io *io, int i, size_t max);

/* Stop reading stream i and close its fd, without on_eof (i = -1: both). */
void child_io_close_output(struct child_io *io, int i);

/* 1 while stream i (0 or 1) is open. */
int child_io_output_open(const struct child_io *io, int i);

/* Queue n bytes for the child's stdin. 0; or -1 with errno E2BIG (does not
 * fit next to what is queued: nothing is queued) or EPIPE (stdin is closed,
 * or will be after the queue: child_io_close_stdin). */
int child_io_write(struct child_io *io, const void *data, size_t n);

/* Bytes queued and not yet taken by the pipe; room left in the queue. */
size_t child_io_queued(const struct child_io *io);
size_t child_io_room(const struct child_io *io);

/* Close stdin once the queue is written (at once when it is empty), or at
 * once, dropping what is queued (discard = 1; no on_drained). */
void child_io_close_stdin(struct child_io *io, int discard);

/* 1 while stdin takes writes (not closed, not closing, not broken). */
int child_io_stdin_open(const struct child_io *io);

#endif
