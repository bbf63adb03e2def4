/*
 * runtime.c — the sandbox runtime (runtime.h): sandboxes as records of the
 * agent's event loop, their sbx-init connections and process tables.
 *
 * Building blocks: cgroup.h (limits), mounts.h (root filesystem plan),
 * image.h (images), spawn.h (clone + setup + exec of sbx-init),
 * seccomp_filter.h and caps.h (privileges), initproto.h (talking to init).
 */
#include "runtime.h"
#include "caps.h"
#include "cgroup.h"
#include "donepipe.h"
#include "egress.h"
#include "idrange.h"
#include "image.h"
#include "initproto.h"
#include "keyidx.h"
#include "log.h"
#include "mounts.h"
#include "netns.h"
#include "seccomp_filter.h"
#include "spawn.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static struct rt_sandbox *rt_find(struct rt *rt, const char *key);
static int builders_start(struct rt *rt, struct sbx_err *e);
struct rt_dying;
static void dying_work(struct rt_dying *d, int wait);
static void back_posted(void *p, void *arg);
static void on_back(evutil_socket_t fd, short what, void *arg);
static void builders_stop(struct rt *rt);
static int spare_take(struct rt *rt);

#define RT_KEY_MAX 160
/* Host-wide: every agent of the host locks the uid ranges it hands out here. */
#define RT_UID_LOCK_DIR "/run/sbx/uid-ranges"

struct rt_proc {
	struct rt_proc *next;
	struct rt_sandbox *sb;
	int64_t handle;
	pid_t pid;
	int started;
	int exited;            /* EXITED came; the record stays until GONE */
	rt_started_cb on_started;
	rt_exited_cb on_exited;
	rt_gone_cb on_gone;
	void *arg;
	struct event *kill_ev; /* SIGKILL of the tree after the grace */
};

struct rt_out {
	struct rt_out *next;
	size_t len;
	int fds[3];
	int nfds;
	char data[];
};

struct rt_sandbox {
	struct rt_sandbox *next;
	struct keyidx_node idx;   /* in rt.by_key while in rt.list */
	struct rt *rt;
	char key[RT_KEY_MAX];
	char cg_key[RT_KEY_MAX];  /* its cgroups' name: the key, or the pool name where
				   * cgroups cannot be renamed (v2) */
	pid_t pid;
	uint64_t serial;          /* unique for the agent's life (fd_memo) */
	int pidfd, sock;          /* all a sandbox holds while idle (rt_netns_fd) */
	int64_t host_uid;         /* its id range's first id; -1: none (no userns) */
	char workdir[256];        /* an image's WorkingDir: processes' cwd for "/workspace" */
	int64_t uid, gid;         /* an image's User (rt_spec); uid -1: root */
	struct event *ev_sock, *ev_write, *ev_pid;
	struct rt_proc *procs;
	struct rt_out *outq, **outq_tail;
	int64_t next_handle;
	int dead;          /* init is gone */
	int destroyed;     /* rt_destroy ran: free when dispatch ends */
	int pooled;        /* warm pool member: not in rt->count (rt->npooled) */
	int dispatching;
	struct egress_link net;  /* network "egress" only */
};

/* Someone waiting for a dying container to be gone (rt_after_gone). */
struct rt_gone_waiter {
	struct rt_gone_waiter *next;
	void (*done)(void *arg);
	void *arg;
};

/* What a build thread hands back to the loop through rt->back: the first
 * member of a build it ran (struct rt_build) and of a dying container it
 * reaped (struct rt_dying), which on_back tells apart. */
enum rt_back { RT_BACK_BUILD = 1, RT_BACK_DYING };

/* A container killed by rt_destroy whose init is not reaped yet: what is
 * released once it is (dying_finish). */
struct rt_dying {
	enum rt_back back;        /* RT_BACK_DYING */
	struct rt_dying *next;
	struct rt *rt;
	char key[RT_KEY_MAX];
	char cg_key[RT_KEY_MAX];
	int pidfd;
	int64_t host_uid;
	int pooled;               /* not in rt->ndying */
	int heap;                 /* allocated and in rt->dying (else on the stack) */
	struct rt_dying *qnext;   /* rt->reap_queue, under rt->lock */
	int off_loop;             /* given to a build thread (on_reaped) */
	struct egress_link net;
	struct event *ev;
	struct rt_gone_waiter *waiters;
};

/* Network namespaces the build threads keep ready: making one (the
 * kernel sets up a whole network stack) is then off the clone of init,
 * and a burst of creates takes them all at once. */
#define RT_SPARES 4

struct rt {
	struct event_base *base;
	struct sbx_conf conf;
	struct cg *cg;
	struct sec_filter sec;
	uint64_t caps_keep;
	int caps_last;
	int userns;
	struct idrange ids;       /* with userns: one range per sandbox */
	int *idmap_fds;           /* per range: the image's idmap user namespace, or -1 */
	unsigned nidmap;          /* of them open (at most RT_IDMAP_KEEP) */
	uid_t image_owner;        /* host uid owning the image files on disk */
	int init_fd;
	struct spawn_fds spawn_fds;  /* the fds builds' clones keep (spawn.h) */
	char default_image[PATH_MAX];
	char mnt_base[PATH_MAX];
	struct rt_sandbox *list;
	struct keyidx by_key;     /* list's sandboxes by key (rt_find) */
	unsigned count;
	unsigned npooled;  /* warm pool members (in list, not in count) */
	struct rt_dying *dying;  /* killed, not yet reaped (rt_destroy) */
	unsigned ndying;   /* of them not pooled: they count against the capacity */
	rt_sandbox_died_cb died_cb;
	void *died_arg;
	char *buf;         /* INITPROTO_MAX bytes for encoding and receiving */
	struct egress *egress;   /* NULL: network "egress" is not available */
	/* Builds (rt_create_async). The loop owns builds, nbuilding and
	 * nbuilding_pooled; the queue and stopping are under lock; idmap_fds
	 * and egress are shared with the build threads under lock too. */
	struct rt_build *builds;  /* every build not yet handed back */
	unsigned nbuilding, nbuilding_pooled;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct rt_build *queue, **queue_tail;
	int stopping;
	pthread_t *threads;
	unsigned nthreads;
	/* Dying containers whose init exited, for a build thread to reap and
	 * release (dying_work; under lock). */
	struct rt_dying *reap_queue;
	/* build threads -> loop: the builds they ran, the containers they
	 * reaped (enum rt_back) */
	struct donepipe back;
	struct event *ev_back;
	/* ids is the build threads' under ids_lock (idrange_get opens and
	 * flocks a file, and scans /proc when full); the loop gives ranges
	 * back through ids_put (under lock), taken in by the next get. */
	pthread_mutex_t ids_lock;
	uint32_t *ids_put;
	unsigned nids_put;
	/* Network namespaces made ahead by idle build threads (spare_make),
	 * taken by builds (spare_take); under lock. spare_paused: the last
	 * making failed; the next build lifts it. */
	int spares[RT_SPARES];
	unsigned nspares, spare_making;
	int spare_paused;
};

/* One build: planned on the loop (build_prepare), run on a build thread
 * or inline (build_run), handed back on the loop (build_finish). */
struct rt_build {
	enum rt_back back;         /* RT_BACK_BUILD */
	struct rt_build *next;     /* rt->builds */
	struct rt_build *qnext;    /* rt->queue, under rt->lock */
	struct rt *rt;
	struct rt_sandbox *sb;     /* the build's until build_finish */
	int pooled;
	int queued;                /* in rt->queue (under rt->lock) */
	int cancelled;             /* loop: done never runs, the result is destroyed */
	int held;                  /* spec.after_gone: not queued until the key's dying
				    * container is gone (dying_finish queues it) */
	rt_built_cb done;
	void *arg;
	void (*gone)(void *arg);
	void *gone_arg;
	/* the plan */
	char lower[PATH_MAX];
	char merged[PATH_MAX];
	char hostname[64];
	char *layers;              /* owned, or NULL */
	int bind_usr, shift;
	int64_t disk;
	struct cg_limits lim;
	enum rt_network network;
	/* the outcome, written by the thread before it hands b back */
	int rc;
	struct sbx_err err;
};

/* ---- helpers ---------------------------------------------------------- */

/* The netns or root fd a thread opened last, for the sandbox of serial
 * (rt_netns_fd, rt_root_fd): an idle sandbox holds neither. */
struct fd_memo {
	uint64_t serial;
	int fd;
};

static _Thread_local struct fd_memo netns_memo = { 0, -1 }, root_memo = { 0, -1 };
static _Atomic uint64_t sandbox_serials;

/* m's fd when it is sb's, else /proc/<init>/<what> opened anew (the one
 * before closed). Init is the agent's child until reaped (dead), so its
 * pid names it. Borrowed until this thread's next call with m; -1 with
 * errno when init is gone. Async-signal-safe (a forked child may call
 * it): no stdio. */
static int memo_open(struct fd_memo *m, const struct rt_sandbox *sb, const char *what, int flags)
{
	char path[64] = "/proc/", digits[16];
	size_t n = strlen(path), d = 0;
	unsigned long pid = (unsigned long)sb->pid;

	if (m->fd >= 0 && m->serial == sb->serial)
		return m->fd;
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
	if (sb->dead || sb->pid <= 0 || strlen(what) > 32) {
		errno = ESRCH;
		return -1;
	}
	do
		digits[d++] = (char)('0' + pid % 10);
	while ((pid /= 10) && d < sizeof(digits));
	while (d)
		path[n++] = digits[--d];
	path[n++] = '/';
	memcpy(path + n, what, strlen(what) + 1);
	m->fd = open(path, flags | O_CLOEXEC);
	m->serial = sb->serial;
	return m->fd;
}

