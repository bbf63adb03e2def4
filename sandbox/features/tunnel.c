/*
 * tunnel.c — tunnel processes and their agent routes; see tunnel.h.
 */
#include "tunnel.h"
#include "agent_metrics.h"
#include "rkeys.h"
#include "rscripts.h"
#include "caps.h"
#include "forward.h"
#include "jsonv.h"
#include "log.h"
#include "registry.h"
#include "spawn.h"
#include "util.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static const struct tunnel_provider *const providers[] = {
	&tunnel_cloudflared,
};

struct tun;

/* A PUT waiting for its tunnel to be ready. Freed by the request's close
 * callback; t is NULL once answered. */
struct tun_wait {
	struct tun_wait *next;
	struct httpd_req *r;
	struct tun *t;
	int created;
};

struct tun {
	struct tun *next;
	struct agent *a;
	const struct tunnel_provider *prov;
	char key[AGENT_KEY_MAX];
	char tenant[64], id[64];
	int port;
	int64_t generation, run;
	char upstream[80];            /* the forwarder, host:port */
	pid_t pid;                    /* 0 once reaped */
	int pidfd, out_fd;
	struct event *ev_exit, *ev_out, *ev_timer;
	char line[TUNNEL_LINE_MAX];
	size_t line_len;
	int line_cut;                 /* the current line was too long: rest dropped */
	char url[TUNNEL_URL_MAX];
	int ready;
	int stopping;                 /* we asked it to end: no eviction */
	struct tun_wait *waiters;
};

static struct tun *tunnels;

const struct tunnel_provider *tunnel_provider_find(const char *name)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(providers); i++)
		if (strcmp(providers[i]->name, name) == 0)
			return providers[i];
	return NULL;
}

/* --- answers --- */

static json_t *tun_json(const struct tun *t, int created)
{
	return json_pack("{s:i, s:s, s:s, s:i, s:s, s:I, s:b, s:s}", "port", t->port, "url", t->url,
			 "provider", t->prov->name, "pid", (int)t->pid, "upstream", t->upstream,
			 "generation", (json_int_t)t->generation, "created", created, "state",
			 t->ready ? "ready" : t->stopping ? "stopping" : "starting");
}

/* Answer every waiter of t: its record when ready, else e. */
static void tun_answer(struct tun *t, const struct sbx_err *e)
{
	while (t->waiters) {
		struct tun_wait *w = t->waiters;

		t->waiters = w->next;
		w->t = NULL;
		if (t->ready && !e)
			httpd_reply_json(w->r, 200, tun_json(t, w->created));
		else
			agent_call_reply_err(w->r, e);
	}
}

static void wait_closed(void *arg, int failed)
{
	struct tun_wait *w = arg;

	if (w->t) {
		struct tun_wait **pp = &w->t->waiters;
		while (*pp && *pp != w)
			pp = &(*pp)->next;
		if (*pp)
			*pp = w->next;
	}
	free(w);
}

/* --- the process --- */

static void tun_signal(struct tun *t, int sig)
{
	/* The process leads its own group: its children get the signal too.
	 * The pid cannot be reused before we reap it. */
	if (t->pid > 0 && kill(-t->pid, sig) < 0 && errno == ESRCH)
		syscall(SYS_pidfd_send_signal, t->pidfd, sig, NULL, 0);
}

static void tun_unlink(struct tun *t)
{
	struct tun **pp = &tunnels;

	while (*pp && *pp != t)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = t->next;
		metrics_gauge_add(AM_TUNNEL_PROCS, 0, 0, -1);
	}
}

/* Free t once its process is reaped (waiters answered before). */
static void tun_free(struct tun *t)
{
	struct sbx_err e = { 0 };

	err_set(&e, SBX_E_NODE_UNAVAILABLE, "the tunnel process is gone");
	tun_answer(t, &e);
	tun_unlink(t);
	if (t->ev_exit)
		event_free(t->ev_exit);
	if (t->ev_out)
		event_free(t->ev_out);
	if (t->ev_timer)
		event_free(t->ev_timer);
	if (t->out_fd >= 0)
		close(t->out_fd);
	if (t->pidfd >= 0)
		close(t->pidfd);
	free(t);
}

