/*
 * agent_lifecycle.c — the agent's half of the sandbox lifecycle:
 *
 *  - live streams: a request whose answer is still in progress (an SSE
 *    exec, a JSON exec that has not finished, a download or upload) keeps
 *    its sandbox awake. Background processes do not: a sandbox whose only
 *    activity is a background process sleeps after sleepAfter.
 *  - sleep: once a second, a running sandbox with no live stream, not
 *    keepAlive, idle for sleepAfter, is stopped (the entry stays, stopped)
 *    and its record is set to sleeping by a compare-and-set in Redis (only
 *    if the record still names this node and our epoch), with a "slept"
 *    event. A sandbox whose init died is reported the same way ("crashed").
 *  - fencing sweep: on every (re)connect to Redis and every node_ttl/2,
 *    each local sandbox's record is read; a copy whose record is gone,
 *    names another node, or has a higher epoch (unless it is a start meant
 *    for us, state "starting") is destroyed and forgotten ("fenced"), and
 *    the fence table is raised to the record's epoch.
 *  - fencing by freezing: the fence keeper (keeper.c) freezes every
 *    sandbox when the lease runs out; once the lease is back after a gap,
 *    a sweep runs at once, and each sandbox its record still gives us is
 *    thawed (only from a sweep sent and answered inside the new lease);
 *    the rest are destroyed frozen, so they never run again. Calls that
 *    spanned the gap fail (agent_stream_lease_held).
 *  - restart: on every connect, the sandboxes the node index lists for us
 *    that we do not run, but whose records say running/starting on us, are
 *    set to sleeping ("lost"): the next data call wakes them.
 *
 * The API never hears from us directly: it reads Redis.
 */
#include "agent.h"
#include "agent_metrics.h"
#include "agent_lifecycle.h"
#include "module.h"
#include "rkeys.h"
#include "rscripts.h"
#include "ids.h"
#include "log.h"
#include "registry.h"
#include "util.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LC_TICK_MS 1000
#define LC_LEASE_WATCH_MS 100
#define LC_SWEEP_MIN_MS 1000

struct agent_lc {
	struct agent *a;
	struct registry *reg;
	struct event *tick_ev;
	struct event *sweep_ev;
	struct event *lease_ev;      /* watches for a lease regained after a gap */
	int64_t lease_serial;        /* the serial the last thawing sweep ran at */
};

/* For agent_stream_lease_held / stream begin (the agent is one per process). */
static const struct registry *lease_reg;

/* --- live streams --- */

void agent_sb_stream_begin(struct agent_sb *sb, struct agent_stream *st)
{
	if (!sb || !st || st->active)
		return;
	snprintf(st->key, sizeof(st->key), "%s", sb->key);
	st->run = sb->run;
	st->active = 1;
	st->lease_serial = lease_reg ? registry_lease_serial(lease_reg) : 0;
	sb->streams++;
	sb->last_active_at = util_wall_ms();
	metrics_count(AM_STREAMS, 0, 0, 1);
}

void agent_sb_stream_end(struct agent *a, struct agent_stream *st)
{
	struct agent_sb *sb;

	if (!st || !st->active)
		return;
	st->active = 0;
	sb = agent_sb_find(a, st->key);
	/* A stream of an earlier container was dropped when it stopped. */
	if (!sb || sb->run != st->run || !sb->rt)
		return;
	if (sb->streams > 0)
		sb->streams--;
	sb->last_active_at = util_wall_ms();
}

int agent_stream_lease_held(const struct agent *a, const struct agent_stream *st)
{
	if (!a->reg)
		return 1;
	return registry_lease_valid(a->reg) && registry_lease_serial(a->reg) == st->lease_serial;
}

/* --- Redis writes --- */

static void add_event(struct agent *a, const char *type, const char *tenant, const char *id,
		      int64_t generation, int64_t epoch);

/* What a record update was for: logged, and its event added once Redis
 * says the update was made. */
