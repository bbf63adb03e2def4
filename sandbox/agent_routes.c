/* The agent's routes: control routes for sbx-api, data routes behind nginx. */
#include "agent.h"
#include "agent_exec.h"
#include "forward.h"
#include "agent_files.h"

const struct httpd_route agent_routes[] = {
	{ "GET", "/agent/v1/sandboxes", agent_h_sandbox_list, 0 },
	{ "PUT", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_put, 0 },
	{ "GET", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_get, 0 },
	{ "DELETE", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_delete, 0 },
	{ "POST", "/agent/v1/sandboxes/{}/{}/stop", agent_h_sandbox_stop, 0 },
	{ "PATCH", "/agent/v1/sandboxes/{}/{}", agent_h_sandbox_patch, 0 },
	{ "PUT", "/agent/v1/sandboxes/{}/{}/forwards/{}", agent_h_forward_put, 0 },
	{ "DELETE", "/agent/v1/sandboxes/{}/{}/forwards/{}", agent_h_forward_delete, 0 },
	{ "GET", "/agent/v1/sandboxes/{}/{}/forwards", agent_h_forward_list, 0 },
	{ "POST", "/v1/sandboxes/{}/exec", agent_h_exec, 0 },
	{ "POST", "/v1/sandboxes/{}/sessions", agent_h_session_create, 0 },
	{ "GET", "/v1/sandboxes/{}/sessions", agent_h_session_list, 0 },
	{ "DELETE", "/v1/sandboxes/{}/sessions/{}", agent_h_session_delete, 0 },
	{ "POST", "/v1/sandboxes/{}/processes", agent_h_proc_start, 0 },
	{ "GET", "/v1/sandboxes/{}/processes", agent_h_proc_list, 0 },
	{ "DELETE", "/v1/sandboxes/{}/processes", agent_h_proc_kill_all, 0 },
	{ "GET", "/v1/sandboxes/{}/processes/{}", agent_h_proc_get, 0 },
	{ "DELETE", "/v1/sandboxes/{}/processes/{}", agent_h_proc_kill, 0 },
	{ "GET", "/v1/sandboxes/{}/processes/{}/logs", agent_h_proc_logs, 0 },
	{ "POST", "/v1/sandboxes/{}/processes/{}/stdin", agent_h_proc_stdin, 0 },
	{ "GET", "/v1/sandboxes/{}/processes/{}/wait", agent_h_proc_wait, 0 },
	{ "GET", "/v1/sandboxes/{}/files/{*}", agent_h_files_get, 0 },
	{ "PUT", "/v1/sandboxes/{}/files/{*}", agent_h_files_put, HTTPD_ROUTE_STREAM_BODY },
	{ "DELETE", "/v1/sandboxes/{}/files/{*}", agent_h_files_delete, 0 },
	{ "GET", "/v1/sandboxes/{}/dirs/{*}", agent_h_dirs_get, 0 },
	{ "PUT", "/v1/sandboxes/{}/dirs/{*}", agent_h_dirs_put, 0 },
	{ "GET", "/v1/sandboxes/{}/stat/{*}", agent_h_stat_get, 0 },
	{ "POST", "/v1/sandboxes/{}/move", agent_h_move, 0 },
};

const size_t agent_routes_count = sizeof(agent_routes) / sizeof(agent_routes[0]);
