/*
 * codec.h — the byte codecs of the tree, one copy each: UTF-8 checking and
 * repair, base64 both ways, percent-decoding and -encoding. Pure functions;
 * the struct buf outputs are bounded by the buffer's own maximum.
 */
#ifndef SBX_CODEC_H
#define SBX_CODEC_H

#include "buf.h"

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (1-4), 0 when the bytes are
 * invalid, -1 when s ends inside a sequence that is valid so far. NUL is
 * valid (it is a character in program output). */
int codec_utf8_seq(const unsigned char *s, size_t n);

/* 1 when all n bytes are valid UTF-8. */
int codec_utf8_valid(const char *s, size_t n);

/* How many of the n bytes to send now: all of them, minus a trailing
 * incomplete sequence (at most 3 bytes) that the next read may complete. */
size_t codec_utf8_complete_len(const char *s, size_t n);

/* Append s to out as valid UTF-8, each invalid byte replaced by U+FFFD. */
int codec_utf8_fix(const char *s, size_t n, struct buf *out);

/* Append the standard base64 (with padding) of n bytes to out. */
int codec_base64_encode(const void *data, size_t n, struct buf *out);

/* Append the bytes of standard base64 text s (padding optional) to out.
 * -1 on a character outside the alphabet, a bad length, or a full out. */
int codec_base64_decode(const char *s, size_t n, struct buf *out);

/* Append s to out with every byte but [A-Za-z0-9._~-] as %XX. */
int codec_pct_encode(const char *s, size_t n, struct buf *out);

/* Percent-decode n bytes of in into out (NUL-terminated), '+' as a space
 * when plus_space. The decoded length, or a negative CODEC_PCT_*: a
 * malformed escape, a NUL (raw or %00), an out too small. */
enum { CODEC_PCT_BAD = -1, CODEC_PCT_NUL = -2, CODEC_PCT_ROOM = -3 };
long codec_pct_decode(const char *in, size_t n, char *out, size_t outsz, int plus_space);

#endif
