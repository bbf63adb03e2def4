/*
 * agent_compat.h — the container API of the Cloudflare Sandbox SDK
 * (@cloudflare/sandbox 0.12, route-based HTTP transport) served under
 * /v1/sandboxes/{id}/cf/api/… as a view over the agent's own handlers
 * (docs/COMPAT.md).
 */
#ifndef SBX_AGENT_COMPAT_H
#define SBX_AGENT_COMPAT_H

#include "buf.h"
#include "httpd.h"

#include <stddef.h>

void agent_cf_execute(struct httpd_req *r);
void agent_cf_execute_stream(struct httpd_req *r);
void agent_cf_read(struct httpd_req *r);
void agent_cf_read_stream(struct httpd_req *r);
void agent_cf_write(struct httpd_req *r);
void agent_cf_delete(struct httpd_req *r);
void agent_cf_rename(struct httpd_req *r);
void agent_cf_move(struct httpd_req *r);
void agent_cf_mkdir(struct httpd_req *r);
void agent_cf_list_files(struct httpd_req *r);
void agent_cf_exists(struct httpd_req *r);
void agent_cf_proc_start(struct httpd_req *r);
void agent_cf_proc_list(struct httpd_req *r);
void agent_cf_proc_kill_all(struct httpd_req *r);
void agent_cf_proc_get(struct httpd_req *r);
void agent_cf_proc_kill(struct httpd_req *r);
void agent_cf_proc_logs(struct httpd_req *r);
void agent_cf_proc_stream(struct httpd_req *r);
void agent_cf_session_create(struct httpd_req *r);
void agent_cf_session_list(struct httpd_req *r);
void agent_cf_session_delete(struct httpd_req *r);
void agent_cf_ping(struct httpd_req *r);
void agent_cf_version(struct httpd_req *r);
/* Any other path under …/cf/: the SDK's error shape, 404 NOT_FOUND. */
void agent_cf_unsupported(struct httpd_req *r);

#endif
