/* The agent's routes: control routes for sbx-api, data routes behind nginx. */
#include "agent.h"

const struct httpd_route agent_routes[] = {
	{ "GET", "/agent/v1/sandboxes", agent_h_sandbox_list, 0 },
	{ "PUT", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_put, 0 },
	{ "GET", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_get, 0 },
	{ "DELETE", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_delete, 0 },
	{ "POST", "/agent/v1/sandboxes/{}/{}/stop", agent_h_sandbox_stop, 0 },
	{ "POST", "/v1/sandboxes/{}/exec", agent_h_exec, 0 },
};

const size_t agent_routes_count = sizeof(agent_routes) / sizeof(agent_routes[0]);
