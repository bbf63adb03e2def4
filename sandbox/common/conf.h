/*
 * conf.h — the configuration of both binaries, from one annotated file.
 *
 * The file is INI-like: "[section]" lines and "key = value" lines; '#'
 * starts a comment. Every key is an entry of one static table (conf.c):
 * its type, default and bounds. Unknown sections or keys, values out of
 * range and duplicate keys are errors that name the file and line.
 * Command-line overrides ("-o section.key=value") go through the same
 * table, after the file.
 */
#ifndef SBX_CONF_H
#define SBX_CONF_H

#include "err.h"

#include <stdint.h>
#include <stdio.h>

#define CONF_STR_MAX 256

struct sbx_conf {
	struct {
		char url[CONF_STR_MAX];         /* redis://host:port or unix:/path */
		int64_t connect_timeout_ms;
		int64_t command_timeout_ms;
		char sentinels[CONF_STR_MAX];   /* host:port,... of Redis Sentinels; "" = use url */
		char master_name[CONF_STR_MAX]; /* the primary's name in the sentinels */
	} redis;
	struct {
		char secret[CONF_STR_MAX];      /* node secret: nginx + api -> agent */
		int64_t heartbeat_ms;           /* agent liveness refresh */
		int64_t node_ttl_ms;            /* a node is down this long after its last heartbeat */
	} cluster;
	struct {
		char listen[CONF_STR_MAX];      /* unix:/path or host:port for FastCGI */
		int64_t workers;
		char route_listen[CONF_STR_MAX]; /* the routing checks' own FastCGI address */
		int64_t route_workers;          /* workers that serve only route_listen */
		int64_t max_body_bytes;
		int64_t quota_sandboxes;        /* live sandboxes per tenant */
		char preview_domain[CONF_STR_MAX];
		char public_url[CONF_STR_MAX];  /* how clients reach nginx */
		int64_t agent_timeout_ms;       /* control calls to agents */
		int64_t key_cache_ms;           /* per-worker cache of checked API keys; 0 = off */
		char tunnel_provider[CONF_STR_MAX]; /* builtin | cloudflared: POST …/tunnels without a provider */
		int64_t tenant_memory_mib;      /* default total memory of a tenant's sandboxes */
		int64_t tenant_cpus_milli;      /* default total cpus of a tenant's sandboxes */
		int64_t reconcile_interval_ms;  /* index repair pass of the master; 0 = off */
		char metrics_listen[CONF_STR_MAX]; /* host:port of the master's /metrics; "" = off */
		int64_t requests_per_second;    /* per tenant, all API calls; 0 = no limit */
		int64_t requests_burst;         /* calls at once above that rate; 0 = requests_per_second */
		int64_t creates_per_minute;     /* per tenant, PUT /v1/sandboxes/{id}; 0 = no limit */
	} api;
	struct {
		char name[CONF_STR_MAX];
		char listen[CONF_STR_MAX];      /* host:port, loopback or a private address */
		char state_dir[CONF_STR_MAX];
		char images_dir[CONF_STR_MAX];
		char init_path[CONF_STR_MAX];   /* the sbx-init binary */
		char interp_dir[CONF_STR_MAX];  /* the code contexts' drivers (driver.py, driver.js) */
		int64_t capacity;               /* sandboxes this node takes */
		char userns[CONF_STR_MAX];      /* auto | on | off */
		int64_t uid_base;               /* first host uid of the sandbox ranges */
		int64_t uid_ranges;             /* how many 65536-id ranges from uid_base */
		char cgroup_parent[CONF_STR_MAX];
		char dns[CONF_STR_MAX];         /* nameserver written into /etc/resolv.conf */
		int64_t max_exec_output_bytes;  /* JSON exec answers cap each stream here */
		int64_t max_run_output_bytes;   /* JSON code-run answers (held in memory) */
		int64_t big_bodies_node_bytes;  /* /cf request bodies (to 48 MiB each) buffered at once */
		int64_t exec_spill_node_bytes;  /* of that, on disk for all JSON execs of the node */
		char egress_subnet[CONF_STR_MAX];    /* IPv4 CIDR of egress sandboxes; "" = no egress */
		char egress_interface[CONF_STR_MAX]; /* egress only out of this link; "" = any */
		char egress_allow[CONF_STR_MAX];     /* IPv4 CIDRs exempt from the block list; "" = none */
		int64_t egress_conn_max;        /* tracked connections per egress sandbox; 0 = no limit */
		int64_t egress_rate_mbit;       /* Mbit/s per egress sandbox and direction; 0 = no limit */
		int64_t warm_pool;              /* pre-built default sandboxes kept ready (0 = off) */
		char cloudflared_path[CONF_STR_MAX]; /* the cloudflared binary (name: looked up in PATH) */
		int64_t tunnel_timeout_ms;      /* a tunnel process has this long to print its URL and be ready */
		int64_t tunnel_stop_grace_ms;   /* SIGTERM, then SIGKILL after this */
		int64_t memory_mib;             /* memory limits placement may commit here; 0 = MemTotal */
		int64_t cpus_milli;             /* cpu limits placement may commit here; 0 = 16 x online cpus */
		int64_t max_tunnels;            /* tunnel processes on this node */
		int64_t max_tunnels_per_sandbox;
		char tunnel_user[CONF_STR_MAX]; /* tunnel processes run as this user (name or uid) */
		int64_t max_forward_conns;      /* open forwarded connections on this node */
		int64_t max_forward_conns_per_tenant;  /* ... of one tenant on this node */
		int64_t max_forward_conns_per_sandbox;
		int64_t max_connections;        /* client connections served (httpd.h) */
		int64_t event_streams;          /* GET /v1/events streams served at once */
		int64_t proc_logs_sandbox_bytes; /* log memory of a sandbox's background processes */
		int64_t proc_logs_node_bytes;   /* ... of every sandbox of the node */
		int64_t proc_stdin_bytes;       /* stdin queued for one background process */
		char metrics_listen[CONF_STR_MAX]; /* host:port of the agent's /metrics; "" = off */
		int64_t max_execs_per_sandbox;  /* exec commands running at once in one sandbox */
		char preview_gateway[CONF_STR_MAX]; /* host:port of the preview gateway; "" = off */
		char preview_gateway_socket[CONF_STR_MAX]; /* its unix socket for this host's nginx */
	} agent;
	struct {
		int64_t memory_mib;
		int64_t cpus_milli;             /* 1000 = one CPU */
		int64_t pids;
		int64_t disk_mib;
		int64_t sleep_after_ms;
		int64_t max_memory_mib;         /* operator ceilings of one sandbox */
		int64_t max_cpus_milli;
		int64_t max_pids;
		int64_t max_disk_mib;
	} sandbox;
	struct {
		char store[CONF_STR_MAX];       /* dir | s3 (snapstore.h) */
		char dir[CONF_STR_MAX];         /* the dir store's root; s3: the spool */
		char s3_endpoint[CONF_STR_MAX]; /* http(s)://host[:port] */
		char s3_bucket[CONF_STR_MAX];
		char s3_region[CONF_STR_MAX];
		char s3_style[CONF_STR_MAX];    /* path | virtual */
		char s3_access_key[CONF_STR_MAX];
		char s3_secret_key[CONF_STR_MAX];
		int64_t tenant_quota_mib;       /* archive bytes a tenant may keep */
		int64_t max_entries;            /* entries of one archive */
		int64_t s3_part_mib;            /* s3: multipart above one part of this size */
	} snapshots;
	struct {
		char default_registry[CONF_STR_MAX]; /* of a reference without one */
		int64_t library_prefix;         /* docker.io "x" means "library/x" */
		int64_t max_image_mib;          /* compressed layers of one image; 0 = no limit */
		int64_t pull_timeout_ms;        /* sbx-api waits this long for a create that pulls */
		int64_t disk_budget_mib;        /* unpacked layers kept; LRU images beyond are removed; 0 = no GC */
		char registry_auth[CONF_STR_MAX]; /* "registry=user:password ..." */
		char registry_ca[CONF_STR_MAX];   /* "registry=/path/ca.pem ...": a private CA */
		char plain_http[CONF_STR_MAX];    /* "registry ...": plain HTTP though not loopback */
	} images;
};

/* Defaults of every key. */
void conf_defaults(struct sbx_conf *c);

/* Read path into c (which holds defaults or earlier values); -1 on error. */
int conf_load(struct sbx_conf *c, const char *path, struct sbx_err *e);

/* Parse a whole text (name is used in messages); -1 on error. */
int conf_parse(struct sbx_conf *c, const char *name, const char *text, struct sbx_err *e);

/* Apply one "section.key=value" override; -1 on error. */
int conf_override(struct sbx_conf *c, const char *assignment, struct sbx_err *e);

/* Parse a duration "250", "250ms", "30s", "10m", "1h" into ms; -1 if bad. */
int conf_parse_duration(const char *s, int64_t *ms);

/* The bounds of a numeric key (T_INT / duration in ms) of the table, so that
 * API input is held to the same limits as the config. 0, or -1 when the key
 * is unknown or not numeric. */
int conf_bounds(const char *section, const char *key, int64_t *min, int64_t *max);

/* Print every key with its current value, as the file format (sbx-* --print-config). */
void conf_print(const struct sbx_conf *c, FILE *out);

#endif
