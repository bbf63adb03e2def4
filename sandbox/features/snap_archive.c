/* Snapshot archives: made from and restored into a sandbox's tree (snap_archive.h). */
#include "snap_archive.h"
#include "agent_files.h"
#include "util.h"

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SNAP_BLOCK (64 * 1024)
#define SNAP_DEPTH 256
#define SNAP_NAME_MAX 4096

/* --- the archive's bytes: counted and hashed as they pass --- */

struct hashed {
	int fd;
	int tee;                   /* >= 0: what is read is written here too */
	snap_read_fn rd;           /* else read(fd) */
	void *rarg;
	uint64_t limit;            /* bytes read at most; 0: no bound */
	EVP_MD_CTX *md;
	uint64_t size;
	char buf[SNAP_BLOCK];
};

static int hashed_init(struct hashed *h, int fd)
{
	h->fd = fd;
	h->tee = -1;
	h->rd = NULL;
	h->limit = 0;
	h->size = 0;
	h->md = EVP_MD_CTX_new();
	return h->md && EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

static void hashed_final(struct hashed *h, struct snap_sum *sum)
{
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned n = 0;

	EVP_DigestFinal_ex(h->md, d, &n);
	util_hex(d, n > 32 ? 32 : n, sum->sha256);
	sum->size = h->size;
}

static void hashed_release(struct hashed *h)
{
	EVP_MD_CTX_free(h->md);
	h->md = NULL;
}

static la_ssize_t hashed_write(struct archive *a, void *arg, const void *buf, size_t n)
{
	struct hashed *h = arg;

	if (util_write_all(h->fd, buf, n) < 0) {
		archive_set_error(a, errno, "write");
		return -1;
	}
	EVP_DigestUpdate(h->md, buf, n);
	h->size += n;
	return (la_ssize_t)n;
}

static la_ssize_t hashed_read(struct archive *a, void *arg, const void **out)
{
	struct hashed *h = arg;
	ssize_t n;

	do
		n = h->rd ? h->rd(h->rarg, h->buf, sizeof(h->buf)) : read(h->fd, h->buf, sizeof(h->buf));
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		archive_set_error(a, errno, "read");
		return -1;
	}
	if (h->limit && h->size + (uint64_t)n > h->limit) {
		archive_set_error(a, EFBIG, "too large");
		return -1;
	}
	if (h->tee >= 0 && util_write_all(h->tee, h->buf, (size_t)n) < 0) {
		archive_set_error(a, errno, "write");
		return -1;
	}
	EVP_DigestUpdate(h->md, h->buf, (size_t)n);
	h->size += (uint64_t)n;
	*out = h->buf;
	return n;
}

/* --- making an archive --- */

struct walker {
	struct archive *a;             /* NULL: only the tree's digest (tree) */
	EVP_MD_CTX *tree;
	struct archive_entry_linkresolver *lr;
	const char *const *exclude;
	size_t nexclude;
	uint64_t max_entries;
	struct snap_sum *sum;
	struct sbx_err *e;
	char data[SNAP_BLOCK];
};

static int excluded(const struct walker *w, const char *name)
{
	for (size_t i = 0; i < w->nexclude; i++)
		if (strcmp(w->exclude[i], name) == 0)
			return 1;
	return 0;
}

static int archive_fail(struct sbx_err *e, struct archive *a, const char *what)
{
	int err = archive_errno(a);

	if (err == ENOSPC || err == EDQUOT)
		return err_set(e, SBX_E_NO_SPACE, "the snapshot store is full");
	return err_set(e, SBX_E_INTERNAL, "%s: %s", what, archive_error_string(a));
}

/* The data regions of a sparse file fd (SEEK_DATA / SEEK_HOLE) into entry. */
static void add_sparse_map(struct archive_entry *entry, int fd, off_t size)
{
	off_t pos = 0, data, hole;
	int any = 0;

	while (pos < size) {
		data = lseek(fd, pos, SEEK_DATA);
		if (data < 0)
			break;
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			hole = size;
		archive_entry_sparse_add_entry(entry, data, hole - data);
		any = 1;
		pos = hole;
	}
	if (!any)   /* all hole: one empty region at the end keeps the size */
		archive_entry_sparse_add_entry(entry, size, 0);
	lseek(fd, 0, SEEK_SET);
}

static int write_data(struct walker *w, int fd, off_t size)
{
	off_t left = size;

	while (left > 0) {
		size_t want = left < (off_t)sizeof(w->data) ? (size_t)left : sizeof(w->data);
		ssize_t n = read(fd, w->data, want);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return err_sys(w->e, errno, "cannot read a file of the snapshot");
		if (n == 0)
			break;   /* it shrank: the archive pads the entry */
		if (archive_write_data(w->a, w->data, (size_t)n) != n)
			return archive_fail(w->e, w->a, "archive");
		w->sum->bytes += (uint64_t)n;
		left -= n;
	}
	return 0;
}

static int walk_dir(struct walker *w, int dfd, const char *rel, int depth);

