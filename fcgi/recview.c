#include "recview.h"
#include "ids.h"
#include "jsonv.h"
#include "lifecycle.h"
#include "rkeys.h"
#include "store.h"
#include "util.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *const recview_fields[RECVIEW_NFIELDS] = {
	"id", "state", "node", "generation", "epoch", "labels", "pending", "sleepAfter",
	"keepAlive", "resources", "network", "image", "createdAt", "startedAt", "lastActiveAt",
	"restoreFrom", "persist", "persistedAt",
};

enum {
	F_ID, F_STATE, F_NODE, F_GENERATION, F_EPOCH, F_LABELS, F_PENDING, F_SLEEP_AFTER,
	F_KEEP_ALIVE, F_RESOURCES, F_NETWORK, F_IMAGE, F_CREATED_AT, F_STARTED_AT,
	F_LAST_ACTIVE_AT, F_RESTORE_FROM, F_PERSIST, F_PERSISTED_AT,
};

/* ---- the canonical text of a JSON-valued field ------------------------------ */

enum canon_kind { CANON_OBJECT, CANON_PENDING };

#define CANON_SLOTS 64
#define CANON_TEXT_MAX 512

struct canon_slot {
	uint32_t hash;
	uint8_t used, kind;
	uint16_t in_len, out_len;
	char in[CANON_TEXT_MAX];
	char out[CANON_TEXT_MAX];
};

/* Per process (one per worker): stored text -> what the view shows of it. */
static struct canon_slot canon_cache[CANON_SLOTS];

static uint32_t fnv1a(uint8_t kind, const char *s, size_t n)
{
	uint32_t h = 2166136261u ^ kind;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h;
}

/* What lifecycle_record_json() shows of a stored JSON field v (NULL: absent):
 * the object parsed (an empty one when absent or not an object), for
 * pending with env reduced to its names, dumped compact. New string (free)
 * or NULL when out of memory. */
