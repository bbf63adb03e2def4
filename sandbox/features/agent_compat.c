/*
 * agent_compat.c — the container API that the Cloudflare Sandbox SDK's
 * route-based clients (SandboxClient of @cloudflare/sandbox 0.12: commands,
 * files, processes, utils) speak, served per sandbox under
 * /v1/sandboxes/{id}/cf/api/… (docs/COMPAT.md).
 *
 * Nothing here runs a command or touches a file itself. Every compat route
 * is a view over one of the agent's own calls, one row of cf_routes[]
 * (method, the path after …/cf/, the mapper of its request, the call of
 * the native route: agent_routes.h), reached through one entry,
 * agent_cf_dispatch:
 *   1. the row's mapper checks the SDK's request and maps it to the typed
 *      arguments of the native call (struct agent_call_args: its JSON
 *      body, path tail, session or process id, query, stream or not, the
 *      decoded content of a write); the request itself is left as sent;
 *   2. a view (struct agent_call_view) is put on the answer;
 *   3. the native call runs (agent_call_serve: the same flags, fields and
 *      function as its own route's row), and the filter turns its answer
 *      into the SDK's shape. Typed answers (the filter's typed hook) are
 *      rendered from their structs: every error (struct agent_call_error: the
 *      SDK's error object {code, message, context, httpStatus, timestamp}
 *      built by err_cf_error from the struct sbx_err, as sbx-api builds
 *      its own), an exec's result (struct agent_exec_result, the SDK's
 *      ExecResult written by the exec engine's streamed writer, so large
 *      output is never held whole), the results of sessions, processes,
 *      code contexts and files (a file helper's answer object), a met
 *      port wait, getCommands' exec; ping and version answer in the SDK's
 *      shape themselves; the events of streams (struct agent_exec_event
 *      of an exec or a process's log stream, struct agent_interp_event of
 *      a code run) are framed as `data: {"type":…}` into the call's own
 *      event buffer; readFileStream's file comes typed (struct
 *      agent_files_fd) and is sent as metadata/chunk/complete events; a file
 *      watch's events come typed from the file helper's call (struct
 *      agent_watch_event) and are framed the same way. No answer of a call
 *      is read back.
 * So exec, sessions, processes and files keep one code path each.
 *
 * The SDK's bodies are parsed strictly as JSON, but fields sbx does not map
 * (origin, encoding of processes, autoCleanup, …) are ignored, as the
 * Cloudflare container ignores what it does not use.
 */
#include "agent.h"
#include "call.h"
#include "codec.h"
#include "agent_compat.h"
#include "agent_exec.h"
#include "agent_routes.h"
#include "agent_files.h"
#include "agent_git.h"
#include "agent_interp.h"
#include "agent_processes.h"
#include "agent_sessions.h"
#include "files_worker.h"
#include "agent_sse.h"
#include "buf.h"
#include "fspath.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CF_SSE_OUT_MAX (16 * 1024 * 1024)
#define CF_FILE_CHUNK (48 * 1024)           /* a multiple of 3: clean base64 */
#define CF_SNIFF 8192
#define CF_LIST_LIMIT "10000"
#define CF_FILE_MAX (32 * 1024 * 1024)      /* writeFile / readFile content, as Cloudflare */
#define CF_VERSION "sbx-" AGENT_VERSION
#define CF_API_VERSION "0.12.10"            /* the SDK's container API served here */
#define CF_DEFAULT_SESSION "default"
#define CF_NO_SESSION "__DISABLE_SESSION__"
/* utils.getCommands: the executables on the sandbox's PATH */
#define CF_COMMANDS_SCRIPT                                                              \
	"IFS=:; for d in $PATH; do for f in \"$d\"/*; do "                               \
	"[ -f \"$f\" ] && [ -x \"$f\" ] && printf '%s\\n' \"${f##*/}\"; done; done 2>/dev/null | sort -u"

enum cf_kind {
	CF_PLAIN,          /* errors only (ping, version, unsupported) */
	CF_EXEC,
	CF_EXEC_STREAM,
	CF_PROC_START,
	CF_PROC_LIST,
	CF_PROC_GET,
	CF_PROC_KILL,
	CF_PROC_KILL_ALL,
	CF_PROC_LOGS,
	CF_PROC_STREAM,
	CF_READ,
	CF_READ_STREAM,
	CF_WRITE,
	CF_DELETE,
	CF_RENAME,
	CF_MKDIR,
	CF_LIST,
	CF_EXISTS,
	CF_SESS_CREATE,
	CF_SESS_LIST,
	CF_SESS_DELETE,
	CF_CTX_CREATE,
	CF_CTX_LIST,
	CF_CTX_DELETE,
	CF_CODE_RUN,
	CF_COMMANDS,
	CF_PORT_WATCH,
	CF_WATCH,
	CF_GIT,
	CF_BACKUP_CREATE,
	CF_BACKUP_RESTORE,
};

/* One compat request: what the answer filter needs to know. */
struct cf_req {
	struct httpd_req *r;
	enum cf_kind kind;
	const struct agent_call_spec *call;   /* the call that serves the request */
	struct agent_call_args args;          /* its arguments (body, tail, content owned) */
	size_t nquery;
	char *tail;
	struct buf content;
	int64_t t0;
	char *command;
	char *session;
	char *path;                /* the SDK's path as given */
	char *new_path;
	char *proc_id;
	int recursive;
	int auto_encoding;         /* read without encoding: text or base64 */
	int64_t timeout_ms;        /* the exec's timeoutMs (0: none) */
	/* port watch: the values of the wait's query */
	char q_port[8], q_status[16], q_interval[16];
	char *q_path;
	int port;
	/* watch: the joined patterns of the query, the event types asked for */
	char *exclude, *include;
	unsigned watch_types;      /* 1 << CF_WT_*; 0: all */
	char watch_id[17];
	/* the SDK's events not yet handed on */
	struct buf out;
	size_t out_off;
	/* file stream */
	int fd;
	uint64_t left, sent;
	int binary;
	int file_done;
	char carry[4];
	size_t ncarry;
};

static void cf_emit(struct cf_req *c, json_t *ev);
static int cf_file_stream(struct cf_req *c, struct httpd_req *r, const struct agent_files_fd *f);
static int cf_exec_event(struct cf_req *c, const struct agent_exec_event *ev);
static int cf_interp_event(struct cf_req *c, const struct agent_interp_event *ev);
static int cf_watch_event(struct cf_req *c, const struct agent_watch_event *ev);

/* --- small helpers --- */

