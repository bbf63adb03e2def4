/*
 * agent_processes.c — background processes of a sandbox.
 *
 *   POST   …/processes {command|argv, cwd?, env?, id?, session?}  -> 201 record
 *          (session: start from that session's cwd and env, agent_sessions.h)
 *   GET    …/processes                                  -> {processes:[record…]}
 *   GET    …/processes/{p}                              -> record
 *   GET    …/processes/{p}/logs                         -> {stdout, stderr, truncated} | SSE
 *   POST   …/processes/{p}/stdin[?eof=1]                -> {written}
 *   DELETE …/processes/{p}?signal=TERM&graceMs=5000     -> the final record
 *   DELETE …/processes[?signal=KILL&graceMs=]           -> {killed: n}
 *   GET    …/processes/{p}/wait?log=|port=|(none)&timeoutMs=
 *
 * {p} is the process's id, or its pid inside the sandbox (the running one,
 * else the newest). Record: {id, pid, command, status (running|completed|
 * failed|killed), exitCode, startedAt, endedAt} (exitCode/endedAt null
 * while running).
 *
 * The agent always reads a process's stdout and stderr into a bounded log
 * per stream (PROC_LOG_MAX, the oldest bytes dropped), so a background
 * process never blocks on its output. Its stdin pipe stays open for
 * POST …/stdin (at most agent.proc_stdin_bytes queued; a POST that does
 * not fit waits for room, PROC_STDIN_WAITERS at most). Records live until
 * the container stops; at most PROC_MAX_FINISHED finished ones are kept
 * (the oldest dropped).
 *
 * Log memory is charged: the logs of a sandbox's records hold at most
 * agent.proc_logs_sandbox_bytes, those of the node at most
 * agent.proc_logs_node_bytes. Past either, the logs of the records that
 * finished first are freed (the record stays, "evicted"); when no finished
 * log is left to free, a running process's log stops growing and keeps
 * its last bytes in what it has (at least PLOG_MIN per stream).
 */
#include "agent_processes.h"
#include "agent_sessions.h"
#include "call.h"
#include "agent_exec.h"
#include "agent_sse.h"
#include "buf.h"
#include "child_io.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "port_probe.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROC_LOG_MAX (1024 * 1024)
#define PROC_MAX_FINISHED 256
#define PROC_MAX_RUNNING 256
#define PLOG_MIN (16 * 1024)
#define PROC_STDIN_WAITERS 4          /* POSTs of stdin waiting for room */
#define PROC_STDIN_WAIT_MS 10000      /* then 429 */
#define PROC_DRAIN_MAX (1024 * 1024)
#define PROC_WAIT_DEFAULT_MS 300000
#define PROC_WAIT_MAX_MS 3600000
#define PROC_GRACE_DEFAULT_MS 5000
#define PROC_GRACE_MAX_MS 60000
#define PROC_PORT_POLL_MS 100
#define PROC_NEEDLE_MAX 1024
#define PROC_ID_MAX 65
#define PROC_COMMAND_MAX 4096

enum proc_state { P_STARTING, P_RUNNING, P_EXITED };
enum wait_kind { W_LOG, W_PORT, W_EXIT, W_KILL };

/* A bounded log: when full, the oldest quarter (at least) is dropped. */
struct plog {
	char *data;
	size_t len, cap;
	uint64_t dropped;
};

struct proc;

struct proc_follow {
	struct proc_follow *next;
	struct proc *p;
	struct agent_exec *x;
};

struct proc_wait {
	struct proc_wait *next;
	struct proc *p;
	struct httpd_req *r;
	enum wait_kind kind;
	char needle[PROC_NEEDLE_MAX + 1];
	size_t nlen;
	int port;
	int64_t interval_ms;       /* between port checks */
	char *http;                /* HTTP mode: the path to GET, or NULL (TCP) */
	int status_min, status_max;
	struct port_probe *probe;  /* the HTTP check in flight */
	struct event *timer, *poll;
};

/* A POST …/stdin waiting for room in the queue (backpressure). */
struct proc_stdin {
	struct proc_stdin *next;
	struct proc *p;
	struct httpd_req *r;
	const char *data;         /* the request's body: valid while r is */
	size_t len;
	int eof;
	struct event *timer;
};

struct proc_box;

struct proc {
	struct proc *next;
	struct proc_box *box;
	struct proc *fin_prev, *fin_next;  /* finished with logs, oldest first */
	int on_fin;
	int evicted;              /* its logs were freed for memory */
	char id[PROC_ID_MAX];
	char *command;
	pid_t pid;
	int64_t handle;
	enum proc_state state;
	struct rt_exit ex;
	int64_t started_at, ended_at;
	struct plog log[2];
	struct child_io *io;      /* its pipes, while it runs */
	struct httpd_req *start_req;
	struct proc_follow *follows;
	struct proc_wait *waits;
	struct proc_stdin *stdin_waits;  /* oldest first */
	int nstdin_waits;
};

/* The processes of one container of a sandbox: made on first use, freed
 * by agent_proc_container_gone. */
struct proc_box {
	struct agent *a;
	struct agent_sb *sb;      /* borrowed: the box is freed before the entry */
	struct proc *list;        /* newest first */
	size_t log_bytes;         /* allocated by the logs of its records */
};

/* Log memory of the whole node, and the finished records holding some,
 * in the order they finished (the next to evict first). */
static size_t node_log_bytes;
static struct proc *fin_head, *fin_tail;

/* --- logs ---------------------------------------------------------------------- */

static void fin_unlink(struct proc *p)
{
	if (!p->on_fin)
		return;
	*(p->fin_prev ? &p->fin_prev->fin_next : &fin_head) = p->fin_next;
	*(p->fin_next ? &p->fin_next->fin_prev : &fin_tail) = p->fin_prev;
	p->fin_prev = p->fin_next = NULL;
	p->on_fin = 0;
}

static void fin_append(struct proc *p)
{
	if (p->on_fin)
		return;
	p->fin_prev = fin_tail;
	p->fin_next = NULL;
	*(fin_tail ? &fin_tail->fin_next : &fin_head) = p;
	fin_tail = p;
	p->on_fin = 1;
}

/* Change the charge of p's logs by delta bytes (may be negative). */
static void log_charge(struct proc *p, ssize_t delta)
{
	p->box->log_bytes = (size_t)((ssize_t)p->box->log_bytes + delta);
	node_log_bytes = (size_t)((ssize_t)node_log_bytes + delta);
}

