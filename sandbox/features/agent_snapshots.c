/* The data routes of snapshots (agent_snapshots.h). */
#include "agent_snapshots.h"
#include "agent.h"
#include "agent_metrics.h"
#include "agent_sandboxes.h"
#include "bgwork.h"
#include "files_worker.h"
#include "fspath.h"
#include "ids.h"
#include "log.h"
#include "registry.h"
#include "rkeys.h"
#include "rscripts.h"
#include "snap_archive.h"
#include "snapstore.h"
#include "util.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SNAP_EXCLUDE_MAX 64
#define SNAP_NAME_LEN 64
#define SNAP_TICK_MS 2000           /* how often the background saves are looked at */
#define SNAP_BG_SAVES_MAX 4         /* background saves in progress on the node */

/* What a helper is given (copied by the fork). */
struct snap_job {
	size_t npaths;
	char paths[SNAP_PATHS_MAX][FSPATH_MAX + 16];
	size_t nexclude;
	char exclude[SNAP_EXCLUDE_MAX][NAME_MAX + 1];
	char target[FSPATH_MAX + 16];  /* restore: "" for the snapshot's own paths */
	char sid[24];
	uint64_t max_entries;
	uint64_t max_bytes;            /* restore: the disk; import: the quota left */
	int to_file;                   /* a backup: the archive goes to the file target */
	char prev_tree[65];            /* a save: the tree digest of the last one ("" none) */
};

/* The agent's side of one request, across its helper and its Redis calls. */
struct snap_ctx {
	int refs;
	struct httpd_req *r;           /* NULL once the request is over */
	struct agent *a;
	char key[AGENT_KEY_MAX];
	int64_t run;
	char tenant[64], sandbox[64], sid[24], name[SNAP_NAME_LEN + 1];
	char paths[SNAP_PATHS_MAX * (FSPATH_MAX + 20)];   /* JSON text */
	struct snapstore_put put;      /* create / import: the archive being made */
	int committed;
	int export;                    /* GET …/archive: answer with the archive */
	int on_start;                  /* a start's restoreFrom: answer with the sandbox */
	struct snap_job *job;          /* restore: filled from the record */
	enum agent_metrics_snap_op op; /* what it is counted as */
	int started;                   /* the work began: it ends counted */
	int counted;                   /* its end is counted */
	char loc[SNAPSTORE_LOC_MAX];   /* restore / export: the archive's location */
	int fd;                        /* its fd, opened off the loop (open_work) */
	struct sbx_err err;            /* what the work off the loop ran into */
};

static struct snapstore store;
static int store_ready;

static struct snapstore *get_store(struct agent *a, struct sbx_err *e)
{
	if (!store_ready && snapstore_init(&store, a->conf, e) < 0)
		return NULL;
	store_ready = 1;
	return &store;
}

static struct snap_ctx *ctx_of(struct agent *a, const struct agent_sb *sb, struct sbx_err *e)
{
	struct snap_ctx *x = calloc(1, sizeof(*x));

	if (!x) {
		err_sys(e, ENOMEM, "snapshot");
		return NULL;
	}
	x->refs = 1;
	x->a = a;
	x->put.fd = -1;
	x->fd = -1;
	snprintf(x->key, sizeof(x->key), "%s", sb->key);
	x->run = sb->run;
	snprintf(x->tenant, sizeof(x->tenant), "%s", sb->tenant);
	snprintf(x->sandbox, sizeof(x->sandbox), "%s", sb->id);
	return x;
}

static struct snap_ctx *ctx_new(struct agent_call *c, struct sbx_err *e)
{
	return ctx_of(c->a, c->sb, e);
}

/* The sandbox of x if its container is still the one x began on. */
static struct agent_sb *ctx_sandbox(const struct snap_ctx *x)
{
	struct agent_sb *sb = agent_sb_find(x->a, x->key);

	return sb && sb->run == x->run && agent_sb_container(sb) ? sb : NULL;
}

static void ctx_unref(void *arg)
{
	struct snap_ctx *x = arg;

	x->r = NULL;
	if (--x->refs > 0)
		return;
	if (x->started && !x->counted)
		agent_metrics_snapshot(x->op, 0, 0);
	if (x->put.fd >= 0 || (x->put.tmp[0] && !x->committed))
		snapstore_abort(&store, &x->put);
	if (x->fd >= 0)
		close(x->fd);
	free(x->job);
	free(x);
}

/* x ended well, bytes of archive written or read: counted (once). A
 * started x that ends otherwise is counted failed by ctx_unref. */
static void ctx_ok(struct snap_ctx *x, uint64_t bytes)
{
	if (!x->counted)
		agent_metrics_snapshot(x->op, 1, bytes);
	x->counted = 1;
}

static void ctx_closed(void *arg, int failed)
{
	struct snap_ctx *x = arg;

	(void)failed;
	x->r = NULL;
}

/* Wait for Redis on behalf of c's request. */
static void ctx_hold(struct snap_ctx *x, struct httpd_req *r)
{
	x->r = r;
	httpd_on_close(r, ctx_closed, x);
	httpd_defer(r);
}

/* --- input --- */

static int parse_path(const char *s, char *out, size_t n, const char *what, struct sbx_err *e)
{
	struct fspath fp;

	if (fspath_parse(s, strlen(s), &fp, e) < 0)
		return -1;
	if (strcmp(fp.abs, "/") == 0)
		return err_set(e, SBX_E_VALIDATION, "%s must be a directory below /", what);
	snprintf(out, n, "%s", fp.abs);
	return 0;
}

/* paths: a JSON array of 1..SNAP_PATHS_MAX paths, or NULL for /workspace. */
static int parse_paths(const json_t *v, struct snap_job *j, struct sbx_err *e)
{
	size_t i;
	json_t *p;

	if (!v) {
		snprintf(j->paths[0], sizeof(j->paths[0]), "/workspace");
		j->npaths = 1;
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > SNAP_PATHS_MAX)
		return err_set(e, SBX_E_VALIDATION, "paths must be an array of 1-%d paths",
			       SNAP_PATHS_MAX);
	json_array_foreach(v, i, p) {
		if (!json_is_string(p))
			return err_set(e, SBX_E_VALIDATION, "paths must be strings");
		if (parse_path(json_string_value(p), j->paths[i], sizeof(j->paths[i]), "a path", e) < 0)
			return -1;
		for (size_t k = 0; k < i; k++) {
			size_t n = strlen(j->paths[k]), m = strlen(j->paths[i]);
			const char *lo = n < m ? j->paths[k] : j->paths[i];
			const char *hi = n < m ? j->paths[i] : j->paths[k];
			size_t ln = n < m ? n : m;

			if (strncmp(lo, hi, ln) == 0 && (hi[ln] == '\0' || hi[ln] == '/'))
				return err_set(e, SBX_E_VALIDATION, "paths '%s' and '%s' overlap", lo, hi);
		}
	}
	j->npaths = json_array_size(v);
	return 0;
}

