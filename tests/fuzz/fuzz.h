/*
 * fuzz.h — what the libFuzzer harnesses of tests/fuzz/ share.
 *
 * Each harness fuzzes the pure functions of one module and checks
 * invariants beyond "does not crash"; a broken invariant is FUZZ_ASSERT,
 * which aborts so that libFuzzer saves the input as a crash artifact.
 * The harnesses are built and run by `make fuzz` / `make fuzz-smoke`.
 */
#ifndef SBX_FUZZ_H
#define SBX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_ASSERT(cond)                                                               \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                        \
		}                                                                       \
	} while (0)

/* A NUL-terminated heap copy of the input (free()); aborts when out of memory. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* Split the input at the first "\n" (or NUL-free separator byte sep) into two
 * NUL-terminated heap strings a and b (free both). b is "" without a sep. */
static inline void fuzz_split(const uint8_t *data, size_t size, char sep, char **a, char **b)
{
	const uint8_t *p = memchr(data, sep, size);
	size_t n = p ? (size_t)(p - data) : size;

	*a = fuzz_cstr(data, n);
	*b = p ? fuzz_cstr(p + 1, size - n - 1) : fuzz_cstr(data, 0);
}

#endif
