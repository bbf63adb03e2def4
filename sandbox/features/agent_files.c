/*
 * agent_files.c — the Files API of a sandbox (API.md "Files"):
 *   GET/PUT/DELETE /v1/sandboxes/{id}/files/{path}, GET/PUT …/dirs/{path},
 *   GET …/stat/{path}, POST …/move.
 *
 * Safety rules (docs/SECURITY.md "File API"):
 * - Every path is normalised by fspath (no "..", no NUL, UTF-8, bounded)
 *   and resolved from the sandbox's root fd with openat2(RESOLVE_IN_ROOT |
 *   RESOLVE_NO_MAGICLINKS): symlinks, absolute or relative, resolve inside
 *   the sandbox's root, and /proc magic links (/proc/N/root, fd/N) are
 *   refused. RESOLVE_NO_XDEV is not used: /tmp, /dev/shm and /usr are
 *   mounts of the sandbox's own mount namespace. Instead the filesystem of
 *   every object touched is checked: reads only on tmpfs/overlay/ext4/xfs/
 *   btrfs, writes only on tmpfs/overlay (the sandbox's own storage), so
 *   procfs, sysfs, cgroupfs, devpts and friends are never read or written
 *   by the agent, which is root on the host.
 * - Operations that must not follow a final symlink (PUT, DELETE, stat,
 *   move) work on (parent fd, name) with *at() calls that never follow
 *   it: PUT replaces a symlink by a file, DELETE removes the link.
 * - Only regular files are read: the object is opened O_PATH, checked with
 *   fstat, and only then reopened for reading through /proc/self/fd (the
 *   same inode), so a FIFO or device is never opened for I/O.
 * - Uploads stream into an O_TMPFILE (or a random ".sbx-upload-*" name) in
 *   the target directory and land with one rename: a broken upload leaves
 *   the old file and no temp file; ENOSPC / EDQUOT answer 507.
 */
#include "agent.h"
#include "call.h"
#include "agent_files.h"
#include "agent_sse.h"
#include "buf.h"
#include "fspath.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILES_JSON_MAX (10 * 1024 * 1024)   /* ?encoding= answers */
#define FILES_LIST_DEFAULT 1000
#define FILES_LIST_MAX 10000
#define FILES_WALK_MAX 100000               /* entries looked at per listing */
#define FILES_WALK_DEPTH 64
#define FILES_RM_DEPTH 256

#ifndef OVERLAYFS_SUPER_MAGIC
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#endif
#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

/* --- resolution --- */

static int sb_root(const struct agent_sb *sb)
{
	return rt_root_fd(sb->rt);
}

/* openat2 inside the sandbox root: rel is an fspath rel path. Returns an
 * fd or -1 with errno. Retries the rare EAGAIN of a racing rename/mount. */
static int open_in_root(int root, const char *rel, int flags, unsigned mode)
{
	struct open_how how;
	int fd;

	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC);
	how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
	how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
	for (int i = 0; i < 8; i++) {
		fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			return fd;
	}
	return -1;
}

/* The filesystem of fd may be read (write = 0) or written (write = 1). */
static int fs_allowed(int fd, int write)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) < 0)
		return 0;
	switch ((unsigned long)sf.f_type) {
	case TMPFS_MAGIC:
	case OVERLAYFS_SUPER_MAGIC:
		return 1;
	case EXT4_SUPER_MAGIC:
	case XFS_SUPER_MAGIC:
	case BTRFS_SUPER_MAGIC:
		return !write;
	default:
		return 0;
	}
}

/* Map errno of an operation on path (the sandbox path the client gave) to
 * the error contract. Never a host path; never a 500 for what the sandbox
 * can arrange. */
