#include "conf.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum conf_type { T_INT, T_DURATION, T_STR, T_ENUM };

struct conf_entry {
	const char *section;
	const char *key;
	enum conf_type type;
	size_t offset;
	const char *def;       /* default, in file syntax */
	int64_t min, max;      /* bounds of T_INT / T_DURATION (ms) */
	const char *choices;   /* T_ENUM: "a|b|c" */
};

#define OFF(f) offsetof(struct sbx_conf, f)
#define I64MAX INT64_MAX

static const struct conf_entry entries[] = {
	{ "redis", "url", T_STR, OFF(redis.url), "redis://127.0.0.1:6379", 0, 0, NULL },
	{ "redis", "connect_timeout", T_DURATION, OFF(redis.connect_timeout_ms), "200ms", 10, 60000, NULL },
	{ "redis", "command_timeout", T_DURATION, OFF(redis.command_timeout_ms), "500ms", 10, 60000, NULL },
	{ "redis", "sentinels", T_STR, OFF(redis.sentinels), "", 0, 0, NULL },
	{ "redis", "master_name", T_STR, OFF(redis.master_name), "", 0, 0, NULL },

	{ "cluster", "secret", T_STR, OFF(cluster.secret), "", 0, 0, NULL },
	{ "cluster", "heartbeat", T_DURATION, OFF(cluster.heartbeat_ms), "1s", 100, 60000, NULL },
	{ "cluster", "node_ttl", T_DURATION, OFF(cluster.node_ttl_ms), "10s", 300, 3600000, NULL },

	{ "api", "listen", T_STR, OFF(api.listen), "unix:/run/sbx-api/api.sock", 0, 0, NULL },
	{ "api", "workers", T_INT, OFF(api.workers), "4", 1, 256, NULL },
	{ "api", "route_listen", T_STR, OFF(api.route_listen), "unix:/run/sbx-api/route.sock", 0, 0, NULL },
	{ "api", "route_workers", T_INT, OFF(api.route_workers), "4", 1, 64, NULL },
	{ "api", "max_body_bytes", T_INT, OFF(api.max_body_bytes), "1048576", 1024, 67108864, NULL },
	{ "api", "quota_sandboxes", T_INT, OFF(api.quota_sandboxes), "100", 1, 1000000, NULL },
	{ "api", "preview_domain", T_STR, OFF(api.preview_domain), "preview.localhost", 0, 0, NULL },
	{ "api", "public_url", T_STR, OFF(api.public_url), "http://127.0.0.1:8080", 0, 0, NULL },
	{ "api", "agent_timeout", T_DURATION, OFF(api.agent_timeout_ms), "10s", 100, 600000, NULL },
	{ "api", "key_cache", T_DURATION, OFF(api.key_cache_ms), "1s", 0, 10000, NULL },
	{ "api", "tunnel_provider", T_ENUM, OFF(api.tunnel_provider), "builtin", 0, 0, "builtin|cloudflared" },
	{ "api", "tenant_memory_mib", T_INT, OFF(api.tenant_memory_mib), "51200", 16, 1073741824, NULL },
	{ "api", "tenant_cpus_milli", T_INT, OFF(api.tenant_cpus_milli), "100000", 10, 256000000, NULL },
	{ "api", "reconcile_interval", T_DURATION, OFF(api.reconcile_interval_ms), "1m", 0, 3600000, NULL },
	{ "api", "metrics_listen", T_STR, OFF(api.metrics_listen), "127.0.0.1:9470", 0, 0, NULL },
	{ "api", "requests_per_second", T_INT, OFF(api.requests_per_second), "0", 0, 1000000, NULL },
	{ "api", "requests_burst", T_INT, OFF(api.requests_burst), "0", 0, 1000000, NULL },
	{ "api", "creates_per_minute", T_INT, OFF(api.creates_per_minute), "0", 0, 1000000, NULL },

	{ "agent", "name", T_STR, OFF(agent.name), "agent-1", 0, 0, NULL },
	{ "agent", "listen", T_STR, OFF(agent.listen), "127.0.0.1:7070", 0, 0, NULL },
	{ "agent", "state_dir", T_STR, OFF(agent.state_dir), "/var/lib/sbx", 0, 0, NULL },
	{ "agent", "images_dir", T_STR, OFF(agent.images_dir), "/var/lib/sbx/images", 0, 0, NULL },
	{ "agent", "init_path", T_STR, OFF(agent.init_path), "/usr/lib/sbx/sbx-init", 0, 0, NULL },
	{ "agent", "interp_dir", T_STR, OFF(agent.interp_dir), "/usr/lib/sbx/interp", 0, 0, NULL },
	{ "agent", "capacity", T_INT, OFF(agent.capacity), "500", 1, 100000, NULL },
	{ "agent", "userns", T_ENUM, OFF(agent.userns), "auto", 0, 0, "auto|on|off" },
	{ "agent", "uid_base", T_INT, OFF(agent.uid_base), "100000", 1000, 4000000000LL, NULL },
	{ "agent", "uid_ranges", T_INT, OFF(agent.uid_ranges), "1024", 1, 65535, NULL },
	{ "agent", "cgroup_parent", T_STR, OFF(agent.cgroup_parent), "sbx", 0, 0, NULL },
	{ "agent", "dns", T_STR, OFF(agent.dns), "1.1.1.1", 0, 0, NULL },
	{ "agent", "max_exec_output_bytes", T_INT, OFF(agent.max_exec_output_bytes), "33554432", 1024, 1073741824, NULL },
	{ "agent", "max_run_output_bytes", T_INT, OFF(agent.max_run_output_bytes), "1048576", 1024, 268435456, NULL },
	{ "agent", "big_bodies_node_bytes", T_INT, OFF(agent.big_bodies_node_bytes), "268435456", 1048576, 68719476736LL, NULL },
	{ "agent", "exec_spill_node_bytes", T_INT, OFF(agent.exec_spill_node_bytes), "1073741824", 0, 274877906944LL, NULL },
	{ "agent", "egress_subnet", T_STR, OFF(agent.egress_subnet), "10.88.0.0/16", 0, 0, NULL },
	{ "agent", "egress_interface", T_STR, OFF(agent.egress_interface), "", 0, 0, NULL },
	{ "agent", "egress_allow", T_STR, OFF(agent.egress_allow), "", 0, 0, NULL },
	{ "agent", "egress_conn_max", T_INT, OFF(agent.egress_conn_max), "1024", 0, 1000000, NULL },
	{ "agent", "egress_rate_mbit", T_INT, OFF(agent.egress_rate_mbit), "200", 0, 100000, NULL },
	{ "agent", "warm_pool", T_INT, OFF(agent.warm_pool), "0", 0, 1000, NULL },
	{ "agent", "cloudflared_path", T_STR, OFF(agent.cloudflared_path), "cloudflared", 0, 0, NULL },
	{ "agent", "tunnel_timeout", T_DURATION, OFF(agent.tunnel_timeout_ms), "30s", 1000, 300000, NULL },
	{ "agent", "tunnel_stop_grace", T_DURATION, OFF(agent.tunnel_stop_grace_ms), "5s", 0, 60000, NULL },
	{ "agent", "memory_mib", T_INT, OFF(agent.memory_mib), "0", 0, 1073741824, NULL },
	{ "agent", "cpus_milli", T_INT, OFF(agent.cpus_milli), "0", 0, 256000000, NULL },
	{ "agent", "max_tunnels", T_INT, OFF(agent.max_tunnels), "64", 0, 100000, NULL },
	{ "agent", "max_tunnels_per_sandbox", T_INT, OFF(agent.max_tunnels_per_sandbox), "4", 0, 64, NULL },
	{ "agent", "tunnel_user", T_STR, OFF(agent.tunnel_user), "nobody", 0, 0, NULL },
	{ "agent", "max_forward_conns", T_INT, OFF(agent.max_forward_conns), "4096", 1, 1000000, NULL },
	{ "agent", "max_forward_conns_per_tenant", T_INT, OFF(agent.max_forward_conns_per_tenant), "1024", 1, 1000000, NULL },
	{ "agent", "max_forward_conns_per_sandbox", T_INT, OFF(agent.max_forward_conns_per_sandbox), "256", 1, 1000000, NULL },
	{ "agent", "max_connections", T_INT, OFF(agent.max_connections), "4096", 16, 16384, NULL },
	{ "agent", "event_streams", T_INT, OFF(agent.event_streams), "64", 1, 10000, NULL },
	{ "agent", "proc_logs_sandbox_bytes", T_INT, OFF(agent.proc_logs_sandbox_bytes), "33554432", 65536, 17179869184LL, NULL },
	{ "agent", "proc_logs_node_bytes", T_INT, OFF(agent.proc_logs_node_bytes), "536870912", 65536, 274877906944LL, NULL },
	{ "agent", "proc_stdin_bytes", T_INT, OFF(agent.proc_stdin_bytes), "1048576", 4096, 67108864, NULL },
	{ "agent", "metrics_listen", T_STR, OFF(agent.metrics_listen), "127.0.0.1:9471", 0, 0, NULL },
	{ "agent", "max_execs_per_sandbox", T_INT, OFF(agent.max_execs_per_sandbox), "256", 1, 16384, NULL },
	{ "agent", "preview_gateway", T_STR, OFF(agent.preview_gateway), "", 0, 0, NULL },
	{ "agent", "preview_gateway_socket", T_STR, OFF(agent.preview_gateway_socket), "", 0, 0, NULL },

	{ "sandbox", "memory_mib", T_INT, OFF(sandbox.memory_mib), "512", 16, 1048576, NULL },
	{ "sandbox", "cpus_milli", T_INT, OFF(sandbox.cpus_milli), "1000", 10, 256000, NULL },
	{ "sandbox", "pids", T_INT, OFF(sandbox.pids), "256", 8, 1000000, NULL },
	{ "sandbox", "disk_mib", T_INT, OFF(sandbox.disk_mib), "256", 1, 1048576, NULL },
	{ "sandbox", "sleep_after", T_DURATION, OFF(sandbox.sleep_after_ms), "10m", 1000, 2592000000LL, NULL },
	{ "sandbox", "max_memory_mib", T_INT, OFF(sandbox.max_memory_mib), "4096", 16, 1048576, NULL },
	{ "sandbox", "max_cpus_milli", T_INT, OFF(sandbox.max_cpus_milli), "2000", 10, 256000, NULL },
	{ "sandbox", "max_pids", T_INT, OFF(sandbox.max_pids), "1024", 8, 1000000, NULL },
	{ "sandbox", "max_disk_mib", T_INT, OFF(sandbox.max_disk_mib), "2048", 1, 1048576, NULL },

	{ "snapshots", "store", T_ENUM, OFF(snapshots.store), "dir", 0, 0, "dir|s3" },
	{ "snapshots", "dir", T_STR, OFF(snapshots.dir), "/var/lib/sbx/snapshots", 0, 0, NULL },
	{ "snapshots", "s3_endpoint", T_STR, OFF(snapshots.s3_endpoint), "", 0, 0, NULL },
	{ "snapshots", "s3_bucket", T_STR, OFF(snapshots.s3_bucket), "", 0, 0, NULL },
	{ "snapshots", "s3_region", T_STR, OFF(snapshots.s3_region), "us-east-1", 0, 0, NULL },
	{ "snapshots", "s3_style", T_ENUM, OFF(snapshots.s3_style), "path", 0, 0, "path|virtual" },
	{ "snapshots", "s3_access_key", T_STR, OFF(snapshots.s3_access_key), "", 0, 0, NULL },
	{ "snapshots", "s3_secret_key", T_STR, OFF(snapshots.s3_secret_key), "", 0, 0, NULL },
	{ "snapshots", "tenant_quota_mib", T_INT, OFF(snapshots.tenant_quota_mib), "10240", 1, 1073741824, NULL },
	{ "snapshots", "max_entries", T_INT, OFF(snapshots.max_entries), "200000", 1, 10000000, NULL },
	{ "snapshots", "s3_part_mib", T_INT, OFF(snapshots.s3_part_mib), "16", 5, 5120, NULL },

	{ "images", "default_registry", T_STR, OFF(images.default_registry), "docker.io", 0, 0, NULL },
	{ "images", "library_prefix", T_INT, OFF(images.library_prefix), "1", 0, 1, NULL },
	{ "images", "max_image_mib", T_INT, OFF(images.max_image_mib), "4096", 0, 1048576, NULL },
	{ "images", "pull_timeout", T_DURATION, OFF(images.pull_timeout_ms), "5m", 1000, 3600000, NULL },
	{ "images", "disk_budget_mib", T_INT, OFF(images.disk_budget_mib), "0", 0, 1073741824, NULL },
	{ "images", "registry_auth", T_STR, OFF(images.registry_auth), "", 0, 0, NULL },
	{ "images", "registry_ca", T_STR, OFF(images.registry_ca), "", 0, 0, NULL },
	{ "images", "plain_http", T_STR, OFF(images.plain_http), "", 0, 0, NULL },
};

