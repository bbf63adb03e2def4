#include "ws.h"
#include "codec.h"
#include "log.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_PING_MS 30000          /* a ping this often keeps idle proxies and NATs open */
#define WS_READ_CHUNK (16 * 1024)
#define WS_LOW_MARK (64 * 1024)   /* on_drained below this */

/* --- SHA-1 (FIPS 180-4), for the accept key only ------------------------- */

static uint32_t rol32(uint32_t x, int n)
{
	return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
	uint32_t w[80], a, b, c, d, e2, f, k, t;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (int i = 16; i < 80; i++)
		w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	a = h[0], b = h[1], c = h[2], d = h[3], e2 = h[4];
	for (int i = 0; i < 80; i++) {
		if (i < 20)
			f = (b & c) | (~b & d), k = 0x5A827999;
		else if (i < 40)
			f = b ^ c ^ d, k = 0x6ED9EBA1;
		else if (i < 60)
			f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
		else
			f = b ^ c ^ d, k = 0xCA62C1D6;
		t = rol32(a, 5) + f + e2 + k + w[i];
		e2 = d, d = c, c = rol32(b, 30), b = a, a = t;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e2;
}

void ws_sha1(const void *data, size_t n, unsigned char out[20])
{
	uint32_t h[5] = { 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0 };
	const unsigned char *p = data;
	unsigned char last[128];
	size_t full = n / 64 * 64, rest = n - full, tail;
	uint64_t bits = (uint64_t)n * 8;

	for (size_t off = 0; off < full; off += 64)
		sha1_block(h, p + off);
	memset(last, 0, sizeof(last));
	memcpy(last, p + full, rest);
	last[rest] = 0x80;
	tail = rest + 1 + 8 <= 64 ? 64 : 128;
	for (int i = 0; i < 8; i++)
		last[tail - 1 - i] = (unsigned char)(bits >> (8 * i));
	sha1_block(h, last);
	if (tail == 128)
		sha1_block(h, last + 64);
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < 4; j++)
			out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

int ws_accept_key(const char *key, char out[WS_ACCEPT_LEN + 1])
{
	char cat[64];
	unsigned char dig[20];
	struct buf raw, b64;
	int rc = -1;

	if (!key || strlen(key) != 24)
		return -1;
	buf_init(&raw, 64);
	buf_init(&b64, 64);
	if (codec_base64_decode(key, 24, &raw) == 0 && raw.len == 16) {
		memcpy(cat, key, 24);
		memcpy(cat + 24, WS_GUID, sizeof(WS_GUID) - 1);
		ws_sha1(cat, 24 + sizeof(WS_GUID) - 1, dig);
		if (codec_base64_encode(dig, sizeof(dig), &b64) == 0 && b64.len == WS_ACCEPT_LEN) {
			memcpy(out, b64.data, WS_ACCEPT_LEN);
			out[WS_ACCEPT_LEN] = '\0';
			rc = 0;
		}
	}
	buf_release(&raw);
	buf_release(&b64);
	return rc;
}

/* --- frames ------------------------------------------------------------------ */

int ws_frame(struct buf *out, int opcode, const void *data, size_t n)
{
	unsigned char h[10];
	size_t hl;

	h[0] = (unsigned char)(0x80 | (opcode & 0x0f));
	if (n < 126) {
		h[1] = (unsigned char)n;
		hl = 2;
	} else if (n <= 0xffff) {
		h[1] = 126;
		h[2] = (unsigned char)(n >> 8);
		h[3] = (unsigned char)n;
		hl = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	if (buf_add(out, h, hl) < 0)
		return -1;
	return n ? buf_add(out, data, n) : 0;
}

void ws_parser_init(struct ws_parser *p, size_t max_message)
{
	memset(p, 0, sizeof(*p));
	p->max_message = max_message;
	buf_init(&p->msg, max_message);
}

void ws_parser_release(struct ws_parser *p)
{
	buf_release(&p->msg);
}

/* Header bytes a frame needs, from what is in p->hdr so far. */
static size_t hdr_need(const struct ws_parser *p)
{
	size_t need = 2;

	if (p->hlen < 2)
		return need;
	if ((p->hdr[1] & 0x7f) == 126)
		need += 2;
	else if ((p->hdr[1] & 0x7f) == 127)
		need += 8;
	if (p->hdr[1] & 0x80)
		need += 4;
	return need;
}

/* The header in p->hdr is complete: check it. 0 or -1 with *cc. */
static int hdr_take(struct ws_parser *p, int *cc)
{
	size_t off = 2;
	unsigned l7 = p->hdr[1] & 0x7f;

	p->fin = !!(p->hdr[0] & 0x80);
	p->op = p->hdr[0] & 0x0f;
	p->masked = !!(p->hdr[1] & 0x80);
	if (l7 == 126) {
		p->len = (uint64_t)p->hdr[2] << 8 | p->hdr[3];
		off = 4;
	} else if (l7 == 127) {
		p->len = 0;
		for (int i = 0; i < 8; i++)
			p->len = p->len << 8 | p->hdr[2 + i];
		off = 10;
	} else {
		p->len = l7;
	}
	if (p->masked)
		memcpy(p->mask, p->hdr + off, 4);
	p->got = 0;
	*cc = WS_CLOSE_PROTOCOL;
	if ((p->hdr[0] & 0x70) || !p->masked)     /* no extensions; clients must mask */
		return -1;
	if (p->op >= 0x8) {
		if (p->op > WS_OP_PONG || !p->fin || p->len > 125)
			return -1;
		return 0;
	}
	if (p->op != WS_OP_CONT && p->op != WS_OP_TEXT && p->op != WS_OP_BINARY)
		return -1;
	if ((p->op == WS_OP_CONT) != (p->msg_op != 0))
		return -1;
	if (p->op != WS_OP_CONT)
		p->msg_op = p->op;
	if (p->len > p->max_message || p->msg.len + p->len > p->max_message) {
		*cc = WS_CLOSE_TOO_BIG;
		return -1;
	}
	return 0;
}

/* The frame's payload is in: a message for the caller? 1, 0, -1 (*cc). */
static int frame_done(struct ws_parser *p, struct ws_msg *m, int *cc)
{
	p->hlen = 0;
	if (p->op >= 0x8) {
		m->op = p->op;
		m->data = (const char *)p->ctl;
		m->len = (size_t)p->len;
		m->code = 0;
		if (p->op == WS_OP_CLOSE) {
			m->code = 1005;
			if (p->len == 1) {
				*cc = WS_CLOSE_PROTOCOL;
				return -1;
			}
			if (p->len >= 2) {
				m->code = p->ctl[0] << 8 | p->ctl[1];
				m->data += 2;
				m->len -= 2;
			}
		}
		return 1;
	}
	if (!p->fin)
		return 0;
	m->op = p->msg_op;
	m->data = p->msg.data ? p->msg.data : "";
	m->len = p->msg.len;
	m->code = 0;
	p->msg_op = -1;   /* delivered: reset on the next call */
	if (m->op == WS_OP_TEXT && !codec_utf8_valid(m->data, m->len)) {
		*cc = WS_CLOSE_BAD_DATA;
		return -1;
	}
	return 1;
}

ssize_t ws_parse(struct ws_parser *p, const char *data, size_t n, struct ws_msg *m, int *got,
		 int *close_code)
{
	size_t used = 0;

	*got = 0;
	if (p->msg_op == -1) {
		buf_reset(&p->msg);
		p->msg_op = 0;
	}
	while (used < n || (p->in_payload && p->got == p->len)) {
		if (!p->in_payload) {
			while (p->hlen < hdr_need(p) && used < n)
				p->hdr[p->hlen++] = (unsigned char)data[used++];
			if (p->hlen < hdr_need(p))
				break;
			if (hdr_take(p, close_code) < 0)
				return -1;
			p->in_payload = 1;
		}
		if (p->got < p->len) {
			size_t take = n - used;
			if ((uint64_t)take > p->len - p->got)
				take = (size_t)(p->len - p->got);
			if (p->op >= 0x8) {
				for (size_t i = 0; i < take; i++)
					p->ctl[p->got + i] = (unsigned char)data[used + i] ^
							     p->mask[(p->got + i) & 3];
			} else {
				unsigned char tmp[4096];
				for (size_t done = 0; done < take;) {
					size_t k = take - done < sizeof(tmp) ? take - done : sizeof(tmp);
					for (size_t i = 0; i < k; i++)
						tmp[i] = (unsigned char)data[used + done + i] ^
							 p->mask[(p->got + done + i) & 3];
					if (buf_add(&p->msg, tmp, k) < 0) {
						*close_code = WS_CLOSE_TOO_BIG;
						return -1;
					}
					done += k;
				}
			}
			p->got += take;
			used += take;
			if (p->got < p->len)
				break;
		}
		{
			int rc;

			p->in_payload = 0;
			rc = frame_done(p, m, close_code);
			if (rc < 0)
				return -1;
			if (rc == 1) {
				*got = 1;
				break;
			}
		}
	}
	return (ssize_t)used;
}

/* --- the connection ---------------------------------------------------------- */

struct ws_conn {
	struct bufferevent *bev;
	struct event *ping;
	struct ws_parser parser;
	const struct ws_conn_ops *ops;
	void *arg;
	struct httpd_upgrade *u;
	int closing;      /* our close frame is queued: end once written */
	int paused;
	int busy;         /* inside a callback of ours */
	int dead;         /* ended meanwhile: free when the callback returns */
	int notified;     /* on_close ran (or must not) */
};

static void conn_release(struct ws_conn *c)
{
	if (c->ping)
		event_free(c->ping);
	if (c->bev)
		bufferevent_free(c->bev);
	ws_parser_release(&c->parser);
	if (c->u)
		httpd_upgrade_close(c->u);
	free(c);
}

/* The connection is over: tell the owner once, then free. */
static void conn_end(struct ws_conn *c)
{
	if (!c->notified) {
		c->notified = 1;
		c->busy++;
		c->ops->on_close(c->arg);
		c->busy--;
	}
	if (c->busy)
		c->dead = 1;
	else
		conn_release(c);
}

void ws_conn_free(struct ws_conn *c)
{
	if (!c)
		return;
	c->notified = 1;
	if (c->busy)
		c->dead = 1;
	else
		conn_release(c);
}

static int send_frame(struct ws_conn *c, int op, const void *data, size_t n)
{
	struct buf b;
	int rc;

	buf_init(&b, n + 16);
	rc = ws_frame(&b, op, data, n);
	if (rc == 0)
		rc = bufferevent_write(c->bev, b.data, b.len);
	buf_release(&b);
	return rc;
}

int ws_conn_send(struct ws_conn *c, int op, const void *data, size_t n)
{
	if (c->closing || c->dead)
		return -1;
	return send_frame(c, op, data, n) < 0 ? -1 : 0;
}

size_t ws_conn_queued(const struct ws_conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev));
}