static int files_errno(struct sbx_err *e, int err, const char *what, const char *path)
{
	switch (err) {
	case ENOENT:
		return err_set(e, SBX_E_FILE_NOT_FOUND, "'%s' does not exist", path);
	case ENOTDIR:
		return err_set(e, SBX_E_NOT_DIRECTORY, "a component of '%s' is not a directory", path);
	case EISDIR:
		return err_set(e, SBX_E_IS_DIRECTORY, "'%s' is a directory", path);
	case EEXIST:
		return err_set(e, SBX_E_FILE_EXISTS, "'%s' already exists", path);
	case ENOTEMPTY:
		return err_set(e, SBX_E_CONFLICT, "directory '%s' is not empty", path);
	case EBUSY:
		return err_set(e, SBX_E_CONFLICT, "'%s' is busy (a mount point)", path);
	case ENOSPC:
	case EDQUOT:
		return err_set(e, SBX_E_NO_SPACE, "no space left in the sandbox for '%s'", path);
	case EFBIG:
		return err_set(e, SBX_E_FILE_TOO_LARGE, "'%s' would be too large", path);
	case ELOOP:
		return err_set(e, SBX_E_VALIDATION,
			       "cannot %s '%s': too many symbolic links or a /proc magic link", what, path);
	case EXDEV:
		return err_set(e, SBX_E_VALIDATION, "cannot %s '%s' across filesystems", what, path);
	case EROFS:
		return err_set(e, SBX_E_VALIDATION, "cannot %s '%s': read-only filesystem", what, path);
	case EACCES:
	case EPERM:
		return err_set(e, SBX_E_VALIDATION, "cannot %s '%s': not permitted", what, path);
	case ENAMETOOLONG:
		return err_set(e, SBX_E_VALIDATION, "path '%s' is too long", path);
	case EINVAL:
		return err_set(e, SBX_E_VALIDATION, "cannot %s '%s': invalid operation", what, path);
	case EMLINK:
	case ETXTBSY:
		return err_set(e, SBX_E_CONFLICT, "cannot %s '%s': %s", what, path, strerror(err));
	default:
		return err_sys(e, err, "cannot %s '%s'", what, path);
	}
}

static int special_fs(struct sbx_err *e, const char *path)
{
	return err_set(e, SBX_E_NOT_REGULAR_FILE, "'%s' is on a special filesystem", path);
}

/* O_PATH|O_DIRECTORY fd of the parent of fp (resolved inside the root). */
static int open_parent(int root, const struct fspath *fp, struct sbx_err *e)
{
	char parent[FSPATH_MAX + 16];
	int fd;

	if (fp->parent_len == 0) {
		memcpy(parent, ".", 2);
	} else {
		memcpy(parent, fp->rel, fp->parent_len);
		parent[fp->parent_len] = '\0';
	}
	fd = open_in_root(root, parent, O_PATH | O_DIRECTORY, 0);
	if (fd < 0)
		return files_errno(e, errno, "open", fp->abs);
	return fd;
}

/* mkdir -p of rel inside root: an O_PATH fd of the directory, or -1.
 * *created is set when the last component was made here. New directories
 * belong to uid (the sandbox's root) with mode 0755. A non-directory in
 * the way → FILE_EXISTS. Each step resolves the prefix from the root with
 * RESOLVE_IN_ROOT, and mkdirat() never follows a symlink. */
static int make_dirs(int root, const char *rel, const char *abs, uid_t uid, int *created,
		     struct sbx_err *e)
{
	char prefix[FSPATH_MAX + 16];
	auto_close int cur = -1;
	size_t n = strlen(rel), i = 0;

	*created = 0;
	cur = open_in_root(root, rel, O_PATH | O_DIRECTORY, 0);
	if (cur >= 0)
		return steal_fd(&cur);
	if (errno != ENOENT) {
		if (errno == ENOTDIR)
			return err_set(e, SBX_E_FILE_EXISTS, "a file is in the way of directory '%s'", abs);
		return files_errno(e, errno, "open", abs);
	}
	cur = open_in_root(root, ".", O_PATH | O_DIRECTORY, 0);
	if (cur < 0)
		return files_errno(e, errno, "open", "/");
	while (i < n) {
		size_t len = strcspn(rel + i, "/");
		int next;

		memcpy(prefix, rel, i + len);
		prefix[i + len] = '\0';
		next = open_in_root(root, prefix, O_PATH | O_DIRECTORY, 0);
		if (next < 0 && errno == ENOENT) {
			char name[FSPATH_NAME_MAX + 1];

			memcpy(name, rel + i, len);
			name[len] = '\0';
			if (!fs_allowed(cur, 1))
				return special_fs(e, abs);
			if (mkdirat(cur, name, 0755) == 0) {
				if (fchownat(cur, name, uid, uid, AT_SYMLINK_NOFOLLOW) < 0)
					log_warn("cannot chown new directory in '%s': %s", abs, strerror(errno));
				*created = i + len == n;
			} else if (errno != EEXIST) {
				return files_errno(e, errno, "create directory", abs);
			}
			next = open_in_root(root, prefix, O_PATH | O_DIRECTORY, 0);
			if (next < 0 && errno == ENOENT)
				return err_set(e, SBX_E_FILE_EXISTS,
					       "a dangling symlink is in the way of directory '%s'", abs);
		}
		if (next < 0) {
			if (errno == ENOTDIR)
				return err_set(e, SBX_E_FILE_EXISTS, "a file is in the way of directory '%s'", abs);
			return files_errno(e, errno, "open", abs);
		}
		close(cur);
		cur = next;
		i += len;
		if (rel[i] == '/')
			i++;
	}
	return steal_fd(&cur);
}

