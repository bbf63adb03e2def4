/*
 * agent_terminals.c — PTY terminals of a sandbox over WebSocket.
 *
 *   POST   …/terminals {command?|argv?, cwd?, env?, cols?, rows?, id?} -> 201 record
 *   GET    …/terminals                       -> {terminals:[record…]}
 *   DELETE …/terminals/{t}                   -> 204 (its tree is killed)
 *   GET    …/terminals/{t}/ws                -> 101, the WebSocket
 *   POST   …/terminals/{t}/ticket            -> 201 {ticket, expiresIn}
 *
 * Record: {id, pid, command (null: a login shell), cols, rows, status
 * (running|exited), exitCode, signal, createdAt, endedAt, viewers}.
 *
 * The pty is made in the sandbox's own devpts: the agent opens the
 * sandbox's /dev/pts/ptmx through its root (openat2 RESOLVE_IN_ROOT, and
 * checks it is a devpts ptmx), takes the peer with TIOCGPTPEER and gives
 * the peer to the sandbox's root; sbx-init makes it the controlling
 * terminal of the process's new session (init.c). The master never enters
 * the sandbox. No namespace is entered from outside.
 *
 * The WebSocket: binary frames are the pty's bytes both ways; text frames
 * are JSON control: from the client {"type":"resize","cols","rows"}; from
 * the server {"type":"ready"} (after the replay of the last TERM_RING
 * bytes), {"type":"exit","code","signal"?} when the process ended (then a
 * close frame), {"type":"error","message"}. The output is read while no
 * viewer is attached too (into the ring); a viewer more than VIEW_HIGH
 * bytes behind pauses the pty until it catches up. A terminal outlives
 * its viewers; a viewer keeps its sandbox awake (a live stream).
 */
#include "agent_terminals.h"
#include "agent_exec.h"
#include "agent_lifecycle.h"
#include "child_io.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "registry.h"
#include "rkeys.h"
#include "util.h"
#include "ws.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

#define TERM_ID_MAX 65
#define TERM_DIM_MAX 1000
#define TERM_INPUT_MAX (64 * 1024)    /* input queued for the pty; also a message's bound */
#define VIEW_HIGH (256 * 1024)        /* a viewer this far behind pauses the pty */
#define TERM_DRAIN_MAX (64 * 1024)    /* output read after the process exited */
#define TERM_SHELL "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l"

enum term_state { T_STARTING, T_RUNNING, T_EXITED };

struct term;

/* One WebSocket viewer. Lives as long as its connection: when the
 * terminal goes first, t is NULL and the connection is being closed. */
struct term_view {
	struct term_view *next;
	struct term *t;
	struct agent *a;
	struct ws_conn *ws;           /* NULL until the upgrade is done */
	struct agent_stream st;
	char *pending;                /* input waiting for room in the pty's queue */
	size_t npending;
};

struct term_box;

struct term {
	struct term *next;
	struct term_box *box;
	char id[TERM_ID_MAX];
	char *command;                /* NULL: the login shell */
	int64_t handle;
	pid_t pid;
	enum term_state state;
	struct rt_exit ex;
	int64_t created_at, ended_at;
	struct child_io *io;          /* the master as stdin and stdout, while it runs */
	int master;                   /* borrowed from io (ioctl) */
	int out_paused;               /* a viewer is behind */
	int cols, rows;
	char ring[TERM_RING];         /* the last output; start at head when full */
	size_t head, len;
	struct term_view *views;
	int nviews;
	struct httpd_req *start_req;
	struct httpd_req *cf_req;
};

/* The terminals of one container of a sandbox (the module's slot). */
struct term_box {
	struct agent *a;
	struct agent_sb *sb;
	struct term *list;            /* newest first */
	int count;
};

static void view_send_exit(struct term_view *v);
static void view_attach(struct term_view *v);

/* --- the ring ---------------------------------------------------------------- */

