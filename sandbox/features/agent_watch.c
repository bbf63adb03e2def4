/*
 * agent_watch.c — GET /v1/sandboxes/{id}/watch (agent_watch.h).
 *
 * The way in is the Files API's (files_worker.h): a helper process that
 * joined the sandbox's cgroups, mount and user namespaces as its root
 * creates the inotify instance there and keeps it. It resolves every
 * directory with openat2(RESOLVE_IN_ROOT) from the sandbox's root, so the
 * kernel applies the sandbox's own view and permissions; its inotify
 * watches count against the sandbox's user namespace (the kernel's
 * per-user watch limit is per namespace) and its memory against the
 * sandbox's cgroup. The helper does the inotify work itself — coalescing,
 * adding the directories created later, pairing moves — and streams the
 * finished event text over its channel as FW_STREAM records; the agent
 * only relays bounded records to the client (FW_EVENTS).
 *
 * Passing the inotify fd back to the agent with SCM_RIGHTS was the other
 * way: it saves a process, but every directory created later must be
 * resolved and added inside the sandbox (inotify_add_watch takes a path
 * resolved in the caller's namespaces, with the caller's rights: the
 * agent's are the host root's), so a helper would be needed for each of
 * them anyway, and the agent would carry the event queue of a burst.
 *
 * Bounds: at most FW_EVENTS_SANDBOX_MAX watches per sandbox (429), each
 * follows at most WATCH_DIRS_MAX directories (400 LIMIT_EXCEEDED, or an
 * `error` event when a later one would pass it), holds at most
 * WATCH_PENDING_MAX events of a window and WATCH_OUT_MAX bytes of text the
 * client has not taken; what does not fit is dropped and reported once as
 * an `overflow` event, as is the kernel's own queue overflow
 * (IN_Q_OVERFLOW).
 */
#include "agent_watch.h"
#include "agent_files.h"
#include "buf.h"
#include "files_worker.h"
#include "fspath.h"
#include "ids.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WATCH_MASK (IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | \
		    IN_DELETE_SELF | IN_MOVE_SELF | IN_EXCL_UNLINK | IN_ONLYDIR)
#define WATCH_FROM_MAX 32             /* moves waiting for their other half */
#define WATCH_READ_BUF (64 * 1024)
#define WATCH_MERGE_SPAN 32           /* pending events a new one is merged with */

struct watch_op {
	struct fspath fp;
	int recursive;
	int nexclude, ninclude;
	char exclude[WATCH_PATTERNS_MAX][256];
	char include[WATCH_PATTERNS_MAX][256];
};

int watch_match(const char (*pat)[256], int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (fnmatch(pat[i], name, FNM_PERIOD) == 0 || strcmp(pat[i], name) == 0)
			return 1;
	return 0;
}

int watch_patterns(const char *s, const char *what, char (*pat)[256], struct sbx_err *e)
{
	int n = 0;

	while (s && *s) {
		size_t len = strcspn(s, ",");

		if (len) {
			if (n == WATCH_PATTERNS_MAX)
				return err_set(e, SBX_E_VALIDATION, "'%s' has more than %d patterns", what,
					       WATCH_PATTERNS_MAX);
			if (len > 255 || memchr(s, '/', len))
				return err_set(e, SBX_E_VALIDATION,
					       "a pattern of '%s' must be 1-255 bytes without '/'", what);
			memcpy(pat[n], s, len);
			pat[n][len] = '\0';
			n++;
		}
		s += len + (s[len] == ',');
	}
	return n;
}

/* --- the helper --- */

struct wdir {
	int wd;
	int depth;
	char *path;                /* absolute in the sandbox; NULL: removed */
};

struct pev {
	char type;                 /* 'c'reate, 'm'odify, 'd'elete, 'v' move */
	int dir;
	char *path;                /* 'v': the target */
	char *from;                /* 'v' */
};

struct wfrom {
	uint32_t cookie;
	int dir;
	char *path;
};

struct wstate {
	const struct watch_op *o;
	const struct fw_env *env;
	int ifd;
	int root_wd;
	struct wdir *dirs;         /* sorted by wd (the kernel hands them out rising) */
	size_t ndirs, cap, live;
	struct pev pend[WATCH_PENDING_MAX];
	size_t npend;
	int64_t window_end;
	struct wfrom from[WATCH_FROM_MAX];
	size_t nfrom;
	int overflow;              /* events were lost: report once */
	struct buf out;            /* event text not yet on the channel */
	size_t out_off;
	int64_t last_out;
	int done;                  /* 1: end after the text is out */
};

