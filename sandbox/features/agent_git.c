/*
 * agent_git.c — POST /v1/sandboxes/{id}/git/checkout (agent_git.h).
 *
 * git is a command run in the sandbox like any exec (rt_spawn through its
 * sbx-init: its network, namespaces, limits and rights), argv only, never
 * a shell line built from the request: a fixed sh script gets the target
 * and git's arguments as positional parameters, and the URL comes after
 * "--". The environment makes git fail rather than wait: no terminal
 * prompt, ssh in batch mode, only the allowed protocols (also for
 * redirects and submodules), C messages (what git_error reads).
 *
 * The answer is JSON once git ends or the timeout kills its tree: the
 * redacted URL, the branch checked out and its commit; or an error whose
 * code comes from git's stderr. The URL's userinfo is redacted in every
 * answer and log line here, and git's own words are quoted only for a URL
 * without credentials (git may print the URL it was given).
 */
#include "agent_git.h"
#include "agent_lifecycle.h"
#include "child_io.h"
#include "agent_exec.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define GIT_STDOUT_MAX 4096

/* $1 the target, then git clone's options, "--" and the URL. */
static const char git_script[] =
	"t=$1; shift; git clone --quiet \"$@\" \"$t\" || exit $?; "
	"printf 'branch=%s\\n' \"$(git -C \"$t\" symbolic-ref --short -q HEAD)\"; "
	"printf 'commit=%s\\n' \"$(git -C \"$t\" rev-parse -q --verify HEAD)\"; exit 0";

const struct jsonv_field agent_git_checkout_fields[] = {
	{ "url", JV_STRING, 1 },
	{ "branch", JV_STRING, 0 },
	{ "depth", JV_INTEGER, 0 },
	{ "targetDir", JV_STRING, 0 },
	{ "timeoutMs", JV_INTEGER, 0 },
	{ NULL, 0, 0 },
};

/* --- the rules --- */

int git_url_parse(const char *url, size_t len, struct git_url *u, struct sbx_err *e)
{
	static const char *const schemes[] = { "https://", "http://", "git://", "ssh://", "file://" };
	const char *rest = NULL, *auth_end, *at = NULL, *p, *seg;
	size_t seglen, slen = 0;

	memset(u, 0, sizeof(*u));
	if (!url || len == 0 || len > GIT_URL_MAX || strlen(url) != len)
		return err_set(e, SBX_E_VALIDATION, "'url' must be 1-%d bytes", GIT_URL_MAX);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f)
			return err_set(e, SBX_E_VALIDATION, "'url' must not hold spaces or control bytes");
	for (size_t i = 0; i < ARRAY_SIZE(schemes) && !rest; i++)
		if (strncmp(url, schemes[i], strlen(schemes[i])) == 0) {
			slen = strlen(schemes[i]);
			rest = url + slen;
		}
	if (!rest)
		return err_set(e, SBX_E_VALIDATION,
			       "'url' must be an https://, http://, git://, ssh:// or file:// URL");
	if (strncmp(url, "file://", 7) == 0) {
		if (rest[0] != '/')
			return err_set(e, SBX_E_VALIDATION, "a file:// URL must name an absolute path (file:///…)");
		auth_end = rest;
	} else {
		auth_end = rest + strcspn(rest, "/?#");
		for (p = rest; p < auth_end; p++)
			if (*p == '@')
				at = p;
		if ((at ? at + 1 : rest) == auth_end)
			return err_set(e, SBX_E_VALIDATION, "'url' names no host");
	}
	u->creds = at != NULL;
	/* at most len + 4 bytes: redacted is sized for it */
	util_xsnprintf(u->redacted, sizeof(u->redacted), "%.*s%s%s", (int)slen, url,
		       at ? "***@" : "", at ? at + 1 : rest);
	/* the last non-empty path segment, without ".git" */
	p = auth_end + strcspn(auth_end, "?#");
	while (p > auth_end && p[-1] == '/')
		p--;
	seg = p;
	while (seg > auth_end && seg[-1] != '/')
		seg--;
	seglen = (size_t)(p - seg);
	if (seglen > 4 && memcmp(p - 4, ".git", 4) == 0)
		seglen -= 4;
	if (seglen == 0 || seglen > FSPATH_NAME_MAX || (seglen <= 2 && seg[0] == '.' &&
							 (seglen == 1 || seg[1] == '.')))
		memcpy(u->name, "repo", 5);
	else
		util_xsnprintf(u->name, sizeof(u->name), "%.*s", (int)seglen, seg);
	return 0;
}

