/*
 * forward.c — see forward.h.
 */
#include "forward.h"
#include "agent_lifecycle.h"
#include "capacity.h"
#include "httpd.h"
#include "ids.h"
#include "log.h"
#include "tcplisten.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>


struct fwd;

enum conn_state {
	CONN_HEAD,     /* reading the first request head (node_pending) */
	CONN_RELAY,    /* connected to the sandbox: counted, a live stream */
	CONN_REFUSED,  /* our answer is queued; the rest is dropped (node_pending) */
};

struct fwd_conn {
	struct fwd_conn *next;
	struct fwd *f;
	enum conn_state state;
	int local;                   /* accepted on the local (tunnel) listener */
	int gw;                      /* accepted on the gateway: f is per request */
	int kept;                    /* a gateway connection past its first request */
	struct bufferevent *down;    /* the client (nginx, a tunnel process) side */
	struct bufferevent *up;      /* the sandbox side */
	int connected;               /* the sandbox side's connect finished */
	int down_eof, up_eof;        /* EOF read from that side */
	int down_shut, up_shut;      /* SHUT_WR sent to that side */
	size_t drained;              /* bytes dropped since it was refused */
	struct agent_stream st;
	/* Reuse of the connection to the app (forward.h): */
	int reusable;                /* one bodiless request: up may serve another */
	int client_close;            /* its client asked for "Connection: close" */
	int up_reused;               /* up came from the idle pool (may be closed) */
	char *head;                  /* the request head sent (reusable only) */
	size_t head_len;
	struct fwd_resp rs;          /* the framing of the app's answer */
};

/* An idle connection to the app, kept for the forwarder's next request. */
struct fwd_idle {
	struct fwd_idle *next;
	struct fwd *f;
	struct bufferevent *bev;
};

struct fwd {
	struct fwd *next;
	struct agent *a;
	struct agent_sb *sb;         /* borrowed: fwd_container_gone frees f first */
	char key[AGENT_KEY_MAX];
	char tenant[64];
	int64_t generation, run;
	int port;                    /* inside the sandbox */
	char address[80];            /* host:port of the listener (secret required) */
	char local_address[80];      /* 127.0.0.1:port of the local listener, "" if none */
	struct evconnlistener *lev, *lev_local;
	struct fwd_conn *conns;
	unsigned nconns;             /* relaying connections */
	/* Sockets already made in the sandbox's netns (one thread makes
	 * FWD_SPARE at a time, not one per connection); closed with f. */
	int spare[FWD_SPARE];
	unsigned nspare;
	struct fwd_idle *idle;       /* at most FWD_IDLE_MAX */
	unsigned nidle;
};

static struct fwd *forwarders;
static unsigned node_conns;     /* relaying connections of every forwarder */
static unsigned node_pending;   /* connections still sending their head, or refused */

/* The node's preview gateway (forward.h): its connections between two
 * requests (attached to no forwarder) are in conns. */
static struct {
	struct agent *a;
	struct evconnlistener *lev, *lev_unix;
	struct fwd_conn *conns;
	unsigned nkept;
	unsigned long long accepted, requests;
	char address[80];
} gw;

/* An fd kept open so that an accept failing for want of fds can still
 * take the connection and answer it (accept_overflow); -1 when none. */
static int reserve_fd = -1;

static void conn_free(struct fwd_conn *c)
{
	struct fwd_conn **pp = c->f ? &c->f->conns : &gw.conns;

	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	if (c->state == CONN_RELAY) {
		c->f->nconns--;
		node_conns--;
		agent_sb_stream_end(c->f->a, &c->st);
	} else if (!c->kept) {
		node_pending--;
	}
	if (c->kept && !c->f)
		gw.nkept--;
	if (c->down)
		bufferevent_free(c->down);
	if (c->up)
		bufferevent_free(c->up);
	free(c->head);
	free(c);
}

static void idle_free(struct fwd_idle *i)
{
	struct fwd_idle **pp = &i->f->idle;

	while (*pp && *pp != i)
		pp = &(*pp)->next;
	if (*pp)
		*pp = i->next;
	i->f->nidle--;
	bufferevent_free(i->bev);
	free(i);
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
	while (f->idle)
		idle_free(f->idle);
	if (f->lev)
		evconnlistener_free(f->lev);
	if (f->lev_local)
		evconnlistener_free(f->lev_local);
	while (f->nspare)
		close(f->spare[--f->nspare]);
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

static void head_read(struct fwd_conn *c);
static struct fwd *fwd_find(const char *key, int port);
static int up_keep(struct fwd_conn *c);
static int up_connect(struct fwd_conn *c);
static void read_cb(struct bufferevent *bev, void *arg);
static void write_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);

/* Drop what a refused client still sends (the rest of its request, so that
 * it reads our answer rather than a reset), up to FWD_REFUSED_DRAIN bytes;
 * beyond, it is closed. */
static void refused_drain(struct fwd_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->down);

	c->drained += evbuffer_get_length(in);
	evbuffer_drain(in, evbuffer_get_length(in));
	if (c->drained > FWD_REFUSED_DRAIN)
		conn_free(c);
}

/* Feed what up has read to c's answer parser (it stays in the buffer). */
static void resp_follow(struct fwd_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->up);
	struct evbuffer_iovec v[8];
	int n = evbuffer_peek(in, -1, NULL, v, 8);

	if (n > 8) {   /* more pieces than we look at: give up reuse */
		c->reusable = 0;
		return;
	}
	for (int i = 0; i < n && c->rs.state != FWD_RS_RAW; i++)
		fwd_resp_feed(&c->rs, v[i].iov_base, v[i].iov_len);
	if (c->rs.state == FWD_RS_RAW)
		c->reusable = 0;
}

static void idle_read_cb(struct bufferevent *bev, void *arg)
{
	/* The app spoke unasked, or closed: not a connection to reuse. */
	idle_free(arg);
}

