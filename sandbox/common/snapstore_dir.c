/*
 * snapstore_dir.c — the `dir` snapshot store: archives as files under
 * snapshots.dir (a local path, or a shared mount such as NFS for many
 * hosts). A new archive is written to "<loc>.tmp-<random>" beside its
 * place and renamed over it on commit, so readers never see a partial one.
 */
#include "snapstore.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int path_of(const struct snapstore *s, const char *loc, char *out, size_t n,
		   struct sbx_err *e)
{
	if (!snapstore_loc_valid(loc))
		return err_set(e, SBX_E_INTERNAL, "bad snapshot location '%s'", loc);
	if ((size_t)snprintf(out, n, "%s/%s", s->root, loc) >= n)
		return err_set(e, SBX_E_INTERNAL, "snapshot path too long");
	return 0;
}

static int dir_create(struct snapstore *s, const char *loc, struct snapstore_put *p,
		      struct sbx_err *e)
{
	char path[CONF_STR_MAX + SNAPSTORE_LOC_MAX], *slash;
	unsigned char rnd[8];
	char hex[17];

	p->fd = -1;
	if (path_of(s, loc, path, sizeof(path), e) < 0)
		return -1;
	slash = strrchr(path, '/');
	*slash = '\0';
	if (util_mkdir_p(path, 0700) < 0)
		return err_sys(e, errno, "cannot make the snapshot directory");
	if (util_random(rnd, sizeof(rnd)) < 0)
		return err_sys(e, errno, "random");
	util_hex(rnd, sizeof(rnd), hex);
	snprintf(p->loc, sizeof(p->loc), "%s", loc);
	if ((size_t)snprintf(p->tmp, sizeof(p->tmp), "%s/%s.tmp-%s", path, slash + 1, hex) >=
	    sizeof(p->tmp))
		return err_set(e, SBX_E_INTERNAL, "snapshot path too long");
	p->fd = open(p->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (p->fd < 0) {
		if (errno == ENOSPC || errno == EDQUOT)
			return err_set(e, SBX_E_NO_SPACE, "the snapshot store is full");
		return err_sys(e, errno, "cannot create a snapshot file");
	}
	return 0;
}

static int dir_commit(struct snapstore *s, struct snapstore_put *p, struct sbx_err *e)
{
	char path[CONF_STR_MAX + SNAPSTORE_LOC_MAX];

	if (path_of(s, p->loc, path, sizeof(path), e) < 0)
		goto fail;
	if (fdatasync(p->fd) < 0) {
		err_set(e, errno == ENOSPC || errno == EDQUOT ? SBX_E_NO_SPACE : SBX_E_INTERNAL,
			"cannot write the snapshot: %s", strerror(errno));
		goto fail;
	}
	if (rename(p->tmp, path) < 0) {
		err_sys(e, errno, "cannot commit the snapshot");
		goto fail;
	}
	close(p->fd);
	p->fd = -1;
	return 0;
fail:
	s->ops->abort(s, p);
	return -1;
}

static void dir_abort(struct snapstore *s, struct snapstore_put *p)
{
	(void)s;
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	if (p->tmp[0])
		unlink(p->tmp);
	p->tmp[0] = '\0';
}

static int dir_open(struct snapstore *s, const char *loc, struct sbx_err *e)
{
	char path[CONF_STR_MAX + SNAPSTORE_LOC_MAX];
	int fd;

	if (path_of(s, loc, path, sizeof(path), e) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "the archive of the snapshot is gone");
	if (fd < 0)
		return err_sys(e, errno, "cannot open a snapshot");
	return fd;
}

static int dir_remove(struct snapstore *s, const char *loc, struct sbx_err *e)
{
	char path[CONF_STR_MAX + SNAPSTORE_LOC_MAX];

	if (path_of(s, loc, path, sizeof(path), e) < 0)
		return -1;
	if (unlink(path) < 0 && errno != ENOENT)
		return err_sys(e, errno, "cannot remove a snapshot");
	return 0;
}

const struct snapstore_ops snapstore_dir_ops = {
	.name = "dir",
	.create = dir_create,
	.commit = dir_commit,
	.abort = dir_abort,
	.open = dir_open,
	.remove = dir_remove,
};