/* Reopen an O_PATH fd of a checked regular file for reading (same inode). */
static int reopen_read(int pfd)
{
	char p[64];
	int k = snprintf(p, sizeof(p), "/proc/self/fd/%d", pfd);

	if (k < 0 || (size_t)k >= sizeof(p)) {
		errno = EINVAL;
		return -1;
	}
	return open(p, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
}

static const char *type_name(mode_t m)
{
	if (S_ISREG(m))
		return "file";
	if (S_ISDIR(m))
		return "directory";
	if (S_ISLNK(m))
		return "symlink";
	return "other";
}

/* {name, path, type, size, mode, modifiedAt}; new reference or NULL. */
static json_t *entry_json(const char *name, const char *abs, const struct stat *st)
{
	char mode[8], when[32];
	int64_t ms = (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;

	snprintf(mode, sizeof(mode), "%04o", (unsigned)(st->st_mode & 07777));
	util_iso8601(ms, when);
	return json_pack("{s:s, s:s, s:s, s:I, s:s, s:s}", "name", name, "path", abs, "type",
			 type_name(st->st_mode), "size", (json_int_t)st->st_size, "mode", mode,
			 "modifiedAt", when);
}

/* The sandbox and the parsed tail path of a data request. */
static struct agent_sb *begin(struct httpd_req *r, struct fspath *fp, struct sbx_err *e)
{
	struct agent_sb *sb = agent_data_sandbox(r, e);

	if (!sb)
		return NULL;
	if (fspath_from_url(httpd_tail(r), fp, e) < 0)
		return NULL;
	return sb;
}

/* A boolean query parameter: absent → 0; "true"/"1" → 1; "false"/"0" → 0. */
static int query_bool(struct httpd_req *r, const char *name, int *out, struct sbx_err *e)
{
	const char *v = httpd_query(r, name);

	*out = 0;
	if (!v)
		return 0;
	if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
		*out = 1;
	else if (strcmp(v, "false") != 0 && strcmp(v, "0") != 0)
		return err_set(e, SBX_E_VALIDATION, "query '%s' must be true or false", name);
	return 0;
}

/* --- GET …/files/{path} --- */

struct download {
	struct agent *a;
	struct agent_stream live;
};

static void download_close(void *arg, int failed)
{
	struct download *d = arg;

	agent_sb_stream_end(d->a, &d->live);
	free(d);
}

/* The whole file fd (size bytes) as the JSON of ?encoding=. */
static void reply_encoded(struct httpd_req *r, int fd, const struct fspath *fp, uint64_t size,
			  const char *encoding, struct sbx_err *e)
{
	struct buf data, b64;
	char chunk[64 * 1024];
	json_t *body;
	int utf8;

	if (size > FILES_JSON_MAX) {
		err_set(e, SBX_E_FILE_TOO_LARGE, "'%s' is larger than %d bytes; download it raw",
			fp->abs, FILES_JSON_MAX);
		httpd_reply_err(r, e);
		return;
	}
	buf_init(&data, FILES_JSON_MAX);
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			buf_release(&data);
			files_errno(e, errno, "read", fp->abs);
			httpd_reply_err(r, e);
			return;
		}
		if (n == 0)
			break;
		if (buf_add(&data, chunk, (size_t)n) < 0) {
			buf_release(&data);
			err_set(e, SBX_E_FILE_TOO_LARGE, "'%s' is larger than %d bytes; download it raw",
				fp->abs, FILES_JSON_MAX);
			httpd_reply_err(r, e);
			return;
		}
	}
	utf8 = ids_valid_utf8(data.data ? data.data : "", data.len);
	if (strcmp(encoding, "utf-8") == 0) {
		if (!utf8) {
			buf_release(&data);
			err_set(e, SBX_E_VALIDATION, "'%s' is not valid UTF-8 text; use encoding=base64",
				fp->abs);
			httpd_reply_err(r, e);
			return;
		}
		body = json_pack("{s:s, s:s%, s:s, s:I, s:s, s:b}", "path", fp->abs, "content",
				 data.data ? data.data : "", data.len, "encoding", "utf-8", "size",
				 (json_int_t)data.len, "mimeType", fspath_mime(fp->name), "isBinary", 0);
	} else {
		buf_init(&b64, (size_t)FILES_JSON_MAX * 2);
		if (codec_base64_encode(data.data ? data.data : "", data.len, &b64) < 0) {
			buf_release(&data);
			buf_release(&b64);
			err_sys(e, ENOMEM, "base64 of '%s'", fp->abs);
			httpd_reply_err(r, e);
			return;
		}
		body = json_pack("{s:s, s:s%, s:s, s:I, s:s, s:b}", "path", fp->abs, "content",
				 b64.data ? b64.data : "", b64.len, "encoding", "base64", "size",
				 (json_int_t)data.len, "mimeType", fspath_mime(fp->name), "isBinary",
				 !utf8);
		buf_release(&b64);
	}
	buf_release(&data);
	if (!body) {
		err_sys(e, ENOMEM, "answer for '%s'", fp->abs);
		httpd_reply_err(r, e);
		return;
	}
	httpd_reply_json(r, 200, body);
}