static int parse_exclude(const json_t *v, struct snap_job *j, struct sbx_err *e)
{
	size_t i;
	json_t *p;

	if (!v)
		return 0;
	if (!json_is_array(v) || json_array_size(v) > SNAP_EXCLUDE_MAX)
		return err_set(e, SBX_E_VALIDATION, "exclude must be an array of at most %d names",
			       SNAP_EXCLUDE_MAX);
	json_array_foreach(v, i, p) {
		const char *s = json_is_string(p) ? json_string_value(p) : NULL;

		if (!s || !*s || strlen(s) > NAME_MAX || strchr(s, '/') || strcmp(s, ".") == 0 ||
		    strcmp(s, "..") == 0)
			return err_set(e, SBX_E_VALIDATION,
				       "exclude holds file names (no '/'), like \"node_modules\"");
		snprintf(j->exclude[i], sizeof(j->exclude[i]), "%s", s);
	}
	j->nexclude = json_array_size(v);
	return 0;
}

static int paths_json(const struct snap_job *j, char *out, size_t n, struct sbx_err *e)
{
	json_t *a = json_array();
	char *text;
	int rc = 0;

	for (size_t i = 0; a && i < j->npaths; i++)
		json_array_append_new(a, json_string(j->paths[i]));
	text = a ? json_dumps(a, JSON_COMPACT) : NULL;
	json_decref(a);
	if (!text || (size_t)snprintf(out, n, "%s", text) >= n)
		rc = err_sys(e, ENOMEM, "snapshot paths");
	free(text);
	return rc;
}

static int parse_name(const char *s, char *out, struct sbx_err *e)
{
	if (!s)
		return 0;
	if (!ids_valid_name(s) || strlen(s) > SNAP_NAME_LEN)
		return err_set(e, SBX_E_VALIDATION, "name must be 1-%d of [A-Za-z0-9_.-]",
			       SNAP_NAME_LEN);
	snprintf(out, SNAP_NAME_LEN + 1, "%s", s);
	return 0;
}

static int new_snapshot(struct snap_ctx *x, struct sbx_err *e)
{
	unsigned char rnd[8];
	char loc[SNAPSTORE_LOC_MAX];

	if (util_random(rnd, sizeof(rnd)) < 0)
		return err_sys(e, errno, "snapshot id");
	memcpy(x->sid, "sn-", 3);
	util_hex(rnd, sizeof(rnd), x->sid + 3);
	util_xsnprintf(loc, sizeof(loc), "%s/%s.tar.zst", x->tenant, x->sid);
	return snapstore_create(&store, loc, &x->put, e);
}

/* --- the helpers --- */

/* The spec of a helper that runs fn(j) with the store's file fd. */
static void job_spec(struct fw_spec *spec, enum fw_mode mode, fw_child_fn fn, struct snap_job *j,
		     int fd)
{
	memset(spec, 0, sizeof(*spec));
	spec->mode = mode;
	spec->timeout_s = FW_TRANSFER_TIMEOUT_S;
	spec->content_type = "application/json";
	spec->fn = fn;
	spec->arg = j;
	spec->xfd = fd;
}

static void job_ptrs(const struct snap_job *j, const char **paths, const char **excl)
{
	for (size_t i = 0; i < j->npaths; i++)
		paths[i] = j->paths[i];
	for (size_t i = 0; excl && i < j->nexclude; i++)
		excl[i] = j->exclude[i];
}

static int child_answer(const struct fw_env *env, int rc, const struct sbx_err *e,
			const struct snap_sum *sum, json_t *extra)
{
	json_t *body;

	if (rc < 0) {
		json_decref(extra);
		fw_send_err(env->chan, e);
		return 1;
	}
	body = json_pack("{s:I, s:s, s:I, s:I}", "size", (json_int_t)sum->size, "digest",
			 sum->sha256, "entries", (json_int_t)sum->entries, "bytes",
			 (json_int_t)sum->bytes);
	if (body && extra)
		json_object_update(body, extra);
	json_decref(extra);
	return fw_send_json(env->chan, 200, body) < 0;
}

static int child_create(void *arg, const struct fw_env *env)
{
	const struct snap_job *j = arg;
	const char *paths[SNAP_PATHS_MAX], *excl[SNAP_EXCLUDE_MAX];
	struct snap_sum sum;
	struct sbx_err e;
	int rc;

	err_clear(&e);
	job_ptrs(j, paths, excl);
	rc = snap_archive_write(env->root, paths, j->npaths, excl, j->nexclude, env->xfd,
				j->max_entries, &sum, &e);
	return child_answer(env, rc, &e, &sum, NULL);
}

/* A save of persisted paths: nothing is written when the tree's digest is
 * the last save's (j->prev_tree); the answer carries the digest ("tree"),
 * and "unchanged": true when it was. */
static int child_persist(void *arg, const struct fw_env *env)
{
	const struct snap_job *j = arg;
	const char *paths[SNAP_PATHS_MAX];
	struct snap_sum sum;
	struct sbx_err e;
	char tree[65];
	int rc;

	err_clear(&e);
	job_ptrs(j, paths, NULL);
	if (snap_tree_digest(env->root, paths, j->npaths, NULL, 0, j->max_entries, tree, &e) < 0)
		return child_answer(env, -1, &e, &sum, NULL);
	if (j->prev_tree[0] && strcmp(tree, j->prev_tree) == 0)
		return fw_send_json(env->chan, 200,
				    json_pack("{s:b, s:s}", "unchanged", 1, "tree", tree)) < 0;
	rc = snap_archive_write(env->root, paths, j->npaths, NULL, 0, env->xfd, j->max_entries,
				&sum, &e);
	return child_answer(env, rc, &e, &sum, json_pack("{s:s}", "tree", tree));
}

struct upload_src {
	int chan;
	char rec[FW_REC_MAX + 64];
};

static ssize_t upload_read(void *arg, void *buf, size_t max)
{
	struct upload_src *u = arg;
	ssize_t n = fw_recv(u->chan, u->rec, sizeof(u->rec));

	if (n <= 0) {
		if (n == 0 || errno == EAGAIN)
			errno = EPIPE;   /* the agent gave up, or the upload stalled */
		return -1;
	}
	if (u->rec[0] == 'E')
		return 0;
	if (u->rec[0] != 'D' || (size_t)n - 1 > max) {
		errno = EPROTO;
		return -1;
	}
	memcpy(buf, u->rec + 1, (size_t)n - 1);
	return n - 1;
}

