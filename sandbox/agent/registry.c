#include "registry.h"
#include "agent_metrics.h"
#include "rkeys.h"
#include "ids.h"
#include "log.h"
#include "rerror.h"
#include "sentinel.h"
#include "tcplisten.h"
#include "util.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define STAMP_MS 100               /* the loop's progress stamp */
#define PROBE_TIMEOUT_MS 1000       /* one probe of our HTTP server */

struct registry {
	struct event_base *base;
	const struct sbx_conf *conf;
	struct sentinel_conf where;  /* redis.url, or the sentinels (sentinel.h) */
	struct redisurl url;       /* the address connected to (the primary) */
	int next_sentinel;         /* the sentinel the loop asks first */
	redisAsyncContext *sq;     /* the sentinel being asked for the primary */
	int sq_tries;              /* sentinels asked in this round */
	int64_t sq_started;
	redisAsyncContext *sub;    /* a sentinel's +switch-master messages */
	int sub_next;
	struct event *sub_ev;      /* subscribe again after a lost subscription */
	char version[64];
	char hash_key[RKEYS_MAX];
	char alive_key[RKEYS_MAX];
	char started_at[32];
	long long memory_mib;      /* what placement may commit here (heartbeat) */
	long long cpus_milli;
	registry_stats_fn stats;
	void *stats_arg;

	redisAsyncContext *ac;
	int connected;
	int64_t connect_started;
	int64_t last_reply;
	int64_t last_tick;         /* when tick_cb last ran (0: never) */
	struct registry_lease *lease; /* shared with the fence keeper (MAP_SHARED) */
	int pending;               /* commands without a reply yet */
	int backoff_ms;
	int down_logged;

	struct event *reconnect_ev;
	struct event *tick_ev;     /* heartbeat + connect / command watchdog */

	registry_connect_fn on_connect;
	void *on_connect_arg;
	int ever_connected;
	int announced;             /* the node entry and alive key are written on this connection */

	/* The heartbeat thread (heartbeat_main): its own Redis connection, so
	 * the lease never waits for the loop. Shared with it: loop_seen,
	 * may_set, stop (atomics / mu). */
	struct event *stamp_ev;    /* the loop writes loop_seen every STAMP_MS */
	int64_t loop_seen;
	int may_set;               /* the loop announced and its alive SET was answered */
	pthread_t hb_thread;
	int hb_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;

	int refusing;              /* Redis refused the last alive SET (rerror.h); atomic */
	int leaving;               /* registry_leave() ran: never announce again */

	int shutting_down;
	void (*done)(void *);
	void *done_arg;
	struct event *done_ev;
};

static void schedule_reconnect(struct registry *reg);
static void start_connect(struct registry *reg);
static void drop_connection(struct registry *reg);

/* A demoted primary answered (READONLY, after a failover): connect again
 * to the one the sentinels name now. Safe inside a reply callback. */
static void check_demoted(struct registry *reg, const redisReply *reply)
{
	if (!reg->where.n || !sentinel_reply_demoted(reply) || !reg->ac)
		return;
	log_warn("registry: redis answered %.100s: asking the sentinels again", reply->str);
	drop_connection(reg);
	reg->backoff_ms = BACKOFF_MIN_MS;
	schedule_reconnect(reg);
}

/* The answer to an alive SET: a refused write (NOREPLICAS, READONLY,
 * MISCONF, OOM, …) is Redis trouble like a lost connection — the lease is
 * not renewed, so the node's calls answer 503 once it runs out, and
 * registry_connected() is 0 meanwhile. Logged once when it starts and once
 * when it ends, not every heartbeat. Called from both threads. */
static void note_alive_reply(struct registry *reg, const redisReply *reply)
{
	int refused = reply && reply->type == REDIS_REPLY_ERROR && rerror_unavailable(reply->str);
	int was = __atomic_exchange_n(&reg->refusing, refused, __ATOMIC_ACQ_REL);

	if (refused && !was)
		log_warn("registry: redis refuses writes (%.200s): the node's lease is not renewed "
			 "until it takes them again", reply->str);
	else if (!refused && was && reply && reply->type != REDIS_REPLY_ERROR)
		log_info("registry: redis takes writes again");
}

/* One queued command is done (r NULL: the connection went or the context
 * is freed): one fewer pending. 1 when r is an answer, which also marks
 * when Redis last answered; 0 when there is none. */
static int reply_seen(struct registry *reg, const void *r)
{
	if (reg->pending > 0)
		reg->pending--;
	if (!r)
		return 0;
	reg->last_reply = util_now_ms();
	return 1;
}

static void reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;
	redisReply *reply = r;

	if (!reg || !reply_seen(reg, reply))
		return;
	/* A refused write is logged once by note_alive_reply(). */
	if (reply->type == REDIS_REPLY_ERROR && !rerror_unavailable(reply->str))
		log_warn("registry: redis answered %s: %.200s", privdata ? (const char *)privdata : "",
			 reply->str);
	check_demoted(reg, reply);
}

