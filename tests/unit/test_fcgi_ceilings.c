/* Operator ceilings: per-sandbox maxima, the admin body, what a record
 * needs, and placement by memory and cpus. */
#include "unit.h"
#include "ceilings.h"
#include "lifecycle.h"
#include "placement.h"

static struct sbx_conf small_conf(void)
{
	struct sbx_conf c;

	conf_defaults(&c);
	c.sandbox.max_memory_mib = 1024;
	c.sandbox.max_cpus_milli = 1500;
	c.sandbox.max_pids = 300;
	c.sandbox.max_disk_mib = 512;
	return c;
}

TEST(fcgi_ceilings_error_code)
{
	CHECK_INT(err_status(SBX_E_LIMIT_EXCEEDED), 400);
	CHECK_STR(err_name(SBX_E_LIMIT_EXCEEDED), "LIMIT_EXCEEDED");
	CHECK_INT(err_from_name("LIMIT_EXCEEDED"), SBX_E_LIMIT_EXCEEDED);
}

TEST(fcgi_ceilings_sandbox_at_and_above)
{
	struct sbx_conf c = small_conf();
	struct sbx_err e = { 0 };

	CHECK_INT(ceilings_check_sandbox(&c, 1024, 1500, 300, 512, &e), 0);
	CHECK_INT(ceilings_check_sandbox(&c, 1025, 1500, 300, 512, &e), -1);
	CHECK_INT(e.code, SBX_E_LIMIT_EXCEEDED);
	CHECK(strstr(e.msg, "'memoryMiB' of 1025") && strstr(e.msg, "ceiling of 1024") &&
	      strstr(e.msg, "sandbox.max_memory_mib"));
	CHECK_INT(ceilings_check_sandbox(&c, 16, 1501, 8, 1, &e), -1);
	CHECK(strstr(e.msg, "'cpus' of 1.501") && strstr(e.msg, "ceiling of 1.5"));
	CHECK_INT(ceilings_check_sandbox(&c, 16, 10, 301, 1, &e), -1);
	CHECK(strstr(e.msg, "'pids' of 301") && strstr(e.msg, "max_pids"));
	CHECK_INT(ceilings_check_sandbox(&c, 16, 10, 8, 513, &e), -1);
	CHECK(strstr(e.msg, "'diskMiB' of 513") && strstr(e.msg, "max_disk_mib"));
}

TEST(fcgi_ceilings_conf_defaults_within)
{
	struct sbx_conf c;
	struct sbx_err e = { 0 };

	conf_defaults(&c);
	CHECK_INT(ceilings_conf_check(&c, &e), 0);
	c.sandbox.pids = c.sandbox.max_pids + 1;
	CHECK_INT(ceilings_conf_check(&c, &e), -1);
	CHECK(strstr(e.msg, "sandbox.pids") && strstr(e.msg, "sandbox.max_pids"));
	conf_defaults(&c);
	c.sandbox.max_memory_mib = c.sandbox.memory_mib - 1;
	CHECK_INT(ceilings_conf_check(&c, &e), -1);
	CHECK(strstr(e.msg, "sandbox.max_memory_mib") != NULL);
}