static void ring_add(struct term *t, const char *data, size_t n)
{
	if (n >= TERM_RING) {
		memcpy(t->ring, data + n - TERM_RING, TERM_RING);
		t->head = 0;
		t->len = TERM_RING;
		return;
	}
	for (size_t done = 0; done < n;) {
		size_t end = (t->head + t->len) % TERM_RING;
		size_t room = t->len < TERM_RING ? TERM_RING - end : 0;
		size_t k;

		if (t->len == TERM_RING) {   /* full: overwrite the oldest */
			end = t->head;
			room = TERM_RING - end;
		}
		k = n - done < room ? n - done : room;
		memcpy(t->ring + end, data + done, k);
		done += k;
		if (t->len == TERM_RING)
			t->head = (t->head + k) % TERM_RING;
		else if ((t->len += k) > TERM_RING)
			t->len = TERM_RING;
	}
}

/* --- records ----------------------------------------------------------------- */

/* "SIGKILL" for SIGKILL: the name of signal sig, written into out. */
static const char *sig_name(int sig, char out[24])
{
	const char *abbrev = sigabbrev_np(sig);

	util_xsnprintf(out, 24, "SIG%s", abbrev ? abbrev : "UNKNOWN");
	return out;
}

static json_t *term_json(const struct term *t)
{
	char created[32], ended[32], sig[24];
	int done = t->state == T_EXITED;

	util_iso8601(t->created_at, created);
	if (done)
		util_iso8601(t->ended_at, ended);
	return json_pack("{s:s, s:o, s:o, s:i, s:i, s:s, s:o, s:o, s:s, s:o, s:i}", "id", t->id,
			 "pid", t->pid > 0 ? json_integer(t->pid) : json_null(), "command",
			 t->command ? json_string(t->command) : json_null(), "cols", t->cols,
			 "rows", t->rows, "status", done ? "exited" : "running", "exitCode",
			 done ? json_integer(t->ex.exit_code) : json_null(), "signal",
			 done && t->ex.signal ? json_string(sig_name(t->ex.signal, sig)) : json_null(),
			 "createdAt", created, "endedAt", done ? json_string(ended) : json_null(),
			 "viewers", t->nviews);
}

/* End every viewer of t with code (their connections close by themselves). */
static void term_drop_views(struct term *t, int code, const char *reason)
{
	while (t->views) {
		struct term_view *v = t->views;

		t->views = v->next;
		v->next = NULL;
		v->t = NULL;
		if (v->ws)
			ws_conn_close(v->ws, code, reason);
	}
	t->nviews = 0;
}

static void term_close_io(struct term *t)
{
	child_io_free(t->io);
	t->io = NULL;
	t->master = -1;
}

/* Free t (unlinked by the caller): its tree is the runtime's no more. */
static void term_free(struct term *t)
{
	struct rt_sandbox *rsb = t->box ? agent_sb_container(t->box->sb) : NULL;

	if (rsb && t->handle > 0) {
		rt_kill(rsb, t->handle, SIGKILL, 0, NULL);
		rt_detach(rsb, t->handle);
	}
	term_drop_views(t, WS_CLOSE_GOING_AWAY, "terminal gone");
	term_close_io(t);
	/* requests still waiting for it to start */
	for (int i = 0; i < 2; i++) {
		struct httpd_req *r = i ? t->cf_req : t->start_req;
		struct sbx_err e;

		if (!r)
			continue;
		httpd_on_close(r, NULL, NULL);
		err_set(&e, SBX_E_TERMINAL_NOT_FOUND, "terminal '%s' was deleted while it started", t->id);
		agent_call_reply_err(r, &e);
	}
	free(t->command);
	free(t);
}

static void term_unlink(struct term *t)
{
	for (struct term **pp = &t->box->list; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			t->box->count--;
			return;
		}
}

static void term_container_gone(struct agent *a, struct agent_sb *sb)
{
	void **slot = agent_sb_slot(sb, &agent_term_module);
	struct term_box *b = *slot;

	if (!b)
		return;
	*slot = NULL;
	while (b->list) {
		struct term *t = b->list;

		b->list = t->next;
		t->handle = 0;     /* every process of the container is gone */
		t->box = NULL;
		term_free(t);
	}
	free(b);
}

const struct agent_module agent_term_module = { "terminals", term_container_gone };

static struct term_box *box_get(struct agent *a, struct agent_sb *sb, int create)
{
	void **slot = agent_sb_slot(sb, &agent_term_module);
	struct term_box *b = *slot;

	if (!b && create && (b = calloc(1, sizeof(*b)))) {
		b->a = a;
		b->sb = sb;
		*slot = b;
	}
	return b;
}