void registry_lease_extend(struct registry_lease *l, int64_t sent, int64_t ttl_ms)
{
	int64_t until = __atomic_load_n(&l->until, __ATOMIC_ACQUIRE);

	/* Sent at or after the old lease ran out: the key may have been gone
	 * in between, and someone may have taken over what we hold. */
	if (sent >= until)
		__atomic_add_fetch(&l->serial, 1, __ATOMIC_ACQ_REL);
	if (sent + ttl_ms > until)
		__atomic_store_n(&l->until, sent + ttl_ms, __ATOMIC_RELEASE);
}

/* The alive key was set: it lives node_ttl from when Redis ran the SET,
 * which is after we sent it — so counting from the send is on the safe side. */
static void alive_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;
	redisReply *reply = r;
	int64_t sent = *(int64_t *)privdata;

	free(privdata);
	if (!reg || !reply_seen(reg, reply))
		return;
	note_alive_reply(reg, reply);
	if (reply->type == REDIS_REPLY_ERROR) {
		if (!rerror_unavailable(reply->str))
			log_warn("registry: redis answered SET of the alive key: %.200s", reply->str);
		check_demoted(reg, reply);
		return;
	}
	registry_lease_extend(reg->lease, sent, reg->conf->cluster.node_ttl_ms);
	if (reg->announced)
		__atomic_store_n(&reg->may_set, 1, __ATOMIC_RELEASE);
}

int registry_lease_valid(const struct registry *reg)
{
	return util_now_ms() < __atomic_load_n(&reg->lease->until, __ATOMIC_ACQUIRE);
}

int64_t registry_lease_serial(const struct registry *reg)
{
	return __atomic_load_n(&reg->lease->serial, __ATOMIC_ACQUIRE);
}

const struct registry_lease *registry_lease(const struct registry *reg)
{
	return reg->lease;
}

static void send_cmd(struct registry *reg, const char *what, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = redisvAsyncCommand(reg->ac, reply_cb, (void *)what, fmt, ap);
	va_end(ap);
	if (rc == REDIS_OK)
		reg->pending++;
}

/* Write the whole node entry and refresh liveness (on connect and on every
 * heartbeat: a Redis that lost its data gets the entry back at once). */
static void write_entry(struct registry *reg)
{
	struct registry_stats st = { .capacity = reg->conf->agent.capacity,
				     .capacity_by = "agent.capacity" };
	char now[24];

	if (!reg->ac || !reg->connected)
		return;
	if (reg->stats)
		reg->stats(reg->stats_arg, &st);
	util_xsnprintf(now, sizeof(now), "%lld", (long long)util_wall_ms());
	send_cmd(reg, "HSET", "HSET %s name %s address %s previewGateway %s capacity %lld capacityBy %s "
		 "load %lld sandboxes %lld memoryMiB %lld cpusMilli %lld version %s startedAt %s "
		 "lastHeartbeat %s",
		 reg->hash_key, reg->conf->agent.name, reg->conf->agent.listen,
		 reg->conf->agent.preview_gateway,
		 st.capacity, st.capacity_by, st.load, st.sandboxes, reg->memory_mib,
		 reg->cpus_milli, reg->version, reg->started_at, now);
	send_cmd(reg, "SADD", "SADD " RKEYS_NODES " %s", reg->conf->agent.name);
	{
		int64_t *sent = malloc(sizeof(*sent));

		if (!sent)
			return;
		*sent = util_now_ms();
		if (redisAsyncCommand(reg->ac, alive_cb, sent, "SET %s 1 PX %lld", reg->alive_key,
				      (long long)reg->conf->cluster.node_ttl_ms) == REDIS_OK)
			reg->pending++;
		else
			free(sent);
	}
}

/* --- the heartbeat thread --- */

int registry_probe_answered(const char *buf, ssize_t n)
{
	/* MHD closes a connection whose request line it cannot parse, after it
	 * accepted and read it on the loop: EOF counts like an answer. */
	return n == 0 || (n >= 7 && strncmp(buf, "HTTP/1.", 7) == 0);
}

/* Wait for fd to be ready for events within the time left until deadline. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int64_t left;
	int rc;

	do {
		left = deadline - util_now_ms();
		if (left <= 0)
			return 0;
		rc = poll(&p, 1, (int)left);
	} while (rc < 0 && errno == EINTR);
	return rc > 0;
}

/* Does our own HTTP server accept and read a connection within timeout_ms?
 * One connection to agent.listen (a wildcard address is reached on the
 * loopback) with a request line MHD rejects without calling a handler, so
 * probes leave no trace in the request log. 1 answered, 0 not. */
