/* route.c — see route.h. */
#include "route.h"

#include <string.h>

int route_fit(const char *pattern, const char *path, struct route_caps *caps)
{
	const char *p = pattern, *s = path;
	struct route_caps local;

	if (!caps)
		caps = &local;
	caps->n = 0;
	if (*p != '/' || *s != '/')
		return 0;
	for (;;) {
		size_t plen, slen;

		p++;
		s++;
		plen = strcspn(p, "/");
		slen = strcspn(s, "/");
		if (plen >= 2 && p[0] == '{' && p[plen - 1] == '}') {
			int tail = plen >= 3 && p[plen - 2] == '*';

			if (caps->n == ROUTE_MAX_CAPS || (tail && p[plen] != '\0'))
				return 0;
			caps->cap[caps->n].name = p + 1;
			caps->cap[caps->n].name_len = plen - 2 - (size_t)tail;
			caps->cap[caps->n].value = s;
			if (tail) {
				caps->cap[caps->n++].len = strlen(s);
				return 1;
			}
			if (slen == 0)
				return 0;
			caps->cap[caps->n++].len = slen;
		} else if (plen != slen || memcmp(p, s, plen) != 0) {
			return 0;
		}
		p += plen;
		s += slen;
		if (!*p || !*s)
			return !*p && !*s;
	}
}

void route_allow_add(char *allow, size_t size, const char *method)
{
	size_t len = strlen(allow), mlen = strlen(method);
	const char *p = allow;

	while ((p = strstr(p, method))) {  /* already listed? */
		if ((p == allow || p[-1] == ' ') && (p[mlen] == ',' || p[mlen] == '\0'))
			return;
		p += mlen;
	}
	if (len + mlen + 3 > size)
		return;
	if (len)
		memcpy(allow + len, ", ", 2), len += 2;
	memcpy(allow + len, method, mlen + 1);
}
