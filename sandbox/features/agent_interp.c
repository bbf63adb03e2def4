/*
 * agent_interp.c — code contexts (the code interpreter).
 *
 *   POST   /v1/sandboxes/{id}/contexts          {language, cwd?, env?, id?} -> 201 context
 *   GET    /v1/sandboxes/{id}/contexts          -> {contexts:[context…]}
 *   GET    /v1/sandboxes/{id}/contexts/{ctx}    -> context
 *   DELETE /v1/sandboxes/{id}/contexts/{ctx}    -> 204 (its interpreter is killed)
 *   POST   /v1/sandboxes/{id}/contexts/{ctx}/run {code, timeoutMs?} -> run answer | SSE
 *   POST   /v1/sandboxes/{id}/run               {code, language?, timeoutMs?}
 *                                               (in the context "default-<language>")
 *
 * context: {id, language, cwd, createdAt, executionCount, busy, running}.
 * A context is one long-lived driver process in the sandbox, started
 * through sbx-init like a session's shell: `python3 -c <driver.py>` or
 * `node -e <driver.js> [typescript]`, the driver's text read from
 * agent.interp_dir when it starts (so an image only needs the interpreter).
 * The agent writes one request a line to its stdin, {"code": …}, and reads
 * one JSON event a line from its stdout (the protocol is in driver.py):
 * stdout, stderr, result, error, then end. Its stderr (the driver's own
 * failures and notes: a missing IPython) goes to the run as stderr; stderr
 * written while no run is current is held (INTERP_HELD_MAX) for the next.
 *
 * Runs of a context go one at a time, in arrival order (at most
 * INTERP_MAX_QUEUE waiting). The answer is JSON when the run ends —
 * {stdout, stderr, results, error, executionCount, durationMs, timedOut,
 * restarted, truncated}, stdout and stderr kept up to
 * agent.max_run_output_bytes each and results up to INTERP_RESULTS_MAX —
 * or, with Accept: text/event-stream, the driver's events as they come
 * (`event: <type>` with the driver's line as data), reading the driver
 * only while the client keeps up, then `end`.
 *
 * timeoutMs (default INTERP_TIMEOUT_DEFAULT_MS): SIGINT to the driver,
 * which interrupts the code (KeyboardInterrupt) and keeps its state; a
 * driver that has not ended the run INTERP_KILL_GRACE_MS later is killed.
 * A driver that dies (os._exit, a kill, out of memory) ends its run with
 * an InterpreterDied error; the next run starts a fresh one and says
 * restarted: true. A client that goes away interrupts its run the same way
 * (a waiting run is dropped). Contexts live until deleted or until the
 * container stops; a run counts as activity of the sandbox.
 */
#include "agent_interp.h"
#include "agent_exec.h"
#include "agent_lifecycle.h"
#include "agent_sse.h"
#include "buf.h"
#include "child_io.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INTERP_MAX_PER_SANDBOX 16
#define INTERP_MAX_QUEUE 64
#define INTERP_LINE_MAX (16 * 1024 * 1024)   /* one driver event (a PNG in base64) */
#define INTERP_RESULTS_MAX (16 * 1024 * 1024) /* the results of a JSON answer */
#define INTERP_SSE_SOFT_MAX (64 * 1024)      /* stop reading the driver above this */
#define INTERP_SSE_HARD_MAX (INTERP_LINE_MAX + 64 * 1024)
#define INTERP_DRIVER_MAX (256 * 1024)
#define INTERP_TIMEOUT_DEFAULT_MS 60000
#define INTERP_TIMEOUT_MAX_MS 3600000
#define INTERP_KILL_GRACE_MS 2000
#define INTERP_KEEPALIVE_MS 15000
#define INTERP_DRAIN_MAX (1024 * 1024)
#define INTERP_ID_MAX 65
#define INTERP_HELD_MAX 4096                 /* stderr between runs, for the next one */

enum interp_lang { LANG_PYTHON, LANG_JAVASCRIPT, LANG_TYPESCRIPT };

static const struct {
	const char *name;
	const char *driver;       /* in agent.interp_dir */
	const char *binary;
	const char *flag;         /* the binary's "run this text" option */
} langs[] = {
	[LANG_PYTHON] = { "python", "driver.py", "/usr/bin/python3", "-c" },
	[LANG_JAVASCRIPT] = { "javascript", "driver.js", "/usr/bin/node", "-e" },
	[LANG_TYPESCRIPT] = { "typescript", "driver.js", "/usr/bin/node", "-e" },
};

struct ictx;

struct irun {
	struct irun *next;
	struct ictx *ctx;
	struct agent *a;
	struct httpd_req *r;          /* NULL once the request is over */
	int stream;
	char *req;                    /* the request line for the driver */
	size_t req_len;
	int64_t timeout_ms;
	int64_t t0;
	int finished;
	int timed_out, restarted, truncated;
	int lease_lost;               /* the answer is the NODE_UNAVAILABLE error */
	int64_t count;
	struct buf out[2];            /* JSON: stdout, stderr */
	json_t *results;              /* JSON: the result events' bundles */
	size_t results_bytes;
	json_t *error;                /* JSON: the error, or NULL */
	struct buf sse;               /* stream: bytes the client has not taken */
	size_t sse_off;
	int sse_end;
	struct event *timeout_ev, *kill_ev, *keepalive_ev;
	struct agent_stream live;
};

