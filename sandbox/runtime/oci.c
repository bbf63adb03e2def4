/*
 * oci.c — see oci.h. The registry HTTP API (distribution spec): GET
 * /v2/<repo>/manifests/<tag|digest> and /v2/<repo>/blobs/<digest>, a 401
 * with "WWW-Authenticate: Bearer realm=...,service=...,scope=..." answered
 * by fetching a token from the realm. A loopback registry (or one named in
 * [images] plain_http) is spoken to over plain HTTP, any other over
 * verified HTTPS (with its [images] registry_ca when given); libcurl honours
 * HTTP(S)_PROXY from the environment.
 */
#include "oci.h"
#include "buf.h"
#include "conf.h"
#include "log.h"
#include "sha256.h"
#include "util.h"

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_MAX (4 << 20)
#define CONFIG_MAX (8 << 20)
#define TOKEN_MAX (64 << 10)
#define OCI_MAX_LAYERS 128
#define ID_RANGE 65536

static const char accept_manifests[] =
	"Accept: application/vnd.oci.image.index.v1+json, "
	"application/vnd.docker.distribution.manifest.list.v2+json, "
	"application/vnd.oci.image.manifest.v1+json, "
	"application/vnd.docker.distribution.manifest.v2+json";

const char *oci_host_arch(void)
{
	struct utsname u;

	if (uname(&u) < 0)
		return "amd64";
	if (strcmp(u.machine, "x86_64") == 0)
		return "amd64";
	if (strcmp(u.machine, "aarch64") == 0)
		return "arm64";
	if (strncmp(u.machine, "armv7", 5) == 0)
		return "arm";
	if (strcmp(u.machine, "ppc64le") == 0)
		return "ppc64le";
	if (strcmp(u.machine, "s390x") == 0)
		return "s390x";
	return "amd64";
}

/* ---- HTTP ---------------------------------------------------------------- */

struct client {
	CURL *curl;
	const struct imgref *ref;
	char token[4096];        /* "Authorization: Bearer ..." or "" */
	char userpwd[CONF_STR_MAX]; /* "user:password" of ref's registry, or "" */
	char cafile[CONF_STR_MAX];  /* its CA bundle, or "": the system's */
	int basic;               /* the registry asked for Basic auth: send userpwd */
	int plain;               /* plain HTTP: loopback, or named in [images] plain_http */
	void (*received)(uint64_t bytes);   /* oci_pull_opts.received */
};

/* In list ("reg=value reg2 ..."), the word for registry: its value into
 * out (may be NULL) and 1, or 0 when registry is not listed. */
static int find_registry(const char *list, const char *registry, char *out, size_t size)
{
	size_t rl = strlen(registry);

	if (out)
		out[0] = '\0';
	for (const char *p = list ? list : ""; *p;) {
		size_t n = strcspn(p, " \t");

		if (n >= rl && strncmp(p, registry, rl) == 0 && (n == rl || p[rl] == '=')) {
			if (out && n > rl + 1 && n - rl - 1 < size) {
				memcpy(out, p + rl + 1, n - rl - 1);
				out[n - rl - 1] = '\0';
			}
			return 1;
		}
		p += n;
		p += strspn(p, " \t");
	}
	return 0;
}

struct reply {
	long status;
	struct buf body;         /* in memory (sink -1) */
	int sink;                /* or to this fd */
	struct sha256_ctx sha;   /* of what went to the sink */
	int64_t got, max;
	char www_auth[1024];
	int too_large, write_failed;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t len = size * n;

	r->got += (int64_t)len;
	if (r->max > 0 && r->got > r->max) {
		r->too_large = 1;
		return 0;
	}
	if (r->sink >= 0) {
		sha256_update(&r->sha, p, len);
		if (util_write_all(r->sink, p, len) < 0) {
			r->write_failed = errno ? errno : EIO;
			return 0;
		}
		return len;
	}
	return buf_add(&r->body, p, len) < 0 ? (r->too_large = 1, 0) : len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t len = size * n;

	if (len > 17 && strncasecmp(p, "www-authenticate:", 17) == 0) {
		size_t v = 17;

		while (v < len && p[v] == ' ')
			v++;
		snprintf(r->www_auth, sizeof(r->www_auth), "%.*s", (int)(len - v), p + v);
		r->www_auth[strcspn(r->www_auth, "\r\n")] = '\0';
	}
	return len;
}

/* One GET of url into r (memory of at most max bytes, or r->sink). A
 * transport failure is REGISTRY_UNAVAILABLE. */
static int http_get(struct client *c, const char *url, const char *accept, const char *auth,
		    const char *userpwd, struct reply *r, struct sbx_err *e)
{
	struct curl_slist *h = NULL;
	int64_t before = r->got;
	CURLcode rc;

	if (accept)
		h = curl_slist_append(h, accept);
	if (auth && auth[0])
		h = curl_slist_append(h, auth);
	curl_easy_reset(c->curl);
	curl_easy_setopt(c->curl, CURLOPT_URL, url);
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c->curl, CURLOPT_FOLLOWLOCATION, 1L);   /* blobs redirect to storage */
	curl_easy_setopt(c->curl, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(c->curl, CURLOPT_UNRESTRICTED_AUTH, 0L);
	curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, c->plain ? "http,https" : "https");
	curl_easy_setopt(c->curl, CURLOPT_REDIR_PROTOCOLS_STR, c->plain ? "http,https" : "https");
	if (c->cafile[0])
		curl_easy_setopt(c->curl, CURLOPT_CAINFO, c->cafile);
	curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "sbx-agent");
	if (userpwd && userpwd[0]) {
		curl_easy_setopt(c->curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(c->curl, CURLOPT_USERPWD, userpwd);
	}
	rc = curl_easy_perform(c->curl);
	curl_slist_free_all(h);
	if (c->received && r->got > before)
		c->received((uint64_t)(r->got - before));
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->too_large)
		return err_set(e, SBX_E_IMAGE_TOO_LARGE, "'%s' is larger than allowed", url);
	if (r->write_failed)
		return err_sys(e, r->write_failed, "cannot store a blob");
	if (rc != CURLE_OK)
		return err_set(e, SBX_E_REGISTRY_UNAVAILABLE, "registry '%s' unreachable: %s",
			       c->ref->registry, curl_easy_strerror(rc));
	return 0;
}