/* Free p's logs (a finished record) and mark it evicted. */
static void plog_evict(struct proc *p)
{
	for (int i = 0; i < 2; i++) {
		struct plog *l = &p->log[i];

		log_charge(p, -(ssize_t)l->cap);
		l->dropped += l->len;
		free(l->data);
		l->data = NULL;
		l->len = l->cap = 0;
	}
	p->evicted = 1;
	fin_unlink(p);
}

/* Make room for n more log bytes of box b: evict the logs of finished
 * records, the first finished first (of this sandbox for its own bound,
 * of any for the node's). 0, or -1 when there is no room. */
static int log_reserve(struct proc_box *b, size_t n)
{
	const struct sbx_conf *conf = b->a->conf;
	size_t sb_max = (size_t)conf->agent.proc_logs_sandbox_bytes;
	size_t node_max = (size_t)conf->agent.proc_logs_node_bytes;

	while (b->log_bytes + n > sb_max) {
		struct proc *v = fin_head;

		while (v && v->box != b)
			v = v->fin_next;
		if (!v)
			return -1;
		plog_evict(v);
	}
	while (node_log_bytes + n > node_max) {
		if (!fin_head)
			return -1;
		plog_evict(fin_head);
	}
	return 0;
}

/* Append output to log i of p: when full, the oldest quarter (at least) is
 * dropped. The log grows up to PROC_LOG_MAX while the memory bounds allow
 * (log_reserve), else stays at the size it has (at least PLOG_MIN). */
static void plog_add(struct proc *p, int i, const char *data, size_t n)
{
	struct plog *l = &p->log[i];
	size_t want = l->len + n > PROC_LOG_MAX ? PROC_LOG_MAX : l->len + n;
	size_t max;

	if (want > l->cap) {
		size_t cap = l->cap ? l->cap : 4096;
		char *d;

		while (cap < want)
			cap *= 2;
		if (cap > PROC_LOG_MAX)
			cap = PROC_LOG_MAX;
		if (cap > PLOG_MIN && log_reserve(p->box, cap - l->cap) < 0)
			cap = l->cap > PLOG_MIN ? l->cap : PLOG_MIN;
		if (cap > l->cap) {
			d = realloc(l->data, cap);
			if (d) {
				log_charge(p, (ssize_t)(cap - l->cap));
				l->data = d;
				l->cap = cap;
			}
		}
	}
	max = l->cap;
	if (max == 0) {
		l->dropped += n;
		return;
	}
	if (n >= max) {
		l->dropped += l->len + (n - max);
		data += n - max;
		n = max;
		l->len = 0;
	}
	if (l->len + n > max) {
		size_t drop = l->len + n - max;
		if (drop < max / 4)
			drop = max / 4;
		if (drop > l->len)
			drop = l->len;
		memmove(l->data, l->data + drop, l->len - drop);
		l->len -= drop;
		l->dropped += drop;
	}
	memcpy(l->data + l->len, data, n);
	l->len += n;
}

/* A finished record's logs: give back what they do not use, and queue
 * them for eviction. */
static void plog_finish(struct proc *p)
{
	for (int i = 0; i < 2; i++) {
		struct plog *l = &p->log[i];

		if (l->cap > l->len) {
			char *d = l->len ? realloc(l->data, l->len) : NULL;

			if (d || !l->len) {
				if (!l->len)
					free(l->data);
				log_charge(p, -(ssize_t)(l->cap - l->len));
				l->data = d;
				l->cap = l->len;
			}
		}
	}
	if (p->log[0].cap || p->log[1].cap)
		fin_append(p);
}

/* The line of l around the match at off (without its newline); new ref. */
static json_t *plog_line(const struct plog *l, size_t off, size_t mlen)
{
	size_t a = off, b = off + mlen;

	while (a > 0 && l->data[a - 1] != '\n')
		a--;
	while (b < l->len && l->data[b] != '\n')
		b++;
	if (b - a > 64 * 1024) {
		a = off;
		b = off + mlen;
	}
	{
		struct buf fixed;
		json_t *v;
		buf_init(&fixed, (b - a) * 3 + 16);
		if (codec_utf8_fix(l->data + a, b - a, &fixed) < 0) {
			buf_release(&fixed);
			return NULL;
		}
		v = json_stringn_nocheck(fixed.data ? fixed.data : "", fixed.len);
		buf_release(&fixed);
		return v;
	}
}

/* Search needle in l from byte from on; offset or -1. */
static ssize_t plog_find(const struct plog *l, size_t from, const char *needle, size_t nlen)
{
	const char *m;

	if (!l->data || from >= l->len)
		return -1;
	m = memmem(l->data + from, l->len - from, needle, nlen);
	return m ? (ssize_t)(m - l->data) : -1;
}

static json_t *plog_text(const struct plog *l)
{
	struct buf fixed;
	json_t *v;

	buf_init(&fixed, l->len * 3 + 16);
	if (codec_utf8_fix(l->data ? l->data : "", l->len, &fixed) < 0) {
		buf_release(&fixed);
		return NULL;
	}
	v = json_stringn_nocheck(fixed.data ? fixed.data : "", fixed.len);
	buf_release(&fixed);
	return v;
}

/* --- records --------------------------------------------------------------- */

static const char *proc_status(const struct proc *p)
{
	if (p->state != P_EXITED)
		return "running";
	if (p->ex.start_errno)
		return "failed";
	if (p->ex.signal || p->ex.sandbox_gone)
		return "killed";
	return p->ex.exit_code == 0 ? "completed" : "failed";
}

static void proc_info(const struct proc *p, struct agent_proc_info *info)
{
	*info = (struct agent_proc_info){ .id = p->id, .command = p->command,
					  .status = proc_status(p), .pid = p->pid > 0 ? p->pid : 0,
					  .started_at = p->started_at, .ended_at = p->ended_at,
					  .exited = p->state == P_EXITED, .exit_code = p->ex.exit_code };
}

/* The native JSON of a record. */
static json_t *proc_info_json(const struct agent_proc_info *i)
{
	char started[32], ended[32];

	util_iso8601(i->started_at, started);
	util_iso8601(i->ended_at, ended);
	return json_pack("{s:s,s:o,s:s,s:s,s:o,s:s,s:o}", "id", i->id, "pid",
			 i->pid ? json_integer(i->pid) : json_null(), "command", i->command, "status",
			 i->status, "exitCode", i->exited ? json_integer(i->exit_code) : json_null(),
			 "startedAt", started, "endedAt", i->exited ? json_string(ended) : json_null());
}

