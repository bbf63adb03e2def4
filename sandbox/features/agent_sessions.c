/*
 * agent_sessions.c — sessions: persistent shells in a sandbox.
 *
 *   POST   /v1/sandboxes/{id}/sessions        {id?, env?, cwd?} -> 201 {id}
 *   GET    /v1/sandboxes/{id}/sessions        -> {sessions:[{id, cwd, createdAt}]}
 *   DELETE /v1/sandboxes/{id}/sessions/{sid}  -> 204
 *   POST   /v1/sandboxes/{id}/exec {session: sid, ...} (agent_exec.c calls in)
 *
 * A session is one long-lived shell (/bin/bash when the image has it, else
 * /bin/sh) whose stdin is a pipe from the agent. Commands of a session run
 * one at a time, in arrival order. Each is written to the shell as
 *
 *     { command eval '<command>'
 *     } < /dev/null                (or a temp file holding the exec's stdin)
 *     __sbx_rc=$?
 *     command printf '\001%s%s %d\n' '<half1>' '<half2>' "$__sbx_rc"   (and >&2)
 *
 * `command eval` keeps the shell alive on a syntax error and keeps cd,
 * export and functions in the shell. The marker is 128 random bits split in
 * two halves, so it never appears literally in the script (set -v/-x show
 * the script); the agent strips "\001<marker> <status>\n" from both streams
 * (output without a trailing newline stays exact) and the command is over
 * when both markers arrived. A command with its
 * own cwd or env runs in a subshell "( cd …; export …; command eval … )",
 * so they do not leak into the session.
 *
 * The shell ending during a command (`exit 3`) answers 410
 * SESSION_TERMINATED {exitCode}; a timeout or a client that goes away kills
 * the shell's process group (the running command with it). In every case
 * the next command of the session starts a fresh shell with the session's
 * original env and cwd (earlier cd/export state is lost).
 *
 * Sessions live until deleted or until the sandbox's container stops.
 */
#include "agent_sessions.h"
#include "call.h"
#include "agent_exec.h"
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

#define SESS_MAX_PER_SANDBOX 64
#define SESS_MAX_QUEUE 64
#define SESS_READ_CHUNK (16 * 1024)
#define SESS_DRAIN_MAX (1024 * 1024)
#define SESS_SCRIPT_MAX (16 * 1024 * 1024)
#define SESS_MARK_LEN AGENT_SESS_MARK_LEN
#define SESS_ID_MAX 65
#define SESS_LEFT_MAX 16        /* earlier shells' trees a delete still kills */
#define SESS_TAG_LEN 16
#define SESS_STATE_DIR "/tmp/.sbx-session-"  /* + tag: the shell's cwd and exports */

static const char shell_boot[] =
	"if [ -x /bin/bash ]; then exec /bin/bash --noprofile --norc; fi; exec /bin/sh";

struct sess;

struct sess_cmd {
	struct sess_cmd *next;
	struct sess *s;
	struct agent_exec *x;
	struct buf body;        /* the script (with its marker lines once it runs) */
	int64_t timeout_ms;
};

struct sess_box;

struct sess {
	struct sess *next;
	struct sess_box *box;
	char id[SESS_ID_MAX];
	char cwd[AGENT_EXEC_MAX_PATH + 16];
	json_t *env;              /* owned overlay of the sandbox env, or NULL */
	int64_t created_at;
	int64_t handle;           /* > 0 while the shell runs */
	pid_t pid;                /* in the sandbox, 0 until started */
	struct child_io *io;      /* the shell's pipes, while it runs */
	int64_t left[SESS_LEFT_MAX]; /* trees of shells that exited on their own
				  * (their background jobs may run on) */
	int nleft;
	int draining;             /* reading the last output of an exited shell */
	int paused;
	int killing;              /* we killed the shell (timeout, cancel, delete) */
	int removed;              /* deleted: freed once the shell is gone */
	char mark[SESS_MARK_LEN + 1];
	char tag[SESS_TAG_LEN + 1]; /* names the state file of the current shell */
	struct agent_sess_scan scan[2];
	struct sess_cmd *cur;
	struct sess_cmd *queue, **qtail;
	int nqueue;
};

/* The sessions of one container of a sandbox: made on first use, freed by
 * agent_sess_container_gone. */
struct sess_box {
	struct agent *a;
	struct agent_sb *sb;      /* borrowed: the box is freed before the entry */
	struct sess *list;
	int count;
};