static void cf_now(char out[32])
{
	util_iso8601(util_wall_ms(), out);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void cf_free(void *arg)
{
	struct cf_req *c = arg;

	free(c->command);
	free(c->session);
	free(c->path);
	free(c->new_path);
	free(c->proc_id);
	free(c->exclude);
	free(c->include);
	free(c->tail);
	free(c->q_path);
	json_decref(c->args.body);
	buf_release(&c->content);
	buf_release(&c->out);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}


/* The SDK's name for an sbx error code (err_cf_code), with the one
 * rename that depends on the route. */
static const char *cf_code(const struct cf_req *c, const char *code)
{
	if (code && strcmp(code, "CONFLICT") == 0 && c->kind == CF_SESS_CREATE)
		return "SESSION_ALREADY_EXISTS";
	return err_cf_code(code);
}

/* Send body (stolen) as it is: past the filter, which built it. */
static void cf_reply(struct httpd_req *r, int status, json_t *body)
{
	auto_free char *text = body ? jsonv_dump(body) : NULL;

	json_decref(body);
	if (!text) {
		static const char oom[] = "{\"code\":\"INTERNAL_ERROR\",\"message\":"
					  "\"internal error\",\"context\":{},\"httpStatus\":500}";

		httpd_reply_bytes(r, 500, "application/json", oom, sizeof(oom) - 1);
		return;
	}
	httpd_reply_bytes(r, status, "application/json", text, strlen(text));
}

/* An sbx error (its struct and details) as the SDK's error object, its
 * context the details and the request's path, process or session. */
static void cf_error(struct cf_req *c, struct httpd_req *r, const struct agent_call_error *he)
{
	json_t *ctx = json_is_object(he->details) ? json_deep_copy(he->details) : json_object();

	if (ctx && c->path)
		json_object_set_new(ctx, "path", json_string(c->path));
	if (ctx && c->new_path)
		json_object_set_new(ctx, "newPath", json_string(c->new_path));
	if (ctx && c->proc_id)
		json_object_set_new(ctx, "processId", json_string(c->proc_id));
	if (ctx && c->session)
		json_object_set_new(ctx, "sessionId", json_string(c->session));
	cf_reply(r, err_status(he->e->code),
		 err_cf_error(he->e, cf_code(c, err_name(he->e->code)), ctx));
}

/* "0755" → "rwxr-xr-x" (10 bytes with NUL). */
static void cf_mode_text(const char *octal, char out[10], unsigned *bits)
{
	static const char rwx[] = "rwx";
	unsigned m = 0;

	for (const char *p = octal ? octal : ""; *p >= '0' && *p <= '7'; p++)
		m = m * 8 + (unsigned)(*p - '0');
	for (int i = 0; i < 9; i++)
		out[i] = (m & (0400 >> i)) ? rwx[i % 3] : '-';
	out[9] = '\0';
	*bits = m;
}

/* The sbx listing {path, entries} as the SDK's files; new reference. */
static json_t *cf_files(const json_t *body, int *count)
{
	const char *base = json_string_value(json_object_get(body, "path"));
	size_t blen = base ? strlen(base) : 0;
	json_t *arr = json_array(), *ent;
	size_t i;

	if (!arr)
		return NULL;
	if (blen == 1)
		blen = 0; /* "/" */
	json_array_foreach(json_object_get(body, "entries"), i, ent) {
		const char *p = json_string_value(json_object_get(ent, "path"));
		const char *rel = p ? p : "";
		char sym[10];
		unsigned m;
		json_t *f;

		if (p && strncmp(p, base ? base : "", blen) == 0 && p[blen] == '/')
			rel = p + blen + 1;
		cf_mode_text(json_string_value(json_object_get(ent, "mode")), sym, &m);
		f = json_pack("{s:O, s:O, s:s, s:O, s:O, s:O, s:s, s:{s:b, s:b, s:b}}", "name",
			      json_object_get(ent, "name"), "absolutePath", json_object_get(ent, "path"),
			      "relativePath", rel, "type", json_object_get(ent, "type"), "size",
			      json_object_get(ent, "size"), "modifiedAt",
			      json_object_get(ent, "modifiedAt"), "mode", sym, "permissions",
			      "readable", !!(m & 0400), "writable", !!(m & 0200), "executable",
			      !!(m & 0100));
		if (!f || json_array_append_new(arr, f) < 0) {
			json_decref(arr);
			return NULL;
		}
	}
	*count = (int)json_array_size(arr);
	return arr;
}

/* Text of base64 content when it is UTF-8 (read without an encoding). */
static void cf_read_auto(json_t *res)
{
	const char *b64 = json_string_value(json_object_get(res, "content"));
	struct buf raw;

	if (json_is_true(json_object_get(res, "isBinary")) || !b64)
		return;
	buf_init(&raw, CF_FILE_MAX);
	if (codec_base64_decode(b64, strlen(b64), &raw) == 0 &&
	    codec_utf8_valid(raw.data ? raw.data : "", raw.len)) {
		json_object_set_new(res, "content", json_stringn(raw.data ? raw.data : "", raw.len));
		json_object_set_new(res, "encoding", json_string("utf-8"));
	}
	buf_release(&raw);
}

/* The file calls' result (the helper's answer object, NULL for an empty
 * one) as the SDK's result for c's kind; new reference. */
static json_t *cf_files_result(struct cf_req *c, const json_t *body)
{
	json_t *res = NULL;
	int count = 0;

	switch (c->kind) {
	case CF_READ:
		res = json_pack("{s:s, s:O*, s:O*, s:O*, s:O*, s:O*}", "path", c->path, "content",
				json_object_get(body, "content"), "encoding",
				json_object_get(body, "encoding"), "isBinary",
				json_object_get(body, "isBinary"), "mimeType",
				json_object_get(body, "mimeType"), "size", json_object_get(body, "size"));
		if (res && c->auto_encoding)
			cf_read_auto(res);
		break;
	case CF_WRITE:
	case CF_DELETE:
		res = json_pack("{s:s}", "path", c->path);
		break;
	case CF_RENAME:
		res = json_pack("{s:s, s:s}", "path", c->path, "newPath", c->new_path);
		break;
	case CF_MKDIR:
		res = json_pack("{s:s, s:b}", "path", c->path, "recursive", c->recursive);
		break;
	case CF_LIST: {
		json_t *files = cf_files(body, &count);

		res = json_pack("{s:s, s:o*, s:i}", "path", c->path, "files", files, "count", count);
		break;
	}
	case CF_EXISTS:
		res = json_pack("{s:s, s:b}", "path", c->path, "exists", 1);
		break;
	case CF_BACKUP_CREATE:     /* a snapshot job run by the file helper */
		res = json_pack("{s:O*, s:O*}", "sizeBytes", json_object_get(body, "size"),
				"archivePath", json_object_get(body, "archivePath"));
		break;
	case CF_BACKUP_RESTORE:
		res = json_pack("{s:s}", "dir", c->path ? c->path : "");
		break;
	default:
		res = json_object();
		break;
	}
	return res;
}

/* The message of a command that ran out of time in a session. */
static void cf_timeout_text(const struct cf_req *c, char *out, size_t n)
{
	util_xsnprintf(out, n, "Failed to execute command in session '%s': Command timeout after %lld ms",
		       c->session ? c->session : "", (long long)c->timeout_ms);
}

/* A JSON string of s (NULL: null) as compact JSON text; NULL on ENOMEM. */
static char *cf_json_text(const char *s)
{
	json_t *v = s ? json_string(s) : json_null();
	char *t = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;

	json_decref(v);
	return t;
}

/* execute: the exec's typed result as the SDK's ExecResult, streamed by
 * the engine (stdout and stderr are never in memory whole). A timeout is
 * reported as Cloudflare does: in a session a 500 COMMAND_EXECUTION_ERROR
 * (the SDK raises CommandError), sessionless exit code 124 with "Command
 * timed out after <N>ms" at the end of stderr. */
static int cf_exec_result(struct cf_req *c, struct httpd_req *r, const struct agent_exec_result *res)
{
	auto_free char *cmd = cf_json_text(c->command ? c->command : "");
	auto_free char *sid = cf_json_text(c->session);
	auto_free char *tail = NULL;
	char head[96], note[96] = "", ts[32], msg[256];
	size_t n;

	if (res->timed_out && c->session) {
		cf_timeout_text(c, msg, sizeof(msg));
		cf_reply(r, 500,
			 err_cf_body("COMMAND_EXECUTION_ERROR", msg, 500,
				     json_pack("{s:s, s:i, s:s}", "command",
					       c->command ? c->command : "", "exitCode", 124,
					       "sessionId", c->session)));
		return 1;
	}
	if (res->timed_out)
		util_xsnprintf(note, sizeof(note), "%sCommand timed out after %lldms\\n",
			       res->stderr_last >= 0 && res->stderr_last != '\n' ? "\\n" : "",
			       (long long)c->timeout_ms);
	cf_now(ts);
	util_xsnprintf(head, sizeof(head), "{\"success\":%s,\"exitCode\":%lld,\"stdout\":\"",
		       res->exit_code == 0 && !res->timed_out ? "true" : "false",
		       (long long)res->exit_code);
	n = strlen(cmd ? cmd : "") + strlen(sid ? sid : "") + 256;
	tail = malloc(n);
	if (!cmd || !sid || !tail)
		return 0;   /* out of memory: the engine answers in its own shape */
	util_xsnprintf(tail, n,
		       "%s\",\"command\":%s,\"duration\":%lld,\"timestamp\":\"%s\"%s%s%s%s}", note, cmd,
		       (long long)(util_now_ms() - c->t0), ts, c->session ? ",\"sessionId\":" : "",
		       c->session ? sid : "", res->timed_out ? ",\"timedOut\":true" : "",
		       res->truncated ? ",\"truncated\":true" : "");
	agent_exec_reply_text(res->x, "application/json", head, "\",\"stderr\":\"", tail);
	return 1;
}


/* ports.watchPort: the wait's outcome as the SDK's event stream,
 * watching then last (ready, process_exited or error; stolen). */
static void cf_port_watch_reply(struct cf_req *c, struct httpd_req *r, const char *type, json_t *last)
{
	char ts[32];

	cf_now(ts);
	cf_emit(c, json_pack("{s:s, s:i, s:s}", "type", "watching", "port", c->port, "timestamp", ts));
	if (last && json_object_set_new(last, "type", json_string(type)) == 0 &&
	    json_object_set_new(last, "port", json_integer(c->port)) == 0 &&
	    json_object_set_new(last, "timestamp", json_string(ts)) == 0)
		cf_emit(c, json_incref(last));
	json_decref(last);
	httpd_add_header(r, "Cache-Control", "no-store");
	httpd_reply_bytes(r, 200, "text/event-stream", c->out.data ? c->out.data : "", c->out.len);
	buf_reset(&c->out);
}

/* The wait's error: the process exited or the wait timed out (events);
 * a refusal of the request itself (no such process, bad arguments) stays
 * an HTTP error (0). */
static int cf_port_watch_error(struct cf_req *c, struct httpd_req *r,
			       const struct agent_call_error *he)
{
	if (he->e->code == SBX_E_PROCESS_EXITED_BEFORE_READY)
		cf_port_watch_reply(c, r, "process_exited",
				    json_pack("{s:O*}", "exitCode",
					      json_object_get(he->details, "exitCode")));
	else if (he->e->code == SBX_E_PROCESS_READY_TIMEOUT)
		cf_port_watch_reply(c, r, "error", json_pack("{s:s}", "error", err_public_message(he->e)));
	else
		return 0;
	return 1;
}

/* res (stolen) as the SDK's successful result: with success, timestamp. */
static void cf_ok(struct httpd_req *r, json_t *res)
{
	char ts[32];

	cf_now(ts);
	if (res && !json_object_get(res, "success"))
		json_object_set_new(res, "success", json_true());
	if (res)
		json_object_set_new(res, "timestamp", json_string(ts));
	cf_reply(r, 200, res);
}

/* session/create, list, delete: their typed results. */
static int cf_session_result(struct cf_req *c, struct httpd_req *r,
			     const struct agent_session_result *res)
{
	char msg[128];
	json_t *ids;

	switch (res->op) {
	case AGENT_SESSION_CREATED:
		util_xsnprintf(msg, sizeof(msg), "session '%s' created", res->id);
		cf_ok(r, json_pack("{s:s, s:s, s:n}", "id", res->id, "message", msg,
				   "containerPlacementId"));
		break;
	case AGENT_SESSION_LISTED:
		ids = json_array();
		for (size_t i = 0; ids && i < res->nids; i++)
			json_array_append_new(ids, json_string(res->ids[i]));
		cf_ok(r, json_pack("{s:o*}", "data", ids));
		break;
	case AGENT_SESSION_DELETED:
		cf_ok(r, json_pack("{s:s}", "sessionId", res->id));
		break;
	}
	return 1;
}

/* A process record as the SDK's process object; new reference. */
static json_t *cf_process(const struct agent_proc_info *p)
{
	char started[32], ended[32];
	json_t *o;

	util_iso8601(p->started_at, started);
	util_iso8601(p->ended_at, ended);
	o = json_pack("{s:s, s:s, s:s, s:s}", "id", p->id, "command", p->command, "status", p->status,
		      "startTime", started);
	if (o && p->pid)
		json_object_set_new(o, "pid", json_integer(p->pid));
	if (o && p->exited) {
		json_object_set_new(o, "endTime", json_string(ended));
		json_object_set_new(o, "exitCode", json_integer(p->exit_code));
	}
	return o;
}

/* Output kept by a process as a JSON string (invalid UTF-8 as U+FFFD). */
static json_t *cf_text(const char *data, size_t len)
{
	struct buf fixed;
	json_t *v = NULL;

	buf_init(&fixed, len * 3 + 16);
	if (codec_utf8_fix(data, len, &fixed) == 0)
		v = json_stringn(fixed.data ? fixed.data : "", fixed.len);
	buf_release(&fixed);
	return v;
}

/* process/start (and a background execute), list, get, kill, kill-all,
 * logs: their typed results. */
static int cf_proc_result(struct cf_req *c, struct httpd_req *r, const struct agent_proc_result *res)
{
	const struct agent_proc_info *p = res->procs;
	json_t *o = NULL, *arr;

	switch (res->op) {
	case AGENT_PROC_STARTED:
		o = json_pack("{s:s, s:s}", "processId", p->id, "command", p->command);
		if (o && p->pid)
			json_object_set_new(o, "pid", json_integer(p->pid));
		break;
	case AGENT_PROC_LISTED:
		arr = json_array();
		for (size_t i = 0; arr && i < res->nprocs; i++)
			json_array_append_new(arr, cf_process(&p[i]));
		o = json_pack("{s:o*}", "processes", arr);
		break;
	case AGENT_PROC_GOT:
		o = json_pack("{s:o*}", "process", cf_process(p));
		break;
	case AGENT_PROC_KILLED:
		o = json_pack("{s:s, s:s}", "processId", p->id, "signal", "SIGTERM");
		if (o && p->exited)
			json_object_set_new(o, "exitCode", json_integer(p->exit_code));
		break;
	case AGENT_PROC_KILLED_ALL:
		o = json_pack("{s:i, s:i}", "cleanedCount", res->killed, "killedCount", res->killed);
		break;
	case AGENT_PROC_PORT_READY:
		o = json_pack("{s:o*}", "statusCode",
			      res->http_status ? json_integer(res->http_status) : NULL);
		cf_port_watch_reply(c, r, "ready", o);
		return 1;
	case AGENT_PROC_LOGS:
		o = json_pack("{s:s, s:o*, s:o*}", "processId", c->proc_id ? c->proc_id : "", "stdout",
			      cf_text(res->out[0], res->out_len[0]), "stderr",
			      cf_text(res->out[1], res->out_len[1]));
		break;
	}
	cf_ok(r, o);
	return 1;
}

/* contexts: create, list, delete: their typed results. */
static int cf_ctx_result(struct cf_req *c, struct httpd_req *r, const struct agent_interp_result *res)
{
	json_t *o = NULL, *arr;

	switch (res->op) {
	case AGENT_INTERP_CREATED:
	case AGENT_INTERP_GOT:
		o = json_pack("{s:s, s:s, s:s}", "contextId", res->ctxs[0].id, "language",
			      res->ctxs[0].language, "cwd", res->ctxs[0].cwd);
		break;
	case AGENT_INTERP_LISTED:
		arr = json_array();
		for (size_t i = 0; arr && i < res->nctxs; i++)
			json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "id", res->ctxs[i].id,
							     "language", res->ctxs[i].language,
							     "cwd", res->ctxs[i].cwd));
		o = json_pack("{s:o*}", "contexts", arr);
		break;
	case AGENT_INTERP_DELETED:
		o = json_pack("{s:s}", "contextId", res->id);
		break;
	}
	cf_ok(r, o);
	return 1;
}

