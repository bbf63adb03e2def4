#include "metrics.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct metrics {
	const struct metrics_family *fams;
	unsigned nfams;
	unsigned *offset;          /* first cell of each family in a slot */
	unsigned ncells;           /* cells per slot */
	unsigned nslots;
	uint64_t *cells;           /* nslots * ncells, MAP_SHARED */
	size_t maplen;
};

static struct metrics *cur;
static unsigned cur_slot;

static const char *const status_values[] = {
	"200", "201", "202", "204", "206", "301", "302", "304", "400", "401", "403", "404",
	"405", "409", "410", "411", "413", "415", "416", "422", "429", "499", "500", "502",
	"503", "504", "other",
};
static const short status_codes[] = {
	200, 201, 202, 204, 206, 301, 302, 304, 400, 401, 403, 404,
	405, 409, 410, 411, 413, 415, 416, 422, 429, 499, 500, 502,
	503, 504,
};
const struct metrics_dim metrics_status_dim = { "status", status_values, ARRAY_SIZE(status_values) };

static const char *const redis_errors[] = { "connection", "reply" };
const struct metrics_dim metrics_redis_error_dim = { "kind", redis_errors, ARRAY_SIZE(redis_errors) };

unsigned metrics_status_index(int status)
{
	_Static_assert(ARRAY_SIZE(status_codes) + 1 == ARRAY_SIZE(status_values),
		       "a value per status code, then other");
	for (unsigned i = 0; i < ARRAY_SIZE(status_codes); i++)
		if (status_codes[i] == status)
			return i;
	return ARRAY_SIZE(status_codes);
}

unsigned metrics_index(const struct metrics_dim *d, const char *value)
{
	for (unsigned i = 0; value && i < d->n; i++)
		if (strcmp(d->values[i], value) == 0)
			return i;
	return d->n ? d->n - 1 : 0;
}

int metrics_routes_add(struct metrics_routes *mr, const char *method, const char *pattern,
		       struct sbx_err *e)
{
	int n;

	if (mr->n >= METRICS_MAX_ROUTES)
		return err_set(e, SBX_E_INTERNAL, "metrics: more than %d routes", METRICS_MAX_ROUTES);
	n = snprintf(mr->names[mr->n], METRICS_ROUTE_NAME_MAX, "%s %s", method, pattern);
	if (n < 0 || n >= METRICS_ROUTE_NAME_MAX)
		return err_set(e, SBX_E_INTERNAL, "metrics: route '%.100s' is too long", pattern);
	mr->values[mr->n] = mr->names[mr->n];
	mr->n++;
	return 0;
}

struct metrics_dim metrics_routes_dim(struct metrics_routes *mr)
{
	mr->values[mr->n] = "none";
	return (struct metrics_dim){ "route", mr->values, mr->n + 1 };
}

static unsigned dim_n(const struct metrics_dim *d)
{
	return d->name && d->n ? d->n : 1;
}

/* Cells of one label set: a value, or buckets + count + sum. */
static unsigned width(const struct metrics_family *f)
{
	return f->kind == METRICS_HISTOGRAM ? f->nbounds + 2 : 1;
}

struct metrics *metrics_new(const struct metrics_family *fams, unsigned nfams, unsigned nslots,
			    struct sbx_err *e)
{
	struct metrics *m = calloc(1, sizeof(*m));
	size_t total = 0;

	if (!m || !(m->offset = calloc(nfams ? nfams : 1, sizeof(*m->offset)))) {
		free(m);
		err_sys(e, ENOMEM, "metrics");
		return NULL;
	}
	for (unsigned f = 0; f < nfams; f++) {
		if (fams[f].kind == METRICS_HISTOGRAM && fams[f].nbounds > METRICS_MAX_BOUNDS) {
			err_set(e, SBX_E_INTERNAL, "metrics: '%s' has too many buckets", fams[f].name);
			goto fail;
		}
		m->offset[f] = (unsigned)total;
		total += (size_t)dim_n(&fams[f].dim[0]) * dim_n(&fams[f].dim[1]) * width(&fams[f]);
	}
	if (total == 0 || nslots == 0 || total > (1u << 20) || nslots > 4096) {
		err_set(e, SBX_E_INTERNAL, "metrics: bad size (%zu cells, %u slots)", total, nslots);
		goto fail;
	}
	m->fams = fams;
	m->nfams = nfams;
	m->ncells = (unsigned)total;
	m->nslots = nslots;
	m->maplen = total * nslots * sizeof(uint64_t);
	m->cells = mmap(NULL, m->maplen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m->cells == MAP_FAILED) {
		err_sys(e, errno, "metrics: cannot map %zu bytes", m->maplen);
		goto fail;
	}
	return m;
fail:
	free(m->offset);
	free(m);
	return NULL;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	if (cur == m)
		cur = NULL;
	munmap(m->cells, m->maplen);
	free(m->offset);
	free(m);
}