static void sess_next(struct sess *s);
static void sess_cancel(void *arg, int timed_out);
static void sess_pause(void *arg, int on);

static const struct agent_exec_src sess_src = { sess_pause, sess_cancel };

/* --- boxes ------------------------------------------------------------------ */

static void cmd_free(struct sess_cmd *c)
{
	buf_release(&c->body);
	free(c);
}

static void shell_close(struct sess *s)
{
	child_io_free(s->io);
	s->io = NULL;
	s->paused = 0;
}

static void sess_free(struct sess *s)
{
	shell_close(s);
	json_decref(s->env);
	free(s);
}

static void box_unlink_sess(struct sess *s)
{
	struct sess **pp;

	if (!s->box)
		return;
	for (pp = &s->box->list; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			s->box->count--;
			break;
		}
	s->box = NULL;
}

static void box_free(struct sess_box *b)
{
	*agent_sb_slot(b->sb, &agent_sess_module) = NULL;
	while (b->list) {
		struct sess *s = b->list;
		box_unlink_sess(s);
		/* The container is gone, so every shell has exited already. */
		if (s->handle > 0)
			log_warn("session '%s' of '%s' still has a shell", s->id, b->sb->key);
		else
			sess_free(s);
	}
	free(b);
}

/* Every shell of the container has been reported gone (rt_destroy fired
 * their callbacks), so the sessions can go with it. */
static void sess_container_gone(struct agent *a, struct agent_sb *sb)
{
	struct sess_box *b = *agent_sb_slot(sb, &agent_sess_module);

	if (b)
		box_free(b);
}

const struct agent_module agent_sess_module = { "sessions", sess_container_gone };

/* The sessions of sb's running container (made when create), or NULL. */
static struct sess_box *box_get(struct agent *a, struct agent_sb *sb, int create)
{
	void **slot = agent_sb_slot(sb, &agent_sess_module);
	struct sess_box *b = *slot;

	if (!b && create && (b = calloc(1, sizeof(*b)))) {
		b->a = a;
		b->sb = sb;
		*slot = b;
	}
	return b;
}

