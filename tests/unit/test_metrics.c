/* The metrics registry and its text rendering (sandbox/common/metrics.c). */
#include "unit.h"
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const colours[] = { "red", "say \"hi\"\\", "other" };
static const char *const sizes[] = { "s", "l" };
static const double bounds[] = { 0.1, 1 };

enum { F_HITS, F_LEVEL, F_WAIT, F_N };

static const struct metrics_family fams[F_N] = {
	[F_HITS] = { "t_hits_total", "Hits.", METRICS_COUNTER,
		     { { "colour", colours, 3 }, { "size", sizes, 2 } }, NULL, 0, 1 },
	[F_LEVEL] = { "t_level", "Level.", METRICS_GAUGE, { { NULL, NULL, 0 }, { NULL, NULL, 0 } },
		      NULL, 0, 0 },
	[F_WAIT] = { "t_wait_seconds", "Wait.", METRICS_HISTOGRAM,
		     { { NULL, NULL, 0 }, { NULL, NULL, 0 } }, bounds, 2, 0 },
};

TEST(metrics_render_text)
{
	struct sbx_err e = { 0 };
	struct metrics *m = metrics_new(fams, F_N, 2, &e);
	struct buf out;

	CHECK(m != NULL);
	if (!m)
		return;
	metrics_use(m, 0);
	metrics_count(F_HITS, 0, 1, 2);
	metrics_count(F_HITS, 1, 0, 1);
	metrics_count(F_HITS, 9, 9, 1);         /* out of range: the last values */
	metrics_gauge_add(F_LEVEL, 0, 0, -3);
	metrics_observe(F_WAIT, 0, 0, 0.05);
	metrics_observe(F_WAIT, 0, 0, 0.5);
	metrics_observe(F_WAIT, 0, 0, 7);
	buf_init(&out, 1 << 16);
	CHECK_INT(metrics_render(m, NULL, &out), 0);
	CHECK_STR(out.data,
		  "# HELP t_hits_total Hits.\n# TYPE t_hits_total counter\n"
		  "t_hits_total{colour=\"red\",size=\"l\"} 2\n"
		  "t_hits_total{colour=\"say \\\"hi\\\"\\\\\",size=\"s\"} 1\n"
		  "t_hits_total{colour=\"other\",size=\"l\"} 1\n"
		  "# HELP t_level Level.\n# TYPE t_level gauge\nt_level -3\n"
		  "# HELP t_wait_seconds Wait.\n# TYPE t_wait_seconds histogram\n"
		  "t_wait_seconds_bucket{le=\"0.1\"} 1\nt_wait_seconds_bucket{le=\"1\"} 2\n"
		  "t_wait_seconds_bucket{le=\"+Inf\"} 3\nt_wait_seconds_sum 7.550000\n"
		  "t_wait_seconds_count 3\n");
	buf_release(&out);
	metrics_use(NULL, 0);
	metrics_free(m);
}

/* A child forked after the registry writes its own slot; the parent's
 * render sums the slots it is told were used, and only those. */
TEST(metrics_slots_shared_across_fork)
{
	struct sbx_err e = { 0 };
	struct metrics *m = metrics_new(fams, F_N, 3, &e);
	unsigned char used[3] = { 1, 1, 0 };
	struct buf out;
	pid_t pid;
	int status = -1;

	CHECK(m != NULL);
	if (!m)
		return;
	metrics_use(m, 0);
	metrics_gauge_set(F_LEVEL, 0, 0, 5);
	pid = fork();
	if (pid == 0) {
		metrics_use(m, 1);
		metrics_gauge_set(F_LEVEL, 0, 0, 2);
		metrics_use(m, 2);
		metrics_gauge_set(F_LEVEL, 0, 0, 100);
		_exit(0);
	}
	CHECK(pid > 0);
	waitpid(pid, &status, 0);
	CHECK_INT(status, 0);
	buf_init(&out, 1 << 16);
	CHECK_INT(metrics_render(m, used, &out), 0);
	CHECK(strstr(out.data, "\nt_level 7\n") != NULL);
	buf_release(&out);
	metrics_use(NULL, 0);
	metrics_free(m);
}

TEST(metrics_status_and_index)
{
	CHECK_STR(metrics_status_dim.values[metrics_status_index(404)], "404");
	CHECK_STR(metrics_status_dim.values[metrics_status_index(418)], "other");
	CHECK_STR(metrics_status_dim.values[metrics_status_index(-1)], "other");
	for (unsigned i = 0; i + 1 < metrics_status_dim.n; i++)
		CHECK_INT(metrics_status_index((int)strtol(metrics_status_dim.values[i], NULL, 10)), i);
}

TEST(metrics_updates_without_registry_are_noops)
{
	metrics_use(NULL, 0);
	metrics_count(0, 0, 0, 1);
	metrics_observe(2, 0, 0, 1.0);
	CHECK(1);
}

/* A NaN or negative observation counts as 0 (first bucket, nothing added
 * to the sum), a huge one stays countable. */
TEST(metrics_observe_clamps)
{
	struct sbx_err e = { 0 };
	struct metrics *m = metrics_new(fams, F_N, 1, &e);
	struct buf out;

	CHECK(m != NULL);
	if (!m)
		return;
	metrics_use(m, 0);
	metrics_observe(F_WAIT, 0, 0, NAN);
	metrics_observe(F_WAIT, 0, 0, -5);
	metrics_observe(F_WAIT, 0, 0, 1e300);
	buf_init(&out, 1 << 16);
	CHECK_INT(metrics_render(m, NULL, &out), 0);
	CHECK(strstr(out.data, "t_wait_seconds_bucket{le=\"0.1\"} 2\n") != NULL);
	CHECK(strstr(out.data, "t_wait_seconds_sum 1000000000000.000000\n") != NULL);
	CHECK(strstr(out.data, "t_wait_seconds_count 3\n") != NULL);
	buf_release(&out);
	metrics_use(NULL, 0);
	metrics_free(m);
}