static int child_import(void *arg, const struct fw_env *env)
{
	const struct snap_job *j = arg;
	struct upload_src *u = calloc(1, sizeof(*u));
	struct snap_sum sum;
	struct sbx_err e;
	int rc;

	err_clear(&e);
	if (!u)
		return 1;
	u->chan = env->chan;
	rc = snap_archive_copy(upload_read, u, env->xfd, j->max_bytes, j->max_entries, &sum, &e);
	free(u);
	return child_answer(env, rc, &e, &sum, NULL);
}

static int child_restore(void *arg, const struct fw_env *env)
{
	const struct snap_job *j = arg;
	const char *paths[SNAP_PATHS_MAX];
	struct snap_sum sum;
	struct sbx_err e;
	int rc;

	err_clear(&e);
	job_ptrs(j, paths, NULL);
	rc = snap_archive_extract(env->root, env->xfd, paths, j->npaths,
				  j->target[0] ? j->target : NULL, j->max_bytes, j->max_entries, &sum,
				  &e);
	return child_answer(env, rc, &e, &sum,
			    json_pack("{s:s, s:s*}", "snapshot", j->sid, "targetDir",
				      j->target[0] ? j->target : NULL));
}

/* --- a new archive: commit, record, answer --- */

/* --- the store's slow calls, off the loop (bgwork.h) --- */

struct removal {
	char loc[SNAPSTORE_LOC_MAX];
	int rc;
	struct sbx_err e;
};

static void remove_work(void *arg)
{
	struct removal *m = arg;

	m->rc = snapstore_remove(&store, m->loc, &m->e);
}

static void removed(void *arg)
{
	struct removal *m = arg;

	if (m->rc < 0)
		log_warn("snapshot archive '%s' stays: %s", m->loc, m->e.msg);
	free(m);
}

/* Remove the archive at loc from the store, off the loop (on it when no
 * thread can be had); a failure is logged. */
static void remove_later(struct agent *a, const char *loc)
{
	struct removal *m = calloc(1, sizeof(*m));
	struct sbx_err e;

	if (m) {
		snprintf(m->loc, sizeof(m->loc), "%s", loc);
		if (bgwork_run(a, remove_work, removed, m, &e) == 0)
			return;
		remove_work(m);
		removed(m);
		return;
	}
	if (snapstore_remove(&store, loc, &e) < 0)
		log_warn("snapshot archive '%s' stays: %s", loc, e.msg);
}

/* The agent's own failure after the helper succeeded: the archive goes. */
static void drop_archive(struct snap_ctx *x)
{
	if (x->committed)
		remove_later(x->a, x->put.loc);
	x->committed = 0;
	x->put.tmp[0] = '\0';
}

struct rec_kv {
	char size[24], entries[24], bytes[24], created[24];
	const char *kv[24];
};

static void rec_fill(struct rec_kv *k, const struct snap_ctx *x, const char *digest)
{
	static const char *const names[] = { SNAPSTORE_FIELDS };
	const char *vals[] = { x->sid,   x->tenant,	   x->sandbox, x->name,	     x->paths,
			       k->size,	 digest,	   k->entries, k->bytes,     store.ops->name,
			       x->put.loc, k->created };

	_Static_assert(ARRAY_SIZE(names) == ARRAY_SIZE(vals), "one value per field");
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		k->kv[2 * i] = names[i];
		k->kv[2 * i + 1] = vals[i];
	}
}

/* A record's decimal size as bytes (0 when it is not one). */
static uint64_t size_bytes(const char *s)
{
	int64_t n = 0;

	return util_parse_i64(s, 0, INT64_MAX, &n) == 0 ? (uint64_t)n : 0;
}

struct add_req {
	struct snap_ctx *x;
	struct rec_kv k;
	char digest[65];
	int64_t quota;
	json_t *ans;               /* the helper's answer, until the commit is done */
	int rc;                    /* of the commit (commit_work) */
};

/* q's record from the helper's answer ans, and the keys the scripts take:
 * the tenant's byte count, the record, the tenant's index. */
static void add_fill(struct add_req *q, const struct snap_ctx *x, const json_t *ans,
		     char quota[24], char kbytes[RKEYS_MAX], char krec[RKEYS_MAX],
		     char kidx[RKEYS_MAX])
{
	q->quota = x->a->conf->snapshots.tenant_quota_mib << 20;
	snprintf(q->digest, sizeof(q->digest), "%s",
		 json_string_value(json_object_get(ans, "digest")) ?: "");
	util_xsnprintf(q->k.size, sizeof(q->k.size), "%lld",
		       (long long)json_integer_value(json_object_get(ans, "size")));
	util_xsnprintf(q->k.entries, sizeof(q->k.entries), "%lld",
		       (long long)json_integer_value(json_object_get(ans, "entries")));
	util_xsnprintf(q->k.bytes, sizeof(q->k.bytes), "%lld",
		       (long long)json_integer_value(json_object_get(ans, "bytes")));
	util_xsnprintf(q->k.created, sizeof(q->k.created), "%lld", (long long)util_wall_ms());
	util_xsnprintf(quota, 24, "%lld", (long long)q->quota);
	rec_fill(&q->k, x, q->digest);
	rkeys_tenant(kbytes, x->tenant, "snapbytes");
	rkeys_snapshot(krec, x->tenant, x->sid);
	rkeys_tenant(kidx, x->tenant, "snapshots");
}

static void added(void *arg, struct redisReply *reply)
{
	struct add_req *q = arg;
	struct snap_ctx *x = q->x;
	struct sbx_err e;
	int ok = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
		 reply->element[0]->type == REDIS_REPLY_INTEGER;

	if (!ok || reply->element[0]->integer != 1)
		drop_archive(x);
	else
		ctx_ok(x, size_bytes(q->k.size));
	if (x->r) {
		if (!ok) {
			err_set(&e, SBX_E_REDIS_UNAVAILABLE, "cannot record the snapshot, retry");
			agent_call_reply_err(x->r, &e);
		} else if (reply->element[0]->integer != 1) {
			long long used = reply->element[1]->type == REDIS_REPLY_INTEGER
						 ? reply->element[1]->integer
						 : 0;

			err_set(&e, SBX_E_QUOTA_EXCEEDED,
				"the tenant's snapshots use %lld of %lld MiB; this one needs %s bytes",
				used >> 20, (long long)(q->quota >> 20), q->k.size);
			agent_call_reply_err(x->r, &e);
		} else {
			json_t *rec = snapstore_record_json(ARRAY_SIZE(q->k.kv), q->k.kv);

			if (rec) {
				httpd_reply_json(x->r, 201, rec);
			} else {
				err_set(&e, SBX_E_INTERNAL, "snapshot record");
				agent_call_reply_err(x->r, &e);
			}
		}
	}
	free(q);
	ctx_unref(x);
}

