#include "master.h"
#include "apimetrics.h"
#include "ceilings.h"
#include "log.h"
#include "reconcile.h"
#include "store.h"
#include "tcplisten.h"
#include "util.h"
#include "worker.h"

#include <errno.h>
#include <poll.h>
#include <fcgiapp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 512            /* two generations of at most 256 */
#define LISTEN_BACKLOG 1024
#define YOUNG_DEATH_MS 1000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SHUTDOWN_WAIT_MS 15000
#define SCRAPE_DEADLINE_MS 1000    /* one metrics answer may hold up the master this long */

static volatile sig_atomic_t got_hup, got_term, got_chld;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		got_hup = 1;
	else if (sig == SIGCHLD)
		got_chld = 1;
	else
		got_term = 1;
}

/* The worker pools: every call, and the routing checks nginx makes before
 * data calls (api.route_listen), which a burst of control calls must not
 * hold up. Each has its listener; a worker serves one pool. */
enum pool { POOL_API, POOL_ROUTE, NPOOLS };

struct slot {
	pid_t pid;        /* 0: free */
	unsigned gen;
	enum pool pool;
	int64_t started_ms;
};

struct listener {
	int fd;
	char unix_path[CONF_STR_MAX];   /* "" unless a unix socket of ours */
};

static struct {
	struct slot w[MAX_WORKERS];
	unsigned gen;
	int64_t backoff_ms;
	int64_t next_spawn_ms;
	struct listener l[NPOOLS];
	pid_t reconciler;          /* the running reconciler child, 0: none */
	int64_t next_reconcile_ms;
	int metrics_fd;            /* api.metrics_listen, -1: none */
	/* Metrics slots ever given to a worker (slot i = w[i]), and the
	 * master's own (the last): the ones a scrape sums. */
	unsigned char metrics_used[MAX_WORKERS + 1];
} m = { .metrics_fd = -1, .l = { { .fd = -1 }, { .fd = -1 } } };

static const char *pool_addr(const struct sbx_conf *c, enum pool p)
{
	return p == POOL_ROUTE ? c->api.route_listen : c->api.listen;
}

static int64_t pool_size(const struct sbx_conf *c, enum pool p)
{
	return p == POOL_ROUTE ? c->api.route_workers : c->api.workers;
}

static void close_listeners(void)
{
	for (int p = 0; p < NPOOLS; p++)
		if (m.l[p].fd >= 0) {
			close(m.l[p].fd);
			m.l[p].fd = -1;
		}
}

/* The master's end: its listeners closed, its unix sockets removed. */
static void remove_listeners(void)
{
	close_listeners();
	for (int p = 0; p < NPOOLS; p++)
		if (m.l[p].unix_path[0])
			unlink(m.l[p].unix_path);
}

int master_load_conf(const struct master_opts *o, struct sbx_conf *c, struct sbx_err *e)
{
	conf_defaults(c);
	if (o->conf_path && conf_load(c, o->conf_path, e) < 0)
		return -1;
	for (int i = 0; i < o->noverrides; i++)
		if (conf_override(c, o->overrides[i], e) < 0)
			return -1;
	if (strcmp(c->api.route_listen, c->api.listen) == 0)
		return err_set(e, SBX_E_VALIDATION,
			       "api.route_listen '%s' is api.listen: the routing checks need an address of their own",
			       c->api.listen);
	return ceilings_conf_check(c, e);
}

/* Remove a stale unix socket at path; refuse when something answers there
 * or when it is not a socket. 0 or -1 with e. */
