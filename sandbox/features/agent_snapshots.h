/*
 * agent_snapshots.h — the data routes of snapshots (docs/API.md
 * "Snapshots"), served by the agent that runs the sandbox:
 *   POST /v1/sandboxes/{id}/snapshots  {paths?, name?, exclude?} -> 201 record
 *   POST /v1/sandboxes/{id}/restore    {snapshot, targetDir?}    -> 200
 *   PUT  /v1/sandboxes/{id}/archive?paths=&name=  (an archive)    -> 201 record
 *   GET  /v1/sandboxes/{id}/archive?snapshot=sid                 -> the archive
 * The records are read and deleted by sbx-api (fcgi/api_snapshots.c).
 *
 * The archive work runs in a helper that has joined the sandbox
 * (files_worker.h, snap_archive.h); the agent opens the store's file and
 * hands the helper its fd, so the helper never sees a host path. A
 * snapshot's record is written to Redis (RSCRIPT_SNAPSHOT_ADD, which
 * holds the tenant's byte quota) only after its archive is complete and
 * committed in the store: an interrupted snapshot leaves neither.
 */
#ifndef SBX_AGENT_SNAPSHOTS_H
#define SBX_AGENT_SNAPSHOTS_H

#include "call.h"

/* agent_restore_on_start (module.h): a start's restoreFrom snapshot. */
int agent_snap_restore_on_start(struct httpd_req *r, struct agent_sb *sb, const char *sid,
				struct sbx_err *e);

extern const struct jsonv_field agent_snap_create_fields[];
extern const struct jsonv_field agent_snap_restore_fields[];

int agent_snap_create(struct agent_call *c, struct sbx_err *e);
int agent_snap_restore(struct agent_call *c, struct sbx_err *e);
int agent_snap_import(struct agent_call *c, struct sbx_err *e);
int agent_snap_export(struct agent_call *c, struct sbx_err *e);
/* The compat view's backups (agent_compat.c): {dir, archivePath,
 * exclude?}: the archive of dir written to the sandbox's file archivePath
 * (-> {size, digest, entries, bytes, archivePath}), or the archive of that
 * file restored into dir (-> {size, digest, entries, bytes}), by the same
 * rules as snapshots (snap_archive.h). */
extern const struct jsonv_field agent_snap_file_fields[];
int agent_snap_to_file(struct agent_call *c, struct sbx_err *e);
int agent_snap_from_file(struct agent_call *c, struct sbx_err *e);

/* agent_persist_before_stop (module.h): save sb's persist paths. With
 * persist.intervalS, nothing is written when the tree is as the last
 * background save left it (its digest, snap_tree_digest): that save
 * stays the restoreFrom and its id is sid. */
int agent_snap_persist(struct agent *a, struct agent_sb *sb, char sid[24], struct sbx_err *e);

/* agent_persist_init (module.h): the timer of the background saves. A
 * container whose persist has intervalS is saved every intervalS seconds
 * (looked at every 2 s) while it runs: its helper (child_persist) first
 * takes the digest of the tree's metadata and writes nothing when it is
 * the last save's; else a full archive, committed off the loop (bgwork.h)
 * and recorded as the sandbox's restoreFrom by the persist script, which
 * drops the save before it. */
int agent_snap_init(struct agent *a, struct sbx_err *e);
/* agent_persist_release (module.h): the timer goes. */
void agent_snap_release(struct agent *a);
extern const struct agent_module agent_snap_module;

#endif
