/*
 * image.c — see image.h. The default image never contains anything of the
 * host's /etc, /root or /home except the public files named below
 * (ld.so.cache, the CA bundle, openssl.cnf, /etc/alternatives links into /usr).
 */
#define _XOPEN_SOURCE 700
#include "image.h"
#include "ids.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMAGE_FORMAT "sbx-default-1"

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int image_rm_tree(const char *path)
{
	return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static uint64_t fnv_stat(uint64_t h, const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return fnv(h, "-", 1);
	h = fnv(h, &st.st_size, sizeof(st.st_size));
	return fnv(h, &st.st_mtim, sizeof(st.st_mtim));
}

static int put(const char *dir, const char *rel, const char *text, unsigned mode)
{
	char p[PATH_MAX];

	if (snprintf(p, sizeof(p), "%s/%s", dir, rel) >= (int)sizeof(p)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return util_write_file(p, text, strlen(text), mode);
}

/* Copy a public host file; a missing one is skipped. */
static int copy_in(const char *dir, const char *rel, const char *host)
{
	size_t len;
	auto_free char *data = util_read_file(host, 16 << 20, &len);
	char p[PATH_MAX];

	if (!data)
		return errno == ENOENT ? 0 : -1;
	if (snprintf(p, sizeof(p), "%s/%s", dir, rel) >= (int)sizeof(p)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return util_write_file(p, data, len, 0644);
}

/* The /etc/alternatives links whose targets are in /usr. */
static int copy_alternatives(const char *dir)
{
	DIR *d = opendir("/etc/alternatives");
	struct dirent *de;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char target[PATH_MAX], p[PATH_MAX];
		ssize_t n;

		if (de->d_name[0] == '.' || de->d_type != DT_LNK)
			continue;
		if (snprintf(p, sizeof(p), "/etc/alternatives/%s", de->d_name) >= (int)sizeof(p))
			continue;
		n = readlink(p, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, "/usr/", 5) != 0 || strstr(target, "/../"))
			continue;
		if (snprintf(p, sizeof(p), "%s/etc/alternatives/%s", dir, de->d_name) >= (int)sizeof(p))
			continue;
		if (symlink(target, p) < 0 && errno != EEXIST) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

static uid_t chown_owner;

static int chown_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return lchown(path, chown_owner, chown_owner);
}

static int build(const char *dir, uid_t owner, const char *dns, struct sbx_err *e)
{
	static const struct { const char *rel; unsigned mode; } dirs[] = {
		{ "etc", 0755 }, { "etc/ssl", 0755 }, { "etc/ssl/certs", 0755 },
		{ "etc/alternatives", 0755 }, { "usr", 0755 }, { "tmp", 01777 }, { "workspace", 0755 },
		{ "root", 0700 }, { "home", 0755 }, { "proc", 0555 }, { "sys", 0555 }, { "dev", 0755 },
		{ "run", 0755 }, { "var", 0755 }, { "var/tmp", 01777 }, { "mnt", 0755 }, { "opt", 0755 },
		{ "srv", 0755 },
	};
	static const char *const links[][2] = {
		{ "bin", "usr/bin" }, { "sbin", "usr/sbin" }, { "lib", "usr/lib" },
		{ "etc/os-release", "../usr/lib/os-release" },
	};
	char p[PATH_MAX], resolv[512];
	struct stat st;

	if (mkdir(dir, 0755) < 0)
		return err_sys(e, errno, "cannot create the default image");
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		if (snprintf(p, sizeof(p), "%s/%s", dir, dirs[i].rel) >= (int)sizeof(p))
			return err_set(e, SBX_E_INTERNAL, "image path too long");
		if (mkdir(p, dirs[i].mode) < 0 || chmod(p, dirs[i].mode) < 0)
			return err_sys(e, errno, "cannot create '%s' in the default image", dirs[i].rel);
	}
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		if (snprintf(p, sizeof(p), "%s/%s", dir, links[i][0]) >= (int)sizeof(p) ||
		    symlink(links[i][1], p) < 0)
			return err_sys(e, errno, "cannot link '%s' in the default image", links[i][0]);
	}
	if (stat("/usr/lib64", &st) == 0 && S_ISDIR(st.st_mode)) {
		if (snprintf(p, sizeof(p), "%s/lib64", dir) >= (int)sizeof(p) || symlink("usr/lib64", p) < 0)
			return err_sys(e, errno, "cannot link 'lib64' in the default image");
	}
	if (snprintf(resolv, sizeof(resolv), "nameserver %s\noptions edns0\n", dns) >= (int)sizeof(resolv))
		return err_set(e, SBX_E_INTERNAL, "dns server name too long");
	if (put(dir, "etc/passwd",
		"root:x:0:0:root:/root:/bin/bash\n"
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", 0644) < 0 ||
	    put(dir, "etc/group", "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n", 0644) < 0 ||
	    put(dir, "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		0644) < 0 ||
	    put(dir, "etc/resolv.conf", resolv, 0644) < 0 ||
	    put(dir, "etc/nsswitch.conf",
		"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
		"protocols: files\nservices: files\n", 0644) < 0 ||
	    put(dir, "etc/shells", "/bin/sh\n/bin/bash\n/usr/bin/bash\n", 0644) < 0 ||
	    copy_in(dir, "etc/ld.so.cache", "/etc/ld.so.cache") < 0 ||
	    copy_in(dir, "etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt") < 0 ||
	    copy_in(dir, "etc/ssl/openssl.cnf", "/etc/ssl/openssl.cnf") < 0 ||
	    copy_alternatives(dir) < 0)
		return err_sys(e, errno, "cannot write the default image's /etc");
	chown_owner = owner;
	if (nftw(dir, chown_one, 16, FTW_PHYS) != 0)
		return err_sys(e, errno, "cannot chown the default image");
	return 0;
}

int image_prepare_default(const char *images_dir, uid_t owner, const char *dns, char *out,
			  size_t size, struct sbx_err *e)
{
	char top[PATH_MAX], tmp[PATH_MAX];
	uint64_t h = 1469598103934665603ULL;
	struct stat st;
	unsigned char rnd[6];
	char rhex[13];

	h = fnv(h, IMAGE_FORMAT, sizeof(IMAGE_FORMAT));
	h = fnv(h, dns, strlen(dns) + 1);
	h = fnv_stat(h, "/etc/ld.so.cache");
	h = fnv_stat(h, "/etc/ssl/certs/ca-certificates.crt");
	h = fnv_stat(h, "/usr/lib64");
	if (snprintf(top, sizeof(top), "%s/default", images_dir) >= (int)sizeof(top) ||
	    snprintf(out, size, "%s/%u-%016" PRIx64, top, (unsigned)owner, h) >= (int)size)
		return err_set(e, SBX_E_INTERNAL, "images_dir path too long");
	if (stat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == owner)
		return 0;
	if ((mkdir(images_dir, 0755) < 0 && errno != EEXIST) || (mkdir(top, 0755) < 0 && errno != EEXIST))
		return err_sys(e, errno, "cannot create '%s'", top);
	if (util_random(rnd, sizeof(rnd)) < 0)
		return err_sys(e, errno, "getrandom");
	util_hex(rnd, sizeof(rnd), rhex);
	if (snprintf(tmp, sizeof(tmp), "%s/.tmp-%s", top, rhex) >= (int)sizeof(tmp))
		return err_set(e, SBX_E_INTERNAL, "images_dir path too long");
	if (build(tmp, owner, dns, e) < 0) {
		image_rm_tree(tmp);
		return -1;
	}
	if (rename(tmp, out) < 0) {
		int err = errno;

		image_rm_tree(tmp);
		if (err == EEXIST || err == ENOTEMPTY)
			return 0;   /* another agent built the same one first */
		return err_sys(e, err, "cannot install the default image");
	}
	return 0;
}

int image_resolve(const char *images_dir, const char *name, char *out, size_t size, struct sbx_err *e)
{
	char usr[PATH_MAX];
	struct stat st;

	if (!ids_valid_image(name) || strcmp(name, "default") == 0)
		return err_set(e, SBX_E_VALIDATION, "unknown image '%.64s'", name);
	if (snprintf(out, size, "%s/%s", images_dir, name) >= (int)size ||
	    snprintf(usr, sizeof(usr), "%s/usr", out) >= (int)sizeof(usr))
		return err_set(e, SBX_E_VALIDATION, "unknown image '%s'", name);
	if (stat(out, &st) < 0 || !S_ISDIR(st.st_mode) || stat(usr, &st) < 0 || !S_ISDIR(st.st_mode))
		return err_set(e, SBX_E_VALIDATION, "unknown image '%s'", name);
	return 0;
}
