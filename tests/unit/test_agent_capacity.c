/* The node's capacity: the smallest of agent.capacity and its host limits
 * (sandbox/agent/capacity.c). */
#include "unit.h"
#include "capacity.h"

#include <errno.h>
#include <string.h>

static struct capacity_limits none(long long configured)
{
	struct capacity_limits l = { .configured = configured, .nofile = -1, .pids_free = -1,
				     .uid_ranges = -1, .namespaces = -1 };
	return l;
}

TEST(agent_capacity_smallest_limit_wins)
{
	struct capacity_limits l = none(5000);
	const char *by;

	CHECK_INT(capacity_of(&l, 0, &by), 5000);
	CHECK_STR(by, "agent.capacity");
	/* hard nofile 20000 here: 2 fds a sandbox after the base and the reserve */
	l.nofile = 20000;
	l.fds_base = 20;
	l.fds_reserve = 4448;
	CHECK_INT(capacity_of(&l, 0, &by), 5000);
	l.nofile = 1024;        /* a default soft limit nobody raised */
	CHECK_INT(capacity_of(&l, 0, &by), 0);
	CHECK_STR(by, "nofile");
	l.nofile = 20000;
	l.configured = 100000;
	CHECK_INT(capacity_of(&l, 0, &by), (20000 - 20 - 4448) / CAPACITY_FDS_PER_SANDBOX);
	CHECK_STR(by, "nofile");
	/* the warm pool's sandboxes hold fds and uid ranges too */
	l.warm_pool = 16;
	CHECK_INT(capacity_of(&l, 0, &by), (20000 - 20 - 4448) / CAPACITY_FDS_PER_SANDBOX - 16);
	l.uid_ranges = 1024;
	CHECK_INT(capacity_of(&l, 0, &by), 1008);
	CHECK_STR(by, "uid_ranges");
	/* pids are host wide and measured with the sandboxes running now */
	l.pids_free = 1500;
	CHECK_INT(capacity_of(&l, 300, &by), 300 + 1500 - CAPACITY_PIDS_SPARE);
	CHECK_STR(by, "pids");
	l.pids_free = 10;
	CHECK_INT(capacity_of(&l, 0, &by), 0);
}

TEST(agent_capacity_classify_limits)
{
	struct sbx_err e = { 0 };

	err_sys(&e, EMFILE, "cannot open '/var/lib/sbx/x'");
	CHECK_INT(capacity_classify(&e), 1);
	CHECK_INT(e.code, SBX_E_NO_CAPACITY);
	CHECK(strstr(e.msg, "file descriptors") != NULL);
	CHECK(strstr(e.msg, "/var/lib") == NULL);   /* no host path to the client */
	err_sys(&e, ENOSPC, "clone");
	CHECK_INT(capacity_classify(&e), 1);
	err_sys(&e, EAGAIN, "clone");
	CHECK_INT(capacity_classify(&e), 1);
	CHECK_INT(e.code, SBX_E_NO_CAPACITY);
	err_sys(&e, EINVAL, "mount");
	CHECK_INT(capacity_classify(&e), 0);
	CHECK_INT(e.code, SBX_E_INTERNAL);
	err_set(&e, SBX_E_VALIDATION, "bad");
	e.sys_errno = EMFILE;
	CHECK_INT(capacity_classify(&e), 0);
}
