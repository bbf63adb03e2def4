/*
 * mounts.c — building (parent) and running (child) the mount plan.
 *
 * The layout inside the sandbox's private mount namespace, under base:
 *   base           tmpfs of disk_mib (the only writable storage)
 *   base/upper     overlay upper, base/work overlay work
 *   base/lower     with a user namespace: the image, idmapped to the
 *                  sandbox's ids (one image on disk serves every range)
 *   base/merged    overlay(lower = image, upper) -> the sandbox's /
 * and below merged: /usr (default image), /proc with masked and read-only
 * paths, /sys read-only, a small /dev, /dev/pts, /dev/shm, /tmp.
 */
#include "mounts.h"
#include "buf.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *keep(struct mnt_plan *p, char *s)
{
	if (!s)
		return NULL;
	if (p->nstrs == p->capstrs) {
		size_t nc = p->capstrs ? p->capstrs * 2 : 64;
		char **ns = realloc(p->strs, nc * sizeof(*ns));

		if (!ns) {
			free(s);
			return NULL;
		}
		p->strs = ns;
		p->capstrs = nc;
	}
	p->strs[p->nstrs++] = s;
	return s;
}

static const char *fmt(struct mnt_plan *p, const char *f, ...) __attribute__((format(printf, 2, 3)));
static const char *fmt(struct mnt_plan *p, const char *f, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, f);
	n = vasprintf(&s, f, ap);
	va_end(ap);
	if (n < 0 || n >= 4096) {
		if (n >= 0)
			free(s);
		return NULL;
	}
	return keep(p, s);
}

static struct mnt_op *add(struct mnt_plan *p, enum mnt_kind kind, const char *what)
{
	struct mnt_op *op;

	if (!what)
		return NULL;
	if (p->n == p->cap) {
		size_t nc = p->cap ? p->cap * 2 : 64;
		struct mnt_op *no = realloc(p->ops, nc * sizeof(*no));

		if (!no)
			return NULL;
		p->ops = no;
		p->cap = nc;
	}
	op = &p->ops[p->n++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->what = what;
	return op;
}

/* Helpers that return 0 or -1 (out of memory). t is relative to merged. */
struct ctx {
	struct mnt_plan *p;
	const char *merged;
	int fail;
};

static const char *in(struct ctx *c, const char *rel)
{
	const char *s = fmt(c->p, "%s%s", c->merged, rel);

	if (!s)
		c->fail = 1;
	return s;
}

static struct mnt_op *op_mount(struct ctx *c, const char *src, const char *rel, const char *fstype,
			       unsigned long fl, const char *data, int flags_op)
{
	struct mnt_op *op = add(c->p, MNT_MOUNT, fmt(c->p, "mount %s", rel));

	if (!op) {
		c->fail = 1;
		return NULL;
	}
	op->src = src;
	op->target = in(c, rel);
	op->fstype = fstype;
	op->mflags = fl;
	op->data = data;
	op->flags_op = flags_op;
	return op;
}

static void op_remount(struct ctx *c, const char *rel, unsigned long fl, int flags_op)
{
	struct mnt_op *op = add(c->p, MNT_REMOUNT_BIND, fmt(c->p, "remount %s", rel));

	if (!op) {
		c->fail = 1;
		return;
	}
	op->target = in(c, rel);
	op->mflags = fl;
	op->flags_op = flags_op;
}

static void op_simple(struct ctx *c, enum mnt_kind kind, const char *verb, const char *rel,
		      const char *src, unsigned mode, int flags_op)
{
	struct mnt_op *op = add(c->p, kind, fmt(c->p, "%s %s", verb, rel));

	if (!op) {
		c->fail = 1;
		return;
	}
	op->target = in(c, rel);
	op->src = src;
	op->mode = mode;
	op->flags_op = flags_op;
}

/* bind host path src onto rel read-only (with extra flags). */
static void bind_ro(struct ctx *c, const char *src, const char *rel, unsigned long extra, int flags_op)
{
	op_mount(c, src, rel, NULL, MS_BIND | MS_REC, NULL, flags_op);
	op_remount(c, rel, MS_RDONLY | extra, flags_op);
}

static const char *const proc_masked_files[] = {
	"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kallsyms",
	"/proc/latency_stats", "/proc/timer_stats", "/proc/kpagecount", "/proc/kpageflags",
	"/proc/kpagecgroup", "/proc/vmallocinfo", "/proc/modules", "/proc/config.gz",
	"/proc/slabinfo", "/proc/pagetypeinfo",
};
static const char *const proc_masked_dirs[] = { "/proc/acpi", "/proc/scsi", "/proc/driver" };
static const char *const proc_ro[] = { "/proc/sysrq-trigger", "/proc/sys", "/proc/irq", "/proc/bus",
				       "/proc/fs" };
static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };

