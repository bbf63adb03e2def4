/*
 * agent_exec.c — POST /v1/sandboxes/{id}/exec: run one command in a
 * sandbox and answer with JSON when it ends, or as an event stream while it
 * runs (Accept: text/event-stream). The answer machinery (struct
 * agent_exec, see agent_exec.h) also serves commands in sessions and the
 * log streams of background processes, whose output is pushed in by them.
 *
 * Output flows pipe -> agent -> client. In stream mode the agent reads a
 * pipe only while the pending stream buffer is below EXEC_SSE_SOFT_MAX, so
 * a slow reader blocks the process on its write (bounded memory). In JSON
 * mode each stream is kept up to agent.max_exec_output_bytes and drained
 * (and dropped) beyond it: its first EXEC_MEM_KEEP bytes in memory, the
 * rest spilled to an unlinked temp file under agent.state_dir/exec-spill
 * (all of the node's at most agent.exec_spill_node_bytes), and the answer
 * is streamed from there, escaped piece by piece, so the agent's memory
 * does not grow with the output. Only a view that rewrites the JSON (a
 * filter: the compat API) gets the answer as one JSON value.
 *
 * Lifetime: a struct agent_exec lives until both the request is over and
 * the process has exited (its on_exited callback ran, or the source called
 * agent_exec_exited / agent_exec_fail).
 */
#include "agent_exec.h"
#include "agent_files.h"
#include "agent_lifecycle.h"
#include "agent_sse.h"
#include "buf.h"
#include "child_io.h"
#include "ids.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXEC_SSE_SOFT_MAX (64 * 1024)      /* stop reading pipes above this */
#define EXEC_SSE_HARD_MAX (32 * 1024 * 1024)
#define EXEC_READ_CHUNK CHILD_IO_CHUNK
#define EXEC_KEEPALIVE_MS 15000
#define EXEC_DRAIN_GRACE_MS 250            /* after exit, wait this long for EOF */
#define EXEC_FINAL_DRAIN_MAX (1024 * 1024) /* then take at most this much more */
#define EXEC_MAX_ARGV 4096
#define EXEC_MAX_PATH AGENT_EXEC_MAX_PATH
#define EXEC_MEM_KEEP (64 * 1024)          /* JSON mode: in memory, then spilled */
#define EXEC_JSON_CHUNK (48 * 1024)        /* the streamed answer reads this much at a time */
#define EXEC_WHOLE_MAX (16 * 1024)         /* output up to this: the answer is sent whole */

struct exec_stream {
	struct agent_exec *x;
	const char *name;          /* "stdout" / "stderr" */
	struct buf cap;            /* JSON mode: the first bytes kept (EXEC_MEM_KEEP) */
	int spill_fd;              /* JSON mode: the rest kept, in an unlinked file; -1 none */
	uint64_t spilled;          /* bytes in spill_fd (counted in spill_node) */
	uint64_t kept_max;         /* agent.max_exec_output_bytes */
	int truncated;
	char carry[4];             /* stream mode: an incomplete UTF-8 tail */
	size_t ncarry;
};

struct agent_exec {
	struct agent *a;
	struct httpd_req *r;       /* NULL once the request is over */
	struct rt_sandbox *rsb;    /* NULL once the process has exited */
	char key[AGENT_KEY_MAX];
	char argv0[64];
	char cwd[128];             /* for messages only (may be cut) */
	int stream_mode;
	int spawning;
	int64_t handle;
	int64_t t0;
	int started, exited, finished, timed_out, oom_killed;
	struct rt_exit ex;
	struct exec_stream out[2];
	struct child_io *io;       /* the process's pipes (NULL when pushed, or over) */
	int draining;              /* the final bounded read after the exit */
	struct buf sse;            /* stream mode: bytes not yet taken by the client */
	size_t sse_off;
	int sse_end;               /* the terminal event is in sse */
	int paused;                /* pipe reading paused for backpressure */
	int64_t oom_before;
	struct event *timeout_ev, *keepalive_ev, *grace_ev;
	struct agent_stream live;  /* keeps the sandbox awake while the request lasts */
	const struct agent_exec_src *src; /* pushed output (sessions, logs), or NULL */
	void *src_arg;
	char *command;             /* named by the start event, or NULL */
	/* the streamed JSON answer: its fixed parts, the part being sent, where in it */
	char *jhead, *jmid, *jtail;
	int jpart;                 /* 0 head, 1 stdout, 2 mid, 3 stderr, 4 tail, 5 done */
	uint64_t joff;
	char jcarry[4];
	size_t njcarry;
	struct buf jout, jfix;     /* its escaped text; a chunk with U+FFFD in place */
	size_t jout_off;
	int failed;                /* answer with err (and err_details) instead */
	struct sbx_err err;
	json_t *err_details;
	int64_t counted_run;       /* a command of agent_exec_run: counted in that run (0: not) */
};

/* The commands of agent_exec_run running in one container, held to
 * agent.max_execs_per_sandbox: a count in the exec module's slot. */