/* Close this thread's memos of sb (it is going away). */
static void memo_forget(const struct rt_sandbox *sb)
{
	struct fd_memo *memos[] = { &netns_memo, &root_memo };

	for (size_t i = 0; i < ARRAY_SIZE(memos); i++) {
		if (memos[i]->fd >= 0 && memos[i]->serial == sb->serial) {
			close(memos[i]->fd);
			memos[i]->fd = -1;
		}
	}
}

static int valid_key(const char *k)
{
	size_t n = strlen(k);

	if (n < 1 || n >= RT_KEY_MAX || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = k[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static int valid_hostname(const char *h)
{
	size_t n = strlen(h);

	if (n < 1 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = h[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.'))
			return 0;
	}
	return 1;
}

static int try_userns(void *arg)
{
	(void)arg;
	return unshare(CLONE_NEWUSER) == 0 ? 0 : 1;
}

/* Can this host create user namespaces? Probed once in a throwaway child. */
static int probe_userns(void)
{
	struct spawn_host_cmd cmd = { .in = -1, .out = -1, .err = -1, .fn = try_userns };
	struct sbx_err e = { 0 };
	int pidfd, rc;

	if (spawn_host(&cmd, &pidfd, &e) < 0)
		return 0;
	rc = spawn_host_wait(pidfd, &e);
	close(pidfd);
	return rc == 0;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		int dup = 0;

		for (int j = 0; j < i; j++)
			if (fds[j] == fds[i])
				dup = 1;
		if (!dup && fds[i] >= 0)
			close(fds[i]);
	}
}

/* ---- process table ---------------------------------------------------- */

static struct rt_proc *proc_find(struct rt_sandbox *sb, int64_t handle, struct rt_proc ***link)
{
	struct rt_proc **pp;

	for (pp = &sb->procs; *pp; pp = &(*pp)->next) {
		if ((*pp)->handle == handle) {
			if (link)
				*link = pp;
			return *pp;
		}
	}
	return NULL;
}

/* The process itself ended: fire on_exited once (the record stays while
 * its tree lives). p may be freed by the callback (rt_destroy). */
static void proc_exited(struct rt_proc *p, const struct rt_exit *ex)
{
	rt_exited_cb cb = p->on_exited;

	if (p->exited)
		return;
	p->exited = 1;
	p->on_started = NULL;
	p->on_exited = NULL;
	if (cb)
		cb(p->arg, ex);
}

/* Unlink p: no process of its tree is left (or the sandbox is gone). Fire
 * on_exited (when ex is given and it did not yet), then on_gone; free it. */
static void proc_finish(struct rt_sandbox *sb, struct rt_proc **link, const struct rt_exit *ex)
{
	struct rt_proc *p = *link;
	rt_exited_cb exited = p->exited ? NULL : p->on_exited;
	rt_gone_cb gone = p->on_gone;
	void *arg = p->arg;

	*link = p->next;
	if (p->kill_ev)
		event_free(p->kill_ev);
	free(p);
	if (exited && ex)
		exited(arg, ex);
	if (gone)
		gone(arg);
}

static void procs_fail_all(struct rt_sandbox *sb)
{
	struct rt_exit ex = { .exit_code = 128 + SIGKILL, .signal = SIGKILL, .sandbox_gone = 1 };

	while (sb->procs)
		proc_finish(sb, &sb->procs, &ex);
}

/* ---- the init connection ---------------------------------------------- */

static void outq_clear(struct rt_sandbox *sb)
{
	while (sb->outq) {
		struct rt_out *o = sb->outq;

		sb->outq = o->next;
		close_fds(o->fds, o->nfds);
		free(o);
	}
	sb->outq_tail = &sb->outq;
}

static void sandbox_died(struct rt_sandbox *sb);

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct rt_sandbox *sb = arg;

	(void)fd;
	(void)what;
	while (sb->outq) {
		struct rt_out *o = sb->outq;

		if (initproto_send(sb->sock, o->data, o->len, o->fds, o->nfds, MSG_DONTWAIT) < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;   /* stays armed */
			log_warn("sandbox '%s': cannot talk to init: %s", sb->key, strerror(errno));
			outq_clear(sb);
			break;
		}
		sb->outq = o->next;
		close_fds(o->fds, o->nfds);
		free(o);
	}
	sb->outq_tail = &sb->outq;
	event_del(sb->ev_write);
}

/* Send (or queue) one message to init; the fds are taken in every case. */
static int init_send(struct rt_sandbox *sb, const void *msg, size_t len, int *fds, int nfds)
{
	struct rt_out *o;

	if (!sb->outq && initproto_send(sb->sock, msg, len, fds, nfds, MSG_DONTWAIT) == 0) {
		close_fds(fds, nfds);
		return 0;
	}
	if (sb->outq == NULL && errno != EAGAIN && errno != EWOULDBLOCK) {
		int err = errno;

		close_fds(fds, nfds);
		errno = err;
		return -1;
	}
	o = malloc(sizeof(*o) + len);
	if (!o) {
		close_fds(fds, nfds);
		errno = ENOMEM;
		return -1;
	}
	o->next = NULL;
	o->len = len;
	o->nfds = nfds;
	if (nfds > 0)   /* fds may be NULL then, and memcpy's arguments must not be */
		memcpy(o->fds, fds, (size_t)nfds * sizeof(int));
	memcpy(o->data, msg, len);
	*sb->outq_tail = o;
	sb->outq_tail = &o->next;
	event_add(sb->ev_write, NULL);
	return 0;
}

/* A lost AHEAD costs the next command a fork, nothing else. */
void rt_ahead(struct rt_sandbox *sb)
{
	char msg[64];
	ssize_t len;

	if (sb->dead || sb->destroyed)
		return;
	len = initproto_encode(msg, sizeof(msg), INITPROTO_AHEAD, 0, 0, 0);
	if (len > 0)
		(void)init_send(sb, msg, (size_t)len, NULL, 0);
}

static void handle_msg(struct rt_sandbox *sb, const struct initproto_msg *m)
{
	struct rt_proc **link, *p = proc_find(sb, m->handle, &link);
	struct rt_exit ex = { 0 };

	if (!p)
		return;
	switch (m->type) {
	case INITPROTO_STARTED:
		p->pid = m->pid;
		p->started = 1;
		if (p->on_started)
			p->on_started(p->arg, m->pid);
		break;
	case INITPROTO_FAILED:
		ex.start_errno = m->value;
		ex.exit_code = (m->value == ENOENT) ? 127 : 126;
		proc_finish(sb, link, &ex);
		break;
	case INITPROTO_EXITED:
		if (WIFSIGNALED(m->value)) {
			ex.signal = WTERMSIG(m->value);
			ex.exit_code = 128 + ex.signal;
		} else {
			ex.exit_code = WEXITSTATUS(m->value);
		}
		proc_exited(p, &ex);
		break;
	case INITPROTO_GONE:
		ex.exit_code = 128 + SIGKILL;
		ex.signal = SIGKILL;
		proc_finish(sb, link, &ex);
		break;
	default:
		break;
	}
}

static void sandbox_free(struct rt_sandbox *sb);

/* Read every pending message; on end of stream the sandbox died. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct rt_sandbox *sb = arg;
	char *buf = sb->rt->buf;

	(void)fd;
	(void)what;
	sb->dispatching++;
	for (int i = 0; i < 64 && !sb->destroyed && !sb->dead; i++) {
		struct initproto_msg m;
		int fds[3], nfds = 0;
		ssize_t n = initproto_recv(sb->sock, buf, INITPROTO_MAX, fds, &nfds, MSG_DONTWAIT);

		close_fds(fds, nfds);   /* init never sends fds */
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0 && errno == EMSGSIZE)
			continue;
		if (n <= 0) {
			sandbox_died(sb);
			break;
		}
		if (initproto_decode(buf, (size_t)n, &m) < 0) {
			log_warn("sandbox '%s': bad message from init", sb->key);
			continue;
		}
		handle_msg(sb, &m);
		free(m.argv);
	}
	sb->dispatching--;
	if (sb->destroyed && !sb->dispatching)
		sandbox_free(sb);
}

static void on_init_exit(evutil_socket_t fd, short what, void *arg)
{
	struct rt_sandbox *sb = arg;

	(void)fd;
	(void)what;
	sb->dispatching++;
	/* deliver the exits init reported before it went */
	if (!sb->dead && !sb->destroyed)
		on_readable(sb->sock, EV_READ, sb);
	if (!sb->dead && !sb->destroyed)
		sandbox_died(sb);
	sb->dispatching--;
	if (sb->destroyed && !sb->dispatching)
		sandbox_free(sb);
}

/* init is gone on its own: stop, fail every process, tell the agent. */
static void sandbox_died(struct rt_sandbox *sb)
{
	struct rt *rt = sb->rt;

	if (sb->dead)
		return;
	sb->dead = 1;
	log_warn("sandbox '%s': init exited", sb->key);
	event_del(sb->ev_sock);
	event_del(sb->ev_write);
	event_del(sb->ev_pid);
	outq_clear(sb);
	syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
	spawn_reap(sb->pidfd, 0);
	sb->dispatching++;
	procs_fail_all(sb);
	if (rt->died_cb && !sb->destroyed)
		rt->died_cb(rt->died_arg, sb);
	sb->dispatching--;
}

/* ---- lifecycle ---------------------------------------------------------- */

struct rt *rt_new(struct event_base *base, const struct sbx_conf *conf, struct sbx_err *e)
{
	auto_free struct rt *rt = calloc(1, sizeof(*rt));
	char path[PATH_MAX];
	struct stat st;