struct lc_note {
	struct agent *a;
	int counted;               /* one of agent_lc_sleep_all()'s */
	char key[AGENT_KEY_MAX];
	char what[16];
	char tenant[64];
	char id[64];
	int64_t generation, epoch;
};

static struct lc_note *note_new(struct agent *a, const char *key, const char *what,
				const char *tenant, const char *id, int64_t generation,
				int64_t epoch)
{
	struct lc_note *n = calloc(1, sizeof(*n));

	if (n) {
		n->a = a;
		snprintf(n->key, sizeof(n->key), "%s", key);
		snprintf(n->what, sizeof(n->what), "%s", what);
		snprintf(n->tenant, sizeof(n->tenant), "%s", tenant);
		snprintf(n->id, sizeof(n->id), "%s", id);
		n->generation = generation;
		n->epoch = epoch;
	}
	return n;
}

/* agent_lc_sleep_all(): the updates not answered yet and what runs after. */
static struct {
	int pending;
	void (*done)(void *arg);
	void *arg;
} sleep_all;

static void sleep_all_answered(void)
{
	void (*done)(void *) = sleep_all.done;

	if (sleep_all.pending > 0)
		sleep_all.pending--;
	if (sleep_all.pending > 0 || !done)
		return;
	sleep_all.done = NULL;
	done(sleep_all.arg);
}

/* The outcome of a record update: 1, or {generation, epoch} (agent_lost),
 * means done; then the event goes to sbx:events. */
static void note_reply(void *arg, struct redisReply *reply)
{
	struct lc_note *n = arg;
	int done = 0;

	if (reply && reply->type == REDIS_REPLY_ERROR) {
		log_warn("sandbox '%s': redis refused the %s update: %.200s", n->key, n->what,
			 reply->str);
	} else if (reply && reply->type == REDIS_REPLY_INTEGER) {
		done = reply->integer == 1;
		log_info("sandbox '%s': record %s (%s)", n->key,
			 done ? "set to sleeping" :
			 reply->integer == 0 ? "left alone: it moved on" : "is gone", n->what);
	} else if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
		   reply->element[0]->type == REDIS_REPLY_STRING &&
		   reply->element[1]->type == REDIS_REPLY_STRING) {
		done = util_parse_i64(reply->element[0]->str, 0, INT64_MAX, &n->generation) == 0 &&
		       util_parse_i64(reply->element[1]->str, 0, INT64_MAX, &n->epoch) == 0;
		log_info("sandbox '%s': record set to sleeping (%s)", n->key, n->what);
	}
	if (done)
		add_event(n->a, n->what, n->tenant, n->id, n->generation, n->epoch);
	if (n->counted)
		sleep_all_answered();
	free(n);
}

/* CAS the record of (tenant, id) at epoch to sleeping, event type why.
 * counted: one of agent_lc_sleep_all()'s. 0 queued, -1 not sent. */
static int cas_sleeping_note(struct agent *a, const char *key, const char *tenant,
			     const char *id, int64_t epoch, int64_t generation,
			     int64_t last_active, const char *why, int counted)
{
	char rkey[RKEYS_MAX], active[32] = "";
	struct lc_note *n;

	if (!a->reg)
		return -1;
	rkeys_sandbox(rkey, tenant, id);
	if (last_active > 0)
		util_iso8601(last_active, active);
	n = note_new(a, key, why, tenant, id, generation, epoch);
	if (!n)
		return -1;
	n->counted = counted;
	if (registry_command(a->reg, note_reply, n, "EVAL %s 1 %s %s %lld %s",
			     rscripts_source(RSCRIPT_AGENT_SLEEP), rkey,
			     a->conf->agent.name, (long long)epoch, active) < 0) {
		log_warn("sandbox '%s': no redis connection; its record is fixed at the next sweep",
			 key);
		free(n);
		return -1;
	}
	return 0;
}

