/*
 * forward.h — port forwarders of the agent: TCP from the agent's host into
 * a sandbox's network namespace (preview URLs and tunnels end here).
 *
 * Design: one listener per (sandbox container, port), on an ephemeral port
 * of the agent's own listen host (agent.listen). Each accepted connection
 * gets a socket created inside the sandbox's network namespace (a helper
 * thread does setns(CLONE_NEWNET) + socket() and is joined at once: two
 * non-blocking syscalls, the loop's thread never changes namespace); the
 * non-blocking connect to 127.0.0.1:port and the byte relay run on the
 * agent's libevent loop with bufferevents: bounded buffers (a full side
 * stops reading the other), half-close passed on with shutdown(SHUT_WR).
 * Being plain TCP, HTTP, WebSocket upgrades and SSE need nothing special.
 *
 * A forwarder belongs to one container (key, generation, run): it is closed
 * with its connections once that container is gone (fwd_container_gone,
 * see agent.h). Each open connection is a live stream
 * of the sandbox (agent_sb_stream_begin/end): it counts as activity and
 * keeps the sandbox from sleeping while it lasts.
 */
#ifndef SBX_FORWARD_H
#define SBX_FORWARD_H

#include "agent.h"

#include <jansson.h>

#define FWD_MAX_PER_SANDBOX 64      /* forwarded ports per container */
#define FWD_MAX_CONNS 1024          /* open connections per forwarder */
#define FWD_BUF_HIGH (256 * 1024)   /* bytes queued per direction before reading pauses */

/* The forwarder of sb's running container for port (1..65535), made if
 * there is none; address is "host:port" of its listener (out[80]).
 * 0 (*created 1 when new) or -1 with e (CONFLICT when the sandbox has too
 * many, INTERNAL). */
int fwd_open(struct agent *a, struct agent_sb *sb, int port, char *address, size_t addrsz,
	     int *created, struct sbx_err *e);

/* Close the forwarder of key's container for port, with its connections.
 * 1 closed, 0 there was none. */
int fwd_close(struct agent *a, const char *key, int port);

/* The live forwarders of key: [{port, address, generation, connections}];
 * new reference, NULL when out of memory. */
json_t *fwd_list_json(struct agent *a, const char *key);

/* The forwarders' module (module.h): a gone container's forwarders close
 * with their connections. */
extern const struct agent_module fwd_module;

/* Close every forwarder (agent shutdown). */
void fwd_release_all(void);

#endif