/* The digest's part of one entry (st of name in dirfd, named rel): what
 * any change to it moves (its inode's ctime moves with every write,
 * chmod, chown, link or rename; a directory's mtime with what it holds),
 * then below it, for a directory. No file is read. */
static int tree_entry(struct walker *w, int dirfd, const char *name, const char *rel,
		      const struct stat *st, int depth)
{
	const int64_t meta[] = { (int64_t)st->st_ino,	       (int64_t)st->st_mode,
				 (int64_t)st->st_uid,	       (int64_t)st->st_gid,
				 (int64_t)st->st_size,	       (int64_t)st->st_nlink,
				 (int64_t)st->st_mtim.tv_sec,  (int64_t)st->st_mtim.tv_nsec,
				 (int64_t)st->st_ctim.tv_sec,  (int64_t)st->st_ctim.tv_nsec };
	int fd;

	if (EVP_DigestUpdate(w->tree, rel, strlen(rel) + 1) != 1 ||
	    EVP_DigestUpdate(w->tree, meta, sizeof(meta)) != 1)
		return err_set(w->e, SBX_E_INTERNAL, "tree digest");
	if (!S_ISDIR(st->st_mode))
		return 0;
	fd = openat(dirfd, name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ELOOP || errno == ENOTDIR
			       ? 0
			       : err_sys(w->e, errno, "cannot open '%s'", rel);
	if (!files_fs_allowed(fd, 0)) {
		close(fd);
		return 0;
	}
	return walk_dir(w, fd, rel, depth + 1);
}

/* One entry: name in dirfd, archived as rel (and below it, for a directory). */
static int add_entry(struct walker *w, int dirfd, const char *name, const char *rel, int depth)
{
	struct archive_entry *entry, *sparse = NULL;
	auto_close int fd = -1;
	struct stat st;
	char link[SNAP_NAME_MAX];
	int rc = 0;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : err_sys(w->e, errno, "cannot stat '%s'", rel);
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
		return 0;
	if (++w->sum->entries > w->max_entries)
		return err_set(w->e, SBX_E_LIMIT_EXCEEDED, "the snapshot has more than %llu entries",
			       (unsigned long long)w->max_entries);
	if (!w->a)
		return tree_entry(w, dirfd, name, rel, &st, depth);
	if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
		struct stat fst;

		fd = openat(dirfd, name,
			    (S_ISDIR(st.st_mode) ? O_DIRECTORY : O_NONBLOCK) | O_RDONLY | O_NOFOLLOW |
				    O_CLOEXEC);
		if (fd < 0 || fstat(fd, &fst) < 0)
			return errno == ENOENT || errno == ELOOP ? 0
								 : err_sys(w->e, errno, "cannot open '%s'", rel);
		if (fst.st_ino != st.st_ino || fst.st_dev != st.st_dev)
			return 0;   /* replaced meanwhile: not the entry we looked at */
		st = fst;
	}
	entry = archive_entry_new();
	if (!entry)
		return err_sys(w->e, ENOMEM, "archive entry");
	archive_entry_copy_stat(entry, &st);
	archive_entry_copy_pathname(entry, rel);
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlinkat(dirfd, name, link, sizeof(link) - 1);

		if (n < 0) {
			archive_entry_free(entry);
			return errno == ENOENT ? 0 : err_sys(w->e, errno, "cannot read link '%s'", rel);
		}
		link[n] = '\0';
		archive_entry_copy_symlink(entry, link);
	}
	if (!S_ISREG(st.st_mode))
		archive_entry_set_size(entry, 0);
	if (S_ISREG(st.st_mode) && st.st_nlink > 1)
		archive_entry_linkify(w->lr, &entry, &sparse);
	if (S_ISREG(st.st_mode) && !archive_entry_hardlink(entry) &&
	    (off_t)st.st_blocks * 512 < st.st_size)
		add_sparse_map(entry, fd, st.st_size);
	if (archive_write_header(w->a, entry) < ARCHIVE_WARN) {
		rc = archive_fail(w->e, w->a, "archive");
	} else if (S_ISREG(st.st_mode) && !archive_entry_hardlink(entry)) {
		rc = write_data(w, fd, st.st_size);
	}
	archive_entry_free(entry);
	if (sparse)
		archive_entry_free(sparse);
	if (rc == 0 && S_ISDIR(st.st_mode) && files_fs_allowed(fd, 0))
		rc = walk_dir(w, steal_fd(&fd), rel, depth + 1);
	return rc;
}

/* The entries of directory dfd (stolen), archived as rel/<name>. */
static int walk_dir(struct walker *w, int dfd, const char *rel, int depth)
{
	DIR *d;
	struct dirent *de;
	char child[SNAP_NAME_MAX];
	int rc = 0;

	if (depth > SNAP_DEPTH) {
		close(dfd);
		return err_set(w->e, SBX_E_LIMIT_EXCEEDED, "'%s' is nested too deep", rel);
	}
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return err_sys(w->e, errno, "cannot read '%s'", rel);
	}
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    excluded(w, de->d_name))
			continue;
		if ((size_t)snprintf(child, sizeof(child), "%s/%s", rel, de->d_name) >= sizeof(child)) {
			rc = err_set(w->e, SBX_E_LIMIT_EXCEEDED, "a path under '%s' is too long", rel);
			break;
		}
		rc = add_entry(w, dirfd(d), de->d_name, child, depth);
	}
	closedir(d);
	return rc;
}

