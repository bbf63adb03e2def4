#include "redisurl.h"
#include "util.h"

#include <stddef.h>
#include <string.h>

int redisurl_parse(const char *s, struct redisurl *u, struct sbx_err *e)
{
	const char *host, *end, *colon;
	size_t hlen;
	int64_t port = 6379;

	memset(u, 0, sizeof(*u));
	if (!s)
		return err_set(e, SBX_E_VALIDATION, "redis url is missing");
	if (strncmp(s, "unix:", 5) == 0) {
		const char *p = s + 5;
		if (p[0] != '/' || strlen(p) >= sizeof(u->path))
			return err_set(e, SBX_E_VALIDATION,
				       "redis url '%.200s': unix socket path must be absolute and short", s);
		u->is_unix = 1;
		memcpy(u->path, p, strlen(p) + 1);
		return 0;
	}
	if (strncmp(s, "redis://", 8) != 0)
		return err_set(e, SBX_E_VALIDATION,
			       "redis url '%.200s' must start with redis:// or unix:", s);
	host = s + 8;
	end = host + strlen(host);
	if (end > host && end[-1] == '/')
		end--;
	if (*host == '[') {
		const char *rb = memchr(host, ']', (size_t)(end - host));
		if (!rb)
			return err_set(e, SBX_E_VALIDATION, "redis url '%.200s': unclosed '['", s);
		hlen = (size_t)(rb - host - 1);
		host++;
		colon = rb + 1 < end ? rb + 1 : NULL;
		if (colon && *colon != ':')
			return err_set(e, SBX_E_VALIDATION, "redis url '%.200s': bad port", s);
	} else {
		colon = memchr(host, ':', (size_t)(end - host));
		hlen = colon ? (size_t)(colon - host) : (size_t)(end - host);
	}
	if (hlen == 0 || hlen >= sizeof(u->host))
		return err_set(e, SBX_E_VALIDATION, "redis url '%.200s': bad host", s);
	for (size_t i = 0; i < hlen; i++) {
		char c = host[i];
		/* A DNS name, an IPv4 address, or (bracketed) an IPv6 one. */
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':'))
			return err_set(e, SBX_E_VALIDATION, "redis url '%.200s': bad host", s);
	}
	if (colon) {
		char digits[8];
		size_t dl = (size_t)(end - colon - 1);
		if (dl == 0 || dl >= sizeof(digits))
			return err_set(e, SBX_E_VALIDATION, "redis url '%.200s': bad port", s);
		memcpy(digits, colon + 1, dl);
		digits[dl] = '\0';
		if (util_parse_i64(digits, 1, 65535, &port) < 0)
			return err_set(e, SBX_E_VALIDATION, "redis url '%.200s': bad port", s);
	}
	memcpy(u->host, host, hlen);
	u->host[hlen] = '\0';
	u->port = (int)port;
	return 0;
}

int redisurl_parse_list(const char *s, struct redisurl *out, int max, int *n, struct sbx_err *e)
{
	const char *p = s ? s : "";

	*n = 0;
	while (*p) {
		char item[300];
		size_t len = strcspn(p, ",");
		const char *a = p, *b = p + len;

		while (a < b && *a == ' ')
			a++;
		while (b > a && b[-1] == ' ')
			b--;
		if (a == b && !p[len] && *n > 0)
			break;  /* a trailing comma */
		if (a == b || (size_t)(b - a) >= sizeof(item) - 8)
			return err_set(e, SBX_E_VALIDATION, "redis.sentinels: item %d is empty or too long",
				       *n + 1);
		if (*n == max)
			return err_set(e, SBX_E_VALIDATION, "redis.sentinels: more than %d sentinels", max);
		memcpy(item, "redis://", 8);
		memcpy(item + 8, a, (size_t)(b - a));
		item[8 + (b - a)] = '\0';
		/* The port is required: the last ':' follows the host (or its ']'). */
		{
			const char *colon = strrchr(item + 8, ':'), *rb = strrchr(item + 8, ']');
			if (!colon || (rb && colon < rb))
				return err_set(e, SBX_E_VALIDATION,
					       "redis.sentinels: '%.200s' must be host:port", item + 8);
		}
		if (redisurl_parse(item, &out[*n], e) < 0) {
			err_set(e, SBX_E_VALIDATION, "redis.sentinels: '%.200s' is not host:port", item + 8);
			return -1;
		}
		(*n)++;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}