static void idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	idle_free(arg);   /* EOF, error or FWD_IDLE_S without a request */
}

/* The client of c has gone after a complete answer: keep c's connection to
 * the app for the forwarder's next request when it is clean. 1 kept. */
static int up_keep(struct fwd_conn *c)
{
	struct fwd *f = c->f;
	struct timeval tv = { FWD_IDLE_S, 0 };
	struct fwd_idle *i;

	if (!c->reusable || c->rs.state != FWD_RS_DONE || !c->connected || c->up_eof ||
	    evbuffer_get_length(bufferevent_get_input(c->up)) ||
	    evbuffer_get_length(bufferevent_get_output(c->up)) || f->nidle >= FWD_IDLE_MAX ||
	    !agent_sb_container(f->sb))
		return 0;
	i = calloc(1, sizeof(*i));
	if (!i)
		return 0;
	i->f = f;
	i->bev = c->up;
	c->up = NULL;
	bufferevent_setcb(i->bev, idle_read_cb, NULL, idle_event_cb, i);
	bufferevent_set_timeouts(i->bev, &tv, NULL);
	bufferevent_enable(i->bev, EV_READ);
	i->next = f->idle;
	f->idle = i;
	f->nidle++;
	/* For the relay, up is done: down gets its SHUT_WR once drained. */
	c->up_eof = c->up_shut = 1;
	return 1;
}

/* A gateway connection's request is over (its answer queued for the
 * client, c->up done: kept for the forwarder when clean unless drop_up):
 * c leaves its forwarder and reads the next head. */
static void gw_next(struct fwd_conn *c, int drop_up)
{
	struct fwd *f = c->f;
	struct fwd_conn **pp = &f->conns;
	struct timeval tv = { FWD_GW_KEEP_S, 0 };

	if (drop_up || !up_keep(c)) {
		if (c->up)
			bufferevent_free(c->up);
		c->up = NULL;
	}
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	f->nconns--;
	node_conns--;
	agent_sb_stream_end(f->a, &c->st);
	c->f = NULL;
	c->next = gw.conns;
	gw.conns = c;
	gw.nkept++;
	c->kept = 1;
	c->state = CONN_HEAD;
	c->connected = c->down_eof = c->up_eof = c->down_shut = c->up_shut = 0;
	c->reusable = c->client_close = c->up_reused = 0;
	free(c->head);
	c->head = NULL;
	c->head_len = 0;
	bufferevent_set_timeouts(c->down, &tv, NULL);
	bufferevent_enable(c->down, EV_READ | EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_input(c->down)))
		head_read(c);
}

/* The app of a gateway connection's request has sent more: pass on what
 * belongs to the answer; at its end, the next request (gw_next). at_eof:
 * the app closes after these bytes. 1 when c left the relay. */
static int gw_answer(struct fwd_conn *c, int at_eof)
{
	struct evbuffer *in = bufferevent_get_input(c->up);
	struct evbuffer_iovec v[8];
	size_t take = 0;
	int n, close_after;

	if (c->reusable) {
		n = evbuffer_peek(in, -1, NULL, v, 8);
		if (n > 8)
			c->reusable = 0;
		for (int i = 0; i < n && i < 8 && c->reusable; i++) {
			take += fwd_resp_take(&c->rs, v[i].iov_base, v[i].iov_len);
			if (c->rs.state == FWD_RS_RAW)
				c->reusable = 0;
			else if (c->rs.state == FWD_RS_DONE)
				break;
		}
	}
	if (!c->reusable || c->rs.state != FWD_RS_DONE) {
		/* Unframed: relayed as it comes, the connection ends with it. */
		relay(c->up, c->down);
		return 0;
	}
	close_after = c->client_close;
	evbuffer_remove_buffer(in, bufferevent_get_output(c->down), take);
	/* Bytes the app sent after its answer are its own: dropped with it. */
	gw_next(c, at_eof || evbuffer_get_length(in) > 0);
	if (close_after && c->state == CONN_HEAD) {
		/* The client asked for the end: once the answer is out (write_cb). */
		c->state = CONN_REFUSED;
		if (evbuffer_get_length(bufferevent_get_output(c->down)) == 0) {
			shutdown(bufferevent_getfd(c->down), SHUT_WR);
			c->down_shut = 1;
		}
	}
	return 1;
}

/* What bev of c has read. at_eof: its EOF follows (event_cb goes on with
 * c unless this returns 1: c was freed or left the relay). */
static int conn_read(struct fwd_conn *c, struct bufferevent *bev, int at_eof)
{
	if (c->state == CONN_HEAD) {
		head_read(c);
		return 1;
	} else if (c->state == CONN_REFUSED) {
		refused_drain(c);
		return 1;
	} else if (c->gw && bev == c->down) {
		/* Past its bodiless request, a gateway client sends nothing
		 * until the answer is complete: the two sides disagree on where
		 * it ends, and nothing of it may reach this app. */
		if (evbuffer_get_length(bufferevent_get_input(bev))) {
			log_warn("gateway: bytes from the client before the answer's end; closing");
			conn_free(c);
			return 1;
		}
	} else if (c->gw) {
		return gw_answer(c, at_eof);
	} else if (bev == c->down) {
		/* More than the one head (a body, a second request): up is the
		 * client's alone. */
		if (evbuffer_get_length(bufferevent_get_input(bev)))
			c->reusable = 0;
		if (c->up)
			relay(c->down, c->up);
		else
			evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
	} else {
		if (c->reusable)
			resp_follow(c);
		relay(c->up, c->down);
		/* The app keeps its side (we took the client's "close" away):
		 * we close the client's once the answer is out, as it asked. */
		if (!at_eof && c->reusable && c->client_close && c->rs.state == FWD_RS_DONE &&
		    up_keep(c))
			return conn_progress(c);
	}
	return 0;
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	conn_read(arg, bev, 0);
}