/* openat2 of rel under root, inside it (the Files API's resolution). */
static int open_in(int root, const char *rel, int flags, uint64_t resolve)
{
	struct open_how how;
	int fd;

	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC);
	how.resolve = resolve;
	for (int i = 0; i < 8; i++) {
		fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			return fd;
	}
	return -1;
}

/* The parent directory of abs path p in root (O_PATH) and its last name. */
static int open_parent_of(int root, const char *p, const char **base, struct sbx_err *e)
{
	char parent[SNAP_NAME_MAX];
	const char *slash = strrchr(p, '/');
	int fd;

	if (p[0] != '/' || !slash || !slash[1])
		return err_set(e, SBX_E_VALIDATION, "'%s' is not a path below /", p);
	if ((size_t)snprintf(parent, sizeof(parent), ".%.*s", (int)(slash - p), p) >= sizeof(parent))
		return err_set(e, SBX_E_VALIDATION, "'%s' is too long", p);
	fd = open_in(root, parent, O_PATH | O_DIRECTORY, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
		return err_set(e, SBX_E_FILE_NOT_FOUND, "the parent of '%s' does not exist", p);
	if (fd < 0)
		return err_sys(e, errno, "cannot open the parent of '%s'", p);
	*base = slash + 1;
	return fd;
}

int snap_open_file(int root, const char *p, int write, struct sbx_err *e)
{
	const uint64_t res = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
	char comp[NAME_MAX + 1];
	const char *slash = strrchr(p, '/');
	struct stat st;
	int cur, fd;

	if (p[0] != '/' || !slash || !slash[1] || strlen(slash + 1) > NAME_MAX)
		return err_set(e, SBX_E_VALIDATION, "'%s' is not a file path", p);
	cur = open_in(root, ".", O_PATH | O_DIRECTORY, res);
	for (const char *q = p + 1; cur >= 0 && q < slash;) {
		const char *end = strchr(q, '/');
		size_t n = (size_t)(end - q);
		int next;

		if (n == 0 || n > NAME_MAX) {
			close(cur);
			return err_set(e, SBX_E_VALIDATION, "'%s' is not a file path", p);
		}
		memcpy(comp, q, n);
		comp[n] = '\0';
		next = open_in(cur, comp, O_PATH | O_DIRECTORY, res);
		if (next < 0 && errno == ENOENT && write && mkdirat(cur, comp, 0755) == 0)
			next = open_in(cur, comp, O_PATH | O_DIRECTORY, res);
		close(cur);
		cur = next;
		q = end + 1;
	}
	if (cur < 0)
		return err_set(e, errno == ENOENT || errno == ENOTDIR ? SBX_E_FILE_NOT_FOUND
								   : SBX_E_VALIDATION,
			       "cannot open the directory of '%s': %s", p, strerror(errno));
	if (write && !files_fs_allowed(cur, 1)) {
		close(cur);
		return err_set(e, SBX_E_FORBIDDEN, "'%s' is not on the sandbox's own storage", p);
	}
	fd = openat(cur, slash + 1,
		    write ? O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC
			  : O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
		    0600);
	close(cur);
	if (fd < 0)
		return err_set(e, errno == ENOENT ? SBX_E_FILE_NOT_FOUND : SBX_E_VALIDATION,
			       "cannot open '%s': %s", p, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(e, SBX_E_NOT_REGULAR_FILE, "'%s' is not a regular file", p);
	}
	return fd;
}

/* Every path's tree (absolute, a directory) under root through w. */
static int walk_paths(struct walker *w, int root, const char *const *paths, size_t npaths)
{
	for (size_t i = 0; i < npaths; i++) {
		auto_close int pfd = -1;
		const char *base;
		struct stat st;

		pfd = open_parent_of(root, paths[i], &base, w->e);
		if (pfd < 0)
			return -1;
		if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return err_set(w->e, SBX_E_FILE_NOT_FOUND, "'%s' does not exist", paths[i]);
		if (!S_ISDIR(st.st_mode))
			return err_set(w->e, SBX_E_NOT_DIRECTORY, "'%s' is not a directory", paths[i]);
		if (add_entry(w, pfd, base, paths[i] + 1, 0) < 0)
			return -1;
	}
	return 0;
}

int snap_tree_digest(int root, const char *const *paths, size_t npaths,
		     const char *const *exclude, size_t nexclude, uint64_t max_entries,
		     char out[65], struct sbx_err *e)
{
	struct snap_sum sum;
	struct walker *w = calloc(1, sizeof(*w));
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	int rc = -1;

	memset(&sum, 0, sizeof(sum));
	if (!w || !(w->tree = EVP_MD_CTX_new()) ||
	    EVP_DigestInit_ex(w->tree, EVP_sha256(), NULL) != 1) {
		err_sys(e, ENOMEM, "tree digest");
		goto out;
	}
	w->exclude = exclude;
	w->nexclude = nexclude;
	w->max_entries = max_entries;
	w->sum = &sum;
	w->e = e;
	if (walk_paths(w, root, paths, npaths) < 0)
		goto out;
	if (EVP_DigestFinal_ex(w->tree, d, &n) != 1 || n < 32) {
		err_set(e, SBX_E_INTERNAL, "tree digest");
		goto out;
	}
	util_hex(d, 32, out);
	rc = 0;
out:
	if (w)
		EVP_MD_CTX_free(w->tree);
	free(w);
	return rc;
}

int snap_archive_write(int root, const char *const *paths, size_t npaths,
		       const char *const *exclude, size_t nexclude, int out, uint64_t max_entries,
		       struct snap_sum *sum, struct sbx_err *e)
{
	struct walker *w;
	struct hashed h;
	int rc = -1;

	memset(sum, 0, sizeof(*sum));
	w = calloc(1, sizeof(*w));
	if (!w || hashed_init(&h, out) < 0) {
		free(w);
		return err_sys(e, ENOMEM, "snapshot");
	}
	w->a = archive_write_new();
	w->lr = archive_entry_linkresolver_new();
	w->exclude = exclude;
	w->nexclude = nexclude;
	w->max_entries = max_entries;
	w->sum = sum;
	w->e = e;
	if (!w->a || !w->lr) {
		err_sys(e, ENOMEM, "snapshot");
		goto out;
	}
	archive_entry_linkresolver_set_strategy(w->lr, ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE);
	if (archive_write_add_filter_zstd(w->a) != ARCHIVE_OK ||
	    archive_write_set_format_pax(w->a) != ARCHIVE_OK ||
	    /* names as the filesystem has them (UTF-8 or not): no conversion
	     * through the locale, which is "C" in the agent */
	    archive_write_set_format_option(w->a, "pax", "hdrcharset", "BINARY") != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(w->a, 1) != ARCHIVE_OK ||
	    archive_write_open2(w->a, &h, NULL, hashed_write, NULL, NULL) != ARCHIVE_OK) {
		archive_fail(e, w->a, "archive");
		goto out;
	}
	if (walk_paths(w, root, paths, npaths) < 0)
		goto out;
	if (archive_write_close(w->a) != ARCHIVE_OK) {
		archive_fail(e, w->a, "archive");
		goto out;
	}
	hashed_final(&h, sum);
	rc = 0;
out:
	if (w->a)
		archive_write_free(w->a);
	if (w->lr)
		archive_entry_linkresolver_free(w->lr);
	hashed_release(&h);
	free(w);
	return rc;
}

/* --- reading one --- */

static struct archive *reader_new(struct hashed *h)
{
	struct archive *a = archive_read_new();

	if (!a)
		return NULL;
	if (archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
	    archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_open(a, h, NULL, hashed_read, NULL) != ARCHIVE_OK) {
		archive_read_free(a);
		return NULL;
	}
	return a;
}

static const char *entry_name(struct archive_entry *entry)
{
	const char *n = archive_entry_pathname_utf8(entry);

	return n ? n : archive_entry_pathname(entry);
}

static const char *entry_hardlink(struct archive_entry *entry)
{
	const char *n = archive_entry_hardlink_utf8(entry);

	return n ? n : archive_entry_hardlink(entry);
}

static const char *entry_symlink(struct archive_entry *entry)
{
	const char *n = archive_entry_symlink_utf8(entry);

	return n ? n : archive_entry_symlink(entry);
}

static int invalid(struct sbx_err *e, struct archive *a)
{
	if (archive_errno(a) == ENOSPC || archive_errno(a) == EDQUOT)
		return err_set(e, SBX_E_NO_SPACE, "the snapshot store is full");
	if (archive_errno(a) == EFBIG)
		return err_set(e, SBX_E_QUOTA_EXCEEDED,
			       "the archive is larger than the tenant's snapshot quota left");
	return err_set(e, SBX_E_INVALID_ARCHIVE, "the archive is corrupt or truncated (%s)",
		       archive_error_string(a) ? archive_error_string(a) : "no detail");
}

int snap_archive_copy(snap_read_fn rd, void *rarg, int out, uint64_t max_size,
		      uint64_t max_entries, struct snap_sum *sum, struct sbx_err *e)
{
	struct hashed *h = calloc(1, sizeof(*h));
	struct archive *a = NULL;
	struct archive_entry *entry;
	const void *buf;
	size_t len;
	la_int64_t off;
	int r, rc = -1;

	memset(sum, 0, sizeof(*sum));
	if (!h || hashed_init(h, -1) < 0) {
		err_sys(e, ENOMEM, "import");
		goto out;
	}
	h->rd = rd;
	h->rarg = rarg;
	h->limit = max_size;
	h->tee = out;   /* what is read is stored before libarchive sees it */
	a = reader_new(h);
	if (!a) {
		err_set(e, SBX_E_INVALID_ARCHIVE, "the archive is not a zstd-compressed tar");
		goto out;
	}
	while ((r = archive_read_next_header(a, &entry)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		if (++sum->entries > max_entries) {
			err_set(e, SBX_E_LIMIT_EXCEEDED, "the archive has more than %llu entries",
				(unsigned long long)max_entries);
			goto out;
		}
		while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK ||
		       r == ARCHIVE_WARN)
			sum->bytes += len;
		if (r != ARCHIVE_EOF) {
			invalid(e, a);
			goto out;
		}
	}
	if (r != ARCHIVE_EOF) {
		invalid(e, a);
		goto out;
	}
	hashed_final(h, sum);
	rc = 0;
out:
	if (a)
		archive_read_free(a);
	if (h)
		hashed_release(h);
	free(h);
	return rc;
}

/* --- restoring one --- */

int snap_entry_place(const char *name, const char *const *rels, size_t nrels, const char **sub,
		     struct sbx_err *e)
{
	const char *p;

	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (!name[0] || name[0] == '/')
		return err_set(e, SBX_E_INVALID_ARCHIVE, "the archive has an absolute or empty name");
	for (p = name; *p;) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if ((n == 0 && end && end[1]) || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return err_set(e, SBX_E_INVALID_ARCHIVE,
				       "the archive's name '%.200s' has a '.', '..' or empty part", name);
		p += n;
		if (*p == '/')
			p++;
	}
	for (size_t i = 0; i < nrels; i++) {
		size_t n = strlen(rels[i]);

		if (strncmp(name, rels[i], n) != 0)
			continue;
		if (name[n] == '\0' || (name[n] == '/' && name[n + 1] == '\0')) {
			*sub = "";
			return (int)i;
		}
		if (name[n] == '/') {
			*sub = name + n + 1;
			return (int)i;
		}
	}
	return err_set(e, SBX_E_INVALID_ARCHIVE, "the archive's name '%.200s' is outside the snapshot's paths",
		       name);
}

struct stage {
	int parent;                /* O_PATH of the target's parent */
	int fd;                    /* O_PATH of the staging directory */
	char name[48];             /* the staging directory's name in parent */
	const char *target;        /* the target's name in parent */
	char old[56];              /* swapped 3: the old entries, in parent */
	int swapped;               /* 1: exchanged with the target, 2: renamed to
				    * it, 3: its entries moved in (swap_children) */
};

struct dir_meta {
	int idx;
	char *sub;                 /* "" for the staging directory itself */
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec mtime;
};

struct restorer {
	struct archive *a;
	struct stage st[SNAP_PATHS_MAX];
	size_t n;
	const char *rels[SNAP_PATHS_MAX];
	struct dir_meta *dirs;
	size_t ndirs, cap;
	uint64_t max_bytes;
	struct snap_sum *sum;
	struct sbx_err *e;
};

static int unsafe(struct sbx_err *e, const char *why, const char *name)
{
	return err_set(e, SBX_E_INVALID_ARCHIVE, "the archive's entry '%.200s' %s", name, why);
}

/* The directory dir (a relative path, "" for base itself) under base
 * (O_PATH), one component at a time, never through a symlink nor out of
 * base; with create, missing directories are made (0755). -1 with errno. */
static int open_beneath(int base, const char *dir, int create)
{
	char comp[NAME_MAX + 1];
	int cur = fcntl(base, F_DUPFD_CLOEXEC, 0);
	const uint64_t res = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			     RESOLVE_NO_XDEV;

	for (const char *p = dir; cur >= 0 && *p;) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		int next;

		if (n == 0 || n > NAME_MAX) {
			close(cur);
			errno = EINVAL;
			return -1;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		next = open_in(cur, comp, O_PATH | O_DIRECTORY, res);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
				close(cur);
				return -1;
			}
			next = open_in(cur, comp, O_PATH | O_DIRECTORY, res);
		}
		close(cur);
		cur = next;
		p += n;
		if (*p == '/')
			p++;
	}
	return cur;
}

