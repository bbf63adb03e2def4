/*
 * recview.h — the client's view of a sandbox record, rendered straight
 * from its Redis reply (GET /v1/sandboxes/{id} and the other answers that
 * are one record).
 *
 * The bytes are those of jsonv_dump(lifecycle_record_json(
 * lifecycle_hash_json(HGETALL))) — a unit test compares the two — without
 * building jansson values: the record is one HMGET of the fields the view
 * shows (never env), scalars are written as they come, and the JSON-valued
 * fields (labels, resources, pending, persist) are copied from a small
 * per-process cache of their canonical text. That text is a pure function
 * of the stored one, so the cache is never stale; only a miss parses (with
 * jansson). The output buffer is the caller's, reused from call to call.
 */
#ifndef SBX_RECVIEW_H
#define SBX_RECVIEW_H

#include "buf.h"
#include "err.h"

#include <hiredis/hiredis.h>

/* The fields of the HMGET that recview_render() takes, in its order. */
#define RECVIEW_NFIELDS 18
extern const char *const recview_fields[RECVIEW_NFIELDS];

/* Render an HMGET reply of recview_fields into out (reset first): 1 with
 * out holding the JSON text; 0 when the reply holds no record (no valid
 * state or epoch); -1 when out of memory or past out's maximum. */
int recview_render(const redisReply *hmget, struct buf *out);

/* Read the record of tenant/id (one HMGET) and render it into out: 1, 0
 * when there is none, -1 with e (REDIS_UNAVAILABLE, INTERNAL). */
int recview_load(const char *tenant, const char *id, struct buf *out, struct sbx_err *e);

#endif
