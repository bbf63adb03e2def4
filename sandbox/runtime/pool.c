/*
 * pool.c — the warm pool of pre-built sandboxes (pool.h).
 */
#include "pool.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POOL_QUIET_MS 50           /* no build this soon after a claim: the claimer's
				    * first command comes now and must not wait */
#define POOL_DEFER_MAX_MS 250      /* claims never hold the refill back longer than this */
#define POOL_CHECK_MS 1000         /* liveness check of the members */
#define POOL_BACKOFF_MIN_MS 100
#define POOL_BACKOFF_MAX_MS 10000
#define POOL_HOSTNAME "pool"       /* hostname of a member until it is claimed */

struct pool {
	struct event_base *base;
	struct rt *rt;
	const struct sbx_conf *conf;
	struct rt_sandbox **members;   /* [0, n): ready, borrowed from rt */
	unsigned n, target;
	unsigned long long seq;        /* names "_pool-<seq>", never reused in a run */
	struct event *ev_refill, *ev_check;
	int64_t backoff_ms;
	int64_t last_claim_ms;         /* 0: none yet */
	int64_t short_since_ms;        /* when the pool fell below its size (0: full) */
	int drained;
	int filled_once;
	int64_t started_ms;
	struct rt_build *building;     /* the member being built, or NULL */
	struct pool_stats stats;
};

int pool_matches(const struct sbx_conf *conf, const struct rt_spec *spec)
{
	int64_t disk = spec->limits.disk_mib > 0 ? spec->limits.disk_mib : conf->sandbox.disk_mib;

	if (spec->image && spec->image[0] && strcmp(spec->image, "default") != 0)
		return 0;
	return spec->network == RT_NET_NONE && disk == conf->sandbox.disk_mib;
}