static struct sess *sess_find(struct sess_box *b, const char *id)
{
	for (struct sess *s = b ? b->list : NULL; s; s = s->next)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

/* --- the shell's output ------------------------------------------------------ */

struct scan_out {
	struct sess *s;
	int i;
};

static void cmd_output(void *arg, const char *data, size_t n)
{
	struct scan_out *o = arg;

	if (n && o->s->cur)
		agent_exec_output(o->s->cur->x, o->i, data, n);
}

/* Shell output of stream i: through the marker scanner to the current
 * command (without one, it is background output and dropped). */
static void scan_feed(struct sess *s, int i, const char *data, size_t n)
{
	struct scan_out o = { s, i };

	if (s->cur)
		agent_sess_scan_feed(&s->scan[i], s->mark, data, n, cmd_output, &o);
}

void agent_sess_scan_feed(struct agent_sess_scan *sc, const char *mark, const char *data, size_t n,
			  void (*out)(void *arg, const char *data, size_t n), void *arg)
{
	char tmp[SESS_READ_CHUNK + sizeof(sc->hold)];
	char pat[SESS_MARK_LEN + 4];
	size_t len, plen, k;
	const char *p;
	int w;

	if (sc->done)
		return;
	w = snprintf(pat, sizeof(pat), "\001%s ", mark);
	if (w < 0 || (size_t)w >= sizeof(pat))
		return;
	plen = (size_t)w;
	while (n > 0) {
		size_t take = n > SESS_READ_CHUNK ? SESS_READ_CHUNK : n;

		memcpy(tmp, sc->hold, sc->nhold);
		memcpy(tmp + sc->nhold, data, take);
		len = sc->nhold + take;
		sc->nhold = 0;
		data += take;
		n -= take;
		p = memmem(tmp, len, pat, plen);
		if (p) {
			const char *digits = p + plen, *end = tmp + len;
			const char *nl = memchr(digits, '\n', (size_t)(end - digits));

			out(arg, tmp, (size_t)(p - tmp));
			if (!nl) {
				if ((size_t)(end - p) <= sizeof(sc->hold)) {
					sc->nhold = (size_t)(end - p);
					memcpy(sc->hold, p, sc->nhold);
					continue;
				}
				nl = end; /* cannot happen with our printf: take what is there */
			}
			{
				char num[16];
				size_t dn = (size_t)(nl - digits);
				int64_t rc = 1;
				if (dn < sizeof(num)) {
					memcpy(num, digits, dn);
					num[dn] = '\0';
					if (util_parse_i64(num, 0, 255, &rc) < 0)
						rc = 1;
				}
				sc->rc = (int)rc;
			}
			sc->done = 1;
			return;
		}
		/* Hold back a tail that may be the start of the marker. */
		k = len < plen - 1 ? len : plen - 1;
		while (k > 0 && memcmp(tmp + len - k, pat, k) != 0)
			k--;
		out(arg, tmp, len - k);
		memcpy(sc->hold, tmp + len - k, k);
		sc->nhold = k;
	}
}

static void shell_resume(struct sess *s)
{
	if (!s->paused)
		return;
	s->paused = 0;
	if (s->io)
		child_io_pause(s->io, 0);
}

/* When both markers arrived, end the current command; 1 if it ended. */
static int cmd_complete(struct sess *s)
{
	struct sess_cmd *c = s->cur;
	struct rt_exit ex = { 0 };

	if (!c || !s->scan[0].done || !s->scan[1].done)
		return 0;
	s->cur = NULL;
	ex.exit_code = s->scan[0].rc;
	shell_resume(s);
	agent_exec_exited(c->x, &ex);
	cmd_free(c);
	return 1;
}

static void cmd_check_done(struct sess *s)
{
	if (cmd_complete(s))
		sess_next(s);
}

static void shell_io_data(void *arg, int i, const char *data, size_t n)
{
	struct sess *s = arg;

	scan_feed(s, i, data, n);
	/* an exited shell's last output: shell_exited ends the command */
	if (!s->draining)
		cmd_check_done(s);
}

static const struct child_io_ops shell_io_ops = { shell_io_data, NULL, NULL };

/* Hand the current command's script to the shell (EPIPE: the shell is
 * gone; its exit ends the command). */
static void shell_write_cur(struct sess *s)
{
	struct sess_cmd *c = s->cur;

	if (!c || !s->io)
		return;
	if (child_io_write(s->io, c->body.data, c->body.len) < 0 && errno != EPIPE)
		log_warn("session '%s': cannot queue the command: %s", s->id, strerror(errno));
	buf_release(&c->body);
}

static void sess_pause(void *arg, int on)
{
	struct sess_cmd *c = arg;
	struct sess *s = c->s;

	if (s->cur != c)
		return;
	if (on && !s->paused) {
		s->paused = 1;
		if (s->io)
			child_io_pause(s->io, 1);
	} else if (!on) {
		shell_resume(s);
	}
}

/* --- the shell's life ---------------------------------------------------------- */

static void end_cmd_error(struct sess_cmd *c, enum sbx_ecode code, const char *msg, json_t *details)
{
	struct sbx_err e = { 0 };

	err_set(&e, code, "%s", msg);
	agent_exec_fail(c->x, &e, details);
	cmd_free(c);
}

static void fail_queue(struct sess *s, const struct rt_exit *gone, enum sbx_ecode code,
		       const char *msg)
{
	while (s->queue) {
		struct sess_cmd *c = s->queue;
		s->queue = c->next;
		s->nqueue--;
		if (gone) {
			agent_exec_exited(c->x, gone);
			cmd_free(c);
		} else {
			end_cmd_error(c, code, msg, NULL);
		}
	}
	s->qtail = &s->queue;
}

static void shell_started(void *arg, pid_t pid)
{
	struct sess *s = arg;

	s->pid = pid;
	if (s->cur) {
		agent_exec_started(s->cur->x, pid);
		/* only now: no output of the command can come before its start */
		shell_write_cur(s);
	}
}

/* Remember the tree of a shell that exited on its own, for a delete. */
static void remember_left(struct sess *s, int64_t handle)
{
	if (s->nleft == SESS_LEFT_MAX) {
		log_warn("session '%s': more than %d earlier shells left processes; "
			 "the oldest is no longer tracked", s->id, SESS_LEFT_MAX);
		memmove(s->left, s->left + 1, (SESS_LEFT_MAX - 1) * sizeof(s->left[0]));
		s->nleft--;
	}
	s->left[s->nleft++] = handle;
}

/* Kill what earlier shells of s left running (a tree already gone is
 * unknown to the runtime: nothing happens). */
static void kill_left(struct sess *s, struct rt_sandbox *rsb)
{
	for (int i = 0; i < s->nleft && rsb; i++)
		(void)rt_signal(rsb, s->left[i], SIGKILL, 1);
	s->nleft = 0;
}

static void shell_exited(void *arg, const struct rt_exit *ex)
{
	struct sess *s = arg;
	struct sess_cmd *c;
	int killed = s->killing;

	if (!killed && !ex->sandbox_gone && !ex->start_errno && !s->removed)
		remember_left(s, s->handle);
	s->handle = 0;
	s->pid = 0;
	s->killing = 0;
	/* Whatever the shell wrote before it ended is in the pipes now. */
	s->draining = 1;
	if (s->io)
		child_io_drain(s->io, -1, SESS_DRAIN_MAX);
	s->draining = 0;
	shell_close(s);
	cmd_complete(s); /* it may have finished just before the shell ended */
	if ((c = s->cur)) {
		s->cur = NULL;
		if (ex->sandbox_gone || killed || ex->start_errno) {
			agent_exec_exited(c->x, ex);
			cmd_free(c);
		} else if (s->removed) {
			end_cmd_error(c, SBX_E_SESSION_TERMINATED, "the session was deleted", NULL);
		} else {
			char msg[96];
			snprintf(msg, sizeof(msg), "the session's shell exited with code %d",
				 ex->exit_code);
			end_cmd_error(c, SBX_E_SESSION_TERMINATED, msg,
				      json_pack("{s:i}", "exitCode", ex->exit_code));
		}
	}
	if (ex->sandbox_gone)
		fail_queue(s, ex, SBX_E_SANDBOX_NOT_FOUND, "the sandbox stopped");
	if (s->removed) {
		fail_queue(s, NULL, SBX_E_SESSION_TERMINATED, "the session was deleted");
		sess_free(s);
		return;
	}
	sess_next(s);
}

/* Start the session's shell. 0 or -1 with e filled. */
static int shell_spawn(struct sess *s, struct sbx_err *e)
{
	struct rt_sandbox *rsb = s->box ? agent_sb_container(s->box->sb) : NULL;
	char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)shell_boot, NULL };
	unsigned char rnd[SESS_TAG_LEN / 2];
	struct rt_proc_spec ps;
	struct event_base *base;
	char **env;
	int io[3];

	if (!rsb)
		return err_set(e, SBX_E_SANDBOX_NOT_FOUND, "the sandbox is not running");
	if (util_random(rnd, sizeof(rnd)) < 0)
		return err_sys(e, errno, "random tag");
	util_hex(rnd, sizeof(rnd), s->tag);
	base = s->box->a->base;
	env = agent_env_merge(s->box->sb->base_env, s->env);
	if (!env)
		return err_sys(e, ENOMEM, "session env");
	ps = (struct rt_proc_spec){ .argv = argv, .env = env, .cwd = s->cwd };
	s->handle = agent_spawn_piped(rsb, &ps, io, shell_started, shell_exited, s, e);
	agent_env_free(env);
	if (s->handle < 0) {
		s->handle = 0;
		err_prefix(e, "cannot start the session's shell");
		return -1;
	}
	/* child_io takes the fds in every case */
	s->io = child_io_new(base, io, SESS_SCRIPT_MAX, &shell_io_ops, s);
	if (!s->io) {
		rt_signal(rsb, s->handle, SIGKILL, 1);
		rt_detach(rsb, s->handle);
		s->handle = 0;
		return err_sys(e, ENOMEM, "session pipes");
	}
	child_io_pause(s->io, 0);
	return 0;
}

