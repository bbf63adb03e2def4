/* Unit tests of the uid range allocator (sandbox/runtime/idrange.c). */
#include "idrange.h"
#include "unit.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(rt_idrange_alloc)
{
	struct idrange r;
	struct sbx_err e = { 0 };
	int64_t a, b, c;

	CHECK_INT(idrange_init(&r, 100000, 0, NULL, &e), -1);
	CHECK_INT(idrange_init(&r, 100000, 65535, NULL, &e), -1);   /* past 2^32 */
	CHECK_INT(idrange_init(&r, 100000, 3, NULL, &e), 0);
	r.proc = "/nonexistent";
	a = idrange_get(&r, &e);
	b = idrange_get(&r, &e);
	c = idrange_get(&r, &e);
	CHECK(a == 100000 && b == 100000 + 65536 && c == 100000 + 2 * 65536);
	CHECK(idrange_get(&r, &e) == -1 && e.code == SBX_E_NO_CAPACITY);
	/* ids that are not a block's first are ignored; a put block comes back */
	idrange_put(&r, (uint32_t)b + 1);
	CHECK(idrange_get(&r, &e) == -1);
	idrange_put(&r, (uint32_t)b);
	CHECK(idrange_get(&r, &e) == b);
	/* released blocks go round: the next get after a put is not the same block */
	idrange_put(&r, (uint32_t)a);
	idrange_put(&r, (uint32_t)c);
	CHECK(idrange_get(&r, &e) == c);
	idrange_release(&r);
}

static void put_status(const char *dir, const char *pid, const char *uids)
{
	char p[256], body[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, pid);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/%s/status", dir, pid);
	snprintf(body, sizeof(body), "Name:\tx\nUmask:\t0022\nUid:\t%s\nGid:\t0\t0\t0\t0\n", uids);
	f = fopen(p, "we");
	if (f) {
		fputs(body, f);
		fclose(f);
	}
}

TEST(rt_idrange_live)
{
	char dir[] = "/tmp/sbx-idrange-XXXXXX", cmd[64];
	struct idrange r;
	struct sbx_err e = { 0 };

	CHECK(mkdtemp(dir) != NULL);
	put_status(dir, "10", "0\t0\t0\t0");
	put_status(dir, "11", "165537\t165537\t165537\t165537");   /* block 1 */
	put_status(dir, "12", "1000\t1000\t296608\t1000");         /* saved uid: block 3 */
	CHECK_INT(idrange_init(&r, 100000, 4, NULL, &e), 0);
	r.proc = dir;
	CHECK_INT((int)idrange_reserve_live(&r), 2);
	CHECK(idrange_get(&r, &e) == 100000);
	CHECK(idrange_get(&r, &e) == 100000 + 2 * 65536);
	/* only live blocks left: a rescan frees those no process holds any more */
	snprintf(cmd, sizeof(cmd), "%s/11/status", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/11", dir);
	rmdir(cmd);
	CHECK(idrange_get(&r, &e) == 100000 + 65536);
	CHECK(idrange_get(&r, &e) == -1);
	idrange_release(&r);
	snprintf(cmd, sizeof(cmd), "%s/10/status", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/12/status", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/10", dir);
	rmdir(cmd);
	snprintf(cmd, sizeof(cmd), "%s/12", dir);
	rmdir(cmd);
	rmdir(dir);
}

TEST(rt_idrange_locks)
{
	char dir[] = "/tmp/sbx-idlock-XXXXXX", p[64];
	struct idrange a, b;
	struct sbx_err e = { 0 };

	CHECK(mkdtemp(dir) != NULL);
	CHECK_INT(idrange_init(&a, 100000, 2, dir, &e), 0);
	CHECK_INT(idrange_init(&b, 100000, 2, dir, &e), 0);
	a.proc = b.proc = "/nonexistent";
	/* two agents of one host: a block one holds is skipped by the other */
	CHECK(idrange_get(&a, &e) == 100000);
	CHECK(idrange_get(&b, &e) == 165536);
	CHECK(idrange_get(&b, &e) == -1);
	idrange_put(&a, 100000);
	CHECK(idrange_get(&b, &e) == 100000);
	CHECK(idrange_get(&a, &e) == -1);
	/* the holder's release (an agent's exit) frees its blocks for others */
	idrange_release(&b);
	CHECK(idrange_get(&a, &e) == 165536);
	CHECK(idrange_get(&a, &e) == 100000);
	idrange_release(&a);
	snprintf(p, sizeof(p), "%s/ranges", dir);
	unlink(p);
	rmdir(dir);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

/* The locks of many blocks take one fd, not one each. */
TEST(rt_idrange_locks_one_fd)
{
	char dir[] = "/tmp/sbx-idlock-XXXXXX", p[64];
	struct idrange a;
	struct sbx_err e = { 0 };
	int before;

	CHECK(mkdtemp(dir) != NULL);
	CHECK_INT(idrange_init(&a, 100000, 64, dir, &e), 0);
	a.proc = "/nonexistent";
	before = open_fds();
	for (int i = 0; i < 64; i++)
		CHECK(idrange_get(&a, &e) == 100000 + (int64_t)i * 65536);
	CHECK(open_fds() <= before + 1);
	idrange_release(&a);
	snprintf(p, sizeof(p), "%s/ranges", dir);
	unlink(p);
	rmdir(dir);
}