/* The value of key="..." in a WWW-Authenticate header into out. */
static int auth_param(const char *h, const char *key, char *out, size_t size)
{
	size_t k = strlen(key);

	for (const char *p = h; (p = strstr(p, key)); p += k) {
		const char *q, *end;

		if (p != h && p[-1] != ' ' && p[-1] != ',')
			continue;
		q = p + k;
		if (q[0] != '=' || q[1] != '"')
			continue;
		q += 2;
		end = strchr(q, '"');
		if (!end || (size_t)(end - q) >= size)
			return -1;
		memcpy(out, q, (size_t)(end - q));
		out[end - q] = '\0';
		return 0;
	}
	out[0] = '\0';
	return -1;
}

/* Answer a Bearer challenge: an anonymous token from its realm into c->token. */
static int fetch_token(struct client *c, const char *challenge, struct sbx_err *e)
{
	char realm[512], service[256], scope[512], url[2048];
	struct reply r = { .sink = -1, .max = TOKEN_MAX };
	json_auto_t *j = NULL;
	const char *tok;
	char *es, *esc;
	int n, rc;

	if (strncasecmp(challenge, "Bearer ", 7) != 0 || auth_param(challenge, "realm", realm, sizeof(realm)) < 0 ||
	    strncasecmp(realm, "http", 4) != 0)
		return err_set(e, SBX_E_REGISTRY_AUTH_FAILED,
			       "registry '%s' asks for authentication sbx cannot give", c->ref->registry);
	auth_param(challenge, "service", service, sizeof(service));
	if (auth_param(challenge, "scope", scope, sizeof(scope)) < 0)
		snprintf(scope, sizeof(scope), "repository:%s:pull", c->ref->repo);
	es = curl_easy_escape(c->curl, service, 0);
	esc = curl_easy_escape(c->curl, scope, 0);
	n = snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
		     es ? es : "", esc ? esc : "");
	curl_free(es);
	curl_free(esc);
	if (n < 0 || (size_t)n >= sizeof(url))
		return err_set(e, SBX_E_REGISTRY_AUTH_FAILED, "token realm too long");
	buf_init(&r.body, TOKEN_MAX);
	rc = http_get(c, url, NULL, NULL, c->userpwd, &r, e);
	if (rc == 0 && r.status != 200)
		rc = err_set(e, SBX_E_REGISTRY_AUTH_FAILED, "registry '%s' refused a token (HTTP %ld)%s",
			     c->ref->registry, r.status,
			     c->userpwd[0] ? "" : ": no credentials for it in [images] registry_auth");
	if (rc == 0) {
		j = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, NULL);
		tok = json_string_value(json_object_get(j, "token"));
		if (!tok)
			tok = json_string_value(json_object_get(j, "access_token"));
		if (!tok || snprintf(c->token, sizeof(c->token), "Authorization: Bearer %s", tok) >=
				    (int)sizeof(c->token))
			rc = err_set(e, SBX_E_REGISTRY_AUTH_FAILED, "registry '%s' gave no usable token",
				     c->ref->registry);
	}
	buf_release(&r.body);
	return rc;
}

/* GET /v2/<repo>/<kind>/<what>, answering one auth challenge. The status
 * mapped: 404 → IMAGE_NOT_FOUND, 401/403 → REGISTRY_AUTH_FAILED, 5xx →
 * REGISTRY_UNAVAILABLE. r's body or sink must be set up by the caller;
 * on a retry after the challenge, the sink is rewound. */
static int registry_get(struct client *c, const char *kind, const char *what, const char *accept,
			struct reply *r, struct sbx_err *e)
{
	char url[1024];

	if (snprintf(url, sizeof(url), "%s://%s/v2/%s/%s/%s", c->plain ? "http" : "https",
		     c->ref->host, c->ref->repo, kind, what) >= (int)sizeof(url))
		return err_set(e, SBX_E_VALIDATION, "image reference too long");
	for (int attempt = 0;; attempt++) {
		if (http_get(c, url, accept, c->token, c->basic ? c->userpwd : NULL, r, e) < 0)
			return -1;
		if (r->status != 401 || attempt > 0 || !r->www_auth[0])
			break;
		if (strncasecmp(r->www_auth, "Basic", 5) == 0) {
			if (!c->userpwd[0])
				return err_set(e, SBX_E_REGISTRY_AUTH_FAILED,
					       "registry '%s' needs credentials: none in [images] registry_auth",
					       c->ref->registry);
			c->basic = 1;
		} else if (fetch_token(c, r->www_auth, e) < 0) {
			return -1;
		}
		buf_reset(&r->body);
		r->got = 0;
		r->www_auth[0] = '\0';
		if (r->sink >= 0 && (ftruncate(r->sink, 0) < 0 || lseek(r->sink, 0, SEEK_SET) < 0))
			return err_sys(e, errno, "cannot rewind a download");
		sha256_init(&r->sha);
	}
	if (r->status == 200)
		return 0;
	if (r->status == 404)
		return err_set(e, SBX_E_IMAGE_NOT_FOUND, "image '%s/%s' has no %s '%.80s'", c->ref->registry,
			       c->ref->repo, strcmp(kind, "blobs") == 0 ? "blob" : "manifest", what);
	if (r->status == 401 || r->status == 403)
		return err_set(e, SBX_E_REGISTRY_AUTH_FAILED, "registry '%s' refused access to '%s' (HTTP %ld)",
			       c->ref->registry, c->ref->repo, r->status);
	if (r->status >= 500 || r->status == 429)
		return err_set(e, SBX_E_REGISTRY_UNAVAILABLE, "registry '%s' answered HTTP %ld",
			       c->ref->registry, r->status);
	return err_set(e, SBX_E_IMAGE_NOT_FOUND, "registry '%s' answered HTTP %ld for '%s'",
		       c->ref->registry, r->status, c->ref->repo);
}

