/*
 * Regression tests for inputs found by the fuzz harnesses (tests/fuzz/):
 * lifecycle_parse_spec checked only the first label and env entry
 * (json_object_foreach reused the object variable as the value variable,
 * so the loop ended after one member).
 */
#include "unit.h"

#include "conf.h"
#include "jsonv.h"
#include "lifecycle.h"

static int parse_body(const char *text, struct sbx_err *e)
{
	struct sbx_conf c;
	struct lc_spec s;
	json_t *body;
	int rc;

	conf_defaults(&c);
	body = jsonv_parse(text, strlen(text), e);
	if (!body)
		return -2;
	rc = lifecycle_parse_spec(body, &c, &s, e);
	if (rc == 0)
		lifecycle_spec_release(&s);
	json_decref(body);
	return rc;
}

TEST(lifecycle_regress_second_label_key_checked)
{
	struct sbx_err e = { 0 };

	CHECK_INT(parse_body("{\"labels\":{\"ok\":\"1\",\"bad key{\":\"x\"}}", &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
}

TEST(lifecycle_regress_second_label_value_checked)
{
	struct sbx_err e = { 0 };

	CHECK_INT(parse_body("{\"labels\":{\"a\":\"1\",\"b\":\"{x}\"}}", &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
}

TEST(lifecycle_regress_second_env_name_checked)
{
	struct sbx_err e = { 0 };

	CHECK_INT(parse_body("{\"env\":{\"GOOD\":\"1\",\"1BAD\":\"x\"}}", &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	CHECK_INT(parse_body("{\"env\":{\"A\":\"1\",\"B-C\":\"x\"}}", &e), -1);
}

TEST(lifecycle_regress_many_valid_entries_pass)
{
	struct sbx_err e = { 0 };

	CHECK_INT(parse_body("{\"labels\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"\"},"
			     "\"env\":{\"A\":\"1\",\"B_2\":\"x\",\"_c\":\"\"}}", &e), 0);
}