/* utils.getCommands: the stdout of CF_COMMANDS_SCRIPT's exec as
 * {availableCommands, count}. */
static int cf_commands_result(struct cf_req *c, struct httpd_req *r,
			      const struct agent_exec_result *res)
{
	struct buf out;
	struct sbx_err e = { 0 };
	json_t *arr = json_array();

	buf_init(&out, CF_FILE_MAX);
	if (agent_exec_kept(res->x, 0, &out, &e) < 0 || buf_add(&out, "", 1) < 0) {
		if (!e.code)
			err_sys(&e, ENOMEM, "command list");
		json_decref(arr);
		buf_release(&out);
		cf_error(c, r, &(struct agent_call_error){ &e, NULL });
		return 1;
	}
	for (const char *p = out.data; arr && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (n)
			json_array_append_new(arr, json_stringn(p, n));
		p += n + (nl ? 1 : 0);
	}
	buf_release(&out);
	cf_ok(r, json_pack("{s:I, s:o*}", "count", (json_int_t)json_array_size(arr),
			   "availableCommands", arr));
	return 1;
}

/* git/checkout: its typed result. */
static int cf_git_result(struct httpd_req *r, const struct agent_git_result *g)
{
	cf_ok(r, json_pack("{s:s, s:s, s:s, s:s, s:i}", "repoUrl", g->url, "branch", g->branch,
			   "targetDir", g->target, "commit", g->commit, "exitCode", 0));
	return 1;
}

/* The typed answers of the native calls: results, an error. */
static int cf_filter_typed(void *arg, struct httpd_req *r, const char *type, const void *result)
{
	struct cf_req *c = arg;
	const struct agent_call_error *he = result;

	if (strcmp(type, AGENT_GIT_RESULT) == 0)
		return c->kind == CF_GIT && cf_git_result(r, result);
	if (strcmp(type, AGENT_INTERP_EVENT) == 0)
		return c->kind == CF_CODE_RUN && cf_interp_event(c, result);
	if (strcmp(type, AGENT_WATCH_EVENT) == 0)
		return c->kind == CF_WATCH && cf_watch_event(c, result);
	if (strcmp(type, AGENT_EXEC_EVENT) == 0)
		return (c->kind == CF_EXEC_STREAM || c->kind == CF_PROC_STREAM) &&
		       cf_exec_event(c, result);
	if (strcmp(type, AGENT_EXEC_RESULT) == 0 && c->kind == CF_COMMANDS)
		return cf_commands_result(c, r, result);
	if (strcmp(type, AGENT_EXEC_RESULT) == 0)
		return c->kind == CF_EXEC && cf_exec_result(c, r, result);
	if (strcmp(type, AGENT_SESSION_RESULT) == 0)
		return cf_session_result(c, r, result);
	if (strcmp(type, AGENT_PROC_RESULT) == 0)
		return cf_proc_result(c, r, result);
	if (strcmp(type, AGENT_INTERP_RESULT) == 0)
		return cf_ctx_result(c, r, result);
	if (strcmp(type, AGENT_FILES_FD) == 0)
		return c->kind == CF_READ_STREAM && cf_file_stream(c, r, result);
	if (strcmp(type, AGENT_FILES_RESULT) == 0) {
		cf_ok(r, cf_files_result(c, ((const struct agent_files_result *)result)->body));
		return 1;
	}
	if (strcmp(type, AGENT_CALL_ERROR) != 0)
		return 0;
	if (c->kind == CF_PORT_WATCH && cf_port_watch_error(c, r, he))
		return 1;
	if (c->kind == CF_EXISTS &&
	    (he->e->code == SBX_E_FILE_NOT_FOUND || he->e->code == SBX_E_NOT_DIRECTORY)) {
		char ts[32];

		cf_now(ts);
		cf_reply(r, 200, json_pack("{s:b, s:s, s:b, s:s}", "success", 1, "path", c->path,
					   "exists", 0, "timestamp", ts));
		return 1;
	}
	cf_error(c, r, he);
	return 1;
}