/* Answer r with p's record (status): typed to a view, else its JSON. */
static void reply_proc(struct httpd_req *r, int status, const struct proc *p, enum agent_proc_op op)
{
	struct agent_proc_info info;
	struct agent_proc_result res = { .op = op, .procs = &info, .nprocs = 1 };

	proc_info(p, &info);
	if (!agent_call_offer(r, AGENT_PROC_RESULT, &res))
		httpd_reply_json(r, status, proc_info_json(&info));
}

static void free_ev(struct event **ev)
{
	if (*ev) {
		event_free(*ev);
		*ev = NULL;
	}
}

static void proc_close_io(struct proc *p)
{
	child_io_free(p->io);
	p->io = NULL;
}

static void proc_free(struct proc *p)
{
	struct rt_sandbox *rsb = p->box ? agent_sb_container(p->box->sb) : NULL;

	/* its tree may live on (and be killed): the runtime must not call back */
	if (rsb && p->handle > 0)
		rt_detach(rsb, p->handle);
	proc_close_io(p);
	fin_unlink(p);
	for (int i = 0; i < 2; i++) {
		if (p->box)
			log_charge(p, -(ssize_t)p->log[i].cap);
		free(p->log[i].data);
	}
	free(p->command);
	free(p);
}

static void box_free(struct proc_box *b)
{
	*agent_sb_slot(b->sb, &agent_proc_module) = NULL;
	while (b->list) {
		struct proc *p = b->list;
		b->list = p->next;
		proc_free(p);
	}
	free(b);
}

/* Drop the records of a gone container: rt_destroy reported every one of
 * its processes exited, which answered their start request, followers and
 * waiters, so nothing refers to them any more. */
static void proc_container_gone(struct agent *a, struct agent_sb *sb)
{
	struct proc_box *b = *agent_sb_slot(sb, &agent_proc_module);

	if (b)
		box_free(b);
}

const struct agent_module agent_proc_module = { "processes", proc_container_gone };

/* The processes of sb's running container (made when create), or NULL. */
static struct proc_box *box_get(struct agent *a, struct agent_sb *sb, int create)
{
	void **slot = agent_sb_slot(sb, &agent_proc_module);
	struct proc_box *b = *slot;

	if (!b && create && (b = calloc(1, sizeof(*b)))) {
		b->a = a;
		b->sb = sb;
		*slot = b;
	}
	return b;
}

/* Keep at most PROC_MAX_FINISHED finished records (drop the oldest). */
static void box_trim(struct proc_box *b)
{
	int finished = 0;
	struct proc **pp, **oldest = NULL;

	for (struct proc *p = b->list; p; p = p->next)
		finished += p->state == P_EXITED;
	while (finished > PROC_MAX_FINISHED) {
		for (pp = &b->list; *pp; pp = &(*pp)->next)
			if ((*pp)->state == P_EXITED && !(*pp)->follows && !(*pp)->waits &&
			    !(*pp)->start_req)
				oldest = pp;
		if (!oldest)
			return;
		{
			struct proc *p = *oldest;
			*oldest = p->next;
			proc_free(p);
		}
		oldest = NULL;
		finished--;
	}
}

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* By id, else by pid (the running one, else the newest). */
static struct proc *proc_lookup(struct proc_box *b, const char *ref)
{
	struct proc *byp = NULL;
	int64_t pid = -1;

	if (!b)
		return NULL;
	for (struct proc *p = b->list; p; p = p->next)
		if (strcmp(p->id, ref) == 0)
			return p;
	if (!all_digits(ref) || util_parse_i64(ref, 1, INT32_MAX, &pid) < 0)
		return NULL;
	for (struct proc *p = b->list; p; p = p->next) {
		if (p->pid != (pid_t)pid)
			continue;
		if (p->state != P_EXITED)
			return p;
		if (!byp)
			byp = p;
	}
	return byp;
}

/* --- waiters ----------------------------------------------------------------- */

static void wait_free(struct proc_wait *w)
{
	free_ev(&w->timer);
	free_ev(&w->poll);
	port_probe_cancel(w->probe);
	free(w->http);
	free(w);
}

static void wait_unlink(struct proc_wait *w)
{
	struct proc_wait **pp;

	for (pp = &w->p->waits; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
}

/* Answer a waiter (body stolen: the answer, or with the error e its
 * details) and free it. */
static void wait_answer(struct proc_wait *w, int status, json_t *body, const struct sbx_err *e)
{
	struct httpd_req *r = w->r;

	wait_unlink(w);
	httpd_on_close(r, NULL, NULL);
	if (e) {
		agent_call_reply_err_details(r, e, body);
		json_decref(body);
	} else {
		httpd_reply_json(r, status, body);
	}
	wait_free(w);
}

/* Answer r: port is ready (http_status: what its HTTP check got; 0 for
 * a TCP wait), typed to a view, else {port, status}. */
static void reply_port_ready(struct httpd_req *r, int port, int http_status)
{
	struct agent_proc_result res = { .op = AGENT_PROC_PORT_READY, .port = port,
					 .http_status = http_status };

	if (agent_call_offer(r, AGENT_PROC_RESULT, &res))
		return;
	if (http_status)
		httpd_reply_json(r, 200, json_pack("{s:i, s:i}", "port", port, "status", http_status));
	else
		httpd_reply_json(r, 200, json_pack("{s:i}", "port", port));
}

static void wait_answer_port(struct proc_wait *w, int http_status)
{
	struct httpd_req *r = w->r;

	wait_unlink(w);
	httpd_on_close(r, NULL, NULL);
	reply_port_ready(r, w->port, http_status);
	wait_free(w);
}

/* Answer a kill's waiter with the record as it is, and free it. */
static void wait_answer_killed(struct proc_wait *w)
{
	struct httpd_req *r = w->r;

	wait_unlink(w);
	httpd_on_close(r, NULL, NULL);
	reply_proc(r, 200, w->p, AGENT_PROC_KILLED);
	wait_free(w);
}

static void wait_closed(void *arg, int failed)
{
	struct proc_wait *w = arg;

	wait_unlink(w);
	wait_free(w);
}

/* 1 when something in the sandbox of init_pid listens on TCP port. */
static int port_listening(pid_t init_pid, int port)
{
	static const char *const files[] = { "tcp", "tcp6" };

	for (size_t f = 0; f < ARRAY_SIZE(files); f++) {
		char path[64], line[512];
		auto_fclose FILE *fp = NULL;

		if (snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)init_pid, files[f]) >=
		    (int)sizeof(path))
			continue;
		fp = fopen(path, "re");
		if (!fp)
			continue;
		while (fgets(line, sizeof(line), fp)) {
			char local[128], st[8];
			unsigned sl;
			const char *colon;
			unsigned long lport;
			char *end;

			if (sscanf(line, " %u: %127s %*s %7s", &sl, local, st) != 3)
				continue;
			if (strcmp(st, "0A") != 0)
				continue;
			colon = strrchr(local, ':');
			if (!colon)
				continue;
			errno = 0;
			lport = strtoul(colon + 1, &end, 16);
			if (errno == 0 && *end == '\0' && lport == (unsigned long)port)
				return 1;
		}
	}
	return 0;
}