struct exec_count {
	int running;
};

static void exec_container_gone(struct agent *a, struct agent_sb *sb)
{
	void **slot = agent_sb_slot(sb, &agent_exec_module);

	free(*slot);
	*slot = NULL;
}

const struct agent_module agent_exec_module = { "exec", exec_container_gone };

/* Count a command of sb's container in: 0, or -1 with e = QUOTA_EXCEEDED
 * at the cap. */
static int count_in(struct agent *a, struct agent_sb *sb, struct agent_exec *x, struct sbx_err *e)
{
	void **slot = agent_sb_slot(sb, &agent_exec_module);
	struct exec_count *n = *slot;

	if (!n && !(n = *slot = calloc(1, sizeof(*n))))
		return err_sys(e, ENOMEM, "exec");
	if (n->running >= a->conf->agent.max_execs_per_sandbox)
		return err_set(e, SBX_E_QUOTA_EXCEEDED,
			       "a sandbox runs at most %lld commands at once (agent.max_execs_per_sandbox); "
			       "wait for one to end", (long long)a->conf->agent.max_execs_per_sandbox);
	n->running++;
	x->counted_run = sb->run;
	return 0;
}

/* The command of x ended: count it out of its container (if that still runs). */
static void count_out(struct agent_exec *x)
{
	struct agent_sb *sb;
	struct exec_count *n;
	int64_t run = x->counted_run;

	if (!run)
		return;
	x->counted_run = 0;
	sb = agent_sb_find(x->a, x->key);
	if (!sb || sb->run != run || !sb->rt)
		return;
	n = *agent_sb_slot(sb, &agent_exec_module);
	if (n && n->running > 0)
		n->running--;
}

static void exec_check_done(struct agent_exec *x);

static uint64_t spill_node;   /* bytes in the spill files of all JSON execs */

/* Stop reading stream i of x (its pipe closed). */
static void stream_close(struct agent_exec *x, int i)
{
	if (x->io)
		child_io_close_output(x->io, i);
}

/* 1 while the process's output stream i is still open. */
static int stream_open(const struct agent_exec *x, int i)
{
	return x->io && child_io_output_open(x->io, i);
}

static void stdin_close(struct agent_exec *x)
{
	if (x->io)
		child_io_close_stdin(x->io, 1);
}

static void free_event(struct event **ev)
{
	if (*ev) {
		event_free(*ev);
		*ev = NULL;
	}
}

static void exec_free(struct agent_exec *x)
{
	for (int i = 0; i < 2; i++) {
		buf_release(&x->out[i].cap);
		if (x->out[i].spill_fd >= 0)
			close(x->out[i].spill_fd);
		spill_node -= x->out[i].spilled;
	}
	buf_release(&x->jout);
	buf_release(&x->jfix);
	free(x->jhead);
	free(x->jmid);
	free(x->jtail);
	child_io_free(x->io);
	free_event(&x->timeout_ev);
	free_event(&x->keepalive_ev);
	free_event(&x->grace_ev);
	buf_release(&x->sse);
	json_decref(x->err_details);
	free(x->command);
	count_out(x);
	agent_sb_stream_end(x->a, &x->live);
	free(x);
}

static size_t sse_pending(const struct agent_exec *x)
{
	return x->sse.len - x->sse_off;
}

static void sse_wake(struct agent_exec *x)
{
	if (x->r && x->stream_mode)
		httpd_stream_wake(x->r);
}

/* Offer a view the event (name, data or bytes): 1 when it framed it. */
static int sse_offer(struct agent_exec *x, const char *name, const json_t *data, const char *bytes,
		     size_t len)
{
	struct agent_exec_event ev = { name, data, bytes, len, &x->sse };

	return x->r && agent_call_offer(x->r, AGENT_EXEC_EVENT, &ev);
}

/* One output event of stream name (bytes p[0..n)). 0 or -1 (buffer full). */
static int sse_chunk(struct agent_exec *x, const char *name, const char *p, size_t n)
{
	if (sse_offer(x, name, NULL, p, n))
		return 0;
	return agent_sse_chunk(&x->sse, name, p, n);
}

static void sse_emit(struct agent_exec *x, const char *name, json_t *obj)
{
	char *text;

	if (obj && sse_offer(x, name, obj, NULL, 0)) {
		json_decref(obj);
		sse_wake(x);
		return;
	}
	text = obj ? jsonv_dump(obj) : NULL;
	json_decref(obj);
	if (!text || agent_sse_event(&x->sse, name, text) < 0)
		log_error("exec '%s': cannot queue the '%s' event", x->key, name);
	free(text);
	sse_wake(x);
}

/* Stream mode: frame bytes of one output stream as events, holding back a
 * trailing incomplete UTF-8 sequence for the next read (flush: send all). */
