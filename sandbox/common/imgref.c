/* imgref.c — see imgref.h. */
#include "imgref.h"

#include <stdio.h>
#include <string.h>

static int lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One repo component: alnum runs joined by '.', '_', "__" or '-' runs. */
static int valid_component(const char *s, size_t n)
{
	if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
		return 0;
	for (size_t i = 1; i < n; i++) {
		if (lower_alnum(s[i]))
			continue;
		if (s[i] == '.' || s[i] == '_') {
			if (!lower_alnum(s[i - 1]) && !(s[i] == '_' && s[i - 1] == '_' && i >= 2 &&
							  lower_alnum(s[i - 2])))
				return 0;
			continue;
		}
		if (s[i] != '-' || !(lower_alnum(s[i - 1]) || s[i - 1] == '-'))
			return 0;
	}
	return 1;
}

/* host[:port], host a DNS name or an [IPv6] literal. */
static int valid_registry(const char *s, size_t n)
{
	size_t i = 0, port;

	if (n == 0 || n >= IMGREF_HOST_MAX)
		return 0;
	if (s[0] == '[') {
		while (i < n && s[i] != ']') {
			if (!(s[i] == '[' || s[i] == ':' || (s[i] >= '0' && s[i] <= '9') ||
			      (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F')))
				return 0;
			i++;
		}
		if (i == n || i < 3)
			return 0;
		i++;
	} else {
		for (; i < n && s[i] != ':'; i++)
			if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
			      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-'))
				return 0;
		if (i == 0 || s[0] == '.' || s[0] == '-' || s[i - 1] == '.' || s[i - 1] == '-')
			return 0;
	}
	if (i == n)
		return 1;
	if (s[i] != ':' || i + 1 == n || n - i - 1 > 5)
		return 0;
	port = 0;
	for (size_t j = i + 1; j < n; j++) {
		if (s[j] < '0' || s[j] > '9')
			return 0;
		port = port * 10 + (size_t)(s[j] - '0');
	}
	return port >= 1 && port <= 65535;
}

static int valid_tag(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > IMGREF_TAG_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || (i > 0 && (c == '.' || c == '-'))))
			return 0;
	}
	return 1;
}

int imgref_valid_digest(const char *s)
{
	if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != IMGREF_DIGEST_LEN)
		return 0;
	for (const char *p = s + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static int is_loopback(const char *reg)
{
	size_t n = strcspn(reg, ":");

	if (reg[0] == '[')
		return strncmp(reg, "[::1]", 5) == 0;
	if (n == 9 && strncmp(reg, "localhost", 9) == 0)
		return 1;
	if (strncmp(reg, "127.", 4) != 0)
		return 0;
	for (size_t i = 4; i < n; i++)
		if (!((reg[i] >= '0' && reg[i] <= '9') || reg[i] == '.'))
			return 0;
	return 1;
}

int imgref_parse(const char *s, const char *dflt, int library_prefix, struct imgref *out,
		 struct sbx_err *e)
{
	char buf[IMGREF_MAX];
	char *at, *name, *slash, *colon, *p;
	size_t n = s ? strlen(s) : 0;

	memset(out, 0, sizeof(*out));
	if (n == 0 || n >= sizeof(buf))
		return err_set(e, SBX_E_VALIDATION, "'image' must be a reference of 1-%d bytes",
			       IMGREF_MAX - 1);
	memcpy(buf, s, n + 1);
	if ((at = strchr(buf, '@'))) {
		*at++ = '\0';
		if (!imgref_valid_digest(at))
			return err_set(e, SBX_E_VALIDATION,
				       "image digest must be 'sha256:' and 64 lowercase hex digits");
		memcpy(out->digest, at, strlen(at) + 1);
	}
	name = buf;
	slash = strchr(name, '/');
	if (slash && (memchr(name, '.', (size_t)(slash - name)) || memchr(name, ':', (size_t)(slash - name)) ||
		      ((size_t)(slash - name) == 9 && strncmp(name, "localhost", 9) == 0))) {
		if (!valid_registry(name, (size_t)(slash - name)))
			return err_set(e, SBX_E_VALIDATION, "image registry '%.*s' is not host[:port]",
				       (int)(slash - name) > 64 ? 64 : (int)(slash - name), name);
		memcpy(out->registry, name, (size_t)(slash - name));
		name = slash + 1;
	} else {
		if (!dflt || !valid_registry(dflt, strlen(dflt)))
			return err_set(e, SBX_E_VALIDATION, "no valid default registry");
		snprintf(out->registry, sizeof(out->registry), "%s", dflt);
	}
	/* the tag: after the last ':' that follows the last '/' */
	p = strrchr(name, '/');
	colon = strchr(p ? p : name, ':');
	if (colon) {
		*colon++ = '\0';
		if (!valid_tag(colon))
			return err_set(e, SBX_E_VALIDATION,
				       "image tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
		memcpy(out->tag, colon, strlen(colon) + 1);
	} else if (!out->digest[0]) {
		memcpy(out->tag, "latest", 7);
	}
	for (const char *c = name;;) {
		const char *end = strchr(c, '/');
		size_t len = end ? (size_t)(end - c) : strlen(c);

		if (!valid_component(c, len))
			return err_set(e, SBX_E_VALIDATION,
				       "image name '%.64s' must be lowercase [a-z0-9] parts joined by '.', '_', '-' or '/'",
				       name);
		if (!end)
			break;
		c = end + 1;
	}
	if (strcmp(out->registry, "docker.io") == 0 && library_prefix && !strchr(name, '/')) {
		if (snprintf(out->repo, sizeof(out->repo), "library/%s", name) >= (int)sizeof(out->repo))
			return err_set(e, SBX_E_VALIDATION, "image name too long");
	} else if (snprintf(out->repo, sizeof(out->repo), "%s", name) >= (int)sizeof(out->repo)) {
		return err_set(e, SBX_E_VALIDATION, "image name too long");
	}
	snprintf(out->host, sizeof(out->host), "%s",
		 strcmp(out->registry, "docker.io") == 0 ? "registry-1.docker.io" : out->registry);
	out->loopback = is_loopback(out->registry);
	return 0;
}

int imgref_format(const struct imgref *r, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/%s%s%s%s%s", r->registry, r->repo, r->tag[0] ? ":" : "",
			 r->tag, r->digest[0] ? "@" : "", r->digest);

	return n < 0 || (size_t)n >= size ? -1 : 0;
}
