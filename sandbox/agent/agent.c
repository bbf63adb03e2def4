/*
 * agent.c — sbx-agent: the node agent. One libevent loop drives the HTTP
 * server, the runtime's sandboxes and the Redis registry.
 *
 *   sbx-agent -c FILE [-o section.key=value]...
 *   sbx-agent --version | --print-config [-c FILE] [-o ...]
 */
#include "agent.h"
#include "agent_images.h"
#include "agent_lifecycle.h"
#include "agent_metrics.h"
#include "bgwork.h"
#include "forward.h"
#include "conf.h"
#include "httpd.h"
#include "keeper.h"
#include "log.h"
#include "pool.h"
#include "registry.h"
#include "runtime.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static struct agent agent;
static struct event_base *base;

static void usage(FILE *out)
{
	fprintf(out, "usage: sbx-agent -c FILE [-o section.key=value]...\n"
		     "       sbx-agent --version\n"
		     "       sbx-agent --print-config [-c FILE] [-o section.key=value]...\n");
}

static void stats(void *arg, struct registry_stats *out)
{
	struct agent *a = arg;
	long long n = 0;

	for (struct agent_sb *sb = a->sandboxes; sb; sb = sb->next)
		n += sb->rt != NULL && !sb->dead;
	out->sandboxes = n;
	out->capacity = capacity_now(&a->cap, n, &out->capacity_by);
	out->load = out->capacity > 0 ? n * 1000 / out->capacity : 1000;
}

static void deregistered(void *arg)
{
	event_base_loopbreak(base);
}

/* How long a clean shutdown waits for Redis to set the records asleep. */
#define SLEEP_ALL_WAIT_MS 2000

/* The records are asleep (or the wait is over): stop the sandboxes, then
 * deregister. Sandboxes go first, so that running commands end their
 * answers with a terminal event, which the loop still delivers while we
 * deregister. Runs once. */
static void records_asleep(void *arg)
{
	static int done;
	struct registry *reg = arg;

	if (done)
		return;
	done = 1;
	agent_sb_destroy_all(&agent);
	registry_shutdown(reg, 500, deregistered, NULL);
}

static void records_wait_over(evutil_socket_t fd, short what, void *arg)
{
	records_asleep(arg);
}

/* The loop thread answers every call of the node, so it runs ahead of the
 * tenants' processes and of the builds: nice AGENT_LOOP_NICE. The threads
 * and processes it starts get nice 0 again (SCHED_RESET_ON_FORK). */
