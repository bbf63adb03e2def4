/* Unit tests of the Files API's ?encoding= helpers (agent_files.h). */
#include "agent_files.h"
#include "buf.h"
#include "ids.h"
#include "unit.h"

#include <jansson.h>
#include <stdlib.h>

/* files_json_escape writes what jansson writes for the same string. */
TEST(files_json_escape_matches_jansson)
{
	char s[160];
	struct buf b;
	json_t *str;
	char *want;
	size_t n = 0;

	for (int c = 1; c < 128; c++)
		s[n++] = (char)c;
	memcpy(s + n, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);   /* é € 😀 pass through */
	n += 9;
	str = json_stringn(s, n);
	want = json_dumps(str, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(str);
	CHECK(want != NULL);
	buf_init(&b, 4096);
	CHECK_INT(buf_add(&b, "\"", 1), 0);
	CHECK_INT(files_json_escape(&b, s, n), 0);
	CHECK_INT(buf_add(&b, "\"", 1), 0);
	CHECK_STR(b.data, want);
	free(want);
	buf_release(&b);
}

/* Fed in two chunks split anywhere, the check says what ids_valid_utf8
 * says of the whole. */
TEST(files_utf8_feed_any_split)
{
	/* lengths from sizeof: a NUL inside a sample is part of it */
#define SAMPLE(lit) { lit, sizeof(lit) - 1 }
	static const struct {
		const char *s;
		size_t len;
	} samples[] = {
		SAMPLE("plain ascii"),
		SAMPLE("a\xc3\xa9" "b\xe2\x82\xac" "c\xf0\x9f\x98\x80" "d"),
		SAMPLE("\xf0\x9f\x98\x80\xf0\x9f\x98\x80"),
		SAMPLE("bad \xff byte"),
		SAMPLE("cut at the end \xe2\x82"),
		SAMPLE("nul \x00 inside"),
		SAMPLE("\xc3"),
		SAMPLE("\x80 lone continuation"),
	};
#undef SAMPLE

	for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
		int want = ids_valid_utf8(samples[i].s, samples[i].len);

		for (size_t cut = 0; cut <= samples[i].len; cut++) {
			struct files_utf8 u = { .valid = 1 };

			files_utf8_feed(&u, samples[i].s, cut, 0);
			files_utf8_feed(&u, samples[i].s + cut, samples[i].len - cut, 0);
			files_utf8_feed(&u, "", 0, 1);
			if (u.valid != want)
				fprintf(stderr, "  sample %zu cut %zu: %d, expected %d\n", i, cut, u.valid, want);
			CHECK_INT(u.valid, want);
		}
		/* byte by byte */
		{
			struct files_utf8 u = { .valid = 1 };

			for (size_t k = 0; k < samples[i].len; k++)
				files_utf8_feed(&u, samples[i].s + k, 1, 0);
			files_utf8_feed(&u, "", 0, 1);
			CHECK_INT(u.valid, want);
		}
	}
}
