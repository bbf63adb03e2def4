/* codec.c — see codec.h. */
#include "codec.h"

#include <stddef.h>

int codec_utf8_seq(const unsigned char *s, size_t n)
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

int codec_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		int l = codec_utf8_seq(p + i, n - i);
		if (l <= 0)
			return 0;
		i += (size_t)l;
	}
	return 1;
}

size_t codec_utf8_complete_len(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t start = n > 3 ? n - 3 : 0;

	/* Find the last lead byte within the final 3 bytes. */
	for (size_t i = n; i > start; i--) {
		unsigned char c = p[i - 1];
		if ((c & 0xc0) == 0x80)
			continue;
		if (c >= 0xc0 && codec_utf8_seq(p + i - 1, n - (i - 1)) == -1)
			return i - 1;
		break;
	}
	return n;
}

int codec_utf8_fix(const char *s, size_t n, struct buf *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run = 0;

	while (i < n) {
		int l = codec_utf8_seq(p + i, n - i);
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

int codec_base64_encode(const void *data, size_t n, struct buf *out)
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

int codec_base64_decode(const char *s, size_t n, struct buf *out)
{
	unsigned acc = 0;
	int bits = 0;
	size_t pad = 0;

	while (n > 0 && s[n - 1] == '=' && pad < 2) {
		n--;
		pad++;
	}
	if ((n + pad) % 4 == 1 || (pad && (n + pad) % 4 != 0))
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		unsigned v;

		if (ch >= 'A' && ch <= 'Z')
			v = ch - 'A';
		else if (ch >= 'a' && ch <= 'z')
			v = ch - 'a' + 26;
		else if (ch >= '0' && ch <= '9')
			v = ch - '0' + 52;
		else if (ch == '+')
			v = 62;
		else if (ch == '/')
			v = 63;
		else
			return -1;
		acc = (acc << 6) | v;
		bits += 6;
		if (bits >= 8) {
			char byte = (char)((acc >> (bits - 8)) & 0xff);

			bits -= 8;
			if (buf_add(out, &byte, 1) < 0)
				return -1;
		}
	}
	return 0;
}

int codec_pct_encode(const char *s, size_t n, struct buf *out)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[3] = { '%', hex[ch >> 4], hex[ch & 15] };

		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		    ch == '.' || ch == '_' || ch == '~' || ch == '-') {
			if (buf_add(out, s + i, 1) < 0)
				return -1;
		} else if (buf_add(out, esc, 3) < 0) {
			return -1;
		}
	}
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long codec_pct_decode(const char *in, size_t n, char *out, size_t outsz, int plus_space)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char c = in[i];

		if (c == '%') {
			int hi = i + 2 < n ? hexval(in[i + 1]) : -1;
			int lo = i + 2 < n ? hexval(in[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return CODEC_PCT_BAD;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '+' && plus_space) {
			c = ' ';
		}
		if (c == '\0')
			return CODEC_PCT_NUL;
		if (o + 1 >= outsz)
			return CODEC_PCT_ROOM;
		out[o++] = c;
	}
	if (outsz == 0)
		return CODEC_PCT_ROOM;
	out[o] = '\0';
	return (long)o;
}
