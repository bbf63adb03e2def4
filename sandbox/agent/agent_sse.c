#include "agent_sse.h"
#include "util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int agent_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0], cp, min;
	int len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2, cp = c & 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3, cp = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	for (int k = 1; k < len; k++) {
		if ((size_t)k >= n) {
			/* Truncated: still plausible only if what we have can start a
			 * valid sequence (checked on the completed value later). */
			if (k >= 2 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) ||
				       (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
				return 0;
			return -1;
		}
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int agent_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		int l = agent_utf8_seq(p + i, n - i);
		if (l <= 0)
			return 0;
		i += (size_t)l;
	}
	return 1;
}

size_t agent_utf8_complete_len(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t start = n > 3 ? n - 3 : 0;

	/* Find the last lead byte within the final 3 bytes. */
	for (size_t i = n; i > start; i--) {
		unsigned char c = p[i - 1];
		if ((c & 0xc0) == 0x80)
			continue;
		if (c >= 0xc0 && agent_utf8_seq(p + i - 1, n - (i - 1)) == -1)
			return i - 1;
		break;
	}
	return n;
}

int agent_utf8_fix(const char *s, size_t n, struct buf *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run = 0;

	while (i < n) {
		int l = agent_utf8_seq(p + i, n - i);
		if (l > 0) {
			i += (size_t)l;
			continue;
		}
		if (buf_add(out, s + run, i - run) < 0 || buf_add(out, "\xef\xbf\xbd", 3) < 0)
			return -1;
		i++;
		run = i;
	}
	return buf_add(out, s + run, n - run);
}

int agent_base64(const void *data, size_t n, struct buf *out)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	char q[4];

	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16;
		size_t left = n - i;
		if (left > 1)
			v |= (unsigned)p[i + 1] << 8;
		if (left > 2)
			v |= p[i + 2];
		q[0] = tab[(v >> 18) & 63];
		q[1] = tab[(v >> 12) & 63];
		q[2] = left > 1 ? tab[(v >> 6) & 63] : '=';
		q[3] = left > 2 ? tab[v & 63] : '=';
		if (buf_add(out, q, 4) < 0)
			return -1;
	}
	return 0;
}

int agent_sse_event(struct buf *out, const char *name, const char *json)
{
	return buf_printf(out, "event: %s\ndata: %s\n\n", name, json);
}

int agent_sse_chunk(struct buf *out, const char *name, const char *data, size_t n)
{
	json_t *obj;
	char *text;
	int rc;

	if (agent_utf8_valid(data, n)) {
		obj = json_pack("{s:s%}", "data", data, n);
	} else {
		struct buf b64;
		buf_init(&b64, n / 3 * 4 + 8);
		if (agent_base64(data, n, &b64) < 0) {
			buf_release(&b64);
			return -1;
		}
		obj = json_pack("{s:s%,s:s}", "data", b64.data ? b64.data : "", b64.len, "encoding",
				"base64");
		buf_release(&b64);
	}
	if (!obj)
		return -1;
	text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!text)
		return -1;
	rc = agent_sse_event(out, name, text);
	free(text);
	return rc;
}
