/*
 * forward.c — see forward.h.
 */
#include "forward.h"
#include "httpd.h"
#include "log.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


struct fwd;

struct fwd_conn {
	struct fwd_conn *next;
	struct fwd *f;
	struct bufferevent *down;    /* the client (nginx) side */
	struct bufferevent *up;      /* the sandbox side */
	int connected;               /* the sandbox side's connect finished */
	int down_eof, up_eof;        /* EOF read from that side */
	int down_shut, up_shut;      /* SHUT_WR sent to that side */
	struct agent_stream st;
};

struct fwd {
	struct fwd *next;
	struct agent *a;
	struct agent_sb *sb;         /* borrowed: fwd_container_gone frees f first */
	char key[AGENT_KEY_MAX];
	int64_t generation, run;
	int port;                    /* inside the sandbox */
	char address[80];            /* host:port of the listener */
	struct evconnlistener *lev;
	struct fwd_conn *conns;
	unsigned nconns;
};

static struct fwd *forwarders;

static void conn_free(struct fwd_conn *c)
{
	struct fwd_conn **pp = &c->f->conns;

	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	c->f->nconns--;
	agent_sb_stream_end(c->f->a, &c->st);
	if (c->down)
		bufferevent_free(c->down);
	if (c->up)
		bufferevent_free(c->up);
	free(c);
}

static void fwd_free(struct fwd *f)
{
	struct fwd **pp = &forwarders;

	while (*pp && *pp != f)
		pp = &(*pp)->next;
	if (*pp)
		*pp = f->next;
	while (f->conns)
		conn_free(f->conns);
	if (f->lev)
		evconnlistener_free(f->lev);
	free(f);
}

/* --- the relay --- */

/* Send SHUT_WR to the side whose peer sent EOF once everything queued for
 * it is out; free the connection when both directions are done. 1 freed. */
static int conn_progress(struct fwd_conn *c)
{
	if (c->down_eof && c->connected && !c->up_shut && evbuffer_get_length(bufferevent_get_output(c->up)) == 0) {
		shutdown(bufferevent_getfd(c->up), SHUT_WR);
		c->up_shut = 1;
	}
	if (c->up_eof && !c->down_shut &&
	    evbuffer_get_length(bufferevent_get_output(c->down)) == 0) {
		shutdown(bufferevent_getfd(c->down), SHUT_WR);
		c->down_shut = 1;
	}
	if (c->up_shut && c->down_shut) {
		conn_free(c);
		return 1;
	}
	return 0;
}

/* Move what from has read to to's output; stop reading from when to is full. */
static void relay(struct bufferevent *from, struct bufferevent *to)
{
	struct evbuffer *out = bufferevent_get_output(to);

	evbuffer_add_buffer(out, bufferevent_get_input(from));
	if (evbuffer_get_length(out) >= FWD_BUF_HIGH)
		bufferevent_disable(from, EV_READ);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct fwd_conn *c = arg;

	if (bev == c->down)
		relay(c->down, c->up);
	else
		relay(c->up, c->down);
}

/* Called when bev's output drained to half of FWD_BUF_HIGH (or below). */
static void write_cb(struct bufferevent *bev, void *arg)
{
	struct fwd_conn *c = arg;
	struct bufferevent *other = bev == c->down ? c->up : c->down;
	int other_eof = bev == c->down ? c->up_eof : c->down_eof;

	if (!other_eof && !(bufferevent_get_enabled(other) & EV_READ))
		bufferevent_enable(other, EV_READ);
	conn_progress(c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct fwd_conn *c = arg;
	int is_down = bev == c->down;

	if (what & BEV_EVENT_CONNECTED) {
		c->connected = 1;
		conn_progress(c);
		return;
	}
	if (what & BEV_EVENT_ERROR) {
		/* Reset or refused (nothing listens on that port inside). */
		conn_free(c);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* Anything still in the input goes out before the half-close. */
		read_cb(bev, c);
		if (is_down)
			c->down_eof = 1;
		else
			c->up_eof = 1;
		conn_progress(c);
	}
}

/* --- a socket in the sandbox's network namespace --- */

struct ns_socket {
	int netns_fd;
	int fd;
	int err;
};

static void *ns_socket_thread(void *arg)
{
	struct ns_socket *s = arg;

	if (setns(s->netns_fd, CLONE_NEWNET) < 0) {
		s->err = errno;
		return NULL;
	}
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd < 0)
		s->err = errno;
	return NULL;
}

