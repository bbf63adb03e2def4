/*
 * port_probe.c — HTTP readiness probes of ports inside a sandbox (see
 * port_probe.h). The socket is made in the sandbox's network namespace
 * (fwd_socket_in_netns) and driven by a bufferevent on the agent's loop:
 * connect, send "GET path HTTP/1.1" with Connection: close, read until
 * the status line is complete, report its code, close.
 */
#include "port_probe.h"
#include "forward.h"
#include "log.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROBE_LINE_MAX 256     /* a status line longer than this is garbage */

struct port_probe {
	struct bufferevent *bev;
	port_probe_cb cb;
	void *arg;
};

int port_probe_path_ok(const char *path)
{
	size_t n = path ? strlen(path) : 0;

	if (n == 0 || n > PORT_PROBE_PATH_MAX || path[0] != '/')
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)path[i] <= ' ' || (unsigned char)path[i] >= 0x7f)
			return 0;
	return 1;
}

static void probe_end(struct port_probe *p, int status)
{
	port_probe_cb cb = p->cb;
	void *arg = p->arg;

	bufferevent_free(p->bev);
	free(p);
	cb(arg, status);
}

/* "HTTP/1.x NNN …": NNN, or 0. */
static int status_of(const char *line, size_t n)
{
	int code = 0;

	if (n < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[8] != ' ')
		return 0;
	for (int i = 9; i < 12; i++) {
		if (line[i] < '0' || line[i] > '9')
			return 0;
		code = code * 10 + (line[i] - '0');
	}
	return code >= 100 && code <= 599 ? code : 0;
}

static void probe_read(struct bufferevent *bev, void *arg)
{
	struct port_probe *p = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	struct evbuffer_ptr eol = evbuffer_search(in, "\r\n", 2, NULL);
	char line[PROBE_LINE_MAX];
	size_t n;

	if (eol.pos < 0) {
		if (len >= PROBE_LINE_MAX)
			probe_end(p, 0);
		return;
	}
	n = (size_t)eol.pos < sizeof(line) ? (size_t)eol.pos : sizeof(line) - 1;
	evbuffer_copyout(in, line, n);
	probe_end(p, status_of(line, n));
}

static void probe_event(struct bufferevent *bev, short what, void *arg)
{
	struct port_probe *p = arg;

	if (what & BEV_EVENT_CONNECTED)
		return;
	/* closed, reset or timed out before a status line */
	probe_end(p, 0);
}

struct port_probe *port_probe_http(struct event_base *base, int netns_fd, int port,
				   const char *path, int timeout_ms, port_probe_cb cb, void *arg)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	struct sockaddr_in to;
	struct port_probe *p;
	int fd;

	if (!port_probe_path_ok(path) || port < 1 || port > 65535) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	fd = fwd_socket_in_netns(netns_fd);
	if (fd < 0) {
		free(p);
		return NULL;
	}
	p->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!p->bev) {
		close(fd);
		free(p);
		errno = ENOMEM;
		return NULL;
	}
	p->cb = cb;
	p->arg = arg;
	memset(&to, 0, sizeof(to));
	to.sin_family = AF_INET;
	to.sin_port = htons((uint16_t)port);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bufferevent_setcb(p->bev, probe_read, NULL, probe_event, p);
	bufferevent_set_timeouts(p->bev, &tv, &tv);
	if (evbuffer_add_printf(bufferevent_get_output(p->bev),
				"GET %s HTTP/1.1\r\nHost: localhost:%d\r\nUser-Agent: sbx-port-probe\r\n"
				"Accept: */*\r\nConnection: close\r\n\r\n",
				path, port) < 0 ||
	    bufferevent_socket_connect(p->bev, (struct sockaddr *)&to, sizeof(to)) < 0) {
		bufferevent_free(p->bev);
		free(p);
		errno = ECONNREFUSED;
		return NULL;
	}
	bufferevent_enable(p->bev, EV_READ | EV_WRITE);
	return p;
}

void port_probe_cancel(struct port_probe *p)
{
	if (!p)
		return;
	bufferevent_free(p->bev);
	free(p);
}
