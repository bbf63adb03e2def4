/*
 * snapstore.h — where snapshot archives live, behind one small interface
 * (docs/API.md "Snapshots", docs/DEPLOY.md).
 *
 * A store keeps opaque archives under a location string that the caller
 * builds ("<tenant>/<sid>.tar.zst") and records in Redis. A new archive is
 * written to the fd of snapstore_create and becomes visible only with
 * snapstore_commit (a crashed or failed writer leaves no archive under
 * the location); snapstore_abort throws it away. Each variant is one file
 * (snapstore_dir.c, snapstore_s3.c).
 */
#ifndef SBX_SNAPSTORE_H
#define SBX_SNAPSTORE_H

#include "conf.h"
#include "err.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SNAPSTORE_LOC_MAX 256

struct snapstore;

/* A write in progress: fd is the caller's to write (not to close). */
struct snapstore_put {
	int fd;
	char loc[SNAPSTORE_LOC_MAX];
	char tmp[SNAPSTORE_LOC_MAX + 64];
};

struct snapstore_ops {
	const char *name;
	int (*create)(struct snapstore *s, const char *loc, struct snapstore_put *p,
		      struct sbx_err *e);
	int (*commit)(struct snapstore *s, struct snapstore_put *p, struct sbx_err *e);
	void (*abort)(struct snapstore *s, struct snapstore_put *p);
	/* An fd to read the archive at loc (O_CLOEXEC; the caller closes);
	 * -1 with SBX_E_SNAPSHOT_NOT_FOUND when there is none. */
	int (*open)(struct snapstore *s, const char *loc, struct sbx_err *e);
	/* Remove it; no archive is no error. */
	int (*remove)(struct snapstore *s, const char *loc, struct sbx_err *e);
};

struct snapstore {
	const struct snapstore_ops *ops;
	char root[CONF_STR_MAX];       /* dir: the store; s3: the spool */
	struct {
		char endpoint[CONF_STR_MAX];
		char bucket[CONF_STR_MAX];
		char region[CONF_STR_MAX];
		char access_key[CONF_STR_MAX];
		char secret_key[CONF_STR_MAX];
		int virtual_host;
		uint64_t part_bytes;   /* multipart above this */
	} s3;
};

extern const struct snapstore_ops snapstore_dir_ops;
extern const struct snapstore_ops snapstore_s3_ops;

/* The store conf names (snapshots.store, snapshots.dir) into s; -1 with e
 * when the store is unknown or badly configured. */
int snapstore_init(struct snapstore *s, const struct sbx_conf *conf, struct sbx_err *e);

/* The fields of a snapshot's record (docs/REDIS.md), in order. */
#define SNAPSTORE_FIELDS "id", "tenant", "sandbox", "name", "paths", "size", "digest", \
	"entries", "bytes", "store", "location", "createdAt"

/* The API's JSON of a record given as n alternating field, value strings
 * (a HGETALL answer): {id, sandbox, name, paths, size, digest, entries,
 * bytes, store, createdAt}; the location and tenant are never shown. New
 * reference, NULL when the record lacks a field or memory ran out. */
json_t *snapstore_record_json(size_t n, const char *const *kv);

/* A snapshot id: "sn-" and 16 lowercase hex digits. 1 or 0. */
int snapstore_id_valid(const char *sid);

/* A location is "<tenant>/<sid>.tar.zst" of valid names: 1, else 0. */
int snapstore_loc_valid(const char *loc);

static inline int snapstore_create(struct snapstore *s, const char *loc, struct snapstore_put *p,
				   struct sbx_err *e)
{
	return s->ops->create(s, loc, p, e);
}
static inline int snapstore_commit(struct snapstore *s, struct snapstore_put *p, struct sbx_err *e)
{
	return s->ops->commit(s, p, e);
}
static inline void snapstore_abort(struct snapstore *s, struct snapstore_put *p)
{
	s->ops->abort(s, p);
}
static inline int snapstore_open(struct snapstore *s, const char *loc, struct sbx_err *e)
{
	return s->ops->open(s, loc, e);
}
static inline int snapstore_remove(struct snapstore *s, const char *loc, struct sbx_err *e)
{
	return s->ops->remove(s, loc, e);
}

#endif