/* On a thread: the new archive into the store (an fsync, an upload). */
static void commit_work(void *arg)
{
	struct add_req *q = arg;

	q->rc = snapstore_commit(&store, &q->x->put, &q->x->err);
}

/* On the loop: the commit is done; record the snapshot (added answers). */
static void committed(void *arg)
{
	struct add_req *q = arg;
	struct snap_ctx *x = q->x;
	char kbytes[RKEYS_MAX], krec[RKEYS_MAX], kidx[RKEYS_MAX], quota[24];
	struct sbx_err e;
	const char **kv;

	if (q->rc < 0) {
		e = x->err;
		goto fail;
	}
	x->committed = 1;
	add_fill(q, x, q->ans, quota, kbytes, krec, kidx);
	json_decref(q->ans);
	q->ans = NULL;
	kv = q->k.kv;
	if (registry_command(x->a->reg, added, q,
			     "EVAL %s 3 %s %s %s %s %s %s %s "
			     "%s %s %s %s %s %s %s %s %s %s %s %s "
			     "%s %s %s %s %s %s %s %s %s %s %s %s",
			     rscripts_source(RSCRIPT_SNAPSHOT_ADD), kbytes, krec, kidx, q->k.size, quota,
			     q->k.created, x->sid, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5], kv[6],
			     kv[7], kv[8], kv[9], kv[10], kv[11], kv[12], kv[13], kv[14], kv[15],
			     kv[16], kv[17], kv[18], kv[19], kv[20], kv[21], kv[22], kv[23]) == 0)
		return;   /* added() ends it */
	drop_archive(x);
	err_set(&e, SBX_E_REDIS_UNAVAILABLE, "cannot record the snapshot, retry");
fail:
	if (x->r)
		agent_call_reply_err(x->r, &e);
	json_decref(q->ans);
	free(q);
	ctx_unref(x);
}

static void on_archived(struct httpd_req *r, int status, json_t *body, void *ctx)
{
	struct snap_ctx *x = ctx;
	struct add_req *q = calloc(1, sizeof(*q));
	struct sbx_err e;

	(void)status;
	if (!q || !json_is_string(json_object_get(body, "digest"))) {
		err_set(&e, SBX_E_INTERNAL, "snapshot helper answered badly");
		goto fail;
	}
	q->x = x;
	q->ans = body;
	x->r = r;   /* until the call ends (ctx_unref) */
	x->refs++;
	if (bgwork_run(x->a, commit_work, committed, q, &e) < 0) {
		x->refs--;
		goto fail;
	}
	return;
fail:
	free(q);
	json_decref(body);
	agent_call_reply_err(r, &e);
}

static int start_archive(struct agent_call *c, struct snap_ctx *x, enum fw_mode mode,
			 fw_child_fn fn, struct snap_job *j, struct sbx_err *e)
{
	struct fw_spec spec;

	if (new_snapshot(x, e) < 0) {
		ctx_unref(x);
		return -1;
	}
	if (paths_json(j, x->paths, sizeof(x->paths), e) < 0) {
		ctx_unref(x);
		return -1;
	}
	job_spec(&spec, mode, fn, j, x->put.fd);
	x->started = 1;
	spec.on_json = on_archived;
	spec.ctx = x;
	spec.ctx_free = ctx_unref;
	return fw_start(c->r, c->sb, &spec, e);   /* x is the call's, also on failure */
}

const struct jsonv_field agent_snap_create_fields[] = {
	{ "paths", JV_ARRAY, 0 },
	{ "name", JV_STRING, 0 },
	{ "exclude", JV_ARRAY, 0 },
	{ NULL, 0, 0 },
};

int agent_snap_create(struct agent_call *c, struct sbx_err *e)
{
	auto_free struct snap_job *j = calloc(1, sizeof(*j));
	struct snap_ctx *x;

	if (!j)
		return err_sys(e, ENOMEM, "snapshot");
	if (!get_store(c->a, e) || parse_paths(json_object_get(c->body, "paths"), j, e) < 0 ||
	    parse_exclude(json_object_get(c->body, "exclude"), j, e) < 0)
		return -1;
	j->max_entries = (uint64_t)c->a->conf->snapshots.max_entries;
	x = ctx_new(c, e);
	if (!x)
		return -1;
	if (parse_name(json_string_value(json_object_get(c->body, "name")), x->name, e) < 0) {
		ctx_unref(x);
		return -1;
	}
	return start_archive(c, x, FW_COLLECT, child_create, j, e);
}

/* "a,b" of the query into j's paths (NULL: /workspace). */
static int query_paths(const char *q, struct snap_job *j, struct sbx_err *e)
{
	json_t *a;
	int rc;

	if (!q)
		return parse_paths(NULL, j, e);
	a = json_array();
	if (!a)
		return err_sys(e, ENOMEM, "paths");
	for (const char *p = q; a;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		json_array_append_new(a, json_stringn(p, n));
		if (!end)
			break;
		p = end + 1;
	}
	rc = parse_paths(a, j, e);
	json_decref(a);
	return rc;
}

int agent_snap_import(struct agent_call *c, struct sbx_err *e)
{
	auto_free struct snap_job *j = calloc(1, sizeof(*j));
	struct snap_ctx *x;

	if (!j)
		return err_sys(e, ENOMEM, "snapshot");
	if (!get_store(c->a, e) || query_paths(agent_call_query(c, "paths"), j, e) < 0)
		return -1;
	j->max_entries = (uint64_t)c->a->conf->snapshots.max_entries;
	j->max_bytes = (uint64_t)c->a->conf->snapshots.tenant_quota_mib << 20;
	x = ctx_new(c, e);
	if (!x)
		return -1;
	if (parse_name(agent_call_query(c, "name"), x->name, e) < 0) {
		ctx_unref(x);
		return -1;
	}
	x->op = AM_SNAP_IMPORT;
	return start_archive(c, x, FW_UPLOAD, child_import, j, e);
}

/* --- reading a record: restore and export --- */

