/*
 * fuzz_httpd — route matching of the agent (sandbox/agent/httpd.c
 * httpd_match / httpd_match_tail) against the agent's route table, plus
 * the listen address parser and the secret comparison.
 * Input: "path\npattern-or-listen-address\nsecret".
 *
 * Invariants: a match returns at most HTTPD_MAX_PARAMS params, each a
 * non-empty segment without '/'; substituting them into the pattern (and
 * the tail for "{path*}") gives the path back; a "{path*}" pattern needs a tail
 * offset; parse_listen gives a port in 1..65535 and a non-empty host;
 * httpd_secret_equal is string equality of non-empty secrets.
 */
#include "fuzz.h"

#include "agent.h"
#include "httpd.h"

/* Rebuild the path from pattern, params and tail; 0 or -1 (no room). */
static int rebuild(const char *pattern, char params[][HTTPD_PARAM_MAX], int n, const char *tail,
		   char *out, size_t sz)
{
	size_t o = 0;
	int k = 0;

	for (const char *p = pattern; *p;) {
		const char *add;
		size_t len, seg = strcspn(p, "/");

		/* route.h: a capture is a whole segment "{…}", the tail "{…*}" */
		if (seg >= 3 && p[0] == '{' && p[seg - 1] == '}' && p[seg - 2] == '*') {
			add = tail;
			len = strlen(tail);
			p += seg;
		} else if (seg >= 2 && p[0] == '{' && p[seg - 1] == '}') {
			if (k >= n)
				return -1;
			add = params[k++];
			len = strlen(add);
			p += seg;
		} else {
			add = p;              /* a literal segment, or its '/' */
			len = seg ? seg : 1;
			p += len;
		}
		if (o + len >= sz)
			return -1;
		memcpy(out + o, add, len);
		o += len;
	}
	out[o] = '\0';
	return k == n ? 0 : -1;
}

static void check_match(const char *pattern, const char *path)
{
	char params[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
	static char again[8192];
	size_t toff = (size_t)-1;
	int n = httpd_match_tail(pattern, path, params, &toff);
	const char *last = strrchr(pattern, '/') ? strrchr(pattern, '/') + 1 : pattern;
	size_t llen = strlen(last);
	/* a tail is a whole last segment "{…*}" */
	int tail = llen >= 3 && last[0] == '{' && strcmp(last + llen - 2, "*}") == 0;

	if (n < 0)
		return;
	FUZZ_ASSERT(n <= HTTPD_MAX_PARAMS);
	for (int i = 0; i < n; i++) {
		FUZZ_ASSERT(params[i][0] != '\0' && !strchr(params[i], '/'));
		FUZZ_ASSERT(strlen(params[i]) < HTTPD_PARAM_MAX);
	}
	if (toff != (size_t)-1)
		FUZZ_ASSERT(tail && toff <= strlen(path));
	else
		toff = strlen(path);
	if (rebuild(pattern, params, n, path + toff, again, sizeof(again)) == 0)
		FUZZ_ASSERT(strcmp(again, path) == 0);
	/* without a tail offset, a "{path*}" pattern never matches */
	if (tail)
		FUZZ_ASSERT(httpd_match(pattern, path, params) < 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *path, *rest, *second, *secret;
	char host[64];
	int port = 0;

	fuzz_split(data, size, '\n', &path, &rest);
	fuzz_split((const uint8_t *)rest, strlen(rest), '\n', &second, &secret);

	for (size_t i = 0; i < agent_routes_count; i++)
		check_match(agent_routes[i].pattern, path);
	check_match(second, path);

	if (httpd_parse_listen(second, host, sizeof(host), &port) == 0) {
		FUZZ_ASSERT(port >= 1 && port <= 65535);
		FUZZ_ASSERT(host[0] != '\0' && strlen(host) < sizeof(host));
	}
	FUZZ_ASSERT(httpd_secret_equal(path, secret) == (*secret && strcmp(path, secret) == 0));

	free(path);
	free(rest);
	free(second);
	free(secret);
	return 0;
}