struct ibox;

struct ictx {
	struct ictx *next;
	struct ibox *box;
	char id[INTERP_ID_MAX];
	enum interp_lang lang;
	char cwd[AGENT_EXEC_MAX_PATH + 16];
	json_t *env;                  /* owned overlay of the sandbox env, or NULL */
	int64_t created_at;
	int64_t handle;               /* > 0 while the driver runs */
	struct child_io *io;
	struct buf line;              /* the driver's current stdout line */
	struct buf held;              /* stderr written while no run was current */
	int skipping;                 /* the current line is too long: dropped */
	int paused;
	int died;                     /* the last driver died: the next run says restarted */
	int removed;                  /* deleted: freed once the driver is gone */
	int exiting;                  /* reading the last output of a driver that exited */
	int64_t count;                /* the driver's last execution count */
	struct irun *cur;
	struct irun *queue, **qtail;
	int nqueue;
};

struct ibox {
	struct agent *a;
	struct agent_sb *sb;
	struct ictx *list;
	int count;
};

static void ctx_next(struct ictx *x);
static void run_fail(struct irun *u, const struct sbx_err *e);

/* --- runs ------------------------------------------------------------------ */

static void free_event(struct event **ev)
{
	if (*ev) {
		event_free(*ev);
		*ev = NULL;
	}
}

static void run_free(struct irun *u)
{
	free(u->req);
	for (int i = 0; i < 2; i++)
		buf_release(&u->out[i]);
	json_decref(u->results);
	json_decref(u->error);
	buf_release(&u->sse);
	free_event(&u->timeout_ev);
	free_event(&u->kill_ev);
	free_event(&u->keepalive_ev);
	agent_sb_stream_end(u->a, &u->live);
	free(u);
}

static size_t sse_pending(const struct irun *u)
{
	return u->sse.len - u->sse_off;
}

static void ctx_pause(struct ictx *x, int on)
{
	if (x->paused == on)
		return;
	x->paused = on;
	if (x->io)
		child_io_pause(x->io, on);
}

/* Queue one event of the stream answer (json: its data, one line; data:
 * the same parsed, offered to a view first). */
static void sse_put(struct irun *u, const char *name, const char *json, const json_t *data)
{
	struct agent_interp_event ev = { name, data, &u->sse };

	if (!u->r)
		return;
	if (agent_call_offer(u->r, AGENT_INTERP_EVENT, &ev)) {
		/* framed by the view */
	} else if (agent_sse_event(&u->sse, name, json) < 0) {
		u->truncated = 1;
		log_warn("run in '%s': an event was dropped (stream buffer full)", u->live.key);
	}
	httpd_stream_wake(u->r);
	if (u->ctx && u->ctx->cur == u && sse_pending(u) >= INTERP_SSE_SOFT_MAX)
		ctx_pause(u->ctx, 1);
}

static void sse_put_obj(struct irun *u, const char *name, json_t *obj)
{
	char *text = obj ? jsonv_dump(obj) : NULL;

	if (text)
		sse_put(u, name, text, obj);
	json_decref(obj);
	free(text);
}

static ssize_t sse_read(void *arg, char *buf, size_t max)
{
	struct irun *u = arg;
	ssize_t n = agent_sse_take(&u->sse, &u->sse_off, u->sse_end, buf, max);

	if (u->ctx && u->ctx->cur == u && sse_pending(u) < INTERP_SSE_SOFT_MAX / 2)
		ctx_pause(u->ctx, 0);
	return n;
}

static json_t *text_of(const struct buf *b)
{
	struct buf fixed;
	json_t *v;

	buf_init(&fixed, b->len * 3 + 16);
	if (codec_utf8_fix(b->data ? b->data : "", b->len, &fixed) < 0) {
		buf_release(&fixed);
		return json_string("");
	}
	v = json_stringn_nocheck(fixed.data ? fixed.data : "", fixed.len);
	buf_release(&fixed);
	return v;
}

/* The run is over (its end event, or its driver died): answer it. Frees u
 * when its request is already over. */
