/* Unit tests of an image's User resolved against its /etc/passwd and
 * /etc/group (sandbox/runtime/oci.c, oci_user_resolve). */
#include "oci.h"
#include "unit.h"

#include <string.h>

static const char passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
			     "app:x:1000:1001:App:/home/app:/bin/sh\n"
			     "odd:x:notanumber:5::/:/bin/sh\n"
			     "web:x:33:33:www:/var/www:/usr/sbin/nologin";  /* no final newline */
static const char group[] = "root:x:0:\nstaff:x:50:app\nwww-data:x:33:\n";

TEST(oci_user_resolves_names_and_numbers)
{
	static const struct {
		const char *user;
		int with_dbs;
		uint32_t uid, gid;
		const char *home;
	} cases[] = {
		{ "", 1, 0, 0, "" },
		{ "1000:1000", 1, 1000, 1000, "/home/app" },
		{ "1000", 1, 1000, 1001, "/home/app" },  /* a number alone: its entry's group */
		{ "4242", 0, 4242, 0, "/" },             /* no entry, no files: group 0, HOME / */
		{ "0", 0, 0, 0, "" },                    /* root without an entry: the default */
		{ "app", 1, 1000, 1001, "/home/app" },
		{ "app:staff", 1, 1000, 50, "/home/app" },
		{ "web:7", 1, 33, 7, "/var/www" },       /* the last line, without its newline */
		{ "1000:www-data", 1, 1000, 33, "/home/app" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sbx_err e;
		uint32_t u = 9, g = 9;
		char home[64] = "x";

		CHECK_INT(oci_user_resolve(cases[i].with_dbs ? passwd : NULL, cases[i].with_dbs ? group : NULL,
					   cases[i].user, &u, &g, home, sizeof(home), &e), 0);
		CHECK_INT(u, cases[i].uid);
		CHECK_INT(g, cases[i].gid);
		CHECK_STR(home, cases[i].home);
	}
}

TEST(oci_user_unknown_names_refused)
{
	struct sbx_err e;
	uint32_t u, g;

	CHECK_INT(oci_user_resolve(passwd, group, "nobody", &u, &g, NULL, 0, &e), -1);
	CHECK_INT(e.code, SBX_E_IMAGE_USER_UNKNOWN);
	CHECK(strstr(e.msg, "nobody") != NULL);
	CHECK_INT(oci_user_resolve(passwd, group, "app:nogroup", &u, &g, NULL, 0, &e), -1);
	CHECK_INT(e.code, SBX_E_IMAGE_USER_UNKNOWN);
	CHECK_INT(oci_user_resolve(passwd, group, "odd", &u, &g, NULL, 0, &e), -1);
	CHECK_INT(oci_user_resolve(NULL, NULL, "app", &u, &g, NULL, 0, &e), -1);
	/* a prefix of a name is not the name */
	CHECK_INT(oci_user_resolve(passwd, group, "ap", &u, &g, NULL, 0, &e), -1);
	CHECK_INT(oci_user_resolve(passwd, group, "-1", &u, &g, NULL, 0, &e), -1);
}
