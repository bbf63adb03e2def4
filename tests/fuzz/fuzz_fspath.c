/*
 * fuzz_fspath — the Files API path rules of the agent (sandbox/agent/fspath.c).
 * Input: "raw-url-tail\nRange-header\nmode".
 *
 * Invariants: an accepted path is relative ("." or components joined by
 * one '/'), holds no NUL, no "." or ".." component, no component over
 * FSPATH_NAME_MAX, is valid UTF-8, abs is "/" + rel, name/parent_len
 * split rel at its last '/'; a relative client path lands under
 * "workspace"; parsing an accepted path again is a fixed point. A range is
 * inside the file; a mode is in 0..0777.
 */
#include "fuzz.h"

#include "err.h"
#include "fspath.h"
#include "ids.h"

static void check_fp(const struct fspath *fp)
{
	size_t n = strlen(fp->rel);
	const char *p = fp->rel;

	FUZZ_ASSERT(n > 0 && n < FSPATH_MAX);
	FUZZ_ASSERT(ids_valid_utf8(fp->rel, n));
	FUZZ_ASSERT(fp->abs[0] == '/');
	if (strcmp(fp->rel, ".") == 0) {
		FUZZ_ASSERT(strcmp(fp->abs, "/") == 0 && fp->parent_len == 0 && *fp->name == '\0');
		return;
	}
	FUZZ_ASSERT(strcmp(fp->abs + 1, fp->rel) == 0);
	FUZZ_ASSERT(fp->rel[0] != '/' && fp->rel[n - 1] != '/' && !strstr(fp->rel, "//"));
	while (*p) {
		size_t len = strcspn(p, "/");
		FUZZ_ASSERT(len > 0 && len <= FSPATH_NAME_MAX);
		FUZZ_ASSERT(!(len == 1 && p[0] == '.') && !(len == 2 && p[0] == '.' && p[1] == '.'));
		p += len;
		if (*p)
			p++;
	}
	FUZZ_ASSERT(fp->name >= fp->rel && fp->name < fp->rel + n);
	FUZZ_ASSERT(!strchr(fp->name, '/'));
	if (fp->name == fp->rel)
		FUZZ_ASSERT(fp->parent_len == 0);
	else
		FUZZ_ASSERT(fp->parent_len == (size_t)(fp->name - fp->rel) - 1 &&
			    fp->rel[fp->parent_len] == '/');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fspath fp, fp2;
	static char dec[FSPATH_MAX + 1];
	char *raw, *rest, *range, *mode;
	struct sbx_err e;
	uint64_t first = 0, last = 0, fsize;
	unsigned m;
	int rc;

	fuzz_split(data, size, '\n', &raw, &rest);
	fuzz_split((const uint8_t *)rest, strlen(rest), '\n', &range, &mode);

	/* the client path as given (any bytes, NUL included) */
	err_clear(&e);
	if (fspath_parse((const char *)data, size, &fp, &e) == 0) {
		check_fp(&fp);
		FUZZ_ASSERT(!memchr(data, '\0', size));
		if (size == 0 || data[0] != '/')
			FUZZ_ASSERT(strncmp(fp.rel, "workspace", 9) == 0 &&
				    (fp.rel[9] == '\0' || fp.rel[9] == '/'));
		/* the normal form is a fixed point */
		err_clear(&e);
		FUZZ_ASSERT(fspath_parse(fp.abs, strlen(fp.abs), &fp2, &e) == 0);
		FUZZ_ASSERT(strcmp(fp.rel, fp2.rel) == 0 && strcmp(fp.abs, fp2.abs) == 0);
	} else {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
	}

	/* the raw URL tail */
	err_clear(&e);
	rc = fspath_decode(raw, strlen(raw), dec, sizeof(dec), &e);
	if (rc == 0)
		FUZZ_ASSERT(strlen(dec) <= FSPATH_MAX && strlen(dec) <= strlen(raw));
	err_clear(&e);
	if (fspath_from_url(raw, &fp, &e) == 0) {
		FUZZ_ASSERT(rc == 0);
		check_fp(&fp);
	} else {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
	}

	/* Range against a size taken from the input */
	fsize = size > 1 ? ((uint64_t)data[0] << 8 | data[1]) : 0;
	if (size > 2 && (data[2] & 1))
		fsize = UINT64_MAX - fsize;
	rc = fspath_range(range, fsize, &first, &last);
	FUZZ_ASSERT(rc >= -2 && rc <= 1);
	if (rc == 1)
		FUZZ_ASSERT(fsize > 0 && first <= last && last < fsize);
	FUZZ_ASSERT(fspath_range(NULL, fsize, &first, &last) == 0);

	if (fspath_mode(mode, &m) == 0)
		FUZZ_ASSERT(m <= 0777 && strlen(mode) <= 4);
	FUZZ_ASSERT(fspath_mime(raw) != NULL);

	free(raw);
	free(rest);
	free(range);
	free(mode);
	return 0;
}