/* Run the next queued command when the shell is free. */
static void sess_next(struct sess *s)
{
	while (!s->cur && s->queue && !s->removed) {
		struct sess_cmd *c = s->queue;
		unsigned char rnd[SESS_MARK_LEN / 2];
		struct sbx_err e = { 0 };
		int half = SESS_MARK_LEN / 2;

		s->queue = c->next;
		if (!s->queue)
			s->qtail = &s->queue;
		s->nqueue--;
		c->next = NULL;
		if (s->handle <= 0 && shell_spawn(s, &e) < 0) {
			agent_exec_fail(c->x, &e, NULL);
			cmd_free(c);
			continue;
		}
		if (util_random(rnd, sizeof(rnd)) < 0) {
			err_sys(&e, errno, "random marker");
			agent_exec_fail(c->x, &e, NULL);
			cmd_free(c);
			continue;
		}
		util_hex(rnd, sizeof(rnd), s->mark);
		memset(s->scan, 0, sizeof(s->scan));
		if (buf_printf(&c->body,
			       "__sbx_rc=$?\n"
			       "[ \"$__sbx_in\" = /dev/null ] || rm -f \"$__sbx_in\"\n"
			       "(umask 077; export __SBX_PWD=\"$PWD\"; export -p >| '" SESS_STATE_DIR
			       "%s') 2>/dev/null\n"
			       "command printf '\\001%%s%%s %%d\\n' '%.*s' '%s' \"$__sbx_rc\"\n"
			       "command printf '\\001%%s%%s %%d\\n' '%.*s' '%s' \"$__sbx_rc\" >&2\n"
			       "unset __sbx_rc __sbx_in\n",
			       s->tag, half, s->mark, s->mark + half, half, s->mark,
			       s->mark + half) < 0) {
			err_set(&e, SBX_E_PAYLOAD_TOO_LARGE, "the command is too large");
			agent_exec_fail(c->x, &e, NULL);
			cmd_free(c);
			continue;
		}
		s->cur = c;
		/* A shell still starting gets the script in shell_started, after
		 * the start event. */
		if (s->pid > 0) {
			agent_exec_started(c->x, s->pid);
			shell_write_cur(s);
		}
		agent_exec_arm_timeout(c->x, c->timeout_ms);
	}
}

