/* The agent's routes: control routes for sbx-api, data routes behind nginx. */
#include "agent.h"
#include "agent_compat.h"
#include "agent_exec.h"
#include "agent_files.h"
#include "agent_ports.h"
#include "agent_processes.h"
#include "agent_sessions.h"
#include "tunnel.h"

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
	{ "PUT", "/agent/v1/sandboxes/{}/{}/tunnels/{}", agent_h_tunnel_put, 0 },
	{ "GET", "/agent/v1/sandboxes/{}/{}/tunnels/{}", agent_h_tunnel_get, 0 },
	{ "DELETE", "/agent/v1/sandboxes/{}/{}/tunnels/{}", agent_h_tunnel_delete, 0 },
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
	/* The Cloudflare Sandbox SDK's container API (agent_compat.c). */
	{ "POST", "/v1/sandboxes/{}/cf/api/execute", agent_cf_execute, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/execute/stream", agent_cf_execute_stream, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/read", agent_cf_read, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/read/stream", agent_cf_read_stream, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/write", agent_cf_write, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/delete", agent_cf_delete, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/rename", agent_cf_rename, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/move", agent_cf_move, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/mkdir", agent_cf_mkdir, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/list-files", agent_cf_list_files, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/exists", agent_cf_exists, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/process/start", agent_cf_proc_start, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/process/list", agent_cf_proc_list, 0 },
	{ "DELETE", "/v1/sandboxes/{}/cf/api/process/kill-all", agent_cf_proc_kill_all, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/process/{}", agent_cf_proc_get, 0 },
	{ "DELETE", "/v1/sandboxes/{}/cf/api/process/{}", agent_cf_proc_kill, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/process/{}/logs", agent_cf_proc_logs, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/process/{}/stream", agent_cf_proc_stream, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/session/create", agent_cf_session_create, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/session/list", agent_cf_session_list, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/api/session/delete", agent_cf_session_delete, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/ping", agent_cf_ping, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/api/version", agent_cf_version, 0 },
	{ "GET", "/v1/sandboxes/{}/cf/{*}", agent_cf_unsupported, 0 },
	{ "POST", "/v1/sandboxes/{}/cf/{*}", agent_cf_unsupported, 0 },
	{ "DELETE", "/v1/sandboxes/{}/cf/{*}", agent_cf_unsupported, 0 },
};

const size_t agent_routes_count = sizeof(agent_routes) / sizeof(agent_routes[0]);