/* Called when bev's output drained to half of FWD_BUF_HIGH (or below). */
static void write_cb(struct bufferevent *bev, void *arg)
{
	struct fwd_conn *c = arg;
	struct bufferevent *other;
	int other_eof;

	if (c->state == CONN_REFUSED) {
		/* The answer is out: end our side, drop the rest until EOF. */
		if (!c->down_shut && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
			shutdown(bufferevent_getfd(bev), SHUT_WR);
			c->down_shut = 1;
		}
		return;
	}
	if (c->state != CONN_RELAY)
		return;
	other = bev == c->down ? c->up : c->down;
	other_eof = bev == c->down ? c->up_eof : c->down_eof;
	if (other && !other_eof && !(bufferevent_get_enabled(other) & EV_READ))
		bufferevent_enable(other, EV_READ);
	conn_progress(c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct fwd_conn *c = arg;
	int is_down = bev == c->down;

	if (c->state != CONN_RELAY) {
		/* A head that never came, a refused client gone or too slow. */
		if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
			conn_free(c);
		return;
	}
	if (what & BEV_EVENT_CONNECTED) {
		c->connected = 1;
		conn_progress(c);
		return;
	}
	if (!is_down && c->up_reused && c->rs.seen == 0 && (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) &&
	    evbuffer_get_length(bufferevent_get_input(bev)) == 0) {
		/* The kept connection was closed before a byte of the answer:
		 * the request (a bodiless head) goes again on a new one. */
		if (up_connect(c) < 0)
			conn_free(c);
		return;
	}
	if (what & BEV_EVENT_ERROR) {
		/* Reset or refused (nothing listens on that port inside). */
		conn_free(c);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* Anything still in the input goes out before the half-close. */
		if (conn_read(c, bev, 1))
			return;
		if (is_down) {
			c->down_eof = 1;
			up_keep(c);
		} else {
			c->up_eof = 1;
		}
		conn_progress(c);
	}
}

/* --- a socket in the sandbox's network namespace --- */

struct ns_socket {
	int netns_fd;
	int *fds;
	unsigned want, made;
	int err;
};

static void *ns_socket_thread(void *arg)
{
	struct ns_socket *s = arg;

	if (setns(s->netns_fd, CLONE_NEWNET) < 0) {
		s->err = errno;
		return NULL;
	}
	while (s->made < s->want) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			s->err = errno;
			break;
		}
		s->fds[s->made++] = fd;
	}
	return NULL;
}

int fwd_sockets_in_netns(int netns_fd, int *fds, unsigned n)
{
	struct ns_socket s = { .netns_fd = netns_fd, .fds = fds, .want = n };
	pthread_t t;
	int rc;

	if (netns_fd < 0 || n == 0) {
		errno = netns_fd < 0 ? EBADF : EINVAL;
		return -1;
	}
	rc = pthread_create(&t, NULL, ns_socket_thread, &s);
	if (rc != 0) {
		errno = rc;
		return -1;
	}
	pthread_join(t, NULL);
	if (s.made == 0) {
		errno = s.err ? s.err : EIO;
		return -1;
	}
	return (int)s.made;
}

int fwd_socket_in_netns(int netns_fd)
{
	int fd;

	return fwd_sockets_in_netns(netns_fd, &fd, 1) < 0 ? -1 : fd;
}

/* A socket in f's sandbox netns: a spare one, else FWD_SPARE new ones. */
static int fwd_take_socket(struct fwd *f)
{
	int n;

	if (f->nspare == 0) {
		n = fwd_sockets_in_netns(rt_netns_fd(f->sb->rt), f->spare, FWD_SPARE);
		if (n < 0)
			return -1;
		f->nspare = (unsigned)n;
	}
	return f->spare[--f->nspare];
}

/* --- the first request head: the secret and the caps --- */

int fwd_head_take(char *head, size_t *len, const char *name, char *value, size_t vsz)
{
	size_t nlen = strlen(name), w, r;
	int found = 0;
	char *eol;

	if (vsz)
		value[0] = '\0';
	/* The request line stays. */
	eol = memmem(head, *len, "\r\n", 2);
	if (!eol)
		return 0;
	w = r = (size_t)(eol - head) + 2;
	while (r < *len) {
		size_t end, l;

		eol = memmem(head + r, *len - r, "\r\n", 2);
		end = eol ? (size_t)(eol - head) + 2 : *len;
		l = end - r;
		if (l > nlen && head[r + nlen] == ':' && strncasecmp(head + r, name, nlen) == 0) {
			if (!found++ && vsz) {
				const char *v = head + r + nlen + 1;
				size_t vl = l - nlen - 1 - (eol ? 2 : 0);

				while (vl && (*v == ' ' || *v == '\t'))
					v++, vl--;
				while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
					vl--;
				if (vl >= vsz)
					vl = vsz - 1;
				memcpy(value, v, vl);
				value[vl] = '\0';
			}
		} else {
			memmove(head + w, head + r, l);
			w += l;
		}
		r = end;
	}
	*len = w;
	return found;
}

/* --- the framing of an answer (forward.h) --- */

void fwd_resp_init(struct fwd_resp *rs, int head_request)
{
	memset(rs, 0, sizeof(*rs));
	rs->nobody = head_request;
}

/* The value of header line l (after "name:"), spaces trimmed, in place. */
static char *rs_value(char *l, size_t name_len)
{
	char *v = l + name_len, *e;

	while (*v == ' ' || *v == '\t')
		v++;
	e = v + strlen(v);
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	return v;
}

