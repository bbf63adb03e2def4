#include "ceilings.h"
#include "rkeys.h"
#include "jsonv.h"
#include "scripts.h"
#include "spec.h"
#include "store.h"
#include "util.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const struct sbx_conf *conf;

void ceilings_init(const struct sbx_conf *c)
{
	conf = c;
}

/* One field against its ceiling; what and key name it in the message. */
static int over(const char *what, int64_t v, int64_t max, const char *key, double scale,
		struct sbx_err *e)
{
	if (v <= max)
		return 0;
	return err_set(e, SBX_E_LIMIT_EXCEEDED,
		       "'%s' of %g is above the operator's ceiling of %g (sandbox.%s)", what,
		       (double)v / scale, (double)max / scale, key);
}

int ceilings_check_sandbox(const struct sbx_conf *c, int64_t memory_mib, int64_t cpus_milli,
			   int64_t pids, int64_t disk_mib, struct sbx_err *e)
{
	if (over("memoryMiB", memory_mib, c->sandbox.max_memory_mib, "max_memory_mib", 1, e) < 0 ||
	    over("cpus", cpus_milli, c->sandbox.max_cpus_milli, "max_cpus_milli", 1000, e) < 0 ||
	    over("pids", pids, c->sandbox.max_pids, "max_pids", 1, e) < 0 ||
	    over("diskMiB", disk_mib, c->sandbox.max_disk_mib, "max_disk_mib", 1, e) < 0)
		return -1;
	return 0;
}

int ceilings_conf_check(const struct sbx_conf *c, struct sbx_err *e)
{
	const struct {
		const char *key;
		int64_t def, max;
	} pairs[] = {
		{ "memory_mib", c->sandbox.memory_mib, c->sandbox.max_memory_mib },
		{ "cpus_milli", c->sandbox.cpus_milli, c->sandbox.max_cpus_milli },
		{ "pids", c->sandbox.pids, c->sandbox.max_pids },
		{ "disk_mib", c->sandbox.disk_mib, c->sandbox.max_disk_mib },
	};

	for (size_t i = 0; i < ARRAY_SIZE(pairs); i++)
		if (pairs[i].def > pairs[i].max)
			return err_set(e, SBX_E_VALIDATION,
				       "sandbox.%s (%lld) is above its ceiling sandbox.max_%s (%lld)",
				       pairs[i].key, (long long)pairs[i].def, pairs[i].key,
				       (long long)pairs[i].max);
	return 0;
}

void ceilings_resources_need(const json_t *resources, struct placement_need *need)
{
	const json_t *m = json_object_get(resources, "memoryMiB");
	const json_t *c = json_object_get(resources, "cpus");
	double d = json_number_value(c);

	need->memory_mib = json_is_integer(m) && json_integer_value(m) > 0 ? json_integer_value(m) : 0;
	need->cpus_milli = d > 0 && d < 1e9 ? (int64_t)(d * 1000.0 + 0.5) : 0;
}

