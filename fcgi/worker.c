#include "worker.h"
#include "agentc.h"
#include "apimetrics.h"
#include "http.h"
#include "ceilings.h"
#include "log.h"
#include "store.h"
#include "util.h"

#include <errno.h>
#include <fcgiapp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void on_term(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* Handlers: SIGTERM sets the flag; SIGHUP/SIGINT belong to the master. */
static int setup_signals(sigset_t *wait_mask)
{
	struct sigaction sa;
	sigset_t block;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) < 0)
		return -1;
	sa.sa_handler = SIG_IGN;
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGCHLD, &sa, NULL);

	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	if (sigprocmask(SIG_SETMASK, &block, NULL) < 0)
		return -1;
	sigemptyset(wait_mask);   /* SIGTERM deliverable only inside ppoll */
	return 0;
}

/* Reads what is left of the request's stdin, up to its end record.
 * libfcgi reuses a kept-alive connection only when the stream was read to
 * its end: an unread record (a body the handler did not read, or just the
 * empty end-of-stdin record after exactly Content-Length bytes) makes the
 * next FCGX_Accept_r on that connection fail and close it under the next
 * request nginx already sent there — a 502 for a client whose non-idempotent
 * request nginx does not retry. nginx bounds control bodies, so this ends. */
static void drain_stdin(FCGX_Request *fcgx)
{
	char sink[16384];

	if (!fcgx->in)
		return;
	while (FCGX_GetStr(sink, (int)sizeof(sink), fcgx->in) > 0)
		;
}

/* Is the listener TCP (then connections get TCP_NODELAY, as libfcgi does)? */
static int listener_is_tcp(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
}

/* Accept a new FastCGI connection, close-on-exec from birth. The worker
 * accepts itself instead of libfcgi: libfcgi's accept sets no CLOEXEC (which
 * cost an fcntl pair on every request) and, for a unix socket, waits in a
 * select() for the first bytes. -1 when none is pending (the listener is
 * non-blocking and shared: another worker may have taken it). */
static int accept_conn(int listen_fd, int tcp)
{
	int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	int one = 1;

	if (fd >= 0 && tcp)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* An epoll set that wakes one waiting worker, not all of them, when a
 * connection arrives on the shared listener (EPOLLEXCLUSIVE). -1 with errno. */
static int listener_waiter(int listen_fd)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.fd = listen_fd };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev) < 0) {
		int err = errno;

		close(ep);
		errno = err;
		return -1;
	}
	return ep;
}

int worker_run(int listen_fd, const struct sbx_conf *conf, pid_t master)
{
	FCGX_Request fcgx;
	sigset_t wait_mask;
	struct sbx_err e;
	struct timespec tick = { .tv_sec = 1, .tv_nsec = 0 };
	int tcp = listener_is_tcp(listen_fd), ep, rc;

	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || setup_signals(&wait_mask) < 0) {
		log_error("worker setup failed: %s", strerror(errno));
		return 1;
	}
	if (getppid() != master)
		return 0;
	ep = listener_waiter(listen_fd);
	if (ep < 0) {
		log_error("worker setup failed: epoll: %s", strerror(errno));
		return 1;
	}
	err_clear(&e);
	ceilings_init(conf);
	if (store_init(conf, &e) < 0 || agentc_init(conf, &e) < 0) {
		log_error("worker setup failed: %s", e.msg);
		return 1;
	}
	/* libfcgi gets no listener (-1): connections come from accept_conn()
	 * only. When a kept-alive connection ends (nginx closed it), libfcgi's
	 * FCGX_Accept_r closes it and its own accept on -1 fails at once, so it
	 * never accepts a connection without CLOEXEC behind our back. */
	if (FCGX_InitRequest(&fcgx, -1, 0) != 0) {
		log_error("FCGX_InitRequest failed");
		return 1;
	}

	while (!stop_requested) {
		/* A kept-alive FastCGI connection is this worker's alone; the
		 * listener is shared, and a new connection wakes one worker. */
		struct pollfd pfd = { .fd = fcgx.ipcFd, .events = POLLIN };
		struct epoll_event ev;
		int n = fcgx.ipcFd >= 0 ? ppoll(&pfd, 1, &tick, &wait_mask)
					: epoll_pwait(ep, &ev, 1, (int)(tick.tv_sec * 1000), &wait_mask);
		struct http_req r;

		if (n < 0 && errno != EINTR) {
			log_error("poll: %s", strerror(errno));
			break;
		}
		/* Told to stop, a worker still takes what it was woken for: the
		 * listener woke no other worker for that connection, and a
		 * request nginx sent on a kept connection gets its answer. */
		if (n <= 0) {
			if (stop_requested || getppid() != master)
				break;
			continue;
		}
		if (fcgx.ipcFd < 0) {
			fcgx.ipcFd = accept_conn(listen_fd, tcp);
			if (fcgx.ipcFd < 0)
				continue;
			/* FCGX_Accept_r first finishes the previous request and
			 * closes the connection unless it is marked kept; the
			 * request it reads next sets the flag nginx asked for. */
			fcgx.keepConnection = 1;
		}
		/* Reads the request on the connection; fails when nginx closed a
		 * kept-alive one (libfcgi then closes it and sets ipcFd to -1). */
		if (FCGX_Accept_r(&fcgx) < 0)
			continue;
		err_clear(&e);
		rc = http_req_init(&r, &fcgx, conf, &e);
		agentc_set_request_id(r.request_id);   /* filled even when rc < 0 */
		if (rc < 0) {
			http_respond_error(&r, &e);
			apimetrics_request(NULL, r.status, metrics_now_us());
		} else {
			router_dispatch(&r);
		}
		http_req_release(&r);
		drain_stdin(&fcgx);
		FCGX_Finish_r(&fcgx);
	}
	FCGX_Free(&fcgx, 1);
	close(ep);
	store_release();
	agentc_release();
	return 0;
}