static void cas_sleeping(struct agent *a, const char *key, const char *tenant, const char *id,
			 int64_t epoch, int64_t generation, int64_t last_active, const char *why)
{
	(void)cas_sleeping_note(a, key, tenant, id, epoch, generation, last_active, why, 0);
}

void agent_lc_report_stopped(struct agent *a, const struct agent_sb *sb, const char *why)
{
	cas_sleeping(a, sb->key, sb->tenant, sb->id, sb->epoch, sb->generation, sb->last_active_at,
		     why);
}

void agent_lc_sleep_all(struct agent *a, void (*done)(void *arg), void *arg)
{
	sleep_all.pending = 0;
	sleep_all.done = done;
	sleep_all.arg = arg;
	for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next)
		if (sb->rt && !sb->dead &&
		    cas_sleeping_note(a, sb->key, sb->tenant, sb->id, sb->epoch, sb->generation,
				      sb->last_active_at, "slept", 1) == 0)
			sleep_all.pending++;
	if (sleep_all.pending == 0) {
		sleep_all.done = NULL;
		done(arg);
	}
}

static void add_event(struct agent *a, const char *type, const char *tenant, const char *id,
		      int64_t generation, int64_t epoch)
{
	agent_metrics_event(type);
	if (a->reg)
		registry_command(a->reg, NULL, NULL,
				 RKEYS_XADD_EVENT "type %s tenant %s id %s node %s "
				 "generation %lld epoch %lld",
				 type, tenant, id, a->conf->agent.name, (long long)generation,
				 (long long)epoch);
}

/* --- sleep timer --- */

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent_lc *lc = arg;
	struct agent *a = lc->a;
	int64_t now = util_wall_ms();
	char saved[24];

	if (a->shutting_down)
		return;
	for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next) {
		if (!sb->rt || sb->dead || sb->keep_alive || sb->streams > 0 || sb->sleep_after_ms <= 0)
			continue;
		if (now - sb->last_active_at < sb->sleep_after_ms)
			continue;
		log_info("sandbox '%s' idle for %lld ms: sleeping (generation %lld)", sb->key,
			 (long long)(now - sb->last_active_at), (long long)sb->generation);
		agent_persist_save(a, sb, saved);
		agent_sb_stop(a, sb);
		agent_lc_report_stopped(a, sb, "slept");
	}
}

/* --- fencing sweep --- */

struct sweep_ctx {
	struct agent *a;
	char key[AGENT_KEY_MAX];
	int64_t epoch, run;
	int lease_ok;            /* the lease was valid when the HMGET was sent ... */
	int64_t lease_serial;    /* ... at this serial */
};

/* A frozen sandbox the sweep keeps is thawed, when its record was read
 * inside one unbroken lease: nobody can have taken it over since. Only the
 * fence keeper freezes a running container, when the lease nears its end;
 * it thaws them itself when the lease is extended in time, so one still
 * frozen outlived a gap, after which the serial is new. So a run seen
 * thawed at this serial is not read again (read at every sweep, the
 * files of 4000 idle sandboxes were 2000 opens a second). */
static void thaw_kept(struct agent *a, struct agent_sb *sb, const struct sweep_ctx *c)
{
	struct sbx_err e = { 0 };

	if (!sb->rt || sb->dead || !c->lease_ok || sb->thawed_serial == c->lease_serial ||
	    !registry_lease_valid(a->reg) || registry_lease_serial(a->reg) != c->lease_serial)
		return;
	switch (rt_frozen(sb->rt)) {
	case 0:
		sb->thawed_serial = c->lease_serial;
		break;
	case 1:
		if (rt_freeze(sb->rt, 0, &e) < 0) {
			log_warn("sandbox '%s': %s", sb->key, e.msg);
			break;
		}
		sb->thawed_serial = c->lease_serial;
		log_info("sandbox '%s': still ours after the lease gap; thawed", sb->key);
		break;
	default:
		break;   /* unknown: read again at the next sweep */
	}
}