/* The JSON object in the string field name of rec; new reference or NULL. */
static json_t *field_object(const json_t *rec, const char *name)
{
	const char *v = json_string_value(json_object_get(rec, name));
	json_t *j = v && *v ? json_loads(v, 0, NULL) : NULL;

	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

void ceilings_record_need(const json_t *rec, struct placement_need *need)
{
	json_t *pending = field_object(rec, "pending");
	const json_t *next = json_object_get(pending, "resources");

	if (json_is_object(next)) {
		ceilings_resources_need(next, need);
	} else {
		json_t *res = field_object(rec, "resources");
		ceilings_resources_need(res, need);
		json_decref(res);
	}
	json_decref(pending);
}

static const struct jsonv_field tenant_fields[] = {
	{ "sandboxes", JV_INTEGER | JV_NULL, 0 },
	{ "memoryMiB", JV_INTEGER | JV_NULL, 0 },
	{ "cpus", JV_NUMBER | JV_NULL, 0 },
	{ "requestsPerSecond", JV_INTEGER | JV_NULL, 0 },
	{ "requestsBurst", JV_INTEGER | JV_NULL, 0 },
	{ "createsPerMinute", JV_INTEGER | JV_NULL, 0 },
	{ NULL, 0, 0 },
};

/* The rate limit fields: JSON member, config key, field of the struct,
 * bit, hash field (the same name: the auth_rate script reads them). */
static const struct {
	const char *member, *key;
	size_t off;
	unsigned bit;
} rate_fields[] = {
	{ "requestsPerSecond", "requests_per_second", offsetof(struct ceilings_tenant, requests_per_second), CEILINGS_RPS },
	{ "requestsBurst", "requests_burst", offsetof(struct ceilings_tenant, requests_burst), CEILINGS_BURST },
	{ "createsPerMinute", "creates_per_minute", offsetof(struct ceilings_tenant, creates_per_minute), CEILINGS_CREATES },
};

static int64_t *rate_field(struct ceilings_tenant *t, size_t i)
{
	return (int64_t *)(void *)((char *)t + rate_fields[i].off);
}

int64_t ceilings_rate_value(const struct ceilings_tenant *t, unsigned bit)
{
	for (size_t i = 0; i < ARRAY_SIZE(rate_fields); i++)
		if (rate_fields[i].bit == bit)
			return *(const int64_t *)(const void *)((const char *)t + rate_fields[i].off);
	return 0;
}

const char *ceilings_rate_member(unsigned bit)
{
	for (size_t i = 0; i < ARRAY_SIZE(rate_fields); i++)
		if (rate_fields[i].bit == bit)
			return rate_fields[i].member;
	return NULL;
}

int ceilings_tenant_parse(const json_t *body, struct ceilings_tenant *out, unsigned *set,
			  struct sbx_err *e)
{
	int64_t lo, hi;

	memset(out, 0, sizeof(*out));
	*set = 0;
	if (!json_is_object(body))
		return err_set(e, SBX_E_VALIDATION, "the body must be an object");
	if (jsonv_check(body, tenant_fields, "the body", e) < 0)
		return -1;
	/* The bounds of each value are those of its config key. */
	if (json_is_integer(json_object_get(body, "sandboxes"))) {
		if (conf_bounds("api", "quota_sandboxes", &lo, &hi) < 0)
			return err_set(e, SBX_E_INTERNAL, "no bounds of quota_sandboxes");
		if (jsonv_int(body, "sandboxes", lo, hi, &out->sandboxes, e) < 0)
			return -1;
		*set |= CEILINGS_SANDBOXES;
	}
	if (json_is_integer(json_object_get(body, "memoryMiB"))) {
		if (conf_bounds("api", "tenant_memory_mib", &lo, &hi) < 0)
			return err_set(e, SBX_E_INTERNAL, "no bounds of tenant_memory_mib");
		if (jsonv_int(body, "memoryMiB", lo, hi, &out->memory_mib, e) < 0)
			return -1;
		*set |= CEILINGS_MEMORY;
	}
	if (json_is_number(json_object_get(body, "cpus"))) {
		if (conf_bounds("api", "tenant_cpus_milli", &lo, &hi) < 0)
			return err_set(e, SBX_E_INTERNAL, "no bounds of tenant_cpus_milli");
		if (spec_milli(body, "cpus", "the body", lo, hi, &out->cpus_milli, e) < 0)
			return -1;
		*set |= CEILINGS_CPUS;
	}
	for (size_t i = 0; i < ARRAY_SIZE(rate_fields); i++) {
		if (!json_is_integer(json_object_get(body, rate_fields[i].member)))
			continue;
		if (conf_bounds("api", rate_fields[i].key, &lo, &hi) < 0)
			return err_set(e, SBX_E_INTERNAL, "no bounds of %s", rate_fields[i].key);
		if (jsonv_int(body, rate_fields[i].member, lo, hi, rate_field(out, i), e) < 0)
			return -1;
		*set |= rate_fields[i].bit;
	}
	return 0;
}

/* ---- Redis ---------------------------------------------------------------- */

int ceilings_tenant_load(const char *tenant, struct ceilings_tenant *out, unsigned *overridden,
			 struct sbx_err *e)
{
	auto_reply redisReply *r = NULL;
	int64_t *vals[] = { &out->sandboxes, &out->memory_mib, &out->cpus_milli,
			    &out->requests_per_second, &out->requests_burst, &out->creates_per_minute };
	unsigned bits[] = { CEILINGS_SANDBOXES, CEILINGS_MEMORY, CEILINGS_CPUS,
			    CEILINGS_RPS, CEILINGS_BURST, CEILINGS_CREATES };

	out->sandboxes = conf->api.quota_sandboxes;
	out->memory_mib = conf->api.tenant_memory_mib;
	out->cpus_milli = conf->api.tenant_cpus_milli;
	out->requests_per_second = conf->api.requests_per_second;
	out->requests_burst = conf->api.requests_burst;
	out->creates_per_minute = conf->api.creates_per_minute;
	if (overridden)
		*overridden = 0;
	r = store_command(e, "HMGET %s sandboxes memoryMiB cpusMilli requestsPerSecond requestsBurst "
			  "createsPerMinute", RK_TENANT(tenant, "limits"));
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != ARRAY_SIZE(vals))
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: HMGET of tenant limits gave no array");
	for (size_t i = 0; i < ARRAY_SIZE(vals); i++) {
		int64_t v;
		if (r->element[i]->type != REDIS_REPLY_STRING)
			continue;
		/* A value no admin PUT could have written is ignored: the default
		 * holds. A rate limit may be 0 (none for this tenant). */
		if (util_parse_i64(r->element[i]->str, i < 3 ? 1 : 0, i < 3 ? INT64_MAX / 4 : 1000000,
				   &v) < 0)
			continue;
		*vals[i] = v;
		if (overridden)
			*overridden |= bits[i];
	}
	return 0;
}

