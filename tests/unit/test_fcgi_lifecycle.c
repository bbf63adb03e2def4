/* Lifecycle pure logic: body validation -> spec, the pending rule, records. */
#include "unit.h"
#include "conf.h"
#include "lifecycle.h"
#include "scripts.h"

#include <stdlib.h>

static int parse(const char *text, struct lc_spec *s)
{
	struct sbx_conf c;
	struct sbx_err e = { 0 };
	json_t *body = json_loads(text, 0, NULL);
	int rc;

	conf_defaults(&c);
	if (!body)
		return -2;
	rc = lifecycle_parse_spec(body, &c, s, &e);
	json_decref(body);
	if (rc < 0 && e.code != SBX_E_VALIDATION)
		return -3;
	return rc;
}

TEST(fcgi_lifecycle_spec_valid)
{
	struct lc_spec s;

	CHECK_INT(parse("{}", &s), 0);
	CHECK_INT(s.has, 0);
	lifecycle_spec_release(&s);

	CHECK_INT(parse("{\"labels\":{\"team\":\"ml\"},\"sleepAfter\":\"10m\",\"keepAlive\":true,"
			"\"env\":{\"A_1\":\"x\"},\"image\":\"deb-12\",\"network\":\"egress\","
			"\"resources\":{\"cpus\":0.5,\"memoryMiB\":256}}", &s), 0);
	CHECK_INT(s.has, LC_HAS_LABELS | LC_HAS_ENV | LC_HAS_RESOURCES | LC_HAS_IMAGE | LC_HAS_NETWORK |
			 LC_HAS_SLEEP_AFTER | LC_HAS_KEEP_ALIVE);
	CHECK_INT(s.sleep_after_ms, 600000);
	CHECK_INT(s.keep_alive, 1);
	CHECK_STR(s.image, "deb-12");
	CHECK_STR(s.network, "egress");
	CHECK_INT(json_integer_value(json_object_get(s.resources, "memoryMiB")), 256);
	CHECK(json_real_value(json_object_get(s.resources, "cpus")) == 0.5);
	/* omitted members come from the config defaults */
	CHECK_INT(json_integer_value(json_object_get(s.resources, "pids")), 256);
	{
		struct sbx_conf c;
		conf_defaults(&c);
		CHECK_INT(json_integer_value(json_object_get(s.resources, "diskMiB")), c.sandbox.disk_mib);
	}
	lifecycle_spec_release(&s);

	CHECK_INT(parse("{\"sleepAfter\":1000,\"resources\":{\"cpus\":2}}", &s), 0);
	CHECK_INT(s.sleep_after_ms, 1000);
	CHECK(json_is_integer(json_object_get(s.resources, "cpus")));
	CHECK_INT(json_integer_value(json_object_get(s.resources, "cpus")), 2);
	lifecycle_spec_release(&s);

	CHECK_INT(parse("{\"sleepAfter\":\"720h\"}", &s), 0);
	lifecycle_spec_release(&s);
}

TEST(fcgi_lifecycle_spec_invalid)
{
	static const char *const bad[] = {
		"{\"x\":1}",
		"{\"labels\":{\"a:b\":\"c\"}}",
		"{\"labels\":{\"a\":\"b,c\"}}",
		"{\"labels\":{\"a\":1}}",
		"{\"sleepAfter\":999}",
		"{\"sleepAfter\":\"721h\"}",
		"{\"sleepAfter\":\"1d\"}",
		"{\"sleepAfter\":1.5}",
		"{\"keepAlive\":1}",
		"{\"env\":{\"1A\":\"x\"}}",
		"{\"env\":{\"A-B\":\"x\"}}",
		"{\"env\":{\"A\":null}}",
		"{\"image\":\"Bad\"}",
		"{\"image\":\".x\"}",
		"{\"image\":\"\"}",
		"{\"network\":\"host\"}",
		"{\"resources\":{\"cpus\":0}}",
		"{\"resources\":{\"cpus\":0.001}}",
		"{\"resources\":{\"cpus\":257}}",
		"{\"resources\":{\"memoryMiB\":15}}",
		"{\"resources\":{\"pids\":7}}",
		"{\"resources\":{\"diskMiB\":0}}",
		"{\"resources\":{\"gpus\":1}}",
	};
	struct lc_spec s;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = parse(bad[i], &s);
		if (rc != -1)
			fprintf(stderr, "  accepted: %s\n", bad[i]);
		CHECK_INT(rc, -1);
		CHECK_INT(s.has, 0);
	}
}

