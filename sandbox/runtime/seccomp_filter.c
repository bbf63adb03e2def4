/*
 * seccomp_filter.c — the default seccomp filter (see seccomp_filter.h, docs/SECURITY.md).
 *
 * Default allow, with a deny list: Docker's default deny list plus the
 * kernel interfaces a sandbox never needs and that carry most of the
 * kernel's recent exploit history; sockets only of an allow-list of
 * address families and netlink protocols. Non-native architectures (32-bit
 * x86 entry on x86_64) kill the process.
 */
#include "seccomp_filter.h"
#include "util.h"

#include <errno.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Denied outright with EPERM. Names the running libseccomp does not know
 * on this architecture are skipped. */
static const char *const deny_eperm[] = {
	/* namespaces and mounts */
	"setns", "mount", "umount", "umount2", "pivot_root", "move_mount", "fsopen", "fsmount",
	"fspick", "fsconfig", "open_tree", "mount_setattr",
	/* keys */
	"keyctl", "add_key", "request_key",
	/* kernel extension and observation */
	"bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	/* modules, kexec, reboot, swap */
	"init_module", "finit_module", "delete_module", "create_module", "query_module",
	"get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
	/* clocks */
	"settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime",
	"clock_adjtime64", "adjtimex",
	/* accounting, quotas, obsolete interfaces */
	"acct", "quotactl", "quotactl_fd", "nfsservctl", "sysfs", "_sysctl", "uselib", "ustat",
	"vm86", "vm86old", "syslog",
	/* other processes' memory and handles */
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "name_to_handle_at",
	"open_by_handle_at",
	/* raw I/O and NUMA policy */
	"ioperm", "iopl", "get_mempolicy", "set_mempolicy", "mbind", "move_pages",
	"vhangup",
};

static const unsigned long ns_flags[] = {
	CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
	CLONE_NEWCGROUP, CLONE_NEWTIME,
};

/* Address families a sandbox may open a socket (or socketpair) of; every
 * other value of the argument is refused with EAFNOSUPPORT, the kernel's
 * own answer for a family it does not have, so programs fall back as they
 * would on a kernel without it. The reasons, family by family, are in
 * docs/SECURITY.md ("Address families"). */
static const uint32_t families[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK };

/* Netlink protocols a sandbox may open: rtnetlink (getaddrinfo,
 * if_nameindex, `ip addr`) and sock_diag (`ss`), both scoped to the
 * sandbox's network namespace. Others: EPROTONOSUPPORT, the kernel's
 * answer for a netlink protocol it does not have. */
static const uint32_t netlink_protocols[] = { NETLINK_ROUTE, NETLINK_SOCK_DIAG };

/* (argument arg & mask) == value. The kernel reads socket()'s int
 * arguments from the low 32 bits of a 64-bit register, so every check of
 * them masks: a plain SCMP_CMP_EQ compares all 64 bits and is passed by a
 * value with junk in the high half. */
static struct scmp_arg_cmp cmp_masked(unsigned arg, uint64_t mask, uint64_t value)
{
	struct scmp_arg_cmp c = { .arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = value };

	return c;
}

static int add(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned cnt,
	       const struct scmp_arg_cmp *cmp, struct sbx_err *e)
{
	int nr = seccomp_syscall_resolve_name(name);
	int rc;

	if (nr == __NR_SCMP_ERROR || nr < 0)
		return 0;   /* not a syscall of this architecture */
	rc = seccomp_rule_add_array(ctx, action, nr, cnt, cmp);
	if (rc < 0)
		return err_sys(e, -rc, "seccomp rule for '%s'", name);
	return 0;
}

/* Refuse syscall name with err whenever the low 32 bits of argument arg
 * are not one of allowed[] (each below 64), and (when also is set) the
 * comparison also holds: one rule per value 0..63 outside the list, and one
 * per bit 6..31, which together cover every other 32-bit value. libseccomp
 * 2.5 takes one comparison per argument and rule, hence the enumeration. */
static int deny_outside(scmp_filter_ctx ctx, const char *name, unsigned arg, const uint32_t *allowed,
			size_t n, int err, const struct scmp_arg_cmp *also, struct sbx_err *e)
{
	struct scmp_arg_cmp c[2];
	unsigned cnt = also ? 2 : 1;

	if (also)
		c[1] = *also;
	for (uint32_t v = 0; v < 64; v++) {
		size_t i = 0;

		while (i < n && allowed[i] != v)
			i++;
		if (i < n)
			continue;
		c[0] = cmp_masked(arg, 0xffffffffu, v);
		if (add(ctx, SCMP_ACT_ERRNO((uint32_t)err), name, cnt, c, e) < 0)
			return -1;
	}
	for (unsigned b = 6; b < 32; b++) {
		c[0] = cmp_masked(arg, 1ULL << b, 1ULL << b);
		if (add(ctx, SCMP_ACT_ERRNO((uint32_t)err), name, cnt, c, e) < 0)
			return -1;
	}
	return 0;
}

