/* A WebSocket on the agent's HTTP server and a real event loop (httpd.c
 * upgrades, ws.c's connection): a client that sends a frame with its
 * request is dropped; the handshake, ping/pong, an echoed message (frames
 * that arrive in one read), the close
 * handshake, and a connection still open when the server stops (its owner
 * hears of it). */
#include "httpd.h"
#include "unit.h"
#include "util.h"
#include "ws.h"

#include <event2/event.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_int closes, messages, upgrades;

static void echo_message(void *arg, int op, const char *data, size_t n)
{
	atomic_fetch_add(&messages, 1);
	ws_conn_send(*(struct ws_conn **)arg, op, data, n);
}

static void echo_closed(void *arg)
{
	atomic_fetch_add(&closes, 1);
	free(arg);
}

static const struct ws_conn_ops echo_ops = { echo_message, echo_closed, NULL };

static struct event_base *loop_base;

static void upgraded_on_loop(void *arg, struct httpd_upgrade *u, int fd, const char *extra,
			     size_t n)
{
	struct ws_conn **slot = malloc(sizeof(*slot));

	(void)arg;
	atomic_fetch_add(&upgrades, 1);
	if (!slot) {
		httpd_upgrade_close(u);
		return;
	}
	*slot = ws_conn_new(loop_base, u, fd, extra, n, 1024, &echo_ops, slot);
	if (!*slot)
		free(slot);
}

static void h_ws(struct httpd_req *r)
{
	char accept[WS_ACCEPT_LEN + 1];

	if (ws_accept_key(httpd_header(r, "Sec-WebSocket-Key"), accept) < 0) {
		httpd_reply_empty(r, 400);
		return;
	}
	httpd_add_header(r, "Upgrade", "websocket");
	httpd_add_header(r, "Sec-WebSocket-Accept", accept);
	httpd_reply_upgrade(r, upgraded_on_loop, r);
}

static const struct httpd_route routes[] = {
	{ "GET", "/ws", .fn = h_ws },
};

struct client {
	int port;
	atomic_int done;
	char head[1024];
	unsigned char got[256];
	size_t ngot;
	int eof;
	int early_eof;             /* a client that sent a frame with its request */
	size_t early_frames;
	int held;                  /* a second connection, left open */
};

static size_t masked(unsigned char *out, int b0, const char *p, size_t n)
{
	out[0] = (unsigned char)b0;
	out[1] = (unsigned char)(0x80 | n);
	memcpy(out + 2, "\x01\x02\x03\x04", 4);
	for (size_t i = 0; i < n; i++)
		out[6 + i] = (unsigned char)p[i] ^ (unsigned char)(1 + (i & 3));
	return 6 + n;
}

static const char handshake[] =
	"GET /ws HTTP/1.1\r\nHost: t\r\nX-Sbx-Node-Secret: s3cret\r\nUpgrade: websocket\r\n"
	"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	"Sec-WebSocket-Version: 13\r\n\r\n";