static void sse_output(struct exec_stream *s, const char *data, size_t n, int flush)
{
	struct agent_exec *x = s->x;
	char tmp[EXEC_READ_CHUNK + sizeof(s->carry)];
	const char *p = data;
	size_t len = n, send;

	if (s->ncarry) {
		if (s->ncarry + n > sizeof(tmp)) {
			if (sse_chunk(x, s->name, s->carry, s->ncarry) < 0)
				log_error("exec '%s': output dropped", x->key);
			s->ncarry = 0;
		} else {
			memcpy(tmp, s->carry, s->ncarry);
			memcpy(tmp + s->ncarry, data, n);
			p = tmp;
			len = s->ncarry + n;
			s->ncarry = 0;
		}
	}
	send = flush ? len : codec_utf8_complete_len(p, len);
	if (send > 0 && sse_chunk(x, s->name, p, send) < 0)
		log_error("exec '%s': output dropped (stream buffer full)", x->key);
	if (len > send) {
		memcpy(s->carry, p + send, len - send);
		s->ncarry = len - send;
	}
	sse_wake(x);
}

/* An unlinked file for the spilled output of x: -1 (logged) when there
 * is none to be had. */
static int spill_open(struct agent_exec *x)
{
	char dir[CONF_STR_MAX + 16], tmpl[CONF_STR_MAX + 32];
	int fd;

	util_xsnprintf(dir, sizeof(dir), "%s/exec-spill", x->a->conf->agent.state_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		log_warn("exec '%s': cannot create '%s': %s (output truncated)", x->key, dir,
			 strerror(errno));
		return -1;
	}
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		util_xsnprintf(tmpl, sizeof(tmpl), "%s/out-XXXXXX", dir);
		fd = mkostemp(tmpl, O_CLOEXEC);
		if (fd >= 0)
			unlink(tmpl);
	}
	if (fd < 0)
		log_warn("exec '%s': no spill file in '%s': %s (output truncated)", x->key, dir,
			 strerror(errno));
	return fd;
}

/* JSON mode: keep n more bytes of s, up to its bound (memory first, then
 * the spill file); what does not fit is dropped and marks it truncated. */
static void json_output(struct exec_stream *s, const char *data, size_t n)
{
	struct agent_exec *x = s->x;
	uint64_t have = s->cap.len + s->spilled;
	size_t k;

	if (have + n > s->kept_max) {
		s->truncated = 1;
		n = (size_t)(s->kept_max - have);
	}
	k = s->spill_fd < 0 ? s->cap.max - s->cap.len : 0;
	if (k > n)
		k = n;
	if (k && buf_add(&s->cap, data, k) == 0) {
		data += k;
		n -= k;
	}
	if (n == 0)
		return;
	if (spill_node + n > (uint64_t)x->a->conf->agent.exec_spill_node_bytes) {
		s->truncated = 1;
		return;
	}
	if (s->spill_fd < 0 && (s->spill_fd = spill_open(x)) < 0) {
		s->spill_fd = -1;
		s->truncated = 1;
		s->kept_max = s->cap.len; /* nothing more is kept: no retry per read */
		return;
	}
	if (util_write_all(s->spill_fd, data, n) < 0) {
		log_warn("exec '%s': spill write: %s (output truncated)", x->key, strerror(errno));
		s->truncated = 1;
		s->kept_max = s->cap.len + s->spilled;
		return;
	}
	s->spilled += n;
	spill_node += n;
}

/* Up to n kept bytes of s from offset off: memory, then the spill file.
 * The count, or -1 (errno). */
static ssize_t stream_pread(const struct exec_stream *s, uint64_t off, char *out, size_t n)
{
	if (off < s->cap.len) {
		size_t k = s->cap.len - (size_t)off;

		if (k > n)
			k = n;
		memcpy(out, s->cap.data + off, k);
		return (ssize_t)k;
	}
	for (;;) {
		ssize_t r = pread(s->spill_fd, out, n, (off_t)(off - s->cap.len));

		if (r >= 0 || errno != EINTR)
			return r;
	}
}

static uint64_t stream_kept(const struct exec_stream *s)
{
	return s->cap.len + s->spilled;
}

static void pause_reading(struct agent_exec *x)
{
	x->paused = 1;
	if (x->src) {
		if (x->src->pause)
			x->src->pause(x->src_arg, 1);
		return;
	}
	if (x->io)
		child_io_pause(x->io, 1);
}

static void resume_reading(struct agent_exec *x)
{
	x->paused = 0;
	if (x->src) {
		if (x->src->pause)
			x->src->pause(x->src_arg, 0);
		return;
	}
	if (x->io)
		child_io_pause(x->io, 0);
}

/* Hand n bytes of stream s to the answer. */
static void stream_take(struct exec_stream *s, const char *data, size_t n)
{
	if (s->x->stream_mode)
		sse_output(s, data, n, 0);
	else
		json_output(s, data, n);
}

/* Output of the process's pipe i. Stream mode takes one chunk per wakeup
 * and pauses while the client lags; JSON mode drains a few. */
static void io_data(void *arg, int i, const char *data, size_t n)
{
	struct agent_exec *x = arg;

	stream_take(&x->out[i], data, n);
	if (x->stream_mode && !x->paused && sse_pending(x) >= EXEC_SSE_SOFT_MAX)
		pause_reading(x);
}

