/*
 * module.h — the agent's modules, registered as nginx registers its own:
 * a module is one static struct agent_module, listed once in
 * agent_modules[] (sandbox/features/modules.c). The infrastructure calls
 * the modules through this table and never names a feature.
 *
 * A module that keeps state per container gets one slot in every
 * struct agent_sb (agent_sb_slot); its container_gone hook releases it.
 */
#ifndef SBX_MODULE_H
#define SBX_MODULE_H

struct agent;
struct agent_sb;
struct httpd_req;
struct sbx_err;

#define AGENT_MODULES_MAX 16

struct agent_module {
	const char *name;
	/* The container of sb is gone (contract: agent_container_gone in
	 * agent.h). Hooks run in the order of agent_modules[]. NULL: none. */
	void (*container_gone)(struct agent *a, struct agent_sb *sb);
};

/* Every module, NULL-terminated, at most AGENT_MODULES_MAX. */
extern const struct agent_module *const agent_modules[];

/* The container of sb was just started for the control request r, whose
 * body names snapshot sid to restore into it (restoreFrom): put it in and
 * answer r (201 with the sandbox, agent_sb_json) and return 0, or return
 * -1 with e without answering. Set with agent_modules[] (the snapshots
 * feature); NULL: this agent cannot. */
typedef int (*agent_restore_fn)(struct httpd_req *r, struct agent_sb *sb, const char *sid,
				struct sbx_err *e);
extern const agent_restore_fn agent_restore_on_start;

/* The container of sb (whose persist paths are set) is about to stop for
 * a sleep or a restart: save the paths as a snapshot, recorded as the
 * sandbox's restoreFrom, and put its id into sid (24 bytes). Waits for
 * the save. 0, or -1 with e (the stop goes on: the last save stays).
 * Set with agent_modules[]; NULL: none. */
typedef int (*agent_persist_fn)(struct agent *a, struct agent_sb *sb, char sid[24],
				struct sbx_err *e);
extern const agent_persist_fn agent_persist_before_stop;

/* Once, when the agent has its loop and registry: start the background
 * saves of the sandboxes whose persist has an intervalS (their timer on
 * a->base). 0, or -1 with e (the agent does not start). Set with
 * agent_modules[]; NULL: none. */
typedef int (*agent_init_fn)(struct agent *a, struct sbx_err *e);
extern const agent_init_fn agent_persist_init;
/* Its end, once the loop has stopped. NULL: none. */
typedef void (*agent_release_fn)(struct agent *a);
extern const agent_release_fn agent_persist_release;

/* agent_persist_before_stop when sb persists and runs, with the outcome
 * logged; sid as there ("" when nothing was saved). */
void agent_persist_save(struct agent *a, struct agent_sb *sb, char sid[24]);

/* The per-container state slot of module m in sb (NULL until the module
 * stores something). m must be listed in agent_modules[]. */
void **agent_sb_slot(struct agent_sb *sb, const struct agent_module *m);

#endif
