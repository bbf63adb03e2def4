/*
 * auth.h — API keys: "sbx_" + 40 lowercase hex chars (20 random bytes).
 * Redis keeps only the SHA-256 of a key: sbx:apikey:<sha256 hex> is a hash
 * {tenant, admin "0"/"1", createdAt}.
 */
#ifndef SBX_AUTH_H
#define SBX_AUTH_H

#include "err.h"
#include "rkeys.h"

#define AUTH_KEY_LEN 44        /* "sbx_" + 40 hex */

struct http_req;

/* 1 when key has the shape of an API key, else 0. */
int auth_key_valid_shape(const char *key);

/* A fresh random key into out (AUTH_KEY_LEN + 1). 0 or -1 with e. */
int auth_key_generate(char out[AUTH_KEY_LEN + 1], struct sbx_err *e);

/* The Redis key of an API key: "sbx:apikey:<sha256 hex>" into out. */
void auth_key_redis_name(const char *key, char out[RKEYS_MAX]);

/* Create the key record for tenant in Redis (store must be initialised)
 * and write the key text into out. 0 or -1 with e. */
int auth_key_create(const char *tenant, int admin, char out[AUTH_KEY_LEN + 1], struct sbx_err *e);

/* Authenticate r from "Authorization: Bearer <key>": fills r->tenant,
 * r->admin, r->authed. With "Sbx-Tenant: T" an admin key acts as tenant T
 * (r->tenant = T; a tenant key naming another tenant: FORBIDDEN). -1 with
 * e = UNAUTHORIZED (missing header vs invalid key), FORBIDDEN, VALIDATION
 * or REDIS_UNAVAILABLE. */
int auth_request(struct http_req *r, struct sbx_err *e);

#endif