/* --- event streams: sbx frames → the SDK's `data: {"type":…}` frames --- */

static void cf_emit(struct cf_req *c, json_t *ev)
{
	char *text = ev ? jsonv_dump(ev) : NULL;

	json_decref(ev);
	if (!text || buf_adds(&c->out, "data: ") < 0 || buf_adds(&c->out, text) < 0 ||
	    buf_adds(&c->out, "\n\n") < 0)
		log_error("compat: an event was dropped");
	free(text);
}

/* One event of a code run (name, its data d) as the SDK's interpreter
 * event: stdout/stderr {text}, result {data, isMainResult}, error {ename,
 * evalue, traceback} (an agent error: its code and message), then
 * execution_complete. New reference, or NULL for none. */
static json_t *cf_code_event(const char *name, const json_t *d)
{
	json_t *ev;

	if (strcmp(name, "error") == 0) {
		const json_t *ename = json_object_get(d, "name");
		const json_t *evalue = json_object_get(d, "value");
		const json_t *tb = json_object_get(d, "traceback");

		return json_pack("{s:s, s:O, s:O, s:O}", "type", "error", "ename",
				 ename ? ename : json_object_get(d, "code"), "evalue",
				 evalue ? evalue : json_object_get(d, "message"), "traceback",
				 tb ? tb : json_array());
	}
	if (strcmp(name, "end") == 0)
		return json_pack("{s:s, s:O*}", "type", "execution_complete", "execution_count",
				 json_object_get(d, "executionCount"));
	if (strcmp(name, "stdout") && strcmp(name, "stderr") && strcmp(name, "result"))
		return NULL;
	ev = json_deep_copy(d);
	if (ev)
		json_object_set_new(ev, "timestamp", json_integer(util_wall_ms()));
	return ev;
}

/* The SDK's watch event types (FileWatchEventType), as a mask. */
static const char *const cf_watch_types[] = { "create", "modify", "delete", "move_from",
					      "move_to", "attrib" };

/* One watch event of sbx (agent_watch.c) as the SDK's: ready → watching,
 * create/modify/delete → event, move → move_from + move_to, overflow and
 * error → error (an error ends the stream, an overflow does not). */
static void cf_watch_translate(struct cf_req *c, const char *name, const json_t *d)
{
	const char *type[2] = { name, NULL };
	const json_t *path[2] = { json_object_get(d, "path"), NULL };
	char ts[32];

	cf_now(ts);
	if (strcmp(name, "ready") == 0) {
		cf_emit(c, json_pack("{s:s, s:O*, s:s}", "type", "watching", "path", path[0],
				     "watchId", c->watch_id));
		return;
	}
	if (strcmp(name, "error") == 0 || strcmp(name, "overflow") == 0) {
		json_t *ev = json_pack("{s:s, s:O*}", "type", "error", "error",
				       json_object_get(d, "message"));

		if (ev && strcmp(name, "overflow") == 0)
			json_object_set_new(ev, "overflow", json_true());
		cf_emit(c, ev);
		return;
	}
	if (strcmp(name, "move") == 0) {
		type[0] = "move_from";
		path[0] = json_object_get(d, "from");
		type[1] = "move_to";
		path[1] = json_object_get(d, "to");
	}
	for (int i = 0; i < 2 && type[i]; i++) {
		unsigned bit = 0;

		for (size_t k = 0; k < ARRAY_SIZE(cf_watch_types); k++)
			if (strcmp(type[i], cf_watch_types[k]) == 0)
				bit = 1u << k;
		if (!bit || (c->watch_types && !(c->watch_types & bit)))
			continue;
		cf_emit(c, json_pack("{s:s, s:s, s:O*, s:O*, s:s}", "type", "event", "eventType",
				     type[i], "path", path[i], "isDirectory",
				     json_object_get(d, "isDirectory"), "timestamp", ts));
	}
}

/* One sbx event (name, its JSON data d) as the SDK's event. */
static void cf_translate(struct cf_req *c, const char *name, const json_t *d)
{
	int proc = c->kind == CF_PROC_STREAM;
	json_t *ev, *v;
	char ts[32];

	if (c->kind == CF_CODE_RUN) {
		if ((ev = cf_code_event(name, d)))
			cf_emit(c, ev);
		return;
	}
	ev = json_object();
	if (!ev)
		return;
	cf_now(ts);
	if (strcmp(name, "start") == 0) {
		json_object_set_new(ev, "type", json_string(proc ? "process_info" : "start"));
		if (c->command)
			json_object_set_new(ev, "command", json_string(c->command));
		else if ((v = json_object_get(d, "command")))
			json_object_set(ev, "command", v);
		if ((v = json_object_get(d, "pid")))
			json_object_set(ev, "pid", v);
		if (proc)
			json_object_set_new(ev, "status", json_string("running"));
	} else if (strcmp(name, "stdout") == 0 || strcmp(name, "stderr") == 0) {
		json_object_set_new(ev, "type", json_string(name));
		json_object_set(ev, "data", json_object_get(d, "data"));
	} else if (strcmp(name, "exit") == 0 && !proc && json_is_true(json_object_get(d, "timedOut"))) {
		char msg[256];

		if (c->session) {
			cf_timeout_text(c, msg, sizeof(msg));
			json_object_set_new(ev, "type", json_string("error"));
			json_object_set_new(ev, "error", json_string(msg));
			json_object_set_new(ev, "data", json_string(msg));
			json_object_set_new(ev, "code", json_string("COMMAND_EXECUTION_ERROR"));
		} else {
			util_xsnprintf(msg, sizeof(msg), "Command timed out after %lldms\n",
				       (long long)c->timeout_ms);
			cf_emit(c, json_pack("{s:s, s:s, s:s}", "type", "stderr", "data", msg,
					     "timestamp", ts));
			json_object_set_new(ev, "type", json_string("complete"));
			json_object_set_new(ev, "exitCode", json_integer(124));
			json_object_set(ev, "duration", json_object_get(d, "durationMs"));
			json_object_set_new(ev, "timedOut", json_true());
		}
	} else if (strcmp(name, "exit") == 0) {
		json_int_t code = json_integer_value(json_object_get(d, "exitCode"));

		json_object_set_new(ev, "type", json_string(proc ? "exit" : "complete"));
		json_object_set_new(ev, "exitCode", json_integer(code));
		if (proc) {
			char msg[64];

			util_xsnprintf(msg, sizeof(msg), "Process exited with code %lld", (long long)code);
			json_object_set_new(ev, "data", json_string(msg));
		} else {
			json_object_set(ev, "duration", json_object_get(d, "durationMs"));
			if (json_is_true(json_object_get(d, "timedOut")))
				json_object_set_new(ev, "timedOut", json_true());
		}
	} else if (strcmp(name, "error") == 0) {
		json_t *msg = json_object_get(d, "message");
		const char *code = json_string_value(json_object_get(d, "code"));

		json_object_set_new(ev, "type", json_string("error"));
		json_object_set(ev, "error", msg);
		json_object_set(ev, "data", msg);
		json_object_set_new(ev, "code", json_string(cf_code(c, code)));
		if ((v = json_object_get(d, "exitCode")))
			json_object_set(ev, "exitCode", v);
	} else {
		json_decref(ev);
		return;
	}
	if (proc && c->proc_id)
		json_object_set_new(ev, "processId", json_string(c->proc_id));
	if (!proc && c->session)
		json_object_set_new(ev, "sessionId", json_string(c->session));
	json_object_set_new(ev, "timestamp", json_string(ts));
	cf_emit(c, ev);
}

/* Move the SDK's events made so far to out, the call's event buffer: 1. */
static int cf_events_to(struct cf_req *c, struct buf *out)
{
	if (c->out.len && buf_add(out, c->out.data, c->out.len) < 0)
		log_error("compat: an event was dropped (stream buffer full)");
	buf_reset(&c->out);
	return 1;
}

/* An event of an exec or a process's log stream (typed) as the SDK's,
 * appended to the engine's event buffer. */
static int cf_exec_event(struct cf_req *c, const struct agent_exec_event *ev)
{
	json_t *d = ev->data ? NULL : json_pack("{s:o*}", "data", cf_text(ev->bytes, ev->len));

	cf_translate(c, ev->name, ev->data ? ev->data : d);
	json_decref(d);
	return cf_events_to(c, ev->out);
}

/* An event of a code run (typed) as the SDK's, appended to the run's
 * event buffer. */
static int cf_interp_event(struct cf_req *c, const struct agent_interp_event *ev)
{
	cf_translate(c, ev->name, ev->data);
	return cf_events_to(c, ev->out);
}

/* An event of a file watch (typed) as the SDK's, appended to the
 * stream's event buffer. */
static int cf_watch_event(struct cf_req *c, const struct agent_watch_event *ev)
{
	cf_watch_translate(c, ev->name, ev->data);
	return cf_events_to(c, ev->out);
}

