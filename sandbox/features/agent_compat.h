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

/* Every route under /v1/sandboxes/{id}/cf/ (GET, POST, DELETE): the
 * compat table finds the SDK's route by its tail, maps the request and
 * runs the sbx handler; any other path is the SDK's 404 NOT_FOUND. */
void agent_cf_dispatch(struct httpd_req *r);

#endif