int pool_hosts_text(char *out, size_t size, const char *host)
{
	/* the same text mounts.c plans into a new sandbox's upper layer */
	int n = snprintf(out, size,
			 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
			 host);

	return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* ---- hand-over helpers ---------------------------------------------------- */

struct uts_job {
	int nsfd;
	const char *name;
	int err;
};

static void *uts_main(void *arg)
{
	struct uts_job *j = arg;

	/* this thread only: the agent's other threads keep the host's UTS */
	if (setns(j->nsfd, CLONE_NEWUTS) < 0 || sethostname(j->name, strlen(j->name)) < 0)
		j->err = errno;
	return NULL;
}

/* Set the hostname of the sandbox whose init is pid (our unreaped child,
 * so the pid cannot have been reused). 0 or -1 with e filled. */
static int set_hostname(pid_t pid, const char *name, struct sbx_err *e)
{
	char path[64];
	struct uts_job j = { .name = name };
	auto_close int fd = -1;
	sigset_t all, old;
	pthread_t t;
	int rc;

	util_xsnprintf(path, sizeof(path), "/proc/%d/ns/uts", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(e, errno, "cannot open the sandbox's UTS namespace");
	j.nsfd = fd;
	/* signals stay with the loop's thread */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&t, NULL, uts_main, &j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return err_sys(e, rc, "cannot start a thread");
	pthread_join(t, NULL);
	if (j.err)
		return err_sys(e, j.err, "cannot set the hostname");
	return 0;
}

/* Rewrite the sandbox's /etc/hosts (in its upper layer since the build)
 * for host. Resolved inside the sandbox root without following links. */
static int write_hosts(int root_fd, const char *host, struct sbx_err *e)
{
	char text[256];
	auto_close int fd = -1;
	struct stat st;
	size_t len;

	if (pool_hosts_text(text, sizeof(text), host) < 0)
		return err_set(e, SBX_E_INTERNAL, "hostname too long");
	fd = util_open_in_root(root_fd, "etc/hosts", O_WRONLY | O_TRUNC | O_NOFOLLOW, 0,
			       RESOLVE_NO_SYMLINKS);
	if (fd < 0)
		return err_sys(e, errno, "cannot open /etc/hosts");
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return err_sys(e, EINVAL, "/etc/hosts is not a regular file");
	len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len)
		return err_sys(e, errno ? errno : EIO, "cannot write /etc/hosts");
	return 0;
}

/* ---- refill --------------------------------------------------------------- */

static void schedule(struct pool *p, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

	if (!p->drained)
		event_add(p->ev_refill, &tv);
}

/* Drop the members whose init died. */
static void drop_dead(struct pool *p)
{
	unsigned i = 0;

	while (i < p->n) {
		struct rt_sandbox *sb = p->members[i];

		if (rt_alive(sb)) {
			i++;
			continue;
		}
		log_warn("warm pool: '%s' died; dropped", rt_key(sb));
		p->members[i] = p->members[--p->n];
		rt_destroy(p->rt, sb);
		p->stats.failures++;
	}
}

static void built(void *arg, struct rt_sandbox *sb, const struct sbx_err *e);

/* Start building one member off the loop (rt_create_async); built()
 * adds it. 0 or -1 with e filled. */
static int build_one(struct pool *p, struct sbx_err *e)
{
	char key[64];
	struct rt_spec spec;

	util_xsnprintf(key, sizeof(key), "_pool-%llu", ++p->seq);
	memset(&spec, 0, sizeof(spec));
	spec.key = key;
	spec.hostname = POOL_HOSTNAME;
	spec.image = "default";
	spec.network = RT_NET_NONE;
	spec.limits.disk_mib = p->conf->sandbox.disk_mib;
	p->building = rt_create_async(p->rt, &spec, 1, built, p, e);
	return p->building ? 0 : -1;
}

static void build_failed(struct pool *p, const struct sbx_err *e)
{
	p->stats.failures++;
	p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : POOL_BACKOFF_MIN_MS;
	if (p->backoff_ms > POOL_BACKOFF_MAX_MS)
		p->backoff_ms = POOL_BACKOFF_MAX_MS;
	log_warn("warm pool: cannot build a sandbox (retry in %lld ms): %s",
		 (long long)p->backoff_ms, e->msg);
	schedule(p, p->backoff_ms);
}

static void built(void *arg, struct rt_sandbox *sb, const struct sbx_err *e)
{
	struct pool *p = arg;

	p->building = NULL;
	if (!sb) {
		build_failed(p, e);
		return;
	}
	if (p->n >= p->target) {
		rt_destroy(p->rt, sb);
		return;
	}
	p->members[p->n++] = sb;
	p->stats.builds++;
	p->backoff_ms = 0;
	if (p->n < p->target)
		schedule(p, 0);   /* the next one on the next loop turn */
	else
		p->short_since_ms = 0;
	if (p->n >= p->target && !p->filled_once) {
		p->filled_once = 1;
		log_info("warm pool: %u sandboxes ready (%lld ms)", p->n,
			 (long long)(util_now_ms() - p->started_ms));
	}
}

static void on_refill(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;
	struct sbx_err e = { 0 };

	int64_t now = util_now_ms();

	(void)fd;
	(void)what;
	if (p->drained || p->building)
		return;   /* built() schedules the next one */
	drop_dead(p);
	if (p->n >= p->target) {
		p->short_since_ms = 0;
		return;
	}
	if (!p->short_since_ms)
		p->short_since_ms = now;
	/* a build takes CPU from a claimer's first command: not while one is
	 * about to come, unless claims have held it back too long */
	if (p->last_claim_ms && now - p->last_claim_ms < POOL_QUIET_MS &&
	    now - p->short_since_ms < POOL_DEFER_MAX_MS) {
		schedule(p, p->last_claim_ms + POOL_QUIET_MS - now);
		return;
	}
	if (rt_count(p->rt) + rt_building(p->rt) + rt_pooled_count(p->rt) >=
	    (unsigned)p->conf->agent.capacity)
		return;   /* the check timer tries again when room frees up */
	if (build_one(p, &e) < 0)
		build_failed(p, &e);
}

static void on_check(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;

	(void)fd;
	(void)what;
	if (p->drained)
		return;
	drop_dead(p);
	if (p->n < p->target && !evtimer_pending(p->ev_refill, NULL))
		schedule(p, 0);
}

/* After a claim (or a miss): refill; on_refill keeps the quiet time. */
static void refill_later(struct pool *p)
{
	p->last_claim_ms = util_now_ms();
	if (!evtimer_pending(p->ev_refill, NULL))
		schedule(p, POOL_QUIET_MS);
}

/* ---- API -------------------------------------------------------------------- */

struct pool *pool_new(struct event_base *base, struct rt *rt, const struct sbx_conf *conf,
		      struct sbx_err *e)
{
	struct pool *p;
	struct timeval check = { POOL_CHECK_MS / 1000, (POOL_CHECK_MS % 1000) * 1000 };

	if (conf->agent.warm_pool <= 0)
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return err_sys(e, ENOMEM, "cannot allocate the warm pool"), NULL;
	p->base = base;
	p->rt = rt;
	p->conf = conf;
	p->target = (unsigned)conf->agent.warm_pool;
	p->stats.target = p->target;
	p->started_ms = util_now_ms();
	p->members = calloc(p->target, sizeof(*p->members));
	p->ev_refill = evtimer_new(base, on_refill, p);
	p->ev_check = event_new(base, -1, EV_PERSIST, on_check, p);
	if (!p->members || !p->ev_refill || !p->ev_check || event_add(p->ev_check, &check) < 0) {
		pool_free(p);
		return err_sys(e, ENOMEM, "cannot set up the warm pool"), NULL;
	}
	schedule(p, 0);
	log_info("warm pool: %u sandboxes of the default spec (disk %lld MiB)", p->target,
		 (long long)conf->sandbox.disk_mib);
	return p;
}

void pool_drain(struct pool *p)
{
	if (!p)
		return;
	p->drained = 1;
	if (p->building)
		(void)rt_build_cancel(p->building, NULL, NULL);
	p->building = NULL;
	if (p->ev_refill)
		event_del(p->ev_refill);
	if (p->ev_check)
		event_del(p->ev_check);
	while (p->n > 0)
		rt_destroy(p->rt, p->members[--p->n]);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	pool_drain(p);
	if (p->ev_refill)
		event_free(p->ev_refill);
	if (p->ev_check)
		event_free(p->ev_check);
	free(p->members);
	free(p);
}

struct rt_sandbox *pool_claim(struct pool *p, const struct rt_spec *spec)
{
	struct sbx_err e = { 0 };

	if (!p || p->drained || !pool_matches(p->conf, spec))
		return NULL;
	while (p->n > 0) {
		struct rt_sandbox *sb = p->members[--p->n];
		int rc;

		if (!rt_alive(sb)) {
			rt_destroy(p->rt, sb);
			p->stats.failures++;
			continue;
		}
		rc = rt_claim(p->rt, sb, spec->key, &spec->limits, &e);
		if (rc == -1) {
			/* refused, unchanged: it stays in the pool; a fresh build
			 * gives the caller the same answer */
			p->members[p->n++] = sb;
			return NULL;
		}
		if (rc < 0 || set_hostname(rt_init_pid(sb), spec->hostname, &e) < 0 ||
		    write_hosts(rt_root_fd(sb), spec->hostname, &e) < 0) {
			log_warn("warm pool: cannot hand a sandbox over to '%s': %s", spec->key, e.msg);
			p->stats.failures++;
			rt_destroy(p->rt, sb);
			refill_later(p);
			return NULL;
		}
		p->stats.claims++;
		refill_later(p);
		return sb;
	}
	p->stats.misses++;
	refill_later(p);
	return NULL;
}

void pool_make_room(struct pool *p)
{
	if (!p || p->n == 0)
		return;
	if (rt_count(p->rt) + rt_pooled_count(p->rt) >= (unsigned)p->conf->agent.capacity)
		rt_destroy(p->rt, p->members[--p->n]);
}

