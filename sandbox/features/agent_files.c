/*
 * agent_files.c — the Files API of a sandbox (API.md "Files"):
 *   GET/PUT/DELETE /v1/sandboxes/{id}/files/{path}, GET/PUT …/dirs/{path},
 *   GET …/stat/{path}, POST …/move.
 *
 * The handlers parse and check the request on the agent's loop; the file
 * work itself runs in a helper process that has joined the sandbox
 * (files_worker.h: its cgroups, mount and user namespaces, as its root),
 * so the kernel applies the sandbox's permissions, keeps its mount points
 * busy and charges its memory. The child_* functions run in the helper.
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
 *   fstat, and only then reopened for reading through the host's
 *   /proc/self/fd (the same inode), so a FIFO or device is never opened
 *   for I/O.
 * - Uploads stream into an O_TMPFILE (or a random ".sbx-upload-*" name) in
 *   the target directory and land with one rename: a broken upload leaves
 *   the old file and no temp file; ENOSPC / EDQUOT answer 507, the
 *   sandbox's memory limit 413.
 */
#include "agent.h"
#include "call.h"
#include "agent_files.h"
#include "codec.h"
#include "buf.h"
#include "files_worker.h"
#include "fspath.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define FILES_JSON_MAX (32 * 1024 * 1024)   /* ?encoding= answers (Cloudflare's readFile) */
#define FILES_LIST_DEFAULT 1000
#define FILES_LIST_MAX 10000
#define FILES_WALK_MAX 100000               /* entries looked at per listing */
#define FILES_WALK_DEPTH 64
#define FILES_RM_DEPTH 256
#define FILES_RM_MAX 1000000               /* entries removed per recursive delete */

#ifndef OVERLAYFS_SUPER_MAGIC
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#endif
#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

/* --- resolution --- */

