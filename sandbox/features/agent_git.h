/*
 * agent_git.h — git checkout into a sandbox (agent_git.c, API.md "Git"):
 *   POST /v1/sandboxes/{id}/git/checkout {url, branch?, depth?, targetDir?, timeoutMs?}
 * git runs inside the sandbox (its network, its disk, its rights) with a
 * timeout; its failures map to the GIT_* codes of err.h; the credentials
 * of a URL never reach a log, an event or an answer.
 */
#ifndef SBX_AGENT_GIT_H
#define SBX_AGENT_GIT_H

#include "buf.h"
#include "call.h"
#include "fspath.h"

#include <stdint.h>

#define GIT_URL_MAX 2048
#define GIT_BRANCH_MAX 255
#define GIT_DEPTH_MAX 1000000
#define GIT_TIMEOUT_DEFAULT_MS (5 * 60 * 1000)
#define GIT_TIMEOUT_MAX_MS (60 * 60 * 1000)
#define GIT_STDERR_MAX (16 * 1024)     /* the tail of git's stderr that is kept */

/* The route, a call of AGENT_CALL_DATA | AGENT_CALL_JSON (call.h). */
extern const struct jsonv_field agent_git_checkout_fields[];
int agent_git_checkout(struct agent_call *c, struct sbx_err *e);

/* The typed result of a checkout, offered to a view of the request
 * (agent_call_offer, type AGENT_GIT_RESULT) before the call answers in
 * its own JSON: the URL (credentials redacted), branch, commit and target
 * directory. Borrowed for the offer. */
#define AGENT_GIT_RESULT "git"
struct agent_git_result {
	const char *url, *branch, *commit, *target;
	int64_t duration_ms;
};

/* The pure rules (unit-tested). */

/* A checked clone URL: scheme https, http, git, ssh or file (file:///abs
 * only), no control bytes, spaces or NUL, at most GIT_URL_MAX bytes.
 * redacted is the URL with its userinfo (user[:password]@) replaced by
 * "***@"; creds says there was one. name is the repository's name (the
 * last path segment without ".git"), the default target under /workspace. */
struct git_url {
	char redacted[GIT_URL_MAX + 8];
	char name[FSPATH_NAME_MAX + 1];
	int creds;
};
int git_url_parse(const char *url, size_t len, struct git_url *u, struct sbx_err *e);

/* A branch or tag name git would take and no option: 1-GIT_BRANCH_MAX of
 * [A-Za-z0-9._/+-], not starting with '-' or '/', no "..", "//", "@{",
 * not ending with '/', '.' or ".lock". 0 or -1 (400). */
int git_branch_check(const char *b, size_t len, struct sbx_err *e);

/* Map git's exit (timed_out: our deadline) and the tail of its stderr
 * (LC_ALL=C) to the error contract. msg_ok: git's last line may be quoted
 * (only when the URL holds no credentials). Returns -1 with e filled. */
int git_error(const char *stderr_text, size_t len, int timed_out, int start_errno,
	      const struct git_url *u, struct sbx_err *e);

#endif
