/*
 * cgroup.c — backend selection and the helpers both cgroup backends share.
 */
#include "cgroup.h"
#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

int cg_path(char *out, size_t size, const char *dir, const char *key, const char *file)
{
	int n;

	if (key && file)
		n = snprintf(out, size, "%s/%s/%s", dir, key, file);
	else if (key || file)
		n = snprintf(out, size, "%s/%s", dir, key ? key : file);
	else
		n = snprintf(out, size, "%s", dir);
	return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

int cg_write(const char *path, const char *value)
{
	auto_close int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t n = strlen(value);
	ssize_t w;

	if (fd < 0)
		return -1;
	w = write(fd, value, n);
	if (w < 0)
		return -1;
	if ((size_t)w != n) {
		errno = EIO;
		return -1;
	}
	return 0;
}

int cg_set(const char *dir, const char *key, const char *file, const char *value, int optional,
	   struct sbx_err *e)
{
	char p[PATH_MAX];

	if (cg_path(p, sizeof(p), dir, key, file) < 0)
		return err_set(e, SBX_E_INTERNAL, "cgroup path too long");
	if (cg_write(p, value) < 0) {
		if (optional && errno == ENOENT)
			return 0;
		return err_sys(e, errno, "cannot write '%s' to '%s'", value, file);
	}
	return 0;
}

int64_t cg_read_i64(const char *path)
{
	char buf[64];
	auto_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	char *end;
	long long v;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (errno || end == buf)
		return -1;
	return v;
}

int64_t cg_read_keyed(const char *path, const char *name)
{
	auto_free char *text = util_read_file(path, 65536, NULL);
	size_t nl = strlen(name);
	const char *p;

	if (!text)
		return -1;
	for (p = text; *p; ) {
		const char *eol = strchr(p, '\n');

		if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
			char *end;
			long long v;

			errno = 0;
			v = strtoll(p + nl + 1, &end, 10);
			return (errno || end == p + nl + 1) ? -1 : v;
		}
		if (!eol)
			break;
		p = eol + 1;
	}
	return -1;
}

/* SIGKILL every pid listed in procs_file once: 1 when it listed any, 0
 * when empty or gone, -1 when unreadable. */
static int kill_listed(const char *procs_file)
{
	auto_free char *text = util_read_file(procs_file, 1 << 20, NULL);
	int any = 0;
	char *p, *end;

	if (!text)
		return errno == ENOENT ? 0 : -1;
	for (p = text; *p; p = end) {
		long pid;

		errno = 0;
		pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 0) {
			kill((pid_t)pid, SIGKILL);
			any = 1;
		}
	}
	return any;
}

int cg_kill_procs(const char *procs_file)
{
	for (int round = 0; round < 200; round++) {
		int any = kill_listed(procs_file);
		struct timespec ts = { 0, 1000000 };

		if (any <= 0)
			return any;
		nanosleep(&ts, NULL);
	}
	errno = EBUSY;
	return -1;
}

void cg_kill_thaw(struct cg *cg, const char *key)
{
	char procs[PATH_MAX];
	struct sbx_err e = { 0 };

	if (cg->freezer < 0 || cg->ops->frozen(cg, key) != 1)
		return;
	if (cg_path(procs, sizeof(procs), cg->base[cg->freezer], key, "cgroup.procs") == 0)
		(void)kill_listed(procs);
	if (cg->ops->freeze(cg, key, 0, &e) < 0)
		log_warn("cannot thaw cgroup '%s': %s", key, e.msg);
}

int cg_freeze_all(struct cg *cg, int frozen)
{
	DIR *d;
	struct dirent *de;
	int n = 0;

	if (cg->freezer < 0 || !(d = opendir(cg->base[cg->freezer])))
		return -1;
	while ((de = readdir(d))) {
		struct sbx_err e = { 0 };

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (cg->ops->freeze(cg, de->d_name, frozen, &e) == 0)
			n++;
	}
	closedir(d);
	return n;
}

int cg_rmdir(const char *dir)
{
	for (int i = 0; i < 100; i++) {
		struct timespec ts = { 0, 1000000 };

		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -1;
		nanosleep(&ts, NULL);
	}
	return -1;
}

