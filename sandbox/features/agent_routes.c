/* The agent's routes: control routes for sbx-api, data routes behind nginx. */
#include "agent.h"
#include "agent_sandboxes.h"
#include "agent_compat.h"
#include "agent_exec.h"
#include "agent_files.h"
#include "agent_ports.h"
#include "agent_processes.h"
#include "agent_sessions.h"
#include "tunnel.h"

const struct httpd_route agent_routes[] = {
	{ "GET", "/agent/v1/sandboxes", AGENT_CALL(agent_sandbox_list, 0, NULL) },
	{ "PUT", "/agent/v1/sandboxes/{tenant}/{id}",
	  AGENT_CALL(agent_sandbox_put, AGENT_CALL_CONTROL | AGENT_CALL_LIVE | AGENT_CALL_JSON,
		     agent_sandbox_put_fields) },
	{ "GET", "/agent/v1/sandboxes/{tenant}/{id}",
	  AGENT_CALL(agent_sandbox_get, AGENT_CALL_CONTROL, NULL) },
	{ "DELETE", "/agent/v1/sandboxes/{tenant}/{id}",
	  AGENT_CALL(agent_sandbox_delete, AGENT_CALL_CONTROL | AGENT_CALL_FENCED, NULL) },
	{ "POST", "/agent/v1/sandboxes/{tenant}/{id}/stop",
	  AGENT_CALL(agent_sandbox_stop, AGENT_CALL_CONTROL | AGENT_CALL_FENCED, NULL) },
	{ "PATCH", "/agent/v1/sandboxes/{tenant}/{id}",
	  AGENT_CALL(agent_sandbox_patch, AGENT_CALL_CONTROL | AGENT_CALL_FENCED | AGENT_CALL_JSON,
		     agent_sandbox_patch_fields) },
	{ "PUT", "/agent/v1/sandboxes/{tenant}/{id}/forwards/{port}",
	  AGENT_CALL(agent_forward_put,
		     AGENT_CALL_CONTROL | AGENT_CALL_FENCED | AGENT_CALL_LIVE | AGENT_CALL_PORT |
			     AGENT_CALL_JSON,
		     agent_forward_put_fields) },
	{ "DELETE", "/agent/v1/sandboxes/{tenant}/{id}/forwards/{port}",
	  AGENT_CALL(agent_forward_delete, AGENT_CALL_CONTROL | AGENT_CALL_FENCED | AGENT_CALL_PORT,
		     NULL) },
	{ "GET", "/agent/v1/sandboxes/{tenant}/{id}/forwards",
	  AGENT_CALL(agent_forward_list, AGENT_CALL_CONTROL, NULL) },
	{ "PUT", "/agent/v1/sandboxes/{tenant}/{id}/tunnels/{port}",
	  AGENT_CALL(agent_tunnel_put,
		     AGENT_CALL_CONTROL | AGENT_CALL_FENCED | AGENT_CALL_LIVE | AGENT_CALL_PORT |
			     AGENT_CALL_JSON,
		     agent_tunnel_put_fields) },
	{ "GET", "/agent/v1/sandboxes/{tenant}/{id}/tunnels/{port}",
	  AGENT_CALL(agent_tunnel_get, AGENT_CALL_CONTROL | AGENT_CALL_PORT, NULL) },
	{ "DELETE", "/agent/v1/sandboxes/{tenant}/{id}/tunnels/{port}",
	  AGENT_CALL(agent_tunnel_delete, AGENT_CALL_CONTROL | AGENT_CALL_FENCED | AGENT_CALL_PORT,
		     NULL) },
	{ "POST", "/v1/sandboxes/{id}/exec", .fn = agent_h_exec },
	{ "POST", "/v1/sandboxes/{id}/sessions", .fn = agent_h_session_create },
	{ "GET", "/v1/sandboxes/{id}/sessions", .fn = agent_h_session_list },
	{ "DELETE", "/v1/sandboxes/{id}/sessions/{session}", .fn = agent_h_session_delete },
	{ "POST", "/v1/sandboxes/{id}/processes", .fn = agent_h_proc_start },
	{ "GET", "/v1/sandboxes/{id}/processes", .fn = agent_h_proc_list },
	{ "DELETE", "/v1/sandboxes/{id}/processes", .fn = agent_h_proc_kill_all },
	{ "GET", "/v1/sandboxes/{id}/processes/{process}", .fn = agent_h_proc_get },
	{ "DELETE", "/v1/sandboxes/{id}/processes/{process}", .fn = agent_h_proc_kill },
	{ "GET", "/v1/sandboxes/{id}/processes/{process}/logs", .fn = agent_h_proc_logs },
	{ "POST", "/v1/sandboxes/{id}/processes/{process}/stdin", .fn = agent_h_proc_stdin },
	{ "GET", "/v1/sandboxes/{id}/processes/{process}/wait", .fn = agent_h_proc_wait },
	{ "GET", "/v1/sandboxes/{id}/files/{path*}", .fn = agent_h_files_get },
	{ "PUT", "/v1/sandboxes/{id}/files/{path*}", .fn = agent_h_files_put, .flags = HTTPD_ROUTE_STREAM_BODY },
	{ "DELETE", "/v1/sandboxes/{id}/files/{path*}", .fn = agent_h_files_delete },
	{ "GET", "/v1/sandboxes/{id}/dirs/{path*}", .fn = agent_h_dirs_get },
	{ "PUT", "/v1/sandboxes/{id}/dirs/{path*}", .fn = agent_h_dirs_put },
	{ "GET", "/v1/sandboxes/{id}/stat/{path*}", .fn = agent_h_stat_get },
	{ "POST", "/v1/sandboxes/{id}/move", .fn = agent_h_move },
	/* The Cloudflare Sandbox SDK's container API (agent_compat.c). */
	{ "GET", "/v1/sandboxes/{id}/cf/{route*}", .fn = agent_cf_dispatch },
	{ "POST", "/v1/sandboxes/{id}/cf/{route*}", .fn = agent_cf_dispatch },
	{ "DELETE", "/v1/sandboxes/{id}/cf/{route*}", .fn = agent_cf_dispatch },
};

const size_t agent_routes_count = sizeof(agent_routes) / sizeof(agent_routes[0]);
