/*
 * idrange.c — see idrange.h.
 */
#include "idrange.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int idrange_init(struct idrange *r, int64_t base, int64_t count, const char *lock_dir,
		 struct sbx_err *e)
{
	memset(r, 0, sizeof(*r));
	if (base < 1 || count < 1 || count > 65535 ||
	    base + count * (int64_t)IDRANGE_SIZE > (int64_t)UINT32_MAX)
		return err_set(e, SBX_E_INTERNAL,
			       "agent.uid_base + agent.uid_ranges * 65536 must stay below 2^32");
	if (lock_dir && snprintf(r->lock_dir, sizeof(r->lock_dir), "%s", lock_dir) >= (int)sizeof(r->lock_dir))
		return err_set(e, SBX_E_INTERNAL, "uid range lock directory too long");
	if (r->lock_dir[0] && util_mkdir_p(r->lock_dir, 0700) < 0)
		return err_sys(e, errno, "cannot create '%s'", r->lock_dir);
	r->lock_fd = -1;
	r->state = calloc((size_t)count, 1);
	r->locked = calloc((size_t)count, 1);
	if (!r->state || !r->locked) {
		idrange_release(r);
		return err_sys(e, ENOMEM, "cannot allocate the uid ranges");
	}
	r->base = (uint32_t)base;
	r->count = (unsigned)count;
	r->proc = "/proc";
	return 0;
}

void idrange_release(struct idrange *r)
{
	if (r->lock_fd >= 0)
		close(r->lock_fd);   /* drops every lock it holds */
	r->lock_fd = -1;
	free(r->locked);
	free(r->state);
	r->locked = NULL;
	r->state = NULL;
	r->count = 0;
}

/* The block a host id falls in, or -1. */
static long block_of(const struct idrange *r, unsigned long id)
{
	if (id < r->base || id >= (unsigned long)r->base + (unsigned long)r->count * IDRANGE_SIZE)
		return -1;
	return (long)((id - r->base) / IDRANGE_SIZE);
}

/* Set live[b] for every block b a process's uids are in. */
static void scan(struct idrange *r, unsigned char *live)
{
	DIR *d = opendir(r->proc);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[PATH_MAX], buf[4096], *line;
		unsigned long ids[3];
		ssize_t n;
		int fd;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s/status", r->proc, de->d_name) >= (int)sizeof(path))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		line = strstr(buf, "\nUid:");
		if (!line || sscanf(line + 5, "%lu %lu %lu", &ids[0], &ids[1], &ids[2]) != 3)
			continue;
		for (int i = 0; i < 3; i++) {
			long b = block_of(r, ids[i]);

			if (b >= 0)
				live[b] = 1;
		}
	}
	closedir(d);
}

unsigned idrange_reserve_live(struct idrange *r)
{
	unsigned char *live = calloc(r->count, 1);
	unsigned n = 0;

	if (!live)
		return 0;
	scan(r, live);
	for (unsigned i = 0; i < r->count; i++) {
		if (live[i] && r->state[i] == IDRANGE_FREE)
			r->state[i] = IDRANGE_LIVE;
		if (r->state[i] == IDRANGE_LIVE)
			n++;
	}
	free(live);
	return n;
}

/* Lock or unlock (type F_WRLCK / F_UNLCK) the byte of block b in the
 * lock file: 0, or -1 with errno (EAGAIN/EACCES: another holder has it). */
static int lock_byte(const struct idrange *r, unsigned b, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = (off_t)r->base + (off_t)b * IDRANGE_SIZE, .l_len = 1 };

	return fcntl(r->lock_fd, F_OFD_SETLK, &fl);
}

/* Lock block b host-wide: 1 locked, -2 when another holder has it, 0 on
 * another error (the block is then used unlocked: a broken lock
 * directory must not stop every create). */
static int lock_block(struct idrange *r, unsigned b)
{
	char path[PATH_MAX];

	if (!r->lock_dir[0])
		return 0;
	if (r->lock_fd < 0) {
		if (snprintf(path, sizeof(path), "%s/ranges", r->lock_dir) >= (int)sizeof(path))
			return 0;
		r->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (r->lock_fd < 0)
			return 0;
	}
	if (lock_byte(r, b, F_WRLCK) < 0)
		return errno == EAGAIN || errno == EACCES ? -2 : 0;
	return 1;
}

/* Take a free block from r->next on that no one else locks; or -1. */
static long take_free(struct idrange *r)
{
	for (unsigned k = 0; k < r->count; k++) {
		unsigned i = (r->next + k) % r->count;
		int locked;

		if (r->state[i] != IDRANGE_FREE)
			continue;
		locked = lock_block(r, i);
		if (locked == -2)
			continue;
		r->state[i] = IDRANGE_TAKEN;
		r->locked[i] = locked == 1;
		return (long)i;
	}
	return -1;
}

int64_t idrange_get(struct idrange *r, struct sbx_err *e)
{
	long b = take_free(r);

	if (b < 0) {
		unsigned char *live = calloc(r->count ? r->count : 1, 1);

		if (live) {
			scan(r, live);
			for (unsigned i = 0; i < r->count; i++)
				if (r->state[i] == IDRANGE_LIVE && !live[i])
					r->state[i] = IDRANGE_FREE;
			free(live);
		}
		b = take_free(r);
	}
	if (b < 0)
		return err_set(e, SBX_E_NO_CAPACITY, "no free uid range (agent.uid_ranges is %u)",
			       r->count);
	/* round robin: a released block is the last to be handed out again */
	r->next = ((unsigned)b + 1) % r->count;
	return (int64_t)r->base + (int64_t)b * IDRANGE_SIZE;
}

void idrange_put(struct idrange *r, uint32_t id)
{
	long b = block_of(r, id);

	if (b >= 0 && (id - r->base) % IDRANGE_SIZE == 0 && r->state[b] == IDRANGE_TAKEN) {
		r->state[b] = IDRANGE_FREE;
		if (r->locked[b])
			(void)lock_byte(r, (unsigned)b, F_UNLCK);
		r->locked[b] = 0;
	}
}