static void wait_poll_again(struct proc_wait *w)
{
	struct timeval tv = { (time_t)(w->interval_ms / 1000),
			      (suseconds_t)((w->interval_ms % 1000) * 1000) };

	evtimer_add(w->poll, &tv);
}

/* The HTTP check of w answered status (0: no answer). */
static void wait_probe_done(void *arg, int status)
{
	struct proc_wait *w = arg;

	w->probe = NULL;
	if (status >= w->status_min && status <= w->status_max) {
		wait_answer_port(w, status);
		return;
	}
	wait_poll_again(w);
}

static void wait_poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proc_wait *w = arg;
	struct rt_sandbox *rsb = agent_sb_container(w->p->box->sb);

	if (rsb && w->http) {
		/* the check's own bound: the interval, at least a second */
		int tmo = w->interval_ms > 1000 ? (int)w->interval_ms : 1000;

		w->probe = port_probe_http(w->p->box->a->base, rt_netns_fd(rsb), w->port, w->http, tmo,
					   wait_probe_done, w);
		if (w->probe)
			return;
	} else if (rsb && port_listening(rt_init_pid(rsb), w->port)) {
		wait_answer_port(w, 0);
		return;
	}
	wait_poll_again(w);
}

static void wait_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proc_wait *w = arg;
	struct sbx_err e = { 0 };

	if (w->kind == W_KILL) {
		wait_answer_killed(w);
		return;
	}
	err_set(&e, SBX_E_PROCESS_READY_TIMEOUT, "process '%s' was not ready in time", w->p->id);
	wait_answer(w, 0, NULL, &e);
}

/* New output of stream i at [from, len) of its log: answer log waiters. */
static void waits_check_log(struct proc *p, int i, size_t from)
{
	struct proc_wait *w, *next;

	for (w = p->waits; w; w = next) {
		size_t start;
		ssize_t off;

		next = w->next;
		if (w->kind != W_LOG)
			continue;
		start = from > w->nlen ? from - w->nlen + 1 : 0;
		off = plog_find(&p->log[i], start, w->needle, w->nlen);
		if (off >= 0)
			wait_answer(w, 200,
				    json_pack("{s:o*}", "line",
					      plog_line(&p->log[i], (size_t)off, w->nlen)),
				    NULL);
	}
}

/* The error of a wait whose process exited first: 409
 * PROCESS_EXITED_BEFORE_READY into e, its details {exitCode} returned. */
static json_t *exited_before_ready(const struct proc *p, struct sbx_err *e)
{
	err_set(e, SBX_E_PROCESS_EXITED_BEFORE_READY, "process '%s' exited with code %d", p->id,
		p->ex.exit_code);
	return json_pack("{s:i}", "exitCode", p->ex.exit_code);
}

/* The process ended: answer every waiter. */
static void waits_exit(struct proc *p)
{
	struct sbx_err e;

	for (struct proc_wait *w = p->waits, *next; w; w = next) {
		next = w->next;
		switch (w->kind) {
		case W_EXIT:
			wait_answer(w, 200, json_pack("{s:i}", "exitCode", p->ex.exit_code), NULL);
			break;
		case W_KILL:
			/* answered when the whole tree is gone (proc_gone) */
			break;
		default: {
			json_t *details = exited_before_ready(p, &e);

			wait_answer(w, 0, details, &e);
			break;
		}
		}
	}
}

/* --- followers (SSE logs) ------------------------------------------------------ */

static void follow_cancel(void *arg, int timed_out)
{
	struct proc_follow *f = arg;
	struct proc_follow **pp;
	struct rt_exit ex = { 0 };

	for (pp = &f->p->follows; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	agent_exec_exited(f->x, &ex);
	free(f);
}

static const struct agent_exec_src follow_src = { NULL, follow_cancel };

/* --- the process's pipes ------------------------------------------------------ */

static void proc_take(struct proc *p, int i, const char *data, size_t n)
{
	size_t before;

	plog_add(p, i, data, n);
	before = p->log[i].len >= n ? p->log[i].len - n : 0;
	for (struct proc_follow *f = p->follows; f; f = f->next)
		agent_exec_output(f->x, i, data, n);
	waits_check_log(p, i, before);
}

static void proc_io_data(void *arg, int i, const char *data, size_t n)
{
	proc_take(arg, i, data, n);
}

/* --- stdin -------------------------------------------------------------------------- */

static void stdin_unlink(struct proc_stdin *w)
{
	struct proc_stdin **pp;

	for (pp = &w->p->stdin_waits; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			w->p->nstdin_waits--;
			break;
		}
	free_ev(&w->timer);
}

/* Answer a waiting stdin POST: written (e NULL) or the error e; free it. */
static void stdin_answer(struct proc_stdin *w, const struct sbx_err *e)
{
	stdin_unlink(w);
	httpd_on_close(w->r, NULL, NULL);
	if (e)
		agent_call_reply_err(w->r, e);
	else
		httpd_reply_json(w->r, 200, json_pack("{s:I}", "written", (json_int_t)w->len));
	free(w);
}

static void stdin_closed(void *arg, int failed)
{
	struct proc_stdin *w = arg;

	stdin_unlink(w);
	free(w);
}

static void stdin_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proc_stdin *w = arg;
	struct sbx_err e = { 0 };

	err_set(&e, SBX_E_QUOTA_EXCEEDED, "process '%s' does not read its stdin; retry later",
		w->p->id);
	stdin_answer(w, &e);
}