static struct term *term_find(struct term_box *b, const char *id)
{
	for (struct term *t = b ? b->list : NULL; t; t = t->next)
		if (strcmp(t->id, id) == 0)
			return t;
	return NULL;
}

/* --- the pty ----------------------------------------------------------------- */

/* Open a pty in the devpts of the sandbox whose root is root_fd: *master
 * for the agent, *peer (owned by uid, the sandbox's root) for the process;
 * both O_CLOEXEC, the size set. 0 or -1 with e. */
static int pty_open(int root_fd, uid_t uid, int cols, int rows, int *master, int *peer,
		    struct sbx_err *e)
{
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
	struct statfs sf;
	struct stat st;
	int unlock = 0;
	auto_close int m = -1;
	auto_close int p = -1;

	m = util_open_in_root(root_fd, "dev/pts/ptmx", O_RDWR | O_NOCTTY | O_NONBLOCK, 0,
			      RESOLVE_NO_SYMLINKS);
	if (m < 0)
		return err_sys(e, errno, "cannot open the sandbox's /dev/pts/ptmx");
	/* What the sandbox's root may have put there instead is refused. */
	if (fstatfs(m, &sf) < 0 || sf.f_type != DEVPTS_SUPER_MAGIC || fstat(m, &st) < 0 ||
	    !S_ISCHR(st.st_mode) || major(st.st_rdev) != 5 || minor(st.st_rdev) != 2)
		return err_set(e, SBX_E_INTERNAL, "the sandbox's /dev/pts/ptmx is not a pty multiplexer");
	if (ioctl(m, TIOCSPTLCK, &unlock) < 0)
		return err_sys(e, errno, "cannot unlock the pty");
	p = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (p < 0)
		return err_sys(e, errno, "cannot open the pty's peer");
	if (fchown(p, uid, uid) < 0 || fchmod(p, 0620) < 0)
		return err_sys(e, errno, "cannot hand the pty to the sandbox");
	if (ioctl(m, TIOCSWINSZ, &ws) < 0)
		return err_sys(e, errno, "cannot set the pty's size");
	*master = steal_fd(&m);
	*peer = steal_fd(&p);
	return 0;
}

/* --- output and input -------------------------------------------------------- */

static void term_send_all(struct term *t, const char *data, size_t n)
{
	for (struct term_view *v = t->views; v; v = v->next) {
		if (!v->ws)
			continue;
		ws_conn_send(v->ws, WS_OP_BINARY, data, n);
		if (ws_conn_queued(v->ws) > VIEW_HIGH && !t->out_paused && t->io) {
			t->out_paused = 1;
			child_io_pause(t->io, 1);
		}
	}
}

static void term_io_data(void *arg, int i, const char *data, size_t n)
{
	struct term *t = arg;

	ring_add(t, data, n);
	term_send_all(t, data, n);
}

/* The input queue was written out: take what viewers hold back. */
static void term_io_drained(void *arg)
{
	struct term *t = arg;

	for (struct term_view *v = t->views; v; v = v->next) {
		if (!v->pending || !t->io || child_io_room(t->io) < v->npending)
			continue;
		child_io_write(t->io, v->pending, v->npending);
		free(v->pending);
		v->pending = NULL;
		v->npending = 0;
		if (v->ws)
			ws_conn_pause(v->ws, 0);
	}
}

static const struct child_io_ops term_io_ops = { term_io_data, NULL, term_io_drained };

static int term_resize(struct term *t, int cols, int rows)
{
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };

	if (t->master < 0 || ioctl(t->master, TIOCSWINSZ, &ws) < 0)
		return -1;
	t->cols = cols;
	t->rows = rows;
	return 0;
}

int agent_term_control(const char *text, size_t n, int *cols, int *rows, struct sbx_err *e)
{
	json_t *j = jsonv_parse(text, n, e);
	json_t *c, *r;
	const char *type;
	int rc = -1;

	if (!j)
		return -1;
	type = json_string_value(json_object_get(j, "type"));
	if (!type) {
		err_set(e, SBX_E_VALIDATION, "a control message needs a string 'type'");
	} else if (strcmp(type, "resize") != 0) {
		rc = 0;
	} else {
		c = json_object_get(j, "cols");
		r = json_object_get(j, "rows");
		if (!json_is_integer(c) || !json_is_integer(r) || json_integer_value(c) < 1 ||
		    json_integer_value(c) > TERM_DIM_MAX || json_integer_value(r) < 1 ||
		    json_integer_value(r) > TERM_DIM_MAX) {
			err_set(e, SBX_E_VALIDATION, "'cols' and 'rows' must be integers 1-%d",
				TERM_DIM_MAX);
		} else {
			*cols = (int)json_integer_value(c);
			*rows = (int)json_integer_value(r);
			rc = 1;
		}
	}
	json_decref(j);
	return rc;
}