static void grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun *t = arg;

	log_warn("tunnel %s port %d: pid %d still runs %lldms after SIGTERM; SIGKILL", t->key,
		 t->port, (int)t->pid, (long long)t->a->conf->agent.tunnel_stop_grace_ms);
	tun_signal(t, SIGKILL);
}

/* End t's process: SIGTERM, SIGKILL after the grace (now with kill_now).
 * t is freed when the process is reaped. Waiters get 503. */
static void tun_stop(struct tun *t, int kill_now, const char *why)
{
	struct sbx_err e = { 0 };
	int64_t ms = t->a->conf->agent.tunnel_stop_grace_ms;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	err_set(&e, SBX_E_NODE_UNAVAILABLE, "the tunnel was stopped: %s", why);
	tun_answer(t, &e);
	if (t->stopping && !kill_now)
		return;
	t->stopping = 1;
	log_info("tunnel %s port %d: stopping pid %d (%s)", t->key, t->port, (int)t->pid, why);
	if (kill_now || ms == 0) {
		tun_signal(t, SIGKILL);
		return;
	}
	tun_signal(t, SIGTERM);
	event_del(t->ev_timer);
	event_assign(t->ev_timer, t->a->base, -1, 0, grace_cb, t);
	event_add(t->ev_timer, &tv);
}

struct evict_note {
	struct agent *a;
	char tenant[64], id[64], provider[32], url[TUNNEL_URL_MAX];
	int port;
};

static void evict_reply(void *arg, struct redisReply *rep)
{
	struct evict_note *n = arg;

	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[0]->integer == 1) {
		const char *tid = rep->element[1]->type == REDIS_REPLY_STRING ? rep->element[1]->str : "";

		log_info("tunnel %s/%s port %d evicted (%s)", n->tenant, n->id, n->port, n->url);
		registry_command(n->a->reg, NULL, NULL,
				 RKEYS_XADD_EVENT "type tunnel-down tenant %s id %s "
				 "port %lld tunnel %s provider %s node %s reason %s",
				 n->tenant, n->id, (long long)n->port, tid, n->provider,
				 n->a->conf->agent.name, "process-exited");
	} else if (!rep) {
		log_warn("tunnel %s/%s port %d: redis went away before the eviction", n->tenant, n->id,
			 n->port);
	}
	free(n);
}

/* The process of a ready tunnel died on its own: drop its record when it
 * is still the one naming this URL. */
static void tun_evict(struct tun *t)
{
	struct evict_note *n;
	char hkey[RKEYS_MAX], pstr[8];

	if (!t->a->reg)
		return;
	n = calloc(1, sizeof(*n));
	if (!n)
		return;
	n->a = t->a;
	n->port = t->port;
	snprintf(n->tenant, sizeof(n->tenant), "%s", t->tenant);
	snprintf(n->id, sizeof(n->id), "%s", t->id);
	snprintf(n->provider, sizeof(n->provider), "%s", t->prov->name);
	snprintf(n->url, sizeof(n->url), "%s", t->url);
	rkeys_sandbox_sub(hkey, t->tenant, t->id, "tunnels");
	util_xsnprintf(pstr, sizeof(pstr), "%d", t->port);
	if (registry_command(t->a->reg, evict_reply, n, "EVAL %s 1 %s %s %s",
			     rscripts_source(RSCRIPT_TUNNEL_EVICT), hkey, pstr,
			     t->url) < 0) {
		log_warn("tunnel %s port %d: no redis connection; the API evicts the record when it "
			 "next checks it", t->key, t->port);
		free(n);
	}
}

static void exit_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun *t = arg;
	struct sbx_err e = { 0 };
	siginfo_t si;
	int rc;

	memset(&si, 0, sizeof(si));
	rc = waitid((idtype_t)P_PIDFD, (id_t)t->pidfd, &si, WEXITED | WNOHANG);
	if (rc < 0 && errno != ECHILD)
		return;
	if (rc == 0 && si.si_pid == 0)
		return;  /* not yet */
	log_info("tunnel %s port %d: pid %d %s %d", t->key, t->port, (int)t->pid,
		 si.si_code == CLD_EXITED ? "exited with" : "killed by signal", si.si_status);
	t->pid = 0;
	if (!t->ready && !t->stopping) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE, "the %s process ended before its tunnel was ready",
			t->prov->name);
		tun_answer(t, &e);
	} else if (t->ready && !t->stopping) {
		log_warn("tunnel %s port %d: its %s process died; evicting %s", t->key, t->port,
			 t->prov->name, t->url);
		tun_evict(t);
	}
	tun_free(t);
}