/* rs->line holds a whole line (without its LF): act on it. */
static void rs_line(struct fwd_resp *rs)
{
	char *l = rs->line, *v, *end;
	size_t n = rs->ll;
	unsigned long long size;
	int64_t cl;
	int code;

	if (n && l[n - 1] == '\r')
		n--;
	l[n] = '\0';
	rs->ll = 0;
	if (rs->line_over) {
		/* A long header line (a cookie, a policy) that says nothing about
		 * the framing is skipped; any other long line is not followed. */
		rs->line_over = 0;
		if (rs->state != FWD_RS_HEADER || strncasecmp(l, "Content-Length:", 15) == 0 ||
		    strncasecmp(l, "Transfer-Encoding:", 18) == 0 ||
		    strncasecmp(l, "Connection:", 11) == 0)
			rs->state = FWD_RS_RAW;
		return;
	}
	switch (rs->state) {
	case FWD_RS_STATUS:
		if (n < 12 || strncmp(l, "HTTP/1.1 ", 9) != 0 || strspn(l + 9, "0123456789") != 3 ||
		    (l[12] != ' ' && l[12] != '\0')) {
			rs->state = FWD_RS_RAW;
			break;
		}
		code = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
		if (code < 200) {   /* 1xx: more answers follow (101: not HTTP after) */
			rs->state = FWD_RS_RAW;
			break;
		}
		if (code == 204 || code == 304)
			rs->nobody = 1;
		rs->state = FWD_RS_HEADER;
		break;
	case FWD_RS_HEADER:
		if (n == 0) {
			if (rs->nobody)
				rs->state = FWD_RS_DONE;
			else if (rs->chunked && !rs->has_length)
				rs->state = FWD_RS_CHUNK_SIZE;
			else if (rs->has_length && !rs->chunked)
				rs->state = rs->remain ? FWD_RS_BODY : FWD_RS_DONE;
			else   /* until EOF, or both lengths */
				rs->state = FWD_RS_RAW;
		} else if (strncasecmp(l, "Content-Length:", 15) == 0) {
			v = rs_value(l, 15);
			if (rs->has_length || !*v || strspn(v, "0123456789") != strlen(v) ||
			    util_parse_i64(v, 0, INT64_MAX, &cl) < 0) {
				rs->state = FWD_RS_RAW;
				break;
			}
			rs->has_length = 1;
			rs->remain = cl;
		} else if (strncasecmp(l, "Transfer-Encoding:", 18) == 0) {
			v = rs_value(l, 18);
			if (rs->chunked || strcasecmp(v, "chunked") != 0)
				rs->state = FWD_RS_RAW;
			rs->chunked = 1;
		} else if (strncasecmp(l, "Connection:", 11) == 0) {
			v = rs_value(l, 11);
			if (strcasestr(v, "close") || strcasestr(v, "upgrade"))
				rs->state = FWD_RS_RAW;
		}
		break;
	case FWD_RS_CHUNK_SIZE:
		n = strcspn(l, "; \t");
		if (n == 0 || n > 15 || strspn(l, "0123456789abcdefABCDEF") < n) {
			rs->state = FWD_RS_RAW;
			break;
		}
		l[n] = '\0';
		size = strtoull(l, &end, 16);
		rs->remain = (int64_t)size;
		rs->state = size ? FWD_RS_CHUNK_DATA : FWD_RS_TRAILER;
		break;
	case FWD_RS_CHUNK_END:
		rs->state = n == 0 ? FWD_RS_CHUNK_SIZE : FWD_RS_RAW;
		break;
	case FWD_RS_TRAILER:
		if (n == 0)
			rs->state = FWD_RS_DONE;
		break;
	default:
		rs->state = FWD_RS_RAW;
		break;
	}
}

size_t fwd_resp_take(struct fwd_resp *rs, const char *p, size_t n)
{
	size_t n0 = n;

	while (n && rs->state != FWD_RS_RAW && rs->state != FWD_RS_DONE) {
		if (rs->state == FWD_RS_BODY || rs->state == FWD_RS_CHUNK_DATA) {
			size_t k = (uint64_t)rs->remain < n ? (size_t)rs->remain : n;

			p += k;
			n -= k;
			rs->remain -= (int64_t)k;
			if (rs->remain == 0)
				rs->state = rs->state == FWD_RS_BODY ? FWD_RS_DONE : FWD_RS_CHUNK_END;
			continue;
		}
		if (*p == '\n') {
			rs_line(rs);
		} else if (rs->ll < sizeof(rs->line) - 1) {
			rs->line[rs->ll++] = *p;
		} else {
			rs->line_over = 1;
		}
		p++;
		n--;
	}
	if (rs->state == FWD_RS_RAW)
		n = 0;
	rs->seen += n0 - n;
	return n0 - n;
}

enum fwd_rs fwd_resp_feed(struct fwd_resp *rs, const char *p, size_t n)
{
	size_t k = fwd_resp_take(rs, p, n);

	rs->seen += n - k;
	if (k < n && rs->state == FWD_RS_DONE)   /* bytes after the answer */
		rs->state = FWD_RS_RAW;
	return rs->state;
}

/* Answer the client of c ourselves (status and JSON error, connection
 * close) and drop whatever else it sends; c is freed at its EOF or after
 * FWD_HEAD_TIMEOUT_S. */
static void refusal_add(struct evbuffer *out, enum sbx_ecode code, json_t *details,
			const char *msg);

static void __attribute__((format(printf, 4, 5)))
conn_refuse(struct fwd_conn *c, enum sbx_ecode code, json_t *details, const char *fmt, ...)
{
	struct timeval tv = { FWD_HEAD_TIMEOUT_S, 0 };
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->state = CONN_REFUSED;
	refusal_add(bufferevent_get_output(c->down), code, details, msg);
	bufferevent_set_timeouts(c->down, &tv, &tv);
	bufferevent_enable(c->down, EV_READ | EV_WRITE);
}