static const char *reply_field(const struct redisReply *rep, const char *name)
{
	for (size_t i = 0; i + 1 < rep->elements; i += 2)
		if (rep->element[i]->type == REDIS_REPLY_STRING &&
		    strcmp(rep->element[i]->str, name) == 0 &&
		    rep->element[i + 1]->type == REDIS_REPLY_STRING)
			return rep->element[i + 1]->str;
	return NULL;
}

/* The location of the archive of the record in rep into x->loc; -1 with e. */
static int record_loc(struct snap_ctx *x, const struct redisReply *rep, struct sbx_err *e)
{
	const char *loc, *tenant;

	if (!rep || rep->type != REDIS_REPLY_ARRAY)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "cannot read the snapshot, retry");
	loc = reply_field(rep, "location");
	tenant = reply_field(rep, "tenant");
	if (!loc || !tenant || strcmp(tenant, x->tenant) != 0)
		return err_set(e, SBX_E_SNAPSHOT_NOT_FOUND, "no snapshot '%s'", x->sid);
	if ((size_t)snprintf(x->loc, sizeof(x->loc), "%s", loc) >= sizeof(x->loc))
		return err_set(e, SBX_E_INTERNAL, "snapshot '%s' has a bad record", x->sid);
	return 0;
}

/* On a thread: open the archive (a download, for s3). */
static void open_work(void *arg)
{
	struct snap_ctx *x = arg;

	x->fd = snapstore_open(&store, x->loc, &x->err);
}

/* A start's restore is done: answer the start. */
static void on_started(struct httpd_req *r, int status, json_t *body, void *ctx)
{
	struct snap_ctx *x = ctx;
	struct agent_sb *sb = ctx_sandbox(x);
	struct sbx_err e;

	(void)status;
	ctx_ok(x, (uint64_t)json_integer_value(json_object_get(body, "size")));
	json_decref(body);
	if (!sb) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE, "the sandbox was stopped during its restore");
		agent_call_reply_err(r, &e);
		return;
	}
	log_info("sandbox '%s' restored from snapshot %s", x->key, x->sid);
	httpd_reply_json(r, 201, agent_sb_json(sb));
}

/* A restore call's helper is done: count it, answer its answer. */
static void on_restored(struct httpd_req *r, int status, json_t *body, void *ctx)
{
	ctx_ok(ctx, (uint64_t)json_integer_value(json_object_get(body, "size")));
	httpd_reply_json(r, status, body);
}

/* On the loop: the archive is open (or not): export it, or restore it. */
static void opened(void *arg)
{
	struct snap_ctx *x = arg;
	struct httpd_req *r = x->r;
	struct agent_sb *sb;
	struct fw_spec spec;
	struct sbx_err e;
	auto_close int fd = steal_fd(&x->fd);

	if (!r)
		goto out;
	httpd_on_close(r, NULL, NULL);
	x->r = NULL;
	if (fd < 0) {
		e = x->err;
		goto fail;
	}
	if (x->export) {
		struct stat st;

		if (fstat(fd, &st) < 0) {
			err_sys(&e, errno, "snapshot");
			goto fail;
		}
		httpd_add_header(r, "Content-Disposition", "attachment");
		ctx_ok(x, (uint64_t)st.st_size);
		httpd_reply_fd(r, 200, "application/zstd", steal_fd(&fd), 0, (uint64_t)st.st_size);
		goto out;
	}
	sb = ctx_sandbox(x);
	if (!sb) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE, "the sandbox was stopped during the restore");
		goto fail;
	}
	job_spec(&spec, FW_COLLECT, child_restore, x->job, fd);
	spec.on_json = x->on_start ? on_started : on_restored;
	spec.ctx = x;
	spec.ctx_free = ctx_unref;
	x->refs++;
	if (fw_start(r, sb, &spec, &e) < 0)
		goto fail;
	goto out;
fail:
	if (x->on_start && (sb = ctx_sandbox(x)))
		agent_sb_stop(x->a, sb);   /* the start failed: nothing half-made runs */
	agent_call_reply_err(r, &e);
out:
	ctx_unref(x);
}

/* The record is read: check it, then open its archive off the loop. */
static void restore_got(void *arg, struct redisReply *rep)
{
	struct snap_ctx *x = arg;
	struct httpd_req *r = x->r;
	struct agent_sb *sb;
	struct sbx_err e;
	json_t *paths = NULL;
	size_t i;
	json_t *p;

	if (!r)
		goto out;
	if (record_loc(x, rep, &e) < 0)
		goto fail;
	if (x->export)
		goto open;
	paths = json_loads(reply_field(rep, "paths") ? reply_field(rep, "paths") : "", 0, NULL);
	if (!json_is_array(paths) || json_array_size(paths) == 0 ||
	    json_array_size(paths) > SNAP_PATHS_MAX) {
		err_set(&e, SBX_E_INTERNAL, "snapshot '%s' has a bad record", x->sid);
		goto fail;
	}
	json_array_foreach(paths, i, p)
		snprintf(x->job->paths[i], sizeof(x->job->paths[i]), "%s", json_string_value(p) ?: "");
	x->job->npaths = json_array_size(paths);
	{
		int64_t bytes = 0;

		/* the record counts the archive's data: a restore that cannot fit
		 * is refused before anything is written (extraction counts too) */
		if (util_parse_i64(reply_field(rep, "bytes") ?: "", 0, INT64_MAX, &bytes) == 0 &&
		    (uint64_t)bytes > x->job->max_bytes) {
			err_set(&e, SBX_E_FILE_TOO_LARGE,
				"snapshot '%s' holds %lld MiB of files; the sandbox's disk is %llu MiB",
				x->sid, (long long)(bytes >> 20),
				(unsigned long long)(x->job->max_bytes >> 20));
			goto fail;
		}
	}
	if (x->job->target[0] && x->job->npaths != 1) {
		err_set(&e, SBX_E_VALIDATION, "targetDir needs a snapshot of one path");
		goto fail;
	}
open:
	if (bgwork_run(x->a, open_work, opened, x, &e) == 0) {
		json_decref(paths);
		return;   /* opened() ends x's reference */
	}
fail:
	httpd_on_close(r, NULL, NULL);
	x->r = NULL;
	if (x->on_start && (sb = ctx_sandbox(x)))
		agent_sb_stop(x->a, sb);   /* the start failed: nothing half-made runs */
	agent_call_reply_err(r, &e);
out:
	json_decref(paths);
	ctx_unref(x);
}

static int read_record(struct httpd_req *r, struct snap_ctx *x, struct sbx_err *e)
{
	char key[RKEYS_MAX];

	rkeys_snapshot(key, x->tenant, x->sid);
	x->started = 1;
	if (registry_command(x->a->reg, restore_got, x, "HGETALL %s", key) < 0) {
		ctx_unref(x);
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "cannot read the snapshot, retry");
	}
	ctx_hold(x, r);
	return 0;
}

