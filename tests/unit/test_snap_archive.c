/* Unit tests of sandbox/features/snap_archive.c: entry placement rules,
 * and a round trip through a real archive between two temp roots. */
#include "unit.h"
#include "snap_archive.h"
#include "util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(snap_entry_place_rules)
{
	const char *rels[] = { "workspace", "data/x" };
	const char *sub = NULL;
	struct sbx_err e;

	CHECK_INT(snap_entry_place("workspace", rels, 2, &sub, &e), 0);
	CHECK_STR(sub, "");
	CHECK_INT(snap_entry_place("./workspace/", rels, 2, &sub, &e), 0);
	CHECK_STR(sub, "");
	CHECK_INT(snap_entry_place("workspace/a/b", rels, 2, &sub, &e), 0);
	CHECK_STR(sub, "a/b");
	CHECK_INT(snap_entry_place("data/x/y", rels, 2, &sub, &e), 1);
	CHECK_STR(sub, "y");
	CHECK_INT(snap_entry_place("workspacex/a", rels, 2, &sub, &e), -1);
	CHECK_INT(e.code, SBX_E_INVALID_ARCHIVE);
	CHECK_INT(snap_entry_place("/workspace/a", rels, 2, &sub, &e), -1);
	CHECK_INT(snap_entry_place("workspace/../etc", rels, 2, &sub, &e), -1);
	CHECK_INT(snap_entry_place("workspace/a/..", rels, 2, &sub, &e), -1);
	CHECK_INT(snap_entry_place("workspace//a", rels, 2, &sub, &e), -1);
	CHECK_INT(snap_entry_place("workspace/./a", rels, 2, &sub, &e), -1);
	CHECK_INT(snap_entry_place("", rels, 2, &sub, &e), -1);
	CHECK_INT(snap_entry_place("data", rels, 2, &sub, &e), -1);
}

TEST(snap_archive_round_trip)
{
	char src[] = "/dev/shm/sbx-snap-src-XXXXXX", dst[] = "/dev/shm/sbx-snap-dst-XXXXXX";
	char cmd[1024], arc[64];
	const char *paths[] = { "/workspace" };
	struct snap_sum sum, got;
	struct sbx_err e;
	int sroot, droot, fd;

	CHECK(mkdtemp(src) && mkdtemp(dst));
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s/workspace/d/empty %s/workspace && cd %s/workspace && "
		 "echo hi > d/f && echo u > 'd/ñ ☃' && ln -s f d/l && ln d/f d/h && truncate -s 1M sp && "
		 "mkdir %s/workspace/old && echo o > %s/workspace/old/o", src, dst, src, dst, dst);
	CHECK_INT(system(cmd), 0);
	snprintf(arc, sizeof(arc), "%s.tar.zst", src);
	sroot = open(src, O_PATH | O_DIRECTORY | O_CLOEXEC);
	droot = open(dst, O_PATH | O_DIRECTORY | O_CLOEXEC);
	fd = open(arc, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(sroot >= 0 && droot >= 0 && fd >= 0);
	CHECK_INT(snap_archive_write(sroot, paths, 1, NULL, 0, fd, 1000, &sum, &e), 0);
	CHECK(sum.entries == 8 && sum.size > 0 && strlen(sum.sha256) == 64);
	CHECK(lseek(fd, 0, SEEK_SET) == 0);
	CHECK_INT(snap_archive_extract(droot, fd, paths, 1, NULL, 1 << 20, 1000, &got, &e), 0);
	CHECK(got.entries == 8);
	snprintf(cmd, sizeof(cmd),
		 "cd %s && test ! -e %s/workspace/old && diff -r --no-dereference workspace %s/workspace && "
		 "test $(stat -c %%h %s/workspace/d/f) = 2 && test -L %s/workspace/d/l && "
		 "test $(stat -c %%b %s/workspace/sp) -lt 64 && test $(ls -a %s | wc -l) = 3",
		 src, dst, dst, dst, dst, dst, dst);
	CHECK_INT(system(cmd), 0);
	/* a data limit below the archive's data: refused, the tree stays */
	CHECK(lseek(fd, 0, SEEK_SET) == 0);
	CHECK_INT(snap_archive_extract(droot, fd, paths, 1, NULL, 1, 1000, &got, &e), -1);
	CHECK_INT(e.code, SBX_E_FILE_TOO_LARGE);
	snprintf(cmd, sizeof(cmd), "test -f %s/workspace/d/f && test $(ls -a %s | wc -l) = 3", dst, dst);
	CHECK_INT(system(cmd), 0);
	close(fd);
	close(sroot);
	close(droot);
	snprintf(cmd, sizeof(cmd), "rm -rf %s %s %s", src, dst, arc);
	CHECK_INT(system(cmd), 0);
}

/* The tree digest (background saves skip an unchanged tree): the same for
 * an untouched tree; moved by a write, a chmod, a rename, a new empty
 * directory and a removal; blind to an excluded name. */
TEST(snap_tree_digest_moves_with_every_change)
{
	char dir[] = "/dev/shm/sbx-snap-tree-XXXXXX", cmd[512];
	char d0[65], d1[65], seen[8][65];
	const char *paths[] = { "/workspace" };
	const char *steps[] = {
		"echo more >> workspace/a", "chmod 600 workspace/a", "mv workspace/a workspace/b",
		"mkdir workspace/e", "rm workspace/d/f", "ln -s b workspace/l",
	};
	struct sbx_err e;
	int root;

	CHECK(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "cd %s && mkdir -p workspace/d && echo a > workspace/a && "
		 "echo f > workspace/d/f", dir);
	CHECK_INT(system(cmd), 0);
	root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);
	CHECK_INT(snap_tree_digest(root, paths, 1, NULL, 0, 1000, d0, &e), 0);
	CHECK_INT(snap_tree_digest(root, paths, 1, NULL, 0, 1000, d1, &e), 0);
	CHECK_STR(d0, d1);
	CHECK_INT((int)strlen(d0), 64);
	for (size_t i = 0; i < ARRAY_SIZE(steps); i++) {
		snprintf(cmd, sizeof(cmd), "cd %s && %s", dir, steps[i]);
		CHECK_INT(system(cmd), 0);
		CHECK_INT(snap_tree_digest(root, paths, 1, NULL, 0, 1000, seen[i], &e), 0);
		CHECK(strcmp(seen[i], i ? seen[i - 1] : d0) != 0);
	}
	CHECK_INT(snap_tree_digest(root, paths, 1, NULL, 0, 2, d1, &e), -1);
	CHECK_INT(e.code, SBX_E_LIMIT_EXCEEDED);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
	close(root);
}
