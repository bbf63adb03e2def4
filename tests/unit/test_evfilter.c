/* Unit tests of the GET /v1/events filters (sandbox/common/evfilter.c). */
#include "unit.h"

#include "evfilter.h"

TEST(evfilter_parses_and_refuses)
{
	struct evfilter f;
	struct sbx_err e = { 0 };

	CHECK(evfilter_parse_query(&f, "", &e) == 0 && f.ntypes == 0 && !f.tenant[0]);
	CHECK(evfilter_parse_query(&f, "tenant=dev&sandbox=b1&node=agent-1&type=created,slept", &e) == 0);
	CHECK_STR(f.tenant, "dev");
	CHECK_STR(f.sandbox, "b1");
	CHECK_STR(f.node, "agent-1");
	CHECK(f.ntypes == 2);
	CHECK_STR(f.types[1], "slept");
	CHECK(evfilter_parse_query(&f, "type=node.up", &e) == 0 && f.ntypes == 1);
	CHECK(evfilter_parse_query(&f, "bogus=1", &e) < 0 && e.code == SBX_E_VALIDATION);
	CHECK(evfilter_parse_query(&f, "tenant=Dev", &e) < 0);
	CHECK(evfilter_parse_query(&f, "tenant=dev&tenant=ops", &e) < 0);
	CHECK(evfilter_parse_query(&f, "sandbox=", &e) < 0);
	CHECK(evfilter_parse_query(&f, "type=created,", &e) < 0);
	CHECK(evfilter_parse_query(&f, "type=Created", &e) < 0);
	CHECK(evfilter_parse_query(&f, "type=a&type=b", &e) < 0);
	CHECK(evfilter_parse_query(&f, "node=%zz", &e) < 0);
	CHECK(evfilter_parse_query(&f, "node=a%7Bb", &e) < 0);
	CHECK(evfilter_parse_query(&f, "type=a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", &e) < 0);
}

TEST(evfilter_matches_scope_and_fields)
{
	struct evfilter f;
	struct sbx_err e = { 0 };

	evfilter_init(&f);
	CHECK(evfilter_match(&f, "*", "node.up", NULL, NULL, "agent-1"));
	CHECK(!evfilter_match(&f, "dev", "node.up", NULL, NULL, "agent-1"));
	CHECK(evfilter_match(&f, "dev", "created", "dev", "b1", "agent-1"));
	CHECK(!evfilter_match(&f, "dev", "created", "ops", "b1", "agent-1"));
	CHECK(!evfilter_match(&f, NULL, "created", "dev", "b1", "agent-1"));
	CHECK(evfilter_parse_query(&f, "sandbox=b1&type=slept,destroyed", &e) == 0);
	CHECK(evfilter_match(&f, "*", "slept", "dev", "b1", "agent-1"));
	CHECK(!evfilter_match(&f, "*", "created", "dev", "b1", "agent-1"));
	CHECK(!evfilter_match(&f, "*", "slept", "dev", "b2", "agent-1"));
	CHECK(!evfilter_match(&f, "*", "slept", "dev", NULL, "agent-1"));
}

TEST(evfilter_stream_ids)
{
	CHECK(evfilter_id_valid("1700000000000-0"));
	CHECK(evfilter_id_valid("0-0"));
	CHECK(!evfilter_id_valid("1700000000000"));
	CHECK(!evfilter_id_valid("-1"));
	CHECK(!evfilter_id_valid("1-"));
	CHECK(!evfilter_id_valid("1-2-3"));
	CHECK(!evfilter_id_valid("$"));
	CHECK(!evfilter_id_valid(NULL));
	CHECK(!evfilter_id_valid("123456789012345678901-0"));
}
