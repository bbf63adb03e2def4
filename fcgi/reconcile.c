#include "reconcile.h"
#include "rkeys.h"
#include "ceilings.h"
#include "ids.h"
#include "lifecycle.h"
#include "log.h"
#include "scripts.h"
#include "store.h"
#include "util.h"

#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define SCAN_COUNT 500
#define SUMS_BATCH 256   /* records read per pipelined round (committed sums) */

/* What a member of an index key is checked against. */
struct scan_ctx {
	struct reconcile_stats *st;
	const char *key;          /* the index key */
	char tenant[64];          /* tenant sets and label sets */
	char label[600];          /* label sets: "k=v" */
	char node[64];            /* node sets */
};

typedef int (*key_fn)(const char *key, struct reconcile_stats *st, struct sbx_err *e);
typedef int (*member_fn)(struct scan_ctx *c, const char *member, struct sbx_err *e);

/* The middle of s between prefix and suffix into out (NUL-terminated).
 * 0, or -1 when s has another shape or the middle does not fit. */
static int middle(const char *s, const char *prefix, const char *suffix, char *out, size_t n)
{
	size_t ls = strlen(s), lp = strlen(prefix), lx = strlen(suffix);

	if (ls < lp + lx || strncmp(s, prefix, lp) != 0 || strcmp(s + ls - lx, suffix) != 0 ||
	    ls - lp - lx >= n)
		return -1;
	memcpy(out, s + lp, ls - lp - lx);
	out[ls - lp - lx] = '\0';
	return 0;
}

/* "tenant/id" split into its two valid names. 0 or -1. */
static int split_member(const char *m, char tenant[64], char id[64])
{
	const char *slash = strchr(m, '/');

	if (!slash || (size_t)(slash - m) >= 64 || strlen(slash + 1) >= 64)
		return -1;
	memcpy(tenant, m, (size_t)(slash - m));
	tenant[slash - m] = '\0';
	snprintf(id, 64, "%s", slash + 1);
	return ids_valid_tenant(tenant) && ids_valid_sandbox(id) ? 0 : -1;
}

/* Every key of type matching pattern, through SCAN, to fn. */
static int scan_keys(const char *pattern, const char *type, key_fn fn, struct reconcile_stats *st,
		     struct sbx_err *e)
{
	char cursor[32] = "0";

	do {
		auto_reply redisReply *r = store_command(e, "SCAN %s MATCH %s COUNT %d TYPE %s", cursor,
							  pattern, SCAN_COUNT, type);
		if (!r)
			return -1;
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY ||
		    r->element[0]->len >= sizeof(cursor))
			return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: SCAN gave no cursor");
		memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
		for (size_t i = 0; i < r->element[1]->elements; i++) {
			const redisReply *k = r->element[1]->element[i];
			if (k->type == REDIS_REPLY_STRING && strlen(k->str) == k->len &&
			    fn(k->str, st, e) < 0)
				return -1;
		}
	} while (strcmp(cursor, "0") != 0);
	return 0;
}

/* Every member of the set (SSCAN, step 1) or sorted set (ZSCAN, step 2:
 * member and score) c->key, to fn. */
static int scan_members(const char *cmd, size_t step, struct scan_ctx *c, member_fn fn,
			struct sbx_err *e)
{
	char cursor[32] = "0";

	do {
		auto_reply redisReply *r = store_command(e, "%s %s %s COUNT %d", cmd, c->key, cursor,
							  SCAN_COUNT);
		if (!r)
			return -1;
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY ||
		    r->element[0]->len >= sizeof(cursor))
			return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: %s gave no cursor", cmd);
		memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
		for (size_t i = 0; i < r->element[1]->elements; i += step) {
			const redisReply *m = r->element[1]->element[i];
			if (m->type != REDIS_REPLY_STRING || strlen(m->str) != m->len)
				continue;
			c->st->entries++;
			if (fn(c, m->str, e) < 0)
				return -1;
		}
	} while (strcmp(cursor, "0") != 0);
	return 0;
}

