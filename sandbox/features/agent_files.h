/*
 * agent_files.h — handlers of the Files API (agent_files.c): files, dirs,
 * stat and move of a sandbox, resolved inside its root only.
 */
#ifndef SBX_AGENT_FILES_H
#define SBX_AGENT_FILES_H

#include "httpd.h"

void agent_h_files_get(struct httpd_req *r);
void agent_h_files_put(struct httpd_req *r);     /* HTTPD_ROUTE_STREAM_BODY */
void agent_h_files_delete(struct httpd_req *r);
void agent_h_dirs_get(struct httpd_req *r);
void agent_h_dirs_put(struct httpd_req *r);
void agent_h_stat_get(struct httpd_req *r);
void agent_h_move(struct httpd_req *r);

#endif
