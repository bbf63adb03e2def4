/*
 * agent.h — the state of one sbx-agent shared by its HTTP handlers: the
 * table of sandboxes on this node and the fencing epochs.
 *
 * A sandbox is known by its key "<tenant>.<id>". The agent remembers the
 * highest epoch it has seen per key (also after the sandbox is gone) and
 * refuses anything older with 409 STALE_EPOCH.
 */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include "capacity.h"
#include "conf.h"
#include "err.h"
#include "httpd.h"
#include "keyidx.h"
#include "module.h"
#include "runtime.h"

#include <event2/event.h>
#include <jansson.h>
#include <stdint.h>

struct registry;
struct agent_lc;
struct pool;
struct agent_images;
struct agent_bg;

#define AGENT_VERSION "0.1.0"
#define AGENT_KEY_MAX 128

struct agent_sb {
	struct agent_sb *next;
	struct agent_sb **pprev;     /* what points at it in agent.sandboxes; NULL unlinked */
	struct keyidx_node idx;      /* in agent.by_key while linked */
	char key[AGENT_KEY_MAX];     /* "<tenant>.<id>" */
	char tenant[64];
	char id[64];
	int64_t generation;
	int64_t epoch;
	char image[512];             /* a local image's name, or a canonical reference (imgref.h) */
	int image_lock_fd;           /* > 0: the image record's flock while the container runs
				      * (agent_images.h); 0 none (fd 0 is never one) */
	enum rt_network network;
	struct rt_limits limits;
	json_t *labels;              /* owned */
	json_t *env;                 /* owned: the sandbox's env object */
	json_t *persist;             /* owned: the paths to save before a stop, or NULL */
	char **base_env;             /* owned: NULL-terminated "K=V" (defaults + env) */
	int64_t created_at;          /* wall ms */
	int64_t started_at;
	int64_t last_active_at;
	struct rt_sandbox *rt;       /* NULL when stopped */
	int dead;                    /* init died; rt_destroy pending */
	/* Lifecycle (agent_lifecycle.c). */
	int64_t sleep_after_ms;      /* stop after this long without activity */
	int keep_alive;              /* never stop for inactivity */
	int streams;                 /* live streams of the current container */
	int64_t run;                 /* unique per container start on this agent (agent.runs) */
	int64_t thawed_serial;       /* lease serial at which the sweep saw this run thawed;
				      * 0: not yet (agent_lifecycle.c) */
	int from_pool;               /* the current container came from the warm pool (pool.h) */
	struct agent_build *build;   /* a start whose container is being built off the
				      * loop (rt_create_async), or NULL */
	int occupying;               /* counted in agent.noccupied (agent_sb_recount) */
	/* State of the current container kept by modules (module.h), made on
	 * first use and released by their container_gone hooks. */
	void *slots[AGENT_MODULES_MAX];
};

/* A live stream (a streaming answer or a request in progress) keeps its
 * sandbox awake. Embed one in the request's state; end is idempotent and
 * safe after the sandbox was stopped, replaced or removed. */
struct agent_stream {
	char key[AGENT_KEY_MAX];
	int64_t run;
	int active;
	int64_t lease_serial;        /* registry_lease_serial() when it began */
};

struct agent_fence {
	struct agent_fence *next;
	char key[AGENT_KEY_MAX];
	int64_t epoch;
	int64_t touched_ms;          /* monotonic: last time this epoch was checked or raised */
};

/* How long the fence of a sandbox that is gone from this node is kept. A
 * late command for it is at most api.agent_timeout old; and a sandbox
 * created again gets a new epoch from Redis' clock, above any old one. */
#define AGENT_FENCE_KEEP_MS (10 * 60 * 1000)

struct agent {
	const struct sbx_conf *conf;
	struct event_base *base;
	struct rt *rt;
	struct httpd *httpd;         /* the API listener (its gauges) */
	struct agent_sb *sandboxes;
	struct keyidx by_key;        /* the linked sandboxes by key (agent_sb_find) */
	unsigned noccupied;          /* linked entries with a container or a build: what
				      * a start counts against the capacity */
	struct agent_fence *fences;
	struct registry *reg;        /* Redis (registry.h) */
	struct agent_lc *lc;         /* sleep timer, fencing sweep (agent_lifecycle.c) */
	struct pool *pool;           /* warm pool (pool.h); NULL when agent.warm_pool is 0 */
	struct agent_images *images; /* registry images (agent_images.h) */
	struct agent_bg *bg;         /* work off the loop (bgwork.h) */
	int64_t runs;                /* container starts so far: the source of agent_sb.run */
	struct capacity cap;         /* what the node takes (capacity.h) */
	int shutting_down;
};

