/*
 * snapstore_s3.c — the `s3` snapshot store: archives as objects
 * "<bucket>/<loc>" of an S3-compatible store, signed with SigV4 by
 * libcurl (CURLOPT_AWS_SIGV4), path-style or virtual-host URLs.
 *
 * A new archive is spooled to an unnamed file (O_TMPFILE) under
 * snapshots.dir and uploaded on commit, so an interrupted writer leaves
 * no object: with one PUT up to snapshots.s3_part_mib, above it as a
 * multipart upload of parts of that size (aborted when any step fails,
 * so no part stays); an open downloads the object into another unnamed
 * file and hands back its fd. The credentials are given to libcurl
 * only: no message, log line or answer carries them.
 */
#include "snapstore.h"
#include "buf.h"
#include "util.h"

#include <curl/curl.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define S3_TIMEOUT_S 3600
#define S3_CONNECT_TIMEOUT_S 10
#define S3_ANSWER_MAX (2 * 1024 * 1024)   /* an answer's XML, a completion's part list */

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

/* One signed request of the store. */
struct s3_call {
	const char *method;
	const char *loc;
	const char *query;         /* "uploads", "partNumber=1&uploadId=…", or NULL */
	int in_fd;                 /* PUT: in_len bytes of in_fd from in_off (-1: none) */
	off_t in_off;
	uint64_t in_len;
	const char *in_mem;        /* POST: this body (NULL: an empty one) */
	size_t in_mem_len;
	int out_fd;                /* GET: the body into out_fd (-1: none) */
	struct buf *out;           /* or into out (bounded; NULL: discarded) */
	char etag[128];            /* the answer's ETag */
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct s3_call *c = arg;
	size_t n = size * nmemb;

	if (c->out_fd >= 0)
		return util_write_all(c->out_fd, data, n) < 0 ? 0 : n;
	if (c->out)
		return buf_add(c->out, data, n) < 0 ? 0 : n;
	return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct s3_call *c = arg;
	size_t n = size * nmemb, len;

	if (n > 5 && strncasecmp(data, "etag:", 5) == 0) {
		const char *v = data + 5;

		while (*v == ' ' && v < data + n)
			v++;
		len = (size_t)(data + n - v);
		while (len && (v[len - 1] == '\r' || v[len - 1] == '\n'))
			len--;
		if (len < sizeof(c->etag)) {
			memcpy(c->etag, v, len);
			c->etag[len] = '\0';
		}
	}
	return n;
}

static size_t on_upload(char *buf, size_t size, size_t nitems, void *arg)
{
	struct s3_call *c = arg;
	size_t want = size * nitems;
	ssize_t n;

	if (want > c->in_len)
		want = (size_t)c->in_len;
	if (want == 0)
		return 0;
	do
		n = pread(c->in_fd, buf, want, c->in_off);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return CURL_READFUNC_ABORT;   /* the spool is shorter than it was */
	c->in_off += n;
	c->in_len -= (uint64_t)n;
	return (size_t)n;
}

/* Do c. The HTTP status, or -1 with e (the store could not be reached). */
static long request(const struct snapstore *s, struct s3_call *c, struct sbx_err *e)
{
	char url[CONF_STR_MAX + SNAPSTORE_LOC_MAX + 400], sigv4[CONF_STR_MAX + 16];
	struct curl_slist *hdr = NULL;
	CURL *h;
	CURLcode rc;
	long status = 0;
	size_t n;

	if (object_url(s, c->loc, url, sizeof(url), e) < 0)
		return -1;
	n = strlen(url);
	if (c->query && (size_t)snprintf(url + n, sizeof(url) - n, "?%s", c->query) >= sizeof(url) - n)
		return err_set(e, SBX_E_INTERNAL, "snapshot URL too long");
	util_xsnprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", s->s3.region);
	h = curl_easy_init();
	hdr = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (!h || !hdr) {
		curl_slist_free_all(hdr);
		if (h)
			curl_easy_cleanup(h);
		return err_sys(e, ENOMEM, "s3 request");
	}
	c->etag[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, s->s3.access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, s->s3.secret_key);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)S3_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)S3_CONNECT_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
	if (strcmp(c->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
		curl_easy_setopt(h, CURLOPT_READDATA, c);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)c->in_len);
	} else if (strcmp(c->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->in_mem ? c->in_mem : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->in_mem_len);
	} else if (strcmp(c->method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
	} else {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	}
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(h);
	if (rc != CURLE_OK && !(rc == CURLE_HTTP_RETURNED_ERROR && status))
		return err_set(e, SBX_E_NO_CAPACITY, "the snapshot store cannot be reached (%s)",
			       curl_easy_strerror(rc));
	return status;
}

/* A call of method on loc (query: none or as in s3_call). */
static struct s3_call s3_call_of(const char *method, const char *loc, const char *query)
{
	struct s3_call c;