static int parent_errno(struct restorer *x, int err, const char *name)
{
	if (err == ELOOP)
		return unsafe(x->e, "goes through a symlink", name);
	if (err == ENOTDIR || err == EXDEV || err == EINVAL)
		return unsafe(x->e, "has a parent that is not a directory of the archive", name);
	if (err == ENOSPC || err == EDQUOT)
		return err_set(x->e, SBX_E_NO_SPACE, "the sandbox's disk is full");
	return err_sys(x->e, err, "cannot restore '%.200s'", name);
}

static void set_owner_fd(int fd, struct archive_entry *entry)
{
	/* an owner the sandbox's user namespace does not map stays root's */
	if (fchown(fd, (uid_t)archive_entry_uid(entry), (gid_t)archive_entry_gid(entry)) < 0)
		(void)0;
}

static int add_dir_meta(struct restorer *x, int idx, const char *sub, struct archive_entry *entry)
{
	struct dir_meta *m;

	if (x->ndirs == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		struct dir_meta *d = realloc(x->dirs, cap * sizeof(*d));

		if (!d)
			return err_sys(x->e, ENOMEM, "restore");
		x->dirs = d;
		x->cap = cap;
	}
	m = &x->dirs[x->ndirs];
	m->sub = strdup(sub);
	if (!m->sub)
		return err_sys(x->e, ENOMEM, "restore");
	m->idx = idx;
	m->mode = archive_entry_perm(entry) & 01777;   /* setuid / setgid stripped */
	m->uid = (uid_t)archive_entry_uid(entry);
	m->gid = (gid_t)archive_entry_gid(entry);
	m->mtime.tv_sec = archive_entry_mtime(entry);
	m->mtime.tv_nsec = archive_entry_mtime_nsec(entry);
	x->ndirs++;
	return 0;
}

