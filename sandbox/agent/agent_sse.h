/*
 * agent_sse.h — text/event-stream framing of the agent's events (the
 * encodings they use are in codec.h).
 */
#ifndef SBX_AGENT_SSE_H
#define SBX_AGENT_SSE_H

#include "buf.h"
#include "codec.h"

#include <stddef.h>

/* Append one event: "event: <name>\ndata: <json>\n\n" (json holds no newline). */
int agent_sse_event(struct buf *out, const char *name, const char *json);

/* Append an output event {"data":"..."}: a JSON string when the chunk is
 * valid UTF-8, else {"data":"<base64>","encoding":"base64"}. */
int agent_sse_chunk(struct buf *out, const char *name, const char *data, size_t n);

#endif