	memset(&c, 0, sizeof(c));
	c.method = method;
	c.loc = loc;
	c.query = query;
	c.in_fd = c.out_fd = -1;
	return c;
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

/* The text of <tag>…</tag> in the answer b into out (n bytes); 0 or -1. */
static int xml_value(const struct buf *b, const char *tag, char *out, size_t n)
{
	char open[64], close_[64];
	const char *v, *end;

	if (!b->data)
		return -1;
	util_xsnprintf(open, sizeof(open), "<%s>", tag);
	util_xsnprintf(close_, sizeof(close_), "</%s>", tag);
	v = strstr(b->data, open);
	end = v ? strstr(v, close_) : NULL;
	if (!v || !end || (size_t)(end - v - strlen(open)) >= n)
		return -1;
	v += strlen(open);
	memcpy(out, v, (size_t)(end - v));
	out[end - v] = '\0';
	return 0;
}

/* The n-byte spool p->fd as a multipart upload of s->s3.part_bytes parts:
 * initiate, one PUT per part, complete; any failure aborts the upload, so
 * no part stays in the store. 0, or -1 with e. */
static int multipart(struct snapstore *s, struct snapstore_put *p, uint64_t n, struct sbx_err *e)
{
	char id[256], query[1024], entry[256], *esc = NULL;
	struct buf ans, done;
	struct s3_call c;
	uint64_t off = 0;
	unsigned part = 0;
	long status;
	int rc = -1;

	buf_init(&ans, S3_ANSWER_MAX);
	buf_init(&done, S3_ANSWER_MAX);
	c = s3_call_of("POST", p->loc, "uploads");
	c.out = &ans;
	status = request(s, &c, e);
	if (status < 0)
		goto out;
	if (status != 200 || buf_add(&ans, "", 1) < 0 || xml_value(&ans, "UploadId", id, sizeof(id)) < 0) {
		err_set(e, SBX_E_NO_CAPACITY, "the snapshot store refused the upload (HTTP %ld)", status);
		goto out;
	}
	esc = curl_easy_escape(NULL, id, 0);
	if (!esc || buf_adds(&done, "<CompleteMultipartUpload>") < 0) {
		err_sys(e, ENOMEM, "s3 upload");
		goto abort;
	}
	for (; off < n; off += s->s3.part_bytes) {
		part++;
		util_xsnprintf(query, sizeof(query), "partNumber=%u&uploadId=%s", part, esc);
		c = s3_call_of("PUT", p->loc, query);
		c.in_fd = p->fd;
		c.in_off = (off_t)off;
		c.in_len = n - off < s->s3.part_bytes ? n - off : s->s3.part_bytes;
		status = request(s, &c, e);
		if (status < 0)
			goto abort;
		if (status != 200 || !c.etag[0]) {
			err_set(e, SBX_E_NO_CAPACITY,
				"the snapshot store refused part %u of the upload (HTTP %ld)", part, status);
			goto abort;
		}
		util_xsnprintf(entry, sizeof(entry),
			       "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>", part, c.etag);
		if (buf_adds(&done, entry) < 0) {
			err_set(e, SBX_E_LIMIT_EXCEEDED, "the archive has too many parts");
			goto abort;
		}
	}
	if (buf_adds(&done, "</CompleteMultipartUpload>") < 0) {
		err_set(e, SBX_E_LIMIT_EXCEEDED, "the archive has too many parts");
		goto abort;
	}
	util_xsnprintf(query, sizeof(query), "uploadId=%s", esc);
	buf_reset(&ans);
	c = s3_call_of("POST", p->loc, query);
	c.in_mem = done.data;
	c.in_mem_len = done.len;
	c.out = &ans;
	status = request(s, &c, e);
	if (status < 0)
		goto abort;
	/* S3 may answer a failed completion with 200 and an <Error> body */
	if (status != 200 || buf_add(&ans, "", 1) < 0 || !ans.data || strstr(ans.data, "<Error>")) {
		err_set(e, SBX_E_NO_CAPACITY, "the snapshot store refused the upload (HTTP %ld)", status);
		goto abort;
	}
	rc = 0;
	goto out;
abort:
	{
		struct sbx_err ae;

		util_xsnprintf(query, sizeof(query), "uploadId=%s", esc ? esc : "");
		c = s3_call_of("DELETE", p->loc, query);
		if (esc && request(s, &c, &ae) < 0)
			(void)ae;   /* the store keeps the parts until its own expiry */
	}
out:
	curl_free(esc);
	buf_release(&ans);
	buf_release(&done);
	return rc;
}

static int s3_commit(struct snapstore *s, struct snapstore_put *p, struct sbx_err *e)
{
	struct stat st;
	struct s3_call c;
	long status;

	if (fstat(p->fd, &st) < 0) {
		err_sys(e, errno, "snapshot spool");
		s3_abort(s, p);
		return -1;
	}
	if ((uint64_t)st.st_size > s->s3.part_bytes) {
		int rc = multipart(s, p, (uint64_t)st.st_size, e);

		s3_abort(s, p);
		return rc;
	}
	c = s3_call_of("PUT", p->loc, NULL);
	c.in_fd = p->fd;
	c.in_len = (uint64_t)st.st_size;
	status = request(s, &c, e);
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
	struct s3_call c = s3_call_of("GET", loc, NULL);
	long status;

	if (fd < 0)
		return -1;
	c.out_fd = fd;
	status = request(s, &c, e);
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
	struct s3_call c = s3_call_of("DELETE", loc, NULL);
	long status = request(s, &c, e);

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