/* Remove a member that can never have a record (not a valid name). */
static int drop_member(struct scan_ctx *c, const char *verb, const char *member, struct sbx_err *e)
{
	auto_reply redisReply *r = store_command(e, "%s %s %s", verb, c->key, member);

	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
		c->st->removed++;
		log_warn("reconcile: removed '%.80s' from %s (not a sandbox name)", member, c->key);
	}
	return 0;
}

/* The repair of one sandbox's entries; counts and logs what changed. */
static int repair(struct reconcile_stats *st, const char *tenant, const char *id, const char *why,
		  struct sbx_err *e)
{
	long long changed = 0;

	if (lifecycle_repair_index(tenant, id, &changed, e) < 0)
		return -1;
	if (changed > 0) {
		st->added += changed;
		log_warn("reconcile: %s/%s %s: added %lld index entries", tenant, id, why, changed);
	} else if (changed < 0) {
		st->removed++;
		log_warn("reconcile: %s/%s %s: removed from the tenant's set", tenant, id, why);
	}
	return 0;
}

static int on_record(const char *key, struct reconcile_stats *st, struct sbx_err *e)
{
	char both[130], tenant[64], id[64];

	if (middle(key, RKEYS_SANDBOX_HEAD, "}", both, sizeof(both)) < 0 ||
	    split_member(both, tenant, id) < 0)
		return 0;
	st->records++;
	return repair(st, tenant, id, "had a record without its index entries", e);
}

static int on_tenant_member(struct scan_ctx *c, const char *member, struct sbx_err *e)
{
	if (!ids_valid_sandbox(member))
		return drop_member(c, "ZREM", member, e);
	return repair(c->st, c->tenant, member, "was in the tenant's set without a record", e);
}

static int on_tenant_set(const char *key, struct reconcile_stats *st, struct sbx_err *e)
{
	struct scan_ctx c = { .st = st, .key = key };

	if (middle(key, RKEYS_TENANT_HEAD, "}:sandboxes", c.tenant, sizeof(c.tenant)) < 0 ||
	    !ids_valid_tenant(c.tenant))
		return 0;
	return scan_members("ZSCAN", 2, &c, on_tenant_member, e);
}

/* Remove member from the label or node set c->key unless the record still
 * holds it (the prune script). */
static int prune(struct scan_ctx *c, const char *kind, const char *member, const char *tenant,
		 const char *id, const char *value, struct sbx_err *e)
{
	char rkey[RKEYS_MAX];
	auto_reply redisReply *r = NULL;

	rkeys_sandbox(rkey, tenant, id);
	r = scripts_run(RSCRIPT_PRUNE, 2, (const char *[]){ c->key, rkey }, 3,
			(const char *[]){ kind, member, value }, e);
	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
		c->st->removed++;
		log_warn("reconcile: removed %s/%s from %s (its record does not hold it)", tenant, id,
			 c->key);
	}
	return 0;
}

static int on_label_member(struct scan_ctx *c, const char *member, struct sbx_err *e)
{
	if (!ids_valid_sandbox(member))
		return drop_member(c, "ZREM", member, e);
	return prune(c, "label", member, c->tenant, member, c->label, e);
}

static int on_label_set(const char *key, struct reconcile_stats *st, struct sbx_err *e)
{
	struct scan_ctx c = { .st = st, .key = key };
	const char *mark = strstr(key, "}:label:");
	size_t lt;

	if (!mark || strncmp(key, RKEYS_TENANT_HEAD, strlen(RKEYS_TENANT_HEAD)) != 0)
		return 0;
	lt = (size_t)(mark - key) - 12;
	if (lt >= sizeof(c.tenant) || strlen(mark + 8) >= sizeof(c.label))
		return 0;
	memcpy(c.tenant, key + 12, lt);
	c.tenant[lt] = '\0';
	snprintf(c.label, sizeof(c.label), "%s", mark + 8);
	if (!ids_valid_tenant(c.tenant))
		return 0;
	return scan_members("ZSCAN", 2, &c, on_label_member, e);
}

static int on_node_member(struct scan_ctx *c, const char *member, struct sbx_err *e)
{
	char tenant[64], id[64];

	if (split_member(member, tenant, id) < 0)
		return drop_member(c, "SREM", member, e);
	return prune(c, "node", member, tenant, id, c->node, e);
}

