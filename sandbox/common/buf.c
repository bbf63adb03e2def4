#include "buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

void buf_release(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

static int grow(struct buf *b, size_t need)
{
	size_t ncap;
	char *nd;

	if (need > b->max || need + 1 < need) {
		errno = E2BIG;
		return -1;
	}
	if (need + 1 <= b->cap)
		return 0;
	ncap = b->cap ? b->cap : 256;
	while (ncap < need + 1)
		ncap *= 2;
	if (ncap > b->max + 1)
		ncap = b->max + 1;
	nd = realloc(b->data, ncap);
	if (!nd)
		return -1;
	b->data = nd;
	b->cap = ncap;
	return 0;
}

int buf_add(struct buf *b, const void *data, size_t n)
{
	if (grow(b, b->len + n) < 0)
		return -1;
	if (n)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_adds(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || grow(b, b->len + (size_t)n) < 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *buf_steal(struct buf *b, size_t *len)
{
	char *d = b->data;

	if (!d && buf_add(b, "", 0) < 0)
		return NULL;
	d = b->data;
	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return d;
}
