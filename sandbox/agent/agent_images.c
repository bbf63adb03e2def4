/*
 * agent_images.c — see agent_images.h. A pull runs oci_pull as background
 * work (bgwork.h: a thread of its own, at most BGWORK_MAX at once); when
 * it ends, the loop tells every waiter. The table of pulls under way is
 * touched by the loop only.
 */
#include "agent_images.h"
#include "agent_metrics.h"
#include "bgwork.h"
#include "httpd.h"
#include "log.h"
#include "oci.h"
#include "registry.h"
#include "rkeys.h"
#include "runtime.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long the agent's exit waits for the pulls under way. */
#define IMAGES_RELEASE_WAIT_MS 10000

struct waiter {
	struct waiter *next;
	agent_pull_done_fn done;
	void *arg;
};

struct pull {
	struct pull *next;
	struct agent *a;
	struct imgref ref;
	char canon[IMGREF_MAX];
	struct oci_pull_opts opts;
	struct sbx_err err;
	int rc;
	struct waiter *waiters;
};

struct agent_images {
	struct pull *pulls;
	int64_t started;          /* pulls started so far (GET /agent/v1/images) */
};

/* Tell placement (sbx:node:{name}:images) that this node holds canon
 * (add 1) or not (0). Best effort: a lost update only costs a preference. */
static void advertise(struct agent *a, const char *canon, int add)
{
	if (a->reg)
		(void)registry_command(a->reg, NULL, NULL, add ? "SADD %s %s" : "SREM %s %s",
				       RK_NODE(a->conf->agent.name, "images"), canon);
}

/* On the pull's thread (bgwork_fn). */
static void pull_work(void *arg)
{
	struct pull *p = arg;

	p->rc = oci_pull(&p->opts, &p->ref, &p->err);
}

/* On the loop (bgwork_done_fn): the pull is over; tell every waiter. */
static void pull_done(void *arg)
{
	struct pull *p = arg;
	struct agent *a = p->a;
	struct pull **pp = &a->images->pulls;
	struct waiter *w;

	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	metrics_count(AM_IMAGE_PULLS, p->rc < 0 ? AM_PULL_FAILED : AM_PULL_OK, 0, 1);
	if (p->rc < 0) {
		log_warn("image '%s': pull failed: %s", p->canon, p->err.msg);
	} else {
		log_info("image '%s' pulled", p->canon);
		advertise(a, p->canon, 1);
	}
	while ((w = p->waiters)) {
		p->waiters = w->next;
		w->done(w->arg, p->rc < 0 ? &p->err : NULL);
		free(w);
	}
	free(p);
}

int agent_images_init(struct agent *a, struct sbx_err *e)
{
	struct agent_images *im = calloc(1, sizeof(*im));

	if (!im)
		return err_sys(e, ENOMEM, "images");
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		free(im);
		return err_set(e, SBX_E_INTERNAL, "cannot initialise libcurl");
	}
	a->images = im;
	oci_clean_tmp(a->conf->agent.images_dir, 3600);
	return 0;
}

void agent_images_release(struct agent *a)
{
	struct agent_images *im = a->images;
	int64_t until = util_now_ms() + IMAGES_RELEASE_WAIT_MS;

	if (!im)
		return;
	/* pulls under way finish first (a bounded wait): their waiters are told */
	while (im->pulls && util_now_ms() < until)
		bgwork_wait(a, 100);
	if (im->pulls) {
		/* their threads still use their pulls: the table stays */
		log_warn("image pulls still under way at exit");
		return;
	}
	free(im);
	a->images = NULL;
}

int agent_image_is_remote(struct agent *a, const char *name, struct imgref *ref, struct sbx_err *e)
{
	/* a bare name ("deb12", "default") is a local image: a registry
	 * image is named with a tag, a digest or a registry ("python:latest"),
	 * so a typo never turns into a pull */
	if (!strpbrk(name, ":/@"))
		return 0;
	if (imgref_parse(name, a->conf->images.default_registry, (int)a->conf->images.library_prefix, ref,
			 e) < 0)
		return -1;
	return 1;
}

void agent_image_release(struct agent_image *img)
{
	agent_env_free(img->env);
	img->env = NULL;
	if (img->lock_fd >= 0)
		close(img->lock_fd);
	img->lock_fd = -1;
}

int agent_image_get(struct agent *a, const struct imgref *ref, struct agent_image *out,
		    struct sbx_err *e)
{
	json_t *rec;
	json_t *l, *env;
	size_t i, n, at = 0;