static void run_finish(struct irun *u)
{
	int64_t dur = util_now_ms() - u->t0;
	struct agent_sb *sb;

	u->finished = 1;
	u->ctx = NULL;
	free_event(&u->timeout_ev);
	free_event(&u->kill_ev);
	free_event(&u->keepalive_ev);
	sb = agent_sb_find(u->a, u->live.key);
	if (sb)
		sb->last_active_at = util_wall_ms();
	if (!u->r) {
		run_free(u);
		return;
	}
	if (!u->lease_lost && !agent_stream_lease_held(u->a, &u->live)) {
		struct sbx_err e = { 0 };
		err_set(&e, SBX_E_NODE_UNAVAILABLE,
			"this node lost its lease while the code ran; its result does not count");
		u->lease_lost = 1;
		run_fail(u, &e);
		return;
	}
	if (u->stream) {
		sse_put_obj(u, "end",
			    json_pack("{s:s,s:I,s:I,s:b,s:b,s:b}", "type", "end", "executionCount",
				      (json_int_t)u->count, "durationMs", (json_int_t)dur, "timedOut",
				      u->timed_out, "restarted", u->restarted, "truncated",
				      u->truncated));
		u->sse_end = 1;
		httpd_stream_wake(u->r);
		return;
	}
	httpd_reply_json(u->r, 200,
			 json_pack("{s:o,s:o,s:O,s:O?,s:I,s:I,s:b,s:b,s:b}", "stdout",
				   text_of(&u->out[0]), "stderr", text_of(&u->out[1]), "results",
				   u->results, "error", u->error, "executionCount",
				   (json_int_t)u->count, "durationMs", (json_int_t)dur, "timedOut",
				   u->timed_out, "restarted", u->restarted, "truncated", u->truncated));
}

/* End u with an sbx error instead (it never ran, or cannot go on): the
 * JSON error answer, or an error event then end in a stream. */
static void run_fail(struct irun *u, const struct sbx_err *e)
{
	if (u->r && u->stream) {
		sse_put_obj(u, "error", json_pack("{s:s,s:s,s:s}", "type", "error", "code",
						  err_name(e->code), "message", err_public_message(e)));
		run_finish(u);
		return;
	}
	u->finished = 1;
	if (u->r)
		agent_call_reply_err(u->r, e);
	else
		run_free(u);
}

/* An error of the code (name, value, traceback lines) into the run. */
static void run_error(struct irun *u, const char *name, const char *value)
{
	json_t *ev = json_pack("{s:s,s:s,s:s,s:[]}", "type", "error", "name", name, "value", value,
			       "traceback");

	if (!ev)
		return;
	if (u->stream) {
		sse_put_obj(u, "error", ev);
		return;
	}
	json_object_del(ev, "type");
	json_decref(u->error);
	u->error = ev;
}

static void out_add(struct irun *u, int i, const char *text, size_t n)
{
	struct buf *b = &u->out[i];
	size_t room = b->max - b->len;

	if (n > room) {
		u->truncated = 1;
		n = room;
	}
	if (n)
		buf_add(b, text, n);
}

/* One event line of the driver (json, len bytes) for the current run. */
static void run_event(struct irun *u, const char *line, size_t len)
{
	struct sbx_err e;
	json_t *ev = jsonv_parse(line, len, &e);
	const char *type = json_string_value(json_object_get(ev, "type"));

	if (!type) {
		json_decref(ev);
		return;
	}
	if (strcmp(type, "end") == 0) {
		json_int_t n = json_integer_value(json_object_get(ev, "executionCount"));
		struct ictx *x = u->ctx;

		json_decref(ev);
		u->count = x->count = n;
		x->cur = NULL;
		ctx_pause(x, 0);
		run_finish(u);
		ctx_next(x);
		return;
	}
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0 ||
	    strcmp(type, "result") == 0 || strcmp(type, "error") == 0) {
		if (u->stream) {
			char *text = strndup(line, len);
			if (text)
				sse_put(u, type, text, ev);
			free(text);
		} else if (type[0] == 's') {
			json_t *t = json_object_get(ev, "text");
			out_add(u, strcmp(type, "stderr") == 0,
				json_string_value(t) ? json_string_value(t) : "", json_string_length(t));
		} else if (strcmp(type, "result") == 0) {
			if (u->results_bytes + len > INTERP_RESULTS_MAX) {
				u->truncated = 1;
			} else {
				u->results_bytes += len;
				json_object_del(ev, "type");
				json_array_append(u->results, ev);
			}
		} else {
			json_object_del(ev, "type");
			json_decref(u->error);
			u->error = json_incref(ev);
		}
	}
	json_decref(ev);
}

/* --- the driver ------------------------------------------------------------ */

/* Text for stderr of the current run; without one it is held (the first
 * INTERP_HELD_MAX bytes) for the next run: a driver's start-up messages. */
static void run_stderr(struct ictx *x, const char *text, size_t n)
{
	struct irun *u = x->cur;

	if (!u) {
		size_t room = x->held.max - x->held.len;
		buf_add(&x->held, text, n < room ? n : room);
	} else if (u->stream) {
		sse_put_obj(u, "stderr", json_pack("{s:s,s:s%}", "type", "stderr", "text", text, n));
	} else {
		out_add(u, 1, text, n);
	}
}

/* An event line while no run is current: only stderr is kept. */
static void held_event(struct ictx *x, const char *line, size_t len)
{
	struct sbx_err e;
	json_t *ev = jsonv_parse(line, len, &e);
	const char *type = json_string_value(json_object_get(ev, "type"));
	const json_t *t = json_object_get(ev, "text");

	if (type && strcmp(type, "stderr") == 0 && json_is_string(t))
		run_stderr(x, json_string_value(t), json_string_length(t));
	json_decref(ev);
}

/* Add n bytes to the driver's current line; a line past INTERP_LINE_MAX
 * is dropped whole (skipping until its newline). */