/* The parse hook: a body within the config bounds but above a ceiling. */
TEST(fcgi_ceilings_spec_refused)
{
	struct sbx_conf c = small_conf();
	struct sbx_err e = { 0 };
	struct lc_spec s;
	json_t *body = json_loads("{\"resources\":{\"memoryMiB\":2048}}", 0, NULL);

	CHECK_INT(lifecycle_parse_spec(body, &c, &s, &e), -1);
	CHECK_INT(e.code, SBX_E_LIMIT_EXCEEDED);
	json_decref(body);
	body = json_loads("{\"resources\":{\"cpus\":2}}", 0, NULL);
	CHECK_INT(lifecycle_parse_spec(body, &c, &s, &e), -1);
	CHECK_INT(e.code, SBX_E_LIMIT_EXCEEDED);
	json_decref(body);
	/* Out of the config's own bounds is still a validation error. */
	body = json_loads("{\"resources\":{\"memoryMiB\":2000000}}", 0, NULL);
	CHECK_INT(lifecycle_parse_spec(body, &c, &s, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	json_decref(body);
	body = json_loads("{\"resources\":{\"memoryMiB\":1024,\"cpus\":1.5,\"pids\":300,\"diskMiB\":512}}",
			  0, NULL);
	CHECK_INT(lifecycle_parse_spec(body, &c, &s, &e), 0);
	lifecycle_spec_release(&s);
	json_decref(body);
}

TEST(fcgi_ceilings_record_need)
{
	struct placement_need n;
	json_t *rec = json_pack("{s:s,s:s}", "resources", "{\"memoryMiB\":256,\"cpus\":0.5,\"pids\":8}",
				"pending", "{}");

	ceilings_record_need(rec, &n);
	CHECK_INT(n.memory_mib, 256);
	CHECK_INT(n.cpus_milli, 500);
	/* Pending resources are what the next start applies. */
	json_object_set_new(rec, "pending", json_string("{\"resources\":{\"memoryMiB\":768,\"cpus\":2}}"));
	ceilings_record_need(rec, &n);
	CHECK_INT(n.memory_mib, 768);
	CHECK_INT(n.cpus_milli, 2000);
	json_object_set_new(rec, "pending", json_string("not json"));
	json_object_set_new(rec, "resources", json_string("{\"memoryMiB\":\"x\",\"cpus\":-1}"));
	ceilings_record_need(rec, &n);
	CHECK_INT(n.memory_mib, 0);
	CHECK_INT(n.cpus_milli, 0);
	json_decref(rec);
}

/* 0 accepted, -1 refused as VALIDATION, -2 refused with another code. */
static int parse_tenant(const char *text, struct ceilings_tenant *v, unsigned *set)
{
	struct sbx_err e = { 0 };
	json_t *body = json_loads(text, JSON_DECODE_ANY, NULL);
	int rc = ceilings_tenant_parse(body, v, set, &e);

	json_decref(body);
	return rc < 0 && e.code != SBX_E_VALIDATION ? -2 : rc;
}

TEST(fcgi_ceilings_tenant_body)
{
	struct ceilings_tenant v;
	unsigned set;

	CHECK_INT(parse_tenant("{}", &v, &set), 0);
	CHECK_INT(set, 0);
	CHECK_INT(parse_tenant("{\"sandboxes\":3,\"memoryMiB\":2048,\"cpus\":1.5}", &v, &set), 0);
	CHECK_INT(set, CEILINGS_SANDBOXES | CEILINGS_MEMORY | CEILINGS_CPUS);
	CHECK_INT(v.sandboxes, 3);
	CHECK_INT(v.memory_mib, 2048);
	CHECK_INT(v.cpus_milli, 1500);
	CHECK_INT(parse_tenant("{\"sandboxes\":null,\"memoryMiB\":64}", &v, &set), 0);
	CHECK_INT(set, CEILINGS_MEMORY);
	CHECK_INT(parse_tenant("[]", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"gpus\":1}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"sandboxes\":0}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"sandboxes\":1.5}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"sandboxes\":\"3\"}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"memoryMiB\":15}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"memoryMiB\":1073741825}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"cpus\":0}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"cpus\":0.001}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"cpus\":true}", &v, &set), -1);
	CHECK_INT(parse_tenant("{\"cpus\":1e300}", &v, &set), -1);
}

static struct placement_node sized(const char *name, int64_t mem, int64_t cpus, int64_t mem_used,
				   int64_t cpus_used)
{
	struct placement_node n = { .alive = 1, .capacity = 10, .memory_mib = mem,
				    .cpus_milli = cpus, .memory_committed = mem_used,
				    .cpus_committed = cpus_used };

	snprintf(n.name, sizeof(n.name), "%s", name);
	snprintf(n.address, sizeof(n.address), "127.0.0.1:7070");
	return n;
}

TEST(fcgi_ceilings_placement_fits)
{
	struct placement_need need = { .memory_mib = 512, .cpus_milli = 1000 };
	struct placement_node a = sized("a", 1024, 2000, 512, 1000);

	CHECK_INT(placement_fits(&a, &need), 1);     /* exactly full afterwards */
	a.memory_committed = 513;
	CHECK_INT(placement_fits(&a, &need), 0);
	CHECK_INT(placement_fits(&a, NULL), 1);      /* the count alone */
	a.memory_committed = 0;
	a.cpus_committed = 1001;
	CHECK_INT(placement_fits(&a, &need), 0);
	a.memory_mib = a.cpus_milli = 0;             /* a node that reports no size */
	CHECK_INT(placement_fits(&a, &need), 1);
	a.running = a.capacity;
	CHECK_INT(placement_fits(&a, &need), 0);
}

TEST(fcgi_ceilings_placement_choose_skips_full)
{
	struct placement_need need = { .memory_mib = 768, .cpus_milli = 500 };
	struct placement_node ns[3] = {
		sized("a", 1024, 4000, 512, 0),   /* memory: 512 + 768 > 1024 */
		sized("b", 4096, 1000, 0, 600),   /* cpus: 600 + 500 > 1000 */
		sized("c", 1024, 1000, 0, 0),
	};

	for (uint32_t r = 0; r < 8; r++)
		CHECK_INT(placement_choose_fit(ns, 3, &need, r, r * 5 + 1), 2);
	ns[2].memory_committed = 300;
	CHECK_INT(placement_choose_fit(ns, 3, &need, 0, 1), -1);
	CHECK(placement_choose(ns, 3, 0, 1) >= 0);   /* by count alone all three fit */
}