	memset(out, 0, sizeof(*out));
	out->lock_fd = -1;
	rec = oci_record(a->conf->agent.images_dir, ref, 1, &out->lock_fd, e);
	if (!rec)
		return -1;
	if (imgref_format(ref, out->canon, sizeof(out->canon)) < 0)
		goto bad;
	n = json_array_size(json_object_get(rec, "layers"));
	/* the record lists them bottom first; overlay wants the top first */
	for (i = n; i-- > 0;) {
		const char *s = json_string_value(json_array_get(json_object_get(rec, "layers"), i));
		int w;

		if (!s || strlen(s) != 64 || strspn(s, "0123456789abcdef") != 64)
			goto bad;
		w = snprintf(out->layers + at, sizeof(out->layers) - at, "%s%s", at ? ":" : "", s);
		if (w < 0 || (size_t)w >= sizeof(out->layers) - at)
			goto bad;
		at += (size_t)w;
	}
	if (n == 0)
		goto bad;
	if (json_string_value(json_object_get(rec, "workingDir")))
		snprintf(out->workdir, sizeof(out->workdir), "%s",
			 json_string_value(json_object_get(rec, "workingDir")));
	if (oci_image_user(a->conf->agent.images_dir, out->layers,
			   json_string_value(json_object_get(rec, "user")), &out->uid, &out->gid,
			   out->home, sizeof(out->home), e) < 0) {
		json_decref(rec);
		agent_image_release(out);
		err_prefix(e, "image '%s'", out->canon);
		return -1;
	}
	env = json_object_get(rec, "env");
	if (json_is_array(env)) {
		out->env = calloc(json_array_size(env) + 1, sizeof(char *));
		n = 0;
		json_array_foreach(env, i, l) {
			const char *s = json_string_value(l);

			if (out->env && s && strchr(s, '=') && s != strchr(s, '='))
				out->env[n++] = strdup(s);
		}
	}
	json_decref(rec);
	advertise(a, out->canon, 1);
	return 0;
bad:
	json_decref(rec);
	agent_image_release(out);
	return err_set(e, SBX_E_INTERNAL, "the record of image '%s' is damaged", out->canon);
}

int agent_image_pull(struct agent *a, const struct imgref *ref, agent_pull_done_fn done, void *arg,
		     struct sbx_err *e)
{
	struct agent_images *im = a->images;
	struct waiter *w = calloc(1, sizeof(*w));
	char canon[IMGREF_MAX];
	struct pull *p;

	if (!w)
		return err_sys(e, ENOMEM, "pull waiter");
	w->done = done;
	w->arg = arg;
	if (imgref_format(ref, canon, sizeof(canon)) < 0) {
		free(w);
		return err_set(e, SBX_E_VALIDATION, "image reference too long");
	}
	for (p = im->pulls; p; p = p->next)
		if (strcmp(p->canon, canon) == 0)
			break;
	if (p) {
		w->next = p->waiters;
		p->waiters = w;
		return 0;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		free(w);
		return err_sys(e, ENOMEM, "pull");
	}
	p->a = a;
	p->ref = *ref;
	memcpy(p->canon, canon, sizeof(canon));
	p->opts.images_dir = a->conf->agent.images_dir;
	p->opts.owner = rt_image_owner(a->rt);
	p->opts.max_image_bytes = a->conf->images.max_image_mib * 1024 * 1024;
	p->opts.arch = oci_host_arch();
	p->opts.auth = a->conf->images.registry_auth;
	p->opts.ca = a->conf->images.registry_ca;
	p->opts.plain_http = a->conf->images.plain_http;
	p->opts.budget_bytes = a->conf->images.disk_budget_mib * 1024 * 1024;
	/* counted from the pull thread: the registry outlives it (release
	 * waits for every pull before agent_metrics_stop) */
	p->opts.received = agent_metrics_pull_bytes;
	p->waiters = w;
	if (bgwork_run(a, pull_work, pull_done, p, e) < 0) {
		free(w);
		free(p);
		err_prefix(e, "image '%s'", canon);
		return -1;
	}
	p->next = im->pulls;
	im->pulls = p;
	im->started++;
	log_info("image '%s': pulling", canon);
	return 0;
}

/* ---- a create waiting for its image ------------------------------------ */

struct deferred_put {
	struct agent *a;
	struct httpd_req *r;
	json_t *body;
	char key[AGENT_KEY_MAX];
	int (*put)(struct agent_call *, struct sbx_err *);
	int gone;          /* the client went away */
	int pulled;        /* the pull is over (the request may still be open) */
};

static void put_closed(void *arg, int failed)
{
	struct deferred_put *d = arg;

	(void)failed;
	d->gone = 1;
	if (d->pulled) {
		json_decref(d->body);
		free(d);
	}
}

static void put_pulled(void *arg, const struct sbx_err *pe)
{
	struct deferred_put *d = arg;
	struct sbx_err e = { 0 };

	d->pulled = 1;
	if (d->gone) {
		json_decref(d->body);
		free(d);
		return;
	}
	if (pe) {
		httpd_reply_err(d->r, pe);
		return;   /* put_closed frees d */
	}
	{
		struct agent_call c = { .r = d->r, .a = d->a, .id = httpd_param(d->r, 1), .port = -1,
					.body = d->body };

		/* the create runs again and owns the request from here (it may
		 * even wait for a pull again, with a waiter of its own) */
		httpd_on_close(d->r, NULL, NULL);
		memcpy(c.key, d->key, sizeof(c.key));
		c.sb = agent_sb_find(d->a, d->key);
		if (d->put(&c, &e) < 0)
			httpd_reply_err(d->r, &e);
		json_decref(d->body);
		free(d);
	}
}