static void view_error(struct term_view *v, const char *msg)
{
	json_t *j = json_pack("{s:s, s:s}", "type", "error", "message", msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	if (s)
		ws_conn_send(v->ws, WS_OP_TEXT, s, strlen(s));
	free(s);
	json_decref(j);
}

static void view_message(void *arg, int op, const char *data, size_t n)
{
	struct term_view *v = arg;
	struct term *t = v->t;
	struct sbx_err e;
	int cols, rows, rc;

	if (!t)
		return;
	if (op == WS_OP_BINARY) {
		if (!t->io || t->state == T_EXITED || n == 0)
			return;
		if (child_io_room(t->io) >= n && !v->pending) {
			child_io_write(t->io, data, n);
			return;
		}
		/* the pty is behind: hold this message, read no more until it fits */
		v->pending = malloc(n);
		if (!v->pending)
			return;
		memcpy(v->pending, data, n);
		v->npending = n;
		ws_conn_pause(v->ws, 1);
		return;
	}
	rc = agent_term_control(data, n, &cols, &rows, &e);
	if (rc < 0)
		view_error(v, e.msg);
	else if (rc == 0)
		view_error(v, "unknown control message type");
	else if (t->state != T_EXITED && term_resize(t, cols, rows) < 0)
		view_error(v, "cannot resize the terminal");
}

static void view_unlink(struct term_view *v)
{
	struct term *t = v->t;

	if (!t)
		return;
	for (struct term_view **pp = &t->views; *pp; pp = &(*pp)->next)
		if (*pp == v) {
			*pp = v->next;
			t->nviews--;
			break;
		}
	v->t = NULL;
	/* a viewer that held the pty back no longer does */
	if (t->out_paused && t->io) {
		int behind = 0;
		for (struct term_view *o = t->views; o; o = o->next)
			behind |= o->ws && ws_conn_queued(o->ws) > VIEW_HIGH;
		if (!behind) {
			t->out_paused = 0;
			child_io_pause(t->io, 0);
		}
	}
}

static void view_closed(void *arg)
{
	struct term_view *v = arg;

	view_unlink(v);
	agent_sb_stream_end(v->a, &v->st);
	free(v->pending);
	free(v);
}

static void view_drained(void *arg)
{
	struct term_view *v = arg;
	struct term *t = v->t;

	if (!t || !t->out_paused || !t->io)
		return;
	for (struct term_view *o = t->views; o; o = o->next)
		if (o->ws && ws_conn_queued(o->ws) > VIEW_HIGH)
			return;
	t->out_paused = 0;
	child_io_pause(t->io, 0);
}

static const struct ws_conn_ops view_ops = { view_message, view_closed, view_drained };

static void view_send_exit(struct term_view *v)
{
	const struct term *t = v->t;
	json_t *j = json_pack("{s:s, s:i}", "type", "exit", "code", t->ex.exit_code);
	char *s, sig[24];

	if (j && t->ex.signal)
		json_object_set_new(j, "signal", json_string(sig_name(t->ex.signal, sig)));
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (s)
		ws_conn_send(v->ws, WS_OP_TEXT, s, strlen(s));
	free(s);
	json_decref(j);
	ws_conn_close(v->ws, WS_CLOSE_NORMAL, "exited");
}

/* The viewer's connection is up: replay, ready, and the exit if it ended. */
static void view_attach(struct term_view *v)
{
	struct term *t = v->t;
	static const char ready[] = "{\"type\":\"ready\"}";

	if (!t) {
		ws_conn_close(v->ws, WS_CLOSE_GOING_AWAY, "terminal gone");
		return;
	}
	if (t->len) {
		size_t first = TERM_RING - t->head < t->len ? TERM_RING - t->head : t->len;
		ws_conn_send(v->ws, WS_OP_BINARY, t->ring + t->head, first);
		if (first < t->len)
			ws_conn_send(v->ws, WS_OP_BINARY, t->ring, t->len - first);
	}
	ws_conn_send(v->ws, WS_OP_TEXT, ready, sizeof(ready) - 1);
	if (t->state == T_EXITED)
		view_send_exit(v);
}

static void view_upgraded(void *arg, struct httpd_upgrade *u, int fd, const char *extra,
			  size_t extra_len)
{
	struct term_view *v = arg;

	v->ws = ws_conn_new(v->a->base, u, fd, extra, extra_len, TERM_INPUT_MAX, &view_ops, v);
	if (!v->ws) {
		view_unlink(v);
		agent_sb_stream_end(v->a, &v->st);
		free(v);
		return;
	}
	view_attach(v);
}

/* The request ended without becoming a WebSocket (the client left first,
 * or the upgrade was refused): the viewer goes. */
static void view_req_closed(void *arg, int failed)
{
	struct term_view *v = arg;

	if (v->ws)
		return;
	view_unlink(v);
	agent_sb_stream_end(v->a, &v->st);
	free(v);
}

/* Answer r with the WebSocket handshake and make a viewer of t. 0 or -1
 * with e (r not answered). */
static int view_open(struct agent *a, struct agent_sb *sb, struct httpd_req *r, struct term *t,
		     struct sbx_err *e)
{
	const char *upgrade = httpd_header(r, "Upgrade");
	const char *version = httpd_header(r, "Sec-WebSocket-Version");
	char accept[WS_ACCEPT_LEN + 1];
	struct term_view *v;

	if (!upgrade || strcasecmp(upgrade, "websocket") != 0)
		return err_set(e, SBX_E_VALIDATION, "this route is a WebSocket: 'Upgrade: websocket' is required");
	if (!version || strcmp(version, "13") != 0)
		return err_set(e, SBX_E_VALIDATION, "Sec-WebSocket-Version must be 13");
	if (ws_accept_key(httpd_header(r, "Sec-WebSocket-Key"), accept) < 0)
		return err_set(e, SBX_E_VALIDATION, "Sec-WebSocket-Key must be the base64 of 16 bytes");
	if (t->nviews >= TERM_VIEWERS_MAX)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "terminal '%s' has %d viewers already", t->id,
			       TERM_VIEWERS_MAX);
	v = calloc(1, sizeof(*v));
	if (!v)
		return err_sys(e, ENOMEM, "viewer");
	v->a = a;
	v->t = t;
	v->next = t->views;
	t->views = v;
	t->nviews++;
	agent_sb_stream_begin(sb, &v->st);
	httpd_add_header(r, "Upgrade", "websocket");
	httpd_add_header(r, "Sec-WebSocket-Accept", accept);
	httpd_on_close(r, view_req_closed, v);
	httpd_reply_upgrade(r, view_upgraded, v);
	return 0;
}