static void *client_main(void *arg)
{
	struct client *c = arg;
	unsigned char buf[512];
	size_t n = sizeof(handshake) - 1, hl = 0;
	int fd = unit_connect_loopback(c->port);
	ssize_t k;
	char *end = NULL;
	int early = unit_connect_loopback(c->port);

	/* the handshake and a frame in one write: dropped after the 101 */
	memcpy(buf, handshake, n);
	n += masked(buf + n, 0x89, "p", 1);
	if (early >= 0 && write(early, buf, n) == (ssize_t)n) {
		char head[512];
		size_t got = 0;

		while ((k = read(early, head + got, sizeof(head) - 1 - got)) > 0)
			got += (size_t)k;
		head[got] = '\0';
		end = strstr(head, "\r\n\r\n");
		c->early_frames = end ? got - (size_t)(end + 4 - head) : got;
		c->early_eof = k == 0;
		end = NULL;
	}
	if (early >= 0)
		close(early);
	n = sizeof(handshake) - 1;

	/* a client sends frames once it has the 101 (nginx holds them back too) */
	if (fd < 0 || write(fd, handshake, n) != (ssize_t)n)
		goto out;
	while (!end && hl + 1 < sizeof(c->head) && (k = read(fd, c->head + hl, sizeof(c->head) - 1 - hl)) > 0) {
		hl += (size_t)k;
		c->head[hl] = '\0';
		end = strstr(c->head, "\r\n\r\n");
	}
	if (!end)
		goto out;
	/* bytes after the head are frames already */
	c->ngot = hl - (size_t)(end + 4 - c->head);
	memcpy(c->got, end + 4, c->ngot);
	n = masked(buf, 0x89, "p", 1);
	n += masked(buf + n, 0x81, "hi", 2);
	n += masked(buf + n, 0x88, "\x03\xe8", 2);
	if (write(fd, buf, n) != (ssize_t)n)
		goto out;
	while (c->ngot < sizeof(c->got) && (k = read(fd, c->got + c->ngot, sizeof(c->got) - c->ngot)) > 0)
		c->ngot += (size_t)k;
	c->eof = k == 0;
	/* a second one stays open until the server stops */
	c->held = unit_connect_loopback(c->port);
	n = sizeof(handshake) - 1;
	if (c->held >= 0 && write(c->held, handshake, n) == (ssize_t)n)
		(void)!read(c->held, buf, sizeof(buf));
out:
	if (fd >= 0)
		close(fd);
	atomic_store(&c->done, 1);
	return NULL;
}

TEST(ws_over_httpd_upgrade)
{
	struct client c = { .port = unit_free_port(), .held = -1 };
	struct sbx_err e = { 0 };
	struct timeval step = { 0, 50 * 1000 };
	static const unsigned char pong[] = { 0x8a, 0x01, 'p' };
	static const unsigned char text[] = { 0x81, 0x02, 'h', 'i' };
	static const unsigned char close_echo[] = { 0x88, 0x02, 0x03, 0xe8 };
	char addr[32];
	struct httpd *h;
	pthread_t t;

	loop_base = event_base_new();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", c.port);
	h = httpd_new(loop_base, addr, "s3cret", routes, ARRAY_SIZE(routes), NULL, 64, &e);
	CHECK(h != NULL);
	if (!h) {
		event_base_free(loop_base);
		return;
	}
	atomic_store(&closes, 0);
	atomic_store(&messages, 0);
	atomic_store(&upgrades, 0);
	pthread_create(&t, NULL, client_main, &c);
	for (int i = 0; i < 200 && !atomic_load(&c.done); i++) {
		event_base_loopexit(loop_base, &step);
		event_base_dispatch(loop_base);
	}
	pthread_join(t, NULL);
	for (int i = 0; i < 4; i++) {   /* let the second upgrade happen */
		event_base_loopexit(loop_base, &step);
		event_base_dispatch(loop_base);
	}
	CHECK(c.early_eof);
	CHECK(c.early_frames == 0);
	CHECK_INT(atomic_load(&upgrades), 2);   /* not the early one */
	CHECK(strstr(c.head, " 101 ") != NULL);
	CHECK(strstr(c.head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") != NULL);
	if (c.ngot != sizeof(pong) + sizeof(text) + sizeof(close_echo))
		fprintf(stderr, "  got %zu bytes, eof %d, head %.300s\n", c.ngot, c.eof, c.head);
	CHECK(c.ngot == sizeof(pong) + sizeof(text) + sizeof(close_echo));
	CHECK(memcmp(c.got, pong, sizeof(pong)) == 0);
	CHECK(memcmp(c.got + sizeof(pong), text, sizeof(text)) == 0);
	CHECK(memcmp(c.got + sizeof(pong) + sizeof(text), close_echo, sizeof(close_echo)) == 0);
	CHECK(c.eof);
	CHECK_INT(atomic_load(&messages), 1);
	CHECK_INT(atomic_load(&closes), 1);
	/* the held connection ends with the server: its owner is told */
	httpd_free(h);
	CHECK_INT(atomic_load(&closes), 2);
	if (c.held >= 0)
		close(c.held);
	event_base_free(loop_base);
}