static const char *elem_str(const redisReply *r, size_t i)
{
	if (i >= r->elements || !r->element[i] || r->element[i]->type != REDIS_REPLY_STRING)
		return NULL;
	return r->element[i]->str;
}

/* Destroy the local copy of sb: it is not ours any more. */
static void fence_out(struct agent *a, struct agent_sb *sb, int64_t rec_epoch, const char *why)
{
	struct sbx_err e = { 0 };

	log_warn("sandbox '%s' (epoch %lld, generation %lld): %s; destroying the local copy",
		 sb->key, (long long)sb->epoch, (long long)sb->generation, why);
	if (sb->rt)
		add_event(a, "fenced", sb->tenant, sb->id, sb->generation, sb->epoch);
	if (rec_epoch > sb->epoch)
		agent_fence(a, sb->key, rec_epoch, &e);
	agent_sb_remove(a, sb);
}

enum agent_lc_action agent_lc_decide(const char *me, int64_t epoch, int running,
				     const char *rec_node, int64_t rec_epoch,
				     const char *rec_state)
{
	const char *state = rec_state ? rec_state : "";

	if (rec_epoch < 0)
		return AGENT_LC_DESTROY;                 /* the record is gone */
	if (!rec_node || strcmp(rec_node, me) != 0)
		return AGENT_LC_DESTROY;                 /* moved to another node */
	if (rec_epoch > epoch) {
		if (strcmp(state, "starting") == 0)
			return AGENT_LC_RAISE_FENCE;     /* the API is about to PUT it here */
		return strcmp(state, "running") == 0 ? AGENT_LC_DESTROY_CAS : AGENT_LC_DESTROY;
	}
	if (rec_epoch < epoch) {
		/* Only lost writes make a record older than what the API told us
		 * (it writes the record before it calls us). */
		if (strcmp(state, "running") == 0 || strcmp(state, "starting") == 0)
			return AGENT_LC_RESET;
		return AGENT_LC_KEEP;
	}
	if (strcmp(state, "sleeping") == 0 && running)
		return AGENT_LC_STOP;
	if (strcmp(state, "running") == 0 && !running)
		return AGENT_LC_REPORT;
	return AGENT_LC_KEEP;
}

static void sweep_reply(void *arg, struct redisReply *reply)
{
	struct sweep_ctx *c = arg;
	struct agent *a = c->a;
	struct agent_sb *sb;
	const char *node, *epoch_s;
	int64_t rec_epoch = -1;
	struct sbx_err e = { 0 };

	if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 || a->shutting_down)
		goto out;
	sb = agent_sb_find(a, c->key);
	/* Changed while we asked (a PUT, a stop): the next sweep looks again. */
	if (!sb || sb->epoch != c->epoch || sb->run != c->run)
		goto out;
	node = elem_str(reply, 0);
	epoch_s = elem_str(reply, 1);
	if (epoch_s && util_parse_i64(epoch_s, 0, INT64_MAX, &rec_epoch) < 0)
		goto out;
	switch (agent_lc_decide(a->conf->agent.name, sb->epoch, sb->rt && !sb->dead, node, rec_epoch,
				elem_str(reply, 2))) {
	case AGENT_LC_KEEP:
		thaw_kept(a, sb, c);
		break;
	case AGENT_LC_RAISE_FENCE:
		agent_fence(a, sb->key, rec_epoch, &e);
		thaw_kept(a, sb, c);
		break;
	case AGENT_LC_DESTROY:
		fence_out(a, sb, rec_epoch, rec_epoch < 0 ? "its record is gone" :
			  "its record names another node or a newer epoch");
		break;
	case AGENT_LC_DESTROY_CAS:
		cas_sleeping(a, sb->key, sb->tenant, sb->id, rec_epoch, sb->generation, 0, "fenced");
		fence_out(a, sb, rec_epoch, "its record has a newer epoch");
		break;
	case AGENT_LC_STOP:
		log_info("sandbox '%s': its record says sleeping; stopping the container", sb->key);
		agent_sb_stop(a, sb);
		break;
	case AGENT_LC_REPORT:
		/* Our report of the stop never reached Redis. */
		agent_lc_report_stopped(a, sb, "slept");
		break;
	case AGENT_LC_RESET:
		cas_sleeping(a, sb->key, sb->tenant, sb->id, rec_epoch, sb->generation, 0, "reset");
		fence_out(a, sb, -1, "its record lost writes and is older than our epoch");
		break;
	}
