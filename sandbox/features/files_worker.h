/*
 * files_worker.h — the helper processes of the Files API.
 *
 * Every file call runs in a helper: a child of the agent that has joined
 * the sandbox (rt_helper_enter: its cgroups, mount and user namespaces,
 * its root's credentials and capabilities), so the kernel applies the
 * sandbox's own permissions, mount-point rules and memory accounting, and
 * the agent's event loop only moves bounded records.
 *
 * Agent and helper speak over a SOCK_SEQPACKET pair, one record per
 * message, the first byte its type:
 *   'R' struct fw_result       the answer's head: a status, or an error
 *   'F' struct fw_result + fd  an opened file (SCM_RIGHTS), size in .size
 *   'D' bytes                  body bytes (of the answer, or of an upload)
 *   'E'                        the end: everything before it is complete
 * A helper that dies before its 'E' has failed; the agent never trusts a
 * partial answer.
 *
 * Bounds (docs/API.md "Files"): at most FW_NODE_MAX helpers per node and
 * FW_SANDBOX_MAX file requests in progress per sandbox (else 503
 * NO_CAPACITY); each has a deadline (SIGALRM kills it) and an idle bound
 * (a record that cannot move for FW_IDLE_TIMEOUT_S ends it); each has at
 * most one socket buffer (FW_SOCKBUF) in flight each way, and an answer
 * the agent must hold whole (a JSON answer for a filter) at most
 * FW_COLLECT_MAX bytes, FW_COLLECT_NODE_MAX over the node.
 */
#ifndef SBX_FILES_WORKER_H
#define SBX_FILES_WORKER_H

#include "agent.h"
#include "err.h"
#include "httpd.h"
#include "module.h"

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#define FW_NODE_MAX 64                         /* helpers alive */
#define FW_SANDBOX_MAX 16                      /* requests in progress */
#define FW_REC_MAX (16 * 1024)                 /* payload bytes of one record */
#define FW_SOCKBUF (128 * 1024)                /* SO_SNDBUF of each end */
#define FW_COLLECT_MAX (64 * 1024 * 1024)
#define FW_VIEW_OUT_MAX (2 * 1024 * 1024)    /* FW_EVENTS with a view: its frames not yet sent */
#define FW_COLLECT_NODE_MAX (128 * 1024 * 1024)
#define FW_META_TIMEOUT_S 60                   /* list, delete, stat, move, mkdir, open */
#define FW_TRANSFER_TIMEOUT_S 3600             /* an encoded read, an upload */
#define FW_IDLE_TIMEOUT_S 120                  /* a transfer that makes no progress */
#define FW_EVENTS_SANDBOX_MAX 8                /* event streams (watches) per sandbox */
#define FW_EVENTS_NODE_MAX 256                 /* event streams on the node */

struct fw_result {
	int32_t status;            /* HTTP status of a success; 0 for an error */
	int32_t code;              /* enum sbx_ecode of an error */
	uint64_t size;             /* 'F': the size of the file */
	char msg[256];
};

/* What a helper gets: the sandbox's root (O_PATH, for openat2), its end
 * of the channel, and the host's /proc (O_PATH) for reopening its own fds. */
struct fw_env {
	int root;
	int chan;
	int proc;
	int xfd;                   /* fw_spec.xfd's copy, or -1 */
};

/* The work of a helper; runs in the child, its return value is the exit
 * status. arg is the parent's (copied by the fork). */
typedef int (*fw_child_fn)(void *arg, const struct fw_env *env);

/* --- in the helper --- */
int fw_send(int chan, char type, const void *data, size_t len);
int fw_send_err(int chan, const struct sbx_err *e);
/* 'R' with a success status: the head of an answer streamed after it. */
int fw_send_head(int chan, int status);
/* 'R' with status, the JSON text of body (stolen) as 'D' records, 'E'. */
int fw_send_json(int chan, int status, json_t *body);
int fw_send_fd(int chan, int fd, uint64_t size);
/* One record into buf (max bytes): its length (type included), 0 at the
 * end of the channel, -1 with errno. */
ssize_t fw_recv(int chan, char *buf, size_t max);

/* --- in the agent --- */
struct fw_call;

enum fw_mode {
	FW_COLLECT,   /* answer r with the helper's JSON (or error) */
	FW_STREAM,    /* answer r with a stream of the helper's 'D' records */
	FW_FD,        /* hand the helper's opened file to on_fd */
	FW_UPLOAD,    /* feed r's body to the helper, then as FW_COLLECT */
};

