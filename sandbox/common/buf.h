/*
 * buf.h — a growable byte buffer with a hard maximum size (curl dynbuf).
 * Appends past the maximum fail with -1/E2BIG and leave the buffer intact.
 * The data is always NUL-terminated for convenience.
 */
#ifndef SBX_BUF_H
#define SBX_BUF_H

#include <stddef.h>

struct buf {
	char *data;
	size_t len;
	size_t cap;
	size_t max;
};

void buf_init(struct buf *b, size_t max);
void buf_release(struct buf *b);
void buf_reset(struct buf *b);
int buf_add(struct buf *b, const void *data, size_t n);
int buf_adds(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the NUL-terminated data to the caller (free()); the buffer is reset. */
char *buf_steal(struct buf *b, size_t *len);

#endif