static int clear_stale_socket(const char *path, struct sbx_err *e)
{
	struct stat sb;
	struct sockaddr_un sa;
	auto_close int fd = -1;

	if (lstat(path, &sb) < 0)
		return errno == ENOENT ? 0 : err_sys(e, errno, "cannot stat '%s'", path);
	if (!S_ISSOCK(sb.st_mode))
		return err_set(e, SBX_E_INTERNAL, "'%s' exists and is not a socket", path);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_sys(e, errno, "socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return err_set(e, SBX_E_INTERNAL, "'%s' is in use by a running server", path);
	if (unlink(path) < 0)
		return err_sys(e, errno, "cannot remove stale socket '%s'", path);
	return 0;
}

/* Open the listener of pool p into m.l[p] ("unix:/path" or "host:port"):
 * non-blocking, CLOEXEC. 0 or -1 with e. */
static int open_listener(const struct sbx_conf *c, enum pool p, struct sbx_err *e)
{
	const char *l = pool_addr(c, p);
	const char *key = p == POOL_ROUTE ? "api.route_listen" : "api.listen";
	int fd;

	if (strncmp(l, "unix:", 5) == 0) {
		const char *path = l + 5;
		if (path[0] != '/' || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path) ||
		    strchr(path, ':'))
			return err_set(e, SBX_E_VALIDATION,
				       "%s '%s': the unix socket path must be absolute, short, without ':'",
				       key, l);
		if (clear_stale_socket(path, e) < 0)
			return -1;
		fd = FCGX_OpenSocket(path, LISTEN_BACKLOG);
		if (fd < 0)
			return err_set(e, SBX_E_INTERNAL, "cannot listen on '%s'", l);
		if (chmod(path, 0666) < 0) {
			int saved = errno;
			close(fd);
			return err_sys(e, saved, "cannot chmod '%s'", path);
		}
		snprintf(m.l[p].unix_path, sizeof(m.l[p].unix_path), "%s", path);
	} else {
		const char *colon = strrchr(l, ':');
		int64_t port;
		if (!colon || colon == l || util_parse_i64(colon + 1, 1, 65535, &port) < 0)
			return err_set(e, SBX_E_VALIDATION, "%s '%s' must be unix:/path or host:port",
				       key, l);
		fd = FCGX_OpenSocket(l, LISTEN_BACKLOG);
		if (fd < 0)
			return err_set(e, SBX_E_INTERNAL, "cannot listen on '%s'", l);
	}
	if (util_set_cloexec(fd) < 0 || util_set_nonblock(fd) < 0) {
		int saved = errno;
		close(fd);
		return err_sys(e, saved, "cannot configure the listen socket");
	}
	m.l[p].fd = fd;
	return 0;
}

static int install_signals(void)
{
	struct sigaction sa;
	sigset_t block;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGPIPE, &sa, NULL) < 0)
		return -1;
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_NOCLDSTOP;
	if (sigaction(SIGHUP, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0 ||
	    sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGCHLD, &sa, NULL) < 0)
		return -1;
	/* Delivered only while the master sleeps in ppoll. */
	sigemptyset(&block);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGCHLD);
	return sigprocmask(SIG_BLOCK, &block, NULL);
}

static int spawn(const struct sbx_conf *c, enum pool p)
{
	struct slot *s = NULL;
	pid_t master = getpid(), pid;

	for (int i = 0; i < MAX_WORKERS; i++)
		if (m.w[i].pid == 0) {
			s = &m.w[i];
			break;
		}
	if (!s) {
		log_error("no free worker slot");
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		log_error("fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		/* Signals stay blocked until worker_run() has its own handlers:
		 * a SIGTERM sent right now stays pending for the worker. */
		int fd = m.l[p].fd;

		if (m.metrics_fd >= 0)
			close(m.metrics_fd);
		m.l[p].fd = -1;
		close_listeners();   /* the other pool's */
		apimetrics_use((unsigned)(s - m.w));
		_exit(worker_run(fd, c, master));
	}
	m.metrics_used[s - m.w] = 1;
	s->pid = pid;
	s->gen = m.gen;
	s->pool = p;
	s->started_ms = util_now_ms();
	return 0;
}

/* Live workers of generation gen in pool p (NPOOLS: in both). */
static int live_count(unsigned gen, enum pool p)
{
	int n = 0;

	for (int i = 0; i < MAX_WORKERS; i++)
		if (m.w[i].pid && m.w[i].gen == gen && (p == NPOOLS || m.w[i].pool == p))
			n++;
	return n;
}

/* Start what is missing of the current generation in each pool. */
static void spawn_missing(const struct sbx_conf *c)
{
	for (int p = 0; p < NPOOLS; p++)
		for (int64_t i = live_count(m.gen, p); i < pool_size(c, p); i++)
			spawn(c, p);
}

static void signal_gen(unsigned gen, int all, int sig)
{
	for (int i = 0; i < MAX_WORKERS; i++)
		if (m.w[i].pid && (all || m.w[i].gen == gen))
			kill(m.w[i].pid, sig);
}

/* Collect every exited worker; schedule respawns of current ones. */
static void reap(int stopping)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (pid == m.reconciler) {
			m.reconciler = 0;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				log_warn("reconciler %d ended with status 0x%x", (int)pid, status);
			continue;
		}
		for (int i = 0; i < MAX_WORKERS; i++) {
			struct slot *s = &m.w[i];
			int64_t lived;
			if (s->pid != pid)
				continue;
			lived = util_now_ms() - s->started_ms;
			s->pid = 0;
			if (stopping || s->gen != m.gen)
				break;
			metrics_count(APIM_WORKER_EXITS, 0, 0, 1);
			if (WIFSIGNALED(status))
				log_warn("worker %d killed by signal %d after %lld ms", (int)pid,
					 WTERMSIG(status), (long long)lived);
			else
				log_warn("worker %d exited with status %d after %lld ms", (int)pid,
					 WEXITSTATUS(status), (long long)lived);
			if (lived < YOUNG_DEATH_MS) {
				m.backoff_ms = m.backoff_ms ? m.backoff_ms * 2 : BACKOFF_MIN_MS;
				if (m.backoff_ms > BACKOFF_MAX_MS)
					m.backoff_ms = BACKOFF_MAX_MS;
			} else {
				m.backoff_ms = 0;
			}
			m.next_spawn_ms = util_now_ms() + m.backoff_ms;
			break;
		}
	}
}