static int build_rules(scmp_filter_ctx ctx, struct sbx_err *e)
{
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);

	for (size_t i = 0; i < ARRAY_SIZE(deny_eperm); i++)
		if (add(ctx, eperm, deny_eperm[i], 0, NULL, e) < 0)
			return -1;
	/* clone3 hides its flags in memory: ENOSYS makes libc fall back to clone. */
	if (add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, e) < 0)
		return -1;
	/* clone and unshare with any namespace flag (the flags are argument 0). */
	for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++) {
		struct scmp_arg_cmp c = cmp_masked(0, ns_flags[i], ns_flags[i]);

		if (add(ctx, eperm, "clone", 1, &c, e) < 0 || add(ctx, eperm, "unshare", 1, &c, e) < 0)
			return -1;
	}
	/* personality: only PER_LINUX (0), 8, UNAME26 (0x20000) and 0x20008.
	 * libseccomp 2.5 takes one comparison per argument and rule, so: above
	 * 0x20008 (this includes the 0xffffffff query), then every other bit. */
	{
		struct scmp_arg_cmp high = { .arg = 0, .op = SCMP_CMP_GT, .datum_a = 0x20008UL };

		if (add(ctx, eperm, "personality", 1, &high, e) < 0)
			return -1;
		for (unsigned b = 0; b < 17; b++) {
			struct scmp_arg_cmp c = cmp_masked(0, 1UL << b, 1UL << b);

			if (b == 3)
				continue;
			if (add(ctx, eperm, "personality", 1, &c, e) < 0)
				return -1;
		}
	}
	/* raw IP sockets (the low four bits of the type are the type); netlink
	 * sockets are SOCK_RAW by nature and stay allowed */
	for (int fam = 0; fam < 2; fam++) {
		struct scmp_arg_cmp raw[2] = {
			cmp_masked(0, 0xffffffffu, fam ? AF_INET6 : AF_INET),
			cmp_masked(1, 0xf, SOCK_RAW),
		};

		if (add(ctx, eperm, "socket", 2, raw, e) < 0)
			return -1;
	}
	if (deny_outside(ctx, "socket", 0, families, ARRAY_SIZE(families), EAFNOSUPPORT, NULL, e) < 0 ||
	    deny_outside(ctx, "socketpair", 0, families, ARRAY_SIZE(families), EAFNOSUPPORT, NULL, e) < 0)
		return -1;
	{
		struct scmp_arg_cmp nl = cmp_masked(0, 0xffffffffu, AF_NETLINK);

		if (deny_outside(ctx, "socket", 2, netlink_protocols, ARRAY_SIZE(netlink_protocols),
				 EPROTONOSUPPORT, &nl, e) < 0)
			return -1;
	}
	return 0;
}

int sec_build(struct sec_filter *f, struct sbx_err *e)
{
	scmp_filter_ctx ctx;
	auto_close int mfd = -1;
	struct stat st;
	int rc;

	memset(f, 0, sizeof(*f));
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return err_sys(e, ENOMEM, "seccomp_init");
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc == 0)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	if (rc < 0) {
		seccomp_release(ctx);
		return err_sys(e, -rc, "seccomp attributes");
	}
	if (build_rules(ctx, e) < 0) {
		seccomp_release(ctx);
		return -1;
	}
	mfd = memfd_create("sbx-seccomp", MFD_CLOEXEC);
	if (mfd < 0) {
		rc = errno;
		seccomp_release(ctx);
		return err_sys(e, rc, "memfd_create");
	}
	rc = seccomp_export_bpf(ctx, mfd);
	seccomp_release(ctx);
	if (rc < 0)
		return err_sys(e, -rc, "seccomp_export_bpf");
	if (fstat(mfd, &st) < 0)
		return err_sys(e, errno, "fstat of the seccomp program");
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size / sizeof(struct sock_filter) > 4096)
		return err_set(e, SBX_E_INTERNAL, "bad seccomp program size %lld", (long long)st.st_size);
	f->prog.filter = malloc((size_t)st.st_size);
	if (!f->prog.filter)
		return err_sys(e, ENOMEM, "seccomp program");
	if (pread(mfd, f->prog.filter, (size_t)st.st_size, 0) != st.st_size) {
		sec_release(f);
		return err_sys(e, EIO, "cannot read the seccomp program");
	}
	f->prog.len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	return 0;
}

void sec_release(struct sec_filter *f)
{
	free(f->prog.filter);
	f->prog.filter = NULL;
	f->prog.len = 0;
}