/* Queue data for p's stdin (then EOF when eof). 0, or -1 with errno
 * (E2BIG: no room now; EPIPE: stdin is closed). */
static int stdin_put(struct proc *p, const char *data, size_t len, int eof)
{
	if (!p->io) {
		errno = EPIPE;
		return -1;
	}
	if (child_io_write(p->io, data, len) < 0)
		return -1;
	if (eof)
		child_io_close_stdin(p->io, 0);
	return 0;
}

/* The queue is empty again (or stdin broke): admit the waiting POSTs in
 * order while they fit; answer them all when stdin is closed. */
static void stdin_admit(struct proc *p)
{
	struct sbx_err e = { 0 };

	while (p->stdin_waits) {
		struct proc_stdin *w = p->stdin_waits;

		if (stdin_put(p, w->data, w->len, w->eof) == 0) {
			stdin_answer(w, NULL);
			continue;
		}
		if (errno == E2BIG)
			return;
		err_set(&e, SBX_E_CONFLICT, "process '%s' %s", p->id,
			p->state == P_EXITED ? "has exited" : "has its stdin closed");
		stdin_answer(w, &e);
	}
}

static void proc_io_drained(void *arg)
{
	stdin_admit(arg);
}

static const struct child_io_ops proc_io_ops = { proc_io_data, NULL, proc_io_drained };


static void reply_started(struct proc *p)
{
	struct httpd_req *r = p->start_req;

	if (!r)
		return;
	p->start_req = NULL;
	httpd_on_close(r, NULL, NULL);
	reply_proc(r, 201, p, AGENT_PROC_STARTED);
}

static void start_closed(void *arg, int failed)
{
	struct proc *p = arg;

	p->start_req = NULL;
}

static void proc_started(void *arg, pid_t pid)
{
	struct proc *p = arg;

	p->pid = pid;
	p->state = P_RUNNING;
	reply_started(p);
}

static void proc_exited(void *arg, const struct rt_exit *ex)
{
	struct proc *p = arg;

	p->ex = *ex;
	p->ended_at = util_wall_ms();
	/* What it wrote before it ended is in the pipes now; a child that
	 * still holds them is not waited for. */
	if (p->io)
		child_io_drain(p->io, -1, PROC_DRAIN_MAX);
	if (ex->start_errno) {
		char msg[256];
		int n = snprintf(msg, sizeof(msg), "sbx: cannot run '%.64s': %s\n", p->command,
				 strerror(ex->start_errno));
		if (n > 0 && (size_t)n < sizeof(msg))
			proc_take(p, 1, msg, (size_t)n);
	}
	p->state = P_EXITED;
	proc_close_io(p);
	stdin_admit(p);   /* answers the waiting POSTs: exited */
	plog_finish(p);
	reply_started(p);
	while (p->follows) {
		struct proc_follow *f = p->follows;
		struct rt_exit fx = *ex;
		fx.start_errno = 0; /* its message is in the log already */
		p->follows = f->next;
		agent_exec_exited(f->x, &fx);
		free(f);
	}
	waits_exit(p);
	if (p->box)
		box_trim(p->box);
}

/* No process of p's tree is left (after a kill): answer the kills. */
static void proc_gone(void *arg)
{
	struct proc *p = arg;

	p->handle = 0;
	for (struct proc_wait *w = p->waits, *next; w; w = next) {
		next = w->next;
		if (w->kind == W_KILL)
			wait_answer_killed(w);
	}
}

/* Kill p's tree — also when p itself has exited and only its children are
 * left: sig to every process of it, SIGKILL to what is left after
 * grace_ms. 0, or -1 when nothing of it is left. */
static int proc_signal(struct proc *p, int sig, int64_t grace_ms)
{
	struct rt_sandbox *rsb = agent_sb_container(p->box->sb);

	if (!rsb || p->handle <= 0)
		return -1;
	if (rt_kill(rsb, p->handle, sig, grace_ms, proc_gone) < 0) {
		if (p->state == P_EXITED)
			p->handle = 0;  /* the tree is gone */
		return -1;
	}
	return 0;
}

/* --- handlers ------------------------------------------------------------------ */

/* The process named by the path (param 1) in c's sandbox. */
static struct proc *path_proc(struct agent_call *c, struct sbx_err *e)
{
	const char *ref = agent_call_param(c, 1);
	struct proc *p;

	if (!ids_valid_name(ref)) {
		err_set(e, SBX_E_VALIDATION, "invalid process id");
		return NULL;
	}
	p = proc_lookup(box_get(c->a, c->sb, 0), ref);
	if (!p)
		err_set(e, SBX_E_PROCESS_NOT_FOUND, "process '%s' not found", ref);
	return p;
}

const struct jsonv_field agent_proc_start_fields[] = {
	{ "command", JV_STRING, 0 },
	{ "argv", JV_ARRAY, 0 },
	{ "cwd", JV_STRING, 0 },
	{ "env", JV_OBJECT, 0 },
	{ "id", JV_STRING, 0 },
	{ "session", JV_STRING, 0 },
	{ NULL, 0, 0 },
};

/* The display text of a command: the command string, or argv joined. */
static char *command_text(const struct agent_cmd *c)
{
	struct buf b;

	buf_init(&b, PROC_COMMAND_MAX);
	if (c->command) {
		buf_add(&b, c->command, strnlen(c->command, PROC_COMMAND_MAX - 1));
	} else {
		for (size_t i = 0; c->argv[i]; i++)
			if ((i && buf_add(&b, " ", 1) < 0) || buf_adds(&b, c->argv[i]) < 0)
				break;
	}
	return buf_steal(&b, NULL);
}

/* Make room in b for a process id: refused while one of that id runs or
 * the sandbox runs its most; a finished record of that id is replaced.
 * 0 or -1 (409, 429). */
static int start_admit(struct proc_box *b, const char *id, struct sbx_err *e)
{
	struct proc *old;
	int running = 0;

	for (old = b->list; old; old = old->next) {
		running += old->state != P_EXITED;
		if (strcmp(old->id, id) == 0 && old->state != P_EXITED)
			return err_set(e, SBX_E_CONFLICT, "process '%s' is running", id);
	}
	if (running >= PROC_MAX_RUNNING)
		return err_set(e, SBX_E_QUOTA_EXCEEDED,
			       "a sandbox runs at most %d background processes", PROC_MAX_RUNNING);
	for (struct proc **pp = &b->list; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0 && !(*pp)->follows && !(*pp)->waits) {
			old = *pp;
			*pp = old->next;
			proc_free(old);
			break;
		}
	return 0;
}