int conf_parse_duration(const char *s, int64_t *ms)
{
	char *end;
	long long v;
	int64_t mult;

	if (!s || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || v < 0)
		return -1;
	if (*end == '\0' || strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "s") == 0)
		mult = 1000;
	else if (strcmp(end, "m") == 0)
		mult = 60000;
	else if (strcmp(end, "h") == 0)
		mult = 3600000;
	else
		return -1;
	if (v > INT64_MAX / mult)
		return -1;
	*ms = v * mult;
	return 0;
}

static int enum_has(const char *choices, const char *v)
{
	size_t n = strlen(v);
	const char *p = choices;

	while (*p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len == n && strncmp(p, v, n) == 0)
			return 1;
		if (!bar)
			break;
		p = bar + 1;
	}
	return 0;
}

static int set_value(struct sbx_conf *c, const struct conf_entry *en, const char *v,
		     struct sbx_err *e)
{
	char *field = (char *)c + en->offset;
	int64_t n;

	switch (en->type) {
	case T_INT:
		if (util_parse_i64(v, en->min, en->max, &n) < 0)
			return err_set(e, SBX_E_VALIDATION, "%s.%s: '%s' is not an integer in [%lld, %lld]",
				       en->section, en->key, v, (long long)en->min, (long long)en->max);
		*(int64_t *)field = n;
		return 0;
	case T_DURATION:
		if (conf_parse_duration(v, &n) < 0 || n < en->min || n > en->max)
			return err_set(e, SBX_E_VALIDATION,
				       "%s.%s: '%s' is not a duration in [%lldms, %lldms]", en->section,
				       en->key, v, (long long)en->min, (long long)en->max);
		*(int64_t *)field = n;
		return 0;
	case T_ENUM:
		if (!enum_has(en->choices, v))
			return err_set(e, SBX_E_VALIDATION, "%s.%s: '%s' is not one of %s",
				       en->section, en->key, v, en->choices);
		/* fall through */
	case T_STR:
		/* What the file format cannot hold (a comment, surrounding blanks, a
		 * line break) is refused from -o too, so --print-config reads back. */
		if (strpbrk(v, "#\n\r") || (*v && (isspace((unsigned char)v[0]) ||
						    isspace((unsigned char)v[strlen(v) - 1]))))
			return err_set(e, SBX_E_VALIDATION,
				       "%s.%s: '#', line breaks and surrounding blanks are not allowed",
				       en->section, en->key);
		if (strlen(v) >= CONF_STR_MAX)
			return err_set(e, SBX_E_VALIDATION, "%s.%s: value longer than %d bytes",
				       en->section, en->key, CONF_STR_MAX - 1);
		memcpy(field, v, strlen(v) + 1);
		return 0;
	}
	return err_set(e, SBX_E_INTERNAL, "bad config entry type");
}

