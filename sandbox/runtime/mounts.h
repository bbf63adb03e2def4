/*
 * mounts.h — the mount plan of a sandbox: every mkdir, mount, bind and
 * file the child makes to build its root, planned (and allocated) in the
 * parent so that the child of clone() only walks the list making syscalls.
 */
#ifndef SBX_MOUNTS_H
#define SBX_MOUNTS_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum mnt_kind {
	MNT_MOUNT,        /* mount(src, target, fstype, flags, data) */
	MNT_REMOUNT_BIND, /* MS_BIND|MS_REMOUNT|flags, keeping the flags already set */
	MNT_MKDIR,        /* mkdir(target, mode); EEXIST is fine */
	MNT_MKFILE,       /* create an empty file (a bind mount target) */
	MNT_SYMLINK,      /* symlink(src, target); EEXIST is fine */
	MNT_WRITE,        /* write data into a new file target with mode */
	MNT_CHOWN,        /* chown(target, uid, gid) */
	MNT_ATTACH,       /* move_mount(fd) onto target: a detached (idmapped) tree */
};

#define MNT_F_OPTIONAL 1  /* ENOENT on the target (or source) skips the op */
#define MNT_F_FALLBACK 2  /* on failure run the next op, on success skip it */

struct mnt_op {
	enum mnt_kind kind;
	int flags_op;           /* MNT_F_* */
	unsigned long mflags;   /* MS_* */
	unsigned mode;
	uid_t uid;
	gid_t gid;              /* MNT_CHOWN */
	int fd;                 /* MNT_ATTACH */
	const char *src, *target, *fstype, *data;
	const char *what;       /* the step, for errors: "mount /proc" */
};

struct mnt_plan {
	struct mnt_op *ops;
	size_t n, cap;
	char **strs;            /* every string of the plan (owned) */
	size_t nstrs, capstrs;
};

struct mnt_params {
	const char *base;       /* host directory the sandbox's tmpfs goes on */
	const char *lower;      /* image directory */
	const char *layers;     /* or NULL: lower holds layer dirs, these ':'-joined
				 * names of them, top first, are the lowerdirs */
	int idmapped;           /* lower_fd holds lower, idmapped to the sandbox's ids */
	int lower_fd;           /* open_tree() fd of the idmapped lower (the caller's) */
	int bind_usr;           /* the default image: bind the host's /usr read-only */
	int64_t disk_mib;       /* size of the tmpfs holding upper + work */
	uid_t owner;            /* host uid of the sandbox's root */
	uid_t ws_uid;           /* host ids of /workspace's owner: the image's User */
	gid_t ws_gid;
	const char *hostname;
	int userns;
};

/* Build the whole plan; 0 or -1 with e filled. The root to pivot into is
 * "<base>/merged" (mnt_root_path). Free with mnt_plan_release. */
int mnt_plan_build(struct mnt_plan *p, const struct mnt_params *mp, struct sbx_err *e);
void mnt_plan_release(struct mnt_plan *p);

/* A detached copy of the mount tree at dir (open_tree OPEN_TREE_CLONE)
 * whose ids are shifted through the user namespace userns_fd: a file
 * owned by id k on disk shows as the host id k maps to there. An O_CLOEXEC
 * fd (the caller's) for MNT_ATTACH, or -1 with e filled. */
int mnt_open_idmapped(const char *dir, int userns_fd, struct sbx_err *e);

/* Run the plan (in the child: syscalls only). 0, or -1 with errno set and
 * *failed pointing at the failing op. */
int mnt_plan_run(const struct mnt_plan *p, const struct mnt_op **failed);

#endif