TEST(fcgi_lifecycle_pending_rule)
{
	struct sbx_conf c;
	json_t *applied, *pending = json_object(), *out, *out2;
	struct lc_spec s;

	conf_defaults(&c);
	applied = json_pack("{s:{s:s},s:o,s:{},s:s,s:s}", "labels", "v", "1", "resources",
			    lifecycle_resources_json(512, c.sandbox.cpus_milli, c.sandbox.pids,
						     c.sandbox.disk_mib),
			    "env", "image", "default", "network", "none");

	CHECK_INT(parse("{\"labels\":{\"v\":\"2\"},\"image\":\"default\",\"sleepAfter\":5000}", &s), 0);
	out = lifecycle_pending_merge(applied, pending, &s);
	CHECK_INT(json_object_size(out), 1);    /* the same image is no change */
	CHECK_STR(json_string_value(json_object_get(json_object_get(out, "labels"), "v")), "2");
	lifecycle_spec_release(&s);

	/* Back to the applied value: dropped from pending. */
	CHECK_INT(parse("{\"labels\":{\"v\":\"1\"},\"network\":\"egress\"}", &s), 0);
	out2 = lifecycle_pending_merge(applied, out, &s);
	CHECK(!json_object_get(out2, "labels"));
	CHECK_STR(json_string_value(json_object_get(out2, "network")), "egress");
	lifecycle_spec_release(&s);

	/* Resources equal to the applied ones, whatever the key order. */
	CHECK_INT(parse("{\"resources\":{\"memoryMiB\":512}}", &s), 0);
	json_decref(out);
	out = lifecycle_pending_merge(applied, out2, &s);
	CHECK(!json_object_get(out, "resources"));
	lifecycle_spec_release(&s);

	json_decref(out);
	json_decref(out2);
	json_decref(pending);
	json_decref(applied);
}

TEST(fcgi_lifecycle_record_json)
{
	json_t *f = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}",
			      "id", "box", "tenant", "dev", "state", "running", "node", "agent-1",
			      "epoch", "1795944313391", "generation", "3", "labels", "{\"a\":\"b\"}",
			      "pending", "{\"env\":{\"TOKEN\":\"secret\"},\"image\":\"x\"}",
			      "sleepAfter", "30000", "keepAlive", "1",
			      "resources", "{\"cpus\":0.5,\"memoryMiB\":512,\"pids\":256,\"diskMiB\":1}",
			      "network", "none", "image", "default", "env", "{\"TOKEN\":\"old\"}",
			      "createdAt", "2026-11-29T09:00:00.000Z", "startedAt", "",
			      "lastActiveAt", "2026-11-29T09:00:00.000Z");
	json_t *o = lifecycle_record_json(f);
	char *text = json_dumps(o, JSON_COMPACT);

	CHECK(o != NULL);
	CHECK_INT(json_integer_value(json_object_get(o, "epoch")), 1795944313391LL);
	CHECK_INT(json_integer_value(json_object_get(o, "generation")), 3);
	CHECK_INT(json_integer_value(json_object_get(o, "sleepAfter")), 30000);
	CHECK(json_is_true(json_object_get(o, "keepAlive")));
	CHECK(json_is_null(json_object_get(o, "startedAt")));
	CHECK(!json_object_get(o, "env"));
	CHECK(!json_object_get(o, "tenant"));
	CHECK(text && !strstr(text, "secret") && !strstr(text, "old"));
	CHECK_STR(json_string_value(json_array_get(json_object_get(json_object_get(o, "pending"), "env"), 0)),
		  "TOKEN");
	CHECK_INT(json_object_size(o), 15);
	free(text);
	json_decref(o);
	json_decref(f);
}

TEST(fcgi_lifecycle_scripts_present)
{
	for (int i = 0; i < RSCRIPT__COUNT; i++) {
		CHECK(rscripts_source((enum rscript_id)i) && rscripts_source((enum rscript_id)i)[0]);
		CHECK(rscripts_name((enum rscript_id)i) && rscripts_name((enum rscript_id)i)[0]);
	}
	CHECK(rscripts_source(RSCRIPT__COUNT) == NULL);
	CHECK(rscripts_name(RSCRIPT__COUNT) == NULL);
}