static void start_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun *t = arg;
	struct sbx_err e = { 0 };

	if (t->ready || t->stopping)
		return;
	err_set(&e, SBX_E_NODE_UNAVAILABLE, "the %s tunnel was not ready within %lldms",
		t->prov->name, (long long)t->a->conf->agent.tunnel_timeout_ms);
	log_warn("tunnel %s port %d: %s (%s)", t->key, t->port, e.msg,
		 t->url[0] ? "no readiness line" : "no URL line");
	tun_answer(t, &e);
	tun_stop(t, 1, "not ready in time");
}

/* One complete output line. */
static void tun_line(struct tun *t, const char *line)
{
	if (t->ready || t->stopping)
		return;
	log_info("tunnel %s port %d: %.200s", t->key, t->port, line);
	if (!t->url[0]) {
		t->prov->line_url(line, t->url, sizeof(t->url));
		return;
	}
	if (t->prov->line_ready(line)) {
		t->ready = 1;
		event_del(t->ev_timer);
		log_info("tunnel %s port %d ready: %s -> %s (pid %d)", t->key, t->port, t->url,
			 t->upstream, (int)t->pid);
		tun_answer(t, NULL);
	}
}

static void out_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun *t = arg;
	char buf[4096];
	ssize_t n = read(fd, buf, sizeof(buf));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* EOF: the process closed its output (or died); exit_cb ends it. */
		event_del(t->ev_out);
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		char c = buf[i];

		if (c == '\n' || c == '\r') {
			if (t->line_len > 0) {
				t->line[t->line_len] = '\0';
				tun_line(t, t->line);
			}
			t->line_len = 0;
			t->line_cut = 0;
		} else if (t->line_len + 1 < sizeof(t->line)) {
			t->line[t->line_len++] = c == '\0' ? ' ' : c;
		} else {
			t->line_cut = 1;
		}
	}
}

/* --- confinement of a tunnel process --- */

/* Everything the child needs, prepared by the parent. */
struct tun_jail {
	int cg_fds[RT_CGROUP_FDS];   /* cgroup.procs of the sandbox's cgroups */
	int ncg;
	uid_t uid;
	gid_t gid;
	int last_cap;
};

/* In the child, before the exec (syscalls only): join the sandbox's
 * cgroups, then become uid:gid with no groups, no capabilities (bounding,
 * ambient, inheritable sets empty too) and no_new_privs. The bounding set
 * goes first: dropping it needs CAP_SETPCAP, while setresuid() to a
 * non-root uid clears the permitted and effective sets itself. 0 or -1. */
static int jail_enter(const void *arg)
{
	const struct tun_jail *j = arg;
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	for (int i = 0; i < j->ncg; i++)
		if (write(j->cg_fds[i], "0", 1) != 1)
			return -1;
	for (int c = 0; c <= j->last_cap; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -1;
	if (setgroups(0, NULL) < 0 || setresgid(j->gid, j->gid, j->gid) < 0 ||
	    setresuid(j->uid, j->uid, j->uid) < 0)
		return -1;
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) < 0)
		return -1;
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

/* agent.tunnel_user (a name, or a numeric uid with its passwd entry's
 * group, or the same number as gid when it has none) into j. Never root.
 * 0 or -1 with e. */
static int jail_user(const struct sbx_conf *c, struct tun_jail *j, struct sbx_err *e)
{
	const char *name = c->agent.tunnel_user;
	struct passwd pw, *res = NULL;
	char buf[4096];
	int64_t n;

	if (util_parse_i64(name, 1, 4294967294LL, &n) == 0) {
		j->uid = (uid_t)n;
		j->gid = (gid_t)n;
		if (getpwuid_r(j->uid, &pw, buf, sizeof(buf), &res) == 0 && res)
			j->gid = pw.pw_gid;
	} else {
		if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || !res)
			return err_set(e, SBX_E_INTERNAL, "agent.tunnel_user '%s' does not exist", name);
		j->uid = pw.pw_uid;
		j->gid = pw.pw_gid;
	}
	if (j->uid == 0 || j->gid == 0)
		return err_set(e, SBX_E_INTERNAL, "agent.tunnel_user '%s' must not be root", name);
	return 0;
}