static void io_eof(void *arg, int i)
{
	struct agent_exec *x = arg;

	if (x->stream_mode && x->out[i].ncarry)
		sse_output(&x->out[i], "", 0, 1);
	if (!x->draining)
		exec_check_done(x);
}

static const struct child_io_ops exec_io_ops = { io_data, io_eof, NULL };

/* Called by httpd when the client can take more bytes. */
static ssize_t sse_read(void *arg, char *buf, size_t max)
{
	struct agent_exec *x = arg;
	ssize_t n = agent_sse_take(&x->sse, &x->sse_off, x->sse_end, buf, max);

	if (x->paused && sse_pending(x) < EXEC_SSE_SOFT_MAX / 2)
		resume_reading(x);
	return n;
}

static int64_t exit_code(const struct agent_exec *x)
{
	if (x->timed_out)
		return 124;
	if (x->ex.start_errno)
		return x->ex.exit_code ? x->ex.exit_code : 127;
	return x->ex.exit_code;
}

static void start_error_text(const struct agent_exec *x, char *out, size_t n)
{
	snprintf(out, n, "sbx: cannot run '%s' in '%s': %s\n", x->argv0, x->cwd,
		 strerror(x->ex.start_errno));
}

/* The next piece of the streamed JSON answer into x->jout: 0, or -1 on
 * a read error of a spill file. */
static int json_answer_step(struct agent_exec *x)
{
	char chunk[EXEC_JSON_CHUNK + sizeof(x->jcarry)];
	struct exec_stream *s;
	size_t len, send;
	ssize_t r;
	int rc;

	switch (x->jpart) {
	case 0:
	case 2:
	case 4:
		rc = buf_adds(&x->jout, x->jpart == 0 ? x->jhead : x->jpart == 2 ? x->jmid : x->jtail);
		x->jpart++;
		return rc;
	default:
		break;
	}
	s = &x->out[x->jpart == 1 ? 0 : 1];
	memcpy(chunk, x->jcarry, x->njcarry);
	r = x->joff < stream_kept(s) ? stream_pread(s, x->joff, chunk + x->njcarry, EXEC_JSON_CHUNK)
				     : 0;
	if (r < 0) {
		log_error("exec '%s': cannot read back its %s: %s", x->key, s->name, strerror(errno));
		return -1;
	}
	x->joff += (uint64_t)r;
	len = x->njcarry + (size_t)r;
	/* hold back a UTF-8 sequence cut by the chunk; at the end, send all */
	send = x->joff < stream_kept(s) ? codec_utf8_complete_len(chunk, len) : len;
	x->njcarry = len - send;
	memcpy(x->jcarry, chunk + send, x->njcarry);
	/* both buffers are kept across steps: no allocation per chunk */
	buf_reset(&x->jfix);
	rc = codec_utf8_fix(chunk, send, &x->jfix) < 0 ||
			     files_json_escape(&x->jout, x->jfix.data ? x->jfix.data : "", x->jfix.len) < 0
		     ? -1
		     : 0;
	if (x->joff >= stream_kept(s) && x->njcarry == 0) {
		x->jpart++;
		x->joff = 0;
	}
	return rc;
}

/* httpd's reader of the streamed JSON answer. */
static ssize_t json_answer_read(void *arg, char *buf, size_t max)
{
	struct agent_exec *x = arg;
	size_t n;

	while (x->jout.len == x->jout_off) {
		buf_reset(&x->jout);
		x->jout_off = 0;
		if (x->jpart == 5)
			return -1;
		if (json_answer_step(x) < 0)
			return -2;
	}
	n = x->jout.len - x->jout_off;
	if (n > max)
		n = max;
	memcpy(buf, x->jout.data + x->jout_off, n);
	x->jout_off += n;
	return (ssize_t)n;
}

int agent_exec_kept(const struct agent_exec *x, int i, struct buf *out, struct sbx_err *e)
{
	const struct exec_stream *s = &x->out[i];
	char chunk[16 * 1024];

	for (uint64_t off = 0; off < stream_kept(s);) {
		ssize_t n = stream_pread(s, off, chunk, sizeof(chunk));

		if (n <= 0)
			return err_sys(e, n < 0 ? errno : EIO, "read the output of '%s'", x->argv0);
		if (buf_add(out, chunk, (size_t)n) < 0)
			return err_set(e, SBX_E_PAYLOAD_TOO_LARGE, "the output of '%s' is too large",
				       x->argv0);
		off += (uint64_t)n;
	}
	return 0;
}

/* A short answer goes whole, with its length: the head and the body in
 * one write, where a streamed one takes a chunk (and a send) per part. */