static int probe_httpd(const char *listen_addr, int timeout_ms)
{
	static const char req[] = "SBX-PROBE\r\n\r\n";
	struct sockaddr_storage ss;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	int64_t deadline = util_now_ms() + timeout_ms;
	char host[256], buf[16];
	socklen_t len;
	int port, err = 0;
	socklen_t elen = sizeof(err);
	auto_close int fd = -1;
	ssize_t n;

	if (tcplisten_parse(listen_addr, host, sizeof(host), &port) < 0 ||
	    tcplisten_sockaddr(host, port, &ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET && in4->sin_addr.s_addr == htonl(INADDR_ANY))
		in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ss.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
		in6->sin6_addr = in6addr_loopback;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return 0;
	if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
		if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, deadline) ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err)
			return 0;
	}
	if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(req) - 1))
		return 0;
	for (;;) {
		if (!wait_fd(fd, POLLIN, deadline))
			return 0;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return errno == ECONNRESET;  /* read and refused: it answered */
		return registry_probe_answered(buf, n);
	}
}

const char *registry_node_state(int probes_failed, int64_t loop_idle_ms, int64_t heartbeat_ms)
{
	if (probes_failed >= REGISTRY_PROBE_FAILS ||
	    loop_idle_ms > 2 * heartbeat_ms + PROBE_TIMEOUT_MS + STAMP_MS)
		return "degraded";
	return "up";
}

int registry_loop_may_hold_lease(int64_t loop_idle_ms, int64_t node_ttl_ms)
{
	return loop_idle_ms <= REGISTRY_STALL_TTLS * node_ttl_ms;
}

/* The thread's own connection: to redis.url, or to the primary the
 * sentinels name (checked with ROLE). NULL when there is none now. */
static redisContext *hb_connect(const struct registry *reg, int *next)
{
	struct sbx_err e;
	redisContext *c = sentinel_connect(&reg->where, reg->conf->redis.connect_timeout_ms,
					   reg->conf->redis.command_timeout_ms, next, NULL, &e);

	if (!c)
		log_debug("registry: heartbeat thread: %s", e.msg);
	return c;
}

/* One command on the thread's connection; 0, or -1 (the connection is
 * dropped and made again next beat). An alive SET's answer goes to
 * note_alive_reply() when reg is given. */
static int hb_command(redisContext **c, struct registry *reg, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;
	int ok;

	va_start(ap, fmt);
	r = redisvCommand(*c, fmt, ap);
	va_end(ap);
	ok = r && r->type != REDIS_REPLY_ERROR;
	if (reg && r)
		note_alive_reply(reg, r);
	/* A demoted primary (READONLY): connect again, to the new one. */
	if (r && sentinel_reply_demoted(r)) {
		freeReplyObject(r);
		r = NULL;
	}
	if (r)
		freeReplyObject(r);
	if (!r) {
		redisFree(*c);
		*c = NULL;
	}
	return ok ? 0 : -1;
}

/* Every heartbeat, independent of the loop: probe our HTTP server, write
 * the node's state (up / degraded), and SET the alive key while the loop
 * is alive at all (it ran within REGISTRY_STALL_TTLS node_ttls) and has
 * announced the node on its own connection. */
static void *heartbeat_main(void *arg)
{
	struct registry *reg = arg;
	const struct sbx_conf *conf = reg->conf;
	int64_t hb = conf->cluster.heartbeat_ms;
	int64_t probe_ms = conf->cluster.node_ttl_ms / 3;
	redisContext *c = NULL;
	const char *last = "";
	int failed = 0, next = 0;

	if (probe_ms > PROBE_TIMEOUT_MS)
		probe_ms = PROBE_TIMEOUT_MS;
	for (;;) {
		struct timespec ts;
		int64_t idle, sent;
		const char *state;
		int stop;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)(hb / 1000);
		ts.tv_nsec += (long)((hb % 1000) * 1000000);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&reg->mu);
		while (!reg->stop && pthread_cond_timedwait(&reg->cv, &reg->mu, &ts) == 0)
			;
		stop = reg->stop;
		pthread_mutex_unlock(&reg->mu);
		if (stop)
			break;
		/* The lease first: the probe may take up to probe_ms. */
		if (!__atomic_load_n(&reg->may_set, __ATOMIC_ACQUIRE))
			continue;
		if (!c && !(c = hb_connect(reg, &next)))
			continue;
		idle = util_now_ms() - __atomic_load_n(&reg->loop_seen, __ATOMIC_ACQUIRE);
		if (registry_loop_may_hold_lease(idle, conf->cluster.node_ttl_ms)) {
			sent = util_now_ms();
			if (hb_command(&c, reg, "SET %s 1 PX %lld", reg->alive_key,
				       (long long)conf->cluster.node_ttl_ms) == 0)
				registry_lease_extend(reg->lease, sent, conf->cluster.node_ttl_ms);
		}
		failed = probe_httpd(conf->agent.listen, (int)probe_ms) ? 0 : failed + 1;
		idle = util_now_ms() - __atomic_load_n(&reg->loop_seen, __ATOMIC_ACQUIRE);
		state = registry_node_state(failed, idle, hb);
		if (c && hb_command(&c, NULL, "HSET %s state %s", reg->hash_key, state) == 0 &&
		    strcmp(state, last) != 0) {
			if (strcmp(state, "up") == 0 && last[0])
				log_info("registry: the HTTP server answers again: node up");
			else if (strcmp(state, "degraded") == 0)
				log_warn("registry: the HTTP server does not answer (loop idle for %lld ms): "
					 "node degraded", (long long)idle);
			last = state;
		}
	}
	if (c)
		redisFree(c);
	return NULL;
}

