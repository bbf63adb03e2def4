/*
 * agent_ports.h — the control routes of port forwarders
 * (/agent/v1/sandboxes/{tenant}/{id}/forwards[/{port}]), over forward.h.
 */
#ifndef SBX_AGENT_PORTS_H
#define SBX_AGENT_PORTS_H

#include "call.h"

/* PUT …/forwards/{port} (AGENT_CALL_CONTROL | FENCED | LIVE | PORT | JSON):
 * open the forwarder of the running container (a generation other than
 * the running one is a 409). */
extern const struct jsonv_field agent_forward_put_fields[];
int agent_forward_put(struct agent_call *c, struct sbx_err *e);
/* DELETE …/forwards/{port} (CONTROL | FENCED | PORT): 204, also when absent. */
int agent_forward_delete(struct agent_call *c, struct sbx_err *e);
/* GET …/forwards (CONTROL): the forwarders and their connection counts. */
int agent_forward_list(struct agent_call *c, struct sbx_err *e);

#endif
