/*
 * api.h — the request handlers of sbx-api, one file per resource
 * (api_<resource>.c). Each follows route_fn (router.h).
 */
#ifndef SBX_API_H
#define SBX_API_H

#include "http.h"

int api_health_get(struct http_req *r, struct sbx_err *e);           /* GET /healthz */
int api_nodes_list(struct http_req *r, struct sbx_err *e);           /* GET /v1/nodes */
int api_route_decide(struct http_req *r, struct sbx_err *e);         /* /_sbx_route */
int api_route_error(struct http_req *r, struct sbx_err *e);          /* /_sbx_error */

#endif
