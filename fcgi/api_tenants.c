/*
 * /v1/tenants/{tenant}/limits — admin: a tenant's limits (the config
 * defaults or its overrides) and what it holds against them. The checks
 * themselves are in ceilings.c.
 */
#include "api.h"
#include "ids.h"
#include "ceilings.h"
#include "util.h"

#include <jansson.h>

/* The tenant of the path, validated. Borrowed, or NULL with e. */
static const char *path_tenant(const struct http_req *r, struct sbx_err *e)
{
	const char *t = router_cap(&r->match, "tenant");

	if (!t || !ids_valid_tenant(t)) {
		err_set(e, SBX_E_VALIDATION, "tenant must be 1-63 of [a-z0-9-], not starting or ending with '-'");
		return NULL;
	}
	return t;
}

/* A limits triple as {sandboxes, memoryMiB, cpus} with only the members of
 * mask (all: ~0u). New reference. */
static json_t *triple(int64_t sandboxes, int64_t memory_mib, int64_t cpus_milli, unsigned mask)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (mask & CEILINGS_SANDBOXES)
		json_object_set_new(o, "sandboxes", json_integer(sandboxes));
	if (mask & CEILINGS_MEMORY)
		json_object_set_new(o, "memoryMiB", json_integer(memory_mib));
	if (mask & CEILINGS_CPUS)
		json_object_set_new(o, "cpus", cpus_milli % 1000 == 0 ? json_integer(cpus_milli / 1000)
								      : json_real((double)cpus_milli / 1000.0));
	return o;
}

/* Add the rate limits of lim in mask to o (borrowed, may be NULL); o. */
static json_t *with_rates(json_t *o, const struct ceilings_tenant *lim, unsigned mask)
{
	static const unsigned bits[] = { CEILINGS_RPS, CEILINGS_BURST, CEILINGS_CREATES };

	for (size_t i = 0; o && i < ARRAY_SIZE(bits); i++)
		if (mask & bits[i])
			json_object_set_new(o, ceilings_rate_member(bits[i]),
					    json_integer(ceilings_rate_value(lim, bits[i])));
	return o;
}

/* Answer 200 with the tenant's limits, overrides and usage. */
static int respond_limits(struct http_req *r, const char *tenant, struct sbx_err *e)
{
	struct ceilings_tenant lim;
	struct ceilings_usage u;
	unsigned overridden;
	json_t *body;

	if (ceilings_tenant_load(tenant, &lim, &overridden, e) < 0 ||
	    ceilings_tenant_usage(tenant, &u, e) < 0)
		return -1;
	body = json_pack("{s:s,s:o,s:o,s:o}", "tenant", tenant,
			 "limits", with_rates(triple(lim.sandboxes, lim.memory_mib, lim.cpus_milli, ~0u),
					      &lim, ~0u),
			 "overrides", with_rates(triple(lim.sandboxes, lim.memory_mib, lim.cpus_milli,
							overridden), &lim, overridden),
			 "usage", triple(u.sandboxes, u.memory_mib, u.cpus_milli, ~0u));
	if (!body)
		return err_set(e, SBX_E_INTERNAL, "out of memory");
	http_respond_json(r, 200, body);
	json_decref(body);
	return 0;
}

int api_tenants_limits_get(struct http_req *r, struct sbx_err *e)
{
	const char *tenant = path_tenant(r, e);

	return tenant ? respond_limits(r, tenant, e) : -1;
}

int api_tenants_limits_put(struct http_req *r, struct sbx_err *e)
{
	const char *tenant = path_tenant(r, e);
	struct ceilings_tenant v;
	unsigned set;
	json_t *body;
	int rc;

	if (!tenant)
		return -1;
	body = http_read_json(r, e);
	if (!body)
		return -1;
	rc = ceilings_tenant_parse(body, &v, &set, e);
	json_decref(body);
	if (rc < 0 || ceilings_tenant_store(tenant, &v, set, e) < 0)
		return -1;
	return respond_limits(r, tenant, e);
}