static void drv_line(struct ictx *x, const char *data, size_t n)
{
	if (x->skipping || buf_add(&x->line, data, n) < 0) {
		x->skipping = 1;
		buf_reset(&x->line);
	}
}

/* Output of the driver: its stdout split into event lines for the current
 * run (none: dropped), its stderr passed to the run as stderr. */
static void drv_data(void *arg, int i, const char *data, size_t n)
{
	struct ictx *x = arg;

	if (i == 1) {
		run_stderr(x, data, n);
		return;
	}
	while (n > 0) {
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n;

		drv_line(x, data, take);
		if (!nl)
			return;
		data += take + 1;
		n -= take + 1;
		if (x->skipping) {
			x->skipping = 0;
			if (x->cur)
				x->cur->truncated = 1;
		} else if (x->cur && x->line.len) {
			run_event(x->cur, x->line.data, x->line.len);
		} else if (x->line.len) {
			held_event(x, x->line.data, x->line.len);
		}
		buf_reset(&x->line);
	}
}

static const struct child_io_ops drv_io_ops = { drv_data, NULL, NULL };

static void ctx_free(struct ictx *x)
{
	child_io_free(x->io);
	buf_release(&x->line);
	buf_release(&x->held);
	json_decref(x->env);
	free(x);
}

static void box_unlink(struct ictx *x)
{
	if (!x->box)
		return;
	for (struct ictx **pp = &x->box->list; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			x->box->count--;
			break;
		}
	x->box = NULL;
}

static void fail_queue(struct ictx *x, enum sbx_ecode code, const char *msg)
{
	struct sbx_err e = { 0 };

	err_set(&e, code, "%s", msg);
	while (x->queue) {
		struct irun *u = x->queue;
		x->queue = u->next;
		x->nqueue--;
		u->ctx = NULL;
		run_fail(u, &e);
	}
	x->qtail = &x->queue;
}

/* The driver is gone: the run it had ends with InterpreterDied (or the
 * sandbox's or the deletion's error), the next run starts a fresh driver;
 * a deleted context is freed here. */
static void drv_exited(void *arg, const struct rt_exit *ex)
{
	struct ictx *x = arg;
	struct irun *u;

	/* What it wrote before it ended is in the pipe (maybe the end of its
	 * run); nothing new starts meanwhile. */
	x->exiting = 1;
	if (x->io)
		child_io_drain(x->io, -1, INTERP_DRAIN_MAX);
	x->exiting = 0;
	x->handle = 0;
	child_io_free(x->io);
	x->io = NULL;
	x->paused = 0;
	buf_reset(&x->line);
	x->skipping = 0;
	x->died = 1;
	if ((u = x->cur)) {
		char msg[160];

		x->cur = NULL;
		if (ex->sandbox_gone || x->removed) {
			struct sbx_err e = { 0 };
			if (x->removed)
				err_set(&e, SBX_E_CONTEXT_NOT_FOUND, "the context was deleted");
			else
				err_set(&e, SBX_E_NODE_UNAVAILABLE,
					"the sandbox was stopped before the code finished");
			u->ctx = NULL;
			run_fail(u, &e);
		} else {
			if (u->timed_out)
				snprintf(msg, sizeof(msg),
					 "the code did not stop within %d ms of its interrupt: the "
					 "interpreter was restarted", INTERP_KILL_GRACE_MS);
			else if (ex->start_errno)
				snprintf(msg, sizeof(msg), "cannot start the interpreter: %s",
					 strerror(ex->start_errno));
			else if (ex->signal)
				snprintf(msg, sizeof(msg), "the interpreter was killed by signal %d",
					 ex->signal);
			else
				snprintf(msg, sizeof(msg), "the interpreter exited with code %d",
					 ex->exit_code);
			run_error(u, "InterpreterDied", msg);
			run_finish(u);
		}
	}
	if (ex->sandbox_gone)
		fail_queue(x, SBX_E_NODE_UNAVAILABLE, "the sandbox was stopped");
	if (x->removed) {
		fail_queue(x, SBX_E_CONTEXT_NOT_FOUND, "the context was deleted");
		ctx_free(x);
		return;
	}
	ctx_next(x);
}