	if (!rt) {
		err_sys(e, ENOMEM, "cannot allocate the runtime");
		return NULL;
	}
	rt->base = base;
	rt->conf = *conf;
	rt->init_fd = -1;
	rt->spawn_fds.base = -1;
	/* A build's children run in this process's memory until their exec
	 * (spawn.c), some with a sandbox's credentials: nothing of a sandbox
	 * may attach to them (ptrace, /proc/<pid>/mem) */
	if (prctl(PR_SET_DUMPABLE, 0) < 0) {
		err_sys(e, errno, "cannot make the agent non-dumpable");
		return NULL;
	}
	rt->caps_keep = caps_keep_mask();
	rt->caps_last = caps_last_cap();
	if (strcmp(conf->agent.userns, "off") == 0) {
		rt->userns = 0;
	} else {
		rt->userns = probe_userns();
		if (!rt->userns && strcmp(conf->agent.userns, "on") == 0) {
			err_set(e, SBX_E_INTERNAL, "agent.userns is 'on' but this host cannot create user namespaces");
			return NULL;
		}
	}
	if (conf->agent.uid_base < 1000 || conf->agent.uid_base > (int64_t)UINT32_MAX - 65536) {
		err_set(e, SBX_E_INTERNAL, "bad agent.uid_base");
		return NULL;
	}
	if (rt->userns) {
		if (idrange_init(&rt->ids, conf->agent.uid_base, conf->agent.uid_ranges,
				 RT_UID_LOCK_DIR, e) < 0)
			return NULL;
		rt->idmap_fds = malloc(rt->ids.count * sizeof(int));
		if (!rt->idmap_fds) {
			idrange_release(&rt->ids);
			err_sys(e, ENOMEM, "cannot allocate the runtime");
			return NULL;
		}
		for (unsigned i = 0; i < rt->ids.count; i++)
			rt->idmap_fds[i] = -1;
		rt->ids_put = calloc(rt->ids.count, sizeof(*rt->ids_put));
		if (!rt->ids_put || pthread_mutex_init(&rt->ids_lock, NULL) != 0) {
			free(rt->ids_put);
			free(rt->idmap_fds);
			idrange_release(&rt->ids);
			err_sys(e, ENOMEM, "cannot allocate the runtime");
			return NULL;
		}
	}
	rt->image_owner = rt->userns ? (uid_t)conf->agent.uid_base : 0;