static ssize_t cf_take_out(struct cf_req *c, char *buf, size_t max)
{
	size_t n = c->out.len - c->out_off;

	if (n > max)
		n = max;
	memcpy(buf, c->out.data + c->out_off, n);
	c->out_off += n;
	if (c->out_off == c->out.len) {
		buf_reset(&c->out);
		c->out_off = 0;
	}
	return (ssize_t)n;
}

/* --- file streams: the file sbx would send raw, as metadata/chunk/complete --- */

static void cf_file_event(struct cf_req *c, const char *type, json_t *ev)
{
	if (ev && json_object_set_new(ev, "type", json_string(type)) == 0)
		cf_emit(c, ev);
	else
		json_decref(ev);
}

/* Read the next chunk of the file into c->out (as events). */
static void cf_file_step(struct cf_req *c)
{
	char chunk[CF_FILE_CHUNK + sizeof(c->carry)];
	size_t want = c->left < CF_FILE_CHUNK ? (size_t)c->left : CF_FILE_CHUNK;
	size_t total, send;
	ssize_t n = 0;
	struct buf enc;

	memcpy(chunk, c->carry, c->ncarry);
	while (want && (n = read(c->fd, chunk + c->ncarry, want)) < 0 && errno == EINTR)
		;
	if (n < 0) {
		char msg[128];

		snprintf(msg, sizeof(msg), "cannot read '%s': %s", c->path, strerror(errno));
		cf_file_event(c, "error", json_pack("{s:s}", "error", msg));
		c->file_done = 1;
		return;
	}
	total = c->ncarry + (size_t)n;
	c->ncarry = 0;
	c->sent += (uint64_t)n;
	c->left -= (uint64_t)n;
	if (n == 0)
		c->left = 0;
	buf_init(&enc, CF_FILE_CHUNK * 3 + 16);
	if (c->binary) {
		send = total;
		codec_base64_encode(chunk, total, &enc);
	} else {
		send = c->left ? codec_utf8_complete_len(chunk, total) : total;
		codec_utf8_fix(chunk, send, &enc);
		memcpy(c->carry, chunk + send, total - send);
		c->ncarry = total - send;
	}
	if (send)
		cf_file_event(c, "chunk",
			      json_pack("{s:s%}", "data", enc.data ? enc.data : "", enc.len));
	buf_release(&enc);
	if (c->left == 0) {
		cf_file_event(c, "complete", json_pack("{s:I}", "bytesRead", (json_int_t)c->sent));
		c->file_done = 1;
	}
}

static ssize_t cf_file_read(void *arg, char *buf, size_t max)
{
	struct cf_req *c = arg;

	while (c->out.len == c->out_off) {
		if (c->file_done)
			return -1;
		cf_file_step(c);
	}
	return cf_take_out(c, buf, max);
}

/* Binary when the first bytes hold a NUL or are not UTF-8. */
static int cf_sniff_binary(int fd, uint64_t offset)
{
	char head[CF_SNIFF];
	ssize_t n = pread(fd, head, sizeof(head), (off_t)offset);
	size_t ok;

	if (n <= 0)
		return 0;
	if (memchr(head, '\0', (size_t)n))
		return 1;
	ok = (size_t)n < sizeof(head) ? (size_t)n : codec_utf8_complete_len(head, (size_t)n);
	return !codec_utf8_valid(head, ok);
}

/* readFileStream: the file (typed, f->fd now c's) as metadata, chunk and
 * complete events. */
static int cf_file_stream(struct cf_req *c, struct httpd_req *r, const struct agent_files_fd *f)
{
	c->fd = f->fd;
	c->left = f->len;
	if (lseek(f->fd, 0, SEEK_SET) < 0)
		c->left = 0;
	c->binary = cf_sniff_binary(f->fd, 0);
	cf_file_event(c, "metadata",
		      json_pack("{s:s, s:I, s:b, s:s}", "mimeType", fspath_mime(f->name), "size",
				(json_int_t)f->len, "isBinary", c->binary, "encoding",
				c->binary ? "base64" : "utf-8"));
	httpd_add_header(r, "Cache-Control", "no-store");
	httpd_add_header(r, "X-Accel-Buffering", "no");
	httpd_reply_stream(r, 200, "text/event-stream", cf_file_read, c);
	return 1;
}

static const struct agent_call_view cf_filter = {
	.typed = cf_filter_typed,
	.free = cf_free,
};

/* --- request side --- */

/* Put the compat filter of kind on r. NULL (and r answered) on ENOMEM. */
static struct cf_req *cf_begin(struct httpd_req *r, enum cf_kind kind)
{
	struct cf_req *c = calloc(1, sizeof(*c));
	struct sbx_err e;

	if (!c) {
		err_sys(&e, ENOMEM, "compat request");
		agent_call_reply_err(r, &e);
		return NULL;
	}
	c->r = r;
	c->kind = kind;
	c->fd = -1;
	c->t0 = util_now_ms();
	buf_init(&c->out, CF_SSE_OUT_MAX);
	/* The SDK's routes take no query, nor a range: the call reads only
	 * c->args. */
	agent_call_set_view(r, &cf_filter, c);
	return c;
}

/* The SDK's JSON body (an object; empty = {}). NULL with e filled. */
static json_t *cf_body(struct httpd_req *r, struct sbx_err *e)
{
	size_t len;
	const char *data = httpd_body(r, &len);

	return jsonv_parse(data, len, e);
}

/* An optional string field without NUL: 0 (*out NULL when absent or
 * null) or -1 (400). */
static int cf_str(const json_t *body, const char *name, const char **out, struct sbx_err *e)
{
	const json_t *v = json_object_get(body, name);

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return err_set(e, SBX_E_VALIDATION, "'%s' must be a string", name);
	*out = json_string_value(v);
	return 0;
}

static int cf_req_str(const json_t *body, const char *name, const char **out, struct sbx_err *e)
{
	if (cf_str(body, name, out, e) < 0)
		return -1;
	if (!*out || !**out)
		return err_set(e, SBX_E_VALIDATION, "'%s' is required", name);
	return 0;
}

/* Copy the optional field name of from (of one of types) into to. */
static int cf_copy(json_t *to, const json_t *from, const char *name, const char *as,
		   unsigned types, struct sbx_err *e)
{
	json_t *v = json_object_get(from, name);

	if (!v || json_is_null(v))
		return 0;
	if (((types & JV_OBJECT) && json_is_object(v)) || ((types & JV_INTEGER) && json_is_integer(v)) ||
	    ((types & JV_STRING) && json_is_string(v)) || ((types & JV_BOOL) && json_is_boolean(v)))
		return json_object_set(to, as, v) < 0 ? err_sys(e, ENOMEM, "body") : 0;
	return err_set(e, SBX_E_VALIDATION, "'%s' has the wrong type", name);
}

/* Make b (stolen; NULL: e is filled) the JSON body of the native call. */
static int cf_set_body(struct cf_req *c, json_t *b, struct sbx_err *e)
{
	if (!b)
		return e->code ? -1 : err_sys(e, ENOMEM, "body");
	json_decref(c->args.body);
	c->args.body = b;
	return 0;
}

/* Make the file path p the "{*}" tail of a files call. */
static int cf_set_path(struct cf_req *c, const char *p, struct sbx_err *e)
{
	struct buf b;

	buf_init(&b, FSPATH_MAX * 3 + 16);
	if (codec_pct_encode(p, strlen(p), &b) < 0 || buf_add(&b, "", 1) < 0) {
		buf_release(&b);
		return err_set(e, SBX_E_VALIDATION, "'path' is longer than %d bytes", FSPATH_MAX);
	}
	free(c->tail);
	c->tail = buf_steal(&b, NULL);
	c->args.tail = c->tail;
	return c->tail ? 0 : err_sys(e, ENOMEM, "path");
}

/* Add the query parameter name=value (static, living in c, or the
 * request's own) for the native call. */
static void cf_query(struct cf_req *c, const char *name, const char *value)
{
	if (c->nquery < AGENT_CALL_QUERY_MAX) {
		c->args.query[c->nquery][0] = name;
		c->args.query[c->nquery][1] = value;
		c->nquery++;
	}
}

/* The exec body of sbx from the SDK's execute / start body. */
static json_t *cf_exec_body(const json_t *body, const char *command, int with_timeout,
			    struct sbx_err *e)
{
	json_t *b = json_pack("{s:s}", "command", command);

	if (!b) {
		err_sys(e, ENOMEM, "body");
		return NULL;
	}
	if (cf_copy(b, body, "cwd", "cwd", JV_STRING, e) < 0 ||
	    cf_copy(b, body, "env", "env", JV_OBJECT, e) < 0 ||
	    (with_timeout && cf_copy(b, body, "timeoutMs", "timeoutMs", JV_INTEGER, e) < 0)) {
		json_decref(b);
		return NULL;
	}
	return b;
}

/* --- the routes: one row each, with the mapper of its request --- */