/* A non-blocking TCP socket that lives in netns_fd's namespace; -1 with errno. */
static int socket_in_netns(int netns_fd)
{
	struct ns_socket s = { .netns_fd = netns_fd, .fd = -1, .err = 0 };
	pthread_t t;
	int rc;

	if (netns_fd < 0) {
		errno = EBADF;
		return -1;
	}
	rc = pthread_create(&t, NULL, ns_socket_thread, &s);
	if (rc != 0) {
		errno = rc;
		return -1;
	}
	pthread_join(t, NULL);
	if (s.fd < 0) {
		errno = s.err ? s.err : EIO;
		return -1;
	}
	return s.fd;
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	struct fwd *f = arg;
	struct agent_sb *sb = f->sb;
	struct sockaddr_in to;
	struct fwd_conn *c;
	int upfd;

	/* Init died: the container is released (and f with it) at the next
	 * turn of the loop; until then its network namespace is not usable. */
	if (!agent_sb_container(sb)) {
		close(fd);
		return;
	}
	if (f->nconns >= FWD_MAX_CONNS) {
		log_warn("forwarder %s port %d: %d connections open; refusing one", f->key, f->port,
			 FWD_MAX_CONNS);
		close(fd);
		return;
	}
	upfd = socket_in_netns(rt_netns_fd(sb->rt));
	if (upfd < 0) {
		log_warn("forwarder %s port %d: no socket in the sandbox: %s", f->key, f->port,
			 strerror(errno));
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		close(upfd);
		return;
	}
	c->f = f;
	c->down = bufferevent_socket_new(f->a->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->down)
		close(fd);
	c->up = bufferevent_socket_new(f->a->base, upfd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->up)
		close(upfd);
	c->next = f->conns;
	f->conns = c;
	f->nconns++;
	if (!c->down || !c->up) {
		conn_free(c);
		return;
	}
	agent_sb_stream_begin(sb, &c->st);
	bufferevent_setcb(c->down, read_cb, write_cb, event_cb, c);
	bufferevent_setcb(c->up, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(c->down, EV_READ, 0, FWD_BUF_HIGH);
	bufferevent_setwatermark(c->up, EV_READ, 0, FWD_BUF_HIGH);
	bufferevent_setwatermark(c->down, EV_WRITE, FWD_BUF_HIGH / 2, 0);
	bufferevent_setwatermark(c->up, EV_WRITE, FWD_BUF_HIGH / 2, 0);
	memset(&to, 0, sizeof(to));
	to.sin_family = AF_INET;
	to.sin_port = htons((uint16_t)f->port);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bufferevent_socket_connect(c->up, (struct sockaddr *)&to, sizeof(to)) < 0) {
		conn_free(c);
		return;
	}
	bufferevent_enable(c->up, EV_READ | EV_WRITE);
	bufferevent_enable(c->down, EV_READ | EV_WRITE);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct fwd *f = arg;
	int err = EVUTIL_SOCKET_ERROR();

	/* EMFILE and friends: pause briefly instead of spinning. */
	log_warn("forwarder %s port %d: accept failed: %s", f->key, f->port, strerror(err));
	evconnlistener_disable(lev);
	evconnlistener_enable(lev);
}

/* --- the table --- */

static struct fwd *fwd_find(const char *key, int port)
{
	for (struct fwd *f = forwarders; f; f = f->next)
		if (f->port == port && strcmp(f->key, key) == 0)
			return f;
	return NULL;
}

