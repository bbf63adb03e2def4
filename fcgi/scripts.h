/*
 * scripts.h — how sbx-api runs the Lua scripts of sandbox/common/rscripts.h
 * (their text and contracts live there, shared with the agent). A script
 * is loaded with SCRIPT LOAD the first time a process needs it and called
 * with EVALSHA; a NOSCRIPT answer (Redis restarted, or another server)
 * falls back to EVAL and forgets the digest, so the next call loads it
 * again.
 */
#ifndef SBX_SCRIPTS_H
#define SBX_SCRIPTS_H

#include "err.h"
#include "rscripts.h"

#include <hiredis/hiredis.h>

/* Run script id with nkeys keys and nargs arguments. New reply
 * (freeReplyObject) or NULL with e: REDIS_UNAVAILABLE, or INTERNAL when the
 * script itself failed (its error is logged). */
redisReply *scripts_run(enum rscript_id id, int nkeys, const char **keys, int nargs,
			const char **args, struct sbx_err *e);

#endif