static struct wdir *dir_find(struct wstate *s, int wd)
{
	size_t lo = 0, hi = s->ndirs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (s->dirs[mid].wd == wd)
			return s->dirs[mid].path ? &s->dirs[mid] : NULL;
		if (s->dirs[mid].wd < wd)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Remember wd for path (a wd the kernel gave again takes the new path). */
static int dir_put(struct wstate *s, int wd, const char *path, int depth)
{
	struct wdir *d = dir_find(s, wd);
	char *p = strdup(path);
	size_t i;

	if (!p)
		return -1;
	if (d) {
		free(d->path);
		d->path = p;
		d->depth = depth;
		return 0;
	}
	if (s->ndirs == s->cap) {
		/* drop removed entries before growing */
		size_t k = 0;

		for (i = 0; i < s->ndirs; i++)
			if (s->dirs[i].path)
				s->dirs[k++] = s->dirs[i];
		s->ndirs = k;
	}
	if (s->ndirs == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		struct wdir *v = realloc(s->dirs, cap * sizeof(*v));

		if (!v) {
			free(p);
			return -1;
		}
		s->dirs = v;
		s->cap = cap;
	}
	for (i = s->ndirs; i > 0 && s->dirs[i - 1].wd > wd; i--)
		s->dirs[i] = s->dirs[i - 1];
	s->dirs[i] = (struct wdir){ wd, depth, p };
	s->ndirs++;
	s->live++;
	return 0;
}

static void dir_drop(struct wstate *s, struct wdir *d)
{
	free(d->path);
	d->path = NULL;
	s->live--;
}

/* "<dir>/<name>" into out (FSPATH_MAX + 16); -1 when too long. */
static int join(char *out, const char *dir, const char *name)
{
	int k = snprintf(out, FSPATH_MAX + 16, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/",
			 name);

	return k < 0 || k > FSPATH_MAX ? -1 : 0;
}

static int excluded(const struct wstate *s, const char *name)
{
	return watch_match(s->o->exclude, s->o->nexclude, name);
}

/* --- event text --- */

/* "key":"<v escaped>" into s->out; 0 or -1 (no room). */
static int out_json_str(struct wstate *s, const char *key, const char *v)
{
	return buf_printf(&s->out, "\"%s\":\"", key) < 0 ||
	       files_json_escape(&s->out, v, strlen(v)) < 0 || buf_adds(&s->out, "\"") < 0 ? -1 : 0;
}

/* One event into s->out, whole or not at all: 0, or -1 (dropped). */
static int out_event(struct wstate *s, const struct pev *p)
{
	static const char *const names[] = { ['c'] = "create", ['m'] = "modify",
					     ['d'] = "delete", ['v'] = "move" };
	size_t mark = s->out.len;
	int rc;

	if (s->out.len - s->out_off > WATCH_OUT_MAX)
		return -1;
	rc = buf_printf(&s->out, "event: %s\ndata: {", names[(unsigned char)p->type]) < 0 ||
	     out_json_str(s, "path", p->path) < 0 ||
	     (p->type == 'v' && (buf_adds(&s->out, ",") < 0 || out_json_str(s, "from", p->from) < 0 ||
				 buf_adds(&s->out, ",") < 0 || out_json_str(s, "to", p->path) < 0)) ||
	     buf_printf(&s->out, ",\"isDirectory\":%s}\n\n", p->dir ? "true" : "false") < 0;
	if (rc && s->out.data) {
		s->out.len = mark;
		s->out.data[mark] = '\0';
	}
	return rc ? -1 : 0;
}

static void pev_free(struct pev *p)
{
	free(p->path);
	free(p->from);
	p->path = p->from = NULL;
}

/* The window is over: its events as text, then an overflow note. */
static void flush(struct wstate *s)
{
	for (size_t i = 0; i < s->npend; i++) {
		if (out_event(s, &s->pend[i]) < 0)
			s->overflow = 1;
		pev_free(&s->pend[i]);
	}
	s->npend = 0;
	s->window_end = 0;
	if (s->overflow && s->out.len - s->out_off <= WATCH_OUT_MAX &&
	    buf_adds(&s->out, "event: overflow\ndata: {\"message\":\"events were lost "
			      "(too many at once, or the client read too slowly): list the "
			      "directory again\"}\n\n") == 0)
		s->overflow = 0;
}

/* Queue an event of the window (path and from are copied). */
static void queue(struct wstate *s, char type, int dir, const char *path, const char *from)
{
	struct pev *p;

	if (s->o->ninclude && !watch_match(s->o->include, s->o->ninclude, strrchr(path, '/') + 1))
		return;
	/* the last few events only: a burst must not cost a scan of the window each */
	for (size_t i = s->npend; i-- > 0 && i + WATCH_MERGE_SPAN >= s->npend;) {
		p = &s->pend[i];
		if (strcmp(p->path, path) != 0)
			continue;
		/* a modify of what the window created or modified already is that
		 * event; the same event twice is one */
		if ((type == 'm' && (p->type == 'c' || p->type == 'm')) ||
		    (type == p->type && type != 'v'))
			return;
		break;
	}
	if (s->npend == WATCH_PENDING_MAX)
		flush(s);
	p = &s->pend[s->npend];
	p->type = type;
	p->dir = dir;
	p->path = strdup(path);
	p->from = from ? strdup(from) : NULL;
	if (!p->path || (from && !p->from)) {
		pev_free(p);
		s->overflow = 1;
		return;
	}
	if (s->npend++ == 0)
		s->window_end = util_now_ms() + WATCH_COALESCE_MS;
}

/* End the stream with an `error` event (after what is queued). */
static void fail(struct wstate *s, const struct sbx_err *e)
{
	if (s->done)
		return;
	flush(s);
	buf_printf(&s->out, "event: error\ndata: {\"code\":\"%s\",", err_name(e->code));
	out_json_str(s, "message", e->msg);
	buf_adds(&s->out, "}\n\n");
	s->done = 1;
}

/* --- the tree --- */

/* Watch directory abs (depth below the root) and, when recursive, the
 * directories under it on the same filesystem; emit: queue a create for
 * each entry found (a directory made after the watch began may hold
 * entries made before its watch was added). 0, or -1 with e (the watch
 * cannot go on: too many directories, out of memory). A directory that is
 * gone or refused meanwhile is skipped. */
static int add_tree(struct wstate *s, const char *abs, int depth, int emit, struct sbx_err *e)
{
	auto_close int pfd = -1;
	struct stat dst;
	DIR *d;
	struct dirent *de;
	int wd, fd;

	pfd = files_open_in_root(s->env->root, strcmp(abs, "/") == 0 ? "." : abs + 1,
				 O_PATH | O_DIRECTORY | (depth ? O_NOFOLLOW : 0), 0);
	if (pfd < 0)
		return depth ? 0 : files_errno(e, errno, "watch", abs);
	if (s->live >= WATCH_DIRS_MAX)
		return err_set(e, SBX_E_LIMIT_EXCEEDED,
			       "more than %d directories to watch under '%s': watch a smaller tree or exclude some",
			       WATCH_DIRS_MAX, s->o->fp.abs);
	if (fchdir(pfd) < 0)
		return depth ? 0 : files_errno(e, errno, "watch", abs);
	wd = inotify_add_watch(s->ifd, ".", WATCH_MASK);
	if (wd < 0 && errno == ENOSPC)
		return err_set(e, SBX_E_LIMIT_EXCEEDED,
			       "the sandbox has no inotify watches left (fs.inotify.max_user_watches)");
	if (wd < 0)
		return depth ? 0 : files_errno(e, errno, "watch", abs);
	if (dir_put(s, wd, abs, depth) < 0)
		return err_sys(e, ENOMEM, "watch");
	if (depth == 0)
		s->root_wd = wd;
	if (!s->o->recursive && !emit)
		return 0;
	fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &dst) < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((de = readdir(d))) {
		char path[FSPATH_MAX + 16];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    excluded(s, de->d_name) || !ids_valid_utf8(de->d_name, strlen(de->d_name)) ||
		    join(path, abs, de->d_name) < 0 ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (emit)
			queue(s, 'c', S_ISDIR(st.st_mode), path, NULL);
		if (s->o->recursive && S_ISDIR(st.st_mode) && st.st_dev == dst.st_dev &&
		    depth < WATCH_DEPTH_MAX && add_tree(s, path, depth + 1, emit, e) < 0) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

/* Stop following the directories at and under prefix (moved out). */
static void drop_tree(struct wstate *s, const char *prefix)
{
	size_t n = strlen(prefix);

	for (size_t i = 0; i < s->ndirs; i++) {
		struct wdir *d = &s->dirs[i];

		if (d->path && strncmp(d->path, prefix, n) == 0 &&
		    (d->path[n] == '\0' || d->path[n] == '/')) {
			inotify_rm_watch(s->ifd, d->wd);
			dir_drop(s, d);
		}
	}
}

/* The directories at and under from are now under to. */
static void move_tree(struct wstate *s, const char *from, const char *to, int depth_delta)
{
	size_t n = strlen(from);

	for (size_t i = 0; i < s->ndirs; i++) {
		struct wdir *d = &s->dirs[i];
		char path[FSPATH_MAX + 16];
		char *p;

		if (!d->path || strncmp(d->path, from, n) != 0 ||
		    (d->path[n] != '\0' && d->path[n] != '/'))
			continue;
		if (snprintf(path, sizeof(path), "%s%s", to, d->path + n) > FSPATH_MAX ||
		    !(p = strdup(path))) {
			inotify_rm_watch(s->ifd, d->wd);
			dir_drop(s, d);
			continue;
		}
		free(d->path);
		d->path = p;
		d->depth += depth_delta;
	}
}

static int depth_of(const struct wstate *s, const char *path)
{
	int n = 0;

	for (const char *p = path + (strcmp(s->o->fp.rel, ".") == 0 ? 0 : strlen(s->o->fp.abs)); *p; p++)
		n += *p == '/';
	return n;
}

/* A move whose other half never came: out of (or into) the tree. */
static void unpaired_from(struct wstate *s, struct wfrom *f)
{
	queue(s, 'd', f->dir, f->path, NULL);
	if (f->dir)
		drop_tree(s, f->path);
	free(f->path);
	f->path = NULL;
}

static void on_event(struct wstate *s, const struct inotify_event *ev)
{
	char path[FSPATH_MAX + 16];
	struct wdir *d;
	struct sbx_err e;
	int dir = !!(ev->mask & IN_ISDIR);

	if (ev->mask & IN_Q_OVERFLOW) {
		s->overflow = 1;
		return;
	}
	if (!(d = dir_find(s, ev->wd)))
		return;
	if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
		if (ev->wd == s->root_wd) {
			err_set(&e, SBX_E_FILE_NOT_FOUND, "'%s' was deleted or moved", s->o->fp.abs);
			fail(s, &e);
		}
		if (ev->mask & IN_IGNORED)
			dir_drop(s, d);
		return;
	}
	if (!ev->len || excluded(s, ev->name) || !ids_valid_utf8(ev->name, strlen(ev->name)) ||
	    join(path, d->path, ev->name) < 0)
		return;
	if (ev->mask & IN_MOVED_FROM) {
		if (s->nfrom == WATCH_FROM_MAX)
			unpaired_from(s, &s->from[--s->nfrom]);
		s->from[s->nfrom] = (struct wfrom){ ev->cookie, dir, strdup(path) };
		if (s->from[s->nfrom].path)
			s->nfrom++;
		return;
	}
	if (ev->mask & IN_MOVED_TO) {
		for (size_t i = 0; i < s->nfrom; i++) {
			struct wfrom f = s->from[i];

			if (f.cookie != ev->cookie)
				continue;
			s->from[i] = s->from[--s->nfrom];
			queue(s, 'v', dir, path, f.path);
			if (dir)
				move_tree(s, f.path, path, depth_of(s, path) - depth_of(s, f.path));
			free(f.path);
			return;
		}
	}
	if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
		queue(s, 'c', dir, path, NULL);
		if (dir && s->o->recursive && d->depth < WATCH_DEPTH_MAX &&
		    add_tree(s, path, d->depth + 1, 1, &e) < 0)
			fail(s, &e);
	} else if (ev->mask & IN_MODIFY) {
		queue(s, 'm', dir, path, NULL);
	} else if (ev->mask & IN_DELETE) {
		queue(s, 'd', dir, path, NULL);
	}
}

