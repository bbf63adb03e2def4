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
 * (httpd_filter_typed, type AGENT_FILES_FD) before it is sent raw: the
 * descriptor at offset 0, its length, its name (borrowed). A view that
 * takes it owns fd. */
#define AGENT_FILES_FD "file"
struct agent_files_fd {
	int fd;
	uint64_t len;
	const char *name;
};

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

#endif
