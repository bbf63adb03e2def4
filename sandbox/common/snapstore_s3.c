/*
 * snapstore_s3.c — the `s3` snapshot store: archives as objects
 * "<bucket>/<loc>" of an S3-compatible store, signed with SigV4 by
 * libcurl (CURLOPT_AWS_SIGV4), path-style or virtual-host URLs.
 *
 * A new archive is spooled to an unnamed file (O_TMPFILE) under
 * snapshots.dir and uploaded with one PUT on commit, so an interrupted
 * writer leaves no object; an open downloads the object into another
 * unnamed file and hands back its fd. One PUT holds up to 5 GiB (no
 * multipart upload in this build). The credentials are given to libcurl
 * only: no message, log line or answer carries them.
 */
#include "snapstore.h"
#include "util.h"

#include <curl/curl.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S3_TIMEOUT_S 3600
#define S3_CONNECT_TIMEOUT_S 10

static int spool_fd(const struct snapstore *s, struct sbx_err *e)
{
	int fd;

	if (util_mkdir_p(s->root, 0700) < 0)
		return err_sys(e, errno, "cannot make the snapshot spool");
	fd = open(s->root, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == ENOSPC || errno == EDQUOT))
		return err_set(e, SBX_E_NO_SPACE, "the snapshot spool is full");
	if (fd < 0)
		return err_sys(e, errno, "cannot make a spool file");
	return fd;
}

/* The object URL of loc. */
static int object_url(const struct snapstore *s, const char *loc, char *out, size_t n,
		      struct sbx_err *e)
{
	const char *ep = s->s3.endpoint, *host = strstr(ep, "://");
	int w;

	if (!snapstore_loc_valid(loc))
		return err_set(e, SBX_E_INTERNAL, "bad snapshot location '%s'", loc);
	if (s->s3.virtual_host && host)
		w = snprintf(out, n, "%.*s%s.%s/%s", (int)(host + 3 - ep), ep, s->s3.bucket, host + 3,
			     loc);
	else
		w = snprintf(out, n, "%s/%s/%s", ep, s->s3.bucket, loc);
	if (w < 0 || (size_t)w >= n)
		return err_set(e, SBX_E_INTERNAL, "snapshot URL too long");
	return 0;
}

static size_t write_fd(char *data, size_t size, size_t nmemb, void *arg)
{
	int fd = *(int *)arg;

	return util_write_all(fd, data, size * nmemb) < 0 ? 0 : size * nmemb;
}

static size_t read_fd(char *buf, size_t size, size_t nitems, void *arg)
{
	int fd = *(int *)arg;
	ssize_t n;

	do
		n = read(fd, buf, size * nitems);
	while (n < 0 && errno == EINTR);
	return n < 0 ? CURL_READFUNC_ABORT : (size_t)n;
}

static size_t discard(char *data, size_t size, size_t nmemb, void *arg)
{
	(void)data;
	(void)arg;
	return size * nmemb;
}

/* One signed request: method on loc; upload from / download into *fd
 * (or neither with fd NULL). The HTTP status, or -1 with e. */
static long request(const struct snapstore *s, const char *method, const char *loc, int *fd,
		    int64_t upload_size, struct sbx_err *e)
{
	char url[CONF_STR_MAX + SNAPSTORE_LOC_MAX + 80], sigv4[CONF_STR_MAX + 16];
	struct curl_slist *hdr = NULL;
	CURL *c;
	CURLcode rc;
	long status = 0;

	if (object_url(s, loc, url, sizeof(url), e) < 0)
		return -1;
	util_xsnprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", s->s3.region);
	c = curl_easy_init();
	hdr = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (!c || !hdr) {
		curl_slist_free_all(hdr);
		if (c)
			curl_easy_cleanup(c);
		return err_sys(e, ENOMEM, "s3 request");
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(c, CURLOPT_USERNAME, s->s3.access_key);
	curl_easy_setopt(c, CURLOPT_PASSWORD, s->s3.secret_key);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)S3_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)S3_CONNECT_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	if (strcmp(method, "PUT") == 0) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, read_fd);
		curl_easy_setopt(c, CURLOPT_READDATA, fd);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)upload_size);
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_fd);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, fd);
		curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	} else {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	}
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	if (rc != CURLE_OK && !(rc == CURLE_HTTP_RETURNED_ERROR && status))
		return err_set(e, SBX_E_NO_CAPACITY, "the snapshot store cannot be reached (%s)",
			       curl_easy_strerror(rc));
	return status;
}

static int s3_create(struct snapstore *s, const char *loc, struct snapstore_put *p,
		     struct sbx_err *e)
{
	p->tmp[0] = '\0';
	snprintf(p->loc, sizeof(p->loc), "%s", loc);
	p->fd = spool_fd(s, e);
	return p->fd < 0 ? -1 : 0;
}

static void s3_abort(struct snapstore *s, struct snapstore_put *p)
{
	(void)s;
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
}

static int s3_commit(struct snapstore *s, struct snapstore_put *p, struct sbx_err *e)
{
	struct stat st;
	long status;

	if (fstat(p->fd, &st) < 0 || lseek(p->fd, 0, SEEK_SET) < 0) {
		err_sys(e, errno, "snapshot spool");
		s3_abort(s, p);
		return -1;
	}
	status = request(s, "PUT", p->loc, &p->fd, st.st_size, e);
	s3_abort(s, p);
	if (status < 0)
		return -1;
	if (status != 200)
		return err_set(e, SBX_E_NO_CAPACITY, "the snapshot store refused the upload (HTTP %ld)",
			       status);
	return 0;
}

static int s3_open(struct snapstore *s, const char *loc, struct sbx_err *e)
{
	int fd = spool_fd(s, e);
	long status;

	if (fd < 0)
		return -1;
	status = request(s, "GET", loc, &fd, 0, e);
	if (status == 200 && lseek(fd, 0, SEEK_SET) == 0)
		return fd;
	close(fd);
	if (status == 404)
		return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "the archive of the snapshot is gone");
	if (status < 0)
		return -1;
	return err_set(e, SBX_E_NO_CAPACITY, "the snapshot store refused the download (HTTP %ld)",
		       status);
}

static int s3_remove(struct snapstore *s, const char *loc, struct sbx_err *e)
{
	long status = request(s, "DELETE", loc, NULL, 0, e);

	if (status < 0)
		return -1;
	if (status != 204 && status != 200 && status != 404)
		return err_set(e, SBX_E_NO_CAPACITY, "the snapshot store refused the delete (HTTP %ld)",
			       status);
	return 0;
}

const struct snapstore_ops snapstore_s3_ops = {
	.name = "s3",
	.create = s3_create,
	.commit = s3_commit,
	.abort = s3_abort,
	.open = s3_open,
	.remove = s3_remove,
};
