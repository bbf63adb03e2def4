/*
 * agent_sandboxes.c — the agent's sandbox table, fencing, and the internal
 * control routes sbx-api calls (/agent/v1/sandboxes/...).
 */
#include "agent_sandboxes.h"
#include "agent_images.h"
#include "module.h"
#include "snapstore.h"
#include "agent_metrics.h"
#include "registry.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "pool.h"
#include "spec.h"
#include "util.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int agent_key(char *out, size_t outsz, const char *tenant, const char *id)
{
	int n = snprintf(out, outsz, "%s.%s", tenant, id);
	return n < 0 || (size_t)n >= outsz ? -1 : 0;
}

int agent_fence(struct agent *a, const char *key, int64_t epoch, struct sbx_err *e)
{
	struct agent_fence *f;

	for (f = a->fences; f; f = f->next)
		if (strcmp(f->key, key) == 0)
			break;
	if (f && epoch < f->epoch)
		return err_set(e, SBX_E_STALE_EPOCH, "epoch %lld is older than %lld",
			       (long long)epoch, (long long)f->epoch);
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f)
			return err_sys(e, ENOMEM, "fence");
		snprintf(f->key, sizeof(f->key), "%s", key);
		f->next = a->fences;
		a->fences = f;
	}
	f->epoch = epoch;
	f->touched_ms = util_now_ms();
	return 0;
}

void agent_fence_prune(struct agent *a, int64_t now_ms)
{
	struct agent_fence **pp = &a->fences;

	while (*pp) {
		struct agent_fence *f = *pp;

		if (now_ms - f->touched_ms >= AGENT_FENCE_KEEP_MS && !agent_sb_find(a, f->key)) {
			*pp = f->next;
			free(f);
		} else {
			pp = &f->next;
		}
	}
}

int agent_parse_epoch(const char *v, int64_t *out, struct sbx_err *e)
{
	if (!v || !*v)
		return err_set(e, SBX_E_VALIDATION, "the X-Sbx-Epoch header is required");
	if (util_parse_i64(v, 0, INT64_MAX, out) < 0)
		return err_set(e, SBX_E_VALIDATION, "X-Sbx-Epoch must be a non-negative integer");
	return 0;
}

void agent_sb_recount(struct agent *a, struct agent_sb *sb)
{
	int now = sb->pprev && (sb->rt || sb->build);

	if (now && !sb->occupying)
		a->noccupied++;
	else if (!now && sb->occupying)
		a->noccupied--;
	sb->occupying = now;
}

int agent_sb_link(struct agent *a, struct agent_sb *sb)
{
	if (keyidx_add(&a->by_key, &sb->idx, sb->key) < 0)
		return -1;
	sb->next = a->sandboxes;
	if (sb->next)
		sb->next->pprev = &sb->next;
	sb->pprev = &a->sandboxes;
	a->sandboxes = sb;
	agent_sb_recount(a, sb);
	return 0;
}

/* By the index once agent_sb_link has built it; a list the caller built
 * by hand (unit tests) is searched in full. */
struct agent_sb *agent_sb_find(struct agent *a, const char *key)
{
	if (!a->by_key.b) {
		for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next)
			if (strcmp(sb->key, key) == 0)
				return sb;
		return NULL;
	}
	return KEYIDX_OWNER(keyidx_find(&a->by_key, key), struct agent_sb, idx);
}

struct rt_sandbox *agent_sb_container(const struct agent_sb *sb)
{
	return sb->dead ? NULL : sb->rt;
}

void agent_env_free(char **env)
{
	if (!env)
		return;
	for (char **p = env; *p; p++)
		free(*p);
	free(env);
}

static int env_key_matches(const char *kv, const char *key)
{
	size_t kl = strlen(key);
	return strncmp(kv, key, kl) == 0 && kv[kl] == '=';
}

char **agent_env_merge(char *const *base, const json_t *overlay)
{
	size_t nb = 0, no = overlay ? json_object_size(overlay) : 0, n = 0;
	const char *k;
	json_t *v;
	char **env;

	while (base && base[nb])
		nb++;
	env = calloc(nb + no + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < nb; i++) {
		int overridden = 0;
		if (overlay)
			json_object_foreach((json_t *)overlay, k, v)
				if (env_key_matches(base[i], k))
					overridden = 1;
		if (overridden)
			continue;
		if (!(env[n++] = strdup(base[i])))
			goto fail;
	}
	if (overlay) {
		json_object_foreach((json_t *)overlay, k, v) {
			if (!json_is_string(v))
				continue;
			if (asprintf(&env[n], "%s=%s", k, json_string_value(v)) < 0) {
				env[n] = NULL;
				goto fail;
			}
			n++;
		}
	}
	env[n] = NULL;
	return env;
fail:
	agent_env_free(env);
	return NULL;
}

