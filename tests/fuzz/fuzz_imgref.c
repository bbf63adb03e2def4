/*
 * fuzz_imgref — image references (sandbox/common/imgref.c), which both
 * tiers parse from a client's create body. Input: one reference.
 *
 * Invariants: a refusal is VALIDATION; an accepted reference has a
 * registry, a repo without '/', '.' or '-' at either end, a tag or a
 * digest, and its canonical form parses back to the very same fields.
 */
#include "fuzz.h"

#include "imgref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	struct imgref r, again;
	struct sbx_err e = { 0 };
	char canon[IMGREF_MAX];
	size_t n;

	if (imgref_parse(s, "docker.io", (int)(size & 1), &r, &e) < 0) {
		FUZZ_ASSERT(e.code == SBX_E_VALIDATION);
		free(s);
		return 0;
	}
	n = strlen(r.repo);
	FUZZ_ASSERT(r.registry[0] && r.host[0] && n > 0);
	FUZZ_ASSERT(strchr("/.-_", r.repo[0]) == NULL && strchr("/.-_", r.repo[n - 1]) == NULL);
	FUZZ_ASSERT(!strstr(r.repo, "//") && !strstr(r.repo, ".."));
	FUZZ_ASSERT(r.tag[0] || imgref_valid_digest(r.digest));
	FUZZ_ASSERT(!r.digest[0] || imgref_valid_digest(r.digest));
	if (imgref_format(&r, canon, sizeof(canon)) == 0) {
		FUZZ_ASSERT(imgref_parse(canon, "docker.io", 0, &again, &e) == 0);
		FUZZ_ASSERT(strcmp(again.registry, r.registry) == 0 && strcmp(again.repo, r.repo) == 0 &&
			    strcmp(again.tag, r.tag) == 0 && strcmp(again.digest, r.digest) == 0 &&
			    again.loopback == r.loopback);
	}
	free(s);
	return 0;
}