	rt->init_fd = open(conf->agent.init_path, O_PATH | O_CLOEXEC);
	if (rt->init_fd < 0 || fstat(rt->init_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		err_sys(e, rt->init_fd < 0 ? errno : ENOEXEC, "cannot open sbx-init '%s'",
			conf->agent.init_path);
		goto fail;
	}
	if (spawn_fds_init(&rt->spawn_fds, e) < 0)
		goto fail;
	if (keyidx_init(&rt->by_key) < 0) {
		err_sys(e, ENOMEM, "cannot allocate the runtime");
		goto fail;
	}
	if (snprintf(path, sizeof(path), "%s/rt", conf->agent.state_dir) >= (int)sizeof(path) ||
	    snprintf(rt->mnt_base, sizeof(rt->mnt_base), "%s/rt/root", conf->agent.state_dir) >=
		    (int)sizeof(rt->mnt_base)) {
		err_set(e, SBX_E_INTERNAL, "agent.state_dir too long");
		goto fail;
	}
	if (util_mkdir_p(conf->agent.state_dir, 0755) < 0 || util_mkdir_p(path, 0700) < 0 ||
	    util_mkdir_p(rt->mnt_base, 0700) < 0) {
		err_sys(e, errno, "cannot create '%s'", rt->mnt_base);
		goto fail;
	}
	/* owned by agent.uid_base on disk: each sandbox sees it through an
	 * idmapped mount as its own root's (image_idmap) */
	if (image_prepare_default(conf->agent.images_dir, rt->image_owner, conf->agent.dns,
				  rt->default_image,
				  sizeof(rt->default_image), e) < 0)
		goto fail;
	if (sec_build(&rt->sec, e) < 0)
		goto fail;
	rt->buf = malloc(INITPROTO_MAX);
	if (!rt->buf) {
		err_sys(e, ENOMEM, "cannot allocate the runtime");
		goto fail;
	}
	rt->cg = cg_new(conf->agent.cgroup_parent, conf->agent.name, e);
	if (!rt->cg)
		goto fail;
	/* after cg_new killed the leftovers: whatever still runs in a range keeps it */
	if (rt->userns) {
		unsigned live = idrange_reserve_live(&rt->ids);

		if (live)
			log_warn("%u uid range(s) still in use by processes of an earlier run", live);
		if (conf->agent.uid_ranges < conf->agent.capacity + conf->agent.warm_pool)
			log_warn("agent.uid_ranges (%lld) is below capacity + warm_pool: creates fail "
				 "with no_capacity before the node is full", (long long)conf->agent.uid_ranges);
	}
	if (conf->agent.egress_subnet[0]) {
		struct sbx_err ee = { 0 };

		rt->egress = egress_new(conf, &ee);
		if (!rt->egress)
			log_warn("network 'egress' is not available: %s", ee.msg);
	}
	if (builders_start(rt, e) < 0) {
		builders_stop(rt);
		egress_free(rt->egress);
		cg_free(rt->cg);
		goto fail;
	}
	log_info("runtime: userns %s, cgroups %s, default image '%s', %u build threads",
		 rt->userns ? "on" : "off", rt->cg->ops->name, rt->default_image, rt->nthreads);
	return steal_ptr(&rt);
fail:
	if (rt->init_fd >= 0)
		close(rt->init_fd);
	spawn_fds_release(&rt->spawn_fds);
	keyidx_free(&rt->by_key);
	sec_release(&rt->sec);
	free(rt->buf);
	free(rt->idmap_fds);
	free(rt->ids_put);
	idrange_release(&rt->ids);
	return NULL;
}

void rt_set_died_cb(struct rt *rt, rt_sandbox_died_cb cb, void *arg)
{
	rt->died_cb = cb;
	rt->died_arg = arg;
}

static int attach_cgroup(void *arg, pid_t pid, struct sbx_err *e)
{
	struct rt_sandbox *sb = arg;

	return sb->rt->cg->ops->attach(sb->rt->cg, sb->cg_key, pid, e);
}

/* spawn_plan.thaw: kill what is in the sandbox's cgroups and thaw them. */
static void thaw_cgroup(void *arg)
{
	struct rt_sandbox *sb = arg;

	cg_kill_thaw(sb->rt->cg, sb->cg_key);
}

/* The image at lower as the sandbox with ids from host_uid sees it: a
 * detached mount whose files owned by the image owner's ids show as the
 * range's (mnt_open_idmapped). The idmap's user namespace is made once
 * per range and kept. An fd (the caller's) or -1 with e filled. Any
 * thread: the build holding the range. */
static int image_idmap(struct rt *rt, const char *lower, uid_t host_uid, struct sbx_err *e)
{
	unsigned b = (unsigned)((host_uid - rt->ids.base) / IDRANGE_SIZE);
	int fd, ret;

	if (b >= rt->ids.count)
		return err_set(e, SBX_E_INTERNAL, "uid %u is outside the ranges", (unsigned)host_uid);
	/* made outside rt->lock (a child, a round trip); the range is this
	 * build's alone, so no other thread makes the same one meanwhile */
	pthread_mutex_lock(&rt->lock);
	fd = rt->idmap_fds[b];
	pthread_mutex_unlock(&rt->lock);
	if (fd >= 0)
		return mnt_open_idmapped(lower, fd, e);
	fd = spawn_userns(rt->image_owner, host_uid, e);
	if (fd < 0)
		return -1;
	ret = mnt_open_idmapped(lower, fd, e);
	/* kept for the range's next sandbox while fewer than RT_IDMAP_KEEP are */
	pthread_mutex_lock(&rt->lock);
	if (rt->nidmap < RT_IDMAP_KEEP) {
		rt->idmap_fds[b] = fd;
		rt->nidmap++;
		fd = -1;
	}
	pthread_mutex_unlock(&rt->lock);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* Give the ranges the loop put back to rt->ids (ids_lock held). */
static void ids_flush(struct rt *rt)
{
	pthread_mutex_lock(&rt->lock);
	while (rt->nids_put > 0)
		idrange_put(&rt->ids, rt->ids_put[--rt->nids_put]);
	pthread_mutex_unlock(&rt->lock);
}

/* A range for a new sandbox (any thread): its first id, or -1 with e. */
static int64_t ids_get(struct rt *rt, struct sbx_err *e)
{
	int64_t id;

	pthread_mutex_lock(&rt->ids_lock);
	ids_flush(rt);
	id = idrange_get(&rt->ids, e);
	pthread_mutex_unlock(&rt->ids_lock);
	return id;
}

/* Give a range back (any thread; never waits for a get under way). */
static void ids_put(struct rt *rt, uint32_t id)
{
	pthread_mutex_lock(&rt->lock);
	if (rt->nids_put < rt->ids.count)
		rt->ids_put[rt->nids_put++] = id;
	pthread_mutex_unlock(&rt->lock);
}

static int64_t pick(int64_t v, int64_t dflt)
{
	return v > 0 ? v : dflt;
}

/* 0 when key is free for a new sandbox; else -1 with e: CONFLICT while a
 * sandbox or a build under way holds it, NODE_UNAVAILABLE (a transition:
 * retry) while a build given up (rt_build_cancel) still holds it, as its
 * thread finishes and it is torn down. */
static int key_free(struct rt *rt, const char *key, struct sbx_err *e)
{
	if (rt_find(rt, key))
		return err_set(e, SBX_E_CONFLICT, "sandbox '%s' already exists", key);
	for (struct rt_build *b = rt->builds; b; b = b->next)
		if (strcmp(b->sb->key, key) == 0) {
			if (!b->cancelled)
				return err_set(e, SBX_E_CONFLICT, "sandbox '%s' already exists", key);
			goto stopping;
		}
	if (rt_key_dying(rt, key))
		goto stopping;
	return 0;
stopping:
	return err_set(e, SBX_E_NODE_UNAVAILABLE,
		       "sandbox '%s' is still being stopped on this node; retry", key);
}

static void build_free(struct rt_build *b)
{
	if (!b)
		return;
	free(b->layers);
	free(b->sb);
	free(b);
}

/* Plan a build of spec on the loop: validation, the capacity reservation,
 * the image's path and the sandbox's id range. The build (the caller's:
 * build_run, then build_finish), or NULL with e filled. */
static struct rt_build *build_prepare(struct rt *rt, const struct rt_spec *spec, int pooled,
				      struct sbx_err *e)
{
	const char *image = (spec->image && spec->image[0]) ? spec->image : "default";
	struct rt_build *b;
	struct rt_sandbox *sb;
	unsigned counted = rt->count + rt->nbuilding + rt->ndying;
	int held = 0;

	if (!spec->key || !valid_key(spec->key))
		return err_set(e, SBX_E_VALIDATION, "invalid sandbox key"), NULL;
	if (!spec->hostname || !valid_hostname(spec->hostname))
		return err_set(e, SBX_E_VALIDATION, "invalid hostname"), NULL;
	if (spec->network == RT_NET_EGRESS && !rt->egress)
		return err_set(e, SBX_E_VALIDATION, "network 'egress' is not available on this node"), NULL;
	if (spec->network != RT_NET_NONE && spec->network != RT_NET_EGRESS)
		return err_set(e, SBX_E_VALIDATION, "unknown network mode"), NULL;
	if (!pooled && spec->after_gone && !rt_find(rt, spec->key) && rt_key_dying(rt, spec->key)) {
		for (struct rt_build *o = rt->builds; o; o = o->next)
			if (strcmp(o->sb->key, spec->key) == 0)
				return err_set(e, SBX_E_CONFLICT, "sandbox '%s' already exists",
					       spec->key), NULL;
		/* it takes over the place of the container it waits for */
		held = 1;
		counted--;
	} else if (key_free(rt, spec->key, e) < 0) {
		return NULL;
	}
	if (pooled && counted + rt->npooled + rt->nbuilding_pooled >= (unsigned)rt->conf.agent.capacity)
		return err_set(e, SBX_E_NO_CAPACITY, "node is full (%u sandboxes, %u pooled)", counted,
			       rt->npooled + rt->nbuilding_pooled), NULL;
	if (!pooled && counted >= (unsigned)rt->conf.agent.capacity)
		return err_set(e, SBX_E_NO_CAPACITY, "node is full (%u sandboxes)", counted), NULL;
	b = calloc(1, sizeof(*b));
	sb = calloc(1, sizeof(*sb));
	if (b)
		b->back = RT_BACK_BUILD;
	if (!b || !sb || (spec->layers && !(b->layers = strdup(spec->layers)))) {
		free(sb);
		build_free(b);
		return err_sys(e, ENOMEM, "cannot allocate a sandbox"), NULL;
	}
	b->rt = rt;
	b->sb = sb;
	b->pooled = pooled;
	b->held = held;
	b->network = spec->network;
	b->lim.memory_mib = pick(spec->limits.memory_mib, rt->conf.sandbox.memory_mib);
	b->lim.cpus_milli = pick(spec->limits.cpus_milli, rt->conf.sandbox.cpus_milli);
	b->lim.pids = pick(spec->limits.pids, rt->conf.sandbox.pids);
	b->disk = pick(spec->limits.disk_mib, rt->conf.sandbox.disk_mib);
	if (b->lim.memory_mib < 16 || b->lim.memory_mib > 1048576 || b->lim.cpus_milli < 10 ||
	    b->lim.cpus_milli > 256000 || b->lim.pids < 8 || b->lim.pids > 1000000 || b->disk < 1 ||
	    b->disk > 1048576) {
		err_set(e, SBX_E_VALIDATION, "resource limits out of range");
		goto fail;
	}
	if (spec->layers) {
		if (snprintf(b->lower, sizeof(b->lower), "%s/layers", rt->conf.agent.images_dir) >=
		    (int)sizeof(b->lower)) {
			err_set(e, SBX_E_INTERNAL, "image path too long");
			goto fail;
		}
	} else if (strcmp(image, "default") == 0) {
		if (snprintf(b->lower, sizeof(b->lower), "%s", rt->default_image) >= (int)sizeof(b->lower)) {
			err_set(e, SBX_E_INTERNAL, "image path too long");
			goto fail;
		}
	} else if (image_resolve(rt->conf.agent.images_dir, image, b->lower, sizeof(b->lower), e) < 0) {
		goto fail;
	}
	if (strchr(b->lower, ',') || strchr(b->lower, ':') || strchr(rt->mnt_base, ',') ||
	    strchr(rt->mnt_base, ':')) {
		err_set(e, SBX_E_INTERNAL, "image or state path contains ',' or ':'");
		goto fail;
	}
	if (snprintf(b->merged, sizeof(b->merged), "%s/merged", rt->mnt_base) >= (int)sizeof(b->merged)) {
		err_set(e, SBX_E_INTERNAL, "state path too long");
		goto fail;
	}
	memcpy(b->hostname, spec->hostname, strlen(spec->hostname) + 1);
	b->bind_usr = !spec->layers && strcmp(image, "default") == 0;

	sb->rt = rt;
	sb->pidfd = sb->sock = -1;
	sb->serial = ++sandbox_serials;
	sb->host_uid = -1;
	sb->outq_tail = &sb->outq;
	sb->next_handle = 1;
	sb->net.lock_fd = -1;
	memcpy(sb->key, spec->key, strlen(spec->key) + 1);
	memcpy(sb->cg_key, spec->key, strlen(spec->key) + 1);
	if (spec->workdir && spec->workdir[0] == '/' &&
	    snprintf(sb->workdir, sizeof(sb->workdir), "%s", spec->workdir) >= (int)sizeof(sb->workdir))
		sb->workdir[0] = '\0';
	sb->uid = sb->gid = -1;
	if (spec->uid || spec->gid) {
		if (spec->uid >= IDRANGE_SIZE || spec->gid >= IDRANGE_SIZE) {
			err_set(e, SBX_E_VALIDATION, "user %u:%u is outside the sandbox's %u ids",
				spec->uid, spec->gid, IDRANGE_SIZE);
			goto fail;
		}
		sb->uid = spec->uid;
		sb->gid = spec->gid;
	}
	if (rt->userns) {
		struct stat ist;

		/* an image owned by agent.uid_base (the default one, or made like
		 * it) is shown as the sandbox's own; any other is used as it is,
		 * its files belonging to no sandbox's ids */
		b->shift = stat(b->lower, &ist) == 0 && ist.st_uid == rt->image_owner;
	}
	if (pooled)
		rt->nbuilding_pooled++;
	else
		rt->nbuilding++;
	b->next = rt->builds;
	rt->builds = b;
	return b;
fail:
	build_free(b);
	return NULL;
}

/* Give sb's network "egress" link back (any thread: under rt->lock). */
static void net_release(struct rt *rt, struct egress_link *net)
{
	if (!rt->egress)
		return;
	pthread_mutex_lock(&rt->lock);
	egress_release(rt->egress, net);
	pthread_mutex_unlock(&rt->lock);
}

/* Undo what build_run made of sb (any thread; the id range stays). */
static void unbuild(struct rt *rt, struct rt_sandbox *sb)
{
	if (sb->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
		cg_kill_thaw(rt->cg, sb->cg_key);
		spawn_reap(sb->pidfd, 1);
	}
	net_release(rt, &sb->net);
	(void)rt->cg->ops->destroy(rt->cg, sb->cg_key);
	for (int *fd = &sb->pidfd; fd <= &sb->sock; fd++) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
}

/* The work of a build, on a build thread (or inline in rt_create): the
 * user namespace, the idmapped image, the cgroups, the clone of init and
 * the handshake with it, the network. Touches only b, its sandbox and
 * what rt shares under rt->lock. Sets b->rc (0, or -1 with b->err). */
static void build_run(struct rt_build *b)
{
	struct rt *rt = b->rt;
	struct rt_sandbox *sb = b->sb;
	struct sbx_err *e = &b->err;
	struct mnt_params mp;
	struct mnt_plan plan;
	struct spawn_plan sp;
	char path[64];
	int sv[2] = { -1, -1 };
	auto_close int userns_fd = -1;
	auto_close int lower_fd = -1;
	int64_t t0 = util_now_ms();

	b->rc = -1;
	memset(&plan, 0, sizeof(plan));
	if (rt->userns) {
		/* its own ids: per-user kernel limits (inotify, nproc) are per sandbox */
		sb->host_uid = ids_get(rt, e);
		if (sb->host_uid < 0 || (userns_fd = spawn_userns(0, (uid_t)sb->host_uid, e)) < 0)
			goto fail_early;
		if (b->shift && (lower_fd = image_idmap(rt, b->lower, (uid_t)sb->host_uid, e)) < 0)
			goto fail_early;
	}
	memset(&mp, 0, sizeof(mp));
	mp.base = rt->mnt_base;
	mp.lower = b->lower;
	mp.layers = b->layers;
	mp.idmapped = lower_fd >= 0;
	mp.lower_fd = lower_fd;
	mp.bind_usr = b->bind_usr;
	mp.disk_mib = b->disk;
	mp.owner = rt->userns ? (uid_t)sb->host_uid : 0;
	mp.ws_uid = mp.owner + (sb->uid > 0 ? (uid_t)sb->uid : 0);
	mp.ws_gid = mp.owner + (sb->gid > 0 ? (gid_t)sb->gid : 0);
	mp.hostname = b->hostname;
	mp.userns = rt->userns;
	if (mnt_plan_build(&plan, &mp, e) < 0)
		goto fail_early;
	if (rt->cg->ops->create(rt->cg, sb->cg_key, &b->lim, e) < 0)
		goto fail;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		err_sys(e, errno, "socketpair");
		goto fail;
	}
	memset(&sp, 0, sizeof(sp));
	sp.fds = &rt->spawn_fds;
	sp.netns_fd = spare_take(rt);
	sp.mounts = &plan;
	sp.root = b->merged;
	sp.hostname = b->hostname;
	sp.userns_fd = userns_fd;
	sp.seccomp = &rt->sec.prog;
	sp.caps_keep = rt->caps_keep;
	sp.caps_last = rt->caps_last;
	sp.init_exe_fd = rt->init_fd;
	sp.init_sock = sv[1];
	sp.thaw = thaw_cgroup;
	sb->pid = spawn_sandbox(&sp, attach_cgroup, sb, &sb->pidfd, e);
	close(sv[1]);
	sv[1] = -1;
	if (sp.netns_fd >= 0)
		close(sp.netns_fd);   /* init is in it, or it goes with the failure */
	if (sb->pid < 0)
		goto fail;
	sb->sock = steal_fd(&sv[0]);
	if (b->network == RT_NET_EGRESS) {
		/* opened here and closed: the build thread keeps no memo */
		auto_close int netns = -1;
		int rc;

		util_xsnprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb->pid);
		netns = open(path, O_RDONLY | O_CLOEXEC);
		if (netns < 0) {
			err_sys(e, errno, "cannot open the sandbox's network namespace");
			goto fail;
		}
		pthread_mutex_lock(&rt->lock);
		rc = egress_attach(rt->egress, netns, &sb->net, e);
		pthread_mutex_unlock(&rt->lock);
		if (rc < 0)
			goto fail;
	}
	if (util_set_nonblock(sb->sock) < 0) {
		err_sys(e, errno, "cannot set up the init socket");
		goto fail;
	}
	mnt_plan_release(&plan);
	log_debug("sandbox '%s' built in %lld ms (init pid %d)", sb->key,
		  (long long)(util_now_ms() - t0), (int)sb->pid);
	b->rc = 0;
	return;
fail:
	if (sv[0] >= 0)
		close(sv[0]);
	unbuild(rt, sb);
fail_early:
	mnt_plan_release(&plan);
	err_prefix(e, "cannot create sandbox '%s'", sb->key);
}