/* The client of c went away or its timeout fired. */
static void sess_cancel(void *arg, int timed_out)
{
	struct sess_cmd *c = arg;
	struct sess *s = c->s;
	struct rt_sandbox *rsb;

	if (s->cur != c) {
		struct sess_cmd **pp;
		struct rt_exit ex = { .exit_code = 128 + SIGKILL, .signal = SIGKILL };

		for (pp = &s->queue; *pp; pp = &(*pp)->next)
			if (*pp == c) {
				*pp = c->next;
				s->nqueue--;
				break;
			}
		for (s->qtail = &s->queue; *s->qtail; s->qtail = &(*s->qtail)->next)
			;
		agent_exec_exited(c->x, &ex);
		cmd_free(c);
		return;
	}
	rsb = s->box ? agent_sb_container(s->box->sb) : NULL;
	log_info("session '%s': %s, killing its shell", s->id,
		 timed_out ? "command timed out" : "client went away");
	s->killing = 1;
	if (!rsb || s->handle <= 0 || rt_signal(rsb, s->handle, SIGKILL, 1) < 0) {
		struct rt_exit ex = { .exit_code = 128 + SIGKILL, .signal = SIGKILL };
		s->cur = NULL;
		s->killing = 0;
		agent_exec_exited(c->x, &ex);
		cmd_free(c);
		sess_next(s);
	}
}

/* --- script building ------------------------------------------------------- */

/* Append s (n bytes) as one single-quoted shell word. */
static int sh_quote(struct buf *b, const char *s, size_t n)
{
	if (buf_add(b, "'", 1) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\'') {
			if (buf_adds(b, "'\\''") < 0)
				return -1;
		} else if (buf_add(b, &s[i], 1) < 0) {
			return -1;
		}
	}
	return buf_add(b, "'", 1);
}

static int sh_quote_str(struct buf *b, const char *s)
{
	return sh_quote(b, s, strlen(s));
}

/* Append data as a printf %b argument (single-quoted, octal escapes). */
static int printf_b_quote(struct buf *b, const char *data, size_t n)
{
	if (buf_add(b, "'", 1) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)data[i];
		int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			    (ch >= '0' && ch <= '9') || strchr(" ,._/:=+-", ch);
		if (ch && plain) {
			if (buf_add(b, &data[i], 1) < 0)
				return -1;
		} else if (buf_printf(b, "\\0%03o", ch) < 0) {
			return -1;
		}
	}
	return buf_add(b, "'", 1);
}

/* The shell text of c: its command, or its argv quoted. */
static int cmd_text(struct buf *b, const struct agent_cmd *c)
{
	if (c->command)
		return buf_adds(b, c->command);
	for (size_t i = 0; c->argv[i]; i++)
		if ((i && buf_add(b, " ", 1) < 0) || sh_quote_str(b, c->argv[i]) < 0)
			return -1;
	return 0;
}

/* Append " export K='v'" lines (unset for null values) of env. */
static int env_lines(struct buf *b, const json_t *env)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)env, k, v) {
		if (json_is_string(v)) {
			if (buf_printf(b, " export %s=", k) < 0 ||
			    sh_quote(b, json_string_value(v), json_string_length(v)) < 0 ||
			    buf_adds(b, "\n") < 0)
				return -1;
		} else if (buf_printf(b, " unset %s\n", k) < 0) {
			return -1;
		}
	}
	return 0;
}

