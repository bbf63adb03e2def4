/*
 * agent_events.h — GET /v1/events: the live event stream (SSE) of
 * sbx:events, served by any up agent behind nginx.
 *
 * sbx-api has authenticated the key and validated the filters
 * (fcgi/api_events.c); nginx passes the scope in X-Sbx-Tenant ("*" or one
 * tenant), the filters in the query and the client's Last-Event-ID. Each
 * stream has an asynchronous Redis connection of its own on the agent's
 * loop, reading with XREAD BLOCK from the last id it sent (from the
 * Last-Event-ID when the client gave one, else from the newest entry), so
 * a client that reconnects with the id of the last event it saw misses
 * nothing the stream still holds (a `gap` event when it no longer holds
 * the client's entry). An idle stream sends a comment every
 * AGENT_EVENTS_KEEPALIVE_MS; agent.event_streams streams at most (past
 * that, 503 NO_CAPACITY). A lost Redis connection ends the stream with an
 * `error` event: the client reconnects.
 */
#ifndef SBX_AGENT_EVENTS_H
#define SBX_AGENT_EVENTS_H

#include "call.h"

#define AGENT_EVENTS_KEEPALIVE_MS 15000
#define AGENT_EVENTS_BATCH 100          /* entries read per XREAD */

/* GET /v1/events (a call of call.h: takes the request over with the
 * stream, or -1 with e: 400, 503 NO_CAPACITY past agent.event_streams). */
int agent_events_get(struct agent_call *c, struct sbx_err *e);

/* Streams open now. */
int agent_events_open(void);

#endif