/* Hand a build back on the loop: watch the new sandbox's init and count
 * it, or give its id range back after a failure. The sandbox (borrowed),
 * or NULL with e filled. b is unlinked; the caller frees it. */
static struct rt_sandbox *build_finish(struct rt_build *b, struct sbx_err *e)
{
	struct rt *rt = b->rt;
	struct rt_sandbox *sb = b->sb;
	struct rt_build **pp;

	for (pp = &rt->builds; *pp && *pp != b; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = b->next;
	if (b->pooled)
		rt->nbuilding_pooled--;
	else
		rt->nbuilding--;
	if (b->rc == 0) {
		sb->ev_sock = event_new(rt->base, sb->sock, EV_READ | EV_PERSIST, on_readable, sb);
		sb->ev_write = event_new(rt->base, sb->sock, EV_WRITE | EV_PERSIST, on_writable, sb);
		sb->ev_pid = event_new(rt->base, sb->pidfd, EV_READ, on_init_exit, sb);
		if (!sb->ev_sock || !sb->ev_write || !sb->ev_pid || event_add(sb->ev_sock, NULL) < 0 ||
		    event_add(sb->ev_pid, NULL) < 0) {
			err_sys(&b->err, ENOMEM, "cannot watch sandbox '%s'", sb->key);
			b->rc = -1;
			unbuild(rt, sb);
			for (struct event **ev = &sb->ev_sock; ev <= &sb->ev_pid; ev++)
				if (*ev)
					event_free(*ev);
		}
	}
	if (b->rc < 0) {
		*e = b->err;
		/* init (PID 1 of its namespace) is reaped: nothing runs with these ids */
		if (sb->host_uid >= 0)
			ids_put(rt, (uint32_t)sb->host_uid);
		return NULL;
	}
	b->sb = NULL;
	sb->pooled = b->pooled;
	sb->next = rt->list;
	rt->list = sb;
	(void)keyidx_add(&rt->by_key, &sb->idx, sb->key);   /* has a table: cannot fail */
	if (sb->pooled) {
		rt->npooled++;
	} else {
		rt->count++;
		rt_ahead(sb);
	}
	return sb;
}

/* A build on the caller's thread, start to end (rt_create, rt_create_pooled). */
static struct rt_sandbox *create_now(struct rt *rt, const struct rt_spec *spec, int pooled,
				     struct sbx_err *e)
{
	struct rt_build *b = build_prepare(rt, spec, pooled, e);
	struct rt_sandbox *sb;

	if (!b)
		return NULL;
	build_run(b);
	sb = build_finish(b, e);
	build_free(b);
	return sb;
}

struct rt_sandbox *rt_create(struct rt *rt, const struct rt_spec *spec, struct sbx_err *e)
{
	return create_now(rt, spec, 0, e);
}

/* ---- build threads ------------------------------------------------------- */

/* A spare network namespace for a build, or -1: the clone makes one. */
static int spare_take(struct rt *rt)
{
	int fd = -1;

	pthread_mutex_lock(&rt->lock);
	if (rt->nspares)
		fd = rt->spares[--rt->nspares];
	rt->spare_paused = 0;
	pthread_cond_signal(&rt->wake);   /* an idle thread makes the next one */
	pthread_mutex_unlock(&rt->lock);
	return fd;
}

/* Whether an idle build thread should make a spare (under lock). */
static int spare_wanted(const struct rt *rt)
{
	return !rt->stopping && !rt->spare_paused && rt->nspares + rt->spare_making < RT_SPARES;
}

/* Make one spare, called and returning under lock. */
static void spare_make(struct rt *rt)
{
	int fd, err;

	rt->spare_making++;
	pthread_mutex_unlock(&rt->lock);
	fd = netns_new();
	err = errno;
	pthread_mutex_lock(&rt->lock);
	rt->spare_making--;
	if (fd < 0) {
		if (!rt->spare_paused)
			log_warn("cannot make a network namespace ahead (builds make their own): %s",
				 strerror(err));
		rt->spare_paused = 1;
	} else if (rt->stopping || rt->nspares == RT_SPARES) {
		close(fd);
	} else {
		rt->spares[rt->nspares++] = fd;
	}
}

static void *builder_main(void *arg)
{
	struct rt *rt = arg;

	for (;;) {
		struct rt_build *b;
		struct rt_dying *d;

		pthread_mutex_lock(&rt->lock);
		while (!rt->queue && !rt->reap_queue && !rt->stopping) {
			if (spare_wanted(rt))
				spare_make(rt);
			else
				pthread_cond_wait(&rt->wake, &rt->lock);
		}
		if ((d = rt->reap_queue)) {
			rt->reap_queue = d->qnext;
			pthread_mutex_unlock(&rt->lock);
			dying_work(d, 1);
			if (donepipe_post(&rt->back, d) < 0)
				log_error("sandbox '%s': cannot tell the loop it is gone: %s", d->key,
					  strerror(errno));
			continue;
		}
		b = rt->queue;
		if (b) {
			rt->queue = b->qnext;
			if (!rt->queue)
				rt->queue_tail = &rt->queue;
			b->queued = 0;
		}
		pthread_mutex_unlock(&rt->lock);
		if (!b)
			return NULL;
		build_run(b);
		if (donepipe_post(&rt->back, b) < 0)
			log_error("build of '%s': cannot tell the loop: %s", b->sb->key, strerror(errno));
	}
}

/* b is over (run, or taken off the queue unrun): hand it back and tell
 * its owner. */
static void build_done(struct rt_build *b)
{
	struct sbx_err e = { 0 };
	char key[RT_KEY_MAX];
	struct rt_sandbox *sb;

	snprintf(key, sizeof(key), "%s", b->sb->key);
	sb = build_finish(b, &e);
	if (b->cancelled) {
		if (sb)
			rt_destroy(b->rt, sb);
		if (b->gone)
			rt_after_gone(b->rt, key, b->gone, b->gone_arg);
	} else if (b->done) {
		b->done(b->arg, sb, sb ? NULL : &e);
	}
	build_free(b);
}

/* Start the build threads: two per CPU (a build mostly waits for its
 * child's mount work), at most RT_BUILD_THREADS_MAX. 0 or -1 with e. */
#define RT_BUILD_THREADS_MAX 8
static int builders_start(struct rt *rt, struct sbx_err *e)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int rc = 0;