int ceilings_tenant_store(const char *tenant, const struct ceilings_tenant *v, unsigned set,
			  struct sbx_err *e)
{
	redisReply *reps[5] = { NULL };
	size_t n = 0;
	int rc = 0;

	if (store_append(e, "MULTI") < 0 || store_append(e, "DEL %s", RK_TENANT(tenant, "limits")) < 0)
		return -1;
	n = 2;
	if (set) {
		char s[24] = "", m[24] = "", c[24] = "", rv[ARRAY_SIZE(rate_fields)][24];
		const char *argv[14] = { "HSET", NULL };
		size_t lens[14];
		char key[RKEYS_MAX];
		int argc = 2;

		rkeys_tenant(key, tenant, "limits");
		argv[1] = key;
		util_xsnprintf(s, sizeof(s), "%lld", (long long)v->sandboxes);
		util_xsnprintf(m, sizeof(m), "%lld", (long long)v->memory_mib);
		util_xsnprintf(c, sizeof(c), "%lld", (long long)v->cpus_milli);
		if (set & CEILINGS_SANDBOXES) {
			argv[argc++] = "sandboxes";
			argv[argc++] = s;
		}
		if (set & CEILINGS_MEMORY) {
			argv[argc++] = "memoryMiB";
			argv[argc++] = m;
		}
		if (set & CEILINGS_CPUS) {
			argv[argc++] = "cpusMilli";
			argv[argc++] = c;
		}
		for (size_t i = 0; i < ARRAY_SIZE(rate_fields); i++) {
			if (!(set & rate_fields[i].bit))
				continue;
			util_xsnprintf(rv[i], sizeof(rv[i]), "%lld",
				       (long long)ceilings_rate_value(v, rate_fields[i].bit));
			argv[argc++] = rate_fields[i].member;
			argv[argc++] = rv[i];
		}
		for (int i = 0; i < argc; i++)
			lens[i] = strlen(argv[i]);
		if (store_append_argv(e, argc, argv, lens) < 0)
			return -1;
		n++;
	}
	if (store_append(e, "EXEC") < 0)
		return -1;
	n++;
	if (store_collect(reps, n, 0, e) < 0)
		return -1;
	if (reps[n - 1]->type != REDIS_REPLY_ARRAY)
		rc = err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: the limits transaction failed");
	store_free_replies(reps, n);
	return rc;
}