int git_branch_check(const char *b, size_t len, struct sbx_err *e)
{
	if (!b || len == 0 || len > GIT_BRANCH_MAX || strlen(b) != len ||
	    strspn(b, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/+-") != len ||
	    b[0] == '-' || b[0] == '/' || b[len - 1] == '/' || b[len - 1] == '.' ||
	    strstr(b, "..") || strstr(b, "//") || strstr(b, "/.") ||
	    (len >= 5 && strcmp(b + len - 5, ".lock") == 0))
		return err_set(e, SBX_E_VALIDATION,
			       "'branch' must be a branch or tag name of 1-%d of [A-Za-z0-9._/+-]",
			       GIT_BRANCH_MAX);
	return 0;
}

static int has(const char *text, const char *what)
{
	return strstr(text, what) != NULL;
}

int git_error(const char *text, size_t len, int timed_out, int start_errno,
	      const struct git_url *u, struct sbx_err *e)
{
	static const struct {
		const char *needle;
		enum sbx_ecode code;
		const char *what;
	} rules[] = {
		{ "git: not found", SBX_E_GIT_CLONE_FAILED, "git is not installed in the sandbox's image" },
		{ "Remote branch", SBX_E_GIT_BRANCH_NOT_FOUND, "the branch does not exist" },
		{ "not found in upstream", SBX_E_GIT_BRANCH_NOT_FOUND, "the branch does not exist" },
		{ "Authentication failed", SBX_E_GIT_AUTH_FAILED, "the credentials were refused" },
		{ "could not read Username", SBX_E_GIT_AUTH_FAILED, "the repository needs credentials" },
		{ "could not read Password", SBX_E_GIT_AUTH_FAILED, "the repository needs credentials" },
		{ "Permission denied", SBX_E_GIT_AUTH_FAILED, "the credentials were refused" },
		{ "Access denied", SBX_E_GIT_AUTH_FAILED, "the credentials were refused" },
		{ "returned error: 401", SBX_E_GIT_AUTH_FAILED, "the repository needs credentials" },
		{ "returned error: 403", SBX_E_GIT_AUTH_FAILED, "the credentials were refused" },
		{ "Host key verification failed", SBX_E_GIT_AUTH_FAILED, "the host key was refused" },
		{ "Repository not found", SBX_E_GIT_REPOSITORY_NOT_FOUND, "the repository does not exist" },
		{ "does not appear to be a git repository", SBX_E_GIT_REPOSITORY_NOT_FOUND,
		  "the repository does not exist" },
		{ "does not exist", SBX_E_GIT_REPOSITORY_NOT_FOUND, "the repository does not exist" },
		{ "not exported", SBX_E_GIT_REPOSITORY_NOT_FOUND, "the repository does not exist" },
		{ "returned error: 404", SBX_E_GIT_REPOSITORY_NOT_FOUND, "the repository does not exist" },
		{ "already exists and is not an empty directory", SBX_E_FILE_EXISTS,
		  "the target directory exists and is not empty" },
		{ "No space left on device", SBX_E_NO_SPACE, "the sandbox's disk is full" },
		{ "Could not resolve host", SBX_E_GIT_NETWORK_ERROR, "the host name does not resolve" },
		{ "Could not resolve hostname", SBX_E_GIT_NETWORK_ERROR, "the host name does not resolve" },
		{ "unable to look up", SBX_E_GIT_NETWORK_ERROR, "the host name does not resolve" },
		{ "Connection refused", SBX_E_GIT_NETWORK_ERROR, "the connection was refused" },
		{ "Connection timed out", SBX_E_GIT_NETWORK_ERROR, "the connection timed out" },
		{ "Network is unreachable", SBX_E_GIT_NETWORK_ERROR, "the network is unreachable" },
		{ "unable to connect", SBX_E_GIT_NETWORK_ERROR, "cannot connect to the host" },
		{ "Failed to connect", SBX_E_GIT_NETWORK_ERROR, "cannot connect to the host" },
		{ "Could not connect", SBX_E_GIT_NETWORK_ERROR, "cannot connect to the host" },
		{ "unable to access", SBX_E_GIT_NETWORK_ERROR, "cannot reach the repository" },
		{ "the remote end hung up", SBX_E_GIT_NETWORK_ERROR, "the connection broke off" },
		{ "early EOF", SBX_E_GIT_NETWORK_ERROR, "the connection broke off" },
	};
	char last[200] = "";
	const char *end = text + len, *line;
	enum sbx_ecode code = SBX_E_GIT_CLONE_FAILED;
	const char *what = "git clone failed";

	if (timed_out)
		return err_set(e, SBX_E_GIT_TIMEOUT, "git clone of '%s' took longer than its timeout",
			       u->redacted);
	if (start_errno)
		return err_set(e, SBX_E_GIT_CLONE_FAILED, "cannot run git in the sandbox: %s",
			       strerror(start_errno));
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
		if (has(text, rules[i].needle)) {
			code = rules[i].code;
			what = rules[i].what;
			break;
		}
	}
	if (code == SBX_E_GIT_CLONE_FAILED && len == 0)
		what = "git clone failed without a message";
	/* git's last line, quoted only when it cannot hold a secret */
	while (end > text && (end[-1] == '\n' || end[-1] == '\r'))
		end--;
	line = end;
	while (line > text && line[-1] != '\n')
		line--;
	if (!u->creds && end > line)   /* cut to what last holds */
		util_xsnprintf(last, sizeof(last), ": %.*s",
			       (int)(end - line < (ptrdiff_t)sizeof(last) - 3 ? end - line
									  : (ptrdiff_t)sizeof(last) - 3),
			       line);
	return err_set(e, code, "git clone of '%s': %s%s", u->redacted, what, last);
}

