/*
 * agent_images.h — registry images on this node: the pulls (one thread
 * each, single flight per reference: every create of an image being pulled
 * waits on the same pull), the image a create runs, and the agent's image
 * routes:
 *   POST   /agent/v1/images/pull {ref}  -> 200 {ref, digest, size, lastUsed}
 *   GET    /agent/v1/images             -> 200 {images:[...]}
 *   DELETE /agent/v1/images?ref=R       -> 204 (409 while a sandbox runs it)
 * The store itself is sandbox/runtime/oci.c.
 */
#ifndef SBX_AGENT_IMAGES_H
#define SBX_AGENT_IMAGES_H

#include "agent.h"
#include "call.h"
#include "imgref.h"

/* What a create needs of a pulled image. */
struct agent_image {
	char canon[IMGREF_MAX];  /* canonical reference */
	char layers[8192];       /* ':'-joined layer dirs, top first (rt_spec.layers) */
	char workdir[256];       /* "" = none */
	uint32_t uid, gid;       /* its User, resolved in its own /etc/passwd, group (0: root) */
	char home[256];          /* its User's home ("" = the default HOME) */
	char **env;              /* the image's Env as "K=V" (agent_env_free), or NULL */
	int lock_fd;             /* shared flock on its record (oci_record), or -1 */
};

int agent_images_init(struct agent *a, struct sbx_err *e);
void agent_images_release(struct agent *a);

/* name is a registry reference (it has a registry, a tag or a digest; a
 * bare name is a local image)? 1 with ref filled, 0 no, -1 with e
 * (VALIDATION). */
int agent_image_is_remote(struct agent *a, const char *name, struct imgref *ref, struct sbx_err *e);

/* The pulled image of ref into out (lastUsed touched, its record locked
 * until agent_image_release or until the lock_fd is stolen); -1 with
 * IMAGE_NOT_FOUND when this node does not hold it, IMAGE_USER_UNKNOWN when
 * its User names no entry of its /etc/passwd or /etc/group. */
int agent_image_get(struct agent *a, const struct imgref *ref, struct agent_image *out,
		    struct sbx_err *e);
void agent_image_release(struct agent_image *img);

/* Pull ref (or join its pull under way); done runs on the loop with e
 * NULL on success. 0, or -1 with e when no pull could start. */
typedef void (*agent_pull_done_fn)(void *arg, const struct sbx_err *e);
int agent_image_pull(struct agent *a, const struct imgref *ref, agent_pull_done_fn done, void *arg,
		     struct sbx_err *e);

/* The create c waits for ref's pull, then runs again (agent_sandbox_put):
 * the request is deferred. 0, or -1 with e (nothing answered). */
int agent_image_defer_put(struct agent_call *c, const struct imgref *ref,
			  int (*put)(struct agent_call *, struct sbx_err *), struct sbx_err *e);

int agent_images_pull_route(struct agent_call *c, struct sbx_err *e);
int agent_images_list_route(struct agent_call *c, struct sbx_err *e);
int agent_images_delete_route(struct agent_call *c, struct sbx_err *e);
extern const struct jsonv_field agent_images_pull_fields[];

#endif