static int write_file(struct restorer *x, int pfd, const char *base, const char *name,
		      struct archive_entry *entry)
{
	auto_close int fd = -1;
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return parent_errno(x, errno, name);
	while ((r = archive_read_data_block(x->a, &buf, &len, &off)) == ARCHIVE_OK ||
	       r == ARCHIVE_WARN) {
		x->sum->bytes += len;
		if (x->sum->bytes > x->max_bytes)
			return err_set(x->e, SBX_E_FILE_TOO_LARGE,
				       "the archive's files are larger than the sandbox's disk (%llu MiB)",
				       (unsigned long long)(x->max_bytes >> 20));
		for (size_t done = 0; done < len;) {
			ssize_t n = pwrite(fd, (const char *)buf + done, len - done, off + (off_t)done);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return parent_errno(x, errno, name);
			done += (size_t)n;
		}
	}
	if (r != ARCHIVE_EOF)
		return invalid(x->e, x->a);
	if (archive_entry_size(entry) < 0)
		return unsafe(x->e, "has a bad size", name);
	if (archive_entry_size(entry) > (la_int64_t)x->max_bytes * 64)   /* holes, mostly */
		return err_set(x->e, SBX_E_FILE_TOO_LARGE,
			       "the archive's file '%.200s' is larger than the sandbox's disk allows",
			       name);
	if (ftruncate(fd, archive_entry_size(entry)) < 0)
		return parent_errno(x, errno, name);
	set_owner_fd(fd, entry);
	if (fchmod(fd, archive_entry_perm(entry) & 01777) < 0)
		return parent_errno(x, errno, name);
	{
		struct timespec ts[2] = { { archive_entry_mtime(entry), archive_entry_mtime_nsec(entry) },
					  { archive_entry_mtime(entry), archive_entry_mtime_nsec(entry) } };

		futimens(fd, ts);
	}
	return 0;
}

