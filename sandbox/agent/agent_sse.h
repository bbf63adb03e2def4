/*
 * agent_sse.h — text/event-stream framing of the agent's events (the
 * encodings they use are in codec.h).
 */
#ifndef SBX_AGENT_SSE_H
#define SBX_AGENT_SSE_H

#include "buf.h"
#include "codec.h"

#include <stddef.h>
#include <sys/types.h>

/* Append one event: "event: <name>\ndata: <json>\n\n" (json holds no newline). */
int agent_sse_event(struct buf *out, const char *name, const char *json);

/* Append an output event {"data":"..."}: a JSON string when the chunk is
 * valid UTF-8, else {"data":"<base64>","encoding":"base64"}. */
int agent_sse_chunk(struct buf *out, const char *name, const char *data, size_t n);

/* The reader of a stream answer (httpd_read_fn's contract) over the bytes
 * b holds from *off on: copies up to max of them to out and returns the
 * count, 0 when there is nothing now, -1 when there is nothing and end is
 * set. Taken bytes are dropped from b once it is read out (or compacted
 * when much of it is). */
ssize_t agent_sse_take(struct buf *b, size_t *off, int end, char *out, size_t max);

#endif