void agent_h_files_get(struct httpd_req *r)
{
	struct sbx_err e;
	struct fspath fp;
	struct agent_sb *sb;
	struct stat st;
	auto_close int pfd = -1;
	auto_close int fd = -1;
	const char *encoding;
	uint64_t first = 0, last = 0, size;
	int rg;
	struct download *d;

	err_clear(&e);
	sb = begin(r, &fp, &e);
	if (!sb)
		goto fail;
	encoding = httpd_query(r, "encoding");
	if (encoding && strcmp(encoding, "utf-8") != 0 && strcmp(encoding, "base64") != 0) {
		err_set(&e, SBX_E_VALIDATION, "encoding must be utf-8 or base64");
		goto fail;
	}
	/* O_PATH first: a FIFO or device is never opened for I/O. */
	pfd = open_in_root(sb_root(sb), fp.rel, O_PATH, 0);
	if (pfd < 0) {
		files_errno(&e, errno, "open", fp.abs);
		goto fail;
	}
	if (fstat(pfd, &st) < 0) {
		files_errno(&e, errno, "stat", fp.abs);
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		err_set(&e, SBX_E_IS_DIRECTORY, "'%s' is a directory", fp.abs);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		err_set(&e, SBX_E_NOT_REGULAR_FILE, "'%s' is not a regular file", fp.abs);
		goto fail;
	}
	if (!fs_allowed(pfd, 0)) {
		special_fs(&e, fp.abs);
		goto fail;
	}
	fd = reopen_read(pfd);
	if (fd < 0 || fstat(fd, &st) < 0) {
		files_errno(&e, errno, "open", fp.abs);
		goto fail;
	}
	if (encoding) {
		reply_encoded(r, fd, &fp, (uint64_t)st.st_size, encoding, &e);
		return;
	}
	size = (uint64_t)st.st_size;
	rg = fspath_range(httpd_header(r, "Range"), size, &first, &last);
	if (rg == -2) {
		char cr[64];

		snprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
		httpd_add_header(r, "Content-Range", cr);
		err_set(&e, SBX_E_RANGE_NOT_SATISFIABLE, "range not satisfiable for '%s' (%llu bytes)",
			fp.abs, (unsigned long long)size);
		goto fail;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		err_sys(&e, ENOMEM, "download");
		goto fail;
	}
	d->a = httpd_ctx(r);
	agent_sb_stream_begin(sb, &d->live);
	httpd_on_close(r, download_close, d);
	httpd_add_header(r, "Accept-Ranges", "bytes");
	if (rg == 1) {
		char cr[96];

		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)first,
			 (unsigned long long)last, (unsigned long long)size);
		httpd_add_header(r, "Content-Range", cr);
		httpd_reply_fd(r, 206, fspath_mime(fp.name), steal_fd(&fd), first, last - first + 1);
		return;
	}
	httpd_reply_fd(r, 200, fspath_mime(fp.name), steal_fd(&fd), 0, size);
	return;
fail:
	httpd_reply_err(r, &e);
}

/* --- PUT …/files/{path} (streamed body) --- */

struct upload {
	struct agent *a;
	struct httpd_req *r;
	struct agent_stream live;
	struct fspath fp;
	int dirfd;                 /* O_PATH of the target directory */
	int fd;                    /* the temp file */
	int tmpfile;               /* fd is an O_TMPFILE (else named tmpname) */
	char tmpname[64];
	int named;                 /* tmpname exists in dirfd */
	int existed;
	uid_t uid;
	uint64_t size;
	int failed;
};

static void upload_discard(struct upload *u)
{
	if (u->fd >= 0) {
		close(u->fd);
		u->fd = -1;
	}
	if (u->named) {
		unlinkat(u->dirfd, u->tmpname, 0);
		u->named = 0;
	}
}

static void upload_close(void *arg, int failed)
{
	struct upload *u = arg;

	upload_discard(u);
	if (u->dirfd >= 0)
		close(u->dirfd);
	agent_sb_stream_end(u->a, &u->live);
	free(u);
}

static int random_name(char *out, size_t n)
{
	unsigned char rnd[12];
	char hex[25];
	int k;

	if (util_random(rnd, sizeof(rnd)) < 0)
		return -1;
	util_hex(rnd, sizeof(rnd), hex);
	k = snprintf(out, n, ".sbx-upload-%s", hex);
	return k < 0 || (size_t)k >= n ? -1 : 0;
}