/* Turn the SDK's request (body: its JSON object, borrowed; NULL for a
 * route without CF_BODY) into the sbx request of c->call: body, path
 * tail, query, params. 0, or -1 with e (nothing answered). */
typedef int (*cf_map_fn)(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e);

enum cf_route_flags {
	CF_BODY = 1u << 0,         /* the SDK sends a JSON body: parsed for map */
	CF_PROC_ID = 1u << 1,      /* the tail's {id} is param 1 of the call (a process, a context) */
	CF_ACCEPT_SSE = 1u << 2,   /* the call answers an event stream (else JSON) */
};

struct cf_route {
	const char *method;
	const char *tail;          /* the path after …/cf, in route.h's syntax */
	enum cf_kind kind;
	unsigned flags;
	cf_map_fn map;             /* NULL: nothing to map */
	const struct agent_call_spec *call;   /* the native call (the mapper may change it) */
};

/* The session of the SDK's call into c->session: its sessionId, the
 * default session "default" when there is none, no session for
 * __DISABLE_SESSION__ (getSandbox(…, {enableDefaultSession: false})). */
static int cf_session(struct cf_req *c, const json_t *body, struct sbx_err *e)
{
	const char *sid;

	if (cf_str(body, "sessionId", &sid, e) < 0)
		return -1;
	if (!sid || !*sid)
		sid = CF_DEFAULT_SESSION;
	if (strcmp(sid, CF_NO_SESSION) == 0)
		return 0;
	c->session = strdup(sid);
	return c->session ? 0 : err_sys(e, ENOMEM, "session");
}

/* Put c->session into the native body b ("session"). */
static int cf_body_session(struct cf_req *c, json_t *b, struct sbx_err *e)
{
	if (b && c->session && json_object_set_new(b, "session", json_string(c->session)) < 0) {
		json_decref(b);
		return err_sys(e, ENOMEM, "body");
	}
	return cf_set_body(c, b, e);
}

/* execute / execute/stream: exec in the session (cf_session); a stream
 * runs in a subshell of it, as on Cloudflare (it sees the session's cwd
 * and env, its cd/export do not persist, `exit` ends only the subshell);
 * background: true starts a process instead. */
static int map_exec(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const char *command;
	int stream = c->kind == CF_EXEC_STREAM;
	json_t *b;

	if (cf_req_str(body, "command", &command, e) < 0 || cf_session(c, body, e) < 0 ||
	    jsonv_int(body, "timeoutMs", 1, 86400000, &c->timeout_ms, e) < 0)
		return -1;
	c->command = strdup(command);
	if (!c->command)
		return err_sys(e, ENOMEM, "command");
	if (!stream && json_is_true(json_object_get(body, "background"))) {
		c->kind = CF_PROC_START;
		c->call = &agent_call_proc_start;
		return cf_body_session(c, cf_exec_body(body, command, 0, e), e);
	}
	if (stream && c->session) {
		struct buf sub;

		buf_init(&sub, strlen(command) + 8);
		if (buf_adds(&sub, "(\n") < 0 || buf_adds(&sub, command) < 0 ||
		    buf_adds(&sub, "\n)") < 0 || buf_add(&sub, "", 1) < 0) {
			buf_release(&sub);
			return err_sys(e, ENOMEM, "command");
		}
		b = cf_exec_body(body, sub.data, 1, e);
		buf_release(&sub);
	} else {
		b = cf_exec_body(body, command, 1, e);
	}
	c->args.sse = stream;
	return cf_body_session(c, b, e);
}

/* The path fields of a file call: field (required) into c->path, and
 * (when not NULL) field2 into c->new_path. */
static int cf_file_paths(struct cf_req *c, const json_t *body, const char *field,
			 const char *field2, struct sbx_err *e)
{
	const char *p, *p2 = NULL;

	if (cf_req_str(body, field, &p, e) < 0 || (field2 && cf_req_str(body, field2, &p2, e) < 0))
		return -1;
	c->path = strdup(p);
	c->new_path = dup_or_null(p2);
	if (!c->path || (p2 && !c->new_path))
		return err_sys(e, ENOMEM, "path");
	return 0;
}

/* A file call on "path": it becomes the tail of the sbx files route. */
static int map_path(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	if (cf_file_paths(c, body, "path", NULL, e) < 0)
		return -1;
	return cf_set_path(c, c->path, e);
}

/* The SDK's encoding names: 1 base64, 0 text, -1 (400) anything else. */
static int cf_encoding(const char *enc, struct sbx_err *e)
{
	if (strcmp(enc, "base64") == 0)
		return 1;
	if (strcmp(enc, "utf-8") == 0 || strcmp(enc, "utf8") == 0)
		return 0;
	return err_set(e, SBX_E_VALIDATION, "encoding must be utf-8, utf8 or base64");
}

static int map_read(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const char *enc;
	int b64 = 1;

	if (map_path(r, c, body, e) < 0 || cf_str(body, "encoding", &enc, e) < 0)
		return -1;
	if (!enc)
		c->auto_encoding = 1;
	else if ((b64 = cf_encoding(enc, e)) < 0)
		return -1;
	cf_query(c, "encoding", b64 ? "base64" : "utf-8");
	return 0;
}

static int map_write(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const json_t *content = json_object_get(body, "content");
	const char *enc;
	struct buf raw;
	int rc = 0;

	if (map_path(r, c, body, e) < 0 || cf_str(body, "encoding", &enc, e) < 0)
		return -1;
	if (!json_is_string(content))
		return err_set(e, SBX_E_VALIDATION, "'content' must be a string");
	buf_init(&raw, CF_FILE_MAX);
	if (enc && (rc = cf_encoding(enc, e)) < 0) {
		rc = -1;
	} else if (rc == 1) {
		rc = codec_base64_decode(json_string_value(content), json_string_length(content), &raw);
		if (rc < 0 && raw.len + 3 >= CF_FILE_MAX)
			err_set(e, SBX_E_FILE_TOO_LARGE, "'content' is larger than %d bytes",
				CF_FILE_MAX);
		else if (rc < 0)
			err_set(e, SBX_E_VALIDATION, "'content' is not valid base64");
	} else if (buf_add(&raw, json_string_value(content), json_string_length(content)) < 0) {
		rc = err_set(e, SBX_E_FILE_TOO_LARGE, "'content' is larger than %d bytes", CF_FILE_MAX);
	}
	if (rc < 0) {
		buf_release(&raw);
		return -1;
	}
	buf_release(&c->content);
	c->content = raw;
	c->args.content = raw.data ? raw.data : "";
	c->args.content_len = raw.len;
	return 0;
}

/* rename and move are one rename(2) in sbx (the target is replaced, as
 * mv does). */
static int cf_move(struct httpd_req *r, struct cf_req *c, const json_t *body, const char *from,
		   const char *to, struct sbx_err *e)
{
	if (cf_file_paths(c, body, from, to, e) < 0)
		return -1;
	return cf_set_body(c,
			   json_pack("{s:s, s:s, s:b}", "from", c->path, "to", c->new_path,
				     "overwrite", 1),
			   e);
}

static int map_rename(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	return cf_move(r, c, body, "oldPath", "newPath", e);
}

static int map_move(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	return cf_move(r, c, body, "sourcePath", "destinationPath", e);
}

static int map_mkdir(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	c->recursive = json_is_true(json_object_get(body, "recursive"));
	return map_path(r, c, body, e);
}

static int map_list(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	json_t *opts = json_object_get(body, "options");

	if (map_path(r, c, body, e) < 0)
		return -1;
	if (opts && !json_is_object(opts) && !json_is_null(opts))
		return err_set(e, SBX_E_VALIDATION, "'options' must be an object");
	cf_query(c, "recursive", json_is_true(json_object_get(opts, "recursive")) ? "true" : "false");
	cf_query(c, "hidden", json_is_true(json_object_get(opts, "includeHidden")) ? "true" : "false");
	cf_query(c, "limit", CF_LIST_LIMIT);
	return 0;
}

static int map_proc_start(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const char *command;
	json_t *b;

	if (cf_req_str(body, "command", &command, e) < 0)
		return -1;
	c->command = strdup(command);
	if (!c->command || cf_session(c, body, e) < 0)
		return c->command ? -1 : err_sys(e, ENOMEM, "command");
	b = cf_exec_body(body, command, 0, e);
	if (b && cf_copy(b, body, "processId", "id", JV_STRING, e) < 0) {
		json_decref(b);
		return -1;
	}
	if (cf_body_session(c, b, e) < 0)
		return -1;
	/* the session is the process's start state only: errors do not name it */
	free(c->session);
	c->session = NULL;
	return 0;
}

/* ports.watchPort {port, mode, path, statusMin, statusMax, processId,
 * interval}: the wait of process processId (required in sbx) for port,
 * in TCP or HTTP mode; the SDK applies its own timeout (the wait's is the
 * longest, an hour). */