int agent_image_defer_put(struct agent_call *c, const struct imgref *ref,
			  int (*put)(struct agent_call *, struct sbx_err *), struct sbx_err *e)
{
	struct deferred_put *d = calloc(1, sizeof(*d));

	if (!d)
		return err_sys(e, ENOMEM, "deferred create");
	d->a = c->a;
	d->r = c->r;
	d->body = json_incref(c->body);
	d->put = put;
	memcpy(d->key, c->key, sizeof(d->key));
	if (agent_image_pull(c->a, ref, put_pulled, d, e) < 0) {
		json_decref(d->body);
		free(d);
		return -1;
	}
	httpd_on_close(c->r, put_closed, d);
	httpd_defer(c->r);
	return 0;
}

/* ---- routes ----------------------------------------------------------------- */

const struct jsonv_field agent_images_pull_fields[] = {
	{ "ref", JV_STRING, 1 },
	{ NULL, 0, 0 },
};

struct pull_route {
	struct agent *a;
	struct httpd_req *r;
	struct imgref ref;
	int gone, pulled;
};

static void pull_route_closed(void *arg, int failed)
{
	struct pull_route *p = arg;

	(void)failed;
	p->gone = 1;
	if (p->pulled)
		free(p);
}

static json_t *image_json(struct agent *a, const struct imgref *ref, struct sbx_err *e)
{
	json_t *rec = oci_record(a->conf->agent.images_dir, ref, 0, NULL, e);
	json_t *j;

	if (!rec)
		return NULL;
	j = json_pack("{s:O?, s:O?, s:O?, s:O?}", "ref", json_object_get(rec, "ref"), "digest",
		      json_object_get(rec, "digest"), "size", json_object_get(rec, "size"), "lastUsed",
		      json_object_get(rec, "lastUsed"));
	json_decref(rec);
	return j;
}

static void pull_route_done(void *arg, const struct sbx_err *pe)
{
	struct pull_route *p = arg;
	struct sbx_err e = { 0 };
	json_t *j;

	p->pulled = 1;
	if (p->gone) {
		free(p);
		return;
	}
	if (pe) {
		httpd_reply_err(p->r, pe);
		return;
	}
	j = image_json(p->a, &p->ref, &e);
	if (j)
		httpd_reply_json(p->r, 200, j);
	else
		httpd_reply_err(p->r, &e);
}

int agent_images_pull_route(struct agent_call *c, struct sbx_err *e)
{
	struct pull_route *p = calloc(1, sizeof(*p));
	const char *s = json_string_value(json_object_get(c->body, "ref"));

	if (!p)
		return err_sys(e, ENOMEM, "pull");
	p->a = c->a;
	p->r = c->r;
	if (imgref_parse(s, c->a->conf->images.default_registry, (int)c->a->conf->images.library_prefix,
			 &p->ref, e) < 0 ||
	    agent_image_pull(c->a, &p->ref, pull_route_done, p, e) < 0) {
		free(p);
		return -1;
	}
	httpd_on_close(c->r, pull_route_closed, p);
	httpd_defer(c->r);
	return 0;
}

int agent_images_list_route(struct agent_call *c, struct sbx_err *e)
{
	json_t *list = oci_list(c->a->conf->agent.images_dir);
	json_t *pulling = json_array();

	if (!list || !pulling) {
		json_decref(list);
		json_decref(pulling);
		return err_sys(e, ENOMEM, "image list");
	}
	for (struct pull *p = c->a->images->pulls; p; p = p->next)
		json_array_append_new(pulling, json_string(p->canon));
	httpd_reply_json(c->r, 200, json_pack("{s:o, s:o, s:I}", "images", list, "pulling", pulling,
					      "pullsStarted", (json_int_t)c->a->images->started));
	return 0;
}

int agent_images_delete_route(struct agent_call *c, struct sbx_err *e)
{
	const char *s = agent_call_query(c, "ref");
	struct imgref ref;
	char canon[IMGREF_MAX];

	if (!s)
		return err_set(e, SBX_E_VALIDATION, "query parameter 'ref' is required");
	if (imgref_parse(s, c->a->conf->images.default_registry, (int)c->a->conf->images.library_prefix,
			 &ref, e) < 0 ||
	    imgref_format(&ref, canon, sizeof(canon)) < 0)
		return -1;
	/* a running sandbox of the image holds its record's lock: CONFLICT */
	if (oci_remove(c->a->conf->agent.images_dir, &ref, e) < 0)
		return -1;
	advertise(c->a, canon, 0);
	httpd_reply_empty(c->r, 204);
	return 0;
}
