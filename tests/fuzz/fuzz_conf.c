/*
 * fuzz_conf — the config parser shared by both binaries
 * (sandbox/common/conf.c: conf_parse, conf_override, conf_parse_duration).
 * Input: a config file; each of its lines is also tried as an override
 * and as a duration.
 *
 * Invariants: after a successful parse or override every numeric key is
 * within its table bounds; printing the config and parsing the print gives
 * the same config (a fixed point); a duration is digits and a unit, never
 * negative; every refusal is VALIDATION with the file name and line.
 */
#include "fuzz.h"

#include "conf.h"
#include "err.h"
#include "util.h"

#include <ctype.h>

/* conf_print of c into a heap string (free()); the secret line is dropped
 * (it prints as "<N bytes>"). */
static char *print(const struct sbx_conf *c)
{
	char *text = NULL, *line, *out;
	size_t len = 0, o = 0;
	FILE *f = open_memstream(&text, &len);

	FUZZ_ASSERT(f);
	conf_print(c, f);
	fclose(f);
	out = malloc(len + 1);
	FUZZ_ASSERT(out);
	for (line = text; *line;) {
		size_t n = strcspn(line, "\n");
		if (strncmp(line, "secret = ", 9) != 0) {
			memcpy(out + o, line, n);
			o += n;
			out[o++] = '\n';
		}
		line += n;
		if (*line)
			line++;
	}
	out[o] = '\0';
	free(text);
	return out;
}

/* Every numeric key of the print is inside conf_bounds(). */
static void check_bounds(const char *text)
{
	char section[64] = "";
	const char *p = text;

	while (*p) {
		size_t n = strcspn(p, "\n");
		char line[1024], key[64], *eq;
		int64_t lo, hi, v;

		FUZZ_ASSERT(n < sizeof(line));
		memcpy(line, p, n);
		line[n] = '\0';
		p += n + (p[n] == '\n');
		if (line[0] == '[') {
			snprintf(section, sizeof(section), "%.*s", (int)(strlen(line) - 2), line + 1);
			continue;
		}
		eq = strstr(line, " = ");
		if (!eq || (size_t)(eq - line) >= sizeof(key))
			continue;
		memcpy(key, line, (size_t)(eq - line));
		key[eq - line] = '\0';
		if (conf_bounds(section, key, &lo, &hi) < 0)
			continue;
		eq += 3;
		if (strlen(eq) > 2 && strcmp(eq + strlen(eq) - 2, "ms") == 0)
			eq[strlen(eq) - 2] = '\0';
		FUZZ_ASSERT(util_parse_i64(eq, INT64_MIN, INT64_MAX, &v) == 0);
		FUZZ_ASSERT(v >= lo && v <= hi);
	}
}

/* 1 when every value of the print can be read back as written: the file
 * syntax has no escape for '#' (a comment) or blanks around a value
 * (trimmed), which an override may still set. */
static int file_expressible(const char *text)
{
	const char *p = text;

	if (strchr(text, '#'))
		return 0;
	while (*p) {
		size_t n = strcspn(p, "\n");
		const char *eq = memchr(p, '=', n);

		if (n && strchr(" \t\r", p[n - 1]))
			return 0;
		if (eq && eq + 2 < p + n && (eq[2] == ' ' || eq[2] == '\t'))
			return 0;
		p += n + (p[n] == '\n');
	}
	return 1;
}

static void check_fixed_point(const struct sbx_conf *c)
{
	struct sbx_conf c2;
	struct sbx_err e;
	char *a = print(c), *b;

	check_bounds(a);
	conf_defaults(&c2);
	memcpy(c2.cluster.secret, c->cluster.secret, sizeof(c2.cluster.secret));
	err_clear(&e);
	if (file_expressible(a)) {
		FUZZ_ASSERT(conf_parse(&c2, "print", a, &e) == 0);
		b = print(&c2);
		FUZZ_ASSERT(strcmp(a, b) == 0);
		free(b);
	}
	free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_cstr(data, size), *p;
	struct sbx_conf c;
	struct sbx_err e;
	int64_t ms;

	conf_defaults(&c);
	err_clear(&e);
	if (conf_parse(&c, "fuzz.conf", text, &e) == 0) {
		check_fixed_point(&c);
	} else {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
		FUZZ_ASSERT(strncmp(e.msg, "fuzz.conf:", 10) == 0);
	}

	conf_defaults(&c);
	for (p = text; p < text + size;) {
		size_t n = strcspn(p, "\n");
		char *line = fuzz_cstr((const uint8_t *)p, n);

		err_clear(&e);
		if (conf_override(&c, line, &e) < 0)
			FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
		if (conf_parse_duration(line, &ms) == 0) {
			FUZZ_ASSERT(ms >= 0);
			FUZZ_ASSERT(isdigit((unsigned char)line[0]));
		}
		free(line);
		p += n + 1;
	}
	check_fixed_point(&c);
	free(text);
	return 0;
}