/* The route table of the agent (agent_routes.c). */
extern const struct httpd_route agent_routes[];
extern const size_t agent_routes_count;

/* Build "<tenant>.<id>" into out; -1 if it does not fit. */
int agent_key(char *out, size_t outsz, const char *tenant, const char *id);

/* Fencing: refuse epoch when lower than the highest seen for key
 * (-1, STALE_EPOCH), else remember it as the highest. */
int agent_fence(struct agent *a, const char *key, int64_t epoch, struct sbx_err *e);

/* Forget fences of sandboxes no longer on this node and untouched for
 * AGENT_FENCE_KEEP_MS, so the table does not grow with every id ever seen. */
void agent_fence_prune(struct agent *a, int64_t now_ms);

/* Parse an X-Sbx-Epoch value ("" / NULL → -1 with VALIDATION). */
int agent_parse_epoch(const char *v, int64_t *out, struct sbx_err *e);

/* The sandbox of key on this node (a hash lookup), or NULL. */
struct agent_sb *agent_sb_find(struct agent *a, const char *key);

/* Add sb (its key set) to a's sandboxes and their index by key: 0, or -1
 * (out of memory) with nothing changed. agent_sb_unlink takes it out of
 * both again (freeing nothing). */
int agent_sb_link(struct agent *a, struct agent_sb *sb);
void agent_sb_unlink(struct agent *a, struct agent_sb *sb);
/* After sb's container (rt) or build was set or cleared: keep
 * a->noccupied in step (link and unlink do it themselves). */
void agent_sb_recount(struct agent *a, struct agent_sb *sb);

/* The container of sb while it runs; NULL when stopped, or when its init
 * died and it waits to be released at the next turn of the loop (only
 * rt_destroy is valid on it then). Borrowed. */
struct rt_sandbox *agent_sb_container(const struct agent_sb *sb);

/* Refuse to start work (a data call, a container start) while this node's
 * lease has lapsed (registry_lease_valid): 503 NODE_UNAVAILABLE. A node
 * that was stopped or cut off past its TTL may have been replaced, and a
 * request held across the gap carries an epoch nobody has fenced here yet. */
int agent_lease_check(struct agent *a, struct sbx_err *e);

/* Destroy every sandbox (shutdown). */
void agent_sb_destroy_all(struct agent *a);

/* Merge the exec env object (values: string, or null = unset) over a
 * NULL-terminated "K=V" base; new NULL-terminated heap array of heap strings
 * (agent_env_free) or NULL on allocation failure. */
char **agent_env_merge(char *const *base, const json_t *overlay);
void agent_env_free(char **env);

/* Check an env object of the API (create or exec): names are shell names,
 * values strings without NUL (or null when allow_null). 0 or -1 (400). */
int agent_env_check(const json_t *env, int allow_null, struct sbx_err *e);

/* Stop the container of sb (the entry stays, as stopped) / remove the entry.
 * Both end in agent_container_gone when sb had a container. */
void agent_sb_stop(struct agent *a, struct agent_sb *sb);
void agent_sb_remove(struct agent *a, struct agent_sb *sb);

/* Answer r with status and body (owned; NULL: no body) once nothing of the
 * stopped container of key is left on the host (rt_after_gone): what a
 * stop, a delete or a restart promises its caller. At once when nothing
 * of it is dying; else r is deferred. */
void agent_reply_after_gone(struct agent *a, struct httpd_req *r, const char *key, int status,
			    json_t *body);

/* "The container of sb is gone": the one place where the modules that keep
 * state per container (sessions, processes, tunnels, forwarders) release
 * it: the container_gone hooks of agent_modules[] (module.h), in order.
 * agent_sb_stop calls it exactly once per container, whatever the
 * reason: stop for sleep, stop or destroy by the API, init death (from the
 * loop, after agent_sb_died), replacement by another generation, agent
 * shutdown (agent_sb_destroy_all).
 *
 * Order: it runs after rt_destroy of the container returned and sb->rt was
 * set to NULL. Every process callback of the container has then fired
 * (with sandbox_gone), so nothing inside it is left to signal; what lives
 * outside it (listeners, connections, tunnel processes on the host) is the
 * module's own to close. sb itself is still valid, sb->run is the run of
 * the gone container, and the entry may be freed right after the hook.
 * A hook must not start or stop a container. */
void agent_container_gone(struct agent *a, struct agent_sb *sb);

/* The sandbox of key when its container runs, and, when generation >= 0,
 * is of that generation. NULL with e filled: 404 SANDBOX_NOT_FOUND (id
 * names it in the message), 409 CONFLICT for another generation. */
struct agent_sb *agent_sb_running(struct agent *a, const char *key, const char *id,
				  int64_t generation, struct sbx_err *e);

#endif
