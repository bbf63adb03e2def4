/*
 * agent_files.h — handlers of the Files API (agent_files.c): files, dirs,
 * stat and move of a sandbox, resolved inside its root only.
 */
#ifndef SBX_AGENT_FILES_H
#define SBX_AGENT_FILES_H

#include "buf.h"
#include "call.h"
#include "httpd.h"

#include <stddef.h>
#include <stdint.h>

/* The file routes (calls, see call.h; the path is the route's tail):
 * GET, PUT (HTTPD_ROUTE_STREAM_BODY), DELETE …/files/{path}, GET and PUT
 * …/dirs/{path}, GET …/stat/{path}, POST …/move (AGENT_CALL_JSON with
 * agent_move_fields). */
int agent_files_get(struct agent_call *c, struct sbx_err *e);
int agent_files_put(struct agent_call *c, struct sbx_err *e);
int agent_files_delete(struct agent_call *c, struct sbx_err *e);
int agent_dirs_get(struct agent_call *c, struct sbx_err *e);
int agent_dirs_put(struct agent_call *c, struct sbx_err *e);
int agent_stat_get(struct agent_call *c, struct sbx_err *e);
extern const struct jsonv_field agent_move_fields[];
int agent_move(struct agent_call *c, struct sbx_err *e);

/* A file answered whole from its open descriptor (GET …/files/{path}
 * without ?encoding=), offered typed to a view of the request
 * (agent_call_offer, type AGENT_FILES_FD) before it is sent raw: the
 * descriptor at offset 0, its length, its name (borrowed). A view that
 * takes it owns fd. */
#define AGENT_FILES_FD "file"
struct agent_files_fd {
	int fd;
	uint64_t len;
	const char *name;
};

/* For other helpers that work inside a sandbox (files_worker.h):
 * openat2 of rel (an fspath rel path) from the sandbox's root fd with
 * RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, O_CLOEXEC added: an fd or -1
 * with errno. And errno err of operation what on the client's path as the
 * error contract (never a host path); returns -1. */
int files_open_in_root(int root, const char *rel, int flags, unsigned mode);
int files_errno(struct sbx_err *e, int err, const char *what, const char *path);
/* The boolean query parameter name of c: absent → 0, "true"/"1" → 1,
 * "false"/"0" → 0, else -1 (400). */
int files_query_bool(const struct agent_call *c, const char *name, int *out, struct sbx_err *e);

/* Pure helpers of ?encoding= (unit-tested). */
/* Append s[0..n) to b as the inside of a JSON string (what jansson writes:
 * \" \\ \b \f \n \r \t, \u00XX for the other control bytes). 0 or -1. */
int files_json_escape(struct buf *b, const char *s, size_t n);

/* The encoded read's UTF-8 check (ids_valid_utf8: NUL is refused) over
 * chunks of a file: a sequence cut at the end of a chunk is carried over;
 * last = 1 with the final chunk (maybe empty). Start with valid = 1. */
struct files_utf8 {
	char carry[4];
	size_t ncarry;
	int valid;
};
void files_utf8_feed(struct files_utf8 *u, const char *s, size_t n, int last);

/* In a helper of the sandbox: may the filesystem of fd be read (write =
 * 0) or written (write = 1) — the Files API's rule (the header of
 * agent_files.c). 1 or 0. */
int files_fs_allowed(int fd, int write);
/* In a helper: remove name in pdir and everything below it, never
 * following a symlink nor crossing a mount. 0, or -1 with errno. */
int files_remove_tree(int pdir, const char *name);

#endif