int agent_env_check(const json_t *env, int allow_null, struct sbx_err *e)
{
	return spec_env(env, allow_null, e);
}

static const char *network_name(enum rt_network n)
{
	return n == RT_NET_EGRESS ? "egress" : "none";
}

json_t *agent_sb_json(const struct agent_sb *sb)
{
	char created[32], started[32], active[32];
	int running = sb->rt && !sb->dead;

	util_iso8601(sb->created_at, created);
	util_iso8601(sb->started_at, started);
	util_iso8601(sb->last_active_at, active);
	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:{s:I, s:f, s:I, s:I}, s:O, s:s, s:s, "
			 "s:s, s:I, s:I, s:I, s:b, s:i, s:b}",
			 "id", sb->id, "tenant", sb->tenant, "state", running ? "running" : "stopped",
			 "generation", (json_int_t)sb->generation, "epoch", (json_int_t)sb->epoch,
			 "image", sb->image, "network", network_name(sb->network), "resources",
			 "memoryMiB", (json_int_t)sb->limits.memory_mib, "cpus",
			 (double)sb->limits.cpus_milli / 1000.0, "pids", (json_int_t)sb->limits.pids,
			 "diskMiB", (json_int_t)sb->limits.disk_mib, "labels", sb->labels, "createdAt",
			 created, "startedAt", started, "lastActiveAt", active, "memoryBytes",
			 (json_int_t)(running ? rt_memory_bytes(sb->rt) : 0), "oomKills",
			 (json_int_t)(running ? rt_oom_kills(sb->rt) : 0), "sleepAfter",
			 (json_int_t)sb->sleep_after_ms, "keepAlive", sb->keep_alive, "liveStreams",
			 sb->streams, "fromPool", sb->from_pool);
}

static void sb_free(struct agent_sb *sb)
{
	json_decref(sb->labels);
	json_decref(sb->env);
	json_decref(sb->persist);
	agent_env_free(sb->base_env);
	free(sb);
}

void **agent_sb_slot(struct agent_sb *sb, const struct agent_module *m)
{
	for (size_t i = 0; agent_modules[i]; i++)
		if (agent_modules[i] == m)
			return &sb->slots[i];
	log_error("module '%s' is not in agent_modules[]", m->name);
	abort();
}

void agent_container_gone(struct agent *a, struct agent_sb *sb)
{
	for (size_t i = 0; agent_modules[i]; i++)
		if (agent_modules[i]->container_gone)
			agent_modules[i]->container_gone(a, sb);
}

static void build_cancel(struct agent_sb *sb, struct httpd_req *del);

void agent_sb_stop(struct agent *a, struct agent_sb *sb)
{
	if (sb->build)
		build_cancel(sb, NULL);
	if (sb->image_lock_fd > 0)
		close(sb->image_lock_fd);
	sb->image_lock_fd = 0;
	if (sb->rt) {
		struct rt_sandbox *rsb = sb->rt;
		sb->rt = NULL;
		agent_metrics_container_end(rsb);
		rt_destroy(a->rt, rsb);
		agent_container_gone(a, sb);
	}
	sb->dead = 0;
	sb->streams = 0; /* they belonged to the container that is gone */
	agent_sb_recount(a, sb);
}

struct gone_reply {
	struct httpd_req *r;       /* NULL once the request is over */
	int status;
	json_t *body;
};

static void gone_reply_closed(void *arg, int failed)
{
	struct gone_reply *g = arg;

	(void)failed;
	g->r = NULL;
}

static void gone_reply_send(struct httpd_req *r, int status, json_t *body)
{
	if (body)
		httpd_reply_json(r, status, body);
	else
		httpd_reply_empty(r, status);
}

static void gone_reply_done(void *arg)
{
	struct gone_reply *g = arg;

	if (g->r) {
		httpd_on_close(g->r, NULL, NULL);
		gone_reply_send(g->r, g->status, g->body);
	} else {
		json_decref(g->body);
	}
	free(g);
}

static void gone_nothing(void *arg)
{
	(void)arg;
}

void agent_reply_after_gone(struct agent *a, struct httpd_req *r, const char *key, int status,
			    json_t *body)
{
	struct gone_reply *g = NULL;

	if (!rt_key_dying(a->rt, key) || !(g = calloc(1, sizeof(*g)))) {
		/* out of memory: rt_after_gone waits on the loop instead */
		if (rt_key_dying(a->rt, key))
			rt_after_gone(a->rt, key, gone_nothing, NULL);
		gone_reply_send(r, status, body);
		return;
	}
	g->r = r;
	g->status = status;
	g->body = body;
	httpd_on_close(r, gone_reply_closed, g);
	httpd_defer(r);
	rt_after_gone(a->rt, key, gone_reply_done, g);
}