static void heartbeat_start(struct registry *reg)
{
	if (reg->hb_started)
		return;
	if (pthread_create(&reg->hb_thread, NULL, heartbeat_main, reg) != 0) {
		log_warn("registry: cannot start the heartbeat thread; the loop keeps the lease");
		return;
	}
	reg->hb_started = 1;
}

static void heartbeat_stop(struct registry *reg)
{
	if (!reg->hb_started)
		return;
	pthread_mutex_lock(&reg->mu);
	reg->stop = 1;
	pthread_cond_signal(&reg->cv);
	pthread_mutex_unlock(&reg->mu);
	pthread_join(reg->hb_thread, NULL);
	reg->hb_started = 0;
}

static void stamp_cb(evutil_socket_t fd, short what, void *arg)
{
	struct registry *reg = arg;

	__atomic_store_n(&reg->loop_seen, util_now_ms(), __ATOMIC_RELEASE);
}

/* The connection is usable (and, with sentinels, ROLE said master): the
 * node may be announced. */
static void connected_now(struct registry *reg)
{
	char a[300];
	int first;

	reg->connected = 1;
	reg->backoff_ms = BACKOFF_MIN_MS;
	reg->down_logged = 0;
	reg->last_reply = util_now_ms();
	log_info("registry: connected to redis at %s as '%s' at %s",
		 sentinel_addr_str(&reg->url, a, sizeof(a)), reg->conf->agent.name,
		 reg->conf->agent.listen);
	reg->announced = 0;
	__atomic_store_n(&reg->may_set, 0, __ATOMIC_RELEASE);
	first = !reg->ever_connected;
	reg->ever_connected = 1;
	if (reg->on_connect)
		reg->on_connect(reg->on_connect_arg, first);
	else
		registry_announce(reg);
}

/* ROLE of a primary the sentinels named: nothing else is sent before it
 * says master (a replica not yet promoted, or an old primary). */
static void role_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;
	char a[300];

	if (!reg || reg->ac != ac || !reply_seen(reg, r))
		return;
	if (sentinel_parse_role(r) == 1) {
		connected_now(reg);
		return;
	}
	log_warn("registry: redis at %s is not the master (yet); asking the sentinels again",
		 sentinel_addr_str(&reg->url, a, sizeof(a)));
	reg->next_sentinel = (reg->next_sentinel + 1) % reg->where.n;
	drop_connection(reg);
	schedule_reconnect(reg);
}

static void connect_cb(const redisAsyncContext *ac, int status)
{
	struct registry *reg = ac->data;

	if (!reg || reg->ac != ac)
		return;
	if (status != REDIS_OK) {
		if (!reg->down_logged)
			log_warn("registry: cannot connect to redis (%s); retrying", ac->errstr);
		reg->down_logged = 1;
		reg->ac = NULL; /* hiredis frees it after this callback */
		schedule_reconnect(reg);
		return;
	}
	reg->pending = 0;
	if (reg->where.n) {
		/* connect_cb gets a const context; the registry owns it. */
		if (redisAsyncCommand(reg->ac, role_cb, NULL, "ROLE") == REDIS_OK)
			reg->pending++;
		return;
	}
	connected_now(reg);
}

void registry_announce(struct registry *reg)
{
	if (!reg->ac || !reg->connected || reg->announced || reg->leaving)
		return;
	reg->announced = 1;
	heartbeat_start(reg);
	write_entry(reg);
	send_cmd(reg, "XADD", RKEYS_XADD_EVENT "type node.up node %s address %s",
		 reg->conf->agent.name, reg->conf->agent.listen);
}

static void disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct registry *reg = ac->data;

	if (!reg || reg->ac != ac)
		return;
	reg->ac = NULL;
	reg->connected = 0;
	reg->pending = 0;
	__atomic_store_n(&reg->may_set, 0, __ATOMIC_RELEASE);
	if (reg->shutting_down) {
		if (reg->done_ev)
			event_active(reg->done_ev, EV_TIMEOUT, 1);
		return;
	}
	log_warn("registry: lost the redis connection%s%s; reconnecting",
		 status != REDIS_OK ? ": " : "", status != REDIS_OK ? ac->errstr : "");
	schedule_reconnect(reg);
}

