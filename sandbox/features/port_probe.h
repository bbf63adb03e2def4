/*
 * port_probe.h — one HTTP readiness probe of a port inside a sandbox: a
 * GET of a path on 127.0.0.1:{port} in the sandbox's network namespace,
 * reporting the status code of the answer's first line.
 */
#ifndef SBX_PORT_PROBE_H
#define SBX_PORT_PROBE_H

#include <event2/event.h>

#define PORT_PROBE_PATH_MAX 1024

struct port_probe;

/* The probe's result: the HTTP status (100..599), or 0 when there was no
 * readable answer (refused, reset, closed, garbage, timed out). */
typedef void (*port_probe_cb)(void *arg, int status);

/* Start a probe of port (1..65535) for path (starts with '/', printable
 * ASCII without spaces, at most PORT_PROBE_PATH_MAX) in netns_fd's
 * namespace, giving up after timeout_ms. cb runs once, from the event
 * loop, unless the probe is cancelled first; the probe is freed after cb
 * returns. NULL (errno set) when it cannot start: cb never runs. */
struct port_probe *port_probe_http(struct event_base *base, int netns_fd, int port,
				   const char *path, int timeout_ms, port_probe_cb cb, void *arg);

/* Stop a probe that has not reported yet and free it (NULL: no-op). */
void port_probe_cancel(struct port_probe *p);

/* 1 when path is one port_probe_http accepts. */
int port_probe_path_ok(const char *path);

#endif
