/*
 * agent_watch.h — file watch of a sandbox (agent_watch.c, API.md "Watch"):
 *   GET /v1/sandboxes/{id}/watch?path=&recursive=&exclude=&include=
 * an event stream of `ready`, then `create`, `modify`, `delete`, `move`
 * and `overflow`, coalesced over WATCH_COALESCE_MS; `error` ends it.
 */
#ifndef SBX_AGENT_WATCH_H
#define SBX_AGENT_WATCH_H

#include "call.h"

#define WATCH_COALESCE_MS 50          /* events of one window are merged */
#define WATCH_DIRS_MAX 8192           /* directories one watch follows */
#define WATCH_DEPTH_MAX 64
#define WATCH_PATTERNS_MAX 16         /* exclude= and include= patterns each */
#define WATCH_PENDING_MAX 1024        /* events held in one window */
#define WATCH_OUT_MAX (1024 * 1024)   /* event text the client has not taken */
#define WATCH_KEEPALIVE_MS 15000

/* The watch route, a call of AGENT_CALL_DATA (call.h). */
int agent_watch_get(struct agent_call *c, struct sbx_err *e);

/* 1 when name matches one of the n fnmatch(3) patterns (no FNM_PATHNAME:
 * a pattern is matched against one path component). */
int watch_match(const char (*pat)[256], int n, const char *name);

/* Split the comma-separated list s into at most WATCH_PATTERNS_MAX
 * patterns of 1-255 bytes without '/' (empty items are skipped) into pat;
 * their count, or -1 (400) naming what. */
int watch_patterns(const char *s, const char *what, char (*pat)[256], struct sbx_err *e);

#endif
