/* Redis Sentinel: the configuration and the replies both tiers parse
 * (sandbox/common/sentinel.c, redisurl_parse_list). */
#include "unit.h"
#include "conf.h"
#include "sentinel.h"

#include <string.h>

static redisReply str_reply(const char *s)
{
	redisReply r = { .type = REDIS_REPLY_STRING, .str = (char *)s, .len = strlen(s) };
	return r;
}

TEST(sentinel_conf)
{
	struct sbx_conf c;
	struct sentinel_conf sc;
	struct sbx_err e;
	static const char *const bad[] = {
		"h", "h:", ":1", "h:0", "h:70000", "h:1,,h:2", "h 1", "h:1;h:2", "::1:26379",
		"[::1]", "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9", "http://h:1",
	};

	conf_defaults(&c);
	CHECK_INT(sentinel_conf_init(&c, &sc, &e), 0);
	CHECK_INT(sc.n, 0);
	CHECK_STR(sc.direct.host, "127.0.0.1");

	snprintf(c.redis.sentinels, sizeof(c.redis.sentinels), "10.0.0.1:26379, s2:26380 ,[::1]:26381");
	CHECK_INT(sentinel_conf_init(&c, &sc, &e), -1);   /* no master_name */
	CHECK(strstr(e.msg, "redis.master_name") != NULL);
	snprintf(c.redis.master_name, sizeof(c.redis.master_name), "sbx bad");
	CHECK_INT(sentinel_conf_init(&c, &sc, &e), -1);
	snprintf(c.redis.master_name, sizeof(c.redis.master_name), "sbx-main_1.a");
	CHECK_INT(sentinel_conf_init(&c, &sc, &e), 0);
	CHECK_INT(sc.n, 3);
	CHECK_STR(sc.s[0].host, "10.0.0.1");
	CHECK_INT(sc.s[0].port, 26379);
	CHECK_STR(sc.s[1].host, "s2");
	CHECK_INT(sc.s[1].port, 26380);
	CHECK_STR(sc.s[2].host, "::1");
	CHECK_STR(sc.master, "sbx-main_1.a");
	/* With sentinels, redis.url is not looked at. */
	snprintf(c.redis.url, sizeof(c.redis.url), "not a url");
	CHECK_INT(sentinel_conf_init(&c, &sc, &e), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(c.redis.sentinels, sizeof(c.redis.sentinels), "%s", bad[i]);
		CHECK_INT(sentinel_conf_init(&c, &sc, &e), -1);
		CHECK_INT(e.code, SBX_E_VALIDATION);
	}
	/* Empty again: the url, now bad, is used. */
	c.redis.sentinels[0] = '\0';
	CHECK_INT(sentinel_conf_init(&c, &sc, &e), -1);
}

TEST(sentinel_replies)
{
	redisReply h = str_reply("10.77.0.7"), p = str_reply("6379"), bp = str_reply("x");
	redisReply h6 = str_reply("fd00::7"), master = str_reply("master"), slave = str_reply("slave");
	redisReply *pair[2] = { &h, &p }, *badpair[2] = { &h, &bp }, *pair6[2] = { &h6, &p };
	redisReply arr = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = pair };
	redisReply barr = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = badpair };
	redisReply arr6 = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = pair6 };
	redisReply nil = { .type = REDIS_REPLY_NIL };
	redisReply err = { .type = REDIS_REPLY_ERROR, .str = (char *)"ERR no such", .len = 11 };
	redisReply ro = { .type = REDIS_REPLY_ERROR,
			  .str = (char *)"READONLY You can't write against a read only replica.", .len = 53 };
	redisReply *rm[1] = { &master }, *rs[1] = { &slave };
	redisReply role_m = { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = rm };
	redisReply role_s = { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = rs };
	struct redisurl u;

	CHECK_INT(sentinel_parse_master(&arr, &u), 1);
	CHECK_STR(u.host, "10.77.0.7");
	CHECK_INT(u.port, 6379);
	CHECK_INT(sentinel_parse_master(&arr6, &u), 1);
	CHECK_STR(u.host, "fd00::7");
	CHECK_INT(sentinel_parse_master(&nil, &u), 0);
	CHECK_INT(sentinel_parse_master(&barr, &u), -1);
	CHECK_INT(sentinel_parse_master(&err, &u), -1);
	CHECK_INT(sentinel_parse_master(NULL, &u), -1);

	CHECK_INT(sentinel_parse_role(&role_m), 1);
	CHECK_INT(sentinel_parse_role(&role_s), 0);
	CHECK_INT(sentinel_parse_role(&err), -1);

	CHECK_INT(sentinel_reply_demoted(&ro), 1);
	CHECK_INT(sentinel_reply_demoted(&err), 0);
	CHECK_INT(sentinel_reply_demoted(&arr), 0);
	CHECK_INT(sentinel_reply_demoted(NULL), 0);
}

TEST(sentinel_switch_message)
{
	redisReply kind = str_reply("message"), chan = str_reply("+switch-master");
	redisReply other = str_reply("+sdown");
	redisReply body = str_reply("sbx 10.77.0.6 6379 10.77.0.7 6380");
	redisReply body_other = str_reply("other 10.77.0.6 6379 10.77.0.7 6380");
	redisReply body_bad = str_reply("sbx 10.77.0.6 6379 10.77.0.7");
	redisReply body_sp = str_reply("sbx  10.77.0.6 6379 10.77.0.7 6380");
	redisReply sub = str_reply("subscribe");
	redisReply *m[3] = { &kind, &chan, &body };
	redisReply msg = { .type = REDIS_REPLY_ARRAY, .elements = 3, .element = m };
	struct redisurl u;

	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), 1);
	CHECK_STR(u.host, "10.77.0.7");
	CHECK_INT(u.port, 6380);
	CHECK_INT(sentinel_parse_switch(&msg, "sb", &u), 0);
	m[2] = &body_other;
	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), 0);
	m[2] = &body_bad;
	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), -1);
	m[2] = &body_sp;
	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), -1);
	m[2] = &body;
	m[1] = &other;
	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), 0);
	m[0] = &sub;
	m[1] = &chan;
	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), 0);   /* the subscribe confirmation */
	msg.elements = 2;
	CHECK_INT(sentinel_parse_switch(&msg, "sbx", &u), -1);
}