/* FW_FD: the file the helper opened (fd stolen); answer r. */
typedef void (*fw_fd_fn)(struct httpd_req *r, struct agent_sb *sb, int fd, uint64_t size,
			 void *arg);
/* FW_COLLECT / FW_UPLOAD with on_json: the helper's success answer (body
 * stolen, NULL for none) goes here instead of to r; answer r. */
typedef void (*fw_json_fn)(struct httpd_req *r, int status, json_t *body, void *ctx);

/* FW_STREAM with FW_EVENTS: a text/event-stream that lasts until the
 * client leaves (a watch). It is counted apart from file calls (at most
 * FW_EVENTS_SANDBOX_MAX per sandbox, else 429 QUOTA_EXCEEDED, and
 * FW_EVENTS_NODE_MAX per node), has no deadline (timeout_s 0), and a
 * helper that ends without its 'E' (the sandbox stopped, the helper was
 * killed) ends the stream with an `error` event {code, message} rather
 * than a cut. */
#define FW_EVENTS 0x1u

struct fw_spec {
	enum fw_mode mode;
	unsigned flags;            /* FW_EVENTS */
	unsigned timeout_s;        /* 0: none */
	const char *content_type;  /* FW_STREAM */
	fw_fd_fn on_fd;            /* FW_FD */
	void *fd_arg;
	fw_child_fn fn;
	void *arg;                 /* for fn (read by the child only) */
	int xfd;                   /* > 0: an fd the child gets as env->xfd (the
				    * caller keeps and closes its own) */
	fw_json_fn on_json;
	void *ctx;                 /* the agent's, for on_json; freed with
				    * ctx_free when the call ends, answered or not,
				    * and when fw_start fails */
	void (*ctx_free)(void *ctx);
};

/* Start the helper of request r on sandbox sb; the call answers r (every
 * mode but FW_FD answers by itself) and is freed with r. Registers r's
 * close callback (the helper is killed when the client goes away) and, for
 * FW_UPLOAD, r's body sink. 0, or -1 with e filled (nothing started; the
 * caller answers). */
int fw_start(struct httpd_req *r, struct agent_sb *sb, const struct fw_spec *spec,
	     struct sbx_err *e);

/* Run the helper of spec (fn, arg, xfd, timeout_s; the mode is ignored)
 * on sb and wait for it: the agent's loop is held meanwhile, so only for
 * work the agent must finish before it goes on (a persisted workspace
 * saved before its container stops). 0 with *answer its success JSON (new
 * reference), or -1 with e. */
int fw_run(struct agent_sb *sb, const struct fw_spec *spec, json_t **answer, struct sbx_err *e);

/* fw_run in two halves, for a helper waited for off the loop (bgwork.h):
 * fw_fork starts it (on the loop); fw_wait, which touches no state of the
 * loop and may run on a worker thread, reads its answer as fw_run does
 * and reaps it (ch is spent either way). */
struct fw_child {
	pid_t pid;
	int chan;
	char key[AGENT_KEY_MAX];
};
int fw_fork(struct agent_sb *sb, const struct fw_spec *spec, struct fw_child *ch,
	    struct sbx_err *e);
int fw_wait(struct fw_child *ch, json_t **answer, struct sbx_err *e);

extern const struct agent_module fw_module;

/* The answer of a collected file call (FW_COLLECT: a view's request),
 * offered typed to the view (agent_call_offer, type AGENT_FILES_RESULT)
 * before it is sent as JSON: the helper's status and its answer object
 * (NULL for an empty one), as the helper wrote it over its channel. */
#define AGENT_FILES_RESULT "files"
struct agent_files_result {
	int status;
	const json_t *body;
};

/* An event of a FW_EVENTS stream (a file watch: agent_watch.h) whose
 * request has a view (agent_call_viewed), offered to it typed
 * (agent_call_offer, type AGENT_WATCH_EVENT): the helper's frame as its
 * name (ready, create, modify, delete, move, overflow, error) and data
 * object. A view that takes it appends its own frames to out, the
 * stream's event buffer (bounded: FW_VIEW_OUT_MAX); one that declines it
 * gets the frame as the helper wrote it. Keep-alive comments pass through
 * untouched. */
#define AGENT_WATCH_EVENT "watch-event"
struct buf;
struct agent_watch_event {
	const char *name;
	const json_t *data;
	struct buf *out;
};

#endif
