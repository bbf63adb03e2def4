/*
 * err.h — the one error contract of sbx.
 *
 * A fallible function returns a negative value (or NULL) and fills a
 * struct sbx_err; on success it returns 0 (or a valid pointer) and leaves
 * the error alone. Callers add context with err_prefix() as the error
 * travels up. At the top, err_status() and err_name() map the error kind to
 * the HTTP status and the stable code of API.md — in exactly one table
 * (err.c). Messages are lowercase, say what failed and quote the subject;
 * an SBX_E_INTERNAL message is logged, never sent to a client.
 */
#ifndef SBX_ERR_H
#define SBX_ERR_H

#include <stddef.h>

enum sbx_ecode {
	SBX_E_NONE = 0,
	SBX_E_INTERNAL,
	SBX_E_VALIDATION,          /* 400 VALIDATION_FAILED */
	SBX_E_IS_DIRECTORY,
	SBX_E_NOT_DIRECTORY,
	SBX_E_NOT_REGULAR_FILE,
	SBX_E_INVALID_ARCHIVE,     /* 400: a corrupt, truncated or unsafe archive */
	SBX_E_INVALID_PORT,
	SBX_E_LIMIT_EXCEEDED,      /* 400: above an operator ceiling */
	SBX_E_UNAUTHORIZED,        /* 401 */
	SBX_E_FORBIDDEN,           /* 403 */
	SBX_E_ROUTE_NOT_FOUND,     /* 404 NOT_FOUND: no such route */
	SBX_E_SANDBOX_NOT_FOUND,
	SBX_E_FILE_NOT_FOUND,
	SBX_E_PROCESS_NOT_FOUND,
	SBX_E_SESSION_NOT_FOUND,
	SBX_E_CONTEXT_NOT_FOUND,
	SBX_E_TERMINAL_NOT_FOUND,
	SBX_E_SNAPSHOT_NOT_FOUND,
	SBX_E_INVALID_TOKEN,
	SBX_E_METHOD_NOT_ALLOWED,  /* 405 */
	SBX_E_PROCESS_READY_TIMEOUT, /* 408 */
	SBX_E_CONFLICT,            /* 409 */
	SBX_E_FILE_EXISTS,
	SBX_E_PROCESS_EXITED_BEFORE_READY,
	SBX_E_STALE_EPOCH,
	SBX_E_SESSION_TERMINATED,  /* 410 */
	SBX_E_STALE_PREVIEW_URL,
	SBX_E_PAYLOAD_TOO_LARGE,   /* 413 */
	SBX_E_FILE_TOO_LARGE,
	SBX_E_UNSUPPORTED_MEDIA_TYPE, /* 415 */
	SBX_E_RANGE_NOT_SATISFIABLE, /* 416 */
	SBX_E_QUOTA_EXCEEDED,      /* 429 */
	SBX_E_RATE_LIMITED,        /* 429: the tenant's request rate */
	SBX_E_NO_CAPACITY,         /* 503 */
	SBX_E_REDIS_UNAVAILABLE,
	SBX_E_NODE_UNAVAILABLE,
	SBX_E_NO_SPACE,            /* 507 */
	SBX_E_NOT_IMPLEMENTED,     /* 501: a feature this build does not have */
	/* git checkout (features/agent_git.c): what git's stderr says */
	SBX_E_GIT_REPOSITORY_NOT_FOUND, /* 404 */
	SBX_E_GIT_BRANCH_NOT_FOUND,     /* 404 */
	SBX_E_GIT_AUTH_FAILED,          /* 403 */
	SBX_E_GIT_NETWORK_ERROR,        /* 502 */
	SBX_E_GIT_TIMEOUT,              /* 504 */
	SBX_E_GIT_CLONE_FAILED,         /* 422: any other failure of git */
	SBX_E_IMAGE_NOT_FOUND,     /* 404: no such image or tag in its registry */
	SBX_E_REGISTRY_AUTH_FAILED, /* 403: the registry refused the credentials */
	SBX_E_REGISTRY_UNAVAILABLE, /* 503: the registry cannot be reached (Retry-After) */
	SBX_E_IMAGE_DIGEST_MISMATCH, /* 502: a blob is not what its digest says */
	SBX_E_IMAGE_PLATFORM_UNSUPPORTED, /* 400: no manifest for this node's platform */
	SBX_E_IMAGE_LAYER_REFUSED, /* 422: a layer entry breaks the extraction rules */
	SBX_E_IMAGE_TOO_LARGE,     /* 507: above [images] max_image_mib */
	SBX_E_IMAGE_USER_UNKNOWN,  /* 400: the image's User is not in its /etc/passwd or /etc/group */
	SBX_E__COUNT
};

struct sbx_err {
	enum sbx_ecode code;
	int sys_errno;      /* errno saved at the failing call, or 0 */
	char msg[256];
};

/* Fill e with code and a printf-style message; returns -1. */
int err_set(struct sbx_err *e, enum sbx_ecode code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Fill e as SBX_E_INTERNAL from errnum ("<message>: <strerror>"); returns -1. */
int err_sys(struct sbx_err *e, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepend context: "<context>: <old message>". Keeps code and errno. */
void err_prefix(struct sbx_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void err_clear(struct sbx_err *e);

/* The one mapping of an error kind to its HTTP status and stable code. */
int err_status(enum sbx_ecode code);
const char *err_name(enum sbx_ecode code);

/* Reverse of err_name(): SBX_E_NONE when the name is unknown. */
enum sbx_ecode err_from_name(const char *name);

/* The message a client may see: the generic text for SBX_E_INTERNAL. */
const char *err_public_message(const struct sbx_err *e);

/* The Cloudflare Sandbox SDK's error shape, built here for both tiers
 * (the …/cf/… routes). err_cf_code: the SDK's name for the stable code
 * sbx_code (err_name() spelling; most are the same). err_cf_body: the
 * SDK's error object {code, message, context, httpStatus, timestamp};
 * context is stolen (NULL: {}); new reference, NULL on allocation
 * failure. */
struct json_t;
const char *err_cf_code(const char *sbx_code);
struct json_t *err_cf_body(const char *cf_code, const char *message, int status,
			   struct json_t *context);
/* The SDK's error object of e (its status, its public message, the SDK's
 * name of its code, or cf_code when not NULL): what both tiers send. */
struct json_t *err_cf_error(const struct sbx_err *e, const char *cf_code, struct json_t *context);

#endif