/* The script of one command up to (not including) the status line. */
static int build_body(struct buf *b, const struct agent_cmd *c, const char *stdin_data,
		      size_t stdin_len)
{
	struct buf cmd;
	int sub = c->cwd_given || (c->env && json_object_size(c->env) > 0);
	int rc = -1;

	buf_init(&cmd, SESS_SCRIPT_MAX);
	if (cmd_text(&cmd, c) < 0)
		goto out;
	if (stdin_data && stdin_len > 0) {
		if (buf_adds(b, "__sbx_in=$(mktemp 2>/dev/null) || __sbx_in=/dev/null\n"
				"command printf '%b' ") < 0 ||
		    printf_b_quote(b, stdin_data, stdin_len) < 0 ||
		    buf_adds(b, " >| \"$__sbx_in\"\n") < 0)
			goto out;
	} else if (buf_adds(b, "__sbx_in=/dev/null\n") < 0) {
		goto out;
	}
	if (buf_adds(b, sub ? "(" : "{") < 0)
		goto out;
	if (c->cwd_given &&
	    (buf_adds(b, " cd -- ") < 0 || sh_quote_str(b, c->cwd) < 0 || buf_adds(b, " || exit 1\n") < 0))
		goto out;
	if (c->env && env_lines(b, c->env) < 0)
		goto out;
	if (buf_adds(b, " command eval ") < 0 || sh_quote(b, cmd.data ? cmd.data : "", cmd.len) < 0 ||
	    buf_adds(b, sub ? "\n) < \"$__sbx_in\"\n" : "\n} < \"$__sbx_in\"\n") < 0)
		goto out;
	rc = 0;
out:
	buf_release(&cmd);
	return rc;
}

/* The shell that runs a process from a session's state: bash when the
 * image has it (it reads what bash's export -p wrote), with $1 the script
 * and $2 the command. */
static const char proc_boot[] =
	"if [ -x /bin/bash ]; then exec /bin/bash --noprofile --norc -c \"$1\" sh \"$2\"; fi; "
	"exec /bin/sh -c \"$1\" sh \"$2\"";

int agent_sess_process_cmd(struct agent *a, struct agent_sb *sb, const char *sid,
			   struct agent_cmd *c, struct buf *script, struct sbx_err *e)
{
	struct sess *s = sess_find(box_get(a, sb, 0), sid);
	size_t script_len;
	char **argv;

	buf_init(script, SESS_SCRIPT_MAX);
	if (s && !c->cwd_given &&
	    (buf_adds(script, "cd -- ") < 0 || sh_quote_str(script, s->cwd) < 0 ||
	     buf_adds(script, " 2>/dev/null\n") < 0))
		goto big;
	if (s && s->env && env_lines(script, s->env) < 0)
		goto big;
	/* the state the shell left after its last command, when it has run one */
	if (s && s->handle > 0 &&
	    buf_printf(script,
		       "__sbx_f='" SESS_STATE_DIR "%s'\n"
		       "if [ -r \"$__sbx_f\" ]; then . \"$__sbx_f\"; %s fi\n"
		       "unset __sbx_f __SBX_PWD\n",
		       s->tag, c->cwd_given ? "" : "cd -- \"$__SBX_PWD\" 2>/dev/null;") < 0)
		goto big;
	/* the process's own env and cwd win over the session's */
	if (c->env && env_lines(script, c->env) < 0)
		goto big;
	if (buf_adds(script, "eval \"$1\"\n") < 0 || buf_add(script, "", 1) < 0)
		goto big;
	script_len = script->len;
	if (cmd_text(script, c) < 0 || buf_add(script, "", 1) < 0)
		goto big;
	argv = calloc(7, sizeof(*argv));
	if (!argv) {
		buf_release(script);
		return err_sys(e, ENOMEM, "process");
	}
	argv[0] = (char *)"/bin/sh";
	argv[1] = (char *)"-c";
	argv[2] = (char *)proc_boot;
	argv[3] = (char *)"sh";
	argv[4] = script->data;
	argv[5] = script->data + script_len;
	if (!c->command)
		c->command = argv[5];
	free(c->argv);
	c->argv = argv;
	return 0;
big:
	buf_release(script);
	return err_set(e, SBX_E_PAYLOAD_TOO_LARGE, "the command is too large");
}

/* --- handlers --------------------------------------------------------------- */