/* util_open_in_root() inside the sandbox root: rel is an fspath rel path. */
int files_open_in_root(int root, const char *rel, int flags, unsigned mode)
{
	return util_open_in_root(root, rel, flags, mode, 0);
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
int files_errno(struct sbx_err *e, int err, const char *what, const char *path)
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
	fd = files_open_in_root(root, parent, O_PATH | O_DIRECTORY, 0);
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
	cur = files_open_in_root(root, rel, O_PATH | O_DIRECTORY, 0);
	if (cur >= 0)
		return steal_fd(&cur);
	if (errno != ENOENT) {
		if (errno == ENOTDIR)
			return err_set(e, SBX_E_FILE_EXISTS, "a file is in the way of directory '%s'", abs);
		return files_errno(e, errno, "open", abs);
	}
	cur = files_open_in_root(root, ".", O_PATH | O_DIRECTORY, 0);
	if (cur < 0)
		return files_errno(e, errno, "open", "/");
	while (i < n) {
		size_t len = strcspn(rel + i, "/");
		int next;

		memcpy(prefix, rel, i + len);
		prefix[i + len] = '\0';
		next = files_open_in_root(root, prefix, O_PATH | O_DIRECTORY, 0);
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
			next = files_open_in_root(root, prefix, O_PATH | O_DIRECTORY, 0);
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

/* Reopen an O_PATH fd of a checked regular file for reading (same inode),
 * through the host's /proc (proc: its O_PATH fd; the sandbox's own /proc
 * does not know the helper's pid). */
static int reopen_read(int proc, int pfd)
{
	char p[64];
	int k = snprintf(p, sizeof(p), "self/fd/%d", pfd);

	if (k < 0 || (size_t)k >= sizeof(p)) {
		errno = EINVAL;
		return -1;
	}
	return openat(proc, p, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
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


/* A boolean query parameter: absent → 0; "true"/"1" → 1; "false"/"0" → 0. */
int files_query_bool(const struct agent_call *c, const char *name, int *out, struct sbx_err *e)
{
	const char *v = agent_call_query(c, name);

	*out = 0;
	if (!v)
		return 0;
	if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
		*out = 1;
	else if (strcmp(v, "false") != 0 && strcmp(v, "0") != 0)
		return err_set(e, SBX_E_VALIDATION, "query '%s' must be true or false", name);
	return 0;
}

/* Start the helper of a call (files_worker.h). 0 or -1 with e. */
static int run_helper(struct agent_call *c, enum fw_mode mode, unsigned timeout_s,
		      fw_child_fn fn, void *arg, struct sbx_err *e)
{
	struct fw_spec spec;

	memset(&spec, 0, sizeof(spec));
	spec.mode = mode;
	spec.timeout_s = timeout_s;
	spec.content_type = "application/json";
	spec.fn = fn;
	spec.arg = arg;
	return fw_start(c->r, c->sb, &spec, e);
}

/* In a helper: send e as the answer; the exit status. */
static int child_fail(const struct fw_env *env, const struct sbx_err *e)
{
	fw_send_err(env->chan, e);
	return 1;
}

/* In a helper: the checked regular file rel, opened for reading. */
static int open_regular(const struct fw_env *env, const struct fspath *fp, struct stat *st,
			struct sbx_err *e)
{
	auto_close int pfd = -1;
	int fd;

	/* O_PATH first: a FIFO or device is never opened for I/O. */
	pfd = files_open_in_root(env->root, fp->rel, O_PATH, 0);
	if (pfd < 0)
		return files_errno(e, errno, "open", fp->abs);
	if (fstat(pfd, st) < 0)
		return files_errno(e, errno, "stat", fp->abs);
	if (S_ISDIR(st->st_mode))
		return err_set(e, SBX_E_IS_DIRECTORY, "'%s' is a directory", fp->abs);
	if (!S_ISREG(st->st_mode))
		return err_set(e, SBX_E_NOT_REGULAR_FILE, "'%s' is not a regular file", fp->abs);
	if (!fs_allowed(pfd, 0))
		return special_fs(e, fp->abs);
	fd = reopen_read(env->proc, pfd);
	if (fd < 0 || fstat(fd, st) < 0) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		return files_errno(e, err, "open", fp->abs);
	}
	return fd;
}

/* --- GET …/files/{path} --- */

struct get_op {
	struct fspath fp;
	const char *encoding;      /* NULL: raw */
};

static int child_open(void *arg, const struct fw_env *env)
{
	struct get_op *o = arg;
	struct sbx_err e;
	struct stat st;
	auto_close int fd = -1;

	err_clear(&e);
	fd = open_regular(env, &o->fp, &st, &e);
	if (fd < 0)
		return child_fail(env, &e);
	return fw_send_fd(env->chan, fd, (uint64_t)st.st_size) < 0;
}

int files_json_escape(struct buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t run = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		size_t k = 2;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		if (buf_add(b, s + run, i - run) < 0)
			return -1;
		run = i + 1;
		esc[0] = '\\';
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			k = 6;
		}
		if (buf_add(b, esc, k) < 0)
			return -1;
	}
	return buf_add(b, s + run, n - run);
}

void files_utf8_feed(struct files_utf8 *u, const char *s, size_t n, int last)
{
	size_t head = 0, cut;

	if (!u->valid)
		return;
	if (u->ncarry) {
		/* complete the sequence carried over from the previous chunk */
		char tmp[8];
		size_t add = n < 4 - u->ncarry ? n : 4 - u->ncarry;
		int k;

		memcpy(tmp, u->carry, u->ncarry);
		memcpy(tmp + u->ncarry, s, add);
		k = codec_utf8_seq((const unsigned char *)tmp, u->ncarry + add);
		if (k < 0 && !last) {
			memcpy(u->carry, tmp, u->ncarry + add);
			u->ncarry += add;
			return;
		}
		if (k <= 0 || !ids_valid_utf8(tmp, (size_t)k)) {
			u->valid = 0;
			return;
		}
		head = (size_t)k - u->ncarry;
		u->ncarry = 0;
	}
	cut = last ? n : head + codec_utf8_complete_len(s + head, n - head);
	if (!ids_valid_utf8(s + head, cut - head)) {
		u->valid = 0;
		return;
	}
	memcpy(u->carry, s + cut, n - cut);
	u->ncarry = n - cut;
}

/* read() until n bytes or the end; the count or -1 with errno. */
static ssize_t read_full(int fd, char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = read(fd, buf + got, n - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}

/* In a helper: send b as 'D' records and empty it. */
static int send_buf(int chan, struct buf *b)
{
	for (size_t off = 0; off < b->len; off += FW_REC_MAX)
		if (fw_send(chan, 'D', b->data + off,
			    b->len - off < FW_REC_MAX ? b->len - off : FW_REC_MAX) < 0)
			return -1;
	buf_reset(b);
	return 0;
}

/* "<key>":<the JSON of v (stolen)><tail> appended to b. */
static int add_member(struct buf *b, const char *key, json_t *v, const char *tail)
{
	char *t = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	int rc;

	json_decref(v);
	if (!t)
		return -1;
	rc = buf_printf(b, "\"%s\":%s%s", key, t, tail);
	free(t);
	return rc;
}

/* In a helper: the whole file as the JSON of ?encoding=, streamed in
 * bounded records: {path, encoding, mimeType, content, size, isBinary}.
 * utf-8 checks the whole file first (a 400 must come before the answer);
 * a file that changes under the second pass aborts the answer. */
static int child_encoded(void *arg, const struct fw_env *env)
{
	struct get_op *o = arg;
	struct sbx_err e;
	struct stat st;
	struct files_utf8 u = { .valid = 1 };
	struct buf out, b64;
	char chunk[48 * 1024];     /* a multiple of 3: base64 needs no carry */
	auto_close int fd = -1;
	int utf8 = strcmp(o->encoding, "utf-8") == 0;
	uint64_t total = 0;
	ssize_t n;
	int rc = 1;

	err_clear(&e);
	fd = open_regular(env, &o->fp, &st, &e);
	if (fd < 0)
		return child_fail(env, &e);
	if ((uint64_t)st.st_size > FILES_JSON_MAX) {
		err_set(&e, SBX_E_FILE_TOO_LARGE, "'%s' is larger than %d bytes; download it raw",
			o->fp.abs, FILES_JSON_MAX);
		return child_fail(env, &e);
	}
	if (utf8) {
		while ((n = read_full(fd, chunk, sizeof(chunk))) > 0 && u.valid) {
			total += (uint64_t)n;
			if (total > FILES_JSON_MAX)
				break;
			files_utf8_feed(&u, chunk, (size_t)n, 0);
		}
		files_utf8_feed(&u, "", 0, 1);
		if (n < 0)
			return child_fail(env, (files_errno(&e, errno, "read", o->fp.abs), &e));
		if (total > FILES_JSON_MAX) {
			err_set(&e, SBX_E_FILE_TOO_LARGE, "'%s' is larger than %d bytes; download it raw",
				o->fp.abs, FILES_JSON_MAX);
			return child_fail(env, &e);
		}
		if (!u.valid) {
			err_set(&e, SBX_E_VALIDATION, "'%s' is not valid UTF-8 text; use encoding=base64",
				o->fp.abs);
			return child_fail(env, &e);
		}
		if (lseek(fd, 0, SEEK_SET) < 0)
			return child_fail(env, (files_errno(&e, errno, "read", o->fp.abs), &e));
		u.valid = 1;
		u.ncarry = 0;
	}
	buf_init(&out, 8 * sizeof(chunk));
	buf_init(&b64, 2 * sizeof(chunk));
	if (fw_send_head(env->chan, 200) < 0 || buf_adds(&out, "{") < 0 ||
	    add_member(&out, "path", json_string(o->fp.abs), ",") < 0 ||
	    add_member(&out, "encoding", json_string(utf8 ? "utf-8" : "base64"), ",") < 0 ||
	    add_member(&out, "mimeType", json_string(fspath_mime(o->fp.name)), ",\"content\":\"") < 0)
		goto out;
	total = 0;
	while ((n = read_full(fd, chunk, sizeof(chunk))) > 0) {
		total += (uint64_t)n;
		if (total > FILES_JSON_MAX)
			goto out;   /* it grew: abort */
		files_utf8_feed(&u, chunk, (size_t)n, 0);
		if (utf8 && !u.valid)
			goto out;   /* it changed: abort */
		if (utf8) {
			if (files_json_escape(&out, chunk, (size_t)n) < 0)
				goto out;
		} else {
			buf_reset(&b64);
			if (codec_base64_encode(chunk, (size_t)n, &b64) < 0 || buf_add(&out, b64.data, b64.len) < 0)
				goto out;
		}
		if (send_buf(env->chan, &out) < 0)
			goto out;
	}
	if (n < 0)
		goto out;
	files_utf8_feed(&u, "", 0, 1);
	if (utf8 && !u.valid)
		goto out;
	if (buf_printf(&out, "\",\"size\":%llu,\"isBinary\":%s}", (unsigned long long)total,
		       u.valid ? "false" : "true") < 0 ||
	    send_buf(env->chan, &out) < 0 || fw_send(env->chan, 'E', NULL, 0) < 0)
		goto out;
	rc = 0;
out:
	buf_release(&out);
	buf_release(&b64);
	return rc;
}

/* FW_FD: the helper opened the file; the agent sends it (sendfile). */
static void send_file(struct httpd_req *r, struct agent_sb *sb, int fd, uint64_t size, void *arg)
{
	const struct agent_call view = { .r = r, .args = arg };   /* arg: the call's args */
	struct sbx_err e;
	struct fspath fp;
	uint64_t first = 0, last = 0;
	int rg;

	(void)sb;
	err_clear(&e);
	/* the path was valid when the call started: parse it again for its name */
	if (fspath_from_url(agent_call_tail(&view), &fp, &e) < 0) {
		close(fd);
		agent_call_reply_err(r, &e);
		return;
	}
	rg = fspath_range(agent_call_header(&view, "Range"), size, &first, &last);
	if (rg == -2) {
		char cr[64];

		close(fd);
		util_xsnprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
		httpd_add_header(r, "Content-Range", cr);
		err_set(&e, SBX_E_RANGE_NOT_SATISFIABLE, "range not satisfiable for '%s' (%llu bytes)",
			fp.abs, (unsigned long long)size);
		agent_call_reply_err(r, &e);
		return;
	}
	httpd_add_header(r, "Accept-Ranges", "bytes");
	if (rg == 1) {
		char cr[96];

		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)first,
			 (unsigned long long)last, (unsigned long long)size);
		httpd_add_header(r, "Content-Range", cr);
		httpd_reply_fd(r, 206, fspath_mime(fp.name), fd, first, last - first + 1);
		return;
	}
	if (agent_call_offer(r, AGENT_FILES_FD, &(struct agent_files_fd){ fd, size, fp.name }))
		return;
	httpd_reply_fd(r, 200, fspath_mime(fp.name), fd, 0, size);
}

