/* Unit tests of a child's I/O on the event loop (sandbox/agent/child_io.c),
 * over real pipes and a socketpair. */
#include "buf.h"
#include "child_io.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct rec {
	struct child_io *io;
	struct buf got[2];
	size_t biggest;
	int chunks;
	int eof[2];
	int drained;
	int pause_after;          /* pause once this many chunks came */
	int free_on_data;         /* child_io_free from on_data */
};

static void on_data(void *arg, int i, const char *data, size_t n)
{
	struct rec *r = arg;

	buf_add(&r->got[i], data, n);
	if (n > r->biggest)
		r->biggest = n;
	r->chunks++;
	if (r->pause_after && r->chunks == r->pause_after)
		child_io_pause(r->io, 1);
	if (r->free_on_data) {
		child_io_free(r->io);
		r->io = NULL;
	}
}

static void on_eof(void *arg, int i)
{
	struct rec *r = arg;

	r->eof[i]++;
}

static void on_drained(void *arg)
{
	struct rec *r = arg;

	r->drained++;
}

static const struct child_io_ops ops = { on_data, on_eof, on_drained };

static void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	buf_init(&r->got[0], 1 << 20);
	buf_init(&r->got[1], 1 << 20);
}

static void rec_release(struct rec *r)
{
	buf_release(&r->got[0]);
	buf_release(&r->got[1]);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
	event_base_loopbreak(arg);
}

/* Run the loop until no event is left (at most 5 s). */
static void run(struct event_base *base)
{
	struct timeval tv = { 5, 0 };
	struct event *stop = evtimer_new(base, stop_cb, base);

	evtimer_add(stop, &tv);
	while (event_base_loop(base, EVLOOP_ONCE) == 0 && event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED) > 1)
		;
	event_free(stop);
}