static void upload_fail(struct upload *u, struct sbx_err *e)
{
	u->failed = 1;
	upload_discard(u);
	httpd_reply_err(u->r, e);
}

/* Land the temp file as the target: link it under a random name (for an
 * O_TMPFILE) and rename that over the target in one step. */
static int upload_commit(struct upload *u, struct sbx_err *e)
{
	if (u->tmpfile) {
		for (int i = 0; i < 4 && !u->named; i++) {
			if (random_name(u->tmpname, sizeof(u->tmpname)) < 0)
				return err_sys(e, errno, "random");
			if (linkat(u->fd, "", u->dirfd, u->tmpname, AT_EMPTY_PATH) == 0)
				u->named = 1;
			else if (errno != EEXIST)
				return files_errno(e, errno, "write", u->fp.abs);
		}
		if (!u->named)
			return err_set(e, SBX_E_CONFLICT, "cannot name a temporary file for '%s'", u->fp.abs);
	}
	if (renameat(u->dirfd, u->tmpname, u->dirfd, u->fp.name) < 0)
		return files_errno(e, errno, "write", u->fp.abs);
	u->named = 0;
	return 0;
}

static int upload_sink(void *arg, const char *data, size_t len)
{
	struct upload *u = arg;
	struct sbx_err e;

	if (u->failed)
		return -1;
	if (data) {
		if (util_write_all(u->fd, data, len) < 0) {
			files_errno(&e, errno, "write", u->fp.abs);
			upload_fail(u, &e);
			return -1;
		}
		u->size += len;
		return 0;
	}
	err_clear(&e);
	if (!agent_stream_lease_held(u->a, &u->live)) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE,
			"this node lost its lease during the upload; nothing was written");
		upload_fail(u, &e);
		return -1;
	}
	if (upload_commit(u, &e) < 0) {
		upload_fail(u, &e);
		return -1;
	}
	close(u->fd);
	u->fd = -1;
	httpd_reply_json(u->r, u->existed ? 200 : 201,
			 json_pack("{s:s, s:I}", "path", u->fp.abs, "size", (json_int_t)u->size));
	return 0;
}