/* Run the usage script; 0 with the reply's status and sums, or -1 with e. */
static int run_usage(const char *tenant, const char *id, const struct placement_need *need,
		     const struct ceilings_tenant *lim, int resize, int64_t *status,
		     struct ceilings_usage *u, struct sbx_err *e)
{
	char zkey[RKEYS_MAX], ukey[RKEYS_MAX], m[24], c[24], lm[24], lc[24];
	auto_reply redisReply *r = NULL;

	rkeys_tenant(zkey, tenant, "sandboxes");
	rkeys_tenant(ukey, tenant, "usage");
	util_xsnprintf(m, sizeof(m), "%lld", (long long)(need ? need->memory_mib : 0));
	util_xsnprintf(c, sizeof(c), "%lld", (long long)(need ? need->cpus_milli : 0));
	util_xsnprintf(lm, sizeof(lm), "%lld", (long long)(lim ? lim->memory_mib : 0));
	util_xsnprintf(lc, sizeof(lc), "%lld", (long long)(lim ? lim->cpus_milli : 0));
	r = scripts_run(RSCRIPT_TENANT_USAGE, 2, (const char *[]){ zkey, ukey }, 6,
			(const char *[]){ id, m, c, lm, lc, resize ? "1" : "0" }, e);
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4)
		return err_set(e, SBX_E_INTERNAL, "tenant usage: unexpected reply");
	for (size_t i = 0; i < 4; i++)
		if (r->element[i]->type != REDIS_REPLY_INTEGER)
			return err_set(e, SBX_E_INTERNAL, "tenant usage: unexpected reply");
	*status = r->element[0]->integer;
	u->memory_mib = r->element[1]->integer;
	u->cpus_milli = r->element[2]->integer;
	u->sandboxes = r->element[3]->integer;
	return 0;
}

int ceilings_tenant_usage(const char *tenant, struct ceilings_usage *u, struct sbx_err *e)
{
	int64_t status;

	return run_usage(tenant, "", NULL, NULL, 0, &status, u, e);
}

/* ceilings_tenant_reserve; with resize a change that does not grow passes. */
static int reserve(const struct ceilings_tenant *lim, const char *tenant, const char *id,
		   const struct placement_need *need, int resize, struct sbx_err *e)
{
	struct ceilings_usage u;
	int64_t status;

	if (run_usage(tenant, id, need, lim, resize, &status, &u, e) < 0)
		return -1;
	if (status == -2)
		return err_set(e, SBX_E_QUOTA_EXCEEDED,
			       "tenant '%s' has sandboxes of %lld MiB; %lld MiB more is above its total of %lld MiB",
			       tenant, (long long)u.memory_mib, (long long)need->memory_mib,
			       (long long)lim->memory_mib);
	if (status == -3)
		return err_set(e, SBX_E_QUOTA_EXCEEDED,
			       "tenant '%s' has sandboxes of %g cpus; %g more is above its total of %g cpus",
			       tenant, (double)u.cpus_milli / 1000.0, (double)need->cpus_milli / 1000.0,
			       (double)lim->cpus_milli / 1000.0);
	return 0;
}

int ceilings_tenant_reserve(const struct ceilings_tenant *lim, const char *tenant, const char *id,
			    const struct placement_need *need, struct sbx_err *e)
{
	return reserve(lim, tenant, id, need, 0, e);
}

int ceilings_tenant_resize(const char *tenant, const char *id, const json_t *rec,
			   const json_t *new_resources, struct sbx_err *e)
{
	struct placement_need now, next;
	struct ceilings_tenant lim;
	json_t *applied = field_object(rec, "resources");

	ceilings_resources_need(applied, &now);
	json_decref(applied);
	ceilings_resources_need(new_resources, &next);
	if (next.memory_mib < now.memory_mib)
		next.memory_mib = now.memory_mib;
	if (next.cpus_milli < now.cpus_milli)
		next.cpus_milli = now.cpus_milli;
	if (ceilings_tenant_load(tenant, &lim, NULL, e) < 0)
		return -1;
	return reserve(&lim, tenant, id, &next, 1, e);
}