/* --- the process ------------------------------------------------------------- */

static void reply_started(struct term *t)
{
	struct httpd_req *r = t->start_req;

	if (!r)
		return;
	t->start_req = NULL;
	httpd_on_close(r, NULL, NULL);
	httpd_reply_json(r, 201, term_json(t));
}

static void cf_attach(struct term *t);

static void term_started(void *arg, pid_t pid)
{
	struct term *t = arg;

	t->pid = pid;
	t->state = T_RUNNING;
	reply_started(t);
	cf_attach(t);
}

static void term_exited(void *arg, const struct rt_exit *ex)
{
	struct term *t = arg;

	t->ex = *ex;
	t->ended_at = util_wall_ms();
	t->state = T_EXITED;
	t->handle = ex->sandbox_gone ? 0 : t->handle;
	if (t->io)
		child_io_drain(t->io, 0, TERM_DRAIN_MAX);
	if (ex->start_errno) {
		char msg[256];
		int n = snprintf(msg, sizeof(msg), "sbx: cannot run the terminal's command: %s\r\n",
				 strerror(ex->start_errno));
		if (n > 0 && (size_t)n < sizeof(msg))
			term_io_data(t, 0, msg, (size_t)n);
	}
	term_close_io(t);
	reply_started(t);
	cf_attach(t);
	if (ex->sandbox_gone) {
		term_drop_views(t, WS_CLOSE_GOING_AWAY, "sandbox stopped");
		return;
	}
	for (struct term_view *v = t->views; v; v = v->next)
		if (v->ws)
			view_send_exit(v);
}