/* One entry of the archive into its staging directory. */
static int restore_entry(struct restorer *x, struct archive_entry *entry)
{
	const char *name = entry_name(entry), *sub, *base;
	char dir[SNAP_NAME_MAX];
	auto_close int pfd = -1;
	mode_t type = archive_entry_filetype(entry);
	struct stat old;
	int idx;

	if (!name)
		return err_set(x->e, SBX_E_INVALID_ARCHIVE, "the archive has an entry without a name");
	idx = snap_entry_place(name, x->rels, x->n, &sub, x->e);
	if (idx < 0)
		return -1;
	if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && !entry_hardlink(entry))
		return unsafe(x->e, "is a device node, FIFO or socket: not restored", name);
	if (!*sub) {
		if (type != AE_IFDIR || entry_hardlink(entry))
			return unsafe(x->e, "is a snapshot path but not a directory", name);
		return add_dir_meta(x, idx, "", entry);
	}
	if ((size_t)snprintf(dir, sizeof(dir), "%s", sub) >= sizeof(dir))
		return unsafe(x->e, "is too long", name);
	{
		size_t n = strlen(dir);

		while (n > 1 && dir[n - 1] == '/')
			dir[--n] = '\0';
	}
	{
		char *slash = strrchr(dir, '/');

		if (slash) {
			*slash = '\0';
			base = sub + (slash - dir) + 1;
		} else {
			dir[0] = '\0';
			base = sub;
		}
	}
	pfd = open_beneath(x->st[idx].fd, dir, 1);
	if (pfd < 0)
		return parent_errno(x, errno, name);
	{
		/* base may end in '/' (a directory's name): its own copy */
		char leaf[NAME_MAX + 1];
		size_t n = strcspn(base, "/");

		if (n == 0 || n > NAME_MAX)
			return unsafe(x->e, "has a bad name", name);
		memcpy(leaf, base, n);
		leaf[n] = '\0';
		if (fstatat(pfd, leaf, &old, AT_SYMLINK_NOFOLLOW) == 0) {
			if (S_ISDIR(old.st_mode) && type == AE_IFDIR && !entry_hardlink(entry))
				return add_dir_meta(x, idx, sub, entry);
			if (S_ISDIR(old.st_mode))
				return unsafe(x->e, "replaces a directory", name);
			if (unlinkat(pfd, leaf, 0) < 0)
				return parent_errno(x, errno, name);
		}
		if (entry_hardlink(entry)) {
			const char *tsub, *tname = entry_hardlink(entry);
			char tdir[SNAP_NAME_MAX], *slash;
			auto_close int tfd = -1;
			int tidx = snap_entry_place(tname, x->rels, x->n, &tsub, x->e);

			if (tidx < 0)
				return -1;
			if (tidx != idx || !*tsub)
				return unsafe(x->e, "is a hard link out of its path", name);
			if ((size_t)snprintf(tdir, sizeof(tdir), "%s", tsub) >= sizeof(tdir))
				return unsafe(x->e, "is too long", name);
			slash = strrchr(tdir, '/');
			if (slash)
				*slash = '\0';
			tfd = open_beneath(x->st[idx].fd, slash ? tdir : "", 0);
			if (tfd < 0)
				return parent_errno(x, errno, name);
			if (fstatat(tfd, slash ? slash + 1 : tdir, &old, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(old.st_mode))
				return unsafe(x->e, "is a hard link to no earlier file", name);
			if (linkat(tfd, slash ? slash + 1 : tdir, pfd, leaf, 0) < 0)
				return parent_errno(x, errno, name);
			return 0;
		}
		switch (type) {
		case AE_IFDIR:
			if (mkdirat(pfd, leaf, 0700) < 0)
				return parent_errno(x, errno, name);
			return add_dir_meta(x, idx, sub, entry);
		case AE_IFLNK: {
			const char *to = entry_symlink(entry);
			struct timespec ts[2] = {
				{ archive_entry_mtime(entry), archive_entry_mtime_nsec(entry) },
				{ archive_entry_mtime(entry), archive_entry_mtime_nsec(entry) }
			};

			if (!to || !*to)
				return unsafe(x->e, "is a symlink to nothing", name);
			if (symlinkat(to, pfd, leaf) < 0)
				return parent_errno(x, errno, name);
			if (fchownat(pfd, leaf, (uid_t)archive_entry_uid(entry),
				     (gid_t)archive_entry_gid(entry), AT_SYMLINK_NOFOLLOW) < 0)
				(void)0;
			utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW);
			return 0;
		}
		default:
			return write_file(x, pfd, leaf, name, entry);
		}
	}
}

