/*
 * agentc.h — control calls from sbx-api to a node agent (libcurl).
 *
 * Every call carries X-Sbx-Node-Secret (cluster.secret) and, when epoch >= 0,
 * X-Sbx-Epoch; it is bounded by api.agent_timeout. Initialise in each
 * worker (never in the master, before fork).
 */
#ifndef SBX_AGENTC_H
#define SBX_AGENTC_H

#include "conf.h"
#include "err.h"

#include <jansson.h>
#include <stdint.h>

int agentc_init(const struct sbx_conf *c, struct sbx_err *e);
void agentc_release(void);

/* The request id (http_req's, already of the safe shape; "-" or NULL for
 * none) that every following call sends as X-Request-Id, so that the
 * agent's log lines of a control call carry it as its data calls do. The
 * worker sets it for each request it serves. */
void agentc_set_request_id(const char *id);

/* An address fit for an agent or its forwarder, and for nginx's
 * proxy_pass: "host:port" or "[v6]:port" of [A-Za-z0-9.:[]-], shorter than
 * 128 bytes. 1 ok, 0 not. */
int agentc_address_ok(const char *a);

struct agentc_reply {
	long status;          /* HTTP status of the agent's answer */
	json_t *body;         /* parsed JSON body (new reference) or NULL */
};

/* method ("GET", "PUT", "POST", "DELETE") to http://address/path with an
 * optional JSON body. 0 with out filled (any HTTP status), or -1 with e =
 * NODE_UNAVAILABLE when the agent cannot be reached or answers garbage.
 * Free out with agentc_reply_release(). */
int agentc_call(const char *method, const char *address, const char *path, const json_t *body,
		int64_t epoch, struct agentc_reply *out, struct sbx_err *e);
/* The same with its own time bound instead of api.agent_timeout (calls
 * that wait for the agent on purpose, e.g. a tunnel process starting). */
int agentc_call_timeout(const char *method, const char *address, const char *path,
			const json_t *body, int64_t epoch, int64_t timeout_ms,
			struct agentc_reply *out, struct sbx_err *e);
void agentc_reply_release(struct agentc_reply *r);

/* The time bound of a call that may pull image first: [images]
 * pull_timeout for a registry reference, else api.agent_timeout. */
int64_t agentc_pull_timeout_ms(const char *image);

/* The error answer rep of the agent at address as ours; always -1 with e.
 * A 4xx with a stable code of that status is the client's (bad input, a
 * limit, a conflict: an unknown image stays a 400) and keeps code and
 * message, as do NO_CAPACITY and NO_SPACE; a 401/403/404/405 (the node and
 * the API disagree on the secret or the route table), any other 5xx or an
 * answer without a code is NODE_UNAVAILABLE ("the node cannot <what>"),
 * logged. */
int agentc_error(const char *address, const struct agentc_reply *rep, const char *what,
		 struct sbx_err *e);

#endif
