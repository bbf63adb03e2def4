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
 * One exception: a bodiless HTTP/1.1 request (nginx sends one per
 * connection) goes to the app without its "Connection: close", and once
 * the app's answer is complete (struct fwd_resp) and the client has gone,
 * the connection to the app is kept for the forwarder's next such request
 * (sent again on a new connection if the kept one turns out closed before
 * any byte of the answer).
 *
 * The listener is reachable from the agents' network, so the first request
 * head of every connection must carry the node secret (X-Sbx-Node-Secret,
 * which nginx adds on preview routes): it is checked and removed before a
 * byte reaches the sandbox; without it the answer is 401 UNAUTHORIZED and
 * the sandbox is never contacted. Tunnel processes of this host (which
 * cannot add a header) use a second listener of the forwarder on
 * 127.0.0.1, made on demand, that does not ask for it.
 *
 * The preview gateway (agent.preview_gateway, when set): one listener of
 * the node that nginx keeps connections to (an upstream with keepalive per
 * gateway in sbx-agents.conf), for the previews of every sandbox. Each
 * request head carries the node secret and X-Sbx-Target "<tenant>/<id>/
 * <generation>/<port>" (set by nginx from the preview check, never the
 * client's: docs/SECURITY.md); both are removed, the forwarder of that
 * container and port must exist (else 503 NODE_UNAVAILABLE), and the
 * request is relayed by that forwarder like one of its own: its caps, its
 * kept connections to the app. The gateway takes bodiless HTTP/1.1
 * requests without an upgrade only (nginx sends the others to the per-port
 * listener; here they are 400). The answer is relayed up to its end as
 * struct fwd_resp frames it, never a byte further; then the connection
 * reads the next head, which may name another sandbox. An answer it cannot
 * frame is relayed until the app closes, and so is the connection. A kept
 * connection between requests waits FWD_GW_KEEP_S at most.
 *
 * Caps (agent.max_forward_conns, _per_tenant, _per_sandbox): a connection
 * that would pass one, once its head is read, gets 503 NO_CAPACITY (JSON,
 * Retry-After: 1, details {scope, limit}) from the forwarder itself. A
 * connection still sending its head, or refused and not yet gone, has
 * FWD_HEAD_TIMEOUT_S of silence at most, a refused one may send
 * FWD_REFUSED_DRAIN more bytes, and there are at most FWD_MAX_PENDING of
 * them on the node (more are closed at once).
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
#define FWD_MAX_PENDING 1024        /* connections of the node sending their head or refused */
#define FWD_HEAD_MAX (64 * 1024)    /* bytes of the first request head */
#define FWD_HEAD_TIMEOUT_S 10       /* to send that head, or to go after our own answer */
#define FWD_REFUSED_DRAIN (1024 * 1024) /* bytes a refused connection may still send */
#define FWD_BUF_HIGH (256 * 1024)   /* bytes queued per direction before reading pauses */
#define FWD_SPARE 4                 /* sockets made at once in a sandbox's netns, per forwarder */
#define FWD_IDLE_MAX 64             /* idle connections to the app kept per forwarder (one per busy gateway connection) */
#define FWD_IDLE_S 1                /* how long one is kept (below common app keep-alive times) */
#define FWD_GW_KEEP_S 75            /* a gateway connection between requests (nginx keeps 60 s) */

/* The forwarder of sb's running container for port (1..65535), made if
 * there is none; address is "host:port" of its listener (out[80]) or, when
 * local is set, of its local listener on 127.0.0.1 (made if needed; for
 * tunnel processes of this host). 0 (*created 1 when the forwarder is
 * new) or -1 with e (CONFLICT when the sandbox has too many, INTERNAL). */
int fwd_open(struct agent *a, struct agent_sb *sb, int port, int local, char *address,
	     size_t addrsz, int *created, struct sbx_err *e);

/* A non-blocking TCP (IPv4) socket that lives in netns_fd's network
 * namespace (made by a short-lived thread that joins it). -1 with errno. */
int fwd_socket_in_netns(int netns_fd);