out:
	free(c);
}

static void sweep(struct agent_lc *lc)
{
	struct agent *a = lc->a;
	char rkey[RKEYS_MAX];

	if (a->shutting_down)
		return;
	agent_fence_prune(a, util_now_ms());
	if (!registry_connected(lc->reg))
		return;
	if (registry_lease_valid(lc->reg))
		rt_kill_thaw_dying(a->rt);
	for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next) {
		struct sweep_ctx *c;

		rkeys_sandbox(rkey, sb->tenant, sb->id);
		c = calloc(1, sizeof(*c));
		if (!c)
			return;
		c->a = a;
		snprintf(c->key, sizeof(c->key), "%s", sb->key);
		c->epoch = sb->epoch;
		c->run = sb->run;
		c->lease_ok = registry_lease_valid(lc->reg);
		c->lease_serial = registry_lease_serial(lc->reg);
		if (registry_command(lc->reg, sweep_reply, c, "HMGET %s node epoch state", rkey) < 0) {
			free(c);
			return;
		}
	}
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	sweep(arg);
}

/* The lease is back after a gap: thaw the pool (it belongs to no one) and
 * sweep now rather than at the next tick, so kept sandboxes thaw soon. */
static void lease_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent_lc *lc = arg;
	int64_t serial = registry_lease_serial(lc->reg);

	if (serial == lc->lease_serial || !registry_lease_valid(lc->reg) || lc->a->shutting_down)
		return;
	lc->lease_serial = serial;
	rt_thaw_pooled(lc->a->rt);
	sweep(lc);
}

/* --- after a (re)connect: what the node index says we ran --- */

/* Mark every sandbox the registry still lists for this node, and that does
 * not run here, as lost; then announce the node. The EVALs are queued on
 * the registry's connection before the alive key, so Redis has run them
 * by the time anyone can route to this node again. */
static void members_reply(void *arg, struct redisReply *reply)
{
	struct agent *a = arg;
	char key[AGENT_KEY_MAX], rkey[RKEYS_MAX], tenant[64];

	for (size_t i = 0; reply && reply->type == REDIS_REPLY_ARRAY && !a->shutting_down &&
			   i < reply->elements; i++) {
		const char *m = elem_str(reply, i), *slash, *id;
		struct agent_sb *sb;
		struct lc_note *n;
		size_t tl;

		if (!m || !(slash = strchr(m, '/')))
			continue;
		tl = (size_t)(slash - m);
		id = slash + 1;
		if (tl == 0 || tl >= sizeof(tenant))
			continue;
		memcpy(tenant, m, tl);
		tenant[tl] = '\0';
		if (!ids_valid_tenant(tenant) || !ids_valid_sandbox(id) ||
		    agent_key(key, sizeof(key), tenant, id) < 0)
			continue;
		rkeys_sandbox(rkey, tenant, id);
		sb = agent_sb_find(a, key);
		if (sb && ((sb->rt && !sb->dead) || sb->build))
			continue;
		if (!(n = note_new(a, key, "lost", tenant, id, 0, 0)))
			break;
		if (registry_command(a->reg, note_reply, n, "EVAL %s 1 %s %s",
				     rscripts_source(RSCRIPT_AGENT_LOST), rkey,
				     a->conf->agent.name) < 0) {
			free(n);
			break;
		}
	}
	if (reply && !a->shutting_down)
		registry_announce(a->reg);
}

