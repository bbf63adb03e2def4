#include "err.h"
#include "util.h"

#include <jansson.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
	int status;
	const char *name;
} table[SBX_E__COUNT] = {
	[SBX_E_NONE] = { 200, "OK" },
	[SBX_E_INTERNAL] = { 500, "INTERNAL" },
	[SBX_E_VALIDATION] = { 400, "VALIDATION_FAILED" },
	[SBX_E_IS_DIRECTORY] = { 400, "IS_DIRECTORY" },
	[SBX_E_NOT_DIRECTORY] = { 400, "NOT_DIRECTORY" },
	[SBX_E_NOT_REGULAR_FILE] = { 400, "NOT_REGULAR_FILE" },
	[SBX_E_INVALID_ARCHIVE] = { 400, "INVALID_ARCHIVE" },
	[SBX_E_INVALID_PORT] = { 400, "INVALID_PORT" },
	[SBX_E_LIMIT_EXCEEDED] = { 400, "LIMIT_EXCEEDED" },
	[SBX_E_UNAUTHORIZED] = { 401, "UNAUTHORIZED" },
	[SBX_E_FORBIDDEN] = { 403, "FORBIDDEN" },
	[SBX_E_ROUTE_NOT_FOUND] = { 404, "NOT_FOUND" },
	[SBX_E_SANDBOX_NOT_FOUND] = { 404, "SANDBOX_NOT_FOUND" },
	[SBX_E_FILE_NOT_FOUND] = { 404, "FILE_NOT_FOUND" },
	[SBX_E_PROCESS_NOT_FOUND] = { 404, "PROCESS_NOT_FOUND" },
	[SBX_E_SESSION_NOT_FOUND] = { 404, "SESSION_NOT_FOUND" },
	[SBX_E_CONTEXT_NOT_FOUND] = { 404, "CONTEXT_NOT_FOUND" },
	[SBX_E_TERMINAL_NOT_FOUND] = { 404, "TERMINAL_NOT_FOUND" },
	[SBX_E_SNAPSHOT_NOT_FOUND] = { 404, "SNAPSHOT_NOT_FOUND" },
	[SBX_E_INVALID_TOKEN] = { 404, "INVALID_TOKEN" },
	[SBX_E_METHOD_NOT_ALLOWED] = { 405, "METHOD_NOT_ALLOWED" },
	[SBX_E_PROCESS_READY_TIMEOUT] = { 408, "PROCESS_READY_TIMEOUT" },
	[SBX_E_CONFLICT] = { 409, "CONFLICT" },
	[SBX_E_FILE_EXISTS] = { 409, "FILE_EXISTS" },
	[SBX_E_PROCESS_EXITED_BEFORE_READY] = { 409, "PROCESS_EXITED_BEFORE_READY" },
	[SBX_E_STALE_EPOCH] = { 409, "STALE_EPOCH" },
	[SBX_E_SESSION_TERMINATED] = { 410, "SESSION_TERMINATED" },
	[SBX_E_STALE_PREVIEW_URL] = { 410, "STALE_PREVIEW_URL" },
	[SBX_E_PAYLOAD_TOO_LARGE] = { 413, "PAYLOAD_TOO_LARGE" },
	[SBX_E_FILE_TOO_LARGE] = { 413, "FILE_TOO_LARGE" },
	[SBX_E_UNSUPPORTED_MEDIA_TYPE] = { 415, "UNSUPPORTED_MEDIA_TYPE" },
	[SBX_E_RANGE_NOT_SATISFIABLE] = { 416, "RANGE_NOT_SATISFIABLE" },
	[SBX_E_QUOTA_EXCEEDED] = { 429, "QUOTA_EXCEEDED" },
	[SBX_E_RATE_LIMITED] = { 429, "RATE_LIMITED" },
	[SBX_E_NO_CAPACITY] = { 503, "NO_CAPACITY" },
	[SBX_E_REDIS_UNAVAILABLE] = { 503, "REDIS_UNAVAILABLE" },
	[SBX_E_NODE_UNAVAILABLE] = { 503, "NODE_UNAVAILABLE" },
	[SBX_E_NO_SPACE] = { 507, "NO_SPACE" },
	[SBX_E_NOT_IMPLEMENTED] = { 501, "NOT_IMPLEMENTED" },
	[SBX_E_GIT_REPOSITORY_NOT_FOUND] = { 404, "GIT_REPOSITORY_NOT_FOUND" },
	[SBX_E_GIT_BRANCH_NOT_FOUND] = { 404, "GIT_BRANCH_NOT_FOUND" },
	[SBX_E_GIT_AUTH_FAILED] = { 403, "GIT_AUTH_FAILED" },
	[SBX_E_GIT_NETWORK_ERROR] = { 502, "GIT_NETWORK_ERROR" },
	[SBX_E_GIT_TIMEOUT] = { 504, "GIT_TIMEOUT" },
	[SBX_E_GIT_CLONE_FAILED] = { 422, "GIT_CLONE_FAILED" },
	[SBX_E_IMAGE_NOT_FOUND] = { 404, "IMAGE_NOT_FOUND" },
	[SBX_E_REGISTRY_AUTH_FAILED] = { 403, "REGISTRY_AUTH_FAILED" },
	[SBX_E_REGISTRY_UNAVAILABLE] = { 503, "REGISTRY_UNAVAILABLE" },
	[SBX_E_IMAGE_DIGEST_MISMATCH] = { 502, "IMAGE_DIGEST_MISMATCH" },
	[SBX_E_IMAGE_PLATFORM_UNSUPPORTED] = { 400, "IMAGE_PLATFORM_UNSUPPORTED" },
	[SBX_E_IMAGE_LAYER_REFUSED] = { 422, "IMAGE_LAYER_REFUSED" },
	[SBX_E_IMAGE_TOO_LARGE] = { 507, "IMAGE_TOO_LARGE" },
	[SBX_E_IMAGE_USER_UNKNOWN] = { 400, "IMAGE_USER_UNKNOWN" },
};

