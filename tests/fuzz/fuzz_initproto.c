/*
 * fuzz_initproto — the decoder of the agent <-> sbx-init protocol
 * (sandbox/common/initproto.c), which sbx-init runs as PID 1 on every
 * packet. Input: one packet.
 *
 * Invariants: a decoded message is of a known type; a SPAWN has argc >= 1
 * NUL-terminated strings inside the packet and re-encodes to the very same
 * bytes; a fixed message re-encodes to the same bytes too; a refusal is
 * EBADMSG.
 */
#include "fuzz.h"

#include "initproto.h"

#include <errno.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct initproto_msg m;
	unsigned char *copy = malloc(size ? size : 1), *again;
	ssize_t n = -1;

	FUZZ_ASSERT(copy);
	if (size)
		memcpy(copy, data, size);
	errno = 0;
	if (initproto_decode(copy, size, &m) < 0) {
		FUZZ_ASSERT(errno == EBADMSG || errno == ENOMEM);
		FUZZ_ASSERT(m.argv == NULL);
		free(copy);
		return 0;
	}
	FUZZ_ASSERT((m.type >= INITPROTO_SPAWN && m.type <= INITPROTO_GONE) ||
		    m.type == INITPROTO_AHEAD);
	again = malloc(INITPROTO_MAX);
	FUZZ_ASSERT(again);
	if (m.type == INITPROTO_SPAWN) {
		const char *lo = (const char *)copy, *hi = lo + size;

		FUZZ_ASSERT(m.argv && m.argv[0] && m.env && m.cwd);
		FUZZ_ASSERT(m.cwd >= lo && m.cwd < hi);
		for (char **a = m.argv; *a; a++)
			FUZZ_ASSERT(*a >= lo && *a + strlen(*a) < hi);
		for (char **a = m.env; *a; a++)
			FUZZ_ASSERT(*a >= lo && *a + strlen(*a) < hi);
		n = initproto_encode_spawn_as(again, INITPROTO_MAX, m.handle, m.uid, m.gid, m.cwd, m.argv,
					      m.env);
		free(m.argv);
	} else if (m.type == INITPROTO_SIGNAL) {
		FUZZ_ASSERT(m.value >= 1 && m.value <= 64 && (m.tree == 0 || m.tree == 1));
		n = initproto_encode(again, INITPROTO_MAX, m.type, m.handle, m.value, m.tree);
	} else if (m.type == INITPROTO_STARTED) {
		FUZZ_ASSERT(m.pid >= 1);
		n = initproto_encode(again, INITPROTO_MAX, m.type, m.handle, m.pid, 0);
	} else if (m.type == INITPROTO_FAILED) {
		FUZZ_ASSERT(m.value >= 1);
		n = initproto_encode(again, INITPROTO_MAX, m.type, m.handle, m.value, 0);
	} else if (m.type == INITPROTO_AHEAD) {
		FUZZ_ASSERT(m.handle == 0);
		n = initproto_encode(again, INITPROTO_MAX, m.type, 0, 0, 0);
	} else {
		FUZZ_ASSERT(m.pid >= 1);
		n = initproto_encode(again, INITPROTO_MAX, m.type, m.handle, m.pid, m.value);
	}
	/* STARTED/FAILED carry an unused second word the encoder writes as 0 */
	FUZZ_ASSERT(n == (ssize_t)size);
	if (m.type == INITPROTO_STARTED || m.type == INITPROTO_FAILED)
		FUZZ_ASSERT(memcmp(again, copy, size - sizeof(int32_t)) == 0);
	else
		FUZZ_ASSERT(memcmp(again, copy, size) == 0);
	free(again);
	free(copy);
	return 0;
}