static void start_closed(void *arg, int failed)
{
	struct term *t = arg;

	t->start_req = NULL;
}

const struct jsonv_field agent_term_create_fields[] = {
	{ "command", JV_STRING, 0 },
	{ "argv", JV_ARRAY, 0 },
	{ "cwd", JV_STRING, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "cols", JV_INTEGER, 0 },
	{ "rows", JV_INTEGER, 0 },
	{ "id", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

static int dim(const json_t *body, const char *name, int def, int *out, struct sbx_err *e)
{
	const json_t *v = json_object_get(body, name);

	if (!v) {
		*out = def;
		return 0;
	}
	if (json_integer_value(v) < 1 || json_integer_value(v) > TERM_DIM_MAX)
		return err_set(e, SBX_E_VALIDATION, "'%s' must be 1-%d", name, TERM_DIM_MAX);
	*out = (int)json_integer_value(v);
	return 0;
}

/* Room for one more terminal of id in b: an exited one without viewers is
 * dropped (the oldest) when the sandbox has its most. 0 or -1 (409, 429). */
static int term_admit(struct term_box *b, const char *id, struct sbx_err *e)
{
	struct term *victim = NULL;

	if (term_find(b, id))
		return err_set(e, SBX_E_CONFLICT, "terminal '%s' exists", id);
	if (b->count < TERM_MAX)
		return 0;
	for (struct term *t = b->list; t; t = t->next)
		if (t->state == T_EXITED && !t->views && !t->cf_req)
			victim = t;   /* the list is newest first: the last one is the oldest */
	if (!victim)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "a sandbox has at most %d terminals", TERM_MAX);
	term_unlink(victim);
	term_free(victim);
	return 0;
}

/* Start a terminal of body (checked against the fields) with id in sb.
 * The new record (linked in b) or NULL with e. */
static struct term *term_start(struct agent *a, struct agent_sb *sb, json_t *body, const char *id,
			       struct sbx_err *e)
{
	struct term_box *b = box_get(a, sb, 1);
	struct agent_cmd cmd = { 0 };
	json_t *own = NULL, *term_env = NULL;
	char **env = NULL;
	struct rt_proc_spec ps;
	struct term *t = NULL;
	int cols, rows, master = -1, peer = -1, io[3];
	int shell = !json_object_get(body, "command") && !json_object_get(body, "argv");

	if (!b) {
		err_sys(e, ENOMEM, "terminal");
		return NULL;
	}
	if (dim(body, "cols", 80, &cols, e) < 0 || dim(body, "rows", 24, &rows, e) < 0 ||
	    term_admit(b, id, e) < 0)
		return NULL;
	if (shell) {
		/* no command: a login shell (the body's cwd and env still count) */
		own = json_deep_copy(body);
		if (!own || json_object_set_new(own, "command", json_string(TERM_SHELL)) < 0) {
			json_decref(own);
			err_sys(e, ENOMEM, "terminal");
			return NULL;
		}
		body = own;
	}
	if (agent_cmd_parse(body, &cmd, e) < 0)
		goto fail;
	term_env = json_pack("{s:s}", "TERM", "xterm-256color");
	if (term_env && cmd.env)
		json_object_update(term_env, (json_t *)cmd.env);
	env = term_env ? agent_env_merge(sb->base_env, term_env) : NULL;
	t = calloc(1, sizeof(*t));
	if (!t || !env) {
		err_sys(e, ENOMEM, "terminal");
		goto fail;
	}
	snprintf(t->id, sizeof(t->id), "%s", id);
	t->box = b;
	t->cols = cols;
	t->rows = rows;
	t->master = -1;
	t->created_at = util_wall_ms();
	if (!shell && cmd.command)
		t->command = strdup(cmd.command);
	else if (!shell && cmd.argv)
		t->command = strdup(cmd.argv[0]);
	if (pty_open(rt_root_fd(sb->rt), rt_host_uid(sb->rt), cols, rows, &master, &peer, e) < 0)
		goto fail;
	ps = (struct rt_proc_spec){ .argv = cmd.argv, .env = env, .cwd = cmd.cwd,
				    .stdin_fd = peer, .stdout_fd = peer, .stderr_fd = peer };
	/* rt_spawn takes the peer in every case */
	t->handle = rt_spawn(sb->rt, &ps, term_started, term_exited, t, e);
	if (t->handle < 0) {
		close(master);
		t->handle = 0;
		err_prefix(e, "cannot start the terminal");
		goto fail;
	}
	agent_env_free(env);
	agent_cmd_release(&cmd);
	json_decref(term_env);
	json_decref(own);
	io[0] = io[1] = master;
	io[2] = -1;
	t->master = master;
	t->next = b->list;
	b->list = t;
	b->count++;
	t->io = child_io_new(a->base, io, TERM_INPUT_MAX, &term_io_ops, t);
	if (!t->io) {
		t->master = -1;
		rt_signal(sb->rt, t->handle, SIGKILL, 1);
		err_sys(e, ENOMEM, "terminal pty");
		return NULL;
	}
	child_io_set_burst(t->io, 4);
	child_io_pause(t->io, 0);
	log_info("terminal '%s' of '%s' started", t->id, sb->key);
	return t;
fail:
	if (t)
		term_free(t);
	agent_env_free(env);
	agent_cmd_release(&cmd);
	json_decref(term_env);
	json_decref(own);
	return NULL;
}

/* --- handlers ---------------------------------------------------------------- */

int agent_term_create(struct agent_call *c, struct sbx_err *e)
{
	char id[TERM_ID_MAX];
	struct term *t;

	if (agent_new_id(c->body, "term", id, sizeof(id), e) < 0)
		return -1;
	t = term_start(c->a, c->sb, c->body, id, e);
	if (!t)
		return -1;
	if (t->state != T_STARTING) {
		httpd_reply_json(c->r, 201, term_json(t));
		return 0;
	}
	t->start_req = c->r;
	httpd_on_close(c->r, start_closed, t);
	httpd_defer(c->r);
	return 0;
}

int agent_term_list(struct agent_call *c, struct sbx_err *e)
{
	struct term_box *b = box_get(c->a, c->sb, 0);
	json_t *arr = json_array();

	(void)e;
	if (b && arr) {
		/* oldest first */
		for (int k = b->count; k > 0; k--) {
			struct term *t = b->list;
			for (int j = 1; j < k && t; j++)
				t = t->next;
			if (t)
				json_array_append_new(arr, term_json(t));
		}
	}
	httpd_reply_json(c->r, 200, arr ? json_pack("{s:o}", "terminals", arr) : NULL);
	return 0;
}

/* The terminal of the path (param 1) in c's sandbox. */
static struct term *path_term(struct agent_call *c, struct sbx_err *e)
{
	const char *ref = agent_call_param(c, 1);
	struct term *t;

	if (!ids_valid_name(ref)) {
		err_set(e, SBX_E_VALIDATION, "invalid terminal id");
		return NULL;
	}
	t = term_find(box_get(c->a, c->sb, 0), ref);
	if (!t)
		err_set(e, SBX_E_TERMINAL_NOT_FOUND, "terminal '%s' not found", ref);
	return t;
}

int agent_term_delete(struct agent_call *c, struct sbx_err *e)
{
	struct term *t = path_term(c, e);

	if (!t)
		return -1;
	term_unlink(t);
	term_free(t);
	httpd_reply_empty(c->r, 204);
	return 0;
}

int agent_term_ws(struct agent_call *c, struct sbx_err *e)
{
	struct term *t = path_term(c, e);

	if (!t)
		return -1;
	return view_open(c->a, c->sb, c->r, t, e);
}

/* --- tickets ----------------------------------------------------------------- */

struct ticket_req {
	struct httpd_req *r;
	char ticket[40];
};

static void ticket_closed(void *arg, int failed)
{
	struct ticket_req *q = arg;

	q->r = NULL;
}

static void ticket_reply(void *arg, struct redisReply *reply)
{
	struct ticket_req *q = arg;
	struct sbx_err e;

	if (q->r) {
		httpd_on_close(q->r, NULL, NULL);
		if (!reply || reply->type != REDIS_REPLY_STATUS) {
			err_set(&e, SBX_E_REDIS_UNAVAILABLE, "cannot store the ticket, retry");
			agent_call_reply_err(q->r, &e);
		} else {
			httpd_reply_json(q->r, 201, json_pack("{s:s, s:i}", "ticket", q->ticket,
							      "expiresIn", TERM_TICKET_TTL_S));
		}
	}
	free(q);
}

#define TICKET_SET_FMT(ttl) "SET %s %s EX " #ttl " NX"
#define TICKET_SET(ttl) TICKET_SET_FMT(ttl)

int agent_term_ticket(struct agent_call *c, struct sbx_err *e)
{
	struct term *t = path_term(c, e);
	struct ticket_req *q;
	unsigned char rnd[16];
	char value[AGENT_KEY_MAX + TERM_ID_MAX + 2], key[RKEYS_MAX];

	if (!t)
		return -1;
	if (snprintf(value, sizeof(value), "%s/%s/%s", c->sb->tenant, c->sb->id, t->id) >=
	    (int)sizeof(value))
		return err_set(e, SBX_E_INTERNAL, "ticket value too long");
	q = calloc(1, sizeof(*q));
	if (!q)
		return err_sys(e, ENOMEM, "ticket");
	if (util_random(rnd, sizeof(rnd)) < 0) {
		free(q);
		return err_sys(e, errno, "ticket");
	}
	memcpy(q->ticket, "tk_", 3);
	util_hex(rnd, sizeof(rnd), q->ticket + 3);
	rkeys_ticket(key, q->ticket);
	if (registry_command(c->a->reg, ticket_reply, q, TICKET_SET(TERM_TICKET_TTL_S), key, value) < 0) {
		free(q);
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "cannot store the ticket, retry");
	}
	q->r = c->r;
	httpd_on_close(c->r, ticket_closed, q);
	httpd_defer(c->r);
	return 0;
}