static int sess_id_new(char *out, size_t n)
{
	unsigned char rnd[4];
	char hex[9];

	if (util_random(rnd, sizeof(rnd)) < 0)
		return -1;
	util_hex(rnd, sizeof(rnd), hex);
	return snprintf(out, n, "session-%s", hex) >= (int)n ? -1 : 0;
}

/* A new session in b (not started). NULL with e filled. */
static struct sess *sess_new(struct sess_box *b, const char *id, const char *cwd,
			     const json_t *env, struct sbx_err *e)
{
	struct sess *s;

	if (b->count >= SESS_MAX_PER_SANDBOX) {
		err_set(e, SBX_E_QUOTA_EXCEEDED, "a sandbox has at most %d sessions",
			SESS_MAX_PER_SANDBOX);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		err_sys(e, ENOMEM, "session");
		return NULL;
	}
	snprintf(s->id, sizeof(s->id), "%s", id);
	snprintf(s->cwd, sizeof(s->cwd), "%s", cwd);
	s->env = env && json_object_size(env) ? json_deep_copy(env) : NULL;
	s->created_at = util_wall_ms();
	s->qtail = &s->queue;
	s->box = b;
	s->next = b->list;
	b->list = s;
	b->count++;
	return s;
}

int agent_sess_exec(struct httpd_req *r, struct agent_sb *sb, int stream, const char *sid,
		    const struct agent_cmd *c, int64_t timeout_ms, const char *stdin_data,
		    size_t stdin_len, struct sbx_err *e)
{
	struct agent *a = httpd_ctx(r);
	struct sess_box *b = box_get(a, sb, 1);
	struct sess *s;
	struct sess_cmd *cmd;

	if (!b)
		return err_sys(e, ENOMEM, "session");
	s = sess_find(b, sid);
	if (!s && !(s = sess_new(b, sid, "/workspace", NULL, e)))
		return -1;
	if (s->nqueue >= SESS_MAX_QUEUE)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "session '%s' has %d commands waiting", sid,
			       SESS_MAX_QUEUE);
	cmd = calloc(1, sizeof(*cmd));
	if (!cmd)
		return err_sys(e, ENOMEM, "session command");
	buf_init(&cmd->body, SESS_SCRIPT_MAX);
	if (build_body(&cmd->body, c, stdin_data, stdin_len) < 0) {
		cmd_free(cmd);
		return err_set(e, SBX_E_PAYLOAD_TOO_LARGE, "the command is too large");
	}
	cmd->s = s;
	cmd->timeout_ms = timeout_ms;
	cmd->x = agent_exec_new(a, r, sb, stream, c->argv[c->command ? 2 : 0], c->cwd, &sess_src, cmd);
	if (!cmd->x) {
		cmd_free(cmd);
		return err_sys(e, ENOMEM, "session command");
	}
	*s->qtail = cmd;
	s->qtail = &cmd->next;
	s->nqueue++;
	agent_exec_begin(cmd->x);
	sess_next(s);
	return 0;
}

