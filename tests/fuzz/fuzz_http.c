/*
 * fuzz_http — request parsing of sbx-api (fcgi/http.c): percent-decoding,
 * query lookup, CONTENT_LENGTH, the path of http_req_init, and the
 * rendering decision of /_sbx_error (api_route_error), all over a fake
 * FastCGI request that holds only params (no stream is ever touched).
 *
 * Input: newline-separated fields
 *   METHOD \n DOCUMENT_URI \n QUERY \n CONTENT_LENGTH \n SBX_ERROR_STATUS \n
 *   SBX_ERROR_CODE \n SBX_ERROR_MESSAGE \n query-name
 */
#include "fuzz.h"
#include "codec.h"

#include "api.h"
#include "conf.h"
#include "err.h"
#include "http.h"
#include "util.h"

#include <ctype.h>
#include <fcgiapp.h>

#define NFIELDS 8

static struct sbx_conf conf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	conf_defaults(&conf);
	return 0;
}

/* An independent model of codec_pct_decode: 1 when in[0..n) decodes. */
static int model_decodes(const char *in, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (in[i] == '\0')
			return 0;
		if (in[i] == '%') {
			if (i + 2 >= n || !isxdigit((unsigned char)in[i + 1]) ||
			    !isxdigit((unsigned char)in[i + 2]) ||
			    (in[i + 1] == '0' && in[i + 2] == '0'))
				return 0;
			i += 2;
		}
	}
	return 1;
}

static void check_decode(const char *in, size_t n)
{
	char out[512], enc[3 * sizeof(out)], back[sizeof(out)];
	long d = codec_pct_decode(in, n, out, sizeof(out), 0);
	long dp = codec_pct_decode(in, n, back, sizeof(back), 1);
	size_t o = 0;

	FUZZ_ASSERT((d >= 0) == (dp >= 0));
	if (n < sizeof(out) / 3)   /* never out of room: only the escapes decide */
		FUZZ_ASSERT((d >= 0) == model_decodes(in, n));
	if (d < 0)
		return;
	FUZZ_ASSERT((size_t)d <= n);
	FUZZ_ASSERT(strlen(out) == (size_t)d);           /* no NUL ever decoded */
	FUZZ_ASSERT(strlen(back) == (size_t)dp && dp == d);
	if (!memchr(in, '%', n) && !memchr(in, '+', n))
		FUZZ_ASSERT(memcmp(in, out, n) == 0);
	/* Re-encoding every byte and decoding again gives the same bytes. */
	for (long i = 0; i < d; i++)
		o += (size_t)snprintf(enc + o, sizeof(enc) - o, "%%%02X", (unsigned char)out[i]);
	if (o < sizeof(out)) {
		long r = codec_pct_decode(enc, o, back, sizeof(back), 0);
		FUZZ_ASSERT(r == d && memcmp(back, out, (size_t)d) == 0);
	}
	/* A buffer one byte short of the result must be refused, not overrun. */
	if (d > 0) {
		char *tight = malloc((size_t)d);
		FUZZ_ASSERT(tight);
		FUZZ_ASSERT(codec_pct_decode(in, n, tight, (size_t)d, 0) == CODEC_PCT_ROOM);
		free(tight);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *f[NFIELDS] = { 0 }, *text = fuzz_cstr(data, size), *p = text;
	char envbuf[NFIELDS][600];
	char *envp[NFIELDS + 1];
	int nenv = 0, passed[NFIELDS] = { 0 };
	static const char *const names[] = { "REQUEST_METHOD", "DOCUMENT_URI", "QUERY_STRING",
					     "CONTENT_LENGTH", "SBX_ERROR_STATUS", "SBX_ERROR_CODE",
					     "SBX_ERROR_MESSAGE" };
	FCGX_Request fcgx;
	struct http_req r;
	struct sbx_err e;
	char out[256];
	int64_t len;
	int rc;

	check_decode((const char *)data, size);

	for (int i = 0; i < NFIELDS; i++) {
		char *nl = strchr(p, '\n');
		f[i] = p;
		if (!nl) {
			for (int k = i + 1; k < NFIELDS; k++)
				f[k] = p + strlen(p);
			break;
		}
		*nl = '\0';
		p = nl + 1;
	}

	/* query lookup: a found value decodes cleanly and fits */
	err_clear(&e);
	rc = http_query_get(f[2], f[7], out, sizeof(out), &e);
	FUZZ_ASSERT(rc == -1 || rc == 0 || rc == 1);
	if (rc == 1)
		FUZZ_ASSERT(strlen(out) < sizeof(out));
	if (rc < 0)
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
	if (rc >= 0 && !*f[2])
		FUZZ_ASSERT(rc == 0);

	/* the fake request: every field that is not empty becomes a param */
	for (int i = 0; i < NFIELDS - 1; i++) {
		if (!*f[i] && i != 3)
			continue;
		if (snprintf(envbuf[nenv], sizeof(envbuf[nenv]), "%s=%s", names[i], f[i]) >=
		    (int)sizeof(envbuf[nenv]))
			continue;
		envp[nenv] = envbuf[nenv];
		nenv++;
		passed[i] = 1;
	}
	envp[nenv] = NULL;
	memset(&fcgx, 0, sizeof(fcgx));
	fcgx.envp = envp;

	err_clear(&e);
	if (http_req_init(&r, &fcgx, &conf, &e) == 0) {
		FUZZ_ASSERT(r.path[0] == '/');
		FUZZ_ASSERT(!strchr(r.path, '?'));
		FUZZ_ASSERT(strlen(r.path) < sizeof(r.path));
		FUZZ_ASSERT(r.method && *r.method && r.query);

		err_clear(&e);
		if (http_content_length(&r, &len, &e) == 0) {
			FUZZ_ASSERT(len >= 0 && len <= conf.api.max_body_bytes);
			FUZZ_ASSERT(!passed[3] || strspn(f[3], "0123456789") == strlen(f[3]));
		} else {
			FUZZ_ASSERT(e.code == SBX_E_VALIDATION || e.code == SBX_E_PAYLOAD_TOO_LARGE);
			FUZZ_ASSERT(err_status(e.code) == 400 || err_status(e.code) == 413);
		}

		/* /_sbx_error renders only a known code with its own status */
		err_clear(&e);
		FUZZ_ASSERT(api_route_error(&r, &e) == -1);
		FUZZ_ASSERT(e.code != SBX_E_NONE);
		if (e.code != SBX_E_INTERNAL) {
			FUZZ_ASSERT(passed[4] && passed[5]);
			FUZZ_ASSERT(strcmp(err_name(e.code), f[5]) == 0);
			FUZZ_ASSERT(util_parse_i64(f[4], 100, 599, &len) == 0 &&
				    err_status(e.code) == len);
			for (const char *m = e.msg; *m; m++)
				FUZZ_ASSERT((unsigned char)*m >= 0x20 && (unsigned char)*m < 0x7f);
		}
		/* header values we would add are header-safe or refused */
		if (http_add_header(&r, "X-Fuzz", f[6]) == 0)
			FUZZ_ASSERT(!strpbrk(f[6], "\r\n"));
	} else {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION || e.code == SBX_E_ROUTE_NOT_FOUND);
	}
	http_req_release(&r);
	free(text);
	return 0;
}