	rt->queue_tail = &rt->queue;
	/* first: builders_stop releases it whatever failed after */
	if (donepipe_init(&rt->back, e) < 0) {
		err_prefix(e, "cannot set up the build threads");
		return -1;
	}
	if (pthread_mutex_init(&rt->lock, NULL) != 0 || pthread_cond_init(&rt->wake, NULL) != 0)
		return err_set(e, SBX_E_INTERNAL, "cannot set up the build threads");
	rt->ev_back = event_new(rt->base, donepipe_fd(&rt->back), EV_READ | EV_PERSIST, on_back, rt);
	if (!rt->ev_back || event_add(rt->ev_back, NULL) < 0)
		return err_sys(e, ENOMEM, "cannot set up the build threads");
	rt->nthreads = cpus > 0 ? (unsigned)cpus * 2 : 2;
	if (rt->nthreads > RT_BUILD_THREADS_MAX)
		rt->nthreads = RT_BUILD_THREADS_MAX;
	rt->threads = calloc(rt->nthreads, sizeof(*rt->threads));
	if (!rt->threads)
		return err_sys(e, ENOMEM, "cannot set up the build threads");
	for (unsigned i = 0; i < rt->nthreads && rc == 0; i++)
		if ((rc = donepipe_thread_start(&rt->threads[i], builder_main, rt)) != 0)
			rt->nthreads = i;
	if (rc != 0)
		return err_sys(e, rc, "cannot start a build thread");
	return 0;
}

/* Wait for every build (rt_free): unrun ones are taken off the queue, the
 * rest are waited for; each is handed back (a cancelled one destroyed). */
static void builders_drain(struct rt *rt)
{
	while (rt->builds) {
		struct rt_build *b, *q;

		pthread_mutex_lock(&rt->lock);
		q = rt->queue;
		rt->queue = NULL;
		rt->queue_tail = &rt->queue;
		for (b = q; b; b = b->qnext)
			b->queued = 0;
		pthread_mutex_unlock(&rt->lock);
		for (b = rt->builds; b; b = b->next) {
			if (b->held) {
				b->held = 0;
				b->qnext = q;
				q = b;
			}
		}
		while ((b = q)) {
			q = b->qnext;
			err_set(&b->err, SBX_E_NODE_UNAVAILABLE, "the agent is stopping");
			b->rc = -1;
			build_done(b);
		}
		if (rt->builds && donepipe_wait(&rt->back, 1000))
			donepipe_drain(&rt->back, back_posted, NULL);
	}
}

static void builders_stop(struct rt *rt)
{
	pthread_mutex_lock(&rt->lock);
	rt->stopping = 1;
	pthread_cond_broadcast(&rt->wake);
	pthread_mutex_unlock(&rt->lock);
	for (unsigned i = 0; i < rt->nthreads; i++)
		pthread_join(rt->threads[i], NULL);
	while (rt->nspares)
		close(rt->spares[--rt->nspares]);
	free(rt->threads);
	rt->threads = NULL;
	rt->nthreads = 0;
	if (rt->ev_back)
		event_free(rt->ev_back);
	rt->ev_back = NULL;
	donepipe_release(&rt->back);
}

struct rt_build *rt_create_async(struct rt *rt, const struct rt_spec *spec, int pooled,
				 rt_built_cb done, void *arg, struct sbx_err *e)
{
	struct rt_build *b;

	if (!rt->nthreads)
		return err_set(e, SBX_E_INTERNAL, "the runtime has no build threads"), NULL;
	b = build_prepare(rt, spec, pooled, e);
	if (!b)
		return NULL;
	b->done = done;
	b->arg = arg;
	if (b->held)
		return b;   /* queued by dying_finish */
	pthread_mutex_lock(&rt->lock);
	b->queued = 1;
	*rt->queue_tail = b;
	rt->queue_tail = &b->qnext;
	pthread_cond_signal(&rt->wake);
	pthread_mutex_unlock(&rt->lock);
	return b;
}

int rt_build_cancel(struct rt_build *b, void (*gone)(void *arg), void *arg)
{
	struct rt *rt = b->rt;
	int unrun = 0;

	b->cancelled = 1;
	b->done = NULL;
	pthread_mutex_lock(&rt->lock);
	if (b->held) {
		b->held = 0;
		unrun = 1;
	} else if (b->queued) {
		struct rt_build **pp = &rt->queue;

		while (*pp && *pp != b)
			pp = &(*pp)->qnext;
		if (*pp) {
			*pp = b->qnext;
			if (rt->queue_tail == &b->qnext)
				rt->queue_tail = pp;
		}
		b->queued = 0;
		unrun = 1;
	}
	pthread_mutex_unlock(&rt->lock);
	if (unrun) {
		err_set(&b->err, SBX_E_CONFLICT, "cancelled");
		b->rc = -1;
		build_done(b);
		return 1;
	}
	b->gone = gone;
	b->gone_arg = arg;
	return 0;
}

unsigned rt_building(const struct rt *rt)
{
	return rt->nbuilding;
}

static void sandbox_free(struct rt_sandbox *sb)
{
	memo_forget(sb);
	for (int *fd = &sb->pidfd; fd <= &sb->sock; fd++)
		if (*fd >= 0)
			close(*fd);
	free(sb);
}

int rt_key_dying(const struct rt *rt, const char *key)
{
	for (const struct rt_dying *d = rt->dying; d; d = d->next)
		if (strcmp(d->key, key) == 0)
			return 1;
	return 0;
}

unsigned rt_dying_count(const struct rt *rt)
{
	return rt->ndying;
}

/* d's init is gone, or is waited for (wait): reap it and release its
 * network and cgroups (any thread: a build thread, on_reaped's). */
static void dying_work(struct rt_dying *d, int wait)
{
	struct rt *rt = d->rt;

	spawn_reap(d->pidfd, wait);
	close(d->pidfd);
	d->pidfd = -1;
	net_release(rt, &d->net);
	if (rt->cg->ops->destroy(rt->cg, d->cg_key) < 0)
		log_warn("sandbox '%s': cgroup not fully removed: %s", d->key, strerror(errno));
}

/* On the loop, after dying_work: give the id range back, queue the builds
 * that waited for d's key and run its waiters. Frees d (when on the heap). */
static void dying_done(struct rt_dying *d)
{
	struct rt *rt = d->rt;
	struct rt_gone_waiter *w;

	/* init is reaped, so every process of its pid namespace is gone; the
	 * cgroup's helpers too (killed by rt_destroy) */
	if (d->host_uid >= 0)
		ids_put(rt, (uint32_t)d->host_uid);
	if (d->heap) {
		for (struct rt_dying **pp = &rt->dying; *pp; pp = &(*pp)->next) {
			if (*pp == d) {
				*pp = d->next;
				break;
			}
		}
		if (!d->pooled)
			rt->ndying--;
	}
	if (!rt_key_dying(rt, d->key)) {
		pthread_mutex_lock(&rt->lock);
		for (struct rt_build *b = rt->builds; b; b = b->next) {
			if (b->held && strcmp(b->sb->key, d->key) == 0) {
				b->held = 0;
				b->queued = 1;
				*rt->queue_tail = b;
				rt->queue_tail = &b->qnext;
				pthread_cond_signal(&rt->wake);
			}
		}
		pthread_mutex_unlock(&rt->lock);
	}
	while ((w = d->waiters)) {
		d->waiters = w->next;
		w->done(w->arg);
		free(w);
	}
	if (d->heap)
		free(d);
}

/* Both on the loop (a fallback, rt_free). */
static void dying_finish(struct rt_dying *d, int wait)
{
	if (d->ev)
		event_free(d->ev);
	d->ev = NULL;
	dying_work(d, wait);
	dying_done(d);
}

/* d's init exited: a build thread reaps it and removes its cgroups (their
 * rmdir takes milliseconds), the loop finishes when it is handed back. */
static void on_reaped(evutil_socket_t fd, short what, void *arg)
{
	struct rt_dying *d = arg;
	struct rt *rt = d->rt;

	(void)fd;
	(void)what;
	if (!rt->nthreads) {
		dying_finish(d, 1);
		return;
	}
	event_free(d->ev);
	d->ev = NULL;
	d->off_loop = 1;
	pthread_mutex_lock(&rt->lock);
	d->qnext = rt->reap_queue;
	rt->reap_queue = d;
	pthread_cond_signal(&rt->wake);
	pthread_mutex_unlock(&rt->lock);
}

/* One hand-back of a build thread (rt->back), on the loop. */
static void back_posted(void *p, void *arg)
{
	(void)arg;
	if (*(enum rt_back *)p == RT_BACK_BUILD)
		build_done(p);
	else
		dying_done(p);
}

static void on_back(evutil_socket_t fd, short what, void *arg)
{
	struct rt *rt = arg;

	(void)fd;
	(void)what;
	donepipe_drain(&rt->back, back_posted, NULL);
}