static int map_port_watch(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const char *mode, *path, *pid;
	int64_t port, lo = 200, hi = 399, interval = 500;

	if (jsonv_int(body, "port", 1, 65535, &port, e) < 0 || cf_str(body, "mode", &mode, e) < 0 ||
	    cf_str(body, "path", &path, e) < 0 || cf_str(body, "processId", &pid, e) < 0 ||
	    jsonv_int(body, "statusMin", 100, 599, &lo, e) < 0 ||
	    jsonv_int(body, "statusMax", 100, 599, &hi, e) < 0 ||
	    jsonv_int(body, "interval", 10, 60000, &interval, e) < 0)
		return -1;
	if (!json_object_get(body, "port"))
		return err_set(e, SBX_E_VALIDATION, "'port' is required");
	if (mode && strcmp(mode, "http") != 0 && strcmp(mode, "tcp") != 0)
		return err_set(e, SBX_E_VALIDATION, "'mode' must be http or tcp");
	if (!pid || !*pid)
		return err_set(e, SBX_E_VALIDATION,
			       "'processId' is required: sbx watches a port for a process it started");
	if (hi < lo)
		return err_set(e, SBX_E_VALIDATION, "'statusMax' is below 'statusMin'");
	c->port = (int)port;
	if (!(c->args.ref = c->proc_id = strdup(pid)))
		return err_sys(e, ENOMEM, "process id");
	util_xsnprintf(c->q_port, sizeof(c->q_port), "%d", (int)port);
	util_xsnprintf(c->q_interval, sizeof(c->q_interval), "%lld", (long long)interval);
	cf_query(c, "port", c->q_port);
	cf_query(c, "timeoutMs", "3600000");
	cf_query(c, "intervalMs", c->q_interval);
	if (!mode || strcmp(mode, "http") == 0) {
		if (!(c->q_path = strdup(path ? path : "/")))
			return err_sys(e, ENOMEM, "path");
		util_xsnprintf(c->q_status, sizeof(c->q_status), "%lld-%lld", (long long)lo,
			       (long long)hi);
		cf_query(c, "http", c->q_path);
		cf_query(c, "status", c->q_status);
	}
	return 0;
}

/* utils.getCommands: the executables on PATH, listed by a sessionless exec. */
static int map_commands(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	return cf_set_body(c, json_pack("{s:s}", "command", CF_COMMANDS_SCRIPT), e);
}

/* A field of the SDK's body and its name in the native call's body. */
struct cf_field {
	const char *name, *as;
	unsigned types;
};

/* Make the native call's body the fields (NULL-terminated) copied from
 * the SDK's body. 0 or -1 (400, ENOMEM). */
static int cf_body_of(struct cf_req *c, const json_t *body, const struct cf_field *fields,
		      struct sbx_err *e)
{
	json_t *b = json_object();

	if (!b)
		return err_sys(e, ENOMEM, "body");
	for (const struct cf_field *f = fields; f->name; f++)
		if (cf_copy(b, body, f->name, f->as, f->types, e) < 0) {
			json_decref(b);
			return -1;
		}
	return cf_set_body(c, b, e);
}

static int map_session_create(struct httpd_req *r, struct cf_req *c, json_t *body,
			      struct sbx_err *e)
{
	static const struct cf_field fields[] = {
		{ "id", "id", JV_STRING }, { "env", "env", JV_OBJECT }, { "cwd", "cwd", JV_STRING },
		{ NULL, NULL, 0 },
	};

	if (json_is_string(json_object_get(body, "id")))
		c->session = strdup(json_string_value(json_object_get(body, "id")));
	return cf_body_of(c, body, fields, e);
}

static int map_session_delete(struct httpd_req *r, struct cf_req *c, json_t *body,
			      struct sbx_err *e)
{
	const char *sid;

	if (cf_req_str(body, "sessionId", &sid, e) < 0)
		return -1;
	c->session = strdup(sid);
	if (!c->session || strlen(c->session) >= HTTPD_PARAM_MAX)
		return err_set(e, SBX_E_VALIDATION, "'sessionId' must be 1-64 of [A-Za-z0-9_.-]");
	c->args.ref = c->session;
	return 0;
}

static int map_ctx_create(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	static const struct cf_field fields[] = {
		{ "language", "language", JV_STRING }, { "cwd", "cwd", JV_STRING },
		{ "env_vars", "env", JV_OBJECT }, { NULL, NULL, 0 },
	};

	return cf_body_of(c, body, fields, e);
}

/* {context_id, code, language?, timeout_ms?} -> the run of context_id. */
static int map_code_run(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	static const struct cf_field fields[] = {
		{ "code", "code", JV_STRING }, { "timeout_ms", "timeoutMs", JV_INTEGER },
		{ NULL, NULL, 0 },
	};
	const char *ctx;

	if (cf_req_str(body, "context_id", &ctx, e) < 0)
		return -1;
	c->proc_id = strdup(ctx);
	if (!c->proc_id || strlen(c->proc_id) >= HTTPD_PARAM_MAX)
		return err_set(e, SBX_E_VALIDATION, "'context_id' must be 1-64 of [A-Za-z0-9_.-]");
	c->args.ref = c->proc_id;
	return cf_body_of(c, body, fields, e);
}

/* An optional array of strings without ',' of body joined by ',' into
 * *out (NULL when absent). 0 or -1 (400). */
static int cf_join(const json_t *body, const char *name, char **out, struct sbx_err *e)
{
	const json_t *arr = json_object_get(body, name), *v;
	struct buf b;
	size_t i;

	*out = NULL;
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr))
		return err_set(e, SBX_E_VALIDATION, "'%s' must be an array of strings", name);
	buf_init(&b, 64 * 1024);
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v) || strchr(json_string_value(v), ',') ||
		    (i && buf_adds(&b, ",") < 0) || buf_adds(&b, json_string_value(v)) < 0) {
			buf_release(&b);
			return err_set(e, SBX_E_VALIDATION,
				       "'%s' must be an array of patterns without ','", name);
		}
	}
	*out = b.data ? buf_steal(&b, NULL) : strdup("");
	return *out ? 0 : err_sys(e, ENOMEM, "%s", name);
}

/* watch: the SDK's body as the native query (path, recursive, exclude,
 * include); the SDK's default exclude when it names none; events as a
 * filter of the translation. */
static int map_watch(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const json_t *types = json_object_get(body, "events"), *v, *rec;
	unsigned char rnd[8];
	size_t i;

	if (cf_file_paths(c, body, "path", NULL, e) < 0 || cf_join(body, "exclude", &c->exclude, e) < 0 ||
	    cf_join(body, "include", &c->include, e) < 0)
		return -1;
	rec = json_object_get(body, "recursive");
	if (rec && !json_is_boolean(rec))
		return err_set(e, SBX_E_VALIDATION, "'recursive' must be a boolean");
	if (types && !json_is_array(types))
		return err_set(e, SBX_E_VALIDATION, "'events' must be an array");
	json_array_foreach(types, i, v) {
		unsigned bit = 0;

		for (size_t k = 0; k < ARRAY_SIZE(cf_watch_types); k++)
			if (json_is_string(v) && strcmp(json_string_value(v), cf_watch_types[k]) == 0)
				bit = 1u << k;
		if (!bit)
			return err_set(e, SBX_E_VALIDATION, "'events' holds an unknown event type");
		c->watch_types |= bit;
	}
	if (!c->exclude && !c->include && !(c->exclude = strdup(".git,node_modules,.DS_Store")))
		return err_sys(e, ENOMEM, "exclude");
	if (util_random(rnd, sizeof(rnd)) < 0)
		return err_sys(e, errno, "watch id");
	util_hex(rnd, sizeof(rnd), c->watch_id);
	cf_query(c, "path", c->path);
	cf_query(c, "recursive", json_is_false(rec) ? "false" : "true");
	if (c->exclude)
		cf_query(c, "exclude", c->exclude);
	if (c->include)
		cf_query(c, "include", c->include);
	return 0;
}

/* git/checkout: repoUrl → url; the SDK always sends its targetDir. */
static int map_git(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const char *url;
	json_t *b;

	if (cf_req_str(body, "repoUrl", &url, e) < 0)
		return -1;
	b = json_pack("{s:s}", "url", url);
	if (!b)
		return err_sys(e, ENOMEM, "body");
	if (cf_copy(b, body, "branch", "branch", JV_STRING, e) < 0 ||
	    cf_copy(b, body, "targetDir", "targetDir", JV_STRING, e) < 0 ||
	    cf_copy(b, body, "depth", "depth", JV_INTEGER, e) < 0 ||
	    cf_copy(b, body, "timeoutMs", "timeoutMs", JV_INTEGER, e) < 0) {
		json_decref(b);
		return -1;
	}
	return cf_set_body(c, b, e);
}

/* ping and version: answered here, for a running sandbox (a call of
 * AGENT_CALL_DATA, as every native one). */
static int cf_ping(struct agent_call *c, struct sbx_err *e)
{
	(void)e;
	cf_ok(c->r, json_pack("{s:s, s:I}", "message", "pong", "uptime",
			      (json_int_t)((util_wall_ms() - c->sb->started_at) / 1000)));
	return 0;
}

static int cf_version(struct agent_call *c, struct sbx_err *e)
{
	(void)e;
	cf_ok(c->r, json_pack("{s:s, s:s}", "version", CF_API_VERSION, "sbxVersion", CF_VERSION));
	return 0;
}