static void digest_of(const void *data, size_t n, char out[IMGREF_DIGEST_LEN + 1])
{
	memcpy(out, "sha256:", 7);
	sha256_hex(data, n, out + 7);
}

static void digest_final(struct sha256_ctx *s, char out[IMGREF_DIGEST_LEN + 1])
{
	uint8_t d[SHA256_DIGEST_LEN];

	sha256_final(s, d);
	memcpy(out, "sha256:", 7);
	util_hex(d, sizeof(d), out + 7);
}

/* A JSON document (manifest or config) into *out; when want is a digest
 * the bytes must hash to it. */
static int get_json(struct client *c, const char *kind, const char *what, const char *want,
		    size_t max, json_t **out, char digest[IMGREF_DIGEST_LEN + 1], struct sbx_err *e)
{
	struct reply r = { .sink = -1, .max = (int64_t)max };
	char got[IMGREF_DIGEST_LEN + 1];
	int rc;

	buf_init(&r.body, max);
	rc = registry_get(c, kind, what, strcmp(kind, "manifests") == 0 ? accept_manifests : NULL, &r, e);
	if (rc == 0) {
		digest_of(r.body.data ? r.body.data : "", r.body.len, got);
		if (want && want[0] && strcmp(got, want) != 0)
			rc = err_set(e, SBX_E_IMAGE_DIGEST_MISMATCH, "'%s' of '%s' has digest %s, not %s", kind,
				     c->ref->repo, got, want);
	}
	if (rc == 0 && !(*out = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, NULL)))
		rc = err_set(e, SBX_E_IMAGE_NOT_FOUND, "the %s of '%s' is not JSON", kind, c->ref->repo);
	if (rc == 0 && digest)
		memcpy(digest, got, sizeof(got));
	buf_release(&r.body);
	return rc;
}

/* ---- layer extraction ------------------------------------------------------ */

/* 1 when name is relative with no "..", "." or empty component. */
static int safe_name(const char *name)
{
	const char *p = name;

	if (!name[0] || name[0] == '/')
		return 0;
	while (*p) {
		size_t n = strcspn(p, "/");

		if ((n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		while (*p == '/')
			p++;
	}
	return 1;
}

/* Split path (normalised: "./" prefix and trailing '/' dropped) into an
 * fd of its parent inside root (never through a symlink, never out of
 * root) and its last component in base. -1 with e filled. */
static int open_parent(int root, const char *path, char *base, size_t size, struct sbx_err *e)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
					   RESOLVE_NO_XDEV };
	int fd;

	if (snprintf(base, size, "%s", slash ? slash + 1 : path) >= (int)size)
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer entry name too long");
	if (!slash)
		return (int)fcntl(root, F_DUPFD_CLOEXEC, 0);
	if (snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path) >= (int)sizeof(dir))
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer entry name too long");
	fd = (int)syscall(SYS_openat2, root, dir, &how, sizeof(how));
	if (fd < 0 && errno == ENOENT) {
		/* a parent the layer does not list: made as a plain 0755 dir */
		char *q = dir;

		for (;;) {
			char *s = strchr(q, '/');

			if (s)
				*s = '\0';
			if (mkdirat(root, dir, 0755) < 0 && errno != EEXIST)
				break;
			if (!s)
				break;
			*s = '/';
			q = s + 1;
		}
		fd = (int)syscall(SYS_openat2, root, dir, &how, sizeof(how));
	}
	if (fd < 0)
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer entry '%.200s' %s", path,
			       errno == ELOOP || errno == EXDEV ? "goes through a symlink"
							       : "has a parent that is not a directory");
	return fd;
}

/* Remove what a later entry replaces (not a directory it merges into). */
static void clear_slot(int pfd, const char *base, int keep_dir)
{
	struct stat st;

	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	if (S_ISDIR(st.st_mode)) {
		if (!keep_dir)
			unlinkat(pfd, base, AT_REMOVEDIR);   /* only when empty */
		return;
	}
	unlinkat(pfd, base, 0);
}

static uid_t shift(uid_t owner, int64_t id)
{
	return owner + (uid_t)(id >= 0 && id < ID_RANGE ? id : ID_RANGE - 2);
}

/* Create the entry en (read from ar) under root, its ids shifted by owner.
 * 0, 1 when the stream ends with this entry (no end blocks), or -1 with e
 * (IMAGE_LAYER_REFUSED for an entry the rules refuse). */
static int unpack_entry(struct archive *ar, struct archive_entry *en, int root, uid_t owner,
			struct sbx_err *e)
{
	char path[PATH_MAX], base[NAME_MAX + 1];
	const char *name = archive_entry_pathname(en);
	mode_t type = archive_entry_filetype(en);
	mode_t mode = archive_entry_perm(en) & 07777;
	uid_t uid = shift(owner, archive_entry_uid(en));
	gid_t gid = shift(owner, archive_entry_gid(en));
	auto_close int pfd = -1;
	size_t n;