static char *canon_compute(enum canon_kind kind, const char *v, size_t n)
{
	json_t *j = v && n ? json_loadb(v, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	char *text;

	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	if (!j)
		j = json_object();
	if (!j)
		return NULL;
	if (kind == CANON_PENDING)
		lifecycle_pending_view(j);
	text = jsonv_dump(j);
	json_decref(j);
	return text;
}

/* Append the canonical text of v (n bytes, NULL: absent) to out. 0 or -1. */
static int put_canon(struct buf *out, enum canon_kind kind, const char *v, size_t n)
{
	struct canon_slot *s;
	uint32_t h;
	auto_free char *text = NULL;
	size_t tl;

	if (!v || n == 0)
		return buf_add(out, "{}", 2);
	h = fnv1a((uint8_t)kind, v, n);
	s = &canon_cache[h % CANON_SLOTS];
	if (s->used && s->hash == h && s->kind == kind && s->in_len == n && memcmp(s->in, v, n) == 0)
		return buf_add(out, s->out, s->out_len);
	text = canon_compute(kind, v, n);
	if (!text)
		return -1;
	tl = strlen(text);
	if (n <= CANON_TEXT_MAX && tl <= CANON_TEXT_MAX) {
		s->used = 1;
		s->hash = h;
		s->kind = (uint8_t)kind;
		s->in_len = (uint16_t)n;
		s->out_len = (uint16_t)tl;
		memcpy(s->in, v, n);
		memcpy(s->out, text, tl);
	}
	return buf_add(out, text, tl);
}

/* ---- the view -------------------------------------------------------------- */

/* Field i of the reply as lifecycle_hash_json() keeps it: a string that is
 * valid UTF-8 without NUL, else NULL (absent). */
static const char *field(const redisReply *r, size_t i, size_t *n)
{
	const redisReply *v = r->element[i];

	*n = 0;
	if (v->type != REDIS_REPLY_STRING || !ids_valid_utf8(v->str, v->len))
		return NULL;
	*n = v->len;
	return v->str;
}

/* Append s (n bytes of valid UTF-8) as a JSON string, escaped the way
 * jansson's compact dump escapes it. 0 or -1. */
static int put_string(struct buf *out, const char *s, size_t n)
{
	size_t from = 0;
	char esc[8];
	int rc = buf_add(out, "\"", 1);

	for (size_t i = 0; i < n && rc == 0; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *seq = NULL;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		switch (c) {
		case '"': seq = "\\\""; break;
		case '\\': seq = "\\\\"; break;
		case '\b': seq = "\\b"; break;
		case '\f': seq = "\\f"; break;
		case '\n': seq = "\\n"; break;
		case '\r': seq = "\\r"; break;
		case '\t': seq = "\\t"; break;
		default:
			util_xsnprintf(esc, sizeof(esc), "\\u%04X", (unsigned)c);
			seq = esc;
		}
		rc = buf_add(out, s + from, i - from);
		if (rc == 0)
			rc = buf_adds(out, seq);
		from = i + 1;
	}
	if (rc == 0)
		rc = buf_add(out, s + from, n - from);
	return rc == 0 ? buf_add(out, "\"", 1) : -1;
}

/* "name": then a string, or null when v is absent or empty (str_or_null). */
static int put_str_or_null(struct buf *out, const char *name, const char *v, size_t n)
{
	if (buf_adds(out, name) < 0)
		return -1;
	return v && n ? put_string(out, v, n) : buf_add(out, "null", 4);
}

/* The integer of field v, def when absent or not a whole int64 (fint). */
static int64_t int_or(const char *v, int64_t def)
{
	int64_t x;

	return v && util_parse_i64(v, INT64_MIN, INT64_MAX, &x) == 0 ? x : def;
}

static int put_int(struct buf *out, const char *name, int64_t v)
{
	char num[32];

	util_xsnprintf(num, sizeof(num), "%" PRId64, v);
	return buf_adds(out, name) < 0 || buf_adds(out, num) < 0 ? -1 : 0;
}

int recview_render(const redisReply *r, struct buf *out)
{
	const char *v[RECVIEW_NFIELDS];
	size_t n[RECVIEW_NFIELDS];
	int64_t persisted, now;
	int rc = 0;

	buf_reset(out);
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != RECVIEW_NFIELDS)
		return 0;
	for (size_t i = 0; i < RECVIEW_NFIELDS; i++)
		v[i] = field(r, i, &n[i]);
	if (!v[F_STATE] || !v[F_EPOCH])
		return 0;   /* a partial hash is no sandbox */
	rc |= put_str_or_null(out, "{\"id\":", v[F_ID], n[F_ID]);
	rc |= put_str_or_null(out, ",\"state\":", v[F_STATE], n[F_STATE]);
	rc |= put_str_or_null(out, ",\"node\":", v[F_NODE], n[F_NODE]);
	rc |= put_int(out, ",\"generation\":", int_or(v[F_GENERATION], 0));
	rc |= put_int(out, ",\"epoch\":", int_or(v[F_EPOCH], 0));
	rc |= buf_adds(out, ",\"labels\":");
	rc |= put_canon(out, CANON_OBJECT, v[F_LABELS], n[F_LABELS]);
	rc |= buf_adds(out, ",\"pending\":");
	rc |= put_canon(out, CANON_PENDING, v[F_PENDING], n[F_PENDING]);
	rc |= put_int(out, ",\"sleepAfter\":", int_or(v[F_SLEEP_AFTER], 0));
	rc |= buf_adds(out, v[F_KEEP_ALIVE] && strcmp(v[F_KEEP_ALIVE], "1") == 0
				    ? ",\"keepAlive\":true" : ",\"keepAlive\":false");
	rc |= buf_adds(out, ",\"resources\":");
	rc |= put_canon(out, CANON_OBJECT, v[F_RESOURCES], n[F_RESOURCES]);
	rc |= put_str_or_null(out, ",\"network\":", v[F_NETWORK], n[F_NETWORK]);
	rc |= put_str_or_null(out, ",\"image\":", v[F_IMAGE], n[F_IMAGE]);
	rc |= put_str_or_null(out, ",\"createdAt\":", v[F_CREATED_AT], n[F_CREATED_AT]);
	rc |= put_str_or_null(out, ",\"startedAt\":", v[F_STARTED_AT], n[F_STARTED_AT]);
	rc |= put_str_or_null(out, ",\"lastActiveAt\":", v[F_LAST_ACTIVE_AT], n[F_LAST_ACTIVE_AT]);
	if (n[F_RESTORE_FROM])
		rc |= put_str_or_null(out, ",\"restoreFrom\":", v[F_RESTORE_FROM], n[F_RESTORE_FROM]);
	if (n[F_PERSIST]) {
		rc |= buf_adds(out, ",\"persist\":");
		rc |= put_canon(out, CANON_OBJECT, v[F_PERSIST], n[F_PERSIST]);
	}
	persisted = int_or(v[F_PERSISTED_AT], 0);
	if (persisted > 0) {
		char when[32];

		util_iso8601(persisted, when);
		rc |= put_str_or_null(out, ",\"persistedAt\":", when, strlen(when));
		/* the persist script makes each save the restoreFrom */
		rc |= put_str_or_null(out, ",\"persistedSnapshot\":", v[F_RESTORE_FROM],
				      n[F_RESTORE_FROM]);
		now = util_wall_ms();
		rc |= put_int(out, ",\"persistedAgeS\":", now > persisted ? (now - persisted) / 1000 : 0);
	}
	rc |= buf_add(out, "}", 1);
	return rc ? -1 : 1;
}

int recview_load(const char *tenant, const char *id, struct buf *out, struct sbx_err *e)
{
	/* argv, not a format: hiredis then builds the command in one pass. */
	const char *argv[2 + RECVIEW_NFIELDS] = { "HMGET", RK_SANDBOX(tenant, id) };
	size_t lens[2 + RECVIEW_NFIELDS];
	auto_reply redisReply *r = NULL;
	int rc;

	buf_reset(out);
	for (size_t i = 0; i < RECVIEW_NFIELDS; i++)
		argv[2 + i] = recview_fields[i];
	for (size_t i = 0; i < ARRAY_SIZE(argv); i++)
		lens[i] = strlen(argv[i]);
	if (store_append_argv(e, (int)ARRAY_SIZE(argv), argv, lens) < 0 ||
	    store_collect(&r, 1, 0, e) < 0)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != RECVIEW_NFIELDS)
		return err_set(e, SBX_E_REDIS_UNAVAILABLE, "redis: HMGET gave no array of %d",
			       RECVIEW_NFIELDS);
	rc = recview_render(r, out);
	if (rc < 0)
		return err_set(e, SBX_E_INTERNAL, "cannot render the record of '%s'", id);
	return rc;
}
