#include "scripts.h"
#include "util.h"
#include "log.h"
#include "rerror.h"
#include "store.h"

#include <stdio.h>
#include <string.h>

#define SCRIPT_MAX_ARGV 48

/* Digests of the loaded scripts of this process ("" = not loaded). */
static char shas[RSCRIPT__COUNT][41];

static int load(enum rscript_id id, struct sbx_err *e)
{
	redisReply *r = store_command(e, "SCRIPT LOAD %s", rscripts_source(id));

	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		freeReplyObject(r);
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: SCRIPT LOAD of '%s' gave no digest",
			       rscripts_name(id));
	}
	memcpy(shas[id], r->str, 41);
	freeReplyObject(r);
	return 0;
}

/* EVALSHA (or EVAL) with the raw error reply handed back. */
static redisReply *call(const char *cmd, const char *body, int nkeys, const char **keys,
			int nargs, const char **args, struct sbx_err *e)
{
	const char *argv[SCRIPT_MAX_ARGV];
	size_t lens[SCRIPT_MAX_ARGV];
	char nk[16];
	redisReply *r = NULL;
	int argc = 0;

	util_xsnprintf(nk, sizeof(nk), "%d", nkeys);
	argv[argc++] = cmd;
	argv[argc++] = body;
	argv[argc++] = nk;
	for (int i = 0; i < nkeys; i++)
		argv[argc++] = keys[i];
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	if (store_append_argv(e, argc, argv, lens) < 0 ||
	    store_collect(&r, 1, STORE_RAW_ERRORS, e) < 0)
		return NULL;
	return r;
}

redisReply *scripts_run(enum rscript_id id, int nkeys, const char **keys, int nargs,
			const char **args, struct sbx_err *e)
{
	redisReply *r;

	if (!rscripts_source(id) || nkeys < 0 || nargs < 0 ||
	    3 + nkeys + nargs > SCRIPT_MAX_ARGV) {
		err_set(e, SBX_E_INTERNAL, "bad script call");
		return NULL;
	}
	if (!shas[id][0] && load(id, e) < 0)
		return NULL;
	r = call("EVALSHA", shas[id], nkeys, keys, nargs, args, e);
	if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
		freeReplyObject(r);
		shas[id][0] = '\0';
		r = call("EVAL", rscripts_source(id), nkeys, keys, nargs, args, e);
	}
	if (r && r->type == REDIS_REPLY_ERROR) {
		/* A refused write (NOREPLICAS, READONLY, MISCONF, OOM, …, named
		 * first also from inside a script) is Redis unable to serve; any
		 * other error is a bug of ours. */
		int refused = rerror_unavailable(r->str);

		if (refused)
			err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis refuses writes: %.200s", r->str);
		else
			err_set(e, SBX_E_INTERNAL, "lua script '%s' failed: %.200s",
				rscripts_name(id), r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}
