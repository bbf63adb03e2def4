#include "agent_sse.h"
#include "util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int agent_sse_event(struct buf *out, const char *name, const char *json)
{
	return buf_printf(out, "event: %s\ndata: %s\n\n", name, json);
}

int agent_sse_chunk(struct buf *out, const char *name, const char *data, size_t n)
{
	json_t *obj;
	char *text;
	int rc;

	if (codec_utf8_valid(data, n)) {
		obj = json_pack("{s:s%}", "data", data, n);
	} else {
		struct buf b64;
		buf_init(&b64, n / 3 * 4 + 8);
		if (codec_base64_encode(data, n, &b64) < 0) {
			buf_release(&b64);
			return -1;
		}
		obj = json_pack("{s:s%,s:s}", "data", b64.data ? b64.data : "", b64.len, "encoding",
				"base64");
		buf_release(&b64);
	}
	if (!obj)
		return -1;
	text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!text)
		return -1;
	rc = agent_sse_event(out, name, text);
	free(text);
	return rc;
}

#define SSE_COMPACT_AT (64 * 1024)

ssize_t agent_sse_take(struct buf *b, size_t *off, int end, char *out, size_t max)
{
	size_t n = b->len - *off;

	if (n == 0)
		return end ? -1 : 0;
	if (n > max)
		n = max;
	memcpy(out, b->data + *off, n);
	*off += n;
	if (*off == b->len) {
		buf_reset(b);
		*off = 0;
	} else if (*off > SSE_COMPACT_AT) {
		memmove(b->data, b->data + *off, b->len - *off);
		b->len -= *off;
		*off = 0;
	}
	return (ssize_t)n;
}