void agent_sb_unlink(struct agent *a, struct agent_sb *sb)
{
	if (!sb->pprev)
		return;
	*sb->pprev = sb->next;
	if (sb->next)
		sb->next->pprev = sb->pprev;
	sb->pprev = NULL;
	sb->next = NULL;
	keyidx_remove(&a->by_key, &sb->idx);
	agent_sb_recount(a, sb);
}

void agent_sb_remove(struct agent *a, struct agent_sb *sb)
{
	agent_sb_stop(a, sb);
	agent_sb_unlink(a, sb);
	sb_free(sb);
}

void agent_sb_destroy_all(struct agent *a)
{
	pool_drain(a->pool);
	while (a->sandboxes)
		agent_sb_remove(a, a->sandboxes);
	keyidx_free(&a->by_key);
}

struct put_req {
	int64_t generation, epoch;
	const char *image;
	enum rt_network network;
	struct rt_limits limits;
	json_t *env, *labels;  /* borrowed from the body */
	int64_t sleep_after_ms; /* -1: not given */
	int keep_alive;         /* -1: not given */
	json_t *persist;        /* borrowed from the body */
	const char *restore_from; /* a snapshot to restore once started, or NULL */
};

/* sleepAfter and keepAlive of a create or patch body into p (-1 = absent).
 * 0 or -1 (400). */
static int parse_sleep(json_t *body, struct put_req *p, struct sbx_err *e)
{
	json_t *v = json_object_get(body, "sleepAfter");

	p->sleep_after_ms = -1;
	p->keep_alive = -1;
	if (v && spec_sleep_after(v, &p->sleep_after_ms, e) < 0)
		return -1;
	if ((v = json_object_get(body, "keepAlive")))
		p->keep_alive = json_is_true(v);
	return 0;
}

/* Validate a create body into p (borrowing from body). The body comes from
 * the API, which holds the node secret and has already checked it with the
 * same rules (sandbox/common/spec.c); this re-check keeps a malformed body
 * from reaching the runtime. The operator ceilings (sandbox.max_*) and the
 * tenant's limits are the API's business and are not applied here. 0 or
 * -1 (400). */
static int parse_put(const struct sbx_conf *conf, json_t *body, struct put_req *p,
		     struct sbx_err *e)
{
	struct spec_resources r;
	json_t *v;
	int egress = 0;

	if (parse_sleep(body, p, e) < 0)
		return -1;
	if (jsonv_int(body, "generation", 0, INT64_MAX, &p->generation, e) < 0 ||
	    jsonv_int(body, "epoch", 0, INT64_MAX, &p->epoch, e) < 0)
		return -1;
	p->image = "default";
	if ((v = json_object_get(body, "image"))) {
		if (spec_image(v, e) < 0)
			return -1;
		p->image = json_string_value(v);
	}
	if ((v = json_object_get(body, "network")) && spec_network(v, &egress, e) < 0)
		return -1;
	p->network = egress ? RT_NET_EGRESS : RT_NET_NONE;
	spec_resources_default(conf, &r);
	if ((v = json_object_get(body, "resources")) && spec_resources(v, &r, e) < 0)
		return -1;
	p->limits.memory_mib = r.memory_mib;
	p->limits.cpus_milli = r.cpus_milli;
	p->limits.pids = r.pids;
	p->limits.disk_mib = r.disk_mib;
	p->env = json_object_get(body, "env");
	if (p->env && spec_env(p->env, 0, e) < 0)
		return -1;
	p->labels = json_object_get(body, "labels");
	if (p->labels && spec_labels(p->labels, e) < 0)
		return -1;
	p->persist = json_object_get(body, "persist");
	if (p->persist && !json_is_array(json_object_get(p->persist, "paths")))
		return err_set(e, SBX_E_VALIDATION, "persist must be {paths: [...]}");
	p->restore_from = json_string_value(json_object_get(body, "restoreFrom"));
	if (p->restore_from && !snapstore_id_valid(p->restore_from))
		return err_set(e, SBX_E_VALIDATION, "restoreFrom must be a snapshot id");
	return 0;
}

/* The defaults (HOME: home, or "/root" when NULL or ""), then an image's
 * Env over them (may be NULL), then the sandbox's env over both. */