static void drop_connection(struct registry *reg)
{
	redisAsyncContext *ac = reg->ac;

	if (!ac)
		return;
	reg->ac = NULL;
	reg->connected = 0;
	reg->pending = 0;
	__atomic_store_n(&reg->may_set, 0, __ATOMIC_RELEASE);
	ac->data = NULL;
	redisAsyncFree(ac);
}

redisAsyncContext *registry_async_connect(struct event_base *base, const struct redisurl *u,
					  void *data, redisConnectCallback *on_connect,
					  redisDisconnectCallback *on_disconnect, struct sbx_err *e)
{
	redisAsyncContext *ac = u->is_unix ? redisAsyncConnectUnix(u->path)
					   : redisAsyncConnect(u->host, u->port);

	if (!ac || ac->err) {
		err_set(e, SBX_E_REDIS_UNAVAILABLE, "%s", ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		return NULL;
	}
	/* hiredis sets no CLOEXEC: sandbox processes must never inherit it. */
	util_set_cloexec(ac->c.fd);
	if (redisLibeventAttach(ac, base) != REDIS_OK) {
		redisAsyncFree(ac);
		err_set(e, SBX_E_INTERNAL, "cannot attach a redis connection to the loop");
		return NULL;
	}
	ac->data = data;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	return ac;
}

/* registry_async_connect() to u for reg; a connection that cannot be
 * started is logged when log_fail. */
static redisAsyncContext *async_open(struct registry *reg, const struct redisurl *u,
				     redisConnectCallback *on_connect,
				     redisDisconnectCallback *on_disconnect, int log_fail)
{
	struct sbx_err e;
	redisAsyncContext *ac = registry_async_connect(reg->base, u, reg, on_connect,
						       on_disconnect, &e);

	if (!ac && log_fail && e.code == SBX_E_REDIS_UNAVAILABLE)
		log_warn("registry: cannot connect to redis (%s); retrying", e.msg);
	return ac;
}

/* Connect to reg->url (the primary); the callbacks take it from there. */
static void connect_master(struct registry *reg)
{
	redisAsyncContext *ac = async_open(reg, &reg->url, connect_cb, disconnect_cb,
					   !reg->down_logged);

	if (!ac) {
		reg->down_logged = 1;
		schedule_reconnect(reg);
		return;
	}
	reg->ac = ac;
	reg->connected = 0;
	reg->connect_started = util_now_ms();
}

/* --- Sentinel (sentinel.h): the primary's address, asked on the loop --- */

static void ask_sentinel(struct registry *reg);

/* Stop asking the sentinel in reg->sq (safe inside its callbacks). */
static void sq_drop(struct registry *reg)
{
	redisAsyncContext *ac = reg->sq;

	if (!ac)
		return;
	reg->sq = NULL;
	ac->data = NULL;
	redisAsyncFree(ac);
}

/* This sentinel gave no address: the next one. */
static void sq_next(struct registry *reg, const char *why)
{
	char a[300];

	log_debug("registry: sentinel %s: %s",
		  sentinel_addr_str(&reg->where.s[reg->next_sentinel], a, sizeof(a)), why);
	sq_drop(reg);
	reg->next_sentinel = (reg->next_sentinel + 1) % reg->where.n;
	reg->sq_tries++;
	ask_sentinel(reg);
}

static void sq_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;
	struct redisurl addr;
	int rc;

	if (!reg || reg->sq != ac)
		return;
	rc = sentinel_parse_master(r, &addr);
	if (rc <= 0) {
		sq_next(reg, !r ? "connection lost" : rc == 0 ? "does not know the master" : "bad answer");
		return;
	}
	sq_drop(reg);
	reg->url = addr;
	connect_master(reg);
}

static void sq_connect_cb(const redisAsyncContext *ac, int status)
{
	struct registry *reg = ac->data;

	if (!reg || reg->sq != ac || status == REDIS_OK)
		return;
	reg->sq = NULL;   /* hiredis frees it after this callback */
	sq_next(reg, "cannot connect");
}

static void sq_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct registry *reg = ac->data;

	if (!reg || reg->sq != ac)
		return;
	reg->sq = NULL;
	sq_next(reg, "connection lost");
}

/* Ask the sentinel at next_sentinel for the primary; after a round of
 * every sentinel without an answer, back off. */