	if (!name)
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer entry without a name");
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (snprintf(path, sizeof(path), "%s", name) >= (int)sizeof(path))
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer entry name too long");
	n = strlen(path);
	while (n > 0 && path[n - 1] == '/')
		path[--n] = '\0';
	if (n == 0 || strcmp(path, ".") == 0)
		return 0;   /* the root itself */
	if (!safe_name(path))
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer entry '%.200s' is absolute or has '..'",
			       name);
	if ((pfd = open_parent(root, path, base, sizeof(base), e)) < 0)
		return -1;
	/* whiteouts: ".wh..wh..opq" makes the parent opaque, ".wh.X" hides X */
	if (strcmp(base, ".wh..wh..opq") == 0) {
		char proc[64];

		/* O_PATH fds take no xattrs: through /proc; both the trusted
		 * and the userxattr names, for either kind of overlay mount */
		util_xsnprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
		if (setxattr(proc, "trusted.overlay.opaque", "y", 1, 0) < 0)
			return err_sys(e, errno, "cannot mark an opaque directory");
		(void)setxattr(proc, "user.overlay.opaque", "y", 1, 0);
		return 0;
	}
	if (strncmp(base, ".wh.", 4) == 0) {
		if (!base[4] || !safe_name(base + 4))
			return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "bad whiteout '%.200s'", name);
		clear_slot(pfd, base + 4, 0);
		if (mknodat(pfd, base + 4, S_IFCHR | 0, makedev(0, 0)) < 0 && errno != EEXIST)
			return err_sys(e, errno, "cannot create a whiteout");
		return 0;
	}
	if (archive_entry_hardlink(en)) {
		const char *target = archive_entry_hardlink(en);
		char tbase[NAME_MAX + 1];
		auto_close int tfd = -1;
		struct stat st;

		while (target[0] == '.' && target[1] == '/')
			target += 2;
		if (!safe_name(target))
			return err_set(e, SBX_E_IMAGE_LAYER_REFUSED,
				       "hard link '%.200s' points outside the layer", name);
		if ((tfd = open_parent(root, target, tbase, sizeof(tbase), e)) < 0)
			return -1;
		if (fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
			return err_set(e, SBX_E_IMAGE_LAYER_REFUSED,
				       "hard link '%.200s' names no earlier file of the layer", name);
		clear_slot(pfd, base, 0);
		if (linkat(tfd, tbase, pfd, base, 0) < 0)
			return err_sys(e, errno, "cannot create a hard link");
		return 0;
	}
	switch (type) {
	case AE_IFDIR: {
		auto_close int dfd = -1;

		clear_slot(pfd, base, 1);
		if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
			return err_sys(e, errno, "cannot create a directory");
		dfd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "'%.200s' is not a directory", name);
		if (fchown(dfd, uid, gid) < 0 || fchmod(dfd, mode) < 0)
			return err_sys(e, errno, "cannot set a directory's owner or mode");
		return 0;
	}
	case AE_IFREG: {
		auto_close int fd = -1;
		const void *blk;
		size_t len;
		la_int64_t off, at = 0;
		int r;

		clear_slot(pfd, base, 0);
		fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return err_sys(e, errno, "cannot create '%.200s'", name);
		while ((r = archive_read_data_block(ar, &blk, &len, &off)) == ARCHIVE_OK) {
			if (off > at && lseek(fd, off, SEEK_SET) < 0)
				return err_sys(e, errno, "cannot write '%.200s'", name);
			if (util_write_all(fd, blk, len) < 0)
				return err_sys(e, errno, "cannot write '%.200s'", name);
			at = off + (la_int64_t)len;
		}
		/* Some writers (umoci 0.4) end the stream right after the last
		 * file's data, without its padding or the end blocks: a file
		 * whose bytes are all there ends the layer (its digest was
		 * checked, so this is what the image's author made). */
		if (r != ARCHIVE_EOF && at < archive_entry_size(en))
			return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer is corrupt at '%.200s': %s", name,
				       archive_error_string(ar) ? archive_error_string(ar) : "read error");
		if (ftruncate(fd, archive_entry_size(en)) < 0 || fchown(fd, uid, gid) < 0 ||
		    fchmod(fd, mode) < 0)
			return err_sys(e, errno, "cannot finish '%.200s'", name);
		return r == ARCHIVE_EOF ? 0 : 1;
	}
	case AE_IFLNK: {
		const char *target = archive_entry_symlink(en);

		if (!target)
			return err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "symlink '%.200s' without a target", name);
		clear_slot(pfd, base, 0);
		if (symlinkat(target, pfd, base) < 0 ||
		    fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			return err_sys(e, errno, "cannot create symlink '%.200s'", name);
		return 0;
	}
	case AE_IFIFO:
		clear_slot(pfd, base, 0);
		if (mknodat(pfd, base, S_IFIFO | mode, 0) < 0 ||
		    fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			return err_sys(e, errno, "cannot create fifo '%.200s'", name);
		return 0;
	default:
		return err_set(e, SBX_E_IMAGE_LAYER_REFUSED,
			       "layer entry '%.200s' is a device node or socket (refused)", name);
	}
}

int oci_unpack(int fd, const char *dir, uid_t owner, struct sbx_err *e)
{
	struct archive *ar = archive_read_new();
	struct archive_entry *en;
	auto_close int root = -1;
	int r, rc = 0;

	if (!ar)
		return err_sys(e, ENOMEM, "archive");
	archive_read_support_filter_gzip(ar);
	archive_read_support_filter_zstd(ar);
	archive_read_support_filter_none(ar);
	archive_read_support_format_tar(ar);
	if (mkdir(dir, 0755) < 0 || chown(dir, owner, owner) < 0 ||
	    (root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		archive_read_free(ar);
		return err_sys(e, errno, "cannot create a layer directory");
	}
	if (archive_read_open_fd(ar, fd, 1 << 16) != ARCHIVE_OK) {
		rc = err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer is not a tar: %s",
			     archive_error_string(ar) ? archive_error_string(ar) : "?");
		archive_read_free(ar);
		return rc;
	}
	while ((r = archive_read_next_header(ar, &en)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		int u = unpack_entry(ar, en, root, owner, e);

		if (u < 0)
			rc = -1;
		if (u != 0) {
			r = ARCHIVE_EOF;   /* an error, or the stream's end (see unpack_entry) */
			break;
		}
	}
	if (rc == 0 && r != ARCHIVE_EOF)
		rc = err_set(e, SBX_E_IMAGE_LAYER_REFUSED, "layer is corrupt: %s",
			     archive_error_string(ar) ? archive_error_string(ar) : "read error");
	archive_read_free(ar);
	return rc;
}

/* ---- the store --------------------------------------------------------------- */

static int rm_tree_at(int dfd, const char *name)
{
	auto_close int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;

	if (fd < 0)
		return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
	d = fdopendir(fd);
	if (!d)
		return -1;
	fd = -1;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type == DT_DIR)
			rm_tree_at(dirfd(d), de->d_name);
		else
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
	return unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -1 : 0;
}