static const struct conf_entry *lookup(const char *section, const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(entries); i++)
		if (strcmp(entries[i].section, section) == 0 && strcmp(entries[i].key, key) == 0)
			return &entries[i];
	return NULL;
}

static int section_known(const char *section)
{
	for (size_t i = 0; i < ARRAY_SIZE(entries); i++)
		if (strcmp(entries[i].section, section) == 0)
			return 1;
	return 0;
}

int conf_bounds(const char *section, const char *key, int64_t *min, int64_t *max)
{
	const struct conf_entry *en = lookup(section, key);

	if (!en || (en->type != T_INT && en->type != T_DURATION))
		return -1;
	*min = en->min;
	*max = en->max;
	return 0;
}

void conf_defaults(struct sbx_conf *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < ARRAY_SIZE(entries); i++)
		if (set_value(c, &entries[i], entries[i].def, NULL) < 0)
			abort(); /* a default outside its own bounds is a bug in the table */
}

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		*--end = '\0';
	return s;
}

int conf_parse(struct sbx_conf *c, const char *name, const char *text, struct sbx_err *e)
{
	char section[64] = "";
	unsigned char seen[ARRAY_SIZE(entries)] = { 0 };
	const char *p = text;
	int lineno = 0;

	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char line[1024], *s, *eq, *hash;

		lineno++;
		if (len >= sizeof(line))
			return err_set(e, SBX_E_VALIDATION, "%s:%d: line too long", name, lineno);
		memcpy(line, p, len);
		line[len] = '\0';
		p = nl ? nl + 1 : p + len;
		if (memchr(line, '\0', len))
			return err_set(e, SBX_E_VALIDATION, "%s:%d: NUL byte", name, lineno);
		hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		s = trim(line);
		if (*s == '\0')
			continue;
		if (*s == '[') {
			char *close = strchr(s, ']');
			if (!close || close[1] != '\0' || (size_t)(close - s - 1) >= sizeof(section))
				return err_set(e, SBX_E_VALIDATION, "%s:%d: bad section header", name, lineno);
			*close = '\0';
			memcpy(section, s + 1, strlen(s + 1) + 1);
			if (!section_known(section))
				return err_set(e, SBX_E_VALIDATION, "%s:%d: unknown section '%s'", name,
					       lineno, section);
			continue;
		}
		eq = strchr(s, '=');
		if (!eq)
			return err_set(e, SBX_E_VALIDATION, "%s:%d: expected 'key = value'", name, lineno);
		*eq = '\0';
		{
			char *key = trim(s), *val = trim(eq + 1);
			const struct conf_entry *en;

			if (!*section)
				return err_set(e, SBX_E_VALIDATION, "%s:%d: key '%s' outside a section",
					       name, lineno, key);
			en = lookup(section, key);
			if (!en)
				return err_set(e, SBX_E_VALIDATION, "%s:%d: unknown key '%s' in [%s]",
					       name, lineno, key, section);
			if (seen[en - entries]++)
				return err_set(e, SBX_E_VALIDATION, "%s:%d: duplicate key '%s.%s'", name,
					       lineno, section, key);
			if (set_value(c, en, val, e) < 0) {
				err_prefix(e, "%s:%d", name, lineno);
				return -1;
			}
		}
	}
	return 0;
}