static void ask_sentinel(struct registry *reg)
{
	redisAsyncContext *ac;

	if (reg->shutting_down)
		return;
	if (reg->sq_tries >= reg->where.n) {
		if (!reg->down_logged)
			log_warn("registry: no sentinel names the master '%s'; retrying",
				 reg->where.master);
		reg->down_logged = 1;
		schedule_reconnect(reg);
		return;
	}
	ac = async_open(reg, &reg->where.s[reg->next_sentinel], sq_connect_cb, sq_disconnect_cb, 0);
	if (!ac) {
		reg->sq_tries++;
		reg->next_sentinel = (reg->next_sentinel + 1) % reg->where.n;
		ask_sentinel(reg);
		return;
	}
	reg->sq = ac;
	reg->sq_started = util_now_ms();
	if (redisAsyncCommand(ac, sq_reply_cb, NULL, "SENTINEL get-master-addr-by-name %s",
			      reg->where.master) != REDIS_OK)
		sq_next(reg, "cannot send");
}

static void sub_drop(struct registry *reg)
{
	redisAsyncContext *ac = reg->sub;

	if (!ac)
		return;
	reg->sub = NULL;
	ac->data = NULL;
	redisAsyncFree(ac);
}

/* The subscription is gone: another sentinel in a second. */
static void sub_lost(struct registry *reg)
{
	struct timeval tv = { 1, 0 };

	reg->sub_next = (reg->sub_next + 1) % reg->where.n;
	if (!reg->shutting_down)
		evtimer_add(reg->sub_ev, &tv);
}

/* A message of +switch-master: the sentinels promoted another primary. */
static void sub_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;
	struct redisurl addr;
	char a[300];

	if (!reg || reg->sub != ac || !r)
		return;
	if (sentinel_parse_switch(r, reg->where.master, &addr) != 1)
		return;
	log_warn("registry: the sentinels switched master '%s' to %s", reg->where.master,
		 sentinel_addr_str(&addr, a, sizeof(a)));
	if (reg->sq || (reg->ac && !reg->connected))
		return;   /* resolving or connecting already */
	drop_connection(reg);
	event_del(reg->reconnect_ev);
	reg->backoff_ms = BACKOFF_MIN_MS;
	start_connect(reg);
}

static void sub_connect_cb(const redisAsyncContext *ac, int status)
{
	struct registry *reg = ac->data;

	if (!reg || reg->sub != ac || status == REDIS_OK)
		return;
	reg->sub = NULL;
	sub_lost(reg);
}

static void sub_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct registry *reg = ac->data;

	if (!reg || reg->sub != ac)
		return;
	reg->sub = NULL;
	sub_lost(reg);
}

/* Subscribe to +switch-master on one sentinel (another after each loss). */
static void subscribe_start(struct registry *reg)
{
	redisAsyncContext *ac;

	if (!reg->where.n || reg->sub || reg->shutting_down)
		return;
	ac = async_open(reg, &reg->where.s[reg->sub_next], sub_connect_cb, sub_disconnect_cb, 0);
	if (!ac) {
		sub_lost(reg);
		return;
	}
	reg->sub = ac;
	if (redisAsyncCommand(ac, sub_cb, NULL, "SUBSCRIBE +switch-master") != REDIS_OK) {
		sub_drop(reg);
		sub_lost(reg);
	}
}

static void sub_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	subscribe_start(arg);
}

/* Connect to Redis: to redis.url, or first ask the sentinels where the
 * primary is. */
static void start_connect(struct registry *reg)
{
	if (!reg->where.n) {
		reg->url = reg->where.direct;
		connect_master(reg);
		return;
	}
	if (reg->sq)
		return;
	reg->sq_tries = 0;
	ask_sentinel(reg);
}

static void reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct registry *reg = arg;

	if (!reg->shutting_down && !reg->ac && !reg->sq)
		start_connect(reg);
}

static void schedule_reconnect(struct registry *reg)
{
	struct timeval tv;

	if (reg->shutting_down)
		return;
	tv.tv_sec = reg->backoff_ms / 1000;
	tv.tv_usec = (reg->backoff_ms % 1000) * 1000;
	evtimer_add(reg->reconnect_ev, &tv);
	reg->backoff_ms = reg->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : reg->backoff_ms * 2;
}

/* Heartbeat, plus a watchdog: hiredis 0.14's async API has no timeouts, so
 * a connect that takes too long or a Redis that stopped answering is
 * dropped here and reconnected. */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct registry *reg = arg;
	int64_t now = util_now_ms();
	int stalled = reg->last_tick && now - reg->last_tick > 2 * reg->conf->cluster.heartbeat_ms;

	reg->last_tick = now;
	/* A loop that could not run for a while could not read the replies
	 * either: they may be waiting in the socket. Judge Redis only from a
	 * loop that kept up. */
	if (stalled)
		reg->last_reply = now;
	if (!reg->shutting_down && reg->sq &&
	    now - reg->sq_started > reg->conf->redis.connect_timeout_ms + reg->conf->cluster.heartbeat_ms)
		sq_next(reg, "no answer in time");
	if (reg->shutting_down || !reg->ac)
		return;
	if (!reg->connected) {
		if (now - reg->connect_started > reg->conf->redis.connect_timeout_ms +
							 reg->conf->cluster.heartbeat_ms) {
			log_warn("registry: connecting to redis timed out; retrying");
			drop_connection(reg);
			schedule_reconnect(reg);
		}
		return;
	}
	if (reg->pending > 0 && now - reg->last_reply > reg->conf->cluster.node_ttl_ms) {
		log_warn("registry: redis stopped answering; reconnecting");
		drop_connection(reg);
		schedule_reconnect(reg);
		return;
	}
	if (reg->announced)
		write_entry(reg);
}