int err_set(struct sbx_err *e, enum sbx_ecode code, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return -1;
	e->code = code;
	e->sys_errno = 0;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

int err_sys(struct sbx_err *e, int errnum, const char *fmt, ...)
{
	va_list ap;
	char head[200];

	if (!e)
		return -1;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	e->code = SBX_E_INTERNAL;
	e->sys_errno = errnum;
	snprintf(e->msg, sizeof(e->msg), "%s: %s", head, strerror(errnum));
	return -1;
}

void err_prefix(struct sbx_err *e, const char *fmt, ...)
{
	va_list ap;
	char head[200], old[sizeof(e->msg)];

	if (!e)
		return;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	if (snprintf(e->msg, sizeof(e->msg), "%s: %s", head, old) < 0)
		memcpy(e->msg, old, sizeof(old));
}

void err_clear(struct sbx_err *e)
{
	e->code = SBX_E_NONE;
	e->sys_errno = 0;
	e->msg[0] = '\0';
}

int err_status(enum sbx_ecode code)
{
	if ((unsigned)code >= SBX_E__COUNT || !table[code].name)
		return 500;
	return table[code].status;
}

const char *err_name(enum sbx_ecode code)
{
	if ((unsigned)code >= SBX_E__COUNT || !table[code].name)
		return "INTERNAL";
	return table[code].name;
}

enum sbx_ecode err_from_name(const char *name)
{
	for (int i = 1; i < SBX_E__COUNT; i++)
		if (table[i].name && strcmp(table[i].name, name) == 0)
			return (enum sbx_ecode)i;
	return SBX_E_NONE;
}

const char *err_public_message(const struct sbx_err *e)
{
	if (e->code == SBX_E_INTERNAL || e->code == SBX_E_NONE)
		return "internal error";
	return e->msg;
}

const char *err_cf_code(const char *sbx_code)
{
	static const struct {
		const char *sbx, *cf;
	} renamed[] = {
		{ "INTERNAL", "INTERNAL_ERROR" },
		{ "NOT_REGULAR_FILE", "FILESYSTEM_ERROR" },
	};

	if (!sbx_code)
		return "INTERNAL_ERROR";
	for (size_t i = 0; i < ARRAY_SIZE(renamed); i++)
		if (strcmp(sbx_code, renamed[i].sbx) == 0)
			return renamed[i].cf;
	return sbx_code;
}

json_t *err_cf_body(const char *cf_code, const char *message, int status, json_t *context)
{
	char ts[32];

	util_iso8601(util_wall_ms(), ts);
	return json_pack("{s:s, s:s, s:o, s:i, s:s}", "code", cf_code, "message",
			 message ? message : "internal error", "context",
			 context ? context : json_object(), "httpStatus", status, "timestamp", ts);
}

json_t *err_cf_error(const struct sbx_err *e, const char *cf_code, json_t *context)
{
	return err_cf_body(cf_code ? cf_code : err_cf_code(err_name(e->code)), err_public_message(e),
			   err_status(e->code), context);
}