/* The context of a call on snapshot sid (checked), or NULL with e. */
static struct snap_ctx *record_ctx(struct agent_call *c, const char *sid, struct sbx_err *e)
{
	struct snap_ctx *x;

	if (!get_store(c->a, e))
		return NULL;
	if (!sid || !snapstore_id_valid(sid)) {
		err_set(e, SBX_E_VALIDATION, "snapshot must be a snapshot id (sn-…)");
		return NULL;
	}
	x = ctx_new(c, e);
	if (x)
		snprintf(x->sid, sizeof(x->sid), "%s", sid);
	return x;
}

/* x's restore job for sb (x is released on failure). */
static int restore_job(struct snap_ctx *x, const struct agent_sb *sb, struct sbx_err *e)
{
	x->op = AM_SNAP_RESTORE;
	x->job = calloc(1, sizeof(*x->job));
	if (!x->job) {
		ctx_unref(x);
		return err_sys(e, ENOMEM, "restore");
	}
	snprintf(x->job->sid, sizeof(x->job->sid), "%s", x->sid);
	x->job->max_entries = (uint64_t)x->a->conf->snapshots.max_entries;
	x->job->max_bytes = (uint64_t)(sb->limits.disk_mib > 0 ? sb->limits.disk_mib
							       : x->a->conf->sandbox.disk_mib)
			    << 20;
	return 0;
}