/* The memory and cpus placement may commit on this node: agent.memory_mib
 * and agent.cpus_milli; for 0, enough for agent.capacity sandboxes of the
 * default size, and at least the host's MemTotal / 16 x its online CPUs.
 * Limits are ceilings, not reservations: a node is overcommitted by
 * default, and an operator who wants strict accounting sets both keys. */
static void node_size(const struct sbx_conf *conf, long long *memory_mib, long long *cpus_milli)
{
	auto_free char *meminfo = NULL;
	long long per_count;
	long cpus;

	*memory_mib = conf->agent.memory_mib;
	*cpus_milli = conf->agent.cpus_milli;
	if (*memory_mib == 0) {
		if ((meminfo = util_read_file("/proc/meminfo", 1 << 16, NULL))) {
			const char *p = strstr(meminfo, "MemTotal:");
			long long kib = 0;
			if (p && sscanf(p, "MemTotal: %lld kB", &kib) == 1 && kib > 0)
				*memory_mib = kib / 1024;
		}
		per_count = (long long)conf->agent.capacity * conf->sandbox.memory_mib;
		if (*memory_mib < per_count)
			*memory_mib = per_count;
	}
	if (*cpus_milli == 0) {
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
		if (cpus > 0)
			*cpus_milli = 16000LL * cpus;
		per_count = (long long)conf->agent.capacity * conf->sandbox.cpus_milli;
		if (*cpus_milli < per_count)
			*cpus_milli = per_count;
	}
}

struct registry *registry_new(struct event_base *base, const struct sbx_conf *conf,
			      const char *version, registry_stats_fn stats, void *arg,
			      struct sbx_err *e)
{
	struct registry *reg;
	struct timeval tv;

	reg = calloc(1, sizeof(*reg));
	if (!reg) {
		err_sys(e, ENOMEM, "registry");
		return NULL;
	}
	reg->base = base;
	reg->conf = conf;
	reg->stats = stats;
	reg->stats_arg = arg;
	reg->backoff_ms = BACKOFF_MIN_MS;
	reg->lease = mmap(NULL, sizeof(*reg->lease), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (reg->lease == MAP_FAILED) {
		err_sys(e, errno, "registry: cannot map the lease");
		free(reg);
		return NULL;
	}
	snprintf(reg->version, sizeof(reg->version), "%s", version);
	util_iso8601(util_wall_ms(), reg->started_at);
	node_size(conf, &reg->memory_mib, &reg->cpus_milli);
	if (!ids_valid_node(conf->agent.name)) {
		munmap(reg->lease, sizeof(*reg->lease));
		free(reg);
		err_set(e, SBX_E_VALIDATION, "agent.name must be 1-63 of [a-z0-9-]");
		return NULL;
	}
	rkeys_node(reg->hash_key, conf->agent.name, NULL);
	rkeys_node(reg->alive_key, conf->agent.name, "alive");
	if (sentinel_conf_init(conf, &reg->where, e) < 0) {
		munmap(reg->lease, sizeof(*reg->lease));
		free(reg);
		return NULL;
	}
	reg->reconnect_ev = evtimer_new(base, reconnect_cb, reg);
	reg->tick_ev = event_new(base, -1, EV_PERSIST, tick_cb, reg);
	reg->stamp_ev = event_new(base, -1, EV_PERSIST, stamp_cb, reg);
	reg->sub_ev = evtimer_new(base, sub_timer_cb, reg);
	{
		pthread_condattr_t ca;

		pthread_mutex_init(&reg->mu, NULL);
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&reg->cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	reg->loop_seen = util_now_ms();
	if (!reg->reconnect_ev || !reg->tick_ev || !reg->stamp_ev || !reg->sub_ev) {
		registry_free(reg);
		err_sys(e, ENOMEM, "registry events");
		return NULL;
	}
	tv.tv_sec = conf->cluster.heartbeat_ms / 1000;
	tv.tv_usec = (conf->cluster.heartbeat_ms % 1000) * 1000;
	event_add(reg->tick_ev, &tv);
	tv.tv_sec = 0;
	tv.tv_usec = STAMP_MS * 1000;
	event_add(reg->stamp_ev, &tv);
	start_connect(reg);
	subscribe_start(reg);
	return reg;
}

const struct redisurl *registry_redis_addr(const struct registry *reg)
{
	return reg->url.is_unix || reg->url.host[0] ? &reg->url : NULL;
}

int registry_connected(const struct registry *reg)
{
	return reg && reg->connected && !__atomic_load_n(&reg->refusing, __ATOMIC_ACQUIRE);
}

void registry_on_connect(struct registry *reg, registry_connect_fn fn, void *arg)
{
	reg->on_connect = fn;
	reg->on_connect_arg = arg;
}

struct user_cmd {
	registry_reply_fn fn;
	void *arg;
	int64_t sent_us;
};

/* hiredis runs this exactly once per queued command: with the reply, or
 * with NULL when the context is freed or the connection drops. */
static void user_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;
	struct user_cmd *uc = privdata;
	redisReply *reply = r;

	if (reg && reply)
		reply_seen(reg, reply);
	agent_metrics_redis(uc->sent_us, !reply ? METRICS_REDIS_CONNECTION :
			    reply->type == REDIS_REPLY_ERROR ? METRICS_REDIS_REPLY : METRICS_REDIS_OK);
	if (uc->fn)
		uc->fn(uc->arg, reply);
	free(uc);
	if (reg && reply)
		check_demoted(reg, reply);
}

int registry_command(struct registry *reg, registry_reply_fn fn, void *arg, const char *fmt, ...)
{
	struct user_cmd *uc;
	va_list ap;
	int rc;

	if (!reg || !reg->ac || !reg->connected || reg->shutting_down)
		return -1;
	uc = malloc(sizeof(*uc));
	if (!uc)
		return -1;
	uc->fn = fn;
	uc->arg = arg;
	uc->sent_us = metrics_now_us();
	va_start(ap, fmt);
	rc = redisvAsyncCommand(reg->ac, user_reply_cb, uc, fmt, ap);
	va_end(ap);
	if (rc != REDIS_OK) {
		free(uc);
		return -1;
	}
	reg->pending++;
	return 0;
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct registry *reg = arg;
	void (*done)(void *) = reg->done;

	reg->done = NULL;
	if (done)
		done(reg->done_arg);
}

static void last_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct registry *reg = ac->data;