int agent_files_get(struct agent_call *c, struct sbx_err *e)
{
	struct get_op o;
	struct fw_spec spec;

	memset(&o, 0, sizeof(o));
	if (fspath_from_url(agent_call_tail(c), &o.fp, e) < 0)
		return -1;
	o.encoding = agent_call_query(c, "encoding");
	if (o.encoding && strcmp(o.encoding, "utf-8") != 0 && strcmp(o.encoding, "base64") != 0)
		return err_set(e, SBX_E_VALIDATION, "encoding must be utf-8 or base64");
	memset(&spec, 0, sizeof(spec));
	spec.arg = &o;
	if (!o.encoding) {
		spec.mode = FW_FD;
		spec.timeout_s = FW_META_TIMEOUT_S;
		spec.fn = child_open;
		spec.on_fd = send_file;
		spec.fd_arg = (void *)c->args;   /* NULL, or as long as the request */
	} else {
		/* a filter (the compat view) rewrites the JSON: it needs it whole */
		spec.mode = agent_call_viewed(c->r) ? FW_COLLECT : FW_STREAM;
		spec.timeout_s = FW_TRANSFER_TIMEOUT_S;
		spec.content_type = "application/json";
		spec.fn = child_encoded;
	}
	return fw_start(c->r, c->sb, &spec, e);
}