void metrics_use(struct metrics *m, unsigned slot)
{
	cur = m && slot < m->nslots ? m : NULL;
	cur_slot = slot;
}

/* The first cell of family f at (i, j) in this process's slot, or NULL. */
static uint64_t *cell(unsigned f, unsigned i, unsigned j)
{
	const struct metrics_family *fam;
	unsigned n0, n1;

	if (!cur || f >= cur->nfams)
		return NULL;
	fam = &cur->fams[f];
	n0 = dim_n(&fam->dim[0]);
	n1 = dim_n(&fam->dim[1]);
	if (i >= n0)
		i = n0 - 1;
	if (j >= n1)
		j = n1 - 1;
	return &cur->cells[(size_t)cur_slot * cur->ncells + cur->offset[f] +
			   (i * n1 + j) * width(fam)];
}

void metrics_count(unsigned fam, unsigned i, unsigned j, uint64_t n)
{
	uint64_t *c = cell(fam, i, j);

	if (c)
		__atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

void metrics_gauge_add(unsigned fam, unsigned i, unsigned j, int64_t delta)
{
	uint64_t *c = cell(fam, i, j);

	if (c)
		__atomic_fetch_add(c, (uint64_t)delta, __ATOMIC_RELAXED);
}

void metrics_gauge_set(unsigned fam, unsigned i, unsigned j, int64_t value)
{
	uint64_t *c = cell(fam, i, j);

	if (c)
		__atomic_store_n(c, (uint64_t)value, __ATOMIC_RELAXED);
}

void metrics_observe(unsigned fam, unsigned i, unsigned j, double value)
{
	uint64_t *c = cell(fam, i, j);
	const struct metrics_family *f;
	unsigned b = 0;

	if (!c || cur->fams[fam].kind != METRICS_HISTOGRAM)
		return;
	f = &cur->fams[fam];
	if (!(value >= 0))             /* negative, or NaN */
		value = 0;
	if (value > 1e12)              /* sums stay far from 2^64 micro-units */
		value = 1e12;
	while (b < f->nbounds && value > f->bounds[b])
		b++;
	if (b < f->nbounds)
		__atomic_fetch_add(&c[b], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c[f->nbounds], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c[f->nbounds + 1], (uint64_t)(value * 1e6 + 0.5), __ATOMIC_RELAXED);
}

int64_t metrics_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* --- rendering --- */

/* Sum of cell k of label set (i, j) of family f over the used slots. */
static uint64_t sum(const struct metrics *m, const unsigned char *used, unsigned f, size_t set,
		    unsigned k)
{
	uint64_t s = 0;
	size_t base = m->offset[f] + set * width(&m->fams[f]) + k;

	for (unsigned slot = 0; slot < m->nslots; slot++)
		if (!used || used[slot])
			s += __atomic_load_n(&m->cells[(size_t)slot * m->ncells + base],
					     __ATOMIC_RELAXED);
	return s;
}

static int add_escaped(struct buf *out, const char *v)
{
	for (; *v; v++) {
		const char *esc = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
		if (esc ? buf_adds(out, esc) < 0 : buf_add(out, v, 1) < 0)
			return -1;
	}
	return 0;
}

/* name{labels[,le="bound"]} into out. */
static int add_series(struct buf *out, const char *name, const char *suffix,
		      const struct metrics_family *f, unsigned i, unsigned j, const char *le)
{
	const unsigned idx[2] = { i, j };
	int first = 1;

	if (buf_adds(out, name) < 0 || buf_adds(out, suffix) < 0)
		return -1;
	for (int d = 0; d < 2; d++) {
		if (!f->dim[d].name || !f->dim[d].n)
			continue;
		if (buf_printf(out, "%s%s=\"", first ? "{" : ",", f->dim[d].name) < 0 ||
		    add_escaped(out, f->dim[d].values[idx[d]]) < 0 || buf_adds(out, "\"") < 0)
			return -1;
		first = 0;
	}
	if (le && buf_printf(out, "%sle=\"%s\"", first ? "{" : ",", le) < 0)
		return -1;
	if (!first || le)
		return buf_adds(out, "}");
	return 0;
}

static int render_family(const struct metrics *m, const unsigned char *used, unsigned fi,
			 struct buf *out)
{
	static const char *const kinds[] = { "counter", "gauge", "histogram" };
	const struct metrics_family *f = &m->fams[fi];
	unsigned n0 = dim_n(&f->dim[0]), n1 = dim_n(&f->dim[1]);

	if (buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
		       kinds[f->kind]) < 0)
		return -1;
	for (unsigned i = 0; i < n0; i++) {
		for (unsigned j = 0; j < n1; j++) {
			size_t set = (size_t)i * n1 + j;
			uint64_t v, cum = 0;

			if (f->kind != METRICS_HISTOGRAM) {
				v = sum(m, used, fi, set, 0);
				if (f->sparse && v == 0)
					continue;
				if (add_series(out, f->name, "", f, i, j, NULL) < 0 ||
				    (f->kind == METRICS_GAUGE ?
				     buf_printf(out, " %lld\n", (long long)(int64_t)v) :
				     buf_printf(out, " %llu\n", (unsigned long long)v)) < 0)
					return -1;
				continue;
			}
			v = sum(m, used, fi, set, f->nbounds);   /* the count */
			if (f->sparse && v == 0)
				continue;
			for (unsigned b = 0; b < f->nbounds; b++) {
				char le[32];
				cum += sum(m, used, fi, set, b);
				util_xsnprintf(le, sizeof(le), "%g", f->bounds[b]);
				if (add_series(out, f->name, "_bucket", f, i, j, le) < 0 ||
				    buf_printf(out, " %llu\n", (unsigned long long)cum) < 0)
					return -1;
			}
			if (add_series(out, f->name, "_bucket", f, i, j, "+Inf") < 0 ||
			    buf_printf(out, " %llu\n", (unsigned long long)v) < 0 ||
			    add_series(out, f->name, "_sum", f, i, j, NULL) < 0 ||
			    buf_printf(out, " %.6f\n",
				       (double)sum(m, used, fi, set, f->nbounds + 1) / 1e6) < 0 ||
			    add_series(out, f->name, "_count", f, i, j, NULL) < 0 ||
			    buf_printf(out, " %llu\n", (unsigned long long)v) < 0)
				return -1;
		}
	}
	return 0;
}

