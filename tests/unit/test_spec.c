/* Unit tests of the sandbox-spec rules both tiers apply
 * (sandbox/common/spec.c): the API's body check and the agent's re-check. */
#include "unit.h"

#include "conf.h"
#include "spec.h"

#include <string.h>

static json_t *js(const char *text)
{
	return json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/* One value through spec_resources: its return code. */
static int res_rc(const char *text, struct spec_resources *r)
{
	struct sbx_conf c;
	struct sbx_err e = { 0 };
	json_t *v = js(text);
	int rc;

	conf_defaults(&c);
	spec_resources_default(&c, r);
	rc = spec_resources(v, r, &e);
	if (rc < 0 && e.code != SBX_E_VALIDATION)
		rc = -2;
	json_decref(v);
	return rc;
}

TEST(spec_resources_bounds_of_the_config_table)
{
	struct spec_resources r;
	int64_t lo, hi;

	CHECK_INT(res_rc("{}", &r), 0);
	CHECK_INT(r.memory_mib, 512);
	CHECK_INT(r.cpus_milli, 1000);
	CHECK_INT(res_rc("{\"memoryMiB\":16,\"cpus\":0.01,\"pids\":8,\"diskMiB\":1}", &r), 0);
	CHECK_INT(r.memory_mib, 16);
	CHECK_INT(r.cpus_milli, 10);
	CHECK_INT(r.pids, 8);
	CHECK_INT(r.disk_mib, 1);
	CHECK_INT(res_rc("{\"cpus\":1.5}", &r), 0);
	CHECK_INT(r.cpus_milli, 1500);
	/* The agent's old private ranges were the config table's by accident;
	 * now both tiers read the table. */
	CHECK_INT(conf_bounds("sandbox", "memory_mib", &lo, &hi), 0);
	CHECK_INT(res_rc("{\"memoryMiB\":15}", &r), -1);
	CHECK_INT(res_rc("{\"memoryMiB\":1048577}", &r), -1);
	CHECK_INT(hi, 1048576);
	CHECK_INT(res_rc("{\"pids\":7}", &r), -1);
	CHECK_INT(res_rc("{\"diskMiB\":0}", &r), -1);
	CHECK_INT(res_rc("{\"cpus\":0}", &r), -1);
	CHECK_INT(res_rc("{\"cpus\":0.001}", &r), -1);
	CHECK_INT(res_rc("{\"cpus\":256.001}", &r), -1);
	CHECK_INT(res_rc("{\"cpus\":\"2\"}", &r), -1);
	CHECK_INT(res_rc("{\"memoryMiB\":1.5}", &r), -1);
	CHECK_INT(res_rc("{\"gpu\":1}", &r), -1);
}

TEST(spec_sleep_after_matches_the_config_bounds)
{
	struct sbx_err e = { 0 };
	int64_t lo, hi, ms = 0;
	json_t *v;

	CHECK_INT(conf_bounds("sandbox", "sleep_after", &lo, &hi), 0);
	CHECK_INT(lo, SPEC_SLEEP_MIN_MS);
	CHECK_INT(hi, SPEC_SLEEP_MAX_MS);
	v = js("\"30s\"");
	CHECK_INT(spec_sleep_after(v, &ms, &e), 0);
	CHECK_INT(ms, 30000);
	json_decref(v);
	v = js("5000");
	CHECK_INT(spec_sleep_after(v, &ms, &e), 0);
	CHECK_INT(ms, 5000);
	json_decref(v);
	const char *bad[] = { "999", "\"0s\"", "\"31d\"", "2592000001", "\"soon\"", "true" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = js(bad[i]);
		ms = 7;
		CHECK_INT(spec_sleep_after(v, &ms, &e), -1);
		CHECK_INT(e.code, SBX_E_VALIDATION);
		CHECK_INT(ms, 7);
		json_decref(v);
	}
}

TEST(spec_labels_env_image_network)
{
	struct sbx_err e = { 0 };
	char big[300];
	int egress = -1;
	json_t *v;

	v = js("{\"team\":\"a b\",\"x\":\"\"}");
	CHECK_INT(spec_labels(v, &e), 0);
	json_decref(v);
	const char *bad_labels[] = { "{\"a:b\":\"1\"}", "{\"a\":\"{x}\"}", "{\"a\":1}",
				     "{\"\":\"v\"}" };
	for (size_t i = 0; i < sizeof(bad_labels) / sizeof(bad_labels[0]); i++) {
		v = js(bad_labels[i]);
		CHECK_INT(spec_labels(v, &e), -1);
		json_decref(v);
	}
	memset(big, 'v', 256);
	big[256] = '\0';
	v = json_pack("{s:s}", "k", big);
	CHECK_INT(spec_labels(v, &e), -1);
	json_decref(v);
	v = json_object();
	for (int i = 0; i <= SPEC_LABELS_MAX; i++) {
		char k[16];
		snprintf(k, sizeof(k), "k%d", i);
		json_object_set_new(v, k, json_string("v"));
	}
	CHECK_INT(spec_labels(v, &e), -1);
	json_decref(v);

	v = js("{\"A_1\":\"x\"}");
	CHECK_INT(spec_env(v, 0, &e), 0);
	json_decref(v);
	v = js("{\"A\":null}");
	CHECK_INT(spec_env(v, 0, &e), -1);
	CHECK_INT(spec_env(v, 1, &e), 0);
	json_decref(v);
	v = js("{\"1A\":\"x\"}");
	CHECK_INT(spec_env(v, 0, &e), -1);
	json_decref(v);
	v = js("{\"A\":\"x\\u0000y\"}");
	CHECK(v != NULL);
	CHECK_INT(spec_env(v, 0, &e), -1);
	json_decref(v);

	v = js("\"python-3.12\"");
	CHECK_INT(spec_image(v, &e), 0);
	json_decref(v);
	v = js("\"localhost:5000/team/app:1.0\"");
	CHECK_INT(spec_image(v, &e), 0);
	json_decref(v);
	const char *bad_images[] = { "\"../x\"", "\"\"", "\"A\"", "\".x\"", "3", "\"a:b:c\"",
				     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"" };
	for (size_t i = 0; i < sizeof(bad_images) / sizeof(bad_images[0]); i++) {
		v = js(bad_images[i]);
		CHECK_INT(spec_image(v, &e), -1);
		json_decref(v);
	}

	v = js("\"egress\"");
	CHECK_INT(spec_network(v, &egress, &e), 0);
	CHECK_INT(egress, 1);
	json_decref(v);
	v = js("\"none\"");
	CHECK_INT(spec_network(v, &egress, &e), 0);
	CHECK_INT(egress, 0);
	json_decref(v);
	v = js("\"host\"");
	CHECK_INT(spec_network(v, &egress, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	json_decref(v);
}
