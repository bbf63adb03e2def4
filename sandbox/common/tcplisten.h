/*
 * tcplisten.h — listen addresses "host:port" of both tiers (agent.listen,
 * agent.metrics_listen, api.metrics_listen): numeric IPv4, or IPv6 in
 * brackets, and a port 1..65535.
 */
#ifndef SBX_TCPLISTEN_H
#define SBX_TCPLISTEN_H

#include "err.h"

#include <stddef.h>

/* Split addr into host (without brackets) and port; 0 or -1. Pure. */
int tcplisten_parse(const char *addr, char *host, size_t hostsz, int *port);

/* A TCP socket listening on addr (SO_REUSEADDR), non-blocking and
 * close-on-exec: the fd, or -1 with e (VALIDATION for a bad address). */
int tcplisten_open(const char *addr, int backlog, struct sbx_err *e);

#endif
