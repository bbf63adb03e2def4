/*
 * seccomp_filter.h — the default seccomp filter of sandbox processes, built once
 * with libseccomp at rt_new() and kept as a BPF program in memory, so the
 * child of a spawn only has to call prctl(PR_SET_SECCOMP). The table of
 * entries and their reasons is in docs/SECURITY.md ("Seccomp filter").
 */
#ifndef SBX_SECCOMP_FILTER_H
#define SBX_SECCOMP_FILTER_H

#include "err.h"

#include <linux/filter.h>

struct sec_filter {
	struct sock_fprog prog;   /* prog.filter is heap memory */
};

/* Build the default filter into f; 0 or -1 with e filled. */
int sec_build(struct sec_filter *f, struct sbx_err *e);
void sec_release(struct sec_filter *f);

#endif
