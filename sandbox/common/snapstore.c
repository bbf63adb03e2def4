/* The snapshot store of the configuration (snapstore.h). */
#include "snapstore.h"
#include "ids.h"
#include "util.h"

#include <jansson.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SNAP_SUFFIX ".tar.zst"

static int copy(char *out, size_t n, const char *v, const char *what, struct sbx_err *e)
{
	if ((size_t)snprintf(out, n, "%s", v) >= n)
		return err_set(e, SBX_E_VALIDATION, "%s is too long", what);
	return 0;
}

int snapstore_init(struct snapstore *s, const struct sbx_conf *conf, struct sbx_err *e)
{
	const char *store = conf->snapshots.store;

	memset(s, 0, sizeof(*s));
	if (conf->snapshots.dir[0] != '/')
		return err_set(e, SBX_E_VALIDATION, "snapshots.dir must be an absolute path");
	if (copy(s->root, sizeof(s->root), conf->snapshots.dir, "snapshots.dir", e) < 0)
		return -1;
	if (strcmp(store, "dir") == 0) {
		s->ops = &snapstore_dir_ops;
		return 0;
	}
	if (strcmp(store, "s3") != 0)
		return err_set(e, SBX_E_NOT_IMPLEMENTED, "snapshot store '%s' is not built in", store);
	if (strncmp(conf->snapshots.s3_endpoint, "http://", 7) != 0 &&
	    strncmp(conf->snapshots.s3_endpoint, "https://", 8) != 0)
		return err_set(e, SBX_E_VALIDATION, "snapshots.s3_endpoint must be an http(s) URL");
	if (!conf->snapshots.s3_bucket[0])
		return err_set(e, SBX_E_VALIDATION, "snapshots.s3_bucket is empty");
	s->ops = &snapstore_s3_ops;
	s->s3.virtual_host = strcmp(conf->snapshots.s3_style, "virtual") == 0;
	s->s3.part_bytes = (uint64_t)conf->snapshots.s3_part_mib << 20;
	if (copy(s->s3.endpoint, sizeof(s->s3.endpoint), conf->snapshots.s3_endpoint,
		 "snapshots.s3_endpoint", e) < 0)
		return -1;
	{
		size_t n = strlen(s->s3.endpoint);

		while (n && s->s3.endpoint[n - 1] == '/')
			s->s3.endpoint[--n] = '\0';
	}
	if (copy(s->s3.bucket, sizeof(s->s3.bucket), conf->snapshots.s3_bucket, "bucket", e) < 0 ||
	    copy(s->s3.region, sizeof(s->s3.region), conf->snapshots.s3_region, "region", e) < 0 ||
	    copy(s->s3.access_key, sizeof(s->s3.access_key), conf->snapshots.s3_access_key, "key",
		 e) < 0 ||
	    copy(s->s3.secret_key, sizeof(s->s3.secret_key), conf->snapshots.s3_secret_key, "key",
		 e) < 0)
		return -1;
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