void rt_after_gone(struct rt *rt, const char *key, void (*done)(void *arg), void *arg)
{
	struct rt_dying *d;
	struct rt_gone_waiter *w;

	for (d = rt->dying; d && strcmp(d->key, key) != 0; d = d->next)
		;
	if (!d) {
		done(arg);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (!w && d->off_loop) {
		/* no memory to wait with, and a thread has it: no wait */
		log_error("sandbox '%s': out of memory: answered before its container is gone", key);
		done(arg);
		return;
	}
	if (!w) {
		/* no memory to wait with: wait here */
		log_warn("sandbox '%s': waiting on the loop for its container to die", key);
		dying_finish(d, 1);
		rt_after_gone(rt, key, done, arg);
		return;
	}
	w->done = done;
	w->arg = arg;
	w->next = d->waiters;
	d->waiters = w;
}

void rt_destroy(struct rt *rt, struct rt_sandbox *sb)
{
	struct rt_sandbox **pp;
	struct rt_dying local = { 0 }, *d;

	if (!sb || sb->destroyed)
		return;
	for (pp = &rt->list; *pp; pp = &(*pp)->next) {
		if (*pp == sb) {
			*pp = sb->next;
			keyidx_remove(&rt->by_key, &sb->idx);
			if (sb->pooled)
				rt->npooled--;
			else
				rt->count--;
			break;
		}
	}
	sb->destroyed = 1;
	event_free(sb->ev_sock);
	event_free(sb->ev_write);
	event_free(sb->ev_pid);
	sb->ev_sock = sb->ev_write = sb->ev_pid = NULL;
	outq_clear(sb);
	/* A fenced (frozen) sandbox: its processes die before they can run. */
	cg_kill_thaw(rt->cg, sb->cg_key);
	/* killing PID 1 of the namespace kills everything in it */
	syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
	/* what is released once init is reaped goes over to the dying record */
	d = calloc(1, sizeof(*d));
	if (!d)
		d = &local;
	d->back = RT_BACK_DYING;
	d->rt = rt;
	memcpy(d->key, sb->key, sizeof(d->key));
	memcpy(d->cg_key, sb->cg_key, sizeof(d->cg_key));
	d->pidfd = sb->pidfd;
	d->host_uid = sb->host_uid;
	d->pooled = sb->pooled;
	d->net = sb->net;
	sb->net.lock_fd = -1;
	sb->pidfd = -1;
	sb->host_uid = -1;
	if (d != &local)
		d->ev = event_new(rt->base, d->pidfd, EV_READ, on_reaped, d);
	if (d->ev && event_add(d->ev, NULL) == 0) {
		d->heap = 1;
		d->next = rt->dying;
		rt->dying = d;
		if (!d->pooled)
			rt->ndying++;
	} else {
		/* cannot watch it: wait for it here */
		if (d->ev)
			event_free(d->ev);
		d->ev = NULL;
		if (d != &local) {
			local = *d;
			free(d);
			d = &local;
		}
		dying_finish(d, 1);
	}
	sb->dead = 1;
	sb->dispatching++;
	procs_fail_all(sb);
	sb->dispatching--;
	if (!sb->dispatching)
		sandbox_free(sb);
}

/* Wait for every dying container (rt_free), at most RT_DYING_WAIT_MS in
 * all; one still alive after that is released unreaped (and logged). */
#define RT_DYING_WAIT_MS 10000
static void dying_wait_all(struct rt *rt)
{
	int64_t deadline = util_now_ms() + RT_DYING_WAIT_MS;

	while (rt->dying) {
		struct rt_dying *d, *q;
		int64_t left = deadline - util_now_ms();
		int rc;

		/* the ones no thread took yet: here */
		pthread_mutex_lock(&rt->lock);
		q = rt->reap_queue;
		rt->reap_queue = NULL;
		pthread_mutex_unlock(&rt->lock);
		while ((d = q)) {
			q = d->qnext;
			dying_finish(d, 1);
		}
		for (d = rt->dying; d && d->off_loop; d = d->next)
			;
		if (!d) {
			/* the rest are on threads */
			if (donepipe_wait(&rt->back, left > 0 ? (int)left : 0))
				donepipe_drain(&rt->back, back_posted, NULL);
			else if (left <= 0)
				break;
			continue;
		}
		struct pollfd p = { .fd = d->pidfd, .events = POLLIN };

		do
			rc = poll(&p, 1, left > 0 ? (int)left : 0);
		while (rc < 0 && errno == EINTR);
		if (rc <= 0)
			log_warn("sandbox '%s': its init did not exit in time", d->key);
		dying_finish(d, rc > 0);
	}
}

void rt_free(struct rt *rt)
{
	if (!rt)
		return;
	builders_drain(rt);
	while (rt->list)
		rt_destroy(rt, rt->list);
	dying_wait_all(rt);
	/* after every sandbox is gone: init's PR_SET_PDEATHSIG follows the
	 * thread that cloned it */
	builders_stop(rt);
	egress_free(rt->egress);
	cg_free(rt->cg);
	sec_release(&rt->sec);
	if (rt->init_fd >= 0)
		close(rt->init_fd);
	spawn_fds_release(&rt->spawn_fds);
	keyidx_free(&rt->by_key);
	free(rt->buf);
	for (unsigned i = 0; rt->idmap_fds && i < rt->ids.count; i++)
		if (rt->idmap_fds[i] >= 0)
			close(rt->idmap_fds[i]);
	free(rt->idmap_fds);
	if (rt->userns) {
		pthread_mutex_lock(&rt->ids_lock);
		ids_flush(rt);
		pthread_mutex_unlock(&rt->ids_lock);
		pthread_mutex_destroy(&rt->ids_lock);
	}
	free(rt->ids_put);
	idrange_release(&rt->ids);
	free(rt);
}

/* ---- accessors ---------------------------------------------------------- */

static struct rt_sandbox *rt_find(struct rt *rt, const char *key)
{
	return KEYIDX_OWNER(keyidx_find(&rt->by_key, key), struct rt_sandbox, idx);
}

const char *rt_key(const struct rt_sandbox *sb) { return sb->key; }
pid_t rt_init_pid(const struct rt_sandbox *sb) { return sb->pid; }
int rt_netns_fd(const struct rt_sandbox *sb) { return memo_open(&netns_memo, sb, "ns/net", O_RDONLY); }
int rt_root_fd(const struct rt_sandbox *sb)
{
	return memo_open(&root_memo, sb, "root", O_PATH | O_DIRECTORY);
}
unsigned rt_count(const struct rt *rt) { return rt->count; }
int rt_userns(const struct rt *rt) { return rt->userns; }
uid_t rt_host_uid(const struct rt_sandbox *sb) { return sb->host_uid >= 0 ? (uid_t)sb->host_uid : 0; }
uid_t rt_image_owner(const struct rt *rt) { return rt->image_owner; }
int rt_alive(const struct rt_sandbox *sb) { return !sb->dead && !sb->destroyed; }

int rt_freeze(struct rt_sandbox *sb, int frozen, struct sbx_err *e)
{
	return sb->rt->cg->ops->freeze(sb->rt->cg, sb->cg_key, frozen, e);
}

int rt_frozen(const struct rt_sandbox *sb)
{
	return sb->rt->cg->ops->frozen(sb->rt->cg, sb->cg_key);
}

int rt_freeze_all(struct rt *rt, int frozen)
{
	return cg_freeze_all(rt->cg, frozen);
}

void rt_thaw_pooled(struct rt *rt)
{
	for (struct rt_sandbox *sb = rt->list; sb; sb = sb->next) {
		struct sbx_err e = { 0 };

		if (sb->pooled && !sb->destroyed && rt_frozen(sb) == 1 && rt_freeze(sb, 0, &e) < 0)
			log_warn("pooled sandbox '%s': %s", sb->key, e.msg);
	}
}

void rt_kill_thaw_dying(struct rt *rt)
{
	for (struct rt_dying *d = rt->dying; d; d = d->next)
		if (!d->off_loop)
			cg_kill_thaw(rt->cg, d->cg_key);
}

void rt_helper_release(struct rt_helper *h)
{
	if (h->mnt_fd >= 0)
		close(h->mnt_fd);
	if (h->user_fd >= 0)
		close(h->user_fd);
	while (h->ncg > 0)
		close(h->cg_fds[--h->ncg]);
	h->mnt_fd = h->user_fd = -1;
}

int rt_helper_open(const struct rt_sandbox *sb, struct rt_helper *h, struct sbx_err *e)
{
	char path[64];

	h->mnt_fd = h->user_fd = -1;
	h->ncg = 0;
	if (sb->dead || sb->destroyed)
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "the sandbox is not running");
	util_xsnprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)sb->pid);
	h->mnt_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (h->mnt_fd < 0)
		return err_sys(e, errno, "cannot open the sandbox's mount namespace");
	if (sb->rt->userns) {
		util_xsnprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sb->pid);
		h->user_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (h->user_fd < 0) {
			err_sys(e, errno, "cannot open the sandbox's user namespace");
			rt_helper_release(h);
			return -1;
		}
	}
	h->ncg = rt_cgroup_procs_open(sb, h->cg_fds, RT_CGROUP_FDS, e);
	if (h->ncg < 0) {
		h->ncg = 0;
		rt_helper_release(h);
		return -1;
	}
	return 0;
}

int rt_helper_enter(const struct rt_sandbox *sb, const struct rt_helper *h)
{
	int fd;

	for (int i = 0; i < h->ncg; i++)
		if (write(h->cg_fds[i], "0", 1) != 1)
			return -1;
	fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1000", 4) != 4) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	if (setgroups(0, NULL) < 0 || setns(h->mnt_fd, CLONE_NEWNS) < 0)
		return -1;
	/* the user namespace last: from inside it, the mount namespace (owned
	 * by the host's user namespace) could not be joined any more */
	if (h->user_fd >= 0 && (setns(h->user_fd, CLONE_NEWUSER) < 0 || setresgid(0, 0, 0) < 0 ||
				setresuid(0, 0, 0) < 0))
		return -1;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 ||
	    caps_apply(sb->rt->caps_keep, sb->rt->caps_last) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return 0;
}

int64_t rt_memory_bytes(const struct rt_sandbox *sb)
{
	return sb->rt->cg->ops->memory_bytes(sb->rt->cg, sb->cg_key);
}

int64_t rt_oom_kills(const struct rt_sandbox *sb)
{
	return sb->rt->cg->ops->oom_kills(sb->rt->cg, sb->cg_key);
}

_Static_assert(RT_CGROUP_FDS >= CG_MAX_ROOTS, "RT_CGROUP_FDS must cover every hierarchy");

