/*
 * agent_ports.h — the control routes of port forwarders
 * (/agent/v1/sandboxes/{tenant}/{id}/forwards[/{port}]), over forward.h.
 */
#ifndef SBX_AGENT_PORTS_H
#define SBX_AGENT_PORTS_H

#include "httpd.h"

void agent_h_forward_put(struct httpd_req *r);
void agent_h_forward_delete(struct httpd_req *r);
void agent_h_forward_list(struct httpd_req *r);

#endif
