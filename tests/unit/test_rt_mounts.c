/* Unit tests of the mount plan (sandbox/runtime/mounts.c) and image names (sandbox/runtime/image.c). */
#include "image.h"
#include "mounts.h"
#include "unit.h"

#include "ids.h"

#include <sys/mount.h>

static const struct mnt_op *find(const struct mnt_plan *p, const char *what, size_t *at)
{
	for (size_t i = 0; i < p->n; i++) {
		if (strcmp(p->ops[i].what, what) == 0) {
			if (at)
				*at = i;
			return &p->ops[i];
		}
	}
	return NULL;
}

TEST(rt_mounts_plan)
{
	struct mnt_plan p;
	struct sbx_err e = { 0 };
	struct mnt_params mp = { .base = "/var/lib/sbx/rt/root", .lower = "/img/default/x",
				 .bind_usr = 1, .disk_mib = 100, .owner = 100000,
				 .hostname = "box1", .userns = 1 };
	const struct mnt_op *op;
	size_t i_ovl = 0, i_proc = 0, i_usr = 0, i_sys = 0;

	CHECK_INT(mnt_plan_build(&p, &mp, &e), 0);
	CHECK(p.n > 20);
	/* the storage tmpfs first, bounded by the disk size and owned by the sandbox's root */
	CHECK_STR(p.ops[0].fstype, "tmpfs");
	CHECK_STR(p.ops[0].target, "/var/lib/sbx/rt/root");
	CHECK_STR(p.ops[0].data, "size=100m,mode=0755,uid=100000,gid=100000");
	op = find(&p, "mount overlay root", &i_ovl);
	CHECK(op != NULL);
	if (op) {
		CHECK_STR(op->data, "lowerdir=/img/default/x,upperdir=/var/lib/sbx/rt/root/upper,"
				    "workdir=/var/lib/sbx/rt/root/work");
		CHECK_STR(op->target, "/var/lib/sbx/rt/root/merged");
	}
	op = find(&p, "write /etc/hosts", NULL);
	CHECK(op && strstr(op->data, "127.0.1.1\tbox1\n"));
	/* /usr bound then remounted read-only, after the overlay */
	CHECK(find(&p, "mount /usr", &i_usr) != NULL);
	op = find(&p, "remount /usr", NULL);
	CHECK(op && (op->mflags & MS_RDONLY) && (op->mflags & MS_NOSUID));
	CHECK(i_usr > i_ovl);
	/* /proc before its masks; /proc/sys read-only */
	CHECK(find(&p, "mount /proc", &i_proc) != NULL);
	op = find(&p, "mount /proc/kcore", NULL);
	CHECK(op && strcmp(op->src, "/dev/null") == 0 && (op->flags_op & MNT_F_OPTIONAL));
	op = find(&p, "remount /proc/sys", NULL);
	CHECK(op && (op->mflags & MS_RDONLY));
	CHECK(find(&p, "write ip_unprivileged_port_start", NULL) != NULL);
	/* /sys read-only with a fallback */
	op = find(&p, "mount /sys", &i_sys);
	CHECK(op && (op->mflags & MS_RDONLY) && (op->flags_op & MNT_F_FALLBACK));
	CHECK(i_sys + 1 < p.n && p.ops[i_sys + 1].mflags & MS_RDONLY);
	CHECK(i_proc > i_ovl);
	op = find(&p, "mount /dev/pts", NULL);
	CHECK(op && strstr(op->data, "newinstance") && strstr(op->data, "ptmxmode=0666"));
	CHECK(find(&p, "mount /dev/null", NULL) != NULL);
	CHECK(find(&p, "mount /dev/shm", NULL) != NULL);
	CHECK(find(&p, "mount /tmp", NULL) != NULL);
	mnt_plan_release(&p);

	/* another image: no /usr bind, no userns sysctl */
	mp.bind_usr = 0;
	mp.userns = 0;
	CHECK_INT(mnt_plan_build(&p, &mp, &e), 0);
	CHECK(find(&p, "mount /usr", NULL) == NULL);
	CHECK(find(&p, "write ip_unprivileged_port_start", NULL) == NULL);
	mnt_plan_release(&p);

	/* an idmapped image: attached below base, before the overlay uses it */
	{
		size_t i_att = 0, i_root = 0;

		mp.idmapped = 1;
		mp.lower_fd = 7;
		CHECK_INT(mnt_plan_build(&p, &mp, &e), 0);
		op = find(&p, "attach the idmapped image", &i_att);
		CHECK(op && op->kind == MNT_ATTACH && op->fd == 7 &&
		      strcmp(op->target, "/var/lib/sbx/rt/root/lower") == 0);
		op = find(&p, "mount overlay root", &i_root);
		CHECK(op && strncmp(op->data, "lowerdir=/var/lib/sbx/rt/root/lower,", 36) == 0);
		CHECK(i_att > 0 && i_att < i_root);
		mnt_plan_release(&p);
		mp.idmapped = 0;
	}

	mp.disk_mib = 0;
	CHECK_INT(mnt_plan_build(&p, &mp, &e), -1);
}

TEST(rt_image_names)
{
	CHECK(ids_valid_image("default"));
	CHECK(ids_valid_image("debian-12.1_py"));
	CHECK(!ids_valid_image(""));
	CHECK(!ids_valid_image(".."));
	CHECK(!ids_valid_image(".hidden"));
	CHECK(!ids_valid_image("a/b"));
	CHECK(!ids_valid_image("Upper"));
	/* One rule in both tiers and the runtime: the first character is
	 * [a-z0-9], at most 63 characters. */
	CHECK(!ids_valid_image("-x"));
	CHECK(!ids_valid_image("_x"));
	CHECK(ids_valid_image("0123456789012345678901234567890123456789012345678901234567890ab"));
	CHECK(!ids_valid_image("0123456789012345678901234567890123456789012345678901234567890abc"));
	CHECK(ids_valid_env_name("PATH_2"));
	CHECK(!ids_valid_env_name("2PATH"));
	CHECK(!ids_valid_env_name("A-B"));
	CHECK(!ids_valid_env_name(""));
}