int conf_load(struct sbx_conf *c, const char *path, struct sbx_err *e)
{
	auto_free char *text = util_read_file(path, 1 << 20, NULL);

	if (!text)
		return err_sys(e, errno, "cannot read config '%s'", path);
	return conf_parse(c, path, text, e);
}

int conf_override(struct sbx_conf *c, const char *assignment, struct sbx_err *e)
{
	char section[64], key[64];
	const char *dot = strchr(assignment, '.'), *eq = strchr(assignment, '=');
	const struct conf_entry *en;

	if (!dot || !eq || dot > eq || (size_t)(dot - assignment) >= sizeof(section) ||
	    (size_t)(eq - dot - 1) >= sizeof(key))
		return err_set(e, SBX_E_VALIDATION, "override '%s' is not section.key=value", assignment);
	memcpy(section, assignment, (size_t)(dot - assignment));
	section[dot - assignment] = '\0';
	memcpy(key, dot + 1, (size_t)(eq - dot - 1));
	key[eq - dot - 1] = '\0';
	en = lookup(section, key);
	if (!en)
		return err_set(e, SBX_E_VALIDATION, "override: unknown key '%s.%s'", section, key);
	return set_value(c, en, eq + 1, e);
}

void conf_print(const struct sbx_conf *c, FILE *out)
{
	const char *section = "";

	for (size_t i = 0; i < ARRAY_SIZE(entries); i++) {
		const struct conf_entry *en = &entries[i];
		const char *field = (const char *)c + en->offset;

		if (strcmp(section, en->section) != 0) {
			section = en->section;
			fprintf(out, "%s[%s]\n", i ? "\n" : "", section);
		}
		if (en->type == T_INT)
			fprintf(out, "%s = %lld\n", en->key, (long long)*(const int64_t *)field);
		else if (en->type == T_DURATION)
			fprintf(out, "%s = %lldms\n", en->key, (long long)*(const int64_t *)field);
		else if (strcmp(en->key, "secret") == 0 || strcmp(en->key, "s3_secret_key") == 0)
			fprintf(out, "%s = <%zu bytes>\n", en->key, strlen(field));
		else
			fprintf(out, "%s = %s\n", en->key, field);
	}
}