	if (reg && reg->done_ev)
		event_active(reg->done_ev, EV_TIMEOUT, 1);
}

void registry_leave(struct registry *reg)
{
	heartbeat_stop(reg);  /* before the DEL: it must not SET the alive key again */
	event_del(reg->tick_ev);
	reg->leaving = 1;
	if (!reg->ac || !reg->connected)
		return;
	send_cmd(reg, "DEL", "DEL %s", reg->alive_key);
	send_cmd(reg, "HSET", "HSET %s state down", reg->hash_key);
}

void registry_shutdown(struct registry *reg, int timeout_ms, void (*done)(void *arg), void *arg)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

	heartbeat_stop(reg);  /* before the DEL: it must not SET the alive key again */
	reg->shutting_down = 1;
	reg->done = done;
	reg->done_arg = arg;
	event_del(reg->reconnect_ev);
	event_del(reg->tick_ev);
	event_del(reg->sub_ev);
	sq_drop(reg);
	sub_drop(reg);
	reg->done_ev = evtimer_new(reg->base, done_cb, reg);
	if (!reg->done_ev) {
		done(arg);
		return;
	}
	if (!reg->ac || !reg->connected) {
		event_active(reg->done_ev, EV_TIMEOUT, 1);
		return;
	}
	/* The entry stays (a stopped node is "down" in /v1/nodes, not gone);
	 * its sandboxes are stopped. */
	send_cmd(reg, "DEL", "DEL %s", reg->alive_key);
	send_cmd(reg, "HSET", "HSET %s state down sandboxes 0 load 0", reg->hash_key);
	redisAsyncCommand(reg->ac, last_reply_cb, NULL,
			  RKEYS_XADD_EVENT "type node.down node %s",
			  reg->conf->agent.name);
	evtimer_add(reg->done_ev, &tv);
}

void registry_free(struct registry *reg)
{
	if (!reg)
		return;
	heartbeat_stop(reg);
	reg->shutting_down = 1;
	drop_connection(reg);
	sq_drop(reg);
	sub_drop(reg);
	if (reg->sub_ev)
		event_free(reg->sub_ev);
	if (reg->reconnect_ev)
		event_free(reg->reconnect_ev);
	if (reg->tick_ev)
		event_free(reg->tick_ev);
	if (reg->stamp_ev)
		event_free(reg->stamp_ev);
	pthread_cond_destroy(&reg->cv);
	pthread_mutex_destroy(&reg->mu);
	if (reg->done_ev)
		event_free(reg->done_ev);
	munmap(reg->lease, sizeof(*reg->lease));
	free(reg);
}