/* Start cmd as process id in b and take c's request over (answered by
 * reply_started). 0 or -1 with e (c->r not answered). */
static int start_spawn(struct agent_call *c, struct proc_box *b, const char *id,
		       const struct agent_cmd *cmd, struct sbx_err *e)
{
	struct agent_sb *sb = c->sb;
	struct proc *p = calloc(1, sizeof(*p));
	char **env = agent_env_merge(sb->base_env, cmd->env);
	struct rt_proc_spec ps;
	int io[3];

	if (!p || !env || !(p->command = command_text(cmd))) {
		agent_env_free(env);
		if (p)
			proc_free(p);
		return err_sys(e, ENOMEM, "process");
	}
	snprintf(p->id, sizeof(p->id), "%s", id);
	p->started_at = util_wall_ms();
	p->box = b;
	ps = (struct rt_proc_spec){ .argv = cmd->argv, .env = env, .cwd = cmd->cwd };
	p->handle = agent_spawn_piped(sb->rt, &ps, io, proc_started, proc_exited, p, e);
	agent_env_free(env);
	if (p->handle < 0) {
		proc_free(p);
		err_prefix(e, "cannot start the process");
		return -1;
	}
	p->next = b->list;
	b->list = p;
	/* child_io takes the fds in every case */
	p->io = child_io_new(c->a->base, io, (size_t)c->a->conf->agent.proc_stdin_bytes,
			     &proc_io_ops, p);
	if (!p->io) {
		/* It runs already: kill it; the record shows it killed. */
		rt_signal(sb->rt, p->handle, SIGKILL, 1);
		return err_sys(e, ENOMEM, "process pipes");
	}
	child_io_set_burst(p->io, 8);
	child_io_pause(p->io, 0);
	p->start_req = c->r;
	httpd_on_close(c->r, start_closed, p);
	httpd_defer(c->r);
	log_info("process '%s' of '%s' started: %.80s", p->id, sb->key, p->command);
	return 0;
}

int agent_proc_start(struct agent_call *c, struct sbx_err *e)
{
	struct agent_cmd cmd = { 0 };
	struct buf script = { 0 };
	struct proc_box *b;
	const char *sid;
	char id[PROC_ID_MAX];
	int rc = -1;

	if (agent_cmd_parse(c->body, &cmd, e) < 0 || agent_new_id(c->body, "proc", id, sizeof(id), e) < 0)
		goto out;
	if ((sid = json_string_value(json_object_get(c->body, "session")))) {
		if (!ids_valid_name(sid)) {
			err_set(e, SBX_E_VALIDATION, "'session' must be 1-64 of [A-Za-z0-9_.-]");
			goto out;
		}
		if (agent_sess_process_cmd(c->a, c->sb, sid, &cmd, &script, e) < 0)
			goto out;
	}
	b = box_get(c->a, c->sb, 1);
	if (!b) {
		err_sys(e, ENOMEM, "process");
		goto out;
	}
	if (start_admit(b, id, e) == 0)
		rc = start_spawn(c, b, id, &cmd, e);
out:
	agent_cmd_release(&cmd);
	buf_release(&script);
	return rc;
}

int agent_proc_list(struct agent_call *c, struct sbx_err *e)
{
	struct proc_box *b = box_get(c->a, c->sb, 0);
	struct agent_proc_result res = { .op = AGENT_PROC_LISTED };
	auto_free struct agent_proc_info *infos = NULL;
	json_t *arr;
	size_t n = 0;

	for (struct proc *p = b ? b->list : NULL; p; p = p->next)
		n++;
	if (!(infos = calloc(n + 1, sizeof(*infos))))
		return err_sys(e, ENOMEM, "process list");
	/* Oldest first: the order they were started in (the list is newest first). */
	for (struct proc *p = b ? b->list : NULL; p; p = p->next)
		proc_info(p, &infos[--n]);
	res.procs = infos;
	for (struct proc *p = b ? b->list : NULL; p; p = p->next)
		res.nprocs++;
	if (agent_call_offer(c->r, AGENT_PROC_RESULT, &res))
		return 0;
	arr = json_array();
	for (size_t i = 0; arr && i < res.nprocs; i++)
		json_array_append_new(arr, proc_info_json(&infos[i]));
	httpd_reply_json(c->r, 200, arr ? json_pack("{s:o}", "processes", arr) : NULL);
	return 0;
}

int agent_proc_get(struct agent_call *c, struct sbx_err *e)
{
	struct proc *p = path_proc(c, e);

	if (!p)
		return -1;
	reply_proc(c->r, 200, p, AGENT_PROC_GOT);
	return 0;
}

int agent_proc_logs(struct agent_call *c, struct sbx_err *e)
{
	struct proc *p = path_proc(c, e);
	struct proc_follow *f;

	if (!p)
		return -1;
	if (!agent_call_sse(c)) {
		struct agent_proc_result res = {
			.op = AGENT_PROC_LOGS,
			.out = { p->log[0].data ? p->log[0].data : "", p->log[1].data ? p->log[1].data : "" },
			.out_len = { p->log[0].len, p->log[1].len },
			.truncated = p->log[0].dropped || p->log[1].dropped,
			.evicted = p->evicted,
		};

		if (agent_call_offer(c->r, AGENT_PROC_RESULT, &res))
			return 0;
		httpd_reply_json(c->r, 200,
				 json_pack("{s:o*,s:o*,s:b,s:b}", "stdout", plog_text(&p->log[0]), "stderr",
					   plog_text(&p->log[1]), "truncated",
					   p->log[0].dropped || p->log[1].dropped, "evicted", p->evicted));
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f || !(f->x = agent_exec_new(c->a, c->r, c->sb, 1, p->command, "/", &follow_src, f))) {
		free(f);
		return err_sys(e, ENOMEM, "log stream");
	}
	f->p = p;
	agent_exec_set_command(f->x, p->command);
	agent_exec_begin(f->x);
	agent_exec_started(f->x, p->pid);
	for (int i = 0; i < 2; i++)
		if (p->log[i].len)
			agent_exec_output(f->x, i, p->log[i].data, p->log[i].len);
	if (p->state == P_EXITED) {
		struct rt_exit ex = p->ex;
		ex.start_errno = 0; /* its message is in the log already */
		agent_exec_exited(f->x, &ex);
		free(f);
		return 0;
	}
	f->next = p->follows;
	p->follows = f;
	return 0;
}

