/*
 * image.h — root filesystem images of sandboxes.
 *
 * "default" is assembled by the agent under <images_dir>/default/<owner>-<hash>
 * (a skeleton of directories, usr symlinks and a generated /etc; the host's
 * /usr is bound read-only into each sandbox). Any other image is a directory
 * <images_dir>/NAME with its own usr/, used whole as the read-only lower
 * layer (deploy/images/build-debian makes one).
 */
#ifndef SBX_IMAGE_H
#define SBX_IMAGE_H

#include "err.h"

#include <stddef.h>
#include <sys/types.h>

/* Build the default image for files owned by owner (the sandbox root's host
 * uid) unless an identical one exists; its path goes to out. 0 or -1. */
int image_prepare_default(const char *images_dir, uid_t owner, const char *dns, char *out,
			  size_t size, struct sbx_err *e);

/* Resolve a non-default image to its directory; SBX_E_VALIDATION "unknown
 * image" when it is not a directory with usr/. 0 or -1. */
int image_resolve(const char *images_dir, const char *name, char *out, size_t size, struct sbx_err *e);

#endif