int mnt_plan_build(struct mnt_plan *p, const struct mnt_params *mp, struct sbx_err *e)
{
	struct ctx c = { .p = p };
	const char *base, *upper, *work, *lower, *ovl, *tmpfs_opts, *hosts, *small, *devopts;
	struct mnt_op *op;
	const unsigned long nsd = MS_NOSUID | MS_NODEV, nsde = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	memset(p, 0, sizeof(*p));
	if (mp->disk_mib <= 0 || !mp->base || !mp->lower || !mp->hostname)
		return err_set(e, SBX_E_INTERNAL, "incomplete mount parameters");
	base = fmt(p, "%s", mp->base);
	upper = fmt(p, "%s/upper", mp->base);
	work = fmt(p, "%s/work", mp->base);
	c.merged = fmt(p, "%s/merged", mp->base);
	lower = mp->idmapped ? fmt(p, "%s/lower", mp->base) : mp->lower;
	tmpfs_opts = fmt(p, "size=%lldm,mode=0755,uid=%u,gid=%u", (long long)mp->disk_mib,
			 (unsigned)mp->owner, (unsigned)mp->owner);
	if (mp->layers && lower) {
		/* "<lower>/<a>:<lower>/<b>:..." from "a:b:..." */
		struct buf lb;
		int bad = 0;

		buf_init(&lb, 4000);
		for (const char *l = mp->layers; *l;) {
			size_t n = strcspn(l, ":");

			if (buf_printf(&lb, "%s%s/%.*s", l == mp->layers ? "" : ":", lower, (int)n, l) < 0) {
				bad = 1;
				break;
			}
			l += n + (l[n] == ':');
		}
		ovl = !bad && lb.data ? fmt(p, "lowerdir=%s,upperdir=%s,workdir=%s", lb.data, upper, work) : NULL;
		buf_release(&lb);
	} else {
		ovl = fmt(p, "lowerdir=%s,upperdir=%s,workdir=%s", lower ? lower : "", upper, work);
	}
	hosts = fmt(p, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
		    mp->hostname);
	small = fmt(p, "mode=1777,size=64m,uid=%u,gid=%u", (unsigned)mp->owner, (unsigned)mp->owner);
	devopts = fmt(p, "mode=0755,size=512k,uid=%u,gid=%u", (unsigned)mp->owner, (unsigned)mp->owner);
	if (!base || !upper || !work || !lower || !c.merged || !tmpfs_opts || !ovl || !hosts || !small || !devopts)
		goto oom;

	/* the sandbox's storage: tmpfs with upper + work, then the overlay */
	op = add(p, MNT_MOUNT, "mount sandbox tmpfs");
	if (!op)
		goto oom;
	op->src = "sbx";
	op->target = base;
	op->fstype = "tmpfs";
	op->mflags = nsd;
	op->data = tmpfs_opts;
	for (int i = 0; i < 3; i++) {
		const char *t = i == 0 ? upper : i == 1 ? work : c.merged;

		op = add(p, MNT_MKDIR, fmt(p, "mkdir %s", i == 0 ? "upper" : i == 1 ? "work" : "root"));
		if (!op)
			goto oom;
		op->target = t;
		op->mode = 0755;
		if (i == 0) {
			op = add(p, MNT_CHOWN, "chown upper");
			if (!op)
				goto oom;
			op->target = t;
			op->uid = mp->owner;
			op->gid = mp->owner;
		}
	}
	/* /etc/hosts naming the sandbox, written into the upper layer */
	op = add(p, MNT_MKDIR, "mkdir upper/etc");
	if (!op)
		goto oom;
	op->target = fmt(p, "%s/etc", upper);
	op->mode = 0755;
	op = add(p, MNT_CHOWN, "chown upper/etc");
	if (!op)
		goto oom;
	op->target = fmt(p, "%s/etc", upper);
	op->uid = mp->owner;
	op->gid = mp->owner;
	op = add(p, MNT_WRITE, "write /etc/hosts");
	if (!op)
		goto oom;
	op->target = fmt(p, "%s/etc/hosts", upper);
	op->data = hosts;
	op->mode = 0644;
	op->uid = mp->owner;
	if (mp->idmapped) {
		op = add(p, MNT_MKDIR, "mkdir lower");
		if (!op)
			goto oom;
		op->target = lower;
		op->mode = 0755;
		op = add(p, MNT_ATTACH, "attach the idmapped image");
		if (!op)
			goto oom;
		op->target = lower;
		op->fd = mp->lower_fd;
	}
	op = add(p, MNT_MOUNT, "mount overlay root");
	if (!op)
		goto oom;
	op->src = "overlay";
	op->target = c.merged;
	op->fstype = "overlay";
	op->mflags = MS_NODEV;
	op->data = ovl;

	if (mp->bind_usr)
		bind_ro(&c, "/usr", "/usr", MS_NODEV | MS_NOSUID, 0);
	op_simple(&c, MNT_MKDIR, "mkdir", "/workspace", NULL, 0755, 0);
	{
		struct mnt_op *ch = add(p, MNT_CHOWN, "chown /workspace");

		if (!ch)
			goto oom;
		ch->target = in(&c, "/workspace");
		/* the image's User owns it (unset: the sandbox's root) */
		ch->uid = mp->ws_uid ? mp->ws_uid : mp->owner;
		ch->gid = mp->ws_gid ? mp->ws_gid : mp->owner;
	}
	op_simple(&c, MNT_MKDIR, "mkdir", "/tmp", NULL, 01777, 0);
	op_mount(&c, "tmpfs", "/tmp", "tmpfs", nsd, small, 0);

	/* /proc: the sandbox's own, with masked and read-only paths */
	op_simple(&c, MNT_MKDIR, "mkdir", "/proc", NULL, 0555, 0);
	op_mount(&c, "proc", "/proc", "proc", nsde, NULL, 0);
	if (mp->userns) {
		/* root of a user namespace does not own this netns: let it bind low ports */
		struct mnt_op *w = add(p, MNT_WRITE, "write ip_unprivileged_port_start");

		if (!w)
			goto oom;
		w->target = in(&c, "/proc/sys/net/ipv4/ip_unprivileged_port_start");
		w->data = "0\n";
		w->flags_op = MNT_F_OPTIONAL;
		w->uid = (uid_t)-1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(proc_masked_files); i++)
		op_mount(&c, "/dev/null", proc_masked_files[i], NULL, MS_BIND, NULL, MNT_F_OPTIONAL);
	for (size_t i = 0; i < ARRAY_SIZE(proc_masked_dirs); i++)
		op_mount(&c, "tmpfs", proc_masked_dirs[i], "tmpfs", nsde | MS_RDONLY, "size=0",
			 MNT_F_OPTIONAL);
	for (size_t i = 0; i < ARRAY_SIZE(proc_ro); i++) {
		op_mount(&c, in(&c, proc_ro[i]), proc_ro[i], NULL, MS_BIND | MS_REC, NULL, MNT_F_OPTIONAL);
		op_remount(&c, proc_ro[i], MS_RDONLY | nsde, MNT_F_OPTIONAL);
	}

	/* /sys read-only, or an empty read-only tmpfs where sysfs is refused */
	op_simple(&c, MNT_MKDIR, "mkdir", "/sys", NULL, 0555, 0);
	op_mount(&c, "sysfs", "/sys", "sysfs", nsde | MS_RDONLY, NULL, MNT_F_FALLBACK);
	op_mount(&c, "tmpfs", "/sys", "tmpfs", nsde | MS_RDONLY, "size=0", 0);

	/* /dev: a small tmpfs with the basic character devices bound from the host */
	op_simple(&c, MNT_MKDIR, "mkdir", "/dev", NULL, 0755, 0);
	op_mount(&c, "tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, devopts, 0);
	for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
		const char *rel = fmt(p, "/dev/%s", dev_nodes[i]);
		const char *host = fmt(p, "/dev/%s", dev_nodes[i]);

		if (!rel || !host)
			goto oom;
		op_simple(&c, MNT_MKFILE, "create", rel, NULL, 0666, 0);
		op_mount(&c, host, rel, NULL, MS_BIND, NULL, 0);
	}
	op_simple(&c, MNT_MKDIR, "mkdir", "/dev/pts", NULL, 0755, 0);
	op_mount(&c, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		 "newinstance,ptmxmode=0666,mode=0620", 0);
	op_simple(&c, MNT_SYMLINK, "symlink", "/dev/ptmx", "pts/ptmx", 0, 0);
	op_simple(&c, MNT_SYMLINK, "symlink", "/dev/fd", "/proc/self/fd", 0, 0);
	op_simple(&c, MNT_SYMLINK, "symlink", "/dev/stdin", "/proc/self/fd/0", 0, 0);
	op_simple(&c, MNT_SYMLINK, "symlink", "/dev/stdout", "/proc/self/fd/1", 0, 0);
	op_simple(&c, MNT_SYMLINK, "symlink", "/dev/stderr", "/proc/self/fd/2", 0, 0);
	op_simple(&c, MNT_MKDIR, "mkdir", "/dev/shm", NULL, 01777, 0);
	op_mount(&c, "tmpfs", "/dev/shm", "tmpfs", nsde, small, 0);
	if (c.fail)
		goto oom;
	return 0;
oom:
	mnt_plan_release(p);
	return err_sys(e, ENOMEM, "cannot build the mount plan");
}

