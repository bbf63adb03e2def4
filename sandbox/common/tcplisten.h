/*
 * tcplisten.h — listen addresses "host:port" of both tiers (agent.listen,
 * agent.metrics_listen, api.metrics_listen): numeric IPv4, or IPv6 in
 * brackets, and a port 1..65535.
 */
#ifndef SBX_TCPLISTEN_H
#define SBX_TCPLISTEN_H

#include "err.h"

#include <stddef.h>
#include <sys/socket.h>

/* Split addr into host (without brackets) and port; 0 or -1. Pure. */
int tcplisten_parse(const char *addr, char *host, size_t hostsz, int *port);

/* The socket address of numeric IPv4 or IPv6 host (without brackets) and
 * port into *ss (zeroed first), its length into *len; 0, or -1 when host
 * is neither. Pure. */
int tcplisten_sockaddr(const char *host, int port, struct sockaddr_storage *ss,
		       socklen_t *len);

/* A TCP socket listening on addr (SO_REUSEADDR), non-blocking and
 * close-on-exec: the fd, or -1 with e (VALIDATION for a bad address). */
int tcplisten_open(const char *addr, int backlog, struct sbx_err *e);

#endif
