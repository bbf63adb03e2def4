/*
 * preview.h — what preview URLs and tunnels share in sbx-api: ports, host
 * names, URLs, tokens, the sandbox's current generation, the forwarder on
 * the owning agent, and the Redis keys (docs/REDIS.md).
 *
 * Records carry the generation of the container they were made for and
 * the sandbox's createdAt ("incarnation": a destroyed and re-created
 * sandbox of the same id starts its generations again). A record of
 * another generation or incarnation is dead: never served, cleaned when
 * seen.
 *
 * Keys (the sandbox's hash tag where a key belongs to one sandbox):
 *   sbx:sb:{tenant/id}:ports           hash port -> JSON {token, generation,
 *                                      incarnation, forward, gateway?, createdAt,
 *                                      activatedAt}
 *   sbx:preview:<sha256(label)>        string: tenant (label "{port}-{id}-{token}")
 *   sbx:sb:{tenant/id}:tunnels         hash port -> JSON {id, port, url, provider,
 *                                      generation, incarnation, forward, createdAt}
 *   sbx:sb:{tenant/id}:tunnels:claim:<port>  string, PX: single-flight claim
 *   sbx:tunnel:<tunnel id>             string: "tenant/id/port"
 */
#ifndef SBX_PREVIEW_H
#define SBX_PREVIEW_H

#include "conf.h"
#include "err.h"
#include "rkeys.h"
#include "lifecycle.h"

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdint.h>

#define PREVIEW_PORT_MIN 1024
#define PREVIEW_PORT_MAX 65535
#define PREVIEW_TOKEN_MAX 16        /* [a-z0-9_]{1,16} */
#define PREVIEW_TUNNEL_ID_LEN 16    /* [a-z0-9]{16} */
#define PREVIEW_MAX_PORTS 64        /* exposed ports (and tunnels) per sandbox */
#define PREVIEW_LABEL_MAX 96
#define PREVIEW_ADDR_MAX 128

/* A port of the API path: canonical decimal (no sign, no leading zero) in
 * [PREVIEW_PORT_MIN, PREVIEW_PORT_MAX]. 0 or -1 with e = INVALID_PORT. */
int preview_parse_port(const char *s, int *port, struct sbx_err *e);

/* The first label(s) of host in front of ".<domain>" (case as given; nginx
 * lowercases $host). 0 or -1 when host is not under domain. */
int preview_host_label(const char *host, const char *domain, char *label, size_t n);

/* Split "{port}-{id}-{token}". 0 or -1 when it is not that shape (port as
 * preview_parse_port, id as ids_valid_sandbox, token as ids_valid_token). */
int preview_parse_label(const char *label, int *port, char id[64], char token[PREVIEW_TOKEN_MAX + 1]);

/* "t-<id>" of a tunnel host: 1 with the id copied, 0 when label is not one. */
int preview_tunnel_label(const char *label, char id[PREVIEW_TUNNEL_ID_LEN + 1]);

/* The public URL of a host label: scheme and port from api.public_url, host
 * "<label>.<api.preview_domain>". 0 or -1 (INTERNAL: bad config). */
int preview_url(const struct sbx_conf *c, const char *label, char *out, size_t n,
		struct sbx_err *e);

/* n random characters of [a-z0-9] + NUL into out (n+1 bytes). 0 or -1. */
int preview_random_id(char *out, size_t n, struct sbx_err *e);

/* Constant-time equality of two short strings (time depends on the length
 * of b only). 1 equal. */
int preview_const_equal(const char *a, const char *b);

/* The sandbox as these records need it. */
struct preview_sb {
	char state[16];
	char node[64];
	char incarnation[40];       /* createdAt */
	int64_t generation;
	int64_t epoch;
};

/* The fields of an HMGET state node createdAt generation epoch reply;
 * 0 filled, 1 no record. */
int preview_sb_from_reply(const redisReply *r, struct preview_sb *s);
/* Append that HMGET for tenant/id to the current store batch. */
int preview_sb_append(const char *tenant, const char *id, struct sbx_err *e);
/* Read it: 0 filled, 1 no record, -1 with e. */
int preview_sb_load(const char *tenant, const char *id, struct preview_sb *s, struct sbx_err *e);

/* A record's JSON is live for s: generation and incarnation match. */
int preview_record_live(const json_t *rec, const struct preview_sb *s);

/* Ask the agent at o for the forwarder of port (made if needed, stamped
 * with o->generation); its address into addr and, when gateway is not
 * NULL, the node's preview gateway into gateway[PREVIEW_ADDR_MAX] ("" when
 * the agent has none). 0 or -1 with e (404 when the container is gone,
 * 409 when its generation moved on, 503). */
int preview_forward_open(const char *tenant, const char *id, const struct lc_owner *o, int port,
			 char addr[PREVIEW_ADDR_MAX], char *gateway, struct sbx_err *e);

/* Close the forwarder of port on the sandbox's agent unless an active
 * preview or live tunnel still uses it. Best effort, never fails. */
void preview_forward_release(const char *tenant, const char *id, int port);

/* An address nginx may proxy to ("host:port", [v6]:port). 1 ok. */
int preview_address_ok(const char *a);

/* One field of a sandbox's per-port hash, for preview_list: field (the
 * port as stored), rec (its JSON, NULL when it is none; borrowed) and raw
 * (the stored text). A new item for the answer with *port set, or NULL to
 * leave the field out. */
typedef json_t *preview_item_fn(const char *field, const json_t *rec, const char *raw,
				const struct preview_sb *s, void *ctx, int *port);

/* The records of sbx:sb:{tenant/id}:<kind> (kind "ports" or "tunnels")
 * made into items by fn and sorted by port: new {"<kind>": [...]}, or NULL
 * with e (SANDBOX_NOT_FOUND, REDIS_UNAVAILABLE, INTERNAL). */
json_t *preview_list(const char *tenant, const char *id, const char *kind, preview_item_fn *fn,
		     void *ctx, struct sbx_err *e);

/* The record of port in sbx:sb:{tenant/id}:<kind>: 0 with *val a new copy
 * (free(); NULL when there is none), or -1 with e (SANDBOX_NOT_FOUND when
 * the sandbox does not exist). */
int preview_record_get(const char *tenant, const char *id, const char *kind, int port, char **val,
		       struct sbx_err *e);

/* Delete the record of port in sbx:sb:{tenant/id}:<kind> when it still
 * holds value (compare and delete). 0 or -1 with e. */
int preview_record_del(const char *tenant, const char *id, const char *kind, int port,
		       const char *value, struct sbx_err *e);

/* A string reply parsed as JSON: new reference, NULL when it is none. */
json_t *preview_reply_json(const redisReply *r);

/* The index key "sbx:preview:<sha256 of {port}-{id}-{token}>" into out.
 * 0 or -1 (too long). */
int preview_index_key(int port, const char *id, const char *token, char out[RKEYS_MAX]);

/* Delete the string key when it still holds value. Best effort. */
void preview_cad(const char *key, const char *value);

/* Delete every preview and tunnel record of tenant/id and their index
 * keys (for destroy). Best effort. */
void preview_forget_sandbox(const char *tenant, const char *id);

#endif