const struct jsonv_field agent_snap_restore_fields[] = {
	{ "snapshot", JV_STRING, 1 },
	{ "targetDir", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

int agent_snap_restore(struct agent_call *c, struct sbx_err *e)
{
	const char *sid = json_string_value(json_object_get(c->body, "snapshot"));
	const char *target = json_string_value(json_object_get(c->body, "targetDir"));
	struct snap_ctx *x = record_ctx(c, sid, e);

	if (!x)
		return -1;
	if (restore_job(x, c->sb, e) < 0)
		return -1;
	if (target &&
	    parse_path(target, x->job->target, sizeof(x->job->target), "targetDir", e) < 0) {
		ctx_unref(x);
		return -1;
	}
	return read_record(c->r, x, e);
}

int agent_snap_export(struct agent_call *c, struct sbx_err *e)
{
	const char *sid = agent_call_query(c, "snapshot");
	struct snap_ctx *x = record_ctx(c, sid, e);

	if (!x)
		return -1;
	x->export = 1;
	x->op = AM_SNAP_EXPORT;
	return read_record(c->r, x, e);
}

/* A start with restoreFrom (module.h): the snapshot into the new container. */
int agent_snap_restore_on_start(struct httpd_req *r, struct agent_sb *sb, const char *sid,
				 struct sbx_err *e)
{
	struct snap_ctx *x;

	if (!get_store(httpd_ctx(r), e))
		return -1;
	x = ctx_of(httpd_ctx(r), sb, e);
	if (!x)
		return -1;
	snprintf(x->sid, sizeof(x->sid), "%s", sid);
	x->on_start = 1;
	if (restore_job(x, sb, e) < 0)
		return -1;
	return read_record(r, x, e);
}

/* --- persisted paths: saved before a stop (module.h agent_persist_before_stop)
 * and, with intervalS, in the background while the container runs --- */

/* The background saves of one container: its slot of agent_snap_module. */
struct persist_slot {
	int64_t due_ms;            /* monotonic: the next background save (0: not yet set) */
	int busy;                  /* a background save is in progress */
	int64_t seq;               /* saves begun; a save is recorded only if it is the last */
	char tree[65];             /* the tree digest of the last recorded save ("" none) */
	char sid[24];              /* and its snapshot */
};

static unsigned bg_saves;          /* background saves in progress on the node */
static struct event *tick_ev;

static struct persist_slot *slot_of(struct agent_sb *sb, int make)
{
	void **p = agent_sb_slot(sb, &agent_snap_module);

	if (!*p && make)
		*p = calloc(1, sizeof(struct persist_slot));
	return *p;
}

struct persist_req {
	struct agent *a;
	char key[AGENT_KEY_MAX];
	int64_t run, seq;
	char sid[24];
	char loc[SNAPSTORE_LOC_MAX];
	char tree[65];
	uint64_t size;
};

static void persisted(void *arg, struct redisReply *rep)
{
	struct persist_req *q = arg;
	struct agent_sb *sb;
	struct persist_slot *slot;
	int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
		 rep->element[0]->type == REDIS_REPLY_INTEGER;

	agent_metrics_snapshot(AM_SNAP_PERSIST, ok && rep->element[0]->integer == 1, q->size);
	if (ok && rep->element[0]->integer == 1) {
		if (rep->element[1]->type == REDIS_REPLY_STRING && rep->element[1]->str[0])
			remove_later(q->a, rep->element[1]->str);
		sb = agent_sb_find(q->a, q->key);
		slot = sb && sb->run == q->run ? slot_of(sb, 0) : NULL;
		if (slot && slot->seq == q->seq) {
			memcpy(slot->tree, q->tree, sizeof(slot->tree));
			memcpy(slot->sid, q->sid, sizeof(slot->sid));
		}
	} else {
		log_warn("sandbox '%s': save %s not recorded (%s); its archive goes", q->key, q->sid,
			 !ok ? "no answer from redis"
			 : rep->element[0]->integer == 0 ? "the tenant's snapshot quota is used up"
							 : "the sandbox moved on");
		remove_later(q->a, q->loc);
	}
	free(q);
}

/* Record the save x made (committed; ans its helper's answer) at epoch:
 * the persist script makes it the sandbox's restoreFrom and drops the save
 * before it (persisted). 0, or -1 with e and the archive dropped. */
static int record_save(struct snap_ctx *x, const json_t *ans, int64_t epoch, int64_t seq,
		       struct sbx_err *e)
{
	auto_free struct add_req *q = calloc(1, sizeof(*q));
	struct persist_req *pr = calloc(1, sizeof(*pr));
	char kbytes[RKEYS_MAX], krec[RKEYS_MAX], kidx[RKEYS_MAX], ksb[RKEYS_MAX], quota[24],
		epochs[24];
	const char **kv;

	if (!q || !pr) {
		free(pr);
		drop_archive(x);
		return err_sys(e, ENOMEM, "persist");
	}
	add_fill(q, x, ans, quota, kbytes, krec, kidx);
	kv = q->k.kv;
	util_xsnprintf(epochs, sizeof(epochs), "%lld", (long long)epoch);
	rkeys_sandbox(ksb, x->tenant, x->sandbox);
	pr->a = x->a;
	snprintf(pr->key, sizeof(pr->key), "%s", x->key);
	pr->run = x->run;
	pr->seq = seq;
	snprintf(pr->sid, sizeof(pr->sid), "%s", x->sid);
	snprintf(pr->loc, sizeof(pr->loc), "%s", x->put.loc);
	snprintf(pr->tree, sizeof(pr->tree), "%s",
		 json_string_value(json_object_get(ans, "tree")) ?: "");
	pr->size = size_bytes(q->k.size);
	if (registry_command(x->a->reg, persisted, pr,
			     "EVAL %s 4 %s %s %s %s %s %s %s %s %s %s "
			     "%s %s %s %s %s %s %s %s %s %s %s %s "
			     "%s %s %s %s %s %s %s %s %s %s %s %s",
			     rscripts_source(RSCRIPT_SNAPSHOT_PERSIST), kbytes, krec, kidx, ksb,
			     q->k.size, quota, q->k.created, x->sid, epochs, x->sandbox, kv[0], kv[1],
			     kv[2], kv[3], kv[4], kv[5], kv[6], kv[7], kv[8], kv[9], kv[10], kv[11],
			     kv[12], kv[13], kv[14], kv[15], kv[16], kv[17], kv[18], kv[19], kv[20],
			     kv[21], kv[22], kv[23]) < 0) {
		free(pr);
		drop_archive(x);
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "cannot record the save");
	}
	x->counted = 1;   /* by persisted() */
	return 0;
}

/* A save of sb's persist paths begun: its context (the archive made in the
 * store) and its helper's job j (the last save's digest in it, so an
 * unchanged tree is not written again). NULL with e. */
static struct snap_ctx *persist_begin(struct agent *a, struct agent_sb *sb, struct snap_job *j,
				      struct sbx_err *e)
{
	struct persist_slot *slot = slot_of(sb, 0);
	struct snap_ctx *x;

	if (!get_store(a, e) || parse_paths(json_object_get(sb->persist, "paths"), j, e) < 0 ||
	    !(x = ctx_of(a, sb, e)))
		return NULL;
	j->max_entries = (uint64_t)a->conf->snapshots.max_entries;
	if (slot && slot->sid[0])
		memcpy(j->prev_tree, slot->tree, sizeof(j->prev_tree));
	snprintf(x->name, sizeof(x->name), "persist");
	x->op = AM_SNAP_PERSIST;
	x->started = 1;
	if (new_snapshot(x, e) < 0 || paths_json(j, x->paths, sizeof(x->paths), e) < 0) {
		ctx_unref(x);
		return NULL;
	}
	return x;
}

int agent_snap_persist(struct agent *a, struct agent_sb *sb, char sid[24], struct sbx_err *e)
{
	auto_free struct snap_job *j = calloc(1, sizeof(*j));
	struct persist_slot *slot = slot_of(sb, 0);
	struct snap_ctx *x = NULL;
	struct fw_spec spec;
	json_t *ans = NULL;
	int rc = -1;

	if (!j) {
		err_sys(e, ENOMEM, "persist");
		goto out;
	}
	if (!(x = persist_begin(a, sb, j, e)))
		goto out;
	if (slot)
		slot->seq++;   /* a background save under way is not recorded after this one */
	job_spec(&spec, FW_COLLECT, child_persist, j, x->put.fd);
	if (fw_run(sb, &spec, &ans, e) < 0)
		goto out;
	if (json_is_true(json_object_get(ans, "unchanged")) && slot) {
		/* the last background save holds it all: it stays the restoreFrom */
		ctx_ok(x, 0);
		snprintf(sid, 24, "%s", slot->sid);
		rc = 0;
		goto out;
	}
	if (snapstore_commit(&store, &x->put, e) < 0)
		goto out;
	x->committed = 1;
	if (record_save(x, ans, sb->epoch, slot ? slot->seq : 0, e) < 0)
		goto out;
	snprintf(sid, 24, "%s", x->sid);
	rc = 0;
out:
	json_decref(ans);
	if (x)
		ctx_unref(x);
	return rc;
}

/* A background save: its helper is waited for and its archive committed
 * off the loop (save_work), then it is recorded on the loop (saved_bg). */
struct bg_save {
	struct snap_ctx *x;
	struct fw_child ch;
	int64_t epoch, seq;
	int64_t t0;                /* monotonic ms: when it began */
	json_t *ans;
	int rc;
};

static int unchanged(const json_t *ans)
{
	return json_is_true(json_object_get(ans, "unchanged"));
}

static void save_work(void *arg)
{
	struct bg_save *b = arg;

	b->rc = fw_wait(&b->ch, &b->ans, &b->x->err);
	if (b->rc == 0 && !unchanged(b->ans))
		b->rc = snapstore_commit(&store, &b->x->put, &b->x->err);
}

static void saved_bg(void *arg)
{
	struct bg_save *b = arg;
	struct snap_ctx *x = b->x;
	struct agent_sb *sb = ctx_sandbox(x);
	struct persist_slot *slot = sb ? slot_of(sb, 0) : NULL;
	struct sbx_err e;

	bg_saves--;
	if (slot)
		slot->busy = 0;
	if (b->rc < 0 && (!slot || slot->seq != b->seq)) {
		/* its container stopped meanwhile (the stop's own save counts) */
		x->counted = 1;
		log_debug("sandbox '%s': background save cut short: %s", x->key, x->err.msg);
	} else if (b->rc < 0) {
		log_warn("sandbox '%s': background save failed: %s", x->key, x->err.msg);
	} else if (unchanged(b->ans)) {
		ctx_ok(x, 0);
		log_debug("sandbox '%s': nothing changed since save %s (%lld ms)", x->key,
			  slot ? slot->sid : "-", (long long)(util_now_ms() - b->t0));
	} else if (!slot || slot->seq != b->seq) {
		/* a later save (a stop's) or the container's end came first */
		x->committed = 1;
		x->counted = 1;
		drop_archive(x);
	} else {
		x->committed = 1;
		if (record_save(x, b->ans, b->epoch, b->seq, &e) < 0)
			log_warn("sandbox '%s': background save not recorded: %s", x->key, e.msg);
		else
			log_info("sandbox '%s': background save %s (%lld ms)", x->key, x->sid,
				 (long long)(util_now_ms() - b->t0));
	}
	json_decref(b->ans);
	ctx_unref(x);
	free(b);
}

static void start_bg_save(struct agent *a, struct agent_sb *sb, struct persist_slot *slot)
{
	auto_free struct snap_job *j = calloc(1, sizeof(*j));
	struct bg_save *b = calloc(1, sizeof(*b));
	struct fw_spec spec;
	struct sbx_err e;

	err_clear(&e);
	if (!j || !b) {
		err_sys(&e, ENOMEM, "background save");
		goto fail;
	}
	if (!(b->x = persist_begin(a, sb, j, &e)))
		goto fail;
	b->epoch = sb->epoch;
	b->seq = ++slot->seq;
	b->t0 = util_now_ms();
	job_spec(&spec, FW_COLLECT, child_persist, j, b->x->put.fd);
	if (fw_fork(sb, &spec, &b->ch, &e) < 0)
		goto fail;
	if (bgwork_run(a, save_work, saved_bg, b, &e) < 0) {
		kill(b->ch.pid, SIGKILL);
		fw_wait(&b->ch, &b->ans, &b->x->err);
		json_decref(b->ans);
		goto fail;
	}
	slot->busy = 1;
	bg_saves++;
	return;
fail:
	log_warn("sandbox '%s': cannot start a background save: %s", sb->key, e.msg);
	if (b && b->x)
		ctx_unref(b->x);
	free(b);
}

/* The persist.intervalS of sb in ms (0: none). */
static int64_t interval_ms(const struct agent_sb *sb)
{
	json_int_t s = json_integer_value(json_object_get(sb->persist, "intervalS"));

	return s > 0 ? (int64_t)s * 1000 : 0;
}

/* Every SNAP_TICK_MS: start the background saves that are due (one per
 * container at a time, SNAP_BG_SAVES_MAX on the node; a save that cannot
 * start now starts at a later tick). The first is due one interval after
 * the container started (or after the agent first saw it). */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent *a = arg;
	int64_t now = util_now_ms();

	(void)fd;
	(void)what;
	for (struct agent_sb *sb = a->sandboxes; sb && !a->shutting_down; sb = sb->next) {
		int64_t iv = sb->persist ? interval_ms(sb) : 0;
		struct persist_slot *slot;

		if (!iv || !agent_sb_container(sb) || !(slot = slot_of(sb, 1)))
			continue;
		if (!slot->due_ms) {
			slot->due_ms = now + iv;
			continue;
		}
		if (slot->busy || now < slot->due_ms || bg_saves >= SNAP_BG_SAVES_MAX)
			continue;
		slot->due_ms = now + iv;
		start_bg_save(a, sb, slot);
	}
}