static char **base_env_for(const char *id, const char *home, char *const *image_env,
			   const json_t *env)
{
	char host[80], homev[300];
	char *defaults[] = {
		(char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		homev,
		(char *)"LANG=C.UTF-8",
		host,
		NULL,
	};
	json_t *img = json_object();
	char **mid, **out;

	snprintf(host, sizeof(host), "HOSTNAME=%s", id);
	snprintf(homev, sizeof(homev), "HOME=%s", home && home[0] ? home : "/root");
	if (!img)
		return NULL;
	for (size_t i = 0; image_env && image_env[i]; i++) {
		const char *eq = strchr(image_env[i], '=');
		char k[SPEC_ENV_KEY_MAX + 1];

		if (!eq || (size_t)(eq - image_env[i]) > SPEC_ENV_KEY_MAX)
			continue;
		memcpy(k, image_env[i], (size_t)(eq - image_env[i]));
		k[eq - image_env[i]] = '\0';
		if (ids_valid_env_name(k))
			json_object_set_new(img, k, json_string(eq + 1));
	}
	mid = agent_env_merge(defaults, img);
	json_decref(img);
	if (!mid)
		return NULL;
	out = agent_env_merge(mid, env);
	agent_env_free(mid);
	return out;
}

const struct jsonv_field agent_sandbox_put_fields[] = {
	{ "generation", JV_INTEGER, 1 },
	{ "epoch", JV_INTEGER, 1 },
	{ "image", JV_STRING, 0 },
	{ "network", JV_STRING, 0 },
	{ "resources", JV_OBJECT, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "labels", JV_OBJECT, 0 },
	{ "sleepAfter", JV_INTEGER | JV_STRING, 0 },
	{ "keepAlive", JV_BOOL, 0 },
	{ "restoreFrom", JV_STRING, 0 },
	{ "persist", JV_OBJECT, 0 },
	{ NULL, 0, 0 },
};

const struct jsonv_field agent_sandbox_patch_fields[] = {
	{ "sleepAfter", JV_INTEGER | JV_STRING, 0 },
	{ "keepAlive", JV_BOOL, 0 },
	{ NULL, 0, 0 },
};

/* A claimed pool member's init is asked for a keeper once the answer to
 * the claim is out (rt_ahead), if that sandbox still runs then. */
struct ahead_after {
	struct agent *a;
	int64_t run;
	char key[AGENT_KEY_MAX];
};

static void ahead_cb(void *arg, int failed)
{
	struct ahead_after *x = arg;
	struct agent_sb *sb = failed ? NULL : agent_sb_find(x->a, x->key);
	struct rt_sandbox *rsb = sb && sb->run == x->run ? agent_sb_container(sb) : NULL;

	if (rsb)
		rt_ahead(rsb);
	free(x);
}

static void ahead_after_reply(struct agent *a, struct httpd_req *r, const struct agent_sb *sb)
{
	struct ahead_after *x = malloc(sizeof(*x));

	if (!x)
		return;
	x->a = a;
	x->run = sb->run;
	memcpy(x->key, sb->key, sizeof(x->key));
	httpd_on_close(r, ahead_cb, x);
}

/* The container of sb's start runs (sb->rt): count it as started, restore
 * what the start asked for, answer r (NULL: its client went away). 0, or
 * -1 with e filled (the container stopped again) for the caller to
 * answer. */
static int put_started(struct agent *a, struct httpd_req *r, struct agent_sb *sb,
		       const char *restore_from, struct sbx_err *e)
{
	sb->started_at = sb->last_active_at = util_wall_ms();
	/* Agent-wide, so that state keyed by (key, run) of a destroyed
	 * sandbox never matches a new sandbox of the same id. */
	sb->run = ++a->runs;
	sb->thawed_serial = 0;
	log_info("sandbox '%s' started (generation %lld, epoch %lld%s)", sb->key,
		 (long long)sb->generation, (long long)sb->epoch, sb->from_pool ? ", from the pool" : "");
	if (restore_from) {
		/* a module restores the snapshot into the new container and
		 * answers; a failed restore stops it again */
		if (!agent_restore_on_start)
			err_set(e, SBX_E_NOT_IMPLEMENTED, "this agent cannot restore snapshots");
		else if (!r)
			err_set(e, SBX_E_CONFLICT, "the start was given up before its restore");
		else if (agent_restore_on_start(r, sb, restore_from, e) == 0)
			return 0;
		agent_sb_stop(a, sb);
		return -1;
	}
	if (r) {
		httpd_reply_json(r, 201, agent_sb_json(sb));
		if (sb->from_pool)
			ahead_after_reply(a, r, sb);
	}
	return 0;
}

/* A start whose container is built off the loop (rt_create_async); the
 * entry (in the table from the start on) points at it while it runs. */
struct build_waiter {
	struct build_waiter *next;
	struct httpd_req *r;       /* NULL once it is over */
};

struct agent_build {
	struct agent *a;
	struct build_waiter *waiters;  /* retried PUTs of the same start */
	struct rt_build *b;
	struct httpd_req *r;       /* the PUT; NULL once it is over */
	struct httpd_req *del;     /* a DELETE answered once the build is over, or NULL */
	char key[AGENT_KEY_MAX];
	char restore_from[64];     /* "" none */
	int fresh;                 /* the entry was made for this start */
	int64_t lease_serial;      /* registry_lease_serial() at the start */
};

static void build_req_closed(void *arg, int failed)
{
	struct agent_build *q = arg;

	(void)failed;
	q->r = NULL;
}

static void build_del_closed(void *arg, int failed)
{
	struct agent_build *q = arg;

	(void)failed;
	q->del = NULL;
}

static void waiter_closed(void *arg, int failed)
{
	struct build_waiter *w = arg;

	(void)failed;
	w->r = NULL;
}

/* Answer the retried PUTs waiting for q: 200 with sb, or e. */
static void waiters_answer(struct agent_build *q, const struct agent_sb *sb,
			   const struct sbx_err *e)
{
	struct build_waiter *w;

	while ((w = q->waiters)) {
		q->waiters = w->next;
		if (w->r) {
			httpd_on_close(w->r, NULL, NULL);
			if (sb)
				httpd_reply_json(w->r, 200, agent_sb_json(sb));
			else
				agent_call_reply_err(w->r, e);
		}
		free(w);
	}
}

/* A PUT for sb while its container is being built: the same start again
 * (same generation and epoch: sbx-api sends one per caller) is answered
 * with the build's outcome; any other start is refused until it is over.
 * 0 (deferred), or -1 with e filled. */
static int build_wait(struct agent_call *c, struct agent_sb *sb, const struct put_req *p,
		      struct sbx_err *e)
{
	struct build_waiter *w;

	if (p->generation != sb->generation || p->epoch != sb->epoch)
		return err_set(e, SBX_E_CONFLICT, "sandbox '%s' is being started (generation %lld); "
			       "retry", c->id, (long long)sb->generation);
	w = calloc(1, sizeof(*w));
	if (!w)
		return err_sys(e, ENOMEM, "sandbox build");
	if (p->sleep_after_ms >= 0)
		sb->sleep_after_ms = p->sleep_after_ms;
	if (p->keep_alive >= 0)
		sb->keep_alive = p->keep_alive;
	w->r = c->r;
	w->next = sb->build->waiters;
	sb->build->waiters = w;
	httpd_on_close(c->r, waiter_closed, w);
	httpd_defer(c->r);
	return 0;
}

/* A cancelled build is over and nothing of it is left: answer the PUTs
 * (their start was given up: a transition, which a retry sees the end of)
 * and a DELETE waiting for it. */
static void build_gone(void *arg)
{
	struct agent_build *q = arg;
	struct sbx_err e = { 0 };

	err_set(&e, SBX_E_NODE_UNAVAILABLE,
		"sandbox '%s' was stopped or deleted while it was starting; retry", q->key);
	if (q->r) {
		httpd_on_close(q->r, NULL, NULL);
		agent_call_reply_err(q->r, &e);
	}
	waiters_answer(q, NULL, &e);
	if (q->del) {
		httpd_on_close(q->del, NULL, NULL);
		/* a restart's build given up: the container it replaced may be dying */
		agent_reply_after_gone(q->a, q->del, q->key, 204, NULL);
	}
	free(q);
}

/* Give sb's build up (stop, delete, fencing): whatever it built is
 * destroyed; del (or NULL), a DELETE of sb, is answered once nothing of
 * it is left. The entry no longer points at the build. */
static void build_cancel(struct agent_sb *sb, struct httpd_req *del)
{
	struct agent_build *q = sb->build;

	sb->build = NULL;
	agent_sb_recount(q->a, sb);
	log_info("sandbox '%s': start given up while its container was being built", sb->key);
	if (del) {
		q->del = del;
		httpd_on_close(del, build_del_closed, q);
		httpd_defer(del);
	}
	if (rt_build_cancel(q->b, build_gone, q) == 1)
		build_gone(q);
}

/* On the loop: the container of q's start is built (rsb), or not (e). */
static void build_done(void *arg, struct rt_sandbox *rsb, const struct sbx_err *be)
{
	struct agent_build *q = arg;
	struct agent *a = q->a;
	struct agent_sb *sb = agent_sb_find(a, q->key);
	struct sbx_err e = be ? *be : (struct sbx_err){ 0 };
	int rc = -1;

	if (q->r)
		httpd_on_close(q->r, NULL, NULL);
	if (!sb || sb->build != q) {
		/* cannot be: cancelling a build stops its done callback */
		log_error("sandbox '%s': a build ended without its entry", q->key);
		if (rsb)
			rt_destroy(a->rt, rsb);
	} else {
		sb->build = NULL;
		sb->rt = rsb;
		agent_sb_recount(a, sb);
		if (rsb) {
			/* Fencing: the lease must not have lapsed while it was built
			 * (the fence keeper froze only what existed then), and no
			 * newer epoch of the sandbox may have come meanwhile. */
			if (a->reg && (!registry_lease_valid(a->reg) ||
				       registry_lease_serial(a->reg) != q->lease_serial))
				err_set(&e, SBX_E_NODE_UNAVAILABLE,
					"this node's lease in the registry lapsed during the start; retry");
			else if (agent_fence(a, sb->key, sb->epoch, &e) == 0)
				rc = put_started(a, q->r, sb,
						 q->restore_from[0] ? q->restore_from : NULL, &e);
			if (rc < 0 && sb->rt)
				agent_sb_stop(a, sb);
		} else {
			err_prefix(&e, "cannot start sandbox '%s'", sb->key);
			/* a kernel limit reached anyway: the node is full, not broken */
			capacity_classify(&e);
			agent_sb_stop(a, sb);
			if (q->fresh)
				agent_sb_remove(a, sb);
		}
	}
	if (rc < 0 && q->r)
		agent_call_reply_err(q->r, &e);
	else if (rc < 0)
		log_warn("%s", e.msg);
	waiters_answer(q, rc == 0 && sb && sb->rt ? sb : NULL, &e);
	free(q);
}

/* Start building sb's container from spec off the loop; the PUT c is
 * answered when it is built. The entry goes into the table now (fresh),
 * so a DELETE or a stop meanwhile finds it and gives the build up. 0, or
 * -1 with e filled (refused at once: nothing changed). */
static int build_start(struct agent_call *c, struct agent_sb *sb, const struct rt_spec *spec,
		       int fresh, const char *restore_from, struct sbx_err *e)
{
	struct agent *a = c->a;
	struct agent_build *q = calloc(1, sizeof(*q));

	if (!q)
		return err_sys(e, ENOMEM, "sandbox build");
	q->a = a;
	q->fresh = fresh;
	snprintf(q->key, sizeof(q->key), "%s", sb->key);
	if (restore_from && snprintf(q->restore_from, sizeof(q->restore_from), "%s", restore_from) >=
				    (int)sizeof(q->restore_from)) {
		free(q);
		return err_set(e, SBX_E_VALIDATION, "restoreFrom must be a snapshot id");
	}
	/* in the table (and its index) before the build can end */
	if (fresh && agent_sb_link(a, sb) < 0) {
		free(q);
		return err_sys(e, ENOMEM, "sandbox table");
	}
	q->b = rt_create_async(a->rt, spec, 0, build_done, q, e);
	if (!q->b) {
		if (fresh)
			agent_sb_unlink(a, sb);
		free(q);
		err_prefix(e, "cannot start sandbox '%s'", sb->key);
		/* a kernel limit reached anyway: the node is full, not broken */
		capacity_classify(e);
		return -1;
	}
	q->lease_serial = a->reg ? registry_lease_serial(a->reg) : 0;
	q->r = c->r;
	httpd_on_close(c->r, build_req_closed, q);
	httpd_defer(c->r);
	sb->build = q;
	agent_sb_recount(a, sb);
	return 0;
}

int agent_sandbox_put(struct agent_call *c, struct sbx_err *e)
{
	struct agent *a = c->a;
	struct put_req p = { 0 };
	struct agent_sb *sb = c->sb, *fresh = NULL;
	struct rt_spec spec;
	unsigned running = 0;
	const char *by;
	char saved[24] = "";
	struct imgref ref;
	struct agent_image img = { .lock_fd = -1 };
	int remote;

	if (parse_put(a->conf, c->body, &p, e) < 0 || agent_lease_check(a, e) < 0 ||
	    agent_fence(a, c->key, p.epoch, e) < 0)
		return -1;
	if (sb && p.generation < sb->generation)
		return err_set(e, SBX_E_CONFLICT, "generation %lld is older than the current %lld",
			       (long long)p.generation, (long long)sb->generation);
	/* The running container answers for this start only when it is the very
	 * one the record names: same generation AND epoch (a retried PUT). The
	 * same generation at a new epoch is a record made again (Redis lost
	 * it: FLUSHALL, a failover): a fresh container, never the old one. */
	if (sb && sb->rt && !sb->dead && p.generation == sb->generation && p.epoch != sb->epoch)
		log_warn("sandbox '%s': generation %lld again at epoch %lld (was %lld): its record "
			 "was made anew; replacing the container", c->key, (long long)p.generation,
			 (long long)p.epoch, (long long)sb->epoch);
	else if (sb && sb->rt && !sb->dead && p.generation == sb->generation) {
		sb->epoch = p.epoch;
		if (p.sleep_after_ms >= 0)
			sb->sleep_after_ms = p.sleep_after_ms;
		if (p.keep_alive >= 0)
			sb->keep_alive = p.keep_alive;
		httpd_reply_json(c->r, 200, agent_sb_json(sb));
		return 0;
	}
	if (sb && sb->build)
		return build_wait(c, sb, &p, e);
	/* dying containers count until reaped, but for sb's own (it takes its place) */
	running = a->noccupied - (sb && sb->occupying) + rt_dying_count(a->rt) -
		  (sb && rt_key_dying(a->rt, sb->key));
	if (running >= capacity_now(&a->cap, running, &by))
		return err_set(e, SBX_E_NO_CAPACITY, "this node is full (%u sandboxes; limit: %s)",
			       running, by);
	remote = agent_image_is_remote(a, p.image, &ref, e);
	if (remote < 0)
		return -1;
	if (remote && agent_image_get(a, &ref, &img, e) < 0) {
		if (e->code != SBX_E_IMAGE_NOT_FOUND)
			return -1;
		/* the first create of an image on this node pulls it, then runs again */
		return agent_image_defer_put(c, &ref, agent_sandbox_put, e);
	}
	if (!sb) {
		fresh = sb = calloc(1, sizeof(*sb));
		if (!sb) {
			agent_image_release(&img);
			return err_sys(e, ENOMEM, "sandbox entry");
		}
		snprintf(sb->key, sizeof(sb->key), "%s", c->key);
		snprintf(sb->tenant, sizeof(sb->tenant), "%s", httpd_param(c->r, 0));
		snprintf(sb->id, sizeof(sb->id), "%s", c->id);
		sb->created_at = util_wall_ms();
		sb->sleep_after_ms = a->conf->sandbox.sleep_after_ms;
	}
	if (p.sleep_after_ms >= 0)
		sb->sleep_after_ms = p.sleep_after_ms;
	if (p.keep_alive >= 0)
		sb->keep_alive = p.keep_alive;
	if (sb->rt && !sb->dead) {
		/* a restart of a persisting sandbox starts from what it had; the
		 * record is at the new start's epoch already (fenced above) */
		sb->epoch = p.epoch;
		agent_persist_save(a, sb, saved);
		if (saved[0])
			p.restore_from = saved;
	}
	agent_sb_stop(a, sb);
	json_decref(sb->labels);
	json_decref(sb->env);
	json_decref(sb->persist);
	sb->persist = p.persist ? json_deep_copy(p.persist) : NULL;
	agent_env_free(sb->base_env);
	sb->labels = p.labels ? json_deep_copy(p.labels) : json_object();
	sb->env = p.env ? json_deep_copy(p.env) : json_object();
	sb->base_env = base_env_for(sb->id, img.home, img.env, sb->env);
	sb->generation = p.generation;
	sb->epoch = p.epoch;
	snprintf(sb->image, sizeof(sb->image), "%s", remote ? img.canon : p.image);
	sb->network = p.network;
	sb->limits = p.limits;
	if (!sb->labels || !sb->env || !sb->base_env) {
		err_sys(e, ENOMEM, "sandbox entry");
		goto fail;
	}
	spec = (struct rt_spec){ .key = sb->key, .hostname = sb->id, .image = sb->image,
				 .layers = remote ? img.layers : NULL,
				 .workdir = remote && img.workdir[0] ? img.workdir : NULL,
				 .uid = remote ? img.uid : 0, .gid = remote ? img.gid : 0,
				 .network = sb->network, .limits = sb->limits, .env = sb->base_env,
				 /* a restart (or a wake after a sleep) waits for the
				  * container it replaces; a new start of a key whose
				  * container dies is refused meanwhile (503) */
				 .after_gone = fresh == NULL };
	if (img.lock_fd > 0)
		sb->image_lock_fd = steal_fd(&img.lock_fd);
	/* warm pool (pool.h): a matching spec takes a pre-built sandbox */
	sb->rt = pool_claim(a->pool, &spec);
	sb->from_pool = sb->rt != NULL;
	agent_sb_recount(a, sb);
	if (!sb->rt) {
		pool_make_room(a->pool);
		if (build_start(c, sb, &spec, fresh != NULL, p.restore_from, e) < 0) {
			agent_sb_stop(a, sb);
			goto fail;
		}
		agent_image_release(&img);
		return 0;
	}
	if (fresh && agent_sb_link(a, fresh) < 0) {
		err_sys(e, ENOMEM, "sandbox table");
		agent_sb_stop(a, fresh);
		goto fail;
	}
	agent_image_release(&img);
	return put_started(a, c->r, sb, p.restore_from, e);
fail:
	if (fresh)
		sb_free(fresh);
	agent_image_release(&img);
	return -1;
}

/* The sandbox of a control call that needs one on this node. */
static struct agent_sb *found(struct agent_call *c, struct sbx_err *e)
{
	if (!c->sb)
		err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox not found on this node");
	return c->sb;
}

int agent_sandbox_get(struct agent_call *c, struct sbx_err *e)
{
	if (!found(c, e))
		return -1;
	httpd_reply_json(c->r, 200, agent_sb_json(c->sb));
	return 0;
}

int agent_sandbox_list(struct agent_call *c, struct sbx_err *e)
{
	json_t *arr = json_array();

	for (struct agent_sb *sb = c->a->sandboxes; arr && sb; sb = sb->next)
		json_array_append_new(arr, agent_sb_json(sb));
	httpd_reply_json(c->r, 200, arr ? json_pack("{s:o}", "sandboxes", arr) : NULL);
	return 0;
}

/* A stop answered once Redis has applied what came before it. */
struct stop_answer {
	struct agent *a;
	struct httpd_req *r;       /* NULL once the request is over */
	json_t *body;
	char key[AGENT_KEY_MAX];
};

static void stop_answer_closed(void *arg, int failed)
{
	struct stop_answer *q = arg;

	(void)failed;
	q->r = NULL;
}

static void stop_answer_reply(void *arg, struct redisReply *reply)
{
	struct stop_answer *q = arg;

	(void)reply;
	if (q->r) {
		httpd_on_close(q->r, NULL, NULL);
		agent_reply_after_gone(q->a, q->r, q->key, 200, q->body);
	} else {
		json_decref(q->body);
	}
	free(q);
}

int agent_sandbox_stop(struct agent_call *c, struct sbx_err *e)
{
	struct stop_answer *q;
	char saved[24];
	json_t *body;

	if (!found(c, e))
		return -1;
	agent_persist_save(c->a, c->sb, saved);
	agent_sb_stop(c->a, c->sb);
	log_info("sandbox '%s' stopped", c->key);
	body = agent_sb_json(c->sb);
	/* A save is recorded by a command already queued on the registry's
	 * connection: answer after a PING behind it, so the next start (which
	 * sbx-api may ask for as soon as it has this answer) reads the save's
	 * restoreFrom. */
	q = saved[0] ? calloc(1, sizeof(*q)) : NULL;
	if (q && registry_command(c->a->reg, stop_answer_reply, q, "PING") == 0) {
		q->a = c->a;
		q->r = c->r;
		q->body = body;
		snprintf(q->key, sizeof(q->key), "%s", c->key);
		httpd_on_close(c->r, stop_answer_closed, q);
		httpd_defer(c->r);
		return 0;
	}
	free(q);
	agent_reply_after_gone(c->a, c->r, c->key, 200, body);
	return 0;
}

int agent_sandbox_patch(struct agent_call *c, struct sbx_err *e)
{
	struct put_req p = { 0 };

	if (parse_sleep(c->body, &p, e) < 0 || !found(c, e))
		return -1;
	if (p.sleep_after_ms >= 0)
		c->sb->sleep_after_ms = p.sleep_after_ms;
	if (p.keep_alive >= 0)
		c->sb->keep_alive = p.keep_alive;
	log_info("sandbox '%s': sleepAfter %lld ms, keepAlive %d", c->key,
		 (long long)c->sb->sleep_after_ms, c->sb->keep_alive);
	httpd_reply_json(c->r, 200, agent_sb_json(c->sb));
	return 0;
}

int agent_sandbox_delete(struct agent_call *c, struct sbx_err *e)
{
	if (c->sb && c->sb->build) {
		/* answered once nothing of the container being built is left */
		build_cancel(c->sb, c->r);
		agent_sb_remove(c->a, c->sb);
		log_info("sandbox '%s' destroyed while it was starting", c->key);
		return 0;
	}
	if (c->sb) {
		agent_sb_remove(c->a, c->sb);
		log_info("sandbox '%s' destroyed", c->key);
	}
	agent_reply_after_gone(c->a, c->r, c->key, 204, NULL);
	return 0;
}

struct agent_sb *agent_sb_running(struct agent *a, const char *key, const char *id,
				  int64_t generation, struct sbx_err *e)
{
	struct agent_sb *sb = agent_sb_find(a, key);

	if (!sb || !agent_sb_container(sb)) {
		err_set(e, SBX_E_SANDBOX_NOT_FOUND, "sandbox '%s' is not running on this node", id);
		return NULL;
	}
	if (generation >= 0 && generation != sb->generation) {
		err_set(e, SBX_E_CONFLICT, "generation %lld is not the running %lld",
			(long long)generation, (long long)sb->generation);
		return NULL;
	}
	return sb;
}

int agent_lease_check(struct agent *a, struct sbx_err *e)
{
	if (a->reg && !registry_lease_valid(a->reg))
		return err_set(e, SBX_E_NODE_UNAVAILABLE,
			       "this node's lease in the registry has lapsed; retry");
	return 0;
}

void agent_persist_save(struct agent *a, struct agent_sb *sb, char sid[24])
{
	struct sbx_err e;

	sid[0] = '\0';
	if (!sb->persist || !agent_persist_before_stop || !agent_sb_container(sb))
		return;
	err_clear(&e);
	if (agent_persist_before_stop(a, sb, sid, &e) < 0) {
		sid[0] = '\0';
		log_warn("sandbox '%s': cannot save its persisted paths: %s", sb->key, e.msg);
		return;
	}
	log_info("sandbox '%s': persisted paths saved as %s", sb->key, sid);
}