/* Which cap a new connection of f would pass; NULL when none. */
static const char *conn_over_cap(const struct fwd *f, int64_t *limit, unsigned *open)
{
	const struct sbx_conf *cf = f->a->conf;
	unsigned sandbox = 0, tenant = 0;

	for (const struct fwd *o = forwarders; o; o = o->next) {
		if (strcmp(o->tenant, f->tenant) != 0)
			continue;
		tenant += o->nconns;
		if (strcmp(o->key, f->key) == 0)
			sandbox += o->nconns;
	}
	if (sandbox >= cf->agent.max_forward_conns_per_sandbox) {
		*limit = cf->agent.max_forward_conns_per_sandbox;
		*open = sandbox;
		return "sandbox";
	}
	if (tenant >= cf->agent.max_forward_conns_per_tenant) {
		*limit = cf->agent.max_forward_conns_per_tenant;
		*open = tenant;
		return "tenant";
	}
	if (node_conns >= cf->agent.max_forward_conns) {
		*limit = cf->agent.max_forward_conns;
		*open = node_conns;
		return "node";
	}
	return NULL;
}

/* The head is complete (head, len: secret line removed): check the caps,
 * connect to the sandbox's port and start relaying. */
/* Whether header name appears in the head (len bytes). */
static int head_has(const char *head, size_t len, const char *name)
{
	size_t nlen = strlen(name);
	const char *p = memmem(head, len, "\r\n", 2), *end = head + len;

	while (p && p + 2 < end) {
		p += 2;
		if ((size_t)(end - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0)
			return 1;
		p = memmem(p, (size_t)(end - p), "\r\n", 2);
	}
	return 0;
}

/* A head whose connection to the app may be reused (forward.h): an
 * HTTP/1.1 request without a body or an upgrade. Its Connection headers
 * are removed (nginx's "close" would end the app's side; the forwarder
 * closes the client's instead, *close). *is_head: HEAD. */
static int head_reusable(char *head, size_t *len, int *is_head, int *close)
{
	const char *eol = memmem(head, *len, "\r\n", 2);
	static const char v11[] = " HTTP/1.1";
	char v[64];

	*is_head = *close = 0;
	if (!eol || (size_t)(eol - head) < sizeof(v11) ||
	    memcmp(eol - (sizeof(v11) - 1), v11, sizeof(v11) - 1) != 0 ||
	    strncmp(head, "CONNECT ", 8) == 0 || head_has(head, *len, "Upgrade") ||
	    head_has(head, *len, "Content-Length") || head_has(head, *len, "Transfer-Encoding"))
		return 0;
	*is_head = strncmp(head, "HEAD ", 5) == 0;
	if (fwd_head_take(head, len, "Connection", v, sizeof(v)))
		*close = strcasestr(v, "close") != NULL;
	return 1;
}

/* A new connection to the app for c, connecting; c->head (a resend) is
 * queued on it when set. 0, or -1 (errno). */
static int up_connect(struct fwd_conn *c)
{
	struct fwd *f = c->f;
	struct sockaddr_in to;
	struct bufferevent *up;
	int upfd;

	if (!agent_sb_container(f->sb)) {
		errno = ESRCH;
		return -1;
	}
	upfd = fwd_take_socket(f);
	if (upfd < 0)
		return -1;
	up = bufferevent_socket_new(f->a->base, upfd, BEV_OPT_CLOSE_ON_FREE);
	if (!up) {
		close(upfd);
		errno = ENOMEM;
		return -1;
	}
	if (c->up)
		bufferevent_free(c->up);
	c->up = up;
	c->connected = 0;
	c->up_reused = 0;
	bufferevent_setcb(up, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(up, EV_READ, 0, FWD_BUF_HIGH);
	bufferevent_setwatermark(up, EV_WRITE, FWD_BUF_HIGH / 2, 0);
	memset(&to, 0, sizeof(to));
	to.sin_family = AF_INET;
	to.sin_port = htons((uint16_t)f->port);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((c->head && evbuffer_add(bufferevent_get_output(up), c->head, c->head_len) < 0) ||
	    bufferevent_socket_connect(up, (struct sockaddr *)&to, sizeof(to)) < 0)
		return -1;
	bufferevent_enable(up, EV_READ | EV_WRITE);
	return 0;
}

/* The head is complete (head, len: secret line removed): check the caps,
 * connect to the sandbox's port (or take a kept connection) and start
 * relaying. */
static void conn_start(struct fwd_conn *c, char *head, size_t len)
{
	struct fwd *f = c->f;
	struct fwd_idle *idle;
	const char *scope;
	unsigned open;
	int64_t limit;
	int is_head;

	scope = conn_over_cap(f, &limit, &open);
	if (scope) {
		log_warn("forwarder %s port %d: %u connections open for the %s, its limit; refusing one",
			 f->key, f->port, open, scope);
		conn_refuse(c, SBX_E_NO_CAPACITY,
			    json_pack("{s:s, s:I}", "scope", scope, "limit", (json_int_t)limit),
			    "too many open preview connections (%s limit %lld)", scope,
			    (long long)limit);
		return;
	}
	if (!agent_sb_container(f->sb)) {
		conn_refuse(c, SBX_E_NODE_UNAVAILABLE, NULL, "the sandbox is not running");
		return;
	}
	c->reusable = head_reusable(head, &len, &is_head, &c->client_close);
	if (c->gw && !c->reusable) {
		conn_refuse(c, SBX_E_VALIDATION, NULL,
			    "the preview gateway takes bodiless HTTP/1.1 requests without an upgrade only");
		return;
	}
	if (c->reusable) {
		fwd_resp_init(&c->rs, is_head);
		c->head = malloc(len);
		if (c->head) {
			memcpy(c->head, head, len);
			c->head_len = len;
		} else {
			c->reusable = 0;
		}
	}
	idle = c->reusable ? f->idle : NULL;
	if (idle) {
		f->idle = idle->next;
		f->nidle--;
		c->up = idle->bev;
		free(idle);
		c->connected = 1;
		c->up_reused = 1;
		bufferevent_set_timeouts(c->up, NULL, NULL);
		bufferevent_setcb(c->up, read_cb, write_cb, event_cb, c);
		if (evbuffer_add(bufferevent_get_output(c->up), head, len) < 0) {
			bufferevent_free(c->up);
			c->up = NULL;
			conn_refuse(c, SBX_E_NODE_UNAVAILABLE, NULL, "out of memory");
			return;
		}
		bufferevent_enable(c->up, EV_READ | EV_WRITE);
	} else {
		/* up_connect queues c->head (the reusable case) itself. */
		if (up_connect(c) < 0 ||
		    (!c->head && evbuffer_add(bufferevent_get_output(c->up), head, len) < 0)) {
			struct sbx_err e = { 0 };

			err_sys(&e, errno, "forwarder %s port %d: cannot reach the sandbox", f->key,
				f->port);
			log_warn("%s", e.msg);
			if (c->up)
				bufferevent_free(c->up);
			c->up = NULL;
			/* Out of fds (or memory) here is the node's limit, not the sandbox's. */
			if (capacity_classify(&e))
				conn_refuse(c, SBX_E_NO_CAPACITY, NULL, "%s", e.msg);
			else
				conn_refuse(c, SBX_E_NODE_UNAVAILABLE, NULL, "the sandbox cannot be reached");
			return;
		}
	}
	if (!c->kept)
		node_pending--;
	c->state = CONN_RELAY;
	f->nconns++;
	node_conns++;
	agent_sb_stream_begin(f->sb, &c->st);
	bufferevent_set_timeouts(c->down, NULL, NULL);
	if (evbuffer_get_length(bufferevent_get_input(c->down)))
		c->reusable = 0;   /* more than the head already */
	relay(c->down, c->up);
}

int fwd_target_parse(const char *v, char *key, int64_t *generation, int *port)
{
	char tenant[64], id[64], num[24];
	const char *s1 = strchr(v, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
	const char *s3 = s2 ? strchr(s2 + 1, '/') : NULL;
	int64_t p;

	if (!s3 || (size_t)(s1 - v) >= sizeof(tenant) || (size_t)(s2 - s1 - 1) >= sizeof(id) ||
	    (size_t)(s3 - s2 - 1) >= sizeof(num))
		return -1;
	memcpy(tenant, v, (size_t)(s1 - v));
	tenant[s1 - v] = '\0';
	memcpy(id, s1 + 1, (size_t)(s2 - s1 - 1));
	id[s2 - s1 - 1] = '\0';
	memcpy(num, s2 + 1, (size_t)(s3 - s2 - 1));
	num[s3 - s2 - 1] = '\0';
	if (!ids_valid_tenant(tenant) || !ids_valid_sandbox(id) ||
	    strspn(num, "0123456789") != strlen(num) || util_parse_i64(num, 0, INT64_MAX, generation) < 0 ||
	    strspn(s3 + 1, "0123456789") != strlen(s3 + 1) || util_parse_i64(s3 + 1, 1, 65535, &p) < 0 ||
	    agent_key(key, AGENT_KEY_MAX, tenant, id) < 0)
		return -1;
	*port = (int)p;
	return 0;
}

/* A gateway request's head (secret taken): take X-Sbx-Target and attach c
 * to the forwarder it names. 0, or -1 (c answered). */
static int gw_attach(struct fwd_conn *c, char *head, size_t *len)
{
	char v[256], key[AGENT_KEY_MAX];
	int64_t generation;
	struct fwd *f;
	struct fwd_conn **pp = &gw.conns;
	int port;

	if (fwd_head_take(head, len, "X-Sbx-Target", v, sizeof(v)) != 1 ||
	    fwd_target_parse(v, key, &generation, &port) < 0) {
		conn_refuse(c, SBX_E_VALIDATION, NULL, "a gateway request names one X-Sbx-Target");
		return -1;
	}
	if (evbuffer_get_length(bufferevent_get_input(c->down))) {
		conn_refuse(c, SBX_E_VALIDATION, NULL, "bytes after a bodiless request head");
		return -1;
	}
	f = fwd_find(key, port);
	if (!f || f->generation != generation || !agent_sb_container(f->sb)) {
		conn_refuse(c, SBX_E_NODE_UNAVAILABLE, NULL, "port %d of that sandbox is not forwarded",
			    port);
		return -1;
	}
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	if (c->kept)
		gw.nkept--;
	gw.requests++;
	c->f = f;
	c->next = f->conns;
	f->conns = c;
	return 0;
}

/* More of the first request head arrived: once it is complete, check the
 * node secret (not on the local listener) and remove it, then start. */
static void head_read(struct fwd_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->down);
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char secret[256];
	auto_free char *head = NULL;
	size_t len;
	int n;

	if (end.pos < 0) {
		if (evbuffer_get_length(in) >= FWD_HEAD_MAX)
			conn_refuse(c, SBX_E_VALIDATION, NULL, "request head too large");
		return;
	}
	len = (size_t)end.pos + 4;
	if (len > FWD_HEAD_MAX) {
		conn_refuse(c, SBX_E_VALIDATION, NULL, "request head too large");
		return;
	}
	head = malloc(len);
	if (!head || evbuffer_remove(in, head, len) != (int)len) {
		conn_refuse(c, SBX_E_NODE_UNAVAILABLE, NULL, "out of memory");
		return;
	}
	n = fwd_head_take(head, &len, "X-Sbx-Node-Secret", secret, sizeof(secret));
	if (!c->local && (n != 1 || !httpd_secret_equal(secret, (c->f ? c->f->a : gw.a)->conf->cluster.secret))) {
		if (c->gw)
			log_warn("gateway: a request without the node secret; refused");
		else
			log_warn("forwarder %s port %d: a connection without the node secret; refused",
				 c->f->key, c->f->port);
		conn_refuse(c, SBX_E_UNAUTHORIZED, NULL, "missing or wrong node secret");
		return;
	}
	if (c->gw && gw_attach(c, head, &len) < 0)
		return;
	conn_start(c, head, len);
}

/* A new client connection of f (NULL: of the gateway) on fd, reading its
 * first head. */
static void conn_accept(struct agent *a, struct fwd *f, int fd, int local)
{
	struct timeval tv = { FWD_HEAD_TIMEOUT_S, 0 };
	struct fwd_conn *c;

	if (node_pending >= FWD_MAX_PENDING) {
		log_warn("forwarders: %u connections still sending their head; closing one",
			 node_pending);
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->f = f;
	c->gw = !f;
	c->state = CONN_HEAD;
	c->local = local;
	node_pending++;
	if (f) {
		c->next = f->conns;
		f->conns = c;
	} else {
		c->next = gw.conns;
		gw.conns = c;
	}
	c->down = bufferevent_socket_new(a->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->down) {
		close(fd);
		conn_free(c);
		return;
	}
	bufferevent_setcb(c->down, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(c->down, EV_READ, 0, FWD_BUF_HIGH);
	bufferevent_setwatermark(c->down, EV_WRITE, FWD_BUF_HIGH / 2, 0);
	bufferevent_set_timeouts(c->down, &tv, &tv);
	bufferevent_enable(c->down, EV_READ | EV_WRITE);
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	struct fwd *f = arg;

	/* Init died: the container is released (and f with it) at the next
	 * turn of the loop; until then its network namespace is not usable. */
	if (!agent_sb_container(f->sb)) {
		close(fd);
		return;
	}
	conn_accept(f->a, f, fd, lev == f->lev_local);
}

static void gw_accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
			 int salen, void *arg)
{
	gw.accepted++;
	conn_accept(arg, NULL, fd, 0);
}

/* The 503 of a forwarder (conn_refuse's answer) into out. */
static void refusal_add(struct evbuffer *out, enum sbx_ecode code, json_t *details, const char *msg)
{
	auto_free char *body = NULL;
	const char *reason, *txt;
	json_t *j;
	int status = err_status(code);

	j = json_pack("{s:{s:s, s:s, s:o}}", "error", "code", err_name(code), "message", msg,
		      "details", details ? details : json_object());
	body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	txt = body ? body : "";
	reason = status == 503 ? "Service Unavailable" : status == 401 ? "Unauthorized" : "Bad Request";
	evbuffer_add_printf(out,
			    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			    "Content-Length: %zu\r\n%sConnection: close\r\n\r\n%s\n",
			    status, reason, strlen(txt) + 1,
			    status == 503 ? "Retry-After: 1\r\n" : "", txt);
}

/* accept failed for want of fds: the reserve fd makes room for the
 * connection waiting first, which gets 503 NO_CAPACITY (its request is
 * not read) and is closed; the reserve is taken again. */
static void accept_overflow(struct evconnlistener *lev, int err)
{
	struct evbuffer *out;
	struct sbx_err e = { 0 };
	int fd;

	if (reserve_fd < 0)
		return;
	close(reserve_fd);
	reserve_fd = -1;
	fd = accept4(evconnlistener_get_fd(lev), NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd >= 0) {
		err_sys(&e, err, "accept of a preview connection");
		capacity_classify(&e);
		out = evbuffer_new();
		if (out) {
			refusal_add(out, e.code, NULL, e.msg);
			evbuffer_write(out, fd);   /* one small write; the rest is lost */
			evbuffer_free(out);
		}
		shutdown(fd, SHUT_WR);
		close(fd);
	}
	reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();

	/* EMFILE and friends: answer the first waiting one, pause briefly
	 * instead of spinning. */
	log_warn("forwarder: accept failed: %s", strerror(err));
	if (err == EMFILE || err == ENFILE)
		accept_overflow(lev, err);
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

/* A listener on host:port (0: any) calling cb with arg into *lev, its
 * address into addr[80]. 0 or -1 with e. */
static int listen_on(struct agent *a, const char *host, int port, evconnlistener_cb cb, void *arg,
		     struct evconnlistener **lev, char *addr, struct sbx_err *e)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	char ip[INET6_ADDRSTRLEN];
	int n, v6;

	if (tcplisten_sockaddr(host, port, &ss, &len) < 0)
		return err_set(e, SBX_E_INTERNAL, "listen host '%s' is not numeric", host);
	v6 = ss.ss_family == AF_INET6;
	*lev = evconnlistener_new_bind(a->base, cb, arg,
					 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
						 LEV_OPT_REUSEABLE,
					 128, (struct sockaddr *)&ss, (int)len);
	if (!*lev)
		return err_sys(e, errno, "cannot listen for a forwarder on '%s' port %d", host, port);
	evconnlistener_set_error_cb(*lev, accept_error_cb);
	len = sizeof(ss);
	if (getsockname(evconnlistener_get_fd(*lev), (struct sockaddr *)&ss, &len) < 0)
		return err_sys(e, errno, "getsockname of a forwarder");
	if (!inet_ntop(v6 ? AF_INET6 : AF_INET, v6 ? (void *)&in6->sin6_addr : (void *)&in4->sin_addr,
		       ip, sizeof(ip)))
		return err_sys(e, errno, "inet_ntop");
	n = snprintf(addr, 80, v6 ? "[%s]:%u" : "%s:%u", ip,
		     (unsigned)ntohs(v6 ? in6->sin6_port : in4->sin_port));
	if (n < 0 || n >= 80)
		return err_set(e, SBX_E_INTERNAL, "forwarder address too long");
	return 0;
}

int fwd_open(struct agent *a, struct agent_sb *sb, int port, int local, char *address,
	     size_t addrsz, int *created, struct sbx_err *e)
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
		if (tcplisten_parse(a->conf->agent.listen, host, sizeof(host), &lport) < 0)
			return err_set(e, SBX_E_INTERNAL, "agent.listen '%s' is unusable",
				       a->conf->agent.listen);
		f = calloc(1, sizeof(*f));
		if (!f)
			return err_sys(e, ENOMEM, "forwarder");
		f->a = a;
		f->sb = sb;
		snprintf(f->key, sizeof(f->key), "%s", sb->key);
		snprintf(f->tenant, sizeof(f->tenant), "%s", sb->tenant);
		f->generation = sb->generation;
		f->run = sb->run;
		f->port = port;
		if (listen_on(a, host, 0, accept_cb, f, &f->lev, f->address, e) < 0) {
			fwd_free(f);
			return -1;
		}
		f->next = forwarders;
		forwarders = f;
		*created = 1;
		log_info("forwarder %s port %d listening on %s (generation %lld)", f->key, port,
			 f->address, (long long)f->generation);
	}
	if (local && !f->lev_local) {
		if (listen_on(a, "127.0.0.1", 0, accept_cb, f, &f->lev_local, f->local_address, e) < 0) {
			f->local_address[0] = '\0';
			return -1;
		}
		log_info("forwarder %s port %d: local listener on %s", f->key, port, f->local_address);
	}
	n = snprintf(address, addrsz, "%s", local ? f->local_address : f->address);
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
		if (json_array_append_new(arr, json_pack("{s:i, s:s, s:s, s:I, s:i}", "port", f->port,
							 "address", f->address, "localAddress",
							 f->local_address, "generation",
							 (json_int_t)f->generation, "connections",
							 (int)f->nconns)) < 0) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

json_t *fwd_counts_json(struct agent *a, const char *key, const char *tenant)
{
	const struct sbx_conf *cf = a->conf;
	unsigned sandbox = 0, ten = 0;

	for (const struct fwd *f = forwarders; f; f = f->next) {
		if (strcmp(f->tenant, tenant) != 0)
			continue;
		ten += f->nconns;
		if (strcmp(f->key, key) == 0)
			sandbox += f->nconns;
	}
	return json_pack("{s:{s:s, s:I, s:I, s:i}, s:{s:i, s:I}, s:{s:i, s:I}, s:{s:i, s:I, s:i}}",
			 "gateway", "address", gw.address, "accepted", (json_int_t)gw.accepted,
			 "requests", (json_int_t)gw.requests, "kept", (int)gw.nkept, "sandbox", "open",
			 (int)sandbox, "limit", (json_int_t)cf->agent.max_forward_conns_per_sandbox,
			 "tenant", "open", (int)ten, "limit",
			 (json_int_t)cf->agent.max_forward_conns_per_tenant, "node", "open",
			 (int)node_conns, "limit", (json_int_t)cf->agent.max_forward_conns,
			 "pending", (int)node_pending);
}

/* The gateway's unix socket at path ("" none), made anew, mode 0666. 0 or
 * -1 with e. */
static int gw_listen_unix(struct agent *a, const char *path, struct sbx_err *e)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int n;

	if (!path[0])
		return 0;
	n = snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
	if (n < 0 || (size_t)n >= sizeof(un.sun_path))
		return err_set(e, SBX_E_INTERNAL, "agent.preview_gateway_socket '%s' is too long", path);
	if (unlink(path) < 0 && errno != ENOENT)
		return err_sys(e, errno, "cannot remove '%s'", path);
	gw.lev_unix = evconnlistener_new_bind(a->base, gw_accept_cb, a,
					      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 128,
					      (struct sockaddr *)&un, (int)sizeof(un));
	if (!gw.lev_unix)
		return err_sys(e, errno, "cannot listen on '%s'", path);
	evconnlistener_set_error_cb(gw.lev_unix, accept_error_cb);
	if (chmod(path, 0666) < 0)
		return err_sys(e, errno, "cannot chmod '%s'", path);
	log_info("preview gateway also on unix:%s", path);
	return 0;
}

int fwd_gateway_start(struct agent *a, struct sbx_err *e)
{
	char host[INET6_ADDRSTRLEN + 2];
	int port;

	gw.a = a;
	if (reserve_fd < 0)
		reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (!a->conf->agent.preview_gateway[0])
		return 0;
	if (tcplisten_parse(a->conf->agent.preview_gateway, host, sizeof(host), &port) < 0 || port == 0)
		return err_set(e, SBX_E_INTERNAL, "agent.preview_gateway '%s' is not host:port",
			       a->conf->agent.preview_gateway);
	if (listen_on(a, host, port, gw_accept_cb, a, &gw.lev, gw.address, e) < 0)
		return -1;
	log_info("preview gateway listening on %s", gw.address);
	return gw_listen_unix(a, a->conf->agent.preview_gateway_socket, e);
}

const char *fwd_gateway_address(void)
{
	return gw.address;
}

void fwd_release_all(void)
{
	while (forwarders)
		fwd_free(forwarders);
	while (gw.conns)
		conn_free(gw.conns);
	if (gw.lev)
		evconnlistener_free(gw.lev);
	if (gw.lev_unix)
		evconnlistener_free(gw.lev_unix);
	gw.lev = gw.lev_unix = NULL;
	gw.address[0] = '\0';
	if (reserve_fd >= 0)
		close(reserve_fd);
	reserve_fd = -1;
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

void fwd_stats(unsigned *nfwd, unsigned *conns)
{
	unsigned n = 0;

	for (const struct fwd *f = forwarders; f; f = f->next)
		n++;
	*nfwd = n;
	*conns = node_conns;
}