int rt_cgroup_procs_open(const struct rt_sandbox *sb, int *fds, int max, struct sbx_err *e)
{
	const struct cg *cg = sb->rt->cg;
	char p[PATH_MAX];
	int n;

	for (n = 0; n < cg->nroots && n < max; n++) {
		if (cg_path(p, sizeof(p), cg->base[n], sb->cg_key, "cgroup.procs") < 0) {
			err_set(e, SBX_E_INTERNAL, "cgroup path too long");
			goto fail;
		}
		fds[n] = open(p, O_WRONLY | O_CLOEXEC);
		if (fds[n] < 0) {
			err_sys(e, errno, "cannot open the cgroup of '%s'", sb->key);
			goto fail;
		}
	}
	return n;
fail:
	while (n-- > 0)
		close(fds[n]);
	return -1;
}

/* ---- processes ------------------------------------------------------------ */

int64_t rt_spawn(struct rt_sandbox *sb, const struct rt_proc_spec *ps, rt_started_cb on_started,
		 rt_exited_cb on_exited, void *arg, struct sbx_err *e)
{
	int fds[3] = { ps->stdin_fd, ps->stdout_fd, ps->stderr_fd };
	struct rt_proc *p;
	ssize_t len;
	int64_t handle;

	if (sb->dead || sb->destroyed) {
		close_fds(fds, 3);
		return err_set(e, SBX_E_CONFLICT, "sandbox '%s' is not running", sb->key);
	}
	if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0) {
		close_fds(fds, 3);
		return err_set(e, SBX_E_INTERNAL, "spawn needs three fds");
	}
	if (!ps->argv || !ps->argv[0] || !ps->argv[0][0]) {
		close_fds(fds, 3);
		return err_set(e, SBX_E_VALIDATION, "empty command");
	}
	if (!ps->cwd || ps->cwd[0] != '/') {
		close_fds(fds, 3);
		return err_set(e, SBX_E_VALIDATION, "cwd must be an absolute path");
	}
	handle = sb->next_handle++;
	len = initproto_encode_spawn_as(sb->rt->buf, INITPROTO_MAX, handle, sb->uid, sb->gid,
					sb->workdir[0] && strcmp(ps->cwd, "/workspace") == 0 ? sb->workdir : ps->cwd,
					ps->argv, ps->env);
	if (len < 0) {
		close_fds(fds, 3);
		return err_set(e, SBX_E_VALIDATION, "command and environment are too large");
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		close_fds(fds, 3);
		return err_sys(e, ENOMEM, "cannot allocate a process");
	}
	if (init_send(sb, sb->rt->buf, (size_t)len, fds, 3) < 0) {
		int err = errno;

		free(p);
		return err_sys(e, err, "cannot talk to the sandbox's init");
	}
	p->sb = sb;
	p->handle = handle;
	p->on_started = on_started;
	p->on_exited = on_exited;
	p->arg = arg;
	p->next = sb->procs;
	sb->procs = p;
	return handle;
}

/* Send one SIGNAL to init. 0 or -1. */
static int send_signal(struct rt_sandbox *sb, int64_t handle, int sig, int tree)
{
	char msg[64];
	ssize_t len;

	len = initproto_encode(msg, sizeof(msg), INITPROTO_SIGNAL, handle, sig, tree ? 1 : 0);
	if (len < 0 || init_send(sb, msg, (size_t)len, NULL, 0) < 0)
		return -1;
	return 0;
}

int rt_signal(struct rt_sandbox *sb, int64_t handle, int sig, int tree)
{
	struct rt_proc *p;

	if (sb->dead || sb->destroyed || sig < 1 || sig > 64)
		return -1;
	p = proc_find(sb, handle, NULL);
	if (!p || (!tree && p->exited))
		return -1;
	return send_signal(sb, handle, sig, tree);
}

static void kill_grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rt_proc *p = arg;

	if (!p->sb->dead && !p->sb->destroyed)
		(void)send_signal(p->sb, p->handle, SIGKILL, 1);
}

int rt_kill(struct rt_sandbox *sb, int64_t handle, int sig, int64_t grace_ms, rt_gone_cb gone)
{
	struct rt_proc *p;

	if (sb->dead || sb->destroyed || sig < 1 || sig > 64)
		return -1;
	p = proc_find(sb, handle, NULL);
	if (!p || send_signal(sb, handle, sig, 1) < 0)
		return -1;
	p->on_gone = gone;
	if (sig == SIGKILL)
		return 0;
	if (grace_ms <= 0)
		return send_signal(sb, handle, SIGKILL, 1) < 0 ? -1 : 0;
	if (!p->kill_ev)
		p->kill_ev = evtimer_new(sb->rt->base, kill_grace_cb, p);
	if (p->kill_ev) {
		struct timeval tv = { (time_t)(grace_ms / 1000), (suseconds_t)((grace_ms % 1000) * 1000) };

		evtimer_add(p->kill_ev, &tv);
		return 0;
	}
	/* no timer: do not leave the tree running */
	return send_signal(sb, handle, SIGKILL, 1) < 0 ? -1 : 0;
}

void rt_detach(struct rt_sandbox *sb, int64_t handle)
{
	struct rt_proc *p = proc_find(sb, handle, NULL);

	if (p) {
		p->on_started = NULL;
		p->on_exited = NULL;
		p->on_gone = NULL;
		p->arg = NULL;
	}
}

/* ---- warm pool support (runtime.h; the pool itself is sandbox/pool.c) ---- */

struct rt_sandbox *rt_create_pooled(struct rt *rt, const struct rt_spec *spec, struct sbx_err *e)
{
	return create_now(rt, spec, 1, e);
}

unsigned rt_pooled_count(const struct rt *rt) { return rt->npooled; }

/* Rename the cgroup directories of "from" to "to" in every hierarchy (all
 * or none). 1 when renamed, 0 when the hierarchy refuses renames (cgroup
 * v2: EPERM) and nothing changed, -1 with e filled. */
static int cg_rename_all(struct cg *cg, const char *from, const char *to, struct sbx_err *e)
{
	char a[PATH_MAX], b[PATH_MAX];
	struct stat st;
	int i, err = 0;

	for (i = 0; i < cg->nroots; i++) {
		if (cg_path(a, sizeof(a), cg->base[i], from, NULL) < 0 ||
		    cg_path(b, sizeof(b), cg->base[i], to, NULL) < 0) {
			err = ENAMETOOLONG;
			break;
		}
		/* rename(2) would replace an empty directory of that name */
		if (lstat(b, &st) == 0) {
			err = EEXIST;
			break;
		}
		if (rename(a, b) < 0) {
			err = errno;
			break;
		}
	}
	if (i == cg->nroots)
		return 1;
	while (i-- > 0) {
		if (cg_path(a, sizeof(a), cg->base[i], from, NULL) == 0 &&
		    cg_path(b, sizeof(b), cg->base[i], to, NULL) == 0 && rename(b, a) < 0)
			log_warn("cannot rename cgroup '%s' back to '%s': %s", to, from, strerror(errno));
	}
	if (err == EPERM)
		return 0;
	return err_sys(e, err, "cannot rename cgroup '%s' to '%s'", from, to);
}

int rt_claim(struct rt *rt, struct rt_sandbox *sb, const char *key, const struct rt_limits *limits,
	     struct sbx_err *e)
{
	struct cg_limits lim;
	int renamed;

	if (!sb->pooled || sb->dead || sb->destroyed) {
		err_set(e, SBX_E_INTERNAL, "not a live pooled sandbox");
		return -2;
	}
	if (!key || !valid_key(key))
		return err_set(e, SBX_E_VALIDATION, "invalid sandbox key");
	if (key_free(rt, key, e) < 0)
		return -1;
	if (rt->count + rt->nbuilding >= (unsigned)rt->conf.agent.capacity)
		return err_set(e, SBX_E_NO_CAPACITY, "node is full (%u sandboxes)",
			       rt->count + rt->nbuilding);
	lim.memory_mib = pick(limits->memory_mib, rt->conf.sandbox.memory_mib);
	lim.cpus_milli = pick(limits->cpus_milli, rt->conf.sandbox.cpus_milli);
	lim.pids = pick(limits->pids, rt->conf.sandbox.pids);
	if (lim.memory_mib < 16 || lim.memory_mib > 1048576 || lim.cpus_milli < 10 ||
	    lim.cpus_milli > 256000 || lim.pids < 8 || lim.pids > 1000000)
		return err_set(e, SBX_E_VALIDATION, "resource limits out of range");
	renamed = cg_rename_all(rt->cg, sb->cg_key, key, e);
	if (renamed < 0)
		return -2;
	if (renamed)
		memcpy(sb->cg_key, key, strlen(key) + 1);
	if (rt->cg->ops == &cg_v1_ops && rt->cg->nroots > 0) {
		/* v1 refuses memory.limit_in_bytes above memory.memsw.limit_in_bytes:
		 * lift the latter first; create() writes both again */
		char p[PATH_MAX];

		if (cg_path(p, sizeof(p), rt->cg->base[0], sb->cg_key, "memory.memsw.limit_in_bytes") == 0 &&
		    cg_write(p, "-1") < 0 && errno != ENOENT) {
			err_sys(e, errno, "cannot lift memory.memsw.limit_in_bytes");
			return -2;
		}
	}
	/* create() on an existing cgroup writes the limits only */
	if (rt->cg->ops->create(rt->cg, sb->cg_key, &lim, e) < 0)
		return -2;
	log_debug("pooled sandbox '%s' is now '%s'", sb->key, key);
	keyidx_remove(&rt->by_key, &sb->idx);
	memcpy(sb->key, key, strlen(key) + 1);
	(void)keyidx_add(&rt->by_key, &sb->idx, sb->key);   /* has a table: cannot fail */
	sb->pooled = 0;
	rt->npooled--;
	rt->count++;
	return 0;
}
