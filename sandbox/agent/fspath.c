#include "fspath.h"
#include "codec.h"
#include "ids.h"

#include <string.h>
#include <strings.h>

int fspath_decode(const char *raw, size_t n, char *out, size_t outsz, struct sbx_err *e)
{
	size_t room = outsz < FSPATH_MAX + 1 ? outsz : FSPATH_MAX + 1;

	switch (codec_pct_decode(raw, n, out, room, 0)) {
	case CODEC_PCT_BAD:
		return err_set(e, SBX_E_VALIDATION, "bad percent escape in the path");
	case CODEC_PCT_NUL:
		return err_set(e, SBX_E_VALIDATION, "the path contains a NUL byte");
	case CODEC_PCT_ROOM:
		return err_set(e, SBX_E_VALIDATION, "the path is longer than %d bytes", FSPATH_MAX);
	default:
		return 0;
	}
}

int fspath_parse(const char *p, size_t n, struct fspath *fp, struct sbx_err *e)
{
	size_t o = 0, i = 0, last = 0;

	if (n > FSPATH_MAX)
		return err_set(e, SBX_E_VALIDATION, "the path is longer than %d bytes", FSPATH_MAX);
	if (memchr(p, '\0', n))
		return err_set(e, SBX_E_VALIDATION, "the path contains a NUL byte");
	if (!ids_valid_utf8(p, n))
		return err_set(e, SBX_E_VALIDATION, "the path is not valid UTF-8");
	if (n == 0 || p[0] != '/') {
		memcpy(fp->rel, FSPATH_WORKSPACE, strlen(FSPATH_WORKSPACE));
		o = strlen(FSPATH_WORKSPACE);
	}
	fp->parent_len = 0;
	while (i < n) {
		size_t len;

		while (i < n && p[i] == '/')
			i++;
		len = 0;
		while (i + len < n && p[i + len] != '/')
			len++;
		if (len == 0 || (len == 1 && p[i] == '.')) {
			i += len;
			continue;
		}
		if (len == 2 && p[i] == '.' && p[i + 1] == '.')
			return err_set(e, SBX_E_VALIDATION, "the path must not contain '..'");
		if (len > FSPATH_NAME_MAX)
			return err_set(e, SBX_E_VALIDATION, "a path component is longer than %d bytes",
				       FSPATH_NAME_MAX);
		if (o + 1 + len >= FSPATH_MAX)
			return err_set(e, SBX_E_VALIDATION, "the path is longer than %d bytes", FSPATH_MAX);
		if (o > 0)
			fp->rel[o++] = '/';
		last = o;
		memcpy(fp->rel + o, p + i, len);
		o += len;
		i += len;
	}
	if (o == 0) {
		memcpy(fp->rel, ".", 2);
		memcpy(fp->abs, "/", 2);
		fp->parent_len = 0;
		fp->name = fp->rel + 1;   /* "" */
		return 0;
	}
	fp->rel[o] = '\0';
	fp->abs[0] = '/';
	memcpy(fp->abs + 1, fp->rel, o + 1);
	fp->parent_len = last > 0 ? last - 1 : 0;
	fp->name = fp->rel + last;
	return 0;
}

int fspath_from_url(const char *raw, struct fspath *fp, struct sbx_err *e)
{
	char dec[FSPATH_MAX + 1];

	if (fspath_decode(raw, strlen(raw), dec, sizeof(dec), e) < 0)
		return -1;
	return fspath_parse(dec, strlen(dec), fp, e);
}

/* Parse the decimal digits s[0..n) into *v, saturating at UINT64_MAX (a
 * position past any file: RFC 9110 puts no bound on the digits). 0, or -1
 * when there are none or a non-digit. */
static int parse_pos(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;

	if (n == 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
	}
	*v = x;
	return 0;
}

int fspath_range(const char *hdr, uint64_t size, uint64_t *first, uint64_t *last)
{
	const char *spec, *dash;
	uint64_t a, b;
	size_t n;

	if (!hdr)
		return 0;
	if (strncasecmp(hdr, "bytes=", 6) != 0)   /* the unit is case-insensitive */
		return -1;
	spec = hdr + 6;
	while (*spec == ' ' || *spec == '\t')
		spec++;
	n = strlen(spec);
	while (n > 0 && (spec[n - 1] == ' ' || spec[n - 1] == '\t'))
		n--;
	if (memchr(spec, ',', n))
		return 0;  /* multi-range: answer the whole file */
	dash = memchr(spec, '-', n);
	if (!dash)
		return -1;
	if (dash == spec) {                      /* "-n": the last n bytes */
		if (parse_pos(dash + 1, n - 1, &b) < 0)
			return -1;
		if (b == 0 || size == 0)
			return -2;
		*first = b >= size ? 0 : size - b;   /* longer than the file: all of it */
		*last = size - 1;
		return 1;
	}
	if (parse_pos(spec, (size_t)(dash - spec), &a) < 0)
		return -1;
	if ((size_t)(dash - spec) + 1 == n) {    /* "a-": to the end */
		b = UINT64_MAX;
	} else {
		if (parse_pos(dash + 1, n - (size_t)(dash - spec) - 1, &b) < 0)
			return -1;
		if (b < a)
			return -1;
	}
	if (a >= size)
		return -2;
	*first = a;
	*last = b >= size ? size - 1 : b;        /* past the end: clamped */
	return 1;
}

static const struct {
	const char *ext;
	const char *type;
} mime_table[] = {
	{ "txt", "text/plain; charset=utf-8" },
	{ "json", "application/json" },
	{ "html", "text/html; charset=utf-8" },
	{ "htm", "text/html; charset=utf-8" },
	{ "css", "text/css; charset=utf-8" },
	{ "js", "text/javascript; charset=utf-8" },
	{ "png", "image/png" },
	{ "jpg", "image/jpeg" },
	{ "jpeg", "image/jpeg" },
	{ "gif", "image/gif" },
	{ "svg", "image/svg+xml" },
	{ "pdf", "application/pdf" },
	{ "py", "text/x-python; charset=utf-8" },
	{ "sh", "text/x-shellscript; charset=utf-8" },
	{ "md", "text/markdown; charset=utf-8" },
	{ "csv", "text/csv; charset=utf-8" },
	{ "tar", "application/x-tar" },
	{ "gz", "application/gzip" },
	{ "zip", "application/zip" },
};

const char *fspath_mime(const char *name)
{
	const char *dot = name ? strrchr(name, '.') : NULL;

	if (dot && dot != name) {
		for (size_t i = 0; i < sizeof(mime_table) / sizeof(mime_table[0]); i++)
			if (strcasecmp(dot + 1, mime_table[i].ext) == 0)
				return mime_table[i].type;
	}
	return "application/octet-stream";
}

int fspath_mode(const char *s, unsigned *mode)
{
	unsigned v = 0;
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 4)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -1;
		v = v * 8 + (unsigned)(s[i] - '0');
	}
	if (v > 0777)
		return -1;
	*mode = v;
	return 0;
}