static const struct agent_call_spec cf_call_ping = { cf_ping, AGENT_CALL_DATA, NULL };
static const struct agent_call_spec cf_call_version = { cf_version, AGENT_CALL_DATA, NULL };

/* ws/pty: the SDK's terminal() (a WebSocket): its query as sent. */
static int map_pty(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	static const char *const names[] = { "sessionId", "cols", "rows", "shell" };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (httpd_query(r, names[i]))
			cf_query(c, names[i], httpd_query(r, names[i]));
	return 0;
}

/* /api/backup/create and …/restore {dir, archivePath, excludes?}: the
 * archive is sbx's (a zstd tar, snapshots' rules) under the SDK's file
 * name. Excludes that are plain names are kept; glob patterns are not
 * supported and are left out. */
static int map_backup(struct httpd_req *r, struct cf_req *c, json_t *body, struct sbx_err *e)
{
	const char *dir, *archive;
	json_t *b, *ex = json_array(), *v;
	size_t i;

	(void)r;
	if (!ex)
		return err_sys(e, ENOMEM, "body");
	if (cf_req_str(body, "dir", &dir, e) < 0 || cf_req_str(body, "archivePath", &archive, e) < 0) {
		json_decref(ex);
		return -1;
	}
	json_array_foreach(json_object_get(body, "excludes"), i, v) {
		const char *x = json_string_value(v);

		if (x && *x && !strpbrk(x, "/*?[") && strcmp(x, ".") != 0 && strcmp(x, "..") != 0)
			json_array_append_new(ex, json_string(x));
	}
	c->path = strdup(dir);
	b = json_pack("{s:s, s:s, s:o}", "dir", dir, "archivePath", archive, "exclude", ex);
	if (!c->path) {
		json_decref(b);
		return err_sys(e, ENOMEM, "body");
	}
	return cf_set_body(c, b, e);
}

static const struct cf_route cf_routes[] = {
	{ "POST", "/api/execute", CF_EXEC, CF_BODY, map_exec, &agent_call_exec },
	{ "POST", "/api/execute/stream", CF_EXEC_STREAM, CF_BODY, map_exec, &agent_call_exec },
	{ "POST", "/api/read", CF_READ, CF_BODY, map_read, &agent_call_files_get },
	{ "POST", "/api/read/stream", CF_READ_STREAM, CF_BODY, map_path, &agent_call_files_get },
	{ "POST", "/api/write", CF_WRITE, CF_BODY, map_write, &agent_call_files_put },
	{ "POST", "/api/delete", CF_DELETE, CF_BODY, map_path, &agent_call_files_delete },
	{ "POST", "/api/rename", CF_RENAME, CF_BODY, map_rename, &agent_call_move },
	{ "POST", "/api/move", CF_RENAME, CF_BODY, map_move, &agent_call_move },
	{ "POST", "/api/mkdir", CF_MKDIR, CF_BODY, map_mkdir, &agent_call_dirs_put },
	{ "POST", "/api/list-files", CF_LIST, CF_BODY, map_list, &agent_call_dirs_get },
	{ "POST", "/api/exists", CF_EXISTS, CF_BODY, map_path, &agent_call_stat_get },
	{ "POST", "/api/process/start", CF_PROC_START, CF_BODY, map_proc_start, &agent_call_proc_start },
	{ "GET", "/api/process/list", CF_PROC_LIST, 0, NULL, &agent_call_proc_list },
	{ "DELETE", "/api/process/kill-all", CF_PROC_KILL_ALL, 0, NULL, &agent_call_proc_kill_all },
	{ "GET", "/api/process/{id}", CF_PROC_GET, CF_PROC_ID, NULL, &agent_call_proc_get },
	{ "DELETE", "/api/process/{id}", CF_PROC_KILL, CF_PROC_ID, NULL, &agent_call_proc_kill },
	{ "GET", "/api/process/{id}/logs", CF_PROC_LOGS, CF_PROC_ID, NULL,
	  &agent_call_proc_logs },
	{ "GET", "/api/process/{id}/stream", CF_PROC_STREAM, CF_PROC_ID | CF_ACCEPT_SSE, NULL,
	  &agent_call_proc_logs },
	{ "POST", "/api/session/create", CF_SESS_CREATE, CF_BODY, map_session_create,
	  &agent_call_session_create },
	{ "GET", "/api/session/list", CF_SESS_LIST, 0, NULL, &agent_call_session_list },
	{ "POST", "/api/session/delete", CF_SESS_DELETE, CF_BODY, map_session_delete,
	  &agent_call_session_delete },
	{ "POST", "/api/contexts", CF_CTX_CREATE, CF_BODY, map_ctx_create, &agent_call_interp_create },
	{ "GET", "/api/contexts", CF_CTX_LIST, 0, NULL, &agent_call_interp_list },
	{ "DELETE", "/api/contexts/{id}", CF_CTX_DELETE, CF_PROC_ID, NULL, &agent_call_interp_delete },
	{ "POST", "/api/execute/code", CF_CODE_RUN, CF_BODY | CF_ACCEPT_SSE, map_code_run,
	  &agent_call_interp_run },
	{ "POST", "/api/watch", CF_WATCH, CF_BODY | CF_ACCEPT_SSE, map_watch, &agent_call_watch },
	{ "POST", "/api/git/checkout", CF_GIT, CF_BODY, map_git, &agent_call_git_checkout },
	{ "GET", "/api/ping", CF_PLAIN, 0, NULL, &cf_call_ping },
	{ "GET", "/api/version", CF_PLAIN, 0, NULL, &cf_call_version },
	{ "GET", "/ws/pty", CF_PLAIN, 0, map_pty, &agent_call_term_cf_pty },
	{ "GET", "/api/commands", CF_COMMANDS, 0, map_commands, &agent_call_exec },
	{ "POST", "/api/port-watch", CF_PORT_WATCH, CF_BODY, map_port_watch, &agent_call_proc_wait },
	{ "POST", "/api/backup/create", CF_BACKUP_CREATE, CF_BODY, map_backup,
	  &agent_call_snap_to_file },
	{ "POST", "/api/backup/restore", CF_BACKUP_RESTORE, CF_BODY, map_backup,
	  &agent_call_snap_from_file },
};

static const struct cf_route *cf_route_find(const char *method, const char *tail,
					    char params[][HTTPD_PARAM_MAX])
{
	char path[HTTPD_PARAM_MAX * 2];

	if (snprintf(path, sizeof(path), "/%s", tail) >= (int)sizeof(path))
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(cf_routes); i++)
		if (strcmp(cf_routes[i].method, method) == 0 &&
		    httpd_match(cf_routes[i].tail, path, params) >= 0)
			return &cf_routes[i];
	return NULL;
}

/* Map r, the SDK's request of row rt (params: its tail's captures), into
 * the request of its native call. 0 or -1 with e (nothing answered). */
static int cf_map(struct httpd_req *r, const struct cf_route *rt, struct cf_req *c,
		  char params[][HTTPD_PARAM_MAX], struct sbx_err *e)
{
	json_t *body = NULL;
	int rc;

	if (!rt)
		return err_set(e, SBX_E_ROUTE_NOT_FOUND,
			       "this endpoint of the Cloudflare Sandbox API is not supported by sbx (docs/COMPAT.md)");
	if ((rt->flags & CF_PROC_ID) && !(c->args.ref = c->proc_id = strdup(params[0])))
		return err_sys(e, ENOMEM, "process id");
	if ((rt->flags & CF_BODY) && !(body = cf_body(r, e)))
		return -1;
	c->call = rt->call;
	rc = rt->map ? rt->map(r, c, body, e) : 0;
	json_decref(body);
	if (rt->flags & CF_ACCEPT_SSE)
		c->args.sse = 1;
	return rc;
}

void agent_cf_dispatch(struct httpd_req *r)
{
	char params[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX];
	const struct cf_route *rt = cf_route_find(httpd_method(r), httpd_tail(r), params);
	struct sbx_err e = { 0 };
	struct cf_req *c;

	c = cf_begin(r, rt ? rt->kind : CF_PLAIN);
	if (!c)
		return;
	if (httpd_body_too_large(r) == 2) {
		err_set(&e, SBX_E_NO_CAPACITY,
			"this node buffers too many large request bodies at once; retry");
		agent_call_reply_err(r, &e);
		return;
	}
	if (httpd_body_too_large(r)) {
		/* over the bound of the route's row (HTTPD_ROUTE_BIG_BODY) */
		err_set(&e, rt && rt->kind == CF_WRITE ? SBX_E_FILE_TOO_LARGE : SBX_E_PAYLOAD_TOO_LARGE,
			"the request body is larger than %d bytes", HTTPD_MAX_BIG_BODY);
		agent_call_reply_err(r, &e);
		return;
	}
	if (cf_map(r, rt, c, params, &e) < 0) {
		agent_call_reply_err(r, &e);
		return;
	}
	/* c lives with r's filter: as long as the request */
	agent_call_serve(r, c->call, &c->args);
}
