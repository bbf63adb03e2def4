/*
 * snap_archive.h — snapshot archives: a pax tar stream compressed with
 * zstd (libarchive), made from and restored into a sandbox's tree.
 *
 * These functions run in a helper that has joined the sandbox
 * (files_worker.h), on the sandbox's root fd; they never follow a symlink
 * of the tree. Kept: owners (numeric), modes, mtimes, symlinks, hard
 * links, empty directories, UTF-8 names and the holes of sparse files.
 * Skipped when made: FIFOs, sockets and device nodes, and mounts of other
 * filesystems than the sandbox's own (files_fs_allowed).
 *
 * Extraction rules (docs/SECURITY.md "Snapshots"): every entry's name is
 * relative, has no "." / ".." / empty component and lies under one of the
 * snapshot's paths; parents are opened with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS) from a fresh staging directory, so no entry is
 * written through a symlink, absolute or not; a hard link must name an
 * earlier entry of the same path; device nodes, FIFOs and sockets are
 * refused; setuid, setgid bits are stripped; the data written is counted
 * against max_bytes. Any violation, a corrupt or a truncated archive
 * refuses the whole restore (SBX_E_INVALID_ARCHIVE) and leaves the old
 * trees as they were: the staging trees are swapped in (renameat2
 * RENAME_EXCHANGE) only once every entry is out.
 */
#ifndef SBX_SNAP_ARCHIVE_H
#define SBX_SNAP_ARCHIVE_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SNAP_PATHS_MAX 16

struct snap_sum {
	uint64_t size;             /* bytes of the compressed archive */
	uint64_t entries;
	uint64_t bytes;            /* file data bytes in it */
	char sha256[65];           /* of the compressed archive, hex */
};

/* The tree of each path (absolute, normalised, a directory) under root,
 * as one archive written to out; entries named by their path without the
 * leading '/'. exclude: names (a path's last component, e.g. "node_modules")
 * not taken, anywhere. 0 with *sum, or -1 with e. */
int snap_archive_write(int root, const char *const *paths, size_t npaths,
		       const char *const *exclude, size_t nexclude, int out, uint64_t max_entries,
		       struct snap_sum *sum, struct sbx_err *e);

/* A digest of the trees of paths under root as snap_archive_write would
 * take them (the same exclude and bounds), from their entries' names and
 * metadata only (inode, mode, owner, size, links, mtime and ctime; no
 * file is read): equal digests mean nothing changed that an archive would
 * hold. 64 hex digits into out; 0, or -1 with e. */
int snap_tree_digest(int root, const char *const *paths, size_t npaths,
		     const char *const *exclude, size_t nexclude, uint64_t max_entries,
		     char out[65], struct sbx_err *e);

/* The source of an archive: up to max bytes into buf; 0 at its end, -1
 * with errno. */
typedef ssize_t (*snap_read_fn)(void *arg, void *buf, size_t max);

/* Copy an archive from rd to out while reading it through: it must be a
 * well-formed zstd tar of at most max_size bytes (else QUOTA_EXCEEDED)
 * and max_entries entries. 0 with *sum, or -1 with e
 * (SBX_E_INVALID_ARCHIVE for a bad one). */
int snap_archive_copy(snap_read_fn rd, void *rarg, int out, uint64_t max_size,
		      uint64_t max_entries, struct snap_sum *sum, struct sbx_err *e);

/* Restore the archive of in into root: the tree of each of paths is
 * replaced by the archive's; with target (npaths must be 1), the tree of
 * paths[0] replaces target instead. 0 with *sum (entries, bytes), or -1
 * with e and nothing changed. */
int snap_archive_extract(int root, int in, const char *const *paths, size_t npaths,
			 const char *target, uint64_t max_bytes, uint64_t max_entries,
			 struct snap_sum *sum, struct sbx_err *e);

/* The file at abs path p in root, opened inside it (openat2
 * RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): for write, created or
 * truncated (missing parents made, 0755; a final symlink is refused) on
 * the sandbox's own storage; for read, a regular file. The fd, or -1 with
 * e. */
int snap_open_file(int root, const char *p, int write, struct sbx_err *e);

/* Is name (an archive entry's) safe, and under which of paths (their
 * relative forms, "workspace")? The index, with *sub the rest after
 * "<path>/" ("" for the path itself), or -1 with e. Pure. */
int snap_entry_place(const char *name, const char *const *rels, size_t nrels, const char **sub,
		     struct sbx_err *e);

#endif
