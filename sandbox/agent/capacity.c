/*
 * capacity.c — see capacity.h.
 */
#include "capacity.h"
#include "httpd.h"
#include "log.h"
#include "runtime.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void lower_to(long long *cap, const char **by, long long v, const char *name)
{
	if (v < 0)
		v = 0;
	if (v < *cap) {
		*cap = v;
		*by = name;
	}
}

long long capacity_of(const struct capacity_limits *l, long long live, const char **by)
{
	long long cap = l->configured, pool = l->warm_pool > 0 ? l->warm_pool : 0;

	*by = "agent.capacity";
	if (l->nofile >= 0)
		lower_to(&cap, by, (l->nofile - l->fds_base - l->fds_reserve) /
				   CAPACITY_FDS_PER_SANDBOX - pool, "nofile");
	if (l->pids_free >= 0)
		lower_to(&cap, by, live + l->pids_free - CAPACITY_PIDS_SPARE, "pids");
	if (l->uid_ranges >= 0)
		lower_to(&cap, by, l->uid_ranges - pool, "uid_ranges");
	if (l->namespaces >= 0)
		lower_to(&cap, by, l->namespaces - RT_IDMAP_KEEP - pool, "namespaces");
	return cap < 0 ? 0 : cap;
}

/* A number from a /proc file (its first field), or -1. */
static long long proc_number(const char *path)
{
	auto_free char *s = util_read_file(path, 256, NULL);
	long long v;

	if (!s || sscanf(s, "%lld", &v) != 1)
		return -1;
	return v;
}

/* Tasks the host can still start: the smaller of kernel.pid_max and
 * kernel.threads-max, less the tasks that run now (/proc/loadavg's
 * "runnable/total"); -1 when unknown. */
static long long pids_free(void)
{
	auto_free char *s = util_read_file("/proc/loadavg", 256, NULL);
	long long pid_max = proc_number("/proc/sys/kernel/pid_max");
	long long threads_max = proc_number("/proc/sys/kernel/threads-max");
	const char *slash = s ? strchr(s, '/') : NULL;
	long long total, top;

	if (!slash || sscanf(slash + 1, "%lld", &total) != 1 || pid_max < 0)
		return -1;
	top = threads_max >= 0 && threads_max < pid_max ? threads_max : pid_max;
	return top - total;
}

static long long open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long long n = 0;
	struct dirent *de;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1;   /* the directory's own fd */
}

void capacity_raise_nofile(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warn("cannot raise RLIMIT_NOFILE to %llu: %s", (unsigned long long)rl.rlim_max,
			 strerror(errno));
	else
		log_info("RLIMIT_NOFILE raised from %llu to %llu", (unsigned long long)was,
			 (unsigned long long)rl.rlim_max);
}

static long long nofile_now(long long *hard)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -1;
	if (hard)
		*hard = rl.rlim_max == RLIM_INFINITY ? -1 : (long long)rl.rlim_max;
	return rl.rlim_cur == RLIM_INFINITY ? -1 : (long long)rl.rlim_cur;
}

void capacity_init(struct capacity *c, const struct sbx_conf *conf, int userns)
{
	static const char *const ns[] = { "user", "mnt", "pid", "net", "ipc", "uts", "cgroup" };
	struct capacity_limits *l = &c->lim;
	const char *by;
	long long cap;

	memset(c, 0, sizeof(*c));
	l->configured = conf->agent.capacity;
	l->nofile = nofile_now(&c->nofile_hard);
	l->fds_base = open_fds();
	l->fds_reserve = conf->agent.max_connections + HTTPD_RESERVED_CONNS + RT_IDMAP_KEEP +
			 CAPACITY_FDS_SPARE;
	l->pids_free = pids_free();
	l->uid_ranges = userns ? conf->agent.uid_ranges : -1;
	l->namespaces = -1;
	/* with user namespaces, each sandbox's count falls to its own uid */
	for (size_t i = 0; !userns && i < ARRAY_SIZE(ns); i++) {
		char path[64];
		long long v;

		util_xsnprintf(path, sizeof(path), "/proc/sys/user/max_%s_namespaces", ns[i]);
		v = proc_number(path);
		if (v >= 0 && (l->namespaces < 0 || v < l->namespaces))
			l->namespaces = v;
	}
	l->warm_pool = conf->agent.warm_pool;
	cap = capacity_of(l, 0, &by);
	log_info("capacity: %lld sandboxes (set by %s; agent.capacity %lld, RLIMIT_NOFILE %lld, "
		 "%lld fds open, %lld kept for connections and streams, %lld pids free)",
		 cap, by, l->configured, l->nofile, l->fds_base, l->fds_reserve,
		 l->pids_free);
	if (strcmp(by, "nofile") == 0)
		log_warn("capacity: RLIMIT_NOFILE (%lld, hard %lld) allows fewer sandboxes than "
			 "agent.capacity (%lld): raise LimitNOFILE (deploy/systemd)", l->nofile,
			 c->nofile_hard, l->configured);
}

long long capacity_now(struct capacity *c, long long live, const char **by)
{
	c->lim.nofile = nofile_now(NULL);
	c->lim.pids_free = pids_free();
	return capacity_of(&c->lim, live, by);
}

int capacity_classify(struct sbx_err *e)
{
	const char *what;

	if (e->code != SBX_E_INTERNAL)
		return 0;
	switch (e->sys_errno) {
	case EMFILE:
	case ENFILE:
		what = "file descriptors";
		break;
	case ENOSPC:
	case EUSERS:
		what = "kernel objects (namespaces, cgroups or space)";
		break;
	case EAGAIN:
		what = "processes";
		break;
	case ENOMEM:
	case ENOBUFS:
		what = "memory";
		break;
	default:
		return 0;
	}
	log_warn("%s: answering no_capacity", e->msg);
	e->code = SBX_E_NO_CAPACITY;
	util_xsnprintf(e->msg, sizeof(e->msg), "this node is out of %s (%s): retry", what,
		       strerror(e->sys_errno));
	return 1;
}