static int rm_tree(const char *path)
{
	return rm_tree_at(AT_FDCWD, path);
}

static int record_path(const char *images_dir, const struct imgref *ref, char *out, size_t size)
{
	char canon[IMGREF_MAX], hex[65];

	if (imgref_format(ref, canon, sizeof(canon)) < 0)
		return -1;
	sha256_hex(canon, strlen(canon), hex);
	return snprintf(out, size, "%s/oci/%s.json", images_dir, hex) >= (int)size ? -1 : 0;
}

static int tmp_name(const char *images_dir, const char *what, char *out, size_t size)
{
	unsigned char rnd[8];
	char hex[17];

	if (util_random(rnd, sizeof(rnd)) < 0)
		return -1;
	util_hex(rnd, sizeof(rnd), hex);
	return snprintf(out, size, "%s/tmp/%s-%s", images_dir, what, hex) >= (int)size ? -1 : 0;
}

/* Open images_dir/lock, the store's lock: pulls hold it shared while they
 * add layers not yet named by a record; the sweep of unused layers takes
 * it exclusive (and skips its work while a pull holds it). */
static int store_lock(const char *images_dir, int how)
{
	char p[PATH_MAX];
	int fd;

	if (snprintf(p, sizeof(p), "%s/lock", images_dir) >= (int)sizeof(p))
		return -1;
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, how) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Download blob digest into a temp file, verify it, unpack it into a temp
 * dir, rename that to layers/<hex>. A layer already there is kept. */
static int pull_layer(struct client *c, const struct oci_pull_opts *o, const char *digest,
		      struct sbx_err *e)
{
	char final[PATH_MAX], blob[PATH_MAX], dir[PATH_MAX], got[IMGREF_DIGEST_LEN + 1];
	struct reply r = { .sink = -1, .max = o->max_image_bytes };
	struct stat st;
	int rc;

