/* rkeys.c — see rkeys.h. */
#include "rkeys.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((format(printf, 2, 3)))
static char *key(char out[RKEYS_MAX], const char *fmt, ...)
{
	va_list ap;
	int w;

	va_start(ap, fmt);
	w = vsnprintf(out, RKEYS_MAX, fmt, ap);
	va_end(ap);
	if (w < 0 || w >= RKEYS_MAX) {
		log_error("redis key '%.64s…' is longer than %d bytes: a bug", out, RKEYS_MAX - 1);
		abort();
	}
	return out;
}

char *rkeys_sandbox(char out[RKEYS_MAX], const char *tenant, const char *id)
{
	return key(out, "sbx:sb:{%s/%s}", tenant, id);
}

char *rkeys_sandbox_ref(char out[RKEYS_MAX], const char *tenant_slash_id)
{
	return key(out, "sbx:sb:{%s}", tenant_slash_id);
}

char *rkeys_sandbox_sub(char out[RKEYS_MAX], const char *tenant, const char *id, const char *sub)
{
	return key(out, "sbx:sb:{%s/%s}:%s", tenant, id, sub);
}

char *rkeys_tunnel_claim(char out[RKEYS_MAX], const char *tenant, const char *id, int port)
{
	return key(out, "sbx:sb:{%s/%s}:tunnels:claim:%d", tenant, id, port);
}

char *rkeys_tenant(char out[RKEYS_MAX], const char *tenant, const char *sub)
{
	return key(out, "sbx:tenant:{%s}:%s", tenant, sub);
}

char *rkeys_tenant_label(char out[RKEYS_MAX], const char *tenant, const char *k, const char *v)
{
	return key(out, "sbx:tenant:{%s}:label:%s=%s", tenant, k, v);
}

char *rkeys_node(char out[RKEYS_MAX], const char *node, const char *sub)
{
	return sub ? key(out, "sbx:node:{%s}:%s", node, sub) : key(out, "sbx:node:{%s}", node);
}

char *rkeys_apikey(char out[RKEYS_MAX], const char *hex)
{
	return key(out, "sbx:apikey:%s", hex);
}

char *rkeys_preview(char out[RKEYS_MAX], const char *hex)
{
	return key(out, "sbx:preview:%s", hex);
}

char *rkeys_tunnel(char out[RKEYS_MAX], const char *tid)
{
	return key(out, "sbx:tunnel:%s", tid);
}

char *rkeys_ticket(char out[RKEYS_MAX], const char *ticket)
{
	return key(out, "sbx:ticket:%s", ticket);
}

char *rkeys_snapshot(char out[RKEYS_MAX], const char *tenant, const char *sid)
{
	return key(out, "sbx:snap:{%s}:%s", tenant, sid);
}