/* Start prov's process for sb's forwarder upstream of port. New tunnel
 * (in the table, starting) or NULL with e. */
static struct tun *tun_start(struct agent *a, struct agent_sb *sb,
			     const struct tunnel_provider *prov, int port, const char *upstream,
			     struct sbx_err *e)
{
	char prog[PATH_MAX], upurl[128];
	const char *argv[TUNNEL_MAX_ARGV];
	struct tun_jail jail = { .ncg = 0 };
	int out[2], w;
	struct tun *t;
	int64_t ms = a->conf->agent.tunnel_timeout_ms;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (prov->program(a->conf, prog, sizeof(prog), e) < 0)
		return NULL;
	w = snprintf(upurl, sizeof(upurl), "http://%s", upstream);
	if (w < 0 || (size_t)w >= sizeof(upurl)) {
		err_set(e, SBX_E_INTERNAL, "upstream address too long");
		return NULL;
	}
	prov->argv(prog, upurl, argv);
	t = calloc(1, sizeof(*t));
	if (!t) {
		err_sys(e, ENOMEM, "tunnel");
		return NULL;
	}
	t->a = a;
	t->prov = prov;
	t->pidfd = t->out_fd = -1;
	snprintf(t->key, sizeof(t->key), "%s", sb->key);
	snprintf(t->tenant, sizeof(t->tenant), "%s", sb->tenant);
	snprintf(t->id, sizeof(t->id), "%s", sb->id);
	snprintf(t->upstream, sizeof(t->upstream), "%s", upstream);
	t->port = port;
	t->generation = sb->generation;
	t->run = sb->run;
	if (pipe2(out, O_CLOEXEC | O_NONBLOCK) < 0) {
		err_sys(e, errno, "pipe");
		free(t);
		return NULL;
	}
	/* The child's end must block: a tool may not expect EAGAIN on stderr. */
	fcntl(out[1], F_SETFL, 0);
	jail.last_cap = caps_last_cap();
	if (jail_user(a->conf, &jail, e) < 0 ||
	    (jail.ncg = rt_cgroup_procs_open(sb->rt, jail.cg_fds, RT_CGROUP_FDS, e)) < 0) {
		log_error("tunnel %s port %d: %s", t->key, port, e->msg);
		close(out[0]);
		close(out[1]);
		free(t);
		return NULL;
	}
	/* stdin /dev/null, stdout+stderr into the pipe, its own process group
	 * (tun_signal), dying with the agent, confined (jail_enter) */
	{
		struct spawn_host_cmd cmd = {
			.path = prog, .argv = (char *const *)argv, .in = -1, .out = out[1], .err = out[1],
			.flags = SPAWN_HOST_PGROUP | SPAWN_HOST_PDEATHSIG,
			.pre_exec = jail_enter, .pre_arg = &jail,
		};

		t->pid = spawn_host(&cmd, &t->pidfd, e);
	}
	for (int i = 0; i < jail.ncg; i++)
		close(jail.cg_fds[i]);
	close(out[1]);
	t->out_fd = out[0];
	if (t->pid < 0) {
		t->pid = 0;
		tun_free(t);
		return NULL;
	}
	t->ev_exit = event_new(a->base, t->pidfd, EV_READ | EV_PERSIST, exit_cb, t);
	t->ev_out = event_new(a->base, t->out_fd, EV_READ | EV_PERSIST, out_cb, t);
	t->ev_timer = evtimer_new(a->base, start_timeout_cb, t);
	t->next = tunnels;
	tunnels = t;
	metrics_gauge_add(AM_TUNNEL_PROCS, 0, 0, 1);
	if (!t->ev_exit || !t->ev_out || !t->ev_timer || event_add(t->ev_exit, NULL) < 0 ||
	    event_add(t->ev_out, NULL) < 0 || event_add(t->ev_timer, &tv) < 0) {
		err_sys(e, ENOMEM, "tunnel events");
		tun_signal(t, SIGKILL);
		spawn_reap(t->pidfd, 1);
		t->pid = 0;
		tun_free(t);
		return NULL;
	}
	log_info("tunnel %s port %d: started %s (pid %d) for %s", t->key, port, prov->name,
		 (int)t->pid, upurl);
	return t;
}