static int on_node_set(const char *key, struct reconcile_stats *st, struct sbx_err *e)
{
	struct scan_ctx c = { .st = st, .key = key };

	if (middle(key, RKEYS_NODE_HEAD, "}:sandboxes", c.node, sizeof(c.node)) < 0 ||
	    !ids_valid_node(c.node))
		return 0;
	return scan_members("SSCAN", 1, &c, on_node_member, e);
}

/* What the records of one node commit there (sbx:node:{n}:committed). */
struct node_commit {
	int64_t count, memory_mib, cpus_milli;
};

/* Add to c what one record's "HMGET node state resources" reply r commits
 * on node: the rule of the scripts' commit_of() (rscripts.c). */
static void add_commit(struct node_commit *c, const char *node, const redisReply *r)
{
	struct placement_need need;
	const char *state;
	json_t *res = NULL;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
		return;
	state = r->element[1]->str;
	if (strcmp(r->element[0]->str, node) != 0 ||
	    (strcmp(state, "running") != 0 && strcmp(state, "starting") != 0))
		return;
	if (r->element[2]->type == REDIS_REPLY_STRING)
		res = json_loads(r->element[2]->str, 0, NULL);
	ceilings_resources_need(res, &need);
	json_decref(res);
	c->count++;
	c->memory_mib += need.memory_mib;
	c->cpus_milli += need.cpus_milli;
}

/* The sums kept in the hash key (absent: all 0). 0 or -1 with e. */
static int read_kept(const char *key, struct node_commit *c, struct sbx_err *e)
{
	auto_reply redisReply *r = store_command(e, "HMGET %s count memoryMiB cpusMilli", key);
	int64_t *out[3] = { &c->count, &c->memory_mib, &c->cpus_milli };

	if (!r)
		return -1;
	memset(c, 0, sizeof(*c));
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: HMGET gave no array");
	for (size_t i = 0; i < 3; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    util_parse_i64(r->element[i]->str, INT64_MIN, INT64_MAX, out[i]) < 0)
			*out[i] = INT64_MIN;   /* never equal to a sum */
	return 0;
}

/* What node's records commit, summed here from the members of its set
 * (pipelined reads: not atomic, so a change meanwhile may show as a
 * difference). 0 or -1 with e. */
static int read_records(const char *set, const char *node, struct node_commit *c,
			struct sbx_err *e)
{
	auto_reply redisReply *members = store_command(e, "SMEMBERS %s", set);
	redisReply *reps[SUMS_BATCH];

	if (!members)
		return -1;
	memset(c, 0, sizeof(*c));
	if (members->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: %s is no set", set);
	for (size_t at = 0; at < members->elements; at += SUMS_BATCH) {
		size_t k = members->elements - at < SUMS_BATCH ? members->elements - at : SUMS_BATCH;

		for (size_t i = 0; i < k; i++) {
			const redisReply *m = members->element[at + i];
			/* "tenant/id": never a brace, which would change the key's slot. */
			const char *ref = m->type == REDIS_REPLY_STRING && !strpbrk(m->str, "{}") ? m->str : "-";
			if (store_append(e, "HMGET %s node state resources",
					 rkeys_sandbox_ref(RK_BUF, ref)) < 0)
				return -1;
		}
		if (store_collect(reps, k, 0, e) < 0)
			return -1;
		for (size_t i = 0; i < k; i++)
			add_commit(c, node, reps[i]);
		store_free_replies(reps, k);
	}
	return 0;
}

static int same_commit(const struct node_commit *a, const struct node_commit *b)
{
	return a->count == b->count && a->memory_mib == b->memory_mib &&
	       a->cpus_milli == b->cpus_milli;
}

/* Check the committed sums of node against its set's records and rebuild
 * them (the node_sums script) unless they matched both before and after
 * the records were read here: the script reads every record of the node in
 * one call, which would hold Redis for all of them on every pass. With
 * orphan only the script, which drops the sums of a node without a set.
 * Counts and logs a rewrite. */
static int node_sums(struct reconcile_stats *st, const char *node, int orphan, struct sbx_err *e)
{
	char set[RKEYS_MAX], sums[RKEYS_MAX];
	auto_reply redisReply *r = NULL;

	rkeys_node(set, node, "sandboxes");
	rkeys_node(sums, node, "committed");
	if (!orphan) {
		struct node_commit kept, now, again;

		if (read_kept(sums, &kept, e) < 0 || read_records(set, node, &now, e) < 0 ||
		    read_kept(sums, &again, e) < 0)
			return -1;
		if (same_commit(&kept, &now) && same_commit(&again, &now))
			return 0;
	}
	r = scripts_run(RSCRIPT_NODE_SUMS, 2, (const char *[]){ set, sums }, 2,
			(const char *[]){ node, orphan ? "1" : "0" }, e);
	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
		st->sums++;
		log_warn("reconcile: rebuilt %s (it did not match the node's records)", sums);
	}
	return 0;
}