void agent_h_files_put(struct httpd_req *r)
{
	struct sbx_err e;
	struct agent_sb *sb;
	struct upload *u;
	struct stat st;
	const char *ms = httpd_query(r, "mode");
	unsigned mode = 0644;
	char parent[FSPATH_MAX + 16];
	int created;

	err_clear(&e);
	u = calloc(1, sizeof(*u));
	if (!u) {
		err_sys(&e, ENOMEM, "upload");
		httpd_reply_err(r, &e);
		return;
	}
	u->dirfd = u->fd = -1;
	u->a = httpd_ctx(r);
	u->r = r;
	httpd_on_close(r, upload_close, u);
	sb = begin(r, &u->fp, &e);
	if (!sb)
		goto fail;
	if (ms && fspath_mode(ms, &mode) < 0) {
		err_set(&e, SBX_E_VALIDATION, "mode must be octal permission bits (0000-0777)");
		goto fail;
	}
	if (!*u->fp.name) {
		err_set(&e, SBX_E_IS_DIRECTORY, "'/' is a directory");
		goto fail;
	}
	u->uid = rt_host_uid(sb->rt);
	memcpy(parent, u->fp.rel, u->fp.parent_len);
	parent[u->fp.parent_len] = '\0';
	u->dirfd = make_dirs(sb_root(sb), u->fp.parent_len ? parent : ".", u->fp.abs, u->uid,
			     &created, &e);
	if (u->dirfd < 0)
		goto fail;
	if (!fs_allowed(u->dirfd, 1)) {
		special_fs(&e, u->fp.abs);
		goto fail;
	}
	/* The target itself is never followed: a symlink is replaced. */
	if (fstatat(u->dirfd, u->fp.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode)) {
			err_set(&e, SBX_E_IS_DIRECTORY, "'%s' is a directory", u->fp.abs);
			goto fail;
		}
		if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
			err_set(&e, SBX_E_NOT_REGULAR_FILE, "'%s' is not a regular file", u->fp.abs);
			goto fail;
		}
		u->existed = 1;
	} else if (errno != ENOENT) {
		files_errno(&e, errno, "stat", u->fp.abs);
		goto fail;
	}
	u->fd = openat(u->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	if (u->fd >= 0) {
		u->tmpfile = 1;
	} else {
		for (int i = 0; i < 4 && u->fd < 0; i++) {
			if (random_name(u->tmpname, sizeof(u->tmpname)) < 0) {
				err_sys(&e, errno, "random");
				goto fail;
			}
			u->fd = openat(u->dirfd, u->tmpname,
				       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
			if (u->fd < 0 && errno != EEXIST) {
				files_errno(&e, errno, "create", u->fp.abs);
				goto fail;
			}
		}
		if (u->fd < 0) {
			err_set(&e, SBX_E_CONFLICT, "cannot create a temporary file for '%s'", u->fp.abs);
			goto fail;
		}
		u->named = 1;
	}
	if (fchown(u->fd, u->uid, u->uid) < 0 || fchmod(u->fd, mode) < 0) {
		files_errno(&e, errno, "create", u->fp.abs);
		goto fail;
	}
	agent_sb_stream_begin(sb, &u->live);
	httpd_body_sink(r, upload_sink, u);
	return;
fail:
	upload_discard(u);
	httpd_reply_err(r, &e);
}

/* --- DELETE …/files/{path} --- */

/* Remove name in dirfd and everything below it: never follows a symlink,
 * never descends into another filesystem (a mount point stays, EBUSY). */
static int remove_tree(int pdir, const char *name, int depth, int *err)
{
	struct stat st, pst;
	DIR *d;
	struct dirent *de;
	int fd;

	if (depth > FILES_RM_DEPTH) {
		*err = ELOOP;
		return -1;
	}
	fd = openat(pdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		*err = errno;
		return -1;
	}
	if (fstat(fd, &st) < 0 || fstat(pdir, &pst) < 0) {
		*err = errno;
		close(fd);
		return -1;
	}
	if (st.st_dev != pst.st_dev) {   /* a mount point: not ours to empty */
		*err = EBUSY;
		close(fd);
		return -1;
	}
	d = fdopendir(fd);
	if (!d) {
		*err = errno;
		close(fd);
		return -1;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat cst;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &cst, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			*err = errno;
			closedir(d);
			return -1;
		}
		if (S_ISDIR(cst.st_mode)) {
			if (remove_tree(dirfd(d), de->d_name, depth + 1, err) < 0) {
				closedir(d);
				return -1;
			}
		} else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
			*err = errno;
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	if (unlinkat(pdir, name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
		*err = errno;
		return -1;
	}
	return 0;
}

void agent_h_files_delete(struct httpd_req *r)
{
	struct sbx_err e;
	struct fspath fp;
	struct agent_sb *sb;
	struct stat st;
	auto_close int dfd = -1;
	int recursive, err = 0;

	err_clear(&e);
	sb = begin(r, &fp, &e);
	if (!sb || query_bool(r, "recursive", &recursive, &e) < 0)
		goto fail;
	if (!*fp.name) {
		err_set(&e, SBX_E_VALIDATION, "cannot delete '/'");
		goto fail;
	}
	dfd = open_parent(sb_root(sb), &fp, &e);
	if (dfd < 0)
		goto fail;
	if (fstatat(dfd, fp.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		files_errno(&e, errno, "delete", fp.abs);
		goto fail;
	}
	if (!fs_allowed(dfd, 1)) {
		special_fs(&e, fp.abs);
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		if (!recursive) {
			err_set(&e, SBX_E_IS_DIRECTORY, "'%s' is a directory; use recursive=true", fp.abs);
			goto fail;
		}
		if (remove_tree(dfd, fp.name, 0, &err) < 0) {
			files_errno(&e, err, "delete", fp.abs);
			goto fail;
		}
	} else if (unlinkat(dfd, fp.name, 0) < 0) {
		files_errno(&e, errno, "delete", fp.abs);
		goto fail;
	}
	httpd_reply_empty(r, 204);
	return;
fail:
	httpd_reply_err(r, &e);
}

/* --- GET …/dirs/{path} --- */

struct walk {
	json_t *entries;           /* array of entries (unsorted) */
	int hidden;
	int recursive;
	size_t seen;
	int truncated;
};

static void walk_dir(struct walk *w, int pdir, const char *abs, int depth)
{
	DIR *d;
	struct dirent *de;
	struct stat dst;
	int fd = openat(pdir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &dst) < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	while ((de = readdir(d))) {
		struct stat st;
		char path[FSPATH_MAX + 300];
		json_t *ent;
		int k;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_name[0] == '.' && !w->hidden)
			continue;
		if (w->seen >= FILES_WALK_MAX) {
			w->truncated = 1;
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!ids_valid_utf8(de->d_name, strlen(de->d_name)))
			continue;   /* a name JSON cannot carry; never seen through this API */
		k = snprintf(path, sizeof(path), "%s%s%s", abs, strcmp(abs, "/") == 0 ? "" : "/",
			     de->d_name);
		if (k < 0 || (size_t)k >= sizeof(path) || k > FSPATH_MAX)
			continue;
		w->seen++;
		ent = entry_json(de->d_name, path, &st);
		if (!ent || json_array_append_new(w->entries, ent) < 0)
			continue;
		if (w->recursive && S_ISDIR(st.st_mode) && st.st_dev == dst.st_dev &&
		    depth < FILES_WALK_DEPTH) {
			int cfd = openat(dirfd(d), de->d_name,
					 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (cfd >= 0) {
				walk_dir(w, cfd, path, depth + 1);
				close(cfd);
			}
		}
	}
	closedir(d);
}

static int cmp_entry(const void *pa, const void *pb)
{
	const json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
	const char *x = json_string_value(json_object_get(a, "path"));
	const char *y = json_string_value(json_object_get(b, "path"));

	/* component-wise: "/" sorts before every other byte */
	for (;; x++, y++) {
		unsigned char cx = (unsigned char)*x, cy = (unsigned char)*y;

		if (cx != cy) {
			if (cx == '/')
				return cy ? -1 : 1;
			if (cy == '/')
				return cx ? 1 : -1;
			return cx < cy ? -1 : 1;
		}
		if (!cx)
			return 0;
	}
}

void agent_h_dirs_get(struct httpd_req *r)
{
	struct sbx_err e;
	struct fspath fp;
	struct agent_sb *sb;
	struct walk w = { 0 };
	auto_close int dfd = -1;
	auto_free json_t **vec = NULL;
	const char *lim = httpd_query(r, "limit"), *cursor = httpd_query(r, "cursor");
	int64_t limit = FILES_LIST_DEFAULT;
	size_t n, start = 0, end;
	json_t *page = NULL, *body;
	char next[2 * FSPATH_MAX + 16] = "";

	err_clear(&e);
	sb = begin(r, &fp, &e);
	if (!sb || query_bool(r, "recursive", &w.recursive, &e) < 0 ||
	    query_bool(r, "hidden", &w.hidden, &e) < 0)
		goto fail;
	if (lim && util_parse_i64(lim, 1, FILES_LIST_MAX, &limit) < 0) {
		err_set(&e, SBX_E_VALIDATION, "limit must be 1-%d", FILES_LIST_MAX);
		goto fail;
	}
	if (cursor && (strlen(cursor) > 2 * FSPATH_MAX || strlen(cursor) % 2 != 0 ||
		       strspn(cursor, "0123456789abcdef") != strlen(cursor))) {
		err_set(&e, SBX_E_VALIDATION, "bad cursor");
		goto fail;
	}
	dfd = open_in_root(sb_root(sb), fp.rel, O_PATH | O_DIRECTORY, 0);
	if (dfd < 0) {
		files_errno(&e, errno, "list", fp.abs);
		goto fail;
	}
	if (!fs_allowed(dfd, 0)) {
		special_fs(&e, fp.abs);
		goto fail;
	}
	w.entries = json_array();
	if (!w.entries) {
		err_sys(&e, ENOMEM, "list");
		goto fail;
	}
	walk_dir(&w, dfd, fp.abs, 0);
	n = json_array_size(w.entries);
	vec = calloc(n ? n : 1, sizeof(*vec));
	if (!vec) {
		err_sys(&e, ENOMEM, "list");
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		vec[i] = json_array_get(w.entries, i);
	qsort(vec, n, sizeof(*vec), cmp_entry);
	if (cursor && *cursor) {
		/* the cursor is the hex of the last path of the previous page */
		char after[FSPATH_MAX + 300];
		size_t cl = strlen(cursor) / 2;
		json_t *probe;

		for (size_t i = 0; i < cl; i++) {
			unsigned v;
			if (sscanf(cursor + 2 * i, "%2x", &v) != 1)
				v = 0;
			after[i] = (char)v;
		}
		after[cl] = '\0';
		probe = json_pack("{s:s}", "path", after);
		if (!probe) {
			err_set(&e, SBX_E_VALIDATION, "bad cursor");
			goto fail;
		}
		while (start < n && cmp_entry(&vec[start], &probe) <= 0)
			start++;
		json_decref(probe);
	}
	end = start + (size_t)limit < n ? start + (size_t)limit : n;
	page = json_array();
	if (!page) {
		err_sys(&e, ENOMEM, "list");
		goto fail;
	}
	for (size_t i = start; i < end; i++)
		json_array_append(page, vec[i]);
	if (end < n) {
		const char *lp = json_string_value(json_object_get(vec[end - 1], "path"));
		util_hex(lp, strlen(lp), next);
	}
	body = json_pack("{s:s, s:o, s:b}", "path", fp.abs, "entries", page, "truncated",
			 w.truncated);
	page = NULL;
	if (body && *next && json_object_set_new(body, "cursor", json_string(next)) < 0) {
		json_decref(body);
		body = NULL;
	}
	json_decref(w.entries);
	httpd_reply_json(r, 200, body);
	return;
fail:
	json_decref(page);
	json_decref(w.entries);
	httpd_reply_err(r, &e);
}

/* --- PUT …/dirs/{path} --- */

void agent_h_dirs_put(struct httpd_req *r)
{
	struct sbx_err e;
	struct fspath fp;
	struct agent_sb *sb;
	auto_close int dfd = -1;
	int created = 0;

	err_clear(&e);
	sb = begin(r, &fp, &e);
	if (!sb)
		goto fail;
	dfd = make_dirs(sb_root(sb), fp.rel, fp.abs, rt_host_uid(sb->rt), &created, &e);
	if (dfd < 0)
		goto fail;
	httpd_reply_json(r, created ? 201 : 200, json_pack("{s:s}", "path", fp.abs));
	return;
fail:
	httpd_reply_err(r, &e);
}

/* --- GET …/stat/{path} --- */

void agent_h_stat_get(struct httpd_req *r)
{
	struct sbx_err e;
	struct fspath fp;
	struct agent_sb *sb;
	struct stat st;
	auto_close int dfd = -1;

	err_clear(&e);
	sb = begin(r, &fp, &e);
	if (!sb)
		goto fail;
	if (!*fp.name) {
		if (fstat(sb_root(sb), &st) < 0) {
			files_errno(&e, errno, "stat", fp.abs);
			goto fail;
		}
		httpd_reply_json(r, 200, entry_json("/", "/", &st));
		return;
	}
	dfd = open_parent(sb_root(sb), &fp, &e);
	if (dfd < 0)
		goto fail;
	if (fstatat(dfd, fp.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		files_errno(&e, errno, "stat", fp.abs);
		goto fail;
	}
	httpd_reply_json(r, 200, entry_json(fp.name, fp.abs, &st));
	return;
fail:
	httpd_reply_err(r, &e);
}

/* --- POST …/move --- */

static const struct jsonv_field move_fields[] = {
	{ "from", JV_STRING, 1 },
	{ "to", JV_STRING, 1 },
	{ "overwrite", JV_BOOL, 0 },
	{ NULL, 0, 0 },
};

void agent_h_move(struct httpd_req *r)
{
	struct sbx_err e;
	struct fspath from, to;
	struct agent_sb *sb;
	struct stat st;
	json_t *body = NULL;
	auto_close int fdir = -1;
	auto_close int tdir = -1;
	const char *data;
	size_t len;
	int overwrite;
	const json_t *jf, *jt;

	err_clear(&e);
	sb = agent_data_sandbox(r, &e);
	if (!sb)
		goto fail;
	data = httpd_body(r, &len);
	body = jsonv_parse(data, len, &e);
	if (!body || jsonv_check(body, move_fields, "move", &e) < 0)
		goto fail;
	jf = json_object_get(body, "from");
	jt = json_object_get(body, "to");
	overwrite = json_is_true(json_object_get(body, "overwrite"));
	if (fspath_parse(json_string_value(jf), json_string_length(jf), &from, &e) < 0 ||
	    fspath_parse(json_string_value(jt), json_string_length(jt), &to, &e) < 0)
		goto fail;
	if (!*from.name || !*to.name) {
		err_set(&e, SBX_E_VALIDATION, "cannot move '/'");
		goto fail;
	}
	fdir = open_parent(sb_root(sb), &from, &e);
	if (fdir < 0)
		goto fail;
	if (fstatat(fdir, from.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		files_errno(&e, errno, "move", from.abs);
		goto fail;
	}
	tdir = open_parent(sb_root(sb), &to, &e);
	if (tdir < 0)
		goto fail;
	if (!fs_allowed(fdir, 1) || !fs_allowed(tdir, 1)) {
		special_fs(&e, fs_allowed(fdir, 1) ? to.abs : from.abs);
		goto fail;
	}
	if (renameat2(fdir, from.name, tdir, to.name, overwrite ? 0 : RENAME_NOREPLACE) < 0) {
		int err = errno;

		if (err == EEXIST || (err == ENOTEMPTY && !overwrite))
			err_set(&e, SBX_E_FILE_EXISTS, "'%s' already exists", to.abs);
		else
			files_errno(&e, err, "move", err == ENOENT ? from.abs : to.abs);
		goto fail;
	}
	httpd_reply_json(r, 200, json_pack("{s:s, s:s}", "from", from.abs, "to", to.abs));
	json_decref(body);
	return;
fail:
	json_decref(body);
	httpd_reply_err(r, &e);
}
