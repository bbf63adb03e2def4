/*
 * sigdfl.h — every signal's disposition back to its default.
 *
 * A process inherits ignored signals across exec: an agent started with a
 * signal ignored would hand that on to every sandbox and every command.
 * glibc's signal() and sigaction() refuse its two internal signals (32 and
 * 33), so the reset goes through the kernel's own rt_sigaction, for all 64.
 * Async-signal-safe: a child of fork or clone may call it before its exec.
 */
#ifndef SBX_SIGDFL_H
#define SBX_SIGDFL_H

/* Set signals 1..64 to SIG_DFL (SIGKILL and SIGSTOP are refused by the
 * kernel and stay as they are: default). */
void sigdfl_all(void);

#endif