static void reply_whole(struct agent_exec *x, const char *content_type)
{
	struct buf whole;
	char piece[4096];
	ssize_t n;

	/* one byte of output is at most 6 of JSON (an escaped control byte) */
	buf_init(&whole, EXEC_WHOLE_MAX * 6 + x->jout.max);
	while ((n = json_answer_read(x, piece, sizeof(piece))) > 0)
		if (buf_add(&whole, piece, (size_t)n) < 0)
			break;
	if (n == -1) {
		httpd_reply_bytes(x->r, 200, content_type, whole.data ? whole.data : "", whole.len);
	} else {
		struct sbx_err e;

		err_sys(&e, EIO, "read back the output of '%s'", x->argv0);
		agent_call_reply_err(x->r, &e);
	}
	buf_release(&whole);
}

void agent_exec_reply_text(struct agent_exec *x, const char *content_type, const char *head,
			   const char *mid, const char *tail)
{
	x->jhead = strdup(head);
	x->jmid = strdup(mid);
	x->jtail = strdup(tail);
	if (!x->jhead || !x->jmid || !x->jtail) {
		struct sbx_err e;

		err_sys(&e, ENOMEM, "exec answer");
		agent_call_reply_err(x->r, &e);
		return;
	}
	x->jpart = 0;
	/* room for the longest fixed part next to a chunk's text */
	x->jout.max += strlen(head) + strlen(mid) + strlen(tail);
	httpd_add_header(x->r, "Cache-Control", "no-store");
	if (stream_kept(&x->out[0]) + stream_kept(&x->out[1]) <= EXEC_WHOLE_MAX)
		reply_whole(x, content_type);
	else
		httpd_reply_stream(x->r, 200, content_type, json_answer_read, x);
}

/* Answer with the error of e (+ details): JSON error or the SSE error event. */
static void finish_error(struct agent_exec *x, const struct sbx_err *e, const json_t *details)
{
	if (x->stream_mode) {
		json_t *ev = json_pack("{s:s,s:s}", "code", err_name(e->code), "message",
				       err_public_message(e));
		if (ev && details)
			json_object_update(ev, (json_t *)details);
		sse_emit(x, "error", ev);
		x->sse_end = 1;
		sse_wake(x);
		return;
	}
	agent_call_reply_err_details(x->r, e, details);
}

/* The process has exited and its output is read: produce the answer. */
static void exec_finish(struct agent_exec *x)
{
	int64_t dur = util_now_ms() - x->t0;
	struct agent_exec_result res;
	struct agent_sb *sb;
	struct sbx_err e;
	char msg[256], head[96], tail[160];

	x->finished = 1;
	free_event(&x->keepalive_ev);
	free_event(&x->grace_ev);
	sb = agent_sb_find(x->a, x->key);
	if (sb)
		sb->last_active_at = util_wall_ms();
	if (!x->r)
		return;
	if (x->failed) {
		finish_error(x, &x->err, x->err_details);
		return;
	}
	if (!agent_stream_lease_held(x->a, &x->live)) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE,
			"this node lost its lease while the command ran; its result does not count");
		finish_error(x, &e, NULL);
		return;
	}
	if (x->ex.sandbox_gone) {
		if (x->a->shutting_down)
			err_set(&e, SBX_E_NODE_UNAVAILABLE, "the node is shutting down");
		else
			err_set(&e, SBX_E_NODE_UNAVAILABLE,
				"the sandbox was stopped (sleep, restart or delete) before the command finished");
		finish_error(x, &e, NULL);
		return;
	}
	if (x->ex.start_errno) {
		start_error_text(x, msg, sizeof(msg));
		if (x->stream_mode)
			sse_output(&x->out[1], msg, strlen(msg), 1);
		else
			json_output(&x->out[1], msg, strlen(msg));
	}
	if (x->stream_mode) {
		for (int i = 0; i < 2; i++)
			if (x->out[i].ncarry)
				sse_output(&x->out[i], "", 0, 1);
		sse_emit(x, "exit", json_pack("{s:I,s:I,s:b,s:b}", "exitCode", (json_int_t)exit_code(x),
					      "durationMs", (json_int_t)dur, "timedOut", x->timed_out,
					      "oomKilled", x->oom_killed));
		x->sse_end = 1;
		sse_wake(x);
		return;
	}
	res = (struct agent_exec_result){ .x = x, .exit_code = exit_code(x),
					  .timed_out = x->timed_out, .oom_killed = x->oom_killed,
					  .truncated = x->out[0].truncated || x->out[1].truncated,
					  .duration_ms = dur, .stderr_last = -1 };
	if (stream_kept(&x->out[1])) {
		char last;

		if (stream_pread(&x->out[1], stream_kept(&x->out[1]) - 1, &last, 1) == 1)
			res.stderr_last = (unsigned char)last;
	}
	if (agent_call_offer(x->r, AGENT_EXEC_RESULT, &res))
		return;
	util_xsnprintf(head, sizeof(head), "{\"exitCode\":%lld,\"success\":%s,\"stdout\":\"",
		       (long long)res.exit_code,
		       res.exit_code == 0 && !res.timed_out ? "true" : "false");
	util_xsnprintf(tail, sizeof(tail),
		       "\",\"durationMs\":%lld,\"timedOut\":%s,\"oomKilled\":%s,"
		       "\"truncated\":%s}",
		       (long long)dur, res.timed_out ? "true" : "false",
		       res.oom_killed ? "true" : "false", res.truncated ? "true" : "false");
	agent_exec_reply_text(x, "application/json", head, "\",\"stderr\":\"", tail);
}