/* A node set (its node's sums rebuilt) or a node's sums (rebuilt only
 * when the node has no set: orphans). */
static int on_node_sums(const char *key, struct reconcile_stats *st, struct sbx_err *e)
{
	char node[64];
	int orphan = middle(key, RKEYS_NODE_HEAD, RKEYS_COMMITTED_TAIL, node, sizeof(node)) == 0;

	if ((!orphan && middle(key, RKEYS_NODE_HEAD, RKEYS_SANDBOXES_TAIL, node, sizeof(node)) < 0) ||
	    !ids_valid_node(node))
		return 0;
	return node_sums(st, node, orphan, e);
}

int reconcile_pass(struct reconcile_stats *st, struct sbx_err *e)
{
	memset(st, 0, sizeof(*st));
	if (scan_keys(RKEYS_SCAN_SANDBOXES, "hash", on_record, st, e) < 0 ||
	    scan_keys(RKEYS_SCAN_TENANT_SETS, "zset", on_tenant_set, st, e) < 0 ||
	    scan_keys(RKEYS_SCAN_LABEL_SETS, "zset", on_label_set, st, e) < 0 ||
	    scan_keys(RKEYS_SCAN_NODE_SETS, "set", on_node_set, st, e) < 0 ||
	    scan_keys(RKEYS_SCAN_NODE_SETS, "set", on_node_sums, st, e) < 0 ||
	    scan_keys(RKEYS_SCAN_NODE_COMMITTED, "hash", on_node_sums, st, e) < 0)
		return -1;
	return 0;
}

/* Take the cluster-wide lock of one pass for ttl ms. 1 taken, 0 another
 * API host has it, -1 with e. */
static int take_lock(int64_t ttl, struct sbx_err *e)
{
	char owner[128], host[64] = "";
	auto_reply redisReply *r = NULL;

	(void)gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "%s:%d", host, (int)getpid());
	r = store_command(e, "SET %s %s NX PX %lld", RKEYS_RECONCILE, owner, (long long)ttl);
	if (!r)
		return -1;
	return r->type == REDIS_REPLY_STATUS ? 1 : 0;
}

int reconcile_run(const struct sbx_conf *c)
{
	struct reconcile_stats st;
	struct sbx_err e;
	sigset_t none;
	int rc;

	memset(&st, 0, sizeof(st));
	/* The master's handlers and blocked signals are not ours. */
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
		return 1;
	(void)prctl(PR_SET_NAME, "sbx-reconcile", 0, 0, 0);
	err_clear(&e);
	if (store_init(c, &e) < 0) {
		log_warn("reconcile: %s", e.msg);
		return 1;
	}
	rc = take_lock(c->api.reconcile_interval_ms, &e);
	if (rc > 0)
		rc = reconcile_pass(&st, &e);
	store_release();
	if (rc < 0) {
		log_warn("reconcile: pass failed: %s", e.msg);
		return 1;
	}
	if (rc == 0 && (st.added || st.removed || st.sums))
		log_warn("reconcile: %lld records and %lld index entries looked at; %lld entries "
			 "added, %lld removed; %lld nodes' sums rebuilt",
			 st.records, st.entries, st.added, st.removed, st.sums);
	return 0;
}
