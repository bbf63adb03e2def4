/*
 * fuzz_sse — the UTF-8, base64 and event framing helpers of the agent's
 * streamed answers (sandbox/agent/agent_sse.c). Input: program output bytes.
 *
 * Invariants: codec_utf8_valid agrees with ids_valid_utf8 on NUL-free
 * input; the repaired text is valid and equals the input when that was
 * valid; the bytes held back by codec_utf8_complete_len are a proper
 * prefix of one sequence (at most 3) and what is sent of a valid text is
 * valid; base64 decodes back to the input; an event is one "event:" line,
 * one "data:" line holding a JSON object that gives the bytes back.
 */
#include "fuzz.h"

#include "agent_sse.h"
#include "buf.h"
#include "ids.h"

#include <jansson.h>

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decode strict padded base64 s (n bytes) into out; the length or -1. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
	size_t o = 0;

	if (n % 4)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		int a = b64val(s[i]), b = b64val(s[i + 1]);
		int c = s[i + 2] == '=' ? 0 : b64val(s[i + 2]), d = s[i + 3] == '=' ? 0 : b64val(s[i + 3]);
		unsigned v;

		if (a < 0 || b < 0 || c < 0 || d < 0)
			return -1;
		v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)c << 6 | (unsigned)d;
		out[o++] = (unsigned char)(v >> 16);
		if (s[i + 2] != '=')
			out[o++] = (unsigned char)(v >> 8);
		if (s[i + 3] != '=')
			out[o++] = (unsigned char)v;
	}
	return (long)o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	int valid = codec_utf8_valid(s, size);
	struct buf fixed, b64, ev;
	size_t keep;

	if (!memchr(data, '\0', size))
		FUZZ_ASSERT(valid == ids_valid_utf8(s, size));

	buf_init(&fixed, 4 * size + 16);
	FUZZ_ASSERT(codec_utf8_fix(s, size, &fixed) == 0);
	FUZZ_ASSERT(codec_utf8_valid(fixed.data ? fixed.data : "", fixed.len));
	if (valid)
		FUZZ_ASSERT(fixed.len == size && (size == 0 || memcmp(fixed.data, s, size) == 0));
	else
		FUZZ_ASSERT(fixed.len > 0);
	buf_release(&fixed);

	keep = codec_utf8_complete_len(s, size);
	FUZZ_ASSERT(keep <= size && size - keep <= 3);
	if (keep < size)
		FUZZ_ASSERT(codec_utf8_seq(data + keep, size - keep) == -1);
	if (valid)
		FUZZ_ASSERT(keep == size);
	/* a valid text cut anywhere: what is sent now is valid */
	if (valid && size > 1) {
		size_t cut = data[0] % size;
		size_t now = codec_utf8_complete_len(s, cut);
		FUZZ_ASSERT(codec_utf8_valid(s, now));
		FUZZ_ASSERT(cut - now <= 3);
	}

	buf_init(&b64, size / 3 * 4 + 8);
	FUZZ_ASSERT(codec_base64_encode(data, size, &b64) == 0);
	FUZZ_ASSERT(b64.len == (size + 2) / 3 * 4);
	{
		unsigned char *back = malloc(size + 3);
		FUZZ_ASSERT(back);
		FUZZ_ASSERT(b64_decode(b64.data ? b64.data : "", b64.len, back) == (long)size);
		FUZZ_ASSERT(size == 0 || memcmp(back, data, size) == 0);
		free(back);
	}

	buf_init(&ev, 8 * size + 256);
	FUZZ_ASSERT(agent_sse_chunk(&ev, "stdout", s, size) == 0);
	{
		const char *line2, *end;
		json_t *obj, *d;
		json_error_t jerr;

		FUZZ_ASSERT(strncmp(ev.data, "event: stdout\ndata: ", 20) == 0);
		line2 = ev.data + 20;
		end = strchr(line2, '\n');
		FUZZ_ASSERT(end && strcmp(end, "\n\n") == 0);
		obj = json_loadb(line2, (size_t)(end - line2), JSON_ALLOW_NUL, &jerr);
		FUZZ_ASSERT(obj);
		d = json_object_get(obj, "data");
		FUZZ_ASSERT(json_is_string(d));
		if (valid) {
			FUZZ_ASSERT(!json_object_get(obj, "encoding"));
			FUZZ_ASSERT(json_string_length(d) == size &&
				    (size == 0 || memcmp(json_string_value(d), data, size) == 0));
		} else {
			FUZZ_ASSERT(json_is_string(json_object_get(obj, "encoding")));
			FUZZ_ASSERT(json_string_length(d) == b64.len &&
				    memcmp(json_string_value(d), b64.data, b64.len) == 0);
		}
		json_decref(obj);
	}
	buf_release(&ev);
	buf_release(&b64);
	return 0;
}