static void grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent_exec *x = arg;

	/* Something (a background child) still holds the pipes: take what is
	 * there now, bounded, and end. */
	x->draining = 1;
	if (x->io)
		child_io_drain(x->io, -1, EXEC_FINAL_DRAIN_MAX);
	x->draining = 0;
	for (int i = 0; i < 2; i++) {
		if (x->stream_mode && x->out[i].ncarry)
			sse_output(&x->out[i], "", 0, 1);
		stream_close(x, i);
	}
	exec_check_done(x);
}

static void exec_check_done(struct agent_exec *x)
{
	if (x->finished || x->spawning || !x->exited)
		return;
	if (stream_open(x, 0) || stream_open(x, 1)) {
		if (!x->grace_ev) {
			struct timeval tv = { 0, EXEC_DRAIN_GRACE_MS * 1000 };
			x->grace_ev = evtimer_new(x->a->base, grace_cb, x);
			if (x->grace_ev)
				evtimer_add(x->grace_ev, &tv);
		}
		return;
	}
	exec_finish(x);
}

/* Start reading output (stream mode: after the start event, so that it
 * comes first). */
static void start_reading(struct agent_exec *x)
{
	if (x->spawning || x->paused || !x->r || !x->io)
		return;
	child_io_pause(x->io, 0);
}

void agent_exec_set_command(struct agent_exec *x, const char *command)
{
	free(x->command);
	x->command = command ? strdup(command) : NULL;
}

void agent_exec_started(struct agent_exec *x, pid_t pid)
{
	x->started = 1;
	if (x->stream_mode && x->r) {
		json_t *ev = json_pack("{s:i}", "pid", (int)pid);

		if (ev && x->command)
			json_object_set_new(ev, "command", json_string(x->command));
		sse_emit(x, "start", ev);
		start_reading(x);
	}
}

static void on_started(void *arg, pid_t pid)
{
	agent_exec_started(arg, pid);
}

void agent_exec_exited(struct agent_exec *x, const struct rt_exit *ex)
{
	x->exited = 1;
	x->ex = *ex;
	if (!ex->sandbox_gone && x->rsb && !x->src)
		x->oom_killed = rt_oom_kills(x->rsb) > x->oom_before;
	x->rsb = NULL;
	x->handle = 0;
	free_event(&x->timeout_ev);
	stdin_close(x);
	if (!x->r) {
		if (!x->spawning)
			exec_free(x);
		return;
	}
	start_reading(x);
	exec_check_done(x);
}

void agent_exec_fail(struct agent_exec *x, const struct sbx_err *e, json_t *details)
{
	struct rt_exit ex = { .exit_code = 1 };

	x->failed = 1;
	x->err = *e;
	json_decref(x->err_details);
	x->err_details = details;
	agent_exec_exited(x, &ex);
}

static void on_exited(void *arg, const struct rt_exit *ex)
{
	agent_exec_exited(arg, ex);
}

void agent_exec_output(struct agent_exec *x, int which, const char *data, size_t n)
{
	if (x->exited || !x->r || which < 0 || which > 1 || n == 0)
		return;
	/* Pushed chunks may be larger than one pipe read: frame them in pieces. */
	while (n > 0) {
		size_t k = n > EXEC_READ_CHUNK ? EXEC_READ_CHUNK : n;
		stream_take(&x->out[which], data, k);
		data += k;
		n -= k;
	}
	if (x->stream_mode && !x->paused && sse_pending(x) >= EXEC_SSE_SOFT_MAX)
		pause_reading(x);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent_exec *x = arg;

	if (x->exited)
		return;
	if (x->src) {
		x->timed_out = 1;
		x->src->cancel(x->src_arg, 1);
		return;
	}
	if (!x->rsb || x->handle <= 0)
		return;
	x->timed_out = 1;
	rt_signal(x->rsb, x->handle, SIGKILL, 1);
}

void agent_exec_arm_timeout(struct agent_exec *x, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

	if (ms <= 0 || x->exited)
		return;
	free_event(&x->timeout_ev);
	x->timeout_ev = evtimer_new(x->a->base, timeout_cb, x);
	if (x->timeout_ev)
		evtimer_add(x->timeout_ev, &tv);
}

static void keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent_exec *x = arg;

	if (buf_adds(&x->sse, ": keep-alive\n\n") == 0)
		sse_wake(x);
}

/* The request is over (answered, or the client went away). */
static void on_close(void *arg, int failed)
{
	struct agent_exec *x = arg;

	x->r = NULL;
	agent_sb_stream_end(x->a, &x->live);
	child_io_free(x->io);
	x->io = NULL;
	free_event(&x->keepalive_ev);
	free_event(&x->grace_ev);
	if (x->exited) {
		exec_free(x);
		return;
	}
	if (failed)
		log_info("exec '%s': client went away, stopping the command", x->key);
	if (x->src) {
		/* The source ends x (agent_exec_exited), maybe right here. */
		x->src->cancel(x->src_arg, 0);
		return;
	}
	if (x->rsb && x->handle > 0)
		rt_signal(x->rsb, x->handle, SIGKILL, 1);
}