/* --- the run --- */

struct git_run {
	struct agent *a;
	struct httpd_req *r;       /* NULL once the request is over */
	struct rt_sandbox *rsb;    /* NULL once git has exited */
	char key[AGENT_KEY_MAX];
	int64_t handle;
	int64_t t0;
	struct child_io *io;
	struct buf out, err;
	struct event *timer;
	int exited, timed_out;
	struct rt_exit ex;
	struct agent_stream live;
	struct git_url url;
	char target[FSPATH_MAX + 16];
};

static void run_free(struct git_run *g)
{
	child_io_free(g->io);
	if (g->timer)
		event_free(g->timer);
	buf_release(&g->out);
	buf_release(&g->err);
	agent_sb_stream_end(g->a, &g->live);
	free(g);
}

static void io_data(void *arg, int i, const char *data, size_t n)
{
	struct git_run *g = arg;
	struct buf *b = i == 0 ? &g->out : &g->err;

	if (i == 1 && b->len + n > GIT_STDERR_MAX) {
		/* keep the tail: git's verdict is its last lines */
		size_t keep = n >= GIT_STDERR_MAX ? 0 : GIT_STDERR_MAX - n;

		if (keep < b->len) {
			memmove(b->data, b->data + b->len - keep, keep);
			b->len = keep;
		}
		if (n > GIT_STDERR_MAX) {
			data += n - GIT_STDERR_MAX;
			n = GIT_STDERR_MAX;
		}
	}
	buf_add(b, data, n);   /* stdout beyond its bound is not ours to keep */
}

static const struct child_io_ops git_io_ops = { io_data, NULL, NULL };

