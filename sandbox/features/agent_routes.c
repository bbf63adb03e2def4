/* The agent's routes: control routes for sbx-api, data routes behind nginx. */
#include "agent.h"
#include "agent_sandboxes.h"
#include "agent_images.h"
#include "agent_compat.h"
#include "agent_events.h"
#include "agent_exec.h"
#include "agent_files.h"
#include "agent_interp.h"
#include "agent_ports.h"
#include "agent_processes.h"
#include "agent_sessions.h"
#include "agent_snapshots.h"
#include "agent_terminals.h"
#include "agent_watch.h"
#include "agent_git.h"
#include "agent_routes.h"
#include "tunnel.h"

/* The data routes' calls: every one is AGENT_CALL_DATA (the running
 * sandbox of /v1/sandboxes/{id}/…, fenced, in c->sb); the compat view runs
 * the same ones (agent_compat.c). */
#define DATA AGENT_CALL_DATA
#define DATA_JSON (AGENT_CALL_DATA | AGENT_CALL_JSON)
const struct agent_call_spec agent_call_exec = { agent_exec_post, DATA_JSON, agent_exec_fields };
const struct agent_call_spec agent_call_session_create = { agent_session_create, DATA_JSON,
							   agent_session_create_fields };
const struct agent_call_spec agent_call_session_list = { agent_session_list, DATA, NULL };
const struct agent_call_spec agent_call_session_delete = { agent_session_delete, DATA, NULL };
const struct agent_call_spec agent_call_proc_start = { agent_proc_start, DATA_JSON,
						       agent_proc_start_fields };
const struct agent_call_spec agent_call_proc_list = { agent_proc_list, DATA, NULL };
const struct agent_call_spec agent_call_proc_kill_all = { agent_proc_kill_all, DATA, NULL };
const struct agent_call_spec agent_call_proc_get = { agent_proc_get, DATA, NULL };
const struct agent_call_spec agent_call_proc_kill = { agent_proc_kill, DATA, NULL };
const struct agent_call_spec agent_call_proc_logs = { agent_proc_logs, DATA, NULL };
const struct agent_call_spec agent_call_proc_stdin = { agent_proc_stdin, DATA, NULL };
const struct agent_call_spec agent_call_proc_wait = { agent_proc_wait, DATA, NULL };
const struct agent_call_spec agent_call_files_get = { agent_files_get, DATA, NULL };
const struct agent_call_spec agent_call_files_put = { agent_files_put, DATA, NULL };
const struct agent_call_spec agent_call_files_delete = { agent_files_delete, DATA, NULL };
const struct agent_call_spec agent_call_dirs_get = { agent_dirs_get, DATA, NULL };
const struct agent_call_spec agent_call_dirs_put = { agent_dirs_put, DATA, NULL };
const struct agent_call_spec agent_call_stat_get = { agent_stat_get, DATA, NULL };
const struct agent_call_spec agent_call_move = { agent_move, DATA_JSON, agent_move_fields };
const struct agent_call_spec agent_call_interp_create = { agent_interp_create, DATA_JSON,
							  agent_interp_create_fields };
const struct agent_call_spec agent_call_interp_list = { agent_interp_list, DATA, NULL };
const struct agent_call_spec agent_call_interp_delete = { agent_interp_delete, DATA, NULL };
const struct agent_call_spec agent_call_interp_run = { agent_interp_run, DATA_JSON,
						       agent_interp_run_fields };
const struct agent_call_spec agent_call_term_create = { agent_term_create, DATA_JSON,
							agent_term_create_fields };
const struct agent_call_spec agent_call_term_list = { agent_term_list, DATA, NULL };
const struct agent_call_spec agent_call_term_delete = { agent_term_delete, DATA, NULL };
const struct agent_call_spec agent_call_term_ws = { agent_term_ws, DATA, NULL };
const struct agent_call_spec agent_call_term_ticket = { agent_term_ticket, DATA, NULL };
const struct agent_call_spec agent_call_term_cf_pty = { agent_term_cf_pty, DATA, NULL };
const struct agent_call_spec agent_call_watch = { agent_watch_get, DATA, NULL };
const struct agent_call_spec agent_call_git_checkout = { agent_git_checkout, DATA_JSON,
							 agent_git_checkout_fields };
const struct agent_call_spec agent_call_snap_create = { agent_snap_create, DATA_JSON,
							agent_snap_create_fields };
const struct agent_call_spec agent_call_snap_restore = { agent_snap_restore, DATA_JSON,
							 agent_snap_restore_fields };
const struct agent_call_spec agent_call_snap_import = { agent_snap_import, DATA, NULL };
const struct agent_call_spec agent_call_snap_export = { agent_snap_export, DATA, NULL };
const struct agent_call_spec agent_call_snap_to_file = { agent_snap_to_file, DATA_JSON,
							 agent_snap_file_fields };
const struct agent_call_spec agent_call_snap_from_file = { agent_snap_from_file, DATA_JSON,
							   agent_snap_file_fields };