/* A listener on host:0; its address into f->address. 0 or -1 with e. */
static int fwd_listen(struct fwd *f, const char *host, struct sbx_err *e)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	char ip[INET6_ADDRSTRLEN];
	int n, v6;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		len = sizeof(*in4);
		v6 = 0;
	} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		len = sizeof(*in6);
		v6 = 1;
	} else {
		return err_set(e, SBX_E_INTERNAL, "agent.listen host '%s' is not numeric", host);
	}
	f->lev = evconnlistener_new_bind(f->a->base, accept_cb, f,
					 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
						 LEV_OPT_REUSEABLE,
					 128, (struct sockaddr *)&ss, (int)len);
	if (!f->lev)
		return err_sys(e, errno, "cannot listen for a forwarder on '%s'", host);
	evconnlistener_set_error_cb(f->lev, accept_error_cb);
	len = sizeof(ss);
	if (getsockname(evconnlistener_get_fd(f->lev), (struct sockaddr *)&ss, &len) < 0)
		return err_sys(e, errno, "getsockname of a forwarder");
	if (!inet_ntop(v6 ? AF_INET6 : AF_INET, v6 ? (void *)&in6->sin6_addr : (void *)&in4->sin_addr,
		       ip, sizeof(ip)))
		return err_sys(e, errno, "inet_ntop");
	n = snprintf(f->address, sizeof(f->address), v6 ? "[%s]:%u" : "%s:%u", ip,
		     (unsigned)ntohs(v6 ? in6->sin6_port : in4->sin_port));
	if (n < 0 || (size_t)n >= sizeof(f->address))
		return err_set(e, SBX_E_INTERNAL, "forwarder address too long");
	return 0;
}

int fwd_open(struct agent *a, struct agent_sb *sb, int port, char *address, size_t addrsz,
	     int *created, struct sbx_err *e)
{
	char host[INET6_ADDRSTRLEN + 2];
	int lport, count = 0, n;
	struct fwd *f;

	*created = 0;
	if (port < 1 || port > 65535)
		return err_set(e, SBX_E_INVALID_PORT, "port must be 1-65535");
	if (!sb->rt || sb->dead)
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' is not running", sb->id);
	f = fwd_find(sb->key, port);
	if (!f) {
		for (struct fwd *o = forwarders; o; o = o->next)
			count += strcmp(o->key, sb->key) == 0;
		if (count >= FWD_MAX_PER_SANDBOX)
			return err_set(e, SBX_E_CONFLICT, "sandbox '%s' already forwards %d ports", sb->id,
				       FWD_MAX_PER_SANDBOX);
		if (httpd_parse_listen(a->conf->agent.listen, host, sizeof(host), &lport) < 0)
			return err_set(e, SBX_E_INTERNAL, "agent.listen '%s' is unusable",
				       a->conf->agent.listen);
		f = calloc(1, sizeof(*f));
		if (!f)
			return err_sys(e, ENOMEM, "forwarder");
		f->a = a;
		f->sb = sb;
		snprintf(f->key, sizeof(f->key), "%s", sb->key);
		f->generation = sb->generation;
		f->run = sb->run;
		f->port = port;
		if (fwd_listen(f, host, e) < 0) {
			fwd_free(f);
			return -1;
		}
		f->next = forwarders;
		forwarders = f;
		*created = 1;
		log_info("forwarder %s port %d listening on %s (generation %lld)", f->key, port,
			 f->address, (long long)f->generation);
	}
	n = snprintf(address, addrsz, "%s", f->address);
	if (n < 0 || (size_t)n >= addrsz)
		return err_set(e, SBX_E_INTERNAL, "forwarder address too long");
	return 0;
}

int fwd_close(struct agent *a, const char *key, int port)
{
	struct fwd *f = fwd_find(key, port);

	if (!f)
		return 0;
	log_info("forwarder %s port %d closed (%u connections)", f->key, f->port, f->nconns);
	fwd_free(f);
	return 1;
}

json_t *fwd_list_json(struct agent *a, const char *key)
{
	json_t *arr = json_array();

	for (struct fwd *f = forwarders; arr && f; f = f->next) {
		if (strcmp(f->key, key) != 0)
			continue;
		if (json_array_append_new(arr, json_pack("{s:i, s:s, s:I, s:i}", "port", f->port,
							 "address", f->address, "generation",
							 (json_int_t)f->generation, "connections",
							 (int)f->nconns)) < 0) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

void fwd_release_all(void)
{
	while (forwarders)
		fwd_free(forwarders);
}

static void fwd_container_gone(struct agent *a, struct agent_sb *sb)
{
	struct fwd *f = forwarders, *next;

	for (; f; f = next) {
		next = f->next;
		if (f->sb == sb && f->run == sb->run) {
			log_info("forwarder %s port %d: its container is gone; closing (%u connections)",
				 f->key, f->port, f->nconns);
			fwd_free(f);
		}
	}
}

const struct agent_module fwd_module = { "forwarders", fwd_container_gone };