/* "key=value" lines of the script's stdout: value of key into out. */
static void out_field(const struct git_run *g, const char *key, char *out, size_t outsz)
{
	const char *p = g->out.data ? g->out.data : "";
	size_t klen = strlen(key);

	out[0] = '\0';
	for (; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
		if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
			size_t n = strcspn(p + klen + 1, "\n");

			if (n < outsz) {   /* a longer value is none we can name */
				memcpy(out, p + klen + 1, n);
				out[n] = '\0';
			}
			return;
		}
	}
}

static void answer(struct git_run *g)
{
	struct sbx_err e;
	char branch[GIT_BRANCH_MAX + 1], commit[80];

	if (!agent_stream_lease_held(g->a, &g->live)) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE, "this node lost its lease during the checkout");
	} else if (g->ex.sandbox_gone) {
		err_set(&e, SBX_E_NODE_UNAVAILABLE,
			"the sandbox was stopped (sleep, restart or delete) during the checkout");
	} else if (g->timed_out || g->ex.start_errno || g->ex.exit_code != 0) {
		git_error(g->err.data ? g->err.data : "", g->err.len, g->timed_out, g->ex.start_errno,
			  &g->url, &e);
		log_info("git checkout in '%s' of '%s' failed: %s (exit %d)", g->key, g->url.redacted,
			 err_name(e.code), g->ex.exit_code);
	} else {
		struct agent_git_result res;

		out_field(g, "branch", branch, sizeof(branch));
		out_field(g, "commit", commit, sizeof(commit));
		res = (struct agent_git_result){ g->url.redacted, branch, commit, g->target,
						 util_now_ms() - g->t0 };
		if (agent_call_offer(g->r, AGENT_GIT_RESULT, &res))
			return;
		httpd_reply_json(g->r, 200,
				 json_pack("{s:s, s:s, s:s, s:s, s:I}", "url", g->url.redacted, "branch",
					   branch, "commit", commit, "targetDir", g->target, "durationMs",
					   (json_int_t)(util_now_ms() - g->t0)));
		return;
	}
	agent_call_reply_err(g->r, &e);
}

static void on_exited(void *arg, const struct rt_exit *ex)
{
	struct git_run *g = arg;

	g->exited = 1;
	g->ex = *ex;
	g->rsb = NULL;
	if (g->timer)
		event_del(g->timer);
	if (!g->r) {
		run_free(g);
		return;
	}
	/* git has exited: what it wrote is in the pipes */
	if (g->io)
		child_io_drain(g->io, -1, 2 * GIT_STDERR_MAX);
	answer(g);
}

static void on_started(void *arg, pid_t pid)
{
	(void)arg;
	(void)pid;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct git_run *g = arg;

	(void)fd;
	(void)what;
	if (g->exited || !g->rsb)
		return;
	g->timed_out = 1;
	rt_kill(g->rsb, g->handle, SIGKILL, 0, NULL);
}

static void on_close(void *arg, int failed)
{
	struct git_run *g = arg;

	(void)failed;
	g->r = NULL;
	agent_sb_stream_end(g->a, &g->live);
	if (g->exited) {
		run_free(g);
		return;
	}
	/* the client went away: git's tree goes too; on_exited frees g */
	if (g->rsb)
		rt_kill(g->rsb, g->handle, SIGKILL, 0, NULL);
}

/* The environment of git: the sandbox's, and what keeps git from waiting
 * for a human. New array (agent_env_free) or NULL. */
static char **git_env(const struct agent_sb *sb)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "GIT_TERMINAL_PROMPT", "0",
			      "GIT_ASKPASS", "", "SSH_ASKPASS", "", "LC_ALL", "C",
			      "GIT_ALLOW_PROTOCOL", "https:http:git:ssh:file", "GIT_SSH_COMMAND",
			      "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new");
	char **env = o ? agent_env_merge(sb->base_env, o) : NULL;

	json_decref(o);
	return env;
}