/* Start the context's driver. 0 or -1 with e filled. */
static int drv_spawn(struct ictx *x, struct sbx_err *e)
{
	struct rt_sandbox *rsb = x->box ? agent_sb_container(x->box->sb) : NULL;
	const struct sbx_conf *conf;
	char path[CONF_STR_MAX + 32];
	char *argv[5];
	struct rt_proc_spec ps;
	auto_free char *src = NULL;
	char **env;
	size_t len;
	int io[3];

	if (!rsb)
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "the sandbox is not running");
	conf = x->box->a->conf;
	if (snprintf(path, sizeof(path), "%s/%s", conf->agent.interp_dir, langs[x->lang].driver) >=
	    (int)sizeof(path))
		return err_set(e, SBX_E_INTERNAL, "agent.interp_dir is too long");
	src = util_read_file(path, INTERP_DRIVER_MAX, &len);
	if (!src || strlen(src) != len)
		return err_sys(e, errno ? errno : EINVAL, "cannot read the driver '%s'", path);
	argv[0] = (char *)langs[x->lang].binary;
	argv[1] = (char *)langs[x->lang].flag;
	argv[2] = src;
	argv[3] = x->lang == LANG_TYPESCRIPT ? (char *)"typescript" : NULL;
	argv[4] = NULL;
	env = agent_env_merge(x->box->sb->base_env, x->env);
	if (!env)
		return err_sys(e, ENOMEM, "context env");
	ps = (struct rt_proc_spec){ .argv = argv, .env = env, .cwd = x->cwd };
	x->handle = agent_spawn_piped(rsb, &ps, io, NULL, drv_exited, x, e);
	agent_env_free(env);
	if (x->handle < 0) {
		x->handle = 0;
		err_prefix(e, "cannot start the interpreter");
		return -1;
	}
	x->io = child_io_new(x->box->a->base, io, INTERP_LINE_MAX, &drv_io_ops, x);
	if (!x->io) {
		rt_signal(rsb, x->handle, SIGKILL, 1);
		rt_detach(rsb, x->handle);
		x->handle = 0;
		return err_sys(e, ENOMEM, "context pipes");
	}
	child_io_set_burst(x->io, 8);
	child_io_pause(x->io, 0);
	return 0;
}

static void signal_driver(struct ictx *x, int sig)
{
	struct rt_sandbox *rsb = x->box ? agent_sb_container(x->box->sb) : NULL;

	if (rsb && x->handle > 0)
		rt_signal(rsb, x->handle, sig, sig == SIGKILL);
}

static void kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct irun *u = arg;

	(void)fd;
	(void)what;
	if (!u->ctx || u->ctx->cur != u)
		return;
	if (u->ctx->paused) {
		/* Its client is not reading: the driver may be blocked writing the
		 * output before its interrupt, which it cannot end the run without. */
		struct timeval tv = { INTERP_KILL_GRACE_MS / 1000,
				      (INTERP_KILL_GRACE_MS % 1000) * 1000 };
		evtimer_add(u->kill_ev, &tv);
		return;
	}
	log_info("context '%s': the run did not stop after its interrupt, killing it", u->ctx->id);
	signal_driver(u->ctx, SIGKILL);
}

/* Interrupt the current run u (its timeout, or its client went away):
 * SIGINT now, SIGKILL of the driver if the run has not ended within
 * INTERP_KILL_GRACE_MS of the agent reading it (a grace while the client
 * holds the driver's output back does not count). */
static void run_interrupt(struct irun *u)
{
	struct timeval tv = { INTERP_KILL_GRACE_MS / 1000, (INTERP_KILL_GRACE_MS % 1000) * 1000 };

	if (u->kill_ev)
		return;
	signal_driver(u->ctx, SIGINT);
	u->kill_ev = evtimer_new(u->a->base, kill_cb, u);
	if (u->kill_ev)
		evtimer_add(u->kill_ev, &tv);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct irun *u = arg;

	(void)fd;
	(void)what;
	u->timed_out = 1;
	run_interrupt(u);
}

/* Run the next waiting run when the driver is free. */
static void ctx_next(struct ictx *x)
{
	while (!x->cur && x->queue && !x->removed && !x->exiting) {
		struct irun *u = x->queue;
		struct sbx_err e = { 0 };
		struct timeval tv;

		x->queue = u->next;
		if (!x->queue)
			x->qtail = &x->queue;
		x->nqueue--;
		u->next = NULL;
		if (x->handle <= 0) {
			u->restarted = x->died;
			if (drv_spawn(x, &e) < 0) {
				u->ctx = NULL;
				run_fail(u, &e);
				continue;
			}
			x->died = 0;
		}
		x->cur = u;
		u->t0 = util_now_ms();
		if (x->held.len) {
			run_stderr(x, x->held.data, x->held.len);
			buf_reset(&x->held);
		}
		if (child_io_write(x->io, u->req, u->req_len) < 0)
			log_warn("context '%s': cannot queue the code: %s", x->id, strerror(errno));
		free(u->req);
		u->req = NULL;
		tv = (struct timeval){ (time_t)(u->timeout_ms / 1000),
				       (suseconds_t)((u->timeout_ms % 1000) * 1000) };
		u->timeout_ev = evtimer_new(u->a->base, timeout_cb, u);
		if (u->timeout_ev)
			evtimer_add(u->timeout_ev, &tv);
	}
}

/* --- boxes ------------------------------------------------------------------ */

static void interp_container_gone(struct agent *a, struct agent_sb *sb)
{
	struct ibox *b = *agent_sb_slot(sb, &agent_interp_module);

	(void)a;
	if (!b)
		return;
	*agent_sb_slot(sb, &agent_interp_module) = NULL;
	while (b->list) {
		struct ictx *x = b->list;
		box_unlink(x);
		/* Every driver of the container has been reported gone already. */
		if (x->handle > 0) {
			log_warn("context '%s' of '%s' still has a driver", x->id, sb->key);
			x->removed = 1;
		} else {
			fail_queue(x, SBX_E_NODE_UNAVAILABLE, "the sandbox was stopped");
			ctx_free(x);
		}
	}
	free(b);
}