static int truthy(const char *v)
{
	return v && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
}

int agent_proc_stdin(struct agent_call *c, struct sbx_err *e)
{
	struct proc *p = path_proc(c, e);
	const char *data, *eof = agent_call_query(c, "eof");
	struct timeval tv = { PROC_STDIN_WAIT_MS / 1000, (PROC_STDIN_WAIT_MS % 1000) * 1000 };
	struct proc_stdin *w, **pp;
	size_t len, max;

	if (!p)
		return -1;
	if (eof && !truthy(eof) && strcmp(eof, "0") != 0 && strcmp(eof, "false") != 0)
		return err_set(e, SBX_E_VALIDATION, "'eof' must be true or false");
	if (p->state == P_EXITED || !p->io || !child_io_stdin_open(p->io))
		return err_set(e, SBX_E_CONFLICT, "process '%s' %s", p->id,
			       p->state == P_EXITED ? "has exited" : "has its stdin closed");
	data = httpd_body(c->r, &len);
	max = (size_t)c->a->conf->agent.proc_stdin_bytes;
	if (len > max)
		return err_set(e, SBX_E_PAYLOAD_TOO_LARGE,
			       "stdin of process '%s' takes at most %zu bytes at once", p->id, max);
	/* in order: behind the POSTs that wait already */
	if (!p->stdin_waits && stdin_put(p, data, len, truthy(eof)) == 0) {
		httpd_reply_json(c->r, 200, json_pack("{s:I}", "written", (json_int_t)len));
		return 0;
	}
	if (p->nstdin_waits >= PROC_STDIN_WAITERS)
		return err_set(e, SBX_E_QUOTA_EXCEEDED, "process '%s' has too much stdin pending",
			       p->id);
	if (!(w = calloc(1, sizeof(*w))) ||
	    !(w->timer = evtimer_new(c->a->base, stdin_timeout_cb, w))) {
		free(w);
		return err_sys(e, ENOMEM, "stdin");
	}
	w->p = p;
	w->r = c->r;
	w->data = data;
	w->len = len;
	w->eof = truthy(eof);
	for (pp = &p->stdin_waits; *pp; pp = &(*pp)->next)
		;
	*pp = w;
	p->nstdin_waits++;
	evtimer_add(w->timer, &tv);
	httpd_on_close(c->r, stdin_closed, w);
	httpd_defer(c->r);
	return 0;
}

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{ "TERM", SIGTERM }, { "KILL", SIGKILL }, { "INT", SIGINT },   { "HUP", SIGHUP },
	{ "QUIT", SIGQUIT }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
};

/* signal and graceMs from the query. 0 or -1 (400). */
static int kill_args(const struct agent_call *c, int def_sig, int *sig, int64_t *grace,
		     struct sbx_err *e)
{
	const char *s = agent_call_query(c, "signal"), *g = agent_call_query(c, "graceMs");

	*sig = def_sig;
	*grace = PROC_GRACE_DEFAULT_MS;
	if (s) {
		const char *name = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
		*sig = 0;
		for (size_t i = 0; i < ARRAY_SIZE(signals); i++)
			if (strcmp(name, signals[i].name) == 0)
				*sig = signals[i].sig;
		if (!*sig)
			return err_set(e, SBX_E_VALIDATION,
				       "'signal' must be one of TERM KILL INT HUP QUIT USR1 USR2");
	}
	if (g && util_parse_i64(g, 0, PROC_GRACE_MAX_MS, grace) < 0)
		return err_set(e, SBX_E_VALIDATION, "'graceMs' must be 0 to %d", PROC_GRACE_MAX_MS);
	return 0;
}

static struct proc_wait *wait_new(struct agent *a, struct proc *p, struct httpd_req *r,
				  enum wait_kind kind, int64_t timeout_ms)
{
	struct proc_wait *w = calloc(1, sizeof(*w));
	struct timeval tv = { (time_t)(timeout_ms / 1000), (suseconds_t)((timeout_ms % 1000) * 1000) };

	if (!w)
		return NULL;
	w->p = p;
	w->r = r;
	w->kind = kind;
	w->timer = evtimer_new(a->base, wait_timeout_cb, w);
	if (!w->timer) {
		free(w);
		return NULL;
	}
	evtimer_add(w->timer, &tv);
	w->next = p->waits;
	p->waits = w;
	httpd_on_close(r, wait_closed, w);
	httpd_defer(r);
	return w;
}

int agent_proc_kill(struct agent_call *c, struct sbx_err *e)
{
	struct proc *p = path_proc(c, e);
	int sig;
	int64_t grace;

	if (!p || kill_args(c, SIGTERM, &sig, &grace, e) < 0)
		return -1;
	if (p->state == P_EXITED && proc_signal(p, sig, grace) < 0) {
		reply_proc(c->r, 200, p, AGENT_PROC_KILLED);
		return 0;
	}
	if (p->state != P_EXITED && proc_signal(p, sig, grace) < 0)
		return err_set(e, SBX_E_CONFLICT, "process '%s' cannot be signalled now", p->id);
	/* Answer with the final record once no process of its tree is left
	 * (the grace plus a margin at most: then with the record as it is). */
	if (!wait_new(c->a, p, c->r, W_KILL, (sig == SIGKILL ? 0 : grace) + 5000))
		return err_sys(e, ENOMEM, "kill");
	return 0;
}

int agent_proc_kill_all(struct agent_call *c, struct sbx_err *e)
{
	struct proc_box *b;
	int sig, n = 0;
	int64_t grace;

	if (kill_args(c, SIGKILL, &sig, &grace, e) < 0)
		return -1;
	b = box_get(c->a, c->sb, 0);
	for (struct proc *p = b ? b->list : NULL; p; p = p->next) {
		int running = p->state != P_EXITED;

		/* an exited one may have left children: they go too */
		if (proc_signal(p, sig, grace) == 0 && running)
			n++;
	}
	if (!agent_call_offer(c->r, AGENT_PROC_RESULT,
				&(struct agent_proc_result){ .op = AGENT_PROC_KILLED_ALL, .killed = n }))
		httpd_reply_json(c->r, 200, json_pack("{s:i}", "killed", n));
	return 0;
}

