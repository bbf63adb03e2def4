#include "ids.h"

#include <string.h>

static int dns_label(const char *s, size_t max)
{
	size_t n;

	if (!s)
		return 0;
	n = strlen(s);
	if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return 0;
	}
	return 1;
}

int ids_valid_sandbox(const char *s)
{
	return dns_label(s, 63);
}

int ids_valid_tenant(const char *s)
{
	return dns_label(s, 63);
}

int ids_valid_node(const char *s)
{
	return dns_label(s, 63);
}

int ids_valid_name(const char *s)
{
	size_t n;

	if (!s)
		return 0;
	n = strlen(s);
	if (n == 0 || n > 64 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

int ids_valid_token(const char *s)
{
	size_t n;

	if (!s)
		return 0;
	n = strlen(s);
	if (n == 0 || n > 16)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
			return 0;
	}
	return 1;
}

static int printable(const char *s, size_t min, size_t max, const char *forbid)
{
	size_t n;

	if (!s)
		return 0;
	n = strlen(s);
	if (n < min || n > max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c > 0x7e || strchr(forbid, c))
			return 0;
	}
	return 1;
}

int ids_valid_label_key(const char *s)
{
	return printable(s, 1, 63, "{}:, ");
}

int ids_valid_label_value(const char *s)
{
	return printable(s, 0, 255, "{},");
}

int ids_valid_utf8(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned char c = p[i];
		size_t len;
		unsigned cp;

		if (c == 0)
			return 0;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			len = 2;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4;
			cp = c & 0x07;
		} else {
			return 0;
		}
		if (i + len > n)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += len;
	}
	return 1;
}

int ids_valid_image(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 63 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
		      s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

int ids_valid_env_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > IDS_ENV_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}