/* Read what the kernel has; 0, or -1 when the inotify fd failed. */
static int read_events(struct wstate *s, char *rb)
{
	for (;;) {
		ssize_t n = read(s->ifd, rb, WATCH_READ_BUF);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return -1;
		for (ssize_t off = 0; off < n && !s->done;) {
			const struct inotify_event *ev = (const struct inotify_event *)(rb + off);

			on_event(s, ev);
			off += (ssize_t)(sizeof(*ev) + ev->len);
		}
	}
	while (s->nfrom)
		unpaired_from(s, &s->from[--s->nfrom]);
	return 0;
}

/* Put what fits of s->out on the channel. -1 when the agent is gone. */
static int send_out(struct wstate *s)
{
	while (s->out_off < s->out.len) {
		size_t n = s->out.len - s->out_off;

		if (n > FW_REC_MAX)
			n = FW_REC_MAX;
		if (fw_send(s->env->chan, 'D', s->out.data + s->out_off, n) < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -1;
			if (s->out_off >= s->out.len / 2) {   /* keep the room at the end */
				memmove(s->out.data, s->out.data + s->out_off, s->out.len - s->out_off + 1);
				s->out.len -= s->out_off;
				s->out_off = 0;
			}
			return 0;
		}
		s->out_off += n;
		s->last_out = util_now_ms();
	}
	buf_reset(&s->out);
	s->out_off = 0;
	return 0;
}

