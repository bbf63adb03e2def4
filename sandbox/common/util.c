#include "util.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void util_freep(void *p)
{
	free(*(void **)p);
}

void util_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

void util_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t util_now_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t util_wall_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

int util_random(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

void util_hex(const void *data, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

int util_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	long long v;

	if (!s || !*s || (*s != '-' && (*s < '0' || *s > '9')))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int util_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

char *util_read_file(const char *path, size_t max, size_t *len)
{
	auto_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	auto_free char *buf = NULL;
	size_t used = 0, cap = 0;

	if (fd < 0)
		return NULL;
	for (;;) {
		if (used + 1 >= cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			char *nb;
			if (ncap > max + 1)
				ncap = max + 1;
			if (used + 1 >= ncap) {
				errno = EFBIG;
				return NULL;
			}
			nb = realloc(buf, ncap);
			if (!nb)
				return NULL;
			buf = nb;
			cap = ncap;
		}
		ssize_t r = read(fd, buf + used, cap - used - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (r == 0)
			break;
		used += (size_t)r;
	}
	buf[used] = '\0';
	if (len)
		*len = used;
	return steal_ptr(&buf);
}

int util_write_file(const char *path, const void *data, size_t n, unsigned mode)
{
	char tmp[4096];
	int fd, saved;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -1;
	if (util_write_all(fd, data, n) < 0 || fchmod(fd, mode) < 0) {
		saved = errno;
		close(fd);
		unlink(tmp);
		errno = saved;
		return -1;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		saved = errno;
		unlink(tmp);
		errno = saved;
		return -1;
	}
	return 0;
}

int util_mkdir_p(const char *path, unsigned mode)
{
	char tmp[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

int util_set_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
}

int util_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void util_iso8601(int64_t wall_ms, char out[32])
{
	time_t secs = (time_t)(wall_ms / 1000);
	struct tm tm;

	gmtime_r(&secs, &tm);
	if (snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (int)(wall_ms % 1000)) < 0)
		out[0] = '\0';
}

int util_xsnprintf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	int w;

	va_start(ap, fmt);
	w = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= size) {
		log_error("util_xsnprintf: '%s' does not fit in %zu bytes: a bug", fmt, size);
		abort();
	}
	return w;
}

int util_open_in_root(int root, const char *rel, int flags, unsigned mode, uint64_t resolve)
{
	struct open_how how;
	int fd = -1;

	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC);
	how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
	how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | resolve;
	for (int i = 0; i < 8; i++) {
		fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			return fd;
	}
	return -1;
}
