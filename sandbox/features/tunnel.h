/*
 * tunnel.h — tunnel processes of the agent: an operator-installed program
 * (cloudflared) that publishes one sandbox port's forwarder (forward.h)
 * under a public URL. The API pool is stateless, so such a process runs
 * on the host that owns the sandbox, under this agent:
 *
 *   PUT    /agent/v1/sandboxes/{tenant}/{id}/tunnels/{port}  body {provider, generation?}
 *          -> 200 {port, url, provider, pid, upstream, generation, created}
 *   GET    /agent/v1/sandboxes/{tenant}/{id}/tunnels/{port}  -> the same, 404 when none
 *   DELETE /agent/v1/sandboxes/{tenant}/{id}/tunnels/{port}  -> 204 (idempotent)
 *
 * PUT and DELETE carry X-Sbx-Epoch and are fenced. A PUT starts the
 * provider's program for the port's forwarder (made if needed) or returns
 * the running one; it answers once the program printed its URL and its
 * readiness line, or 503 after agent.tunnel_timeout (the program is then
 * killed). Concurrent PUTs for one port share one process.
 *
 * Caps: a new process beyond agent.max_tunnels_per_sandbox is a 429
 * QUOTA_EXCEEDED, beyond agent.max_tunnels (every live process of the
 * node) a 503 NO_CAPACITY. Confinement: between fork and exec the child
 * joins the sandbox's cgroups (its memory, CPU and pids limits count it),
 * drops the bounding and ambient capability sets, becomes
 * agent.tunnel_user (never root) without supplementary groups or any
 * capability, and sets no_new_privs. Its upstream is the forwarder's
 * local listener (127.0.0.1), which needs no node secret.
 *
 * Providers are behind struct tunnel_provider, one file each
 * (tunnel_cloudflared.c). "builtin" tunnels need nothing on the agent —
 * their URLs are hosts of our own nginx routed to the forwarder — so the
 * provider choice itself lives in sbx-api (fcgi/api_tunnels.c) and only
 * providers that run a process are known here.
 *
 * Lifetime: a process belongs to one container (key, generation, run) and
 * one forwarder address. It is stopped (SIGTERM, SIGKILL after
 * agent.tunnel_stop_grace) by DELETE, and when its container is gone
 * (destroy, stop, restart: the container_gone hook of tunnel_module); it
 * dies with the agent (PR_SET_PDEATHSIG). A process that exits on its own is evicted:
 * compare-and-delete of its record in sbx:sb:{tenant/id}:tunnels (only when
 * the record's url is the dead process's url) and a tunnel-down event.
 */
#ifndef SBX_TUNNEL_H
#define SBX_TUNNEL_H

#include "agent.h"
#include "call.h"

#include <stddef.h>

#define TUNNEL_URL_MAX 256
#define TUNNEL_LINE_MAX 4096        /* longer output lines are cut */
#define TUNNEL_MAX_ARGV 16

/* A provider that runs a process. Pure functions of their inputs. */
struct tunnel_provider {
	const char *name;
	/* The program to run, resolved on this node (absolute path into out).
	 * 0, or -1 with e = VALIDATION "tunnel provider '<name>' is not
	 * available on this node". */
	int (*program)(const struct sbx_conf *c, char *out, size_t n, struct sbx_err *e);
	/* argv (NULL-terminated, at most TUNNEL_MAX_ARGV-1 entries, pointing
	 * into program/upstream_url or static strings) to publish upstream_url. */
	void (*argv)(const char *program, const char *upstream_url, const char **argv);
	/* One line of the program's output (stdout and stderr, no newline):
	 * 1 with the public URL copied into url when the line announces it. */
	int (*line_url)(const char *line, char *url, size_t n);
	/* 1 when the line says the tunnel serves traffic. */
	int (*line_ready)(const char *line);
};

extern const struct tunnel_provider tunnel_cloudflared;

/* The provider of that name, NULL when the agent knows none. */
const struct tunnel_provider *tunnel_provider_find(const char *name);

/* cloudflared's output (tunnel_cloudflared.c; exported for the unit tests). */
int tunnel_cf_line_url(const char *line, char *url, size_t n);
int tunnel_cf_line_ready(const char *line);

/* Resolve a program name the way execvp would (a name with a '/' is taken
 * as it is) into an absolute path of an executable regular file. 0 or -1. */
int tunnel_which(const char *name, char *out, size_t n);

/* Handlers (tunnel.c). */
/* The tunnels' module (module.h): a gone container's tunnel processes stop. */
extern const struct agent_module tunnel_module;

/* The tunnel routes …/tunnels/{port} (call.h): PUT (CONTROL | FENCED |
 * LIVE | PORT | JSON) starts or confirms the process and answers when its
 * URL is known; GET (CONTROL | PORT); DELETE (CONTROL | FENCED | PORT). */
extern const struct jsonv_field agent_tunnel_put_fields[];
int agent_tunnel_put(struct agent_call *c, struct sbx_err *e);
int agent_tunnel_get(struct agent_call *c, struct sbx_err *e);
int agent_tunnel_delete(struct agent_call *c, struct sbx_err *e);

#endif