/* Up to n such sockets into fds, made by one thread: the count made (at
 * least 1), or -1 with errno when none could be. */
int fwd_sockets_in_netns(int netns_fd, int *fds, unsigned n);

/* The framing of an app's answer, followed as it is relayed, to tell when
 * an HTTP/1.1 answer is complete so that its connection may serve the next
 * request of this forwarder (kept idle FWD_IDLE_S at most, FWD_IDLE_MAX per
 * forwarder). Whatever it cannot be sure of (HTTP/1.0, 1xx, no length,
 * Connection: close, bytes after the answer, a line over 255 bytes) is
 * FWD_RS_RAW: that connection is never reused. Pure. */
enum fwd_rs {
	FWD_RS_STATUS, FWD_RS_HEADER, FWD_RS_BODY, FWD_RS_CHUNK_SIZE, FWD_RS_CHUNK_DATA,
	FWD_RS_CHUNK_END, FWD_RS_TRAILER, FWD_RS_DONE, FWD_RS_RAW,
};

struct fwd_resp {
	enum fwd_rs state;
	int nobody;                  /* answer without a body (HEAD, 204, 304) */
	int chunked, has_length;
	int64_t remain;              /* body or chunk bytes still to come */
	size_t seen;                 /* bytes fed so far */
	size_t ll;                   /* length of the line being read */
	int line_over;               /* it is longer than line[] */
	char line[256];
};

/* rs for the answer to a request (head_request: to a HEAD). */
void fwd_resp_init(struct fwd_resp *rs, int head_request);

/* Feed the next n bytes of the answer; the state after them (bytes after
 * a complete answer make it FWD_RS_RAW). */
enum fwd_rs fwd_resp_feed(struct fwd_resp *rs, const char *p, size_t n);

/* Feed at most n bytes, stopping at the end of the answer: how many of them
 * belong to it (all of them once it is FWD_RS_RAW). Pure. */
size_t fwd_resp_take(struct fwd_resp *rs, const char *p, size_t n);

/* Listen on agent.preview_gateway (nothing when it is empty). 0, or -1
 * with e (INTERNAL: the address is unusable or taken). */
int fwd_gateway_start(struct agent *a, struct sbx_err *e);

/* host:port of the gateway, "" when there is none. Borrowed. */
const char *fwd_gateway_address(void);

/* Split X-Sbx-Target "<tenant>/<id>/<generation>/<port>" into the sandbox
 * key ("<tenant>.<id>", key[AGENT_KEY_MAX]), generation and port. 0, or -1
 * when it is malformed. Pure (unit-tested). */
int fwd_target_parse(const char *v, char *key, int64_t *generation, int *port);

/* Close the forwarder of key's container for port, with its connections.
 * 1 closed, 0 there was none. */
int fwd_close(struct agent *a, const char *key, int port);

/* The live forwarders of key: [{port, address, localAddress, generation,
 * connections}]; new reference, NULL when out of memory. */
json_t *fwd_list_json(struct agent *a, const char *key);

/* Open forwarded connections against their caps: {gateway: {address,
 * accepted, requests, kept}, sandbox: {open, limit}, tenant: {open, limit},
 * node: {open, limit, pending}} for sandbox key of tenant (gateway: the
 * node's, since the agent started); new reference, NULL when out of memory. */
json_t *fwd_counts_json(struct agent *a, const char *key, const char *tenant);

/* Remove every header line called name (case-insensitive) from the request
 * head (len bytes, the request line is kept) and copy the first one's
 * value, trimmed, into value (cut to vsz-1). Updates *len; returns how many
 * lines there were. Pure (unit-tested). */
int fwd_head_take(char *head, size_t *len, const char *name, char *value, size_t vsz);

/* The forwarders' module (module.h): a gone container's forwarders close
 * with their connections. */
extern const struct agent_module fwd_module;

/* How many forwarders are open, and connections being relayed (metrics). */
void fwd_stats(unsigned *forwarders, unsigned *conns);

/* Close every forwarder (agent shutdown). */
void fwd_release_all(void);

#endif
