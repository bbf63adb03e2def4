/*
 * sbx-api — the FastCGI API pool of sbx.
 *
 *   sbx-api -c FILE [-o section.key=value]...            run the pool
 *   sbx-api -c FILE [-o ...] key --tenant NAME [--admin]  create an API key
 *   sbx-api [-c FILE] [-o ...] --print-config
 *   sbx-api --version
 */
#include "auth.h"
#include "log.h"
#include "master.h"
#include "store.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#ifndef SBX_VERSION
#define SBX_VERSION "0.1.0"
#endif

#define MAX_OVERRIDES 64

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sbx-api -c FILE [-o section.key=value]...\n"
		"       sbx-api -c FILE [-o ...] key --tenant NAME [--admin]\n"
		"       sbx-api [-c FILE] [-o ...] --print-config\n"
		"       sbx-api --version\n");
}

/* The "key" subcommand: create a key for tenant, print it on stdout. */
static int cmd_key(const struct sbx_conf *c, const char *tenant, int admin)
{
	char key[AUTH_KEY_LEN + 1];
	struct sbx_err e;

	signal(SIGPIPE, SIG_IGN);
	err_clear(&e);
	if (!tenant) {
		fprintf(stderr, "sbx-api: key needs --tenant NAME\n");
		return 2;
	}
	if (store_init(c, &e) < 0 || auth_key_create(tenant, admin, key, &e) < 0) {
		fprintf(stderr, "sbx-api: cannot create a key: %s\n", e.msg);
		store_release();
		return 1;
	}
	store_release();
	printf("%s\n", key);
	return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *overrides[MAX_OVERRIDES];
	struct master_opts o = { .conf_path = NULL, .overrides = overrides, .noverrides = 0 };
	const char *tenant = NULL;
	int print_config = 0, key = 0, admin = 0;
	struct sbx_conf c;
	struct sbx_err e;

	log_init("sbx-api", LOG_INFO);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--version") == 0) {
			printf("sbx-api %s\n", SBX_VERSION);
			return 0;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(a, "-c") == 0 && i + 1 < argc) {
			o.conf_path = argv[++i];
		} else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
			if (o.noverrides == MAX_OVERRIDES) {
				fprintf(stderr, "sbx-api: too many -o options\n");
				return 2;
			}
			overrides[o.noverrides++] = argv[++i];
		} else if (strcmp(a, "--print-config") == 0) {
			print_config = 1;
		} else if (strcmp(a, "key") == 0 && !key) {
			key = 1;
		} else if (key && strcmp(a, "--tenant") == 0 && i + 1 < argc) {
			tenant = argv[++i];
		} else if (key && strcmp(a, "--admin") == 0) {
			admin = 1;
		} else {
			fprintf(stderr, "sbx-api: unexpected argument '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}

	err_clear(&e);
	if (master_load_conf(&o, &c, &e) < 0) {
		fprintf(stderr, "sbx-api: %s\n", e.msg);
		return 2;
	}
	if (print_config) {
		conf_print(&c, stdout);
		return 0;
	}
	if (key)
		return cmd_key(&c, tenant, admin);
	return master_run(&o, &c);
}