/* The HTTP mode of a port wait: http (the path), status ("200-399" or
 * "200"), intervalMs. */
struct wait_http {
	const char *path;
	int64_t status_min, status_max, interval_ms;
};

static int wait_http_args(const struct agent_call *c, int64_t port, struct wait_http *h,
			  struct sbx_err *e)
{
	const char *st = agent_call_query(c, "status"), *iv = agent_call_query(c, "intervalMs");
	char lo[8], *dash;

	h->path = agent_call_query(c, "http");
	h->status_min = 200;
	h->status_max = 399;
	h->interval_ms = PROC_PORT_POLL_MS;
	if ((h->path || st) && !port)
		return err_set(e, SBX_E_VALIDATION, "'http' and 'status' need 'port'");
	if (h->path && !port_probe_path_ok(h->path))
		return err_set(e, SBX_E_VALIDATION,
			       "'http' must be a path starting with '/' (printable, no spaces, at most %d bytes)",
			       PORT_PROBE_PATH_MAX);
	if (st && !h->path)
		return err_set(e, SBX_E_VALIDATION, "'status' needs 'http'");
	if (st) {
		dash = strchr(st, '-');
		if (snprintf(lo, sizeof(lo), "%.*s", dash ? (int)(dash - st) : (int)strlen(st), st) >=
			    (int)sizeof(lo) ||
		    util_parse_i64(lo, 100, 599, &h->status_min) < 0 ||
		    util_parse_i64(dash ? dash + 1 : lo, h->status_min, 599, &h->status_max) < 0)
			return err_set(e, SBX_E_VALIDATION,
				       "'status' must be a code or a range of codes (100-599), e.g. 200-399");
	}
	if (iv && util_parse_i64(iv, 10, 60000, &h->interval_ms) < 0)
		return err_set(e, SBX_E_VALIDATION, "'intervalMs' must be 10 to 60000");
	return 0;
}

/* The query of a wait: timeoutMs, and log (*needle, its length in *nlen)
 * or port (0: none). 0 or -1 (400). */
static int wait_args(const struct agent_call *c, int64_t *timeout, const char **needle,
		     size_t *nlen, int64_t *port, struct sbx_err *e)
{
	const char *port_q = agent_call_query(c, "port"), *tmo_q = agent_call_query(c, "timeoutMs");

	*needle = agent_call_query(c, "log");
	*timeout = PROC_WAIT_DEFAULT_MS;
	*nlen = 0;
	*port = 0;
	if (tmo_q && util_parse_i64(tmo_q, 1, PROC_WAIT_MAX_MS, timeout) < 0)
		return err_set(e, SBX_E_VALIDATION, "'timeoutMs' must be 1 to %d", PROC_WAIT_MAX_MS);
	if (*needle && port_q)
		return err_set(e, SBX_E_VALIDATION, "give 'log' or 'port', not both");
	if (*needle) {
		*nlen = strlen(*needle);
		if (*nlen == 0 || *nlen > PROC_NEEDLE_MAX)
			return err_set(e, SBX_E_VALIDATION, "'log' must be 1 to %d bytes",
				       PROC_NEEDLE_MAX);
	}
	if (port_q && util_parse_i64(port_q, 1, 65535, port) < 0)
		return err_set(e, SBX_E_VALIDATION, "'port' must be 1 to 65535");
	return 0;
}

/* Answer a wait that is met already (its log line, its port, or its exit
 * code): 1 answered, 0 not met, -1 with e (it exited before it was). */
static int wait_met(struct agent_call *c, struct proc *p, const char *needle, size_t nlen,
		    int64_t port, const char *http, struct sbx_err *e)
{
	struct rt_sandbox *rsb;
	struct sbx_err ee;
	json_t *body;

	for (int i = 0; needle && i < 2; i++) {
		ssize_t off = plog_find(&p->log[i], 0, needle, nlen);
		if (off >= 0) {
			httpd_reply_json(c->r, 200,
					 json_pack("{s:o*}", "line",
						   plog_line(&p->log[i], (size_t)off, nlen)));
			return 1;
		}
	}
	if (port && !http && (rsb = agent_sb_container(p->box->sb)) &&
	    port_listening(rt_init_pid(rsb), (int)port)) {
		reply_port_ready(c->r, (int)port, 0);
		return 1;
	}
	if (p->state != P_EXITED)
		return 0;
	if (!needle && !port) {
		httpd_reply_json(c->r, 200, json_pack("{s:i}", "exitCode", p->ex.exit_code));
		return 1;
	}
	body = exited_before_ready(p, &ee);
	agent_call_reply_err_details(c->r, &ee, body);
	json_decref(body);
	return 1;
}

int agent_proc_wait(struct agent_call *c, struct sbx_err *e)
{
	struct proc *p = path_proc(c, e);
	struct wait_http h;
	const char *needle;
	int64_t timeout, port;
	struct proc_wait *w;
	size_t nlen;
	int met;

	if (!p || wait_args(c, &timeout, &needle, &nlen, &port, e) < 0 ||
	    wait_http_args(c, port, &h, e) < 0)
		return -1;
	met = wait_met(c, p, needle, nlen, port, h.path, e);
	if (met != 0)
		return met > 0 ? 0 : -1;
	w = wait_new(c->a, p, c->r, needle ? W_LOG : port ? W_PORT : W_EXIT, timeout);
	if (!w)
		return err_sys(e, ENOMEM, "wait");
	if (needle) {
		memcpy(w->needle, needle, nlen + 1);
		w->nlen = nlen;
	}
	if (port) {
		w->port = (int)port;
		w->interval_ms = h.interval_ms;
		w->status_min = (int)h.status_min;
		w->status_max = (int)h.status_max;
		if (h.path && !(w->http = strdup(h.path))) {
			err_sys(e, ENOMEM, "wait");
			wait_answer(w, 0, NULL, e);
			return 0;
		}
		w->poll = evtimer_new(c->a->base, wait_poll_cb, w);
		/* TCP was checked already (wait_met); HTTP is checked now */
		if (w->poll && h.path)
			event_active(w->poll, EV_TIMEOUT, 0);
		else if (w->poll)
			wait_poll_again(w);
	}
	return 0;
}