int metrics_render(const struct metrics *m, const unsigned char *used, struct buf *out)
{
	for (unsigned f = 0; f < m->nfams; f++)
		if (render_family(m, used, f, out) < 0)
			return -1;
	return 0;
}

/* --- the listener of a process without an event loop --- */

/* Wait for events on fd until deadline (ms, monotonic); 1 ready, 0 not. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	int64_t left = deadline - util_now_ms();
	struct pollfd p = { .fd = fd, .events = events };

	if (left <= 0)
		return 0;
	return poll(&p, 1, (int)left) == 1;
}

static void send_all(int fd, const char *data, size_t len, int64_t deadline)
{
	while (len > 0) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			data += n;
			len -= (size_t)n;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			return;
		} else if (!wait_fd(fd, POLLOUT, deadline)) {
			return;
		}
	}
}

static void send_status(int fd, const char *status, int64_t deadline)
{
	char head[160];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);

	if (n > 0 && (size_t)n < sizeof(head))
		send_all(fd, head, (size_t)n, deadline);
}

void metrics_serve(int fd, const struct metrics *m, const unsigned char *used, int deadline_ms)
{
	int64_t deadline = util_now_ms() + deadline_ms;
	char req[4096];
	size_t len = 0;
	const char *path;
	struct buf body;
	char head[192];
	int n;

	while (!memmem(req, len, "\r\n\r\n", 4)) {
		ssize_t r;
		if (len == sizeof(req) || !wait_fd(fd, POLLIN, deadline))
			return;
		r = recv(fd, req + len, sizeof(req) - len, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return;
		if (r > 0)
			len += (size_t)r;
	}
	if (len < 4 || memcmp(req, "GET ", 4) != 0) {
		send_status(fd, "405 Method Not Allowed", deadline);
		return;
	}
	path = req + 4;
	if (strncmp(path, "/metrics", 8) != 0 || (path[8] != ' ' && path[8] != '?')) {
		send_status(fd, "404 Not Found", deadline);
		return;
	}
	buf_init(&body, METRICS_MAX_TEXT);
	if (metrics_render(m, used, &body) < 0) {
		buf_release(&body);
		send_status(fd, "500 Internal Server Error", deadline);
		return;
	}
	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 200 OK\r\nContent-Type: " METRICS_CONTENT_TYPE
		     "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", body.len);
	if (n > 0 && (size_t)n < sizeof(head)) {
		send_all(fd, head, (size_t)n, deadline);
		send_all(fd, body.data ? body.data : "", body.len, deadline);
	}
	buf_release(&body);
}
