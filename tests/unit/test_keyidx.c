/* Unit tests of the index by key (sandbox/common/keyidx.c). */
#include "keyidx.h"
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item {
	char key[32];
	struct keyidx_node idx;
};

static struct item *item_of(struct keyidx_node *x)
{
	return KEYIDX_OWNER(x, struct item, idx);
}

/* Every added item is found and none removed, across the table's growth
 * (256 buckets doubled to 4096); a renamed item under its new key only;
 * removing what is not in the index changes nothing. */
TEST(keyidx_finds_what_was_added)
{
	enum { N = 3000 };
	struct keyidx ix = { 0 };
	struct item *it = calloc(N, sizeof(*it)), lone = { .key = "lone" };

	CHECK(it != NULL);
	CHECK(keyidx_find(&ix, "t0.box-0") == NULL);   /* no table yet */
	for (int i = 0; i < N; i++) {
		snprintf(it[i].key, sizeof(it[i].key), "t%d.box-%d", i % 7, i);
		CHECK_INT(keyidx_add(&ix, &it[i].idx, it[i].key), 0);
	}
	CHECK_INT(ix.n, N);
	CHECK(ix.size >= N);
	for (int i = 0; i < N; i++)
		CHECK(item_of(keyidx_find(&ix, it[i].key)) == &it[i]);
	CHECK(keyidx_find(&ix, "t0.nothing") == NULL);
	for (int i = 0; i < N; i += 2)
		keyidx_remove(&ix, &it[i].idx);
	keyidx_remove(&ix, &lone.idx);        /* never added */
	keyidx_remove(&ix, &it[0].idx);       /* removed already */
	CHECK_INT(ix.n, N / 2);
	for (int i = 0; i < N; i++)
		CHECK(item_of(keyidx_find(&ix, it[i].key)) == (i % 2 ? &it[i] : NULL));
	/* a rename: out, new key, in again */
	keyidx_remove(&ix, &it[1].idx);
	snprintf(it[1].key, sizeof(it[1].key), "t9.renamed");
	CHECK_INT(keyidx_add(&ix, &it[1].idx, it[1].key), 0);
	CHECK(item_of(keyidx_find(&ix, "t9.renamed")) == &it[1]);
	CHECK(keyidx_find(&ix, "t1.box-1") == NULL);
	CHECK_INT(ix.n, N / 2);
	keyidx_free(&ix);
	CHECK(ix.b == NULL && ix.n == 0 && ix.size == 0);
	free(it);
}
