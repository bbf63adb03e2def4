/*
 * evfilter.h — the filters of GET /v1/events, shared by sbx-api (which
 * validates them before it routes the stream) and sbx-agent (which serves
 * the stream and applies them to each entry of sbx:events).
 *
 * Query parameters: tenant, sandbox, node (one value each) and type (a
 * comma-separated list, any of which matches). A stream also has a scope:
 * "*" (an admin key: every event) or one tenant (a tenant key: only
 * events that name that tenant; node events name none).
 */
#ifndef SBX_EVFILTER_H
#define SBX_EVFILTER_H

#include "err.h"

#include <stddef.h>

#define EVFILTER_TYPES_MAX 16
#define EVFILTER_TYPE_MAX 32     /* longest type name + 1 */
#define EVFILTER_ID_MAX 48       /* longest stream id "<ms>-<seq>" + 1 */
#define EVFILTER_SCOPE_ALL "*"

struct evfilter {
	char tenant[64];         /* "" = any */
	char sandbox[64];
	char node[64];
	char types[EVFILTER_TYPES_MAX][EVFILTER_TYPE_MAX];
	int ntypes;              /* 0 = any type */
};

void evfilter_init(struct evfilter *f);

/* Add one query parameter (value decoded). -1 with e (400) for an unknown
 * name, a repeated one or an invalid value. */
int evfilter_add(struct evfilter *f, const char *name, const char *value, struct sbx_err *e);

/* Parse a raw query string ("tenant=dev&type=created,destroyed") into f
 * (initialised here). 0, or -1 with e (400). */
int evfilter_parse_query(struct evfilter *f, const char *query, struct sbx_err *e);

/* Does the event (fields of its stream entry; NULL when absent) pass the
 * scope and f? */
int evfilter_match(const struct evfilter *f, const char *scope, const char *type,
		   const char *tenant, const char *id, const char *node);

/* 1 when s is a stream id "<digits>-<digits>" (Last-Event-ID). */
int evfilter_id_valid(const char *s);

#endif