	if (snprintf(final, sizeof(final), "%s/layers/%s", o->images_dir, digest + 7) >= (int)sizeof(final))
		return err_set(e, SBX_E_INTERNAL, "images_dir path too long");
	if (stat(final, &st) == 0)
		return 0;
	if (tmp_name(o->images_dir, "blob", blob, sizeof(blob)) < 0 ||
	    tmp_name(o->images_dir, "layer", dir, sizeof(dir)) < 0)
		return err_set(e, SBX_E_INTERNAL, "images_dir path too long");
	r.sink = open(blob, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (r.sink < 0)
		return err_sys(e, errno, "cannot create a download file");
	unlink(blob);   /* the fd is all we need: nothing stays behind */
	sha256_init(&r.sha);
	rc = registry_get(c, "blobs", digest, NULL, &r, e);
	if (rc == 0) {
		digest_final(&r.sha, got);
		if (strcmp(got, digest) != 0)
			rc = err_set(e, SBX_E_IMAGE_DIGEST_MISMATCH, "layer %.19s of '%s' has digest %.19s",
				     digest, c->ref->repo, got);
	}
	if (rc == 0 && lseek(r.sink, 0, SEEK_SET) < 0)
		rc = err_sys(e, errno, "cannot rewind a layer");
	if (rc == 0 && oci_unpack(r.sink, dir, o->owner, e) < 0)
		rc = -1;
	close(r.sink);
	if (rc == 0 && rename(dir, final) < 0) {
		if (errno != EEXIST && errno != ENOTEMPTY)
			rc = err_sys(e, errno, "cannot store a layer");
	}
	rm_tree(dir);   /* gone after a rename; half-unpacked after a failure */
	return rc;
}

/* The manifest of this platform in an index. */
static const char *pick_platform(json_t *index, const char *arch)
{
	size_t i;
	json_t *m;

	json_array_foreach(json_object_get(index, "manifests"), i, m) {
		json_t *p = json_object_get(m, "platform");
		const char *os = json_string_value(json_object_get(p, "os"));
		const char *a = json_string_value(json_object_get(p, "architecture"));

		if (os && a && strcmp(os, "linux") == 0 && strcmp(a, arch) == 0)
			return json_string_value(json_object_get(m, "digest"));
	}
	return NULL;
}

int oci_pull(const struct oci_pull_opts *o, const struct imgref *ref, struct sbx_err *e)
{
	struct client c = { .ref = ref, .received = o->received };
	char rec[PATH_MAX], mdigest[IMGREF_DIGEST_LEN + 1], canon[IMGREF_MAX], p[PATH_MAX];
	json_auto_t *man = NULL;
	json_auto_t *cfg = NULL;
	json_auto_t *layers = json_array();
	json_auto_t *record = NULL;
	json_t *l, *ccfg;
	const char *mt, *cdigest;
	int64_t total = 0;
	struct stat st;
	size_t i;
	int rc = -1, store_fd = -1;

	if (record_path(o->images_dir, ref, rec, sizeof(rec)) < 0 || imgref_format(ref, canon, sizeof(canon)) < 0)
		return err_set(e, SBX_E_VALIDATION, "image reference too long");
	if (stat(rec, &st) == 0)
		return 0;
	for (int k = 0; k < 3; k++) {
		if (snprintf(p, sizeof(p), "%s/%s", o->images_dir, k == 0 ? "layers" : k == 1 ? "oci" : "tmp") >=
			    (int)sizeof(p) ||
		    util_mkdir_p(p, 0700) < 0)
			return err_sys(e, errno, "cannot create the image store");
		/* the layers are shown through an idmapped mount of this dir
		 * when it belongs to the image owner (runtime.c) */
		if (k == 0 && chown(p, o->owner, o->owner) < 0)
			return err_sys(e, errno, "cannot chown the layer store");
	}
	if (!layers || !(c.curl = curl_easy_init()))
		return err_sys(e, ENOMEM, "cannot start a pull");
	if (find_registry(o->auth, ref->registry, c.userpwd, sizeof(c.userpwd)) && !strchr(c.userpwd, ':'))
		c.userpwd[0] = '\0';
	find_registry(o->ca, ref->registry, c.cafile, sizeof(c.cafile));
	c.plain = ref->loopback || find_registry(o->plain_http, ref->registry, NULL, 0);
	if (get_json(&c, "manifests", ref->digest[0] ? ref->digest : ref->tag, ref->digest, MANIFEST_MAX,
		     &man, mdigest, e) < 0)
		goto out;
	mt = json_string_value(json_object_get(man, "mediaType"));
	if (json_object_get(man, "manifests") ||
	    (mt && (strstr(mt, "index") || strstr(mt, "manifest.list")))) {
		const char *d = pick_platform(man, o->arch);
		char want[IMGREF_DIGEST_LEN + 1];

		if (!d || !imgref_valid_digest(d)) {
			err_set(e, SBX_E_IMAGE_PLATFORM_UNSUPPORTED, "image '%s' has no linux/%s manifest", canon,
				o->arch);
			goto out;
		}
		snprintf(want, sizeof(want), "%s", d);
		json_decref(man);
		man = NULL;
		if (get_json(&c, "manifests", want, want, MANIFEST_MAX, &man, mdigest, e) < 0)
			goto out;
	}
	if (json_integer_value(json_object_get(man, "schemaVersion")) != 2 ||
	    !json_is_array(json_object_get(man, "layers"))) {
		err_set(e, SBX_E_IMAGE_PLATFORM_UNSUPPORTED, "image '%s' is not a schema 2 or OCI manifest", canon);
		goto out;
	}
	cdigest = json_string_value(json_object_get(json_object_get(man, "config"), "digest"));
	if (!cdigest || !imgref_valid_digest(cdigest)) {
		err_set(e, SBX_E_IMAGE_NOT_FOUND, "image '%s' has no config", canon);
		goto out;
	}
	if (get_json(&c, "blobs", cdigest, cdigest, CONFIG_MAX, &cfg, NULL, e) < 0)
		goto out;
	if (json_array_size(json_object_get(man, "layers")) > OCI_MAX_LAYERS) {
		err_set(e, SBX_E_IMAGE_TOO_LARGE, "image '%s' has more than %d layers", canon, OCI_MAX_LAYERS);
		goto out;
	}
	json_array_foreach(json_object_get(man, "layers"), i, l) {
		const char *d = json_string_value(json_object_get(l, "digest"));
		const char *lmt = json_string_value(json_object_get(l, "mediaType"));

		if (!d || !imgref_valid_digest(d) || (lmt && !strstr(lmt, "tar"))) {
			err_set(e, SBX_E_IMAGE_PLATFORM_UNSUPPORTED, "layer %zu of '%s' is not a tar layer", i, canon);
			goto out;
		}
		total += json_integer_value(json_object_get(l, "size"));
		if (o->max_image_bytes > 0 && total > o->max_image_bytes) {
			err_set(e, SBX_E_IMAGE_TOO_LARGE, "image '%s' is larger than this node's limit", canon);
			goto out;
		}
		json_array_append_new(layers, json_string(d + 7));
	}
	store_fd = store_lock(o->images_dir, LOCK_SH);
	if (store_fd < 0) {
		err_sys(e, errno, "cannot lock the image store");
		goto out;
	}
	json_array_foreach(layers, i, l) {
		char d[IMGREF_DIGEST_LEN + 1];

		snprintf(d, sizeof(d), "sha256:%s", json_string_value(l));
		if (pull_layer(&c, o, d, e) < 0)
			goto out;
	}
	ccfg = json_object_get(cfg, "config");
	record = json_pack("{s:s, s:s, s:O, s:I, s:O?, s:s?, s:s?}", "ref", canon, "digest", mdigest,
			   "layers", layers, "size", (json_int_t)total,
			   "env", json_object_get(ccfg, "Env"),
			   "workingDir", json_string_value(json_object_get(ccfg, "WorkingDir")),
			   "user", json_string_value(json_object_get(ccfg, "User")));
	if (!record) {
		err_sys(e, ENOMEM, "image record");
		goto out;
	}
	{
		auto_free char *text = json_dumps(record, JSON_COMPACT);

		if (!text || util_write_file(rec, text, strlen(text), 0600) < 0) {
			err_sys(e, errno ? errno : ENOMEM, "cannot write the image record");
			goto out;
		}
	}
	rc = 0;
out:
	if (store_fd >= 0)
		close(store_fd);
	curl_easy_cleanup(c.curl);
	if (rc == 0 && o->budget_bytes > 0) {
		int n = oci_gc(o->images_dir, o->budget_bytes, rec);

		if (n > 0)
			log_info("image store: %d least recently used image(s) removed for the disk budget", n);
	}
	return rc;
}

/* lastUsed: a record's mtime in wall ms. */
static json_t *mtime_json(const struct stat *st)
{
	return json_integer((json_int_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000);
}

json_t *oci_record(const char *images_dir, const struct imgref *ref, int touch, int *lock_fd,
		   struct sbx_err *e)
{
	char rec[PATH_MAX];
	auto_close int fd = -1;
	struct stat st;
	json_t *j;

	if (record_path(images_dir, ref, rec, sizeof(rec)) < 0)
		return err_set(e, SBX_E_VALIDATION, "image reference too long"), NULL;
	fd = open(rec, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(e, SBX_E_IMAGE_NOT_FOUND, "image not pulled"), NULL;
	if (lock_fd && flock(fd, LOCK_SH) < 0)
		return err_sys(e, errno, "cannot lock an image record"), NULL;
	j = json_loadfd(fd, 0, NULL);
	if (!j || !json_is_array(json_object_get(j, "layers"))) {
		json_decref(j);
		return err_set(e, SBX_E_IMAGE_NOT_FOUND, "image not pulled"), NULL;
	}
	/* lastUsed is the record's mtime: rewriting the file would make a
	 * new inode and drop the lock holders' flock */
	if (touch)
		(void)futimens(fd, NULL);
	if (fstat(fd, &st) == 0)
		json_object_set_new(j, "lastUsed", mtime_json(&st));
	if (lock_fd)
		*lock_fd = steal_fd(&fd);
	return j;
}

/* Each record of the store, to fn (borrowed); stops when fn returns < 0. */
static void each_record(const char *images_dir, int (*fn)(void *, const char *, json_t *), void *arg)
{
	char p[PATH_MAX];
	DIR *d;
	struct dirent *de;

	if (snprintf(p, sizeof(p), "%s/oci", images_dir) >= (int)sizeof(p) || !(d = opendir(p)))
		return;
	while ((de = readdir(d))) {
		char f[PATH_MAX];
		json_t *j;
		int stop;

		if (!strstr(de->d_name, ".json") || de->d_name[0] == '.')
			continue;
		if (snprintf(f, sizeof(f), "%s/%s", p, de->d_name) >= (int)sizeof(f))
			continue;
		if (!(j = json_load_file(f, 0, NULL)))
			continue;
		stop = fn(arg, f, j) < 0;
		json_decref(j);
		if (stop)
			break;
	}
	closedir(d);
}

static int list_one(void *arg, const char *path, json_t *j)
{
	struct stat st;

	if (stat(path, &st) == 0)
		json_object_set_new(j, "lastUsed", mtime_json(&st));
	json_array_append_new(arg, json_pack("{s:O?, s:O?, s:O?, s:O?}", "ref", json_object_get(j, "ref"),
					     "digest", json_object_get(j, "digest"), "size",
					     json_object_get(j, "size"), "lastUsed",
					     json_object_get(j, "lastUsed")));
	return 0;
}

json_t *oci_list(const char *images_dir)
{
	json_t *a = json_array();

	if (a)
		each_record(images_dir, list_one, a);
	return a;
}

static int mark_layers(void *arg, const char *path, json_t *j)
{
	size_t i;
	json_t *l;

	(void)path;
	json_array_foreach(json_object_get(j, "layers"), i, l)
		if (json_is_string(l))
			json_object_set_new(arg, json_string_value(l), json_true());
	return 0;
}


/* Remove the layers no record names. */
static void sweep_layers(const char *images_dir)
{
	json_auto_t *used = json_object();
	auto_close int lock = store_lock(images_dir, LOCK_EX | LOCK_NB);
	char p[PATH_MAX];
	DIR *d;
	struct dirent *de;

	if (!used || lock < 0)
		return;
	each_record(images_dir, mark_layers, used);
	if (snprintf(p, sizeof(p), "%s/layers", images_dir) >= (int)sizeof(p) || !(d = opendir(p)))
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || json_object_get(used, de->d_name))
			continue;
		rm_tree_at(dirfd(d), de->d_name);
	}
	closedir(d);
}

/* Unlink the record at rec unless a sandbox holds its lock. */
static int remove_record(const char *rec, struct sbx_err *e)
{
	auto_close int fd = open(rec, O_RDONLY | O_CLOEXEC);

	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? err_set(e, SBX_E_CONFLICT, "the image is in use by a sandbox")
					    : err_sys(e, errno, "cannot lock the image record");
	if (unlink(rec) < 0)
		return errno == ENOENT ? err_set(e, SBX_E_IMAGE_NOT_FOUND, "image not pulled on this node")
				       : err_sys(e, errno, "cannot remove the image record");
	return 0;
}

int oci_remove(const char *images_dir, const struct imgref *ref, struct sbx_err *e)
{
	char rec[PATH_MAX];

	if (record_path(images_dir, ref, rec, sizeof(rec)) < 0)
		return err_set(e, SBX_E_VALIDATION, "image reference too long");
	if (remove_record(rec, e) < 0)
		return -1;
	sweep_layers(images_dir);
	return 0;
}

void oci_clean_tmp(const char *images_dir, int64_t older_than_s)
{
	char p[PATH_MAX];
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (snprintf(p, sizeof(p), "%s/tmp", images_dir) >= (int)sizeof(p) || !(d = opendir(p)))
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    st.st_mtime > time(NULL) - older_than_s)
			continue;
		rm_tree_at(dirfd(d), de->d_name);
	}
	closedir(d);
}