int agent_snap_init(struct agent *a, struct sbx_err *e)
{
	struct timeval tv = { SNAP_TICK_MS / 1000, (SNAP_TICK_MS % 1000) * 1000 };

	tick_ev = event_new(a->base, -1, EV_PERSIST, tick_cb, a);
	if (!tick_ev || event_add(tick_ev, &tv) < 0)
		return err_sys(e, ENOMEM, "the background saves' timer");
	return 0;
}

void agent_snap_release(struct agent *a)
{
	(void)a;
	if (tick_ev)
		event_free(tick_ev);
	tick_ev = NULL;
}

static void snap_container_gone(struct agent *a, struct agent_sb *sb)
{
	void **p = agent_sb_slot(sb, &agent_snap_module);

	(void)a;
	free(*p);
	*p = NULL;
}

const struct agent_module agent_snap_module = {
	.name = "snapshots",
	.container_gone = snap_container_gone,
};

/* --- archives as files of the sandbox (the compat view's backups) --- */

/* A backup: the archive of j's path written to the sandbox's file
 * j->target (to_file), or that file's archive restored into the path. */
static int child_file(void *arg, const struct fw_env *env)
{
	const struct snap_job *j = arg;
	const char *paths[SNAP_PATHS_MAX], *excl[SNAP_EXCLUDE_MAX];
	struct snap_sum sum;
	struct sbx_err e;
	auto_close int fd = -1;
	int rc;

	err_clear(&e);
	job_ptrs(j, paths, excl);
	fd = snap_open_file(env->root, j->target, j->to_file, &e);
	if (fd < 0)
		rc = -1;
	else if (!j->to_file)
		rc = snap_archive_extract(env->root, fd, paths, j->npaths, NULL, j->max_bytes,
					  j->max_entries, &sum, &e);
	else if ((rc = snap_archive_write(env->root, paths, j->npaths, excl, j->nexclude, fd,
					  j->max_entries, &sum, &e)) == 0 &&
		 fsync(fd) < 0)
		rc = err_set(&e, SBX_E_NO_SPACE, "cannot write '%s'", j->target);
	return child_answer(env, rc, &e, &sum,
			    j->to_file ? json_pack("{s:s}", "archivePath", j->target) : NULL);
}

const struct jsonv_field agent_snap_file_fields[] = {
	{ "dir", JV_STRING, 1 },
	{ "archivePath", JV_STRING, 1 },
	{ "exclude", JV_ARRAY, 0 },
	{ NULL, 0, 0 },
};

/* {dir, archivePath, exclude?} into a job: one path, the file as target. */
static struct snap_job *file_job(struct agent_call *c, struct sbx_err *e)
{
	struct snap_job *j = calloc(1, sizeof(*j));
	json_t *dirs;

	if (!j) {
		err_sys(e, ENOMEM, "backup");
		return NULL;
	}
	dirs = json_pack("[O]", json_object_get(c->body, "dir"));
	if (parse_paths(dirs, j, e) < 0 ||
	    parse_exclude(json_object_get(c->body, "exclude"), j, e) < 0 ||
	    parse_path(json_string_value(json_object_get(c->body, "archivePath")), j->target,
		       sizeof(j->target), "archivePath", e) < 0) {
		json_decref(dirs);
		free(j);
		return NULL;
	}
	json_decref(dirs);
	j->max_entries = (uint64_t)c->a->conf->snapshots.max_entries;
	j->max_bytes = (uint64_t)(c->sb->limits.disk_mib > 0 ? c->sb->limits.disk_mib
							     : c->a->conf->sandbox.disk_mib)
		       << 20;
	return j;
}

static int file_call(struct agent_call *c, int to_file, struct sbx_err *e)
{
	auto_free struct snap_job *j = file_job(c, e);
	struct fw_spec spec;

	if (!j)
		return -1;
	j->to_file = to_file;
	job_spec(&spec, FW_COLLECT, child_file, j, 0);
	return fw_start(c->r, c->sb, &spec, e);
}

int agent_snap_to_file(struct agent_call *c, struct sbx_err *e)
{
	return file_call(c, 1, e);
}

int agent_snap_from_file(struct agent_call *c, struct sbx_err *e)
{
	return file_call(c, 0, e);
}
