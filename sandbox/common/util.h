/*
 * util.h — scope cleanup and small helpers shared by every binary.
 *
 * Declare a local with auto_free / auto_close / auto_fclose / auto_json and
 * it is released when it leaves scope. Hand ownership over visibly with
 * steal_ptr() / steal_fd(), which return the value and reset the local.
 */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

void util_freep(void *p);
void util_closep(int *fd);
void util_fclosep(FILE **f);

/* snprintf where the bound is a fact, not a guess (a number into a buffer
 * sized for it): truncation is a bug, so it is logged and the process
 * aborts (git's xsnprintf). Returns the length written. Where the input
 * can be longer than the buffer, check snprintf's result instead. */
__attribute__((format(printf, 3, 4)))
int util_xsnprintf(char *buf, size_t size, const char *fmt, ...);

#define auto_free   __attribute__((cleanup(util_freep)))
#define auto_close  __attribute__((cleanup(util_closep)))
#define auto_fclose __attribute__((cleanup(util_fclosep)))

static inline void *steal_ptr_impl(void *pp)
{
	void **p = pp;
	void *v = *p;
	*p = NULL;
	return v;
}
#define steal_ptr(pp) steal_ptr_impl(pp)

static inline int steal_fd(int *fd)
{
	int v = *fd;
	*fd = -1;
	return v;
}

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Milliseconds on CLOCK_MONOTONIC / CLOCK_REALTIME. */
int64_t util_now_ms(void);
int64_t util_wall_ms(void);

/* Fill buf with n random bytes (getrandom); 0 or -1 with errno. */
int util_random(void *buf, size_t n);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void util_hex(const void *data, size_t n, char *out);

/* Parse a whole decimal string into [min,max]; 0 or -1 (bad or out of range). */
int util_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* Write all of buf (retrying EINTR / short writes); 0 or -1 with errno. */
int util_write_all(int fd, const void *buf, size_t n);

/* Read a whole small file (at most max bytes) into a NUL-terminated heap
 * string; NULL with errno on failure (EFBIG when larger than max). */
char *util_read_file(const char *path, size_t max, size_t *len);

/* Write a file atomically (temp + rename) with mode; 0 or -1 with errno. */
int util_write_file(const char *path, const void *data, size_t n, unsigned mode);

/* mkdir -p: missing parents 0755, the last component with mode; an
 * existing directory is fine. 0 or -1 with errno. */
int util_mkdir_p(const char *path, unsigned mode);

/* Set FD_CLOEXEC / O_NONBLOCK on an fd we did not open ourselves. */
int util_set_cloexec(int fd);
int util_set_nonblock(int fd);

/* openat2 of rel below the directory root (RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS, plus the resolve flags given), close-on-exec;
 * mode when flags create. Retries the rare EAGAIN of a racing rename or
 * mount. An fd, or -1 with errno. */
int util_open_in_root(int root, const char *rel, int flags, unsigned mode, uint64_t resolve);

/* ISO-8601 UTC with milliseconds ("2026-11-29T08:00:00.000Z") into out[32]. */
void util_iso8601(int64_t wall_ms, char out[32]);

#endif