/* --- PUT …/files/{path} --- */

struct put_op {
	struct fspath fp;
	unsigned mode;
};

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

/* The temp file of an upload in the target directory. */
struct upload {
	int dirfd;                 /* O_PATH of the target directory */
	int fd;                    /* the temp file */
	int tmpfile;               /* fd is an O_TMPFILE (else named tmpname) */
	char tmpname[64];
	int named;                 /* tmpname exists in dirfd */
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

/* Land the temp file as the target: link it under a random name (for an
 * O_TMPFILE) and rename that over the target in one step. */
static int upload_commit(struct upload *u, const struct fspath *fp, struct sbx_err *e)
{
	if (u->tmpfile) {
		for (int i = 0; i < 4 && !u->named; i++) {
			if (random_name(u->tmpname, sizeof(u->tmpname)) < 0)
				return err_sys(e, errno, "random");
			if (linkat(u->fd, "", u->dirfd, u->tmpname, AT_EMPTY_PATH) == 0)
				u->named = 1;
			else if (errno != EEXIST)
				return files_errno(e, errno, "write", fp->abs);
		}
		if (!u->named)
			return err_set(e, SBX_E_CONFLICT, "cannot name a temporary file for '%s'", fp->abs);
	}
	if (renameat(u->dirfd, u->tmpname, u->dirfd, fp->name) < 0)
		return files_errno(e, errno, "write", fp->abs);
	u->named = 0;
	return 0;
}

/* Create the temp file of an upload of fp (mode); 0 with *existed, or -1. */
static int upload_open(int root, const struct fspath *fp, unsigned mode, struct upload *u,
		       int *existed, struct sbx_err *e)
{
	char parent[FSPATH_MAX + 16];
	struct stat st;
	int created;

	*existed = 0;
	memcpy(parent, fp->rel, fp->parent_len);
	parent[fp->parent_len] = '\0';
	u->dirfd = make_dirs(root, fp->parent_len ? parent : ".", fp->abs, 0, &created, e);
	if (u->dirfd < 0)
		return -1;
	if (!fs_allowed(u->dirfd, 1))
		return special_fs(e, fp->abs);
	/* The target itself is never followed: a symlink is replaced. */
	if (fstatat(u->dirfd, fp->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return err_set(e, SBX_E_IS_DIRECTORY, "'%s' is a directory", fp->abs);
		if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
			return err_set(e, SBX_E_NOT_REGULAR_FILE, "'%s' is not a regular file", fp->abs);
		*existed = 1;
	} else if (errno != ENOENT) {
		return files_errno(e, errno, "stat", fp->abs);
	}
	u->fd = openat(u->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	if (u->fd >= 0) {
		u->tmpfile = 1;
	} else {
		for (int i = 0; i < 4 && u->fd < 0; i++) {
			if (random_name(u->tmpname, sizeof(u->tmpname)) < 0)
				return err_sys(e, errno, "random");
			u->fd = openat(u->dirfd, u->tmpname,
				       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
			if (u->fd < 0 && errno != EEXIST)
				return files_errno(e, errno, "create", fp->abs);
		}
		if (u->fd < 0)
			return err_set(e, SBX_E_CONFLICT, "cannot create a temporary file for '%s'", fp->abs);
		u->named = 1;
	}
	/* owner: the helper is the sandbox's root; mode: no umask */
	if (fchmod(u->fd, mode) < 0)
		return files_errno(e, errno, "create", fp->abs);
	return 0;
}

/* In a helper: take the body from the agent ('D' records, 'E' at its end)
 * into a temp file and land it. The agent going away (or a short body)
 * ends the channel before 'E': nothing changes. ENOMEM (the sandbox's
 * memory limit) answers FILE_TOO_LARGE; the sandbox's OOM kills the
 * helper first (oom_score_adj 1000), which the agent answers the same. */
static int child_upload(void *arg, const struct fw_env *env)
{
	struct put_op *o = arg;
	struct upload u = { .dirfd = -1, .fd = -1 };
	struct sbx_err e;
	char rec[FW_REC_MAX + 64];
	uint64_t size = 0;
	int existed, rc = 1;

	err_clear(&e);
	if (upload_open(env->root, &o->fp, o->mode, &u, &existed, &e) < 0)
		goto fail;
	for (;;) {
		ssize_t n = fw_recv(env->chan, rec, sizeof(rec));

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			err_set(&e, SBX_E_VALIDATION, "the upload of '%s' stalled for %d s",
				o->fp.abs, FW_IDLE_TIMEOUT_S);
			goto fail;
		}
		if (n <= 0)
			goto out;   /* the agent gave up: nobody to answer */
		if (rec[0] == 'E')
			break;
		if (rec[0] != 'D')
			goto out;
		if (util_write_all(u.fd, rec + 1, (size_t)n - 1) < 0) {
			if (errno == ENOMEM)
				err_set(&e, SBX_E_FILE_TOO_LARGE,
					"the upload does not fit in the sandbox's memory limit");
			else
				files_errno(&e, errno, "write", o->fp.abs);
			goto fail;
		}
		size += (uint64_t)n - 1;
	}
	if (upload_commit(&u, &o->fp, &e) < 0)
		goto fail;
	close(u.fd);
	u.fd = -1;
	rc = fw_send_json(env->chan, existed ? 200 : 201,
			  json_pack("{s:s, s:I}", "path", o->fp.abs, "size", (json_int_t)size)) < 0;
	goto out;
fail:
	upload_discard(&u);
	fw_send_err(env->chan, &e);
out:
	upload_discard(&u);
	if (u.dirfd >= 0)
		close(u.dirfd);
	return rc;
}

int agent_files_put(struct agent_call *c, struct sbx_err *e)
{
	struct put_op o;
	const char *ms = agent_call_query(c, "mode");

	memset(&o, 0, sizeof(o));
	o.mode = 0644;
	if (fspath_from_url(agent_call_tail(c), &o.fp, e) < 0)
		return -1;
	if (ms && fspath_mode(ms, &o.mode) < 0)
		return err_set(e, SBX_E_VALIDATION, "mode must be octal permission bits (0000-0777)");
	if (!*o.fp.name)
		return err_set(e, SBX_E_IS_DIRECTORY, "'/' is a directory");
	if (run_helper(c, FW_UPLOAD, FW_TRANSFER_TIMEOUT_S, child_upload, &o, e) < 0)
		return -1;
	/* a view's content is whole already: the upload takes it as the body */
	if (c->args)
		httpd_feed_body(c->r, c->args->content, c->args->content_len);
	return 0;
}

/* --- DELETE …/files/{path} --- */

/* Remove name in dirfd and everything below it: never follows a symlink,
 * never descends into another filesystem (a mount point stays, EBUSY).
 * At most FILES_RM_MAX entries (E2BIG beyond: what is gone stays gone). */
static int remove_tree(int pdir, const char *name, int depth, size_t *budget, int *err)
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
		if (*budget == 0) {
			*err = E2BIG;
			closedir(d);
			return -1;
		}
		(*budget)--;
		if (fstatat(dirfd(d), de->d_name, &cst, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			*err = errno;
			closedir(d);
			return -1;
		}
		if (S_ISDIR(cst.st_mode)) {
			if (remove_tree(dirfd(d), de->d_name, depth + 1, budget, err) < 0) {
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

struct del_op {
	struct fspath fp;
	int recursive;
};

static int child_delete(void *arg, const struct fw_env *env)
{
	struct del_op *o = arg;
	struct sbx_err e;
	struct stat st;
	auto_close int dfd = -1;
	size_t budget = FILES_RM_MAX;
	int err = 0;

	err_clear(&e);
	dfd = open_parent(env->root, &o->fp, &e);
	if (dfd < 0)
		return child_fail(env, &e);
	if (fstatat(dfd, o->fp.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return child_fail(env, (files_errno(&e, errno, "delete", o->fp.abs), &e));
	if (!fs_allowed(dfd, 1))
		return child_fail(env, (special_fs(&e, o->fp.abs), &e));
	if (S_ISDIR(st.st_mode)) {
		if (!o->recursive) {
			err_set(&e, SBX_E_IS_DIRECTORY, "'%s' is a directory; use recursive=true",
				o->fp.abs);
			return child_fail(env, &e);
		}
		if (remove_tree(dfd, o->fp.name, 0, &budget, &err) < 0) {
			if (err == E2BIG)
				err_set(&e, SBX_E_CONFLICT,
					"'%s' has more than %d entries: %d were deleted, delete again",
					o->fp.abs, FILES_RM_MAX, FILES_RM_MAX);
			else
				files_errno(&e, err, "delete", o->fp.abs);
			return child_fail(env, &e);
		}
	} else if (unlinkat(dfd, o->fp.name, 0) < 0) {
		return child_fail(env, (files_errno(&e, errno, "delete", o->fp.abs), &e));
	}
	return fw_send_json(env->chan, 204, NULL) < 0;
}

int agent_files_delete(struct agent_call *c, struct sbx_err *e)
{
	struct del_op o;

	memset(&o, 0, sizeof(o));
	if (fspath_from_url(agent_call_tail(c), &o.fp, e) < 0 ||
	    files_query_bool(c, "recursive", &o.recursive, e) < 0)
		return -1;
	if (!*o.fp.name)
		return err_set(e, SBX_E_VALIDATION, "cannot delete '/'");
	return run_helper(c, FW_COLLECT, FW_META_TIMEOUT_S, child_delete, &o, e);
}
/* --- GET …/dirs/{path} --- */

/* One entry of a listing, kept small: a listing looks at up to
 * FILES_WALK_MAX of them in the helper (charged to the sandbox's memory)
 * and turns only one page into JSON. */
struct walk_ent {
	char *path;                /* heap; the name is after its last '/' */
	mode_t mode;
	off_t size;
	struct timespec mtime;
};

struct walk {
	struct walk_ent *v;
	size_t n, cap;
	int hidden;
	int recursive;
	int truncated;
	int failed;                /* out of memory */
};

static int walk_add(struct walk *w, const char *path, const struct stat *st)
{
	struct walk_ent *e;

	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 1024;
		struct walk_ent *v = realloc(w->v, cap * sizeof(*v));

		if (!v)
			return -1;
		w->v = v;
		w->cap = cap;
	}
	e = &w->v[w->n];
	e->path = strdup(path);
	if (!e->path)
		return -1;
	e->mode = st->st_mode;
	e->size = st->st_size;
	e->mtime = st->st_mtim;
	w->n++;
	return 0;
}

static void walk_release(struct walk *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->v[i].path);
	free(w->v);
	w->v = NULL;
	w->n = w->cap = 0;
}

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
	while (!w->failed && (de = readdir(d))) {
		struct stat st;
		char path[FSPATH_MAX + 300];
		int k;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_name[0] == '.' && !w->hidden)
			continue;
		if (w->n >= FILES_WALK_MAX) {
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
		if (walk_add(w, path, &st) < 0) {
			w->failed = 1;
			break;
		}
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

/* Paths component-wise: "/" sorts before every other byte. */
static int cmp_path(const char *x, const char *y)
{
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

static int cmp_ent(const void *pa, const void *pb)
{
	return cmp_path(((const struct walk_ent *)pa)->path, ((const struct walk_ent *)pb)->path);
}

/* The JSON entry of e; new reference or NULL. */
static json_t *walk_ent_json(const struct walk_ent *e)
{
	struct stat st;
	const char *slash = strrchr(e->path, '/');

	memset(&st, 0, sizeof(st));
	st.st_mode = e->mode;
	st.st_size = e->size;
	st.st_mtim = e->mtime;
	return entry_json(slash ? slash + 1 : e->path, e->path, &st);
}

struct list_op {
	struct fspath fp;
	int recursive, hidden;
	int64_t limit;
	const char *cursor;
};

/* In a helper: the walk, sorted, one page of it. */
static int child_list(void *arg, const struct fw_env *env)
{
	struct list_op *o = arg;
	struct sbx_err e;
	struct walk w = { 0 };
	auto_close int dfd = -1;
	auto_close int rfd = -1;
	size_t start = 0, end;
	json_t *page = NULL, *body = NULL;
	char next[2 * FSPATH_MAX + 16] = "";

	err_clear(&e);
	w.recursive = o->recursive;
	w.hidden = o->hidden;
	dfd = files_open_in_root(env->root, o->fp.rel, O_PATH | O_DIRECTORY, 0);
	if (dfd < 0)
		return child_fail(env, (files_errno(&e, errno, "list", o->fp.abs), &e));
	if (!fs_allowed(dfd, 0))
		return child_fail(env, (special_fs(&e, o->fp.abs), &e));
	rfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* EACCES here, not an empty list */
	if (rfd < 0)
		return child_fail(env, (files_errno(&e, errno, "list", o->fp.abs), &e));
	walk_dir(&w, dfd, o->fp.abs, 0);
	if (w.failed) {
		walk_release(&w);
		return child_fail(env, (err_sys(&e, ENOMEM, "list"), &e));
	}
	qsort(w.v, w.n, sizeof(*w.v), cmp_ent);
	if (o->cursor && *o->cursor) {
		/* the cursor is the hex of the last path of the previous page */
		char after[FSPATH_MAX + 300];
		size_t cl = strlen(o->cursor) / 2;

		for (size_t i = 0; i < cl; i++) {
			unsigned v;
			if (sscanf(o->cursor + 2 * i, "%2x", &v) != 1)
				v = 0;
			after[i] = (char)v;
		}
		after[cl] = '\0';
		while (start < w.n && cmp_path(w.v[start].path, after) <= 0)
			start++;
	}
	end = start + (size_t)o->limit < w.n ? start + (size_t)o->limit : w.n;
	page = json_array();
	for (size_t i = start; page && i < end; i++) {
		if (json_array_append_new(page, walk_ent_json(&w.v[i])) < 0) {
			json_decref(page);
			page = NULL;
		}
	}
	if (end < w.n)
		util_hex(w.v[end - 1].path, strlen(w.v[end - 1].path), next);
	if (page)
		body = json_pack("{s:s, s:o, s:b}", "path", o->fp.abs, "entries", page, "truncated",
				 w.truncated);
	if (body && *next && json_object_set_new(body, "cursor", json_string(next)) < 0) {
		json_decref(body);
		body = NULL;
	}
	walk_release(&w);
	if (!body)
		return child_fail(env, (err_sys(&e, ENOMEM, "list"), &e));
	return fw_send_json(env->chan, 200, body) < 0;
}

int agent_dirs_get(struct agent_call *c, struct sbx_err *e)
{
	struct list_op o;
	const char *lim = agent_call_query(c, "limit");

	memset(&o, 0, sizeof(o));
	o.limit = FILES_LIST_DEFAULT;
	o.cursor = agent_call_query(c, "cursor");
	if (fspath_from_url(agent_call_tail(c), &o.fp, e) < 0 ||
	    files_query_bool(c, "recursive", &o.recursive, e) < 0 ||
	    files_query_bool(c, "hidden", &o.hidden, e) < 0)
		return -1;
	if (lim && util_parse_i64(lim, 1, FILES_LIST_MAX, &o.limit) < 0)
		return err_set(e, SBX_E_VALIDATION, "limit must be 1-%d", FILES_LIST_MAX);
	if (o.cursor && (strlen(o.cursor) > 2 * FSPATH_MAX || strlen(o.cursor) % 2 != 0 ||
			 strspn(o.cursor, "0123456789abcdef") != strlen(o.cursor)))
		return err_set(e, SBX_E_VALIDATION, "bad cursor");
	/* a page can be large: streamed, unless a filter needs the JSON whole */
	return run_helper(c, agent_call_viewed(c->r) ? FW_COLLECT : FW_STREAM, FW_META_TIMEOUT_S,
			  child_list, &o, e);
}

/* --- PUT …/dirs/{path} --- */

static int child_mkdir(void *arg, const struct fw_env *env)
{
	struct fspath *fp = arg;
	struct sbx_err e;
	auto_close int dfd = -1;
	int created = 0;

	err_clear(&e);
	dfd = make_dirs(env->root, fp->rel, fp->abs, 0, &created, &e);
	if (dfd < 0)
		return child_fail(env, &e);
	return fw_send_json(env->chan, created ? 201 : 200, json_pack("{s:s}", "path", fp->abs)) < 0;
}

/* The helper of fn on the tail path of c: …/dirs/{path}, …/stat/{path}. */
static int path_helper(struct agent_call *c, fw_child_fn fn, struct sbx_err *e)
{
	struct fspath fp;

	if (fspath_from_url(agent_call_tail(c), &fp, e) < 0)
		return -1;
	return run_helper(c, FW_COLLECT, FW_META_TIMEOUT_S, fn, &fp, e);
}

int agent_dirs_put(struct agent_call *c, struct sbx_err *e)
{
	return path_helper(c, child_mkdir, e);
}

/* --- GET …/stat/{path} --- */

static int child_stat(void *arg, const struct fw_env *env)
{
	struct fspath *fp = arg;
	struct sbx_err e;
	struct stat st;
	auto_close int dfd = -1;

	err_clear(&e);
	if (!*fp->name) {
		if (fstat(env->root, &st) < 0)
			return child_fail(env, (files_errno(&e, errno, "stat", fp->abs), &e));
		return fw_send_json(env->chan, 200, entry_json("/", "/", &st)) < 0;
	}
	dfd = open_parent(env->root, fp, &e);
	if (dfd < 0)
		return child_fail(env, &e);
	if (fstatat(dfd, fp->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return child_fail(env, (files_errno(&e, errno, "stat", fp->abs), &e));
	return fw_send_json(env->chan, 200, entry_json(fp->name, fp->abs, &st)) < 0;
}

int agent_stat_get(struct agent_call *c, struct sbx_err *e)
{
	return path_helper(c, child_stat, e);
}

/* --- POST …/move --- */

const struct jsonv_field agent_move_fields[] = {
	{ "from", JV_STRING, 1 },
	{ "to", JV_STRING, 1 },
	{ "overwrite", JV_BOOL, 0 },
	{ NULL, 0, 0 },
};

struct move_op {
	struct fspath from, to;
	int overwrite;
};

static int child_move(void *arg, const struct fw_env *env)
{
	struct move_op *o = arg;
	struct sbx_err e;
	struct stat st;
	auto_close int fdir = -1;
	auto_close int tdir = -1;

	err_clear(&e);
	fdir = open_parent(env->root, &o->from, &e);
	if (fdir < 0)
		return child_fail(env, &e);
	if (fstatat(fdir, o->from.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return child_fail(env, (files_errno(&e, errno, "move", o->from.abs), &e));
	tdir = open_parent(env->root, &o->to, &e);
	if (tdir < 0)
		return child_fail(env, &e);
	if (!fs_allowed(fdir, 1) || !fs_allowed(tdir, 1))
		return child_fail(env, (special_fs(&e, fs_allowed(fdir, 1) ? o->to.abs : o->from.abs), &e));
	if (renameat2(fdir, o->from.name, tdir, o->to.name, o->overwrite ? 0 : RENAME_NOREPLACE) < 0) {
		int err = errno;

		if (err == EEXIST || (err == ENOTEMPTY && !o->overwrite))
			err_set(&e, SBX_E_FILE_EXISTS, "'%s' already exists", o->to.abs);
		else
			files_errno(&e, err, "move", err == ENOENT ? o->from.abs : o->to.abs);
		return child_fail(env, &e);
	}
	return fw_send_json(env->chan, 200,
			    json_pack("{s:s, s:s}", "from", o->from.abs, "to", o->to.abs)) < 0;
}

int agent_move(struct agent_call *c, struct sbx_err *e)
{
	struct move_op o;
	const json_t *jf = json_object_get(c->body, "from"), *jt = json_object_get(c->body, "to");

	o.overwrite = json_is_true(json_object_get(c->body, "overwrite"));
	if (fspath_parse(json_string_value(jf), json_string_length(jf), &o.from, e) < 0 ||
	    fspath_parse(json_string_value(jt), json_string_length(jt), &o.to, e) < 0)
		return -1;
	if (!*o.from.name || !*o.to.name)
		return err_set(e, SBX_E_VALIDATION, "cannot move '/'");
	return run_helper(c, FW_COLLECT, FW_META_TIMEOUT_S, child_move, &o, e);
}

/* --- for the other helpers of a sandbox (agent_snapshots.c) --- */

int files_fs_allowed(int fd, int write)
{
	return fs_allowed(fd, write);
}

int files_remove_tree(int pdir, const char *name)
{
	size_t budget = FILES_RM_MAX;
	int err = 0;

	if (remove_tree(pdir, name, 0, &budget, &err) < 0) {
		errno = err;
		return -1;
	}
	return 0;
}