/* Every api.reconcile_interval, one reconciler child (never two at once):
 * the master itself holds no Redis connection. */
static void maybe_reconcile(const struct sbx_conf *c)
{
	int64_t now = util_now_ms();
	pid_t pid;

	if (c->api.reconcile_interval_ms <= 0 || m.reconciler || now < m.next_reconcile_ms)
		return;
	m.next_reconcile_ms = now + c->api.reconcile_interval_ms;
	pid = fork();
	if (pid < 0) {
		log_error("fork of the reconciler: %s", strerror(errno));
		return;
	}
	if (pid == 0) {
		close_listeners();
		if (m.metrics_fd >= 0)
			close(m.metrics_fd);
		metrics_use(NULL, 0);
		_exit(reconcile_run(c));
	}
	m.reconciler = pid;
}

static void reload(const struct master_opts *o, struct sbx_conf *c)
{
	struct sbx_conf next;
	struct sbx_err e;
	unsigned old = m.gen;

	err_clear(&e);
	if (master_load_conf(o, &next, &e) < 0 || store_init(&next, &e) < 0) {
		log_error("reload: keeping the old configuration: %s", e.msg);
		store_init(c, &e);
		return;
	}
	if (strcmp(next.api.listen, c->api.listen) != 0) {
		log_warn("reload: api.listen changed to '%s'; it takes effect at the next restart",
			 next.api.listen);
		snprintf(next.api.listen, sizeof(next.api.listen), "%s", c->api.listen);
	}
	if (strcmp(next.api.route_listen, c->api.route_listen) != 0) {
		log_warn("reload: api.route_listen changed to '%s'; it takes effect at the next restart",
			 next.api.route_listen);
		snprintf(next.api.route_listen, sizeof(next.api.route_listen), "%s",
			 c->api.route_listen);
	}
	if (strcmp(next.api.metrics_listen, c->api.metrics_listen) != 0) {
		log_warn("reload: api.metrics_listen changed to '%s'; it takes effect at the next restart",
			 next.api.metrics_listen);
		snprintf(next.api.metrics_listen, sizeof(next.api.metrics_listen), "%s",
			 c->api.metrics_listen);
	}
	*c = next;
	m.gen++;
	m.backoff_ms = 0;
	spawn_missing(c);
	signal_gen(old, 0, SIGTERM);
	log_info("reloaded: %lld + %lld route workers of generation %u started, generation %u told to stop",
		 (long long)c->api.workers, (long long)c->api.route_workers, m.gen, old);
}

static void shutdown_workers(void)
{
	int64_t deadline = util_now_ms() + SHUTDOWN_WAIT_MS;
	sigset_t none;

	sigemptyset(&none);
	signal_gen(0, 1, SIGTERM);
	if (m.reconciler)
		kill(m.reconciler, SIGTERM);
	for (;;) {
		int any = 0;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = 50 * 1000000 };
		reap(1);
		any = m.reconciler != 0;
		for (int i = 0; i < MAX_WORKERS; i++)
			any |= m.w[i].pid != 0;
		if (!any)
			return;
		if (util_now_ms() >= deadline)
			break;
		ppoll(NULL, 0, &ts, &none);
	}
	log_warn("workers did not stop within %d ms: killing them", SHUTDOWN_WAIT_MS);
	signal_gen(0, 1, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
}

