/*
 * agent_sse.h — pure helpers for the agent's answers: UTF-8 checking and
 * repair, base64, and text/event-stream framing of events.
 */
#ifndef SBX_AGENT_SSE_H
#define SBX_AGENT_SSE_H

#include "buf.h"

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (1-4), 0 when the bytes are
 * invalid, -1 when s ends inside a sequence that is valid so far. NUL is
 * valid (it is a character in program output). */
int agent_utf8_seq(const unsigned char *s, size_t n);

/* 1 when all n bytes are valid UTF-8. */
int agent_utf8_valid(const char *s, size_t n);

/* How many of the n bytes to send now: all of them, minus a trailing
 * incomplete sequence (at most 3 bytes) that the next read may complete. */
size_t agent_utf8_complete_len(const char *s, size_t n);

/* Append s to out as valid UTF-8, each invalid byte replaced by U+FFFD. */
int agent_utf8_fix(const char *s, size_t n, struct buf *out);

/* Append the standard base64 (with padding) of n bytes to out. */
int agent_base64(const void *data, size_t n, struct buf *out);

/* Append one event: "event: <name>\ndata: <json>\n\n" (json holds no newline). */
int agent_sse_event(struct buf *out, const char *name, const char *json);

/* Append an output event {"data":"..."}: a JSON string when the chunk is
 * valid UTF-8, else {"data":"<base64>","encoding":"base64"}. */
int agent_sse_chunk(struct buf *out, const char *name, const char *data, size_t n);

#endif
