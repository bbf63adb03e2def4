/*
 * metrics.h — counters, gauges and histograms of one binary, and their
 * Prometheus text rendering (exposition format 0.0.4).
 *
 * A tier describes its metrics as a table of families (struct
 * metrics_family), each with at most two labels whose values are a fixed
 * list given up front: label sets are bounded by construction, no value
 * seen at run time (an id, a path) can become a label. The cells live in
 * one MAP_SHARED anonymous mapping of nslots equal slots: a process that
 * forks writers (the API master and its workers) creates it before the
 * fork, gives each writer a slot of its own, and renders the sum over the
 * slots it used. A slot has one writer process; updates are relaxed atomic
 * adds (no locks, safe from several threads of that process), reads at
 * render time are relaxed atomic loads, so a sum is a consistent-enough
 * snapshot, never a torn value. Slots are never cleared: a counter of a
 * worker that died and was replaced keeps growing in the same slot.
 *
 * Histograms keep per-bucket counts, a count and a sum in micro-units
 * (value * 1e6, so seconds are kept in microseconds) and render the
 * cumulative buckets, _sum and _count.
 *
 * The update calls act on the process's current registry (metrics_use)
 * and are no-ops while there is none (unit tests, CLI subcommands).
 */
#ifndef SBX_METRICS_H
#define SBX_METRICS_H

#include "buf.h"
#include "err.h"

#include <stdint.h>

enum metrics_kind { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

/* One label and its values (borrowed; they must outlive the registry). */
struct metrics_dim {
	const char *name;            /* NULL: no label in this position */
	const char *const *values;
	unsigned n;
};

#define METRICS_MAX_BOUNDS 16
/* Bucket bounds (seconds) of both tiers: requests, and Redis round trips. */
#define METRICS_REQUEST_BOUNDS 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
#define METRICS_REDIS_BOUNDS 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5

struct metrics_family {
	const char *name;            /* sbx_..._total, _seconds, _bytes: base units */
	const char *help;
	enum metrics_kind kind;
	struct metrics_dim dim[2];
	const double *bounds;        /* histogram: ascending upper bounds (+Inf implied) */
	unsigned nbounds;
	int sparse;                  /* render only label sets with a value (or a count) */
};

struct metrics;

/* A registry of the families fams[0..nfams) (borrowed) with nslots slots
 * in a MAP_SHARED anonymous mapping (shared with children forked later).
 * New object (metrics_free) or NULL with e. */
struct metrics *metrics_new(const struct metrics_family *fams, unsigned nfams, unsigned nslots,
			    struct sbx_err *e);
void metrics_free(struct metrics *m);

/* This process (and its threads) writes into slot of m from now on; m NULL
 * turns updates off. */
void metrics_use(struct metrics *m, unsigned slot);

/* Updates of family fam at label values (i, j) (0 for an unused label);
 * an index out of range is counted at the label's last value ("other"). */
void metrics_count(unsigned fam, unsigned i, unsigned j, uint64_t n);
void metrics_gauge_add(unsigned fam, unsigned i, unsigned j, int64_t delta);
void metrics_gauge_set(unsigned fam, unsigned i, unsigned j, int64_t value);
void metrics_observe(unsigned fam, unsigned i, unsigned j, double value);

/* Append the text of every family to out, summing the slots whose
 * used[slot] is non-zero (used NULL: every slot). 0, or -1 when out is full. */
int metrics_render(const struct metrics *m, const unsigned char *used, struct buf *out);

/* The index of value among d's values, or d->n - 1 (the catch-all last
 * value) when it is not one of them. */
unsigned metrics_index(const struct metrics_dim *d, const char *value);

/* The HTTP statuses both tiers answer, as a label dimension ("status"),
 * the last value "other"; metrics_status_index maps a code into it. */
extern const struct metrics_dim metrics_status_dim;
unsigned metrics_status_index(int status);

/* A "route" label built from a route table: "METHOD pattern" for each row
 * added, then "none" (no row matched). Static storage of its tier. */
#define METRICS_MAX_ROUTES 256
#define METRICS_ROUTE_NAME_MAX 128
struct metrics_routes {
	unsigned n;
	char names[METRICS_MAX_ROUTES][METRICS_ROUTE_NAME_MAX];
	const char *values[METRICS_MAX_ROUTES + 1];
};
/* Add a row; 0, or -1 with e when it does not fit. */
int metrics_routes_add(struct metrics_routes *mr, const char *method, const char *pattern,
		       struct sbx_err *e);
/* The label of the rows added (and "none", index mr->n). */
struct metrics_dim metrics_routes_dim(struct metrics_routes *mr);

/* How a Redis round trip failed, as a label dimension ("kind"): no
 * connection, a timeout or an I/O error, or an error reply. */
enum metrics_redis_error { METRICS_REDIS_OK = -1, METRICS_REDIS_CONNECTION, METRICS_REDIS_REPLY };
extern const struct metrics_dim metrics_redis_error_dim;

/* Microseconds on CLOCK_MONOTONIC (for durations). */
int64_t metrics_now_us(void);

/* Answer one HTTP/1.x request on the connected socket fd (left open) with
 * the text of m, within deadline_ms in total: GET /metrics → 200, another
 * path 404, another method 405. For a process without an event loop (the
 * API master); a client that stalls costs it deadline_ms at most. */
void metrics_serve(int fd, const struct metrics *m, const unsigned char *used, int deadline_ms);

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_MAX_TEXT (4 * 1024 * 1024)

#endif
