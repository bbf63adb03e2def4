/* The snapshot store of the configuration (snapstore.h). */
#include "snapstore.h"
#include "ids.h"
#include "util.h"

#include <jansson.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SNAP_SUFFIX ".tar.zst"

int snapstore_init(struct snapstore *s, const struct sbx_conf *conf, struct sbx_err *e)
{
	memset(s, 0, sizeof(*s));
	if (strcmp(conf->snapshots.store, "dir") != 0)
		return err_set(e, SBX_E_NOT_IMPLEMENTED, "snapshot store '%s' is not built in",
			       conf->snapshots.store);
	if (conf->snapshots.dir[0] != '/')
		return err_set(e, SBX_E_VALIDATION, "snapshots.dir must be an absolute path");
	s->ops = &snapstore_dir_ops;
	if ((size_t)snprintf(s->root, sizeof(s->root), "%s", conf->snapshots.dir) >= sizeof(s->root))
		return err_set(e, SBX_E_VALIDATION, "snapshots.dir is too long");
	return 0;
}

int snapstore_loc_valid(const char *loc)
{
	char tenant[64], sid[64];
	const char *slash = strchr(loc, '/');
	size_t tl, sl, xl = strlen(SNAP_SUFFIX);

	if (!slash)
		return 0;
	tl = (size_t)(slash - loc);
	sl = strlen(slash + 1);
	if (tl == 0 || tl >= sizeof(tenant) || sl <= xl || sl - xl >= sizeof(sid) ||
	    strcmp(slash + 1 + sl - xl, SNAP_SUFFIX) != 0)
		return 0;
	memcpy(tenant, loc, tl);
	tenant[tl] = '\0';
	memcpy(sid, slash + 1, sl - xl);
	sid[sl - xl] = '\0';
	return ids_valid_tenant(tenant) && ids_valid_sandbox(sid);
}

int snapstore_id_valid(const char *sid)
{
	if (strlen(sid) != 19 || strncmp(sid, "sn-", 3) != 0)
		return 0;
	for (const char *p = sid + 3; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static const char *kv_get(size_t n, const char *const *kv, const char *name)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		if (strcmp(kv[i], name) == 0)
			return kv[i + 1];
	return NULL;
}

json_t *snapstore_record_json(size_t n, const char *const *kv)
{
	static const char *const names[] = { SNAPSTORE_FIELDS };
	const char *v[ARRAY_SIZE(names)];
	int64_t size, entries, bytes, created;
	json_t *paths;
	char when[32];

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!(v[i] = kv_get(n, kv, names[i])))
			return NULL;
	if (util_parse_i64(v[5], 0, INT64_MAX, &size) < 0 ||
	    util_parse_i64(v[7], 0, INT64_MAX, &entries) < 0 ||
	    util_parse_i64(v[8], 0, INT64_MAX, &bytes) < 0 ||
	    util_parse_i64(v[11], 0, INT64_MAX, &created) < 0)
		return NULL;
	paths = json_loads(v[4], 0, NULL);
	if (!json_is_array(paths)) {
		json_decref(paths);
		return NULL;
	}
	util_iso8601(created, when);
	return json_pack("{s:s, s:s, s:s*, s:o, s:I, s:s, s:I, s:I, s:s, s:s}", "id", v[0], "sandbox",
			 v[2], "name", *v[3] ? v[3] : NULL, "paths", paths, "size", (json_int_t)size,
			 "digest", v[6], "entries", (json_int_t)entries, "bytes", (json_int_t)bytes,
			 "store", v[9], "createdAt", when);
}