static void tunnel_container_gone(struct agent *a, struct agent_sb *sb)
{
	for (struct tun *t = tunnels; t; t = t->next)
		if (!t->stopping && t->run == sb->run && strcmp(t->key, sb->key) == 0)
			tun_stop(t, 0, "its container is gone");
}

/* A new tunnel process for key would pass a cap: 0, or -1 with e
 * (QUOTA_EXCEEDED for the sandbox's, NO_CAPACITY for the node's; every
 * live process counts for the node, also those being stopped). */
static int tun_room(const struct sbx_conf *c, const char *key, struct sbx_err *e)
{
	int64_t mine = 0, all = 0;

	for (const struct tun *t = tunnels; t; t = t->next) {
		all++;
		mine += !t->stopping && strcmp(t->key, key) == 0;
	}
	if (mine >= c->agent.max_tunnels_per_sandbox)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "a sandbox runs at most %lld tunnel processes",
			       (long long)c->agent.max_tunnels_per_sandbox);
	if (all >= c->agent.max_tunnels)
		return err_set(e, SBX_E_NO_CAPACITY, "this node runs %lld tunnel processes, its limit",
			       (long long)all);
	return 0;
}

static struct tun *tun_find(const char *key, int port)
{
	for (struct tun *t = tunnels; t; t = t->next)
		if (!t->stopping && t->port == port && strcmp(t->key, key) == 0)
			return t;
	return NULL;
}

/* --- routes --- */

const struct jsonv_field agent_tunnel_put_fields[] = {
	{ "provider", JV_STRING, 1 },
	{ "generation", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

int agent_tunnel_put(struct agent_call *c, struct sbx_err *e)
{
	char upstream[80];
	const struct tunnel_provider *prov;
	int64_t generation = -1;
	struct agent_sb *sb;
	struct tun_wait *w;
	struct tun *t;
	int created;

	if (jsonv_int(c->body, "generation", 0, INT64_MAX, &generation, e) < 0)
		return -1;
	prov = tunnel_provider_find(json_string_value(json_object_get(c->body, "provider")));
	if (!prov)
		return err_set(e, SBX_E_VALIDATION, "unknown tunnel provider (this node runs: cloudflared)");
	sb = agent_sb_running(c->a, c->key, c->id, generation, e);
	if (!sb || fwd_open(c->a, sb, c->port, 1, upstream, sizeof(upstream), &created, e) < 0)
		return -1;
	sb->last_active_at = util_wall_ms();
	t = tun_find(c->key, c->port);
	if (t && (t->prov != prov || strcmp(t->upstream, upstream) != 0)) {
		tun_stop(t, 0, "replaced");
		t = NULL;
	}
	created = !t;
	if (!t && (tun_room(c->a->conf, c->key, e) < 0 ||
		   !(t = tun_start(c->a, sb, prov, c->port, upstream, e))))
		return -1;
	if (t->ready) {
		httpd_reply_json(c->r, 200, tun_json(t, 0));
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return err_sys(e, ENOMEM, "tunnel waiter");
	w->r = c->r;
	w->t = t;
	w->created = created;
	w->next = t->waiters;
	t->waiters = w;
	httpd_on_close(c->r, wait_closed, w);
	httpd_defer(c->r);
	return 0;
}

int agent_tunnel_get(struct agent_call *c, struct sbx_err *e)
{
	struct tun *t = tun_find(c->key, c->port);

	if (!t)
		return err_set(e, SBX_E_ROUTE_NOT_FOUND, "no tunnel process for port %d", c->port);
	httpd_reply_json(c->r, 200, tun_json(t, 0));
	return 0;
}

int agent_tunnel_delete(struct agent_call *c, struct sbx_err *e)
{
	struct tun *t = tun_find(c->key, c->port);

	if (t)
		tun_stop(t, 0, "deleted");
	httpd_reply_empty(c->r, 204);
	return 0;
}

const struct agent_module tunnel_module = { "tunnels", tunnel_container_gone };