/* Bytes on disk under the directory dfd/name (blocks, not lengths). */
static int64_t tree_bytes(int dfd, const char *name)
{
	auto_close int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *de;
	int64_t sum = 0;
	struct stat st;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd)))
		return 0;
	fd = -1;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			sum += (int64_t)st.st_blocks * 512;
		if (de->d_type == DT_DIR)
			sum += tree_bytes(dirfd(d), de->d_name);
	}
	closedir(d);
	return sum;
}

static int64_t store_bytes(const char *images_dir)
{
	char p[PATH_MAX];

	if (snprintf(p, sizeof(p), "%s/layers", images_dir) >= (int)sizeof(p))
		return 0;
	return tree_bytes(AT_FDCWD, p);
}

struct lru {
	char path[PATH_MAX];
	int64_t mtime;
};

struct lru_list {
	struct lru *v;
	size_t n, cap;
	const char *keep;   /* the record path not to evict */
};

static int lru_add(void *arg, const char *path, json_t *j)
{
	struct lru_list *l = arg;
	struct stat st;

	(void)j;
	if (strcmp(path, l->keep) == 0 || stat(path, &st) < 0)
		return 0;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 16;
		struct lru *nv = realloc(l->v, nc * sizeof(*nv));

		if (!nv)
			return -1;
		l->v = nv;
		l->cap = nc;
	}
	snprintf(l->v[l->n].path, sizeof(l->v[l->n].path), "%s", path);
	l->v[l->n++].mtime = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	return 0;
}

