/*
 * unit.h — the unit-test runner's whole interface.
 *
 *   TEST(name) { CHECK(expr); CHECK_STR(a, b); CHECK_INT(a, b); }
 *
 * Tests register themselves at load time; tests/unit/main.c runs them all
 * (or those whose name contains argv[1]) and ends with "N passed, N failed".
 */
#ifndef SBX_UNIT_H
#define SBX_UNIT_H

#include <stdio.h>
#include <string.h>

struct unit_test {
	const char *name;
	void (*fn)(int *failed);
	struct unit_test *next;
};

void unit_register(struct unit_test *t);

/* For tests of servers on a real loop (main.c): a loopback port free now,
 * or -1; a client socket connected to 127.0.0.1:port with a 5 s receive
 * timeout, or -1. */
int unit_free_port(void);
int unit_connect_loopback(int port);

#define TEST(tname)                                                         \
	static void tname(int *unit_failed);                                \
	static struct unit_test tname##_reg = { #tname, tname, NULL };      \
	__attribute__((constructor)) static void tname##_register(void)     \
	{                                                                   \
		unit_register(&tname##_reg);                                \
	}                                                                   \
	static void tname(int *unit_failed)

#define CHECK(expr)                                                                    \
	do {                                                                           \
		if (!(expr)) {                                                         \
			fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #expr); \
			*unit_failed = 1;                                              \
		}                                                                      \
	} while (0)

#define CHECK_INT(a, b)                                                                \
	do {                                                                           \
		long long va_ = (long long)(a), vb_ = (long long)(b);                  \
		if (va_ != vb_) {                                                      \
			fprintf(stderr, "  %s:%d: %s == %lld, expected %lld\n", __FILE__,  \
				__LINE__, #a, va_, vb_);                               \
			*unit_failed = 1;                                              \
		}                                                                      \
	} while (0)

#define CHECK_STR(a, b)                                                                \
	do {                                                                           \
		const char *sa_ = (a), *sb_ = (b);                                     \
		if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                           \
			fprintf(stderr, "  %s:%d: %s == \"%s\", expected \"%s\"\n",        \
				__FILE__, __LINE__, #a, sa_ ? sa_ : "(null)",          \
				sb_ ? sb_ : "(null)");                                 \
			*unit_failed = 1;                                              \
		}                                                                      \
	} while (0)

#endif