/* --- the Cloudflare SDK's PTY ------------------------------------------------ */

/* The compat request waits for its terminal to start: attach it now. */
static void cf_attach(struct term *t)
{
	struct httpd_req *r = t->cf_req;
	struct sbx_err e;

	if (!r)
		return;
	t->cf_req = NULL;
	httpd_on_close(r, NULL, NULL);
	if (view_open(t->box->a, t->box->sb, r, t, &e) < 0)
		agent_call_reply_err(r, &e);
}

static void cf_closed(void *arg, int failed)
{
	struct term *t = arg;

	t->cf_req = NULL;
}

int agent_term_cf_pty(struct agent_call *c, struct sbx_err *e)
{
	const char *session = agent_call_query(c, "sessionId");
	const char *shell = agent_call_query(c, "shell");
	const char *qc = agent_call_query(c, "cols"), *qr = agent_call_query(c, "rows");
	char id[TERM_ID_MAX];
	struct term *t;
	int64_t n;

	if (!session || !ids_valid_name(session) || strlen(session) + 4 >= sizeof(id))
		return err_set(e, SBX_E_VALIDATION, "sessionId must be 1-60 of [A-Za-z0-9_.-]");
	util_xsnprintf(id, sizeof(id), "pty-%s", session);
	t = term_find(box_get(c->a, c->sb, 0), id);
	if (!t || t->state == T_EXITED) {
		json_t *body = json_object();

		if (t) {
			term_unlink(t);
			term_free(t);
		}
		if (!body)
			return err_sys(e, ENOMEM, "terminal");
		if (qc && util_parse_i64(qc, 1, TERM_DIM_MAX, &n) == 0)
			json_object_set_new(body, "cols", json_integer(n));
		if (qr && util_parse_i64(qr, 1, TERM_DIM_MAX, &n) == 0)
			json_object_set_new(body, "rows", json_integer(n));
		if (shell && *shell)
			json_object_set_new(body, "argv", json_pack("[s, s]", shell, "-l"));
		t = term_start(c->a, c->sb, body, id, e);
		json_decref(body);
		if (!t)
			return -1;
	}
	if (t->state != T_STARTING)
		return view_open(c->a, c->sb, c->r, t, e);
	if (t->cf_req)
		return err_set(e, SBX_E_CONFLICT, "terminal '%s' is starting", id);
	t->cf_req = c->r;
	httpd_on_close(c->r, cf_closed, t);
	httpd_defer(c->r);
	return 0;
}
