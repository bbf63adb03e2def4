/*
 * tunnel_cloudflared.c — the "cloudflared" tunnel provider: Cloudflare
 * quick tunnels. The agent runs
 *
 *   cloudflared tunnel --no-autoupdate --url http://<forwarder>
 *
 * which asks trycloudflare.com for a random host name, prints it in a box
 * on stderr ("|  https://<words>.trycloudflare.com  |"), connects to
 * Cloudflare's edge and prints "Registered tunnel connection connIndex=0
 * …" once the edge sends traffic to it.
 */
#include "tunnel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CF_DOMAIN ".trycloudflare.com"
#define CF_READY "Registered tunnel connection"

static int host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* The URL of a quick tunnel in line: "https://<label>.trycloudflare.com"
 * with one DNS label of [a-z0-9-] (not "api", the service's own endpoint
 * that appears in error messages), followed by the end of the line or a
 * character that cannot continue a URL host or path. */
int tunnel_cf_line_url(const char *line, char *url, size_t n)
{
	const char *p = line;

	while ((p = strstr(p, "https://")) != NULL) {
		const char *h = p + 8, *q = h;
		size_t dl = strlen(CF_DOMAIN);
		int w;

		p = h;
		while (host_char(*q))
			q++;
		if (q == h || q - h > 63 || *h == '-' || q[-1] == '-')
			continue;
		if ((q - h == 3 && strncmp(h, "api", 3) == 0) || strncmp(q, CF_DOMAIN, dl) != 0)
			continue;
		q += dl;
		if (*q && (host_char(*q) || *q == '.' || *q == '/' || *q == ':' || *q == '_' ||
			   (*q >= 'A' && *q <= 'Z')))
			continue;
		w = snprintf(url, n, "%.*s", (int)(q - (h - 8)), h - 8);
		if (w < 0 || (size_t)w >= n)
			return 0;
		return 1;
	}
	return 0;
}

/* The readiness condition: cloudflared logs this once a connection to
 * Cloudflare's edge is registered, i.e. the URL answers from then on. */
int tunnel_cf_line_ready(const char *line)
{
	return strstr(line, CF_READY) != NULL;
}

int tunnel_which(const char *name, char *out, size_t n)
{
	struct stat st;
	const char *path, *p;
	int w;

	if (!name || !*name)
		return -1;
	if (strchr(name, '/')) {
		if (name[0] != '/')
			return -1;  /* relative paths depend on the agent's cwd */
		if (stat(name, &st) < 0 || !S_ISREG(st.st_mode) || access(name, X_OK) < 0)
			return -1;
		w = snprintf(out, n, "%s", name);
		return w < 0 || (size_t)w >= n ? -1 : 0;
	}
	path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; *p;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);

		if (len > 0 && p[0] == '/') {
			w = snprintf(out, n, "%.*s/%s", (int)len, p, name);
			if (w >= 0 && (size_t)w < n && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
			    access(out, X_OK) == 0)
				return 0;
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	return -1;
}

static int cf_program(const struct sbx_conf *c, char *out, size_t n, struct sbx_err *e)
{
	if (tunnel_which(c->agent.cloudflared_path, out, n) < 0)
		return err_set(e, SBX_E_VALIDATION,
			       "tunnel provider 'cloudflared' is not available on this node");
	return 0;
}

static void cf_argv(const char *program, const char *upstream_url, const char **argv)
{
	int i = 0;

	argv[i++] = program;
	argv[i++] = "tunnel";
	argv[i++] = "--no-autoupdate";
	argv[i++] = "--url";
	argv[i++] = upstream_url;
	argv[i] = NULL;
}

const struct tunnel_provider tunnel_cloudflared = {
	.name = "cloudflared",
	.program = cf_program,
	.argv = cf_argv,
	.line_url = tunnel_cf_line_url,
	.line_ready = tunnel_cf_line_ready,
};