int mnt_open_idmapped(const char *dir, int userns_fd, struct sbx_err *e)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns_fd };
	auto_close int fd = (int)syscall(SYS_open_tree, AT_FDCWD, dir,
					 OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);

	if (fd < 0)
		return err_sys(e, errno, "cannot clone the image's mount");
	if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		return err_sys(e, errno, "cannot idmap the image's mount");
	return steal_fd(&fd);
}

void mnt_plan_release(struct mnt_plan *p)
{
	for (size_t i = 0; i < p->nstrs; i++)
		free(p->strs[i]);
	free(p->strs);
	free(p->ops);
	memset(p, 0, sizeof(*p));
}

/* The MS_* flags a bind remount must keep (locked or already set). */
static unsigned long current_flags(const char *path)
{
	struct statfs sv;
	unsigned long f = 0;

	/* statfs, not statvfs: a plain syscall (the kernel fills f_flags). */
	if (statfs(path, &sv) < 0)
		return 0;
	if (sv.f_flags & ST_NOSUID)
		f |= MS_NOSUID;
	if (sv.f_flags & ST_NODEV)
		f |= MS_NODEV;
	if (sv.f_flags & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (sv.f_flags & ST_RDONLY)
		f |= MS_RDONLY;
	if (sv.f_flags & ST_NOATIME)
		f |= MS_NOATIME;
	if (sv.f_flags & ST_NODIRATIME)
		f |= MS_NODIRATIME;
	if (sv.f_flags & ST_RELATIME)
		f |= MS_RELATIME;
	return f;
}

static int run_op(const struct mnt_op *op)
{
	int fd;

	switch (op->kind) {
	case MNT_MOUNT:
		return mount(op->src, op->target, op->fstype, op->mflags, op->data);
	case MNT_REMOUNT_BIND:
		return mount(NULL, op->target, NULL,
			     MS_BIND | MS_REMOUNT | op->mflags | current_flags(op->target), NULL);
	case MNT_MKDIR:
		if (mkdir(op->target, op->mode) < 0 && errno != EEXIST)
			return -1;
		return 0;
	case MNT_MKFILE:
		fd = open(op->target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, op->mode);
		if (fd < 0)
			return -1;
		close(fd);
		return 0;
	case MNT_SYMLINK:
		if (symlink(op->src, op->target) < 0 && errno != EEXIST)
			return -1;
		return 0;
	case MNT_WRITE: {
		size_t n = strlen(op->data);
		ssize_t w;

		fd = open(op->target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, op->mode);
		if (fd < 0)
			return -1;
		w = write(fd, op->data, n);
		if (w >= 0 && op->uid != (uid_t)-1 && fchown(fd, op->uid, op->uid) < 0)
			w = -1;
		close(fd);
		if (w < 0)
			return -1;
		if ((size_t)w != n) {
			errno = EIO;
			return -1;
		}
		return 0;
	}
	case MNT_CHOWN:
		return lchown(op->target, op->uid, op->gid);
	case MNT_ATTACH:
		return (int)syscall(SYS_move_mount, op->fd, "", AT_FDCWD, op->target,
				    MOVE_MOUNT_F_EMPTY_PATH);
	}
	errno = EINVAL;
	return -1;
}

int mnt_plan_run(const struct mnt_plan *p, const struct mnt_op **failed)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct mnt_op *op = &p->ops[i];

		if (run_op(op) == 0) {
			if (op->flags_op & MNT_F_FALLBACK)
				i++;
			continue;
		}
		if ((op->flags_op & MNT_F_OPTIONAL) && errno == ENOENT)
			continue;
		if (op->flags_op & MNT_F_FALLBACK)
			continue;
		*failed = op;
		return -1;
	}
	return 0;
}
