/*
 * imgref.h — OCI image references: "[registry/]repo[:tag][@sha256:hex]".
 *
 * The grammar follows the distribution spec, kept strict: a registry is the
 * first component when it has a '.' or a ':' or is "localhost"; a repo is
 * '/'-separated components of [a-z0-9] runs joined by '.', '_', "__" or
 * '-'; a tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; a digest is sha256 with
 * 64 lowercase hex digits. Without a registry the default one applies
 * ([images] default_registry); on docker.io a one-component repo gets
 * "library/" in front when [images] library_prefix is on. Without a tag
 * and a digest the tag is "latest".
 *
 * Pure functions: no I/O. One validator for both tiers (spec_image).
 */
#ifndef SBX_IMGREF_H
#define SBX_IMGREF_H

#include "err.h"

#include <stddef.h>

#define IMGREF_MAX 512        /* a whole reference */
#define IMGREF_HOST_MAX 256
#define IMGREF_REPO_MAX 256
#define IMGREF_TAG_MAX 128
#define IMGREF_DIGEST_LEN 71  /* "sha256:" + 64 */

struct imgref {
	char registry[IMGREF_HOST_MAX]; /* as written ("docker.io", "localhost:5000") */
	char host[IMGREF_HOST_MAX];     /* whom to ask ("registry-1.docker.io") */
	char repo[IMGREF_REPO_MAX];
	char tag[IMGREF_TAG_MAX + 1];   /* "" when only a digest was given */
	char digest[IMGREF_DIGEST_LEN + 1]; /* "" when none */
	int loopback;                   /* localhost, 127.0.0.0/8, [::1]: plain HTTP */
};

/* Parse s into out with the default registry dflt ("docker.io") and the
 * library/ rule (library_prefix 1). 0, or -1 with e = VALIDATION. */
int imgref_parse(const char *s, const char *dflt, int library_prefix, struct imgref *out,
		 struct sbx_err *e);

/* The canonical form "registry/repo[:tag][@digest]" into buf. 0, or -1
 * when it does not fit. */
int imgref_format(const struct imgref *r, char *buf, size_t size);

/* 1 when s is "sha256:" and 64 lowercase hex digits. */
int imgref_valid_digest(const char *s);

#endif