static int child_watch(void *arg, const struct fw_env *env)
{
	struct watch_op *o = arg;
	struct wstate *s = calloc(1, sizeof(*s));
	char *rb = malloc(WATCH_READ_BUF);
	struct sbx_err e;

	err_clear(&e);
	if (!s || !rb) {
		fw_send_err(env->chan, (err_sys(&e, ENOMEM, "watch"), &e));
		return 1;
	}
	s->o = o;
	s->env = env;
	s->root_wd = -1;
	/* the bound is WATCH_OUT_MAX, checked before each event: room for one more */
	buf_init(&s->out, WATCH_OUT_MAX + 2 * FSPATH_MAX + 1024);
	s->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (s->ifd < 0) {
		if (errno == EMFILE)
			err_set(&e, SBX_E_LIMIT_EXCEEDED,
				"the sandbox has no inotify instances left (fs.inotify.max_user_instances)");
		else
			err_sys(&e, errno, "inotify");
		fw_send_err(env->chan, &e);
		return 1;
	}
	if (add_tree(s, o->fp.abs, 0, 0, &e) < 0) {
		fw_send_err(env->chan, &e);
		return 1;
	}
	if (fw_send_head(env->chan, 200) < 0 || util_set_nonblock(env->chan) < 0)
		return 1;
	buf_printf(&s->out, "event: ready\ndata: {");
	out_json_str(s, "path", o->fp.abs);
	buf_printf(&s->out, ",\"recursive\":%s,\"directories\":%zu}\n\n",
		   o->recursive ? "true" : "false", s->live);
	for (;;) {
		struct pollfd pfd[2] = { { s->ifd, POLLIN, 0 }, { env->chan, 0, 0 } };
		int64_t now, wait = INT64_MAX;   /* ms; INT64_MAX: until the channel or inotify */

		if (send_out(s) < 0)
			return 0;
		if (s->done && s->out_off == s->out.len)
			break;
		now = util_now_ms();
		if (s->out_off < s->out.len)
			pfd[1].events = POLLOUT;    /* the client is behind: no keep-alive due */
		else
			wait = s->last_out + WATCH_KEEPALIVE_MS - now;
		if (s->npend && s->window_end - now < wait)
			wait = s->window_end - now;
		if (s->done)
			pfd[0].fd = -1;
		if (poll(pfd, 2, wait == INT64_MAX ? -1 : wait < 0 ? 0 : (int)wait) < 0 &&
		    errno != EINTR)
			return 1;
		if (pfd[1].revents & (POLLHUP | POLLERR))
			return 0;      /* the agent closed the channel: the client went away */
		if (!s->done && (pfd[0].revents & POLLIN) && read_events(s, rb) < 0) {
			err_sys(&e, errno, "inotify read");
			fail(s, &e);
		}
		now = util_now_ms();
		if ((s->npend && now >= s->window_end) || (!s->npend && s->overflow))
			flush(s);
		if (s->out_off == s->out.len && now - s->last_out >= WATCH_KEEPALIVE_MS)
			buf_adds(&s->out, ": keep-alive\n\n");
	}
	/* the end of a stream the helper ended itself (its `error` is out) */
	fcntl(env->chan, F_SETFL, fcntl(env->chan, F_GETFL) & ~O_NONBLOCK);
	fw_send(env->chan, 'E', NULL, 0);
	return 0;
}

/* --- the route --- */

int agent_watch_get(struct agent_call *c, struct sbx_err *e)
{
	struct watch_op o;
	struct fw_spec spec;
	const char *path = agent_call_query(c, "path");
	const char *rec = agent_call_query(c, "recursive");

	memset(&o, 0, sizeof(o));
	if (!path || !*path)
		path = "/" FSPATH_WORKSPACE;
	o.recursive = 1;
	if (fspath_parse(path, strlen(path), &o.fp, e) < 0 ||
	    (rec && files_query_bool(c, "recursive", &o.recursive, e) < 0))
		return -1;
	o.nexclude = watch_patterns(agent_call_query(c, "exclude"), "exclude", o.exclude, e);
	if (o.nexclude < 0)
		return -1;
	o.ninclude = watch_patterns(agent_call_query(c, "include"), "include", o.include, e);
	if (o.ninclude < 0)
		return -1;
	memset(&spec, 0, sizeof(spec));
	spec.mode = FW_STREAM;
	spec.flags = FW_EVENTS;
	spec.content_type = "text/event-stream";
	spec.fn = child_watch;
	spec.arg = &o;
	return fw_start(c->r, c->sb, &spec, e);
}
