/*
 * initproto.h — the protocol between sbx-agent and sbx-init (PID 1 of a
 * sandbox), over a SOCK_SEQPACKET socketpair: one message per packet.
 *
 * Every message starts with struct initproto_hdr (native byte order: both
 * ends run on the same host). Agent -> init: SPAWN (with exactly 3 fds by
 * SCM_RIGHTS: stdin, stdout, stderr; a terminal as stdin becomes the
 * process's controlling terminal), SIGNAL and AHEAD (a command is likely
 * soon: have a keeper forked and waiting for it). Init -> agent: STARTED,
 * FAILED (the process never ran), EXITED (wait status of the process) and
 * GONE (no process of its tree is left; always after EXITED or FAILED).
 *
 * The tree of a spawned process is everything it ever started, also what
 * called setsid() or was orphaned: init runs each process under a keeper
 * of its own (a PR_SET_CHILD_SUBREAPER), so the tree is the keeper's
 * descendants, and lives on after the process itself exits.
 *
 * SPAWN payload: u32 argc, u32 envc, then argc+envc+1 NUL-terminated
 * strings packed back to back: cwd, argv[0..argc-1], env[0..envc-1].
 * SPAWN_AS is a SPAWN whose u32 argc, u32 envc are followed by u32 uid,
 * u32 gid: init drops to them (no supplementary groups) just before exec;
 * a plain SPAWN runs as init's own ids (root of the sandbox).
 *
 * This file is compiled into both the agent and the static init: libc only,
 * no allocation except in initproto_decode_spawn().
 */
#ifndef SBX_INITPROTO_H
#define SBX_INITPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define INITPROTO_FD      3            /* init's end of the socket */
#define INITPROTO_MAX     (128 * 1024) /* largest message */
#define INITPROTO_MAX_ARGS 4096        /* argc + envc */

enum initproto_type {
	INITPROTO_SPAWN = 1,
	INITPROTO_SIGNAL = 2,
	INITPROTO_STARTED = 3,
	INITPROTO_FAILED = 4,
	INITPROTO_EXITED = 5,
	INITPROTO_GONE = 6,
	INITPROTO_SPAWN_AS = 7,
	INITPROTO_AHEAD = 8,
};

struct initproto_hdr {
	uint32_t type;
	uint32_t len;       /* whole message, header included */
	int64_t handle;
};

/* A decoded message. For SPAWN, argv/env are a heap array (free(argv) frees
 * both) of pointers into the message buffer, which must outlive them. */
struct initproto_msg {
	uint32_t type;
	int64_t handle;
	int32_t pid;        /* STARTED, EXITED; GONE: the keeper's pid */
	int32_t value;      /* FAILED: errno; EXITED: wait status; SIGNAL: signal;
			     * GONE: the keeper's wait status */
	int32_t tree;       /* SIGNAL: 1 = every process of the tree (its group and
			     * every descendant, while any is left), 0 = the
			     * process only (while it runs) */
	int64_t uid, gid;   /* SPAWN: -1 = as init (root); SPAWN_AS: 0..UINT32_MAX-1 */
	const char *cwd;    /* SPAWN */
	char **argv;        /* SPAWN, NULL-terminated */
	char **env;         /* SPAWN, NULL-terminated */
};

/* Encode a SPAWN into buf (cap bytes). Returns the length, or -1 with errno
 * E2BIG (too large or too many strings) / EINVAL (no argv[0]). */
ssize_t initproto_encode_spawn(void *buf, size_t cap, int64_t handle, const char *cwd,
			       char *const *argv, char *const *env);

/* The same as a SPAWN_AS with uid and gid when uid >= 0 (gid >= 0 then;
 * both below UINT32_MAX, else EINVAL); uid < 0 encodes a plain SPAWN. */
ssize_t initproto_encode_spawn_as(void *buf, size_t cap, int64_t handle, int64_t uid, int64_t gid,
				  const char *cwd, char *const *argv, char *const *env);

/* Encode a fixed-size message (SIGNAL, STARTED, FAILED, EXITED, GONE, AHEAD):
 * a and b are (sig, tree), (pid, 0), (errno, 0), (pid, status) or (0, 0), and
 * the handle of an AHEAD is 0. Returns the length
 * or -1 (EINVAL for an unknown type, E2BIG when cap is too small). */
ssize_t initproto_encode(void *buf, size_t cap, uint32_t type, int64_t handle, int32_t a, int32_t b);

/* Decode and validate one message of len bytes. 0, or -1 with errno EBADMSG
 * (truncated, oversized, bad counts, missing NUL, unknown type) or ENOMEM.
 * On success with a SPAWN or SPAWN_AS (type SPAWN in m, uid/gid set), the
 * caller frees m->argv. */
int initproto_decode(const void *buf, size_t len, struct initproto_msg *m);

/* Send one message with nfds (0..3) fds attached; MSG_NOSIGNAL, flags may
 * add MSG_DONTWAIT. 0, or -1 with errno. */
int initproto_send(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags);

/* Receive one message into buf (cap >= INITPROTO_MAX); received fds go to
 * fds[] (up to 3, *nfds set, each O_CLOEXEC; extra ones are closed).
 * Returns the length, 0 at end of stream, -1 with errno (EMSGSIZE when the
 * message or its control data was truncated; its fds are closed). */
ssize_t initproto_recv(int sock, void *buf, size_t cap, int *fds, int *nfds, int flags);

#endif
