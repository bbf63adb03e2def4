/* Unit tests of the WebSocket framing (agent/ws.c) and the terminal's
 * control messages (features/agent_terminals.c). */
#include "agent_terminals.h"
#include "unit.h"
#include "ws.h"

static void hex20(const unsigned char d[20], char out[41])
{
	for (int i = 0; i < 20; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

TEST(ws_sha1_vectors)
{
	unsigned char d[20];
	char h[41];
	static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

	ws_sha1("abc", 3, d);
	hex20(d, h);
	CHECK_STR(h, "a9993e364706816aba3e25717850c26c9cd0d89d");
	ws_sha1("", 0, d);
	hex20(d, h);
	CHECK_STR(h, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
	ws_sha1(two_blocks, sizeof(two_blocks) - 1, d);
	hex20(d, h);
	CHECK_STR(h, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

TEST(ws_accept_key_rfc6455)
{
	char out[WS_ACCEPT_LEN + 1];

	CHECK_INT(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
	CHECK_STR(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	CHECK_INT(ws_accept_key("short", out), -1);
	CHECK_INT(ws_accept_key(NULL, out), -1);
	CHECK_INT(ws_accept_key("!!!!!!!!!!!!!!!!!!!!!!!!", out), -1);
}

TEST(ws_frame_lengths)
{
	struct buf b;
	char big[300];

	memset(big, 'x', sizeof(big));
	buf_init(&b, 1 << 20);
	CHECK_INT(ws_frame(&b, WS_OP_TEXT, "Hello", 5), 0);
	CHECK_INT((int)b.len, 7);
	CHECK_INT((unsigned char)b.data[0], 0x81);
	CHECK_INT((unsigned char)b.data[1], 5);
	buf_reset(&b);
	CHECK_INT(ws_frame(&b, WS_OP_BINARY, big, sizeof(big)), 0);
	CHECK_INT((int)b.len, 304);
	CHECK_INT((unsigned char)b.data[1], 126);
	CHECK_INT((unsigned char)b.data[2] << 8 | (unsigned char)b.data[3], 300);
	buf_release(&b);
}

/* A masked client frame of payload p (n < 126) into out; its length. */
static size_t client_frame(unsigned char *out, int b0, const char *p, size_t n)
{
	static const unsigned char mask[4] = { 0x37, 0xfa, 0x21, 0x3d };

	out[0] = (unsigned char)b0;
	out[1] = (unsigned char)(0x80 | n);
	memcpy(out + 2, mask, 4);
	for (size_t i = 0; i < n; i++)
		out[6 + i] = (unsigned char)p[i] ^ mask[i & 3];
	return 6 + n;
}

TEST(ws_parse_masked_and_fragmented)
{
	static const unsigned char hello[] = { 0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
					       0x7f, 0x9f, 0x4d, 0x51, 0x58 };
	unsigned char f[64];
	struct ws_parser p;
	struct ws_msg m;
	size_t n, off;
	ssize_t used;
	int got, cc;

	ws_parser_init(&p, 1024);
	used = ws_parse(&p, (const char *)hello, sizeof(hello), &m, &got, &cc);
	CHECK_INT((int)used, (int)sizeof(hello));
	CHECK_INT(got, 1);
	CHECK_INT(m.op, WS_OP_TEXT);
	CHECK(m.len == 5 && memcmp(m.data, "Hello", 5) == 0);
	/* byte by byte: "Hel" + a ping in between + "lo" */
	n = client_frame(f, 0x01, "Hel", 3);
	n += client_frame(f + n, 0x89, "pi", 2);
	n += client_frame(f + n, 0x80, "lo", 2);
	off = 0;
	int msgs = 0;
	while (off < n) {
		used = ws_parse(&p, (const char *)f + off, 1, &m, &got, &cc);
		CHECK_INT((int)used, 1);
		off++;
		if (got) {
			msgs++;
			if (msgs == 1) {
				CHECK_INT(m.op, WS_OP_PING);
				CHECK(m.len == 2 && memcmp(m.data, "pi", 2) == 0);
			} else {
				CHECK_INT(m.op, WS_OP_TEXT);
				CHECK(m.len == 5 && memcmp(m.data, "Hello", 5) == 0);
			}
		}
	}
	CHECK_INT(msgs, 2);
	/* two messages in one buffer: the parser stops after the first */
	n = client_frame(f, 0x82, "ab", 2);
	n += client_frame(f + n, 0x82, "", 0);
	used = ws_parse(&p, (const char *)f, n, &m, &got, &cc);
	CHECK_INT(got, 1);
	CHECK_INT((int)used, 8);
	CHECK(m.op == WS_OP_BINARY && m.len == 2);
	used = ws_parse(&p, (const char *)f + 8, n - 8, &m, &got, &cc);
	CHECK_INT(got, 1);
	CHECK(m.op == WS_OP_BINARY && m.len == 0);
	/* a close with its code */
	n = client_frame(f, 0x88, "\x03\xe8" "bye", 5);
	ws_parse(&p, (const char *)f, n, &m, &got, &cc);
	CHECK(got && m.op == WS_OP_CLOSE && m.code == 1000 && m.len == 3);
	ws_parser_release(&p);
}

static int parse_error(const unsigned char *f, size_t n, size_t max)
{
	struct ws_parser p;
	struct ws_msg m;
	int got, cc = 0;
	ssize_t used;

	ws_parser_init(&p, max);
	used = ws_parse(&p, (const char *)f, n, &m, &got, &cc);
	ws_parser_release(&p);
	return used < 0 ? cc : 0;
}

TEST(ws_parse_refuses_violations)
{
	unsigned char f[300];
	char pay[200];
	size_t n;

	memset(pay, 'a', sizeof(pay));
	/* unmasked client frame */
	static const unsigned char unmasked[] = { 0x81, 0x02, 'h', 'i' };
	CHECK_INT(parse_error(unmasked, sizeof(unmasked), 64), WS_CLOSE_PROTOCOL);
	/* a reserved bit */
	n = client_frame(f, 0xc1, "x", 1);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_PROTOCOL);
	/* a fragmented control frame */
	n = client_frame(f, 0x09, "x", 1);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_PROTOCOL);
	/* a continuation without a message */
	n = client_frame(f, 0x80, "x", 1);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_PROTOCOL);
	/* a new message inside a fragmented one */
	n = client_frame(f, 0x01, "x", 1);
	n += client_frame(f + n, 0x81, "y", 1);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_PROTOCOL);
	/* unknown opcode */
	n = client_frame(f, 0x83, "x", 1);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_PROTOCOL);
	/* too big for the bound */
	n = client_frame(f, 0x82, pay, 100);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_TOO_BIG);
	CHECK_INT(parse_error(f, n, 100), 0);
	/* text that is not UTF-8 */
	n = client_frame(f, 0x81, "\xff\xfe", 2);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_BAD_DATA);
	/* a close of one byte */
	n = client_frame(f, 0x88, "\x03", 1);
	CHECK_INT(parse_error(f, n, 64), WS_CLOSE_PROTOCOL);
}

TEST(term_control_messages)
{
	struct sbx_err e;
	int c = 0, r = 0;

	CHECK_INT(agent_term_control("{\"type\":\"resize\",\"cols\":100,\"rows\":30}", 38, &c, &r, &e), 1);
	CHECK(c == 100 && r == 30);
	CHECK_INT(agent_term_control("{\"type\":\"resize\",\"cols\":0,\"rows\":30}", 36, &c, &r, &e), -1);
	CHECK_INT(agent_term_control("{\"type\":\"resize\",\"cols\":\"a\",\"rows\":3}", 37, &c, &r, &e), -1);
	CHECK_INT(agent_term_control("{\"type\":\"hello\"}", 16, &c, &r, &e), 0);
	CHECK_INT(agent_term_control("{\"cols\":1}", 10, &c, &r, &e), -1);
	CHECK_INT(agent_term_control("nope", 4, &c, &r, &e), -1);
}