struct agent_exec *agent_exec_new(struct agent *a, struct httpd_req *r, struct agent_sb *sb,
				  int stream, const char *argv0, const char *cwd,
				  const struct agent_exec_src *src, void *src_arg)
{
	struct agent_exec *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->a = a;
	x->r = r;
	x->rsb = src ? NULL : sb->rt;
	x->src = src;
	x->src_arg = src_arg;
	x->stream_mode = stream;
	x->t0 = util_now_ms();
	snprintf(x->key, sizeof(x->key), "%s", sb->key);
	snprintf(x->argv0, sizeof(x->argv0), "%s", argv0);
	snprintf(x->cwd, sizeof(x->cwd), "%s", cwd);
	buf_init(&x->sse, EXEC_SSE_HARD_MAX);
	buf_init(&x->jout, EXEC_JSON_CHUNK * 6 + 256);
	buf_init(&x->jfix, EXEC_JSON_CHUNK * 3 + 16);
	for (int i = 0; i < 2; i++) {
		x->out[i].x = x;
		x->out[i].name = i ? "stderr" : "stdout";
		x->out[i].spill_fd = -1;
		x->out[i].kept_max = (uint64_t)a->conf->agent.max_exec_output_bytes;
		buf_init(&x->out[i].cap, EXEC_MEM_KEEP);
	}
	agent_sb_stream_begin(sb, &x->live);
	return x;
}

void agent_exec_begin(struct agent_exec *x)
{
	struct httpd_req *r = x->r;

	httpd_on_close(r, on_close, x);
	if (x->stream_mode) {
		struct timeval ka = { EXEC_KEEPALIVE_MS / 1000, 0 };
		x->keepalive_ev = event_new(x->a->base, -1, EV_PERSIST, keepalive_cb, x);
		if (x->keepalive_ev)
			event_add(x->keepalive_ev, &ka);
		httpd_add_header(r, "Cache-Control", "no-store");
		httpd_add_header(r, "X-Accel-Buffering", "no");
		httpd_reply_stream(r, 200, "text/event-stream", sse_read, x);
	} else {
		httpd_defer(r);
	}
}

static int string_has_nul(const json_t *v)
{
	return strlen(json_string_value(v)) != json_string_length(v);
}

void agent_cmd_release(struct agent_cmd *c)
{
	free(c->argv);
	c->argv = NULL;
}

int agent_cmd_parse(json_t *body, struct agent_cmd *c, struct sbx_err *e)
{
	json_t *cmd, *argv, *cwd, *v;
	size_t i;

	cmd = json_object_get(body, "command");
	argv = json_object_get(body, "argv");
	if (!!cmd == !!argv)
		return err_set(e, SBX_E_VALIDATION, "exactly one of 'command' and 'argv' is required");
	if (cmd) {
		if (json_string_length(cmd) == 0 || string_has_nul(cmd))
			return err_set(e, SBX_E_VALIDATION, "'command' must be a non-empty string without NUL");
		c->argv = calloc(4, sizeof(char *));
		if (!c->argv)
			return err_sys(e, ENOMEM, "argv");
		c->argv[0] = (char *)"/bin/sh";
		c->argv[1] = (char *)"-c";
		c->argv[2] = (char *)json_string_value(cmd);
		c->command = json_string_value(cmd);
	} else {
		size_t n = json_array_size(argv);
		if (n == 0 || n > EXEC_MAX_ARGV)
			return err_set(e, SBX_E_VALIDATION, "'argv' must have 1 to %d strings", EXEC_MAX_ARGV);
		c->argv = calloc(n + 1, sizeof(char *));
		if (!c->argv)
			return err_sys(e, ENOMEM, "argv");
		json_array_foreach(argv, i, v) {
			if (!json_is_string(v) || string_has_nul(v))
				return err_set(e, SBX_E_VALIDATION, "'argv' must hold strings without NUL");
			c->argv[i] = (char *)json_string_value(v);
		}
		if (!*c->argv[0])
			return err_set(e, SBX_E_VALIDATION, "'argv[0]' must not be empty");
	}
	memcpy(c->cwd, "/workspace", sizeof("/workspace"));
	if ((cwd = json_object_get(body, "cwd"))) {
		const char *s = json_string_value(cwd);
		int n;
		if (json_string_length(cwd) == 0 || json_string_length(cwd) > EXEC_MAX_PATH ||
		    string_has_nul(cwd))
			return err_set(e, SBX_E_VALIDATION, "'cwd' must be a path of 1 to %d bytes",
				       EXEC_MAX_PATH);
		n = s[0] == '/' ? snprintf(c->cwd, sizeof(c->cwd), "%s", s)
				: snprintf(c->cwd, sizeof(c->cwd), "/workspace/%s", s);
		if (n < 0 || (size_t)n >= sizeof(c->cwd))
			return err_set(e, SBX_E_VALIDATION, "'cwd' is too long");
		c->cwd_given = 1;
	}
	c->env = json_object_get(body, "env");
	if (c->env && agent_env_check(c->env, 1, e) < 0)
		return -1;
	return 0;
}

