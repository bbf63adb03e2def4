#include "evfilter.h"
#include "codec.h"
#include "ids.h"

#include <string.h>

void evfilter_init(struct evfilter *f)
{
	memset(f, 0, sizeof(*f));
}

/* An event type: [a-z][a-z.-]*, shorter than EVFILTER_TYPE_MAX. */
static int type_valid(const char *s, size_t n)
{
	if (n == 0 || n >= EVFILTER_TYPE_MAX || s[0] < 'a' || s[0] > 'z')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '.' || s[i] == '-'))
			return 0;
	return 1;
}

static int add_types(struct evfilter *f, const char *value, struct sbx_err *e)
{
	const char *p = value;

	for (;;) {
		size_t n = strcspn(p, ",");

		if (!type_valid(p, n))
			return err_set(e, SBX_E_VALIDATION,
				       "type must be a comma-separated list of event types ([a-z.-], up to %d bytes each)",
				       EVFILTER_TYPE_MAX - 1);
		if (f->ntypes == EVFILTER_TYPES_MAX)
			return err_set(e, SBX_E_VALIDATION, "type lists at most %d event types",
				       EVFILTER_TYPES_MAX);
		memcpy(f->types[f->ntypes], p, n);
		f->types[f->ntypes++][n] = '\0';
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

/* Copy value into slot (one of f's names) unless it is already set. */
static int set_once(char *slot, size_t size, const char *name, const char *value, int ok,
		    struct sbx_err *e)
{
	if (slot[0])
		return err_set(e, SBX_E_VALIDATION, "query parameter '%s' given twice", name);
	if (!ok || strlen(value) >= size)
		return err_set(e, SBX_E_VALIDATION, "invalid %s '%.64s'", name, value);
	memcpy(slot, value, strlen(value) + 1);
	return 0;
}

int evfilter_add(struct evfilter *f, const char *name, const char *value, struct sbx_err *e)
{
	if (strcmp(name, "tenant") == 0)
		return set_once(f->tenant, sizeof(f->tenant), name, value, ids_valid_tenant(value), e);
	if (strcmp(name, "sandbox") == 0)
		return set_once(f->sandbox, sizeof(f->sandbox), name, value, ids_valid_sandbox(value), e);
	if (strcmp(name, "node") == 0)
		return set_once(f->node, sizeof(f->node), name, value, ids_valid_node(value), e);
	if (strcmp(name, "type") == 0) {
		if (f->ntypes)
			return err_set(e, SBX_E_VALIDATION, "query parameter 'type' given twice");
		return add_types(f, value, e);
	}
	return err_set(e, SBX_E_VALIDATION,
		       "unknown query parameter '%.32s' (tenant, sandbox, node, type)", name);
}

int evfilter_parse_query(struct evfilter *f, const char *query, struct sbx_err *e)
{
	const char *p = query ? query : "";

	evfilter_init(f);
	while (*p) {
		size_t len = strcspn(p, "&"), nlen = strcspn(p, "=");
		char name[32], value[512];
		long n, v;

		if (nlen > len)
			nlen = len;
		n = codec_pct_decode(p, nlen, name, sizeof(name), 1);
		v = nlen < len ? codec_pct_decode(p + nlen + 1, len - nlen - 1, value, sizeof(value), 1) : 0;
		if (n <= 0 || v < 0)
			return err_set(e, SBX_E_VALIDATION, "malformed query string");
		if (nlen == len)
			value[0] = '\0';
		if (evfilter_add(f, name, value, e) < 0)
			return -1;
		p += len;
		if (*p)
			p++;
	}
	return 0;
}

static int field_is(const char *want, const char *have)
{
	return !want[0] || (have && strcmp(want, have) == 0);
}

int evfilter_match(const struct evfilter *f, const char *scope, const char *type,
		   const char *tenant, const char *id, const char *node)
{
	int typed = f->ntypes == 0;

	if (!scope || (strcmp(scope, EVFILTER_SCOPE_ALL) != 0 && !(tenant && strcmp(scope, tenant) == 0)))
		return 0;
	if (!field_is(f->tenant, tenant) || !field_is(f->sandbox, id) || !field_is(f->node, node))
		return 0;
	for (int i = 0; i < f->ntypes && !typed; i++)
		typed = type && strcmp(f->types[i], type) == 0;
	return typed;
}

int evfilter_id_valid(const char *s)
{
	size_t a, b;

	if (!s)
		return 0;
	a = strspn(s, "0123456789");
	if (a == 0 || a > 20 || s[a] != '-')
		return 0;
	b = strspn(s + a + 1, "0123456789");
	return b > 0 && b <= 20 && s[a + 1 + b] == '\0';
}
