/*
 * ws.h — the server side of RFC 6455 WebSocket: the opening handshake's
 * accept key, frame encoding, an incremental parser of client frames
 * (masking required, fragmentation, control frames, close), and a
 * connection on the agent's event loop over a socket httpd handed over
 * after the 101 answer (httpd_reply_upgrade).
 *
 * The parser and the encoder are pure (unit-tested); struct ws_conn owns a
 * bufferevent on the socket: it answers pings, echoes a close, bounds
 * what waits to be sent, and reports messages and its end by callbacks.
 */
#ifndef SBX_WS_H
#define SBX_WS_H

#include "buf.h"
#include "httpd.h"

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#define WS_OP_CONT 0x0
#define WS_OP_TEXT 0x1
#define WS_OP_BINARY 0x2
#define WS_OP_CLOSE 0x8
#define WS_OP_PING 0x9
#define WS_OP_PONG 0xA

#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL 1002
#define WS_CLOSE_BAD_DATA 1007
#define WS_CLOSE_POLICY 1008
#define WS_CLOSE_TOO_BIG 1009

#define WS_ACCEPT_LEN 28      /* base64 of a SHA-1 */

/* SHA-1 of n bytes (the handshake's only use of it). */
void ws_sha1(const void *data, size_t n, unsigned char out[20]);

/* Sec-WebSocket-Accept of a client's Sec-WebSocket-Key: 0, or -1 when the
 * key is not the base64 of 16 bytes. out is NUL-terminated. */
int ws_accept_key(const char *key, char out[WS_ACCEPT_LEN + 1]);

/* Append one unmasked (server) frame, FIN set, to out. 0 or -1 (out full). */
int ws_frame(struct buf *out, int opcode, const void *data, size_t n);

/* An incremental parser of client frames. */
struct ws_parser {
	size_t max_message;       /* a longer message is a WS_CLOSE_TOO_BIG error */
	struct buf msg;           /* the data message being assembled */
	int msg_op;               /* its opcode, 0 when none is open */
	/* the frame in progress */
	unsigned char hdr[14];
	size_t hlen;
	int in_payload;           /* the header is taken: reading the payload */
	int op, fin, masked;
	uint64_t len, got;
	unsigned char mask[4];
	unsigned char ctl[125];   /* a control frame's payload */
};

/* One complete message (data or control) out of ws_parse. For a close,
 * code is its status (1005 when it carries none) and data its reason. */
struct ws_msg {
	int op;
	const char *data;         /* borrowed until the next ws_parse */
	size_t len;
	int code;
};

void ws_parser_init(struct ws_parser *p, size_t max_message);
void ws_parser_release(struct ws_parser *p);

/* Consume up to n bytes of data: returns how many were used (stops right
 * after a complete message: 1 and *m filled, else 0 when all was used),
 * or -1 with *close_code set (a protocol violation: the connection must be
 * closed with that code). Call again with the rest. */
ssize_t ws_parse(struct ws_parser *p, const char *data, size_t n, struct ws_msg *m, int *got,
		 int *close_code);

struct ws_conn;

struct ws_conn_ops {
	/* A text or binary message (complete, unfragmented for the caller). */
	void (*on_message)(void *arg, int op, const char *data, size_t n);
	/* The connection is over (closed by either side, or broken); the
	 * ws_conn is freed right after this returns. */
	void (*on_close)(void *arg);
	/* What waited to be sent fell below the low mark again. May be NULL. */
	void (*on_drained)(void *arg);
};

/* Take over the upgraded connection u with its socket fd (extra: bytes
 * the server had read past the handshake, copied); u is closed when the
 * connection ends (also when the server stops: on_close runs then too).
 * NULL on allocation failure: u is closed, on_close does not run. */
struct ws_conn *ws_conn_new(struct event_base *base, struct httpd_upgrade *u, int fd,
			    const char *extra, size_t extra_len, size_t max_message,
			    const struct ws_conn_ops *ops, void *arg);

/* Queue a message. 0, or -1 when the connection is closing. */
int ws_conn_send(struct ws_conn *c, int op, const void *data, size_t n);
/* Bytes waiting to be sent. */
size_t ws_conn_queued(const struct ws_conn *c);
/* Stop (1) or go on (0) reading from the client (backpressure). */
void ws_conn_pause(struct ws_conn *c, int on);
/* Send a close frame with code and reason, then end once it is written
 * (on_close runs then, not from inside this call). */
void ws_conn_close(struct ws_conn *c, int code, const char *reason);
/* End at once without a close frame and without on_close; frees c. */
void ws_conn_free(struct ws_conn *c);

#endif