const struct httpd_route agent_routes[] = {
	{ "GET", "/agent/v1/sandboxes", AGENT_CALL(agent_sandbox_list, 0, NULL) },
	{ "POST", "/agent/v1/images/pull",
	  AGENT_CALL(agent_images_pull_route, AGENT_CALL_LIVE | AGENT_CALL_JSON, agent_images_pull_fields) },
	{ "GET", "/agent/v1/images", AGENT_CALL(agent_images_list_route, 0, NULL) },
	{ "DELETE", "/agent/v1/images", AGENT_CALL(agent_images_delete_route, 0, NULL) },
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
	{ "POST", "/v1/sandboxes/{id}/exec", AGENT_CALL_OF(agent_call_exec) },
	{ "POST", "/v1/sandboxes/{id}/sessions", AGENT_CALL_OF(agent_call_session_create) },
	{ "GET", "/v1/sandboxes/{id}/sessions", AGENT_CALL_OF(agent_call_session_list) },
	{ "DELETE", "/v1/sandboxes/{id}/sessions/{session}",
	  AGENT_CALL_OF(agent_call_session_delete) },
	{ "POST", "/v1/sandboxes/{id}/processes", AGENT_CALL_OF(agent_call_proc_start) },
	{ "GET", "/v1/sandboxes/{id}/processes", AGENT_CALL_OF(agent_call_proc_list) },
	{ "DELETE", "/v1/sandboxes/{id}/processes", AGENT_CALL_OF(agent_call_proc_kill_all) },
	{ "GET", "/v1/sandboxes/{id}/processes/{process}", AGENT_CALL_OF(agent_call_proc_get) },
	{ "DELETE", "/v1/sandboxes/{id}/processes/{process}", AGENT_CALL_OF(agent_call_proc_kill) },
	{ "GET", "/v1/sandboxes/{id}/processes/{process}/logs", AGENT_CALL_OF(agent_call_proc_logs) },
	{ "POST", "/v1/sandboxes/{id}/processes/{process}/stdin",
	  AGENT_CALL_OF(agent_call_proc_stdin) },
	{ "GET", "/v1/sandboxes/{id}/processes/{process}/wait", AGENT_CALL_OF(agent_call_proc_wait) },
	{ "GET", "/v1/sandboxes/{id}/files/{path*}", AGENT_CALL_OF(agent_call_files_get) },
	{ "PUT", "/v1/sandboxes/{id}/files/{path*}", AGENT_CALL_OF(agent_call_files_put),
	  .flags = HTTPD_ROUTE_STREAM_BODY },
	{ "DELETE", "/v1/sandboxes/{id}/files/{path*}", AGENT_CALL_OF(agent_call_files_delete) },
	{ "GET", "/v1/sandboxes/{id}/dirs/{path*}", AGENT_CALL_OF(agent_call_dirs_get) },
	{ "PUT", "/v1/sandboxes/{id}/dirs/{path*}", AGENT_CALL_OF(agent_call_dirs_put) },
	{ "GET", "/v1/sandboxes/{id}/stat/{path*}", AGENT_CALL_OF(agent_call_stat_get) },
	{ "POST", "/v1/sandboxes/{id}/move", AGENT_CALL_OF(agent_call_move) },
	{ "POST", "/v1/sandboxes/{id}/contexts", AGENT_CALL_OF(agent_call_interp_create) },
	{ "GET", "/v1/sandboxes/{id}/contexts", AGENT_CALL_OF(agent_call_interp_list) },
	{ "GET", "/v1/sandboxes/{id}/contexts/{context}",
	  AGENT_CALL(agent_interp_get, DATA, NULL) },
	{ "DELETE", "/v1/sandboxes/{id}/contexts/{context}", AGENT_CALL_OF(agent_call_interp_delete) },
	{ "POST", "/v1/sandboxes/{id}/contexts/{context}/run", AGENT_CALL_OF(agent_call_interp_run) },
	{ "POST", "/v1/sandboxes/{id}/run",
	  AGENT_CALL(agent_interp_run_default, DATA_JSON, agent_interp_run_default_fields) },
	/* The live event stream of the cluster, behind /_sbx_events (agent_events.c). */
	{ "GET", "/v1/events", AGENT_CALL(agent_events_get, 0, NULL) },
	{ "POST", "/v1/sandboxes/{id}/terminals", AGENT_CALL_OF(agent_call_term_create) },
	{ "GET", "/v1/sandboxes/{id}/terminals", AGENT_CALL_OF(agent_call_term_list) },
	{ "DELETE", "/v1/sandboxes/{id}/terminals/{terminal}", AGENT_CALL_OF(agent_call_term_delete) },
	{ "GET", "/v1/sandboxes/{id}/terminals/{terminal}/ws", AGENT_CALL_OF(agent_call_term_ws) },
	{ "POST", "/v1/sandboxes/{id}/terminals/{terminal}/ticket",
	  AGENT_CALL_OF(agent_call_term_ticket) },
	{ "GET", "/v1/sandboxes/{id}/watch", AGENT_CALL_OF(agent_call_watch) },
	{ "POST", "/v1/sandboxes/{id}/git/checkout", AGENT_CALL_OF(agent_call_git_checkout) },
	/* Snapshots (agent_snapshots.c; their records: fcgi/api_snapshots.c). */
	{ "POST", "/v1/sandboxes/{id}/snapshots", AGENT_CALL_OF(agent_call_snap_create) },
	{ "POST", "/v1/sandboxes/{id}/restore", AGENT_CALL_OF(agent_call_snap_restore) },
	{ "PUT", "/v1/sandboxes/{id}/archive", AGENT_CALL_OF(agent_call_snap_import),
	  .flags = HTTPD_ROUTE_STREAM_BODY },
	{ "GET", "/v1/sandboxes/{id}/archive", AGENT_CALL_OF(agent_call_snap_export) },
	/* The Cloudflare Sandbox SDK's container API (agent_compat.c). */
	{ "GET", "/v1/sandboxes/{id}/cf/{route*}", .fn = agent_cf_dispatch },
	{ "POST", "/v1/sandboxes/{id}/cf/{route*}", .fn = agent_cf_dispatch,
	  .flags = HTTPD_ROUTE_BIG_BODY },
	{ "DELETE", "/v1/sandboxes/{id}/cf/{route*}", .fn = agent_cf_dispatch },
};

const size_t agent_routes_count = sizeof(agent_routes) / sizeof(agent_routes[0]);
