/*
 * caps.c — capability drop of sandbox processes (see caps.h).
 */
#include "caps.h"
#include "util.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

uint64_t caps_keep_mask(void)
{
	static const int keep[] = {
		CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL, CAP_SETGID,
		CAP_SETUID, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_SETFCAP,
	};
	uint64_t m = 0;

	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		m |= 1ULL << keep[i];
	return m;
}

int caps_last_cap(void)
{
	auto_free char *s = util_read_file("/proc/sys/kernel/cap_last_cap", 64, NULL);
	int64_t v;
	char *nl;

	if (!s)
		return CAP_LAST_CAP;
	nl = s;
	while (*nl && *nl != '\n')
		nl++;
	*nl = '\0';
	if (util_parse_i64(s, 0, 63, &v) < 0)
		return CAP_LAST_CAP;
	return (int)v;
}

int caps_apply(uint64_t keep, int last_cap)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];

	for (int c = 0; c <= last_cap; c++)
		if (!(keep & (1ULL << c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -1;
	d[0].effective = d[0].permitted = d[0].inheritable = (uint32_t)keep;
	d[1].effective = d[1].permitted = d[1].inheritable = (uint32_t)(keep >> 32);
	return (int)syscall(SYS_capset, &h, d);
}
