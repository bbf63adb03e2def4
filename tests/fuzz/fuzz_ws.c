/*
 * fuzz_ws — the WebSocket frame parser (sandbox/agent/ws.c). Input: bytes
 * a client sends after the handshake.
 *
 * Invariants: the parser never uses more than it was given; it yields the
 * same messages (opcode, bytes, close code) and the same verdict whether
 * the input comes whole or one byte at a time; no message is larger than
 * the bound; a text message is valid UTF-8; a control message has at most
 * 125 bytes.
 */
#include "fuzz.h"

#include "codec.h"
#include "ws.h"

#define MAX_MSG 4096
#define MAX_MSGS 64

struct seen {
	int n, verdict;
	int op[MAX_MSGS], code[MAX_MSGS];
	size_t len[MAX_MSGS];
	uint32_t sum[MAX_MSGS];
};

static uint32_t fnv(const char *p, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 16777619u;
	return h;
}

/* Parse data in pieces of step bytes (0: whole) into s. */
static void run(const uint8_t *data, size_t size, size_t step, struct seen *s)
{
	struct ws_parser p;
	size_t off = 0;

	memset(s, 0, sizeof(*s));
	ws_parser_init(&p, MAX_MSG);
	while (off < size && s->n < MAX_MSGS) {
		size_t piece = step && size - off > step ? step : size - off;
		size_t used_all = 0;

		while (used_all < piece && s->n < MAX_MSGS) {
			struct ws_msg m;
			int got = 0, cc = 0;
			ssize_t used = ws_parse(&p, (const char *)data + off + used_all, piece - used_all,
						&m, &got, &cc);

			if (used < 0) {
				FUZZ_ASSERT(cc >= 1000 && cc <= 1011);
				s->verdict = cc;
				ws_parser_release(&p);
				return;
			}
			FUZZ_ASSERT((size_t)used <= piece - used_all);
			used_all += (size_t)used;
			if (got) {
				FUZZ_ASSERT(m.len <= MAX_MSG);
				if (m.op >= 0x8)
					FUZZ_ASSERT(m.len <= 125);
				if (m.op == WS_OP_TEXT)
					FUZZ_ASSERT(codec_utf8_valid(m.data, m.len));
				s->op[s->n] = m.op;
				s->code[s->n] = m.code;
				s->len[s->n] = m.len;
				s->sum[s->n] = fnv(m.data, m.len);
				s->n++;
			} else {
				FUZZ_ASSERT((size_t)used == piece - (used_all - (size_t)used));
			}
		}
		off += piece;
	}
	ws_parser_release(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct seen whole, bytes;

	run(data, size, 0, &whole);
	run(data, size, 1, &bytes);
	if (whole.n == MAX_MSGS || bytes.n == MAX_MSGS)
		return 0;
	FUZZ_ASSERT(whole.verdict == bytes.verdict);
	FUZZ_ASSERT(whole.n == bytes.n);
	for (int i = 0; i < whole.n; i++) {
		FUZZ_ASSERT(whole.op[i] == bytes.op[i]);
		FUZZ_ASSERT(whole.code[i] == bytes.code[i]);
		FUZZ_ASSERT(whole.len[i] == bytes.len[i]);
		FUZZ_ASSERT(whole.sum[i] == bytes.sum[i]);
	}
	return 0;
}
