/*
 * api.h — the request handlers of sbx-api, one file per resource
 * (api_<resource>.c). Each follows route_fn (router.h).
 */
#ifndef SBX_API_H
#define SBX_API_H

#include "http.h"

int api_health_get(struct http_req *r, struct sbx_err *e);           /* GET /healthz */
int api_images_pull(struct http_req *r, struct sbx_err *e);          /* POST /v1/images/pull */
int api_images_list(struct http_req *r, struct sbx_err *e);          /* GET /v1/images */
int api_images_delete(struct http_req *r, struct sbx_err *e);        /* DELETE /v1/images/{ref*} */
int api_nodes_list(struct http_req *r, struct sbx_err *e);           /* GET /v1/nodes */
int api_nodes_drain(struct http_req *r, struct sbx_err *e);          /* POST /v1/nodes/{node}/drain */
int api_nodes_sandboxes(struct http_req *r, struct sbx_err *e);      /* GET /v1/nodes/{node}/sandboxes */
int api_events_decide(struct http_req *r, struct sbx_err *e);        /* /_sbx_events */
int api_route_decide(struct http_req *r, struct sbx_err *e);         /* /_sbx_route */
int api_route_error(struct http_req *r, struct sbx_err *e);          /* /_sbx_error */
int api_sandboxes_list(struct http_req *r, struct sbx_err *e);       /* GET /v1/sandboxes */
int api_sandboxes_put(struct http_req *r, struct sbx_err *e);        /* PUT /v1/sandboxes/{id} */
int api_sandboxes_get(struct http_req *r, struct sbx_err *e);        /* GET /v1/sandboxes/{id} */
int api_sandboxes_patch(struct http_req *r, struct sbx_err *e);      /* PATCH /v1/sandboxes/{id} */
int api_sandboxes_delete(struct http_req *r, struct sbx_err *e);     /* DELETE /v1/sandboxes/{id} */
int api_sandboxes_restart(struct http_req *r, struct sbx_err *e);    /* POST …/{id}/restart */
int api_sandboxes_sleep(struct http_req *r, struct sbx_err *e);      /* POST …/{id}/sleep */
int api_ports_expose(struct http_req *r, struct sbx_err *e);         /* POST …/{id}/ports/{port} */
int api_ports_list(struct http_req *r, struct sbx_err *e);           /* GET …/{id}/ports */
int api_ports_delete(struct http_req *r, struct sbx_err *e);         /* DELETE …/{id}/ports/{port} */
int api_ports_preview(struct http_req *r, struct sbx_err *e);        /* /_sbx_preview */
int api_tunnels_create(struct http_req *r, struct sbx_err *e);       /* POST …/{id}/tunnels/{port} */
int api_tunnels_list(struct http_req *r, struct sbx_err *e);         /* GET …/{id}/tunnels */
int api_tunnels_delete(struct http_req *r, struct sbx_err *e);       /* DELETE …/{id}/tunnels/{port} */
int api_tenants_limits_get(struct http_req *r, struct sbx_err *e);   /* GET /v1/tenants/{tenant}/limits */
int api_tenants_limits_put(struct http_req *r, struct sbx_err *e);   /* PUT /v1/tenants/{tenant}/limits */
int api_snapshots_list(struct http_req *r, struct sbx_err *e);       /* GET /v1/snapshots */
int api_snapshots_get(struct http_req *r, struct sbx_err *e);        /* GET /v1/snapshots/{sid} */
int api_snapshots_delete(struct http_req *r, struct sbx_err *e);     /* DELETE /v1/snapshots/{sid} */
/* The /_sbx_preview decision for a tunnel host "t-<tunnel_id>": 0 with
 * forward (host:port of the agent's forwarder, 128 bytes) filled, or -1
 * with e (404 INVALID_TOKEN, 410 STALE_PREVIEW_URL). */
int api_tunnels_route(const char *tunnel_id, char *forward, struct sbx_err *e);

#endif