/* Answer one scrape waiting on the metrics listener, if any. */
static void serve_scrape(void)
{
	int fd = accept4(m.metrics_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	metrics_gauge_set(APIM_WORKERS, 0, 0, live_count(m.gen, NPOOLS));
	metrics_serve(fd, apimetrics_registry(), m.metrics_used, SCRAPE_DEADLINE_MS);
	close(fd);
}

/* The metrics registry (shared with the workers forked later) and its
 * listener on api.metrics_listen ("": none). 0 or -1 with e. */
static int open_metrics(const struct sbx_conf *c, struct sbx_err *e)
{
	if (apimetrics_init(MAX_WORKERS + 1, e) < 0)
		return -1;
	m.metrics_used[MAX_WORKERS] = 1;
	if (!c->api.metrics_listen[0])
		return 0;
	m.metrics_fd = tcplisten_open(c->api.metrics_listen, 64, e);
	if (m.metrics_fd < 0) {
		err_prefix(e, "api.metrics_listen");
		return -1;
	}
	return 0;
}

int master_run(const struct master_opts *o, struct sbx_conf *c)
{
	struct sbx_err e;
	sigset_t none;
	int rc;

	err_clear(&e);
	if (store_init(c, &e) < 0) {
		log_error("%s", e.msg);   /* names redis.url or redis.sentinels */
		return 1;
	}
	rc = store_probe(&e);
	if (rc == -2) {
		log_error("refusing to start: %s", e.msg);
		return 1;
	}
	if (rc < 0)
		log_warn("redis is not reachable at start (%s); going on, workers retry", e.msg);
	/* No hiredis or curl state may exist in the master from here on. */
	store_release();

	if (FCGX_Init() != 0) {
		log_error("FCGX_Init failed");
		return 1;
	}
	if (open_listener(c, POOL_API, &e) < 0 || open_listener(c, POOL_ROUTE, &e) < 0 ||
	    open_metrics(c, &e) < 0) {
		log_error("%s", e.msg);
		remove_listeners();
		return 1;
	}
	/* After FCGX_Init, which installs its own handlers for some signals. */
	if (install_signals() < 0) {
		log_error("cannot install signal handlers: %s", strerror(errno));
		remove_listeners();
		return 1;
	}
	log_info("listening on %s with %lld workers, routing checks on %s with %lld%s%s",
		 c->api.listen, (long long)c->api.workers, c->api.route_listen,
		 (long long)c->api.route_workers, m.metrics_fd >= 0 ? ", metrics on " : "",
		 m.metrics_fd >= 0 ? c->api.metrics_listen : "");
	spawn_missing(c);
	m.next_reconcile_ms = util_now_ms() + c->api.reconcile_interval_ms;

	sigemptyset(&none);
	while (!got_term) {
		struct timespec ts = { .tv_sec = 1, .tv_nsec = 0 };
		struct pollfd scrape = { .fd = m.metrics_fd, .events = POLLIN };
		int64_t now = util_now_ms();
		int missing = (int)(c->api.workers + c->api.route_workers) - live_count(m.gen, NPOOLS);

		if (missing > 0 && now < m.next_spawn_ms) {
			int64_t wait = m.next_spawn_ms - now;
			ts.tv_sec = wait / 1000;
			ts.tv_nsec = (wait % 1000) * 1000000;
		}
		if (ppoll(&scrape, 1, &ts, &none) > 0 && (scrape.revents & POLLIN))
			serve_scrape();
		if (got_chld) {
			got_chld = 0;
			reap(0);
		}
		if (got_term)
			break;
		if (got_hup) {
			got_hup = 0;
			reload(o, c);
		}
		if (util_now_ms() >= m.next_spawn_ms)
			spawn_missing(c);
		maybe_reconcile(c);
	}
	log_info("stopping");
	close_listeners();
	if (m.metrics_fd >= 0)
		close(m.metrics_fd);
	shutdown_workers();
	remove_listeners();
	log_info("stopped");
	return 0;
}