int agent_git_checkout(struct agent_call *c, struct sbx_err *e)
{
	const json_t *jurl = json_object_get(c->body, "url");
	const json_t *jbranch = json_object_get(c->body, "branch");
	const json_t *jtarget = json_object_get(c->body, "targetDir");
	int64_t depth = 0, timeout_ms = GIT_TIMEOUT_DEFAULT_MS;
	char depth_s[24], def_target[FSPATH_MAX + 16];
	char *argv[16];
	int argc = 0, io[3] = { -1, -1, -1 };
	struct fspath fp;
	struct git_run *g;
	struct rt_proc_spec ps;
	char **env;
	struct timeval tv;

	if (jsonv_int(c->body, "depth", 1, GIT_DEPTH_MAX, &depth, e) < 0 ||
	    jsonv_int(c->body, "timeoutMs", 1, GIT_TIMEOUT_MAX_MS, &timeout_ms, e) < 0)
		return -1;
	g = calloc(1, sizeof(*g));
	if (!g)
		return err_sys(e, ENOMEM, "git checkout");
	if (git_url_parse(json_string_value(jurl), json_string_length(jurl), &g->url, e) < 0 ||
	    (jbranch && git_branch_check(json_string_value(jbranch), json_string_length(jbranch), e) < 0))
		goto fail;
	if (jtarget) {
		if (fspath_parse(json_string_value(jtarget), json_string_length(jtarget), &fp, e) < 0)
			goto fail;
	} else {
		util_xsnprintf(def_target, sizeof(def_target), "/" FSPATH_WORKSPACE "/%s", g->url.name);
		if (fspath_parse(def_target, strlen(def_target), &fp, e) < 0)
			goto fail;
	}
	if (!*fp.name) {
		err_set(e, SBX_E_VALIDATION, "'targetDir' must not be '/'");
		goto fail;
	}
	memcpy(g->target, fp.abs, strlen(fp.abs) + 1);
	argv[argc++] = (char *)"/bin/sh";
	argv[argc++] = (char *)"-c";
	argv[argc++] = (char *)git_script;
	argv[argc++] = (char *)"sbx-git";
	argv[argc++] = g->target;
	if (depth) {
		util_xsnprintf(depth_s, sizeof(depth_s), "%lld", (long long)depth);
		argv[argc++] = (char *)"--depth";
		argv[argc++] = depth_s;
	}
	if (jbranch) {
		argv[argc++] = (char *)"--branch";
		argv[argc++] = (char *)json_string_value(jbranch);
	}
	argv[argc++] = (char *)"--";
	argv[argc++] = (char *)json_string_value(jurl);
	argv[argc] = NULL;

	g->a = c->a;
	g->r = c->r;
	g->rsb = c->sb->rt;
	g->t0 = util_now_ms();
	snprintf(g->key, sizeof(g->key), "%s", c->sb->key);
	buf_init(&g->out, GIT_STDOUT_MAX);
	buf_init(&g->err, GIT_STDERR_MAX);
	g->timer = evtimer_new(c->a->base, on_timeout, g);
	env = git_env(c->sb);
	if (!g->timer || !env) {
		agent_env_free(env);
		err_sys(e, ENOMEM, "git checkout");
		goto fail;
	}
	ps = (struct rt_proc_spec){ .argv = argv, .env = env, .cwd = "/" };
	g->handle = agent_spawn_piped(c->sb->rt, &ps, io, on_started, on_exited, g, e);
	agent_env_free(env);
	if (g->handle < 0) {
		err_prefix(e, "cannot run git");
		goto fail;
	}
	/* from here on_exited owns the end of g */
	agent_sb_stream_begin(c->sb, &g->live);
	g->io = child_io_new(c->a->base, io, 0, &git_io_ops, g);
	if (g->io) {
		child_io_close_stdin(g->io, 0);
		child_io_set_burst(g->io, 8);
		child_io_pause(g->io, 0);
	}
	tv.tv_sec = (time_t)(timeout_ms / 1000);
	tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
	evtimer_add(g->timer, &tv);
	httpd_on_close(c->r, on_close, g);
	httpd_defer(c->r);
	return 0;
fail:
	if (g->timer)
		event_free(g->timer);
	buf_release(&g->out);
	buf_release(&g->err);
	free(g);
	return -1;
}
