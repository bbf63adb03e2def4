/*
 * fspath.h — the pure rules of the Files API: how a client's path becomes
 * a path inside a sandbox, Range headers, and content types by name.
 *
 * A client path is absolute inside the sandbox ("/etc/hosts") or relative
 * to /workspace ("src/a.py"). It is normalised to a relative path under the
 * sandbox root ("etc/hosts", "workspace/src/a.py"; "." for the root) that
 * the agent resolves with openat2(RESOLVE_IN_ROOT) from the root fd. Empty
 * and "." components are dropped; ".." is refused (it could never leave the
 * root, but a path that names one thing is easier to reason about); NUL,
 * invalid UTF-8, more than FSPATH_MAX bytes or a component of more than
 * FSPATH_NAME_MAX bytes are refused. Every refusal is VALIDATION_FAILED.
 */
#ifndef SBX_FSPATH_H
#define SBX_FSPATH_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>

#define FSPATH_MAX 4096
#define FSPATH_NAME_MAX 255
#define FSPATH_WORKSPACE "workspace"

struct fspath {
	char rel[FSPATH_MAX + 16];   /* "workspace/a/b", "." for the root */
	char abs[FSPATH_MAX + 16];   /* "/workspace/a/b", "/" for the root */
	size_t parent_len;           /* rel[0..parent_len) is the parent ("" = root) */
	const char *name;            /* last component inside rel; "" for the root */
};

/* Percent-decode the raw URL tail raw[0..n) into out (NUL-terminated).
 * Refuses a bad escape, %00 / NUL, or a result over FSPATH_MAX bytes. 0 or -1. */
int fspath_decode(const char *raw, size_t n, char *out, size_t outsz, struct sbx_err *e);

/* Normalise the client path p (n bytes) into *fp. 0 or -1 (400). */
int fspath_parse(const char *p, size_t n, struct fspath *fp, struct sbx_err *e);

/* Both steps for a raw URL tail. 0 or -1 (400). */
int fspath_from_url(const char *raw, struct fspath *fp, struct sbx_err *e);

/* A Range header against a file of size bytes. Returns 0 = no range (or
 * one we ignore, like a multi-range: answer the whole file), 1 = one
 * satisfiable range [*first, *last], -2 = unsatisfiable (416), -1 = a
 * malformed header (ignored like none, RFC 9110 says so; kept separate for
 * tests). */
int fspath_range(const char *hdr, uint64_t size, uint64_t *first, uint64_t *last);

/* The content type for a file name (a small static table), else
 * "application/octet-stream". Static string. */
const char *fspath_mime(const char *name);

/* Parse an octal mode "0644" / "644" (permission bits only, 0..0777). 0 or -1. */
int fspath_mode(const char *s, unsigned *mode);

#endif