const struct jsonv_field agent_session_create_fields[] = {
	{ "id", JV_STRING, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "cwd", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

/* The session's cwd from the body's "cwd" (relative to /workspace) into
 * cwd. 0 or -1 (400). */
static int session_cwd(const json_t *body, char *cwd, size_t cwdsz, struct sbx_err *e)
{
	const json_t *v = json_object_get(body, "cwd");
	const char *p;
	size_t n;
	int w;

	if (!v) {
		snprintf(cwd, cwdsz, "/workspace");
		return 0;
	}
	p = json_string_value(v);
	n = json_string_length(v);
	if (n == 0 || n > AGENT_EXEC_MAX_PATH || strlen(p) != n)
		return err_set(e, SBX_E_VALIDATION, "'cwd' must be a path of 1 to %d bytes",
			       AGENT_EXEC_MAX_PATH);
	w = p[0] == '/' ? snprintf(cwd, cwdsz, "%s", p) : snprintf(cwd, cwdsz, "/workspace/%s", p);
	if (w < 0 || (size_t)w >= cwdsz)
		return err_set(e, SBX_E_VALIDATION, "'cwd' is too long");
	return 0;
}

int agent_session_create(struct agent_call *c, struct sbx_err *e)
{
	struct sess_box *b;
	struct sess *s;
	json_t *v, *env;
	char id[SESS_ID_MAX], cwd[AGENT_EXEC_MAX_PATH + 16];

	if ((v = json_object_get(c->body, "id"))) {
		if (!ids_valid_name(json_string_value(v)))
			return err_set(e, SBX_E_VALIDATION, "'id' must be 1-64 of [A-Za-z0-9_.-]");
		snprintf(id, sizeof(id), "%s", json_string_value(v));
	} else if (sess_id_new(id, sizeof(id)) < 0) {
		return err_sys(e, errno, "session id");
	}
	if (session_cwd(c->body, cwd, sizeof(cwd), e) < 0)
		return -1;
	env = json_object_get(c->body, "env");
	if (env && agent_env_check(env, 0, e) < 0)
		return -1;
	b = box_get(c->a, c->sb, 1);
	if (!b)
		return err_sys(e, ENOMEM, "session");
	if (sess_find(b, id))
		return err_set(e, SBX_E_CONFLICT, "session '%s' exists", id);
	s = sess_new(b, id, cwd, env, e);
	if (!s)
		return -1;
	if ((env && !s->env && json_object_size(env)) || shell_spawn(s, e) < 0) {
		if (!e->code)
			err_sys(e, ENOMEM, "session env");
		box_unlink_sess(s);
		if (s->handle > 0)
			s->removed = 1; /* freed when the killed shell is reported */
		else
			sess_free(s);
		return -1;
	}
	if (!agent_call_offer(c->r, AGENT_SESSION_RESULT,
				&(struct agent_session_result){ .op = AGENT_SESSION_CREATED, .id = id }))
		httpd_reply_json(c->r, 201, json_pack("{s:s}", "id", id));
	return 0;
}

int agent_session_list(struct agent_call *c, struct sbx_err *e)
{
	struct sess_box *b = box_get(c->a, c->sb, 0);
	struct agent_session_result res = { .op = AGENT_SESSION_LISTED };
	auto_free const char **ids = NULL;
	json_t *arr;

	for (struct sess *s = b ? b->list : NULL; s; s = s->next)
		res.nids++;
	if (!(ids = calloc(res.nids + 1, sizeof(*ids))))
		return err_sys(e, ENOMEM, "session list");
	res.nids = 0;
	for (struct sess *s = b ? b->list : NULL; s; s = s->next)
		ids[res.nids++] = s->id;
	res.ids = ids;
	if (agent_call_offer(c->r, AGENT_SESSION_RESULT, &res))
		return 0;
	arr = json_array();
	for (struct sess *s = b ? b->list : NULL; arr && s; s = s->next) {
		char created[32];
		util_iso8601(s->created_at, created);
		json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:b}", "id", s->id, "cwd", s->cwd,
						     "createdAt", created, "busy", s->cur != NULL));
	}
	httpd_reply_json(c->r, 200, arr ? json_pack("{s:o}", "sessions", arr) : NULL);
	return 0;
}

int agent_session_delete(struct agent_call *c, struct sbx_err *e)
{
	const char *sid = agent_call_param(c, 1);
	struct sess_box *b;
	struct sess *s;
	struct rt_sandbox *rsb;

	if (!ids_valid_name(sid))
		return err_set(e, SBX_E_VALIDATION, "invalid session id");
	b = box_get(c->a, c->sb, 0);
	s = sess_find(b, sid);
	if (!s)
		return err_set(e, SBX_E_SESSION_NOT_FOUND, "session '%s' not found", sid);
	rsb = agent_sb_container(b->sb);
	box_unlink_sess(s);
	s->removed = 1;
	kill_left(s, rsb);
	if (s->handle > 0 && rsb && rt_signal(rsb, s->handle, SIGKILL, 1) == 0) {
		/* shell_exited answers the commands and frees s. */
		s->killing = 0;
	} else {
		if (s->handle > 0 && rsb)
			rt_detach(rsb, s->handle);
		s->handle = 0;
		if (s->cur) {
			struct sess_cmd *cur = s->cur;
			s->cur = NULL;
			end_cmd_error(cur, SBX_E_SESSION_TERMINATED, "the session was deleted", NULL);
		}
		fail_queue(s, NULL, SBX_E_SESSION_TERMINATED, "the session was deleted");
		sess_free(s);
	}
	log_info("session '%s' of '%s' deleted", sid, c->sb->key);
	if (!agent_call_offer(c->r, AGENT_SESSION_RESULT,
				&(struct agent_session_result){ .op = AGENT_SESSION_DELETED, .id = sid }))
		httpd_reply_empty(c->r, 204);
	return 0;
}
