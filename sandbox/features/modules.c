/* The agent's modules, in the order their container-gone hooks run
 * (module.h). Tunnels before forwarders: a tunnel process publishes a
 * forwarder. */
#include "module.h"

#include "agent_exec.h"
#include "agent_interp.h"
#include "agent_processes.h"
#include "agent_sessions.h"
#include "agent_snapshots.h"
#include "agent_terminals.h"
#include "files_worker.h"
#include "forward.h"
#include "tunnel.h"

#include <stddef.h>

const struct agent_module *const agent_modules[] = {
	&agent_sess_module,
	&agent_proc_module,
	&agent_interp_module,
	&agent_term_module,
	&agent_exec_module,
	&tunnel_module,
	&fwd_module,
	&fw_module,
	&agent_snap_module,
	NULL,
};

const agent_restore_fn agent_restore_on_start = agent_snap_restore_on_start;
const agent_persist_fn agent_persist_before_stop = agent_snap_persist;
const agent_init_fn agent_persist_init = agent_snap_init;
const agent_release_fn agent_persist_release = agent_snap_release;