#define AGENT_LOOP_NICE (-5)
static void loop_priority(void)
{
	struct sched_param p = { 0 };

	if (sched_setscheduler(0, SCHED_OTHER | SCHED_RESET_ON_FORK, &p) < 0 ||
	    setpriority(PRIO_PROCESS, (id_t)gettid(), AGENT_LOOP_NICE) < 0)
		log_warn("cannot raise the loop thread's priority: %s (calls may wait behind "
			 "busy sandboxes)", strerror(errno));
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct registry *reg = arg;

	if (agent.shutting_down) {
		event_base_loopbreak(base);
		return;
	}
	agent.shutting_down = 1;
	log_info("signal %d: shutting down", (int)sig);
	/* Out of placement at once; then every record of ours to sleeping (the
	 * next call wakes it elsewhere), at most SLEEP_ALL_WAIT_MS for Redis. */
	registry_leave(reg);
	{
		struct timeval tv = { SLEEP_ALL_WAIT_MS / 1000, (SLEEP_ALL_WAIT_MS % 1000) * 1000 };

		if (event_base_once(base, -1, EV_TIMEOUT, records_wait_over, reg, &tv) < 0)
			log_warn("cannot arm the shutdown timer");
	}
	agent_lc_sleep_all(&agent, records_asleep, reg);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "override", required_argument, NULL, 'o' },
		{ "version", no_argument, NULL, 'V' },
		{ "print-config", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct sbx_conf conf;
	const char *config = NULL;
	const char *overrides[64];
	int noverrides = 0, print = 0, c;
	struct sbx_err e = { 0 };
	struct httpd *httpd;
	struct registry *reg;
	struct keeper *keeper;
	struct event *sigterm, *sigint;

	log_init("sbx-agent", LOG_INFO);
	while ((c = getopt_long(argc, argv, "c:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'o':
			if (noverrides >= (int)ARRAY_SIZE(overrides)) {
				fprintf(stderr, "sbx-agent: too many -o options\n");
				return 2;
			}
			overrides[noverrides++] = optarg;
			break;
		case 'V':
			printf("sbx-agent %s\n", AGENT_VERSION);
			return 0;
		case 'P':
			print = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc || (!config && !print)) {
		usage(stderr);
		return 2;
	}
	conf_defaults(&conf);
	if (config && conf_load(&conf, config, &e) < 0) {
		fprintf(stderr, "sbx-agent: %s\n", e.msg);
		return 2;
	}
	for (int i = 0; i < noverrides; i++) {
		if (conf_override(&conf, overrides[i], &e) < 0) {
			fprintf(stderr, "sbx-agent: -o %s: %s\n", overrides[i], e.msg);
			return 2;
		}
	}
	if (print) {
		conf_print(&conf, stdout);
		return 0;
	}
	if (!conf.cluster.secret[0]) {
		log_error("cluster.secret is not set: refusing to start");
		return 2;
	}
	if (util_mkdir_p(conf.agent.state_dir, 0700) < 0) {
		log_error("cannot create agent.state_dir '%s': %s", conf.agent.state_dir,
			  strerror(errno));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	capacity_raise_nofile();

	base = event_base_new();
	if (!base) {
		log_error("cannot create the event loop");
		return 1;
	}
	agent.conf = &conf;
	agent.base = base;
	agent.rt = rt_new(base, &conf, &e);
	if (!agent.rt) {
		log_error("cannot start the runtime: %s", e.msg);
		return 1;
	}
	rt_set_died_cb(agent.rt, agent_sb_died, &agent);
	if (agent_images_init(&agent, &e) < 0) {
		log_error("%s", e.msg);
		rt_free(agent.rt);
		return 1;
	}
	if (bgwork_init(&agent, &e) < 0) {
		log_error("%s", e.msg);
		rt_free(agent.rt);
		return 1;
	}
	agent.pool = pool_new(base, agent.rt, &conf, &e);
	if (!agent.pool && conf.agent.warm_pool > 0) {
		log_error("%s", e.msg);
		rt_free(agent.rt);
		return 1;
	}
	httpd = httpd_new(base, conf.agent.listen, conf.cluster.secret, agent_routes,
			  agent_routes_count, &agent, (unsigned)conf.agent.max_connections, &e);
	if (!httpd) {
		log_error("%s", e.msg);
		rt_free(agent.rt);
		return 1;
	}
	httpd_set_big_body_budget(httpd, (uint64_t)conf.agent.big_bodies_node_bytes);
	agent.httpd = httpd;
	if (fwd_gateway_start(&agent, &e) < 0) {
		log_error("%s", e.msg);
		httpd_free(httpd);
		rt_free(agent.rt);
		return 1;
	}
	reg = registry_new(base, &conf, AGENT_VERSION, stats, &agent, &e);
	if (!reg) {
		log_error("%s", e.msg);
		httpd_free(httpd);
		rt_free(agent.rt);
		return 1;
	}
	agent.reg = reg;
	httpd_observe(httpd, agent_metrics_request);
	if (agent_metrics_start(&agent, &e) < 0) {
		log_error("%s", e.msg);
		return 1;
	}
	keeper = keeper_new(base, registry_lease(reg), agent.rt, &e);
	if (!keeper) {
		log_error("%s", e.msg);
		return 1;
	}
	agent.lc = agent_lc_new(&agent, reg, &e);
	if (!agent.lc) {
		log_error("%s", e.msg);
		return 1;
	}
	if (agent_persist_init && agent_persist_init(&agent, &e) < 0) {
		log_error("%s", e.msg);
		return 1;
	}
	sigterm = evsignal_new(base, SIGTERM, signal_cb, reg);
	sigint = evsignal_new(base, SIGINT, signal_cb, reg);
	if (!sigterm || !sigint || evsignal_add(sigterm, NULL) < 0 || evsignal_add(sigint, NULL) < 0) {
		log_error("cannot install signal handlers");
		return 1;
	}
	/* after the set-up, before the first sandbox: the fds open now are the base */
	capacity_init(&agent.cap, &conf, rt_userns(agent.rt));
	log_info("sbx-agent %s '%s' listening on %s%s%s", AGENT_VERSION, conf.agent.name,
		 conf.agent.listen, conf.agent.metrics_listen[0] ? ", metrics on " : "",
		 conf.agent.metrics_listen);

	loop_priority();
	event_base_dispatch(base);

	httpd_free(httpd);
	agent_images_release(&agent);
	if (agent_persist_release)
		agent_persist_release(&agent);
	bgwork_release(&agent);
	agent_metrics_stop();
	fwd_release_all();
	agent_sb_destroy_all(&agent);
	keeper_free(keeper);
	pool_free(agent.pool);
	agent.pool = NULL;
	rt_free(agent.rt);
	agent_lc_free(agent.lc);
	agent.lc = NULL;
	registry_free(reg);
	agent.reg = NULL;
	while (agent.fences) {
		struct agent_fence *f = agent.fences;
		agent.fences = f->next;
		free(f);
	}
	event_free(sigterm);
	event_free(sigint);
	event_base_free(base);
	log_info("stopped");
	return 0;
}
