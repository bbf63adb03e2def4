/* The agent's HTTP server on a real event loop (sandbox/agent/httpd.c): an
 * answer given to a deferred request from inside another request's handler
 * — inside MHD_run — reaches its client at once. (A wake-up from inside
 * MHD_run used to be undone by the re-arming after it: such an answer sat
 * until some later event, the "JSON exec answer never sent" of a stress run.) */
#include "httpd.h"
#include "unit.h"
#include "util.h"

#include <event2/event.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

static struct httpd_req *waiting;

static void h_wait(struct httpd_req *r)
{
	waiting = r;
	httpd_defer(r);
}

static void h_go(struct httpd_req *r)
{
	if (waiting)
		httpd_reply_json(waiting, 200, json_pack("{s:s}", "from", "go"));
	waiting = NULL;
	httpd_reply_json(r, 200, json_pack("{s:b}", "ok", 1));
}

static const struct httpd_route routes[] = {
	{ "GET", "/wait", .fn = h_wait },
	{ "GET", "/go", .fn = h_go },
};

struct client {
	int port;
	atomic_int done;
	char wait_answer[512];
};

static void send_get(int fd, const char *path)
{
	char req[256];
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: t\r\nX-Sbx-Node-Secret: s3cret\r\n\r\n", path);

	if (write(fd, req, (size_t)n) != n)
		return;
}

/* The head of the first answer on fd (5 s at most). */
static void read_answer(int fd, char *out, size_t n)
{
	size_t got = 0;
	ssize_t k;

	while (got + 1 < n && !memmem(out, got, "\r\n\r\n", 4) &&
	       (k = read(fd, out + got, n - 1 - got)) > 0)
		got += (size_t)k;
	out[got] = '\0';
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	int w = unit_connect_loopback(c->port), g;
	char go[512];

	send_get(w, "/wait");
	usleep(200 * 1000);
	g = unit_connect_loopback(c->port);
	send_get(g, "/go");
	read_answer(g, go, sizeof(go));
	/* /go is answered and its connection idle: nothing else happens now */
	read_answer(w, c->wait_answer, sizeof(c->wait_answer));
	close(g);
	close(w);
	atomic_store(&c->done, 1);
	return NULL;
}

TEST(httpd_answer_from_inside_a_handler_is_sent_at_once)
{
	struct event_base *base = event_base_new();
	struct client c = { .port = unit_free_port() };
	struct sbx_err e = { 0 };
	struct timeval step = { 0, 50 * 1000 };
	char addr[32];
	struct httpd *h;
	pthread_t t;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", c.port);
	h = httpd_new(base, addr, "s3cret", routes, ARRAY_SIZE(routes), NULL, 64, &e);
	CHECK(h != NULL);
	if (!h) {
		fprintf(stderr, "  httpd_new: %s\n", e.msg);
		event_base_free(base);
		return;
	}
	pthread_create(&t, NULL, client_main, &c);
	for (int i = 0; i < 200 && !atomic_load(&c.done); i++) {
		event_base_loopexit(base, &step);
		event_base_dispatch(base);
	}
	pthread_join(t, NULL);
	CHECK(strstr(c.wait_answer, " 200 ") != NULL);
	if (!strstr(c.wait_answer, " 200 "))
		fprintf(stderr, "  /wait got: '%.80s'\n", c.wait_answer);
	httpd_free(h);
	event_base_free(base);
}