/* A few non-blocking turns of the loop. */
static void turn(struct event_base *base, int n)
{
	while (n-- > 0)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

static int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

TEST(child_io_reads_both_streams_to_eof)
{
	struct event_base *base = event_base_new();
	int out[2], err[2], fds[3];
	char big[40000];
	struct rec r;

	rec_init(&r);
	CHECK_INT(pipe2(out, O_CLOEXEC), 0);
	CHECK_INT(pipe2(err, O_CLOEXEC), 0);
	for (size_t k = 0; k < sizeof(big); k++)
		big[k] = (char)('a' + k % 26);
	CHECK_INT(write(out[1], big, sizeof(big)), (long)sizeof(big));
	CHECK_INT(write(err[1], "e", 1), 1);
	close(out[1]);
	close(err[1]);
	fds[0] = -1;
	fds[1] = out[0];
	fds[2] = err[0];
	r.io = child_io_new(base, fds, 0, &ops, &r);
	CHECK(r.io != NULL);
	/* reading starts paused */
	turn(base, 3);
	CHECK_INT(r.chunks, 0);
	child_io_pause(r.io, 0);
	run(base);
	CHECK_INT(r.got[0].len, sizeof(big));
	CHECK(r.got[0].len == sizeof(big) && memcmp(r.got[0].data, big, sizeof(big)) == 0);
	CHECK_INT(r.got[1].len, 1);
	CHECK(r.biggest <= CHILD_IO_CHUNK);
	CHECK_INT(r.eof[0], 1);
	CHECK_INT(r.eof[1], 1);
	CHECK(!child_io_output_open(r.io, 0) && !child_io_output_open(r.io, 1));
	CHECK(!fd_open(out[0]) && !fd_open(err[0]));
	child_io_free(r.io);
	rec_release(&r);
	event_base_free(base);
}

TEST(child_io_pause_holds_back_output)
{
	struct event_base *base = event_base_new();
	int out[2], fds[3];
	static char data[3 * CHILD_IO_CHUNK];
	struct rec r;

	rec_init(&r);
	r.pause_after = 1;
	CHECK_INT(pipe2(out, O_CLOEXEC), 0);
	memset(data, 'p', sizeof(data));
	CHECK_INT(write(out[1], data, sizeof(data)), (long)sizeof(data));
	close(out[1]);
	fds[0] = fds[2] = -1;
	fds[1] = out[0];
	r.io = child_io_new(base, fds, 0, &ops, &r);
	child_io_set_burst(r.io, 8);
	child_io_pause(r.io, 0);
	turn(base, 5);
	/* paused from inside the first chunk: the burst stops there */
	CHECK_INT(r.chunks, 1);
	CHECK(child_io_paused(r.io));
	CHECK_INT(r.got[0].len, CHILD_IO_CHUNK);
	r.pause_after = 0;
	child_io_pause(r.io, 0);
	run(base);
	CHECK_INT(r.got[0].len, sizeof(data));
	CHECK_INT(r.eof[0], 1);
	child_io_free(r.io);
	rec_release(&r);
	event_base_free(base);
}

TEST(child_io_drain_reads_while_paused)
{
	struct event_base *base = event_base_new();
	int out[2], fds[3];
	struct rec r;

	rec_init(&r);
	CHECK_INT(pipe2(out, O_CLOEXEC), 0);
	CHECK_INT(write(out[1], "last words", 10), 10);
	fds[0] = fds[2] = -1;
	fds[1] = out[0];
	r.io = child_io_new(base, fds, 0, &ops, &r);
	CHECK_INT(child_io_drain(r.io, -1, 1024), 10);
	CHECK_INT(r.got[0].len, 10);
	CHECK(child_io_output_open(r.io, 0));   /* the writer still holds it */
	close(out[1]);
	CHECK_INT(child_io_drain(r.io, 0, 1024), 0);
	CHECK_INT(r.eof[0], 1);
	CHECK(!child_io_output_open(r.io, 0));
	child_io_free(r.io);
	rec_release(&r);
	event_base_free(base);
}

TEST(child_io_write_queue_is_bounded_then_eof)
{
	struct event_base *base = event_base_new();
	int in[2], fds[3];
	char a[600], got[2000];
	ssize_t n, total = 0;
	struct rec r;

	rec_init(&r);
	CHECK_INT(pipe2(in, O_CLOEXEC), 0);
	fds[0] = in[1];
	fds[1] = fds[2] = -1;
	r.io = child_io_new(base, fds, 1000, &ops, &r);
	memset(a, 'w', sizeof(a));
	CHECK_INT(child_io_write(r.io, a, sizeof(a)), 0);
	CHECK_INT(child_io_queued(r.io), 600);
	CHECK_INT(child_io_room(r.io), 400);
	errno = 0;
	CHECK_INT(child_io_write(r.io, a, 500), -1);
	CHECK_INT(errno, E2BIG);
	CHECK_INT(child_io_queued(r.io), 600);   /* nothing of it queued */
	child_io_close_stdin(r.io, 0);
	CHECK(!child_io_stdin_open(r.io));
	errno = 0;
	CHECK_INT(child_io_write(r.io, "x", 1), -1);
	CHECK_INT(errno, EPIPE);
	run(base);
	CHECK_INT(r.drained, 1);
	CHECK_INT(child_io_queued(r.io), 0);
	while ((n = read(in[0], got + total, sizeof(got) - (size_t)total)) > 0)
		total += n;
	CHECK_INT(n, 0);              /* EOF: the queue was written, then closed */
	CHECK_INT(total, 600);
	close(in[0]);
	child_io_free(r.io);
	rec_release(&r);
	event_base_free(base);
}

TEST(child_io_write_to_a_closed_stdin_drops_the_queue)
{
	struct event_base *base = event_base_new();
	int in[2], fds[3];
	struct rec r;

	signal(SIGPIPE, SIG_IGN);
	rec_init(&r);
	CHECK_INT(pipe2(in, O_CLOEXEC), 0);
	close(in[0]);
	fds[0] = in[1];
	fds[1] = fds[2] = -1;
	r.io = child_io_new(base, fds, 100, &ops, &r);
	CHECK_INT(child_io_write(r.io, "lost", 4), 0);
	run(base);
	CHECK_INT(r.drained, 1);
	CHECK(!child_io_stdin_open(r.io));
	CHECK(!fd_open(in[1]));
	errno = 0;
	CHECK_INT(child_io_write(r.io, "x", 1), -1);
	CHECK_INT(errno, EPIPE);
	child_io_free(r.io);
	rec_release(&r);
	event_base_free(base);
}

TEST(child_io_free_from_a_callback)
{
	struct event_base *base = event_base_new();
	int out[2], fds[3];
	static char data[4 * CHILD_IO_CHUNK];
	struct rec r;

	rec_init(&r);
	r.free_on_data = 1;
	CHECK_INT(pipe2(out, O_CLOEXEC), 0);
	memset(data, 'f', sizeof(data));
	CHECK_INT(write(out[1], data, sizeof(data)), (long)sizeof(data));
	fds[0] = fds[2] = -1;
	fds[1] = out[0];
	r.io = child_io_new(base, fds, 0, &ops, &r);
	child_io_set_burst(r.io, 8);
	child_io_pause(r.io, 0);
	run(base);
	/* freed inside the first chunk: nothing more was read, its fd is closed */
	CHECK_INT(r.chunks, 1);
	CHECK(!fd_open(out[0]));
	CHECK_INT(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED), 0);
	close(out[1]);
	rec_release(&r);
	event_base_free(base);
}

TEST(child_io_one_fd_for_stdin_and_stdout)
{
	struct event_base *base = event_base_new();
	int sv[2], fds[3];
	char got[16];
	struct rec r;

	rec_init(&r);
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fds[0] = fds[1] = sv[0];
	fds[2] = -1;
	r.io = child_io_new(base, fds, 64, &ops, &r);
	CHECK_INT(write(sv[1], "ping", 4), 4);
	CHECK_INT(child_io_write(r.io, "pong", 4), 0);
	child_io_pause(r.io, 0);
	turn(base, 5);
	CHECK_INT(r.got[0].len, 4);
	CHECK(r.got[0].len == 4 && memcmp(r.got[0].data, "ping", 4) == 0);
	CHECK_INT(read(sv[1], got, sizeof(got)), 4);
	CHECK(memcmp(got, "pong", 4) == 0);
	/* closing stdin keeps the shared fd open for reading */
	child_io_close_stdin(r.io, 0);
	CHECK(fd_open(sv[0]) && child_io_output_open(r.io, 0));
	child_io_free(r.io);
	CHECK(!fd_open(sv[0]));
	close(sv[1]);
	rec_release(&r);
	event_base_free(base);
}
