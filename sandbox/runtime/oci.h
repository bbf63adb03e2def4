/*
 * oci.h — images from OCI / Docker v2 registries: the pull and the store.
 *
 * The store, under images_dir:
 *   layers/<hex>/     one unpacked layer per compressed blob digest, ready
 *                     as an overlay lowerdir (whiteouts as 0/0 character
 *                     devices, opaque dirs with the overlay xattr); shared by
 *                     every image that has it
 *   oci/<hex>.json    one record per reference (hex = sha256 of the
 *                     canonical reference): its digest, layers (bottom
 *                     first), config (Env, WorkingDir, User), size, lastUsed
 *   tmp/              downloads and half-unpacked layers; renamed into
 *                     place only when whole, so a failed pull leaves nothing
 *
 * oci_pull is blocking (libcurl + libarchive, no global state besides
 * curl_global_init): the agent runs it on a thread of its own, never on
 * the event loop. Each function returns 0 or -1 with e filled.
 */
#ifndef SBX_OCI_H
#define SBX_OCI_H

#include "err.h"
#include "imgref.h"

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

struct oci_pull_opts {
	const char *images_dir;
	uid_t owner;              /* host uid of the image's id 0 (agent.uid_base, or 0) */
	int64_t max_image_bytes;  /* compressed layers of one image; 0 = no limit */
	const char *arch;         /* "amd64", "arm64": the platform picked from an index */
	const char *auth;         /* [images] registry_auth: "registry=user:password ..." */
	const char *ca;           /* [images] registry_ca: "registry=/path/ca.pem ..." */
	const char *plain_http;   /* [images] plain_http: "registry ..." */
	int64_t budget_bytes;     /* [images] disk_budget_mib: GC after a pull; 0 = none */
	void (*received)(uint64_t bytes); /* or NULL: told the bytes of each registry GET,
					   * from the pulling thread */
};

/* Pull ref unless its record exists: manifest (index → this platform),
 * config, every layer not yet stored, verified by digest and unpacked
 * safely; then the record. Errors: IMAGE_NOT_FOUND, REGISTRY_UNAVAILABLE,
 * REGISTRY_AUTH_FAILED, IMAGE_DIGEST_MISMATCH, IMAGE_PLATFORM_UNSUPPORTED,
 * IMAGE_LAYER_REFUSED, IMAGE_TOO_LARGE, INTERNAL. */
int oci_pull(const struct oci_pull_opts *o, const struct imgref *ref, struct sbx_err *e);

/* The record of ref (a new reference, caller json_decref), or NULL with
 * IMAGE_NOT_FOUND when it is not stored. With touch, lastUsed is set.
 * With lock_fd, *lock_fd gets an fd (the caller's) holding a shared flock
 * on the record: while it is open, oci_remove of ref (by any process
 * sharing images_dir) is refused. */
json_t *oci_record(const char *images_dir, const struct imgref *ref, int touch, int *lock_fd,
		   struct sbx_err *e);

/* Every record (a new array of objects {ref, digest, size, lastUsed}). */
json_t *oci_list(const char *images_dir);

/* Forget ref's record (CONFLICT while a sandbox holds its lock), then
 * remove the layers no record names. */
int oci_remove(const char *images_dir, const struct imgref *ref, struct sbx_err *e);

/* Remove least recently used images (record mtime) not in use and not
 * keep_record's until the layers take at most budget bytes on disk; the
 * number removed. A pull ends with it when budget_bytes is set. */
int oci_gc(const char *images_dir, int64_t budget, const char *keep_record);

/* Remove what a pull killed half-way left in tmp/ (older than
 * older_than_s: a pull of another agent sharing images_dir may be busy). */
void oci_clean_tmp(const char *images_dir, int64_t older_than_s);

/* Unpack the tar (gzip, zstd or plain) at fd into the new directory dir
 * under the extraction rules (SECURITY.md): no absolute or ".." names, no
 * entry through a symlink, hard links only to earlier entries, no device
 * nodes; ids shifted by owner. Exported for the unit tests. */
int oci_unpack(int fd, const char *dir, uid_t owner, struct sbx_err *e);

/* An image's User ("uid", "uid:gid", "name", "name:group", mixes) into ids:
 * names are looked up in passwd / group (their text, either may be NULL);
 * a user alone takes its passwd entry's group (none: 0). "" is root.
 * home (home_cap bytes, may be 0) gets the entry's home directory, "/" for
 * a user without one, "" for root without one or no User. 0, or -1 with
 * IMAGE_USER_UNKNOWN. */
int oci_user_resolve(const char *passwd, const char *group, const char *user, uint32_t *uid,
		     uint32_t *gid, char *home, size_t home_cap, struct sbx_err *e);

/* The same against the image's own etc/passwd and etc/group: those of the
 * topmost of layers (':'-joined digests under images_dir/layers, top
 * first) that has them. */
int oci_image_user(const char *images_dir, const char *layers, const char *user, uint32_t *uid,
		   uint32_t *gid, char *home, size_t home_cap, struct sbx_err *e);

/* The host's platform in OCI terms ("amd64", "arm64", ...). */
const char *oci_host_arch(void);

#endif
