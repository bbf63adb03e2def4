/*
 * fuzz_preview — preview host parsing of sbx-api (fcgi/preview.c).
 * Input: "host\ndomain\npublic_url".
 *
 * Invariants: a port parses only in its canonical decimal form; a host
 * label is the host minus ".<domain>" and holds no dot; a parsed
 * "{port}-{id}-{token}" label prints back to itself with a valid id and
 * token; a tunnel label is "t-" + 16 of [a-z0-9]; a preview URL is
 * http(s)://<label>.<domain>[:port]; constant-time equality is equality.
 */
#include "fuzz.h"

#include "conf.h"
#include "err.h"
#include "ids.h"
#include "preview.h"

static struct sbx_conf base;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	conf_defaults(&base);
	return 0;
}

static void check_label(const char *label)
{
	int port;
	char id[64], token[PREVIEW_TOKEN_MAX + 1], tid[PREVIEW_TUNNEL_ID_LEN + 1], again[256];
	char key[RKEYS_MAX];

	if (preview_parse_label(label, &port, id, token) == 0) {
		FUZZ_ASSERT(port >= PREVIEW_PORT_MIN && port <= PREVIEW_PORT_MAX);
		FUZZ_ASSERT(ids_valid_sandbox(id) && ids_valid_token(token));
		snprintf(again, sizeof(again), "%d-%s-%s", port, id, token);
		FUZZ_ASSERT(strcmp(again, label) == 0);
		FUZZ_ASSERT(preview_index_key(port, id, token, key) == 0);
		FUZZ_ASSERT(strncmp(key, "sbx:preview:", 12) == 0 && strlen(key) == 12 + 64);
	}
	if (preview_tunnel_label(label, tid)) {
		FUZZ_ASSERT(strlen(label) == 2 + PREVIEW_TUNNEL_ID_LEN);
		FUZZ_ASSERT(strcmp(label + 2, tid) == 0);
		FUZZ_ASSERT(strspn(tid, "abcdefghijklmnopqrstuvwxyz0123456789") == PREVIEW_TUNNEL_ID_LEN);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *host, *rest, *domain, *url;
	char label[PREVIEW_LABEL_MAX], out[1024], num[16];
	struct sbx_conf c;
	struct sbx_err e;
	int port;

	fuzz_split(data, size, '\n', &host, &rest);
	fuzz_split((const uint8_t *)rest, strlen(rest), '\n', &domain, &url);

	err_clear(&e);
	if (preview_parse_port(host, &port, &e) == 0) {
		snprintf(num, sizeof(num), "%d", port);
		FUZZ_ASSERT(strcmp(num, host) == 0);
		FUZZ_ASSERT(port >= PREVIEW_PORT_MIN && port <= PREVIEW_PORT_MAX);
	} else {
		FUZZ_ASSERT(e.code == SBX_E_INVALID_PORT);
	}

	check_label(host);
	if (preview_host_label(host, domain, label, sizeof(label)) == 0) {
		size_t ll = strlen(label);
		FUZZ_ASSERT(!strchr(label, '.'));
		FUZZ_ASSERT(ll + 1 + strlen(domain) == strlen(host));
		FUZZ_ASSERT(memcmp(host, label, ll) == 0 && host[ll] == '.');
		check_label(label);

		c = base;
		if (strlen(url) < sizeof(c.api.public_url) && strlen(domain) < sizeof(c.api.preview_domain)) {
			memcpy(c.api.public_url, url, strlen(url) + 1);
			memcpy(c.api.preview_domain, domain, strlen(domain) + 1);
			err_clear(&e);
			if (preview_url(&c, label, out, sizeof(out), &e) == 0) {
				const char *h = strstr(out, "://");
				FUZZ_ASSERT(h && (strncmp(out, "http://", 7) == 0 || strncmp(out, "https://", 8) == 0));
				h += 3;
				FUZZ_ASSERT(strncmp(h, label, strlen(label)) == 0 && h[strlen(label)] == '.');
				h += strlen(label) + 1;
				FUZZ_ASSERT(strncmp(h, domain, strlen(domain)) == 0);
				h += strlen(domain);
				FUZZ_ASSERT(*h == '\0' || (*h == ':' && strspn(h + 1, "0123456789") == strlen(h + 1) &&
							   h[1] != '\0'));
			} else {
				FUZZ_ASSERT(e.code == SBX_E_INTERNAL);
			}
		}
	}

	FUZZ_ASSERT(preview_const_equal(host, domain) == (strcmp(host, domain) == 0));
	if (preview_address_ok(url))
		FUZZ_ASSERT(!strpbrk(url, " /\t\r\n;{}\"'\\") && strchr(url, ':') &&
			    strlen(url) < PREVIEW_ADDR_MAX);

	free(host);
	free(rest);
	free(domain);
	free(url);
	return 0;
}