static int lru_cmp(const void *a, const void *b)
{
	const struct lru *x = a, *y = b;

	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

int oci_gc(const char *images_dir, int64_t budget, const char *keep_record)
{
	struct lru_list l = { .keep = keep_record ? keep_record : "" };
	int64_t used = store_bytes(images_dir);
	int removed = 0;

	if (budget <= 0 || used <= budget)
		return 0;
	each_record(images_dir, lru_add, &l);
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), lru_cmp);
	for (size_t i = 0; i < l.n && used > budget; i++) {
		struct sbx_err e = { 0 };

		if (remove_record(l.v[i].path, &e) < 0)
			continue;   /* in use: kept whatever the budget */
		removed++;
		sweep_layers(images_dir);
		used = store_bytes(images_dir);
	}
	free(l.v);
	return removed;
}

/* ---- the image's User ------------------------------------------------------ */

#define ID_DB_FIELDS 7   /* name:pw:uid:gid:gecos:home:shell */

/* The ':'-separated fields (into f[], copied into buf) of the line of a
 * passwd- or group-format text whose field 0 (by_name) or field 2 is key
 * and whose field num is a valid id (into *id); 0, or -1 when none is. */
static int id_db_line(const char *db, const char *key, int by_name, int num, int64_t *id,
		      char *buf, size_t cap, char **f)
{
	for (const char *line = db, *next; line && *line; line = next) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		int nf = 0;

		next = nl ? nl + 1 : NULL;
		if (len >= cap)
			continue;
		memcpy(buf, line, len);
		buf[len] = '\0';
		memset(f, 0, ID_DB_FIELDS * sizeof(*f));
		for (char *p = buf; p && nf < ID_DB_FIELDS; nf++) {
			f[nf] = p;
			p = strchr(p, ':');
			if (p)
				*p++ = '\0';
		}
		if (nf > num && nf > 2 && strcmp(by_name ? f[0] : f[2], key) == 0 &&
		    util_parse_i64(f[num], 0, UINT32_MAX - 1, id) == 0)
			return 0;
	}
	return -1;
}

int oci_user_resolve(const char *passwd, const char *group, const char *user, uint32_t *uid,
		     uint32_t *gid, char *home, size_t home_cap, struct sbx_err *e)
{
	char u[256], line[512], *f[ID_DB_FIELDS];
	const char *g = NULL;
	char *colon;
	int64_t v, pg = 0;
	int entry;

	*uid = *gid = 0;
	if (home_cap)
		home[0] = '\0';
	if (!user || !user[0])
		return 0;
	if (snprintf(u, sizeof(u), "%s", user) >= (int)sizeof(u))
		return err_set(e, SBX_E_IMAGE_USER_UNKNOWN, "the image's User is too long");
	colon = strchr(u, ':');
	if (colon) {
		*colon = '\0';
		g = colon + 1;
	}
	if (util_parse_i64(u, 0, UINT32_MAX - 1, &v) == 0) {
		/* a number needs no entry; its entry, if any, gives the group */
		*uid = (uint32_t)v;
		entry = id_db_line(passwd, u, 0, 3, &pg, line, sizeof(line), f) == 0;
		if (!entry)
			pg = 0;
	} else if (id_db_line(passwd, u, 1, 2, &v, line, sizeof(line), f) == 0 &&
		   f[3] && util_parse_i64(f[3], 0, UINT32_MAX - 1, &pg) == 0) {
		*uid = (uint32_t)v;
		entry = 1;
	} else {
		return err_set(e, SBX_E_IMAGE_USER_UNKNOWN,
			       "the image's user '%.64s' is not in its /etc/passwd", u);
	}
	*gid = (uint32_t)pg;
	/* HOME: the entry's, else "/" (root without an entry keeps the default) */
	if (home_cap && (entry || *uid != 0) &&
	    snprintf(home, home_cap, "%s", entry && f[5] && f[5][0] == '/' ? f[5] : "/") >= (int)home_cap)
		snprintf(home, home_cap, "/");
	if (!g || !g[0])
		return 0;
	if (util_parse_i64(g, 0, UINT32_MAX - 1, &v) < 0 &&
	    id_db_line(group, g, 1, 2, &v, line, sizeof(line), f) < 0)
		return err_set(e, SBX_E_IMAGE_USER_UNKNOWN,
			       "the image's group '%.64s' is not in its /etc/group", g);
	*gid = (uint32_t)v;
	return 0;
}

/* The text of etc/<name> of the topmost layer of layers (':'-joined
 * digests, top first) that has or removes it; NULL when none has it or
 * it cannot be read. Never follows a symlink out of a layer. */
static char *layers_etc_file(const char *images_dir, const char *layers, const char *name)
{
	for (const char *l = layers; l && *l;) {
		const char *end = strchr(l, ':');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		char dir[PATH_MAX];
		struct stat st;
		int etc, fd;

		if (snprintf(dir, sizeof(dir), "%s/layers/%.*s/etc", images_dir, (int)n, l) >= (int)sizeof(dir))
			return NULL;
		l = end ? end + 1 : NULL;
		etc = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (etc < 0)
			continue;
		fd = openat(etc, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 && fstatat(etc, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			close(etc);
			return NULL;   /* a whiteout or a symlink: not followed */
		}
		close(etc);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
			close(fd);
			return NULL;   /* a whiteout (char device) or not a file */
		}
		{
			char *text = calloc(1, (size_t)st.st_size + 1);
			ssize_t r = text ? read(fd, text, (size_t)st.st_size) : -1;

			close(fd);
			if (r < 0) {
				free(text);
				return NULL;
			}
			text[r] = '\0';
			return text;
		}
	}
	return NULL;
}

int oci_image_user(const char *images_dir, const char *layers, const char *user, uint32_t *uid,
		   uint32_t *gid, char *home, size_t home_cap, struct sbx_err *e)
{
	auto_free char *passwd = NULL, *group = NULL;

	*uid = *gid = 0;
	if (home_cap)
		home[0] = '\0';
	if (!user || !user[0])
		return 0;
	passwd = layers_etc_file(images_dir, layers, "passwd");
	group = layers_etc_file(images_dir, layers, "group");
	return oci_user_resolve(passwd, group, user, uid, gid, home, home_cap, e);
}