void ws_conn_close(struct ws_conn *c, int code, const char *reason)
{
	unsigned char p[125];
	size_t rl = reason ? strnlen(reason, sizeof(p) - 2) : 0;

	if (c->closing || c->dead)
		return;
	p[0] = (unsigned char)(code >> 8);
	p[1] = (unsigned char)code;
	if (rl)
		memcpy(p + 2, reason, rl);
	send_frame(c, WS_OP_CLOSE, p, rl + 2);
	c->closing = 1;
	bufferevent_disable(c->bev, EV_READ);
	/* the write callback ends it once the frame is out (low mark 0 now) */
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (ws_conn_queued(c) == 0)
		bufferevent_trigger(c->bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

void ws_conn_pause(struct ws_conn *c, int on)
{
	if (c->paused == on || c->closing)
		return;
	c->paused = on;
	if (on) {
		bufferevent_disable(c->bev, EV_READ);
	} else {
		bufferevent_enable(c->bev, EV_READ);
		/* what is buffered already is not a new read event */
		if (evbuffer_get_length(bufferevent_get_input(c->bev)))
			bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
	}
}

/* One message from the client. */
static void conn_message(struct ws_conn *c, const struct ws_msg *m)
{
	switch (m->op) {
	case WS_OP_PING:
		send_frame(c, WS_OP_PONG, m->data, m->len);
		break;
	case WS_OP_PONG:
		break;
	case WS_OP_CLOSE:
		/* echo the code (or none), then end once it is written */
		ws_conn_close(c, m->code == 1005 ? WS_CLOSE_NORMAL : m->code, NULL);
		break;
	default:
		c->busy++;
		c->ops->on_message(c->arg, m->op, m->data, m->len);
		c->busy--;
	}
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct ws_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char tmp[WS_READ_CHUNK];

	c->busy++;
	while (!c->dead && !c->closing && !c->paused) {
		ev_ssize_t n = evbuffer_copyout(in, tmp, sizeof(tmp));
		ssize_t used;
		struct ws_msg m;
		int got, cc;

		if (n <= 0)
			break;
		used = ws_parse(&c->parser, tmp, (size_t)n, &m, &got, &cc);
		if (used < 0) {
			ws_conn_close(c, cc, "protocol error");
			break;
		}
		evbuffer_drain(in, (size_t)used);
		if (got)
			conn_message(c, &m);
	}
	c->busy--;
	if (c->dead && !c->busy)
		conn_release(c);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct ws_conn *c = arg;

	if (c->closing) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			conn_end(c);
		return;
	}
	if (c->ops->on_drained) {
		c->busy++;
		c->ops->on_drained(c->arg);
		c->busy--;
		if (c->dead && !c->busy)
			conn_release(c);
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct ws_conn *c = arg;

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_end(c);
}

static void ping_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ws_conn *c = arg;

	if (!c->closing)
		send_frame(c, WS_OP_PING, NULL, 0);
}

/* The server stops: end now, the owner hears of it. */
static void conn_abort(void *arg)
{
	struct ws_conn *c = arg;

	c->busy = 0;
	conn_end(c);
}

struct ws_conn *ws_conn_new(struct event_base *base, struct httpd_upgrade *u, int fd,
			    const char *extra, size_t extra_len, size_t max_message,
			    const struct ws_conn_ops *ops, void *arg)
{
	static const struct timeval every = { WS_PING_MS / 1000, 0 };
	struct ws_conn *c = calloc(1, sizeof(*c));
	int one = 1, zero = 0;

	if (!c) {
		httpd_upgrade_close(u);
		return NULL;
	}
	c->u = u;
	ws_parser_init(&c->parser, max_message);
	c->ops = ops;
	c->arg = arg;
	/* Keystrokes go out one by one: no Nagle, no cork left from the 101. */
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	evutil_make_socket_nonblocking(fd);
	c->bev = bufferevent_socket_new(base, fd, 0);
	c->ping = event_new(base, -1, EV_PERSIST, ping_cb, c);
	if (!c->bev || !c->ping || event_add(c->ping, &every) < 0 ||
	    (extra_len && evbuffer_add(bufferevent_get_input(c->bev), extra, extra_len) < 0)) {
		conn_release(c);
		return NULL;
	}
	httpd_upgrade_on_abort(u, conn_abort, c);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, WS_LOW_MARK, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (extra_len)
		bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
	return c;
}