static void connected(void *arg, int first)
{
	struct agent_lc *lc = arg;
	struct agent *a = lc->a;

	if (first)
		log_info("lifecycle: marking what an earlier run of '%s' left as lost",
			 a->conf->agent.name);
	if (registry_command(lc->reg, members_reply, a, "SMEMBERS %s",
			     RK_NODE(a->conf->agent.name, "sandboxes")) < 0)
		registry_announce(lc->reg);
	sweep(lc);
}

/* --- setup --- */

struct agent_lc *agent_lc_new(struct agent *a, struct registry *reg, struct sbx_err *e)
{
	struct agent_lc *lc = calloc(1, sizeof(*lc));
	int64_t sweep_ms = a->conf->cluster.node_ttl_ms / 2;
	struct timeval tick = { LC_TICK_MS / 1000, (LC_TICK_MS % 1000) * 1000 }, sw;
	struct timeval watch = { 0, LC_LEASE_WATCH_MS * 1000 };

	if (!lc) {
		err_sys(e, ENOMEM, "lifecycle");
		return NULL;
	}
	if (sweep_ms < LC_SWEEP_MIN_MS)
		sweep_ms = LC_SWEEP_MIN_MS;
	sw.tv_sec = (time_t)(sweep_ms / 1000);
	sw.tv_usec = (suseconds_t)((sweep_ms % 1000) * 1000);
	lc->a = a;
	lc->reg = reg;
	lc->tick_ev = event_new(a->base, -1, EV_PERSIST, tick_cb, lc);
	lc->sweep_ev = event_new(a->base, -1, EV_PERSIST, sweep_cb, lc);
	lc->lease_ev = event_new(a->base, -1, EV_PERSIST, lease_cb, lc);
	if (!lc->tick_ev || !lc->sweep_ev || !lc->lease_ev || event_add(lc->tick_ev, &tick) < 0 ||
	    event_add(lc->sweep_ev, &sw) < 0 || event_add(lc->lease_ev, &watch) < 0) {
		agent_lc_free(lc);
		err_sys(e, ENOMEM, "lifecycle timers");
		return NULL;
	}
	registry_on_connect(reg, connected, lc);
	lease_reg = reg;
	return lc;
}

void agent_lc_free(struct agent_lc *lc)
{
	if (!lc)
		return;
	if (lc->reg)
		registry_on_connect(lc->reg, NULL, NULL);
	if (lc->tick_ev)
		event_free(lc->tick_ev);
	if (lc->sweep_ev)
		event_free(lc->sweep_ev);
	if (lc->lease_ev)
		event_free(lc->lease_ev);
	if (lease_reg == lc->reg)
		lease_reg = NULL;
	free(lc);
}

/* Init died: the policy is "stop, then report crashed", from the loop. */
struct died_ctx {
	struct agent *a;
	char key[AGENT_KEY_MAX];
};

static void died_later(evutil_socket_t fd, short what, void *arg)
{
	struct died_ctx *d = arg;
	struct agent_sb *sb = agent_sb_find(d->a, d->key);

	if (sb && sb->dead) {
		agent_sb_stop(d->a, sb);
		agent_lc_report_stopped(d->a, sb, "crashed");
	}
	free(d);
}

void agent_sb_died(void *arg, struct rt_sandbox *rsb)
{
	struct agent *a = arg;
	struct timeval zero = { 0, 0 };
	struct died_ctx *d;

	for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next) {
		if (sb->rt != rsb)
			continue;
		log_warn("sandbox '%s' died (generation %lld)", sb->key, (long long)sb->generation);
		sb->dead = 1;
		/* Release the container from the loop, not from inside the runtime. */
		d = calloc(1, sizeof(*d));
		if (!d)
			return;
		d->a = a;
		snprintf(d->key, sizeof(d->key), "%s", sb->key);
		if (event_base_once(a->base, -1, EV_TIMEOUT, died_later, d, &zero) < 0)
			free(d);
		return;
	}
}