const struct agent_module agent_interp_module = { "contexts", interp_container_gone };

static struct ibox *box_get(struct agent *a, struct agent_sb *sb, int create)
{
	void **slot = agent_sb_slot(sb, &agent_interp_module);
	struct ibox *b = *slot;

	if (!b && create && (b = calloc(1, sizeof(*b)))) {
		b->a = a;
		b->sb = sb;
		*slot = b;
	}
	return b;
}

static struct ictx *ctx_find(struct ibox *b, const char *id)
{
	for (struct ictx *x = b ? b->list : NULL; x; x = x->next)
		if (strcmp(x->id, id) == 0)
			return x;
	return NULL;
}

/* --- handlers --------------------------------------------------------------- */

const struct jsonv_field agent_interp_create_fields[] = {
	{ "language", JV_STRING, 0 },
	{ "cwd", JV_STRING, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "id", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

const struct jsonv_field agent_interp_run_fields[] = {
	{ "code", JV_STRING, 1 },
	{ "timeoutMs", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

const struct jsonv_field agent_interp_run_default_fields[] = {
	{ "code", JV_STRING, 1 },
	{ "language", JV_STRING, 0 },
	{ "timeoutMs", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

/* The language named by v (NULL: python). 0 or -1 (400). */
static int parse_lang(const json_t *v, enum interp_lang *out, struct sbx_err *e)
{
	const char *s = v ? json_string_value(v) : "python";

	for (size_t i = 0; i < ARRAY_SIZE(langs); i++)
		if (strcmp(s, langs[i].name) == 0) {
			*out = (enum interp_lang)i;
			return 0;
		}
	if (strcmp(s, "js") == 0 || strcmp(s, "ts") == 0) {
		*out = s[0] == 'j' ? LANG_JAVASCRIPT : LANG_TYPESCRIPT;
		return 0;
	}
	return err_set(e, SBX_E_VALIDATION,
		       "'language' must be one of python, javascript, typescript");
}

static void ctx_info(const struct ictx *x, struct agent_interp_info *info)
{
	*info = (struct agent_interp_info){ .id = x->id, .language = langs[x->lang].name,
					    .cwd = x->cwd, .created_at = x->created_at,
					    .count = (int64_t)x->count, .busy = x->cur != NULL,
					    .running = x->handle > 0 };
}

static json_t *ctx_info_json(const struct agent_interp_info *i)
{
	char created[32];

	util_iso8601(i->created_at, created);
	return json_pack("{s:s,s:s,s:s,s:s,s:I,s:b,s:b}", "id", i->id, "language", i->language,
			 "cwd", i->cwd, "createdAt", created, "executionCount", (json_int_t)i->count,
			 "busy", i->busy, "running", i->running);
}

/* Answer r with x (status): typed to a view, else its JSON. */
static void reply_ctx(struct httpd_req *r, int status, const struct ictx *x,
		      enum agent_interp_op op)
{
	struct agent_interp_info info;
	struct agent_interp_result res = { .op = op, .ctxs = &info, .nctxs = 1 };

	ctx_info(x, &info);
	if (!agent_call_offer(r, AGENT_INTERP_RESULT, &res))
		httpd_reply_json(r, status, ctx_info_json(&info));
}

/* Answer a deletion of context id. */
static void reply_ctx_deleted(struct httpd_req *r, const char *id)
{
	if (!agent_call_offer(r, AGENT_INTERP_RESULT,
				&(struct agent_interp_result){ .op = AGENT_INTERP_DELETED, .id = id }))
		httpd_reply_empty(r, 204);
}

/* A new context in b (its driver not started). NULL with e filled. */
static struct ictx *ctx_new(struct ibox *b, const char *id, enum interp_lang lang,
			    const char *cwd, const json_t *env, struct sbx_err *e)
{
	struct ictx *x;

	if (b->count >= INTERP_MAX_PER_SANDBOX) {
		err_set(e, SBX_E_QUOTA_EXCEEDED, "a sandbox has at most %d contexts",
			INTERP_MAX_PER_SANDBOX);
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		err_sys(e, ENOMEM, "context");
		return NULL;
	}
	snprintf(x->id, sizeof(x->id), "%s", id);
	snprintf(x->cwd, sizeof(x->cwd), "%s", cwd);
	x->lang = lang;
	x->env = env && json_object_size(env) ? json_deep_copy(env) : NULL;
	x->created_at = util_wall_ms();
	x->qtail = &x->queue;
	buf_init(&x->line, INTERP_LINE_MAX);
	buf_init(&x->held, INTERP_HELD_MAX);
	x->box = b;
	x->next = b->list;
	b->list = x;
	b->count++;
	return x;
}

static int ctx_id_new(char *out, size_t n)
{
	unsigned char rnd[6];
	char hex[13];

	if (util_random(rnd, sizeof(rnd)) < 0)
		return -1;
	util_hex(rnd, sizeof(rnd), hex);
	return snprintf(out, n, "ctx-%s", hex) >= (int)n ? -1 : 0;
}

int agent_interp_create(struct agent_call *c, struct sbx_err *e)
{
	char id[INTERP_ID_MAX], cwd[AGENT_EXEC_MAX_PATH + 16];
	enum interp_lang lang;
	struct ibox *b;
	struct ictx *x;
	json_t *v, *env;

	if (parse_lang(json_object_get(c->body, "language"), &lang, e) < 0)
		return -1;
	if ((v = json_object_get(c->body, "id"))) {
		if (!ids_valid_name(json_string_value(v)))
			return err_set(e, SBX_E_VALIDATION, "'id' must be 1-64 of [A-Za-z0-9_.-]");
		snprintf(id, sizeof(id), "%s", json_string_value(v));
	} else if (ctx_id_new(id, sizeof(id)) < 0) {
		return err_sys(e, errno, "context id");
	}
	v = json_object_get(c->body, "cwd");
	if (v) {
		const char *p = json_string_value(v);
		size_t n = json_string_length(v);
		int w;

		if (n == 0 || n > AGENT_EXEC_MAX_PATH || strlen(p) != n)
			return err_set(e, SBX_E_VALIDATION, "'cwd' must be a path of 1 to %d bytes",
				       AGENT_EXEC_MAX_PATH);
		w = p[0] == '/' ? snprintf(cwd, sizeof(cwd), "%s", p)
				: snprintf(cwd, sizeof(cwd), "/workspace/%s", p);
		if (w < 0 || (size_t)w >= sizeof(cwd))
			return err_set(e, SBX_E_VALIDATION, "'cwd' is too long");
	} else {
		snprintf(cwd, sizeof(cwd), "/workspace");
	}
	env = json_object_get(c->body, "env");
	if (env && agent_env_check(env, 0, e) < 0)
		return -1;
	b = box_get(c->a, c->sb, 1);
	if (!b)
		return err_sys(e, ENOMEM, "context");
	if (ctx_find(b, id))
		return err_set(e, SBX_E_CONFLICT, "context '%s' exists", id);
	x = ctx_new(b, id, lang, cwd, env, e);
	if (!x)
		return -1;
	/* Start the interpreter now: its start-up cost is not the first run's. */
	if (drv_spawn(x, e) < 0) {
		box_unlink(x);
		ctx_free(x);
		return -1;
	}
	log_info("context '%s' (%s) of '%s' created", id, langs[lang].name, c->sb->key);
	reply_ctx(c->r, 201, x, AGENT_INTERP_CREATED);
	return 0;
}

int agent_interp_list(struct agent_call *c, struct sbx_err *e)
{
	struct ibox *b = box_get(c->a, c->sb, 0);
	struct agent_interp_result res = { .op = AGENT_INTERP_LISTED };
	auto_free struct agent_interp_info *infos = NULL;
	json_t *arr;

	for (struct ictx *x = b ? b->list : NULL; x; x = x->next)
		res.nctxs++;
	if (!(infos = calloc(res.nctxs + 1, sizeof(*infos))))
		return err_sys(e, ENOMEM, "context list");
	res.nctxs = 0;
	for (struct ictx *x = b ? b->list : NULL; x; x = x->next)
		ctx_info(x, &infos[res.nctxs++]);
	res.ctxs = infos;
	if (agent_call_offer(c->r, AGENT_INTERP_RESULT, &res))
		return 0;
	arr = json_array();
	for (size_t i = 0; arr && i < res.nctxs; i++)
		json_array_append_new(arr, ctx_info_json(&infos[i]));
	httpd_reply_json(c->r, 200, arr ? json_pack("{s:o}", "contexts", arr) : NULL);
	return 0;
}

/* The context of path param 1. NULL with e filled (400, 404). */
static struct ictx *ctx_of(struct agent_call *c, struct sbx_err *e)
{
	const char *id = agent_call_param(c, 1);
	struct ictx *x;

	if (!ids_valid_name(id)) {
		err_set(e, SBX_E_VALIDATION, "invalid context id");
		return NULL;
	}
	x = ctx_find(box_get(c->a, c->sb, 0), id);
	if (!x)
		err_set(e, SBX_E_CONTEXT_NOT_FOUND, "context '%s' not found", id);
	return x;
}

int agent_interp_get(struct agent_call *c, struct sbx_err *e)
{
	struct ictx *x = ctx_of(c, e);

	if (!x)
		return -1;
	reply_ctx(c->r, 200, x, AGENT_INTERP_GOT);
	return 0;
}

int agent_interp_delete(struct agent_call *c, struct sbx_err *e)
{
	struct ictx *x = ctx_of(c, e);

	if (!x)
		return -1;
	box_unlink(x);
	x->removed = 1;
	log_info("context '%s' of '%s' deleted", x->id, c->sb->key);
	if (x->handle > 0) {
		/* drv_exited ends the runs and frees x */
		struct rt_sandbox *rsb = agent_sb_container(c->sb);
		if (rsb && rt_signal(rsb, x->handle, SIGKILL, 1) == 0) {
			reply_ctx_deleted(c->r, agent_call_param(c, 1));
			return 0;
		}
		if (rsb)
			rt_detach(rsb, x->handle);
		x->handle = 0;
	}
	fail_queue(x, SBX_E_CONTEXT_NOT_FOUND, "the context was deleted");
	ctx_free(x);
	reply_ctx_deleted(c->r, agent_call_param(c, 1));
	return 0;
}

/* The request is over (answered, or the client went away). */
static void run_closed(void *arg, int failed)
{
	struct irun *u = arg;
	struct ictx *x = u->ctx;

	u->r = NULL;
	agent_sb_stream_end(u->a, &u->live);
	if (u->finished) {
		run_free(u);
		return;
	}
	if (x && x->cur == u) {
		/* the driver ends the run (its end event, or its death) */
		if (failed)
			log_info("context '%s': client went away, interrupting the run", x->id);
		ctx_pause(x, 0);
		run_interrupt(u);
		return;
	}
	if (x) {
		for (struct irun **pp = &x->queue; *pp; pp = &(*pp)->next)
			if (*pp == u) {
				*pp = u->next;
				x->nqueue--;
				break;
			}
		for (x->qtail = &x->queue; *x->qtail; x->qtail = &(*x->qtail)->next)
			;
	}
	run_free(u);
}

static void keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct irun *u = arg;

	(void)fd;
	(void)what;
	if (u->r && buf_adds(&u->sse, ": keep-alive\n\n") == 0)
		httpd_stream_wake(u->r);
}

/* Queue a run of the body's code in x and take the request over. */
static int run_in(struct agent_call *c, struct ictx *x, struct sbx_err *e)
{
	int64_t timeout_ms = INTERP_TIMEOUT_DEFAULT_MS;
	json_t *code = json_object_get(c->body, "code");
	json_t *req;
	struct irun *u;

	if (json_string_length(code) == 0)
		return err_set(e, SBX_E_VALIDATION, "'code' must be a non-empty string");
	if (jsonv_int(c->body, "timeoutMs", 1, INTERP_TIMEOUT_MAX_MS, &timeout_ms, e) < 0)
		return -1;
	if (x->nqueue >= INTERP_MAX_QUEUE)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "context '%s' has %d runs waiting", x->id,
			       INTERP_MAX_QUEUE);
	u = calloc(1, sizeof(*u));
	if (!u)
		return err_sys(e, ENOMEM, "run");
	u->ctx = x;
	u->a = c->a;
	u->r = c->r;
	u->stream = agent_call_sse(c);
	u->timeout_ms = timeout_ms;
	u->t0 = util_now_ms();
	for (int i = 0; i < 2; i++)
		buf_init(&u->out[i], (size_t)c->a->conf->agent.max_run_output_bytes);
	buf_init(&u->sse, INTERP_SSE_HARD_MAX);
	u->results = json_array();
	req = json_pack("{s:O}", "code", code);
	u->req = req ? jsonv_dump(req) : NULL;
	json_decref(req);
	if (!u->results || !u->req) {
		run_free(u);
		return err_sys(e, ENOMEM, "run");
	}
	u->req_len = strlen(u->req);
	{
		char *line = realloc(u->req, u->req_len + 2);
		if (!line) {
			run_free(u);
			return err_sys(e, ENOMEM, "run");
		}
		line[u->req_len++] = '\n';
		line[u->req_len] = '\0';
		u->req = line;
	}
	agent_sb_stream_begin(c->sb, &u->live);
	httpd_on_close(c->r, run_closed, u);
	if (u->stream) {
		struct timeval ka = { INTERP_KEEPALIVE_MS / 1000, 0 };
		u->keepalive_ev = event_new(c->a->base, -1, EV_PERSIST, keepalive_cb, u);
		if (u->keepalive_ev)
			event_add(u->keepalive_ev, &ka);
		httpd_add_header(c->r, "Cache-Control", "no-store");
		httpd_add_header(c->r, "X-Accel-Buffering", "no");
		httpd_reply_stream(c->r, 200, "text/event-stream", sse_read, u);
	} else {
		httpd_defer(c->r);
	}
	*x->qtail = u;
	x->qtail = &u->next;
	x->nqueue++;
	ctx_next(x);
	return 0;
}

int agent_interp_run(struct agent_call *c, struct sbx_err *e)
{
	struct ictx *x = ctx_of(c, e);

	return x ? run_in(c, x, e) : -1;
}

int agent_interp_run_default(struct agent_call *c, struct sbx_err *e)
{
	enum interp_lang lang;
	char id[INTERP_ID_MAX];
	struct ibox *b;
	struct ictx *x;

	if (parse_lang(json_object_get(c->body, "language"), &lang, e) < 0)
		return -1;
	util_xsnprintf(id, sizeof(id), "default-%s", langs[lang].name);
	b = box_get(c->a, c->sb, 1);
	if (!b)
		return err_sys(e, ENOMEM, "context");
	x = ctx_find(b, id);
	if (!x && !(x = ctx_new(b, id, lang, "/workspace", NULL, e)))
		return -1;
	return run_in(c, x, e);
}