static void close_fds3(int fds[3])
{
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

int64_t agent_spawn_piped(struct rt_sandbox *rsb, const struct rt_proc_spec *ps, int io[3],
			  rt_started_cb started, rt_exited_cb exited, void *arg, struct sbx_err *e)
{
	int child[3] = { -1, -1, -1 };
	struct rt_proc_spec spec = *ps;
	int64_t handle;

	io[0] = io[1] = io[2] = -1;
	for (int i = 0; i < 3; i++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) < 0) {
			err_sys(e, errno, "pipe");
			close_fds3(child);
			close_fds3(io);
			return -1;
		}
		/* stdin: the child reads p[0], we write p[1]; outputs the other way. */
		child[i] = i == 0 ? p[0] : p[1];
		io[i] = i == 0 ? p[1] : p[0];   /* made non-blocking by child_io_new */
	}
	spec.stdin_fd = child[0];
	spec.stdout_fd = child[1];
	spec.stderr_fd = child[2];
	/* rt_spawn takes the child's ends in every case. */
	handle = rt_spawn(rsb, &spec, started, exited, arg, e);
	if (handle < 0) {
		close_fds3(io);
		return -1;
	}
	return handle;
}

/* The exec route without a session: run c as its own process and answer r
 * (JSON or SSE) from this engine. */
void agent_exec_run(struct httpd_req *r, struct agent_sb *sb, int stream, const struct agent_cmd *c,
		    int64_t timeout_ms, const char *stdin_data, size_t stdin_len)
{
	struct agent *a = httpd_ctx(r);
	struct sbx_err e = { 0 };
	struct agent_exec *x = NULL;
	struct rt_proc_spec ps;
	char **env = NULL;
	int io[3] = { -1, -1, -1 };

	env = agent_env_merge(sb->base_env, c->env);
	x = agent_exec_new(a, r, sb, stream, c->argv[0], c->cwd, NULL, NULL);
	if (!env || !x) {
		err_sys(&e, ENOMEM, "exec");
		goto fail;
	}
	if (count_in(a, sb, x, &e) < 0)
		goto fail;
	ps = (struct rt_proc_spec){ .argv = c->argv, .env = env, .cwd = c->cwd };
	x->oom_before = rt_oom_kills(sb->rt);
	x->t0 = util_now_ms();
	x->spawning = 1;
	x->handle = agent_spawn_piped(sb->rt, &ps, io, on_started, on_exited, x, &e);
	x->spawning = 0;
	agent_env_free(env);
	env = NULL;
	if (x->handle < 0) {
		err_prefix(&e, "cannot run the command");
		goto fail;
	}
	/* child_io takes the fds in every case; stdin is queued whole, then EOF */
	x->io = child_io_new(a->base, io, stdin_len, &exec_io_ops, x);
	io[0] = io[1] = io[2] = -1;
	if (!x->io || child_io_write(x->io, stdin_data, stdin_len) < 0) {
		/* The process runs already: kill it; on_exited frees x. */
		log_error("exec '%s': cannot set up its pipes", x->key);
		rt_signal(sb->rt, x->handle, SIGKILL, 1);
		x->r = NULL;
		err_sys(&e, ENOMEM, "exec pipes");
		agent_call_reply_err(r, &e);
		return;
	}
	child_io_close_stdin(x->io, 0); /* empty stdin: the process reads EOF at once */
	child_io_set_burst(x->io, x->stream_mode ? 1 : 8);
	if (!x->stream_mode || x->started || x->exited)
		start_reading(x);
	agent_exec_arm_timeout(x, timeout_ms);
	agent_exec_begin(x);
	exec_check_done(x);
	return;
fail:
	close_fds3(io);
	agent_env_free(env);
	if (x)
		exec_free(x);
	agent_call_reply_err(r, &e);
}

int agent_new_id(const json_t *body, const char *prefix, char *id, size_t idsz, struct sbx_err *e)
{
	const json_t *v = json_object_get(body, "id");
	unsigned char rnd[6];
	char hex[13];

	if (v) {
		if (!ids_valid_name(json_string_value(v)))
			return err_set(e, SBX_E_VALIDATION, "'id' must be 1-64 of [A-Za-z0-9_.-]");
		util_xsnprintf(id, idsz, "%s", json_string_value(v));
		return 0;
	}
	if (util_random(rnd, sizeof(rnd)) < 0)
		return err_sys(e, errno, "%s id", prefix);
	util_hex(rnd, sizeof(rnd), hex);
	util_xsnprintf(id, idsz, "%s-%s", prefix, hex);
	return 0;
}