/* The directories' own modes, owners and times, deepest first. */
static int apply_dir_meta(struct restorer *x)
{
	for (size_t i = x->ndirs; i-- > 0;) {
		struct dir_meta *m = &x->dirs[i];
		auto_close int pfd = open_beneath(x->st[m->idx].fd, m->sub, 0);
		auto_close int fd = -1;
		struct timespec ts[2] = { m->mtime, m->mtime };

		if (pfd < 0)
			return parent_errno(x, errno, m->sub);
		fd = open_in(pfd, ".", O_RDONLY | O_DIRECTORY, RESOLVE_BENEATH);
		if (fd < 0)
			return parent_errno(x, errno, m->sub);
		if (fchown(fd, m->uid, m->gid) < 0)
			(void)0;   /* an unmapped owner: root's */
		if (fchmod(fd, m->mode) < 0)
			return parent_errno(x, errno, m->sub);
		futimens(fd, ts);
	}
	return 0;
}

/* Rename every entry of directory from (in pfrom) into directory to (in
 * pto); -1 with errno at the first that fails (what moved stays moved). */
static int move_children(int pfrom, const char *from, int pto, const char *to)
{
	int dfrom = openat(pfrom, from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int dto = openat(pto, to, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfrom >= 0 ? fdopendir(dfrom) : NULL;
	struct dirent *de;
	int rc = 0, err = 0;

	if (!d || dto < 0) {
		err = errno;
		rc = -1;
	}
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (syscall(SYS_renameat2, dirfd(d), de->d_name, dto, de->d_name, RENAME_NOREPLACE) < 0) {
			err = errno;
			rc = -1;
		}
	}
	if (d)
		closedir(d);
	else if (dfrom >= 0)
		close(dfrom);
	if (dto >= 0)
		close(dto);
	errno = err;
	return rc;
}

/* The target is a directory of the image's layer, which overlayfs will
 * not rename (EXDEV): move its entries aside into s->old and the staged
 * ones into it instead, each a rename in one filesystem. The target's own
 * mode and owner become the archive's. On a failure, what moved goes
 * back. */
static int swap_children(struct restorer *x, struct stage *s)
{
	struct stat st;

	util_xsnprintf(s->old, sizeof(s->old), "%s-old", s->name);
	if (mkdirat(s->parent, s->old, 0700) < 0)
		return -1;
	if (move_children(s->parent, s->target, s->parent, s->old) < 0 ||
	    move_children(s->parent, s->name, s->parent, s->target) < 0) {
		int err = errno;

		move_children(s->parent, s->target, s->parent, s->name);
		move_children(s->parent, s->old, s->parent, s->target);
		errno = err;
		return -1;
	}
	if (fstatat(s->parent, s->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (fchownat(s->parent, s->target, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
			(void)0;
		fchmodat(s->parent, s->target, st.st_mode & 01777, 0);
	}
	(void)x;
	return 0;
}

static void swap_back(struct stage *s)
{
	if (s->swapped == 3) {
		move_children(s->parent, s->target, s->parent, s->name);
		move_children(s->parent, s->old, s->parent, s->target);
	} else if (s->swapped) {
		syscall(SYS_renameat2, s->parent, s->target, s->parent, s->name,
			s->swapped == 1 ? RENAME_EXCHANGE : RENAME_NOREPLACE);
	}
	s->swapped = 0;
}

/* Swap every staging tree in; on a failure, swap back what was. */
static int swap_in(struct restorer *x)
{
	for (size_t i = 0; i < x->n; i++) {
		struct stage *s = &x->st[i];

		if (syscall(SYS_renameat2, s->parent, s->name, s->parent, s->target, RENAME_EXCHANGE) ==
		    0) {
			s->swapped = 1;
			continue;
		}
		if (errno == ENOENT &&
		    syscall(SYS_renameat2, s->parent, s->name, s->parent, s->target,
			    RENAME_NOREPLACE) == 0) {
			s->swapped = 2;
			continue;
		}
		if (errno == EXDEV && swap_children(x, s) == 0) {
			s->swapped = 3;
			continue;
		}
		err_set(x->e, errno == EBUSY || errno == EXDEV ? SBX_E_CONFLICT : SBX_E_INTERNAL,
			"cannot put the restored '%s' in place: %s", s->target, strerror(errno));
		while (i-- > 0)
			swap_back(&x->st[i]);
		return -1;
	}
	return 0;
}

int snap_archive_extract(int root, int in, const char *const *paths, size_t npaths,
			 const char *target, uint64_t max_bytes, uint64_t max_entries,
			 struct snap_sum *sum, struct sbx_err *e)
{
	struct restorer *x = calloc(1, sizeof(*x));
	struct hashed *h = calloc(1, sizeof(*h));
	struct archive_entry *entry;
	int r, rc = -1;

	memset(sum, 0, sizeof(*sum));
	if (!x || !h || hashed_init(h, in) < 0) {
		free(x);
		free(h);
		return err_sys(e, ENOMEM, "restore");
	}
	x->max_bytes = max_bytes;
	x->sum = sum;
	x->e = e;
	if (npaths == 0 || npaths > SNAP_PATHS_MAX || (target && npaths != 1)) {
		err_set(e, SBX_E_VALIDATION, "targetDir needs a snapshot of one path");
		goto out;
	}
	for (size_t i = 0; i < npaths; i++) {
		struct stage *s = &x->st[i];
		unsigned char rnd[8];
		char hex[17];

		s->parent = s->fd = -1;
		x->rels[i] = paths[i] + 1;
		x->n = i + 1;
		s->parent = open_parent_of(root, target ? target : paths[i], &s->target, e);
		if (s->parent < 0)
			goto out;
		if (!files_fs_allowed(s->parent, 1)) {
			err_set(e, SBX_E_FORBIDDEN, "'%s' is not on the sandbox's own storage",
				target ? target : paths[i]);
			goto out;
		}
		if (util_random(rnd, sizeof(rnd)) < 0) {
			err_sys(e, errno, "random");
			goto out;
		}
		util_hex(rnd, sizeof(rnd), hex);
		util_xsnprintf(s->name, sizeof(s->name), ".sbx-restore-%s", hex);
		if (mkdirat(s->parent, s->name, 0755) < 0) {
			err_set(e, errno == ENOSPC ? SBX_E_NO_SPACE : SBX_E_INTERNAL,
				"cannot make the staging directory: %s", strerror(errno));
			s->name[0] = '\0';
			goto out;
		}
		s->fd = open_beneath(s->parent, s->name, 0);
		if (s->fd < 0) {
			err_sys(e, errno, "cannot open the staging directory");
			goto out;
		}
	}
	x->a = reader_new(h);
	if (!x->a) {
		err_set(e, SBX_E_INVALID_ARCHIVE, "the archive cannot be read");
		goto out;
	}
	while ((r = archive_read_next_header(x->a, &entry)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		if (++sum->entries > max_entries) {
			err_set(e, SBX_E_INVALID_ARCHIVE, "the archive has more than %llu entries",
				(unsigned long long)max_entries);
			goto out;
		}
		if (restore_entry(x, entry) < 0)
			goto out;
	}
	if (r != ARCHIVE_EOF) {
		invalid(e, x->a);
		goto out;
	}
	if (apply_dir_meta(x) < 0 || swap_in(x) < 0)
		goto out;
	rc = 0;
out:
	for (size_t i = 0; i < x->n; i++) {
		struct stage *s = &x->st[i];

		if (s->fd >= 0)
			close(s->fd);
		/* the staging tree of a failure, or the old tree a swap left there */
		if (s->parent >= 0 && s->name[0] && s->swapped != 2)
			files_remove_tree(s->parent, s->name);
		/* the old entries once they are out; never what a failed
		 * move back may have left there */
		if (s->parent >= 0 && s->old[0] && s->swapped == 3)
			files_remove_tree(s->parent, s->old);
		else if (s->parent >= 0 && s->old[0])
			unlinkat(s->parent, s->old, AT_REMOVEDIR);
		if (s->parent >= 0)
			close(s->parent);
	}
	for (size_t i = 0; i < x->ndirs; i++)
		free(x->dirs[i].sub);
	free(x->dirs);
	if (x->a)
		archive_read_free(x->a);
	hashed_release(h);
	free(h);
	free(x);
	return rc;
}