static void cg_clean_children(struct cg *cg, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char sub[PATH_MAX], procs[PATH_MAX];

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if (cg_path(sub, sizeof(sub), dir, de->d_name, NULL) < 0 ||
		    cg_path(procs, sizeof(procs), sub, "cgroup.procs", NULL) < 0)
			continue;
		cg_kill_thaw(cg, de->d_name);   /* an earlier run died while fenced */
		if (cg->ops == &cg_v2_ops) {
			char killf[PATH_MAX];

			if (cg_path(killf, sizeof(killf), sub, "cgroup.kill", NULL) == 0)
				(void)cg_write(killf, "1");
		}
		(void)cg_kill_procs(procs);
		if (cg_rmdir(sub) < 0)
			log_warn("cannot remove leftover cgroup '%s': %s", sub, strerror(errno));
		else
			log_info("removed leftover cgroup '%s'", sub);
	}
	closedir(d);
}

int cg_mem_bytes(int64_t memory_mib, char *out, size_t size)
{
	int n;

	if (memory_mib <= 0 || memory_mib > INT64_MAX / (1024 * 1024))
		return -1;
	n = snprintf(out, size, "%" PRId64, memory_mib * 1024 * 1024);
	return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

#define CG_CPU_PERIOD 100000

int cg_v1_cpu_quota(int64_t cpus_milli, char *quota, size_t qsize, char *period, size_t psize)
{
	int n1, n2;
	int64_t q;

	if (cpus_milli <= 0 || cpus_milli > 1000000)
		return -1;
	q = cpus_milli * CG_CPU_PERIOD / 1000;
	if (q < 1000)
		q = 1000;
	n1 = snprintf(quota, qsize, "%" PRId64, q);
	n2 = snprintf(period, psize, "%d", CG_CPU_PERIOD);
	if (n1 < 0 || (size_t)n1 >= qsize || n2 < 0 || (size_t)n2 >= psize)
		return -1;
	return 0;
}

int cg_v2_cpu_max(int64_t cpus_milli, char *out, size_t size)
{
	char q[32], p[32];
	int n;

	if (cg_v1_cpu_quota(cpus_milli, q, sizeof(q), p, sizeof(p)) < 0)
		return -1;
	n = snprintf(out, size, "%s %s", q, p);
	return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

/* Mount point of the v1 hierarchy carrying controller ctl, from mountinfo. */
static int find_v1_root(const char *ctl, char *out, size_t size)
{
	auto_free char *text = util_read_file("/proc/self/mountinfo", 1 << 20, NULL);
	char *line, *next;

	if (!text)
		return -1;
	for (line = text; line && *line; line = next) {
		char *mnt, *sep, *opts, *p, *end;
		int field = 0;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		sep = strstr(line, " - ");
		if (!sep || strncmp(sep + 3, "cgroup ", 7) != 0)
			continue;
		/* the super options are the last field after " - cgroup <src> " */
		opts = strrchr(sep, ' ');
		if (!opts)
			continue;
		opts++;
		for (p = opts; p && *p; p = end) {
			size_t len;

			end = strchr(p, ',');
			len = end ? (size_t)(end - p) : strlen(p);
			if (len == strlen(ctl) && strncmp(p, ctl, len) == 0)
				break;
			if (end)
				end++;
		}
		if (!p || !*p)
			continue;
		/* field 5 is the mount point */
		mnt = line;
		for (field = 0; field < 4 && mnt; field++) {
			mnt = strchr(mnt, ' ');
			if (mnt)
				mnt++;
		}
		if (!mnt)
			continue;
		end = strchr(mnt, ' ');
		if (!end)
			continue;
		*end = '\0';
		if (strchr(mnt, '\\'))
			continue;   /* escaped characters: not a path we create things under */
		if (snprintf(out, size, "%s", mnt) >= (int)size)
			return -1;
		return 0;
	}
	return -1;
}

static int mkdir_p2(const char *root, const char *parent, const char *node, char *out, size_t size)
{
	char mid[PATH_MAX];

	if (cg_path(mid, sizeof(mid), root, parent, NULL) < 0 ||
	    cg_path(out, size, root, parent, node) < 0) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (mkdir(mid, 0755) < 0 && errno != EEXIST)
		return -1;
	if (mkdir(out, 0755) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int is_pure_v2(void)
{
	struct statfs sf;
	auto_free char *ctl = NULL;

	if (statfs("/sys/fs/cgroup", &sf) < 0 || (unsigned long)sf.f_type != CGROUP2_SUPER_MAGIC)
		return 0;
	ctl = util_read_file("/sys/fs/cgroup/cgroup.controllers", 4096, NULL);
	return ctl && strstr(ctl, "memory") && strstr(ctl, "pids") && strstr(ctl, "cpu");
}

/* v2: enable the controllers for the children of dir. */
static int v2_enable(const char *dir)
{
	char p[PATH_MAX];

	if (cg_path(p, sizeof(p), dir, "cgroup.subtree_control", NULL) < 0)
		return -1;
	return cg_write(p, "+memory +pids +cpu");
}

struct cg *cg_new(const char *parent, const char *node, struct sbx_err *e)
{
	auto_free struct cg *cg = calloc(1, sizeof(*cg));

	if (!cg) {
		err_sys(e, ENOMEM, "cannot allocate cgroups");
		return NULL;
	}
	if (!parent[0] || strchr(parent, '.') == parent || strstr(parent, "..") || !node[0] ||
	    strchr(node, '/')) {
		err_set(e, SBX_E_INTERNAL, "bad cgroup parent '%s' or node '%s'", parent, node);
		return NULL;
	}
	if (is_pure_v2()) {
		char mid[PATH_MAX];

		cg->ops = &cg_v2_ops;
		cg->nroots = 1;
		cg->freezer = 0;
		if (mkdir_p2("/sys/fs/cgroup", parent, node, cg->base[0], sizeof(cg->base[0])) < 0) {
			err_sys(e, errno, "cannot create cgroup '%s/%s'", parent, node);
			return NULL;
		}
		if (cg_path(mid, sizeof(mid), "/sys/fs/cgroup", parent, NULL) < 0 ||
		    v2_enable("/sys/fs/cgroup") < 0 || v2_enable(mid) < 0 || v2_enable(cg->base[0]) < 0) {
			err_sys(e, errno, "cannot enable cgroup controllers under '%s'", parent);
			return NULL;
		}
	} else {
		static const char *const ctls[CG_MAX_ROOTS] = { "memory", "pids", "cpu", "freezer" };

		cg->ops = &cg_v1_ops;
		cg->nroots = 0;
		cg->freezer = -1;
		for (int i = 0; i < CG_MAX_ROOTS; i++) {
			char root[PATH_MAX];
			int optional = strcmp(ctls[i], "freezer") == 0;

			if (find_v1_root(ctls[i], root, sizeof(root)) < 0) {
				if (optional) {
					log_warn("cgroups: no v1 freezer hierarchy: a node that loses its "
						 "lease cannot freeze its sandboxes");
					continue;
				}
				err_set(e, SBX_E_INTERNAL, "no cgroup v1 hierarchy or v2 with the '%s' controller",
					ctls[i]);
				return NULL;
			}
			if (mkdir_p2(root, parent, node, cg->base[i], sizeof(cg->base[i])) < 0) {
				err_sys(e, errno, "cannot create cgroup '%s/%s' under '%s'", parent, node, root);
				return NULL;
			}
			cg->nroots = i + 1;
			if (optional)
				cg->freezer = i;
		}
	}
	/* The freezer first: killing a frozen leftover elsewhere would wait on it. */
	if (cg->freezer >= 0)
		cg_clean_children(cg, cg->base[cg->freezer]);
	for (int i = 0; i < cg->nroots; i++)
		if (i != cg->freezer)
			cg_clean_children(cg, cg->base[i]);
	log_info("cgroups: %s under '%s'", cg->ops->name, cg->base[0]);
	return steal_ptr(&cg);
}

void cg_free(struct cg *cg)
{
	if (!cg)
		return;
	/* Our node's level, then the shared parent if no other node uses it;
	 * both fail harmlessly while anything is left below them. */
	for (int i = 0; i < cg->nroots; i++) {
		char *slash;

		if (rmdir(cg->base[i]) < 0)
			continue;
		slash = strrchr(cg->base[i], '/');
		if (slash) {
			*slash = '\0';
			(void)rmdir(cg->base[i]);
		}
	}
	free(cg);
}
