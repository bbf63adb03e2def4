/* The agent's modules, in the order their container-gone hooks run
 * (module.h). Tunnels before forwarders: a tunnel process publishes a
 * forwarder. */
#include "module.h"

#include "agent_exec.h"
#include "agent_interp.h"
#include "agent_processes.h"
#include "agent_sessions.h"
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
	NULL,
};
